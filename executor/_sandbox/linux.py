"""Linux system calls the standard library lacks, through ctypes.

Standard library only: the sandbox's standalone programs (the server,
`executor._sandbox.sandbox_server`, and the Landlock launcher) run in a bare
interpreter and load this file by its path (`executor._sandbox.programs`), so
nothing here may import the package. The sandbox's own modules (`sandbox`,
Landlock's `landlock`, the cgroup probe `cgroup_probe`) use it too.
"""

from __future__ import annotations

import array
import ctypes
import errno
import os
import socket
from collections.abc import Iterable
from typing import Final

CLONE_NEWNS: Final = 0x00020000
CLONE_NEWCGROUP: Final = 0x02000000
CLONE_NEWUTS: Final = 0x04000000
CLONE_NEWIPC: Final = 0x08000000
CLONE_NEWUSER: Final = 0x10000000
CLONE_NEWPID: Final = 0x20000000
CLONE_NEWNET: Final = 0x40000000
MS_RDONLY: Final = 1
MS_NOSUID: Final = 2
MS_NODEV: Final = 4
MS_NOEXEC: Final = 8
MS_REMOUNT: Final = 32
MS_BIND: Final = 4096
MS_REC: Final = 1 << 14
MS_PRIVATE: Final = 1 << 18
PR_SET_PDEATHSIG: Final = 1
PR_SET_DUMPABLE: Final = 4
PR_CAPBSET_DROP: Final = 24
PR_SET_SECUREBITS: Final = 28
PR_SET_NO_NEW_PRIVS: Final = 38
PR_CAP_AMBIENT: Final = 47
PR_CAP_AMBIENT_CLEAR_ALL: Final = 4
# NOROOT, NO_SETUID_FIXUP and KEEP_CAPS, each with its lock: uid 0 gains no
# capability by exec, and the setting cannot be undone.
SECUREBITS_LOCKED_ROOT: Final = 0b111111
_CAPABILITY_VERSION_3: Final = 0x20080522
# What a Landlock init keeps, run by root: each command's IPC namespace needs it.
CAP_SYS_ADMIN: Final = 21

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
libc.prctl.restype = ctypes.c_int
# The same C library, called with the interpreter's lock held: a fork made
# through it is one `os.fork` would make (no other thread holds the lock).
_held = ctypes.PyDLL(None, use_errno=True)
_held.syscall.restype = ctypes.c_long
_SIGCHLD: Final = 17
# clone(2)'s number on this machine, where its first argument is the flags
# (s390 swaps them); None where it is not known here.
_CLONE: Final = {
    "x86_64": 56,
    "amd64": 56,
    "aarch64": 220,
    "arm64": 220,
    "riscv64": 220,
    "loongarch64": 220,
    "ppc64": 120,
    "ppc64le": 120,
}.get(os.uname().machine.lower())


def check(result: int, what: str) -> int:
    """`result`, unless it says the call failed: then the errno as an `OSError` naming `what`."""
    if result < 0:
        code = ctypes.get_errno()
        raise OSError(code, f"{what}: {os.strerror(code)}")
    return result


def prctl(option: int, value: int, what: str) -> None:
    """`prctl(option, value, 0, 0, 0)`.

    Raises:
        OSError: It failed.

    """
    zero = ctypes.c_ulong(0)
    check(libc.prctl(option, ctypes.c_ulong(value), zero, zero, zero), what)


def unshare(flags: int) -> None:
    """Leave the namespaces `flags` names for new ones.

    Raises:
        OSError: It failed.

    """
    check(libc.unshare(flags), "unshare")


def fork_into_pid_namespace() -> int:
    """`os.fork()`, but the child is pid 1 of a new PID namespace: its pid here (0 in the child).

    The caller must be single-threaded, as after any fork of a Python
    process: the child has only the calling thread. The interpreter is told
    of the fork as `os.fork` tells it (its locks, its at-fork hooks); the
    caller's own namespace for children stays its own, unlike with `unshare`.

    Raises:
        OSError: The kernel refused (no CAP_SYS_ADMIN over the user namespace, a
            limit), or this machine's clone(2) is not known here.

    """
    if _CLONE is None:
        raise OSError(errno.ENOSYS, f"clone(2) on {os.uname().machine} is not known here")
    api = ctypes.pythonapi
    flags = ctypes.c_ulong(CLONE_NEWPID | _SIGCHLD)
    api.PyOS_BeforeFork()
    try:
        pid = int(_held.syscall(ctypes.c_long(_CLONE), flags, None, None, None, None))
    except BaseException:
        api.PyOS_AfterFork_Parent()  # no fork was made: the interpreter's locks go back
        raise
    if pid == 0:
        api.PyOS_AfterFork_Child()
        return 0
    code = ctypes.get_errno() if pid < 0 else 0
    api.PyOS_AfterFork_Parent()
    if pid < 0:
        raise OSError(code, f"clone(CLONE_NEWPID): {os.strerror(code)}")
    return pid


def setns(fd: int, kind: int) -> None:
    """Enter the namespace `fd` refers to.

    Raises:
        OSError: It failed.

    """
    check(libc.setns(fd, kind), "setns")


def mount(source: str | None, target: str, kind: str | None, flags: int, data: str | None) -> None:
    """Mount `source` on `target` (mount(2)).

    Raises:
        OSError: It failed.

    """
    check(
        libc.mount(
            None if source is None else source.encode(),
            target.encode(),
            None if kind is None else kind.encode(),
            ctypes.c_ulong(flags),
            None if data is None else data.encode(),
        ),
        f"mount {target}",
    )


def read_text(path: str) -> str | None:
    """The text of a small file (a /proc or /sys setting), stripped; None if unreadable."""
    try:
        with open(path) as file:
            return file.read().strip()
    except OSError:
        return None


class _CapHeader(ctypes.Structure):
    _fields_ = (("version", ctypes.c_uint32), ("pid", ctypes.c_int))


class _CapData(ctypes.Structure):
    _fields_ = (
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    )


def drop_capabilities(
    *, lock_root: bool = False, keep: Iterable[int] = (), bounding_emptied: bool = False
) -> None:
    """Leave the calling thread (and what it starts) without any capability but `keep`.

    The bounding set is emptied too, so no exec gives one back. With
    `lock_root`, the securebits are set and locked first, so that uid 0
    gains none by exec either (for a thread that stays uid 0 in the host's
    user namespace). What `keep` names (capability numbers) stays effective
    and permitted, for the thread's own use: `set_capabilities` drops it later.
    `bounding_emptied`: the caller knows its bounding set is empty already
    (`empty_bounding_set` ran before it was forked), which spares reading it.

    Raises:
        OSError: A step failed.

    """
    if lock_root:
        prctl(PR_SET_SECUREBITS, SECUREBITS_LOCKED_ROOT, "prctl(PR_SET_SECUREBITS)")
    if not bounding_emptied and _bounding_set() != 0:
        # One call per capability; a thread whose bounding set its parent
        # emptied already (`empty_bounding_set`) is spared them.
        last = int(read_text("/proc/sys/kernel/cap_last_cap") or "40")
        for capability in range(last + 1):
            prctl(PR_CAPBSET_DROP, capability, "prctl(PR_CAPBSET_DROP)")
    prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, "prctl(PR_CAP_AMBIENT)")
    set_capabilities(keep)


def empty_bounding_set() -> None:
    """Empty the calling thread's capability bounding set, keeping what it holds now.

    For a process that will exec nothing itself but forks threads or
    processes that drop everything (`drop_capabilities`) later: they inherit
    the empty set, which spares each of them a call per capability.

    Raises:
        OSError: A step failed (the thread lacks `CAP_SETPCAP`).

    """
    last = int(read_text("/proc/sys/kernel/cap_last_cap") or "40")
    for capability in range(last + 1):
        prctl(PR_CAPBSET_DROP, capability, "prctl(PR_CAPBSET_DROP)")


def _bounding_set() -> int | None:
    """The calling thread's bounding set, as the kernel's bit mask; None if unreadable."""
    for line in (read_text("/proc/thread-self/status") or "").splitlines():
        if line.startswith("CapBnd:"):
            return int(line.split()[1], 16)
    return None


def set_capabilities(keep: Iterable[int] = ()) -> None:
    """Make `keep` the calling thread's effective and permitted capabilities; none inheritable.

    Only ever a subset of what the thread holds: a capability dropped is
    gone for good (one capset(2) call).

    Raises:
        OSError: The kernel refused.

    """
    header = _CapHeader(version=_CAPABILITY_VERSION_3, pid=0)
    data = (_CapData * 2)()
    for capability in keep:
        word = data[capability // 32]
        bit = 1 << (capability % 32)
        word.effective |= bit
        word.permitted |= bit
    check(libc.capset(ctypes.byref(header), data), "capset")


def receive(sock: socket.socket, size: int, max_fds: int) -> tuple[bytes, list[int]]:
    """One message of at most `size` bytes from `sock`, and the descriptors it carried.

    The descriptors are close-on-exec as they arrive: no program started
    meanwhile inherits one.
    """
    fds = array.array("i")
    data, ancillary, _, _ = sock.recvmsg(
        size, socket.CMSG_LEN(max_fds * fds.itemsize), socket.MSG_CMSG_CLOEXEC
    )
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[: len(payload) - (len(payload) % fds.itemsize)])
    return data, list(fds)
