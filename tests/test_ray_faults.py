"""RayExecutor and RayPool under faults, on the real Ray cluster of `ray_cluster.py` (127.0.0.1).

- A worker node lost mid-command (its raylet killed by pid): the command
  fails with `ExecutorError` naming the node, long before its timeout, and
  its tree ends; the executor places its next actor again by its rules.
- A `RayPool` made before a node was lost: the lost node's bundle is placed
  again on a living node, and its executors' next commands run there.
- An `Idempotent` run on a node lost mid-command is never run twice.
- The driver's own process SIGKILLed mid-command: Ray ends its actors, and
  the command's tree on the node ends with its actor; the journal marks the
  run interrupted.

Every node lost here is one these tests add to the cluster and kill; the
command's tree runs on this machine, so the process table shows whether it
lives. Without Ray the tests skip, and with `EXECUTOR_REQUIRE_RAY=1` (CI)
they fail instead.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import anyio
import psutil
import pytest

from executor import (
    Chunk,
    Command,
    ExecutorError,
    IdempotencyKey,
    Idempotent,
    RunInterrupted,
    SqliteJournal,
)

pytestmark = pytest.mark.anyio

REQUIRED = os.environ.get("EXECUTOR_REQUIRE_RAY") == "1"

try:
    from ray_cluster import LOOPBACK_ENV, RayCluster

    # Before Ray reads its settings: the driver, too, speaks to 127.0.0.1 only.
    os.environ.update(LOOPBACK_ENV)
    import ray
    from test_ray import gone, idle, marked_processes

    from executor import RayExecutor, RayPool
except ImportError as error:  # pragma: no cover - without the extra
    if REQUIRED:
        raise
    pytest.skip(f"Ray is not installed: {error}", allow_module_level=True)

# A command's own timeout here: a lost node must fail it long before.
LONG = 600.0
# Seconds a lost node's command may take to fail, or a killed driver's tree
# to end: the test fails rather than hang past them.
NODE_LOSS_BOUND = 60.0


@pytest.fixture
def anyio_backend() -> str:
    """Only asyncio: Ray's object references are asyncio futures."""
    return "asyncio"


@pytest.fixture(scope="module")
def cluster(ray_driver: RayCluster) -> RayCluster:
    """The run's cluster, with this process connected to it as a driver."""
    return ray_driver


def new_node(cluster: RayCluster) -> dict[str, Any]:
    """One more node, with a custom resource of its own name; its id, raylet pid and resource."""
    resource = f"fault-{uuid.uuid4().hex[:8]}"
    node = cluster.add_node(resource)
    return {**node, "resource": resource}


def living_nodes() -> set[str]:
    """The ids of the cluster's nodes Ray counts alive."""
    nodes: list[dict[str, Any]] = ray.nodes()  # type: ignore[no-untyped-call]
    return {node["NodeID"] for node in nodes if node["Alive"]}


def lose(node: dict[str, Any]) -> None:
    """Kill the node's raylet by pid: the node is lost, as to a crash or an OOM kill."""
    os.kill(node["raylet_pid"], signal.SIGKILL)


async def fail_when_node_lost(
    run: Any, command: Command, node: dict[str, Any], marker: str
) -> ExecutorError:
    """Run `command` with `run(command, sink)`, lose `node` once it printed and `marker` runs.

    Returns the `ExecutorError` it failed with (anything else fails the test).
    """
    printed = anyio.Event()

    def sink(chunk: Chunk) -> None:
        printed.set()

    async def lose_when_running() -> None:
        await printed.wait()
        while not marked_processes(marker):
            await anyio.sleep(0.05)
        lose(node)

    with anyio.fail_after(NODE_LOSS_BOUND):
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(lose_when_running)
            with pytest.raises(ExecutorError) as failed:
                await run(command, sink)
            tasks.cancel_scope.cancel()
    return failed.value


def command_line(marker: str, counter: Path | None = None) -> Command:
    """A command that counts its run in `counter`, prints, then idles as `marker`."""
    count = f"echo run >> {counter}; " if counter is not None else ""
    return Command.shell(f"{count}echo up; exec {idle(marker)}").with_timeout(LONG)


@pytest.mark.parametrize("direct", [True, False], ids=["channel", "ray-calls"])
async def test_a_lost_node_fails_its_command_naming_it_and_leaves_no_tree(
    cluster: RayCluster, direct: bool
) -> None:
    """Raylet killed mid-command: `ExecutorError` naming the node, well before the timeout.

    Over the actor's channel and through Ray's calls alike. The command's
    tree on the node ends; the next command places a new actor by the same
    rules, and says so clearly when no living node has what it asks for.
    """
    victim = new_node(cluster)
    marker = f"ray-lost-node-{uuid.uuid4().hex[:8]}"
    ex = RayExecutor(
        resources={victim["resource"]: 0.01},
        kill_grace=0.2,
        ping_interval=0.5,
        ping_timeout=5,
        direct=direct,
    )
    try:
        assert (await ex.node()).node_id == victim["node_id"]
        # Placed: a short wait for placing it again once its node is lost.
        ex.placement_timeout = 5
        error = await fail_when_node_lost(
            ex.exec_cmd_streaming, command_line(marker), victim, marker
        )
        assert type(error) is ExecutorError, f"a lost node read as the command's end: {error!r}"
        assert victim["node_id"] in str(error), error
        assert await gone(marker, within=20), "the command's tree outlived its node"
        # The only node with the resource is gone: placing again is refused, not a hang.
        with anyio.fail_after(NODE_LOSS_BOUND):
            with pytest.raises(ExecutorError, match="no node of the Ray cluster took the actor"):
                await ex.exec_cmd(Command.shell("echo again"))
    finally:
        await ex.aclose()


async def test_an_executor_whose_actor_died_places_a_new_one(
    cluster: RayCluster, tmp_path: Path
) -> None:
    """The actor killed mid-command: that command fails, the next runs in a new actor, once."""
    counter = tmp_path / "runs"
    marker = f"ray-actor-killed-{uuid.uuid4().hex[:8]}"
    ex = RayExecutor(
        workdir=str(tmp_path), resources={"second": 0.01}, kill_grace=0.2, ping_interval=0.5
    )
    try:
        first = await ex.node()
        printed = anyio.Event()

        async def kill_when_running() -> None:
            await printed.wait()
            while not marked_processes(marker):
                await anyio.sleep(0.05)
            ray.kill(ex._actor, no_restart=True)

        with anyio.fail_after(NODE_LOSS_BOUND):
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(kill_when_running)
                with pytest.raises(ExecutorError, match=first.node_id):
                    await ex.exec_cmd_streaming(
                        command_line(marker, counter), lambda chunk: printed.set()
                    )
        assert await gone(marker, within=20), "the command outlived its actor"
        out = await ex.exec_cmd(Command.shell("echo after; cat runs"))
        assert out.text() == "after\nrun\n", "the lost command ran again"
        second = await ex.node()
        assert second.node_id == cluster.second["node_id"]
        assert second.pid != first.pid, "the dead actor was used again"
    finally:
        await ex.aclose()


async def test_a_pool_places_a_lost_nodes_bundle_again(cluster: RayCluster) -> None:
    """A pool made before a node was lost: that bundle's next commands run on a living node."""
    victim = new_node(cluster)
    alive = living_nodes()
    marker = f"ray-pool-lost-{uuid.uuid4().hex[:8]}"
    options = {"kill_grace": 0.2, "ping_interval": 0.5, "ping_timeout": 5}
    # One bundle a node (SPREAD), so one of them is on the victim.
    async with RayPool(len(alive), options=options) as pool:
        executors = [pool.executor(index) for index in range(len(alive))]
        placed = [info.node_id for info in await pool.placements()]
        assert victim["node_id"] in placed, f"no bundle on the victim: {placed}"
        lost = placed.index(victim["node_id"])

        error = await fail_when_node_lost(
            executors[lost].exec_cmd_streaming, command_line(marker), victim, marker
        )
        assert type(error) is ExecutorError, error
        assert victim["node_id"] in str(error), error
        assert await gone(marker, within=20), "the command's tree outlived its node"

        # The same executor, and a new one of that bundle, run on a living
        # node once the cluster has placed the bundle again (within the
        # default placement_timeout); the other bundles never moved.
        with anyio.fail_after(150):
            out = await executors[lost].exec_cmd(Command.shell('echo "$EXECUTOR_RAY_NODE_ID"'))
        moved_to = out.text().strip()
        living = living_nodes()
        assert moved_to in living, (moved_to, living)
        assert moved_to != victim["node_id"]
        again = pool.executor(lost)
        out = await again.exec_cmd(Command.shell('echo "$EXECUTOR_RAY_NODE_ID"'))
        assert out.text().strip() == moved_to, "a bundle's executors share its node"
        now = [info.node_id for info in await pool.placements()]
        assert victim["node_id"] not in now
        assert now[lost] == now[-1] == moved_to
        kept = [node for index, node in enumerate(placed) if index != lost]
        assert [node for index, node in enumerate(now[: len(placed)]) if index != lost] == kept
        for index, ex in enumerate(executors):
            out = await ex.exec_cmd(Command.shell(f"echo {index}"))
            assert out.text() == f"{index}\n"


async def test_an_idempotent_run_on_a_lost_node_never_runs_twice(
    cluster: RayCluster, tmp_path: Path
) -> None:
    """The node dies mid-command: the run's error is kept, and its key never runs it again."""
    victim = new_node(cluster)
    marker = f"ray-idem-lost-{uuid.uuid4().hex[:8]}"
    counter = tmp_path / "runs"
    command = command_line(marker, counter)
    key = IdempotencyKey.new()
    ex = RayExecutor(
        resources={victim["resource"]: 0.01},
        kill_grace=0.2,
        ping_interval=0.5,
        ping_timeout=5,
    )
    try:
        async with SqliteJournal(tmp_path / "journal.sqlite3") as journal:
            keyed = Idempotent(ex, journal).keyed(key)
            error = await fail_when_node_lost(keyed.exec_cmd_streaming, command, victim, marker)
            assert victim["node_id"] in str(error), error
            assert await gone(marker, within=20)
            assert counter.read_text() == "run\n"
            # The same key, through the same journal: the recorded error, nothing run.
            with pytest.raises(ExecutorError) as repeated:
                await keyed.exec_cmd(command)
            assert keyed.replayed
            assert str(repeated.value) == str(error)
        # And through the journal opened again, with an executor that could run it.
        async with (
            SqliteJournal(tmp_path / "journal.sqlite3") as journal,
            RayExecutor(resources={"second": 0.01}, kill_grace=0.2) as living,
        ):
            again = Idempotent(living, journal).keyed(key)
            with pytest.raises(ExecutorError, match=victim["node_id"]):
                await again.exec_cmd(command)
            assert again.replayed
        await anyio.sleep(1)  # a run started late would have counted by now
        assert counter.read_text() == "run\n", "the command ran twice"
        assert not marked_processes(marker)
    finally:
        await ex.aclose()


# The driver the next test kills: an idempotent command on the second node,
# through a journal. On the pipe it is given (Ray prints to stdout), it
# writes the actor's worker pid, then the command's output.
DRIVER = """
import json, os, sys
import anyio
from executor import Command, IdempotencyKey, Idempotent, RayExecutor, SqliteJournal

address, journal_path, key, direct, command, pipe = sys.argv[1:]

async def main():
    ex = RayExecutor(address, resources={"second": 0.01}, direct=direct == "1")
    os.write(int(pipe), (json.dumps({"worker": (await ex.node()).pid}) + "\\n").encode())
    async with SqliteJournal(journal_path) as journal:
        keyed = Idempotent(ex, journal).keyed(key)
        await keyed.exec_cmd_streaming(
            Command.shell(command), lambda chunk: os.write(int(pipe), chunk.data)
        )

anyio.run(main, backend="asyncio")
"""


@pytest.mark.parametrize("direct", [True, False], ids=["channel", "ray-calls"])
async def test_a_killed_driver_leaves_no_tree_and_the_run_interrupted(
    cluster: RayCluster, tmp_path: Path, direct: bool
) -> None:
    """SIGKILL to the driver mid-command: its actor, and the command's tree, end in seconds.

    Nothing of the driver runs its cleanup: Ray ends the actors of a dead
    driver, and the node's command tree dies with its actor (over the
    channel, the node also sees the connection end). The journal marks the
    run interrupted, so the key never runs it again.
    """
    marker = f"ray-driver-killed-{uuid.uuid4().hex[:8]}"
    counter = tmp_path / "runs"
    journal_path = tmp_path / "journal.sqlite3"
    key = str(IdempotencyKey.new())
    command = f"echo run >> {counter}; echo up; exec {idle(marker)}"
    reading, writing = os.pipe()
    argv = [cluster.address, str(journal_path), key, str(int(direct)), command, str(writing)]
    try:
        driver = subprocess.Popen(
            [sys.executable, "-c", DRIVER, *argv],
            stdout=subprocess.DEVNULL,
            pass_fds=(writing,),
            env={**os.environ, **LOOPBACK_ENV},
        )
    finally:
        os.close(writing)  # the pipe ends (no hang) once the driver is gone
    said = os.fdopen(reading, "rb")
    try:
        # In a thread, given up on a timeout: the driver is then killed, ending the pipe.
        with anyio.fail_after(120):
            line = await anyio.to_thread.run_sync(said.readline, abandon_on_cancel=True)
            worker = json.loads(line)["worker"]
            line = await anyio.to_thread.run_sync(said.readline, abandon_on_cancel=True)
            assert line == b"up\n"
        with anyio.fail_after(30):
            while not marked_processes(marker):
                await anyio.sleep(0.05)
        driver.send_signal(signal.SIGKILL)
        driver.wait(30)
        assert await gone(marker, within=NODE_LOSS_BOUND), "the command outlived its driver"
        deadline = anyio.current_time() + NODE_LOSS_BOUND
        while psutil.pid_exists(worker) and psutil.Process(worker).status() != "zombie":
            assert anyio.current_time() < deadline, "the actor's worker outlived its driver"
            await anyio.sleep(0.1)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait(30)
        said.close()
    assert counter.read_text() == "run\n"
    async with (
        SqliteJournal(journal_path) as journal,
        RayExecutor(resources={"second": 0.01}, kill_grace=0.2) as living,
    ):
        with pytest.raises(RunInterrupted):
            await Idempotent(living, journal).keyed(key).exec_cmd(Command.shell(command))
    await anyio.sleep(1)
    assert counter.read_text() == "run\n", "the interrupted run ran again"
