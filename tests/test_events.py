"""Tool events: numbering and one end, the in-memory bus, and bridge onto it."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Iterable
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from anyio.streams.memory import MemoryObjectReceiveStream
from hypothesis import given, settings, strategies as st

from executor._core.errors import CommandError, PolicyDenied, ToolCancelled, ToolStreamError
from executor._tools.events import (
    Envelope,
    EventSequencer,
    MemoryBus,
    ToolEvent,
    ToolEventKind,
    Topic,
    bridge,
)

pytestmark = pytest.mark.anyio

PROGRESS, PARTIAL, COMPLETE, ERROR = (
    ToolEventKind.PROGRESS,
    ToolEventKind.PARTIAL,
    ToolEventKind.COMPLETE,
    ToolEventKind.ERROR,
)


async def from_list(events: Iterable[ToolEvent]) -> AsyncIterator[ToolEvent]:
    """Yield the given events, as a tool's stream would."""
    for event in events:
        await anyio.lowlevel.checkpoint()
        yield event


def made(*steps: tuple[str, Any]) -> list[ToolEvent]:
    """Events made by an EventSequencer from (method, argument) steps."""
    sequencer = EventSequencer()
    events = []
    for method, argument in steps:
        events.append(getattr(sequencer, method)(argument))
    return events


class ListBus:
    """A plain (not async) bus that records what is published."""

    def __init__(self) -> None:
        self.published: list[tuple[str, Envelope]] = []

    def publish(self, topic: str, envelope: Envelope, /) -> None:
        """Record the envelope."""
        self.published.append((topic, envelope))


# --- ToolEvent ------------------------------------------------------------------------


def test_event_carries_its_fields_and_a_monotonic_timestamp() -> None:
    """A ToolEvent keeps kind, sequence, payload and progress, stamped with a monotonic time."""
    first = ToolEvent(kind=PARTIAL, sequence=1, payload="a", progress=0.5)
    second = ToolEvent(kind="partial", sequence=2, payload="b")
    assert (first.kind, first.sequence, first.payload, first.progress) == (PARTIAL, 1, "a", 0.5)
    assert second.kind is PARTIAL
    assert second.timestamp >= first.timestamp
    assert not first.terminal


@pytest.mark.parametrize("sequence", [0, -1, 1.0, True, "1"])
def test_event_sequence_starts_at_one(sequence: Any) -> None:
    """A sequence number must be an integer from 1 up."""
    with pytest.raises(ValueError, match="sequence"):
        ToolEvent(kind=PARTIAL, sequence=sequence)


@pytest.mark.parametrize("progress", [-0.1, 1.01, math.nan, True, "half"])
def test_event_progress_is_a_fraction(progress: Any) -> None:
    """Progress is a number from 0 to 1, or None."""
    with pytest.raises(ValueError, match="progress"):
        ToolEvent(kind=PROGRESS, sequence=1, progress=progress)


def test_error_events_and_only_they_carry_an_error() -> None:
    """An ERROR needs an exception, and other kinds must not carry one."""
    event = ToolEvent(kind=ERROR, sequence=3, error=ValueError("x"))
    assert event.terminal
    with pytest.raises(ValueError, match="needs an exception"):
        ToolEvent(kind=ERROR, sequence=1)
    with pytest.raises(ValueError, match="only ERROR"):
        ToolEvent(kind=COMPLETE, sequence=1, error=ValueError("x"))


def test_terminal_kinds_are_complete_and_error() -> None:
    """Exactly COMPLETE and ERROR end a stream."""
    assert {kind for kind in ToolEventKind if kind.terminal} == {COMPLETE, ERROR}


def test_stream_errors_sit_in_the_error_tree() -> None:
    """ToolCancelled is a ToolStreamError, which is a CommandError with an empty output."""
    error = ToolCancelled("gone")
    assert isinstance(error, ToolStreamError)
    assert isinstance(error, CommandError)
    assert str(error) == "gone"
    assert len(error.output) == 0


# --- EventSequencer -------------------------------------------------------------------


def test_sequencer_numbers_from_one_and_ends_once() -> None:
    """The sequencer numbers 1, 2, 3 and refuses anything after the terminal event."""
    sequencer = EventSequencer()
    events = [sequencer.progress(0.25, "started"), sequencer.partial("x"), sequencer.complete(7)]
    assert [event.sequence for event in events] == [1, 2, 3]
    assert [event.kind for event in events] == [PROGRESS, PARTIAL, COMPLETE]
    assert sequencer.ended
    assert sequencer.count == 3
    with pytest.raises(RuntimeError, match="ended"):
        sequencer.partial("late")
    with pytest.raises(RuntimeError, match="ended"):
        sequencer.error(ValueError("late"))
    assert sequencer.count == 3


def test_sequencer_carries_the_last_progress_forward() -> None:
    """Each event carries the last reported progress, and COMPLETE carries 1.0."""
    sequencer = EventSequencer()
    assert sequencer.partial("a").progress is None
    assert sequencer.progress(0.4).progress == 0.4
    assert sequencer.progress(None, "note").progress == 0.4
    assert sequencer.partial("b").progress == 0.4
    assert sequencer.complete().progress == 1.0


def test_sequencer_leaves_no_gap_for_a_rejected_event() -> None:
    """A progress value the event refuses uses no sequence number."""
    sequencer = EventSequencer()
    with pytest.raises(ValueError, match="progress"):
        sequencer.progress(2.0)
    assert sequencer.partial("a").sequence == 1


OPERATIONS = st.lists(
    st.one_of(
        st.tuples(st.just("progress"), st.one_of(st.none(), st.floats(0, 1))),
        st.tuples(st.just("partial"), st.integers()),
        st.tuples(st.just("complete"), st.integers()),
        st.tuples(st.just("error"), st.builds(ValueError, st.text(max_size=5))),
    ),
    max_size=30,
)


@settings(max_examples=200, deadline=None)
@given(OPERATIONS)
def test_any_operations_give_one_to_n_with_one_end(operations: list[tuple[str, Any]]) -> None:
    """Whatever is asked of a sequencer, its events are 1..n with at most one end, last."""
    sequencer = EventSequencer()
    events: list[ToolEvent] = []
    for method, argument in operations:
        try:
            events.append(getattr(sequencer, method)(argument))
        except RuntimeError:
            assert sequencer.ended
    assert [event.sequence for event in events] == list(range(1, len(events) + 1))
    terminals = [index for index, event in enumerate(events) if event.terminal]
    assert len(terminals) <= 1
    if terminals:
        assert terminals == [len(events) - 1]
    ended = any(method in ("complete", "error") for method, _ in operations)
    assert sequencer.ended == ended == bool(terminals)
    timestamps = [event.timestamp for event in events]
    assert timestamps == sorted(timestamps)


# --- MemoryBus ------------------------------------------------------------------------


def envelope(topic: str, sequence: int = 1) -> Envelope:
    """An envelope of a partial event on `topic`."""
    return Envelope(
        topic=topic, event=ToolEvent(kind=PARTIAL, sequence=sequence), parent_id="call-1"
    )


async def test_memory_bus_keeps_the_latest_envelopes() -> None:
    """MemoryBus keeps only its last `keep` envelopes, in order."""
    bus = MemoryBus(keep=3)
    for sequence in range(1, 6):
        await bus.publish(Topic.PARTIAL, envelope(Topic.PARTIAL, sequence))
    assert [item.event.sequence for item in bus.envelopes] == [3, 4, 5]
    assert bus.topics() == ["tool.stream.partial"] * 3


async def test_memory_bus_subscribers_get_their_topics() -> None:
    """A subscriber gets the topics it asked for; one without topics gets everything."""
    bus = MemoryBus()
    results = bus.subscribe(Topic.RESULT)
    everything = bus.subscribe()
    await bus.publish(Topic.PARTIAL, envelope(Topic.PARTIAL))
    await bus.publish(Topic.RESULT, envelope(Topic.RESULT))
    bus.close()
    async with results, everything:
        assert [item.topic async for item in results] == ["tool.result"]
        assert [item.topic async for item in everything] == ["tool.stream.partial", "tool.result"]


async def test_memory_bus_holds_back_the_publisher_for_a_slow_subscriber() -> None:
    """A full subscriber queue makes publish wait instead of piling envelopes up."""
    with MemoryBus() as bus:
        subscription = bus.subscribe(max_buffer=2)
        await hold_back(bus, subscription)


async def hold_back(bus: MemoryBus, subscription: MemoryObjectReceiveStream[Envelope]) -> None:
    """Publish ten envelopes to a subscriber with room for two, reading one."""
    published = 0

    async def publisher() -> None:
        nonlocal published
        for sequence in range(1, 11):
            await bus.publish(Topic.PARTIAL, envelope(Topic.PARTIAL, sequence))
            published += 1

    async with anyio.create_task_group() as group, subscription:
        group.start_soon(publisher)
        await anyio.wait_all_tasks_blocked()
        assert published == 2
        await subscription.receive()
        await anyio.wait_all_tasks_blocked()
        assert published == 3
        group.cancel_scope.cancel()


async def test_memory_bus_drops_a_subscriber_that_left() -> None:
    """Publishing goes on when a subscriber has closed its stream."""
    bus = MemoryBus()
    subscription = bus.subscribe(max_buffer=0)
    subscription.close()
    await bus.publish(Topic.PARTIAL, envelope(Topic.PARTIAL))
    await bus.publish(Topic.PARTIAL, envelope(Topic.PARTIAL, 2))
    assert len(bus.envelopes) == 2


def test_memory_bus_refuses_a_negative_keep() -> None:
    """A MemoryBus cannot keep a negative number of envelopes."""
    with pytest.raises(ValueError, match="keep"):
        MemoryBus(keep=-1)


# --- bridge ---------------------------------------------------------------------------


async def test_bridge_projects_each_kind_on_its_topic() -> None:
    """Progress, partials and the result go to their topics, in order, and bridge returns it."""
    bus = MemoryBus()
    events = made(("progress", 0.5), ("partial", "a"), ("partial", "b"), ("complete", {"n": 2}))
    result = await bridge(from_list(events), bus, call_id="call-7", tool_name="count")
    assert result == {"n": 2}
    assert bus.topics() == [
        "tool.stream.progress",
        "tool.stream.partial",
        "tool.stream.partial",
        "tool.result",
    ]
    assert [item.event for item in bus.envelopes] == events


async def test_bridge_envelopes_name_the_call_as_causation_parent() -> None:
    """Every envelope carries the call id as its parent, the tool as source, and its own id."""
    bus = MemoryBus()
    events = made(("partial", 1), ("partial", 2), ("complete", None))
    await bridge(from_list(events), bus, call_id="call-42", tool_name="tail")
    assert {item.parent_id for item in bus.envelopes} == {"call-42"}
    assert {item.source for item in bus.envelopes} == {"tail"}
    assert len({item.id for item in bus.envelopes}) == 3


async def test_bridge_raises_the_stream_error_after_publishing_it() -> None:
    """On ERROR the result carries the error and bridge raises that same error."""
    bus = MemoryBus()
    denied = PolicyDenied("not approved")
    events = made(("partial", "a"), ("error", denied))
    with pytest.raises(PolicyDenied) as caught:
        await bridge(from_list(events), bus, call_id="c", tool_name="t")
    assert caught.value is denied
    assert bus.topics() == ["tool.stream.partial", "tool.result"]
    assert bus.envelopes[-1].event.error is denied


async def test_bridge_works_with_a_plain_publish() -> None:
    """A bus whose publish is a plain function works as well as an async one."""
    bus = ListBus()
    await bridge(from_list(made(("partial", 1), ("complete", 2))), bus, call_id="c")
    assert [topic for topic, _ in bus.published] == ["tool.stream.partial", "tool.result"]
    assert all(item.source is None for _, item in bus.published)


async def test_bridge_reads_nothing_after_the_terminal_event() -> None:
    """Events after COMPLETE are never read, and the stream is closed."""
    read: list[int] = []
    closed = False

    async def stream() -> AsyncIterator[ToolEvent]:
        nonlocal closed
        try:
            late = ToolEvent(kind=PARTIAL, sequence=3)
            for event in [*made(("partial", 1), ("complete", 2)), late]:
                read.append(event.sequence)
                yield event
        finally:
            closed = True

    bus = MemoryBus()
    assert await bridge(stream(), bus, call_id="c") == 2
    assert read == [1, 2]
    assert closed
    assert bus.topics() == ["tool.stream.partial", "tool.result"]


async def test_bridge_ends_a_stream_that_stops_without_a_terminal_event() -> None:
    """A stream that just stops gets an ERROR result from bridge, which raises it."""
    bus = MemoryBus()
    with pytest.raises(ToolStreamError, match="without a COMPLETE or ERROR"):
        await bridge(from_list(made(("partial", 1))), bus, call_id="c")
    last = bus.envelopes[-1]
    assert last.topic == "tool.result"
    assert last.event.kind is ERROR
    assert last.event.sequence == 2
    assert isinstance(last.event.error, ToolStreamError)


async def test_bridge_refuses_events_out_of_order() -> None:
    """A skipped or repeated sequence number ends the call with an error result."""
    bus = MemoryBus()
    events = [ToolEvent(kind=PARTIAL, sequence=1), ToolEvent(kind=PARTIAL, sequence=3)]
    with pytest.raises(ToolStreamError, match="expected event 2, got 3"):
        await bridge(from_list(events), bus, call_id="c")
    assert bus.topics() == ["tool.stream.partial", "tool.result"]
    assert bus.envelopes[-1].event.sequence == 2


async def test_bridge_publishes_the_error_of_a_stream_that_raises() -> None:
    """When the event source itself raises, the result carries that error and bridge re-raises."""

    async def broken() -> AsyncIterator[ToolEvent]:
        yield ToolEvent(kind=PARTIAL, sequence=1)
        raise OSError("disk gone")

    bus = MemoryBus()
    with pytest.raises(OSError, match="disk gone"):
        await bridge(broken(), bus, call_id="c")
    assert bus.envelopes[-1].event.kind is ERROR
    assert isinstance(bus.envelopes[-1].event.error, OSError)


async def test_cancelled_bridge_still_publishes_one_result() -> None:
    """Cancelling bridge mid-stream publishes a ToolCancelled result and closes the stream."""
    closed = False

    async def endless() -> AsyncIterator[ToolEvent]:
        nonlocal closed
        sequencer = EventSequencer()
        try:
            while True:
                yield sequencer.partial("tick")
                await anyio.sleep(0.001)
        finally:
            closed = True

    bus = MemoryBus()
    with anyio.move_on_after(0.05) as scope:
        await bridge(endless(), bus, call_id="call-9")
    assert scope.cancelled_caught
    assert closed
    results = [item for item in bus.envelopes if item.topic == "tool.result"]
    assert len(results) == 1
    assert isinstance(results[0].event.error, ToolCancelled)
    assert results[0].parent_id == "call-9"
    sequences = [item.event.sequence for item in bus.envelopes]
    assert sequences == list(range(1, len(sequences) + 1))


async def test_bridge_needs_a_call_id() -> None:
    """Without a call id nothing could be linked, so bridge refuses to start."""
    with pytest.raises(ValueError, match="call_id"):
        await bridge(from_list([]), MemoryBus(), call_id="")


STREAMS = st.lists(
    st.one_of(
        st.tuples(st.just("progress"), st.one_of(st.none(), st.floats(0, 1))),
        st.tuples(st.just("partial"), st.integers()),
        st.tuples(st.just("complete"), st.integers()),
        st.tuples(st.just("error"), st.builds(ValueError, st.text(max_size=5))),
        st.tuples(st.just("skip"), st.integers(1, 3)),
    ),
    max_size=20,
)


@settings(max_examples=60, deadline=None)
@given(STREAMS)
async def test_any_stream_gives_exactly_one_result_on_the_bus(steps: list[tuple[str, Any]]) -> None:
    """Whatever a source yields, the bus sees 1..n and exactly one tool.result, last."""
    events: list[ToolEvent] = []
    sequence = 1
    for method, argument in steps:
        if method == "skip":
            sequence += argument  # a broken source: numbers jump
            continue
        kind = {"progress": PROGRESS, "partial": PARTIAL, "complete": COMPLETE, "error": ERROR}
        events.append(
            ToolEvent(
                kind=kind[method],
                sequence=sequence,
                payload=argument if method != "error" else None,
                error=argument if method == "error" else None,
                progress=argument if method == "progress" else None,
            )
        )
        sequence += 1
    bus = MemoryBus(keep=None)
    try:
        await bridge(from_list(events), bus, call_id="c")
    except Exception:
        assert bus.envelopes[-1].event.kind is ERROR
    published = [item.event for item in bus.envelopes]
    assert [event.sequence for event in published] == list(range(1, len(published) + 1))
    assert [item.topic for item in bus.envelopes].count("tool.result") == 1
    assert bus.envelopes[-1].topic == "tool.result"
    assert all(not event.terminal for event in published[:-1])
