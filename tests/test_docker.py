"""DockerExecutor: the contract inside a real container, and what only a container can show.

Needs a Docker engine and the test images (see `docker_engine`); without them
the tests skip, and with `EXECUTOR_REQUIRE_DOCKER=1` (set by CI) they fail.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import anyio
import anyio.abc
import pytest
from docker_engine import (
    BUSYBOX_IMAGE,
    PYTHON_IMAGE,
    container_processes,
    docker,
    inspect,
    labelled_container,
    our_containers,
    require_engine,
)

from executor import (
    Chunk,
    Command,
    ExecutorError,
    NonZeroExit,
    TimedOut,
    ToolExecutor,
)
from executor._docker.container import LABEL_MANAGED, collect_garbage
from executor._docker.executor import DockerExecutor
from executor.testing import ExecutorContract, ReadOnlyContract, SessionContract, read_until

pytestmark = pytest.mark.anyio


@pytest.fixture(autouse=True)
def _engine_and_no_container_left() -> Iterator[None]:
    """Skip without an engine; fail a test that leaves one of its containers behind."""
    require_engine()
    before = set(our_containers())
    yield
    left = set(our_containers()) - before
    for container in left:
        docker("rm", "-f", container, check=False)
    assert not left, f"containers left behind: {sorted(left)}"


@pytest.fixture(scope="module")
def shared_container() -> Iterator[str]:
    """One container of the Python image for the contract tests, labelled as ours."""
    with labelled_container(PYTHON_IMAGE) as container:
        yield container


class DockerFixtures:
    """An empty workdir of its own per test, in one shared container."""

    @pytest.fixture
    async def executor(self, shared_container: str) -> AsyncIterator[ToolExecutor]:
        """A DockerExecutor on the shared container, in a new folder."""
        workdir = f"/workspace/{uuid.uuid4().hex}"
        async with DockerExecutor(
            container=shared_container, workdir=workdir, kill_grace=0.2
        ) as executor:
            yield executor


class TestDockerContract(ExecutorContract, DockerFixtures):
    """The shared contract, against a DockerExecutor that runs commands through its helper."""

    async def test_the_helper_runs_the_commands(self, executor: ToolExecutor) -> None:
        """On an image with Python the commands are the helper's children, not engine execs."""
        assert isinstance(executor, DockerExecutor)
        output = await executor.exec_cmd(Command.shell("cat /proc/$PPID/cmdline"))
        assert b"in-container helper" in output.stdout


class TestDockerExecContract(ExecutorContract):
    """The shared contract, against a DockerExecutor that runs each command as an engine exec."""

    @pytest.fixture
    async def executor(self, shared_container: str) -> AsyncIterator[ToolExecutor]:
        """A DockerExecutor without its helper, on the shared container, in a new folder."""
        workdir = f"/workspace/{uuid.uuid4().hex}"
        async with DockerExecutor(
            container=shared_container, workdir=workdir, kill_grace=0.2, helper=False
        ) as executor:
            yield executor


class TestDockerSessions(SessionContract, DockerFixtures):
    """The session contract, through the in-container helper."""


class TestDockerExecSessions(SessionContract):
    """The session contract, through engine execs and exec attach (busybox: no helper)."""

    @pytest.fixture
    async def executor(self) -> AsyncIterator[ToolExecutor]:
        """A DockerExecutor on a fresh busybox container."""
        async with DockerExecutor(BUSYBOX_IMAGE, kill_grace=0.2) as executor:
            yield executor


class TestDockerReadOnly(ReadOnlyContract):
    """ReadOnly over a DockerExecutor refuses writes and shell commands."""

    @pytest.fixture
    async def writer(self, shared_container: str) -> AsyncIterator[ToolExecutor]:
        """An executor on the shared container, in a new folder, which may write."""
        workdir = f"/workspace/{uuid.uuid4().hex}"
        async with DockerExecutor(container=shared_container, workdir=workdir) as executor:
            yield executor

    @pytest.fixture
    def executor(self, writer: ToolExecutor) -> ToolExecutor:
        """The same container, read-only."""
        return writer.read_only()


@pytest.fixture
async def ex() -> AsyncIterator[DockerExecutor]:
    """A DockerExecutor on a fresh busybox container."""
    async with DockerExecutor(BUSYBOX_IMAGE, kill_grace=0.2) as executor:
        yield executor


def survivors(ex: DockerExecutor) -> list[str]:
    """What runs in the container besides its init and keep-alive loop."""
    assert ex.container_id is not None
    return [
        line
        for line in container_processes(ex.container_id)
        if "docker-init" not in line
        and "while :; do sleep 3600" not in line
        and not line.endswith("sleep 3600")
        and "in-container helper" not in line
        and "the guard of an executor's trees" not in line
    ]


# --- the container ------------------------------------------------------------


async def test_container_settings() -> None:
    """A new container has an init, network none, the limits, labels, user and workdir."""
    async with DockerExecutor(
        BUSYBOX_IMAGE,
        memory="64m",
        cpus=0.5,
        pids_limit=64,
        user="65534:65534",
        workdir="/home/agent",
        labels={"purpose": "test"},
    ) as ex:
        assert ex.container_id is not None
        info = inspect(ex.container_id)
        host = info["HostConfig"]
        config = info["Config"]
        assert isinstance(host, dict)
        assert isinstance(config, dict)
        assert host["Init"] is True
        assert host["NetworkMode"] == "none"
        assert host["Memory"] == 64 << 20
        assert host["NanoCpus"] == 500_000_000
        assert host["PidsLimit"] == 64
        assert config["Labels"][LABEL_MANAGED] == "1"
        assert config["Labels"]["purpose"] == "test"
        output = await ex.exec_cmd(Command.shell("id -u; pwd; touch mine && ls -n mine"))
        lines = output.stdout.decode().splitlines()
        assert lines[:2] == ["65534", "/home/agent"]
        assert " 65534 " in lines[2]
        # Written through the archive endpoint, owned by the same user.
        await ex.exec_cmd(Command.write_file("notes.txt", "hi"))
        listing = await ex.exec_cmd(Command.shell("ls -n notes.txt"))
        assert " 65534 " in listing.stdout.decode()
        # No network but loopback.
        interfaces = await ex.exec_cmd(Command.shell("ls /sys/class/net"))
        assert interfaces.stdout.split() == [b"lo"]
    assert ex.container_id not in our_containers()


async def test_aclose_removes_the_container() -> None:
    """aclose() removes the container it made; keep=True leaves it."""
    async with DockerExecutor(BUSYBOX_IMAGE) as ex:
        first = ex.container_id
        assert first in our_containers()
    assert first not in our_containers()
    async with DockerExecutor(BUSYBOX_IMAGE, keep=True) as kept:
        second = kept.container_id
    assert second is not None
    try:
        assert second in our_containers()
    finally:
        docker("rm", "-f", second)


async def test_existing_container_is_used_not_removed() -> None:
    """An executor on a running container runs there, and aclose() only kills our processes."""
    async with DockerExecutor(BUSYBOX_IMAGE, keep=True) as owner:
        name = owner.container_id
    assert name is not None
    try:
        async with DockerExecutor(container=name, kill_grace=0.2) as ex:
            output = await ex.exec_cmd(Command.shell("echo in-there; sleep 60 >/dev/null 2>&1 &"))
            assert output.stdout == b"in-there\n"
            assert any("sleep 60" in line for line in survivors(ex))
        assert name in our_containers()
        assert not any("sleep 60" in line for line in container_processes(name))
    finally:
        docker("rm", "-f", name)


async def test_copy_in_and_mount(tmp_path: Path) -> None:
    """copy_in copies a host folder into the workdir; mount binds one there."""
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.py").write_text("print(1)\n")
    async with DockerExecutor(BUSYBOX_IMAGE, copy_in=tmp_path) as ex:
        assert (await ex.exec_cmd(Command.read_file("src/a.py"))).stdout == b"print(1)\n"
        await ex.exec_cmd(Command.write_file("src/a.py", "changed\n"))
    assert (tmp_path / "src" / "a.py").read_text() == "print(1)\n"
    async with DockerExecutor(BUSYBOX_IMAGE, mount=tmp_path) as ex:
        await ex.exec_cmd(Command.write_file("src/b.txt", "from the container\n"))
        assert [f.path async for f in ex.stream_files("src", ["py"])] == ["src/a.py"]
    assert (tmp_path / "src" / "b.txt").read_text() == "from the container\n"


async def test_bad_arguments_are_refused() -> None:
    """Contradictory or malformed settings fail at construction, saying what is wrong."""
    with pytest.raises(ValueError, match="either image"):
        DockerExecutor()
    with pytest.raises(ValueError, match="either image"):
        DockerExecutor(BUSYBOX_IMAGE, container="x")
    with pytest.raises(ValueError, match="absolute"):
        DockerExecutor(BUSYBOX_IMAGE, workdir="relative")
    with pytest.raises(ValueError, match="memory"):
        DockerExecutor(BUSYBOX_IMAGE, memory="lots")
    with pytest.raises(ValueError, match="new container"):
        DockerExecutor(container="x", memory="1g")


async def test_missing_image_and_container_are_executor_errors() -> None:
    """A missing image or container is the executor's failure, with the engine's message."""
    with pytest.raises(ExecutorError, match="executor-test/no-such-image"):
        async with DockerExecutor("executor-test/no-such-image"):
            pass
    with pytest.raises(ExecutorError, match="no-such-container"):
        async with DockerExecutor(container="no-such-container-xyz"):
            pass


async def test_unreachable_engine() -> None:
    """An engine that is not there is an ExecutorError naming the address."""
    ex = DockerExecutor(BUSYBOX_IMAGE, docker_host="unix:///nonexistent/docker.sock")
    with pytest.raises(ExecutorError, match=r"/nonexistent/docker\.sock"):
        await ex.exec_cmd(Command.shell("true"))
    await ex.aclose()
    with pytest.raises(ExecutorError, match="DOCKER_HOST"):
        DockerExecutor(BUSYBOX_IMAGE, docker_host="ftp://x")


async def test_closed_executor_refuses() -> None:
    """After aclose() commands are refused."""
    ex = DockerExecutor(BUSYBOX_IMAGE)
    await ex.aclose()
    with pytest.raises(ExecutorError, match="closed"):
        await ex.exec_cmd(Command.shell("true"))


# --- killing --------------------------------------------------------------------

TREE = """
sleep 60 &
setsid sh -c 'exec sleep 61' &
sh -c 'trap "" TERM; while :; do sleep 0.05; done' &
sh -c 'sleep 62 & exit' &
echo started
sleep 63
"""


async def test_timeout_leaves_no_survivor(ex: DockerExecutor) -> None:
    """After a timeout docker top shows nothing of the command: no escapee, no TERM-ignorer."""
    with pytest.raises(TimedOut) as caught:
        await ex.exec_cmd(Command.shell(TREE).with_timeout(1.5))
    assert caught.value.output.stdout == b"started\n"
    assert survivors(ex) == []


async def test_timeout_through_the_helper_leaves_no_survivor() -> None:
    """Through the helper too, a timeout leaves nothing of the command in docker top."""
    async with DockerExecutor(PYTHON_IMAGE, helper=True, kill_grace=0.2) as ex:
        with pytest.raises(TimedOut) as caught:
            await ex.exec_cmd(Command.shell(TREE).with_timeout(1.5))
        assert caught.value.output.stdout == b"started\n"
        assert survivors(ex) == []
        with anyio.move_on_after(1.0) as scope:
            await ex.exec_cmd(Command.shell(TREE))
        assert scope.cancelled_caught
        assert survivors(ex) == []


async def test_cancellation_kills_the_tree(ex: DockerExecutor) -> None:
    """Cancelling the awaiting task kills the command's tree in the container first."""
    with anyio.move_on_after(1.0) as scope:
        await ex.exec_cmd(Command.shell(TREE))
    assert scope.cancelled_caught
    assert survivors(ex) == []


async def test_a_cancel_as_the_exec_starts_kills_without_waiting_for_the_pid_line(
    ex: DockerExecutor,
) -> None:
    """A caller that gives up (or a timeout) as the engine starts the exec: no 5 s wait.

    The run's reader was cancelled with the caller before the wrapper's pid
    line came, nobody read it, and the kill waited its whole 5 s for it
    before it looked for the tree. The kill now reads the line itself,
    unless the run's reader (alive on a timeout) has read it meanwhile.
    """
    slowest = 0.0
    for delay in (0.0, 0.005, 0.01, 0.02, 0.03, 0.04, 0.05, 0.07, 0.1) * 2:
        started = anyio.current_time()
        with anyio.move_on_after(delay):
            await ex.exec_cmd(Command.shell(TREE))
        slowest = max(slowest, anyio.current_time() - started)
        assert survivors(ex) == []
        # A timeout: the run's reader still runs, and may read the line
        # while the kill waits its turn to read.
        started = anyio.current_time()
        with pytest.raises(TimedOut):
            await ex.exec_cmd(Command.shell(TREE).with_timeout(delay or 0.001))
        slowest = max(slowest, anyio.current_time() - started)
        assert survivors(ex) == []
    # The kill's grace is 0.2 s; the 5 s wait for the pid line would show.
    assert slowest < 3.0


async def test_failing_sink_kills_the_tree(ex: DockerExecutor) -> None:
    """A sink that raises stops the command; nothing of it is left in the container."""

    def sink(chunk: Chunk) -> None:
        raise RuntimeError("sink failed")

    with pytest.raises(RuntimeError, match="sink failed"):
        await ex.exec_cmd_streaming(Command.shell("sleep 60 & echo go; sleep 60"), sink)
    assert survivors(ex) == []


async def test_background_job_lives_until_aclose() -> None:
    """A job whose output went away keeps running after its command, until aclose()."""
    async with DockerExecutor(BUSYBOX_IMAGE, keep=True) as ex:
        await ex.exec_cmd(Command.shell("sleep 60 >/dev/null 2>&1 &"))
        assert any("sleep 60" in line for line in survivors(ex))
        container = ex.container_id
    assert container is not None
    try:
        assert not any("sleep 60" in line for line in container_processes(container))
    finally:
        docker("rm", "-f", container)


async def run_concurrently(ex: DockerExecutor, count: int) -> None:
    """Run `count` commands at once and check each one's output."""
    results: dict[int, bytes] = {}

    async def one(i: int) -> None:
        output = await ex.exec_cmd(Command.shell(f"echo {i}; echo e{i} >&2"))
        results[i] = output.stdout + output.stderr

    async with anyio.create_task_group() as tasks:
        for i in range(count):
            tasks.start_soon(one, i)
    assert results == {i: f"{i}\ne{i}\n".encode() for i in range(count)}


async def test_concurrent_commands_through_the_helper() -> None:
    """100 commands at once through the helper all succeed with their own output."""
    async with DockerExecutor(PYTHON_IMAGE, helper=True) as ex:
        await run_concurrently(ex, 100)
    assert survivors_gone(ex)


# 100 engine execs take some 20 s on two cores: run once, on one backend, to
# keep CI short; the same code runs on trio in every other exec test.
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_concurrent_commands_as_engine_execs(ex: DockerExecutor) -> None:
    """100 commands at once as engine execs all succeed with their own output."""
    await run_concurrently(ex, 100)


def survivors_gone(ex: DockerExecutor) -> bool:
    """Whether the executor's container is gone."""
    return ex.container_id not in our_containers()


# Garbage collection sees every test process's containers on the engine: the tests
# that run it, or count what it finds, run in one pytest-xdist worker, one by one.
@pytest.mark.xdist_group("docker-gc")
async def test_killed_owner_leaves_a_container_that_gc_removes(tmp_path: Path) -> None:
    """A test process killed with SIGKILL leaves its container; `docker gc` removes it."""
    script = textwrap.dedent(
        f"""
        import anyio, sys
        from executor._docker.executor import DockerExecutor
        from executor import Command

        async def main():
            ex = DockerExecutor({BUSYBOX_IMAGE!r})
            await ex.exec_cmd(Command.shell("true"))
            print(ex.container_id, flush=True)
            await anyio.sleep(60)

        anyio.run(main)
        """
    )
    with subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env=dict(os.environ)
    ) as child:
        try:
            assert child.stdout is not None
            container = child.stdout.readline().strip()
        finally:
            child.kill()
    assert container
    leftover = docker("ps", "-aq", "--no-trunc", "--filter", f"id={container}").split()
    assert leftover == [container]
    # This process's own containers are not touched.
    async with DockerExecutor(BUSYBOX_IMAGE) as mine:
        completed = await anyio.run_process(
            [sys.executable, "-m", "executor", "docker", "gc"], check=False
        )
        assert completed.returncode == 0, completed.stderr.decode()
        assert container in completed.stdout.decode()
        assert mine.container_id in our_containers()
    assert docker("ps", "-aq", "--filter", f"id={container}").split() == []
    assert await collect_garbage() == []


@pytest.mark.xdist_group("docker-gc")
async def test_gc_leaves_kept_containers() -> None:
    """A container made with keep=True is not garbage.

    `gc --all` is not run here: it would remove the containers of every test
    process that shares the engine.
    """
    async with DockerExecutor(BUSYBOX_IMAGE, keep=True) as ex:
        kept = ex.container_id
    assert kept is not None
    try:
        assert kept not in await collect_garbage()
        assert kept in our_containers()
    finally:
        docker("rm", "-f", kept, check=False)


# --- commands -------------------------------------------------------------------


def environment(output: bytes) -> dict[str, str]:
    """The variables in a `/proc/self/environ` dump."""
    pairs = (item.partition("=") for item in output.decode().split("\0") if item)
    return {name: value for name, _, value in pairs}


ENVIRON = Command.exec(["cat", "/proc/self/environ"])


async def test_environment_layers() -> None:
    """Environment: the container's, then env_remove, then envs, then the command's own."""
    async with DockerExecutor(
        BUSYBOX_IMAGE, env_remove=["HOSTNAME"], envs={"EX_SET": "executor", "EX_GONE": "x"}
    ) as ex:
        plain = environment((await ex.exec_cmd(ENVIRON)).stdout)
        assert "HOSTNAME" not in plain
        assert plain["EX_SET"] == "executor"
        assert plain["PATH"].startswith("/")
        cmd = ENVIRON.with_env({"EX_CMD": "cmd"}).with_env_removed("ex_g*", "HOME")
        env = environment((await ex.exec_cmd(cmd)).stdout)
        assert {"EX_GONE", "HOME", "HOSTNAME"}.isdisjoint(env)
        assert env["EX_CMD"] == "cmd"
        assert env["EX_SET"] == "executor"


async def test_command_env_only_adds(ex: DockerExecutor) -> None:
    """Without removals the container's variables stay and the command's win."""
    env = environment((await ex.exec_cmd(ENVIRON.with_env({"HOME": "/elsewhere"}))).stdout)
    assert env["HOME"] == "/elsewhere"
    assert "HOSTNAME" in env


async def test_env_clear() -> None:
    """env_clear starts from nothing but what the executor and the command set."""
    async with DockerExecutor(BUSYBOX_IMAGE, env_clear=True, envs={"ONLY": "1"}) as ex:
        env = environment((await ex.exec_cmd(ENVIRON.with_env({"MORE": "2"}))).stdout)
        assert set(env) - {"EXECUTOR_DOCKER_TREE"} == {"ONLY", "MORE"}


async def test_missing_current_dir(ex: DockerExecutor) -> None:
    """A current_dir that does not exist fails like a shell's cd, with exit code 1."""
    with pytest.raises(NonZeroExit) as caught:
        await ex.exec_cmd(Command.shell("true").with_current_dir("nowhere"))
    assert caught.value.output.exit_code == 1
    assert "nowhere" in caught.value.output.text()


async def test_exit_code_survives_a_background_holder(ex: DockerExecutor) -> None:
    """The exit code comes at once although a background child holds the output."""
    started = time.monotonic()
    with pytest.raises(NonZeroExit) as caught:
        await ex.exec_cmd(Command.shell("sleep 30 & exit 7"))
    assert caught.value.output.exit_code == 7
    # Seconds, against the 30 s the background child holds the output.
    assert time.monotonic() - started < 5


async def test_stderr_that_looks_like_the_marker(ex: DockerExecutor) -> None:
    """Stderr holding NUL bytes and digits is passed on exactly."""
    script = r"printf '\000123 4\n\000x' >&2; printf 'a\000b'"
    output = await ex.exec_cmd(Command.shell(script))
    assert output.stderr == b"\x00123 4\n\x00x"
    assert output.stdout == b"a\x00b"


async def test_large_output_exact(ex: DockerExecutor) -> None:
    """Megabytes of output come back byte for byte."""
    output = await ex.exec_cmd(Command.shell("head -c 3000000 /dev/zero | tr '\\0' 'x'"))
    assert output.stdout == b"x" * 3_000_000


async def test_output_limit_keeps_head_and_tail() -> None:
    """Past output_limit the head and tail are kept and truncated is set."""
    async with DockerExecutor(BUSYBOX_IMAGE, output_limit=10) as ex:
        output = await ex.exec_cmd(Command.shell("printf 0123456789abcdefghij"))
    assert output.truncated
    assert output.stdout == b"01234fghij"


# --- files ----------------------------------------------------------------------


async def test_write_keeps_mode_and_leaves_no_temporary(ex: DockerExecutor) -> None:
    """Rewriting a file keeps its mode; no temporary file is left beside it."""
    await ex.exec_cmd(Command.write_file("run.sh", "#!/bin/sh\necho 1\n"))
    await ex.exec_cmd(Command.shell("chmod 750 run.sh"))
    await ex.exec_cmd(Command.write_file("run.sh", "#!/bin/sh\necho 2\n"))
    listing = await ex.exec_cmd(Command.shell("stat -c %a run.sh; ls -A"))
    assert listing.stdout == b"750\nrun.sh\n"
    assert (await ex.exec_cmd(Command.exec(["./run.sh"]))).stdout == b"2\n"


async def test_write_replaces_a_symlink_not_its_target(ex: DockerExecutor) -> None:
    """Writing over a symlink replaces the link, as a rename does; reading follows one."""
    await ex.exec_cmd(Command.write_file("target.txt", "target"))
    await ex.exec_cmd(Command.shell("ln -s target.txt link.txt"))
    assert (await ex.exec_cmd(Command.read_file("link.txt"))).stdout == b"target"
    await ex.exec_cmd(Command.write_file("link.txt", "new"))
    assert (await ex.exec_cmd(Command.read_file("target.txt"))).stdout == b"target"
    kinds = await ex.exec_cmd(Command.shell("test -L link.txt || echo regular"))
    assert kinds.stdout == b"regular\n"


async def test_write_errors(ex: DockerExecutor) -> None:
    """Writing onto a folder, or below a file, fails with NonZeroExit naming the path."""
    await ex.exec_cmd(Command.write_file("d/x", "x"))
    with pytest.raises(NonZeroExit, match="d: Is a directory"):
        await ex.exec_cmd(Command.write_file("d", "x"))
    with pytest.raises(NonZeroExit, match="Not a directory"):
        await ex.exec_cmd(Command.write_file("d/x/y", "x"))


async def test_large_file_with_a_long_name(ex: DockerExecutor) -> None:
    """Megabytes with a name past tar's 100 characters come back exactly, streamed."""
    name = "d/" + "n" * 150 + ".bin"
    content = bytes(range(256)) * 20_000
    await ex.exec_cmd(Command.write_file(name, content))
    seen: list[Chunk] = []
    read = await ex.exec_cmd_streaming(Command.read_file(name), seen.append)
    assert read.stdout == content
    assert b"".join(c.data for c in seen) == content
    listed = await ex.exec_cmd(Command.shell("cat d/n*.bin | wc -c"))
    assert listed.stdout.strip() == str(len(content)).encode()


async def test_files_outside_the_workdir(ex: DockerExecutor) -> None:
    """Absolute paths reach anywhere in the container; a FIFO is no file to read."""
    assert b"root:" in (await ex.exec_cmd(Command.read_file("/etc/passwd"))).stdout
    await ex.exec_cmd(Command.shell("mkfifo pipe"))
    with pytest.raises(NonZeroExit, match="not a regular file"):
        await ex.exec_cmd(Command.read_file("pipe"))


async def test_stream_files_ignore_rules(ex: DockerExecutor) -> None:
    """stream_files applies .gitignore (in a repository), .ignore, hidden and binary rules."""
    files = {
        "repo/.git/HEAD": "ref\n",
        "repo/.gitignore": "build/\n*.log\n",
        "repo/.ignore": "secret.txt\n",
        "repo/src/main.py": "main\n",
        "repo/build/out.py": "built\n",
        "repo/debug.log": "log\n",
        "repo/secret.txt": "s\n",
        "repo/.env": "hidden\n",
        "repo/image.bin": "\x00\x01",
        "repo/README.md": "# r\n",
    }
    for name, content in files.items():
        await ex.exec_cmd(Command.write_file(name, content))
    await ex.exec_cmd(Command.shell("ln -s src/main.py repo/link.py"))
    listed = {f.path: f.content async for f in ex.stream_files("repo")}
    assert listed == {"repo/README.md": "# r\n", "repo/src/main.py": "main\n"}
    single = [f.path async for f in ex.stream_files("repo/README.md")]
    assert single == ["repo/README.md"]


# --- sessions -------------------------------------------------------------------


async def test_session_cancel_and_exit_kill_the_tree(ex: DockerExecutor) -> None:
    """cancel() ends the output and finalize raises; nothing of the tree is left."""
    with anyio.fail_after(20):
        async with await ex.start(Command.shell("sleep 60 & echo up; sleep 61")) as session:
            await read_until(session, b"up")
            session.cancel()
            assert await session.next_chunk() is None
            with pytest.raises(NonZeroExit):
                await session.finalize()
    assert survivors(ex) == []
    with anyio.fail_after(20):
        async with await ex.start(Command.shell("sleep 62 >/dev/null 2>&1 & echo up")) as session:
            await session.finalize()
    assert survivors(ex) == []


async def test_session_timeout(ex: DockerExecutor) -> None:
    """A session past its timeout raises TimedOut with its partial output, its tree gone."""
    with anyio.fail_after(20):
        cmd = Command.shell("sleep 30 & echo partial; wait").with_timeout(0.5)
        async with await ex.start(cmd) as session:
            with pytest.raises(TimedOut) as caught:
                await session.finalize()
    assert caught.value.output.stdout == b"partial\n"
    assert survivors(ex) == []


# --- engine addresses -------------------------------------------------------------


async def test_tcp_engine_address() -> None:
    """A tcp:// DOCKER_HOST reaches the engine (here through a loopback relay to its socket)."""
    socket_path = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    if not socket_path.startswith("unix://"):
        pytest.skip("the engine is not on a unix socket")
    socket_path = socket_path.removeprefix("unix://")
    # The relays end on their own (each side's end passed on as EOF) before the
    # listener is cancelled: a receive cancelled on anyio's asyncio UNIX stream
    # can race its reader callback into an InvalidStateError (anyio #1267).
    relays = 0
    idle = anyio.Event()

    async def relay(client: anyio.abc.SocketStream) -> None:
        nonlocal relays, idle
        relays += 1
        try:
            async with client, await anyio.connect_unix(socket_path) as engine:

                async def pump(source: anyio.abc.ByteStream, target: anyio.abc.ByteStream) -> None:
                    with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
                        async for data in source:
                            await target.send(data)
                    with contextlib.suppress(Exception):
                        await target.send_eof()

                async with anyio.create_task_group() as tasks:
                    tasks.start_soon(pump, client, engine)
                    await pump(engine, client)
        finally:
            relays -= 1
            if not relays:
                idle.set()
                idle = anyio.Event()

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    async with listener, anyio.create_task_group() as tasks:
        tasks.start_soon(listener.serve, relay)
        async with DockerExecutor(BUSYBOX_IMAGE, docker_host=f"tcp://127.0.0.1:{port}") as ex:
            output = await ex.exec_cmd(Command.shell("echo over-tcp; cat").with_stdin("in"))
            assert output.stdout == b"over-tcp\nin"
            await ex.exec_cmd(Command.write_file("f", "tcp"))
            assert (await ex.exec_cmd(Command.read_file("f"))).stdout == b"tcp"
        with anyio.fail_after(20):
            while relays:
                await idle.wait()
        tasks.cancel_scope.cancel()


async def test_ssh_engine_address(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An ssh:// DOCKER_HOST runs `ssh -o BatchMode=yes HOST docker system dial-stdio`.

    The `ssh` on PATH here is a stand-in that checks its arguments and runs the
    remote command on this machine, where `docker system dial-stdio` reaches the
    real engine: everything but the SSH hop is what a remote engine sees.
    """
    engine = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    log = tmp_path / "ssh.log"
    fake = tmp_path / "ssh"
    fake.write_text(
        textwrap.dedent(
            f"""\
            #!/bin/sh
            echo "$@" >> {log}
            [ "$1 $2" = "-o BatchMode=yes" ] || exit 255
            shift 2
            [ "$1" = "--" ] && shift
            shift  # the host
            DOCKER_HOST={engine} exec "$@"
            """
        )
    )
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    async with DockerExecutor(BUSYBOX_IMAGE, docker_host="ssh://agent@engine.example") as ex:
        output = await ex.exec_cmd(Command.shell("echo over-ssh"))
        assert output.stdout == b"over-ssh\n"
    assert "agent@engine.example docker system dial-stdio" in log.read_text()


# --- the lifecycle contract, both ways ---------------------------------------------

WAYS = ["helper", "exec"]


@contextlib.asynccontextmanager
async def either_way(way: str, kill_grace: float = 0.2) -> AsyncIterator[DockerExecutor]:
    """A DockerExecutor on a fresh Python container, through its helper or as engine execs."""
    async with DockerExecutor(
        PYTHON_IMAGE, helper=way == "helper", kill_grace=kill_grace
    ) as executor:
        yield executor


@pytest.mark.parametrize("way", WAYS)
async def test_aclose_twice_is_harmless(way: str) -> None:
    """A second aclose(), after the block or from two tasks at once, does nothing and fails not."""
    async with either_way(way) as ex:
        await ex.exec_cmd(Command.shell("true"))
        await ex.aclose()
    await ex.aclose()
    assert survivors_gone(ex)
    twice = DockerExecutor(PYTHON_IMAGE, helper=way == "helper")
    await twice.exec_cmd(Command.shell("true"))
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(twice.aclose)
        tasks.start_soon(twice.aclose)
    assert survivors_gone(twice)
    with pytest.raises(ExecutorError, match="closed"):
        await twice.exec_cmd(Command.shell("true"))


@pytest.mark.parametrize("way", WAYS)
async def test_kill_grace_is_wall_time(way: str) -> None:
    """kill_grace is wall time after a timeout, then SIGKILL; a tree that obeys TERM ends sooner."""
    grace, timeout = 2.0, 0.5
    async with either_way(way, kill_grace=grace) as ex:
        await ex.exec_cmd(Command.shell("true"))
        started = time.monotonic()
        with pytest.raises(TimedOut):
            await ex.exec_cmd(Command.shell("trap '' TERM; sleep 30").with_timeout(timeout))
        elapsed = time.monotonic() - started
        # The upper bound tells the grace kept from one waited twice (2 s more).
        assert timeout + grace <= elapsed <= timeout + grace + 1.0
        assert survivors(ex) == []
        started = time.monotonic()
        with pytest.raises(TimedOut):
            await ex.exec_cmd(Command.shell("sleep 30").with_timeout(timeout))
        assert time.monotonic() - started < timeout + grace
        assert survivors(ex) == []


@pytest.mark.parametrize("way", WAYS)
async def test_signal_death_is_reported(way: str) -> None:
    """A command killed by a signal reports it as .signal, one that exits 128 + N does not."""
    async with either_way(way) as ex:
        with pytest.raises(NonZeroExit, match="killed by SIGKILL") as caught:
            await ex.exec_cmd(Command.shell("echo before; kill -9 $$"))
        output = caught.value.output
        assert (output.exit_code, output.signal) == (137, 9)
        # What the wrapper's shell says of the death is not the command's output.
        assert (output.stdout, output.stderr) == (b"before\n", b"")
        with pytest.raises(NonZeroExit, match="killed by SIGTERM") as caught:
            await ex.exec_cmd(Command.exec(["sh", "-c", "kill -TERM $$"]))
        assert (caught.value.output.exit_code, caught.value.output.signal) == (143, 15)
        with pytest.raises(NonZeroExit, match="exited with code 137") as caught:
            await ex.exec_cmd(Command.shell("exit 137"))
        assert (caught.value.output.exit_code, caught.value.output.signal) == (137, None)


@pytest.mark.parametrize("way", WAYS)
async def test_cut_off_write_leaves_no_temporary(way: str) -> None:
    """A write cut off by a cancellation leaves no temporary, and the old or all the new content."""
    content = os.urandom(10 << 20)
    async with either_way(way) as ex:
        await ex.exec_cmd(Command.write_file("big.bin", "old"))
        for delay in (0.01, 0.05, 0.1, 0.2):
            with anyio.move_on_after(delay):
                await ex.exec_cmd(Command.write_file("big.bin", content))
            await anyio.sleep(0.5)
            listing = await ex.exec_cmd(Command.shell("ls -A"))
            assert listing.stdout == b"big.bin\n", f"after {delay} s"
            assert (await ex.exec_cmd(Command.read_file("big.bin"))).stdout in (b"old", content)


@pytest.mark.parametrize("way", WAYS)
async def test_cancelled_twice_while_killing_leaves_no_survivor(
    way: str, anyio_backend: str
) -> None:
    """A command cancelled again while its tree is being killed still leaves nothing running."""
    async with either_way(way, kill_grace=1.0) as ex:
        started = anyio.Event()

        def sink(chunk: Chunk) -> None:
            if b"started" in chunk.data:
                started.set()

        if anyio_backend == "asyncio":
            import asyncio

            # asyncio's own cancel, twice: the second comes while the first's kill starts.
            task = asyncio.ensure_future(ex.exec_cmd_streaming(Command.shell(TREE), sink))
            with anyio.fail_after(20):
                await started.wait()
            task.cancel()
            for _ in range(3):
                await asyncio.sleep(0)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        else:
            outer, inner = anyio.CancelScope(), anyio.CancelScope()

            async def run() -> None:
                with outer, inner:
                    await ex.exec_cmd_streaming(Command.shell(TREE), sink)

            async with anyio.create_task_group() as tasks:
                tasks.start_soon(run)
                with anyio.fail_after(20):
                    await started.wait()
                inner.cancel()
                await anyio.sleep(0.05)
                outer.cancel()
        assert survivors(ex) == []
