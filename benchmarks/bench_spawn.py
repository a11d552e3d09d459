"""Figure 1: sequential spawn latency of `true`, ours against raw asyncio and anyio.

What is measured: the wall time of one whole command, start to reaped exit
with both output pipes read to the end, for `sh -c true` run back to back
(500 per side by default). That is the fixed cost every agent tool call pays,
so it bounds how chatty an agent can be.

Sides, all in this one process, in rounds whose order rotates so that the
machine's noise (2 shared cores) falls on every side alike:

- `asyncio raw`: `asyncio.create_subprocess_shell` with pipes, then
  `communicate()`, as a typical user writes it;
- `anyio.run_process`: on the asyncio backend;
- `ours`: `LocalExecutor.exec_cmd(Command.shell("true"))`, on asyncio and
  trio: started by the executor's supervisor (an idle shim, used again
  from command to command, takes it), in a cgroup of its own where this
  process may make one;
- `baseline (asyncio)`: the same with the code before the supervisor
  (`_baseline.BASELINE_COMMIT`, started from this process with `Popen`), in a
  worker interpreter of its own.

Each executor's first command is not timed (it may wait for the supervisor
to start). Target: ours (asyncio) median per command <= 1.0x raw asyncio's.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time

import _baseline
import _harness as h
import anyio

from executor import Command, LocalExecutor

TARGET = 1.0
Batch = h.Batch


def _asyncio_raw(workdir: str, count: int) -> list[float]:
    async def main() -> list[float]:
        times = []
        for _ in range(count):
            started = time.perf_counter()
            process = await asyncio.create_subprocess_shell(
                "true", stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=workdir
            )
            await process.communicate()
            times.append(time.perf_counter() - started)
        return times

    return asyncio.run(main())


def _anyio_run_process(backend: str) -> Batch:
    def batch(workdir: str, count: int) -> list[float]:
        async def main() -> list[float]:
            times = []
            for _ in range(count):
                started = time.perf_counter()
                await anyio.run_process("true", cwd=workdir)
                times.append(time.perf_counter() - started)
            return times

        return anyio.run(main, backend=backend)

    return batch


def _ours(backend: str) -> Batch:
    def batch(workdir: str, count: int) -> list[float]:
        async def main() -> list[float]:
            times = []
            command = Command.shell("true")
            async with LocalExecutor(workdir) as ex:
                await ex.exec_cmd(command)
                for _ in range(count):
                    started = time.perf_counter()
                    await ex.exec_cmd(command)
                    times.append(time.perf_counter() - started)
            return times

        return anyio.run(main, backend=backend)

    return batch


def _baseline_side(workdir: str, count: int) -> list[float]:
    result = _baseline.run_worker_in(_baseline.baseline_tree(), __file__, [workdir, str(count)])
    times: list[float] = result["times"]
    return times


SIDES: dict[str, Batch] = {
    "asyncio raw": _asyncio_raw,
    "anyio.run_process (asyncio)": _anyio_run_process("asyncio"),
    "ours (asyncio)": _ours("asyncio"),
    "ours (trio)": _ours("trio"),
    "baseline (asyncio)": _baseline_side,
}
BASELINE = "asyncio raw"
ANYIO = "anyio.run_process (asyncio)"


def measure(count: int, rounds: int, warmup: int) -> dict[str, h.Stats]:
    return h.interleaved(SIDES, "bench-spawn-", count, rounds, warmup)


def report(stats: dict[str, h.Stats]) -> bool:
    base = stats[BASELINE]
    anyio_stats = stats[ANYIO]
    rows = []
    for name, s in stats.items():
        rows.append(
            h.sample_row(
                name,
                s,
                h.fmt_ratio(s.median, base.median),
                h.fmt_ratio(s.p99, base.p99),
                h.fmt_ratio(s.median, anyio_stats.median),
            )
        )
    print("Figure 1: sequential spawn latency of `sh -c true` (ms per command)")
    # Measured as root: each of ours runs in a cgroup of its own.
    h.print_table(
        ["side", "n", "median", "p99", "med/raw", "p99/raw", "med/anyio"],
        rows,
    )
    ratio = stats["ours (asyncio)"].median / base.median
    met = ratio <= TARGET
    print(
        f"target: ours (asyncio) median <= {TARGET}x raw asyncio: {ratio:.2f}x -> {h.verdict(met)}"
    )
    return met


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--worker"]:
        h.preload()
        h.worker_result({"times": _ours("asyncio")(argv[1], int(argv[2]))})
        return 0
    scale = h.per_side(__doc__, argv, quick=24, full=500)
    h.preload()
    if _baseline.baseline_tree() is None:
        del SIDES["baseline (asyncio)"]
    report(measure(scale.count, scale.pick(4, 10), scale.pick(2, 10)))
    print(f"load {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
