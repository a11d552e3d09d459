"""RayExecutor: per-command overhead, many commands over two nodes, streaming through Ray.

The script starts a Ray cluster on 127.0.0.1 (`tests/ray_cluster.py`: a
head node and a second node with the custom resource `second`, one CPU
each) and measures, in one run:

- overhead: the wall time of `true`, back to back, through a `RayExecutor`
  on the second node against a local `LocalExecutor.exec_cmd` (the added
  time is Ray's round trips and the actor);
- fan-out: 200 concurrent `true` commands spread over a `RayPool` of two
  executors, one on each node, in wall time and commands per second;
- streaming: `head -c N /dev/zero` (the producer writes 128 KiB at a time)
  on the node into a sink that counts bytes, in MB/s (10^6 B), against the
  same command through a local executor (pipes of the executor's default
  size).

Targets: <= 3 ms added per command; >= 200 MB/s streaming. Without Ray the
script says so and exits 0.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

import _harness as h

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

ADDED_TARGET = 0.003
STREAM_TARGET = 200e6


async def overhead(count: int) -> tuple[h.Stats, h.Stats]:
    from executor import Command, LocalExecutor, RayExecutor, ToolExecutor

    ours: list[float] = []
    local: list[float] = []
    async with RayExecutor(resources={"second": 0.01}) as ray_ex, LocalExecutor() as local_ex:
        for warm in (ray_ex, local_ex):
            for _ in range(5):
                await warm.exec_cmd(Command.exec(["true"]))
        for turn in range(count):
            sides: list[tuple[str, ToolExecutor, list[float]]] = [
                ("ray", ray_ex, ours),
                ("local", local_ex, local),
            ]
            for _, ex, times in sides if turn % 2 else reversed(sides):
                started = time.perf_counter()
                await ex.exec_cmd(Command.exec(["true"]))
                times.append(time.perf_counter() - started)
    return h.Stats(ours), h.Stats(local)


async def fan_out(total: int) -> float:
    from executor import Command, RayPool

    async with RayPool(2) as pool:
        executors = [pool.executor(index) for index in range(2)]
        for ex in executors:
            await ex.exec_cmd(Command.exec(["true"]))
        started = time.perf_counter()
        await asyncio.gather(
            *(executors[i % 2].exec_cmd(Command.exec(["true"])) for i in range(total))
        )
        return time.perf_counter() - started


async def streaming(size: int) -> tuple[float, float]:
    from executor import Chunk, Command, LocalExecutor, RayExecutor

    cmd = Command.shell(f"head -c {size} /dev/zero")
    rates = []
    async with (
        RayExecutor(resources={"second": 0.01}, output_limit=1 << 20) as ray_ex,
        LocalExecutor(output_limit=1 << 20) as local_ex,
    ):
        for ex in (ray_ex, local_ex):
            seen = 0

            def count(chunk: Chunk) -> None:
                nonlocal seen
                seen += len(chunk.data)

            started = time.perf_counter()
            await ex.exec_cmd_streaming(cmd, count)
            assert seen == size, (seen, size)
            rates.append(size / (time.perf_counter() - started))
    return rates[0], rates[1]


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
    count, total, size = (20, 50, 64 << 20) if args.quick else (300, 200, 1 << 30)
    cluster = RayCluster()
    try:
        ray.init(address=cluster.address, log_to_driver=False)
        ours, local = await overhead(count)
        wall = await fan_out(total)
        through_ray, through_local = await streaming(size)
    finally:
        ray.shutdown()
        cluster.stop()
    added = ours.median - local.median
    print(f"`true`, {count} per side, alternating (load {os.getloadavg()[0]:.1f})")
    h.print_table(
        ["side", "median ms", "p99 ms"],
        [
            ["RayExecutor (second node)", h.fmt_ms(ours.median), h.fmt_ms(ours.p99)],
            ["LocalExecutor", h.fmt_ms(local.median), h.fmt_ms(local.p99)],
        ],
    )
    print(f"target: <= 3 ms added: {added * 1000:.2f} ms {h.verdict(added <= ADDED_TARGET)}")
    print(f"{total} concurrent `true` over a 2-executor pool: {wall:.2f} s, {total / wall:.0f}/s")
    print(
        f"streaming {size >> 20} MiB (head -c, 128 KiB writes): "
        f"ray {through_ray / 1e6:.0f} MB/s, local {through_local / 1e6:.0f} MB/s"
    )
    print(
        f"target: >= 200 MB/s through Ray: {through_ray / 1e6:.0f} MB/s "
        f"{h.verdict(through_ray >= STREAM_TARGET)}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
