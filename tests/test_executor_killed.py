"""The executor's own process SIGKILLed mid-command: nothing it started outlives it.

A child Python process starts a command through an executor (local, under
bubblewrap, under Landlock, in a persistent shell with a job running), says
so, and is killed with SIGKILL: no `finally`, no `aclose`, no atexit. Every
process of the command's tree carries a mark of its own (in its arguments
and its environment), so the test finds what is left by that mark among all
of this machine's processes (psutil), whatever PID namespace or parent it
has; whatever the test finds, it ends by pid at teardown.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from conftest import require_sandbox
from test_crash_recovery import Child, integrity, marks, spec

from executor import IdempotencyKey, Sandbox

# Generous: the machine may be loaded, and a sandbox's start takes a while.
START_LIMIT = 60.0
# How long the tree may outlive its executor: "within a few seconds".
END_LIMIT = 5.0
REPO = Path(__file__).resolve().parent.parent

# The child: makes the executor `backend` names, starts the marked command
# (`how`: a command, or a persistent shell with a job and a foreground
# command), prints "started" once the command's processes run, and waits to
# be killed.
CHILD = r"""
import json, os, sys
import anyio
from executor import Command, LocalExecutor, Sandbox

spec = json.loads(sys.argv[1])
mark = spec["mark"]
script = f"sleep 300 & sleep 300 # {mark}"


async def main():
    sandbox = None
    if spec["backend"] != "local":
        readable = (sys.prefix, sys.base_prefix, os.path.dirname(os.path.realpath(sys.executable)))
        sandbox = Sandbox(backend=spec["backend"], readable=tuple(dict.fromkeys(readable)))
    ex = LocalExecutor(spec["workdir"], sandbox=sandbox)
    async with anyio.create_task_group() as tasks:
        if spec["how"] == "command":
            command = Command.exec(["sh", "-c", script, mark])
            command = command.with_env({"EXECUTOR_KILL_MARK": mark})
            tasks.start_soon(ex.exec_cmd, command)
        else:
            shell = await ex.shell(env={"EXECUTOR_KILL_MARK": mark}).__aenter__()
            await shell.start_job(f"sh -c '{script}' {mark}")
            tasks.start_soon(shell.run, f"sh -c '{script}' {mark}")
        print("started", flush=True)
        await anyio.sleep(3600)


anyio.run(main)
"""


def marked(mark: str) -> list[psutil.Process]:
    """This machine's live processes whose arguments or environment hold `mark`."""
    found = []
    for process in psutil.process_iter():
        if process.pid == os.getpid():
            continue
        try:
            if process.status() == psutil.STATUS_ZOMBIE:
                continue
            if any(mark in part for part in process.cmdline()):
                found.append(process)
                continue
            if mark in process.environ().values():
                found.append(process)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def count_sleeps(processes: list[psutil.Process]) -> int:
    """How many of `processes` are a `sleep 300`."""
    count = 0
    for process in processes:
        with contextlib.suppress(psutil.Error):
            if process.cmdline()[:2] == ["sleep", "300"]:
                count += 1
    return count


def describe(process: psutil.Process) -> str:
    """`pid: argv` of a process, for a failure's message."""
    try:
        return f"{process.pid}: {' '.join(process.cmdline())}"
    except psutil.Error:
        return f"{process.pid}: (gone)"


@pytest.fixture
def mark() -> Iterator[str]:
    """A mark unique to this test; whatever carries it at the end is killed by pid."""
    mark = f"executor-killed-{uuid.uuid4().hex}"
    yield mark
    for process in marked(mark):
        with contextlib.suppress(psutil.Error):
            process.kill()


def see_the_tree_end(mark: str) -> None:
    """Wait up to `END_LIMIT` s for every process marked `mark` to end; fail naming those left."""
    killed = time.monotonic()
    while left := marked(mark):
        if time.monotonic() - killed > END_LIMIT:
            described = [describe(process) for process in left]
            pytest.fail(f"processes outlived the executor by {END_LIMIT} s: {described}")
        time.sleep(0.05)


def kill_the_executor_mid_command(
    tmp_path: Path, mark: str, backend: str, how: str, sleeps: int
) -> None:
    """Start the child, wait for `sleeps` marked sleeps, SIGKILL it, and see its tree end."""
    arguments = {"mark": mark, "backend": backend, "how": how, "workdir": str(tmp_path)}
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, json.dumps(arguments)],
        stdout=subprocess.PIPE,
        cwd=REPO,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline() == b"started\n", "the child did not start its command"
        deadline = time.monotonic() + START_LIMIT
        while count_sleeps(marked(mark)) < sleeps:
            assert child.poll() is None, "the executor's process ended on its own"
            assert time.monotonic() < deadline, f"fewer than {sleeps} sleeps started"
            time.sleep(0.05)
        os.kill(child.pid, signal.SIGKILL)
        child.wait(START_LIMIT)
        see_the_tree_end(mark)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        if child.stdout is not None:
            child.stdout.close()


def test_local_command_tree_dies_with_the_executor(tmp_path: Path, mark: str) -> None:
    """A LocalExecutor's command and its background child end with the executor's process."""
    kill_the_executor_mid_command(tmp_path, mark, "local", "command", sleeps=2)


def test_local_persistent_shell_and_its_job_die_with_the_executor(
    tmp_path: Path, mark: str
) -> None:
    """A persistent shell, its job and its foreground command end with the executor's process."""
    kill_the_executor_mid_command(tmp_path, mark, "local", "shell", sleeps=4)


@pytest.mark.parametrize("backend", ["bubblewrap", "landlock"])
def test_sandboxed_command_tree_dies_with_the_executor(
    tmp_path: Path, mark: str, backend: str
) -> None:
    """A sandboxed command and its background child end with the executor's process."""
    require_sandbox(Sandbox(backend=backend))  # type: ignore[arg-type]
    kill_the_executor_mid_command(tmp_path, mark, backend, "command", sleeps=2)


@pytest.mark.parametrize("backend", ["bubblewrap", "landlock"])
def test_sandboxed_persistent_shell_and_its_job_die_with_the_executor(
    tmp_path: Path, mark: str, backend: str
) -> None:
    """A sandboxed persistent shell, its job and its command end with the executor's process."""
    require_sandbox(Sandbox(backend=backend))  # type: ignore[arg-type]
    kill_the_executor_mid_command(tmp_path, mark, backend, "shell", sleeps=4)


def test_an_idempotent_run_killed_mid_command_ends_and_is_not_run_again(
    tmp_path: Path, mark: str
) -> None:
    """An `Idempotent` run killed mid-command: its tree ends, and it is not run again.

    The next process finds the run interrupted in the SQLite journal.

    (tests/test_crash_recovery.py covers the journal's side at every kill
    point; this is the tree's side of the same kill.)
    """
    journal = tmp_path / "journal.sqlite3"
    key = IdempotencyKey.new()
    script = f"export EXECUTOR_KILL_MARK={mark}; echo x >> marker; sleep 300 & sleep 300"
    first = Child("run", spec(journal, key, tmp_path, script))
    again: Child | None = None
    try:
        first.wait_for("claimed")
        deadline = time.monotonic() + START_LIMIT
        while count_sleeps(marked(mark)) < 2:
            assert time.monotonic() < deadline, "the run's two sleeps did not start"
            time.sleep(0.05)
        os.kill(first.pid, signal.SIGKILL)
        first.process.wait(START_LIMIT)
        see_the_tree_end(mark)
        assert marks(tmp_path / "marker") == 1
        assert integrity(journal) == ["ok"]
        again = Child("run", spec(journal, key, tmp_path, script))
        result = again.wait_for("result")
        assert result["error"] == "RunInterrupted"
        assert str(key) in result["message"]
        assert marks(tmp_path / "marker") == 1
        assert count_sleeps(marked(mark)) == 0
    finally:
        first.close()
        if again is not None:
            again.close()
