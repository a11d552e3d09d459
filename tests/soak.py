"""The soak's parts, shared by `test_soak.py` (small sizes, bounds asserted) and `bench_soak.py`.

A soak sends one mix of calls, over and over, to one MCP server or straight
to one executor, and samples what the serving process holds every `every`
calls: its resident memory, open descriptors, threads and descendant
processes, the files in the folders the executor writes to (its workdir and
temporary folder), the processes of ours anywhere on the host, and the
host's whole process count. Every call's answer is checked as it comes back
(the echo of its own number, the exit code, the file's content): a soak
whose calls went wrong is not a soak.

The mix (`CYCLE`, sixteen calls): short commands, failing commands, a
timeout, a cancel (the caller gives up mid-command), a file written and read
back, a job started and stopped, persistent-shell commands. A sample is taken
after whole cycles only, so each follows the same call and the machine is
between calls: descriptors and processes can be compared exactly.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import anyio
import attrs
import psutil

from executor import (
    Command,
    NonZeroExit,
    PersistentShell,
    TimedOut,
    ToolExecutor,
)
from executor._core.proc import TREE_VARIABLE

CYCLE = (
    "short",
    "fail",
    "shell",
    "write",
    "read",
    "short",
    "shell",
    "fail",
    "job",
    "short",
    "timeout",
    "read",
    "shell",
    "cancel",
    "write",
    "short",
)
"""The kinds of one cycle of the mix, in order (sixteen calls)."""

# A timeout or a cancel ends its command this soon: long enough that the
# command has started, short enough that the soak is mostly other calls.
GIVE_UP = 0.05
# What a timed-out or cancelled command would run, were it not ended.
LONG = "sleep 60"


class SoakError(AssertionError):
    """A call of the soak came back wrong: the mix checks each answer."""


# --- sampling -----------------------------------------------------------------------------


METRICS = ("rss_mib", "fds", "threads", "children", "files", "ours", "host")
"""What each sample holds (see `Sample`)."""


@attrs.frozen
class Sample:
    """What the serving process and the host held after `calls` calls.

    Attributes:
        calls: How many calls had come back.
        rss_mib: The serving process's resident memory, MiB.
        fds: Its open descriptors.
        threads: Its threads (the interpreter's and native ones).
        children: Its descendant processes (with its own sshd, Ray cluster: theirs too).
        files: Files under the folders the executor writes to (workdir, temporary folder).
        ours: Processes of ours anywhere on the host: its descendants, and any
            process tagged as started by an executor of it (reparented ones too).
        host: Every process on the host (others' too: only a witness).
        processes: Command lines of `ours`, to say what a rise was.
    """

    calls: int
    rss_mib: float
    fds: int
    threads: int
    children: int
    files: int
    ours: int
    host: int
    processes: tuple[str, ...] = ()

    def value(self, metric: str) -> float:
        """The value of one of `METRICS`."""
        return float(getattr(self, metric))


def tagged(owner: int) -> set[int]:
    """Live processes whose environment says an executor of process `owner` started them."""
    needle = f"{TREE_VARIABLE}={owner}:".encode()
    found = set()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                environ = f.read()
        except OSError:
            continue
        if any(entry.startswith(needle) for entry in environ.split(b"\0")):
            try:
                if psutil.Process(int(name)).status() != psutil.STATUS_ZOMBIE:
                    found.add(int(name))
            except psutil.Error:
                continue
    return found


def count_files(folders: Iterable[str | Path]) -> int:
    """Files (and folders) below each of `folders`, which may be gone."""
    total = 0
    for folder in folders:
        for _, dirs, files in os.walk(folder):
            total += len(dirs) + len(files)
    return total


@attrs.define
class Sampler:
    """Takes `Sample`s of process `pid` (and the folders and extras given)."""

    pid: int
    folders: Sequence[str | Path] = ()
    # Counted among the files: those of a folder this host cannot see (a container's).
    remote_files: Callable[[], int] | None = None
    # Counted among `ours`: processes of ours elsewhere (a container's).
    remote_processes: Callable[[], int] | None = None
    # How often each sample times `FLOOR` (the benchmark's; the tests assert no timing).
    floor_runs: int = 0
    samples: list[Sample] = attrs.Factory(list)
    floors: list[tuple[int, float]] = attrs.Factory(list)

    def take(self, calls: int) -> Sample:
        """Sample now, after `calls` calls, and keep it; then time the floor `floor_runs` times."""
        sample = self._sample(calls)
        for _ in range(self.floor_runs):
            started = time.perf_counter()
            subprocess.run(FLOOR, stdout=subprocess.DEVNULL, check=True)
            self.floors.append((calls, time.perf_counter() - started))
        return sample

    def _sample(self, calls: int) -> Sample:
        process = psutil.Process(self.pid)
        descendants = {child.pid for child in process.children(recursive=True) if _live(child)}
        ours = descendants | tagged(self.pid)
        remote = self.remote_processes() if self.remote_processes is not None else 0
        files = count_files(self.folders)
        if self.remote_files is not None:
            files += self.remote_files()
        sample = Sample(
            calls=calls,
            rss_mib=process.memory_info().rss / (1 << 20),
            fds=process.num_fds(),
            threads=process.num_threads(),
            children=len(descendants),
            files=files,
            ours=len(ours) + remote,
            host=len(psutil.pids()),
            processes=tuple(sorted(_command_line(pid) for pid in ours)),
        )
        self.samples.append(sample)
        return sample


FLOOR = ("sh", "-c", "echo 1")
"""The physical floor of a call: one short command started and waited for, no executor.

Timed at each sample (`Sampler.floor_runs`), it tells the machine's speed at
that moment: a shared machine's drifts by a third over minutes, and the CPU
time of the same calls with it, in the server and the client alike.
"""


def _command_line(pid: int) -> str:
    try:
        return f"{pid} {' '.join(psutil.Process(pid).cmdline())[:200]}"
    except psutil.Error:
        return f"{pid} (gone)"


def _live(process: psutil.Process) -> bool:
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


@attrs.frozen
class Flatness:
    """How one metric moved after the warm-up.

    Attributes:
        metric: Which (one of `METRICS`).
        base: Its value at the first sample after the warm-up.
        growth: Its largest value after the warm-up minus `base`.
        slope: Its least-squares slope over the last 80% of the samples, per 1000 calls.
        last: Its value at the last sample.
    """

    metric: str
    base: float
    growth: float
    slope: float
    last: float


def flatness(samples: Sequence[Sample], warmup: int) -> dict[str, Flatness]:
    """Each metric's `Flatness` over `samples` taken after `warmup` calls."""
    after = [s for s in samples if s.calls >= warmup]
    if len(after) < 2:
        raise ValueError(f"{len(after)} samples after the warm-up: too few to judge")
    tail = after[len(after) // 5 :] if len(after) >= 5 else after
    result = {}
    for metric in METRICS:
        values = [s.value(metric) for s in after]
        result[metric] = Flatness(
            metric=metric,
            base=values[0],
            growth=max(values) - values[0],
            slope=slope([s.calls for s in tail], [s.value(metric) for s in tail]) * 1000,
            last=values[-1],
        )
    return result


def slope(xs: Sequence[float], ys: Sequence[float]) -> float:
    """The least-squares slope of `ys` over `xs` (0 for fewer than two points)."""
    if len(xs) < 2:
        return 0.0
    mean_x = statistics.fmean(xs)
    mean_y = statistics.fmean(ys)
    spread = sum((x - mean_x) ** 2 for x in xs)
    if spread == 0:
        return 0.0
    return sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / spread


# --- running a mix ------------------------------------------------------------------------


Call = Callable[[int], Awaitable[None]]
"""One call of a mix: given its number, makes it and checks its answer."""


async def soak(
    calls: Sequence[Call],
    count: int,
    *,
    every: int,
    sample: Callable[[int], Awaitable[object] | object],
) -> list[float]:
    """Make `count` calls spread over `calls` (clients, run at once); each call's seconds.

    Every client makes `every` calls between samples; then all wait and
    `sample(done)` runs while no call is in flight. The seconds are in the
    order the calls came back.
    """
    if every % len(CYCLE):
        raise ValueError(f"every={every} is not a whole number of cycles ({len(CYCLE)} calls)")
    durations: list[float] = []
    done = 0
    await _maybe(sample(0))
    while done < count:
        round_size = min(every, math.ceil((count - done) / len(calls)))

        async def client(call: Call, first: int, size: int) -> None:
            for index in range(first, first + size):
                started = time.perf_counter()
                await call(index)
                durations.append(time.perf_counter() - started)

        first = done // len(calls)
        if len(calls) == 1:
            await client(calls[0], first, round_size)
        else:
            async with anyio.create_task_group() as group:
                for call in calls:
                    group.start_soon(client, call, first, round_size)
        done += round_size * len(calls)
        await _maybe(sample(done))
    return durations


async def _maybe(value: Awaitable[object] | object) -> None:
    if isinstance(value, Awaitable):
        await value


@attrs.define
class ExecutorMix:
    """The mix straight through one executor and one persistent shell of it.

    Files are written under `soak/` in the executor's workdir.
    """

    executor: ToolExecutor
    shell: PersistentShell
    _written: dict[str, str] = attrs.Factory(dict)
    _shell_count: int = 0

    async def __call__(self, index: int) -> None:
        """Make call `index` of the mix and check what it gave."""
        kind = CYCLE[index % len(CYCLE)]
        ex = self.executor
        if kind == "short":
            output = await ex.exec_cmd(Command.shell(f"echo {index}"))
            _expect(_str(output.stdout) == f"{index}\n", kind, index, output.stdout)
        elif kind == "fail":
            try:
                await ex.exec_cmd(Command.shell(f"echo e{index} >&2; exit 3"))
            except NonZeroExit as failed:
                got = (failed.output.exit_code, _str(failed.output.stderr))
                _expect(got == (3, f"e{index}\n"), kind, index, got)
            else:
                raise SoakError(f"call {index} ({kind}): no NonZeroExit")
        elif kind == "timeout":
            try:
                await ex.exec_cmd(Command.shell(LONG).with_timeout(GIVE_UP))
            except TimedOut:
                pass
            else:
                raise SoakError(f"call {index} ({kind}): no TimedOut")
        elif kind == "cancel":
            with anyio.move_on_after(GIVE_UP) as scope:
                await ex.exec_cmd(Command.shell(LONG))
            _expect(scope.cancelled_caught, kind, index, "it was not cancelled")
        elif kind == "write":
            path = f"soak/f{index % 4}.txt"
            content = f"{index}\n" * 8
            await ex.exec_cmd(Command.write_file(path, content))
            self._written[path] = content
        elif kind == "read":
            path = f"soak/f{index % 4}.txt"
            if path not in self._written:
                await ex.exec_cmd(Command.write_file(path, "new\n"))
                self._written[path] = "new\n"
            output = await ex.exec_cmd(Command.read_file(path))
            _expect(_str(output.stdout) == self._written[path], kind, index, output.stdout[:40])
        elif kind == "job":
            job = await self.shell.start_job(LONG)
            status = await job.kill()
            _expect(status.state.value != "running", kind, index, status)
        elif kind == "shell":
            self._shell_count += 1
            output = await self.shell.run("n=$((${n:-0}+1)); echo $n")
            _expect(_str(output.stdout) == f"{self._shell_count}\n", kind, index, output.stdout)


@attrs.define
class McpMix:
    """The mix through an MCP client's tool calls; `tag` keeps its files and shell apart."""

    client: Any
    tag: str
    _written: dict[str, str] = attrs.Factory(dict)
    _shell_count: int = 0

    async def __call__(self, index: int) -> None:
        """Make call `index` of the mix and check what it gave."""
        kind = CYCLE[index % len(CYCLE)]
        call = self.client.call_tool
        if kind == "short":
            result = await call("run", {"command": f"echo {index}"})
            _expect(_text(result) == f"{index}\n[exit code 0]", kind, index, _text(result))
        elif kind == "fail":
            result = await call("run", {"command": f"echo e{index} >&2; exit 3"})
            got = (result.is_error, _field(result, "exit_code"), _field(result, "stderr"))
            _expect(got == (True, 3, f"e{index}\n"), kind, index, got)
        elif kind == "timeout":
            result = await call("run", {"command": LONG, "timeout": GIVE_UP})
            _expect(_field(result, "kind") == "timed_out", kind, index, _text(result))
        elif kind == "cancel":
            with anyio.move_on_after(GIVE_UP) as scope:
                await call("run", {"command": LONG})
            _expect(scope.cancelled_caught, kind, index, "it was not cancelled")
        elif kind in ("write", "read"):
            path = f"soak/{self.tag}/f{index % 4}.txt"
            if kind == "write" or path not in self._written:
                content = f"{index}\n" * 8
                result = await call("write_file", {"path": path, "content": content})
                _expect(not result.is_error, kind, index, _text(result))
                self._written[path] = content
            if kind == "read":
                result = await call("read_file", {"path": path})
                _expect(_numbered(_text(result)) == self._written[path], kind, index, _text(result))
        elif kind == "job":
            started = await call("job_start", {"command": LONG})
            found = re.match(r"started job (\S+):", _text(started))
            if found is None:
                raise SoakError(f"call {index} ({kind}): {_text(started)!r}")
            stopped = await call("job_stop", {"job_id": found[1]})
            _expect(not stopped.is_error, kind, index, _text(stopped))
        elif kind == "shell":
            self._shell_count += 1
            name = f"n_{self.tag}"
            result = await call("shell", {"command": f"{name}=$((${{{name}:-0}}+1)); echo ${name}"})
            got = _field(result, "stdout")
            _expect(got == f"{self._shell_count}\n", kind, index, _text(result))


def _str(data: str | bytes) -> str:
    return data.decode(errors="replace") if isinstance(data, bytes) else data


def _text(result: Any) -> str:
    return "".join(getattr(block, "text", "") for block in result.content)


def _field(result: Any, name: str) -> Any:
    return (result.structured_content or {}).get(name)


def _numbered(shown: str) -> str:
    """A `read_file` answer's text without its line numbers and its closing note."""
    lines = []
    for line in shown.splitlines():
        number, tab, text = line.partition("\t")
        if tab and number.strip().isdigit():
            lines.append(text + "\n")
    return "".join(lines)


def _expect(ok: bool, kind: str, index: int, got: object) -> None:
    if not ok:
        raise SoakError(f"call {index} ({kind}) came back wrong: {got!r}")


# --- reporting ----------------------------------------------------------------------------


def quantiles(durations: Sequence[float]) -> tuple[float, float]:
    """The median and the 99th percentile of `durations`."""
    ordered = sorted(durations)
    position = (len(ordered) - 1) * 0.99
    low, high = math.floor(position), math.ceil(position)
    p99 = ordered[low] + (ordered[high] - ordered[low]) * (position - low)
    return statistics.median(ordered), p99


def describe(flat: dict[str, Flatness]) -> str:
    """One line per metric: base, growth after the warm-up, slope per 1000 calls."""
    lines = []
    for metric, f in flat.items():
        lines.append(
            f"  {metric:8} base {f.base:9.1f}  last {f.last:9.1f}  "
            f"max-base {f.growth:+8.1f}  slope {f.slope:+8.2f}/1000 calls"
        )
    return "\n".join(lines)


# --- whole soaks --------------------------------------------------------------------------


BOUNDS = {"fds": 4.0, "threads": 2.0, "children": 2.0, "files": 0.0, "ours": 2.0}
"""How far each count may rise above its value at the end of the warm-up (`Flatness.growth`).

Threads get two: an idle worker thread of the event loop's pool may come or
go. Processes get two: a local executor's supervisor keeps two to four idle
shims ready to start commands (see `executor._local.supervisor`), and a
command an MCP client gave up on may still be ending in the server (the
client's cancel does not wait for it). Descriptors get four: that command's
(stdout, stderr, its control socket and its end pipe). Files get none:
between calls nothing of a call may be left.
"""
CANCEL_LEFT = {"fds": 4.0, "children": 2.0, "ours": 2.0}
"""What one cancelled command still ending holds: its descriptors, its process and its shim's."""
RSS_SLOPE_MIB = 0.5
"""Resident memory may rise by at most this much per 1000 calls over the last 80% of a soak."""


@attrs.define
class Soaked:
    """What one soak did and saw.

    Attributes:
        name: What was soaked (a backend, or the MCP server and its transport).
        durations: Each call's seconds, in the order they came back.
        samples: What the sampler saw, every so many calls.
        warmup: Calls before the flatness is judged.
        wall: Seconds the calls took, all of them.
        cpu: CPU seconds of this process over the calls.
        server_cpu: CPU seconds of the server process over the calls (MCP only).
        load: The host's load averages (1, 5, 15 minutes) at the start and at the end.
        bounds: How far each count may rise after the warm-up (`BOUNDS`, or wider).
        floors: The seconds of each run of `FLOOR` at a sample, with the calls made by then.
    """

    name: str
    durations: list[float]
    samples: list[Sample]
    warmup: int
    wall: float
    cpu: float
    server_cpu: float | None
    load: tuple[tuple[float, float, float], tuple[float, float, float]]
    bounds: dict[str, float] = attrs.Factory(lambda: dict(BOUNDS))
    floors: list[tuple[int, float]] = attrs.Factory(list)

    def flatness(self) -> dict[str, Flatness]:
        """Each metric's flatness after the warm-up."""
        return flatness(self.samples, self.warmup)

    def over_bounds(self, bounds: dict[str, float] | None = None) -> list[str]:
        """The counts that rose past their bound after the warm-up, described; empty if none.

        Where the bounds were widened for cancelled calls still ending at a
        sample (`CANCEL_LEFT`), the last sample is held to `BOUNDS` too: a
        rise that stays is a leak. (Threads widened for idle worker threads
        are not: those idle ten seconds, and may be there at the end.)
        """
        flat = self.flatness()
        found = []
        for metric, bound in (bounds or self.bounds).items():
            f = flat[metric]
            values = [int(s.value(metric)) for s in self.samples]
            if f.growth <= bound:
                if metric in CANCEL_LEFT and f.last - f.base > BOUNDS[metric]:
                    found.append(
                        f"{metric} ended {f.last - f.base:+.0f} above its value after the "
                        f"warm-up (bound {BOUNDS[metric]:+.0f}): {values}"
                    )
                continue
            said = f"{metric} rose by {f.growth:+.0f} (bound {bound:+.0f}): {values}"
            if metric in ("children", "ours"):
                first = next(s for s in self.samples if s.calls >= self.warmup)
                new = set(self.samples[-1].processes) - set(first.processes)
                said += f"; new since the warm-up: {sorted(new)}"
            found.append(said)
        return found


async def _timed(
    name: str,
    run: Callable[[], Awaitable[list[float]]],
    sampler: Sampler,
    warmup: int,
    server: psutil.Process | None = None,
) -> Soaked:
    load = os.getloadavg()
    cpu = time.process_time()
    server_cpu = _cpu(server) if server is not None else 0.0
    started = time.monotonic()
    durations = await run()
    wall = time.monotonic() - started
    return Soaked(
        name=name,
        durations=durations,
        samples=sampler.samples,
        warmup=warmup,
        wall=wall,
        cpu=time.process_time() - cpu,
        server_cpu=_cpu(server) - server_cpu if server is not None else None,
        load=(load, os.getloadavg()),
        floors=sampler.floors,
    )


def _cpu(process: psutil.Process) -> float:
    times = process.cpu_times()
    return float(times.user + times.system)


async def soak_executor(
    name: str,
    executor: ToolExecutor,
    count: int,
    *,
    every: int,
    warmup: int,
    folders: Sequence[str | Path] = (),
    remote_files: Callable[[], int] | None = None,
    remote_processes: Callable[[], int] | None = None,
    floor_runs: int = 0,
) -> Soaked:
    """Soak `executor` (entered already) with `count` calls of the mix and one persistent shell.

    `folders` are where it writes (counted as files); `remote_files` and
    `remote_processes` count what this host cannot see (a container's). Each
    sample times `FLOOR` `floor_runs` times.
    """
    sampler = Sampler(
        os.getpid(),
        folders,
        remote_files=remote_files,
        remote_processes=remote_processes,
        floor_runs=floor_runs,
    )
    async with executor.shell() as shell:
        mix = ExecutorMix(executor, shell)

        async def run() -> list[float]:
            return await soak([mix], count, every=every, sample=sampler.take)

        return await _timed(name, run, sampler, warmup)


def mcp_server_command(*flags: str) -> list[str]:
    """The command line of `python -m executor mcp` with `flags`."""
    return [sys.executable, "-m", "executor", "mcp", *flags]


def _server_of(workdir: str) -> psutil.Process:
    """The MCP server this process started for `workdir` (the SDK's client starts it over stdio)."""
    for child in psutil.Process().children(recursive=True):
        try:
            command = child.cmdline()
        except psutil.Error:
            continue
        if "mcp" in command and workdir in command and "executor" in command:
            return child
    raise RuntimeError(f"no MCP server of ours for {workdir}")


async def soak_mcp_stdio(
    count: int,
    *,
    every: int,
    warmup: int,
    workdir: str,
    tmpdir: str,
    flags: Sequence[str] = (),
    floor_runs: int = 0,
) -> Soaked:
    """Soak one MCP server over stdio: one client, `count` calls, the server's process sampled.

    The server runs in `workdir`, with `TMPDIR` set to `tmpdir` (so its temporary
    files, spills among them, are counted there). Each sample times `FLOOR`
    `floor_runs` times.
    """
    from mcp import Client, StdioServerParameters

    command = mcp_server_command("--workdir", workdir, *flags)
    params = StdioServerParameters(
        command=command[0], args=command[1:], env={**os.environ, "TMPDIR": tmpdir}
    )
    async with Client(params) as client:
        server = _server_of(workdir)
        sampler = Sampler(server.pid, (workdir, tmpdir), floor_runs=floor_runs)
        mix = McpMix(client, "stdio")

        async def run() -> list[float]:
            return await soak([mix], count, every=every, sample=sampler.take)

        return await _timed("MCP stdio", run, sampler, warmup, server)


async def soak_mcp_http(
    count: int,
    *,
    clients: int,
    every: int,
    warmup: int,
    workdir: str,
    tmpdir: str,
    flags: Sequence[str] = (),
    floor_runs: int = 0,
) -> Soaked:
    """Soak one MCP server over streamable HTTP on 127.0.0.1 with `clients` clients at once.

    Each client makes `every` calls between samples (the server's process is
    sampled while no call is in flight); `count` calls in all. Each sample
    times `FLOOR` `floor_runs` times.
    """
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    token = os.urandom(16).hex()
    process = subprocess.Popen(
        mcp_server_command("--http", "--port", "0", "--workdir", workdir, *flags),
        env={**os.environ, "TMPDIR": tmpdir, "EXECUTOR_MCP_TOKEN": token},
        stdin=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stderr is not None
    try:
        said: list[str] = []
        with anyio.fail_after(120):
            while not any("serving on " in line for line in said):
                line = await anyio.to_thread.run_sync(process.stderr.readline)
                if not line:
                    raise RuntimeError(f"the MCP server ended: {''.join(said)}")
                said.append(line)
        url = said[-1].split("serving on ")[1].strip()
        sampler = Sampler(process.pid, (workdir, tmpdir), floor_runs=floor_runs)
        async with contextlib.AsyncExitStack() as stack:
            mixes: list[Call] = []
            for number in range(clients):
                http = await stack.enter_async_context(
                    httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=120)
                )
                client = await stack.enter_async_context(
                    Client(streamable_http_client(url, http_client=http))
                )
                mixes.append(McpMix(client, f"c{number}"))

            async def run() -> list[float]:
                return await soak(mixes, count, every=every, sample=sampler.take)

            soaked = await _timed(
                f"MCP HTTP x{clients}", run, sampler, warmup, psutil.Process(process.pid)
            )
            # The clients' calls at once read and write files in worker threads,
            # which idle ten seconds before they end: up to one a client more.
            soaked.bounds["threads"] += clients
            # A command a client gave up on may still be ending in the server
            # as the round ends (the cancel does not wait for it): one a
            # client, not one in all. What stays must not: the last sample is
            # held to `BOUNDS` (see `Soaked.over_bounds`).
            for metric, rise in CANCEL_LEFT.items():
                soaked.bounds[metric] += rise * (clients - 1)
    finally:
        process.terminate()
        code = await anyio.to_thread.run_sync(lambda: process.wait(60))
        process.stderr.close()
    if code != 0:
        raise RuntimeError(f"the MCP server exited with {code} on SIGTERM")
    return soaked


def container_processes(container: str) -> int:
    """Processes in a container besides its init and idle loop (`docker top`), by the CLI."""
    listing = subprocess.run(
        ["docker", "top", container, "-eo", "pid,args"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    rows = [line for line in listing.splitlines()[1:] if line.strip()]
    return len(rows)


def container_files(container: str, *folders: str) -> int:
    """Files and folders below `folders` in a container (`find | wc -l`), by the CLI."""
    script = f"find {' '.join(folders)} -mindepth 1 2>/dev/null | wc -l"
    counted = subprocess.run(
        ["docker", "exec", container, "sh", "-c", script],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    return int(counted.strip())
