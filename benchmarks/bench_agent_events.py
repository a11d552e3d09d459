"""Agent stream events and adapters: what reporting a tool call costs, as a ratio to `invoke`.

What is measured: the wall time of one whole tool call of a `@tool` that runs
`sh -c true` through a `LocalExecutor` (arguments parsed, spawn to reaped
exit, output rendered), run back to back (300 per side by default), on

- `Tool.invoke`: the call alone;
- `ToolCallEvents.call`: the same call reported as agent stream events
  (Start, Delta, Complete, ToolExecuted), its executor wrapped in `Observed`;
- `ToolCallEvents.call + subscriber + bus`: the same with a subscriber
  draining the events and a `MemoryBus` taking every call's tool event stream;
- `LangChain StructuredTool.ainvoke`: the call through the LangChain adapter,
  invoked with a tool call (LangChain's own callbacks and message included),
  for reference.

All sides run in this one process, in one asyncio event loop, over one
`LocalExecutor`, taking turns call by call (the order rotating each turn) so
the machine's noise falls on every side alike. Target: the events' median
per call <= 1.10x `Tool.invoke`'s, with or without subscriber and bus.

A second table times the events' own cost on a tool that runs no command
(microseconds per call, median), and a third `spec_for` for each shape on a
tool of eleven parameters, a cost paid once per tool listing.
"""

from __future__ import annotations

import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from typing import Any

import _harness as h
import anyio

from executor import (
    AgentContext,
    Command,
    DefaultContext,
    LocalExecutor,
    MemoryBus,
    SpecShape,
    ToolCallEvents,
    WorkspacePath,
    langchain_tool,
    tool,
)

TARGET = 1.10
BASELINE = "Tool.invoke"
REFERENCE = "LangChain StructuredTool.ainvoke"


@tool
async def run(context: AgentContext, command: str, timeout: float = 60) -> str:
    """Runs a shell command.

    Args:
        context: The agent context (not a parameter the model sees).
        command: The shell command.
        timeout: Seconds before it is stopped.
    """
    output = await context.executor().exec_cmd(Command.shell(command).with_timeout(timeout))
    return output.text()


@tool
async def echo(text: str) -> str:
    """Returns its text: a tool that runs no command, for the events' own cost."""
    return text


def overhead(count: int) -> list[list[object]]:
    """Microseconds per call (median of `count`) of a tool that runs nothing."""
    rows: list[list[object]] = []

    async def main() -> None:
        quiet = ToolCallEvents(DefaultContext.from_executor(LocalExecutor(".")), keep=0)
        bus = MemoryBus(keep=0)
        watched = ToolCallEvents(quiet.context, bus=bus, keep=0)
        sides: dict[str, Callable[[], Awaitable[Any]]] = {
            BASELINE: lambda: echo.invoke(None, '{"text": "hi"}'),
            "ToolCallEvents.call": lambda: quiet.call(echo, '{"text": "hi"}'),
            "ToolCallEvents.call + bus": lambda: watched.call(echo, '{"text": "hi"}'),
        }
        samples: dict[str, list[float]] = {name: [] for name in sides}
        for turn in range(count):
            for name in h.rotated(list(sides), turn):
                started = time.perf_counter()
                await sides[name]()
                samples[name].append(time.perf_counter() - started)
        for name, values in samples.items():
            rows.append([name, count, f"{h.Stats(values).median * 1e6:.1f}"])

    anyio.run(main, backend="asyncio")
    return rows


@tool
async def wide(
    path: WorkspacePath,
    mode: str = "fast",
    limit: int = 10,
    ratio: float | None = None,
    names: list[str] | None = None,
    depth: int = 2,
    data: bytes = b"",
    span: tuple[int, int] = (1, 2),
    flag: bool = False,
    tags: dict[str, str] | None = None,
    note: str | None = None,
) -> str:
    """A tool of eleven parameters, for timing the spec shapes."""
    return "ok"


def measure(count: int, warmup: int) -> dict[str, h.Stats]:
    """Time `count` calls per side, taking turns call by call in one event loop."""
    samples: dict[str, list[float]] = {}
    arguments = '{"command": "true"}'

    async def main(workdir: str) -> None:
        async with LocalExecutor(workdir) as local, anyio.create_task_group() as group:
            context = DefaultContext.from_executor(local)
            quiet = ToolCallEvents(context, tools=[run], keep=0)
            bus = MemoryBus(keep=0)
            watched = ToolCallEvents(context, tools=[run], bus=bus, keep=0)
            subscription = watched.subscribe()

            async def drain() -> None:
                async with subscription:
                    async for _ in subscription:
                        pass

            group.start_soon(drain)
            structured = langchain_tool(run, context)
            ids = iter(range(1 << 62))

            async def langchain_call() -> Any:
                call = {
                    "type": "tool_call",
                    "id": f"l{next(ids)}",
                    "name": "run",
                    "args": {"command": "true"},
                }
                return await structured.ainvoke(call)

            sides: dict[str, Callable[[], Awaitable[Any]]] = {
                BASELINE: lambda: run.invoke(context, arguments),
                "ToolCallEvents.call": lambda: quiet.call("run", arguments),
                "ToolCallEvents.call + subscriber + bus": lambda: watched.call("run", arguments),
                REFERENCE: langchain_call,
            }
            samples.update({name: [] for name in sides})
            for _ in range(warmup):
                for side in sides.values():
                    await side()
            for turn in range(count):
                for name in h.rotated(list(sides), turn):
                    started = time.perf_counter()
                    await sides[name]()
                    samples[name].append(time.perf_counter() - started)
            await watched.aclose()
            bus.close()

    with tempfile.TemporaryDirectory(prefix="bench-agent-events-") as workdir:
        anyio.run(main, workdir, backend="asyncio")
    return {name: h.Stats(values) for name, values in samples.items()}


def shapes(count: int) -> list[list[object]]:
    """Microseconds per `spec_for` (median of `count`) for each shape."""
    rows: list[list[object]] = []
    kinds: tuple[SpecShape, ...] = ("openai", "anthropic", "mcp", "gemini")
    for shape in kinds:
        times = []
        for _ in range(count):
            started = time.perf_counter()
            wide.spec_for(shape)
            times.append(time.perf_counter() - started)
        rows.append([shape, count, f"{h.Stats(times).median * 1e6:.1f}"])
    return rows


def report(
    stats: dict[str, h.Stats], own: list[list[object]], shape_rows: list[list[object]]
) -> None:
    base = stats[BASELINE]
    rows = [
        h.sample_row(name, s, h.fmt_ratio(s.median, base.median), h.fmt_ratio(s.p99, base.p99))
        for name, s in stats.items()
    ]
    print("A tool call of `sh -c true`, reported or not (ms per call)")
    h.print_table(["side", "n", "median", "p99", "med/invoke", "p99/invoke"], rows)
    for name, s in stats.items():
        if name in (BASELINE, REFERENCE):
            continue
        ratio = s.median / base.median
        print(
            f"target: {name} median <= {TARGET}x Tool.invoke: {ratio:.2f}x -> "
            f"{h.verdict(ratio <= TARGET)}"
        )
    print()
    print("The events' own cost: a tool that runs no command (microseconds per call, median)")
    h.print_table(["side", "n", "us"], own)
    print()
    print("spec_for on a tool of eleven parameters (microseconds, median)")
    h.print_table(["shape", "n", "us"], shape_rows)


def main(argv: list[str] | None = None) -> int:
    scale = h.per_side(__doc__, argv, quick=8, full=300)
    h.preload()
    stats = measure(scale.count, scale.pick(1, 10))
    report(stats, overhead(scale.pick(50, 2000)), shapes(scale.pick(20, 500)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
