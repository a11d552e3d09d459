"""Figure 4: line latency: how long a printed line takes to reach the consumer.

What is measured: the delay between a child writing a line and the consumer
seeing it, which is what an agent (or a human watching a streaming tool) feels
as lag. The child, a `python -c` script run through `sh -c`, prints
`time.monotonic()` and flushes, every 10 ms; the consumer stamps each complete
line with `time.monotonic()` when it arrives. CLOCK_MONOTONIC is one clock for
the whole machine, so arrival minus stamp is the delay. We report its median,
p99 and maximum over all lines.

Sides, in this one process, in rounds whose order rotates:

- `asyncio raw`: `create_subprocess_shell` with pipes, `async for line in
  proc.stdout`;
- `anyio.open_process`: `async for chunk in proc.stdout`, split into lines
  (asyncio backend);
- ours: `LocalExecutor.exec_cmd_streaming` with a sink that splits chunks
  into lines, on asyncio and trio;
- `baseline (asyncio)`: the same with the code before this reader
  (`_baseline.BASELINE_COMMIT`: a FIONREAD ioctl and a read per wakeup, a
  second read that says EAGAIN, the pipe added to and removed from epoll at
  every wait), in a worker interpreter of its own.

Targets: ours (asyncio) median and p99 <= 1.0x raw asyncio's, p99 <= 1 ms.
"""

from __future__ import annotations

import asyncio
import os
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

import _baseline
import _harness as h
import anyio

from executor import Chunk, Command, LocalExecutor

TARGET = 0.001
INTERVAL = 0.01
BASELINE = "asyncio raw"
ANYIO = "anyio.open_process (asyncio)"
OURS = "ours (asyncio)"

CHILD = """\
import sys, time
end = time.monotonic() + {seconds!r}
write, flush = sys.stdout.write, sys.stdout.flush
while True:
    now = time.monotonic()
    if now > end:
        break
    write(repr(now) + "\\n")
    flush()
    time.sleep({interval!r})
"""


class Lines:
    """Splits chunks into lines and records each line's delay at arrival."""

    def __init__(self) -> None:
        self.pending = b""
        self.delays: list[float] = []

    def feed(self, data: bytes) -> None:
        """Take a chunk received now."""
        arrived = time.monotonic()
        *complete, self.pending = (self.pending + data).split(b"\n")
        for line in complete:
            self.delays.append(arrived - float(line))


def _script(seconds: float) -> str:
    code = CHILD.format(seconds=seconds, interval=INTERVAL)
    return f"{shlex.quote(sys.executable)} -c {shlex.quote(code)}"


def _asyncio_raw(workdir: str, seconds: float) -> list[float]:
    async def main() -> list[float]:
        delays = []
        process = await asyncio.create_subprocess_shell(
            _script(seconds), stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=workdir
        )
        assert process.stdout is not None
        async for line in process.stdout:
            delays.append(time.monotonic() - float(line))
        await process.wait()
        return delays

    return asyncio.run(main())


def _anyio_open_process(workdir: str, seconds: float) -> list[float]:
    lines = Lines()

    async def main() -> None:
        async with await anyio.open_process(_script(seconds), cwd=workdir) as process:
            assert process.stdout is not None
            async for chunk in process.stdout:
                lines.feed(chunk)

    anyio.run(main, backend="asyncio")
    return lines.delays


def _ours(backend: str) -> Callable[[str, float], list[float]]:
    def run(workdir: str, seconds: float) -> list[float]:
        lines = Lines()

        def sink(chunk: Chunk) -> None:
            lines.feed(chunk.data)

        async def main() -> None:
            async with LocalExecutor(workdir) as ex:
                await ex.exec_cmd_streaming(Command.shell(_script(seconds)), sink)

        anyio.run(main, backend=backend)
        return lines.delays

    return run


def _baseline_side(workdir: str, seconds: float) -> list[float]:
    result = _baseline.run_worker_in(_baseline.baseline_tree(), __file__, [workdir, repr(seconds)])
    delays: list[float] = result["delays"]
    return delays


SIDES: dict[str, Callable[[str, float], list[float]]] = {
    "asyncio raw": _asyncio_raw,
    "anyio.open_process (asyncio)": _anyio_open_process,
    "ours (asyncio)": _ours("asyncio"),
    "ours (trio)": _ours("trio"),
    "baseline (asyncio)": _baseline_side,
}


def measure(seconds: float, rounds: int) -> dict[str, h.Stats]:
    names = list(SIDES)
    delays: dict[str, list[float]] = {name: [] for name in names}
    with tempfile.TemporaryDirectory(prefix="bench-line-latency-") as workdir:
        for index in range(rounds):
            for name in h.rotated(names, index):
                delays[name].extend(SIDES[name](workdir, seconds / rounds))
    return {name: h.Stats(values) for name, values in delays.items()}


def report(stats: dict[str, h.Stats], seconds: float) -> bool:
    base = stats[BASELINE]
    anyio_stats = stats[ANYIO]
    rows = []
    for name, s in stats.items():
        rows.append(
            h.sample_row(
                name,
                s,
                h.fmt_ms(s.maximum),
                h.fmt_ratio(s.median, base.median),
                h.fmt_ratio(s.p99, base.p99),
                h.fmt_ratio(s.p99, anyio_stats.p99),
            )
        )
    print(
        f"Figure 4: line delay, one line every {INTERVAL * 1000:.0f} ms for {seconds:g} s"
        " per side (ms from the child's stamp to arrival)"
    )
    h.print_table(
        ["side", "lines", "median", "p99", "max", "med/raw", "p99/raw", "p99/anyio"], rows
    )
    p99 = stats[OURS].p99
    median = stats[OURS].median
    met = p99 <= TARGET and p99 <= base.p99 and median <= base.median
    print(
        f"target: ours (asyncio) median and p99 <= 1.0x raw asyncio, p99 <= "
        f"{TARGET * 1000:g} ms: {h.fmt_ratio(median, base.median)}, "
        f"{h.fmt_ratio(p99, base.p99)}, {p99 * 1000:.3f} ms -> {h.verdict(met)} "
        f"(load {os.getloadavg()[0]:.2f})"
    )
    return met


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--worker"]:
        h.preload()
        h.worker_result({"delays": _ours("asyncio")(argv[1], float(argv[2]))})
        return 0
    parser = h.command_line(__doc__, "0.3 s per side, as a smoke check")
    parser.add_argument("--seconds", type=float, help="printing time per side (default 3)")
    parser.add_argument(
        "--rounds", type=int, help="alternating rounds it is split into (default 6)"
    )
    args = parser.parse_args(argv)
    seconds = args.seconds or (0.3 if args.quick else 3.0)
    rounds = args.rounds or (1 if args.quick else 6)
    h.preload()
    if _baseline.baseline_tree() is None:
        del SIDES["baseline (asyncio)"]
    report(measure(seconds, rounds), seconds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
