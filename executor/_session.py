r"""`ProcessSession`: a running command to talk to, chunk by chunk.

A session runs its process through the same lifecycle as `exec_cmd`
(`spawn` and `ProcessRun`), so timeouts, the kill of the whole tree and the
output cap are the same; what it adds is a bounded stream of chunks to read
as they come, and stdin events to send while the command runs.

```python
async with await executor.start(Command.shell("cat")) as session:
    await session.send_stdin(Text("hello\n"))
    first = await session.next_chunk()
    output = await session.finalize()
```
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import struct
import termios
import time
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Final, Self

import anyio
import attrs
from anyio.abc import TaskGroup
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from executor._errors import ExecutorError, NonZeroExit
from executor._output import Chunk, CommandOutput, OutputBuffer
from executor._process import ProcessRun, Spawned, kill_tree, run_to_completion
from executor._streaming import Bytes, Resize, Signal, StdinEvent, Text

__all__ = ["CHUNK_BUFFER", "ProcessSession", "SessionChunk"]

CHUNK_BUFFER: Final = 16
"""Chunks a session holds for its reader; past that the process's output waits."""

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


class ProcessSession:
    """A command started by `ToolExecutor.start`; enter it (`async with`) to run it.

    Entering spawns the process (a failure to start raises there, as
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
    `finalize()` is capped by the executor's `output_limit`.
    """

    def __init__(
        self,
        open_process: Callable[[], Awaitable[Spawned]],
        *,
        finish: Callable[[CommandOutput], CommandOutput],
        initial_stdin: bytes | None,
        pty: bool,
        output_limit: int | None,
        timeout: float | None,
        kill_grace: float,
        drain_timeout: float,
    ) -> None:
        self._open = open_process
        self._finish = finish
        self._initial_stdin = initial_stdin
        self.pty = pty
        self._output_limit = output_limit
        self._timeout = timeout
        self._kill_grace = kill_grace
        self._drain_timeout = drain_timeout
        self._spawned: Spawned | None = None
        self._stdin: int | None = None
        self._master: int | None = None
        self._stdin_closed = False
        self._stdin_lock = anyio.Lock()
        self._sequence = 0
        self._cancelled = False
        self._entered = False
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
        """The command's pid (also its process group), once started."""
        return None if self._spawned is None else self._spawned.pid

    async def __aenter__(self) -> Self:
        if self._entered:
            raise ExecutorError("a session is entered once")
        self._entered = True
        spawned = await self._open()
        self._send, self._receive = anyio.create_memory_object_stream[SessionChunk](CHUNK_BUFFER)
        self._spawned = spawned
        # The session writes stdin itself; ProcessRun leaves the pipe alone.
        self._stdin, spawned.stdin = spawned.stdin, None
        if self.pty and self._stdin is not None:
            # Our own handle on the terminal, for Resize: the run closes its fds at the end.
            self._master = os.dup(self._stdin)
        try:
            self._tasks = await self._stack.enter_async_context(anyio.create_task_group())
            self._tasks.start_soon(self._main, spawned)
        except BaseException:
            await self._kill(spawned)
            raise
        if self._initial_stdin is not None:
            try:
                await self._write(self._initial_stdin)
            except BaseException as error:
                # No `async with` block will leave: end the process and the tasks here.
                await self.__aexit__(type(error), error, error.__traceback__)
                raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        spawned = self._spawned
        self._receive.close()
        try:
            if spawned is not None:
                # Also after the exit: background processes the command left.
                await run_to_completion(lambda: self._kill(spawned))
        finally:
            await self._stack.aclose()
            self._close_stdin_fd()
            master, self._master = self._master, None
            if master is not None:
                with contextlib.suppress(OSError):
                    os.close(master)
        return None

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> SessionChunk:
        chunk = await self.next_chunk()
        if chunk is None:
            raise StopAsyncIteration
        return chunk

    async def next_chunk(self) -> SessionChunk | None:
        """The next chunk of output; `None` once the output has ended (or after `cancel()`)."""
        self._check_entered()
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
                spawned = self._spawned
                assert spawned is not None
                # The group id is pinned only while the leader is unreaped;
                # this check and the kill run with no await between.
                if spawned.process.returncode is None:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(spawned.pid, int(event.signal))
            case Resize():
                if self._master is None:
                    raise ExecutorError("Resize needs a session started with pty=True")
                size = struct.pack("HHHH", event.rows, event.cols, 0, 0)
                with contextlib.suppress(OSError):
                    fcntl.ioctl(self._master, termios.TIOCSWINSZ, size)
            case _:
                raise ExecutorError(f"not a stdin event: {event!r}")

    async def close_stdin(self) -> None:
        """End the command's input; on a pty, type Ctrl-D. Closing twice is harmless."""
        if self._stdin_closed or self._stdin is None:
            self._stdin_closed = True
            return
        if self.pty:
            with contextlib.suppress(ExecutorError):
                await self._write(_EOF)
        self._stdin_closed = True
        async with self._stdin_lock:
            self._close_stdin_fd()

    def cancel(self) -> None:
        """Kill the command's tree; the output ends and `finalize()` raises `NonZeroExit`."""
        self._check_entered()
        if self._cancelled or self._done.is_set():
            self._cancelled = True
            return
        self._cancelled = True
        self._receive.close()
        spawned = self._spawned
        assert self._tasks is not None
        assert spawned is not None
        self._tasks.start_soon(self._kill, spawned, 0.0)

    async def finalize(self) -> CommandOutput:
        """End stdin, discard unread chunks, wait for the end; return or raise as `exec_cmd`.

        Raises:
            NonZeroExit: The command failed, or was cancelled.
            TimedOut: It ran past its timeout; the tree was killed.

        """
        self._check_entered()
        await self.close_stdin()
        self._receive.close()
        await self._done.wait()
        if self._error is not None:
            raise self._error
        assert self._result is not None
        output = self._result
        if self._cancelled and not output.exit_code:
            raise NonZeroExit("command was cancelled", output)
        return self._finish(output)

    def _check_entered(self) -> None:
        if self._spawned is None:
            raise ExecutorError("enter the session first: async with await ex.start(cmd)")

    async def _main(self, spawned: Spawned) -> None:
        run = ProcessRun(
            spawned,
            stdin=None,
            sink=self._deliver,
            buffer=OutputBuffer(self._output_limit),
            timeout=self._timeout,
            kill_grace=self._kill_grace,
            drain_timeout=self._drain_timeout,
        )
        try:
            self._result = await run.run()
        except Exception as error:
            # TimedOut, or a failure of the run itself: finalize raises it.
            self._error = error
        finally:
            self._send.close()
            self._done.set()

    async def _deliver(self, chunk: Chunk) -> None:
        self._sequence += 1
        item = SessionChunk(chunk, self._sequence, time.monotonic())
        # A reader that stopped (finalize, cancel, exit) no longer holds the output back.
        with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
            await self._send.send(item)

    async def _kill(self, spawned: Spawned, grace: float | None = None) -> None:
        # The group id is pinned only while the leader is unreaped; after that
        # the tree is found by its tag (and parent links) alone, as ProcessRun does.
        group = spawned.pid if spawned.process.returncode is None else None
        await kill_tree(
            spawned.tag,
            grace=self._kill_grace if grace is None else grace,
            group=group,
            since=spawned.started,
        )

    async def _write(self, data: bytes) -> None:
        if self._stdin_closed or self._stdin is None:
            raise ExecutorError("the session's stdin is closed")
        async with self._stdin_lock:
            view = memoryview(data)
            while view:
                fd = self._stdin
                if fd is None:
                    raise ExecutorError("the session's stdin is closed")
                try:
                    written = os.write(fd, view[: 1 << 16])
                except BlockingIOError:
                    await anyio.wait_writable(fd)
                    continue
                except (BrokenPipeError, OSError):
                    # The command stopped reading; what it did not take is its choice.
                    return
                view = view[written:]

    def _close_stdin_fd(self) -> None:
        fd, self._stdin = self._stdin, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)
