"""Every run path, the working tree against the code before the run interface, in one run.

What is measured, one row per run path, each side in a fresh worker
interpreter per round:

- `spawn`: `LocalExecutor.exec_cmd(Command.shell("true"))` back to back,
  wall time per command;
- `streaming`: `dd if=/dev/zero bs=1M iflag=count_bytes count=SIZE` (256 MiB)
  into a sink that only counts bytes, through `exec_cmd_streaming`
  (`output_limit` 1 MiB, as `bench_streaming.py`), MB/s (10^6 B) per stream;
- `kill`: a child that ignores SIGTERM (`trap '' TERM; sleep 30 & wait`),
  timeout 0.2 s, `kill_grace` 0.1 s: return time - deadline - grace (as
  `bench_kill.py`; the first kill of each worker is not counted);
- `shell`: `sh.run("true")` back to back in a persistent shell (`ex.shell()`);
- `docker`, `docker-exec`: `DockerExecutor.exec_cmd(Command.exec(["true"]))`
  through the in-container helper, and with `helper=False` (an engine exec
  per command), in one idle container of `executor-test/python` the run
  starts for both sides (needs an engine, `DOCKER_HOST` or the local socket,
  the image and the docker CLI);
- `ssh`: `SshExecutor.exec_cmd(Command.exec(["true"]))` on one connection to
  the tests' private sshd on 127.0.0.1 (`tests/ssh_server.py`, started once
  per run; needs `/usr/sbin/sshd`);
- `ray`: `RayExecutor.exec_cmd(Command.exec(["true"]))` on the second node of
  the tests' two-node cluster on 127.0.0.1 (`tests/ray_cluster.py`, started
  once per run, its address handed to the workers; needs Ray). The actor is
  given `PYTHONPATH` to the worker's own `executor`, so that each side's
  node runs that side's code, and the worker checks where a task with the
  same environment imports it from.

Sides: `new`, the working tree's `executor`; `base`, the package at
`_baseline.RUN_PATHS_BASE_COMMIT` (the code before the run interface;
`--commit` names another), `git archive`d and imported from there
(`--new COMMIT` puts a commit on the new side instead; with the base's own
commit, both sides run the same code and the figures show the noise). Each
row runs `--rounds` rounds; in each round both sides run once, each in a
fresh interpreter that imports everything first (`_harness.preload`), and
the side that goes first changes from round to round (new, base; base,
new; ...). Each worker runs a few commands unmeasured first (its executor's
supervisor, connection or helper start).

CPU: user + system time, read before and after the timed commands, of the
worker and every process below it (its supervisor, shims, shells, commands),
each with what it has reaped (the worker by `getrusage`, the others by
`psutil` `cpu_times`, in clock ticks of 10 ms: a round of few commands gives
a coarse figure, the pooled one over all rounds is finer); `cpu self` is
the worker process alone. For the service rows `cpu service` adds the
other end: sshd and its session processes; the Docker engine (dockerd with
containerd) and the container's shim with everything in the container (the
engine is shared: what other clients make it do in that time counts too);
the Ray node's raylet with its workers. `total` is both.

Per row: each side's median and p99 (over every sample), the min-max of its
per-round medians (the spread of the rounds) and its spread as a share of
its median; then new / base of the medians (and of each round's pair) and a
verdict: `slower beyond spread` when new's median is above base's slowest
round, `faster` when below its fastest, else `within spread`; the same for
CPU per command (or per GiB). The load average at the start and the end.

Nothing is asserted: a row only fails when a worker does (exit 1). Without
the base commit in the clone the script says so and exits 0; a row whose
service is absent is skipped with the reason (exit 1 under
`EXECUTOR_REQUIRE_DOCKER=1` / `EXECUTOR_REQUIRE_SSH=1` when that row was asked for).
`--quick` runs the local rows at tiny sizes (the service rows only when
named in `--rows`).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import _baseline
import _harness as h
import attrs
import psutil

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
TESTS = ROOT / "tests"
IMAGE = os.environ.get("EXECUTOR_DOCKER_IMAGE", "executor-test/python")
KILL_SCRIPT = "trap '' TERM; sleep 30 & wait"
TIMEOUT = 0.2
GRACE = 0.1
GIB = 1 << 30
WARMUP = 3
NEW = "new"
BASE = "base"


@attrs.frozen
class Row:
    """One run path: what its figure is and how many per side by default."""

    title: str
    full: int  # per side over the run (streams for `streaming`)
    quick: int
    service: bool = False
    streams: bool = False
    digits: int = 3


ROWS: dict[str, Row] = {
    "spawn": Row("`exec_cmd(Command.shell('true'))` back to back, ms per command", 400, 10),
    "streaming": Row(
        "`dd` into a counting sink via `exec_cmd_streaming`, MB/s per stream",
        20,
        2,
        streams=True,
    ),
    "kill": Row(
        f"`{KILL_SCRIPT}`, timeout {TIMEOUT:g} s, kill_grace {GRACE:g} s: ms past deadline + grace",
        30,
        2,
        digits=2,
    ),
    "shell": Row("persistent shell `sh.run('true')` back to back, ms per command", 1000, 20),
    "docker": Row(
        "DockerExecutor (helper) `exec_cmd(true)` back to back, ms per command",
        200,
        6,
        service=True,
        digits=2,
    ),
    "docker-exec": Row(
        "DockerExecutor(helper=False) (engine exec) `exec_cmd(true)`, ms per command",
        100,
        4,
        service=True,
        digits=2,
    ),
    "ssh": Row(
        "SshExecutor `exec_cmd(true)` on 127.0.0.1 back to back, ms per command",
        200,
        6,
        service=True,
        digits=2,
    ),
    "ray": Row(
        "RayExecutor `exec_cmd(true)` on the second node, ms per command",
        200,
        6,
        service=True,
        digits=2,
    ),
}


# --- the worker: one side of one row, in a fresh interpreter ---------------


def tree_cpu(roots: Sequence[int]) -> float:
    """User + system CPU seconds of `roots` and every process below them, with what each reaped.

    A process reaped between two readings moves into its parent's children's
    times, so the difference of two readings stays right. A process below
    two roots counts once.
    """
    found: dict[int, psutil.Process] = {}
    for pid in roots:
        try:
            root = psutil.Process(pid)
            found.setdefault(root.pid, root)
            for child in root.children(recursive=True):
                found.setdefault(child.pid, child)
        except psutil.Error:
            continue
    total = 0.0
    for process in found.values():
        try:
            times = process.cpu_times()
        except psutil.Error:
            continue
        total += times.user + times.system + times.children_user + times.children_system
    return total


def _reading(services: Sequence[int]) -> tuple[float, float, float]:
    """CPU so far: this process alone, with every process below it, the services' trees.

    This process and what it reaped are read by `getrusage` (microseconds),
    the processes below it by `psutil` (clock ticks).
    """
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
    alone = h.cpu_seconds()
    below = tree_cpu([child.pid for child in psutil.Process().children()])
    served = tree_cpu(services) if services else 0.0
    return alone, alone + reaped.ru_utime + reaped.ru_stime + below, served


async def _timed(
    step: Callable[[], Awaitable[object]], count: int, services: Sequence[int], warmup: int = WARMUP
) -> dict[str, Any]:
    """`warmup` unmeasured steps, then `count` timed ones with the CPU read around them."""
    for _ in range(warmup):
        await step()
    before = _reading(services)
    times = []
    for _ in range(count):
        started = time.perf_counter()
        await step()
        times.append(time.perf_counter() - started)
    after = _reading(services)
    return {
        "samples": times,
        "cpu_self": after[0] - before[0],
        "cpu": after[1] - before[1],
        "cpu_service": after[2] - before[2],
    }


def _executor_home() -> str:
    """Where `executor` is imported from: run as a Ray task on the node."""
    import executor

    return os.path.dirname(os.path.dirname(os.path.abspath(executor.__file__ or "")))


async def _work(row: str, params: dict[str, Any]) -> dict[str, Any]:
    from executor import Command, DockerExecutor, LocalExecutor, SshExecutor

    count: int = params["count"]
    workdir: str = params["workdir"]
    services: list[int] = params.get("services", [])
    true = Command.shell("true")
    if row == "spawn":
        async with LocalExecutor(workdir) as ex:
            return await _timed(lambda: ex.exec_cmd(true), count, services)
    if row == "streaming":
        size: int = params["size"]
        seen = 0

        def sink(chunk: Any) -> None:
            nonlocal seen
            seen += len(chunk.data)

        stream = Command.shell(f"dd if=/dev/zero bs=1M iflag=count_bytes count={size} status=none")
        async with LocalExecutor(workdir, output_limit=h.MIB) as ex:
            await ex.exec_cmd(true)
            result = await _timed(lambda: ex.exec_cmd_streaming(stream, sink), count, services, 1)
        assert seen == size * (count + 1), (seen, size, count)
        return result
    if row == "kill":
        from executor import TimedOut

        doomed = Command.shell(KILL_SCRIPT).with_timeout(TIMEOUT)
        async with LocalExecutor(workdir, kill_grace=GRACE) as ex:

            async def kill() -> None:
                with contextlib.suppress(TimedOut):
                    await ex.exec_cmd(doomed)

            await ex.exec_cmd(true)
            # The first kill warms up (the shim's kill path), as in bench_kill.
            result = await _timed(kill, count, services, 1)
        result["samples"] = [late - TIMEOUT - GRACE for late in result["samples"]]
        return result
    if row == "shell":
        async with LocalExecutor(workdir) as ex, ex.shell() as sh:
            return await _timed(lambda: sh.run("true"), count, services)
    exec_true = Command.exec(["true"])
    if row in ("docker", "docker-exec"):
        docker = DockerExecutor(
            container=params["container"], helper=row == "docker", output_limit=h.MIB
        )
        async with docker:
            return await _timed(lambda: docker.exec_cmd(exec_true), count, services)
    if row == "ssh":
        ssh = SshExecutor(
            params["host"],
            port=params["port"],
            user=params["user"],
            client_keys=[params["client_key"]],
            known_hosts=params["known_hosts"],
            workdir=workdir,
        )
        async with ssh:
            return await _timed(lambda: ssh.exec_cmd(exec_true), count, services)
    if row == "ray":
        return await _ray_work(params, count, services)
    raise ValueError(row)


async def _ray_work(params: dict[str, Any], count: int, services: list[int]) -> dict[str, Any]:
    import ray

    from executor import Command, RayExecutor

    # Ray puts the driver's working folder first on its workers' `sys.path`:
    # from the checkout's root they would import its `executor` whatever
    # their `PYTHONPATH` says.
    os.chdir(params["workdir"])
    ray.init(address=params["address"], log_to_driver=False)
    try:
        # The actor imports `executor` from where this worker did: each side's
        # node runs that side's code (checked: `node_from`).
        env = {"env_vars": {"PYTHONPATH": _baseline.imported_from()}}
        placed = {"resources": {"second": 0.01}, "runtime_env": env}
        home = ray.remote(_executor_home).options(**placed).remote()
        ex = RayExecutor(resources={"second": 0.01}, output_limit=h.MIB, runtime_env=env)
        try:
            exec_true = Command.exec(["true"])
            result = await _timed(lambda: ex.exec_cmd(exec_true), count, services)
        finally:
            await ex.aclose()
        result["node_from"] = await home
        return result
    finally:
        ray.shutdown()


def worker(row: str, params: dict[str, Any]) -> None:
    import anyio

    h.preload()
    result = anyio.run(_work, row, params, backend="asyncio")
    result["from"] = _baseline.imported_from()
    h.worker_result(result)


# --- the parent: services, rounds, the table --------------------------------


@attrs.define
class Side:
    """One side's results in one row, round by round."""

    samples: list[list[float]] = attrs.field(factory=list)
    cpu: list[float] = attrs.field(factory=list)
    cpu_self: list[float] = attrs.field(factory=list)
    cpu_service: list[float] = attrs.field(factory=list)
    units: list[float] = attrs.field(factory=list)

    def add(self, result: dict[str, Any], units: float) -> None:
        """One round's worker result, which timed `units` commands (or GiB)."""
        self.samples.append(list(result["samples"]))
        self.cpu.append(result["cpu"])
        self.cpu_self.append(result["cpu_self"])
        self.cpu_service.append(result["cpu_service"])
        self.units.append(units)

    @property
    def stats(self) -> h.Stats:
        """Every sample of every round."""
        return h.Stats(value for batch in self.samples for value in batch)

    @property
    def round_medians(self) -> list[float]:
        """Each round's median."""
        return [statistics.median(batch) for batch in self.samples]

    def per_unit(self, values: list[float]) -> float:
        """The sum of `values` (CPU seconds of each round) per command (or GiB)."""
        return sum(values) / sum(self.units)

    @property
    def round_cpu(self) -> list[float]:
        """Each round's CPU (the side's own and the service's) per unit."""
        return [
            (cpu + service) / units
            for cpu, service, units in zip(self.cpu, self.cpu_service, self.units, strict=True)
        ]


def judge(new: float, base_rounds: list[float]) -> str:
    """New's figure (lower is better) against the spread of base's rounds."""
    if new > max(base_rounds):
        return "slower beyond spread"
    if new < min(base_rounds):
        return "faster"
    return "within spread"


def spread(values: list[float]) -> str:
    """(max - min) / median of per-round figures, as a percentage."""
    middle = statistics.median(values)
    return f"{(max(values) - min(values)) / middle * 100:.0f} %" if middle else "-"


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"load {one:.2f} / {five:.2f} (1 / 5 min) on {os.cpu_count()} cores"


def required(variable: str) -> bool:
    return os.environ.get(variable) == "1"


class Skip(Exception):
    """A row cannot run here; the message says why."""


def docker_cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["docker", *args], capture_output=True, text=True, timeout=timeout, check=False
    )


def engine_pid() -> int | None:
    """The pid of the process listening on the Docker engine's Unix socket, if here."""
    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    if not host.startswith("unix://"):
        return None
    path = host[len("unix://") :]
    with contextlib.suppress(psutil.Error, OSError):
        for connection in psutil.net_connections("unix"):
            if isinstance(connection.laddr, str) and connection.laddr == path and connection.pid:
                return int(connection.pid)
    return None


def docker_service(stack: contextlib.ExitStack) -> dict[str, Any]:
    """An idle container for both sides, and the engine's pids for its CPU."""
    if shutil.which("docker") is None:
        raise Skip("no docker CLI (it starts the container both sides share)")
    version = docker_cli("version", "--format", "{{.Server.Version}}", timeout=20)
    if version.returncode:
        raise Skip(f"no Docker engine: {version.stderr.strip().splitlines()[-1:]}")
    if docker_cli("image", "inspect", IMAGE, timeout=20).returncode:
        raise Skip(f"image {IMAGE} is missing (.ci/services/docker.sh builds it)")
    started = docker_cli(
        "run",
        "-d",
        "--init",
        "--network",
        "none",
        "--name",
        f"bench-run-paths-{os.getpid()}",
        "--entrypoint",
        "/bin/sh",
        IMAGE,
        "-c",
        "while :; do sleep 3600; done",
    )
    if started.returncode:
        raise RuntimeError(f"docker run failed: {started.stderr}")
    container = started.stdout.strip()
    stack.callback(docker_cli, "rm", "-f", container)
    services, counted = [], []
    engine = engine_pid()
    if engine is not None:
        services.append(engine)
        counted.append(f"the engine (pid {engine}) and its children")
    for process in psutil.process_iter(["name", "cmdline"]):
        if "containerd-shim" in (process.info["name"] or "") and container in (
            process.info["cmdline"] or []
        ):
            services.append(process.pid)
            counted.append(f"the container's shim (pid {process.pid}) and all below it")
    return {
        "container": container,
        "services": services,
        "counted": " and ".join(counted) or "nothing (no engine process found here)",
    }


def ssh_service(stack: contextlib.ExitStack) -> dict[str, Any]:
    sys.path.insert(0, str(TESTS))
    from ssh_server import start_server

    server = start_server()
    if server is None:
        raise Skip("no /usr/sbin/sshd (install openssh-server)")
    stack.callback(server.stop)
    return {
        "host": server.host,
        "port": server.port,
        "user": server.user,
        "client_key": server.client_key,
        "known_hosts": server.known_hosts,
        "workdir": server.workdir(),
        "services": [server.process.pid],
        "counted": f"sshd (pid {server.process.pid}) and its sessions",
    }


def ray_service(stack: contextlib.ExitStack) -> dict[str, Any]:
    if importlib.util.find_spec("ray") is None:
        raise Skip("Ray is not installed (pip install -e '.[ray]')")
    sys.path.insert(0, str(TESTS))
    from ray_cluster import LOOPBACK_ENV, RayCluster

    os.environ.update(LOOPBACK_ENV)
    cluster = RayCluster()
    stack.callback(cluster.stop)
    raylet = int(cluster.second["raylet_pid"])
    return {
        "address": cluster.address,
        "services": [raylet],
        "counted": f"the second node's raylet (pid {raylet}) and its workers",
    }


SERVICES: dict[str, tuple[Callable[[contextlib.ExitStack], dict[str, Any]], str | None]] = {
    "docker": (docker_service, "EXECUTOR_REQUIRE_DOCKER"),
    "docker-exec": (docker_service, "EXECUTOR_REQUIRE_DOCKER"),
    "ssh": (ssh_service, "EXECUTOR_REQUIRE_SSH"),
    "ray": (ray_service, None),
}


def run_row(
    name: str, params: dict[str, Any], per_round: int, rounds: int, trees: dict[str, str | None]
) -> dict[str, Side]:
    row = ROWS[name]
    sides = {side: Side() for side in trees}
    units = per_round * params.get("size", 0) / GIB if row.streams else per_round
    for index in range(rounds):
        for side in h.rotated(list(trees), index):
            tree = trees[side]
            result = _baseline.run_worker_in(
                tree, __file__, [name, json.dumps({**params, "count": per_round})]
            )
            expected = str(ROOT) if tree is None else tree
            if result["from"] != expected:
                raise RuntimeError(f"{side} imported executor from {result['from']}")
            if result.get("node_from", expected) != expected:
                raise RuntimeError(
                    f"{side}'s Ray node imported executor from {result['node_from']}"
                )
            sides[side].add(result, units)
    return sides


def report(name: str, sides: dict[str, Side], params: dict[str, Any], per_round: int) -> None:
    row = ROWS[name]
    new, base = sides[NEW], sides[BASE]
    size = params.get("size", 0)

    def figure(seconds: float) -> str:
        if row.streams:
            return f"{size / seconds / 1e6:.0f}" if seconds > 0 else "-"
        return h.fmt_ms(seconds, row.digits)

    def cpu(seconds: float) -> str:
        return f"{seconds:.2f}" if row.streams else h.fmt_ms(seconds, 2)

    rounds = len(new.samples)
    print(f"\n{name}: {row.title}; {per_round} per side a round x {rounds} rounds")
    if row.streams:
        print(f"  {size / h.MIB:g} MiB a stream; cpu columns in CPU seconds per GiB")
    else:
        print("  cpu columns in CPU ms per command")
    if row.service:
        print(f"  cpu service: {params.get('counted', '-')}")
    rows = []
    for side_name, side in sides.items():
        stats = side.stats
        medians = side.round_medians
        # For streams the slow tail (p99 of the seconds) is the low MB/s.
        low, high = min(medians), max(medians)
        if row.streams:
            low, high = high, low
        rows.append(
            [
                side_name,
                len(stats.values),
                figure(stats.median),
                figure(stats.p99),
                f"{figure(low)}-{figure(high)}",
                spread(medians),
                cpu(side.per_unit(side.cpu)),
                cpu(side.per_unit(side.cpu_self)),
                cpu(side.per_unit(side.cpu_service)) if row.service else "-",
                cpu(side.per_unit(side.cpu) + side.per_unit(side.cpu_service)),
            ]
        )
    h.print_table(
        [
            "side",
            "n",
            "median",
            "p99" if not row.streams else "p99 (slow)",
            "rounds min-max",
            "spread",
            "cpu",
            "cpu self",
            "cpu service",
            "total",
        ],
        rows,
    )
    pairs = [n / b for n, b in zip(new.round_medians, base.round_medians, strict=True) if b > 0]
    # Lower is better for every figure judged here (seconds, CPU per unit).
    ratio = new.stats.median / base.stats.median
    if row.streams:
        ratio, pairs = 1 / ratio, [1 / pair for pair in pairs]
    wall = judge(new.stats.median, base.round_medians)
    new_cpu = new.per_unit(new.cpu) + new.per_unit(new.cpu_service)
    base_cpu = base.per_unit(base.cpu) + base.per_unit(base.cpu_service)
    what = "MB/s" if row.streams else "median"
    print(
        f"  new / base {what}: {ratio:.2f}x (round by round {min(pairs):.2f}-{max(pairs):.2f}x) "
        f"-> {wall}"
    )
    print(
        f"  new / base CPU: {new_cpu / base_cpu:.2f}x (base's rounds "
        f"{cpu(min(base.round_cpu))}-{cpu(max(base.round_cpu))}) "
        f"-> {judge(new_cpu, base.round_cpu)}"
    )


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--worker"]:
        worker(argv[1], json.loads(argv[2]))
        return 0
    parser = h.command_line(
        __doc__, "local rows at tiny sizes, 2 rounds (service rows only when named in --rows)"
    )
    parser.add_argument(
        "--rows", help=f"comma-separated, of: {', '.join(ROWS)} (default: all; --quick: local)"
    )
    parser.add_argument("--rounds", type=int, help="rounds per row (default 10; --quick 2)")
    parser.add_argument(
        "--count", type=int, help="commands (streams) per side per row, over all rounds"
    )
    parser.add_argument("--mib", type=int, help="MiB a stream (default 256; --quick 16)")
    parser.add_argument(
        "--commit",
        default=_baseline.RUN_PATHS_BASE_COMMIT,
        help="the base: a commit of this clone (default: RUN_PATHS_BASE_COMMIT)",
    )
    parser.add_argument(
        "--new",
        metavar="COMMIT",
        help="a commit for the new side instead of the working tree (`--new` = `--commit`: "
        "the same code on both sides, to see the noise)",
    )
    args = parser.parse_args(argv)
    names = [name for name in (args.rows or "").split(",") if name]
    unknown = [name for name in names if name not in ROWS]
    if unknown:
        parser.error(f"no such row: {', '.join(unknown)} (rows: {', '.join(ROWS)})")
    if not names:
        names = [name for name, row in ROWS.items() if not (args.quick and row.service)]
        if args.quick:
            left = [name for name, row in ROWS.items() if row.service]
            print(f"(--quick: {', '.join(left)} left out; name them in --rows to run them)")
    rounds = args.rounds or (2 if args.quick else 10)
    mib = args.mib or (16 if args.quick else 256)
    tree = _baseline.baseline_tree(args.commit)
    if tree is None:
        print("skipped: the base commit is not in this clone")
        return 0
    trees: dict[str, str | None] = {NEW: None, BASE: tree}
    where = f"the working tree ({ROOT})"
    if args.new:
        # A folder of its own even for the base's commit.
        trees[NEW] = _baseline.baseline_tree(f"{args.new}^{{commit}}")
        if trees[NEW] is None:
            print("skipped: the new side's commit is not in this clone")
            return 0
        where = f"{args.new[:12]}, `git archive`d"
    started = time.monotonic()
    print(
        f"new: {where}; base: {args.commit[:12]}, `git archive`d; "
        f"{rounds} rounds a row, each side in a fresh interpreter, taking turns going first"
    )
    print(f"start: {load()}")
    failed = False
    # A service's parameters, or why it is absent, by the function that starts it.
    services: dict[str, dict[str, Any] | Skip] = {}
    with contextlib.ExitStack() as stack:
        for name in names:
            row = ROWS[name]
            count = args.count or (row.quick if args.quick else row.full)
            per_round = max(1, count // rounds)
            variable = None
            try:
                params: dict[str, Any] = {}
                if row.service:
                    setup, variable = SERVICES[name]
                    if setup.__name__ not in services:
                        try:
                            services[setup.__name__] = setup(stack)
                        except Skip as skip:
                            services[setup.__name__] = skip
                    found = services[setup.__name__]
                    if isinstance(found, Skip):
                        raise found
                    params.update(found)
                if "workdir" not in params:
                    params["workdir"] = stack.enter_context(
                        tempfile.TemporaryDirectory(prefix="bench-run-paths-")
                    )
                if row.streams:
                    params["size"] = mib * h.MIB
                sides = run_row(name, params, per_round, rounds, trees)
            except Skip as skip:
                print(f"\n{name}: skipped: {skip}")
                if variable is not None and required(variable):
                    failed = True
                continue
            except (RuntimeError, subprocess.SubprocessError) as error:
                print(f"\n{name}: FAILED: {error}")
                failed = True
                continue
            report(name, sides, params, per_round)
    print(f"\nend: {load()}; {time.monotonic() - started:.0f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
