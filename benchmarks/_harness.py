"""Shared plumbing for the benchmark scripts: statistics, tables, fresh-process workers.

Not a benchmark itself (`run_all.py` only runs `bench_*.py`). Each script puts
its own folder first on `sys.path` when run as `python benchmarks/bench_X.py`,
so `import _harness` finds this file.

Fresh processes matter for memory figures: `ru_maxrss` is a high-water mark
over a process's whole life, so each side that reports peak RSS runs alone in
a new interpreter that has imported and started the same modules as every
other side (`preload`), and reports its peak minus the RSS it had just before
the measured work started.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

import attrs
import psutil

__all__ = [
    "MIB",
    "Batch",
    "Scale",
    "Stats",
    "command_line",
    "cpu_seconds",
    "current_rss",
    "fmt_ms",
    "fmt_ratio",
    "interleaved",
    "peak_rss",
    "per_side",
    "percentile",
    "preload",
    "print_table",
    "rotated",
    "run_worker",
    "sample_row",
    "verdict",
    "worker_result",
]

MIB = 1 << 20


def percentile(values: Sequence[float], q: float) -> float:
    """The `q`-th percentile (0..100) of `values`, linear between closest ranks."""
    if not values:
        return math.nan
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low = math.floor(position)
    high = math.ceil(position)
    if low == high:
        return ordered[low]
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


class Stats:
    """Median, p99 and friends of one sample of durations (seconds)."""

    def __init__(self, values: Iterable[float]) -> None:
        self.values = list(values)

    @property
    def median(self) -> float:
        """The median."""
        return statistics.median(self.values) if self.values else math.nan

    @property
    def p99(self) -> float:
        """The 99th percentile."""
        return percentile(self.values, 99)

    @property
    def maximum(self) -> float:
        """The largest value."""
        return max(self.values) if self.values else math.nan

    @property
    def minimum(self) -> float:
        """The smallest value."""
        return min(self.values) if self.values else math.nan


Batch = Callable[[str, int], list[float]]
"""One side of a benchmark: given a workdir and a count, runs that often; each run's seconds."""


def command_line(doc: str | None, quick: str) -> argparse.ArgumentParser:
    """A benchmark's parser: the first line of `doc` describes it; `--quick` does `quick`."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0] if doc else None)
    parser.add_argument("--quick", action="store_true", help=quick)
    return parser


_T = TypeVar("_T")


@attrs.frozen
class Scale:
    """How much one run of a benchmark does: `--quick` or not, and commands per side."""

    quick: bool
    count: int

    def pick(self, quick: _T, full: _T) -> _T:
        """`quick` under `--quick`, else `full`."""
        return quick if self.quick else full


def per_side(doc: str | None, argv: Sequence[str] | None, *, quick: int, full: int) -> Scale:
    """Parse the command line of a benchmark that runs commands per side.

    `--quick` runs `quick` commands per side, as a smoke check; `--count N`
    runs N; neither, `full`.
    """
    parser = command_line(doc, "a few commands, as a smoke check")
    parser.add_argument("--count", type=int, help=f"commands per side (default {full})")
    args = parser.parse_args(argv)
    return Scale(args.quick, args.count or (quick if args.quick else full))


def rotated(names: Sequence[str], turn: int) -> list[str]:
    """`names` in the order of turn `turn`, each going first in its turn.

    The machine is shared and its noise comes in bursts: no side always runs
    right after the same other one, and every burst is spread over all sides.
    """
    shift = turn % len(names)
    return [*names[shift:], *names[:shift]]


def interleaved(
    sides: Mapping[str, Batch], prefix: str, count: int, rounds: int, warmup: int
) -> dict[str, Stats]:
    """Time `count` runs per side, in `rounds` rounds that take turns between sides.

    Each side first runs `warmup` times unmeasured. All run in one temporary
    workdir whose name starts with `prefix`.
    """
    names = list(sides)
    samples: dict[str, list[float]] = {name: [] for name in names}
    per_round = max(1, count // rounds)
    with tempfile.TemporaryDirectory(prefix=prefix) as workdir:
        for name in names:
            sides[name](workdir, warmup)
        for index in range(rounds):
            for name in rotated(names, index):
                samples[name].extend(sides[name](workdir, per_round))
    return {name: Stats(values) for name, values in samples.items()}


def sample_row(name: str, stats: Stats, *more: object) -> list[object]:
    """A table row: the side's name, its sample size, median and p99 (ms), then `more`."""
    return [name, len(stats.values), fmt_ms(stats.median), fmt_ms(stats.p99), *more]


def fmt_ms(seconds: float, digits: int = 3) -> str:
    """Seconds as milliseconds, for a table cell."""
    return f"{seconds * 1000:.{digits}f}"


def fmt_ratio(ours: float, theirs: float) -> str:
    """`ours / theirs` as `1.23x`, or `-` when undefined."""
    if not theirs or math.isnan(ours) or math.isnan(theirs):
        return "-"
    return f"{ours / theirs:.2f}x"


def verdict(met: bool) -> str:
    """How a target reads in a table."""
    return "MET" if met else "MISSED"


def print_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    """Print a plain aligned table (first column left-aligned, the rest right)."""
    cells = [[str(cell) for cell in row] for row in rows]
    widths = [len(header) for header in headers]
    for row in cells:
        for index, cell in enumerate(row):
            widths[index] = max(widths[index], len(cell))

    def line(row: Sequence[str]) -> str:
        parts = [
            cell.ljust(widths[i]) if i == 0 else cell.rjust(widths[i]) for i, cell in enumerate(row)
        ]
        return "  ".join(parts).rstrip()

    print(line(headers))
    print("  ".join("-" * width for width in widths))
    for row in cells:
        print(line(row))


async def timed(step: Callable[[], Awaitable[object]], count: int) -> list[float]:
    """The wall time of each of `count` awaits of `step()`, one after the other, in seconds."""
    times = []
    for _ in range(count):
        started = time.perf_counter()
        await step()
        times.append(time.perf_counter() - started)
    return times


async def engine_ready(image: str) -> str | None:
    """Why the Docker benchmarks cannot run (no engine, or `image` missing), or None.

    Imports the engine client only when called: most scripts never need it.
    """
    from executor._core.errors import EngineError
    from executor._docker.api import EngineClient

    api = EngineClient()
    try:
        await api.request("GET", "/_ping")
        response, _ = await api.request("GET", f"/images/{image}/json", ok=(200, 404))
        if response.status == 404:
            return f"image {image} is missing (.ci/services/docker.sh builds it)"
    except EngineError as error:
        return f"no Docker engine: {error}"
    finally:
        await api.aclose()
    return None


def current_rss() -> int:
    """This process's resident set size now, in bytes."""
    return int(psutil.Process().memory_info().rss)


def peak_rss() -> int:
    """This process's peak resident set size so far, in bytes (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def preload() -> None:
    """Import and start up everything any side uses, so no side pays imports inside its figure.

    anyio loads its backend modules at the first `anyio.run`; loading them here,
    and running each event loop once, keeps that one-off cost (about 1 MiB)
    out of the memory measured for whichever side happens to use anyio.
    """
    import asyncio
    import asyncio.subprocess

    import anyio
    import trio

    import executor

    # `import executor` alone loads nothing (names load on first use). Load
    # every name, as the package's import did before it was lazy: the heap
    # that leaves changes how fast raw asyncio's 64 KiB reads run (3-4x here,
    # see benchmarks/README.md), and every figure so far was taken with it.
    # The framework adapters are left out: they import pydantic-ai, LangChain and
    # the OpenAI Agents SDK (seconds, and tens of MiB) that no benchmark side uses.
    for name in executor.__all__:
        if not executor._HOME_OF[name].startswith("executor._adapters"):
            getattr(executor, name)

    async def nothing() -> None:
        pass

    asyncio.run(nothing())
    anyio.run(nothing, backend="asyncio")
    anyio.run(nothing, backend="trio")
    assert trio
    # The garbage of all that importing must not be collected inside a figure.
    gc.collect()


def cpu_seconds() -> float:
    """User plus system CPU time this process (all its threads) has used so far."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def worker_result(result: dict[str, Any]) -> None:
    """Hand a worker's result to the parent: one JSON line on stdout."""
    sys.stdout.write("RESULT " + json.dumps(result) + "\n")
    sys.stdout.flush()


def run_worker(script: str, args: Sequence[str], *, timeout: float = 300) -> dict[str, Any]:
    """Run `script --worker ARGS...` in a fresh interpreter and return its result.

    Raises:
        RuntimeError: The worker failed or printed no result.
    """
    completed = subprocess.run(
        [sys.executable, script, "--worker", *args],
        capture_output=True,
        timeout=timeout,
        check=False,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
    )
    if completed.returncode != 0:
        raise RuntimeError(
            f"worker {args} failed ({completed.returncode}):\n"
            + completed.stderr.decode(errors="replace")
        )
    for raw in reversed(completed.stdout.decode().splitlines()):
        if raw.startswith("RESULT "):
            result: dict[str, Any] = json.loads(raw[len("RESULT ") :])
            return result
    raise RuntimeError(f"worker {args} printed no result")
