"""The lifecycle, output and run contracts on every backend: local, sandboxes, Docker, SSH, Ray.

Each backend's class supplies `executor_factory` only (see
`executor.testing.LifecycleContract`), and where it must, how it sees which
processes of a command's tree still run (`tree_witness`, see
`executor.testing.RunContract`). The Docker, SSH and Ray classes need their
services: without them they skip, and with `EXECUTOR_REQUIRE_DOCKER=1`,
`EXECUTOR_REQUIRE_SSH=1` or `EXECUTOR_REQUIRE_RAY=1` (CI) they fail.
"""

from __future__ import annotations

import os
import uuid
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from conftest import alive, interpreter_sandbox
from docker_engine import (
    BUSYBOX_IMAGE,
    require_engine,
)
from ray_cluster import RayCluster
from ssh_server import SshServer

from executor import (
    DockerExecutor,
    LocalExecutor,
    ToolExecutor,
)
from executor.testing import (
    ExecutorFactory,
    LifecycleContract,
    OutputContract,
    RunContract,
    TreeWitness,
)

pytestmark = pytest.mark.anyio


class TestLocalLifecycle(LifecycleContract, OutputContract, RunContract):
    """A bare LocalExecutor."""

    @pytest.fixture
    def executor_factory(self, tmp_path: Path) -> ExecutorFactory:
        """LocalExecutors in one empty folder."""
        return partial(LocalExecutor, tmp_path)


def _sandboxed(backend: str, workdir: Path) -> ExecutorFactory:
    return partial(LocalExecutor, workdir, sandbox=interpreter_sandbox(backend))


async def _marked_on_this_machine(pids: list[int], mark: str) -> list[str]:
    """The live processes of this machine whose environment holds `mark` (see `TreeWitness`).

    Seen from outside every PID namespace, where the pids a tree wrote are
    its own namespace's.
    """
    needle = mark.encode()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or not alive(int(name)):
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:  # noqa: ASYNC230 (/proc: no wait)
                environ = f.read()
        except OSError:
            continue
        if needle in environ.split(b"\0"):
            found.append(name)
    return found


class TestBubblewrapLifecycle(LifecycleContract, OutputContract, RunContract):
    """A LocalExecutor sandboxed by bubblewrap."""

    @pytest.fixture
    def executor_factory(self, tmp_path: Path) -> ExecutorFactory:
        """Sandboxed LocalExecutors in one empty folder."""
        return _sandboxed("bubblewrap", tmp_path)

    @pytest.fixture
    def tree_witness(self) -> TreeWitness:
        """This machine's processes: each command has a PID namespace of its own."""
        return _marked_on_this_machine


class TestLandlockLifecycle(LifecycleContract, OutputContract, RunContract):
    """A LocalExecutor sandboxed by Landlock."""

    @pytest.fixture
    def executor_factory(self, tmp_path: Path) -> ExecutorFactory:
        """Sandboxed LocalExecutors in one empty folder."""
        return _sandboxed("landlock", tmp_path)


class TestDockerHelperLifecycle(LifecycleContract, OutputContract, RunContract):
    """A DockerExecutor whose commands run through its in-container helper."""

    @pytest.fixture
    def executor_factory(self, python_container: str) -> ExecutorFactory:
        """DockerExecutors on the shared container, in one new folder."""
        workdir = f"/workspace/{uuid.uuid4().hex}"
        return partial(DockerExecutor, container=python_container, workdir=workdir)


class TestDockerExecLifecycle(LifecycleContract, OutputContract):
    """A DockerExecutor whose commands are engine execs (busybox: no helper)."""

    @pytest.fixture
    def executor_factory(self) -> ExecutorFactory:
        """DockerExecutors, each on a fresh busybox container of its own."""
        require_engine()
        return partial(DockerExecutor, BUSYBOX_IMAGE)


class TestDockerExecRun(RunContract):
    """Engine execs again, on one container that every executor of a test shares.

    (A fresh executor must see the same processes and files: the witness of
    a tree and the reader of a blocked writer's progress.)
    """

    @pytest.fixture
    def executor_factory(self, busybox_container: str) -> ExecutorFactory:
        """DockerExecutors without the helper on the shared container, in one new folder."""
        workdir = f"/workspace/{uuid.uuid4().hex}"
        return partial(DockerExecutor, container=busybox_container, workdir=workdir, helper=False)


class TestSshLifecycle(LifecycleContract, OutputContract, RunContract):
    """An SshExecutor against a real sshd."""

    @pytest.fixture
    def anyio_backend(self) -> str:
        """Only asyncio: asyncssh has no trio support."""
        return "asyncio"

    @pytest.fixture
    def executor_factory(self, ssh_server: SshServer) -> ExecutorFactory:
        """SshExecutors in one new remote folder."""
        workdir = ssh_server.workdir()

        def make(**options: Any) -> ToolExecutor:
            return ssh_server.executor(workdir=workdir, **options)

        return make


class TestRayRun(RunContract):
    """A RayExecutor on the cluster's second node (its lifecycle contract is in test_ray.py)."""

    # Run by test_ray.py's TestRayLifecycle, on the same node, in the same way.
    test_kill_grace_is_wall_time = None  # type: ignore[assignment]

    @pytest.fixture
    def anyio_backend(self) -> str:
        """Only asyncio: Ray's object references are asyncio futures."""
        return "asyncio"

    @pytest.fixture
    def executor_factory(self, ray_driver: RayCluster, tmp_path: Path) -> ExecutorFactory:
        """RayExecutors on the second node, in one empty folder."""
        from executor import RayExecutor

        return partial(RayExecutor, workdir=str(tmp_path), resources={"second": 0.01})
