"""RayExecutor: per-command overhead, many commands over two nodes, streaming through Ray.

The script starts a Ray cluster on 127.0.0.1 (`tests/ray_cluster.py`: a
head node and a second node with the custom resource `second`, one CPU
each) and measures, in one run:

- overhead: the wall time of `true`, back to back, through a `RayExecutor`
  on the second node against a local `LocalExecutor.exec_cmd` (the added
  time is the trip to the actor and back); and the same through Ray's
  calls alone (`direct=False`: no channel, the way a driver that cannot
  reach the node's address runs);
- fan-out: 200 concurrent `true` commands spread over a `RayPool` of two
  executors, one on each node, in wall time and commands per second;
- streaming: `head -c N /dev/zero` (it writes 4 KiB at a time into the
  pipe) on the node into a sink that counts bytes, in MB/s (10^6 B), against
  the same command through a local executor (pipes of the executor's
  default size, 1 MiB as root), the sides taking turns round by round; the
  median of the rounds, and the items the sink saw per side;
- first line: the time from the call to the sink's first chunk of
  `echo x; sleep 0.05` (a small output must not wait for a batch), on each
  side, taking turns.

Targets: <= 3 ms added per command; >= 200 MB/s streaming. Without Ray the
script says so and exits 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import _harness as h

if TYPE_CHECKING:
    from executor import RayExecutor, ToolExecutor

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

ADDED_TARGET = 0.003
DIRECT = "RayExecutor (second node)"
CALLS = "RayExecutor, direct=False"
LOCAL = "LocalExecutor"
STREAM_TARGET = 200e6


Sides = list[tuple[str, "ToolExecutor"]]


def _rotated(sides: Sides, turn: int) -> Sides:
    """The sides in the order of round `turn`: each goes first as often as the others."""
    shift = turn % len(sides)
    return sides[shift:] + sides[:shift]


async def overhead(sides: Sides, count: int) -> dict[str, h.Stats]:
    """Seconds per `true` on each side, back to back, the sides taking turns."""
    from executor import Command

    times: dict[str, list[float]] = {name: [] for name, _ in sides}
    for _, ex in sides:
        for _ in range(5):
            await ex.exec_cmd(Command.exec(["true"]))
    for turn in range(count):
        for name, ex in _rotated(sides, turn):
            started = time.perf_counter()
            await ex.exec_cmd(Command.exec(["true"]))
            times[name].append(time.perf_counter() - started)
    return {name: h.Stats(values) for name, values in times.items()}


async def fan_out(executors: list[RayExecutor], total: int) -> float:
    from executor import Command

    for ex in executors:
        await ex.exec_cmd(Command.exec(["true"]))
    started = time.perf_counter()
    await asyncio.gather(*(executors[i % 2].exec_cmd(Command.exec(["true"])) for i in range(total)))
    return time.perf_counter() - started


async def streaming(sides: Sides, size: int, rounds: int) -> dict[str, tuple[h.Stats, int]]:
    """MB/s on each side, `rounds` each, and the chunks the sink saw per run."""
    from executor import Chunk, Command

    cmd = Command.shell(f"head -c {size} /dev/zero")
    rates: dict[str, list[float]] = {name: [] for name, _ in sides}
    chunks = dict.fromkeys(rates, 0)
    for turn in range(rounds):
        for name, ex in _rotated(sides, turn):
            seen = count = 0

            def counted(chunk: Chunk) -> None:
                nonlocal seen, count
                seen += len(chunk.data)
                count += 1

            started = time.perf_counter()
            await ex.exec_cmd_streaming(cmd, counted)
            rates[name].append(size / (time.perf_counter() - started))
            assert seen == size, (seen, size)
            chunks[name] = count
    return {name: (h.Stats(values), chunks[name]) for name, values in rates.items()}


async def first_line(sides: Sides, count: int) -> dict[str, h.Stats]:
    """Seconds from the call to the first chunk of a small output, on each side."""
    from executor import Chunk, Command

    cmd = Command.shell("echo x; sleep 0.05")
    times: dict[str, list[float]] = {name: [] for name, _ in sides}
    for turn in range(count):
        for name, ex in _rotated(sides, turn):
            first: list[float] = []

            def seen(chunk: Chunk, first: list[float] = first) -> None:
                if not first:
                    first.append(time.perf_counter())

            started = time.perf_counter()
            await ex.exec_cmd_streaming(cmd, seen)
            times[name].append(first[0] - started)
    return {name: h.Stats(values) for name, values in times.items()}


async def main() -> int:
    parser = h.command_line(__doc__, "a few commands and 64 MB, as a smoke check")
    args = parser.parse_args()
    try:
        from ray_cluster import LOOPBACK_ENV, RayCluster
    except ImportError as error:  # pragma: no cover
        print(f"skipped: {error}")
        return 0
    os.environ.update(LOOPBACK_ENV)
    try:
        import ray
    except ImportError:  # pragma: no cover
        print("skipped: Ray is not installed (pip install -e '.[ray]')")
        return 0
    count, total, size, rounds, lines = (
        (20, 50, 64 << 20, 1, 5) if args.quick else (300, 200, 1 << 30, 3, 60)
    )
    cluster = RayCluster()
    try:
        ray.init(address=cluster.address, log_to_driver=False)
        from executor import LocalExecutor, RayExecutor, RayPool

        # One executor a side for every figure but the pool's, all placed at
        # once: each actor placed costs seconds.
        ray_ex = RayExecutor(resources={"second": 0.01}, output_limit=1 << 20)
        calls_ex = RayExecutor(resources={"second": 0.01}, output_limit=1 << 20, direct=False)
        local_ex = LocalExecutor(output_limit=1 << 20)
        pool = RayPool(2)
        async with contextlib.AsyncExitStack() as stack:
            stack.push_async_callback(ray_ex.aclose)
            stack.push_async_callback(calls_ex.aclose)
            await stack.enter_async_context(local_ex)
            await stack.enter_async_context(pool)
            pooled = [pool.executor(index) for index in range(2)]
            await asyncio.gather(ray_ex.node(), calls_ex.node(), *(ex.node() for ex in pooled))
            sides: Sides = [(DIRECT, ray_ex), (CALLS, calls_ex), (LOCAL, local_ex)]
            per_command = await overhead(sides, count)
            lines_seen = await first_line(sides, lines)
            streamed = await streaming(sides, size, rounds)
            wall = await fan_out(pooled, total)
    finally:
        ray.shutdown()
        cluster.stop()
    local = per_command[LOCAL]
    print(f"`true`, {count} per side, taking turns (load {os.getloadavg()[0]:.1f})")
    h.print_table(
        ["side", "median ms", "p99 ms", "added ms"],
        [
            [
                name,
                h.fmt_ms(stats.median),
                h.fmt_ms(stats.p99),
                h.fmt_ms(stats.median - local.median),
            ]
            for name, stats in per_command.items()
        ],
    )
    added = per_command[DIRECT].median - local.median
    print(f"target: <= 3 ms added: {added * 1000:.2f} ms {h.verdict(added <= ADDED_TARGET)}")
    print(f"{total} concurrent `true` over a 2-executor pool: {wall:.2f} s, {total / wall:.0f}/s")
    print(
        f"streaming {size >> 20} MiB (head -c: 4 KiB writes; 1 MiB pipes as root), "
        f"median of {rounds} (load {os.getloadavg()[0]:.1f})"
    )
    local_rate = streamed[LOCAL][0].median
    h.print_table(
        ["side", "MB/s", "chunks", "/ local"],
        [
            [name, f"{stats.median / 1e6:.0f}", str(chunks), f"{stats.median / local_rate:.2f}"]
            for name, (stats, chunks) in streamed.items()
        ],
    )
    rate = streamed[DIRECT][0].median
    print(
        f"target: >= 200 MB/s through Ray: {rate / 1e6:.0f} MB/s {h.verdict(rate >= STREAM_TARGET)}"
    )
    print(f"first chunk of `echo x`, {lines} per side, taking turns")
    h.print_table(
        ["side", "median ms", "p99 ms"],
        [[name, h.fmt_ms(stats.median), h.fmt_ms(stats.p99)] for name, stats in lines_seen.items()],
    )
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
