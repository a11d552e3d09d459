"""Sessions: `ProcessSession` throughput and chunk latency vs `exec_cmd_streaming` and asyncio.

Throughput: `dd if=/dev/zero bs=1M count=N` read to the end through a
session (`async for`), through `exec_cmd_streaming` with a counting sink, and
through a raw asyncio read loop (`create_subprocess_shell`, `read(1 << 16)`),
in interleaved rounds; the median MB/s per side, and ratios.

Latency: a `python -c` child prints `time.monotonic()` every 10 ms; the
consumer stamps each complete line on arrival (one machine-wide clock), so
arrival minus stamp is the delay; median and p99 per side.

Targets: session throughput >= 90% of `exec_cmd_streaming`; session p99 chunk
latency <= 2 ms. All on asyncio.
"""

from __future__ import annotations

import asyncio
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

import _harness as h
import anyio
import bench_line_latency

from executor import Chunk, Command, LocalExecutor

THROUGHPUT_TARGET = 0.9
LATENCY_TARGET = 0.002
INTERVAL = 0.01
SESSION = "session"
STREAMING = "exec_cmd_streaming"
RAW = "asyncio raw"

# The timestamped-line child and its reader are figure 4's, shared so both
# figures measure the same thing.
CHILD = bench_line_latency.CHILD
Lines = bench_line_latency.Lines


def _dd(mib: int) -> str:
    return f"dd if=/dev/zero bs=1M count={mib} 2>/dev/null"


def _latency_script(seconds: float) -> str:
    code = CHILD.format(seconds=seconds, interval=INTERVAL)
    return f"{shlex.quote(sys.executable)} -c {shlex.quote(code)}"


def _session(workdir: str, script: str, feed: Callable[[bytes], None]) -> None:
    async def main() -> None:
        async with (
            LocalExecutor(workdir, output_limit=1 << 20) as ex,
            await ex.start(Command.shell(script)) as session,
        ):
            async for item in session:
                feed(item.chunk.data)
            await session.finalize()

    anyio.run(main, backend="asyncio")


def _streaming(workdir: str, script: str, feed: Callable[[bytes], None]) -> None:
    def sink(chunk: Chunk) -> None:
        feed(chunk.data)

    async def main() -> None:
        async with LocalExecutor(workdir, output_limit=1 << 20) as ex:
            await ex.exec_cmd_streaming(Command.shell(script), sink)

    anyio.run(main, backend="asyncio")


def _raw(workdir: str, script: str, feed: Callable[[bytes], None]) -> None:
    async def main() -> None:
        process = await asyncio.create_subprocess_shell(
            script, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=workdir
        )
        assert process.stdout is not None
        while data := await process.stdout.read(1 << 16):
            feed(data)
        await process.wait()

    asyncio.run(main())


SIDES: dict[str, Callable[[str, str, Callable[[bytes], None]], None]] = {
    SESSION: _session,
    STREAMING: _streaming,
    RAW: _raw,
}


def _order(index: int) -> list[str]:
    return h.rotated(list(SIDES), index)


def throughput(workdir: str, mib: int, rounds: int) -> dict[str, float]:
    """MB/s per side: the median over the interleaved rounds.

    The median, not the total: on a shared machine one slow round of one side
    would otherwise decide the ratio.
    """
    rates: dict[str, list[float]] = {name: [] for name in SIDES}
    per_round = max(1, mib // rounds)
    for index in range(rounds):
        for name in _order(index):
            count = [0]

            def feed(data: bytes, count: list[int] = count) -> None:
                count[0] += len(data)

            start = time.perf_counter()
            SIDES[name](workdir, _dd(per_round), feed)
            elapsed = time.perf_counter() - start
            assert count[0] == per_round * h.MIB, (name, count[0])
            rates[name].append(count[0] / 1e6 / elapsed)
    return {name: statistics.median(values) for name, values in rates.items()}


def latency(workdir: str, seconds: float, rounds: int) -> dict[str, h.Stats]:
    """Line delays per side, over all rounds."""
    delays: dict[str, list[float]] = {name: [] for name in SIDES}
    for index in range(rounds):
        for name in _order(index):
            lines = Lines()
            SIDES[name](workdir, _latency_script(seconds / rounds), lines.feed)
            delays[name].extend(lines.delays)
    return {name: h.Stats(values) for name, values in delays.items()}


def report(rates: dict[str, float], stats: dict[str, h.Stats], mib: int, seconds: float) -> bool:
    """Print both tables and the targets; whether both were met."""
    print(f"Throughput: {mib} MiB of dd output per side (MB/s, higher is better)")
    h.print_table(
        ["side", "MB/s", "vs streaming", "vs raw"],
        [
            [
                name,
                f"{rate:.0f}",
                h.fmt_ratio(rate, rates[STREAMING]),
                h.fmt_ratio(rate, rates[RAW]),
            ]
            for name, rate in rates.items()
        ],
    )
    print()
    print(
        f"Chunk latency: one line every {INTERVAL * 1000:.0f} ms for {seconds:g} s per side"
        " (ms from the child's stamp to arrival)"
    )
    h.print_table(
        ["side", "lines", "median", "p99", "max"],
        [h.sample_row(name, s, h.fmt_ms(s.maximum)) for name, s in stats.items()],
    )
    print()
    ratio = rates[SESSION] / rates[STREAMING]
    met_rate = ratio >= THROUGHPUT_TARGET
    p99 = stats[SESSION].p99
    met_latency = p99 <= LATENCY_TARGET
    print(
        f"target: session throughput >= {THROUGHPUT_TARGET:.0%} of exec_cmd_streaming: "
        f"{ratio:.1%} -> {h.verdict(met_rate)}"
    )
    print(
        f"target: session p99 chunk latency <= {LATENCY_TARGET * 1000:g} ms: "
        f"{p99 * 1000:.3f} ms -> {h.verdict(met_latency)}"
    )
    return met_rate and met_latency


def main(argv: list[str] | None = None) -> int:
    """Run both measurements and print the report."""
    parser = h.command_line(__doc__, "8 MiB and 0.3 s, as a smoke check")
    parser.add_argument("--mib", type=int, help="MiB per side for throughput (default 1024)")
    parser.add_argument("--seconds", type=float, help="printing time per side (default 2)")
    parser.add_argument("--rounds", type=int, help="interleaved rounds (default 8, quick 1)")
    args = parser.parse_args(argv)
    mib = args.mib or (8 if args.quick else 1024)
    seconds = args.seconds or (0.3 if args.quick else 2.0)
    rounds = args.rounds or (1 if args.quick else 8)
    h.preload()
    with tempfile.TemporaryDirectory(prefix="bench-sessions-") as workdir:
        rates = throughput(workdir, mib, rounds)
        stats = latency(workdir, seconds, rounds)
    report(rates, stats, mib, seconds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
