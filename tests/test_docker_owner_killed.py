"""DockerExecutor when its own process is SIGKILLed mid-command: nothing of ours runs on.

A child Python process starts a `DockerExecutor`, runs a command that
leaves a background process beside its own (or a persistent shell with a
job and a command), and is SIGKILLed without any cleanup. Within seconds
the container holds nothing but its keep-alive: through the helper (whose
input ends with the executor's connection) and as engine execs (the guard
exec, whose input ends likewise, kills the executor's trees). The container
itself stays, labelled with its dead owner, until `docker gc` removes it.
Without an engine the tests skip, and fail under EXECUTOR_REQUIRE_DOCKER=1.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator

import anyio
import pytest
from docker_engine import BUSYBOX_IMAGE, PYTHON_IMAGE, docker, labelled_container, require_engine

from executor import Command, DockerExecutor
from executor._docker.container import LABEL_OWNER

# How long the tree may take to end once the executor is gone: its kill's
# grace (1 s) and the engine's noticing, with room for a loaded machine.
_GONE_WITHIN = 15.0
# How long the child may take to start its container and commands.
_START_WAIT = 90.0
# What the guard's command line says (see `_GUARD` in executor._docker.executor).
_GUARD = "the guard of an executor's trees"

# The child: starts the executor, says which container it made, runs the
# commands (each process marked by MARK in its environment) and waits to be killed.
_CHILD = textwrap.dedent(
    """
    import json, sys
    import anyio
    from executor import Command, DockerExecutor

    async def main() -> None:
        image, helper, how, mark = sys.argv[1], sys.argv[2] == "helper", sys.argv[3], sys.argv[4]
        ex = DockerExecutor(image, helper=helper)
        await ex.__aenter__()
        print(json.dumps({"container": ex.container_id}), flush=True)
        env = {"EXECUTOR_TEST_MARK": mark}
        if how == "command":
            await ex.exec_cmd(Command.shell("sleep 300 & sleep 300").with_env(env))
        else:
            async with ex.shell(env=env) as sh:
                await sh.start_job("sleep 301 & sleep 301")
                await sh.run("sleep 300 & sleep 300", timeout=600)
        await anyio.sleep(600)

    anyio.run(main)
    """
)


def _marked(container: str, mark: str) -> list[str]:
    """The pids, in the container, of the processes whose environment holds the mark."""
    found = docker(
        "exec",
        container,
        "sh",
        "-c",
        'grep -lz -e "^EXECUTOR_TEST_MARK=$1\\$" /proc/[0-9]*/environ 2>/dev/null; true',
        "sh",
        mark,
        check=False,
    )
    return [line.split("/")[2] for line in found.split()]


def _processes(container: str) -> list[str]:
    """The command lines of every process of the container (`docker top`), the engine's view."""
    listing = docker("top", container, "-eo", "pid,ppid,args", check=False)
    return [line.strip() for line in listing.splitlines()[1:] if line.strip()]


def _beyond_keepalive(container: str) -> list[str]:
    """What runs in the container besides its init and its keep-alive (and its `sleep`)."""
    rows = _processes(container)
    pids = {row.split()[0]: row for row in rows}
    kept = set()
    for pid, row in pids.items():
        args = row.split(None, 2)[2]
        if "docker-init" in args or args.startswith("/bin/sh -c trap 'exit 0' TERM"):
            kept.add(pid)
    for pid, row in pids.items():
        if row.split()[1] in kept and row.split(None, 2)[2] == "sleep 3600":
            kept.add(pid)
    return [row for pid, row in pids.items() if pid not in kept]


@pytest.fixture
def child_run() -> Iterator[list[subprocess.Popen[str]]]:
    """The children started, killed and reaped after the test whatever happened."""
    require_engine()
    children: list[subprocess.Popen[str]] = []
    yield children
    for child in children:
        if child.poll() is None:
            child.kill()
        child.wait()
        if child.stdout is not None:
            child.stdout.close()


# It runs `docker gc`, which sees every test process's containers: in one
# pytest-xdist worker with the other tests that run or count it (test_docker.py).
@pytest.mark.xdist_group("docker-gc")
@pytest.mark.parametrize("how", ["command", "shell"])
@pytest.mark.parametrize("mode", ["exec", "helper"])
def test_executor_killed_leaves_nothing_running(
    child_run: list[subprocess.Popen[str]], mode: str, how: str
) -> None:
    image = PYTHON_IMAGE if mode == "helper" else BUSYBOX_IMAGE
    mark = uuid.uuid4().hex
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, image, mode, how, mark],
        stdout=subprocess.PIPE,
        text=True,
    )
    child_run.append(child)
    assert child.stdout is not None
    line = child.stdout.readline()
    assert line, f"the child ended before its container started (exit {child.wait()})"
    container = json.loads(line)["container"]
    try:
        # Both sleeps of the command (its `sh` may exec the last); the shell,
        # and both sleeps of its command and of its job.
        wanted = 2 if how == "command" else 5
        deadline = time.monotonic() + _START_WAIT
        while len(found := _marked(container, mark)) < wanted:
            assert child.poll() is None, f"the child ended (exit {child.returncode})"
            assert time.monotonic() < deadline, (found, _processes(container))
            time.sleep(0.2)
        labels = json.loads(docker("inspect", "--format", "{{json .Config.Labels}}", container))
        assert labels[LABEL_OWNER].split(":")[1] == str(child.pid)

        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        killed = time.monotonic()
        while (left := _beyond_keepalive(container)) and time.monotonic() < killed + _GONE_WITHIN:
            time.sleep(0.1)
        took = time.monotonic() - killed
        assert not left, f"still running {took:.1f} s after the executor's death: {left}"
        assert not _marked(container, mark)

        # The container stays, labelled with its dead owner: `docker gc` removes it.
        assert container in docker("ps", "-q", "--no-trunc")
        gc = subprocess.run(
            [sys.executable, "-m", "executor", "docker", "gc"],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert gc.returncode == 0, gc.stderr
        assert container not in docker("ps", "-aq", "--no-trunc")
        owner = labels[LABEL_OWNER]
        assert not docker("ps", "-aq", "--filter", f"label={LABEL_OWNER}={owner}").split()
    finally:
        docker("rm", "-f", container, check=False)


def _guards(container: str) -> list[str]:
    """The pids (the engine's view) of the guard execs in the container."""
    return [row.split()[0] for row in _processes(container) if _GUARD in row]


async def _guards_once_started(container: str) -> list[str]:
    """`_guards`, once one shows (10 s at most).

    The engine spawns an exec's process a moment after the attach that starts
    it returns: a command may end before its guard shows.
    """
    with anyio.move_on_after(10):
        while not _guards(container):
            await anyio.sleep(0.05)
    return _guards(container)


@pytest.fixture
def given_container() -> Iterator[str]:
    """A running container, not made by the executor under test."""
    with labelled_container(BUSYBOX_IMAGE) as container:
        yield container


@pytest.mark.anyio
async def test_guard_comes_back_and_goes_at_close(given_container: str) -> None:
    """A guard a command killed is started again; `aclose()` ends it with our trees."""
    container = given_container
    async with DockerExecutor(container=container, helper=False, kill_grace=0.2) as ex:
        await ex.exec_cmd(Command.shell("true"))
        first = await _guards_once_started(container)
        assert len(first) == 1, _processes(container)
        # A command that kills it (as root in the container, it may).
        await ex.exec_cmd(
            Command.shell(
                "for p in /proc/[0-9]*; do"
                ' grep -q "guard of an [e]xecutor" $p/cmdline 2>/dev/null'
                " && kill -9 ${p#/proc/}; done; true"
            )
        )
        with anyio.fail_after(10):
            while _guards(container):
                await anyio.sleep(0.05)
        await ex.exec_cmd(Command.shell("sleep 300 >/dev/null 2>&1 &"))
        again = await _guards_once_started(container)
        assert len(again) == 1, _processes(container)
        assert again != first
    rows = _processes(container)
    assert not any(_GUARD in row or "sleep 300" in row for row in rows), rows
