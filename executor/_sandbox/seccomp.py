"""The system call filter of a sandboxed command: a classic BPF program of our own.

Standard library only: the bubblewrap sandbox's server and the Landlock
launcher run in a bare interpreter and load this file by its path.

The filter is in the spirit of Docker's default seccomp profile, narrowed to
what a tool command has no business doing. Each denied call fails with
`EPERM`, so a program sees an ordinary, clear error:

- the kernel keyrings: `keyctl`, `add_key`, `request_key` (a key the
  executor's process holds, or the user's keyring, stay out of reach; each
  command also starts in a fresh session keyring of its own,
  `fresh_session_keyring`);
- typing into a terminal: `ioctl` with `TIOCSTI` or `TIOCLINUX` (the
  command of the ioctl compared on its low 32 bits, as the kernel reads it);
- the kernel's extension points: `bpf`, `perf_event_open`, `userfaultfd`,
  `kexec_load`, `kexec_file_load`, `init_module`, `finit_module`,
  `delete_module`;
- mounts and new user namespaces: `mount`, `umount2`, `pivot_root`, the new
  mount API (`fsopen` and its kin, `open_tree`, `move_mount`,
  `mount_setattr`), `unshare` and `clone` with `CLONE_NEWUSER`; `clone3`,
  whose flags sit in memory a filter cannot read, fails with `ENOSYS`
  instead, so the C library falls back to `clone`;
- `open_by_handle_at`, `reboot`, `swapon`, `swapoff`, `acct`;
- with `sysv_ipc=False` (a sandbox with no IPC namespace of its own), SysV
  shared memory, semaphores and message queues.

A call from another architecture's table (i386 or x32 on x86_64) fails with
`EPERM` too: the numbers above are the native ones only. The filter knows
x86_64 and aarch64; elsewhere `supported()` is False and a sandbox that asks
for it is refused.
"""

from __future__ import annotations

import ctypes
import errno
import os
import struct
from typing import Final

# struct sock_filter: code, jt, jf, k.
_LD_ABS_W: Final = 0x20
_JEQ: Final = 0x15
_JGE: Final = 0x35
_JSET: Final = 0x45
_RET: Final = 0x06
_ALLOW: Final = 0x7FFF0000
_ERRNO: Final = 0x00050000
# struct seccomp_data: nr, arch, instruction pointer, then six 64-bit arguments
# (the low half of each first, on these little-endian machines).
_NR: Final = 0
_ARCH: Final = 4
_ARG0_LOW: Final = 16
_ARG1_LOW: Final = 24
_X32_BIT: Final = 0x40000000
_CLONE_NEWUSER: Final = 0x10000000
_TIOCSTI: Final = 0x5412
_TIOCLINUX: Final = 0x541C
_PR_SET_SECCOMP: Final = 22
_SECCOMP_MODE_FILTER: Final = 2
_KEYCTL_JOIN_SESSION_KEYRING: Final = 1

_X86_64: Final = {
    "audit_arch": 0xC000003E,
    "ioctl": 16,
    "clone": 56,
    "clone3": 435,
    "unshare": 272,
    "keyctl": 250,
    "add_key": 248,
    "request_key": 249,
    "bpf": 321,
    "perf_event_open": 298,
    "userfaultfd": 323,
    "kexec_load": 246,
    "kexec_file_load": 320,
    "init_module": 175,
    "finit_module": 313,
    "delete_module": 176,
    "mount": 165,
    "umount2": 166,
    "pivot_root": 155,
    "open_tree": 428,
    "move_mount": 429,
    "fsopen": 430,
    "fsconfig": 431,
    "fsmount": 432,
    "fspick": 433,
    "mount_setattr": 442,
    "open_by_handle_at": 304,
    "reboot": 169,
    "swapon": 167,
    "swapoff": 168,
    "acct": 163,
    "shmget": 29,
    "shmat": 30,
    "shmctl": 31,
    "shmdt": 67,
    "semget": 64,
    "semop": 65,
    "semctl": 66,
    "semtimedop": 220,
    "msgget": 68,
    "msgsnd": 69,
    "msgrcv": 70,
    "msgctl": 71,
}
_AARCH64: Final = {
    "audit_arch": 0xC00000B7,
    "ioctl": 29,
    "clone": 220,
    "clone3": 435,
    "unshare": 97,
    "keyctl": 219,
    "add_key": 217,
    "request_key": 218,
    "bpf": 280,
    "perf_event_open": 241,
    "userfaultfd": 282,
    "kexec_load": 104,
    "kexec_file_load": 294,
    "init_module": 105,
    "finit_module": 273,
    "delete_module": 106,
    "mount": 40,
    "umount2": 39,
    "pivot_root": 41,
    "open_tree": 428,
    "move_mount": 429,
    "fsopen": 430,
    "fsconfig": 431,
    "fsmount": 432,
    "fspick": 433,
    "mount_setattr": 442,
    "open_by_handle_at": 265,
    "reboot": 142,
    "swapon": 224,
    "swapoff": 225,
    "acct": 89,
    "shmget": 194,
    "shmctl": 195,
    "shmat": 196,
    "shmdt": 197,
    "semget": 190,
    "semctl": 191,
    "semtimedop": 192,
    "semop": 193,
    "msgget": 186,
    "msgctl": 187,
    "msgrcv": 188,
    "msgsnd": 189,
}
_TABLES: Final = {"x86_64": _X86_64, "amd64": _X86_64, "aarch64": _AARCH64, "arm64": _AARCH64}

#: This machine's system call numbers by name (with `audit_arch`), or empty
#: where the filter does not know the architecture.
SYSCALLS: Final[dict[str, int]] = dict(_TABLES.get(os.uname().machine.lower(), {}))

# Denied outright, whatever the arguments.
_DENIED: Final = (
    "keyctl",
    "add_key",
    "request_key",
    "bpf",
    "perf_event_open",
    "userfaultfd",
    "kexec_load",
    "kexec_file_load",
    "init_module",
    "finit_module",
    "delete_module",
    "mount",
    "umount2",
    "pivot_root",
    "open_tree",
    "move_mount",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "mount_setattr",
    "open_by_handle_at",
    "reboot",
    "swapon",
    "swapoff",
    "acct",
)
_SYSV_IPC: Final = (
    "shmget",
    "shmat",
    "shmctl",
    "shmdt",
    "semget",
    "semop",
    "semctl",
    "semtimedop",
    "msgget",
    "msgsnd",
    "msgrcv",
    "msgctl",
)


def supported() -> bool:
    """Whether this machine can take the filter: a known architecture, and seccomp filters.

    `/proc/sys/kernel/seccomp/actions_avail` exists exactly where the kernel
    has `CONFIG_SECCOMP_FILTER`; the filter returns `errno` only.
    """
    if not SYSCALLS:
        return False
    try:
        with open("/proc/sys/kernel/seccomp/actions_avail") as file:
            return "errno" in file.read().split()
    except OSError:
        return False


class _Assembler:
    """Classic BPF with forward jumps to labels, resolved at the end."""

    def __init__(self) -> None:
        self.code: list[tuple[int, object, object, int]] = []
        self.labels: dict[str, int] = {}

    def op(self, code: int, k: int, jt: object = 0, jf: object = 0) -> None:
        self.code.append((code, jt, jf, k))

    def label(self, name: str) -> None:
        self.labels[name] = len(self.code)

    def assemble(self) -> bytes:
        out = bytearray()
        for index, (code, jt, jf, k) in enumerate(self.code):
            offsets = []
            for target in (jt, jf):
                if isinstance(target, str):
                    offset = self.labels[target] - index - 1
                    if not 0 <= offset <= 255:
                        raise ValueError(f"a jump to {target} is out of range ({offset})")
                    offsets.append(offset)
                else:
                    assert isinstance(target, int)
                    offsets.append(target)
            out += struct.pack("=HBBI", code, offsets[0], offsets[1], k)
        return bytes(out)


def program(*, sysv_ipc: bool) -> bytes:
    """The filter as `struct sock_filter` entries, 8 bytes each (what `bwrap --seccomp` reads).

    Args:
        sysv_ipc: Allow SysV IPC (the command has an IPC namespace of its own).

    Raises:
        OSError: The filter does not know this machine's architecture.

    """
    if not SYSCALLS:
        raise OSError(
            errno.ENOSYS, f"no system call filter for this architecture ({os.uname().machine})"
        )
    table = SYSCALLS
    asm = _Assembler()
    asm.op(_LD_ABS_W, _ARCH)
    asm.op(_JEQ, table["audit_arch"], 0, "deny")
    asm.op(_LD_ABS_W, _NR)
    if table["audit_arch"] == _X86_64["audit_arch"]:
        asm.op(_JGE, _X32_BIT, "deny", 0)
    denied = [*_DENIED, *(() if sysv_ipc else _SYSV_IPC)]
    for name in denied:
        asm.op(_JEQ, table[name], "deny", 0)
    asm.op(_JEQ, table["ioctl"], "ioctl", 0)
    asm.op(_JEQ, table["clone"], "flags", 0)
    asm.op(_JEQ, table["unshare"], "flags", 0)
    asm.op(_JEQ, table["clone3"], "nosys", 0)
    asm.op(_RET, _ALLOW)
    asm.label("ioctl")
    asm.op(_LD_ABS_W, _ARG1_LOW)
    asm.op(_JEQ, _TIOCSTI, "deny", 0)
    asm.op(_JEQ, _TIOCLINUX, "deny", 0)
    asm.op(_RET, _ALLOW)
    asm.label("flags")
    asm.op(_LD_ABS_W, _ARG0_LOW)
    asm.op(_JSET, _CLONE_NEWUSER, "deny", 0)
    asm.op(_RET, _ALLOW)
    asm.label("nosys")
    asm.op(_RET, _ERRNO | errno.ENOSYS)
    asm.label("deny")
    asm.op(_RET, _ERRNO | errno.EPERM)
    return asm.assemble()


class _Program(ctypes.Structure):
    _fields_ = (("len", ctypes.c_ushort), ("filter", ctypes.c_void_p))


_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_libc.prctl.restype = ctypes.c_int


class Prepared:
    """The filter `code` laid out for `install`: made once, installed by many forks of the maker.

    A fork that installs a prepared filter touches (and copies) a few
    objects of its parent's, not the machinery that builds them.
    """

    def __init__(self, code: bytes) -> None:
        self._buffer = ctypes.create_string_buffer(code, len(code))
        self._program = _Program(len(code) // 8, ctypes.cast(self._buffer, ctypes.c_void_p))
        self.pointer = ctypes.byref(self._program)


def install(code: bytes | Prepared) -> None:
    """Install the filter `code` (from `program`) on the calling thread and what it starts.

    The thread must have set no-new-privileges first (or hold
    `CAP_SYS_ADMIN`). A filter cannot be taken off again.

    Raises:
        OSError: The kernel refused it.

    """
    prepared = code if isinstance(code, Prepared) else Prepared(code)
    zero = ctypes.c_ulong(0)
    result = _libc.prctl(
        _PR_SET_SECCOMP, ctypes.c_ulong(_SECCOMP_MODE_FILTER), prepared.pointer, zero, zero
    )
    if result < 0:
        error = ctypes.get_errno()
        raise OSError(error, f"prctl(PR_SET_SECCOMP): {os.strerror(error)}")


def fresh_session_keyring() -> bool:
    """Join a new, empty, anonymous session keyring; False where there are no keyrings to join.

    What the caller starts afterwards inherits it, not the keyring of the
    process it came from.

    Raises:
        OSError: The kernel has keyrings but refused a new one (a quota, say).

    """
    number = SYSCALLS.get("keyctl")
    if number is None:
        return False
    result = _libc.syscall(ctypes.c_long(number), ctypes.c_long(_KEYCTL_JOIN_SESSION_KEYRING), None)
    if result < 0:
        code = ctypes.get_errno()
        if code in (errno.ENOSYS, errno.EPERM):
            # No keyrings, or an outer filter (a container's) denies them: to
            # the command as much as to us, so there is nothing to reach.
            return False
        raise OSError(code, f"keyctl(KEYCTL_JOIN_SESSION_KEYRING): {os.strerror(code)}")
    return True
