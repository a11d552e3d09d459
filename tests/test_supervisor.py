"""The supervisor of an unsandboxed LocalExecutor: nothing a command starts outlives it.

Every command starts below a child subreaper of its own (see
`executor._local.supervisor`), so a process that drops the tree's tag, leaves
the session, double-forks, renames itself or forks as fast as it can is still
found and ended by a timeout, a cancel, a failing sink or `aclose()`.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import os
import random
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Awaitable
from pathlib import Path

import anyio
import psutil
import pytest
from conftest import alive

from executor import Chunk, Command, CommandError, LocalExecutor, Text, TimedOut
from executor._core.proc import TREE_VARIABLE, proc_stat

pytestmark = pytest.mark.anyio

_PR_GET_CHILD_SUBREAPER = 37


def with_token(token: str) -> list[int]:
    """Live processes whose command line holds `token`."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                line = f.read()
        except OSError:
            continue
        if token.encode() in line and alive(int(name)):
            found.append(int(name))
    return found


def escapes(token: str) -> str:
    """A script that starts one process by each way out of a tree, then says `ready`."""
    loop = "while :; do sleep 1; done"
    rename = textwrap.dedent(
        """
        import ctypes, os, sys, time
        if os.fork():
            os._exit(0)
        os.setsid()
        if os.fork():
            os._exit(0)
        os.setpgid(0, 0)
        ctypes.CDLL(None).prctl(15, b"kworker/0:1", 0, 0, 0)
        open(sys.argv[1], "w").write(str(os.getpid()))
        while True:
            time.sleep(1)
        """
    )
    lines = [
        # env -i (no tag) + setsid + double fork: parent 1, a session of its own.
        f"(env -i setsid sh -c '{loop}' {token}-a </dev/null >/dev/null 2>&1 &)",
        # The same without leaving the session.
        f"(env -i sh -c '{loop}' {token}-b </dev/null >/dev/null 2>&1 &)",
        f"nohup sh -c '{loop}' {token}-c >/dev/null 2>&1 &",
        f"bash -c \"sh -c '{loop}' {token}-d </dev/null >/dev/null 2>&1 & disown\"",
        # A daemon that renames itself and takes a process group of its own.
        f"{sys.executable} -c '{rename}' {token}-e.pid {token}-e </dev/null >/dev/null 2>&1 &",
        # A fork storm that ignores SIGTERM and races the kill.
        f"sh -c 'trap \"\" TERM; while :; do sleep 2 & sleep 0.002; done' {token}-f "
        ">/dev/null 2>&1 &",
        f"while [ ! -s {token}-e.pid ]; do sleep 0.01; done",
        "echo ready",
        "sleep 60",
    ]
    return "\n".join(lines)


async def run_until_ready(ex: LocalExecutor, script: str, how: str) -> None:
    """Run `script` until it prints `ready`, then end it by a timeout, a cancel or a sink error."""
    ready = anyio.Event()

    def sink(chunk: Chunk) -> None:
        if b"ready" in chunk.data:
            if how == "sink":
                raise RuntimeError("enough")
            ready.set()

    cmd = Command.shell(script)
    if how == "timeout":
        with pytest.raises(TimedOut):
            await ex.exec_cmd_streaming(cmd.with_timeout(3), sink)
        return
    if how == "sink":
        with pytest.raises(RuntimeError, match="enough"):
            await ex.exec_cmd_streaming(cmd, sink)
        return
    async with anyio.create_task_group() as tasks:

        async def run() -> None:
            with contextlib.suppress(CommandError):
                await ex.exec_cmd_streaming(cmd, sink)

        tasks.start_soon(run)
        await ready.wait()
        if how == "cancel":
            tasks.cancel_scope.cancel()
        else:
            await ex.aclose()


@pytest.mark.slow
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_hostile_escapes_leave_no_survivor_over_100_runs(tmp_path: Path) -> None:
    """No survivor of `env -i`, setsid, double forks, nohup, disown, renames, a fork storm.

    100 runs in all, four executors at a time, each run ended by a timeout, a
    cancel, a failing sink or `aclose()` in turn.
    """
    survivors: dict[tuple[int, int], list[int]] = {}
    tokens = [f"esc{uuid.uuid4().hex[:12]}" for _ in range(4)]

    async def runs(lane: int) -> None:
        token = tokens[lane]
        folder = tmp_path / str(lane)
        folder.mkdir()
        script = escapes(token)
        ex = LocalExecutor(folder, kill_grace=0.05)
        try:
            for run in range(25):
                how = ("timeout", "cancel", "sink", "aclose")[run % 4]
                with anyio.fail_after(30):
                    await run_until_ready(ex, script, how)
                if how == "aclose":
                    ex = LocalExecutor(folder, kill_grace=0.05)
                left = with_token(token)
                if left:
                    survivors[lane, run] = left
                (folder / f"{token}-e.pid").unlink(missing_ok=True)
        finally:
            await ex.aclose()

    try:
        async with anyio.create_task_group() as tasks:
            for lane in range(4):
                tasks.start_soon(runs, lane)
    finally:
        for token in tokens:
            for pid in with_token(token):
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)  # started by this test's commands
    assert survivors == {}


async def test_a_close_right_after_a_shims_fork_does_not_wait_for_it(tmp_path: Path) -> None:
    """`aclose()` just after the supervisor forked a shim ends it at once.

    The supervisor forks a spare shim as it starts and after each command; a
    stop signal that reached the new shim before it had its own handlers was
    lost, and the close waited out the supervisor's patience with a stubborn
    shim (a second) before killing it. Five closes of each kind: with the
    loss, none came back in under a second.
    """
    from executor._local import supervisor

    patience = supervisor._SHIM_TERM_WAIT
    for run_one in (False, True):
        closes = []
        for _ in range(5):
            ex = LocalExecutor(tmp_path)
            async with ex:
                if run_one:
                    await ex.exec_cmd(Command.shell("true"))
                closing = time.monotonic()
            closes.append(time.monotonic() - closing)
        assert min(closes) < patience / 2, (run_one, closes)


async def test_orphans_are_the_shims_not_inits(ex: LocalExecutor, tmp_path: Path) -> None:
    """A double-forked daemon is re-parented below the executor's supervisor, not to init."""
    script = "(env -i sh -c 'echo $$ > d.pid; exec sleep 34' >/dev/null 2>&1 &); echo started"
    with anyio.fail_after(10):
        await ex.exec_cmd(Command.shell(script))
        while not (tmp_path / "d.pid").exists() or not (tmp_path / "d.pid").read_text():
            await anyio.sleep(0.01)
    pid = int((tmp_path / "d.pid").read_text())
    stat = proc_stat(pid)
    assert stat is not None
    assert stat.ppid not in (0, 1)
    parent = proc_stat(stat.ppid)
    assert parent is not None
    # The shim's parent is the supervisor, this process's child.
    assert parent.ppid != 1
    assert proc_stat(parent.ppid) is not None
    assert proc_stat(parent.ppid).ppid == os.getpid()  # type: ignore[union-attr]
    await ex.aclose()
    assert not alive(pid)


def test_our_process_is_not_a_subreaper(tmp_path: Path) -> None:
    """The executor's own process is never made a child subreaper."""
    LocalExecutor(tmp_path)
    flag = ctypes.c_int(-1)
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.prctl(_PR_GET_CHILD_SUBREAPER, ctypes.byref(flag), 0, 0, 0) == 0
    assert flag.value == 0


_OWNER = textwrap.dedent(
    """
    import sys, anyio
    from executor import Command, LocalExecutor

    async def main() -> None:
        ex = LocalExecutor(sys.argv[1])
        await ex.exec_cmd(Command.shell(
            "(env -i setsid sh -c 'echo $$ > d.pid; exec sleep 35' >/dev/null 2>&1 &)"
            "; while [ ! -s d.pid ]; do sleep 0.01; done"
        ))
        print("ready", flush=True)
        await anyio.sleep(60)

    anyio.run(main)
    """
)


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_killed_owner_takes_every_tree_with_it(tmp_path: Path) -> None:
    """SIGKILL the executor's process: its supervisor and every command's tree die too."""
    owner = subprocess.Popen(
        [sys.executable, "-c", _OWNER, str(tmp_path)],
        stdout=subprocess.PIPE,
        cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    )
    pid = 0
    try:
        assert owner.stdout is not None
        assert owner.stdout.readline() == b"ready\n"
        pid = int((tmp_path / "d.pid").read_text())
        assert alive(pid)
        owner.kill()
        owner.wait()
        deadline = time.monotonic() + 5
        while alive(pid) and time.monotonic() < deadline:
            await anyio.sleep(0.01)
        assert not alive(pid)
    finally:
        if owner.poll() is None:
            owner.kill()
            owner.wait()
        if owner.stdout is not None:
            owner.stdout.close()
        if pid and alive(pid) and b"sleep\x0035" in Path(f"/proc/{pid}/cmdline").read_bytes():
            os.kill(pid, signal.SIGKILL)


async def test_a_killed_supervisor_is_replaced(tmp_path: Path) -> None:
    """A killed supervisor's shims end their trees; the next command gets a new supervisor."""
    async with LocalExecutor(tmp_path, kill_grace=0.1) as ex:
        with anyio.fail_after(10):
            started = await ex.exec_cmd(Command.shell("sleep 36 >/dev/null 2>&1 & echo $!"))
            background = int(started.stdout)
            supervisor = ex._supervisor
            assert supervisor is not None
            first = supervisor._pid
            assert first is not None
            os.kill(first, signal.SIGKILL)
            # Its shims get their parent-death signal and end their trees.
            while alive(background) or alive(first):
                await anyio.sleep(0.01)
            output = await ex.exec_cmd(Command.exec(["echo", "again"]))
        assert output.stdout == b"again\n"
        assert supervisor._pid not in (None, first)


async def test_a_cancel_right_after_the_start_leaves_nothing(tmp_path: Path) -> None:
    """A command cancelled within 50 ms of its start is gone, tree and all, when the call returns.

    The cancel lands anywhere in the start: before the request reaches the
    supervisor, while its shim starts the command, or just after.
    """
    rng = random.Random(7)
    leaked = []
    async with LocalExecutor(tmp_path, kill_grace=0.2) as ex:
        for attempt in range(40):
            token = f"{uuid.uuid4().hex}-{attempt}"
            # `sleep` the shell's last command (it may exec it): found by its argument.
            seconds = f"37.{attempt:03d}{rng.randrange(1000):03d}"
            with anyio.move_on_after(rng.uniform(0, 0.05)):
                await ex.exec_cmd(Command.shell(f": {token}; sleep {seconds}"))
            if with_token(seconds) or with_token(token):
                leaked.append(attempt)
    assert not leaked


def _status_masks(pid: int) -> dict[str, int]:
    """A process's blocked and ignored signal masks, from `/proc/PID/status`."""
    masks = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("SigBlk", "SigIgn"):
            masks[name] = int(value.strip(), 16)
    return masks


async def _masks_and_ctrl_c(workdir: Path) -> tuple[dict[str, int], dict[str, int], int | None]:
    """The masks of a plain and a pty command, and the signal Ctrl-C on the pty kills with."""
    script = "echo $$ > {name}; exec sleep 38"
    async with LocalExecutor(workdir, kill_grace=0.2) as ex:
        with anyio.fail_after(20):
            async with await ex.start(Command.shell(script.format(name="plain.pid"))):
                while (
                    not (workdir / "plain.pid").exists()
                    or not (workdir / "plain.pid").read_text().strip()
                ):
                    await anyio.sleep(0.01)
                plain_masks = _status_masks(int((workdir / "plain.pid").read_text()))
            cmd = Command.shell(script.format(name="pty.pid") + " # ready")
            async with await ex.start(cmd, pty=True) as session:
                while (
                    not (workdir / "pty.pid").exists()
                    or not (workdir / "pty.pid").read_text().strip()
                ):
                    await anyio.sleep(0.01)
                pid = int((workdir / "pty.pid").read_text())
                while b"sleep" not in Path(f"/proc/{pid}/cmdline").read_bytes():
                    await anyio.sleep(0.01)
                pty_masks = _status_masks(pid)
                await session.send_stdin(Text("\x03"))
                with pytest.raises(CommandError) as killed:
                    await session.finalize()
    return plain_masks, pty_masks, killed.value.output.signal


def test_commands_start_with_no_signal_blocked_or_ignored(tmp_path: Path) -> None:
    """From a thread that blocks SIGINT, in a process that ignores SIGUSR2: a clean start.

    Every command, on a pty or not, starts with an empty signal mask and
    every disposition at its default, so Ctrl-C typed on a pty kills it.
    """
    results: list[tuple[dict[str, int], dict[str, int], int | None]] = []
    errors: list[BaseException] = []

    def worker() -> None:
        # As Ray's worker threads do; the disposition is the whole process's.
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        try:
            results.append(anyio.run(_masks_and_ctrl_c, tmp_path))
        except BaseException as error:
            errors.append(error)

    previous = signal.signal(signal.SIGUSR2, signal.SIG_IGN)
    try:
        thread = threading.Thread(target=worker)
        thread.start()
        thread.join(60)
    finally:
        signal.signal(signal.SIGUSR2, previous)
    assert not thread.is_alive()
    if errors:
        raise errors[0]
    plain, pty, killed_by = results[0]
    assert plain == {"SigBlk": 0, "SigIgn": 0}
    assert pty == {"SigBlk": 0, "SigIgn": 0}
    assert killed_by == signal.SIGINT


async def test_a_dropped_executor_leaves_no_zombie(tmp_path: Path) -> None:
    """An executor collected without `aclose()`: its trees end and its supervisor is reaped."""
    ex = LocalExecutor(tmp_path)
    started = await ex.exec_cmd(Command.shell("sleep 39 >/dev/null 2>&1 & echo $!"))
    background = int(started.stdout)
    assert ex._supervisor is not None
    supervisor = ex._supervisor._pid
    assert supervisor is not None
    del ex, started
    gc.collect()
    with anyio.fail_after(10):
        while alive(background) or Path(f"/proc/{supervisor}").exists():
            await anyio.sleep(0.01)


def test_a_dead_supervisor_of_a_dropped_executor_is_reaped(tmp_path: Path) -> None:
    """A supervisor that died first (its thread ended, or it was killed) is reaped on the drop."""
    ex = LocalExecutor(tmp_path)
    assert ex._supervisor is not None
    supervisor = ex._supervisor._pid
    assert supervisor is not None
    os.kill(supervisor, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while alive(supervisor) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert Path(f"/proc/{supervisor}").exists()  # a zombie, until reaped
    del ex
    gc.collect()
    while Path(f"/proc/{supervisor}").exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not Path(f"/proc/{supervisor}").exists()


_FORGETFUL = textwrap.dedent(
    """
    import sys, anyio
    from executor import Command, LocalExecutor

    ex = LocalExecutor(sys.argv[1])

    async def main() -> None:
        await ex.exec_cmd(Command.shell(
            "(env -i setsid sh -c 'echo $$ > d.pid; exec sleep 40' >/dev/null 2>&1 &)"
            "; while [ ! -s d.pid ]; do sleep 0.01; done"
        ))

    anyio.run(main)
    print(ex._supervisor._pid, flush=True)
    """
)


def test_an_executor_never_closed_ends_its_trees_before_the_process_exits(tmp_path: Path) -> None:
    """An executor still open at exit: its daemon is gone once the process has exited."""
    done = subprocess.run(
        [sys.executable, "-c", _FORGETFUL, str(tmp_path)],
        capture_output=True,
        cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
        timeout=60,
        check=True,
    )
    daemon = int((tmp_path / "d.pid").read_text())
    supervisor = int(done.stdout)
    try:
        assert not alive(daemon)
        # The supervisor itself ends a moment after the trees it killed (it
        # still removes its folders), reaped by init: on a loaded machine,
        # after the process has exited.
        deadline = time.monotonic() + 10
        while alive(supervisor) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not alive(supervisor)
        assert done.stderr == b""
    finally:
        if alive(daemon) and b"sleep\x0040" in Path(f"/proc/{daemon}/cmdline").read_bytes():
            os.kill(daemon, signal.SIGKILL)


def _shims(ex: LocalExecutor) -> list[int]:
    """The executor's shims: its supervisor's children."""
    assert ex._supervisor is not None
    assert ex._supervisor._pid is not None
    supervisor = ex._supervisor._pid
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            stat = proc_stat(int(name))
            if stat is not None and stat.ppid == supervisor and stat.state != "Z":
                found.append(int(name))
    return found


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_shims_are_used_again_and_idle_ones_retire(tmp_path: Path) -> None:
    """Back-to-back commands reuse a few shims; after a burst, idle shims beyond four retire."""
    async with LocalExecutor(tmp_path, kill_grace=0.1) as ex:
        with anyio.fail_after(60):
            shims: set[int] = set()
            for _ in range(30):
                await ex.exec_cmd(Command.exec(["true"]))
                shims.update(_shims(ex))
            # Two kept idle, one busy at a time: no fork per command.
            assert len(shims) < 10
            # Twelve at once: the pool grows to serve them (a shim serves one at a time).
            parents: list[int] = []

            async def one() -> None:
                output = await ex.exec_cmd(Command.shell("sleep 1; echo $PPID"))
                parents.append(int(output.stdout))

            async with anyio.create_task_group() as tasks:
                for _ in range(12):
                    tasks.start_soon(one)
            assert len(set(parents)) > 4
            # Then the supervisor retires idle shims down to at most four (and keeps two).
            while len(_shims(ex)) > 4:
                await anyio.sleep(0.05)
            await anyio.sleep(0.2)
            assert 2 <= len(_shims(ex)) <= 4
            output = await ex.exec_cmd(Command.exec(["echo", "still"]))
        assert output.stdout == b"still\n"


async def test_a_used_shim_contains_its_next_command_too(tmp_path: Path) -> None:
    """A shim that served a command contains the next one: a daemon of each dies."""
    script = (
        "echo $PPID; (env -i setsid sh -c 'echo $$ > d{n}.pid; exec sleep 41' >/dev/null 2>&1 &)"
        "; sleep 30"
    )
    async with LocalExecutor(tmp_path, kill_grace=0.05) as ex:
        shims = []
        with anyio.fail_after(30):
            for n in range(6):
                with pytest.raises(TimedOut) as caught:
                    await ex.exec_cmd(Command.shell(script.format(n=n)).with_timeout(0.5))
                shims.append(int(caught.value.output.stdout))
                assert not alive(int((tmp_path / f"d{n}.pid").read_text()))
        # The shell's parent is its shim: some shim served more than one.
        assert len(set(shims)) < len(shims)


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_tree_is_found_without_cgroups(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where no cgroup can be made, the shim finds the tree from /proc: no escape survives."""
    from executor._local import cgroup

    none = cgroup.CgroupSupport(v2=None, v2_controllers=frozenset(), v2_kill=False, v1={})
    monkeypatch.setattr(cgroup, "probe", lambda: none)
    token = f"esc{uuid.uuid4().hex[:12]}"
    try:
        async with LocalExecutor(tmp_path, kill_grace=0.05) as ex:
            assert ex._supervisor is not None
            assert ex._supervisor.cgroups is None
            for how in ("timeout", "cancel", "sink"):
                with anyio.fail_after(30):
                    await run_until_ready(ex, escapes(token), how)
                assert with_token(token) == []
                (tmp_path / f"{token}-e.pid").unlink(missing_ok=True)
    finally:
        for pid in with_token(token):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)  # started by this test's commands


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_burst_larger_than_the_request_queue(tmp_path: Path) -> None:
    """Forty commands at once, far more than the idle shims: every one runs, the loop runs too."""
    ticks = 0
    done = False

    async def ticker() -> None:
        nonlocal ticks
        while not done:
            ticks += 1
            await anyio.sleep(0.01)

    async with LocalExecutor(tmp_path, kill_grace=0.1) as ex:
        outputs: list[bytes] = []

        async def one(n: int) -> None:
            output = await ex.exec_cmd(Command.shell(f"sleep 0.2; echo {n}"))
            outputs.append(output.stdout)

        with anyio.fail_after(60):
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(ticker)
                async with anyio.create_task_group() as burst:
                    for n in range(40):
                        burst.start_soon(one, n)
                done = True
    assert sorted(outputs) == sorted(f"{n}\n".encode() for n in range(40))
    assert ticks > 5


async def test_a_killed_supervisor_leaves_no_cgroup_folder(tmp_path: Path) -> None:
    """The folders of a supervisor killed before it could remove them go with its replacement."""
    async with LocalExecutor(tmp_path, kill_grace=0.1) as ex:
        supervisor = ex._supervisor
        assert supervisor is not None
        if supervisor.cgroups is None:
            pytest.skip("no cgroup can be made here")
        first = supervisor._pid
        assert first is not None
        folders = [supervisor.cgroups.get("v2"), *supervisor.cgroups.get("v1", {}).values()]
        with anyio.fail_after(10):
            await ex.exec_cmd(Command.exec(["true"]))
            os.kill(first, signal.SIGKILL)
            while alive(first):
                await anyio.sleep(0.01)
            await ex.exec_cmd(Command.exec(["true"]))
        assert supervisor._pid != first
        assert [folder for folder in folders if folder and os.path.exists(folder)] == []


async def test_a_killed_supervisors_stuck_shims_are_ended_and_their_folders_go(
    tmp_path: Path,
) -> None:
    """Shims that cannot end on their own (stopped) when their supervisor dies are killed.

    The new supervisor's start kills what is left in the dead one's cgroup
    folders and removes them: no shim outlives it, no folder is left.
    """
    async with LocalExecutor(tmp_path, kill_grace=0.1) as ex:
        supervisor = ex._supervisor
        assert supervisor is not None
        if supervisor.cgroups is None:
            pytest.skip("no cgroup can be made here")
        await ex.exec_cmd(Command.exec(["true"]))
        first = supervisor._pid
        assert first is not None
        folders = [supervisor.cgroups.get("v2"), *supervisor.cgroups.get("v1", {}).values()]
        names = {os.path.basename(folder) for folder in folders if folder}

        def inside(shim: psutil.Process) -> bool:
            """Whether `shim` is in one of the executor's folders (an idle one, made ready)."""
            try:
                with open(f"/proc/{shim.pid}/cgroup") as file:
                    return any(name in file.read() for name in names)
            except OSError:
                return False

        # Only shims in the folders: one between its cgroups (left after a
        # command, not yet in the next one's) is not what this is about.
        shims: list[psutil.Process] = []
        with anyio.fail_after(10):
            while not shims:
                shims = [shim for shim in psutil.Process(first).children() if inside(shim)]
                await anyio.sleep(0.01)
        for shim in shims:
            shim.send_signal(signal.SIGSTOP)
        try:
            assert all(inside(shim) for shim in shims)
            os.kill(first, signal.SIGKILL)
            with anyio.fail_after(10):
                while alive(first):
                    await anyio.sleep(0.01)
                assert (await ex.exec_cmd(Command.shell("echo again"))).text() == "again\n"
            assert supervisor._pid != first
            assert [folder for folder in folders if folder and os.path.exists(folder)] == []
            with anyio.fail_after(10):
                while any(alive(shim.pid) for shim in shims):
                    await anyio.sleep(0.01)
        finally:
            for shim in shims:  # ours, by pid: none is left stopped if this failed
                with contextlib.suppress(psutil.NoSuchProcess):
                    shim.kill()


async def _outcome(call: Awaitable[object]) -> object:
    """What `call` returned, or the `CommandError` it raised."""
    try:
        return await call
    except CommandError as error:
        return error


async def test_the_shim_keeps_the_timeout_and_its_kill_is_still_a_timeout(tmp_path: Path) -> None:
    """The shim ends the tree at the deadline itself; a leader that exits on SIGTERM is timed out.

    The event loop is held up (a blocking task) from the command's start
    until past the shim's deadline, so the executor's own timer starts late
    and the leader's status (exit 3, from its trap) reaches the executor
    first: it must still raise `TimedOut`, not `NonZeroExit`, and end the
    rest of the tree (the background `sleep`) at once, not after the grace.
    """
    started_file = tmp_path / "started"
    script = "echo $$ > started; trap 'exit 3' TERM; sleep 30 & echo $! > bg.pid; wait"

    async def hold_the_loop() -> None:
        until = time.monotonic() + 5
        while not started_file.exists() and time.monotonic() < until:
            time.sleep(0.001)  # noqa: ASYNC251 (blocks the loop on purpose)
        time.sleep(0.5)  # noqa: ASYNC251 (past the 0.3 s deadline, still blocking)

    async with LocalExecutor(tmp_path, kill_grace=20) as ex:
        await ex.exec_cmd(Command.shell("true"))
        for _ in range(3):
            started_file.unlink(missing_ok=True)
            began = time.monotonic()
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(hold_the_loop)
                outcome = await _outcome(ex.exec_cmd(Command.shell(script).with_timeout(0.3)))
            assert time.monotonic() - began < 10
            assert isinstance(outcome, TimedOut), outcome
            assert outcome.output.exit_code == 3
            assert not alive(int((tmp_path / "bg.pid").read_text()))


async def test_a_start_racing_the_close_does_not_start_a_supervisor_again(tmp_path: Path) -> None:
    """Once closed, a supervisor is not brought up again by a start that retries.

    A start whose request met a supervisor shutting down retries with a new
    one; after `aclose` that one would run its command with nothing left to
    end it (a 30 s `sleep` outliving the executor). It fails instead.
    """
    from executor import ExecutorError
    from executor._local.process import Supervisor

    supervisor = Supervisor()
    supervisor.start()
    await supervisor.aclose(0.1)
    before = {child.pid for child in psutil.Process().children()}
    with pytest.raises(ExecutorError, match="closed"):
        await supervisor.spawn(
            ["sleep", "30"], cwd=str(tmp_path), env=dict(os.environ), tag="t", stdin=False
        )
    assert {child.pid for child in psutil.Process().children()} <= before


async def test_each_command_starts_with_its_own_environment(tmp_path: Path) -> None:
    """A command's environment is its own, whatever the one before had; its tree's tag once.

    The executor encodes an environment once and keeps it for the commands
    that share it: one that differs is encoded again, and the tag (which
    differs for every command) is never taken from the environment given.
    """
    show = Command.exec(["env"])
    async with LocalExecutor(tmp_path) as ex:
        seen = []
        for value in ("one", "two", "two", "one"):
            command = show.with_env({"EXECUTOR_TEST_VALUE": value, TREE_VARIABLE: "forged"})
            seen.append((await ex.exec_cmd(command)).stdout.decode().splitlines())
    assert [
        [line for line in lines if line.startswith("EXECUTOR_TEST_VALUE=")] for lines in seen
    ] == [[f"EXECUTOR_TEST_VALUE={value}"] for value in ("one", "two", "two", "one")]
    tags = [[line for line in lines if line.startswith(f"{TREE_VARIABLE}=")] for lines in seen]
    assert all(len(found) == 1 and "forged" not in found[0] for found in tags)
    assert len({found[0] for found in tags}) == len(tags)


async def test_a_program_is_found_on_the_commands_own_path(tmp_path: Path) -> None:
    """A bare program name is looked for along the command's PATH, not the executor's."""
    tools = tmp_path / "tools"
    tools.mkdir()
    script = tools / "say-found"
    script.write_text("#!/bin/sh\necho found\n")
    script.chmod(0o755)
    async with LocalExecutor(tmp_path) as ex:
        found = await ex.exec_cmd(
            Command.exec(["say-found"]).with_env({"PATH": f"/nowhere:{tools}:/bin"})
        )
        with pytest.raises(CommandError) as caught:
            await ex.exec_cmd(Command.exec(["say-found"]))
    assert found.stdout == b"found\n"
    assert caught.value.output.exit_code == 127


async def test_a_start_not_waited_for_is_reported_once_with_its_pid(tmp_path: Path) -> None:
    """A run's start (`wait=False`) gets one report from its shim: the status, with the pid.

    The shim sends no start report then, so the executor's process wakes once
    for a short command, not twice; the pid still comes, and is the
    command's own (it prints it). Then the socket ends, with the tree.
    """
    import struct

    from executor._local.process import Supervisor

    supervisor = Supervisor()
    try:
        spawned = await supervisor.spawn(
            ["sh", "-c", "echo $$"],
            cwd=str(tmp_path),
            env=dict(os.environ),
            tag="t",
            stdin=False,
            wait=False,
        )
        assert spawned.pid == 0  # not known until the report
        control = spawned.status
        assert control is not None
        reports = []
        with anyio.fail_after(10):
            while True:
                await anyio.wait_readable(control)
                report = os.read(control, 4096)
                if not report:
                    break
                reports.append(report)
            await anyio.wait_readable(spawned.stdout)
        printed = int(os.read(spawned.stdout, 100))
        assert [report[:1] for report in reports] == [b"S"]
        status, _, timed_out, pid = struct.unpack("=iq?i", reports[0][1:18])
        assert (os.waitstatus_to_exitcode(status), timed_out, pid) == (0, False, printed)
        spawned.close()
    finally:
        await supervisor.aclose(0.1)
