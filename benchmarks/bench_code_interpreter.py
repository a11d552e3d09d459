"""Code interpreter: the round trip of `1 + 1` in a warm session vs `python -c` per call.

Sides, interleaved in rounds on one `LocalExecutor` (asyncio):

- `tool, stdio driver`: a whole call of `CodeInterpreterTool` (input, a
  `StreamingToolSession`, the result chunk, `finalize()`) on a named session
  whose interpreter is already up, Python on the stdio driver;
- `tool, Jupyter kernel`: the same on an `ipykernel` (when `ipykernel` and
  `jupyter_client` are installed);
- `python -c per call`: `exec_cmd(python -c "print(1 + 1)")`, a new
  interpreter for each cell, through the same executor.

Each side first runs a warm-up of unmeasured calls (the session's interpreter
starts then). Target: the stdio driver's median round trip <= 5 ms.
"""

from __future__ import annotations

import importlib.util
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable

import _harness as h
import anyio

from executor import (
    CodeInterpreterInput,
    CodeInterpreterTool,
    CodeStream,
    Command,
    LocalExecutor,
    StreamingToolSession,
)

TARGET = 0.005
STDIO = "tool, stdio driver"
JUPYTER = "tool, Jupyter kernel"
PYTHON_C = "python -c per call"
CELL = CodeInterpreterInput(language="python", code="1 + 1", session="bench")

Call = Callable[[], Awaitable[None]]


async def _cell(tool: CodeInterpreterTool) -> None:
    async with StreamingToolSession(tool, CELL) as session:
        # All chunks: IPython may warn on stderr (its output cache filling up).
        chunks = [chunk async for chunk in session]
        result = await session.finalize()
    results = [chunk.content for chunk in chunks if chunk.stream is CodeStream.RESULT]
    assert results == ["2"], (tool.jupyter, chunks, result.final)
    assert result.final.success


async def measure(workdir: str, count: int, rounds: int, warmup: int) -> dict[str, h.Stats]:
    """Round-trip times per side, `count` calls each in `rounds` interleaved rounds."""
    python = sys.executable
    jupyter = (
        importlib.util.find_spec("jupyter_client") is not None
        and importlib.util.find_spec("ipykernel") is not None
    )
    async with LocalExecutor(workdir) as ex:
        stdio = CodeInterpreterTool(ex, interpreters={"python": python}, jupyter=False)
        kernel = CodeInterpreterTool(ex, interpreters={"python": python}, jupyter=True)
        async with stdio, kernel:
            command = Command.exec([python, "-c", "print(1 + 1)"])

            async def python_c() -> None:
                output = await ex.exec_cmd(command)
                assert output.stdout == b"2\n"

            sides: dict[str, Call] = {STDIO: lambda: _cell(stdio), PYTHON_C: python_c}
            if jupyter:
                sides[JUPYTER] = lambda: _cell(kernel)
            samples: dict[str, list[float]] = {name: [] for name in sides}
            for call in sides.values():
                for _ in range(warmup):
                    await call()
            per_round = max(1, count // rounds)
            for turn in range(rounds):
                for name in h.rotated(list(sides), turn):
                    call = sides[name]
                    for _ in range(per_round):
                        started = time.perf_counter()
                        await call()
                        samples[name].append(time.perf_counter() - started)
    return {name: h.Stats(values) for name, values in samples.items()}


def report(stats: dict[str, h.Stats]) -> bool:
    """Print the table and the target; whether it was met."""
    baseline = stats[PYTHON_C].median
    print("Round trip of `1 + 1` (ms, lower is better)")
    h.print_table(
        ["side", "calls", "median", "p99", "vs python -c"],
        [h.sample_row(name, s, h.fmt_ratio(s.median, baseline)) for name, s in stats.items()],
    )
    if JUPYTER not in stats:
        print("(no Jupyter side: ipykernel and jupyter_client are not installed)")
    median = stats[STDIO].median
    met = median <= TARGET
    print()
    print(
        f"target: the stdio driver's median round trip <= {TARGET * 1000:g} ms: "
        f"{median * 1000:.3f} ms -> {h.verdict(met)}"
    )
    return met


def main(argv: list[str] | None = None) -> int:
    """Measure and print the report."""
    scale = h.per_side(__doc__, argv, quick=20, full=1000)
    rounds = scale.pick(1, 10)
    warmup = scale.pick(3, 20)
    h.preload()
    with tempfile.TemporaryDirectory(prefix="bench-interpreter-") as workdir:
        stats = anyio.run(measure, workdir, scale.count, rounds, warmup, backend="asyncio")
    report(stats)
    return 0


if __name__ == "__main__":
    sys.exit(main())
