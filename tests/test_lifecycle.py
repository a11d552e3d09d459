"""The lifecycle and output contracts on every backend: local, sandboxes, Docker both ways, SSH.

Each backend's class supplies `executor_factory` only (see
`executor.testing.LifecycleContract`). The Docker and SSH classes need their
services: without them they skip, and with `EXECUTOR_REQUIRE_DOCKER=1` or
`EXECUTOR_REQUIRE_SSH=1` (CI) they fail.
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from conftest import require_sandbox
from docker_engine import (
    BUSYBOX_IMAGE,
    PYTHON_IMAGE,
    labelled_container,
    require_engine,
)
from ssh_server import SshServer

from executor import (
    DockerExecutor,
    LocalExecutor,
    Sandbox,
    ToolExecutor,
)
from executor.testing import ExecutorFactory, LifecycleContract, OutputContract

pytestmark = pytest.mark.anyio


class TestLocalLifecycle(LifecycleContract, OutputContract):
    """A bare LocalExecutor."""

    @pytest.fixture
    def executor_factory(self, tmp_path: Path) -> ExecutorFactory:
        """LocalExecutors in one empty folder."""
        return partial(LocalExecutor, tmp_path)


def _sandboxed(backend: str, workdir: Path) -> ExecutorFactory:
    # The interpreter may live under the home folder (pyenv), which a sandbox hides.
    readable = (sys.prefix, sys.base_prefix, os.path.dirname(os.path.realpath(sys.executable)))
    sandbox = Sandbox(backend=backend, readable=tuple(dict.fromkeys(readable)))  # type: ignore[arg-type]
    return partial(LocalExecutor, workdir, sandbox=require_sandbox(sandbox))


class TestBubblewrapLifecycle(LifecycleContract, OutputContract):
    """A LocalExecutor sandboxed by bubblewrap."""

    @pytest.fixture
    def executor_factory(self, tmp_path: Path) -> ExecutorFactory:
        """Sandboxed LocalExecutors in one empty folder."""
        return _sandboxed("bubblewrap", tmp_path)


class TestLandlockLifecycle(LifecycleContract, OutputContract):
    """A LocalExecutor sandboxed by Landlock."""

    @pytest.fixture
    def executor_factory(self, tmp_path: Path) -> ExecutorFactory:
        """Sandboxed LocalExecutors in one empty folder."""
        return _sandboxed("landlock", tmp_path)


@pytest.fixture(scope="module")
def python_container() -> Iterator[str]:
    """One container of the Python image (so the in-container helper runs), labelled as ours."""
    with labelled_container(PYTHON_IMAGE) as container:
        yield container


class TestDockerHelperLifecycle(LifecycleContract, OutputContract):
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


class TestSshLifecycle(LifecycleContract, OutputContract):
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
