"""A persistent shell keeps its state through a command whose child ignores INT and TERM.

On a timeout the shell sends SIGINT, then SIGTERM, then SIGKILL to what runs
below it (`ProcessSession.kill_descendants`), never to the shell: the
command dies, the shell comes back with its state. Only a shell that is
wedged itself is replaced. Each test runs on every backend with sessions:
a bare LocalExecutor, both sandboxes (a PID namespace per command under
bubblewrap), Docker by engine exec in a busybox container (`sh`) and in a
Python container, SSH, and Ray. The ones whose service is missing skip (or
fail under their `EXECUTOR_REQUIRE_*`).
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest
from conftest import alive, interpreter_sandbox
from ssh_server import SshServer

from executor import (
    Command,
    DockerExecutor,
    LocalExecutor,
    PersistentShell,
    Text,
    TimedOut,
    ToolExecutor,
)
from executor.testing import read_until

pytestmark = pytest.mark.anyio

GRACE = 0.5
TIMEOUT = 1.0
# What a backend's signals and kill cost beyond the two graces: an engine
# exec or an SSH channel for each, on a machine shared with other tests.
SLACK = 2.5

# A child that ignores INT and TERM, with a child of its own: both pids go to a file.
STUCK_SH = (
    'sh -c \'trap "" INT TERM; echo $$ > stuck.pids; '
    "sleep 30 & echo $! >> stuck.pids; wait'; echo never"
)
# The same in Python, with a grandchild that leaves the process group and the session.
STUCK_PY = (
    "{python} -c 'import os, signal, subprocess, time\n"
    "for s in (signal.SIGINT, signal.SIGTERM): signal.signal(s, signal.SIG_IGN)\n"
    'child = subprocess.Popen(["sleep", "30"], start_new_session=True)\n'
    'open("stuck.pids", "w").write(f"{{os.getpid()}}\\n{{child.pid}}\\n")\n'
    "time.sleep(30)'; echo never"
)
# Which of the pids in stuck.pids still run (a zombie is dead), as the shell sees them.
LEFT = (
    "for p in $(cat stuck.pids); do s=$(cat /proc/$p/stat 2>/dev/null); s=${s##*) }; "
    'case $s in ""|Z*) ;; *) echo "$p" ;; esac; done'
)

BACKENDS = ["local", "bubblewrap", "landlock", "docker-busybox", "docker-python", "ssh", "ray"]


@pytest.fixture
def anyio_backend() -> str:
    """Asyncio: asyncssh and Ray have no trio support."""
    return "asyncio"


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """Each backend's name, its services (containers, sshd, Ray) made ready outside the loop."""
    name = str(request.param)
    if name in ("bubblewrap", "landlock"):
        interpreter_sandbox(name)
    elif name.startswith("docker-"):
        request.getfixturevalue(f"{name.removeprefix('docker-')}_container")
    elif name in ("ssh", "ray"):
        request.getfixturevalue("ssh_server" if name == "ssh" else "ray_driver")
    return name


def _make(name: str, request: pytest.FixtureRequest, tmp_path: Path) -> ToolExecutor:
    if name == "local":
        return LocalExecutor(tmp_path, kill_grace=GRACE)
    if name in ("bubblewrap", "landlock"):
        return LocalExecutor(tmp_path, kill_grace=GRACE, sandbox=interpreter_sandbox(name))
    if name.startswith("docker-"):
        container = request.getfixturevalue(f"{name.removeprefix('docker-')}_container")
        workdir = f"/workspace/{uuid.uuid4().hex}"
        return DockerExecutor(container=container, workdir=workdir, kill_grace=GRACE)
    if name == "ssh":
        server: SshServer = request.getfixturevalue("ssh_server")
        return server.executor(kill_grace=GRACE)
    assert name == "ray"
    from executor import RayExecutor

    return RayExecutor(workdir=str(tmp_path), resources={"second": 0.01}, kill_grace=GRACE)


@pytest.fixture
async def executor(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[ToolExecutor]:
    """An executor of each backend, its kill grace `GRACE`, in an empty folder."""
    async with _make(backend, request, tmp_path) as ex:
        ex.backend_name = backend  # type: ignore[attr-defined]
        yield ex


def _python(executor: ToolExecutor) -> str | None:
    """The Python a command of `executor` can run, if it has one."""
    name = getattr(executor, "backend_name", "")
    if name == "docker-busybox":
        return None
    if name in ("local", "bubblewrap", "landlock", "ray"):
        return sys.executable
    return "python3"


async def _stuck_run(sh: PersistentShell, command: str) -> float:
    """Run `command` to its timeout; how long the run took in all."""
    started = anyio.current_time()
    with anyio.fail_after(TIMEOUT + 3 * GRACE + 30), pytest.raises(TimedOut) as caught:
        await sh.run(command, timeout=TIMEOUT)
    took = anyio.current_time() - started
    assert b"never" not in caught.value.output.stdout
    return took


async def _check_kept(sh: PersistentShell, first: int | None, took: float) -> None:
    """The run timed out in time, the shell came back with its state, the child is gone."""
    assert TIMEOUT <= took < TIMEOUT + 2 * GRACE + SLACK, took
    output = await sh.run('echo "$K"')
    assert (output.stdout, output.state_lost) == (b"3\n", False)
    assert not sh.state_lost
    assert sh.restarts == 0
    assert sh.pid == first
    pids = (await sh.run("cat stuck.pids")).stdout.split()
    assert len(pids) == 2, pids
    with anyio.fail_after(10):
        while left := (await sh.run(LEFT)).stdout:
            await anyio.sleep(0.05)
    assert not left


async def test_a_child_ignoring_int_and_term_dies_and_the_shell_stays(
    executor: ToolExecutor,
) -> None:
    """`export K=3`; a child ignoring INT and TERM times out; `$K` is still 3, the child gone."""
    async with executor.shell() as sh:
        await sh.run("export K=3")
        first = sh.pid
        took = await _stuck_run(sh, STUCK_SH)
        await _check_kept(sh, first, took)


async def test_a_python_child_that_left_the_session_dies_too(executor: ToolExecutor) -> None:
    """A Python child ignoring INT and TERM, its own child in a session of its own: both die."""
    python = _python(executor)
    if python is None:
        pytest.skip("no Python in this container")
    async with executor.shell() as sh:
        await sh.run("export K=3")
        first = sh.pid
        took = await _stuck_run(sh, STUCK_PY.format(python=python))
        await _check_kept(sh, first, took)


async def test_a_wedged_shell_is_still_replaced(executor: ToolExecutor) -> None:
    """The shell itself in a loop of builtins that ignores INT and TERM: a fresh shell follows."""
    async with executor.shell() as sh:
        await sh.run("export K=3")
        with anyio.fail_after(30), pytest.raises(TimedOut):
            await sh.run("trap '' INT TERM; while :; do :; done", timeout=0.3)
        output = await sh.run('echo "[$K]"')
        assert (output.stdout, output.state_lost) == (b"[]\n", True)
        # In a sandbox the fresh shell may have the same number in its own PID namespace.
        assert sh.restarts == 1


async def test_a_cancelled_run_kills_the_stuck_child_and_keeps_the_shell(tmp_path: Path) -> None:
    """A cancelled run goes the same way as a timeout: the child dies, the shell stays."""
    async with LocalExecutor(tmp_path, kill_grace=GRACE) as ex, ex.shell() as sh:
        await sh.run("export K=3")
        first = sh.pid
        with anyio.move_on_after(TIMEOUT) as scope:
            await sh.run(STUCK_SH)
        assert scope.cancelled_caught
        pids = [int(pid) for pid in (tmp_path / "stuck.pids").read_text().split()]
        output = await sh.run('echo "$K"')
        assert (output.stdout, output.state_lost, sh.pid) == (b"3\n", False, first)
        with anyio.fail_after(10):
            while any(map(alive, pids)):
                await anyio.sleep(0.05)
        assert first is not None
        assert alive(first)


async def test_background_jobs_below_the_shell_go_with_the_stuck_command(tmp_path: Path) -> None:
    """What the shell put in the background is below it too, and is killed with the command."""
    async with LocalExecutor(tmp_path, kill_grace=0.2) as ex, ex.shell() as sh:
        await sh.run("sh -c 'trap \"\" TERM; exec sleep 60' & echo $! > bg.pid")
        background = int((tmp_path / "bg.pid").read_text())
        assert alive(background)
        with anyio.fail_after(10), pytest.raises(TimedOut):
            await sh.run(STUCK_SH, timeout=0.3)
        with anyio.fail_after(10):
            while alive(background):
                await anyio.sleep(0.05)
        assert not (await sh.run("true")).state_lost


async def test_kill_descendants_spares_the_process_and_what_is_outside_its_tree(
    ex: LocalExecutor,
) -> None:
    """A session's `kill_descendants`: below its own process only, that process spared."""
    script = "sleep 60 & echo $!; read line; echo $line"
    async with (
        await ex.start(Command.shell(script)) as first,
        await ex.start(Command.shell(script)) as second,
    ):
        below_first = int((await read_until(first, b"\n")).strip())
        below_second = int((await read_until(second, b"\n")).strip())
        assert first.pid is not None
        assert second.pid is not None
        # Not a process of the second session's tree: nothing is sent.
        await second.kill_descendants(first.pid)
        await second.kill_descendants(below_first)
        await anyio.sleep(0.2)
        assert alive(below_first)
        await second.kill_descendants(second.pid)
        with anyio.fail_after(10):
            while alive(below_second):
                await anyio.sleep(0.05)
        assert alive(second.pid)
        assert alive(below_first)
        await second.send_stdin(Text("still here\n"))
        assert b"still here" in await read_until(second, b"here\n")
        assert (await second.finalize()).exit_code == 0
