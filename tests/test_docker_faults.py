"""DockerExecutor when the engine goes away, and a build log of split characters.

The engine-death tests stop a private dockerd of their own (never the one
the other tests share): its own data root, exec root, pid file and socket in
a temporary folder, no bridge and no iptables, as `.ci/services/docker.sh`
starts the shared one. The test images come from the shared engine
(`docker save`, `docker load`). Without dockerd (or root) they skip, and
fail under EXECUTOR_REQUIRE_DOCKER=1.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator

import anyio
import pytest
from docker_engine import BUSYBOX_IMAGE, PYTHON_IMAGE, REQUIRED, docker, require_engine

from executor import (
    BuildError,
    Chunk,
    Command,
    DockerBuild,
    DockerExecutor,
    ExecutorError,
    NonZeroExit,
    build_image,
)
from executor._docker.build import LABEL_BUILD_DIGEST
from executor._docker.container import LABEL_OWNER, owner_label

pytestmark = pytest.mark.anyio

# How long a private engine may take to start or to stop.
_ENGINE_WAIT = 60.0


class PrivateEngine:
    """A dockerd of this module's own, stopped and started again by its pid."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.socket = os.path.join(root, "sock")
        self.host = f"unix://{self.socket}"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Start the engine and wait until it answers."""
        log = open(os.path.join(self.root, "dockerd.log"), "ab")  # noqa: SIM115 (the child's)
        self.process = subprocess.Popen(
            [
                "dockerd",
                "--bridge=none",
                "--iptables=false",
                "--ip6tables=false",
                f"--data-root={self.root}/data",
                f"--exec-root={self.root}/exec",
                f"--pidfile={self.root}/dockerd.pid",
                f"--host={self.host}",
            ],
            stdout=log,
            stderr=log,
        )
        log.close()
        deadline = time.monotonic() + _ENGINE_WAIT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                break
            if self.cli("version", check=False) is not None:
                return
            time.sleep(0.1)
        raise AssertionError(f"the private dockerd did not start: {self.log()[-2000:]}")

    def stop(self) -> None:
        """SIGTERM the engine (by its pid) and wait until it is gone."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(_ENGINE_WAIT)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def cli(self, *args: str, check: bool = True) -> str | None:
        completed = subprocess.run(
            ["docker", "-H", self.host, *args],
            capture_output=True,
            check=False,
            timeout=120,
        )
        if completed.returncode:
            if check:
                raise AssertionError(f"docker {' '.join(args)}: {completed.stderr!r}")
            return None
        return completed.stdout.decode()

    def log(self) -> str:
        with open(os.path.join(self.root, "dockerd.log"), "rb") as file:
            return file.read().decode("utf-8", "replace")


@pytest.fixture(scope="module")
def engine() -> Iterator[PrivateEngine]:
    """A private engine holding the test images; stopped and removed after the module."""
    require_engine()
    problem = None
    if shutil.which("dockerd") is None:
        problem = "no dockerd to start a private engine"
    elif os.geteuid() != 0:
        problem = "a private dockerd needs root"
    if problem is not None:
        if REQUIRED:
            pytest.fail(f"EXECUTOR_REQUIRE_DOCKER=1 but {problem}")
        pytest.skip(problem)
    # A short path: a unix socket's path has a small limit.
    root = tempfile.mkdtemp(prefix="exd-", dir="/tmp")
    private = PrivateEngine(root)
    try:
        private.start()
        saved = subprocess.run(
            ["docker", "save", BUSYBOX_IMAGE, PYTHON_IMAGE], capture_output=True, check=True
        )
        subprocess.run(
            ["docker", "-H", private.host, "load"],
            input=saved.stdout,
            capture_output=True,
            check=True,
        )
        yield private
    finally:
        private.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def running(engine: PrivateEngine) -> PrivateEngine:
    """The private engine, started again if a test before stopped it."""
    if engine.process is None:
        engine.start()
    return engine


async def _stop_in(engine: PrivateEngine, delay: float, stopped: list[float]) -> None:
    await anyio.sleep(delay)
    stopped.append(time.monotonic())
    # Only its SIGTERM here: the wait for its end is the caller's.
    assert engine.process is not None
    engine.process.send_signal(signal.SIGTERM)


async def _engine_dies_under(ex: DockerExecutor, engine: PrivateEngine) -> ExecutorError:
    """Run a long command, stop the engine under it; the error it raised, checked for speed."""
    await ex.exec_cmd(Command.shell("echo warm"))
    stopped: list[float] = []
    error: BaseException | None = None
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(_stop_in, engine, 1.0, stopped)
        try:
            await ex.exec_cmd(Command.shell("sleep 60").with_timeout(120))
        except Exception as raised:
            error = raised
    ended = time.monotonic()
    await anyio.to_thread.run_sync(engine.stop)
    assert stopped
    # Not the command's own death (an agent reads SIGKILL as an OOM kill).
    assert not isinstance(error, NonZeroExit), repr(error)
    assert isinstance(error, ExecutorError), repr(error)
    # Long before the command's own timeout: at once, give or take the
    # engine's stopping of the container.
    assert ended - stopped[0] < 20, ended - stopped[0]
    return error


async def _next_fails_at_once(ex: DockerExecutor, engine: PrivateEngine) -> ExecutorError:
    begun = time.monotonic()
    with pytest.raises(ExecutorError) as caught:
        await ex.exec_cmd(Command.shell("echo again").with_timeout(30))
    assert not isinstance(caught.value, NonZeroExit)
    assert time.monotonic() - begun < 5
    assert engine.host in str(caught.value), str(caught.value)
    return caught.value


async def _after_restart(ex: DockerExecutor, engine: PrivateEngine) -> None:
    """Once the engine is back, the container the engine stopped runs again, files and all."""
    await anyio.to_thread.run_sync(engine.start)
    assert ex.container_id is not None
    # The engine came back with our container stopped.
    assert engine.cli("inspect", "--format", "{{.State.Running}}", ex.container_id) == "false\n"
    begun = time.monotonic()
    out = await ex.exec_cmd(Command.shell("echo back; cat kept.txt").with_timeout(30))
    assert time.monotonic() - begun < 20
    assert out.text() == "back\nwritten before\n"
    # Every path works again: files, sessions, the helper or the engine exec.
    assert (await ex.exec_cmd(Command.read_file("kept.txt"))).stdout == b"written before\n"
    async with ex.shell() as sh:
        assert (await sh.run("echo shell")).text() == "shell\n"


def _none_of_ours_after_gc(engine: PrivateEngine) -> None:
    """`docker gc` on the engine leaves no container this process made there."""
    collect_garbage_cli = subprocess.run(
        [sys.executable, "-m", "executor", "docker", "gc", "--host", engine.host],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert collect_garbage_cli.returncode == 0, collect_garbage_cli.stderr
    ours = engine.cli("ps", "-aq", "--filter", f"label={LABEL_OWNER}={owner_label()}")
    assert ours is not None
    assert not ours.split(), engine.cli("ps", "-a")


@pytest.mark.parametrize("helper", [False, True], ids=["exec", "helper"])
async def test_engine_death_is_an_executor_error(running: PrivateEngine, helper: bool) -> None:
    image = PYTHON_IMAGE if helper else BUSYBOX_IMAGE
    ex = DockerExecutor(image, docker_host=running.host, helper=helper)
    try:
        await ex.__aenter__()
        await ex.exec_cmd(Command.write_file("kept.txt", "written before\n"))
        error = await _engine_dies_under(ex, running)
        message = str(error)
        # The engine stops the container as it goes: one or the other is named.
        assert running.host in message, message
        if helper:
            assert message.startswith("the helper is gone"), message
        else:
            assert message.startswith("the command did not end by itself"), message
        # The next command names the engine that is gone, at once.
        await _next_fails_at_once(ex, running)
        await _next_fails_at_once(ex, running)
        await _after_restart(ex, running)
    finally:
        with anyio.move_on_after(30, shield=True):
            await ex.aclose()
    _none_of_ours_after_gc(running)


async def test_engine_death_under_a_given_container(running: PrivateEngine) -> None:
    """A container given by name is not ours to start again: the next command says it stopped."""
    given = running.cli(
        "run", "-d", "--init", "--network", "none", BUSYBOX_IMAGE, "sleep", "100000"
    )
    assert given is not None
    given = given.strip()
    ex = DockerExecutor(container=given, docker_host=running.host, helper=False)
    try:
        await ex.__aenter__()
        await _engine_dies_under(ex, running)
        await _next_fails_at_once(ex, running)
        await anyio.to_thread.run_sync(running.start)
        begun = time.monotonic()
        for _ in range(2):
            with pytest.raises(ExecutorError) as caught:
                await ex.exec_cmd(Command.shell("echo again").with_timeout(30))
            assert not isinstance(caught.value, NonZeroExit)
            message = str(caught.value)
            assert f"the container {given[:12]}" in message, message
            assert "is not running" in message, message
            assert running.host in message, message
        assert time.monotonic() - begun < 10
        # Started again by its owner, it serves again.
        running.cli("start", given)
        out = await ex.exec_cmd(Command.shell("echo back").with_timeout(30))
        assert out.text() == "back\n"
    finally:
        with anyio.move_on_after(30, shield=True):
            await ex.aclose()
        if running.process is not None:
            running.cli("rm", "-f", given, check=False)


@pytest.fixture
def _built_images_removed() -> Iterator[None]:
    require_engine()

    def built() -> set[str]:
        listed = docker("images", "-q", "--no-trunc", "--filter", f"label={LABEL_BUILD_DIGEST}")
        return set(listed.split())

    before = built()
    yield
    for image in built() - before:
        docker("rmi", "-f", image, check=False)


@pytest.mark.usefixtures("_built_images_removed")
async def test_build_log_keeps_characters_split_across_reads(tmp_path: object) -> None:
    count = 300_000
    dockerfile = (
        f"FROM {PYTHON_IMAGE}\n"
        f"RUN python3 -c \"print('\\u00e9' * {count})\" && python3 -c \"print('done')\" && false\n"
    )
    chunks: list[Chunk] = []

    async def sink(chunk: Chunk) -> None:
        chunks.append(chunk)

    context = tempfile.mkdtemp(prefix="executor-build-")
    try:
        with pytest.raises(BuildError) as caught:
            await build_image(
                DockerBuild(context, dockerfile_text=dockerfile, cache=False), sink=sink
            )
    finally:
        shutil.rmtree(context, ignore_errors=True)
    log = b"".join(chunk.data for chunk in chunks).decode("utf-8")
    assert "\ufffd" not in log
    assert log.count("\u00e9") == count
    error = caught.value
    assert "\ufffd" not in error.step_output
    assert "\ufffd" not in error.log
    assert "done" in error.step_output
    # The kept tail of the step is all `é` up to the last line.
    assert error.step_output.count("\u00e9") > 1000
