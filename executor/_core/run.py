"""One command's run, written once: what a started command offers, and `drive`, the run itself.

A backend starts a command its own way (a local process through the
supervisor, a process of the helper in a container, an engine exec, a
channel over SSH) and hands back a `Run`: its output's readers, its exit, its
input, signals to its process group, and the kill of its whole tree. `drive`
is the one implementation of what happens between the start and the result,
for every backend and every caller (`exec_cmd`, `exec_cmd_streaming`,
sessions):

- each chunk goes to the output buffer (which keeps the cap and marks its
  cut) and to the sink, in the order it was read; a sink that blocks holds
  the readers, and so the command, back;
- the timeout kills the tree (SIGTERM, the grace in wall time, SIGKILL) and
  raises `TimedOut` with what was read;
- after the exit the readers get the drain period to reach the end of the
  output, which a background child holding the pipes may keep open; past
  it they take what has arrived (the command's last words, however late the
  event loop gets to them) and stop, and a chunk read past it is passed on,
  never dropped;
- a cancellation or a failing sink kills the tree before it propagates.

A local process's readers see its pipes, and know what they hold when the
drain period ends. A remote command's output comes over a connection: what
has arrived is all a reader can know of, and a remote end may report the
exit before the last of the output (sshd does). `read_arrivals` is the one
reader of every remote backend: after the exit it reads until the output's
end, for the drain period and at least `REMOTE_LOOK`.
"""

from __future__ import annotations

import abc
import inspect
import math
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Final, TypeAlias

import anyio
import anyio.lowlevel
import attrs

from executor._core.cleanup import run_to_completion
from executor._core.errors import ExecutorError, TimedOut
from executor._core.output import Chunk, CommandOutput, OutputBuffer, Sink

LAST_LOOK: Final = 0.05
"""Seconds the readers get, at least, to take what a killed command left in its pipes."""

REMOTE_LOOK: Final = 0.25
"""Seconds after the exit a remote reader waits, at least, for the output's end.

A remote end may send the exit before the last of the output (OpenSSH's
sshd sends `exit-status` once it has reaped the command, and forwards what
the pipes still hold after it): with a drain period of 0 the last words
would be lost. A background child that holds the output open then costs
this long (or the drain period, where it is longer).
"""

Emit: TypeAlias = Callable[[Chunk], Awaitable[None]]
"""Where a reader hands each chunk: into the buffer and to the sink (see `drive`)."""


@attrs.frozen
class Exit:
    """How a command ended, as its backend saw it.

    Attributes:
        code: The exit code (128 + N for a death by signal N); `None` where
            the end is not known (a connection lost: see `Run.settle`).
        signal: The signal that killed it, if one did.
        memory_peak: The peak memory of its tree in bytes, where a cgroup counted it.
        timed_out: The backend's own clock ended it at the timeout (a
            supervisor's shim keeps the timeout too, and may be first).
        oom_killed: The kernel's OOM killer ended a process of its tree
            (see `CommandOutput.oom_killed`).

    """

    code: int | None
    signal: int | None = None
    memory_peak: int | None = None
    timed_out: bool = False
    oom_killed: bool = False


class Drain:
    """The run's phase, as its readers see it: running, exited, past the drain period.

    `drive` makes one per run. A reader waiting for output is woken when the
    drain period ends (`stopping`), through `interruptible` or a callback
    given to `on_stop`.

    Attributes:
        period: The drain period (the executor's `drain_timeout`), in seconds.
        exited: When the exit was seen (`anyio.current_time()`), or `None`.
        stopping: The drain period is over: readers take what has arrived and stop.

    """

    __slots__ = ("_scopes", "_stops", "exited", "period", "stopping")

    def __init__(self, period: float) -> None:
        self.period = period
        self.exited: float | None = None
        self.stopping = False
        self._stops: list[Callable[[], None]] = []
        self._scopes: set[anyio.CancelScope] = set()

    def on_stop(self, interrupt: Callable[[], None]) -> Callable[[], None]:
        """Call `interrupt` when the drain period ends; returns what unregisters it."""
        self._stops.append(interrupt)
        return lambda: self._stops.remove(interrupt)

    @contextmanager
    def interruptible(self) -> Iterator[anyio.CancelScope]:
        """A scope around a wait for output, cancelled at the drain's end.

        The wait it cuts short must lose nothing (a cancel-safe receive).
        """
        with anyio.CancelScope() as scope:
            self._scopes.add(scope)
            try:
                yield scope
            finally:
                self._scopes.discard(scope)

    def deadline(self, look: float) -> float | None:
        """Until when a reader that looks at least `look` after the exit reads; `None` before it."""
        if self.exited is None:
            return None
        return self.exited + max(self.period, look)

    def exit(self) -> None:
        """The command exited: from now on the readers have a deadline.

        No reader is woken for it: a remote command's exit comes over its
        connection like its output, and wakes its reader itself (a cancelled
        wait costs a tenth of a millisecond), and the drain's end wakes one
        that reads again before it has learnt of the exit here.
        """
        self.exited = anyio.current_time()

    def stop(self) -> None:
        """The drain period is over: wake the readers."""
        self.stopping = True
        for interrupt in tuple(self._stops):
            interrupt()
        for scope in tuple(self._scopes):
            scope.cancel()


Reader: TypeAlias = Callable[[Emit, Drain], Awaitable[None]]
"""Reads one output stream to its end (or until `Drain` says stop), handing each chunk to `Emit`."""


class Run(abc.ABC):
    """A command a backend has started: the interface `drive` and sessions run it through.

    Each backend implements it in a module of its own. The methods may be
    called from other tasks while `drive` runs (a session writes its input,
    sends signals, kills the tree).
    """

    @property
    def pid(self) -> int | None:
        """The command's pid (also its process group) on its host, where known."""
        return None

    @abc.abstractmethod
    def readers(self) -> Sequence[Reader]:
        """The output's readers, each run in a task of its own (one per stream, or one for all)."""

    @abc.abstractmethod
    async def wait(self) -> Exit:
        """Wait for the exit; once known, return it at once on every call.

        Where the end cannot be known (a connection lost), `Exit.code` is
        `None`, and `settle` raises.
        """

    @abc.abstractmethod
    async def write(self, data: bytes) -> None:
        """Write all of `data` to the command's input; return quietly if it stopped reading."""

    @abc.abstractmethod
    async def close_input(self) -> None:
        """End the command's input (end of file)."""

    @abc.abstractmethod
    async def signal(self, number: int) -> None:
        """Send signal `number` to the command's process group, if it still runs."""

    @abc.abstractmethod
    async def kill(self, grace: float) -> None:
        """Kill the whole tree: SIGTERM, `grace` seconds of wall time, SIGKILL to what is left.

        Also after the exit, for the background processes the command left.
        Before the exit is known, it also waits for it where the backend can
        (a local child is reaped). Call it through `run_to_completion`.
        """

    async def resize(self, cols: int, rows: int) -> None:
        """Set the terminal's size (pty runs)."""
        raise ExecutorError(f"{type(self).__name__} cannot resize its terminal")

    async def kill_descendants(self, pid: int) -> None:
        """SIGKILL every descendant of process `pid` of the command's tree, not `pid` itself.

        `pid` is as the command sees it (a shell's `$$`); nothing is sent if
        no process of the tree has it. What a persistent shell sends its
        stuck command: see `ProcessSession.kill_descendants`.
        """
        raise ExecutorError(f"{type(self).__name__} cannot kill below a process")

    async def settle(self, output: CommandOutput) -> CommandOutput:
        """Check the run's output once it is over; raise where the run itself failed.

        By default the output is the result. A backend whose connection can
        be lost while its command runs raises here, with the output read.
        """
        return output

    def finish(self) -> None:
        """`drive` is over (whichever way): free what the run no longer needs."""
        return

    async def release(self) -> None:
        """Free what a session kept past the run (its tree handle, its terminal)."""
        return


async def feed(run: Run, data: bytes) -> None:
    """Write `data` to the run's input, then end it: what `exec_cmd`'s `stdin` does."""
    try:
        if data:
            await run.write(data)
    finally:
        await run.close_input()


class _Drive:
    """One `drive`'s state: the emit the readers share, and the wait for them."""

    __slots__ = ("buffer", "done", "drain", "heard", "idled", "lock", "readers", "sink", "stalled")

    def __init__(self, buffer: OutputBuffer, sink: Sink | None, drain: Drain, readers: int) -> None:
        self.buffer = buffer
        self.sink = sink
        self.drain = drain
        self.readers = readers
        self.done = anyio.Event()
        self.lock: anyio.Lock | None = None
        # When output last arrived, and how many chunks wait on a busy sink:
        # what the idle timeout watches.
        self.heard = anyio.current_time()
        self.stalled = 0
        self.idled = False

    async def emit(self, chunk: Chunk) -> None:
        self.buffer.append(chunk)
        self.heard = anyio.current_time()
        if self.sink is None:
            return
        result = self.sink(chunk)
        if inspect.isawaitable(result):
            # Readers share one sink: the lock (FIFO) keeps an async sink's
            # calls in the order the chunks were read.
            if self.lock is None:
                # fast_acquire: an uncontended lock costs no trip through the
                # event loop, which would add to every chunk's latency.
                self.lock = anyio.Lock(fast_acquire=True)
            # A sink that holds the readers back holds the command back: that
            # is the caller's backpressure, not a command gone quiet.
            self.stalled += 1
            try:
                async with self.lock:
                    await result
            finally:
                self.stalled -= 1
                self.heard = anyio.current_time()

    async def watch_idle(self, idle: float, run_scope: anyio.CancelScope) -> None:
        """Cancel `run_scope` once no output has arrived for `idle` seconds."""
        while True:
            await anyio.sleep_until(self.heard + idle)
            if not self.stalled and anyio.current_time() >= self.heard + idle:
                self.idled = True
                run_scope.cancel()
                return
            if self.stalled:
                await anyio.sleep(min(idle, 0.05))

    async def read(self, reader: Reader) -> None:
        try:
            await reader(self.emit, self.drain)
        finally:
            self.readers -= 1
            if not self.readers:
                self.done.set()

    async def drain_after(self, *, timed_out: bool) -> None:
        """After the exit, give the readers the drain period to reach the end of the output.

        Past it they take what has arrived and stop. After a normal exit a
        busy sink is the caller's own backpressure and is waited for; after a
        timeout the readers get one more drain period (and at least
        `LAST_LOOK`, to take their look at all).
        """
        drain = self.drain
        if not self.readers:
            # The output ended before the exit was read (a short command):
            # nothing to wait for, and no trip through the event loop.
            drain.stopping = True
            return
        drain.exit()
        with anyio.move_on_after(drain.period):
            await self.done.wait()
        drain.stop()
        bound = max(drain.period, LAST_LOOK) if timed_out else math.inf
        with anyio.move_on_after(bound):
            await self.done.wait()


async def drive(
    run: Run,
    *,
    buffer: OutputBuffer,
    sink: Sink | None,
    stdin: bytes | None,
    timeout: float | None,
    kill_grace: float,
    drain_timeout: float,
    idle_timeout: float | None = None,
) -> CommandOutput:
    """Run a started command to its end and return its output.

    Args:
        run: The started command.
        buffer: Where chunks are kept (and capped).
        sink: Called with each chunk as it is read.
        stdin: Bytes written to the command's input, which is then ended;
            with `None` the input is left to the caller (a session writes it).
        timeout: Seconds before the tree is killed and `TimedOut` raised.
        kill_grace: Seconds between SIGTERM and SIGKILL.
        drain_timeout: How long to go on reading after the exit, while a
            background process still holds the output open.
        idle_timeout: Seconds the command may go without printing before
            the tree is killed and `TimedOut` (`idle=True`) raised; the time
            a busy sink holds the output back does not count.

    Raises:
        TimedOut: The timeout or the idle timeout passed; the tree was killed.
        BaseException: Whatever the sink or the run raised, or a
            cancellation; the tree is killed before it propagates.

    """
    readers = run.readers()
    state = _Drive(buffer, sink, Drain(drain_timeout), len(readers))
    started = anyio.current_time()
    exit: Exit | None = None
    timed_out = False
    watching = anyio.CancelScope()
    try:
        async with anyio.create_task_group() as tasks:
            for reader in readers:
                tasks.start_soon(state.read, reader)
            if stdin:
                tasks.start_soon(feed, run, stdin)
            elif stdin is not None:
                # Nothing to write: the input ends at once, with no task for it.
                await run.close_input()
            with anyio.move_on_after(math.inf if timeout is None else timeout) as waiting:
                if idle_timeout is not None:
                    tasks.start_soon(_within, watching, state.watch_idle, idle_timeout, waiting)
                exit = await run.wait()
            watching.cancel()
            if exit is None or exit.timed_out:
                timed_out = True
                await run_to_completion(lambda: run.kill(kill_grace))
                if exit is None:
                    with anyio.move_on_after(max(drain_timeout, LAST_LOOK)):
                        exit = await run.wait()
            await state.drain_after(timed_out=timed_out)
            # Only what still runs is cancelled: anyio's cancel() formats the
            # task's repr (a tenth of a millisecond a command).
            if state.readers or stdin:
                tasks.cancel_scope.cancel()
    except BaseException as exc:
        await run_to_completion(lambda: run.kill(kill_grace))
        inner = _unwrap(exc)
        if inner is exc:
            raise
        raise inner from inner.__cause__
    finally:
        run.finish()
    # A cancellation that came while the kill was shielded wins over the result.
    await anyio.lowlevel.checkpoint_if_cancelled()
    output = buffer.output(
        exit_code=None if exit is None else exit.code,
        signal=None if exit is None else exit.signal,
        duration=anyio.current_time() - started,
        memory_peak=None if exit is None else exit.memory_peak,
        oom_killed=exit is not None and exit.oom_killed,
    )
    if timed_out:
        if state.idled:
            assert idle_timeout is not None
            raise TimedOut(idle_timeout, output, idle=True)
        assert timeout is not None
        raise TimedOut(timeout, output)
    return await run.settle(output)


async def _within(
    scope: anyio.CancelScope,
    function: Callable[[float, anyio.CancelScope], Awaitable[None]],
    idle: float,
    run_scope: anyio.CancelScope,
) -> None:
    with scope:
        await function(idle, run_scope)


class Arrivals(abc.ABC):
    """A remote command's output as it arrives over its connection: what `read_arrivals` reads."""

    @abc.abstractmethod
    def take(self) -> Chunk | None:
        """The next chunk that has arrived, if any; never waits."""

    @property
    @abc.abstractmethod
    def ended(self) -> bool:
        """Whether the output's end has arrived (and every chunk before it was taken)."""

    @abc.abstractmethod
    async def arrive(self) -> None:
        """Wait until more arrives: a chunk, the exit, or the end. Cancelled, it loses nothing."""


async def read_arrivals(arrivals: Arrivals, emit: Emit, drain: Drain) -> None:
    """Read a remote command's output to its end, or to `Drain.deadline` after the exit.

    Only the waits are cut short: a chunk being handed on is never abandoned
    midway, and one taken past the deadline (a flood that never pauses) is
    passed on before the reader stops.
    """
    while True:
        while (chunk := arrivals.take()) is not None:
            await emit(chunk)
            deadline = drain.deadline(REMOTE_LOOK)
            if deadline is not None and anyio.current_time() >= deadline and not arrivals.ended:
                return
        if arrivals.ended:
            return
        deadline = drain.deadline(REMOTE_LOOK)
        if deadline is None:
            # The exit comes as an arrival too; a reader that looks again
            # before `drive` has seen it is woken at the drain's end.
            with drain.interruptible():
                await arrivals.arrive()
            continue
        remaining = deadline - anyio.current_time()
        if remaining <= 0:
            return
        with anyio.move_on_after(remaining):
            await arrivals.arrive()


def _unwrap(exc: BaseException) -> BaseException:
    # One level: the group our task group made. A sink's own group stays whole.
    if isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        return exc.exceptions[0]
    return exc
