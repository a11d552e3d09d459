"""A cgroup per unsandboxed command, where this process may make them: limits, the kill, the peak.

These need a cgroup this process may make children in, with the `memory`
and `pids` controllers (cgroup v2 delegated or as root, or root on a
hybrid v1 host). They skip where there is none, and fail instead under
`EXECUTOR_REQUIRE_CGROUPS=1` (CI, as root).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import sys
from pathlib import Path

import anyio
import pytest
from conftest import alive

from executor import Command, CommandError, ExecutorError, LocalExecutor, NonZeroExit, Sandbox
from executor._local import cgroup
from executor._sandbox import cgroup_probe

pytestmark = pytest.mark.anyio


def require(*limits: str, kill: bool = False) -> None:
    """Skip unless commands get a cgroup enforcing `limits` (and with `cgroup.kill`)."""
    support = cgroup.probe()
    missing = [name for name in limits if name not in support.limits]
    if kill and not (support.v2 is not None and support.v2_kill):
        missing.append("cgroup.kill (cgroup v2, Linux 5.14+)")
    if missing:
        reason = f"no cgroup with {', '.join(missing)} here: {support.describe()}"
        if os.environ.get("EXECUTOR_REQUIRE_CGROUPS") == "1":
            pytest.fail(reason)
        pytest.skip(reason)


async def test_memory_stops_a_hog(tmp_path: Path) -> None:
    """memory= bounds the whole tree: a process that grabs 200 MiB is killed, the executor lives."""
    require("memory")
    hog = "b = bytearray(200 << 20)\nfor i in range(0, len(b), 4096): b[i] = 1\nprint('ESCAPED')"
    async with LocalExecutor(tmp_path, memory=64 << 20) as ex:
        with anyio.fail_after(30), pytest.raises(NonZeroExit) as caught:
            await ex.exec_cmd(Command.exec([sys.executable, "-c", hog]))
        assert b"ESCAPED" not in caught.value.output.stdout
        small = await ex.exec_cmd(Command.exec([sys.executable, "-c", "print('fits')"]))
    assert small.stdout == b"fits\n"


async def test_pids_stops_a_fork_bomb(tmp_path: Path) -> None:
    """pids= bounds how many processes a command's tree has at once: a fork bomb stops there."""
    require("pids")
    # It tries to fork 200 sleepers and counts those it got; the tree may hold 20.
    bomb = (
        "import os, time\n"
        "n = 0\n"
        "for _ in range(200):\n"
        "    try:\n"
        "        pid = os.fork()\n"
        "    except OSError:\n"
        "        break\n"
        "    if pid == 0:\n"
        "        time.sleep(5)\n"
        "        os._exit(0)\n"
        "    n += 1\n"
        "print(n)"
    )
    async with LocalExecutor(tmp_path, pids=20, kill_grace=0.1) as ex:
        with anyio.fail_after(30):
            output = await ex.exec_cmd(Command.exec([sys.executable, "-c", bomb]))
    started = int(output.stdout)
    assert 0 < started < 20


async def test_cgroup_kill_ends_a_tree(tmp_path: Path) -> None:
    """A timeout ends the tree through its cgroup: a TERM-proof daemon out of the session dies."""
    require(kill=True)
    script = (
        "(trap '' TERM; setsid sh -c 'trap \"\" TERM; echo $$ > d.pid; "
        "while :; do sleep 1; done' >/dev/null 2>&1 &); sleep 30"
    )
    async with LocalExecutor(tmp_path, kill_grace=0.1) as ex:
        with anyio.fail_after(15), pytest.raises(CommandError):
            await ex.exec_cmd(Command.shell(script).with_timeout(1))
        pid = int((tmp_path / "d.pid").read_text())
        assert not alive(pid)
        supervisor = ex._supervisor
        assert supervisor is not None
        assert supervisor.cgroups is not None
        base = supervisor.cgroups["v2"]
    assert not os.path.exists(base), "the executor's cgroup folder was left behind"


async def test_memory_peak_is_reported(tmp_path: Path) -> None:
    """The output says how much memory the command's tree used at its peak."""
    require("memory")
    grab = "b = bytearray(40 << 20)\nfor i in range(0, len(b), 4096): b[i] = 1"
    async with LocalExecutor(tmp_path) as ex:
        output = await ex.exec_cmd(Command.exec([sys.executable, "-c", grab]))
    assert output.memory_peak is not None
    assert 40 << 20 <= output.memory_peak < 400 << 20


def test_a_limit_that_cannot_be_enforced_is_refused(tmp_path: Path) -> None:
    """Where no cgroup can enforce memory=, the executor refuses to be built; bad values too."""
    with pytest.raises(ValueError, match="pids"):
        LocalExecutor(tmp_path, pids=0)
    with pytest.raises(ValueError, match="sandbox"):
        LocalExecutor(tmp_path, memory=1 << 30, sandbox=Sandbox())
    if "memory" in cgroup.probe().limits:
        pytest.skip("this machine can enforce memory=")
    with pytest.raises(ExecutorError, match="memory="):
        LocalExecutor(tmp_path, memory=1 << 30)


def test_probe_reports_the_cgroups() -> None:
    """Sandbox.probe()'s report says what an unsandboxed command's cgroup gives here."""
    assert cgroup.probe().describe() in str(Sandbox.probe())


async def test_each_command_has_its_cgroups_before_and_after_a_kill(tmp_path: Path) -> None:
    """Every command runs in the executor's cgroups, a kill or not.

    Where cgroup v2 has no controller for us, a shim keeps one v2 folder
    for all its commands and leaves it only for a kill, and a v1 memory
    folder for as long as its commands leave little in it: the commands
    that follow a kill are in them again.
    """
    require("memory")
    show = Command.exec(["cat", "/proc/self/cgroup"])
    async with LocalExecutor(tmp_path, kill_grace=0.1) as ex:
        supervisor = ex._supervisor
        assert supervisor is not None
        config = supervisor.cgroups
        assert config is not None
        name = os.path.basename(config["v1"].get("memory") or config["v2"])
        seen = [(await ex.exec_cmd(show)).stdout.decode()]
        for _ in range(3):
            with anyio.fail_after(15), pytest.raises(CommandError):
                await ex.exec_cmd(Command.shell("sleep 30").with_timeout(0.2))
            seen.append((await ex.exec_cmd(show)).stdout.decode())
    for text in seen:
        lines = dict(line.split(":", 2)[1:] for line in text.splitlines())
        if config.get("v2"):
            assert name in lines[""], text
        if "memory" in config["v1"]:
            assert name in lines["memory"], text


async def test_each_command_reports_its_own_memory_peak(tmp_path: Path) -> None:
    """A command's peak is its own, whatever ran before it in the same shim's cgroups."""
    require("memory")

    def grab(mib: int) -> Command:
        code = f"b = bytearray({mib} << 20)\nfor i in range(0, len(b), 4096): b[i] = 1"
        return Command.exec([sys.executable, "-c", code])

    peaks: list[int | None] = []
    async with LocalExecutor(tmp_path) as ex:
        for cmd in (grab(80), Command.shell("true"), Command.shell("true"), grab(30)):
            # One at a time and after a pause, so each may find its shim ready.
            peaks.append((await ex.exec_cmd(cmd)).memory_peak)
            await anyio.sleep(0.05)
    assert all(peak is not None for peak in peaks), peaks
    big, small, again, medium = (peak or 0 for peak in peaks)
    assert big >= 80 << 20, peaks
    assert small < 16 << 20, peaks
    assert again < 16 << 20, peaks
    assert 30 << 20 <= medium < 80 << 20, peaks


async def test_limits_hold_from_command_to_command(tmp_path: Path) -> None:
    """memory= and pids= bound every command alike, the tenth as the first."""
    require("memory", "pids")
    hog = "b = bytearray(200 << 20)\nfor i in range(0, len(b), 4096): b[i] = 1\nprint('ESCAPED')"
    forks = (
        "import os, time\n"
        "n = 0\n"
        "for _ in range(50):\n"
        "    try:\n"
        "        pid = os.fork()\n"
        "    except OSError:\n"
        "        break\n"
        "    if pid == 0:\n"
        "        time.sleep(2)\n"
        "        os._exit(0)\n"
        "    n += 1\n"
        "print(n)"
    )
    counts = []
    async with LocalExecutor(tmp_path, memory=64 << 20, pids=10, kill_grace=0.1) as ex:
        for _ in range(3):
            for _ in range(3):
                await ex.exec_cmd(Command.shell("true"))
            with anyio.fail_after(30), pytest.raises(NonZeroExit) as caught:
                await ex.exec_cmd(Command.exec([sys.executable, "-c", hog]))
            assert b"ESCAPED" not in caught.value.output.stdout
            with anyio.fail_after(30):
                output = await ex.exec_cmd(Command.exec([sys.executable, "-c", forks]))
            counts.append(int(output.stdout))
    # The tree may hold 10 at once: the interpreter and 9 it forks, each time.
    assert counts == [9, 9, 9], counts


def test_the_probe_finds_cgroup_kill_where_no_child_cgroup_exists_yet() -> None:
    """`cgroup.kill` is a child cgroup's file: a folder with no child is asked through one it makes.

    A fresh host's root cgroup has no child to look at; the probe makes one,
    looks, and removes it, leaving the folder as it was.
    """
    require(kill=True)
    support = cgroup.probe()
    assert support.v2 is not None
    folder = os.path.join(support.v2, f"executor-test-{os.getpid()}")
    os.mkdir(folder)
    try:
        assert cgroup_probe._children_have_kill(folder)
        assert [entry.name for entry in os.scandir(folder) if entry.is_dir()] == []
    finally:
        os.rmdir(folder)


async def test_folders_of_executors_killed_outright_are_swept(tmp_path: Path) -> None:
    """A new executor removes the empty folders a killed one left; a live one's are kept.

    A process killed at once (SIGKILL to its group, the OOM killer) leaves
    its executor's folders behind; on a long-lived host they would pile up.
    """
    require("memory")
    support = cgroup.probe()
    parents = [folder for folder in (support.v2, *support.v1.values()) if folder is not None]
    dead = int((await anyio.run_process(["sh", "-c", "echo $$"])).stdout)
    left = [os.path.join(parent, f"executor-{dead}-{'a' * 12}") for parent in parents]
    # Its own name for the live one: pid 1's folders outlive every sweep, and
    # a test beside this one (another pytest-xdist worker) makes its own.
    live = [os.path.join(parent, f"executor-1-{secrets.token_hex(6)}") for parent in parents]
    busy = os.path.join(parents[0], f"executor-{dead}-{'c' * 12}")
    made = [*left, *live, busy, os.path.join(busy, "c1-1")]
    for folder in made:
        os.mkdir(folder)
    try:
        async with LocalExecutor(tmp_path) as ex:
            await ex.exec_cmd(Command.shell("true"))
        assert [folder for folder in left if os.path.exists(folder)] == []
        assert all(os.path.isdir(folder) for folder in live)
        assert os.path.isdir(os.path.join(busy, "c1-1")), "a folder with a cgroup inside went"
    finally:
        for folder in reversed(made):
            with contextlib.suppress(FileNotFoundError):
                os.rmdir(folder)
