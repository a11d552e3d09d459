"""Shared fixtures: both async backends, and a check that no test leaves a process behind."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

# The conformance suite lives in the package so other backends can run it;
# rewriting its asserts makes its failures say what differed.
pytest.register_assert_rewrite("executor.testing")

from ray_cluster import LOOPBACK_ENV, RayCluster  # noqa: E402
from ssh_server import SshServer, start_server  # noqa: E402

from executor import ExecutorError, LocalExecutor, Sandbox  # noqa: E402
from executor._core.proc import TREE_VARIABLE, proc_stat  # noqa: E402


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """Run every async test on asyncio and on trio."""
    return str(request.param)


def tagged_processes(owner: int | None = None) -> set[int]:
    """Pids of live (non-zombie) processes started by an executor of process `owner`.

    `owner` is this test process by default.
    """
    needle = f"{TREE_VARIABLE}={os.getpid() if owner is None else owner}:".encode()
    found = set()
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid() or not alive(int(name)):
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                environ = f.read()
        except OSError:
            continue
        if any(entry.startswith(needle) for entry in environ.split(b"\0")):
            found.add(int(name))
    return found


def alive(pid: int) -> bool:
    """Whether `pid` is a live process (a zombie counts as dead)."""
    stat = proc_stat(pid)
    return stat is not None and stat.state != "Z"


@pytest.fixture(scope="session")
def ssh_server() -> Iterator[SshServer]:
    """A private sshd on 127.0.0.1 for the whole run, stopped (by pid) at the end.

    Without /usr/sbin/sshd the tests that need it skip, or fail under
    `EXECUTOR_REQUIRE_SSH=1` (CI).
    """
    server = start_server()
    if server is None:
        if os.environ.get("EXECUTOR_REQUIRE_SSH") == "1":
            pytest.fail("EXECUTOR_REQUIRE_SSH=1, but /usr/sbin/sshd is not installed")
        pytest.skip("no /usr/sbin/sshd (install openssh-server to run the SSH tests)")
    yield server
    server.stop()


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[RayCluster]:
    """A Ray cluster on 127.0.0.1 for the whole run (`ray_cluster.py`), stopped at the end.

    Without Ray the tests that need it skip, or fail under
    `EXECUTOR_REQUIRE_RAY=1` (CI).
    """
    # This process, too, then speaks to the cluster on 127.0.0.1 only.
    os.environ.update(LOOPBACK_ENV)
    try:
        import ray  # noqa: F401
    except ImportError as error:
        if os.environ.get("EXECUTOR_REQUIRE_RAY") == "1":
            pytest.fail(f"EXECUTOR_REQUIRE_RAY=1, but Ray is not installed: {error}")
        pytest.skip("Ray is not installed (pip install -e '.[ray]')")
    cluster = RayCluster()
    yield cluster
    cluster.stop()


def require_sandbox(sandbox: Sandbox | None = None) -> Sandbox:
    """`sandbox` (by default any backend) once it can run on this machine.

    Skips without it; fails instead under EXECUTOR_REQUIRE_SANDBOX.
    """
    sandbox = Sandbox() if sandbox is None else sandbox
    try:
        sandbox.choose_backend()
    except ExecutorError as error:
        if os.environ.get("EXECUTOR_REQUIRE_SANDBOX", "") not in ("", "0"):
            pytest.fail(f"EXECUTOR_REQUIRE_SANDBOX is set, but: {error}")
        pytest.skip(str(error))
    return sandbox


@pytest.fixture
async def ex(tmp_path: Path) -> AsyncIterator[LocalExecutor]:
    """A LocalExecutor in an empty folder with a short kill grace."""
    async with LocalExecutor(tmp_path, kill_grace=0.2) as executor:
        yield executor


@pytest.fixture(autouse=True)
def _no_process_left_behind() -> Iterator[None]:
    """Fail a test that leaves a process it started running."""
    before = tagged_processes()
    yield
    left = tagged_processes() - before
    assert not left, f"processes left running: {sorted(left)}"
