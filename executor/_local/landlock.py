"""Landlock through its system calls: a sandbox that needs no helper program.

Landlock (Linux 5.13+) lets an unprivileged thread give up access rights for
itself and every process it starts afterwards. A domain belongs to the thread
that made it (and, through `fork`, to its children), so there is no need to
run Python in a forked child before `exec` (a `preexec_fn`, unsafe beside
other threads and a slow `fork` instead of `vfork`): a `RestrictedThread`
restricts itself once, then starts every command of one rule set. Its
children inherit the domain; the rest of this process keeps all its rights.
A spawn through it costs one hand-off between threads.

What one rule set grants (see `LandlockRules`):

- read and execute on everything but the hidden folders (the home folder),
  and on the paths named readable even inside those;
- every filesystem right on the writable paths; writing elsewhere fails with
  `EACCES` (device files that programs write as a matter of course,
  `/dev/null`, `/dev/tty` and the like, stay writable);
- with ABI 4 and no network, no TCP `bind` or `connect` at all; run by
  root, also a network namespace of its own (no interface up), so UDP and
  abstract unix sockets reach nothing either;
- with ABI 6, no signals to processes outside the domain and no connecting to
  abstract unix sockets made outside it;
- run by root, no capability: uid 0 gains none by `exec` (securebits), so
  `mount`, `sethostname` and the like fail as for any user; and an empty
  `/run`, so the host's service sockets (docker.sock) are out of reach.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import queue
import stat
import threading
from collections.abc import Callable, Iterable
from typing import Final, TypeVar

import attrs

from executor._core.errors import ExecutorError
from executor._local import linux

__all__ = ["LandlockRules", "RestrictedThread", "abi_version"]

T = TypeVar("T")

# The system call numbers are the same on every architecture (the generic table).
_CREATE_RULESET: Final = 444
_ADD_RULE: Final = 445
_RESTRICT_SELF: Final = 446
_CREATE_RULESET_VERSION: Final = 1
_RULE_PATH_BENEATH: Final = 1
_RULE_NET_PORT: Final = 2

_EXECUTE: Final = 1 << 0
_WRITE_FILE: Final = 1 << 1
_READ_FILE: Final = 1 << 2
_READ_DIR: Final = 1 << 3
_REMOVE_DIR: Final = 1 << 4
_REMOVE_FILE: Final = 1 << 5
_MAKE_CHAR: Final = 1 << 6
_MAKE_DIR: Final = 1 << 7
_MAKE_REG: Final = 1 << 8
_MAKE_SOCK: Final = 1 << 9
_MAKE_FIFO: Final = 1 << 10
_MAKE_BLOCK: Final = 1 << 11
_MAKE_SYM: Final = 1 << 12
_REFER: Final = 1 << 13  # ABI 2
_TRUNCATE: Final = 1 << 14  # ABI 3
_BIND_TCP: Final = 1 << 0  # ABI 4
_CONNECT_TCP: Final = 1 << 1  # ABI 4
_SCOPE_ABSTRACT_UNIX_SOCKET: Final = 1 << 0  # ABI 6
_SCOPE_SIGNAL: Final = 1 << 1  # ABI 6

_READ: Final = _EXECUTE | _READ_FILE | _READ_DIR
# The rights that only make sense on a file (a rule on a file may hold no others).
_FILE_RIGHTS: Final = _EXECUTE | _WRITE_FILE | _READ_FILE | _TRUNCATE
# Device files written by ordinary programs; writing them changes no file.
_DEVICES: Final = (
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/tty",
    "/dev/ptmx",
    "/dev/pts",
)


class _RulesetAttr(ctypes.Structure):
    _fields_ = (
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    )


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = (("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32))


_syscall = linux.libc.syscall
_check = linux.check


def abi_version() -> int:
    """The Landlock ABI this kernel offers: 0 when it has none, or has it turned off."""
    result = _syscall(_CREATE_RULESET, None, ctypes.c_size_t(0), _CREATE_RULESET_VERSION)
    return max(int(result), 0)


@attrs.frozen(kw_only=True)
class LandlockRules:
    """What the commands of one `RestrictedThread` may touch.

    Attributes:
        writable: Absolute paths (folders or files) where everything is allowed.
        readable: Absolute paths readable even inside a hidden folder.
        hidden: Absolute folders that can be neither read nor written.
        network: Allow TCP; without it `bind` and `connect` fail (ABI 4).

    """

    writable: tuple[str, ...]
    readable: tuple[str, ...]
    hidden: tuple[str, ...]
    network: bool


def _visible(hidden: Iterable[str]) -> list[str]:
    """Folders and files that together cover everything but `hidden` (and symlinks).

    Landlock grants by subtree, so hiding `/root` means granting every
    sibling on the way down to it instead of `/`. Symlinks are left out: a
    rule is about the file a path ends at, whatever links led there.
    """
    found: list[str] = []

    def split(folder: str, below: list[str]) -> None:
        if not below:
            found.append(folder)
            return
        if folder in below:
            return
        try:
            entries = list(os.scandir(folder))
        except OSError:
            return
        for entry in entries:
            child = entry.path
            inside = [h for h in below if h == child or h.startswith(child.rstrip("/") + "/")]
            if entry.is_symlink():
                continue
            split(child, inside)

    split("/", [os.path.normpath(h) for h in hidden])
    return found


def _add_path(ruleset: int, path: str, rights: int, handled: int) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return  # what does not exist needs no rule
    try:
        if not stat.S_ISDIR(os.fstat(fd).st_mode):
            rights &= _FILE_RIGHTS
        rights &= handled
        if not rights:
            return
        attr = _PathBeneathAttr(allowed_access=rights, parent_fd=fd)
        _check(
            _syscall(_ADD_RULE, ruleset, _RULE_PATH_BENEATH, ctypes.byref(attr), 0),
            f"landlock_add_rule({path})",
        )
    finally:
        os.close(fd)


def _restrict(rules: LandlockRules, abi: int) -> None:
    """Restrict the calling thread (and what it starts) to `rules`."""
    handled = (
        _READ
        | _WRITE_FILE
        | _REMOVE_DIR
        | _REMOVE_FILE
        | _MAKE_CHAR
        | _MAKE_DIR
        | _MAKE_REG
        | _MAKE_SOCK
        | _MAKE_FIFO
        | _MAKE_BLOCK
        | _MAKE_SYM
    )
    if abi >= 2:
        handled |= _REFER
    if abi >= 3:
        handled |= _TRUNCATE
    attr = _RulesetAttr(handled_access_fs=handled)
    size = 8
    if abi >= 4:
        size = 16
        if not rules.network:
            attr.handled_access_net = _BIND_TCP | _CONNECT_TCP
    if abi >= 6:
        size = 24
        attr.scoped = _SCOPE_ABSTRACT_UNIX_SOCKET | _SCOPE_SIGNAL
    ruleset = _check(
        _syscall(_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), 0),
        "landlock_create_ruleset",
    )
    try:
        for path in _visible(rules.hidden):
            _add_path(ruleset, path, _READ, handled)
        for path in rules.readable:
            _add_path(ruleset, path, _READ, handled)
        for path in _DEVICES:
            _add_path(ruleset, path, _READ | _WRITE_FILE, handled)
        for path in rules.writable:
            _add_path(ruleset, path, handled, handled)
        # Without it an unprivileged thread may not restrict itself; it is per
        # thread too, so the rest of the process keeps its set-uid programs.
        linux.prctl(linux.PR_SET_NO_NEW_PRIVS, 1, "prctl(PR_SET_NO_NEW_PRIVS)")
        if os.geteuid() == 0:
            if not rules.network:
                # Root may give the thread a network namespace of its own (a
                # thread's, as its domain is): nothing at all gets out, UDP
                # included, which Landlock's TCP rules leave open.
                linux.unshare(linux.CLONE_NEWNET)
            _empty_run()
            # Landlock bounds files, TCP and signals, not what capabilities
            # allow (set the hostname, load modules, reboot). Capabilities and
            # securebits belong to a thread, as a Landlock domain does, so the
            # rest of the process keeps them.
            linux.drop_capabilities(lock_root=True)
        _check(_syscall(_RESTRICT_SELF, ruleset, 0), "landlock_restrict_self")
    finally:
        os.close(ruleset)


def _empty_run() -> None:
    """Give the calling thread a mount namespace whose /run is an empty tmpfs.

    /run holds the host's service sockets (docker.sock, D-Bus, systemd), and
    Landlock has no rule for connecting to a unix socket; as root, reaching
    docker.sock is reaching everything. Mount namespaces, like the rest, can
    belong to one thread.
    """
    if not os.path.isdir("/run") or os.path.islink("/run"):
        return
    linux.unshare(linux.CLONE_NEWNS)
    # Private first, so the tmpfs never shows in the host's namespace.
    linux.mount("none", "/", None, linux.MS_REC | linux.MS_PRIVATE, None)
    linux.mount("tmpfs", "/run", "tmpfs", 0, "mode=0755")


_Job = tuple[Callable[[], object], "queue.SimpleQueue[tuple[bool, object]]"]


class RestrictedThread:
    """A thread under a Landlock domain, which starts processes that inherit it.

    Args:
        rules: What its processes may touch.
        abi: The kernel's Landlock ABI (from `abi_version`), at least 1.

    Raises:
        ExecutorError: The thread could not restrict itself.

    """

    def __init__(self, rules: LandlockRules, abi: int) -> None:
        self.rules = rules
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        ready: queue.SimpleQueue[BaseException | None] = queue.SimpleQueue()
        self._thread = threading.Thread(
            target=self._serve, args=(rules, abi, ready), name="executor-landlock", daemon=True
        )
        self._thread.start()
        failure = ready.get()
        if failure is not None:
            self._thread.join()
            raise ExecutorError(f"cannot set up the Landlock sandbox: {failure}") from failure

    def _serve(
        self, rules: LandlockRules, abi: int, ready: queue.SimpleQueue[BaseException | None]
    ) -> None:
        try:
            _restrict(rules, abi)
        except OSError as error:
            ready.put(error)
            return
        ready.put(None)
        while (job := self._jobs.get()) is not None:
            function, answer = job
            try:
                answer.put((True, function()))
            except BaseException as error:  # handed to the caller, who raises it
                answer.put((False, error))

    def call(self, function: Callable[[], T]) -> T:
        """Run `function` in the restricted thread and return what it returns (or raise)."""
        if not self._thread.is_alive():
            raise ExecutorError("the Landlock sandbox thread has stopped")
        answer: queue.SimpleQueue[tuple[bool, object]] = queue.SimpleQueue()
        self._jobs.put((function, answer))
        ok, value = answer.get()
        if not ok:
            assert isinstance(value, BaseException)
            raise value
        return value  # type: ignore[return-value]

    def close(self) -> None:
        """Stop the thread; it starts nothing more."""
        self._jobs.put(None)
        with contextlib.suppress(RuntimeError):
            self._thread.join(timeout=5)
