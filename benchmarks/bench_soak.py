"""Soak: one MCP server (stdio; HTTP with 16 clients) and every backend, thousands of mixed calls.

Each soak sends the same mix of calls (`tests/soak.py`: short and failing
commands, a timeout, a cancel, a file written and read back, a job started
and stopped, persistent-shell commands), checking every answer, and samples
the serving process every `--every` calls: resident memory, descriptors,
threads, descendant processes, files in the folders it writes to, the
processes of ours anywhere on the host, and the host's whole process count.

After the warm-up (the first 10% of the calls) a soak is flat when no count
rose past its bound (`soak.BOUNDS`: files not at all; threads and processes
by 2, for idle worker threads and a local supervisor's idle shims;
descriptors by one command's 4, for a cancelled call still ending in the
server; over HTTP, threads by one more a client, and descriptors and
processes by one cancelled call a client, with the last sample held to the
one-client bounds: a rise that stays is a leak), and resident memory rose by
at most 0.5 MiB per 1000 calls over the last 80% of the calls. The median
and p99 of the last thousand calls are set beside the first thousand's
(after the warm-up), and a line is fitted through the median (and the p99)
of each thousand: the target is a trend that rises less than 20% from the
first thousand to the last, reported, never a failure. A shared machine's
speed drifts by a third either way over minutes, which moves any one
thousand against another: the trend uses them all. Each sample also times
the physical floor (`sh -c 'echo 1'` started and waited for, no executor),
printed beside the first and last thousand with the median's ratio over it.
The host's process count is a witness only: others' processes come and go
on it.

The targets (`--targets`, comma-separated): mcp-stdio, mcp-http, local,
bubblewrap, landlock, docker-helper, docker-exec, ssh, ray. The full sizes:
20,000 calls through the MCP server, 10,000 through each backend (`--mcp-calls`,
`--calls`). A target whose service is missing is skipped with the reason.

    python benchmarks/bench_soak.py                       # everything, full size
    python benchmarks/bench_soak.py --targets local,ssh --calls 2000
    python benchmarks/bench_soak.py --quick               # a smoke check: 64 calls, 2 targets
"""

from __future__ import annotations

import argparse
import collections
import math
import os
import statistics
import subprocess
import sys
import tempfile
import uuid
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import _harness as h
import anyio
import attrs

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import soak

from executor import ExecutorError, LocalExecutor, Sandbox, ToolExecutor

MCP_TARGETS = ("mcp-stdio", "mcp-http")
BACKENDS = (
    "local",
    "bubblewrap",
    "landlock",
    "docker-helper",
    "docker-exec",
    "ssh",
    "ray",
)
CLIENTS = 16
# The interpreter may live under the home folder (pyenv), which a sandbox hides.
INTERPRETER_FOLDER = os.path.dirname(os.path.realpath(sys.executable))
TARGET_RATIO = 1.2
# A call this long (seconds) is listed with its kind: a mix's call takes milliseconds.
SLOW_CALL = 1.0
# How often each sample times the physical floor (`soak.FLOOR`).
FLOOR_RUNS = 16
# "A thousand" calls: 62 whole cycles of the mix, 992 calls.
THOUSAND = 1000 // len(soak.CYCLE) * len(soak.CYCLE)


class Skip(Exception):
    """A target cannot run here (its service is missing); the reason."""


@asynccontextmanager
async def backend(name: str, workdir: str) -> AsyncIterator[tuple[ToolExecutor, dict[str, Any]]]:
    """The executor of backend `name` in `workdir` (or a folder of its own), and what to count.

    Starts (and afterwards stops, by pid or id) the service it needs: a
    container, a private sshd, a Ray cluster.
    """
    counting: dict[str, Any] = {"folders": [workdir]}
    if name == "local":
        async with LocalExecutor(workdir) as ex:
            yield ex, counting
    elif name in ("bubblewrap", "landlock"):
        readable = (sys.prefix, sys.base_prefix, INTERPRETER_FOLDER)
        sandbox = Sandbox(backend=name, readable=tuple(dict.fromkeys(readable)))  # type: ignore[arg-type]
        try:
            sandbox.choose_backend()
        except ExecutorError as error:
            raise Skip(str(error)) from None
        async with LocalExecutor(workdir, sandbox=sandbox) as ex:
            yield ex, counting
    elif name in ("docker-helper", "docker-exec"):
        from docker_engine import BUSYBOX_IMAGE, PYTHON_IMAGE, docker, engine_problem

        from executor import DockerExecutor

        # Its probe runs an event loop of its own: in a thread, beside this one.
        problem = await anyio.to_thread.run_sync(engine_problem)
        if problem is not None:
            raise Skip(problem)
        from docker_engine import start_labelled_container

        helper = name == "docker-helper"
        image = PYTHON_IMAGE if helper else BUSYBOX_IMAGE
        container = await anyio.to_thread.run_sync(start_labelled_container, image)
        try:
            folder = f"/workspace/{uuid.uuid4().hex}"
            counting = {
                "folders": [],
                "remote_files": lambda: soak.container_files(container, folder, "/tmp"),
                "remote_processes": lambda: soak.container_processes(container),
            }
            async with DockerExecutor(container=container, workdir=folder, helper=helper) as ex:
                yield ex, counting
        finally:
            docker("rm", "-f", container, check=False)
    elif name == "ssh":
        from ssh_server import start_server

        server = start_server()
        if server is None:
            raise Skip("no /usr/sbin/sshd")
        try:
            folder = server.workdir()
            # The remote host is this one: its folder and its processes (sshd's
            # children, which are ours) are counted here.
            async with server.executor(workdir=folder) as ex:
                yield ex, {"folders": [folder]}
        finally:
            server.stop()
    elif name == "ray":
        from ray_cluster import LOOPBACK_ENV, RayCluster

        # Before Ray is imported: then every address it picks is 127.0.0.1.
        os.environ.update(LOOPBACK_ENV)
        try:
            import ray
        except ImportError as error:
            raise Skip(f"Ray is not installed: {error}") from None

        from executor import RayExecutor

        cluster = RayCluster()
        try:
            ray.init(address=cluster.address, log_to_driver=False)
            try:
                async with RayExecutor(workdir=workdir, resources={"second": 0.01}) as ex:
                    yield ex, counting
            finally:
                ray.shutdown()
        finally:
            cluster.stop()
    else:
        raise ValueError(f"no such target: {name}")


async def soak_target(name: str, calls: int, every: int) -> soak.Soaked:
    """Soak one target with `calls` calls, sampling every `every`."""
    warmup = warm_up(calls, every)
    with tempfile.TemporaryDirectory(prefix="soak-") as root:
        workdir = os.path.join(root, "work")
        tmpdir = os.path.join(root, "tmp")
        os.mkdir(workdir)
        os.mkdir(tmpdir)
        if name == "mcp-stdio":
            return await soak.soak_mcp_stdio(
                calls,
                every=every,
                warmup=warmup,
                workdir=workdir,
                tmpdir=tmpdir,
                floor_runs=FLOOR_RUNS,
            )
        if name == "mcp-http":
            per_client = max(len(soak.CYCLE), every // CLIENTS // len(soak.CYCLE) * len(soak.CYCLE))
            return await soak.soak_mcp_http(
                calls,
                clients=CLIENTS,
                every=per_client,
                warmup=warmup,
                workdir=workdir,
                tmpdir=tmpdir,
                floor_runs=FLOOR_RUNS,
            )
        async with AsyncExitStack() as stack:
            ex, counting = await stack.enter_async_context(backend(name, workdir))
            return await soak.soak_executor(
                name, ex, calls, every=every, warmup=warmup, floor_runs=FLOOR_RUNS, **counting
            )
    raise AssertionError("unreachable")


def warm_up(calls: int, every: int) -> int:
    """The calls before flatness is judged: the first 10% (at least one sample's worth)."""
    return max(every, calls // 10 // every * every)


def windows(calls: int, warmup: int) -> tuple[range, range]:
    """The first thousand calls after the warm-up, and the last thousand (fewer when short).

    Whole cycles of the mix (992 calls, 62 cycles), so that both hold the
    same kinds of calls: 1000 would give one half a cycle's timeout and
    cancel more than the other.
    """
    after = calls - warmup
    size = min(THOUSAND, after // 2 // len(soak.CYCLE) * len(soak.CYCLE))
    return range(warmup, warmup + size), range(calls - size, calls)


def floor_of(soaked: soak.Soaked, window: range) -> float:
    """The median floor timed at the samples within `window` (of calls), ends included.

    Over HTTP a sample comes every 2,560 calls, more than a window: where
    none falls within it, the sample nearest its middle. (Not the one at
    the start: the server has just started then.)
    """
    at = sorted({calls for calls, _ in soaked.floors})
    within = [c for c in at if window.start <= c <= window.stop]
    if not within:
        middle = (window.start + window.stop) / 2
        within = [min(at, key=lambda c: abs(c - middle))]
    return statistics.median(took for calls, took in soaked.floors if calls in within)


def slow_calls(soaked: soak.Soaked) -> str:
    """The calls that took over `SLOW_CALL` seconds: how many, of which kinds, and where.

    A call's kind is known from its place where one client made the calls
    in turn; over HTTP (16 clients) the calls came back interleaved.
    """
    slow = [index for index, took in enumerate(soaked.durations) if took > SLOW_CALL]
    if not slow:
        return "none"
    said = f"{len(slow)}"
    if soaked.name != "mcp-http":
        kinds = collections.Counter(soak.CYCLE[index % len(soak.CYCLE)] for index in slow)
        said += " (" + ", ".join(f"{kind} {n}" for kind, n in kinds.most_common()) + ")"
    shown = ", ".join(f"#{index} {h.fmt_ms(soaked.durations[index], 0)} ms" for index in slow[:12])
    return f"{said}: {shown}{', ...' if len(slow) > 12 else ''}"


def by_thousand(durations: list[float], warmup: int) -> list[tuple[float, float]]:
    """The median and p99 of each run of 992 calls (62 cycles) after the warm-up."""
    after = durations[warmup:]
    return [
        soak.quantiles(after[start : start + THOUSAND])
        for start in range(0, len(after) - THOUSAND + 1, THOUSAND)
    ]


def trend(values: list[float]) -> float:
    """The least-squares line through `values`: its value at the last over its value at the first.

    A drift is a trend through every thousand, not the gap between two of
    them, which on a shared machine moves by a third either way.
    """
    if len(values) < 3:
        return math.nan
    xs = range(len(values))
    slope = soak.slope(xs, values)
    start = statistics.fmean(values) - slope * statistics.fmean(xs)
    return (start + slope * (len(values) - 1)) / start


@attrs.frozen
class Latency:
    """One soak's latency: first and last thousand, the floor, each thousand, the trends."""

    first: tuple[float, float]
    last: tuple[float, float]
    counts: tuple[int, int]
    floor: tuple[float, float]
    steps: list[tuple[float, float]]
    trends: tuple[float, float]

    @classmethod
    def of(cls, soaked: soak.Soaked) -> Latency:
        """Work them out from `soaked`'s durations and floors."""
        spans = windows(len(soaked.durations), soaked.warmup)
        first, last = (soaked.durations[span.start : span.stop] for span in spans)
        steps = by_thousand(soaked.durations, soaked.warmup)
        return cls(
            first=soak.quantiles(first),
            last=soak.quantiles(last),
            counts=(len(first), len(last)),
            floor=(floor_of(soaked, spans[0]), floor_of(soaked, spans[1])),
            steps=steps,
            trends=(trend([m for m, _ in steps]), trend([p for _, p in steps])),
        )

    @property
    def held(self) -> bool:
        """Whether the trend through each thousand's median and p99 rose less than 20%.

        Where a soak is too short for a trend (three thousands), the last
        thousand against the first.
        """
        ratios = [
            t if not math.isnan(t) else last / first
            for t, first, last in zip(self.trends, self.first, self.last, strict=True)
        ]
        return all(ratio <= TARGET_RATIO for ratio in ratios)


def report(soaked: soak.Soaked) -> tuple[bool, bool]:
    """Print one soak's figures; whether it was flat, and whether its latency held."""
    flat = soaked.flatness()
    over = soaked.over_bounds()
    rss = flat["rss_mib"]
    flat_ok = not over and rss.slope <= soak.RSS_SLOPE_MIB
    lat = Latency.of(soaked)
    (m1, p1), (m2, p2), (f1, f2) = lat.first, lat.last, lat.floor
    (l1, _, _), (l2, _, _) = soaked.load
    server = f", server CPU {soaked.server_cpu:.1f} s" if soaked.server_cpu is not None else ""
    print(
        f"\n--- {soaked.name}: {len(soaked.durations)} calls in {soaked.wall:.1f} s wall, "
        f"CPU {soaked.cpu:.1f} s{server}; load {l1:.2f} -> {l2:.2f} "
        f"(uptime's 1-minute average); warm-up {soaked.warmup} calls"
    )
    print(soak.describe(flat))
    for line in over:
        print(f"  over its bound: {line}")
    trend_median, trend_p99 = (h.fmt_ratio(t, 1.0) for t in lat.trends)
    h.print_table(
        ["calls", "n", "median ms", "p99 ms", "floor ms"],
        [
            ["first thousand", lat.counts[0], h.fmt_ms(m1), h.fmt_ms(p1), h.fmt_ms(f1)],
            ["last thousand", lat.counts[1], h.fmt_ms(m2), h.fmt_ms(p2), h.fmt_ms(f2)],
            ["last / first", "", h.fmt_ratio(m2, m1), h.fmt_ratio(p2, p1), h.fmt_ratio(f2, f1)],
            # The machine's speed in the last thousand against the first is
            # the floor's. Only the median is set against it: the mix's p99
            # is a timed-out call, mostly 50 ms of waiting, which it hardly moves.
            ["the same, over the floor's", "", h.fmt_ratio(m2 * f1 / f2, m1), "", ""],
            ["trend through each thousand", "", trend_median, trend_p99, ""],
        ],
    )
    print("  median of each thousand, ms: " + " ".join(h.fmt_ms(m, 1) for m, _ in lat.steps))
    print("  p99 of each thousand, ms: " + " ".join(h.fmt_ms(p, 0) for _, p in lat.steps))
    print(f"  calls over {SLOW_CALL:g} s: {slow_calls(soaked)}")
    print(
        f"  flat (counts within {soaked.bounds}, RSS slope {rss.slope:+.2f} <= "
        f"{soak.RSS_SLOPE_MIB} MiB/1000 calls): {h.verdict(flat_ok)}; "
        f"median and p99 within 20% over the run (trend): {h.verdict(lat.held)}"
    )
    return flat_ok, lat.held


def summary_row(soaked: soak.Soaked, flat_ok: bool) -> list[object]:
    """The closing table's row of one soak."""
    flat = soaked.flatness()
    lat = Latency.of(soaked)
    (m1, p1), (m2, p2), (f1, f2) = lat.first, lat.last, lat.floor
    (l1, _, _), (l2, _, _) = soaked.load
    return [
        soaked.name,
        len(soaked.durations),
        "yes" if flat_ok else "NO",
        f"{flat['rss_mib'].slope:+.2f}",
        f"{flat['fds'].growth:+.0f}/{flat['children'].growth:+.0f}/{flat['files'].growth:+.0f}",
        f"{h.fmt_ms(m1, 1)} -> {h.fmt_ms(m2, 1)}",
        f"{h.fmt_ms(p1, 1)} -> {h.fmt_ms(p2, 1)}",
        f"{h.fmt_ms(f1, 1)} -> {h.fmt_ms(f2, 1)}",
        h.fmt_ratio(m2 * f1 / f2, m1),
        " / ".join(h.fmt_ratio(t, 1.0) for t in lat.trends),
        "yes" if lat.held else "NO",
        f"{soaked.wall:.0f}",
        f"{soaked.cpu + (soaked.server_cpu or 0):.0f}",
        f"{l1:.1f}-{l2:.1f}",
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--quick", action="store_true", help="64 calls to the MCP server over stdio and to local"
    )
    parser.add_argument(
        "--targets",
        default=",".join((*MCP_TARGETS, *BACKENDS)),
        help="comma-separated: " + ", ".join((*MCP_TARGETS, *BACKENDS)),
    )
    parser.add_argument("--calls", type=int, default=10_000, help="calls per backend")
    parser.add_argument("--mcp-calls", type=int, default=20_000, help="calls per MCP transport")
    parser.add_argument("--every", type=int, default=160, help="calls between samples")
    args = parser.parse_args(argv)
    targets = [name.strip() for name in args.targets.split(",") if name.strip()]
    unknown = set(targets) - {*MCP_TARGETS, *BACKENDS}
    if unknown:
        parser.error(f"no such target: {', '.join(sorted(unknown))}")
    every = args.every
    if every % len(soak.CYCLE):
        parser.error(f"--every must be a multiple of {len(soak.CYCLE)}")
    if args.quick:
        # The smoke check: the MCP server over stdio and the local backend, a few cycles.
        targets = [name for name in targets if name in ("mcp-stdio", "local")]
        every = 16
    print(f"uptime: {uptime()}")
    rows = []
    failed = False
    for name in targets:
        calls = args.mcp_calls if name in MCP_TARGETS else args.calls
        if args.quick:
            calls = 64
        try:
            soaked = anyio.run(soak_target, name, calls, every)
        except Skip as skipped:
            print(f"\n--- {name}: skipped: {skipped}")
            continue
        flat_ok, _ = report(soaked)
        failed |= not flat_ok and not args.quick
        rows.append(summary_row(soaked, flat_ok))
    print()
    h.print_table(
        [
            "target",
            "calls",
            "flat",
            "RSS MiB/1k",
            "fds/procs/files",
            "median ms first->last",
            "p99 ms first->last",
            "floor ms",
            "median over floor",
            "trend median / p99",
            "held",
            "wall s",
            "CPU s",
            "load",
        ],
        rows,
    )
    print(f"uptime: {uptime()}")
    # A leak is a finding, not a crash: reported, and the exit code says so.
    return 1 if failed else 0


def uptime() -> str:
    """What `uptime` says (the load beside the figures), or the load averages without it."""
    try:
        said = subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout
    except OSError:
        said = ""
    return said.strip() or f"load average: {os.getloadavg()}"


if __name__ == "__main__":
    sys.exit(main())
