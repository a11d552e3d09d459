"""RayExecutor: per-command overhead, many commands over two nodes, streaming through Ray.

The script starts a Ray cluster on 127.0.0.1 (`tests/ray_cluster.py`: a
head node and a second node with the custom resource `second`, one CPU
each) and measures, in one run:

- overhead: the wall time of `true`, back to back, through a `RayExecutor`
  on the second node against a local `LocalExecutor.exec_cmd` (the added
  time is Ray's round trips and the actor);
- fan-out: 200 concurrent `true` commands spread over a `RayPool` of two
  executors, one on each node, in wall time and commands per second;
- streaming: `head -c N /dev/zero` (it writes 4 KiB at a time into the
  pipe) on the node into a sink that counts bytes, in MB/s (10^6 B), against
  the same command through a local executor (pipes of the executor's
  default size, 1 MiB as root), alternating sides round by round; the
  median of the rounds, and the items the sink saw per side;
- first line: the time from the call to the sink's first chunk of
  `echo x; sleep 0.05` (a small output must not wait for a batch), through
  Ray against local, alternating.

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
STREAM_TARGET = 200e6


async def overhead(
    ray_ex: ToolExecutor, local_ex: ToolExecutor, count: int
) -> tuple[h.Stats, h.Stats]:
    from executor import Command

    ours: list[float] = []
    local: list[float] = []
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


async def fan_out(executors: list[RayExecutor], total: int) -> float:
    from executor import Command

    for ex in executors:
        await ex.exec_cmd(Command.exec(["true"]))
    started = time.perf_counter()
    await asyncio.gather(*(executors[i % 2].exec_cmd(Command.exec(["true"])) for i in range(total)))
    return time.perf_counter() - started


async def streaming(
    ray_ex: ToolExecutor, local_ex: ToolExecutor, size: int, rounds: int
) -> tuple[h.Stats, h.Stats, int, int]:
    """MB/s through Ray and locally, `rounds` each, and the chunks the sink saw per side."""
    from executor import Chunk, Command

    cmd = Command.shell(f"head -c {size} /dev/zero")
    rates: dict[str, list[float]] = {"ray": [], "local": []}
    chunks = {"ray": 0, "local": 0}
    sides: list[tuple[str, ToolExecutor]] = [("ray", ray_ex), ("local", local_ex)]
    for turn in range(rounds):
        for name, ex in sides if turn % 2 == 0 else reversed(sides):
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
    return h.Stats(rates["ray"]), h.Stats(rates["local"]), chunks["ray"], chunks["local"]


async def first_line(
    ray_ex: ToolExecutor, local_ex: ToolExecutor, count: int
) -> tuple[h.Stats, h.Stats]:
    """Seconds from the call to the first chunk of a small output: through Ray, locally."""
    from executor import Chunk, Command

    cmd = Command.shell("echo x; sleep 0.05")
    times: dict[str, list[float]] = {"ray": [], "local": []}
    sides: list[tuple[str, ToolExecutor]] = [("ray", ray_ex), ("local", local_ex)]
    for turn in range(count):
        for name, ex in sides if turn % 2 == 0 else reversed(sides):
            first: list[float] = []

            def seen(chunk: Chunk, first: list[float] = first) -> None:
                if not first:
                    first.append(time.perf_counter())

            started = time.perf_counter()
            await ex.exec_cmd_streaming(cmd, seen)
            times[name].append(first[0] - started)
    return h.Stats(times["ray"]), h.Stats(times["local"])


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
        local_ex = LocalExecutor(output_limit=1 << 20)
        pool = RayPool(2)
        async with contextlib.AsyncExitStack() as stack:
            stack.push_async_callback(ray_ex.aclose)
            await stack.enter_async_context(local_ex)
            await stack.enter_async_context(pool)
            pooled = [pool.executor(index) for index in range(2)]
            await asyncio.gather(ray_ex.node(), *(ex.node() for ex in pooled))
            ours, local = await overhead(ray_ex, local_ex, count)
            ray_line, local_line = await first_line(ray_ex, local_ex, lines)
            streamed = await streaming(ray_ex, local_ex, size, rounds)
            through_ray, through_local, ray_chunks, local_chunks = streamed
            wall = await fan_out(pooled, total)
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
        f"streaming {size >> 20} MiB (head -c), median of {rounds} "
        f"(load {os.getloadavg()[0]:.1f}): ray {through_ray.median / 1e6:.0f} MB/s "
        f"({ray_chunks} chunks), local {through_local.median / 1e6:.0f} MB/s "
        f"({local_chunks} chunks), ray / local {through_ray.median / through_local.median:.2f}"
    )
    print(
        f"target: >= 200 MB/s through Ray: {through_ray.median / 1e6:.0f} MB/s "
        f"{h.verdict(through_ray.median >= STREAM_TARGET)}"
    )
    print(f"first chunk of `echo x`, {lines} per side, alternating")
    h.print_table(
        ["side", "median ms", "p99 ms"],
        [
            ["RayExecutor (second node)", h.fmt_ms(ray_line.median), h.fmt_ms(ray_line.p99)],
            ["LocalExecutor", h.fmt_ms(local_line.median), h.fmt_ms(local_line.p99)],
        ],
    )
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
