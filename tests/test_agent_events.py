"""Agent stream events: each tool call's start, argument deltas, completion, and end.

The calls run real commands through a real `LocalExecutor`; every test runs on
asyncio and on trio.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import attrs
import pytest
from conftest import tagged_processes

from executor import (
    AgentContext,
    AgentStreamEvent,
    Cancelled,
    Command,
    DefaultContext,
    Envelope,
    LocalExecutor,
    MemoryBus,
    Stdout,
    ToolCallComplete,
    ToolCallDelta,
    ToolCallEvents,
    ToolCallStart,
    ToolCancelled,
    ToolEventKind,
    ToolExecuted,
    ToolExecutor,
    ToolOutputKind,
    ToolStreamError,
    Topic,
    tool,
)

pytestmark = pytest.mark.anyio


@tool
async def run(context: AgentContext, command: str) -> str:
    """Runs a shell command and returns its output.

    Args:
        command: The shell command.
    """
    output = await context.executor().exec_cmd(Command.shell(command))
    return output.text()


@tool
async def explode(context: AgentContext) -> str:
    """Raises an exception of its own, not a command's failure."""
    raise RuntimeError("the tool broke")


@pytest.fixture
async def local(tmp_path: Path) -> AsyncIterator[LocalExecutor]:
    async with LocalExecutor(tmp_path) as executor:
        yield executor


async def _collect(stream: Any, into: list[AgentStreamEvent]) -> None:
    async with stream:
        async for event in stream:
            into.append(event)


async def _first_output(call_id: str, subscription: Any) -> Envelope:
    """The first output chunk the bus carries for `call_id`."""
    async for envelope in subscription:
        if envelope.parent_id == call_id:
            return envelope  # type: ignore[no-any-return]
    raise AssertionError(f"no output for {call_id}")


async def test_three_calls_succeed_fail_and_are_cancelled_in_order(
    local: LocalExecutor, tmp_path: Path
) -> None:
    """One call succeeds, one fails, one is cancelled mid-command: the seed's events, in order."""
    events: list[AgentStreamEvent] = []
    outcomes: dict[str, Any] = {}
    with MemoryBus(keep=None) as bus:
        calls = ToolCallEvents(local, tools=[run], bus=bus)
        async with calls, anyio.create_task_group() as group:
            group.start_soon(_collect, calls.subscribe(), events)
            outcomes["ok"] = await calls.call(
                "run", {"command": "echo hello"}, tool_call_id="call_ok"
            )
            outcomes["failed"] = await calls.call(
                "run", '{"command": "echo broken >&2; exit 3"}', tool_call_id="call_failed"
            )
            with bus.subscribe(Topic.PARTIAL) as partial:

                async def slow() -> None:
                    try:
                        await calls.call(
                            "run",
                            {"command": "echo started > started.txt; echo started; sleep 30"},
                            tool_call_id="call_slow",
                        )
                    except ToolCancelled as error:
                        outcomes["slow"] = error

                group.start_soon(slow)
                # Cancel once the command is running: its first output is on the bus.
                await _first_output("call_slow", partial)
            await calls.cancel()
    assert outcomes["ok"].text == "hello\n"
    assert outcomes["failed"].kind is ToolOutputKind.FAILED
    assert isinstance(outcomes["slow"], ToolCancelled)
    assert (tmp_path / "started.txt").exists()
    assert not tagged_processes(), "the cancelled command is still running"
    assert events == [
        ToolCallStart(tool_name="run", tool_call_id="call_ok"),
        ToolCallDelta(delta='{"command": "echo hello"}', tool_call_id="call_ok"),
        ToolCallComplete(tool_name="run", tool_call_id="call_ok"),
        ToolExecuted(
            tool_name="run",
            tool_call_id="call_ok",
            success=True,
            error=None,
            kind=ToolOutputKind.OK,
        ),
        ToolCallStart(tool_name="run", tool_call_id="call_failed"),
        ToolCallDelta(delta='{"command": "echo broken >&2; exit 3"}', tool_call_id="call_failed"),
        ToolCallComplete(tool_name="run", tool_call_id="call_failed"),
        ToolExecuted(
            tool_name="run",
            tool_call_id="call_failed",
            success=False,
            error="command exited with code 3\nbroken\n",
            kind=ToolOutputKind.FAILED,
            exit_code=3,
        ),
        ToolCallStart(tool_name="run", tool_call_id="call_slow"),
        ToolCallDelta(
            delta='{"command": "echo started > started.txt; echo started; sleep 30"}',
            tool_call_id="call_slow",
        ),
        ToolCallComplete(tool_name="run", tool_call_id="call_slow"),
        Cancelled(
            partial_text=None,
            partial_thinking=None,
            pending_tools=["run"],
            pending_tool_call_ids=["call_slow"],
        ),
    ]
    assert list(calls.history) == events
    # The bus: one tool event stream per call, numbered, ending in one tool.result.
    by_call: dict[str, list[Envelope]] = {}
    for envelope in bus.envelopes:
        by_call.setdefault(envelope.parent_id, []).append(envelope)
    assert list(by_call) == ["call_ok", "call_failed", "call_slow"]
    for envelopes in by_call.values():
        assert [e.event.sequence for e in envelopes] == list(range(1, len(envelopes) + 1))
        assert [e.topic for e in envelopes].count("tool.result") == 1
        assert envelopes[-1].topic == "tool.result"
        assert {e.source for e in envelopes} == {"run"}
    ok = by_call["call_ok"]
    assert [e.event.payload for e in ok if e.topic == "tool.stream.progress"] == events[:3]
    assert [e.event.payload for e in ok if e.topic == "tool.stream.partial"] == [Stdout(b"hello\n")]
    assert ok[-1].event.kind is ToolEventKind.COMPLETE
    assert ok[-1].event.payload == events[3]
    failed = by_call["call_failed"][-1].event
    assert failed.kind is ToolEventKind.ERROR
    assert isinstance(failed.error, ToolStreamError)
    assert failed.payload == events[7]
    cancelled = by_call["call_slow"][-1].event
    assert cancelled.kind is ToolEventKind.ERROR
    assert isinstance(cancelled.error, ToolCancelled)
    assert cancelled.payload == events[-1]


async def test_a_call_cancelled_from_outside_names_itself(local: LocalExecutor) -> None:
    """A cancel scope around one call ends it with a Cancelled naming it; the run goes on."""
    with MemoryBus(keep=None) as bus, bus.subscribe(Topic.PARTIAL) as output:
        calls = ToolCallEvents(local, tools=[run], bus=bus)
        async with calls, anyio.create_task_group() as group:
            scope = anyio.CancelScope()

            async def slow() -> None:
                with scope:
                    await calls.call("run", {"command": "echo up; sleep 30"}, tool_call_id="c1")

            group.start_soon(slow)
            await output.receive()  # the command is running
            scope.cancel()
        assert scope.cancelled_caught
        assert not tagged_processes()
        after = await calls.call("run", {"command": "echo after"}, tool_call_id="c2")
    assert after.text == "after\n"
    history = list(calls.history)
    assert history[3] == Cancelled(pending_tools=["run"], pending_tool_call_ids=["c1"])
    assert history[-1] == ToolExecuted(
        tool_name="run", tool_call_id="c2", success=True, error=None, kind=ToolOutputKind.OK
    )
    assert not calls.cancelled


async def test_cancel_names_every_pending_call_once(local: LocalExecutor) -> None:
    """Cancelling a run with two calls running, one getting arguments: one Cancelled for all."""
    errors: list[BaseException] = []
    events: list[AgentStreamEvent] = []
    with MemoryBus(keep=None) as bus, bus.subscribe(Topic.PARTIAL) as output:
        calls = ToolCallEvents(local, tools=[run], bus=bus)
        async with calls, anyio.create_task_group() as group:
            group.start_soon(_collect, calls.subscribe(), events)

            async def call(call_id: str) -> None:
                try:
                    await calls.call("run", {"command": "echo up; sleep 30"}, tool_call_id=call_id)
                except ToolCancelled as error:
                    errors.append(error)

            group.start_soon(call, "a")
            group.start_soon(call, "b")
            streaming = await calls.begin("run", tool_call_id="c")
            await streaming.delta('{"comm')
            running: set[str] = set()
            async for envelope in output:  # both commands are running once they print
                running.add(envelope.parent_id)
                if running == {"a", "b"}:
                    break
            await calls.cancel()
        with pytest.raises(ToolCancelled):
            await streaming.run()
        with pytest.raises(ToolCancelled, match="the run was cancelled"):
            await calls.begin("run")
    assert len(errors) == 2
    assert not tagged_processes()
    cancelled = [event for event in events if isinstance(event, Cancelled)]
    assert len(cancelled) == 1
    # In the order the calls began.
    began = [event.tool_call_id for event in events if isinstance(event, ToolCallStart)]
    assert sorted(began) == ["a", "b", "c"]  # type: ignore[type-var]
    assert cancelled[0].pending_tool_call_ids == began
    assert cancelled[0].pending_tools == ["run", "run", "run"]
    assert events[-1] is cancelled[0]
    assert not any(isinstance(event, ToolExecuted) for event in events)
    assert calls.cancelled
    assert calls.pending == []
    # A subscription made after the run ended is over at once.
    with calls.subscribe() as late:
        assert [event async for event in late] == []


async def test_streamed_arguments_are_deltas(local: LocalExecutor) -> None:
    """Arguments fed piece by piece are one delta each, and the call runs on them joined."""
    async with ToolCallEvents(local, tools=[run]) as calls:
        call = await calls.begin("run", tool_call_id="s1")
        for piece in ('{"comm', 'and": "echo ', 'joined"}'):
            await call.delta(piece)
        await call.complete()
        with pytest.raises(RuntimeError, match="complete"):
            await call.delta("more")
        output = await call.run()
        with pytest.raises(RuntimeError, match="ended"):
            await call.run()
    assert output.text == "joined\n"
    assert call.arguments == '{"command": "echo joined"}'
    assert list(calls.history)[:5] == [
        ToolCallStart(tool_name="run", tool_call_id="s1"),
        ToolCallDelta(delta='{"comm', tool_call_id="s1"),
        ToolCallDelta(delta='and": "echo ', tool_call_id="s1"),
        ToolCallDelta(delta='joined"}', tool_call_id="s1"),
        ToolCallComplete(tool_name="run", tool_call_id="s1"),
    ]


async def test_invalid_arguments_and_a_raising_tool_are_unsuccessful(local: LocalExecutor) -> None:
    """Refused arguments end in an unsuccessful ToolExecuted; so does a tool's own exception."""
    async with ToolCallEvents(local, tools=[run, explode]) as calls:
        output = await calls.call("run", {"command": 5}, tool_call_id="i1")
        with pytest.raises(RuntimeError, match="the tool broke"):
            await calls.call("explode", tool_call_id="x1")
    assert output.kind is ToolOutputKind.INVALID_ARGUMENTS
    executed = [event for event in calls.history if isinstance(event, ToolExecuted)]
    assert executed == [
        ToolExecuted(
            tool_name="run",
            tool_call_id="i1",
            success=False,
            error=output.text,
            kind=ToolOutputKind.INVALID_ARGUMENTS,
        ),
        ToolExecuted(tool_name="explode", tool_call_id="x1", success=False, error="the tool broke"),
    ]
    # No arguments: no delta.
    assert [type(event) for event in calls.history][4:] == [
        ToolCallStart,
        ToolCallComplete,
        ToolExecuted,
    ]


async def test_every_call_gets_an_id(local: LocalExecutor) -> None:
    """A call given no id gets a made-up one, the same in each of its events."""
    async with ToolCallEvents(local, tools=[run]) as calls:
        await calls.call(run, {"command": "true"})
    ids = {getattr(event, "tool_call_id", None) for event in calls.history}
    assert len(ids) == 1
    (made,) = ids
    assert isinstance(made, str)
    assert made.startswith("call_")


async def test_bad_calls_are_refused(local: LocalExecutor) -> None:
    """An unknown tool, a second call under a running id, and a bad id are refused clearly."""
    async with ToolCallEvents(local, tools=[run]) as calls:
        with pytest.raises(KeyError, match="no tool named 'rn'; the tools are: run"):
            await calls.call("rn")
        first = await calls.begin("run", tool_call_id="dup")
        with pytest.raises(ValueError, match="in progress already"):
            await calls.begin("run", tool_call_id="dup")
        with pytest.raises(ValueError, match="non-empty string"):
            await calls.begin("run", tool_call_id="")
        with pytest.raises(TypeError, match="must be text"):
            await first.delta(b"{}")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="AgentContext or a ToolExecutor"):
        ToolCallEvents(object())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="two tools"):
        ToolCallEvents(local, tools=[run, run])


@attrs.define
class RepoContext:
    """An agent's own context: an executor and the branch it works on."""

    ex: ToolExecutor
    branch: str

    def executor(self) -> ToolExecutor:
        return self.ex


@tool
async def branch(context: RepoContext) -> str:
    """Says which branch the agent is on, and runs a command."""
    await context.executor().exec_cmd(Command.shell("true"))
    return context.branch


async def test_the_tools_get_the_callers_context_observed(local: LocalExecutor) -> None:
    """The tools see the caller's own context (its attributes), with its executor observed."""
    bus = MemoryBus(keep=None)
    async with ToolCallEvents(RepoContext(local, "main"), tools=[branch], bus=bus) as calls:
        output = await calls.call("branch", tool_call_id="b1")
        assert calls.context.executor() is calls.context.executor()
        assert repr(calls.context.executor()).startswith("Observed(LocalExecutor(")
    assert output.text == "main"
    default = ToolCallEvents(DefaultContext.from_executor(local))
    assert repr(default.context.executor()).startswith("Observed(")


async def test_events_for_the_standard_toolset(tmp_path: Path) -> None:
    """The standard toolset's calls are reported, and its context still records the last output."""
    from executor import Toolset

    toolset = Toolset()
    async with LocalExecutor(tmp_path) as executor, toolset:
        context = toolset.context(executor)
        async with ToolCallEvents(context, tools=toolset) as calls:
            await calls.call("write_file", {"path": "a.txt", "content": "x\n"}, tool_call_id="w")
            edit = await calls.call(
                "edit_file",
                {"path": "a.txt", "old_text": "missing", "new_text": "y"},
                tool_call_id="e",
            )
            failed = await calls.call("run", {"command": "echo bad >&2; exit 9"}, tool_call_id="r")
    assert edit.is_error
    assert failed.exit_code == 9
    assert context.last_output is not None
    assert context.last_output.exit_code == 9
    executed = [event for event in calls.history if isinstance(event, ToolExecuted)]
    assert [(event.tool_call_id, event.success) for event in executed] == [
        ("w", True),
        ("e", False),
        ("r", False),
    ]
    assert executed[2].exit_code == 9
