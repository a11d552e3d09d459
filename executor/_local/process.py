"""The local process lifecycle, in one place: spawn, stream, kill, reap.

Every local feature (commands, sessions and sandboxes) runs its processes
through `LocalRun` and `drive` (`executor._core.run`), so the guarantees hold everywhere:

- an unsandboxed command is started by the executor's `Supervisor`, below a
  child subreaper of its own, so nothing it starts can leave its tree (see
  `executor._local.supervisor`); the kill is the shim's, whose cost follows
  the tree (its cgroup, where there is one), and is awaited on the command's
  `gone` pipe, which the shim closes once the tree is gone;
- each command runs in a session and process group of its own, and every
  process it starts inherits a tag in its environment (`EXECUTOR_PROCESS_TREE`),
  by which sandboxed trees (Landlock's) are found again;
- the exit is awaited on a pidfd or its shim's report, not on the pipes, so a
  background child that holds stdout open cannot make a finished command hang;
- pipes are read into a reused buffer, one copy out per chunk, with the
  descriptor kept registered with the loop (asyncio) between reads;
- a flood of output still lets the event loop run, at least every millisecond.
"""

from __future__ import annotations

import array
import asyncio
import atexit
import contextlib
import errno
import fcntl
import functools
import marshal
import os
import select
import signal as signals
import socket
import struct
import subprocess
import sys
import termios
import threading
import time
import weakref
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, Final, Protocol

import anyio
import anyio.to_thread
import attrs
import psutil

from executor._core.errors import ExecutorError
from executor._core.output import Chunk, Stderr, Stdout
from executor._core.proc import TREE_VARIABLE, boot_clock, proc_stat
from executor._core.run import Drain, Emit, Exit, Reader, Run
from executor._local import cgroup

# The most a read takes at once: a reader's buffer grows to this size once a
# read fills it (a flood), so each wakeup carries up to a pipe's worth.
_READ_SIZE: Final = 1 << 20
# A reader's buffer at first: enough for what a quiet command prints at once.
_FIRST_READ: Final = 1 << 16
# Linux's default pipe holds 64 KiB; a larger one lets each wakeup carry more
# (a flood through a 64 KiB pipe moves about half as fast). Root enlarges
# every pipe at the start. For other users a pipe's pages count against a
# per-user budget (`/proc/sys/fs/pipe-user-pages-soft`, 64 MiB), past which
# the user's new pipes are made small, so a pipe is enlarged only once it
# floods (a read found it full), and a refusal (the budget spent) keeps it
# as it is.
_PIPE_SIZE: Final = 1 << 20
_F_SETPIPE_SZ: Final = 1031
_F_GETPIPE_SZ: Final = 1032
# How often the kill path looks for survivors while it waits out the grace period.
_POLL: Final = 0.01
# The most a reader gathers from a flood before it passes it on: reads of a
# few writes each (a producer that writes 8 KiB at a time, `head -c`) are
# joined in one buffer until the pipe is empty or this much has come, so the
# sink, the stored output and the event loop see one chunk, not dozens. A
# quarter of a MiB stays in the caches the copy out runs through (a whole MiB
# was slower, and 64 KiB paid its wakeups too often).
_GATHER: Final = 1 << 18
# How long a flood's reader may go on without letting the event loop in. A
# trip through the loop per chunk cost a tenth of a flood's pace (a quarter
# of a MiB of `head -c` is read in about 70 µs); a millisecond keeps what
# else runs (the other reader, the drain's timer, other commands, a
# cancellation) as prompt as one slow sink call would.
_FLOOD_TURN: Final = 0.001
# A flood's writes are a block or more each (a C library's stdio buffer, 4
# or 8 KiB, or a program's own); a read of less is quiet output, not gathered.
_GATHER_FROM: Final = 1 << 12
# The exit code a supervised command whose start failed is given, to be
# known by (as a shell reports a program it cannot run).
_START_FAILED: Final = 127


class _Readable:
    """Waits until a descriptor is readable, registered with the event loop once where it can be.

    Under asyncio the descriptor stays registered while its reader waits,
    reads and waits again (`anyio.wait_readable` adds it to epoll and
    removes it at every wait); it is taken off only when it turns readable
    while nobody waits (a busy sink), so the loop never spins on it. Under
    other loops (trio) this is `anyio.wait_readable`, in a cancel scope of
    its own. `interrupt` ends the wait under way and every later one (the
    drain period is over: the reader takes what the pipe holds and stops).
    """

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._loop: asyncio.AbstractEventLoop | None
        try:
            self._loop = asyncio.get_running_loop()
        except RuntimeError:
            self._loop = None
        self._waiting: asyncio.Future[None] | None = None
        self._registered = False
        # Under other loops: the scope of the wait under way, for `interrupt`.
        self._scope: anyio.CancelScope | None = None
        self._interrupted = False

    async def wait(self) -> None:
        """Return once the descriptor is readable, or `interrupt` was called (or cancelled)."""
        if self._interrupted:
            return
        loop = self._loop
        if loop is None:
            with anyio.CancelScope() as self._scope:
                await anyio.wait_readable(self._fd)
            self._scope = None
            return
        if not self._registered:
            loop.add_reader(self._fd, self._ready)
            self._registered = True
        self._waiting = loop.create_future()
        try:
            await self._waiting
        finally:
            self._waiting = None

    def _ready(self) -> None:
        if self._waiting is None:
            self.close()
        elif not self._waiting.done():
            self._waiting.set_result(None)

    def interrupt(self) -> None:
        """Make the wait under way, and every later one, return at once."""
        self._interrupted = True
        if self._waiting is not None and not self._waiting.done():
            self._waiting.set_result(None)
        if self._scope is not None:
            self._scope.cancel()

    def close(self) -> None:
        """Take the descriptor off the loop (before it is closed)."""
        if self._registered and self._loop is not None:
            self._loop.remove_reader(self._fd)
        self._registered = False


@attrs.define(eq=False)
class Served:
    """A command's init in a sandbox server (see `executor._sandbox.sandbox`): not our child.

    It stands where a `subprocess.Popen` stands for a command we started
    ourselves: its pid, and its exit code once known.
    """

    pid: int
    returncode: int | None = None


@attrs.define(eq=False)
class Supervised:
    """A command started by an executor's supervisor (see `Supervisor`): not our child.

    Its shim (a subreaper of its own, the supervisor's child) holds the whole
    tree; `Spawned.pidfd` is then the command's `gone` pipe, readable once the
    tree is gone (the shim closes its end then, or dies), and
    `Spawned.status` the command's control socket.
    """

    pid: int
    returncode: int | None = None
    memory_peak: int | None = None
    # Whether its cgroup counted an OOM kill between its start and the leader's end.
    oom_killed: bool = False
    # Whether its shim's deadline (the command's timeout) passed before the leader's end.
    timed_out: bool = False
    # Whether its start failed (reported after a `wait=False` spawn returned).
    failed: bool = False


class StartFailed(Exception):
    """A supervised command did not start, as its shim reported after `Supervisor.spawn` returned.

    Attributes:
        error: What the start failed with (the program, its folder, or a cgroup).
        where: Which step failed: `cwd`, `exec` or `cgroup`.

    """

    def __init__(self, error: OSError, where: str) -> None:
        super().__init__(str(error))
        self.error = error
        self.where = where


@attrs.define(eq=False)
class Spawned:
    """A started child: its pid, a pidfd to await its exit, and our ends of its pipes."""

    process: subprocess.Popen[bytes] | Served | Supervised
    pidfd: int | None
    stdout: int
    stderr: int
    stdin: int | None
    tag: str
    started: float
    # Set when the command's process group is not the child's own (a sandbox's
    # init sits between them): sends a session's signals there instead.
    signaller: Callable[[int], Awaitable[None]] | None = None
    # Served: the pipe on which the sandbox's init reports the command's end.
    status: int | None = None

    @property
    def pid(self) -> int:
        """The child's pid: its process group and session id too, unless served."""
        return self.process.pid

    @property
    def group(self) -> int | None:
        """The process group to kill with the tree, while its number is surely ours.

        The group and session ids are pinned only while our child, their
        leader, is unreaped. A served command's init is another's child, so
        it is ended through its pidfd instead (`end_served`).
        """
        if isinstance(self.process, Served | Supervised) or self.process.returncode is not None:
            return None
        return self.pid

    def end_served(self) -> None:
        """Kill a served command's init, and with it every process of its PID namespace."""
        if (
            isinstance(self.process, Served)
            and self.process.returncode is None
            and self.pidfd is not None
        ):
            with contextlib.suppress(ProcessLookupError):
                signals.pidfd_send_signal(self.pidfd, signals.SIGKILL)

    def close(self, *, keep_tree: bool = False) -> None:
        """Close our ends of the pipes and the pidfd (twice is harmless).

        With `keep_tree`, a supervised command's control socket and its `gone`
        pipe stay open, so what the command left running can still be ended
        (`end_tree`); a later `close()` closes them.
        """
        kept = keep_tree and isinstance(self.process, Supervised)
        for fd in (self.stdout, self.stderr, self.stdin):
            if fd is not None and fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self.stdout = self.stderr = -1
        self.stdin = None
        if kept:
            return
        for fd in (self.pidfd, self.status):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self.pidfd = self.status = None


@attrs.define(eq=False)
class _Ends:
    """The pipes (or pty) of a child to be: our ends, and the child's stdin, stdout, stderr."""

    ours: list[int]
    theirs: list[int]
    stdout: int
    stderr: int
    stdin: int | None
    child: tuple[int, int, int]
    # Whether `prepare` has set our ends up.
    prepared: bool = False

    @classmethod
    def make(cls, *, stdin: bool, pty: bool, ptmx: int | None = None) -> _Ends:
        """New pipes, or a pty: the host's, or one opened through `ptmx` (a sandbox's)."""
        ours: list[int] = []
        theirs: list[int] = []
        try:
            # stderr is a pipe either way; under a pty the child writes everything
            # to the terminal, so this pipe only ends.
            err_r, err_w = os.pipe2(os.O_CLOEXEC)
            ours.append(err_r)
            theirs.append(err_w)
            in_w: int | None = None
            if pty:
                master, slave = os.openpty() if ptmx is None else _open_pty(ptmx)
                ours.append(master)
                theirs.append(slave)
                fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
                in_w = os.dup(master)
                ours.append(in_w)
                return cls(ours, theirs, master, err_r, in_w, (slave, slave, slave))
            out_r, out_w = os.pipe2(os.O_CLOEXEC)
            ours.append(out_r)
            theirs.append(out_w)
            if stdin:
                in_r, in_w = os.pipe2(os.O_CLOEXEC)
                ours.append(in_w)
                theirs.append(in_r)
            else:
                in_r = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
                theirs.append(in_r)
            return cls(ours, theirs, out_r, err_r, in_w, (in_r, out_w, err_w))
        except BaseException:
            for fd in ours + theirs:
                os.close(fd)
            raise

    def abandon(self) -> None:
        """Close every end: the child was not started."""
        for fd in self.ours:
            os.close(fd)
        self.ours = []

    def prepare(self, *, pty: bool) -> None:
        """Set our ends up for reading (non-blocking; larger pipes for root), once."""
        if self.prepared:
            return
        self.prepared = True
        for fd in self.ours:
            os.set_blocking(fd, False)
        if _enlarge_pipes and not pty:
            for fd in (self.stdout, self.stderr):
                with contextlib.suppress(OSError):
                    fcntl.fcntl(fd, _F_SETPIPE_SZ, _PIPE_SIZE)

    def started(
        self,
        process: subprocess.Popen[bytes] | Served | Supervised,
        pidfd: int | None,
        tag: str,
        started: float,
        *,
        pty: bool,
    ) -> Spawned:
        """Our ends as a `Spawned`, set up for reading."""
        self.prepare(pty=pty)
        return Spawned(
            process=process,
            pidfd=pidfd,
            stdout=self.stdout,
            stderr=self.stderr,
            stdin=self.stdin,
            tag=tag,
            started=started,
        )

    def close_theirs(self) -> None:
        for fd in self.theirs:
            os.close(fd)
        self.theirs = []


_TIOCSPTLCK: Final = 0x40045431
_TIOCGPTPEER: Final = 0x5441


def _open_pty(ptmx: int) -> tuple[int, int]:
    """A new pty through `ptmx`, an O_PATH descriptor of a devpts' multiplexer: master and slave."""
    master = os.open(f"/proc/self/fd/{ptmx}", os.O_RDWR | os.O_NOCTTY | os.O_CLOEXEC)
    try:
        fcntl.ioctl(master, _TIOCSPTLCK, struct.pack("i", 0))
        # The peer by its master, with no path looked up in our mount namespace.
        slave = fcntl.ioctl(master, _TIOCGPTPEER, os.O_RDWR | os.O_NOCTTY | os.O_CLOEXEC)
    except BaseException:
        os.close(master)
        raise
    return master, slave


def spawn(
    argv: Iterable[str],
    *,
    cwd: str,
    env: Mapping[str, str],
    tag: str,
    stdin: bool,
    pty: bool = False,
    launcher: Callable[[Callable[[], subprocess.Popen[bytes]]], subprocess.Popen[bytes]]
    | None = None,
) -> Spawned:
    """Start `argv` in a new session, with pipes for stdout and stderr.

    Args:
        argv: The program and its arguments.
        cwd: The directory it starts in.
        env: Its whole environment; `TREE_VARIABLE` is added to it.
        tag: The value of `TREE_VARIABLE`, which every descendant inherits.
        stdin: Whether to give it a pipe for stdin; otherwise it reads `/dev/null`.
        pty: Give it a pseudo-terminal (80x24) as stdin, stdout, stderr and
            controlling terminal instead: `stdout` is then the master, `stdin` a
            duplicate of it, and `stderr` a pipe that is at its end at once.
        launcher: Calls the function it is given, which starts the process,
            and returns what it returns: a sandbox starts its processes from
            a thread of its own (see `executor._sandbox.landlock`).

    Raises:
        OSError: The program could not be started (missing, not executable, or
            `cwd` is not a directory).

    """
    env = {**env, TREE_VARIABLE: tag}
    started = boot_clock()
    ends = _Ends.make(stdin=stdin, pty=pty)
    arguments = list(argv)
    child_in, child_out, child_err = ends.child

    def start() -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            arguments,
            stdin=child_in,
            stdout=child_out,
            stderr=child_err,
            cwd=cwd,
            env=env,
            start_new_session=True,
            close_fds=True,
            # Runs after setsid(): the new session's controlling terminal.
            preexec_fn=_take_terminal if pty else None,
        )

    try:
        process = start() if launcher is None else launcher(start)
    except BaseException:
        ends.abandon()
        raise
    finally:
        ends.close_theirs()
    try:
        pidfd: int | None = os.pidfd_open(process.pid)
    except (AttributeError, OSError):
        pidfd = None
    return ends.started(process, pidfd, tag, started, pty=pty)


class CommandServer(Protocol):
    """What starts a command in a sandbox built once (`executor._sandbox.sandbox.SandboxServer`)."""

    ptmx: int | None

    async def ready(self) -> None:
        """Build the sandbox, if not yet built; then `ptmx` opens its terminals."""
        ...

    async def start_command(self, request: dict[str, Any], fds: list[int]) -> tuple[int, int]:
        """Start it with `fds` (stdin, stdout, stderr, status); return its init's pid and pidfd."""
        ...


async def spawn_served(
    server: CommandServer,
    argv: Iterable[str],
    *,
    cwd: str,
    env: Mapping[str, str],
    tag: str,
    stdin: bool,
    pty: bool = False,
    rlimits: Iterable[tuple[int, int, str]] = (),
    program: str | None = None,
) -> Spawned:
    """Start `argv` as `spawn` does, but through `server`, which starts it in a sandbox of its own.

    The command is not our child: its init reports its wait status on a
    pipe (`Spawned.status`), and is ended through its pidfd.

    Raises:
        ExecutorError: The server could not start it.

    """
    request = {
        "argv": list(argv),
        "env": {**env, TREE_VARIABLE: tag},
        "cwd": cwd,
        "pty": pty,
        "rlimits": [list(limit) for limit in rlimits],
        "program": program,
    }
    started = boot_clock()
    await server.ready()
    ends = _Ends.make(stdin=stdin, pty=pty, ptmx=server.ptmx)
    status_r, status_w = os.pipe2(os.O_CLOEXEC)
    ends.theirs.append(status_w)
    try:
        init, pidfd = await server.start_command(request, [*ends.child, status_w])
    except BaseException:
        ends.abandon()
        os.close(status_r)
        raise
    finally:
        ends.close_theirs()
    os.set_blocking(status_r, False)
    spawned = ends.started(Served(init), pidfd, tag, started, pty=pty)
    spawned.status = status_r
    return spawned


_enlarge_pipes = os.geteuid() == 0
# Whether a pipe that floods is enlarged (where `_enlarge_pipes` did not already).
_grow_pipes = True

_SUPERVISOR: Final = os.path.join(os.path.dirname(os.path.abspath(__file__)), "supervisor.py")
# How long a kill waits for a tree to go after SIGKILL (a process in
# uninterruptible sleep, say on a dead NFS server, holds it up) before giving up.
_KILL_WAIT: Final = 10.0


class Supervisor:
    """An executor's supervisor process: a child subreaper that starts every command.

    Started at the first command, it forks a shim per command (a subreaper
    too), so every process a command starts stays below it, whatever it
    does to its environment, session or parent: see
    `executor._local.supervisor`. It dies with the thread that started it
    (its parent-death signal), or when this object's socket closes, and
    takes every command's tree with it. Where this process may make
    cgroups (`executor._local.cgroup`), each command gets one.
    """

    def __init__(self, limits: Mapping[str, int | None] | None = None) -> None:
        self._limits = {name: value for name, value in (limits or {}).items() if value is not None}
        self._requests: socket.socket | None = None
        self._control: socket.socket | None = None
        self._pid: int | None = None
        self._pidfd: int | None = None
        self._cgroups: dict[str, Any] | None = None
        self._finalizer: weakref.finalize[Any, Supervisor] | None = None
        # Set by `aclose`: no supervisor is started again after it.
        self._closed = False
        # The last environment `_encode` encoded, and its entries.
        self._env: tuple[dict[str, str], list[bytes]] | None = None

    @property
    def cgroups(self) -> dict[str, Any] | None:
        """The cgroup folders this executor's commands are placed in (`None`: no cgroups)."""
        return self._cgroups

    def start(self) -> None:
        """Start the supervisor now, rather than at the first command.

        Raises:
            ExecutorError: It cannot be started, or a limit cannot be enforced here.

        """
        self._start()

    def _start(self) -> socket.socket:
        if self._closed:
            # A start that raced with the close (its request met a supervisor
            # shutting down) must not bring up one that nothing would end.
            raise ExecutorError("the executor was closed while the command started")
        if self._requests is not None and not _readable(self._pidfd):
            return self._requests
        self._forget()
        # A supervisor that died (killed) left its folders, and shims that
        # end a moment later (their parent-death signal, their request
        # socket's end): what is left there is killed, and the folders go as
        # they empty, here or, past a short wait, in a thread of their own.
        left, self._cgroups = self._cgroups, None
        if left is not None and not cgroup.end_and_remove_cgroups(left, _FOLDERS_WAIT):
            threading.Thread(
                target=cgroup.end_and_remove_cgroups, args=(left, _FOLDERS_LATE), daemon=True
            ).start()
        if self._limits or cgroup.probe().available:
            self._cgroups = cgroup.executor_cgroups()
        missing = set(self._limits) - cgroup.limits_enforced(self._cgroups)
        if missing:
            cgroup.remove_cgroups(self._cgroups)
            self._cgroups = None
            raise ExecutorError(
                f"cannot enforce {', '.join(sorted(f'{name}=' for name in missing))}: "
                f"no cgroup with that controller can be made here ({cgroup.probe().describe()})"
            )
        config = {**(self._cgroups or {}), "limits": self._limits}
        requests, their_requests = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        control, their_control = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        # Our end of the request socket, for the supervisor to retire idle shims on.
        inject = requests.dup()
        try:
            for theirs in (their_requests, their_control, inject):
                os.set_inheritable(theirs.fileno(), True)
            argv = [
                sys.executable,
                "-I",
                "-S",
                _SUPERVISOR,
                str(their_requests.fileno()),
                str(their_control.fileno()),
                str(inject.fileno()),
                str(os.getpid()),
                # marshal, as the requests are: the same interpreter reads it, and
                # json's import (with `re`) would add a sixth to its start.
                marshal.dumps(config).hex(),
            ]
            # Its own session (a terminal's Ctrl-C is not for it), /dev/null for
            # stdin and stdout; stderr is ours, for what a broken interpreter says.
            # Not posix_spawn: glibc's leaves the C library's own signals (32
            # and 33) ignored in the child, for good, and so in every command.
            popen = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                pass_fds=(their_requests.fileno(), their_control.fileno(), inject.fileno()),
                start_new_session=True,
            )
            pid = popen.pid
            # Reaped by us (`_forget`, `_reap`), not by Popen, which would warn.
            popen.returncode = 0
        except OSError as error:
            requests.close()
            control.close()
            cgroup.remove_cgroups(self._cgroups)
            self._cgroups = None
            raise ExecutorError(f"cannot start the supervisor: {error}") from error
        finally:
            their_requests.close()
            their_control.close()
            inject.close()
        self._pid, self._pidfd = pid, os.pidfd_open(pid)
        self._requests, self._control = requests, control
        self._finalizer = weakref.finalize(
            self,
            _drop_supervisor,
            requests,
            control,
            pid,
            self._pidfd,
            os.getpid(),
            cgroups=self._cgroups,
        )
        _FINALIZERS[pid] = self._finalizer
        return requests

    def _forget(self) -> None:
        """Let go of a supervisor that ended (killed, or its thread gone): reap it."""
        if self._finalizer is not None:
            self._finalizer.detach()
            _FINALIZERS.pop(self._pid or 0, None)
            self._finalizer = None
        for sock in (self._requests, self._control):
            if sock is not None:
                sock.close()
        self._requests = self._control = None
        if self._pid is not None:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(self._pid, 0)
            self._pid = None
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None

    async def spawn(
        self,
        argv: Iterable[str],
        *,
        cwd: str,
        env: Mapping[str, str],
        tag: str,
        stdin: bool,
        pty: bool = False,
        cwd_fd: int | None = None,
        kill_grace: float = 0.0,
        timeout: float | None = None,
        wait: bool = True,
    ) -> Spawned:
        """Start `argv` as `spawn` does, through the supervisor.

        With `wait=False` it returns once the shim has the request, before
        the command has started: its pid is 0 until `wait_exit` reads the
        shim's report of its end (the shim sends no start report then), and a
        start that fails raises `StartFailed` there.
        The caller's own setup (a `LocalRun`'s readers) then runs while
        the shim wakes and starts the command, and its process wakes once
        for the command, not also for its start.

        A cancellation while the shim starts it ends what started as a kill
        does: SIGTERM, `kill_grace`, SIGKILL. With `timeout`, the shim itself
        ends the tree that way once that many seconds have passed since the
        start, unless the command's leader has exited by then: no round trip
        to this process (whose timer may wake late) holds up the kill, and
        the status it reports says so (`Supervised.timed_out`). The caller
        still keeps the same timeout and asks for the kill, which then finds
        it under way.

        Raises:
            OSError: The program or its folder, as the start reported them.
            ExecutorError: The supervisor could not be started, or ended.

        """
        arguments = list(argv)
        request = marshal.dumps(
            {
                "argv": arguments,
                # Encoded here, where it is done once for every command (see
                # `_encode`); the program's places too, from the command's PATH.
                "env": [*self._encode(env), os.fsencode(f"{TREE_VARIABLE}={tag}")],
                "executables": _executables(arguments[0], env.get("PATH")) if arguments else (),
                "cwd": cwd,
                "pty": pty,
                "timeout": timeout,
                "grace": kill_grace,
                # Not waited for: no start report, the pid comes with the status.
                "report": wait,
            }
        )
        started = boot_clock()
        for attempt in range(2):
            supervisor = self._start()
            ends = _Ends.make(stdin=stdin, pty=pty)
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            # The tree's `gone` pipe: the shim holds the write end until the
            # tree is gone, so it closes then (or when the shim dies).
            gone, gone_w = os.pipe2(os.O_CLOEXEC)
            fds = [*ends.child, theirs.fileno(), gone_w, *([] if cwd_fd is None else [cwd_fd])]
            try:
                supervisor.sendmsg(
                    [b"R" + request],
                    [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))],
                )
            except OSError as error:
                ends.abandon()
                ours.close()
                os.close(gone)
                if attempt or not _readable(self._pidfd):
                    raise ExecutorError(f"cannot reach the supervisor: {error}") from error
                continue
            finally:
                ends.close_theirs()
                theirs.close()
                os.close(gone_w)
            # While the shim starts the command: our ends made ready for reading.
            ends.prepare(pty=pty)
            if not wait:
                spawned = ends.started(Supervised(0), gone, tag, started, pty=pty)
                ours.setblocking(False)
                spawned.status = ours.detach()
                spawned.signaller = functools.partial(_signal_supervised, spawned)
                return spawned
            try:
                reply, received = await _receive(ours)
            except BaseException:
                # Cancelled while the shim starts it: the command runs anyway,
                # so wait for its start (shielded, bounded) and end its tree.
                with (
                    anyio.CancelScope(shield=True),
                    anyio.move_on_after(kill_grace + 2 * _KILL_WAIT),
                ):
                    await _abandon_start(ours, gone, kill_grace)
                ends.abandon()
                ours.close()
                os.close(gone)
                raise
            for fd in received:
                os.close(fd)
            if reply[:1] == b"P" and len(reply) >= 5:
                pid = struct.unpack("i", reply[1:5])[0]
                control = ours.detach()
                spawned = ends.started(Supervised(pid), gone, tag, started, pty=pty)
                spawned.status = control
                spawned.signaller = functools.partial(_signal_supervised, spawned)
                return spawned
            ends.abandon()
            ours.close()
            os.close(gone)
            if reply[:1] == b"E":
                raise _start_error(reply).error
            # The supervisor ended with the request: once more with a new one.
            if attempt or not _readable(self._pidfd):
                raise ExecutorError("the supervisor ended while starting a command")
        raise AssertionError("unreachable")

    def _encode(self, env: Mapping[str, str]) -> list[bytes]:
        """`env` (but `TREE_VARIABLE`) as `NAME=value` entries for exec, the last one kept.

        An executor's commands mostly share one environment, which is then
        compared, not encoded again.

        Raises:
            OSError: A name cannot be in an environment.

        """
        cached = self._env
        if cached is not None and cached[0] == env:
            return cached[1]
        entries = []
        for name, value in env.items():
            if name == TREE_VARIABLE:
                continue
            key = os.fsencode(name)
            if not key or b"=" in key:
                raise OSError(errno.EINVAL, f"illegal environment variable name: {name!r}")
            entries.append(key + b"=" + os.fsencode(value))
        self._env = (dict(env), entries)
        return entries

    async def aclose(self, grace: float) -> None:
        """End every command's tree (SIGTERM, `grace`, SIGKILL), then the supervisor."""
        self._closed = True
        if self._control is None or self._pidfd is None:
            self._forget()
            return
        with contextlib.suppress(OSError):
            self._control.send(b"X%r" % grace)
        with anyio.move_on_after(grace + _KILL_WAIT):
            await anyio.wait_readable(self._pidfd)
        if not _readable(self._pidfd):
            with contextlib.suppress(ProcessLookupError):
                signals.pidfd_send_signal(self._pidfd, signals.SIGTERM)
            await anyio.wait_readable(self._pidfd)
        cgroups, self._cgroups = self._cgroups, None
        self._forget()
        cgroup.remove_cgroups(cgroups)


# Seconds a new supervisor's start waits for a dead one's cgroup folders to
# empty, and how long a thread then keeps trying.
_FOLDERS_WAIT: Final = 1.0
_FOLDERS_LATE: Final = 30.0
# The finalizers of the supervisors not yet closed: run (and awaited) at exit.
_FINALIZERS: dict[int, weakref.finalize[Any, Supervisor]] = {}
# How long the exit waits for dropped supervisors to end their commands' trees.
_EXIT_WAIT: Final = 5.0


def _drop_supervisor(
    requests: socket.socket,
    control: socket.socket,
    pid: int,
    pidfd: int,
    parent: int,
    *,
    cgroups: dict[str, Any] | None = None,
    wait: float = 0.0,
) -> None:
    """Let go of the supervisor of an executor collected (or left at exit) without `aclose()`.

    The supervisor sees its control socket end, kills every command's tree
    and exits; it is reaped here when it is gone within `wait` seconds (or
    already was: its thread ended), else by a thread of its own, so no
    zombie is left in this process. Then the executor's cgroup folders are
    removed, which a supervisor killed before it could is not there to do.
    """
    _FINALIZERS.pop(pid, None)
    requests.close()
    control.close()
    if os.getpid() != parent:
        # A forked copy of the executor's process: the supervisor is not ours.
        os.close(pidfd)
        return
    if select.select([pidfd], [], [], wait)[0]:
        _reap(pid, pidfd, cgroups)
        return
    try:
        threading.Thread(target=_reap, args=(pid, pidfd, cgroups), daemon=True).start()
    except RuntimeError:
        # The interpreter is shutting down and starts no threads: wait here.
        select.select([pidfd], [], [], _EXIT_WAIT)
        _reap(pid, pidfd, cgroups)


def _reap(pid: int, pidfd: int, cgroups: dict[str, Any] | None = None) -> None:
    try:
        select.select([pidfd], [], [])
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)
    finally:
        os.close(pidfd)
    cgroup.remove_cgroups(cgroups)


@atexit.register
def _drop_all() -> None:
    # An executor still open at exit: its commands' trees end before this
    # process does (not after it, behind its back).
    for finalizer in list(_FINALIZERS.values()):
        detached = finalizer.detach()
        if detached is not None:
            _, function, args, kwargs = detached
            function(*args, **kwargs, wait=_EXIT_WAIT)


@functools.lru_cache(maxsize=64)
def _executables(program: str, path: str | None) -> tuple[bytes, ...]:
    """Where a command's program is looked for, in order: as `subprocess` does, by its PATH."""
    name = os.fsencode(program)
    if os.path.dirname(name):
        return (name,)
    folders = os.get_exec_path({} if path is None else {"PATH": path})
    return tuple(os.path.join(os.fsencode(folder), name) for folder in folders)


def _readable(fd: int | None) -> bool:
    """Whether `fd` (a pidfd: its process has exited) is readable now."""
    if fd is None:
        return True
    return bool(select.select([fd], [], [], 0)[0])


async def _receive(sock: socket.socket) -> tuple[bytes, list[int]]:
    """One message from a command's control socket, and the descriptors it carried."""
    sock.setblocking(False)
    while True:
        try:
            data, ancillary, _, _ = sock.recvmsg(
                4096, socket.CMSG_LEN(4 * array.array("i").itemsize), socket.MSG_CMSG_CLOEXEC
            )
        except BlockingIOError:
            await anyio.wait_readable(sock)
            continue
        except ConnectionResetError:
            return b"", []
        fds = array.array("i")
        for level, kind, payload in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds.frombytes(payload[: len(payload) - (len(payload) % fds.itemsize)])
        return data, list(fds)


async def _abandon_start(control: socket.socket, gone: int, grace: float) -> None:
    """End what a shim started for a start given up on, as any kill ends a tree; awaited.

    The command may have run a while before its start was given up on (a
    cancellation that came as the shim reported it): it gets the grace too.
    """
    reply, received = await _receive(control)
    for fd in received:
        os.close(fd)
    if reply[:1] == b"P":
        await _end_through(lambda: (control.fileno(), gone), grace)


def _start_error(report: bytes) -> StartFailed:
    """A shim's report of a start that failed (`E` + its marshalled fields), as `StartFailed`."""
    fields = marshal.loads(report[1:])
    code = int(fields["errno"])
    error = OSError(code, fields["message"] or os.strerror(code))
    return StartFailed(error, str(fields.get("where", "exec")))


async def _signal_supervised(spawned: Spawned, signal: int) -> None:
    """Send `signal` to a supervised command's process group, through its shim."""
    if spawned.status is not None and spawned.process.returncode is None:
        with contextlib.suppress(OSError):
            os.write(spawned.status, b"G%d" % signal)


async def _wait_supervised(spawned: Spawned, control: int) -> int:
    """A supervised command's wait status, as its shim reports it when the leader exits."""
    process = spawned.process
    assert isinstance(process, Supervised)
    while True:
        try:
            data = os.read(control, 4096)
        except BlockingIOError:
            await anyio.wait_readable(control)
            continue
        except OSError:
            data = b""
        if data[:1] == b"S" and len(data) >= 22:
            fields: tuple[int, int, bool, int, int] = struct.unpack("=iq?ii", data[1:22])
            status, peak, process.timed_out, process.pid, kills = fields
            process.memory_peak = peak if peak >= 0 else None
            process.oom_killed = kills > 0
            break
        if data[:1] == b"E" and not process.pid:
            # Started with `wait=False`: the shim reports only a start that failed.
            process.failed = True
            process.returncode = _START_FAILED
            raise _start_error(data)
        if not data:
            # The shim was killed before it could report (by us, with the
            # tree; or, not waited for, maybe before the command started).
            status = signals.SIGKILL
            break
    process.returncode = os.waitstatus_to_exitcode(status)
    return status


async def _end_supervised(spawned: Spawned, grace: float) -> None:
    """End a supervised command's tree: SIGTERM, `grace`, SIGKILL; awaited on its `gone` pipe."""
    # The shim keeps the grace itself (SIGKILL when it is up); `K` is only
    # for a shim that has not ended the tree by then.
    # The grace counts from now, not from when the shim gets to it (see the
    # supervisor's `T`): CLOCK_MONOTONIC is one clock for the machine.
    await _end_through(lambda: (spawned.status, spawned.pidfd), grace)


async def _end_through(ends: Callable[[], tuple[int | None, int | None]], grace: float) -> None:
    """`T` + the grace to a shim on its control socket, then `K` if the tree outlives it.

    `ends` gives the control descriptor and the `gone` pipe, read again
    after each wait: a run may close them meanwhile (its command ended, and
    with it, then, the whole tree).
    """
    term = b"T%r@%r" % (grace, time.monotonic())
    for message, wait in ((term, grace + _KILL_WAIT), (b"K", _KILL_WAIT)):
        control, gone = ends()
        if control is None or gone is None or _readable(gone):
            return
        try:
            os.write(control, message)
        except OSError:
            return  # the shim is gone, and with it the tree
        with anyio.move_on_after(wait):
            await _wait_gone(lambda: ends()[1])


async def _wait_gone(gone: Callable[[], int | None]) -> None:
    """Wait until the `gone` pipe (`gone()`, while open) is readable: the tree is gone."""
    pidfd = gone()
    if pidfd is None:
        return
    try:
        await anyio.wait_readable(pidfd)
    except anyio.BusyResourceError:
        # Another task waits on it already (a session's kill and its run's):
        # look now and then instead, while it is still open.
        while (pidfd := gone()) is not None and not _readable(pidfd):
            await anyio.sleep(0.005)
    except (anyio.ClosedResourceError, OSError):
        return


async def end_tree(spawned: Spawned, *, grace: float) -> None:
    """End every process of a spawned command's tree: SIGTERM, up to `grace` seconds, SIGKILL.

    A supervised command's tree is ended by its shim, which knows it; others
    are found by their tag (see `kill_tree`), and a served one's PID
    namespace ends with its init.
    """
    if isinstance(spawned.process, Supervised):
        await _end_supervised(spawned, grace)
        return
    await kill_tree(spawned.tag, grace=grace, group=spawned.group, since=spawned.started)
    spawned.end_served()


def _take_terminal() -> None:
    # In the child, after setsid(): make the pty on stdin its controlling terminal.
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


async def wait_exit(spawned: Spawned) -> int:
    """Wait for the child to exit, reap it, and return its wait status."""
    if isinstance(spawned.process, Supervised):
        assert spawned.status is not None
        return await _wait_supervised(spawned, spawned.status)
    if spawned.status is not None:
        return await _wait_served(spawned, spawned.status)
    assert isinstance(spawned.process, subprocess.Popen)
    pid = spawned.pid
    if spawned.pidfd is not None:
        await anyio.wait_readable(spawned.pidfd)
        try:
            _, status = os.waitpid(pid, 0)  # noqa: ASYNC222 (exited: the pidfd said so)
        except ChildProcessError as error:
            raise ExecutorError(
                f"the exit status of process {pid} was collected by someone else "
                "(a SIGCHLD handler that reaps every child?)"
            ) from error
    else:
        # Without pidfds (old kernels), poll; the delay grows to bound the cost.
        delay = 0.001
        while True:
            reaped, status = os.waitpid(pid, os.WNOHANG)  # noqa: ASYNC222 (WNOHANG)
            if reaped:
                break
            await anyio.sleep(delay)
            delay = min(delay * 2, 0.05)
    # Popen would otherwise warn that its process "is still running" when collected.
    spawned.process.returncode = os.waitstatus_to_exitcode(status)
    return status


async def _wait_served(spawned: Spawned, status: int) -> int:
    """A served command's wait status, reported by its init once all the command left is gone.

    Raises:
        ExecutorError: The sandbox could not be set up for the command.

    """
    report = b""
    while True:
        try:
            data = os.read(status, 4096)
        except BlockingIOError:
            await anyio.wait_readable(status)
            continue
        report += data
        if not data or (report.startswith(b"S") and len(report) >= 5):
            break
    if report.startswith(b"S") and len(report) >= 5:
        wait_status: int = struct.unpack("i", report[1:5])[0]
    elif report.startswith(b"E"):
        raise ExecutorError(report[1:].decode(errors="replace"))
    else:
        # Init was killed (by us, or with its server): its namespace dies
        # with it, which its pidfd tells.
        if spawned.pidfd is not None:
            await anyio.wait_readable(spawned.pidfd)
        wait_status = signals.SIGKILL
    spawned.process.returncode = os.waitstatus_to_exitcode(wait_status)
    return wait_status


def _decode_status(status: int) -> tuple[int, int | None]:
    code = os.waitstatus_to_exitcode(status)
    if code < 0:
        return 128 - code, -code
    return code, None


class LocalRun(Run):
    """A child spawned on this machine, as `drive` runs it: its pipes, its exit, its tree.

    Args:
        spawned: The child, from `spawn` (or a supervisor's, or a sandbox's).
        keep_tree: Leave a supervised command's handle on its tree open when
            the run is over (see `Spawned.close`): a session ends what the
            command left when its block is left, not when the command
            exits; `release` closes it.
        pty: Whether the child's stdin is a terminal (which `resize` sets).

    """

    def __init__(self, spawned: Spawned, *, keep_tree: bool = False, pty: bool = False) -> None:
        self._spawned = spawned
        self._keep_tree = keep_tree
        self._status: int | None = None
        self._waiting = False
        # Our own handle on the terminal, for `resize`: the run closes its fds at the end.
        self._master = os.dup(spawned.stdin) if pty and spawned.stdin is not None else None

    @property
    def spawned(self) -> Spawned:
        """The child."""
        return self._spawned

    @property
    def pid(self) -> int | None:
        """The child's pid (also its process group, unless a sandbox's init is between)."""
        return self._spawned.pid

    def readers(self) -> Sequence[Reader]:
        """One reader per pipe: stdout and stderr (a pty's stderr is its own pipe too)."""
        spawned = self._spawned
        return (
            functools.partial(self._read, spawned.stdout, Stdout),
            functools.partial(self._read, spawned.stderr, Stderr),
        )

    async def wait(self) -> Exit:
        """Wait for the exit and reap the child (or hear of it from its shim or sandbox)."""
        if self._status is None:
            self._waiting = True
            try:
                self._status = await wait_exit(self._spawned)
            finally:
                self._waiting = False
        process = self._spawned.process
        code, signal = _decode_status(self._status)
        if isinstance(process, Supervised):
            # A shim keeps the timeout too, and may have ended the leader
            # (SIGTERM, at the deadline) before the caller's timer woke.
            return Exit(
                code,
                signal,
                process.memory_peak,
                timed_out=process.timed_out,
                oom_killed=process.oom_killed,
            )
        return Exit(code, signal)

    async def write(self, data: bytes) -> None:
        """Write `data` to the stdin pipe (or the terminal)."""
        view = memoryview(data)
        while view:
            fd = self._spawned.stdin
            if fd is None:
                raise ExecutorError("the command's stdin is closed")
            try:
                written = os.write(fd, view[: 1 << 16])
            except BlockingIOError:
                await anyio.wait_writable(fd)
                continue
            except OSError:
                # The command stopped reading; what it did not take is its choice.
                return
            view = view[written:]

    async def close_input(self) -> None:
        """Close our end of the stdin pipe."""
        fd, self._spawned.stdin = self._spawned.stdin, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)

    async def signal(self, number: int) -> None:
        """Send `number` to the command's process group (through its sandbox, where it has one)."""
        spawned = self._spawned
        if spawned.signaller is not None:
            await spawned.signaller(number)
            return
        # The group id is pinned only while the leader is unreaped;
        # this check and the kill run with no await between.
        if spawned.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(spawned.pid, number)

    async def resize(self, cols: int, rows: int) -> None:
        """Set the terminal's size."""
        if self._master is None:
            raise ExecutorError("the session's terminal is closed")
        size = struct.pack("HHHH", rows, cols, 0, 0)
        with contextlib.suppress(OSError):
            fcntl.ioctl(self._master, termios.TIOCSWINSZ, size)

    async def kill_descendants(self, pid: int) -> None:
        """SIGKILL what runs below `pid` (as the command sees it) in the tree, sparing `pid`."""
        spawned = self._spawned
        # Only while the tree's top is unreaped (a sandbox's init, or the
        # command): the processes below it are then the command's.
        if self._status is None and spawned.process.returncode is None:
            kill_below(spawned.pid, pid, spawned.tag)

    async def kill(self, grace: float) -> None:
        """Kill the whole tree and, before the exit is known, reap the child."""
        spawned = self._spawned
        if isinstance(spawned.process, Supervised) and spawned.process.failed:
            self._status = _START_FAILED << 8  # never started: nothing to end
            return
        # The group and session ids are pinned only while the leader is unreaped:
        # after that an unrelated process may get the same number.
        if isinstance(spawned.process, Supervised):
            await end_tree(spawned, grace=grace)
        else:
            group = spawned.group if self._status is None else None
            await kill_tree(spawned.tag, grace=grace, group=group, since=spawned.started)
            spawned.end_served()
        # A session's kill may come while the run waits for the exit: that wait reaps.
        if self._status is None and not self._waiting:
            try:
                self._status = await wait_exit(spawned)
            except (StartFailed, ExecutorError):
                # Never started (a start given up on while its report was
                # on its way): nothing to end, and the error is the run's.
                if not (isinstance(spawned.process, Supervised) and spawned.process.failed):
                    raise
                self._status = _START_FAILED << 8

    def finish(self) -> None:
        """Close the pipes (and, unless the tree is kept for a session, the handles on it)."""
        self._spawned.close(keep_tree=self._keep_tree)

    async def release(self) -> None:
        """Close what a session kept: the handles on the tree, the terminal."""
        self._spawned.close()
        master, self._master = self._master, None
        if master is not None:
            with contextlib.suppress(OSError):
                os.close(master)

    async def _read(
        self, fd: int, kind: Callable[[bytes], Chunk], emit: Emit, drain: Drain
    ) -> None:
        # Output is gathered into one buffer, reused, and copied out a chunk
        # at a time: reads go on, with no trip through the event loop, until
        # the pipe is empty or the buffer full. Quiet output (a line, a
        # prompt) is therefore passed on as it comes, and a flood of small
        # writes (`head -c`: 8 KiB each) in chunks of up to `_GATHER`, not
        # one per write: each wakeup costs Python far more than a read. The
        # buffer starts at `_FIRST_READ` and grows once a flood fills it.
        # Where a flood's pipe then holds `_GATHER` or more (big writes,
        # `dd bs=1M`), it is read straight into each chunk's own bytes (one
        # copy, not two), up to a pipe's worth at once.
        # A step that found the pipe empty waits before the next, rather than
        # read again only to be told EAGAIN.
        buffer = bytearray(_FIRST_READ)
        view = memoryview(buffer)
        waiter = _Readable(fd)
        unregister = drain.on_stop(waiter.interrupt)
        try:
            capacity = fcntl.fcntl(fd, _F_GETPIPE_SZ)
        except OSError:
            capacity = _FIRST_READ  # a pty
            grow = False
        else:
            grow = _grow_pipes and capacity < _PIPE_SIZE
        # Past the drain period a reader still takes what the pipe holds, so a
        # slow sink never costs the command's last words; a background child
        # that keeps writing gets one more drain period and one pipe's worth.
        allowance = _PIPE_SIZE
        last_call: float | None = None
        # What the pipe held at the reader's first look past the drain period:
        # written before, so read whatever the limits above say.
        owed: int | None = None
        waited = True
        # The pipe is new (the command may not have started yet): the first
        # step waits, rather than read only to be told EAGAIN.
        drained = True
        ended = False
        # Whether the last step brought a full buffer's worth, and what the
        # pipe then holds (asked only then: quiet output costs no ioctl).
        flooding = False
        queued = array.array("i", [0])
        # When a flood's reader next lets the loop in.
        next_turn = 0.0
        try:
            while allowance > 0 and not ended:
                if drained and not drain.stopping:
                    await waiter.wait()
                    waited = True
                try:
                    if flooding:
                        fcntl.ioctl(fd, termios.FIONREAD, queued)
                    if flooding and queued[0] >= _GATHER:
                        # Big writes (`dd bs=1M`), or a pipe that filled while
                        # the sink was busy: read straight into the chunk's
                        # own bytes, exactly what is there (no copy out, and
                        # no larger allocation to shrink).
                        data = os.read(fd, min(queued[0], _READ_SIZE))
                        size = len(data)
                        drained = False
                    else:
                        size, ended = _gather(fd, view)
                        data = bytes(view[:size])
                        drained = size < len(view)
                        if not drained and len(view) < _GATHER:
                            # A flood: gather more at a time from now on.
                            view.release()
                            buffer = bytearray(_GATHER)
                            view = memoryview(buffer)
                    flooding = size >= _GATHER
                except BlockingIOError:
                    if drain.stopping:
                        return
                    drained = True
                    continue
                except OSError as error:
                    # A pty's master reports the end (no slave left open) as EIO.
                    if error.errno == errno.EIO:
                        return
                    raise
                if not size:
                    return
                if grow and size >= capacity:
                    grow = False  # tried once: a refusal stands for this pipe
                    with contextlib.suppress(OSError):
                        capacity = fcntl.fcntl(fd, _F_SETPIPE_SZ, _PIPE_SIZE)
                # Past the drain period, what the pipe held at the first look is
                # all read; what comes after it (a background child writing on)
                # gets a pipe's worth and one more drain period: the first chunk
                # read after that is the last, passed on all the same (nothing
                # read is dropped).
                last = False
                if drain.stopping:
                    if owed is None:
                        owed = _pending(fd, queued)
                        beyond = 0
                    else:
                        beyond = max(size - owed, 0)
                        owed = max(owed - size, 0)
                    if beyond:
                        allowance -= beyond
                        now = anyio.current_time()
                        if last_call is None:
                            last_call = now + drain.period
                        else:
                            last = now > last_call
                # Data that came without a wait is a flood: reads would never
                # block, so the loop must be let in (the drain's timer, the other
                # reader, other commands) before the next read, at least every
                # `_FLOOD_TURN`.
                flood = False
                if not waited:
                    clock = time.monotonic()
                    flood = clock >= next_turn
                    if flood:
                        next_turn = clock + _FLOOD_TURN
                waited = False
                await emit(kind(data))
                if last:
                    return
                if flood:
                    # The chunk is delivered already: a cancellation here cuts nothing.
                    await anyio.lowlevel.checkpoint()
        finally:
            unregister()
            waiter.close()
            view.release()


def _pending(fd: int, queued: array.array[int]) -> int:
    """How many bytes the pipe (or pty) `fd` holds; 0 if it cannot say."""
    try:
        fcntl.ioctl(fd, termios.FIONREAD, queued)
    except OSError:
        return 0
    return queued[0]


def _gather(fd: int, view: memoryview) -> tuple[int, bool]:
    """Read `fd` into `view` until it is full, the pipe is empty, or the output has ended.

    Returns how many bytes were read, and whether the end was reached. A
    first read of less than `_GATHER_FROM` (a line, a prompt) emptied the
    pipe of what a quiet command writes at once: it is taken alone, with no
    second read only to be told EAGAIN.

    Raises:
        BlockingIOError: The pipe was empty at the first read.
        OSError: A read failed (a pty's end is EIO).

    """
    size = os.readv(fd, (view,))
    if not size:
        return 0, True
    if size < _GATHER_FROM:
        return size, False
    limit = len(view)
    while size < limit:
        try:
            got = os.readv(fd, (view[size:],))
        except BlockingIOError:
            break
        except OSError:
            break  # reported by the next step's first read, after this step's bytes
        if not got:
            return size, True
        size += got
    return size, False


_TICKS = os.sysconf("SC_CLK_TCK")


def _scan(tag: str, *, prefix: bool, group: int | None, since: float | None = None) -> list[int]:
    """Pids of live processes carrying the tag, or in `group`'s group or session, or below them.

    With `prefix`, any tag that starts with `tag` matches (all of an executor's
    commands). `since` (a `boot_clock()` time) skips reading the environment of
    processes started before it, which cannot carry the tag: the scan then
    costs one read for most processes instead of two.
    """
    # Start times are in clock ticks; a tick of slack keeps a process started
    # in the same tick as the command.
    oldest = None if since is None else int(since * _TICKS) - 1
    needle = f"{TREE_VARIABLE}={tag}".encode()
    own = os.getpid()
    parents: dict[int, int] = {}
    found: set[int] = set()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        pid = int(name)
        if pid == own:
            continue
        stat = proc_stat(pid)
        if stat is None or stat.state == "Z":
            continue  # a zombie is dead already; its parent reaps it
        parents[pid] = stat.ppid
        # Not `pid == group`: once the leader is reaped its pid may be reused,
        # but the kernel keeps a group or session id from reuse while it has members.
        if group is not None and group in (stat.pgid, stat.sid):
            found.add(pid)
            continue
        if oldest is not None and stat.start < oldest:
            continue
        if _has_tag(pid, needle, prefix=prefix):
            found.add(pid)
    # Descendants of what was found that shed the tag, the group and the session.
    children: dict[int, list[int]] = {}
    for pid, ppid in parents.items():
        children.setdefault(ppid, []).append(pid)
    stack = list(found)
    while stack:
        for child in children.get(stack.pop(), ()):
            if child not in found:
                found.add(child)
                stack.append(child)
    return sorted(found)


def _has_tag(pid: int, needle: bytes, *, prefix: bool) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            environ = f.read()
    except OSError:
        return False
    for entry in environ.split(b"\0"):
        if entry == needle or (prefix and entry.startswith(needle)):
            return True
    return False


def _signal(pids: Iterable[int], sig: int, cache: dict[int, psutil.Process]) -> list[int]:
    """Send `sig` to each pid still alive, checking its identity; return those signalled."""
    sent = []
    for pid in pids:
        try:
            process = cache.get(pid)
            if process is None:
                process = cache[pid] = psutil.Process(pid)
            process.send_signal(sig)  # psutil refuses if the pid was reused
            sent.append(pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return sent


async def kill_tree(
    tag: str,
    *,
    grace: float,
    group: int | None = None,
    prefix: bool = False,
    since: float | None = None,
) -> None:
    """End every process of a tree: SIGTERM, up to `grace` seconds, then SIGKILL.

    The tree is every live process whose environment carries `tag` (or a tag
    starting with it, with `prefix`), every process in `group`'s process group
    or session, and every descendant of those (`since`, a `boot_clock()` time
    no later than the tree's first process, speeds up the search). Survivors
    are looked for again
    after each round, so children forked during the grace period die too.
    """
    cache: dict[int, psutil.Process] = {}
    pids = _scan(tag, prefix=prefix, group=group, since=since)
    if not pids:
        return
    deadline = anyio.current_time() + grace
    while pids:
        _signal(pids, signals.SIGTERM, cache)
        # A stopped process only acts on SIGTERM once continued.
        _signal(pids, signals.SIGCONT, cache)
        while anyio.current_time() < deadline and any(map(_alive, pids)):
            await anyio.sleep(min(_POLL, max(0.0, deadline - anyio.current_time())))
        if anyio.current_time() >= deadline:
            break
        # All we signalled are gone; a full scan finds what they forked meanwhile.
        pids = _scan(tag, prefix=prefix, group=group, since=since)
    for _ in range(100):
        pids = _scan(tag, prefix=prefix, group=group, since=since)
        if not pids:
            return
        _signal(pids, signals.SIGKILL, cache)
        await anyio.sleep(0.001)


def kill_below(root: int, pid: int, tag: str) -> int:
    """SIGKILL every descendant of the process the tree below `root` knows as `pid`; how many.

    `pid` is as the command sees it: in a sandbox, its PID namespace's
    number (the last of `NSpid`), found among `root` (the sandbox's init, or
    the command itself) and its descendants. That process must carry the
    tree's `tag`, or nothing is sent. The descendants are stopped first and
    looked for again until no new one comes (a stopped process forks no
    child the kill would miss), then killed together.
    """
    top = _known_as(root, pid)
    if top is None or not _has_tag(top, f"{TREE_VARIABLE}={tag}".encode(), prefix=False):
        return 0
    stopped: dict[int, psutil.Process] = {}
    seen: set[int] = set()
    try:
        leader = psutil.Process(top)
        for _ in range(100):
            new = [child for child in leader.children(recursive=True) if child.pid not in seen]
            if not new:
                break
            for child in new:
                seen.add(child.pid)
                with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
                    child.send_signal(signals.SIGSTOP)  # psutil refuses a reused pid
                    stopped[child.pid] = child
    except psutil.NoSuchProcess:
        pass  # the top ended meanwhile: what was found is still killed
    for child in stopped.values():
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            child.send_signal(signals.SIGKILL)
    return len(stopped)


def _known_as(root: int, pid: int) -> int | None:
    """The process of `root`'s tree (itself or below) whose own PID namespace calls it `pid`."""
    if _namespace_pid(root) == pid:
        return root
    try:
        below = psutil.Process(root).children(recursive=True)
    except psutil.NoSuchProcess:
        return None
    for child in below:
        if _namespace_pid(child.pid) == pid:
            return child.pid
    return None


def _namespace_pid(pid: int) -> int | None:
    """`pid`'s number in its own (innermost) PID namespace: the last of `NSpid`."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"NSpid:"):
                    return int(line.split()[-1])
    except (OSError, ValueError):
        return None
    return pid  # a kernel without NSpid (before 4.1): one namespace


def _alive(pid: int) -> bool:
    stat = proc_stat(pid)
    return stat is not None and stat.state != "Z"
