"""Streaming tool handles: a started tool as the session reads it, and one made from a function.

`StreamingTool.start` returns a `StreamingToolHandle`: any async resource
with `next_chunk`, `send_stdin`, `close_stdin`, `cancel` and `finalize`. A
process session has those methods, so it is one as it is; `TaskHandle` runs
an async function as one, handing it a `ToolChannel` to send chunks and
`Progress` and to read stdin.

Backpressure: nothing reads ahead. A chunk moves from the tool only when the
reader asks for one, and between the two sits a bounded buffer, so a tool
that produces faster than its reader is suspended rather than buffered
without bound.
"""

from __future__ import annotations

import contextlib
import typing
from collections.abc import AsyncIterator, Awaitable, Callable
from types import TracebackType
from typing import Any, Generic, Literal, Protocol, Self, TypeVar

import anyio
import attrs
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from executor._core.errors import ToolCancelled, ToolStreamError
from executor._core.resource import AsyncChunks, AsyncResource
from executor._core.stdin import StdinEvent
from executor._tools.checks import at_least

ChunkT = TypeVar("ChunkT")
FinalT = TypeVar("FinalT")
ChunkT_co = TypeVar("ChunkT_co", covariant=True)
FinalT_co = TypeVar("FinalT_co", covariant=True)

# How much a tool may run ahead of its reader, in chunks, and how many stdin
# events may wait for a tool: enough to keep both sides busy, small enough that
# memory never depends on the stream's length.
_CHUNK_BUFFER = 16
_STDIN_BUFFER = 16


@attrs.frozen(kw_only=True)
class Progress:
    """How far a tool has come, as it reports between chunks; becomes a PROGRESS event.

    Attributes:
        fraction: From 0 to 1, or `None` when the tool cannot tell.
        payload: A note for people or UIs ("12 of 40 files").
    """

    fraction: float | None = attrs.field(default=None)
    payload: Any = None

    @fraction.validator
    def _check(self, attribute: attrs.Attribute[float | None], value: float | None) -> None:
        if value is None:
            return
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
            raise ValueError(f"progress must be a fraction from 0 to 1, got {value!r}")


@typing.runtime_checkable
class StreamingToolHandle(Protocol[ChunkT_co, FinalT_co]):
    """A started tool, as `StreamingTool.start` returns it; an async resource.

    The seed's four parts map to methods: `chunks` is `next_chunk()`,
    `stdin` is `send_stdin()` and `close_stdin()`, `cancel` is `cancel()`,
    `finalize` is `finalize()`. A process session with these methods is a
    handle as it is. `TaskHandle` makes one from an async function.

    The session enters the handle (`async with`) before anything else and
    leaves it at the end; leaving must end whatever still runs and wait until
    it has ended.
    """

    async def __aenter__(self) -> object:
        """Start, or take over, the running tool."""
        ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
        /,
    ) -> bool | None:
        """End whatever still runs, and wait for it."""
        ...

    async def next_chunk(self) -> ChunkT_co | Progress | None:
        """The next chunk (or a progress report) the tool sent; `None` when it is done.

        Raises the tool's error once its chunks are read, if it failed.
        """
        ...

    async def send_stdin(self, event: StdinEvent, /) -> None:
        """Deliver a stdin event to the tool, waiting while its buffer is full."""
        ...

    async def close_stdin(self) -> None:
        """End the tool's input (EOF); sending more then raises. Closing twice is harmless."""
        ...

    def cancel(self) -> None:
        """Ask the tool to stop; its stream ends and `finalize()` then raises."""
        ...

    async def finalize(self) -> FinalT_co:
        """Close stdin, wait for the tool to finish and return its final value.

        Chunks not read yet are discarded.
        """
        ...


@attrs.define(eq=False)
class ToolChannel(Generic[ChunkT]):
    """The running tool's side of a `TaskHandle`: send chunks and progress, receive stdin.

    `send` waits while the reader is behind by a full buffer: that is how a
    fast tool is held back by a slow agent.
    """

    _chunks: MemoryObjectSendStream[ChunkT | Progress]
    _stdin: MemoryObjectReceiveStream[StdinEvent]

    async def send(self, chunk: ChunkT) -> None:
        """Hand a chunk to the reader, waiting for room in the buffer.

        Raises:
            TypeError: `chunk` is `None`, which marks the end of a stream.
        """
        if chunk is None:
            raise TypeError("a chunk cannot be None: None marks the end of a stream")
        await self._chunks.send(chunk)

    async def progress(self, fraction: float | None = None, payload: Any = None) -> None:
        """Report how far the tool has come (0 to 1, or `None`), with an optional note."""
        await self._chunks.send(Progress(fraction=fraction, payload=payload))

    async def receive_stdin(self) -> StdinEvent | None:
        """The next stdin event; `None` once no more will come (finalize, or no stdin)."""
        try:
            return await self._stdin.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            return None

    def stdin(self) -> AsyncIterator[StdinEvent]:
        """Iterate over the stdin events until no more will come (`async for`)."""
        # An iterator object rather than an async generator: a tool may return
        # from inside its loop, and an abandoned generator would need closing.
        return _StdinEvents(self)


@attrs.define(eq=False)
class _StdinEvents(AsyncChunks[StdinEvent]):
    _channel: ToolChannel[Any]

    async def next_chunk(self) -> StdinEvent | None:
        return await self._channel.receive_stdin()


_RunState = Literal["new", "running", "done", "failed", "cancelled"]


@attrs.define(eq=False)
class TaskHandle(AsyncResource, Generic[ChunkT, FinalT]):
    """A handle that runs `run(channel)` in a task of its own, as a streaming tool.

    The function sends chunks with `await channel.send(chunk)`, may report
    `await channel.progress(...)`, reads stdin with `channel.receive_stdin()`,
    and returns the final value. If it raises, the chunks it sent are still
    read first, then `next_chunk()` and `finalize()` raise its error.
    `cancel()` cancels it at its next checkpoint; its `finally` blocks run
    before the handle's `async with` block is left.

    Args:
        run: The async function that is the tool.
        stdin: Whether the tool takes stdin; if not, `send_stdin` raises
            `ToolStreamError`.
        chunk_buffer: How many chunks the tool may run ahead of its reader.
        stdin_buffer: How many stdin events may wait for the tool.
    """

    _run: Callable[[ToolChannel[ChunkT]], Awaitable[FinalT]]
    stdin: bool = attrs.field(default=False, kw_only=True)
    chunk_buffer: int = attrs.field(default=_CHUNK_BUFFER, kw_only=True, validator=at_least(0))
    stdin_buffer: int = attrs.field(default=_STDIN_BUFFER, kw_only=True, validator=at_least(0))
    _state: _RunState = attrs.field(default="new", init=False, repr=False)
    _cancel_requested: bool = attrs.field(default=False, init=False, repr=False)
    _scope: anyio.CancelScope | None = attrs.field(default=None, init=False, repr=False)
    _stack: contextlib.AsyncExitStack | None = attrs.field(default=None, init=False, repr=False)
    _done: anyio.Event | None = attrs.field(default=None, init=False, repr=False)
    _final: Any = attrs.field(default=None, init=False, repr=False)
    _error: Exception | None = attrs.field(default=None, init=False, repr=False)
    _chunk_send: MemoryObjectSendStream[ChunkT | Progress] = attrs.field(init=False, repr=False)
    _chunk_receive: MemoryObjectReceiveStream[ChunkT | Progress] = attrs.field(
        init=False, repr=False
    )
    _stdin_send: MemoryObjectSendStream[StdinEvent] = attrs.field(init=False, repr=False)
    _stdin_receive: MemoryObjectReceiveStream[StdinEvent] = attrs.field(init=False, repr=False)

    def __attrs_post_init__(self) -> None:
        if not callable(self._run):
            raise TypeError(f"TaskHandle needs an async function, got {self._run!r}")

    async def __aenter__(self) -> Self:
        if self._state != "new":
            raise RuntimeError("a TaskHandle runs once")
        # Made here, not at construction, so that a handle never entered holds
        # nothing that needs closing.
        self._chunk_send, self._chunk_receive = anyio.create_memory_object_stream[
            ChunkT | Progress
        ](self.chunk_buffer)
        self._stdin_send, self._stdin_receive = anyio.create_memory_object_stream[StdinEvent](
            self.stdin_buffer
        )
        if not self.stdin:
            self._stdin_send.close()
        # Scopes and events belong to a running event loop, so they are made here.
        self._scope = anyio.CancelScope()
        self._done = anyio.Event()
        if self._cancel_requested:
            self._scope.cancel()
        stack = contextlib.AsyncExitStack()
        task_group = await stack.enter_async_context(anyio.create_task_group())
        self._stack = stack
        self._state = "running"
        task_group.start_soon(
            self._main, ToolChannel[ChunkT](self._chunk_send, self._stdin_receive)
        )
        return self

    async def _main(self, channel: ToolChannel[ChunkT]) -> None:
        assert self._scope is not None
        assert self._done is not None
        try:
            with self._scope:
                self._final = await self._run(channel)
                self._state = "done"
        except Exception as exc:
            # Kept for the reader instead of thrown into the task group, which
            # would cancel the agent's own task along with the tool.
            self._error = exc
            self._state = "failed"
        finally:
            if self._state == "running":
                # Our scope swallowed a cancel(), or an outer cancellation is on its way.
                self._state = "cancelled"
            self._chunk_send.close()
            self._stdin_receive.close()
            self._done.set()

    def _check_started(self) -> anyio.Event:
        if self._done is None:
            raise RuntimeError("enter the handle (async with) before using it")
        return self._done

    async def next_chunk(self) -> ChunkT | Progress | None:
        """The next chunk or progress report; `None` when the tool is done.

        Raises:
            Exception: The tool's own error, once the chunks it sent are read.
        """
        done = self._check_started()
        try:
            return await self._chunk_receive.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            pass
        await done.wait()
        if self._error is not None:
            raise self._error
        return None

    async def send_stdin(self, event: StdinEvent, /) -> None:
        """Deliver `event` to the tool, waiting while its stdin buffer is full.

        Raises:
            ToolStreamError: The tool takes no stdin, or has ended.
        """
        self._check_started()
        if not self.stdin:
            raise ToolStreamError("this tool takes no stdin")
        try:
            await self._stdin_send.send(event)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            raise ToolStreamError(
                "the tool no longer reads stdin; the event was not delivered"
            ) from None

    async def close_stdin(self) -> None:
        """End the tool's stdin: `receive_stdin()` returns `None` once it has read the rest."""
        self._check_started()
        self._stdin_send.close()

    def cancel(self) -> None:
        """Cancel the tool at its next checkpoint (also before it started)."""
        self._cancel_requested = True
        if self._scope is not None:
            self._scope.cancel()

    async def finalize(self) -> FinalT:
        """Close stdin, discard unread chunks, wait for the tool and return its value.

        Raises:
            ToolCancelled: The tool was cancelled.
            Exception: The tool's own error.
        """
        done = self._check_started()
        self._stdin_send.close()
        with contextlib.suppress(anyio.ClosedResourceError):
            async for _ in self._chunk_receive:
                pass
        await done.wait()
        if self._state == "done":
            return typing.cast(FinalT, self._final)
        if self._error is not None:
            raise self._error
        raise ToolCancelled("the tool was cancelled before it finished")

    async def aclose(self) -> None:
        """Cancel the tool if it still runs and wait until it has stopped."""
        stack, self._stack = self._stack, None
        if stack is None:
            return
        self.cancel()
        # No shield here: a task group must be left from its own scope, and leaving
        # it waits for the tool's task anyway, cancelled or not, so the tool's
        # finally blocks have run before we return.
        try:
            await stack.aclose()
        finally:
            self._chunk_receive.close()
            self._stdin_send.close()
