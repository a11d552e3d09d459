r"""`ProcessSession`: a running command to talk to, chunk by chunk.

`ProcessSession` holds what every backend's session shares: the bounded
stream of numbered chunks, the stdin events, `cancel`, `finalize` and the
`async with` lifecycle. A backend subclasses it and supplies the process
(a handful of `_`-prefixed hooks); each backend's folder holds its own
(`RunSession` over a backend's `Run`, where the backend has no more to add).

```python
async with await executor.start(Command.shell("cat")) as session:
    await session.send_stdin(Text("hello\n"))
    first = await session.next_chunk()
    output = await session.finalize()
```
"""

from __future__ import annotations

import abc
import contextlib
import functools
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Final, Self

import anyio
import anyio.lowlevel
import attrs
from anyio.abc import TaskGroup
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from executor._core.cleanup import run_to_completion
from executor._core.errors import ExecutorError, NonZeroExit
from executor._core.output import Chunk, CommandOutput, OutputBuffer
from executor._core.resource import AsyncChunks
from executor._core.run import Run, drive
from executor._core.stdin import Bytes, Resize, Signal, StdinEvent, Text, UnixSignal

CHUNK_BUFFER: Final = 16
"""Chunks a session holds for its reader; past that the process's output waits."""

READER_KEPT: Final = 64 << 10
"""What `keep_output` keeps where a reader takes each chunk as it comes (a shell, a job).

Enough of the head and tail for the last words of a process that failed.
"""

# A terminal's end-of-file character (VEOF, Ctrl-D).
_EOF: Final = b"\x04"


@attrs.frozen
class SessionChunk:
    """A piece of a session's output, numbered and timed.

    Attributes:
        chunk: The output, `Stdout` or `Stderr` (a pty's output is `Stdout`).
        sequence: 1 for the first chunk of the session, rising by one.
        time: When it was read, on `time.monotonic()`'s clock.

    """

    chunk: Chunk
    sequence: int
    time: float


class ProcessSession(AsyncChunks[SessionChunk], abc.ABC):
    """A command started by `ToolExecutor.start`; enter it (`async with`) to run it.

    Entering starts the process (a failure to start raises there, as
    `exec_cmd` would). Then `next_chunk()` (or `async for`) reads the output
    as `SessionChunk`s, `None` at the end; `send_stdin` delivers `Text`,
    `Bytes`, `Signal` (to the command's process group, as a terminal's keys
    do) and `Resize` (a pty only: `ExecutorError` otherwise); `close_stdin`
    ends the input (on a pty it types the EOF character, Ctrl-D);
    `cancel()` kills the tree; `finalize()` discards unread chunks, waits for
    the end and returns the `CommandOutput` or raises as `exec_cmd` does
    (`NonZeroExit`, `TimedOut` with the partial output; after `cancel()`,
    `NonZeroExit`). Leaving the block kills whatever still runs, the whole
    tree, and reaps it.

    At most `CHUNK_BUFFER` chunks wait for the reader: a slow reader stops
    the reading, the pipe fills and the command blocks. The output kept for
    `finalize()` is capped as a streamed call's is (the reader sees every
    chunk): by the executor's `stream_output_limit` and `output_limit`.

    A backend subclasses this and implements the hooks: `_begin` (start the
    process), `_run` (run it to the end, handing each chunk to `_deliver`,
    and return its output or raise `TimedOut`), `_write_input`,
    `_close_input`, `_signal`, `_resize` (pty sessions) and `_terminate`
    (kill the whole tree), and optionally `_release` and `_kill_descendants`.
    The base serialises input writes and never calls `_write_input` after
    `_close_input`.
    """

    # Whether `_offer` lets the reader run after handing a chunk over. A backend
    # whose own reading already lets the event loop in often during a flood
    # sets it False, so a chunk does not pay for two trips.
    _offer_yields = True

    def __init__(
        self,
        *,
        pty: bool,
        initial_stdin: bytes | None = None,
        finish: Callable[[CommandOutput], CommandOutput] | None = None,
    ) -> None:
        """Set up a session; nothing starts before it is entered.

        Args:
            pty: Whether the command runs on a terminal.
            initial_stdin: Bytes written to the command first (the command's
                own `stdin`); the input stays open after them.
            finish: Applied to the output `finalize()` returns (the
                executor's exit-code check, say).

        """
        self.pty = pty
        self._initial_stdin = initial_stdin
        self._finish = finish
        self._started = False
        self._entered = False
        self._stdin_closed = False
        self._stdin_lock = anyio.Lock()
        self._sequence = 0
        self._cancelled = False
        self._leaving = False
        self._kept: int | None = None
        self._result: CommandOutput | None = None
        self._error: BaseException | None = None
        self._done = anyio.Event()
        self._stack = contextlib.AsyncExitStack()
        self._tasks: TaskGroup | None = None
        # Made on entry: a session never entered holds nothing to close.
        self._send: MemoryObjectSendStream[SessionChunk]
        self._receive: MemoryObjectReceiveStream[SessionChunk]

    @property
    def pid(self) -> int | None:
        """The command's pid (also its process group) on its host, once started and if known."""
        return None

    def keep_output(self, limit: int) -> None:
        """Keep at most `limit` bytes of the output for `finalize()`, its head and tail; spill none.

        For a reader that takes what it needs from each chunk as it comes (a
        persistent shell reads its frames, a job its output): the session
        need not hold hours of output besides, nor write it to the
        executor's spill folder. By default a session keeps what a streamed
        call keeps (the executor's `stream_output_limit`) and spills past it
        as `exec_cmd` does. Call it before entering.

        Raises:
            ExecutorError: The session was entered already.
            ValueError: `limit` is negative.

        """
        if self._entered:
            raise ExecutorError("keep_output() is called before the session is entered")
        if limit < 0:
            raise ValueError(f"limit must be >= 0, got {limit}")
        self._kept = limit

    # The hooks a backend implements.

    @abc.abstractmethod
    async def _begin(self) -> None:
        """Start the process; raise as `exec_cmd` would when it cannot start."""

    @abc.abstractmethod
    async def _run(self) -> CommandOutput:
        """Run the started process to its end, handing each chunk to `_deliver`."""

    @abc.abstractmethod
    async def _write_input(self, data: bytes) -> None:
        """Write all of `data` to the command's input; return quietly if it stopped reading."""

    @abc.abstractmethod
    async def _close_input(self) -> None:
        """Close the command's input (end of file)."""

    @abc.abstractmethod
    async def _signal(self, signal: int) -> None:
        """Send `signal` to the command's process group, if it still runs."""

    async def _resize(self, cols: int, rows: int) -> None:
        """Set the terminal's size (only called on pty sessions)."""
        raise ExecutorError(f"{type(self).__name__} cannot resize its terminal")

    async def _kill_descendants(self, pid: int) -> None:
        """SIGKILL every descendant of `pid` in the command's tree (see `kill_descendants`)."""
        raise ExecutorError(f"{type(self).__name__} cannot kill below a process")

    @abc.abstractmethod
    async def _terminate(self, grace: float | None = None) -> None:
        """Kill the command's whole tree: SIGTERM, `grace` seconds (or the default), SIGKILL."""

    async def _release(self) -> None:
        """Free what the session still holds, after the process and its tasks are gone."""

    # The lifecycle.

    async def __aenter__(self) -> Self:
        if self._entered:
            raise ExecutorError("a session is entered once")
        self._entered = True
        self._send, self._receive = anyio.create_memory_object_stream[SessionChunk](CHUNK_BUFFER)
        # The task group first: what `_begin` enters (a wrapped session's own
        # task group) nests inside it, and is left before it.
        self._tasks = await self._stack.enter_async_context(anyio.create_task_group())
        try:
            await self._begin()
        except BaseException:
            self._send.close()
            self._receive.close()
            await self._stack.aclose()
            raise
        self._started = True
        self._tasks.start_soon(self._main)
        if self._initial_stdin is not None:
            try:
                await self._write(self._initial_stdin)
            except BaseException as error:
                # No `async with` block will leave: end the process and the tasks here.
                await self.__aexit__(type(error), error, error.__traceback__)
                raise
        return self

    async def __aexit__(self, *exc_info: object) -> bool | None:
        if not self._started:
            return None
        self._leaving = True
        self._receive.close()
        try:
            await self._leave()
        finally:
            try:
                await self._stack.aclose()
            finally:
                await run_to_completion(self._release)
        return None

    async def _leave(self) -> None:
        """End what still runs as the block is left, whatever cancels the caller."""
        # Also after the exit: background processes the command left.
        await run_to_completion(self._terminate)

    async def next_chunk(self) -> SessionChunk | None:
        """The next chunk of output; `None` once the output has ended (or after `cancel()`)."""
        self._check_entered()
        try:
            # A chunk already waiting is taken without a trip through the
            # event loop: a fast reader keeps up with the pipe.
            return self._receive.receive_nowait()
        except anyio.WouldBlock:
            pass
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            return None
        try:
            return await self._receive.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            return None

    async def send_stdin(self, event: StdinEvent, /) -> None:
        """Deliver `event` to the command, waiting while its input is full.

        Raises:
            ExecutorError: Stdin was closed; `Resize` on a session without a pty.

        """
        self._check_entered()
        match event:
            case Text():
                await self._write(event.text.encode())
            case Bytes():
                await self._write(event.data)
            case Signal():
                await self._signal(int(event.signal))
            case Resize():
                if not self.pty:
                    raise ExecutorError("Resize needs a session started with pty=True")
                await self._resize(event.cols, event.rows)
            case _:
                raise ExecutorError(f"not a stdin event: {event!r}")

    async def close_stdin(self) -> None:
        """End the command's input; on a pty, type Ctrl-D. Closing twice is harmless."""
        if self._stdin_closed:
            return
        if self.pty:
            with contextlib.suppress(ExecutorError):
                await self._write(_EOF)
        self._stdin_closed = True
        async with self._stdin_lock:
            await self._close_input()

    async def kill_descendants(self, pid: int) -> None:
        """SIGKILL every process below process `pid` of the command's tree, sparing `pid`.

        `pid` is as the command sees it (a shell's `$$`, in a sandbox or a
        container its own PID namespace's number); it must be a process of
        this command's tree, or nothing is sent. The processes are stopped
        first and looked for until no new one comes, then killed together.
        A persistent shell sends it to a command that outlived SIGINT and
        SIGTERM: the command dies, the shell goes on. It returns once the
        signals are sent, not when the processes are reaped.

        Raises:
            ExecutorError: The backend cannot (the Docker helper's processes).

        """
        self._check_entered()
        await self._kill_descendants(pid)

    def cancel(self) -> None:
        """Kill the command's tree; the output ends and `finalize()` raises `NonZeroExit`."""
        self._check_entered()
        if self._cancelled or self._done.is_set():
            self._cancelled = True
            return
        self._cancelled = True
        self._receive.close()
        assert self._tasks is not None
        self._tasks.start_soon(self._terminate, 0.0)

    async def finalize(self) -> CommandOutput:
        """End stdin, discard unread chunks, wait for the end; return or raise as `exec_cmd`.

        Raises:
            NonZeroExit: The command failed, or was cancelled.
            TimedOut: It ran past its timeout; the tree was killed.

        """
        self._check_entered()
        await self.close_stdin()
        self._receive.close()
        return await self._outcome()

    @property
    def ending(self) -> bool:
        """Whether the session was cancelled or left before its command ended."""
        return self._cancelled or (self._leaving and not self._done.is_set())

    async def _outcome(self) -> CommandOutput:
        """Wait for the end, leaving stdin open; return or raise as `finalize()` does."""
        await self._done.wait()
        if self._error is not None:
            raise self._error
        assert self._result is not None
        output = self._result
        if self._cancelled and not output.exit_code:
            raise NonZeroExit("command was cancelled", output)
        return output if self._finish is None else self._finish(output)

    async def _deliver(self, chunk: Chunk) -> None:
        """Hand a chunk of output to the reader, waiting while `CHUNK_BUFFER` chunks wait."""
        waiting = self._offer(chunk)
        if waiting is not None:
            await waiting

    def _offer(self, chunk: Chunk) -> Awaitable[None] | None:
        """`_deliver` as a `Sink`: hands the chunk over at once, or returns what to await."""
        self._sequence += 1
        item = SessionChunk(chunk, self._sequence, time.monotonic())
        try:
            # Room in the buffer (or a reader waiting): the chunk is the reader's at once...
            self._send.send_nowait(item)
        except anyio.WouldBlock:
            return self._send_waiting(item)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            # A reader that stopped (finalize, cancel, exit) no longer holds the output back.
            return None
        if not self._offer_yields:
            return None
        # ...and the reader runs before the next read: chunks consumed one by
        # one reuse memory that is still in the cache, where a backlog of
        # large chunks would not (measured: 0.6x the throughput).
        return anyio.lowlevel.checkpoint()

    async def _send_waiting(self, item: SessionChunk) -> None:
        with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
            await self._send.send(item)

    def _check_entered(self) -> None:
        if not self._started:
            raise ExecutorError("enter the session first: async with await ex.start(cmd)")

    async def _main(self) -> None:
        try:
            self._result = await self._run()
        except Exception as error:
            # TimedOut, or a failure of the run itself: finalize raises it.
            self._error = error
        finally:
            self._send.close()
            self._done.set()

    async def _write(self, data: bytes) -> None:
        if self._stdin_closed:
            raise ExecutorError("the session's stdin is closed")
        async with self._stdin_lock:
            if self._stdin_closed:
                raise ExecutorError("the session's stdin is closed")
            await self._write_input(data)


class RunSession(ProcessSession):
    """A session of a command its backend started as a `Run`, run by `drive` as `exec_cmd` runs it.

    Every backend's session is one: the timeout, the drain, the kill of the
    whole tree and the output cap are the ones `exec_cmd` keeps, with the
    input left open for the session's events.
    """

    def __init__(
        self,
        start: Callable[[], Awaitable[Run]],
        *,
        pty: bool,
        initial_stdin: bytes | None,
        finish: Callable[[CommandOutput], CommandOutput] | None,
        output_buffer: Callable[[], OutputBuffer],
        timeout: float | None,
        kill_grace: float,
        drain_timeout: float,
        idle_timeout: float | None = None,
        offer_yields: bool = True,
    ) -> None:
        """Set up a session; `start` starts its command when the session is entered.

        `offer_yields=False` for a backend whose reading already lets the
        event loop in often during a flood (see `ProcessSession._offer`).
        """
        super().__init__(pty=pty, initial_stdin=initial_stdin, finish=finish)
        self._start = start
        self._output_buffer = output_buffer
        self._timeout = timeout
        self._kill_grace = kill_grace
        self._drain_timeout = drain_timeout
        self._idle_timeout = idle_timeout
        self._offer_yields = offer_yields
        self._command: Run | None = None

    @property
    def pid(self) -> int | None:
        """The command's pid on its host, once started and if known."""
        return None if self._command is None else self._command.pid

    async def _begin(self) -> None:
        self._command = await self._start()

    async def _run(self) -> CommandOutput:
        assert self._command is not None
        return await drive(
            self._command,
            buffer=self._output_buffer() if self._kept is None else OutputBuffer(self._kept),
            sink=self._offer,
            stdin=None,
            timeout=self._timeout,
            kill_grace=self._kill_grace,
            drain_timeout=self._drain_timeout,
            idle_timeout=self._idle_timeout,
        )

    async def _write_input(self, data: bytes) -> None:
        assert self._command is not None
        await self._command.write(data)

    async def _close_input(self) -> None:
        if self._command is not None:
            await self._command.close_input()

    async def _signal(self, signal: int) -> None:
        if self._command is not None:
            await self._command.signal(signal)

    async def _resize(self, cols: int, rows: int) -> None:
        if self._command is not None:
            await self._command.resize(cols, rows)

    async def _kill_descendants(self, pid: int) -> None:
        if self._command is not None:
            await self._command.kill_descendants(pid)

    async def _terminate(self, grace: float | None = None) -> None:
        command = self._command
        if command is not None:
            # Also from cancel(), whose task the block's end may cancel.
            grace = self._kill_grace if grace is None else grace
            await run_to_completion(functools.partial(command.kill, grace))

    async def _release(self) -> None:
        if self._command is not None:
            await self._command.release()


class WrappedSession(ProcessSession):
    """A session that forwards to another one, seeing each chunk and the end on the way.

    Wrappers that watch or rewrite output (`Secrets`, `Audit`, `Observed`)
    return one from `start()` around the inner executor's session, and
    override `_chunk` (what the reader gets for each inner chunk), `_flush`
    (what is left at the end), `_ended` (the output `finalize()` returns)
    and `_failed` (called with the error that ends the session: a failure to
    start, `NonZeroExit`, `TimedOut`, a cancellation, or an exception of a
    hook, after which the inner command is cancelled). `ending` tells a hook whether the
    session was cancelled or left early.
    """

    def __init__(self, inner: ProcessSession) -> None:
        """Wrap `inner`, a session not yet entered."""
        super().__init__(pty=inner.pty)
        self.inner = inner

    @property
    def pid(self) -> int | None:
        """The inner session's pid."""
        return self.inner.pid

    def keep_output(self, limit: int) -> None:
        """Keep at most `limit` bytes of the output: the inner session does the keeping."""
        super().keep_output(limit)
        self.inner.keep_output(limit)

    async def _chunk(self, chunk: Chunk) -> Sequence[Chunk]:
        """What the reader gets for `chunk`; by default, `chunk` itself."""
        return (chunk,)

    async def _flush(self) -> Sequence[Chunk]:
        """Chunks to deliver once the inner output has ended; by default none."""
        return ()

    async def _ended(self, output: CommandOutput) -> CommandOutput:
        """The output `finalize()` returns; by default the inner one."""
        return output

    async def _failed(self, error: BaseException) -> None:
        """See the error that ends the session (it may update `error.output`).

        Called under a shield, also for a cancellation.
        """

    async def _begin(self) -> None:
        try:
            await self.inner.__aenter__()
        except BaseException as error:
            await run_to_completion(functools.partial(self._failed, error))
            raise

    async def _run(self) -> CommandOutput:
        inner = self.inner
        try:
            try:
                while (item := await inner.next_chunk()) is not None:
                    for chunk in await self._chunk(item.chunk):
                        await self._deliver(chunk)
            except BaseException:
                # A hook failed (or the reading was cancelled): the command must not go on.
                inner.cancel()
                raise
            try:
                output = await inner._outcome()
            finally:
                for chunk in await self._flush():
                    await self._deliver(chunk)
        except BaseException as error:
            await run_to_completion(functools.partial(self._failed, error))
            raise
        return await self._ended(output)

    async def _write_input(self, data: bytes) -> None:
        await self.inner.send_stdin(Bytes(data))

    async def close_stdin(self) -> None:
        """End the inner command's input (on a pty, the inner session types Ctrl-D)."""
        self._stdin_closed = True
        async with self._stdin_lock:
            await self.inner.close_stdin()

    async def _close_input(self) -> None:
        await self.inner.close_stdin()

    async def _signal(self, signal: int) -> None:
        await self.inner.send_stdin(Signal(UnixSignal(signal)))

    async def _resize(self, cols: int, rows: int) -> None:
        await self.inner.send_stdin(Resize(cols, rows))

    async def _kill_descendants(self, pid: int) -> None:
        await self.inner.kill_descendants(pid)

    async def _terminate(self, grace: float | None = None) -> None:
        self.inner.cancel()

    async def _leave(self) -> None:
        # The inner session kills its whole tree, with its grace, and reaps
        # it; it is left in this task, the one that entered it.
        await self.inner.__aexit__(None, None, None)
