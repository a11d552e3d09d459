"""The soak, small: the MCP server (stdio; HTTP with 16 clients) and each backend, a mix of calls.

The same mix as `benchmarks/bench_soak.py` (see `soak.py`): short and failing
commands, a timeout, a cancel, a file written and read back, a job started
and stopped, persistent-shell commands, each answer checked. After the
warm-up, between calls, the serving process's descriptors, threads and
descendant processes, the files in the folders the executor writes to and
the processes of ours anywhere on the host (a container's too) may not rise
past `soak.BOUNDS` (files not at all; threads and processes by two, for
idle worker threads and a supervisor's idle shims; descriptors by one
command's four, for one a client gave up on that is still ending), and
resident memory by no more than `RSS_BOUND_MIB`. Resources only: how long the
calls take is the benchmark's to report, never asserted here.

Each backend skips without its service, as its other tests do, and fails
instead under `EXECUTOR_REQUIRE_DOCKER`, `EXECUTOR_REQUIRE_SSH`,
`EXECUTOR_REQUIRE_RAY` or `EXECUTOR_REQUIRE_SANDBOX` (CI).
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import anyio
import attrs
import pytest
import soak
from conftest import interpreter_sandbox
from ssh_server import SshServer

from executor import (
    Command,
    DockerExecutor,
    ExecutorError,
    JobState,
    LocalExecutor,
    ToolExecutor,
)
from executor._shells.shell import ENDED_JOBS_KEPT

pytestmark = [pytest.mark.anyio, pytest.mark.slow, pytest.mark.timeout(900)]

RSS_BOUND_MIB = 64.0
"""Resident memory may rise this much after the warm-up: generous; a leak per call is not."""
BACKEND_CALLS = 496
"""Calls through each backend (31 cycles of the mix)."""
EVERY = 32


@pytest.fixture
def anyio_backend() -> str:
    """Asyncio only: SSH, Ray and the MCP client need it, and one soak of each is the point."""
    return "asyncio"


def check(soaked: soak.Soaked) -> None:
    """Every count within its bound after the warm-up, memory within `RSS_BOUND_MIB`."""
    calls = {len(soaked.durations)}
    assert calls == {soaked.samples[-1].calls}, (calls, soaked.samples[-1])
    over = soaked.over_bounds()
    assert not over, "\n".join(over)
    rss = soaked.flatness()["rss_mib"]
    assert rss.growth <= RSS_BOUND_MIB, soak.describe(soaked.flatness())


# --- the MCP server -------------------------------------------------------------------------


def _folders(tmp_path: Path) -> tuple[str, str]:
    workdir, tmpdir = tmp_path / "work", tmp_path / "tmp"
    workdir.mkdir()
    tmpdir.mkdir()
    return str(workdir), str(tmpdir)


async def test_mcp_stdio(tmp_path: Path) -> None:
    """1,504 calls through one server over stdio: its process holds no more at the end."""
    pytest.importorskip("mcp", reason="the MCP tests need tool-executor[mcp]")
    workdir, tmpdir = _folders(tmp_path)
    soaked = await soak.soak_mcp_stdio(1504, every=64, warmup=320, workdir=workdir, tmpdir=tmpdir)
    check(soaked)


async def test_mcp_http_with_16_clients(tmp_path: Path) -> None:
    """16 clients at once over streamable HTTP, 96 calls each: the server holds no more after."""
    pytest.importorskip("mcp", reason="the MCP tests need tool-executor[mcp]")
    workdir, tmpdir = _folders(tmp_path)
    soaked = await soak.soak_mcp_http(
        16 * 96, clients=16, every=16, warmup=16 * 32, workdir=workdir, tmpdir=tmpdir
    )
    assert soaked.bounds["threads"] == soak.BOUNDS["threads"] + 16  # a worker thread a client
    # A cancelled call still ending, a client; what stays is held to one client's bounds.
    assert soaked.bounds["fds"] == soak.BOUNDS["fds"] + 15 * soak.CANCEL_LEFT["fds"]
    check(soaked)


def test_a_rise_that_stays_is_over_bounds_widened_for_transients() -> None:
    """Widened bounds let a sample rise; the last sample is still held to `BOUNDS`."""

    def soaked(fds: list[int]) -> soak.Soaked:
        samples = [
            soak.Sample(
                calls=100 * n, rss_mib=80, fds=f, threads=2, children=6, files=0, ours=6, host=90
            )
            for n, f in enumerate(fds)
        ]
        made = soak.Soaked(
            "x",
            [0.001] * 100 * (len(fds) - 1),
            samples,
            100,
            1.0,
            1.0,
            None,
            ((0, 0, 0), (0, 0, 0)),
        )
        made.bounds["fds"] += 60
        return made

    assert soaked([20, 18, 18, 30, 18, 18]).over_bounds() == []
    [said] = soaked([20, 18, 18, 30, 18, 25]).over_bounds()
    assert said.startswith("fds ended +7 above its value after the warm-up (bound +4)")
    [said] = soaked([20, 18, 18, 90, 18, 18]).over_bounds()
    assert said.startswith("fds rose by +72 (bound +64)")
    # Idle worker threads may outlast the run: their widened bound holds to the end.
    made = soaked([20, 18, 18, 18, 18, 18])
    made.samples[-1] = attrs.evolve(made.samples[-1], threads=6)
    made.bounds["threads"] += 16
    assert made.over_bounds() == []


# --- what the soak found ---------------------------------------------------------------------


async def test_a_shell_forgets_old_ended_jobs_whose_output_was_read(tmp_path: Path) -> None:
    """Jobs started and stopped for hours: the shell keeps the newest 200 ended, not every one.

    (It held every job it ever started, with its session: about 13 KB each,
    the most of the soak's memory growth.) A job whose output is unread stays.
    """
    async with LocalExecutor(tmp_path) as ex, ex.shell() as sh:
        unread = await sh.start_job("echo kept")
        await unread.wait(60)
        for _ in range(ENDED_JOBS_KEPT + 50):
            job = await sh.start_job("sleep 60")
            await job.kill()
        ids = [status.id for status in sh.jobs()]
        # The one unread, the newest ENDED_JOBS_KEPT read ones, and the last one started.
        assert ids == [unread.id, *map(str, range(51, ENDED_JOBS_KEPT + 52))]
        assert (await sh.job(unread.id).read()).stdout == b"kept\n"
        with pytest.raises(ExecutorError, match="job 2 ended and was forgotten"):
            sh.job("2")
        with pytest.raises(ExecutorError, match="no job '999'"):
            sh.job("999")


async def test_a_session_keeps_what_a_streamed_call_keeps(tmp_path: Path) -> None:
    """A session's reader sees every chunk, so `finalize()` keeps `stream_output_limit` of it.

    (It kept `output_limit`, 32 MiB by default: a persistent shell, one
    session for hours, grew by every byte it printed until then.)
    """
    seen = 0
    async with (
        LocalExecutor(tmp_path, output_limit=1 << 20, stream_output_limit=1000) as ex,
        await ex.start(Command.shell("yes abc | head -c 50000")) as session,
    ):
        while (item := await session.next_chunk()) is not None:
            seen += len(item.chunk.data)
        output = await session.finalize()
    assert seen == 50_000
    assert output.truncated
    assert len(output.stdout) <= 1000
    assert output.elided is not None
    assert output.elided.bytes == 50_000 - len(output.stdout)


@pytest.mark.parametrize("made", ["ssh", "docker-exec", "docker-helper"], indirect=True)
async def test_a_job_killed_at_once_ends_where_kills_go_by_tag(made: Made) -> None:
    """A shell's job killed as soon as it starts ends at once, over SSH and in a container.

    (Its start exported the shell's variables, the shell's tree tag among
    them: over SSH the kill, which finds a remote tree by its tag, found
    nothing, and `kill()` waited for the job to end by itself. In a
    container the kill could run before the engine had started the job's
    exec, find no tree and leave the job running: it now waits for the
    exec's pid line. Many rounds, as that came once in a few.)
    """
    executor, _ = made
    async with executor, executor.shell() as sh:
        for _ in range(40):
            job = await sh.start_job("sleep 300")
            with anyio.fail_after(30):
                status = await job.kill()
            assert status.state is JobState.KILLED
        # The shell's own tree is another: its state and its commands carry on.
        assert (await sh.run("echo still")).stdout == b"still\n"


# --- each backend ---------------------------------------------------------------------------


Made = tuple[ToolExecutor, dict[str, Any]]


def _sandboxed(backend: str, workdir: Path) -> LocalExecutor:
    return LocalExecutor(workdir, sandbox=interpreter_sandbox(backend))


def _in_container(container: str, *, helper: bool) -> Made:
    folder = f"/workspace/{uuid.uuid4().hex}"
    counting = {
        "remote_files": lambda: soak.container_files(container, folder, "/tmp"),
        "remote_processes": lambda: soak.container_processes(container),
    }
    return DockerExecutor(container=container, workdir=folder, helper=helper), counting


@pytest.fixture
def made(request: pytest.FixtureRequest, tmp_path: Path) -> Made:
    """The executor of the backend named by the parameter, and what to count besides this process.

    A plain fixture, so the services' fixtures (which probe the engine with
    an event loop of their own) are set up outside the test's event loop.
    Skips without the service.
    """
    backend: str = request.param
    if backend == "local":
        return LocalExecutor(tmp_path), {"folders": [tmp_path]}
    if backend in ("bubblewrap", "landlock"):
        return _sandboxed(backend, tmp_path), {"folders": [tmp_path]}
    if backend == "docker-helper":
        return _in_container(request.getfixturevalue("python_container"), helper=True)
    if backend == "docker-exec":
        return _in_container(request.getfixturevalue("busybox_container"), helper=False)
    if backend == "ssh":
        server: SshServer = request.getfixturevalue("ssh_server")
        folder = server.workdir()
        # The remote host is this one: the folder is seen here, and the
        # remote processes are the children of the run's sshd (ours).
        return server.executor(workdir=folder), {"folders": [folder]}
    assert backend == "ray"
    request.getfixturevalue("ray_driver")
    from executor import RayExecutor

    executor = RayExecutor(workdir=str(tmp_path), resources={"second": 0.01})
    return executor, {"folders": [tmp_path]}


BACKENDS = ["local", "bubblewrap", "landlock", "docker-helper", "docker-exec", "ssh", "ray"]


@pytest.mark.parametrize("made", BACKENDS, indirect=True)
async def test_backend(made: Made) -> None:
    """496 calls of the mix straight through one executor: nothing of them stays behind."""
    executor, counting = made
    async with executor:
        soaked = await soak.soak_executor(
            type(executor).__name__, executor, BACKEND_CALLS, every=EVERY, warmup=96, **counting
        )
    check(soaked)
