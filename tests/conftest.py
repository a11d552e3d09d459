"""Shared fixtures: both async backends, and a check that no test leaves a process behind."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

# The conformance suite lives in the package so other backends can run it;
# rewriting its asserts makes its failures say what differed.
pytest.register_assert_rewrite("executor.testing")

from docker_engine import BUSYBOX_IMAGE, PYTHON_IMAGE, labelled_container  # noqa: E402
from ray_cluster import LOOPBACK_ENV, RayCluster  # noqa: E402
from ssh_server import SSHD, SshServer, login_user, start_server  # noqa: E402

from executor import ExecutorError, LocalExecutor, Sandbox  # noqa: E402
from executor._core.proc import TREE_VARIABLE, proc_stat  # noqa: E402

# A pytest-xdist worker starts with COLUMNS=80 and LINES=24 of execnet's own,
# which every command would inherit and `tput` would read before its
# terminal's real size: they are not the user's, so they go.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.pop("COLUMNS", None)
    os.environ.pop("LINES", None)

# Modules whose tests share one costly thing of their own (a module-scoped
# fixture): under pytest-xdist they run in one worker, so it starts once.
_ONE_WORKER_MODULES = {
    "test_docker_faults.py": "a private dockerd",
    "test_mcp_conformance.py": "one run of the conformance suite per protocol era",
    "test_docs_site.py": "one build of the manual and one browser",
}

# Modules that must not run beside each other in two workers, by the group
# they share: `docker gc` in one removes the containers another's killed
# child left on purpose, before it has looked inside them.
_SHARED_WORKER_MODULES = {
    "test_docker.py": "docker-gc",
    "test_docker_owner_killed.py": "docker-gc",
}


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist, make the SSH tests' login user before any worker starts.

    Made later, by the first worker's sshd, it would rewrite /etc/passwd while
    another worker's confinement tests watch that file for changes.
    """
    if hasattr(config, "workerinput"):
        return
    distributed = config.getoption("dist", "no") != "no" and config.getoption("tx", None)
    if distributed and os.path.exists(SSHD) and shutil.which("ssh-keygen"):
        login_user()


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`-n auto`: two workers a core.

    Most of the suite's time is waiting, not computing: for a command's
    timeout or idle window, a kill's grace, a sleep in the command under
    test, a service's answer. Measured on two cores, the whole suite spent
    under half its worker time on a core, so a worker a core leaves them
    idle half the time.
    """
    return 2 * len(os.sched_getaffinity(0))


# Modules that are `slow` as a whole (the marker's rule, in pyproject.toml):
# each needs a service or an interpreter of its own, or runs a corpus of
# commands each of which takes seconds. `-m "not slow"` leaves them out.
_SLOW_MODULES = {
    # A Docker engine, and containers or images of its own.
    "test_docker.py": "Docker",
    "test_docker_build.py": "Docker image builds",
    "test_docker_faults.py": "a private dockerd",
    "test_docker_full_disk.py": "Docker",
    "test_docker_owner_killed.py": "Docker",
    # The SSH server and the Ray cluster (their other tests: the fixture rule below).
    "test_ssh.py": "sshd",
    "test_ray.py": "Ray",
    "test_ray_faults.py": "Ray clusters of its own",
    # Every backend in turn.
    "test_lifecycle.py": "every backend",
    "test_shells.py": "persistent shells on every backend",
    "test_shell_stuck_child.py": "every backend",
    "test_agent_env.py": "every backend, pagers and editors",
    # A server, a kernel or a terminal in a process of its own per test.
    "test_mcp.py": "the MCP server",
    "test_mcp_approval.py": "the MCP server",
    "test_mcp_features.py": "the MCP server",
    "test_mcp_schemas.py": "the MCP server",
    "test_mcp_conformance.py": "the MCP conformance suite",
    "test_hostile_mcp.py": "the MCP server",
    "test_code_interpreter.py": "kernels",
    "test_terminal_tool.py": "terminals",
    "test_toolset.py": "the toolset's shells and terminals",
    "test_native_tools.py": "the toolset on every backend",
    "test_adapters.py": "the agent frameworks",
    "test_agent_events.py": "the agent frameworks",
    "test_log_tailer.py": "follow latencies and logrotate",
    "test_shell_swerex.py": "SWE-ReX",
    "test_shell_corpus.py": "a corpus of shell sessions",
    # The examples of the README, the manual and snippets/, on every backend.
    "test_docs.py": "the examples of the README and the manual",
    "test_snippets.py": "snippets/",
    # Corpora: each entry a command, a path or a script, under every resolver,
    # sandbox or backend.
    "test_hostile_commands.py": "a corpus of commands",
    "test_confinement.py": "a corpus of paths",
    "test_hostile_toolset.py": "hostile arguments to every tool",
    "test_hostile_output.py": "floods of output",
    "test_files_stream.py": "trees read and stopped early",
    # Static checks of the package as a whole (imports, cycles, public names).
    "test_architecture.py": "the package's import graph",
    # Sandboxes attacked, memory and disks filled, processes killed, soaks.
    "test_sandbox_escape.py": "a corpus of escapes under each sandbox",
    "test_hostile_local.py": "hostile commands against the host",
    "test_oom.py": "memory filled",
    "test_full_disk.py": "disks filled",
    "test_crash_recovery.py": "executors killed mid-run",
    "test_executor_killed.py": "executors killed mid-run",
    "test_session_acceptance.py": "long sessions",
    "test_soak.py": "a soak",
    "test_docs_site.py": "the manual built and shown in a browser",
}

# Fixtures that start a service: a test that uses one is `slow` wherever it is.
_SLOW_FIXTURES = ("ssh_server", "ray_cluster")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark the slow tests, and keep the tests that share a costly start in one worker.

    `slow`: every test of `_SLOW_MODULES`, and every test on the SSH server
    or the Ray cluster (besides those marked one by one).

    pytest-xdist: every test on the Ray cluster runs in one worker (one
    cluster for the run, not one per worker: each is a head and a second
    node), and so does each module of `_ONE_WORKER_MODULES`, and each group
    of `_SHARED_WORKER_MODULES`. It takes effect
    with `--dist loadgroup` (pyproject.toml's addopts); without `-n` it
    changes nothing.
    """
    for item in items:
        module = item.path.name
        fixtures = getattr(item, "fixturenames", ())
        if module in _SLOW_MODULES or any(name in fixtures for name in _SLOW_FIXTURES):
            item.add_marker(pytest.mark.slow)
        if "ray_cluster" in fixtures:
            item.add_marker(pytest.mark.xdist_group("ray"))
        elif module in _ONE_WORKER_MODULES:
            item.add_marker(pytest.mark.xdist_group(module))
        elif module in _SHARED_WORKER_MODULES:
            item.add_marker(pytest.mark.xdist_group(_SHARED_WORKER_MODULES[module]))


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
        pytest.skip(
            "no /usr/sbin/sshd: install it with `bash .ci/services/sshd.sh` (the tests start"
            " a private sshd of their own)"
        )
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
        pytest.skip(
            "Ray is not installed: pip install -e '.[test]' (the tests start their own cluster)"
        )
    cluster = RayCluster()
    yield cluster
    cluster.stop()


@pytest.fixture(scope="module")
def ray_driver(ray_cluster: RayCluster) -> Iterator[RayCluster]:
    """The run's Ray cluster, with this process connected to it as a driver (for a module)."""
    import ray

    ray.init(address=ray_cluster.address, log_to_driver=False, ignore_reinit_error=True)
    try:
        yield ray_cluster
    finally:
        ray.shutdown()


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


def interpreter_sandbox(backend: str) -> Sandbox:
    """A sandbox of `backend` that can run this Python; `require_sandbox`'s skip without one."""
    # The interpreter may live under the home folder (pyenv), which a sandbox hides.
    readable = (sys.prefix, sys.base_prefix, os.path.dirname(os.path.realpath(sys.executable)))
    sandbox = Sandbox(backend=backend, readable=tuple(dict.fromkeys(readable)))  # type: ignore[arg-type]
    return require_sandbox(sandbox)


@pytest.fixture(scope="module")
def python_container() -> Iterator[str]:
    """One container of the Python image (its helper runs there), labelled as ours."""
    with labelled_container(PYTHON_IMAGE) as container:
        yield container


@pytest.fixture(scope="module")
def busybox_container() -> Iterator[str]:
    """One busybox container (no Python, no bash: sessions are engine execs), labelled as ours."""
    with labelled_container(BUSYBOX_IMAGE) as container:
        yield container


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
