"""Figure 2: 200 concurrent `sleep 0.1; echo x`: wall time and peak RSS, ours against baselines.

What is measured: an agent that fans out many tool calls at once. Every side
starts all the commands together and waits for all of them; we report the wall
time from the first start to the last result, and the peak resident memory of
the Python process (`ru_maxrss`) above what it held just before starting.

Each repetition of each side runs in a fresh interpreter (so the high-water
mark is that side's alone), all of them importing the same modules; the sides
alternate, repetition by repetition, so the shared machine's noise spreads
over all of them.

Sides: `asyncio raw` (`create_subprocess_shell` + `communicate()` under
`asyncio.gather`), `anyio.run_process` (asyncio backend, in a task group), and
ours (`LocalExecutor.exec_cmd` in a task group) on asyncio and trio.

Target: ours (asyncio) wall time and peak RSS growth each <= 1.2x raw asyncio's.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import _harness as h
import anyio

from executor import Command, LocalExecutor

TARGET = 1.2
SIDES = ["asyncio raw", "anyio.run_process (asyncio)", "ours (asyncio)", "ours (trio)"]
BASELINE = "asyncio raw"
ANYIO = "anyio.run_process (asyncio)"
OURS = "ours (asyncio)"


def _asyncio_raw(workdir: str, script: str, count: int) -> list[bytes]:
    async def one() -> bytes:
        process = await asyncio.create_subprocess_shell(
            script, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=workdir
        )
        out, _ = await process.communicate()
        return out

    async def main() -> list[bytes]:
        return list(await asyncio.gather(*(one() for _ in range(count))))

    return asyncio.run(main())


def _anyio_run_process(workdir: str, script: str, count: int) -> list[bytes]:
    results: list[bytes] = []

    async def one() -> None:
        completed = await anyio.run_process(script, cwd=workdir)
        results.append(completed.stdout)

    async def main() -> None:
        async with anyio.create_task_group() as tasks:
            for _ in range(count):
                tasks.start_soon(one)

    anyio.run(main, backend="asyncio")
    return results


def _ours(backend: str) -> Callable[[str, str, int], list[bytes]]:
    def run(workdir: str, script: str, count: int) -> list[bytes]:
        results: list[bytes] = []
        command = Command.shell(script)

        async def main() -> None:
            async with LocalExecutor(workdir) as ex:

                async def one() -> None:
                    results.append((await ex.exec_cmd(command)).stdout)

                async with anyio.create_task_group() as tasks:
                    for _ in range(count):
                        tasks.start_soon(one)

        anyio.run(main, backend=backend)
        return results

    return run


RUNNERS: dict[str, Callable[[str, str, int], list[bytes]]] = {
    "asyncio raw": _asyncio_raw,
    "anyio.run_process (asyncio)": _anyio_run_process,
    "ours (asyncio)": _ours("asyncio"),
    "ours (trio)": _ours("trio"),
}


def worker(side: str, count: int, sleep: float) -> None:
    h.preload()
    script = f"sleep {sleep}; echo x"
    with tempfile.TemporaryDirectory(prefix="bench-concurrency-") as workdir:
        before = h.current_rss()
        started = time.perf_counter()
        outputs = RUNNERS[side](workdir, script, count)
        wall = time.perf_counter() - started
        peak = h.peak_rss()
    if outputs != [b"x\n"] * count:
        raise RuntimeError(f"{side}: unexpected outputs {set(outputs)!r} x{len(outputs)}")
    h.worker_result({"wall": wall, "peak": peak, "before": before})


def measure(count: int, sleep: float, reps: int) -> dict[str, list[dict[str, Any]]]:
    results: dict[str, list[dict[str, Any]]] = {side: [] for side in SIDES}
    for rep in range(reps):
        for side in h.rotated(SIDES, rep):
            results[side].append(h.run_worker(__file__, [side, str(count), str(sleep)]))
    return results


def report(results: dict[str, list[dict[str, Any]]], count: int, sleep: float) -> bool:
    wall: dict[str, float] = {
        side: statistics.median(r["wall"] for r in rs) for side, rs in results.items()
    }
    peak: dict[str, float] = {
        side: statistics.median(r["peak"] for r in rs) for side, rs in results.items()
    }
    growth: dict[str, float] = {
        side: statistics.median(r["peak"] - r["before"] for r in rs) for side, rs in results.items()
    }
    rows = []
    for side in SIDES:
        rows.append(
            [
                side,
                len(results[side]),
                f"{wall[side]:.3f}",
                f"{min(r['wall'] for r in results[side]):.3f}",
                f"{peak[side] / h.MIB:.1f}",
                f"{growth[side] / h.MIB:.1f}",
                h.fmt_ratio(wall[side], wall[BASELINE]),
                h.fmt_ratio(growth[side], growth[BASELINE]),
                h.fmt_ratio(peak[side], peak[BASELINE]),
                h.fmt_ratio(wall[side], wall[ANYIO]),
                h.fmt_ratio(growth[side], growth[ANYIO]),
            ]
        )
    print(f"Figure 2: {count} concurrent `sleep {sleep}; echo x` (medians over fresh processes)")
    h.print_table(
        [
            "side",
            "reps",
            "wall s",
            "best s",
            "peak MiB",
            "growth MiB",
            "wall/raw",
            "grow/raw",
            "peak/raw",
            "wall/anyio",
            "grow/anyio",
        ],
        rows,
    )
    wall_ratio = wall[OURS] / wall[BASELINE]
    growth_ratio = growth[OURS] / growth[BASELINE] if growth[BASELINE] else float("inf")
    peak_ratio = peak[OURS] / peak[BASELINE]
    met_wall = wall_ratio <= TARGET
    met_rss = growth_ratio <= TARGET and peak_ratio <= TARGET
    print(
        f"target: ours (asyncio) wall <= {TARGET}x raw asyncio: {wall_ratio:.2f}x "
        f"-> {h.verdict(met_wall)}"
    )
    print(
        f"target: ours (asyncio) peak RSS <= {TARGET}x raw asyncio: whole process "
        f"{peak_ratio:.2f}x, growth during the run {growth_ratio:.2f}x -> {h.verdict(met_rss)}"
    )
    return met_wall and met_rss


def main(argv: list[str] | None = None) -> int:
    parser = h.command_line(__doc__, "few commands, as a smoke check")
    parser.add_argument("--count", type=int, help="concurrent commands (default 200)")
    parser.add_argument("--reps", type=int, help="fresh-process repetitions per side (default 5)")
    parser.add_argument(
        "--worker", nargs=3, metavar=("SIDE", "COUNT", "SLEEP"), help=argparse.SUPPRESS
    )
    args = parser.parse_args(argv)
    if args.worker:
        side, count, sleep = args.worker
        worker(side, int(count), float(sleep))
        return 0
    count = args.count or (20 if args.quick else 200)
    reps = args.reps or (1 if args.quick else 5)
    sleep = 0.1
    report(measure(count, sleep, reps), count, sleep)
    return 0


if __name__ == "__main__":
    sys.exit(main())
