"""Streaming tools: typed tools whose output arrives in chunks, with stdin and context policies.

```python
class Tail(StreamingTool[TailInput, str, TailSummary]):
    '''Follows a log and streams its new lines.'''

    name = "tail"
    policy = Window(max_chunks=200)

    async def start(self, input: TailInput) -> StreamingToolHandle[str, TailSummary]:
        async def run(channel: ToolChannel[str]) -> TailSummary:
            count = 0
            async for line in follow(input.path):
                await channel.send(line)
                count += 1
            return TailSummary(lines=count)

        return TaskHandle(run)


async with StreamingToolSession(Tail(), TailInput(path="app.log")) as session:
    while (line := await session.next_chunk()) is not None:
        if "ERROR" in line:
            session.cancel()
    print(session.context_window().estimated_tokens)
```

How the parts fit:

- A `StreamingTool` declares its name, description and input, chunk and
  final types (JSON schema for each), a default `policy`, whether it is
  `idempotent` and the capability it needs. `start(input)` returns a
  `StreamingToolHandle`: any async resource with `next_chunk`, `send_stdin`,
  `cancel` and `finalize`. `TaskHandle` runs an async function as one; a
  process session has the same methods, so it is one as it is.
- A `StreamingToolSession` starts the tool when its `async with` block is
  entered and ends whatever still runs when the block is left.
  `next_chunk()` gives your code every chunk, in order. The policy decides
  what the model's context holds of the stream: `context_window()` measures
  it and `finalize()` returns it with the tool's final value.

Policies (what the context holds):

- `Buffer()`: every chunk. Memory grows with the stream: for short tools.
- `Window(max_chunks=N)`: the last N chunks; older ones are dropped, so the
  session's memory stays bounded however long the stream runs.
- `Summarise(chunk_threshold=K, max_summary_length=L, summarizer=f)`: after
  every K chunks, the summary so far and those chunks are replaced by one
  summary of at most L characters, made by `f` (any async text-to-text
  callable, such as an LLM client). When `f` fails, times out or is absent,
  the text is truncated instead, keeping its head and its tail. `finalize()`
  makes one more pass when what is held is longer than L.
- `Manual(approvers=[...], preview_length=P, timeout=T, timeout_action=...)`:
  as the seed says, every chunk `next_chunk()` would return is first shown
  to the approvers (its first P characters); it is returned only when all
  of them approve. A denial raises `PolicyDenied` and drops that chunk; no
  answer within T seconds denies or allows per `timeout_action`. The final
  value is approved the same way in `finalize()`. Chunks that `finalize()`
  reads without returning them are never shown, so they stay out of the
  context.

Idempotent tools (`idempotent = True`) can be run under a journal:
`StreamingToolSession(tool, input, journal=journal, key=key)` records the
key before the tool starts and its final value when it finishes; a session
with a key that has a final returns it without starting the tool, and one
whose run was interrupted raises `RunInterrupted` (or runs it again, with
`on_interrupted="rerun"`).

Backpressure: nothing reads ahead. A chunk moves from the tool only when
`next_chunk()` or `finalize()` asks for one, and between the two sits a
bounded buffer, so a tool that produces faster than its reader is suspended
rather than buffered without bound.
"""

from __future__ import annotations

import abc
import contextlib
import dataclasses
import enum
import inspect
import json
import logging
import typing
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from types import TracebackType
from typing import Any, ClassVar, Generic, Literal, Protocol, Self, TypeAlias, TypeVar

import anyio
import attrs
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from executor._core.errors import CommandError, InvalidArgument, PolicyDenied
from executor._core.output import CommandOutput, Stderr, Stdout
from executor._core.stdin import Bytes, Resize, Signal, StdinEvent, Text, UnixSignal
from executor._journal import IdempotencyKey, Journal, OnInterrupted, optional_key
from executor._policies.verdict import Verdict
from executor._tools.events import EventSequencer, ToolCancelled, ToolEvent, ToolStreamError
from executor._tools.replay import ReplayHandle, ToolRecorder
from executor._tools.tools import convert, json_schema

__all__ = [
    "Buffer",
    "Bytes",
    "ContextWindow",
    "Manual",
    "OutputApprovalRequest",
    "OutputApprover",
    "Progress",
    "Resize",
    "Signal",
    "StdinEvent",
    "StreamingPolicy",
    "StreamingTool",
    "StreamingToolHandle",
    "StreamingToolResult",
    "StreamingToolSession",
    "Summarise",
    "Summarizer",
    "TaskHandle",
    "Text",
    "TimeoutAction",
    "ToolChannel",
    "UnixSignal",
    "Window",
]

_logger = logging.getLogger("executor")

InputT = TypeVar("InputT")
ChunkT = TypeVar("ChunkT")
FinalT = TypeVar("FinalT")
ChunkT_co = TypeVar("ChunkT_co", covariant=True)
FinalT_co = TypeVar("FinalT_co", covariant=True)

# How much a tool may run ahead of its reader, in chunks, and how many stdin
# events may wait for a tool: enough to keep both sides busy, small enough that
# memory never depends on the stream's length.
_CHUNK_BUFFER = 16
_STDIN_BUFFER = 16


# --- stdin events ---------------------------------------------------------------------


_STDIN_EVENTS = (Text, Bytes, Signal, Resize)


# --- policies -------------------------------------------------------------------------


def _at_least(minimum: int) -> Callable[[object, attrs.Attribute[int], int], None]:
    def check(instance: object, attribute: attrs.Attribute[int], value: int) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise ValueError(f"{attribute.name} must be an integer >= {minimum}, got {value!r}")

    return check


def _positive_or_none(instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ValueError(f"{attribute.name} must be a positive number of seconds or None")


@attrs.frozen(kw_only=True)
class Buffer:
    """Keep every chunk for the context: the whole output, injected as one.

    The session's memory grows with the stream, so this suits tools whose
    output is short; use `Window` or `Summarise` for long or endless streams.
    """


@attrs.frozen(kw_only=True)
class Window:
    """Keep only the last `max_chunks` chunks for the context.

    Older chunks are dropped as new ones arrive, so the session holds at most
    `max_chunks` chunks however long the stream runs; `finalize()` returns the
    final value with the window.

    Args:
        max_chunks: How many of the latest chunks to keep (at least 1).
    """

    max_chunks: int = attrs.field(validator=_at_least(1))


class Summarizer(Protocol):
    """Condenses text: an async callable from text to shorter text (an LLM client, say)."""

    def __call__(self, text: str, /) -> Awaitable[str]:
        """Return a summary of `text`."""
        ...


@attrs.frozen(kw_only=True)
class Summarise:
    """Replace the held output by a summary every `chunk_threshold` chunks.

    After every `chunk_threshold` chunks, the text held so far (the previous
    summary, then the new chunks) goes to `summarizer`, and its answer, cut
    to `max_summary_length` characters if longer, replaces it. When the
    summarizer raises, runs past `timeout`, returns something other than a
    string, or is `None`, the text is truncated instead: its head and its
    tail are kept, with a note of how much was left out between them.
    `finalize()` makes a last pass when what is held is longer than
    `max_summary_length`.

    Args:
        chunk_threshold: How many chunks to gather before summarising (at least 1).
        max_summary_length: The longest summary kept, in characters (at least 1).
        summarizer: The async text-to-text callable; `None` always truncates.
        timeout: Seconds to wait for the summarizer; `None` waits as long as it takes.
    """

    chunk_threshold: int = attrs.field(validator=_at_least(1))
    max_summary_length: int = attrs.field(validator=_at_least(1))
    summarizer: Summarizer | None = None
    timeout: float | None = attrs.field(default=60.0, validator=_positive_or_none)


class TimeoutAction(enum.Enum):
    """What `Manual` does when no approval comes in time."""

    DENY = "deny"
    """Withhold the output and raise `PolicyDenied` (the safe default)."""
    ALLOW = "allow"
    """Let the output through."""


@attrs.frozen(kw_only=True)
class OutputApprovalRequest:
    """What a `Manual` approver is asked: may this output enter the model's context?

    Attributes:
        tool: The tool's name.
        call_id: The tool call's id, when the session was given one.
        kind: `"chunk"` for a chunk `next_chunk()` would return, `"final"` for
            the final value in `finalize()`.
        number: The chunk's place in the stream (1 for the first chunk the
            tool sent); `None` for the final value.
        preview: The first `preview_length` characters of its text.
        length: The length of its whole text, in characters.
    """

    tool: str
    call_id: str | None
    kind: Literal["chunk", "final"]
    number: int | None
    preview: str
    length: int

    @property
    def truncated(self) -> bool:
        """Whether the preview leaves part of the text out."""
        return self.length > len(self.preview)


class OutputApprover(Protocol):
    """Decides whether output may enter the context: True/False, or a `Verdict` with a reason."""

    def __call__(self, request: OutputApprovalRequest, /) -> Awaitable[bool | Verdict]:
        """Answer the request."""
        ...


def _approvers(value: Iterable[OutputApprover]) -> tuple[OutputApprover, ...]:
    approvers = tuple(value)
    if not approvers:
        # No approver could ever say yes; refuse the policy now, not every chunk later.
        raise ValueError("Manual needs at least one approver")
    for approver in approvers:
        if not callable(approver):
            raise TypeError(f"an approver must be an async callable, got {approver!r}")
    return approvers


@attrs.frozen(kw_only=True)
class Manual:
    """Release output only when every approver agrees, after seeing a preview.

    Each chunk `next_chunk()` would return, and the final value in
    `finalize()`, is shown to all approvers at once as an
    `OutputApprovalRequest`. It is released when all of them approve. The
    first denial raises `PolicyDenied` (with the approver's reason) and the
    chunk is dropped; the session goes on, so the agent may read the next one
    or cancel. An approver's own exception propagates.

    Args:
        approvers: Async callables asked about each release (at least one).
        preview_length: How many characters of the text the request shows.
        timeout: Seconds to wait for all answers; `None` waits as long as it takes.
        timeout_action: `TimeoutAction.DENY` (raise `PolicyDenied`, the
            default) or `TimeoutAction.ALLOW` when answers are missing in time.
    """

    approvers: tuple[OutputApprover, ...] = attrs.field(converter=_approvers)
    preview_length: int = attrs.field(default=500, validator=_at_least(0))
    timeout: float | None = attrs.field(default=300.0, validator=_positive_or_none)
    timeout_action: TimeoutAction = attrs.field(default=TimeoutAction.DENY, converter=TimeoutAction)


StreamingPolicy: TypeAlias = Buffer | Window | Summarise | Manual
"""How a session keeps a tool's output for the model's context."""

_POLICIES = (Buffer, Window, Summarise, Manual)


# --- the tool, its handle and the running side ----------------------------------------


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
class _StdinEvents:
    _channel: ToolChannel[Any]

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> StdinEvent:
        event = await self._channel.receive_stdin()
        if event is None:
            raise StopAsyncIteration
        return event


_RunState = Literal["new", "running", "done", "failed", "cancelled"]


@attrs.define(eq=False)
class TaskHandle(Generic[ChunkT, FinalT]):
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
    chunk_buffer: int = attrs.field(default=_CHUNK_BUFFER, kw_only=True, validator=_at_least(0))
    stdin_buffer: int = attrs.field(default=_STDIN_BUFFER, kw_only=True, validator=_at_least(0))
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

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

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


class StreamingTool(abc.ABC, Generic[InputT, ChunkT, FinalT]):
    """A tool whose output streams in typed chunks before a typed final value.

    Subclass it with the three types, `StreamingTool[Input, Chunk, Final]`,
    set `name` (and `description`, or write a docstring), and implement
    `start`. The types come from the subscript unless set as `input_type`,
    `chunk_type` and `final_type`; each must be one `json_schema` can
    describe (str, int, lists, dicts, Literal, Enum, pydantic models...).

    Attributes:
        name: The name a model calls it by.
        description: What it does, for the model; the class docstring by default.
        policy: How a session keeps its output for the context (`Buffer()`
            unless overridden here or per session).
        idempotent: Whether the tool opts into recovery from a journal: a
            session given a `journal` records its final value under an
            idempotency key and answers a repeat with it.
        required_capability: The capability a runtime must grant before
            running it (e.g. `"process"`, `"network"`), or `None`. Declared
            here for the runtime to check; the session does not enforce it.
    """

    name: ClassVar[str]
    description: ClassVar[str]
    input_type: ClassVar[Any]
    chunk_type: ClassVar[Any]
    final_type: ClassVar[Any]
    policy: ClassVar[StreamingPolicy] = Buffer()
    idempotent: ClassVar[bool] = False
    required_capability: ClassVar[str | None] = None
    _description_from_doc: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for base in cls.__dict__.get("__orig_bases__", ()):
            if typing.get_origin(base) is not StreamingTool:
                continue
            names = ("input_type", "chunk_type", "final_type")
            for attribute, argument in zip(names, typing.get_args(base), strict=True):
                if attribute not in cls.__dict__ and not isinstance(argument, TypeVar):
                    setattr(cls, attribute, argument)
        own_doc = cls.__dict__.get("__doc__")
        if "description" in cls.__dict__:
            cls._description_from_doc = False
        elif own_doc and (getattr(cls, "description", None) is None or cls._description_from_doc):
            # A docstring describes its own class: a subclass's replaces its parent's,
            # but never a description set explicitly.
            cls.description = inspect.cleandoc(own_doc)
            cls._description_from_doc = True
        policy = cls.__dict__.get("policy")
        if policy is not None and not isinstance(policy, _POLICIES):
            raise TypeError(f"{cls.__name__}.policy must be a streaming policy, got {policy!r}")

    @abc.abstractmethod
    async def start(self, input: InputT) -> StreamingToolHandle[ChunkT, FinalT]:
        """Start the tool on `input` and return its handle, not yet entered.

        Any async code can be behind the handle: `TaskHandle(run)` for a
        Python function, or a process session for a command.
        """

    def _types(self) -> tuple[Any, Any, Any]:
        missing = [
            attribute
            for attribute in ("input_type", "chunk_type", "final_type")
            if not hasattr(self, attribute)
        ]
        if missing:
            raise TypeError(
                f"{type(self).__name__} does not declare {', '.join(missing)}: subclass "
                "StreamingTool[Input, Chunk, Final] or set them as class attributes"
            )
        return self.input_type, self.chunk_type, self.final_type

    @property
    def input_schema(self) -> dict[str, Any]:
        """The JSON schema of the input."""
        return json_schema(self._types()[0])

    @property
    def chunk_schema(self) -> dict[str, Any]:
        """The JSON schema of each chunk."""
        return json_schema(self._types()[1])

    @property
    def final_schema(self) -> dict[str, Any]:
        """The JSON schema of the final value."""
        return json_schema(self._types()[2])

    @property
    def spec(self) -> dict[str, Any]:
        """The tool's spec: name, description and the three schemas.

        `parameters` is the input's schema, in the place function-calling
        APIs take it (they want an object: use a model or a dict type).

        Raises:
            TypeError: The name is missing, or a type cannot be described.
        """
        _check_tool(self)
        return {
            "name": self.name,
            "description": getattr(self, "description", ""),
            "parameters": self.input_schema,
            "chunk_schema": self.chunk_schema,
            "final_schema": self.final_schema,
        }

    def parse_input(self, arguments: str | Mapping[str, Any] | Any) -> InputT:
        """Parse a model's arguments (JSON text or a decoded value) into the input type.

        Raises:
            InvalidArgument: A message for the model saying what was wrong.
        """
        raw: Any = arguments
        if isinstance(arguments, str) and self._types()[0] is not str:
            try:
                raw = json.loads(arguments)
            except json.JSONDecodeError as error:
                raise InvalidArgument(arguments, f"input must be JSON: {error}") from None
        return typing.cast(InputT, convert(raw, self._types()[0]))

    def render(self, value: object) -> str:
        """The text of a chunk or final value, as the model's context holds it.

        Strings are themselves, bytes and `Stdout`/`Stderr` are decoded as
        UTF-8, a `CommandOutput` is its `text()`, `None` is empty, and other
        values are JSON. Override it to show a type differently; the policies
        measure, summarise and preview this text.
        """
        return _render(value)


def _render(value: object) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).decode("utf-8", "replace")
    if isinstance(value, Stdout | Stderr):
        return value.data.decode("utf-8", "replace")
    if isinstance(value, CommandOutput):
        return value.text()
    if value is None:
        return ""
    dump = getattr(value, "model_dump_json", None)
    if callable(dump) and not isinstance(value, type):
        return str(dump())
    data: Any = value
    if attrs.has(type(value)):
        data = attrs.asdict(value)  # type: ignore[arg-type]
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        data = dataclasses.asdict(value)
    elif isinstance(value, enum.Enum):
        data = value.value
    try:
        return json.dumps(data, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return str(value)


def _check_tool(tool: object) -> None:
    if not isinstance(tool, StreamingTool):
        raise TypeError(f"expected a StreamingTool, got {type(tool).__name__}")
    name = getattr(tool, "name", None)
    if not isinstance(name, str) or not name:
        raise TypeError(f"{type(tool).__name__} needs a name: a non-empty string")


# --- the session ----------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class ContextWindow:
    """What a session holds for the model's context, and what it read to get there.

    Sizes are of the text the tool's `render` gives: the summary, the chunks
    held, and (after `finalize()`) the final value.

    Attributes:
        chunks: Chunks held now.
        characters: Characters of the text held.
        utf8_bytes: Its size in UTF-8.
        estimated_tokens: About `utf8_bytes / 4`, rounded up, as models
            tokenise English and code.
        received: Chunks read from the tool.
        dropped: Chunks read and not held: slid out of a window, denied, or
            read by `finalize()` under `Manual` without being released.
        summarised: Chunks folded into the summary.
        summaries: Summary passes made.
        truncations: Passes that truncated instead of summarising (no
            summarizer, or it failed or timed out).
    """

    chunks: int = 0
    characters: int = 0
    utf8_bytes: int = 0
    estimated_tokens: int = 0
    received: int = 0
    dropped: int = 0
    summarised: int = 0
    summaries: int = 0
    truncations: int = 0


@attrs.frozen(kw_only=True)
class StreamingToolResult(Generic[ChunkT, FinalT]):
    """What `finalize()` returns: the tool's final value and what the context holds of its stream.

    Attributes:
        final: The tool's final value.
        chunks: The chunks the policy holds (all of them for `Buffer`, the
            last N for `Window`, those since the last summary for
            `Summarise`, the approved ones for `Manual`).
        summary: The summary of the rest (`Summarise`), or `None`.
        context: The context window at the end, final value included.
    """

    final: FinalT
    chunks: tuple[ChunkT, ...]
    summary: str | None
    context: ContextWindow


def _size(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def _join(texts: Iterable[str]) -> str:
    # Chunks are often lines that end in a newline already; add one only between
    # pieces that lack it, so a summarizer sees the output as it was printed.
    parts: list[str] = []
    for text in texts:
        if parts and not parts[-1].endswith("\n"):
            parts.append("\n")
        parts.append(text)
    return "".join(parts)


def _truncate(text: str, limit: int) -> str:
    """`text` cut to at most `limit` characters, keeping its head and its tail."""
    if len(text) <= limit:
        return text
    # The note's width is that of the largest count it could show, so the result
    # never passes the limit.
    note_width = len(f"\n[... {len(text)} characters left out ...]\n")
    room = limit - note_width
    if room < 2:
        return text[:limit]
    head, tail = room - room // 2, room // 2
    left_out = len(text) - head - tail
    return f"{text[:head]}\n[... {left_out} characters left out ...]\n{text[len(text) - tail :]}"


@attrs.define(eq=False)
class _Held(Generic[ChunkT]):
    """The chunks and summary held for the context, with their sizes kept current."""

    chunks: deque[tuple[ChunkT, int, int]] = attrs.field(factory=deque)
    summary: str | None = None
    final_text: str | None = None
    chunk_characters: int = 0
    chunk_bytes: int = 0
    received: int = 0
    dropped: int = 0
    summarised: int = 0
    summaries: int = 0
    truncations: int = 0

    def hold(self, chunk: ChunkT, text: str) -> None:
        size = (len(text), _size(text))
        self.chunks.append((chunk, *size))
        self.chunk_characters += size[0]
        self.chunk_bytes += size[1]

    def drop_oldest(self) -> None:
        _, characters, size = self.chunks.popleft()
        self.chunk_characters -= characters
        self.chunk_bytes -= size
        self.dropped += 1

    def replace_with_summary(self, summary: str) -> None:
        self.summarised += len(self.chunks)
        self.chunks.clear()
        self.chunk_characters = self.chunk_bytes = 0
        self.summary = summary

    def window(self) -> ContextWindow:
        extras = [text for text in (self.summary, self.final_text) if text is not None]
        characters = self.chunk_characters + sum(len(text) for text in extras)
        size = self.chunk_bytes + sum(_size(text) for text in extras)
        return ContextWindow(
            chunks=len(self.chunks),
            characters=characters,
            utf8_bytes=size,
            estimated_tokens=(size + 3) // 4,
            received=self.received,
            dropped=self.dropped,
            summarised=self.summarised,
            summaries=self.summaries,
            truncations=self.truncations,
        )


def _tool_policy(tool: object) -> StreamingPolicy:
    _check_tool(tool)
    return typing.cast(StreamingTool[Any, Any, Any], tool).policy


_SessionState = Literal["new", "open", "ended", "failed", "cancelled", "closed"]


def _translate(exc: Exception, tool: str) -> Exception:
    """Our errors as they are; a tool's own exception as a `ToolStreamError` (one boundary)."""
    if isinstance(exc, CommandError | InvalidArgument):
        return exc
    error = ToolStreamError(f"the tool {tool} failed: {type(exc).__name__}: {exc}")
    error.__cause__ = exc
    return error


@attrs.define(eq=False)
class StreamingToolSession(Generic[InputT, ChunkT, FinalT]):
    """A running streaming tool, read through a policy that decides what the context holds.

    ```python
    async with StreamingToolSession(tool, input, policy=Window(max_chunks=50)) as session:
        async for chunk in session:
            ...
        result = await session.finalize()
    ```

    Entering the block starts the tool; leaving it cancels whatever still
    runs and waits for it to stop, also when the block is left by an error
    or a cancellation. `next_chunk()` gives every chunk (under `Manual`,
    every approved chunk) in order; `context_window()` and `finalize()`
    report what the policy holds for the model's context.

    Args:
        tool: The tool to run.
        input: Its input, already of its input type (`tool.parse_input`
            turns a model's JSON into one).
        policy: Overrides the tool's own `policy`.
        call_id: The id of the tool call, passed to approvers.
        journal: Records the run of an idempotent tool (`SqliteJournal`):
            the key before it starts, the final value when it ends. A key
            with a final is answered from it, without starting the tool.
        key: The run's `IdempotencyKey` (or its text); a new one when
            omitted. Keep it to recover the run after a crash.
        on_interrupted: For a key whose run started and never finished:
            `"fail"` raises `RunInterrupted`, `"rerun"` runs it again.
    """

    tool: StreamingTool[InputT, ChunkT, FinalT]
    input: InputT
    policy: StreamingPolicy = attrs.field(
        kw_only=True,
        default=attrs.Factory(lambda self: _tool_policy(self.tool), takes_self=True),
    )
    call_id: str | None = attrs.field(default=None, kw_only=True)
    journal: Journal | None = attrs.field(default=None, kw_only=True)
    key: IdempotencyKey | None = attrs.field(
        default=None,
        kw_only=True,
        converter=optional_key,
    )
    on_interrupted: OnInterrupted = attrs.field(default="fail", kw_only=True)
    _recorder: ToolRecorder | None = attrs.field(default=None, init=False, repr=False)
    _handle: StreamingToolHandle[ChunkT, FinalT] | None = attrs.field(
        default=None, init=False, repr=False
    )
    _state: _SessionState = attrs.field(default="new", init=False, repr=False)
    _lock: anyio.Lock | None = attrs.field(default=None, init=False, repr=False)
    _held: _Held[ChunkT] = attrs.field(factory=_Held, init=False, repr=False)
    _outcome: StreamingToolResult[ChunkT, FinalT] | Exception | None = attrs.field(
        default=None, init=False, repr=False
    )

    def __attrs_post_init__(self) -> None:
        _check_tool(self.tool)
        if not isinstance(self.policy, _POLICIES):
            raise TypeError(f"policy must be a streaming policy, got {self.policy!r}")
        if self.on_interrupted not in ("fail", "rerun"):
            raise ValueError(
                f"on_interrupted must be 'fail' or 'rerun', got {self.on_interrupted!r}"
            )
        if self.journal is not None:
            if not self.tool.idempotent:
                raise ValueError(
                    f"{type(self.tool).__name__} is not idempotent, so a journal cannot "
                    "answer for it: set idempotent = True on the tool if a repeat may be "
                    "answered with its recorded final value"
                )
            if self.key is None:
                self.key = IdempotencyKey.new()
            self._recorder = ToolRecorder(
                journal=self.journal,
                key=self.key,
                name=self.tool.name,
                input=self.input,
                final_type=self.tool._types()[2],
                on_interrupted=self.on_interrupted,
            )

    @property
    def name(self) -> str:
        """The tool's name."""
        return self.tool.name

    @property
    def idempotent(self) -> bool:
        """Whether the tool declared itself idempotent (recoverable from a journal)."""
        return bool(self.tool.idempotent)

    @property
    def recovered(self) -> bool:
        """Whether the result comes from the journal: the tool did not run in this session."""
        recorder = self._recorder
        return recorder is not None and recorder.claim is None and recorder.settled

    async def __aenter__(self) -> Self:
        if self._state != "new":
            raise RuntimeError("a StreamingToolSession runs once")
        recorder = self._recorder
        stored = None
        if recorder is not None:
            try:
                stored = await recorder.begin()
            except BaseException:
                self._state = "closed"
                raise
        try:
            if stored is not None and recorder is not None:
                handle = typing.cast(Any, ReplayHandle(recorder, stored))
            else:
                handle = await self.tool.start(self.input)
        except BaseException as exc:
            self._state = "closed"
            if recorder is not None:
                # A start() that failed started nothing; one cancelled part-way
                # may have (a process session spawns in start()): interrupted.
                await recorder.abandon(ran=not isinstance(exc, Exception))
            if not isinstance(exc, Exception):
                raise
            translated = _translate(exc, self.name)
            if translated is exc:
                raise
            raise translated from exc
        if not isinstance(handle, StreamingToolHandle):
            self._state = "closed"
            if recorder is not None:
                await recorder.abandon(ran=False)
            raise TypeError(
                f"{type(self.tool).__name__}.start() must return a StreamingToolHandle, "
                f"got {type(handle).__name__}"
            )
        try:
            await handle.__aenter__()
        except BaseException:
            self._state = "closed"
            if recorder is not None:
                await recorder.abandon()
            raise
        self._handle = handle
        # The reader's receive already yields to the event loop once per chunk;
        # an uncontended lock need not make it twice.
        self._lock = anyio.Lock(fast_acquire=True)
        self._state = "open"
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        handle, self._handle = self._handle, None
        if handle is None:
            return
        if self._state == "open" or not isinstance(self._outcome, StreamingToolResult):
            # Not finished: what is left must not outlive the block.
            handle.cancel()
        self._state = "closed"
        # Not wrapped in a shield: a handle may hold a task group, which must be
        # left from its own scope. Each handle shields its own cleanup (a process
        # is reaped under a shield); a task group waits for its tasks regardless.
        try:
            await handle.__aexit__(exc_type, exc, tb)
        finally:
            if self._recorder is not None:
                # Ended without a final (cancelled, or left early): interrupted.
                await self._recorder.abandon()

    def _running(self) -> StreamingToolHandle[ChunkT, FinalT]:
        if self._handle is None:
            if self._state == "new":
                raise RuntimeError("enter the session first: async with StreamingToolSession(...)")
            raise RuntimeError("the session is closed")
        return self._handle

    def _guard(self) -> anyio.Lock:
        # One reader at a time: the policy's state changes with every chunk.
        self._running()
        assert self._lock is not None
        return self._lock

    # --- reading --------------------------------------------------------------------

    async def _read(self) -> ChunkT | Progress | None:
        """The next item from the tool, before any policy; `None` at the end."""
        handle = self._running()
        if self._state != "open":
            return None
        try:
            item = await handle.next_chunk()
        except Exception as exc:
            self._state = "failed"
            translated = _translate(exc, self.name)
            if self._recorder is not None:
                # The tool ended with this error: it is its outcome.
                await self._recorder.failed(translated)
            if translated is exc:
                raise
            raise translated from exc
        if self._cancel_called():
            # cancel() came while we waited: what the tool sent after it is not read.
            return None
        if item is None:
            self._state = "ended"
            return None
        return item

    def _cancel_called(self) -> bool:
        return self._state == "cancelled"

    async def _next_item(self) -> ChunkT | Progress | None:
        async with self._guard():
            item = await self._read()
            if item is None or isinstance(item, Progress):
                return item
            await self._release(item)
            return item

    async def _release(self, chunk: ChunkT) -> None:
        """Approve (`Manual`) and hold a chunk the caller is about to get."""
        held = self._held
        held.received += 1
        text = self.tool.render(chunk)
        if isinstance(self.policy, Manual):
            try:
                await self._approve(self.policy, "chunk", held.received, text)
            except PolicyDenied:
                held.dropped += 1
                raise
        await self._hold(chunk, text)

    async def _hold(self, chunk: ChunkT, text: str) -> None:
        held = self._held
        policy = self.policy
        if isinstance(policy, Window) and len(held.chunks) >= policy.max_chunks:
            held.drop_oldest()
        held.hold(chunk, text)
        if isinstance(policy, Summarise) and len(held.chunks) >= policy.chunk_threshold:
            await self._summarise(policy)

    async def next_chunk(self) -> ChunkT | None:
        """The next chunk, after the policy has taken it in; `None` at the end of the stream.

        Under `Summarise` this may wait for the summarizer; under `Manual`
        it waits for the approvers. After `cancel()` it returns `None`.

        Raises:
            PolicyDenied: `Manual` withheld this chunk (the next call reads on).
            ToolStreamError: The tool failed (its error is the cause).
            CommandError: The tool failed with one of the executor's errors.
        """
        while True:
            item = await self._next_item()
            if not isinstance(item, Progress):
                return item

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> ChunkT:
        chunk = await self.next_chunk()
        if chunk is None:
            raise StopAsyncIteration
        return chunk

    async def send_stdin(self, event: StdinEvent) -> None:
        """Send a stdin event to the tool, waiting while its input buffer is full.

        Raises:
            TypeError: `event` is not a `Text`, `Bytes`, `Signal` or `Resize`.
            ToolStreamError: The tool takes no stdin, or has ended.
        """
        if not isinstance(event, _STDIN_EVENTS):
            raise TypeError(f"expected Text, Bytes, Signal or Resize, got {type(event).__name__}")
        handle = self._running()
        try:
            await handle.send_stdin(event)
        except Exception as exc:
            translated = _translate(exc, self.name)
            if translated is exc:
                raise
            raise translated from exc

    async def close_stdin(self) -> None:
        """End the tool's input (EOF, as Ctrl+D); its output can still be read.

        `finalize()` does this first, so a tool that reads its input to the
        end can finish.
        """
        await self._running().close_stdin()

    def cancel(self) -> None:
        """Cancel the tool: the stream ends (`next_chunk()` returns `None`), `finalize()` raises."""
        handle = self._running()
        if self._state == "open":
            self._state = "cancelled"
        handle.cancel()

    # --- the end ----------------------------------------------------------------------

    async def finalize(self) -> StreamingToolResult[ChunkT, FinalT]:
        """Close stdin, read the rest through the policy, wait for the tool, return its result.

        Chunks not read yet pass through the policy as they would have through
        `next_chunk()` (under `Manual` they are dropped, never shown). Then
        `Summarise` makes its last pass and `Manual` asks about the final
        value. Waits as long as the tool runs; `cancel()` it, or put the call
        under a timeout, to stop sooner. A second call returns the same
        result (or raises the same error).

        Raises:
            ToolCancelled: The tool was cancelled.
            PolicyDenied: `Manual` withheld the final value.
            ToolStreamError: The tool failed (its error is the cause).
            CommandError: The tool failed with one of the executor's errors.
        """
        handle = self._running()
        async with self._guard():
            if isinstance(self._outcome, Exception):
                raise self._outcome
            if self._outcome is not None:
                return self._outcome
            try:
                result = await self._finish(handle)
            except Exception as exc:
                self._outcome = exc
                raise
            self._outcome = result
            return result

    async def _finish(
        self, handle: StreamingToolHandle[ChunkT, FinalT]
    ) -> StreamingToolResult[ChunkT, FinalT]:
        held = self._held
        policy = self.policy
        # No more input can come once the caller waits for the end, and a tool
        # that reads its input to the end could not finish without knowing.
        await handle.close_stdin()
        while (item := await self._read()) is not None:
            if isinstance(item, Progress):
                continue
            held.received += 1
            if isinstance(policy, Manual):
                held.dropped += 1
            else:
                await self._hold(item, self.tool.render(item))
        try:
            final = await handle.finalize()
        except Exception as exc:
            translated = _translate(exc, self.name)
            if self._recorder is not None:
                await self._recorder.failed(translated)
            if translated is exc:
                raise
            raise translated from exc
        if self._recorder is not None:
            # Recorded before any approval below: the tool's work is done either way.
            await self._recorder.finished(final)
        if self._state == "open":
            self._state = "ended"
        if isinstance(policy, Summarise) and len(self._held_text()) > policy.max_summary_length:
            await self._summarise(policy)
        final_text = self.tool.render(final)
        if isinstance(policy, Manual):
            await self._approve(policy, "final", None, final_text)
        held.final_text = final_text
        return StreamingToolResult(
            final=final,
            chunks=tuple(chunk for chunk, _, _ in held.chunks),
            summary=held.summary,
            context=held.window(),
        )

    def context_window(self) -> ContextWindow:
        """What the session holds for the model's context now, with counts of what it read."""
        return self._held.window()

    async def events(self) -> AsyncIterator[ToolEvent]:
        """The rest of the stream as `ToolEvent`s, for `bridge`: numbered from 1, one end.

        A progress report is a `PROGRESS` event, a chunk a `PARTIAL`, and the
        end either a `COMPLETE` carrying the `StreamingToolResult` or an
        `ERROR` carrying what `next_chunk()` or `finalize()` raised (a
        denial included). Nothing follows the end.
        """
        sequencer = EventSequencer()
        while True:
            try:
                item = await self._next_item()
            except Exception as exc:
                yield sequencer.error(exc)
                return
            if item is None:
                break
            if isinstance(item, Progress):
                yield sequencer.progress(item.fraction, item.payload)
            else:
                yield sequencer.partial(item)
        try:
            result = await self.finalize()
        except Exception as exc:
            yield sequencer.error(exc)
            return
        yield sequencer.complete(result)

    # --- policies at work ---------------------------------------------------------------

    def _held_text(self) -> str:
        held = self._held
        texts = [self.tool.render(chunk) for chunk, _, _ in held.chunks]
        return _join(([held.summary] if held.summary is not None else []) + texts)

    async def _summarise(self, policy: Summarise) -> None:
        text = self._held_text()
        limit = policy.max_summary_length
        held = self._held
        held.summaries += 1
        summary: object = None
        if policy.summarizer is not None:
            try:
                with anyio.move_on_after(
                    policy.timeout if policy.timeout is not None else float("inf")
                ) as scope:
                    summary = await policy.summarizer(text)
                if scope.cancelled_caught:
                    _logger.warning(
                        "the summarizer of %s gave no answer within %g s; truncating instead",
                        self.name,
                        policy.timeout,
                    )
                elif not isinstance(summary, str):
                    _logger.warning(
                        "the summarizer of %s returned %s, not a str; truncating instead",
                        self.name,
                        type(summary).__name__,
                    )
            except Exception:
                # A summary is a convenience; losing it must not lose the stream.
                _logger.warning(
                    "the summarizer of %s failed; truncating instead", self.name, exc_info=True
                )
        if isinstance(summary, str):
            held.replace_with_summary(_truncate(summary, limit))
        else:
            held.truncations += 1
            held.replace_with_summary(_truncate(text, limit))

    async def _approve(
        self, policy: Manual, kind: Literal["chunk", "final"], number: int | None, text: str
    ) -> None:
        request = OutputApprovalRequest(
            tool=self.name,
            call_id=self.call_id,
            kind=kind,
            number=number,
            preview=text[: policy.preview_length],
            length=len(text),
        )
        what = f"chunk {number} of {self.name}" if kind == "chunk" else f"the result of {self.name}"
        verdicts: list[Verdict | None] = [None] * len(policy.approvers)
        denial: Verdict | None = None
        failure: Exception | None = None

        async def ask(index: int, approver: OutputApprover, scope: anyio.CancelScope) -> None:
            nonlocal denial, failure
            try:
                answer = await approver(request)
            except Exception as exc:
                failure = exc
                scope.cancel()
                return
            verdict = answer if isinstance(answer, Verdict) else Verdict(bool(answer))
            verdicts[index] = verdict
            if not verdict.approved and denial is None:
                # One no is enough; the others need not answer.
                denial = verdict
                scope.cancel()

        with anyio.move_on_after(policy.timeout if policy.timeout is not None else float("inf")):
            async with anyio.create_task_group() as group:
                for index, approver in enumerate(policy.approvers):
                    group.start_soon(ask, index, approver, group.cancel_scope)
        if failure is not None:
            raise failure
        if denial is not None:
            reason = f": {denial.reason}" if denial.reason else ""
            raise PolicyDenied(f"{what} was not approved for the context{reason}")
        if all(verdict is not None for verdict in verdicts):
            return
        if policy.timeout_action is TimeoutAction.ALLOW:
            return
        assert policy.timeout is not None  # without a timeout every approver answered
        raise PolicyDenied(f"no approval came within {policy.timeout:g} s, so {what} was withheld")
