"""A streaming tool: typed chunks while it runs, a typed final value, a policy for the context.

`Countdown` is a `StreamingTool[Input, Chunk, Final]`: its `start` returns a
`TaskHandle` around an async function that sends chunks through a
`ToolChannel` and returns the final value. A `StreamingToolSession` runs it:
`next_chunk()` gives your code every chunk, while the policy decides what the
model's context keeps (`Window(max_chunks=2)`: the last two), and
`finalize()` returns the final value with that context. `session.events()`
gives the same run as numbered `ToolEvent`s, and `bridge` publishes them on
a bus (`MemoryBus` here) as `tool.stream.partial` and one `tool.result`.
"""

from dataclasses import dataclass

import anyio

from executor import (
    MemoryBus,
    StreamingTool,
    StreamingToolHandle,
    StreamingToolSession,
    TaskHandle,
    ToolChannel,
    Window,
    bridge,
)


@dataclass
class Start:
    """The tool's input."""

    count: int


@dataclass
class Done:
    """The tool's final value."""

    sent: int


class Countdown(StreamingTool[Start, str, Done]):
    """Counts down from `count`, a line at a time."""

    name = "countdown"
    policy = Window(max_chunks=2)

    async def start(self, input: Start) -> StreamingToolHandle[str, Done]:
        """Run the countdown as a task."""

        async def run(channel: ToolChannel[str]) -> Done:
            for n in range(input.count, 0, -1):
                await channel.send(f"{n}...")
            return Done(sent=input.count)

        return TaskHandle(run)


async def main() -> None:
    tool = Countdown()
    print(f"spec: {tool.spec['name']} takes {tool.spec['parameters']['properties']}")
    async with StreamingToolSession(tool, tool.parse_input('{"count": 4}')) as session:
        while (chunk := await session.next_chunk()) is not None:
            print(f"chunk: {chunk}")
        result = await session.finalize()
    print(f"final: {result.final}, the context holds {list(result.chunks)}")
    print(f"read {result.context.received}, dropped {result.context.dropped}")

    with MemoryBus() as bus:
        async with StreamingToolSession(tool, Start(count=2)) as session:
            await bridge(session.events(), bus, call_id="call-1", tool_name=tool.name)
        print(f"bus: {', '.join(envelope.topic for envelope in bus.envelopes)}")


if __name__ == "__main__":
    anyio.run(main)
