"""Agent stream events for three tool calls: one succeeds, one fails, one is cancelled.

`ToolCallEvents` runs each call and reports it as the agent stream's events:
`ToolCallStart`, `ToolCallDelta` (the arguments), `ToolCallComplete`, then
`ToolExecuted` with `success` and `error`, or `Cancelled` with the
`pending_tools`. A subscriber reads them as an async iterator; a bus gets each
call as one tool event stream under the call's id, with the command's output
as it is printed (the tools' executor is wrapped in `Observed`). Here the
third call is cancelled as soon as its command has printed, and the command
is killed.
"""

import tempfile

import anyio

from executor import (
    AgentContext,
    AgentStreamEvent,
    Command,
    LocalExecutor,
    MemoryBus,
    ToolCallEvents,
    ToolCancelled,
    tool,
)


@tool
async def run(context: AgentContext, command: str) -> str:
    """Runs a shell command and returns its output.

    Args:
        command: The shell command.
    """
    output = await context.executor().exec_cmd(Command.shell(command))
    return output.text()


async def show(events: "anyio.abc.ObjectReceiveStream[AgentStreamEvent]") -> None:
    async with events:
        async for event in events:
            print(f"event: {event!r}")


async def main() -> None:
    with tempfile.TemporaryDirectory() as workdir, MemoryBus(keep=None) as bus:
        async with (
            LocalExecutor(workdir) as executor,
            ToolCallEvents(executor, tools=[run], bus=bus) as calls,
            anyio.create_task_group() as group,
        ):
            group.start_soon(show, calls.subscribe())
            await calls.call("run", {"command": "echo hello"}, tool_call_id="call_1")
            await calls.call("run", {"command": "echo no >&2; exit 3"}, tool_call_id="call_2")

            async def slow() -> None:
                try:
                    await calls.call(
                        "run", {"command": "echo started; sleep 60"}, tool_call_id="call_3"
                    )
                except ToolCancelled as error:
                    print(f"call_3 raised ToolCancelled: {error}")

            with bus.subscribe("tool.stream.partial") as output:
                group.start_soon(slow)
                async for envelope in output:
                    if envelope.parent_id == "call_3":  # its command is running
                        break
            await calls.cancel()
        streams: dict[str, list[str]] = {}
        for envelope in bus.envelopes:
            streams.setdefault(envelope.parent_id, []).append(envelope.event.kind.name)
        for call_id, kinds in streams.items():
            print(f"bus {call_id}: {' '.join(kinds)}")


if __name__ == "__main__":
    anyio.run(main)
