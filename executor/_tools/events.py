"""Tool events: a numbered stream of progress, partial output and one end, bridged onto a bus.

```python
async with StreamingToolSession(tool, input) as session:
    result = await bridge(session.events(), bus, call_id=call.id, tool_name=tool.name)
```

A stream of `ToolEvent`s is numbered 1, 2, 3... and ends with exactly one
`COMPLETE` or `ERROR`; nothing comes after it. `bridge` publishes each event
on a `Bus` (`tool.stream.progress`, `tool.stream.partial`, then one
`tool.result`), every envelope naming the tool call as its causation parent,
so a UI, a collector and the agent's own result handler see one call.

Errors added here (they belong in `executor._core.errors`' tree):

```
CommandError
└── ToolStreamError                  a streaming tool failed, or its stream broke the rules
    └── ToolCancelled                the tool was cancelled before it finished
```
"""

from __future__ import annotations

import enum
import inspect
import time
import uuid
from collections import deque
from collections.abc import AsyncIterable, Awaitable
from types import TracebackType
from typing import Any, Protocol, Self

import anyio
import attrs
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from executor._core.cleanup import run_to_completion
from executor._core.errors import ToolCancelled, ToolStreamError

# How long a cancelled bridge may still spend publishing the call's last tool.result:
# long enough for an in-process bus, short enough that cancellation stays prompt.
_CANCEL_PUBLISH_GRACE = 5.0


class ToolEventKind(enum.Enum):
    """What a `ToolEvent` reports."""

    PROGRESS = "progress"
    """How far the tool has come (`progress`), with an optional note (`payload`)."""
    PARTIAL = "partial"
    """A piece of output (`payload`)."""
    COMPLETE = "complete"
    """The tool finished; `payload` is its result. Ends the stream."""
    ERROR = "error"
    """The tool failed; `error` says why. Ends the stream."""

    @property
    def terminal(self) -> bool:
        """Whether an event of this kind ends its stream."""
        return self in (ToolEventKind.COMPLETE, ToolEventKind.ERROR)


def _check_sequence(instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"sequence must be an integer >= 1, got {value!r}")


def _check_progress(instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
        raise ValueError(f"progress must be a fraction from 0 to 1, or None; got {value!r}")


@attrs.frozen(kw_only=True)
class ToolEvent:
    """One event of a tool's stream.

    Attributes:
        kind: What the event reports.
        sequence: Its place in the stream: 1 for the first event, then one more
            for each.
        payload: The output piece (`PARTIAL`), the result (`COMPLETE`) or a
            note (`PROGRESS`).
        progress: How far the tool has come, from 0 to 1, or `None` when it
            does not say.
        error: Why the tool failed; set on `ERROR` events and only there.
        timestamp: `time.monotonic()` when the event was made: for durations
            and ordering within this process, not wall-clock time.

    Raises:
        ValueError: A sequence below 1, a progress outside 0..1, an `ERROR`
            without an error, or an error on another kind.
    """

    kind: ToolEventKind = attrs.field(converter=ToolEventKind)
    sequence: int = attrs.field(validator=_check_sequence)
    payload: Any = None
    progress: float | None = attrs.field(default=None, validator=_check_progress)
    error: Exception | None = None
    timestamp: float = attrs.field(factory=time.monotonic)

    def __attrs_post_init__(self) -> None:
        if self.kind is ToolEventKind.ERROR:
            if not isinstance(self.error, Exception):
                raise ValueError(f"an ERROR event needs an exception, got {self.error!r}")
        elif self.error is not None:
            raise ValueError(f"only ERROR events carry an error, not {self.kind.name}")

    @property
    def terminal(self) -> bool:
        """Whether this event ends its stream (`COMPLETE` or `ERROR`)."""
        return self.kind.terminal


@attrs.define(eq=False)
class EventSequencer:
    """Makes the events of one stream: numbered from 1, ended by exactly one terminal event.

    Each method returns the next event. Every event carries the last progress
    reported (a `COMPLETE` carries 1.0). Once `complete` or `error` has been
    called, every further call raises `RuntimeError`: a stream has one end.
    """

    _next: int = attrs.field(default=1, init=False, repr=False)
    _progress: float | None = attrs.field(default=None, init=False, repr=False)
    _ended: bool = attrs.field(default=False, init=False, repr=False)

    @property
    def ended(self) -> bool:
        """Whether the terminal event has been made."""
        return self._ended

    @property
    def count(self) -> int:
        """How many events have been made."""
        return self._next - 1

    def _make(
        self,
        kind: ToolEventKind,
        *,
        payload: Any = None,
        progress: float | None = None,
        error: Exception | None = None,
    ) -> ToolEvent:
        if self._ended:
            raise RuntimeError(f"the stream has ended; no {kind.name} event can follow")
        event = ToolEvent(
            kind=kind, sequence=self._next, payload=payload, progress=progress, error=error
        )
        # Only a valid event uses up a number: a rejected one leaves no gap.
        self._next += 1
        self._ended = kind.terminal
        return event

    def progress(self, fraction: float | None = None, payload: Any = None) -> ToolEvent:
        """A `PROGRESS` event; `fraction` (0 to 1) is remembered for later events."""
        event = self._make(
            ToolEventKind.PROGRESS,
            payload=payload,
            progress=fraction if fraction is not None else self._progress,
        )
        if fraction is not None:
            self._progress = fraction
        return event

    def partial(self, payload: Any) -> ToolEvent:
        """A `PARTIAL` event carrying a piece of output."""
        return self._make(ToolEventKind.PARTIAL, payload=payload, progress=self._progress)

    def complete(self, payload: Any = None) -> ToolEvent:
        """The `COMPLETE` event carrying the result; it ends the stream."""
        return self._make(ToolEventKind.COMPLETE, payload=payload, progress=1.0)

    def error(self, error: Exception) -> ToolEvent:
        """The `ERROR` event carrying why the tool failed; it ends the stream."""
        return self._make(ToolEventKind.ERROR, error=error, progress=self._progress)


# --- the bus --------------------------------------------------------------------------


class Topic(enum.StrEnum):
    """The topics `bridge` publishes on."""

    PROGRESS = "tool.stream.progress"
    PARTIAL = "tool.stream.partial"
    RESULT = "tool.result"


_TOPICS = {
    ToolEventKind.PROGRESS: Topic.PROGRESS,
    ToolEventKind.PARTIAL: Topic.PARTIAL,
    ToolEventKind.COMPLETE: Topic.RESULT,
    ToolEventKind.ERROR: Topic.RESULT,
}


def _new_id() -> str:
    return uuid.uuid4().hex


@attrs.frozen(kw_only=True)
class Envelope:
    """An event as it travels on a bus.

    Attributes:
        topic: What it is about (a `Topic`).
        event: The tool event; on `tool.result` it is the stream's `COMPLETE`
            or `ERROR`.
        parent_id: The causation parent: the id of the tool call whose stream
            this is, so every envelope of one call links back to it.
        source: The tool's name, when known.
        id: This envelope's own id (random, unique).
    """

    topic: str
    event: ToolEvent
    parent_id: str
    source: str | None = None
    id: str = attrs.field(factory=_new_id)


class Bus(Protocol):
    """Where `bridge` publishes: anything with `publish(topic, envelope)`, plain or async."""

    def publish(self, topic: str, envelope: Envelope, /) -> Awaitable[None] | None:
        """Deliver `envelope` to whoever listens to `topic`."""
        ...


@attrs.define(eq=False)
class MemoryBus:
    """An in-process bus: keeps the latest envelopes and feeds subscribers through bounded queues.

    `publish` waits while a subscriber's queue is full, so a slow subscriber
    slows the publisher (and, through `bridge`, the tool) instead of letting
    envelopes pile up in memory. A subscriber that closed its stream is dropped.
    Use it in a `with` block, or call `close()`, to end the subscriptions.

    Args:
        keep: How many of the latest envelopes `envelopes` keeps; `None`
            keeps all of them (for tests of short streams).
    """

    keep: int | None = attrs.field(default=1000, kw_only=True)
    envelopes: deque[Envelope] = attrs.field(init=False, repr=False)
    _subscribers: list[tuple[frozenset[str], MemoryObjectSendStream[Envelope]]] = attrs.field(
        init=False, factory=list, repr=False
    )

    def __attrs_post_init__(self) -> None:
        if self.keep is not None and self.keep < 0:
            raise ValueError(f"keep must be >= 0 or None, got {self.keep}")
        self.envelopes = deque(maxlen=self.keep)

    def subscribe(self, *topics: str, max_buffer: int = 64) -> MemoryObjectReceiveStream[Envelope]:
        """Return a stream of the envelopes published from now on (on `topics`, or all).

        Close the returned stream (or leave its `with` block) to unsubscribe.
        """
        send, receive = anyio.create_memory_object_stream[Envelope](max_buffer)
        self._subscribers.append((frozenset(topics), send))
        return receive

    def topics(self) -> list[str]:
        """The topics of the envelopes kept, in the order published."""
        return [envelope.topic for envelope in self.envelopes]

    async def publish(self, topic: str, envelope: Envelope, /) -> None:
        """Keep `envelope` and hand it to every subscriber of `topic`, waiting for room."""
        self.envelopes.append(envelope)
        for wanted, send in list(self._subscribers):
            if wanted and topic not in wanted:
                continue
            try:
                await send.send(envelope)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                send.close()
                self._subscribers.remove((wanted, send))

    def close(self) -> None:
        """End every subscriber's stream (its `async for` finishes)."""
        for _, send in self._subscribers:
            send.close()
        self._subscribers.clear()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


# --- bridge ---------------------------------------------------------------------------


async def _publish(bus: Bus, envelope: Envelope) -> None:
    result = bus.publish(envelope.topic, envelope)
    if inspect.isawaitable(result):
        await result


async def bridge(
    events: AsyncIterable[ToolEvent],
    bus: Bus,
    *,
    call_id: str,
    tool_name: str | None = None,
) -> Any:
    """Drain a tool's events onto `bus` and return its result, or raise its error.

    `PROGRESS` events go out on `tool.stream.progress`, `PARTIAL` on
    `tool.stream.partial`, and the terminal event on `tool.result`; every
    envelope carries `call_id` as its causation parent. The bus always gets
    exactly one `tool.result` for the call: when the stream ends without a
    terminal event, numbers its events wrongly, raises, or the bridge is
    cancelled, `bridge` publishes an `ERROR` in its place (a `ToolCancelled`
    on cancellation, within a short grace period). Nothing after the terminal
    event is read.

    Args:
        events: The tool's events, e.g. `session.events()`; closed when done.
        bus: Where to publish.
        call_id: The id of the tool call (the causation parent).
        tool_name: The tool's name, for `Envelope.source`.

    Returns:
        The `COMPLETE` event's payload (for `session.events()`, the
        `StreamingToolResult`).

    Raises:
        Exception: The `ERROR` event's error, as it is.
        ToolStreamError: The stream broke the rules (no terminal event, a
            wrong sequence number).
    """
    if not isinstance(call_id, str) or not call_id:
        raise ValueError(f"call_id must be a non-empty string, got {call_id!r}")
    expected = 1
    last_progress: float | None = None
    finished = False

    def envelope(event: ToolEvent) -> Envelope:
        return Envelope(topic=_TOPICS[event.kind], event=event, parent_id=call_id, source=tool_name)

    async def fail(error: Exception) -> None:
        # The stream itself cannot end properly, so the bridge ends it for the bus.
        nonlocal finished
        finished = True
        event = ToolEvent(
            kind=ToolEventKind.ERROR, sequence=expected, error=error, progress=last_progress
        )
        await _publish(bus, envelope(event))

    iterator = aiter(events)
    try:
        while True:
            try:
                event = await anext(iterator)
            except StopAsyncIteration:
                error = ToolStreamError(
                    f"the event stream of call {call_id} ended without a COMPLETE or ERROR event"
                )
                await fail(error)
                raise error from None
            except Exception as exc:
                await fail(exc)
                raise
            if not isinstance(event, ToolEvent) or event.sequence != expected:
                got = event.sequence if isinstance(event, ToolEvent) else repr(event)
                error = ToolStreamError(
                    f"the event stream of call {call_id} is out of order: "
                    f"expected event {expected}, got {got}"
                )
                await fail(error)
                raise error
            expected += 1
            if event.progress is not None:
                last_progress = event.progress
            if event.terminal:
                finished = True
            await _publish(bus, envelope(event))
            if event.kind is ToolEventKind.COMPLETE:
                return event.payload
            if event.kind is ToolEventKind.ERROR:
                assert event.error is not None  # guaranteed by ToolEvent's check
                raise event.error
    except anyio.get_cancelled_exc_class():
        if not finished:

            async def publish_cancelled() -> None:
                with anyio.move_on_after(_CANCEL_PUBLISH_GRACE):
                    await fail(ToolCancelled(f"call {call_id} was cancelled before it finished"))

            await run_to_completion(publish_cancelled)
        raise
    finally:
        close = getattr(iterator, "aclose", None)
        if close is not None:
            # The source may hold a session open; end it even when cancelled.
            await run_to_completion(close)
