"""RayExecutor on a real Ray cluster that these tests start on 127.0.0.1: a head and a second node.

The cluster (`ray_cluster.py`) runs as a process of its own; the second node
carries the custom resource `second`, so a command placed there proves it by
the node id it prints. Without Ray installed the tests skip, and with
`EXECUTOR_REQUIRE_RAY=1` (CI) they fail instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import time
import uuid
from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import psutil
import pytest

from executor import (
    Chunk,
    Command,
    ExecutorError,
    NonZeroExit,
    Stderr,
    Stdout,
    TimedOut,
    ToolExecutor,
)
from executor.testing import (
    ExecutorContract,
    ExecutorFactory,
    LifecycleContract,
    SessionContract,
)

pytestmark = pytest.mark.anyio

REQUIRED = os.environ.get("EXECUTOR_REQUIRE_RAY") == "1"

try:
    from ray_cluster import LOOPBACK_ENV, RayCluster

    # Before Ray reads its settings: the driver, too, speaks to 127.0.0.1 only.
    os.environ.update(LOOPBACK_ENV)
    import ray

    from executor import RayExecutor, RayPool
except ImportError as error:  # pragma: no cover - without the extra
    if REQUIRED:
        raise
    pytest.skip(f"Ray is not installed: {error}", allow_module_level=True)


@pytest.fixture
def anyio_backend() -> str:
    """Only asyncio: Ray's object references are asyncio futures."""
    return "asyncio"


@pytest.fixture(scope="module")
def cluster(ray_driver: RayCluster) -> RayCluster:
    """The run's cluster, with this process connected to it as a driver."""
    return ray_driver


def on_second(workdir: Path | str | None = None, **options: Any) -> RayExecutor:
    """An executor whose actor must run on the second node."""
    return RayExecutor(
        workdir=None if workdir is None else str(workdir),
        resources={"second": 0.01},
        kill_grace=0.2,
        **options,
    )


def idle(marker: str) -> str:
    """A command line that idles for minutes with `marker` in its command line."""
    return f"python3 -c 'import time; time.sleep(300)' {marker}"


def marked_processes(marker: str) -> list[psutil.Process]:
    """Processes on this machine (both nodes run here) whose command line holds `marker`."""
    found = []
    for process in psutil.process_iter(["cmdline"]):
        if marker in " ".join(process.info["cmdline"] or ()):
            found.append(process)
    return found


async def gone(marker: str, within: float = 10.0) -> bool:
    """Whether every process marked `marker` is gone within `within` seconds."""
    deadline = time.monotonic() + within
    while marked_processes(marker):
        if time.monotonic() > deadline:
            return False
        await anyio.sleep(0.1)
    return True


class RayFixtures:
    """A RayExecutor on the second node, in an empty folder, closed after the test."""

    @pytest.fixture
    async def executor(self, cluster: RayCluster, tmp_path: Path) -> AsyncIterator[ToolExecutor]:
        """The executor under test."""
        async with on_second(tmp_path) as executor:
            yield executor


class TestRayContract(ExecutorContract, RayFixtures):
    """The conformance kit on a node of the cluster."""


class TestRaySessions(SessionContract, RayFixtures):
    """Sessions (stdin, signals, pty) through the actor."""


class TestRayLifecycle(LifecycleContract):
    """How it ends what it started, seen through the executor alone."""

    @pytest.fixture
    def executor_factory(self, cluster: RayCluster, tmp_path: Path) -> ExecutorFactory:
        """RayExecutors on the second node, in one empty folder."""
        return partial(RayExecutor, workdir=str(tmp_path), resources={"second": 0.01})


async def test_placed_on_the_node_its_resource_names(cluster: RayCluster) -> None:
    """The command itself reports the second node's id; the executor says the same."""
    async with on_second() as ex:
        out = await ex.exec_cmd(Command.shell('echo "$EXECUTOR_RAY_NODE_ID"; pwd'))
        node_id, workdir = out.text().split()
        assert node_id == cluster.second["node_id"]
        info = await ex.node()
        assert info.node_id == node_id
        assert info.workdir == workdir
        assert os.path.isdir(workdir)
    assert not os.path.exists(workdir), "the temporary workdir made on the node is removed"
    async with RayExecutor(node_id=cluster.head["node_id"]) as ex:
        out = await ex.exec_cmd(Command.shell('echo "$EXECUTOR_RAY_NODE_ID"'))
        assert out.text().strip() == cluster.head["node_id"]


async def test_output_reaches_the_sink_as_it_is_produced(cluster: RayCluster) -> None:
    times: list[tuple[float, bytes]] = []

    def sink(chunk: Chunk) -> None:
        times.append((time.monotonic(), chunk.data))

    async with on_second() as ex:
        started = time.monotonic()
        await ex.exec_cmd_streaming(Command.shell("echo first; sleep 1.5; echo second"), sink)
        ended = time.monotonic()
    assert b"".join(data for _, data in times) == b"first\nsecond\n"
    first_at = next(at for at, data in times if b"first" in data)
    assert first_at - started < ended - started - 1.0, "the first line came only at the end"


async def test_a_fast_stream_arrives_whole_in_order_and_capped(cluster: RayCluster) -> None:
    """24 MiB in 64 KiB writes, stderr lines between: every byte, in order, streams apart.

    Fast output crosses in gathered items of at most about a batch, and the
    stored output is cut to the cap with its elision as a local run's.
    """
    script = (
        "import sys\n"
        "out = sys.stdout.buffer\n"
        "for i in range(384):\n"
        "    out.write(bytes([i % 251]) * 65536)\n"
        "    if i % 128 == 0:\n"
        "        out.flush(); sys.stderr.write(f'mark {i}\\n'); sys.stderr.flush()\n"
    )
    expected = b"".join(bytes([i % 251]) * 65536 for i in range(384))
    chunks: list[Chunk] = []
    async with on_second(output_limit=1 << 20) as ex:
        out = await ex.exec_cmd_streaming(Command.exec(["python3", "-c", script]), chunks.append)
    stdout = b"".join(chunk.data for chunk in chunks if isinstance(chunk, Stdout))
    stderr = b"".join(chunk.data for chunk in chunks if isinstance(chunk, Stderr))
    assert stdout == expected
    assert stderr == b"mark 0\nmark 128\nmark 256\n"
    # Each mark comes after the output written before it, but for what the
    # pipe held (two pipes: a reader may see the later write first).
    seen = 0
    for chunk in chunks:
        if isinstance(chunk, Stdout):
            seen += len(chunk.data)
        else:
            for line in chunk.data.decode().splitlines():
                assert seen >= int(line.split()[1]) * 65536 - (2 << 20), (line, seen)
    assert max(len(chunk.data) for chunk in chunks) <= 5 << 20, "an item passed its bound"
    assert out.truncated
    assert out.elided is not None
    assert out.elided.bytes + len(out.stdout) + len(out.stderr) == len(expected) + len(stderr)
    assert out.stdout.startswith(expected[:1000])
    assert out.stdout.endswith(expected[-1000:])


async def test_outbox_keeps_order_and_streams_apart_and_bounds_what_waits() -> None:
    """The node's outbox: runs of one stream in order, items of one batch, a full box waits."""
    from executor._ray.node import _BATCH, _WAITING, _Outbox, decode_runs

    box = _Outbox()
    for chunk in (Stdout(b"a"), Stdout(b"b"), Stderr(b"c"), Stdout(b"d")):
        await box.put(chunk)
    await box.put(("done", None))
    runs, outcome = await box.take()
    assert decode_runs(runs) == [Stdout(b"ab"), Stderr(b"c"), Stdout(b"d")]
    assert outcome == ("done", None)

    box = _Outbox()
    mib = b"x" * (1 << 20)
    for _ in range(_WAITING >> 20):
        await box.put(Stdout(mib))
    blocked = asyncio.ensure_future(box.put(Stdout(mib)))
    await asyncio.sleep(0.05)
    assert not blocked.done(), "a put past the bound did not wait"
    runs, outcome = await box.take()
    assert outcome is None
    assert sum(len(chunk.data) for chunk in decode_runs(runs)) == _BATCH
    await asyncio.wait_for(blocked, 10)
    await box.put(("done", None))
    taken = 0
    while outcome is None:
        runs, outcome = await box.take()
        taken += sum(len(chunk.data) for chunk in decode_runs(runs))
    assert taken == _WAITING + (1 << 20) - _BATCH


async def test_files_on_the_node(cluster: RayCluster, tmp_path: Path) -> None:
    async with on_second(tmp_path) as ex:
        await ex.exec_cmd(Command.write_file("src/app.py", "print('hi')\n"))
        await ex.exec_cmd(Command.write_file("notes.md", "# notes\n"))
        assert (tmp_path / "src/app.py").read_text() == "print('hi')\n"
        read = await ex.exec_cmd(Command.read_file("src/app.py"))
        assert read.stdout == b"print('hi')\n"
        listed = sorted([(f.path, f.content) async for f in ex.stream_files(".")])
        assert listed == [("notes.md", "# notes\n"), ("src/app.py", "print('hi')\n")]
        with pytest.raises(NonZeroExit, match="missing"):
            await ex.exec_cmd(Command.read_file("missing"))
        with pytest.raises(FileNotFoundError):
            [f async for f in ex.stream_files("nowhere")]


async def test_timeout_kills_the_tree_on_the_node(cluster: RayCluster) -> None:
    marker = f"ray-timeout-{uuid.uuid4().hex[:8]}"
    async with on_second() as ex:
        cmd = Command.shell(f"{idle(marker)} & {idle(marker)}; wait").with_timeout(0.5)
        with pytest.raises(TimedOut):
            await ex.exec_cmd(cmd)
        assert await gone(marker)


async def test_cancel_kills_the_tree_on_the_node(cluster: RayCluster) -> None:
    marker = f"ray-cancel-{uuid.uuid4().hex[:8]}"
    async with on_second() as ex:
        with anyio.move_on_after(1.0):
            await ex.exec_cmd(Command.shell(idle(marker)))
        assert await gone(marker)
        out = await ex.exec_cmd(Command.shell("echo still here"))
        assert out.text() == "still here\n"


async def test_aclose_ends_the_actor_and_every_process(cluster: RayCluster) -> None:
    marker = f"ray-close-{uuid.uuid4().hex[:8]}"
    ex = on_second()
    await ex.exec_cmd(Command.shell(f"({idle(marker)} &) ; echo started"))
    assert marked_processes(marker)
    worker = (await ex.node()).pid
    await ex.aclose()
    assert await gone(marker)
    deadline = time.monotonic() + 20
    while psutil.pid_exists(worker) and psutil.Process(worker).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, "the actor's worker outlived aclose()"
        await anyio.sleep(0.1)
    with pytest.raises(ExecutorError, match="closed"):
        await ex.exec_cmd(Command.shell("true"))


async def test_a_dead_node_fails_the_command_and_leaves_nothing(cluster: RayCluster) -> None:
    """Killing the node's raylet by pid mid-command: `ExecutorError` soon, no survivor."""
    victim = cluster.add_node("victim")
    marker = f"ray-victim-{uuid.uuid4().hex[:8]}"
    ex = RayExecutor(resources={"victim": 0.01}, ping_interval=0.5, ping_timeout=5)
    try:
        assert (await ex.node()).node_id == victim["node_id"]
        started = anyio.Event()

        def sink(chunk: Chunk) -> None:
            started.set()

        async def kill_when_started() -> None:
            await started.wait()
            os.kill(victim["raylet_pid"], signal.SIGKILL)

        with anyio.fail_after(30):
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(kill_when_started)
                with pytest.raises(ExecutorError, match=r"(?i)ray actor"):
                    await ex.exec_cmd_streaming(
                        Command.shell(f"echo up; exec {idle(marker)}"), sink
                    )
        assert await gone(marker, within=20), "a command outlived its node"
    finally:
        await ex.aclose()
    # The rest of the cluster still works.
    async with on_second() as alive:
        assert (await alive.exec_cmd(Command.shell("echo ok"))).text() == "ok\n"


async def test_a_command_is_never_run_twice(cluster: RayCluster, tmp_path: Path) -> None:
    """The actor dies mid-command: no restart, no retry, the command ran once."""
    log = tmp_path / "runs"
    ex = on_second(tmp_path, ping_interval=0.5, ping_timeout=5)
    try:
        await ex.node()
        actor = ex._actor

        async def kill_soon() -> None:
            await anyio.sleep(1.0)
            ray.kill(actor, no_restart=True)

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(kill_soon)
            with pytest.raises(ExecutorError):
                await ex.exec_cmd(Command.shell(f"echo run >> {log}; sleep 30"))
        await anyio.sleep(2)
        assert log.read_text() == "run\n"
    finally:
        await ex.aclose()


async def test_rays_calls_carry_commands_when_direct_is_off(cluster: RayCluster) -> None:
    """`direct=False`: no channel; output streams, failures keep their exit code and stderr."""
    chunks: list[Chunk] = []
    async with on_second(direct=False) as ex:
        assert ex._connections is None
        out = await ex.exec_cmd_streaming(Command.shell("echo one; echo two >&2"), chunks.append)
        assert (out.stdout, out.stderr) == (b"one\n", b"two\n")
        assert sorted(chunk.data for chunk in chunks) == [b"one\n", b"two\n"]
        with pytest.raises(NonZeroExit) as failed:
            await ex.exec_cmd(Command.shell("echo why >&2; exit 3"))
        assert failed.value.output.exit_code == 3
        assert failed.value.output.stderr == b"why\n"


async def test_the_channel_serves_only_who_shows_the_token(
    cluster: RayCluster, tmp_path: Path
) -> None:
    """A connection to the actor's port without its token is dropped, and runs nothing."""
    import pickle

    from executor._ray.channel import HEADER, TOKEN_SIZE

    marker = tmp_path / "ran"
    async with on_second(tmp_path) as ex:
        await ex.exec_cmd(Command.exec(["true"]))
        assert ex._connections is not None
        reader, writer = await asyncio.open_connection(ex._connections.host, ex._connections.port)
        request = pickle.dumps((10_000, Command.exec(["touch", str(marker)]), False))
        writer.write(b"\0" * TOKEN_SIZE + HEADER.pack(b"r", len(request)) + request)
        await writer.drain()
        with anyio.fail_after(10):
            assert await reader.read() == b"", "the node answered a stranger"
        writer.close()
        await anyio.sleep(0.5)
        assert not marker.exists(), "a request without the token ran"
        # The executor's own connections still work.
        assert (await ex.exec_cmd(Command.shell("echo ok"))).text() == "ok\n"


async def test_an_unreachable_channel_falls_back_to_rays_calls(cluster: RayCluster) -> None:
    """A driver that cannot reach the node's address runs its commands through Ray instead."""
    from executor._ray.channel import Connections

    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]  # nothing listens here once it is closed
    async with on_second() as ex:
        await ex.node()
        ex._connections = Connections(
            "127.0.0.1", port, b"\0" * 32, b"\0" * 32, connect_timeout=2.0
        )
        chunks: list[Chunk] = []
        out = await ex.exec_cmd_streaming(Command.shell("echo fell back"), chunks.append)
        assert out.text() == "fell back\n"
        assert b"".join(chunk.data for chunk in chunks) == b"fell back\n"
        assert ex._connections is None, "the unreachable channel is tried once, then left"
        assert (await ex.exec_cmd(Command.shell("echo again"))).text() == "again\n"


async def test_channel_connections_are_reused_and_bounded(cluster: RayCluster) -> None:
    """Commands one after another share one connection; a burst's extra ones are closed."""
    async with on_second() as ex:
        for number in range(5):
            assert (await ex.exec_cmd(Command.shell(f"echo {number}"))).text() == f"{number}\n"
        assert ex._connections is not None
        assert len(ex._connections._idle) == 1
        outs = await asyncio.gather(
            *(ex.exec_cmd(Command.shell(f"sleep 0.2; echo {n}")) for n in range(20))
        )
        assert [out.text() for out in outs] == [f"{n}\n" for n in range(20)]
        assert len(ex._connections._idle) == 8


async def test_a_sinks_own_os_error_passes_as_it_is(cluster: RayCluster) -> None:
    """A sink raising an OSError over the channel: that error, not a lost actor; tree killed."""
    marker = f"sink-oserror-{uuid.uuid4().hex}"

    def sink(chunk: Chunk) -> None:
        raise BrokenPipeError("the sink's own pipe")

    async with on_second() as ex:
        with pytest.raises(BrokenPipeError):
            await ex.exec_cmd_streaming(Command.shell(f"echo hi; {idle(marker)}"), sink)
        assert await gone(marker)
        assert (await ex.exec_cmd(Command.shell("echo ok"))).text() == "ok\n"


async def test_a_passing_connect_failure_keeps_the_channel_and_leaks_nothing(
    cluster: RayCluster,
) -> None:
    """Out of fds once the channel has served: that command goes through Ray; no socket leaks."""
    import resource

    me = psutil.Process()
    async with on_second() as ex:
        await ex.exec_cmd(Command.exec(["true"]))
        connections = ex._connections
        assert connections is not None
        port = connections.port
        async with anyio.create_task_group() as tasks:
            # Holds the one idle connection: the next command must open one.
            tasks.start_soon(ex.exec_cmd, Command.shell("sleep 1.5"))
            await anyio.sleep(0.5)
            soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
            lowest_free = os.open(os.devnull, os.O_RDONLY)  # the next fd a socket would get
            os.close(lowest_free)
            resource.setrlimit(resource.RLIMIT_NOFILE, (lowest_free, hard))
            try:
                out = await ex.exec_cmd(Command.shell("echo through ray"))
            finally:
                resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
            assert out.text() == "through ray\n"
        assert ex._connections is connections, "a passing failure turned the channel off"
        assert (await ex.exec_cmd(Command.shell("echo direct"))).text() == "direct\n"
    await anyio.sleep(0.5)
    left = [c for c in me.net_connections("tcp") if c.raddr and c.raddr[1] == port]
    assert not left, left


class _Trap:
    """A pickle that, once loaded, makes the folder `path`: proof a stranger's bytes ran."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.mkdir, (str(self.path),))


async def test_a_stranger_on_a_dead_actors_port_is_never_trusted(
    cluster: RayCluster, tmp_path: Path
) -> None:
    """What took the port of an actor gone gets no request, and its answer is never unpickled."""
    import pickle

    from executor._ray.channel import HEADER, TOKEN_SIZE

    trap = tmp_path / "unpickled"
    answer = pickle.dumps(("done", _Trap(trap)))
    heard: list[bytes] = []

    async def impostor(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readexactly(TOKEN_SIZE)
        writer.write(HEADER.pack(b"p", len(answer)) + answer)
        with contextlib.suppress(Exception):
            async with asyncio.timeout(2):
                heard.append(await reader.read(1 << 16))
        writer.close()

    async with on_second() as ex:
        await ex.node()  # placed, no connection to its channel yet
        assert ex._connections is not None
        host, port = ex._connections.host, ex._connections.port
        ray.kill(ex._actor, no_restart=True)
        listener = socket.socket()
        try:
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            with anyio.fail_after(20):
                while True:
                    try:
                        listener.bind((host, port))
                        break
                    except OSError:
                        await anyio.sleep(0.1)  # the dead worker still holds it
        except BaseException:
            listener.close()
            raise
        server = await asyncio.start_server(impostor, sock=listener)
        try:
            with pytest.raises(ExecutorError):
                await ex.exec_cmd(Command.shell("echo secret-request"))
            await anyio.sleep(0.5)
        finally:
            server.close()
        assert not trap.exists(), "the driver loaded a stranger's pickle"
        assert not any(b"secret-request" in data for data in heard), "a stranger got the request"


def test_a_cluster_on_tls_keeps_commands_on_rays_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under `RAY_USE_TLS` the plain-TCP channel is not used (read as Ray reads it)."""
    from executor._ray.executor import _ray_uses_tls

    for value, expected in (("1", True), ("true", True), ("TRUE", True), ("0", False)):
        monkeypatch.setenv("RAY_USE_TLS", value)
        assert _ray_uses_tls() is expected
    monkeypatch.delenv("RAY_USE_TLS")
    assert _ray_uses_tls() is False


async def test_strangers_cannot_hold_the_channel_open(cluster: RayCluster) -> None:
    """Connections that never show the token are bounded: past the bound the node closes them."""
    from executor._ray.channel import _UNPROVEN

    async with on_second() as ex:
        assert (await ex.exec_cmd(Command.shell("echo before"))).text() == "before\n"
        assert ex._connections is not None
        strangers = [
            await asyncio.open_connection(ex._connections.host, ex._connections.port)
            for _ in range(_UNPROVEN)
        ]
        try:
            await anyio.sleep(0.5)  # the node has taken them all
            reader, writer = await asyncio.open_connection(
                ex._connections.host, ex._connections.port
            )
            with anyio.fail_after(5):
                assert await reader.read() == b"", "a stranger past the bound was kept"
            writer.close()
            # The executor's kept connection still carries commands.
            assert (await ex.exec_cmd(Command.shell("echo during"))).text() == "during\n"
        finally:
            for _, stranger in strangers:
                stranger.close()


async def test_pool_spreads_executors_over_the_nodes(cluster: RayCluster) -> None:
    async with RayPool(2, options={"kill_grace": 0.2}) as pool:
        executors = [pool.executor(index) for index in range(4)]
        async with anyio.create_task_group() as tasks:
            for ex in executors:
                tasks.start_soon(ex.exec_cmd, Command.shell("true"))
        placed = await pool.placements()
        assert {info.node_id for info in placed} == {
            cluster.head["node_id"],
            cluster.second["node_id"],
        }
        # Executors of one bundle share its node.
        assert placed[0].node_id == placed[2].node_id
        assert placed[1].node_id == placed[3].node_id
        out = await executors[1].exec_cmd(Command.shell('echo "$EXECUTOR_RAY_NODE_ID"'))
        assert out.text().strip() == placed[1].node_id


@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_trio_is_refused_before_anything_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under trio every entry raises ExecutorError saying asyncio is needed, at once.

    Not trio's own `TypeError` from awaiting Ray's asyncio futures: the check
    comes before Ray is connected or an actor made, so no cluster is needed.
    """
    import executor._ray.executor as ray_executor

    started: list[str] = []

    async def connected(address: str | None) -> None:
        started.append(f"connect {address}")

    def actor_class() -> Any:
        started.append("actor")
        raise AssertionError("an actor was made under trio")

    monkeypatch.setattr(ray_executor, "_connected", connected)
    monkeypatch.setattr(ray_executor, "_actor_class", actor_class)
    initialized = ray.is_initialized()
    refused = pytest.raises(ExecutorError, match=r"RayExecutor needs asyncio.*backend='asyncio'")

    ex = RayExecutor("127.0.0.1:1")
    with refused:
        async with ex:
            pass
    with refused:
        await ex.exec_cmd(Command.shell("echo hi"))
    with refused:
        await ex.exec_cmd_streaming(Command.exec(["echo", "hi"]), lambda chunk: None)
    with refused:
        await ex.exec_cmd(Command.read_file("x"))
    with refused:
        await ex.exec_cmd(Command.write_file("x", b"y"))
    with refused:
        await ex.start(Command.shell("cat"))
    with refused:
        ex.shell()
    with refused:
        async for _ in ex.stream_files("."):
            pass
    with refused:
        await ex.node()
    await ex.aclose()

    pool = RayPool(2, address="127.0.0.1:1")
    pool_refused = pytest.raises(ExecutorError, match=r"RayPool needs asyncio")
    with pool_refused:
        async with pool:
            pass
    with pool_refused:
        await pool.ready()
    with pool_refused:
        pool.executor(0)
    with pool_refused:
        await pool.placements()
    await pool.aclose()

    assert started == []
    assert ex._actor is None
    assert ex._connections is None
    assert pool._group is None
    assert ray.is_initialized() is initialized
