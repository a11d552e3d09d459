"""The supervisor: a child subreaper that starts every command of an unsandboxed `LocalExecutor`.

Run as `python -I -S supervisor.py REQUESTS_FD CONTROL_FD INJECT_FD PARENT_PID CONFIG` by
`executor._local.process.Supervisor`, with the standard library only, so it
starts in a few milliseconds. It is made a child subreaper
(`PR_SET_CHILD_SUBREAPER`) and gets SIGTERM when the executor's thread that
started it ends (`PR_SET_PDEATHSIG`); the executor's own process is never
made a subreaper.

Commands are started by *shims*: copies of the supervisor, forked ahead,
each a subreaper of its own. A shim serves one command at a time, so every
process the command starts, and every orphan among them (a double-forked
daemon, `setsid`, `env -i`, `nohup`, `disown`), has the shim as an ancestor
until it is reaped: nothing can leave the tree. The shim spawns the command
(in a session of its own, in its cgroup when there is one),
tells the executor its pid on the command's control socket (unless the
request says not to), reports the leader's wait status there when it
exits (with its pid, and its cgroup's memory peak and count of OOM kills
since it started), and closes the write end of the
command's `gone` pipe (the executor's, sent with the request) once the
whole tree is gone (the pipe also closes if the shim dies). Then it tidies
up (the command's cgroups removed, the next command's made and joined) and
waits for another request: a start costs no fork, no mkdir and no cgroup
migration on its way. The supervisor keeps two shims idle, forking another
only when fewer are, and retires idle ones beyond four; the shims say what
they do on a shared page (the board), and wake the supervisor only when it
has something to do. On the control socket the executor sends

- `T` + a grace period in seconds (+ `@` + the executor's `time.monotonic()`
  when it sent it, where the grace counts from): SIGTERM (and SIGCONT) to
  every process of the tree, then, if any is left when the grace is up, what `K` does;
- `K`: SIGKILL to every process of the tree, until none is left;
- `G` + a signal number: the signal to the command's process group (a session's keys).

The tree is found in the command's cgroup (`cgroup.procs`, ended at once with
`cgroup.kill`) where there is one; otherwise from the children lists of
the tree's tasks below the shim (`/proc/PID/task/TID/children`), at a
cost that follows the tree, not the host. Either way a kill ends when the shim has no
child left, which is when the tree is empty (every orphan comes to it).

On its own socket the supervisor takes `R` (a command: a marshalled request,
with stdin, stdout, stderr, the control socket, the `gone` pipe's write end
and, optionally, the folder to start in attached) and `X` + a grace period
in seconds (end everything: SIGTERM, the grace, SIGKILL; then exit). When
the socket ends (the executor closed it, or died) or SIGTERM comes,
everything is killed at once. A shim whose supervisor dies (its
parent-death signal) kills its tree and exits.
"""

from __future__ import annotations

import _posixsubprocess
import array
import contextlib
import ctypes
import errno
import marshal
import mmap
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import time

# Not `typing` itself: its import is a twentieth of this interpreter's start,
# which the first command of every executor waits for. The names are for
# the type checker only (annotations are strings here).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
_TIOCSCTTY = 0x540E
# Every signal a command starts with at its default disposition: whatever the
# executor's process ignores (a `nohup`, the interpreter's SIGPIPE and SIGXFSZ)
# or the supervisor and shim handle; its mask starts empty too. (Signals 32
# and 33, the C library's own, have its handlers here, which exec resets:
# the supervisor is started by fork and exec, never by posix_spawn.)
_DEFAULTS = tuple(
    number for number in signal.valid_signals() if number not in (signal.SIGKILL, signal.SIGSTOP)
)
# stdin, stdout, stderr, the control socket, the `gone` pipe, the folder to start in.
_MAX_FDS = 6
# How long a supervisor that is ending waits for a shim to obey SIGTERM.
_SHIM_TERM_WAIT = 1.0
# The largest request (a marshalled argv and environment) a shim takes.
_REQUEST_SIZE = 1 << 20
# How long a kill waits for a process that does not die of SIGKILL (one in
# uninterruptible sleep) before it looks again.
_KILL_PAUSE = 0.001
# The most a cgroup v1 memory folder may hold (page cache, dentries) once
# its command's tree is gone and still serve the next command (see
# `_Cgroups.renew`).
_REUSE_LEFT = 4 << 20


def _prctl(option: int, value: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    zero = ctypes.c_ulong(0)
    if libc.prctl(option, ctypes.c_ulong(value), zero, zero, zero) != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"prctl({option}): {os.strerror(code)}")


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _read(path: str) -> str | None:
    # os.read, not open(): no text and buffer layers for a file of a few bytes.
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        parts = []
        while part := os.read(fd, 65536):
            parts.append(part)
        return b"".join(parts).decode()
    except OSError:
        return None
    finally:
        os.close(fd)


class _Stop(Exception):
    """Raised in an idle shim by the signal that tells it to exit."""


# The signals that end a shim (when idle at once, else once its tree is gone).
_STOPS = frozenset({signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1})


class _Wake:
    """A pipe that signal handlers make readable (`signal.set_wakeup_fd`), and flags they set."""

    def __init__(self) -> None:
        self.read, self.write = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        signal.set_wakeup_fd(self.write, warn_on_full_buffer=False)
        self.flags: set[int] = set()
        # Set while an idle shim waits for a request (see `_handle`).
        self.idle = False
        for number in (signal.SIGCHLD, signal.SIGTERM, signal.SIGUSR1, signal.SIGHUP):
            signal.signal(number, self._handle)
        # Not SIG_IGN, which the commands would inherit: a handler, that exec resets.
        signal.signal(signal.SIGINT, self._ignore)

    def _handle(self, number: int, frame: object) -> None:
        self.flags.add(number)
        if self.idle and number in _STOPS:
            # Out of the idle shim's blocking receive (which is retried
            # after a handler that returns). Nothing else is under way then.
            self.idle = False
            raise _Stop

    def _ignore(self, number: int, frame: object) -> None:
        pass

    def drain(self) -> None:
        try:
            while os.read(self.read, 4096):
                pass
        except BlockingIOError:
            pass


def _descendants(root: int) -> list[int]:
    """Every process below `root`: from the children lists of the tree's own tasks.

    `/proc/PID/task/TID/children` holds a task's children, so the walk costs
    what the tree holds, not what the host runs. Where the kernel has no such
    files (built without CONFIG_PROC_CHILDREN), one pass over `/proc`'s parent links.
    """
    if not _HAS_CHILDREN:
        return _descendants_by_scan(root)
    found: list[int] = []
    stack = [root]
    while stack:
        pid = stack.pop()
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue  # gone meanwhile
        for task in tasks:
            try:
                with open(f"/proc/{pid}/task/{task}/children", "rb") as file:
                    children = file.read().split()
            except OSError:
                continue
            for child in children:
                found.append(int(child))
                stack.append(int(child))
    return found


_HAS_CHILDREN = os.path.exists(f"/proc/self/task/{os.getpid()}/children")


def _descendants_by_scan(root: int) -> list[int]:
    """Every live process below `root`, from one pass over `/proc`'s parent links."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as file:
                data = file.read()
        except OSError:
            continue
        fields = data[data.rfind(b")") + 2 :].split()
        if fields[0] == b"Z":
            continue
        children.setdefault(int(fields[1]), []).append(int(name))
    found: list[int] = []
    stack = [root]
    while stack:
        for child in children.get(stack.pop(), ()):
            found.append(child)
            stack.append(child)
    return found


class _Shared:
    """A shim's own cgroup v2 folder, where v2 has no controller for us: every command's there.

    Such a cgroup holds no limit, no charge and no count, only its processes
    (and `cgroup.kill`), so one per shim does for all its commands, which
    then cost no mkdir, migration or rmdir there. The shim stays in it from
    command to command, and leaves it only for a kill, which would end it
    too (see `_Cgroups.leave`); it is removed when the shim exits.
    """

    def __init__(self, base: str, name: str, home: str) -> None:
        self.path = os.path.join(base, name)
        self.home = home
        self.inside = False
        self.made = False

    def join(self) -> None:
        if not self.made:
            with contextlib.suppress(FileExistsError):
                os.mkdir(self.path)
            self.made = True
        if not self.inside:
            _write(os.path.join(self.path, "cgroup.procs"), "0")
            self.inside = True

    def leave(self) -> None:
        if self.inside:
            with contextlib.suppress(OSError):
                _write(os.path.join(self.home, "cgroup.procs"), "0")
            self.inside = False

    def remove(self) -> None:
        self.leave()
        if self.made:
            _rmdir(self.path)
            self.made = False


def _shared(config: dict[str, Any], name: str) -> _Shared | None:
    """The shim's `_Shared` v2 folder, where the commands' v2 cgroups carry no controller."""
    base = config.get("v2")
    if not base or config.get("v2_controllers"):
        return None
    return _Shared(base, name, config.get("home", {}).get("v2", os.path.dirname(base)))


class _Cgroups:
    """The command's cgroup folders (v2, and v1 `memory`/`pids` on a hybrid host), or none."""

    def __init__(self, config: dict[str, Any], name: str, shared: _Shared | None = None) -> None:
        self.v2: str | None = None
        self.folders: list[str] = []
        # The hierarchies (`v2`, `memory`, `pids`) of the command's own
        # folders, which the shim joins and leaves; the shared one is apart.
        self.hierarchies: list[str] = []
        self.shared = shared
        self.memory: str | None = None
        self.memory_fd = -1
        # The memory folder's count of OOM kills (v2 `memory.events`, v1
        # `memory.oom_control`), and what it was when its command started.
        self.events: str | None = None
        self.events_fd = -1
        self.oom_baseline = 0
        # A v1 memory folder's: its usage file, and what it held when its
        # command started (the peak is reported above it).
        self.usage: str | None = None
        self.baseline = 0
        self.home: dict[str, str] = config.get("home", {})
        # Whether the shim is in these cgroups (from `join` to `leave`).
        self.inside = False
        # The pids limit, and where it is set: one more until the shim leaves.
        self.pids_max: str | None = None
        limits = config.get("limits", {})
        self.pids = limits.get("pids")
        base = config.get("v2")
        memory, pids = limits.get("memory"), limits.get("pids")
        self.memory_limited = memory is not None
        if base and shared is not None:
            self.v2 = shared.path
        elif base:
            self.v2 = os.path.join(base, name)
            os.mkdir(self.v2)
            self.folders.append(self.v2)
            self.hierarchies.append("v2")
            v2_controllers = config.get("v2_controllers", ())
            if memory is not None and "memory" in v2_controllers:
                _write(os.path.join(self.v2, "memory.max"), str(memory))
                _write(os.path.join(self.v2, "memory.swap.max"), "0")
                memory = None
            if "memory" in v2_controllers:
                self.memory = os.path.join(self.v2, "memory.peak")
                self.events = os.path.join(self.v2, "memory.events")
            if pids is not None and "pids" in v2_controllers:
                self.pids_max = os.path.join(self.v2, "pids.max")
                _write(self.pids_max, str(pids + 1))
                pids = None
        v1 = config.get("v1", {})
        if "memory" in v1:
            folder = os.path.join(v1["memory"], name)
            os.mkdir(folder)
            self.folders.append(folder)
            self.hierarchies.append("memory")
            if memory is not None:
                _write(os.path.join(folder, "memory.limit_in_bytes"), str(memory))
                # With swap accounting, the limit holds for memory and swap together.
                with contextlib.suppress(OSError):
                    _write(os.path.join(folder, "memory.memsw.limit_in_bytes"), str(memory))
            if self.memory is None:
                self.memory = os.path.join(folder, "memory.max_usage_in_bytes")
                self.usage = os.path.join(folder, "memory.usage_in_bytes")
                self.events = os.path.join(folder, "memory.oom_control")
        # A v1 pids cgroup serves only its limit (the tree is v2's, or the
        # children lists'), so without one the command is spared its mkdir,
        # migration and rmdir, a third of a command's cgroup cost here.
        if "pids" in v1 and pids is not None:
            folder = os.path.join(v1["pids"], name)
            os.mkdir(folder)
            self.folders.append(folder)
            self.hierarchies.append("pids")
            self.pids_max = os.path.join(folder, "pids.max")
            _write(self.pids_max, str(pids + 1))
        # Opened now, off the command's path: the leader's status report,
        # which waits for the peak, then costs one pread.
        if self.memory is not None:
            with contextlib.suppress(OSError):
                self.memory_fd = os.open(self.memory, os.O_RDONLY | os.O_CLOEXEC)
        if self.events is not None:
            with contextlib.suppress(OSError):
                self.events_fd = os.open(self.events, os.O_RDONLY | os.O_CLOEXEC)
            self.oom_baseline = max(self._oom_count(), 0)

    def join(self) -> None:
        if self.shared is not None:
            self.shared.join()
        self.inside = True
        for folder in self.folders:
            _write(os.path.join(folder, "cgroup.procs"), "0")

    def leave(self, *, for_kill: bool = True) -> None:
        """Back to the supervisor's cgroups; the command alone is in its own, and counted.

        Only for a kill (`for_kill`) does the shim leave its shared v2 folder
        too, which holds no count: `cgroup.kill` there would end the shim.
        """
        if for_kill and self.shared is not None:
            self.shared.leave()
        if not self.inside:
            return
        self.inside = False
        # Only where the shim is: a write to cgroup.procs costs a migration
        # (the kernel's lock for it, global) even to the cgroup one is in.
        for hierarchy in self.hierarchies:
            with contextlib.suppress(OSError, KeyError):
                _write(os.path.join(self.home[hierarchy], "cgroup.procs"), "0")
        if self.pids_max is not None:
            with contextlib.suppress(OSError):
                _write(self.pids_max, str(self.pids))

    def procs(self) -> list[int] | None:
        if self.v2 is None:
            return None
        text = _read(os.path.join(self.v2, "cgroup.procs"))
        return None if text is None else [int(pid) for pid in text.split()]

    def kill(self) -> bool:
        if self.v2 is None:
            return False
        try:
            _write(os.path.join(self.v2, "cgroup.kill"), "1")
        except OSError:
            return False
        return True

    def peak(self) -> int:
        """The memory peak, read through a descriptor opened ahead (while the shim was idle)."""
        if self.memory_fd < 0:
            return -1
        try:
            return max(int(os.pread(self.memory_fd, 64, 0)) - self.baseline, 0)
        except (OSError, ValueError):
            return -1

    def _oom_count(self) -> int:
        """The memory folder's `oom_kill` count, read through its descriptor; -1 if unknown."""
        if self.events_fd < 0:
            return -1
        try:
            text = os.pread(self.events_fd, 4096, 0)
        except OSError:
            return -1
        for line in text.splitlines():
            key, _, value = line.partition(b" ")
            if key == b"oom_kill" and value.strip().isdigit():
                return int(value)
        return -1

    def oom_kills(self) -> int:
        """How many processes the OOM killer ended since the command started; -1 if unknown."""
        count = self._oom_count()
        return count - self.oom_baseline if count >= 0 else -1

    def renew(self) -> bool:
        """Ready these cgroups for the next command, where they can serve it; whether they do.

        A cgroup v1 memory folder costs a mkdir, a migration and an rmdir a
        command (the most costly part of a short command's start here), and
        nothing but its peak needs it new: its peak is reset (to what it
        holds) instead, and reported above that, as long as what it still
        holds (the command's page cache, say) is at most `_REUSE_LEFT`. A v1
        pids folder counts only live tasks, and the shared v2 folder holds
        nothing. A v2 folder of the command's own (one with controllers,
        whose `memory.peak` cannot be reset before Linux 6.12) is made anew.
        """
        if "v2" in self.hierarchies:
            return False
        if self.usage is not None and self.memory is not None:
            try:
                left = int(_read(self.usage) or "")
                _write(self.memory, "0")
            except (OSError, ValueError):
                return False
            if left > _REUSE_LEFT:
                return False
            self.baseline = left
            # The count goes on across commands: the next one's kills are above it.
            self.oom_baseline = max(self._oom_count(), 0)
        if not self.inside:
            try:
                self.join()
                if self.pids_max is not None:
                    # One more while the shim is in it, as when it was made.
                    _write(self.pids_max, str(self.pids + 1))
            except OSError:
                return False
        return True

    def remove(self) -> None:
        if self.memory_fd >= 0:
            os.close(self.memory_fd)
            self.memory_fd = -1
        if self.events_fd >= 0:
            os.close(self.events_fd)
            self.events_fd = -1
        for folder in reversed(self.folders):
            # A v1 memory cgroup may hold page cache charges a moment longer.
            for _ in range(50):
                try:
                    os.rmdir(folder)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.001)


class _Shim:
    """One command's subreaper at a time: forked ahead by the supervisor, and used again.

    Between commands it waits on the supervisor's request socket, its next
    command's cgroups made and joined already, so a start costs no fork, no
    mkdir and no cgroup migration of ours on the way. A request makes it the
    command's shim until the command's whole tree is gone; then it tells the
    executor so (the command's `gone` pipe closes), removes the cgroups, makes
    the next ones and waits again. It exits when the supervisor retires it
    (too many idle), signals it or dies, or when the request socket ends.
    """

    def __init__(
        self,
        requests: socket.socket,
        notes: int,
        board: mmap.mmap,
        slot: int,
        config: dict[str, Any],
        supervisor: int,
    ) -> None:
        self.requests = requests
        self.supervisor = supervisor
        self.notes = notes
        self.board = board
        self.slot = slot
        self.buffer = bytearray(_REQUEST_SIZE)
        self.config = config
        self.me = os.getpid()
        self.wake = _Wake()
        self.cgroups: _Cgroups | None = None
        self.shared = _shared(config, f"s{self.me}")
        self.failure: OSError | None = None
        self.serial = 0
        # The command being served.
        self.ctl: socket.socket | None = None
        self.gone = -1
        self.leader = 0
        self.status: int | None = None
        self.io: list[int] = []
        # The command's timeout, kept here: when the tree gets SIGTERM unless
        # the leader has exited by then, the grace that follows, and whether
        # it came to that (said in the leader's status report).
        self.term_at: float | None = None
        self.grace = 0.0
        self.timed_out = False

    def run(self) -> None:
        _prctl(_PR_SET_CHILD_SUBREAPER, 1)
        _prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != self.supervisor:
            return
        # A session of its own, and so (with autogroup scheduling) a share of
        # the CPU of its own: the start of its command never waits behind the
        # supervisor or another shim on a busy machine.
        os.setsid()
        while True:
            self._prepare()
            self._mark(_IDLE)
            if self.slot < 0 or _count(self.board, _IDLE) > _MAX_IDLE:
                self._note()  # one too many idle: the supervisor retires one
            message, fds = self._next_request()
            if message is None:
                break
            self._mark(_BUSY)
            try:
                self._serve(marshal.loads(message[1:]), fds)
            finally:
                for fd in fds:
                    if fd >= 0:
                        with contextlib.suppress(OSError):
                            os.close(fd)
            if self.wake.flags & {signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1}:
                break
        self._drop_cgroups()

    def _mark(self, state: int) -> None:
        """Say on the board what this shim does now (the supervisor reads it when woken)."""
        if self.slot >= 0:
            self.board[self.slot] = state

    def _note(self) -> None:
        """Wake the supervisor: the board needs it (too few shims idle, or too many)."""
        with contextlib.suppress(OSError):
            os.write(self.notes, b"n")

    def _prepare(self) -> None:
        """Make and join the next command's cgroups (while idle, off the start's path)."""
        if self.cgroups is not None or self.failure is not None:
            return
        self.serial += 1
        cgroups = None
        try:
            cgroups = _Cgroups(self.config, f"c{self.me}-{self.serial}", self.shared)
            cgroups.join()
        except OSError as error:
            self.failure = error
            if cgroups is not None:
                cgroups.leave()
                cgroups.remove()
            return
        self.cgroups = cgroups

    def _drop_cgroups(self) -> None:
        if self.cgroups is not None:
            self.cgroups.leave()
            self.cgroups.remove()
            self.cgroups = None
        if self.shared is not None:
            self.shared.remove()

    def _next_request(self) -> tuple[bytes | None, list[int]]:
        """The next command's request and its descriptors; None when the shim is to exit.

        A blocking receive: the kernel wakes one waiting shim per request,
        not every idle one. A signal that ends the shim breaks it (`_Wake`);
        the supervisor retires a shim with a `Q` request, which whichever
        idle shim takes it obeys.
        """
        while True:
            # Idle before the flags are looked at: a stop that comes after the
            # look then breaks the receive rather than being missed by both.
            try:
                self.wake.idle = True
                if self.wake.flags & _STOPS:
                    return None, []
                # Into a buffer kept from one request to the next: a new 1 MiB
                # bytes object each time costs an mmap, page faults and munmap.
                size, ancillary, flags, _ = self.requests.recvmsg_into(
                    [self.buffer], socket.CMSG_LEN(_MAX_FDS * 4), socket.MSG_CMSG_CLOEXEC
                )
                message = bytes(memoryview(self.buffer)[:size])
                # Descriptors cut off (more than `_MAX_FDS`): not a request to
                # serve without them (the executor is told by its socket's end).
                truncated = bool(flags & socket.MSG_CTRUNC)
            except _Stop:
                return None, []
            except OSError:
                message, ancillary, truncated = b"", [], False
            finally:
                self.wake.idle = False
            fds = array.array("i")
            for level, kind, payload in ancillary:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    fds.frombytes(payload[: len(payload) - len(payload) % 4])
            if not message or message[:1] == b"Q":
                for fd in fds:
                    os.close(fd)
                return None, []  # retired, or the executor closed its end
            if message[:1] == b"R" and len(fds) >= 5 and not truncated:
                return message, list(fds)
            for fd in fds:
                os.close(fd)

    def _serve(self, request: dict[str, Any], fds: list[int]) -> None:
        """Start the request's command and stay its subreaper until its whole tree is gone."""
        # The control socket's descriptor, taken over (its kind given: no
        # getsockopt to find it out).
        self.ctl = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET, 0, fds[3])
        fds[3] = -1
        # The executor's `gone` pipe: held until the tree is gone (or the shim dies).
        self.gone, fds[4] = fds[4], -1
        self.io = fds[:3]
        self.status = None
        self.leader = 0
        self.term_at = None
        self.timed_out = False
        try:
            if self.failure is not None:
                failure, self.failure = self.failure, None
                self._fail(failure, "cgroup")
                return
            try:
                if len(fds) > 5:
                    os.fchdir(fds[5])
                else:
                    os.chdir(request["cwd"])
            except OSError as error:
                self._fail(error, "cwd")
                return
            try:
                self.leader = self._spawn(request)
            except OSError as error:
                self._fail(error, "exec")
                return
            finally:
                if self.leader == 0:
                    # Not to pin the command's folder (a mount, say) while idle.
                    with contextlib.suppress(OSError):
                        os.chdir("/")
            timeout = request.get("timeout")
            if timeout is not None:
                self.term_at = time.monotonic() + timeout
                self.grace = float(request.get("grace") or 0.0)
            if request.get("report", True):
                # The executor waits for this: the rest of the start comes after.
                # If it gave up on it, the tree runs until it ends or is killed.
                # One that did not wait (a run: `report` false) learns the pid
                # with the status, and is woken once for the command, not twice.
                with contextlib.suppress(OSError):
                    self.ctl.send(b"P" + struct.pack("i", self.leader))
            with contextlib.suppress(OSError):
                os.chdir("/")
            for fd in fds[:3]:
                os.close(fd)
            fds[:3] = [-1, -1, -1]
            # Only now (the start is done, its CPU spent), and only if too
            # few are idle or getting ready: the supervisor forks another.
            # Otherwise no process but the command's and the executor's wakes.
            if self.slot < 0 or _count(self.board, _IDLE) + _count(self.board, _NEW) < _SPARES:
                self._note()
            if self.cgroups is not None and self.cgroups.memory_limited:
                # Under a memory limit the OOM killer may pick any process of
                # the cgroup: the shim leaves it at once. Otherwise it leaves
                # after the leader's report (for the next command's cgroups
                # once the tree is gone, see `_reap`) or when a kill comes
                # (`_leave`): a cgroup migration can wait for an RCU grace
                # period (ms on a busy host), which would hold up a short
                # command's report.
                self.cgroups.leave(for_kill=False)
            self._loop()
        finally:
            # The tree is gone: the executor's `gone` descriptor turns readable.
            if self.gone >= 0:
                os.close(self.gone)
                self.gone = -1
            self.ctl.close()
            self.ctl = None
            if self.leader and self.cgroups is not None and not self.cgroups.renew():
                cgroups, self.cgroups = self.cgroups, None
                # The next command's cgroups, joined from this one's if the
                # shim is still in them: one migration, not two.
                self._prepare()
                if self.cgroups is None:
                    cgroups.leave(for_kill=False)
                else:
                    cgroups.inside = False  # the join took the shim out
                cgroups.remove()

    def _fail(self, error: OSError, where: str) -> None:
        """Report a failed start on the control socket (the cgroups stay for the next)."""
        report = {
            "errno": error.errno or 0,
            "message": error.strerror or str(error),
            "where": where,
        }
        assert self.ctl is not None
        with contextlib.suppress(OSError):
            self.ctl.send(b"E" + marshal.dumps(report))

    def _spawn(self, request: dict[str, Any]) -> int:
        argv, env = request["argv"], request["env"]
        if request.get("pty"):
            return self._fork_exec(argv, _env_dict(env), pty=True)
        return _vfork_exec(argv, request["executables"], env, self.io)

    def _fork_exec(self, argv: list[str], env: dict[bytes, bytes], *, pty: bool) -> int:
        # A pty must become the controlling terminal after setsid, which
        # neither posix_spawn nor Popen can do: fork, reset every ignored
        # disposition and the mask, and report exec's failure on a pipe.
        report_r, report_w = os.pipe2(os.O_CLOEXEC)
        pid = os.fork()
        if pid == 0:
            try:
                os.setsid()
                signal.set_wakeup_fd(-1)
                for number in _DEFAULTS:
                    # exec resets what has a handler; what is ignored stays so.
                    if signal.getsignal(number) == signal.SIG_IGN:
                        signal.signal(number, signal.SIG_DFL)
                signal.pthread_sigmask(signal.SIG_SETMASK, ())
                for target, fd in enumerate(self.io):
                    os.dup2(fd, target)
                if pty:
                    import fcntl

                    fcntl.ioctl(0, _TIOCSCTTY, 0)
                # The child's PATH decides where the program is found, as for subprocess.
                os.execvpe(argv[0], argv, env)
            except OSError as error:
                os.write(report_w, struct.pack("i", error.errno or errno.ENOEXEC))
            finally:
                os._exit(127)
        os.close(report_w)
        data = os.read(report_r, 4)
        os.close(report_r)
        if data:
            os.waitpid(pid, 0)
            code = struct.unpack("i", data)[0]
            raise OSError(code, os.strerror(code), argv[0])
        return pid

    def _tree(self) -> list[int]:
        procs = None if self.cgroups is None else self.cgroups.procs()
        if procs is None:
            return _descendants(self.me)
        return procs

    def _signal_tree(self, number: int) -> None:
        for pid in self._tree():
            if pid == self.me:
                continue
            try:
                os.kill(pid, number)
                if number == signal.SIGTERM:
                    # A stopped process acts on SIGTERM only once continued.
                    os.kill(pid, signal.SIGCONT)
            except OSError:
                pass

    def _reap(self) -> bool:
        """Reap what has exited; report the leader's end. False once the shim has no child.

        Once the leader has exited, the shim leaves the command's cgroups if
        some of the tree runs on; if none does (the common case), it goes
        from them straight into the next command's (see `_serve`).
        """
        reported = False
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return False
            if pid == 0:
                if reported and self.cgroups is not None:
                    self.cgroups.leave(for_kill=False)
                return True
            if pid == self.leader and self.status is None:
                self.status = status
                peak = -1 if self.cgroups is None else self.cgroups.peak()
                kills = -1 if self.cgroups is None else self.cgroups.oom_kills()
                self.term_at = None  # a leader that exited in time is not timed out
                if self.ctl is not None:
                    with contextlib.suppress(OSError):
                        self.ctl.send(
                            b"S" + struct.pack("=iq?ii", status, peak, self.timed_out, pid, kills)
                        )
                reported = True

    def _leave(self) -> None:
        """Out of the command's cgroups: then their kill spares the shim, and it is not counted."""
        if self.cgroups is not None:
            self.cgroups.leave()

    def _kill(self) -> None:
        """SIGKILL the whole tree until the shim has no child left."""
        self._leave()
        while True:
            if self.cgroups is None or not self.cgroups.kill():
                self._signal_tree(signal.SIGKILL)
            if not self._reap():
                return
            # Until a child's end (SIGCHLD writes the wake pipe), or a pause:
            # then the tree is killed again, for what it forked meanwhile.
            select.select([self.wake.read], [], [], _KILL_PAUSE)
            self.wake.drain()

    def _loop(self) -> None:
        """Serve the command until its tree is gone (killed if the shim is to exit)."""
        assert self.ctl is not None
        wake = self.wake
        # select(), not poll(): its timeout is in microseconds, where poll's
        # milliseconds (rounded up) would add up to 1 ms to every grace.
        watched = [wake.read, self.ctl.fileno()]
        # Set by `T<grace>`: when what SIGTERM did not end gets SIGKILL.
        deadline: float | None = None
        termed = False
        while True:
            if signal.SIGTERM in wake.flags or signal.SIGHUP in wake.flags:
                self._kill()
                return
            if signal.SIGUSR1 in wake.flags and not termed:
                # The supervisor's shutdown: SIGTERM now; SIGTERM to the shim
                # follows. The flag stays: the shim exits once the tree is gone.
                self._signal_tree(signal.SIGTERM)
                self._leave()
                termed = True
            if not self._reap():
                if self.status is None:
                    # The leader was reaped by no one else: it cannot be.
                    self.status = signal.SIGKILL
                return
            wake.flags.discard(signal.SIGCHLD)
            timeout = None
            if self.term_at is not None:
                now = time.monotonic()
                if now >= self.term_at:
                    # The command's timeout, to the microsecond: SIGTERM,
                    # then SIGKILL once the grace (counted from the
                    # deadline, not from this wakeup) is up.
                    self.timed_out = True
                    self._signal_tree(signal.SIGTERM)
                    self._leave()
                    termed = True
                    end = self.term_at + self.grace
                    deadline = end if deadline is None else min(deadline, end)
                    self.term_at = None
                else:
                    timeout = self.term_at - now
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    self._kill()
                    return
                timeout = left if timeout is None else min(timeout, left)
            for fd in _readable_within(watched, timeout):
                if fd == wake.read:
                    wake.drain()
                    continue
                try:
                    message = self.ctl.recv(64)
                except OSError:
                    message = b""
                if not message:
                    # The executor is done with this command; the tree (a
                    # background job) runs on until it ends or is killed.
                    watched.remove(fd)
                    continue
                kind = message[:1]
                if kind == b"T":
                    # The executor's kill (a timeout, a cancel): SIGTERM, unless
                    # the shim's own deadline sent it already.
                    if not self.timed_out:
                        self._signal_tree(signal.SIGTERM)
                    self.term_at = None
                    # During the grace, so the SIGKILL that may follow costs no migration.
                    self._leave()
                    with contextlib.suppress(ValueError):
                        # The grace is kept here: no round trip to the executor
                        # for the kill. It counts from when the executor sent it
                        # (`T<grace>@<CLOCK_MONOTONIC then>`: one clock for the
                        # machine), so the shim's wakeup adds nothing to it; a
                        # grace already running (the deadline's) is not put off.
                        grace_text, _, sent_text = message[1:].partition(b"@")
                        grace = float(grace_text or "nan")
                        sent = float(sent_text) if sent_text else time.monotonic()
                        if grace == grace:  # not NaN
                            end = min(sent, time.monotonic()) + grace
                            deadline = end if deadline is None else min(deadline, end)
                elif kind == b"K":
                    self._kill()
                    return
                elif kind == b"G" and self.status is None:
                    with contextlib.suppress(OSError, ValueError):
                        os.killpg(self.leader, int(message[1:]))


# The board: a page shared by the supervisor and its shims (an anonymous
# shared mapping, inherited by fork), one byte per shim saying what it does,
# so that the supervisor is woken (by a byte on its notes pipe) only when
# the number of idle shims calls for a fork or a retirement, not at every
# command.
_SLOTS = 4096
_FREE, _NEW, _IDLE, _BUSY = 0, 1, 2, 3


def _count(board: mmap.mmap, state: int) -> int:
    return board[:_SLOTS].count(bytes((state,)))


# Idle shims kept ready: two, so that a shim tidying up after its command
# (cgroups removed, the next made and joined) never holds up the next start.
_SPARES = 2
# More idle shims than this (after a burst of commands at once): the rest retire.
_MAX_IDLE = 4


class _Supervisor:
    def __init__(
        self,
        requests: socket.socket,
        control: socket.socket,
        inject: socket.socket,
        config: dict[str, Any],
    ) -> None:
        self.requests = requests
        self.control = control
        # The executor's end of the request socket: a `Q` sent on it retires an idle shim.
        self.inject = inject
        self.config = config
        # Every shim, and its slot on the board (-1: the board was full).
        self.shims: dict[int, int] = {}
        self.board = mmap.mmap(-1, _SLOTS)
        # Idle shims told to retire, not yet gone.
        self.retiring = 0
        self.me = os.getpid()
        self.notes_r, self.notes_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)

    def run(self) -> None:
        wake = _Wake()
        poller = select.poll()
        for fd in (wake.read, self.control.fileno(), self.notes_r):
            poller.register(fd, select.POLLIN)
        while True:
            if wake.flags & {signal.SIGTERM, signal.SIGHUP}:
                self._shut_down(0.0, wake)
            wake.flags.discard(signal.SIGCHLD)
            self._reap()
            self._balance(wake)
            for fd, _ in poller.poll():
                if fd == wake.read:
                    wake.drain()
                elif fd == self.notes_r:
                    # What to do is on the board; the note only woke us.
                    with contextlib.suppress(BlockingIOError):
                        os.read(self.notes_r, 4096)
                else:
                    try:
                        message = self.control.recv(64)
                    except InterruptedError:
                        continue
                    except OSError:
                        message = b""
                    if message[:1] == b"X":
                        self._shut_down(float(message[1:]), wake)
                    elif not message:
                        # The executor closed its end, or died: nothing may outlive it.
                        self._shut_down(0.0, wake)

    def _balance(self, wake: _Wake) -> None:
        """Keep `_SPARES` shims idle (or getting ready), and no more than `_MAX_IDLE`."""
        idle = _count(self.board, _IDLE) - self.retiring
        new = _count(self.board, _NEW)
        # One fork at a time: each takes CPU a command's start may need.
        if idle + new < _SPARES and not new:
            self._fork_shim(wake)
        elif idle > _MAX_IDLE:
            # Whichever idle shim takes it goes; its exit is reaped as any.
            with contextlib.suppress(OSError):
                self.inject.send(b"Q")
                self.retiring += 1

    def _fork_shim(self, wake: _Wake) -> None:
        """Fork a shim ahead, so a command's start costs no fork of ours."""
        slot = self.board.find(bytes((_FREE,)), 0, _SLOTS)
        if slot >= 0:
            self.board[slot] = _NEW
        # The signals that end a shim wait (blocked) until the child has its
        # own handlers: one sent in between (a shutdown right after the fork)
        # would go to the supervisor's copied handler and be lost, and the
        # shim would sit in its receive until the shutdown gave up on it.
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, _STOPS)
        try:
            pid = os.fork()
        except OSError:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
            if slot >= 0:
                self.board[slot] = _FREE
            return  # out of processes: the next loop tries again
        if pid:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        else:
            try:
                # Its own wake pipe first: then none of the supervisor's is written.
                shim = _Shim(self.requests, self.notes_w, self.board, slot, self.config, self.me)
                signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
                self.control.close()
                self.inject.close()
                for fd in (wake.read, wake.write, self.notes_r):
                    os.close(fd)
                shim.run()
            finally:
                os._exit(0)
        self.shims[pid] = slot

    def _reap(self) -> bool:
        """Reap what has exited. False once the supervisor has no child."""
        while True:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return False
            if pid == 0:
                return True
            slot = self.shims.pop(pid, -1)
            if slot >= 0:
                if self.board[slot] == _IDLE and self.retiring:
                    self.retiring -= 1
                self.board[slot] = _FREE

    def _shut_down(self, grace: float, wake: _Wake) -> None:
        """End every command's tree: SIGTERM, up to `grace`, SIGKILL; then exit."""
        deadline = time.monotonic() + grace
        if grace > 0:
            # Idle shims exit at once; busy ones SIGTERM their trees.
            for pid in self.shims:
                _send(pid, signal.SIGUSR1)
            while self.shims and self._reap() and time.monotonic() < deadline:
                select.select([wake.read], [], [], max(0.0, deadline - time.monotonic()))
                wake.drain()
        for pid in self.shims:
            _send(pid, signal.SIGTERM)
        # A shim that has not ended a moment after SIGTERM (one caught in a
        # blocking receive, which a handler that returns does not cut short)
        # is killed: nothing may keep the supervisor, and so the trees, alive.
        stubborn = time.monotonic() + _SHIM_TERM_WAIT
        # Orphans of a shim that was killed are the supervisor's now.
        while self._reap():
            if self.shims and time.monotonic() > stubborn:
                for pid in self.shims:
                    _send(pid, signal.SIGKILL)
            base = self.config.get("v2")
            if base:
                with contextlib.suppress(OSError):
                    _write(os.path.join(base, "cgroup.kill"), "1")
            for pid in _descendants(self.me) if not self.shims else ():
                _send(pid, signal.SIGKILL)
            select.select([wake.read], [], [], 0.01)
            wake.drain()
        _remove_folders(self.config)
        os._exit(0)


def _remove_folders(config: dict[str, Any]) -> None:
    """Remove the executor's cgroup folders: every command's, then its own (all empty now)."""
    for base in [config.get("v2"), *config.get("v1", {}).values()]:
        if not base:
            continue
        with contextlib.suppress(OSError):
            for name in os.listdir(base):
                folder = os.path.join(base, name)
                if os.path.isdir(folder):
                    _rmdir(folder)
        _rmdir(base)


def _rmdir(folder: str) -> None:
    # A v1 memory cgroup may be busy a moment longer after its last process.
    for _ in range(50):
        try:
            os.rmdir(folder)
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.001)


# Whether `_posixsubprocess.fork_exec` takes the arguments `_vfork_exec` gives
# it (those of Python 3.11's `subprocess`); else Popen starts the commands.
_fork_exec_fits = True


def _env_dict(env: list[bytes]) -> dict[bytes, bytes]:
    """An environment as `NAME=value` entries (the request's), as a mapping."""
    pairs = (entry.partition(b"=") for entry in env)
    return {name: value for name, _, value in pairs}


def _vfork_exec(argv: list[str], executables: list[bytes], env: list[bytes], io: list[int]) -> int:
    """Start `argv` with `io` as its stdin, stdout and stderr, in a session of its own; its pid.

    `executables` are where to look for the program, in order (the
    executor's `executables`), and `env` its environment as `NAME=value`
    entries, encoded by the executor, which does it once for every command.

    What `subprocess.Popen` does (vfork, then exec; SIGPIPE and SIGXFSZ
    reset; every other descriptor closed; exec's failure reported on a
    pipe), called straight: Popen's own bookkeeping adds a third to it.
    Not glibc's posix_spawn (up to 2.36 at least), which sets the C
    library's own signals (32 and 33) to SIG_IGN in the child whatever the
    parent has, and SIG_IGN outlives exec. Handlers are reset by exec;
    nothing else is ignored here (see `main`).

    Raises:
        OSError: The program could not be started.

    """
    global _fork_exec_fits
    if not _fork_exec_fits:
        return _popen(argv, env, io)
    errpipe_read, errpipe_write = os.pipe2(os.O_CLOEXEC)
    try:
        try:
            # In the order of Python 3.11's subprocess: args, executables,
            # close_fds, pass_fds, cwd, env, the pipes (p2cread, p2cwrite,
            # c2pread, c2pwrite, errread, errwrite, errpipe_read,
            # errpipe_write), restore_signals, call_setsid, pgid_to_set,
            # gid, extra_groups, uid, child_umask, preexec_fn, allow_vfork.
            # (The stubs do not let cwd and preexec_fn be None; they may.)
            pid = _posixsubprocess.fork_exec(
                argv, executables, True, (errpipe_write,), None,  # type: ignore[arg-type]
                env, io[0], -1, -1, io[1], -1, io[2], errpipe_read, errpipe_write,
                True, True, -1, None, None, None, -1, None, True,  # type: ignore[arg-type]
            )  # fmt: skip
        finally:
            os.close(errpipe_write)
        # Vfork: the child has exec'd or failed by now; EOF is its exec.
        report = os.read(errpipe_read, 50000)
    except TypeError:
        # Another Python's fork_exec (the child was not forked): Popen's way.
        _fork_exec_fits = False
        return _popen(argv, env, io)
    finally:
        os.close(errpipe_read)
    if not report:
        return pid
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)
    _, _, rest = report.partition(b":")
    code_text, _, detail = rest.partition(b":")
    try:
        code = int(code_text, 16)
    except ValueError:
        code = errno.ENOEXEC
    if detail.startswith(b"noexec"):
        # Before the exec (a dup2, say): no program to name.
        raise OSError(code, os.strerror(code))
    raise OSError(code, os.strerror(code), argv[0])


def _popen(argv: list[str], env: list[bytes], io: list[int]) -> int:
    child = subprocess.Popen(
        argv, stdin=io[0], stdout=io[1], stderr=io[2], env=_env_dict(env), start_new_session=True
    )
    # Reaped by `_reap` (any child), not by Popen, which would warn.
    child.returncode = 0
    return child.pid


def _readable_within(fds: list[int], timeout: float | None) -> list[int]:
    """Those of `fds` readable within `timeout` seconds (`None`: no limit), to the microsecond.

    select() keeps microseconds, where poll() rounds up to milliseconds; it
    takes descriptors below FD_SETSIZE only, so poll() stands in past that.
    """
    if max(fds) < 1024:
        return select.select(fds, [], [], timeout)[0]
    poller = select.poll()
    for fd in fds:
        poller.register(fd, select.POLLIN)
    wait = None if timeout is None else max(1, int(timeout * 1000) + 1)
    return [fd for fd, _ in poller.poll(wait)]


def _send(pid: int, number: int) -> None:
    with contextlib.suppress(OSError):
        os.kill(pid, number)


def main() -> None:
    """Run it: `supervisor.py REQUESTS_FD CONTROL_FD INJECT_FD PARENT_PID CONFIG`.

    CONFIG is the executor's cgroup folders, marshalled and written in hex.

    INJECT_FD is the executor's end of the request socket (REQUESTS_FD the
    shims'), on which the supervisor retires idle shims.
    """
    requests = socket.socket(fileno=int(sys.argv[1]))
    control = socket.socket(fileno=int(sys.argv[2]))
    inject = socket.socket(fileno=int(sys.argv[3]))
    parent = int(sys.argv[4])
    config = marshal.loads(bytes.fromhex(sys.argv[5]))
    # The mask of the thread that started it (a worker thread that blocks
    # SIGINT, say) is no business of the commands', nor of their shims', nor
    # is what the executor's process ignores (a `nohup`'s SIGHUP, say).
    signal.pthread_sigmask(signal.SIG_SETMASK, ())
    for number in _DEFAULTS:
        if signal.getsignal(number) == signal.SIG_IGN:
            signal.signal(number, signal.SIG_DFL)
    for sock in (requests, control, inject):
        os.set_inheritable(sock.fileno(), False)
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)
    _prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent:
        return  # the executor died before the death signal was set
    _Supervisor(requests, control, inject, config).run()


if __name__ == "__main__":
    main()
