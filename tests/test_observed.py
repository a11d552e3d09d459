"""Observed: execution events for UIs and tracers, and OpenTelemetry spans."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from executor import Command, LocalExecutor, NonZeroExit, Text, TimedOut
from executor._core.output import Chunk, Stderr, Stdout
from executor._policies.observed import (
    CommandCancelled,
    CommandChunk,
    CommandEvent,
    CommandFinished,
    CommandStarted,
    Observed,
)

pytestmark = pytest.mark.anyio


def chunks_of(events: list[CommandEvent]) -> list[CommandChunk]:
    """The chunk events among `events`."""
    return [event for event in events if isinstance(event, CommandChunk)]


async def test_event_order_and_chunks(tmp_path: Path) -> None:
    """A command reports started, its chunks in sequence, then finished."""
    events: list[CommandEvent] = []
    observed = Observed(LocalExecutor(tmp_path), events.append)
    script = "printf one; sleep 0.05; printf two >&2; sleep 0.05; printf three"
    output = await observed.exec_cmd(Command.shell(script))
    assert isinstance(events[0], CommandStarted)
    assert events[0].description == script
    assert isinstance(events[-1], CommandFinished)
    chunks = chunks_of(events)
    assert events[1:-1] == chunks
    assert [c.sequence for c in chunks] == list(range(1, len(chunks) + 1))
    assert b"".join(c.chunk.data for c in chunks) == b"onetwothree"
    assert tuple(c.chunk for c in chunks) == output.chunks
    assert {event.call_id for event in events} == {events[0].call_id}
    assert len(events[0].call_id) == 32
    end = events[-1]
    assert end.success
    assert end.exit_code == 0
    assert end.error is None
    assert end.output_bytes == len(output) == 11
    assert end.outcome == "ok"
    assert end.duration >= 0


async def test_failure_reports_exit_code(tmp_path: Path) -> None:
    """A nonzero exit is reported as finished with success False and its code."""
    events: list[CommandEvent] = []
    observed = Observed(LocalExecutor(tmp_path), events.append)
    with pytest.raises(NonZeroExit):
        await observed.exec_cmd(Command.shell("echo oops; exit 3"))
    end = events[-1]
    assert isinstance(end, CommandFinished)
    assert not end.success
    assert end.exit_code == 3
    assert end.outcome == "nonzero"
    assert end.error is not None
    assert end.output_bytes == 5


async def test_timeout_reported(tmp_path: Path) -> None:
    """A command that times out is reported as finished with outcome timeout."""
    events: list[CommandEvent] = []
    observed = Observed(LocalExecutor(tmp_path, kill_grace=0.2), events.append)
    with pytest.raises(TimedOut):
        await observed.exec_cmd(Command.shell("sleep 5").with_timeout(0.1))
    end = events[-1]
    assert isinstance(end, CommandFinished)
    assert not end.success
    assert end.outcome == "timeout"
    assert end.error is not None


async def test_cancelled_with_partial_output(tmp_path: Path) -> None:
    """Cancelling a running command reports what it printed and what was pending."""
    events: list[CommandEvent] = []
    got_chunk = anyio.Event()

    def observer(event: CommandEvent) -> None:
        events.append(event)
        if isinstance(event, CommandChunk):
            got_chunk.set()

    observed = Observed(LocalExecutor(tmp_path, kill_grace=0.2), observer)
    async with anyio.create_task_group() as tg:
        tg.start_soon(observed.exec_cmd, Command.shell("printf partial; sleep 10"))
        await got_chunk.wait()
        tg.cancel_scope.cancel()
    end = events[-1]
    assert isinstance(end, CommandCancelled)
    assert end.partial_output.stdout == b"partial"
    assert end.partial_output.exit_code is None
    assert end.pending == "printf partial; sleep 10"
    assert end.call_id == events[0].call_id
    assert not any(isinstance(event, CommandFinished) for event in events)


async def test_native_asyncio_cancel(tmp_path: Path, anyio_backend: str) -> None:
    """A plain asyncio task.cancel() also reports the command as cancelled."""
    if anyio_backend != "asyncio":
        pytest.skip("native asyncio cancellation")
    import asyncio

    events: list[CommandEvent] = []
    got_chunk = asyncio.Event()

    def observer(event: CommandEvent) -> None:
        events.append(event)
        if isinstance(event, CommandChunk):
            got_chunk.set()

    observed = Observed(LocalExecutor(tmp_path, kill_grace=0.2), observer)
    task = asyncio.ensure_future(observed.exec_cmd(Command.shell("printf partial; sleep 10")))
    await got_chunk.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    end = events[-1]
    assert isinstance(end, CommandCancelled)
    assert end.partial_output.stdout == b"partial"


async def test_works_without_opentelemetry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """When opentelemetry cannot be imported, events are still reported."""
    monkeypatch.setitem(sys.modules, "opentelemetry.trace", None)
    events: list[CommandEvent] = []
    await Observed(LocalExecutor(tmp_path), events.append).exec_cmd(Command.shell("echo hi"))
    assert [type(event) for event in events] == [CommandStarted, CommandChunk, CommandFinished]


async def test_user_sink_sees_every_chunk(tmp_path: Path) -> None:
    """The caller's sink receives every chunk the observer sees."""
    events: list[CommandEvent] = []
    seen: list[Chunk] = []
    observed = Observed(LocalExecutor(tmp_path), events.append)
    output = await observed.exec_cmd_streaming(
        Command.shell("printf a; sleep 0.05; printf b >&2"), seen.append
    )
    assert seen == [c.chunk for c in chunks_of(events)]
    assert tuple(seen) == output.chunks


async def test_async_observer(tmp_path: Path) -> None:
    """An async observer is awaited for each event."""
    events: list[CommandEvent] = []

    async def observer(event: CommandEvent) -> None:
        await anyio.lowlevel.checkpoint()
        events.append(event)

    await Observed(LocalExecutor(tmp_path), observer).exec_cmd(Command.shell("echo hi"))
    assert [type(event) for event in events] == [CommandStarted, CommandChunk, CommandFinished]


async def test_failing_observer_propagates(tmp_path: Path) -> None:
    """An exception raised by the observer reaches the caller, and no later event is sent."""
    events: list[CommandEvent] = []

    def observer(event: CommandEvent) -> None:
        events.append(event)
        if isinstance(event, CommandChunk):
            raise RuntimeError("tracer down")

    observed = Observed(LocalExecutor(tmp_path, kill_grace=0.2), observer)
    with pytest.raises(RuntimeError, match="tracer down"):
        await observed.exec_cmd(Command.shell("echo hi; sleep 5"))
    assert [type(event) for event in events] == [CommandStarted, CommandChunk]

    def refuse(event: CommandEvent) -> None:
        raise RuntimeError("no start")

    with pytest.raises(RuntimeError, match="no start"):
        await Observed(LocalExecutor(tmp_path), refuse).exec_cmd(Command.shell("echo hi"))


async def test_composition_and_repr(tmp_path: Path) -> None:
    """Observed composes through with_policy and shows its inner executor in repr."""
    events: list[CommandEvent] = []
    local = LocalExecutor(tmp_path)
    async with local.with_policy(Observed, events.append) as observed:
        assert repr(observed) == f"Observed({local!r})"
        output = await observed.scoped(".").exec_cmd(Command.shell("echo hi"))
    assert output.stdout == b"hi\n"
    assert [type(event) for event in events] == [CommandStarted, CommandChunk, CommandFinished]


async def test_session_is_reported(tmp_path: Path) -> None:
    """A session reports its start, each chunk the reader gets, and its end."""
    events: list[CommandEvent] = []
    observed = Observed(LocalExecutor(tmp_path), events.append)
    session = await observed.start(Command.shell("echo hi; sleep 0.1; echo there >&2"))
    async with session:
        read = [item.chunk async for item in session]
        output = await session.finalize()
    assert output.stdout == b"hi\n"
    assert read == [Stdout(b"hi\n"), Stderr(b"there\n")]
    assert [type(event) for event in events] == [
        CommandStarted,
        CommandChunk,
        CommandChunk,
        CommandFinished,
    ]
    chunks = [event for event in events if isinstance(event, CommandChunk)]
    assert [(c.chunk, c.sequence) for c in chunks] == [(read[0], 1), (read[1], 2)]
    finished = events[-1]
    assert isinstance(finished, CommandFinished)
    assert (finished.outcome, finished.exit_code, finished.output_bytes) == ("ok", 0, 9)
    assert len({event.call_id for event in events}) == 1


_exporter: Any = None


def span_exporter() -> Any:
    """An in-memory exporter on the global tracer provider, installed once."""
    global _exporter
    pytest.importorskip("opentelemetry.sdk")
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    if _exporter is None:
        _exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(_exporter))
        trace.set_tracer_provider(provider)
    _exporter.clear()
    return _exporter


async def test_opentelemetry_span_per_command(tmp_path: Path) -> None:
    """With OpenTelemetry installed, each command gets a span with its outcome."""
    exporter = span_exporter()
    from opentelemetry.trace import StatusCode

    observed = Observed(LocalExecutor(tmp_path), lambda event: None)
    await observed.exec_cmd(Command.shell("echo ok"))
    with pytest.raises(NonZeroExit):
        await observed.exec_cmd(Command.shell("exit 3"))
    ok, failed = exporter.get_finished_spans()
    assert ok.name == failed.name == "executor.command"
    assert ok.attributes["executor.command"] == "echo ok"
    assert ok.attributes["executor.exit_code"] == 0
    assert ok.attributes["executor.outcome"] == "ok"
    assert ok.attributes["executor.duration_s"] >= 0
    assert ok.status.status_code != StatusCode.ERROR
    assert failed.attributes["executor.exit_code"] == 3
    assert failed.attributes["executor.outcome"] == "nonzero"
    assert failed.status.status_code == StatusCode.ERROR


async def test_opentelemetry_span_per_session(tmp_path: Path) -> None:
    """A session's span opens with it and closes with its outcome when it ends."""
    exporter = span_exporter()
    from opentelemetry.trace import StatusCode

    observed = Observed(LocalExecutor(tmp_path), lambda event: None)
    async with await observed.start(Command.shell("cat")) as session:
        assert exporter.get_finished_spans() == ()
        await session.send_stdin(Text("hi\n"))
        await session.next_chunk()
        await session.finalize()
    async with await observed.start(Command.shell("exit 4")) as session:
        with pytest.raises(NonZeroExit):
            await session.finalize()
    ok, failed = exporter.get_finished_spans()
    assert ok.attributes["executor.command"] == "cat"
    assert (ok.attributes["executor.outcome"], ok.attributes["executor.exit_code"]) == ("ok", 0)
    assert failed.attributes["executor.outcome"] == "nonzero"
    assert failed.status.status_code is StatusCode.ERROR
