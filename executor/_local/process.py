"""The local process lifecycle, in one place: spawn, stream, kill, reap.

Every local feature (commands, and later sessions and sandboxes) runs its
processes through `spawn` and `ProcessRun`, so the guarantees hold everywhere:

- each command runs in a session and process group of its own, and every
  process it starts inherits a tag in its environment (`EXECUTOR_PROCESS_TREE`),
  so the whole tree can be found again: the group, the session, descendants
  that left both, and daemons that double-forked away to init;
- the exit is awaited on a pidfd, not on the pipes, so a background child that
  holds stdout open cannot make a finished command hang;
- pipes are read with one copy per chunk, each read sized by what the pipe
  holds (FIONREAD, up to 1 MiB), so memory never grows past the stored-output
  cap and a chunk or two in flight;
- a flood of output still lets the event loop run between its chunks.
"""

from __future__ import annotations

import array
import contextlib
import errno
import fcntl
import inspect
import math
import os
import signal as signals
import struct
import subprocess
import termios
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, Final, Protocol

import anyio
import attrs
import psutil

from executor._core.base import Sink
from executor._core.cleanup import run_to_completion
from executor._core.errors import ExecutorError, TimedOut
from executor._core.output import Chunk, CommandOutput, OutputBuffer, Stderr, Stdout
from executor._core.proc import TREE_VARIABLE, boot_clock, proc_stat

__all__ = [
    "ProcessRun",
    "Served",
    "Spawned",
    "kill_tree",
    "spawn",
    "spawn_served",
]

# A read asks the pipe how much it holds (FIONREAD) and takes that, up to
# this much, straight into the chunk's own bytes object: one copy (reading
# into a reused buffer, then copying out the chunk, costs two), and an
# allocation the size of the data, so a quiet command costs no more than its
# output and a flood moves in few, large chunks.
_READ_SIZE: Final = 1 << 20
# What a read asks for when the pipe says it holds nothing (the end, or data
# that came just after asking).
_SMALL_READ: Final = 1 << 16
# Linux's default pipe holds 64 KiB; a larger one lets each wakeup carry more.
# Only root enlarges pipes: for other users the pages count against a per-user
# budget, and spending it would shrink the pipes of the user's other programs.
_PIPE_SIZE: Final = 1 << 20
_F_SETPIPE_SZ: Final = 1031
# How often the kill path looks for survivors while it waits out the grace period.
_POLL: Final = 0.01


def _available(fd: int, ask: array.array[int]) -> int:
    """How many bytes to read from `fd`: what it holds, within bounds."""
    try:
        fcntl.ioctl(fd, termios.FIONREAD, ask)
    except OSError:
        return _SMALL_READ
    return min(ask[0], _READ_SIZE) or _SMALL_READ


@attrs.define(eq=False)
class Served:
    """A command's init in a sandbox server (see `executor._local.sandbox`): not our child.

    It stands where a `subprocess.Popen` stands for a command we started
    ourselves: its pid, and its exit code once known.
    """

    pid: int
    returncode: int | None = None


@attrs.define(eq=False)
class Spawned:
    """A started child: its pid, a pidfd to await its exit, and our ends of its pipes."""

    process: subprocess.Popen[bytes] | Served
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
        if isinstance(self.process, Served) or self.process.returncode is not None:
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

    def close(self) -> None:
        """Close our ends of the pipes and the pidfd."""
        for fd in (self.stdout, self.stderr, self.stdin, self.pidfd, self.status):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self.stdin = self.pidfd = self.status = None


@attrs.define(eq=False)
class _Ends:
    """The pipes (or pty) of a child to be: our ends, and the child's stdin, stdout, stderr."""

    ours: list[int]
    theirs: list[int]
    stdout: int
    stderr: int
    stdin: int | None
    child: tuple[int, int, int]

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

    def started(
        self,
        process: subprocess.Popen[bytes] | Served,
        pidfd: int | None,
        tag: str,
        started: float,
        *,
        pty: bool,
    ) -> Spawned:
        """Our ends as a `Spawned`, set up for reading."""
        for fd in self.ours:
            os.set_blocking(fd, False)
        if _enlarge_pipes and not pty:
            for fd in (self.stdout, self.stderr):
                with contextlib.suppress(OSError):
                    fcntl.fcntl(fd, _F_SETPIPE_SZ, _PIPE_SIZE)
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
            a thread of its own (see `executor._local.landlock`).

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
    """What starts a command in a sandbox built once (`executor._local.sandbox.SandboxServer`)."""

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


def _take_terminal() -> None:
    # In the child, after setsid(): make the pty on stdin its controlling terminal.
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


async def wait_exit(spawned: Spawned) -> int:
    """Wait for the child to exit, reap it, and return its wait status."""
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


class ProcessRun:
    """Streams one spawned child to its end: output to a buffer and a sink, exit, cleanup.

    Args:
        spawned: The child, from `spawn`.
        stdin: Bytes to write to its stdin pipe, if it has one; with `None`
            the pipe is left to the caller (a session writes it).
        sink: Called with each chunk as it is read.
        buffer: Where chunks are kept (and capped).
        timeout: Seconds before the tree is killed and `TimedOut` raised.
        kill_grace: Seconds between SIGTERM and SIGKILL.
        drain_timeout: How long to go on reading after the child exits, while a
            background process still holds its pipes.

    """

    def __init__(
        self,
        spawned: Spawned,
        *,
        stdin: bytes | None,
        sink: Sink | None,
        buffer: OutputBuffer,
        timeout: float | None,
        kill_grace: float,
        drain_timeout: float,
    ) -> None:
        self._spawned = spawned
        self._stdin = stdin
        self._sink = sink
        self._sink_lock: anyio.Lock | None = None
        self._buffer = buffer
        self._timeout = timeout
        self._kill_grace = kill_grace
        self._drain_timeout = drain_timeout
        self._status: int | None = None
        self._readers = 2
        self._readers_done = anyio.Event()
        # Chunks being handed to the sink; the drain never cancels one midway.
        self._emitting = 0
        self._emitted: anyio.Event | None = None
        self._stopping = False

    async def run(self) -> CommandOutput:
        """Run to the end and return the output.

        Raises:
            TimedOut: The timeout passed; the tree was killed.
            BaseException: Whatever the sink raised, or a cancellation; the
                tree is killed and the child reaped before it propagates.

        """
        spawned = self._spawned
        started = anyio.current_time()
        timed_out = False
        try:
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(self._read, spawned.stdout, Stdout)
                tasks.start_soon(self._read, spawned.stderr, Stderr)
                if spawned.stdin is not None and self._stdin is not None:
                    tasks.start_soon(self._write_stdin, spawned.stdin)
                with anyio.move_on_after(math.inf if self._timeout is None else self._timeout):
                    self._status = await wait_exit(spawned)
                if self._status is None:
                    timed_out = True
                    await run_to_completion(self._kill)
                await self._drain(timed_out=timed_out)
                tasks.cancel_scope.cancel()
        except BaseException as exc:
            await run_to_completion(self._kill)
            inner = _unwrap(exc)
            if inner is exc:
                raise
            raise inner from inner.__cause__
        finally:
            spawned.close()
        # A cancellation that came while the kill was shielded wins over our result.
        await anyio.lowlevel.checkpoint_if_cancelled()
        assert self._status is not None
        exit_code, signal = _decode_status(self._status)
        output = self._buffer.output(
            exit_code=exit_code, signal=signal, duration=anyio.current_time() - started
        )
        if timed_out:
            assert self._timeout is not None
            raise TimedOut(self._timeout, output)
        return output

    async def _drain(self, *, timed_out: bool) -> None:
        """After the exit, give the readers `drain_timeout` to reach the end of the pipes.

        A background process may hold the pipes open for as long as it lives;
        past the drain period the readers are stopped, but only while they
        wait for data, never while the sink has a chunk.
        """
        with anyio.move_on_after(self._drain_timeout):
            await self._readers_done.wait()
        self._stopping = True
        # After a normal exit a busy sink is the caller's own backpressure and
        # is waited for; after a timeout it gets one more drain period.
        with anyio.move_on_after(self._drain_timeout if timed_out else math.inf):
            while self._emitting:
                self._emitted = anyio.Event()
                await self._emitted.wait()

    async def _kill(self) -> None:
        """Kill the whole tree and reap the child (call through `run_to_completion`)."""
        spawned = self._spawned
        # The group and session ids are pinned only while the leader is unreaped:
        # after that an unrelated process may get the same number.
        group = spawned.group if self._status is None else None
        await kill_tree(spawned.tag, grace=self._kill_grace, group=group, since=spawned.started)
        if self._status is None:
            spawned.end_served()
            self._status = await wait_exit(spawned)

    async def _read(self, fd: int, kind: Callable[[bytes], Chunk]) -> None:
        # FIONREAD's answer; one per reader, as readers may run in other threads.
        ask = array.array("i", [0])
        # Past the drain period a reader still takes what the pipe holds, so a
        # slow sink never costs the command's last words; a background child
        # that keeps writing gets one more drain period and one pipe's worth.
        allowance = _PIPE_SIZE
        last_call: float | None = None
        waited = True
        try:
            while allowance > 0:
                try:
                    data = os.read(fd, _available(fd, ask))
                except BlockingIOError:
                    if self._stopping:
                        return
                    await anyio.wait_readable(fd)
                    waited = True
                    continue
                except OSError as error:
                    # A pty's master reports the end (no slave left open) as EIO.
                    if error.errno == errno.EIO:
                        return
                    raise
                if not data:
                    return
                if self._stopping:
                    allowance -= len(data)
                    now = anyio.current_time()
                    if last_call is None:
                        last_call = now + self._drain_timeout
                    elif now > last_call:
                        return
                # Data that came without a wait is a flood: reads would never
                # block, so the loop must be let in (the drain's timer, the other
                # reader, other commands) before the next read.
                flood = not waited
                waited = False
                self._emitting += 1
                try:
                    await self._emit(kind(data))
                    if flood:
                        # Counted as emitting, so the drain waits for it (after a
                        # timeout, one more drain period at most); the chunk is
                        # delivered already, so a cancellation here cuts nothing.
                        await anyio.lowlevel.checkpoint()
                finally:
                    self._emitting -= 1
                    if not self._emitting and self._emitted is not None:
                        self._emitted.set()
        finally:
            self._readers -= 1
            if not self._readers:
                self._readers_done.set()

    async def _emit(self, chunk: Chunk) -> None:
        self._buffer.append(chunk)
        if self._sink is None:
            return
        result = self._sink(chunk)
        if inspect.isawaitable(result):
            # Two readers feed one sink: the lock (FIFO) keeps an async sink's
            # calls in the order the chunks were read.
            if self._sink_lock is None:
                # fast_acquire: an uncontended lock costs no trip through the
                # event loop, which would add to every chunk's latency.
                self._sink_lock = anyio.Lock(fast_acquire=True)
            async with self._sink_lock:
                await result

    async def _write_stdin(self, fd: int) -> None:
        data = memoryview(self._stdin or b"")
        try:
            while data:
                try:
                    written = os.write(fd, data[: 1 << 16])
                except BlockingIOError:
                    await anyio.wait_writable(fd)
                    continue
                except BrokenPipeError:
                    # The command stopped reading; what it did not take is its choice.
                    return
                data = data[written:]
        finally:
            os.close(fd)
            self._spawned.stdin = None


def _unwrap(exc: BaseException) -> BaseException:
    # One level: the group our task group made. A sink's own group stays whole.
    if isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        return exc.exceptions[0]
    return exc


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


def _alive(pid: int) -> bool:
    stat = proc_stat(pid)
    return stat is not None and stat.state != "Z"
