"""An out-of-memory kill is a failure of its own: `OutOfMemory`, `OUT_OF_MEMORY`, words that say so.

On every backend that enforces `memory=`: an unsandboxed `LocalExecutor`
(its command's cgroup counts the OOM kills) and `DockerExecutor` (the
container's cgroup, through the helper and through an engine exec). A
command that allocates past the limit raises `OutOfMemory` and the model
reads `out of memory`; one killed by a plain `kill -9` under the same
limit does not. A sandbox enforces no `memory=` (it refuses it), so its
commands that run out of address space fail as any others do.

The Local tests need a cgroup with the memory controller (skipped without
one, failed instead under `EXECUTOR_REQUIRE_CGROUPS=1`); the Docker ones an
engine and the test images (see `docker_engine`).
"""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from conftest import require_sandbox
from docker_engine import PYTHON_IMAGE, require_engine

from executor import (
    Command,
    DockerExecutor,
    ExecutorError,
    LocalExecutor,
    NonZeroExit,
    OutOfMemory,
    Sandbox,
    ToolExecutor,
    ToolOutput,
    ToolOutputKind,
    Toolset,
    for_model,
)
from executor._docker.run import reported_exit
from executor._local import cgroup

pytestmark = pytest.mark.anyio

LIMIT = 256 << 20
# Touches every page of 1 GB (bytearray zeroes what it allocates): far past the limit.
HOG = f"{sys.executable} -c 'bytearray(10**9)'"
# The same with the `python3` on PATH: a sandbox's or a container's.
SYSTEM_HOG = "python3 -c 'bytearray(10**9)'"


def require_memory_cgroup() -> None:
    """Skip unless unsandboxed commands get a cgroup that enforces memory=."""
    support = cgroup.probe()
    if "memory" in support.limits:
        return
    reason = f"no cgroup with memory here: {support.describe()}"
    if os.environ.get("EXECUTOR_REQUIRE_CGROUPS") == "1":
        pytest.fail(reason)
    pytest.skip(reason)


async def run_tool(ex: ToolExecutor, command: str) -> ToolOutput:
    """The toolset's `run` tool, as a model calls it."""
    async with Toolset(timeout=60) as toolset:
        return await toolset.call(toolset.context(ex), "run", {"command": command})


def says_memory(text: str) -> bool:
    return "out of memory" in text


# --- LocalExecutor ----------------------------------------------------------------------


@pytest.fixture
async def local(tmp_path: Path) -> AsyncIterator[LocalExecutor]:
    require_memory_cgroup()
    async with LocalExecutor(tmp_path, memory=LIMIT, kill_grace=0.2) as ex:
        yield ex


async def test_local_a_hog_is_out_of_memory(local: LocalExecutor) -> None:
    """Past memory=, the OOM killer's kill raises `OutOfMemory`, saying the limit and the peak."""
    with anyio.fail_after(60), pytest.raises(OutOfMemory) as caught:
        await local.exec_cmd(Command.shell(HOG))
    error = caught.value
    assert isinstance(error, NonZeroExit)  # old `except NonZeroExit` still catches it
    output = error.output
    assert output.oom_killed
    assert output.exit_code == 137
    assert output.memory_peak is not None
    assert output.memory_peak > LIMIT * 0.9
    assert says_memory(error.message)
    assert "the limit is 256 MiB" in error.message
    assert "peak" in error.message
    assert says_memory(for_model(output))


async def test_local_a_kill_9_under_the_limit_is_no_memory_failure(local: LocalExecutor) -> None:
    """`kill -9 $$` dies of SIGKILL too, but nothing ran out of memory: plain `NonZeroExit`.

    After a hog in the same executor, so a cgroup that serves its next command
    (cgroup v1) counts from that command's start, not the executor's.
    """
    with anyio.fail_after(60), pytest.raises(OutOfMemory):
        await local.exec_cmd(Command.shell(HOG))
    with anyio.fail_after(30), pytest.raises(NonZeroExit) as caught:
        await local.exec_cmd(Command.shell("kill -9 $$"))
    error = caught.value
    assert not isinstance(error, OutOfMemory)
    assert (error.output.signal, error.output.oom_killed) == (9, False)
    assert not says_memory(str(error))
    assert not says_memory(for_model(error.output))
    fine = await local.exec_cmd(Command.shell("echo fits"))
    assert (fine.stdout, fine.oom_killed) == (b"fits\n", False)


async def test_local_a_child_killed_in_a_command_that_goes_on(local: LocalExecutor) -> None:
    """A process of the tree OOM-killed, the command exiting otherwise: the output says so."""
    with anyio.fail_after(60):
        survived = await local.exec_cmd(Command.shell(f"{HOG}; echo went on"))
        with pytest.raises(OutOfMemory) as caught:
            await local.exec_cmd(Command.shell(f"{HOG}; exit 3"))
    assert survived.stdout == b"went on\n"
    assert survived.oom_killed
    assert "out of memory" in for_model(survived)
    assert caught.value.output.exit_code == 3
    assert "exited with code 3" in caught.value.message
    assert says_memory(caught.value.message)


async def test_local_run_tool_says_out_of_memory(local: LocalExecutor) -> None:
    """The toolset's `run` gives the OUT_OF_MEMORY kind, its text saying memory; a kill -9 not."""
    with anyio.fail_after(60):
        hog = await run_tool(local, HOG)
        killed = await run_tool(local, "kill -9 $$")
    assert hog.kind is ToolOutputKind.OUT_OF_MEMORY
    assert hog.is_error
    assert hog.exit_code == 137
    assert says_memory(hog.text)
    assert "256 MiB" in hog.text
    assert killed.kind is ToolOutputKind.FAILED
    assert not says_memory(killed.text)


# --- the sandbox -----------------------------------------------------------------------


def test_a_sandbox_enforces_no_memory_limit() -> None:
    """`Sandbox(memory=)` is refused, not taken and left unenforced: no OOM kind to give there."""
    with pytest.raises(ExecutorError, match="memory="):
        Sandbox(memory=LIMIT).choose_backend()


async def test_a_sandboxed_command_out_of_address_space_is_a_plain_failure(tmp_path: Path) -> None:
    """Under `address_space=` an allocation fails in the process (MemoryError): no OOM kill."""
    sandbox = require_sandbox(Sandbox(address_space=LIMIT))
    async with LocalExecutor(tmp_path, sandbox=sandbox) as ex:
        with anyio.fail_after(60):
            out = await run_tool(ex, SYSTEM_HOG)
        with anyio.fail_after(60), pytest.raises(NonZeroExit) as caught:
            await ex.exec_cmd(Command.shell(SYSTEM_HOG))
    assert out.kind is ToolOutputKind.FAILED
    assert "MemoryError" in out.text
    assert not says_memory(out.text)
    assert not isinstance(caught.value, OutOfMemory)
    assert not caught.value.output.oom_killed


# --- DockerExecutor ----------------------------------------------------------------------


@pytest.fixture
def engine() -> None:
    """The engine and the images, checked outside the test's event loop (skip without)."""
    require_engine()


@pytest.fixture(params=[True, False], ids=["helper", "exec"])
async def docker(request: pytest.FixtureRequest, engine: None) -> AsyncIterator[DockerExecutor]:
    """A container with memory=256m, its commands run by the helper or as engine execs."""
    async with DockerExecutor(
        PYTHON_IMAGE, memory="256m", helper=request.param, kill_grace=0.2
    ) as ex:
        yield ex


async def test_docker_a_hog_is_out_of_memory(docker: DockerExecutor) -> None:
    """The container's cgroup counted the kill while the command ran: `OutOfMemory`."""
    with anyio.fail_after(60), pytest.raises(OutOfMemory) as caught:
        await docker.exec_cmd(Command.shell(SYSTEM_HOG))
    output = caught.value.output
    assert output.oom_killed
    assert output.exit_code == 137
    assert says_memory(caught.value.message)
    assert "the limit is 256 MiB" in caught.value.message
    assert says_memory(for_model(output))
    state = await docker.state()
    assert state.oom_killed


async def test_docker_a_kill_9_is_no_memory_failure(docker: DockerExecutor) -> None:
    """After a hog, `kill -9 $$` and a failing command are plain failures; a small one fits."""
    with anyio.fail_after(60), pytest.raises(OutOfMemory):
        await docker.exec_cmd(Command.shell(SYSTEM_HOG))
    with anyio.fail_after(30), pytest.raises(NonZeroExit) as caught:
        await docker.exec_cmd(Command.shell("kill -9 $$"))
    assert not isinstance(caught.value, OutOfMemory)
    assert not caught.value.output.oom_killed
    assert not says_memory(str(caught.value))
    fine = await docker.exec_cmd(Command.shell("echo fits"))
    assert (fine.stdout, fine.oom_killed) == (b"fits\n", False)


async def test_docker_run_tool_says_out_of_memory(docker: DockerExecutor) -> None:
    """The toolset's `run` in a container: OUT_OF_MEMORY for the hog, FAILED for a kill -9."""
    with anyio.fail_after(90):
        hog = await run_tool(docker, SYSTEM_HOG)
        killed = await run_tool(docker, "kill -9 $$")
    assert hog.kind is ToolOutputKind.OUT_OF_MEMORY
    assert says_memory(hog.text)
    assert killed.kind is ToolOutputKind.FAILED
    assert not says_memory(killed.text)


@pytest.mark.parametrize(
    ("report", "expected"),
    [
        (b"137 9 oom", (137, 9, True)),
        (b"137 oom", (137, None, True)),
        (b"137 9", (137, 9, False)),
        (b"1 oom", (1, None, False)),
        (b"143 15 oom", (143, 15, False)),
        (b"0", (0, None, False)),
    ],
)
def test_a_containers_count_is_taken_only_for_a_sigkill(
    report: bytes, expected: tuple[Any, ...]
) -> None:
    """The container's count is shared: a command that failed otherwise meanwhile is no OOM."""
    exit = reported_exit(report)
    assert (exit.code, exit.signal, exit.oom_killed) == expected
