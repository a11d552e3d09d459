"""DockerExecutor: latency of `true` against the docker CLI and the SDK, and throughput.

What is measured, all against one container of the same image, in rounds
whose order rotates so the shared machine's noise falls on every side alike:

- latency: the wall time of one whole `true` command, back to back:
  - `docker exec` CLI: `docker exec CONTAINER true` as a subprocess;
  - Docker SDK: `container.exec_run(["true"])` (the `docker` package, if installed);
  - raw Engine API: our HTTP client alone: create the exec, start it attached,
    read to the end, inspect the exit code (no wrapper, no kill tracking);
  - ours, exec: `DockerExecutor(helper=False).exec_cmd(Command.exec(["true"]))`,
    an engine exec per command under the wrapper that reports pid and exit;
  - ours, helper: `DockerExecutor(helper=True)`, the in-container helper
    starts the command itself (needs Python in the image).
- throughput: `head -c N /dev/zero` out of the container into a sink that
  counts bytes, in MB/s (10^6 B): ours (exec and helper) and the CLI
  (`docker exec ... > /dev/null`).

Targets: ours (exec) median <= 0.75x the CLI's; ours (helper) median <= 5 ms.
Without a Docker engine (DOCKER_HOST, or the local socket) or the image the
script says so and exits 0.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable

import _harness as h
import anyio

from executor import Command, DockerExecutor
from executor._docker.api import EngineClient

IMAGE = os.environ.get("EXECUTOR_DOCKER_IMAGE", "executor-test/python")
EXEC_TARGET = 0.75
HELPER_TARGET = 0.005
Side = Callable[[], Awaitable[None]]


def cli_side(container: str) -> Side:
    async def run() -> None:
        await anyio.run_process(["docker", "exec", container, "true"])

    return run


def sdk_side(container: str) -> tuple[Side, Callable[[], None]] | None:
    try:
        import docker  # type: ignore[import-untyped,import-not-found,unused-ignore]
    except ImportError:
        return None
    client = docker.from_env()
    handle = client.containers.get(container)

    async def run() -> None:
        # The SDK is synchronous: called as a user would, in a worker thread.
        result = await anyio.to_thread.run_sync(lambda: handle.exec_run(["true"]))
        assert result.exit_code == 0

    return run, client.close


def raw_side(api: EngineClient, container: str) -> Side:
    async def run() -> None:
        config = {"AttachStdout": True, "AttachStderr": True, "Cmd": ["true"]}
        created = await api.request_json("POST", f"/containers/{container}/exec", json_body=config)
        _, conn = await api.upgrade(
            "POST", f"/exec/{created['Id']}/start", json_body={"Detach": False, "Tty": False}
        )
        while await conn.receive():
            pass
        await conn.aclose()
        info = await api.request_json("GET", f"/exec/{created['Id']}/json")
        assert info["ExitCode"] == 0

    return run


def ours_side(ex: DockerExecutor) -> Side:
    async def run() -> None:
        await ex.exec_cmd(Command.exec(["true"]))

    return run


async def latency(sides: dict[str, Side], count: int, rounds: int) -> dict[str, h.Stats]:
    times: dict[str, list[float]] = {name: [] for name in sides}
    names = list(sides)
    for side in sides.values():
        await side()  # warm up: connections, the helper, the page cache
    for round_ in range(rounds):
        order = names[round_ % len(names) :] + names[: round_ % len(names)]
        for name in order:
            for _ in range(count):
                started = time.perf_counter()
                await sides[name]()
                times[name].append(time.perf_counter() - started)
    return {name: h.Stats(values) for name, values in times.items()}


async def throughput_ours(ex: DockerExecutor, size: int) -> float:
    received = 0

    def sink(chunk: object) -> None:
        nonlocal received
        received += len(chunk.data)  # type: ignore[attr-defined]

    started = time.perf_counter()
    await ex.exec_cmd_streaming(Command.exec(["head", "-c", str(size), "/dev/zero"]), sink)
    elapsed = time.perf_counter() - started
    assert received == size, received
    return size / elapsed / 1e6


async def throughput_cli(container: str, size: int) -> float:
    started = time.perf_counter()
    await anyio.run_process(
        ["docker", "exec", container, "head", "-c", str(size), "/dev/zero"],
        stdout=subprocess.DEVNULL,
    )
    return size / (time.perf_counter() - started) / 1e6


async def main(args: argparse.Namespace) -> int:
    problem = await h.engine_ready(IMAGE)
    if problem is not None:
        print(f"skipped: {problem}")
        return 0
    api = EngineClient()
    async with DockerExecutor(IMAGE, helper=False, output_limit=1 << 20) as plain:
        container = plain.container_id
        assert container is not None
        # The helper runs in the very same container.
        helper = DockerExecutor(container=container, helper=True, output_limit=1 << 20)
        try:
            sides: dict[str, Side] = {
                "docker exec (CLI)": cli_side(container),
                "raw Engine API": raw_side(api, container),
                "ours, exec": ours_side(plain),
                "ours, helper": ours_side(helper),
            }
            sdk = sdk_side(container)
            if sdk is not None:
                sides["Docker SDK exec_run"] = sdk[0]
            try:
                stats = await latency(sides, args.count, args.rounds)
            finally:
                if sdk is not None:
                    sdk[1]()
                await api.aclose()
            cli = stats["docker exec (CLI)"].median
            rows = [
                [name, h.fmt_ms(s.median, 2), h.fmt_ms(s.p99, 2), h.fmt_ratio(s.median, cli)]
                for name, s in stats.items()
            ]
            print(f"per-command latency of `true`, {args.count} x {args.rounds} rounds per side")
            h.print_table(["side", "median ms", "p99 ms", "vs CLI"], rows)
            exec_ratio = stats["ours, exec"].median / cli
            helper_median = stats["ours, helper"].median
            print(
                f"target ours (exec) <= {EXEC_TARGET}x CLI: {exec_ratio:.2f}x "
                f"{h.verdict(exec_ratio <= EXEC_TARGET)}"
            )
            print(
                f"target ours (helper) <= {HELPER_TARGET * 1000:g} ms: "
                f"{helper_median * 1000:.2f} ms {h.verdict(helper_median <= HELPER_TARGET)}"
            )
            size = args.megabytes * 1_000_000
            flows: dict[str, list[float]] = {
                "ours, exec": [],
                "ours, helper": [],
                "docker exec (CLI)": [],
            }
            for _ in range(args.stream_rounds):
                flows["ours, exec"].append(await throughput_ours(plain, size))
                flows["ours, helper"].append(await throughput_ours(helper, size))
                flows["docker exec (CLI)"].append(await throughput_cli(container, size))
            cli_rate = statistics.median(flows["docker exec (CLI)"])
            rounds = args.stream_rounds
            print(f"\nstreaming {args.megabytes} MB out of the container, median of {rounds}")
            h.print_table(
                ["side", "MB/s", "vs CLI"],
                [
                    [
                        name,
                        f"{statistics.median(v):.0f}",
                        h.fmt_ratio(statistics.median(v), cli_rate),
                    ]
                    for name, v in flows.items()
                ],
            )
        finally:
            await helper.aclose()
    return 0


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = h.command_line(__doc__, "tiny sizes: a smoke check")
    parser.add_argument("--count", type=int, default=20, help="commands per side per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--megabytes", type=int, default=200)
    parser.add_argument("--stream-rounds", type=int, default=3)
    args = parser.parse_args(argv)
    if args.quick:
        args.count, args.rounds, args.megabytes, args.stream_rounds = 3, 2, 8, 1
    return args


if __name__ == "__main__":
    sys.exit(anyio.run(main, parse()))
