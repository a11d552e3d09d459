"""LocalExecutor: the contract, and what only a local process tree can show.

The rules of one command's run that every backend keeps (last words, the drain
period, the cap) are `RunContract`'s, run on every backend in test_lifecycle.py.
"""

from __future__ import annotations

import fcntl
import functools
import os
import random
import signal
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import anyio
import anyio.lowlevel
import pytest
from conftest import alive
from hypothesis import HealthCheck, given, settings, strategies as st

from executor import (
    Chunk,
    Command,
    ExecutorError,
    LocalExecutor,
    NonZeroExit,
    TimedOut,
)
from executor._core.commands import Env
from executor.testing import ExecutorContract, LocalFixtures

pytestmark = pytest.mark.anyio


class TestLocalContract(ExecutorContract, LocalFixtures):
    """The shared contract, against a LocalExecutor."""


async def read_pids(folder: Path, *names: str, timeout: float = 5) -> list[int]:
    """Wait for each pid file to hold a pid, and return them."""
    pids = []
    with anyio.fail_after(timeout):
        for name in names:
            path = folder / name
            while not (path.exists() and path.read_text().strip()):
                await anyio.sleep(0.01)
            pids.append(int(path.read_text()))
    return pids


async def wait_dead(pids: list[int], timeout: float = 5) -> None:
    """Wait until none of `pids` is alive; fail naming the survivors."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not any(map(alive, pids)):
            return
        await anyio.sleep(0.01)
    raise AssertionError(f"still running: {[p for p in pids if alive(p)]}")


# A daemon that double-forks and calls setsid: re-parented to init, outside the
# group and session, found again only by the tag it inherits.
DAEMON = textwrap.dedent(
    """
    import os, sys, time
    if os.fork():
        os._exit(0)
    os.setsid()
    if os.fork():
        os._exit(0)
    with open(sys.argv[1], "w") as f:
        f.write(str(os.getpid()))
    time.sleep(60)
    """
)


async def test_timeout_kills_the_whole_tree(ex: LocalExecutor, tmp_path: Path) -> None:
    """After a timeout, a background sleep, a setsid escapee, a TERM-ignorer and a daemon die."""
    (tmp_path / "daemon.py").write_text(DAEMON)
    script = f"""
        sleep 60 & echo $! > bg.pid
        setsid sh -c 'echo $$ > escapee.pid; exec sleep 60' &
        sh -c 'trap "" TERM; echo $$ > stubborn.pid; while :; do sleep 0.05; done' &
        {sys.executable} daemon.py daemon.pid
        sleep 60
    """
    with pytest.raises(TimedOut):
        await ex.exec_cmd(Command.shell(script).with_timeout(1.5))
    pids = await read_pids(tmp_path, "bg.pid", "escapee.pid", "stubborn.pid", "daemon.pid")
    assert not [pid for pid in pids if alive(pid)]


async def test_cancellation_kills_the_tree(ex: LocalExecutor, tmp_path: Path) -> None:
    """Cancelling the awaiting task kills the command's tree before the cancellation goes on."""
    script = "setsid sleep 60 & echo $! > child.pid; sleep 60 & echo $! > bg.pid; wait"
    scope = anyio.CancelScope()

    async def run() -> None:
        with scope:
            await ex.exec_cmd(Command.shell(script))

    async with anyio.create_task_group() as group:
        group.start_soon(run)
        # Cancelled once the tree is there, however long a loaded machine takes to start it.
        pids = await read_pids(tmp_path, "child.pid", "bg.pid", timeout=30)
        scope.cancel()
    assert scope.cancelled_caught
    assert not [pid for pid in pids if alive(pid)]


async def test_failing_sink_kills_the_tree(ex: LocalExecutor, tmp_path: Path) -> None:
    """A sink that raises stops the command: its processes are gone when the error arrives."""

    def sink(chunk: Chunk) -> None:
        raise RuntimeError("sink failed")

    with pytest.raises(RuntimeError, match="sink failed"):
        await ex.exec_cmd_streaming(
            Command.shell("sleep 60 & echo $! > bg.pid; echo go; sleep 60"), sink
        )
    (pid,) = await read_pids(tmp_path, "bg.pid")
    assert not alive(pid)


async def test_term_grace_lets_the_command_speak(tmp_path: Path) -> None:
    """A command told to stop can print its last words during the grace period."""
    async with LocalExecutor(tmp_path, kill_grace=2) as ex:
        script = "trap 'echo got-term; exit 0' TERM; echo ready; sleep 60 & wait"
        with pytest.raises(TimedOut) as caught:
            await ex.exec_cmd(Command.shell(script).with_timeout(0.5))
    assert caught.value.output.stdout == b"ready\ngot-term\n"


async def test_kill_does_not_wait_out_the_grace(tmp_path: Path) -> None:
    """A tree that dies on SIGTERM is not held for the rest of the grace period."""
    async with LocalExecutor(tmp_path, kill_grace=10) as ex:
        started = time.monotonic()
        with pytest.raises(TimedOut):
            await ex.exec_cmd(Command.shell("sleep 60").with_timeout(0.2))
        assert time.monotonic() - started < 3


async def test_stopped_process_is_killed(ex: LocalExecutor, tmp_path: Path) -> None:
    """A stopped process in the tree dies too."""
    script = "sleep 60 & echo $! > stopped.pid; kill -STOP $!; sleep 60"
    with pytest.raises(TimedOut):
        await ex.exec_cmd(Command.shell(script).with_timeout(0.5))
    (pid,) = await read_pids(tmp_path, "stopped.pid")
    await wait_dead([pid])


async def test_killed_by_signal(ex: LocalExecutor) -> None:
    """A command killed by a signal raises NonZeroExit with 128 + N and the signal."""
    with pytest.raises(NonZeroExit) as caught:
        await ex.exec_cmd(Command.shell("kill -KILL $$"))
    assert caught.value.output.exit_code == 128 + signal.SIGKILL
    assert caught.value.output.signal == signal.SIGKILL
    assert "SIGKILL" in str(caught.value)


async def test_background_job_lives_until_aclose(tmp_path: Path) -> None:
    """A redirected background job keeps running after its command, and dies at aclose()."""
    ex = LocalExecutor(tmp_path)
    await ex.exec_cmd(Command.shell("nohup sleep 60 >/dev/null 2>&1 & echo $! > job.pid"))
    await ex.exec_cmd(Command.shell("sleep 60 & echo $! > held.pid; echo done"))
    pids = await read_pids(tmp_path, "job.pid", "held.pid")
    await anyio.sleep(0.2)
    assert all(map(alive, pids))
    await ex.aclose()
    assert not [pid for pid in pids if alive(pid)]
    with pytest.raises(ExecutorError, match="closed"):
        await ex.exec_cmd(Command.shell("true"))


async def test_aclose_leaves_other_executors_alone(tmp_path: Path) -> None:
    """Closing one executor does not touch the jobs of another."""
    async with LocalExecutor(tmp_path) as keep:
        await keep.exec_cmd(Command.shell("nohup sleep 60 >/dev/null 2>&1 & echo $! > keep.pid"))
        async with LocalExecutor(tmp_path) as other:
            await other.exec_cmd(Command.shell("nohup sleep 60 >/dev/null 2>&1 &"))
        (pid,) = await read_pids(tmp_path, "keep.pid")
        assert alive(pid)


@pytest.mark.parametrize(
    "flood", ["head -c 200M /dev/zero", "yes | head -c 200M", "yes & echo started"]
)
@pytest.mark.parametrize(("sink_time", "most_chunks"), [(0.00025, 8), (0.0011, 3)])
async def test_a_flood_lets_other_tasks_run_while_it_lasts(
    tmp_path: Path, flood: str, sink_time: float, most_chunks: int
) -> None:
    """Output that never lets the pipe run dry still yields to the event loop.

    Reads that never block never reach the event loop on their own: the drain's
    timer, the other reader and every other task of the program would wait for
    the flood to end (under load a chatty background child held the call for
    seconds). A reader lets the loop in at least every millisecond of a flood.
    The sink takes a while with each chunk, so that the pipe stays full and
    every read is a flood's: a quarter of a millisecond lets at most four or
    five chunks go by between two turns of a task looping on checkpoints
    (eight allowed; a machine slower than that only makes them fewer), and
    a millisecond or more gives it a turn after every chunk (at most three:
    the chunk that followed a wait, the next, and one more in the next round).
    A reader that never let the loop in would let hundreds go by.
    """
    since_turn = 0
    most = 0
    chunks = 0
    running = True

    def sink(chunk: Chunk) -> None:
        nonlocal since_turn, chunks
        since_turn += 1
        chunks += 1
        time.sleep(sink_time)

    async def other_task() -> None:
        nonlocal since_turn, most
        while running:
            most = max(most, since_turn)
            since_turn = 0
            await anyio.lowlevel.checkpoint()

    # A drain period long enough for `yes &`'s flood to bring many chunks.
    async with (
        LocalExecutor(tmp_path, drain_timeout=0.5) as ex,
        anyio.create_task_group() as tasks,
    ):
        tasks.start_soon(other_task)
        await ex.exec_cmd_streaming(Command.shell(flood), sink)
        running = False
    assert chunks > 20, "the command did not flood its pipe"
    assert most <= most_chunks, f"{most} chunks went by without the event loop running"


async def test_command_timeout_wins_over_default(tmp_path: Path) -> None:
    """A command's own timeout wins over the default, also when longer."""
    async with LocalExecutor(tmp_path, default_timeout=0.2, kill_grace=0.1) as ex:
        output = await ex.exec_cmd(Command.shell("sleep 0.5; echo ok").with_timeout(5))
        assert output.stdout == b"ok\n"
        with pytest.raises(TimedOut) as caught:
            await ex.exec_cmd(Command.shell("sleep 5"))
        assert caught.value.timeout == 0.2


async def test_environment_layers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Environment: inherited, then env_remove, then envs, then the command's own."""
    monkeypatch.setenv("EX_INHERITED", "inherited")
    monkeypatch.setenv("EX_REMOVED", "removed")
    monkeypatch.setenv("EX_OVERRIDDEN", "inherited")
    async with LocalExecutor(
        tmp_path,
        env_remove=["EX_REMOVED"],
        envs={"EX_OVERRIDDEN": "executor", "EX_SET": "executor"},
    ) as ex:
        cmd = Command.exec(["env"]).with_env({"EX_SET": "command"})
        lines = set((await ex.exec_cmd(cmd)).stdout.decode().splitlines())
    assert "EX_INHERITED=inherited" in lines
    assert not any(line.startswith("EX_REMOVED=") for line in lines)
    assert "EX_OVERRIDDEN=executor" in lines
    assert "EX_SET=command" in lines


async def test_environment_follows_this_process_and_the_executor_from_command_to_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The inherited environment is read anew when it changes, as are the executor's layers."""
    monkeypatch.delenv("EX_LATER", raising=False)
    script = Command.shell('echo "${EX_LATER-unset} ${EX_LAYER-unset}"')
    async with LocalExecutor(tmp_path) as ex:
        seen = [(await ex.exec_cmd(script)).stdout]
        monkeypatch.setenv("EX_LATER", "set")
        seen.append((await ex.exec_cmd(script)).stdout)
        ex.envs = Env({**ex.envs, "EX_LAYER": "layer"})
        seen.append((await ex.exec_cmd(script)).stdout)
        monkeypatch.setenv("EX_LATER", "changed")
        seen.append((await ex.exec_cmd(script)).stdout)
        monkeypatch.delenv("EX_LATER")
        ex.envs = Env()
        seen.append((await ex.exec_cmd(script)).stdout)
        assert "EX_LATER" not in ex.environment()
    assert seen == [
        b"unset unset\n",
        b"set unset\n",
        b"set layer\n",
        b"changed layer\n",
        b"unset unset\n",
    ]


async def test_env_clear(tmp_path: Path) -> None:
    """env_clear starts from nothing but what the executor and the command set."""
    async with LocalExecutor(tmp_path, env_clear=True, envs={"ONLY": "1"}) as ex:
        output = await ex.exec_cmd(Command.exec(["/usr/bin/env"]).with_env({"ALSO": "2"}))
    names = {line.split("=", 1)[0] for line in output.stdout.decode().splitlines()}
    assert names == {"ONLY", "ALSO", "EXECUTOR_PROCESS_TREE"}


async def test_large_output_exact(ex: LocalExecutor) -> None:
    """Several MiB of output arrive exactly, in order."""
    output = await ex.exec_cmd(
        Command.exec(
            [sys.executable, "-c", "import sys; sys.stdout.buffer.write(bytes(range(256)) * 40000)"]
        )
    )
    assert output.stdout == bytes(range(256)) * 40000


async def test_no_file_descriptors_leak(ex: LocalExecutor) -> None:
    """200 commands, failing and succeeding, leave no file descriptor open."""
    for _ in range(3):
        await ex.exec_cmd(Command.shell("echo warm"))
        await ex.exec_cmd(Command.read_file("/etc/hostname"))
    before = len(os.listdir("/proc/self/fd"))
    for i in range(200):
        if i % 4 == 0:
            await ex.exec_cmd(Command.shell("echo x").with_stdin(b"data"))
        elif i % 4 == 1:
            with pytest.raises(NonZeroExit):
                await ex.exec_cmd(Command.shell("exit 1"))
        elif i % 4 == 2:
            with pytest.raises(NonZeroExit):
                await ex.exec_cmd(Command.exec(["no-such-program-xyz"]))
        else:
            with pytest.raises(TimedOut):
                await ex.exec_cmd(Command.shell("sleep 5").with_timeout(0.01))
    assert len(os.listdir("/proc/self/fd")) == before


async def test_concurrent_commands(ex: LocalExecutor) -> None:
    """Many commands at once each get their own output."""
    results: dict[int, bytes] = {}

    async def one(i: int) -> None:
        results[i] = (await ex.exec_cmd(Command.shell(f"sleep 0.1; echo {i}"))).stdout

    async with anyio.create_task_group() as tasks:
        for i in range(100):
            tasks.start_soon(one, i)
    assert results == {i: f"{i}\n".encode() for i in range(100)}


async def test_missing_current_dir(ex: LocalExecutor) -> None:
    """A current_dir that does not exist fails with a message naming it."""
    with pytest.raises(NonZeroExit) as caught:
        await ex.exec_cmd(Command.shell("true").with_current_dir("nowhere"))
    assert "nowhere" in str(caught.value)


async def test_not_executable(ex: LocalExecutor, tmp_path: Path) -> None:
    """A program that is not executable fails with exit code 126."""
    (tmp_path / "script").write_text("echo hi\n")
    with pytest.raises(NonZeroExit) as caught:
        await ex.exec_cmd(Command.exec(["./script"]))
    assert caught.value.output.exit_code == 126


async def test_shebang_refuses_extra_stdin(ex: LocalExecutor) -> None:
    """A #! script cannot also be given stdin, since its body is the stdin."""
    with pytest.raises(ExecutorError, match="stdin"):
        await ex.exec_cmd(Command.shell("#!/bin/sh\ncat").with_stdin("x"))


async def test_read_fifo_does_not_hang(ex: LocalExecutor, tmp_path: Path) -> None:
    """Reading a FIFO fails at once instead of waiting for a writer."""
    os.mkfifo(tmp_path / "pipe")
    with anyio.fail_after(5), pytest.raises(NonZeroExit, match="not a regular file"):
        await ex.exec_cmd(Command.read_file("pipe"))


async def test_write_keeps_mode(ex: LocalExecutor, tmp_path: Path) -> None:
    """Replacing a file keeps its permission bits; a new file gets 0o666 less the umask."""
    script = tmp_path / "run.sh"
    script.write_text("old")
    script.chmod(0o750)
    await ex.exec_cmd(Command.write_file("run.sh", "new"))
    assert stat.S_IMODE(script.stat().st_mode) == 0o750
    assert script.read_text() == "new"
    await ex.exec_cmd(Command.write_file("fresh.txt", "x"))
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE((tmp_path / "fresh.txt").stat().st_mode) == 0o666 & ~umask


async def test_write_replaces_a_symlink_not_its_target(ex: LocalExecutor, tmp_path: Path) -> None:
    """Writing to a symlink replaces the link; the file it pointed to is untouched."""
    target = tmp_path / "target.txt"
    target.write_text("original")
    (tmp_path / "link.txt").symlink_to(target)
    await ex.exec_cmd(Command.write_file("link.txt", "new"))
    assert target.read_text() == "original"
    assert not (tmp_path / "link.txt").is_symlink()
    assert (tmp_path / "link.txt").read_text() == "new"


async def test_write_leaves_no_temporary_files(ex: LocalExecutor, tmp_path: Path) -> None:
    """A write, and a write that fails, leave nothing but the file."""
    await ex.exec_cmd(Command.write_file("a.txt", "x"))
    (tmp_path / "dir").mkdir()
    with pytest.raises(NonZeroExit):
        await ex.exec_cmd(Command.write_file("dir", "x"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt", "dir"]


WRITER = textwrap.dedent(
    """
    import sys, anyio
    from executor import Command, LocalExecutor

    async def main() -> None:
        ex = LocalExecutor(sys.argv[1])
        size = int(sys.argv[2])
        print("ready", flush=True)
        for i in range(10**6):
            await ex.exec_cmd(Command.write_file("data.bin", (b"AB"[i % 2 : i % 2 + 1]) * size))

    anyio.run(main)
    """
)


@pytest.mark.slow
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_killed_writer_leaves_whole_file(tmp_path: Path) -> None:
    """Killing a process in the middle of write_file leaves the old or the new content, whole."""
    size = 4 << 20
    (tmp_path / "data.bin").write_bytes(b"A" * size)
    rng = random.Random(1234)
    interrupted = 0
    for _ in range(8):
        writer = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(tmp_path), str(size)], stdout=subprocess.PIPE
        )
        assert writer.stdout is not None
        assert writer.stdout.readline() == b"ready\n"
        await anyio.sleep(rng.uniform(0.05, 0.4))
        writer.kill()
        writer.wait()
        writer.stdout.close()
        data = (tmp_path / "data.bin").read_bytes()
        assert len(data) == size
        assert data in (b"A" * size, b"B" * size)
        # A temporary file left behind shows this kill landed inside a write.
        leftovers = [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
        interrupted += bool(leftovers)
        for leftover in leftovers:
            leftover.unlink()
    assert interrupted, "no kill landed inside a write; the test proved nothing"


# --- property tests -----------------------------------------------------------------


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.binary(max_size=1 << 16))
async def test_bytes_round_trip_through_files(ex: LocalExecutor, data: bytes) -> None:
    """Any bytes written with write_file come back the same from read_file and from `cat`."""
    await ex.exec_cmd(Command.write_file("blob", data))
    assert (await ex.exec_cmd(Command.read_file("blob"))).stdout == data
    assert (await ex.exec_cmd(Command.exec(["cat", "blob"]))).stdout == data


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.binary(max_size=1 << 16))
async def test_bytes_round_trip_through_stdin(ex: LocalExecutor, data: bytes) -> None:
    """Any bytes given as stdin come back the same through `cat`."""
    assert (await ex.exec_cmd(Command.exec(["cat"]).with_stdin(data))).stdout == data


SPILL_GIB = """
import hashlib, resource, sys
resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
import anyio
from executor import Command, LocalExecutor

async def main() -> None:
    streamed = hashlib.sha256()
    size = 0

    def sink(chunk: object) -> None:
        nonlocal size
        streamed.update(chunk.data)  # type: ignore[attr-defined]
        size += len(chunk.data)  # type: ignore[attr-defined]

    # 1 GiB of output, in 1 MiB writes, through 64 KiB pipes or larger.
    script = "head -c 1073741824 /dev/urandom"
    async with LocalExecutor(sys.argv[1], output_limit=1 << 20, spill=sys.argv[1]) as ex:
        out = await ex.exec_cmd_streaming(Command.shell(script), sink)
    assert size == 1 << 30 and out.elided is not None and out.elided.spill is not None
    spilled = hashlib.sha256()
    with open(out.elided.spill, "rb") as f:
        while block := f.read(1 << 20):
            spilled.update(block)
    assert spilled.hexdigest() == streamed.hexdigest()
    assert len(out.stdout) + out.elided.bytes == 1 << 30
    print("ok")

anyio.run(main)
"""


@pytest.mark.slow
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_gib_of_output_spills_whole_in_bounded_memory(tmp_path: Path) -> None:
    """1 GiB of output, a 1 MiB cap: the spill file has the stream's sha256, in 1 GiB of memory."""
    with anyio.fail_after(120):
        result = await anyio.run_process(
            [sys.executable, "-c", SPILL_GIB, str(tmp_path)], check=False
        )
    assert result.returncode == 0, result.stderr.decode()[-600:]
    assert result.stdout == b"ok\n"


PIPE_SIZE_OF_STDOUT = "import fcntl, sys; print(fcntl.fcntl(1, 1032))"  # F_GETPIPE_SZ


async def test_a_flooding_pipe_is_enlarged_once_it_floods(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without root's enlargement at the start (a user's pipes), a pipe grows once it floods.

    A quiet command's stdout stays at the kernel's 64 KiB (a user's pipe
    budget is spent only where it pays); one that fills it gets a pipe of
    1 MiB, and every byte still arrives in order.
    """
    import executor._local.process as process

    monkeypatch.setattr(process, "_enlarge_pipes", False)
    flood = f"import os; os.write(1, bytes(range(256)) * 16384); {PIPE_SIZE_OF_STDOUT}"
    seen: list[bytes] = []
    async with LocalExecutor(tmp_path) as ex:
        quiet = await ex.exec_cmd(Command.exec([sys.executable, "-c", PIPE_SIZE_OF_STDOUT]))
        flooded = await ex.exec_cmd_streaming(
            Command.exec([sys.executable, "-c", flood]), lambda chunk: seen.append(chunk.data)
        )
    assert quiet.stdout == b"65536\n"
    assert flooded.exit_code == 0
    data = b"".join(seen)
    assert data[: 4 << 20] == bytes(range(256)) * 16384
    assert data[4 << 20 :] == b"1048576\n"
    assert max(len(block) for block in seen) > 1 << 16


def test_the_reader_gathers_the_writes_a_flood_brings_while_it_reads() -> None:
    """A read that brings a block or more is followed by more, until the buffer or the pipe is done.

    A reader racing its producer finds a write or two in the pipe at each
    read; a pipe in packet mode (`O_DIRECT`) gives one write per read
    whatever it holds, so it shows the same steps without the race: 80
    writes of 4 KiB come as one chunk of 256 KiB (the buffer) and one of 64
    KiB, in order, and a short write (a line) is taken alone.
    """
    from executor._local.process import _GATHER, _gather

    read_end, write_end = os.pipe2(os.O_DIRECT | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        fcntl.fcntl(read_end, 1031, 1 << 20)  # F_SETPIPE_SZ: 256 packets
        blocks = [bytes([n]) * 4096 for n in range(80)]
        for block in blocks:
            os.write(write_end, block)
        view = memoryview(bytearray(_GATHER))
        assert _gather(read_end, view) == (_GATHER, False)
        assert bytes(view) == b"".join(blocks[:64])
        assert _gather(read_end, view) == (16 * 4096, False)
        assert bytes(view[: 16 * 4096]) == b"".join(blocks[64:])
        with pytest.raises(BlockingIOError):
            _gather(read_end, view)
        os.write(write_end, b"line\n")
        os.write(write_end, b"next\n")
        assert _gather(read_end, view) == (5, False)
        assert bytes(view[:5]) == b"line\n"
        assert _gather(read_end, view) == (5, False)
        assert bytes(view[:5]) == b"next\n"
        os.close(write_end)
        write_end = -1
        assert _gather(read_end, view) == (0, True)
    finally:
        os.close(read_end)
        if write_end >= 0:
            os.close(write_end)


async def test_a_flood_that_comes_while_the_sink_is_busy_arrives_in_large_chunks(
    tmp_path: Path,
) -> None:
    """`head -c` writes 8 KiB at a time; what piles up while the sink works comes as one chunk.

    The sink takes a millisecond a chunk, in which the producer fills the
    pipe (enlarged to 1 MiB as it floods) with dozens of writes: each next
    chunk is what the pipe holds, up to 1 MiB, not a write at a time, and
    every byte is there.
    """
    size = 64 << 20
    seen: list[int] = []

    def sink(chunk: Chunk) -> None:
        seen.append(len(chunk.data))
        time.sleep(0.001)

    async with LocalExecutor(tmp_path) as ex:
        output = await ex.exec_cmd_streaming(
            Command.exec(["head", "-c", str(size), "/dev/zero"]), sink
        )
    assert output.exit_code == 0
    assert sum(seen) == size
    assert len(seen) <= size // (64 << 10), f"{len(seen)} chunks, {size // len(seen)} bytes each"
    assert max(seen) <= 1 << 20


async def test_quiet_output_is_never_held_to_be_gathered(tmp_path: Path) -> None:
    """Lines written one at a time each reach the sink before the next is written."""
    arrived: list[bytes] = []
    script = "for i in 1 2 3 4 5 6 7 8; do echo line $i; sleep 0.05; done"
    async with LocalExecutor(tmp_path) as ex:
        output = await ex.exec_cmd_streaming(
            Command.shell(script), lambda chunk: arrived.append(chunk.data)
        )
    assert output.stdout == b"".join(f"line {i}\n".encode() for i in range(1, 9))
    assert len(arrived) == 8


async def test_a_flood_that_pauses_is_read_at_once(tmp_path: Path) -> None:
    """Gathering a flood never holds its bytes back: what came before a pause is read at once."""
    size = 300_000
    arrived: list[float] = []
    total = 0

    def sink(chunk: Chunk) -> None:
        nonlocal total
        total += len(chunk.data)
        if total >= size and not arrived:
            arrived.append(time.monotonic())

    async with LocalExecutor(tmp_path) as ex:
        started = time.monotonic()
        output = await ex.exec_cmd_streaming(
            Command.shell(f"head -c {size} /dev/zero; sleep 2; echo done"), sink
        )
    assert output.exit_code == 0
    assert total == size + len("done\n")
    assert arrived
    assert arrived[0] - started < 1.0, "the flood's bytes waited for the pause to end"


async def test_a_start_that_fails_is_the_command_s_exit_and_reaches_the_sink(
    tmp_path: Path,
) -> None:
    """No such program, a file that is no program, no such folder: exits 127, 126 and 1.

    The run is under way (its readers started) when the shim reports the
    failure; the sink still gets the message, stdin given or not, and the
    executor runs the next command as if nothing happened.
    """
    script = tmp_path / "not-executable.sh"
    script.write_text("echo never\n")
    cases = [
        (Command.exec(["no-such-program-xyz"]), 127, "no-such-program-xyz: command not found"),
        (Command.exec([str(script)]).with_stdin(b"x" * 100_000), 126, "Permission denied"),
        (Command.shell("true").with_current_dir("no/such/folder"), 1, "cannot run in"),
    ]
    async with LocalExecutor(tmp_path) as ex:
        for cmd, code, message in cases:
            seen: list[bytes] = []
            with anyio.fail_after(10), pytest.raises(NonZeroExit) as caught:
                await ex.exec_cmd_streaming(cmd, functools.partial(_keep, seen))
            assert caught.value.output.exit_code == code
            assert message in caught.value.output.stderr.decode()
            assert message in b"".join(seen).decode()
        assert (await ex.exec_cmd(Command.shell("echo ok"))).stdout == b"ok\n"


def _keep(seen: list[bytes], chunk: Chunk) -> None:
    seen.append(chunk.data)


async def test_the_executor_s_own_folder_gone_is_its_error(tmp_path: Path) -> None:
    """A workdir removed under the executor is the executor's failure, not the command's exit."""
    workdir = tmp_path / "work"
    workdir.mkdir()
    async with LocalExecutor(workdir) as ex:
        workdir.rmdir()
        with pytest.raises(ExecutorError, match="cannot run in"):
            await ex.exec_cmd(Command.shell("true"))
