"""SSH faults with a real sshd: the executor's process killed, the connection cut, sshd restarted.

Every fault is real: a Python process running an SshExecutor is SIGKILLed
mid-command, the sshd processes serving a connection are SIGKILLed (found by
the client's port), the private sshd is stopped and started again. The
remote host is this machine, so what is left running there is read straight
from the process table: every command runs with a marker of its own in its
environment, which every process it starts inherits.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anyio
import psutil
import pytest
from ssh_server import SshServer, start_server

from executor import (
    Chunk,
    Command,
    ExecutorError,
    ShellExited,
    SshExecutor,
    TimedOut,
)

pytestmark = pytest.mark.anyio

MARKER = "EXECUTOR_FAULT_MARKER"
# How long a remote tree may outlive the fault: the kill grace (0.2 s here),
# the guard's look at the process table, and a loaded machine's slowness.
GONE_WITHIN = 20.0

# Run as `python -c CHILD SETTINGS`: an SshExecutor that starts what SETTINGS'
# "mode" says and prints "ready" once it runs, then waits to be killed.
CHILD = r"""
import json, sys
import anyio
from executor import Command, SshExecutor

settings = json.loads(sys.argv[1])


def ready(chunk):
    if b"ready" in chunk.data:
        print("ready", flush=True)


async def main():
    async with SshExecutor(**settings["executor"]) as ex:
        if settings["mode"] == "exec":
            # A job left running by a command that ended, then one in flight.
            await ex.exec_cmd(Command.shell("nohup sleep 300 >/dev/null 2>&1 &"))
            await ex.exec_cmd_streaming(
                Command.shell("sleep 300 & echo ready; sleep 300"), ready
            )
        else:
            async with ex.shell() as sh:
                await sh.start_job("sleep 300")
                await sh.run("sleep 300 & echo ready; sleep 300", sink=ready)


anyio.run(main, backend="asyncio")
"""


@pytest.fixture
def anyio_backend() -> str:
    """Only asyncio: asyncssh has no trio support."""
    return "asyncio"


@pytest.fixture
def marker() -> str:
    """A value no other process carries; every command of the test runs with it."""
    return f"fault-{uuid.uuid4().hex}"


@pytest.fixture
def private_server() -> Iterator[SshServer]:
    """A private sshd of the test's own, for faults that would hit other tests' connections."""
    server = start_server()
    if server is None:
        if os.environ.get("EXECUTOR_REQUIRE_SSH") == "1":
            pytest.fail("EXECUTOR_REQUIRE_SSH=1, but /usr/sbin/sshd is not installed")
        pytest.skip("no /usr/sbin/sshd (install openssh-server to run the SSH tests)")
    yield server
    server.stop()


@pytest.fixture
def leftovers(marker: str) -> Iterator[None]:
    """SIGKILL (by pid) what a failing test left with the marker, after the test has looked."""
    yield
    for process in marked(marker):
        process.kill()


def marked(marker: str) -> list[psutil.Process]:
    """Live processes (not zombies) whose environment carries `marker`."""
    found = []
    for process in psutil.process_iter():
        try:
            if process.status() == psutil.STATUS_ZOMBIE:
                continue
            if process.environ().get(MARKER) == marker:
                found.append(process)
        except psutil.Error:
            continue  # Gone meanwhile, or not ours to read.
    return found


def sleeping(marker: str) -> int:
    """How many `sleep` processes carry `marker`."""
    count = 0
    for process in marked(marker):
        try:
            count += process.name() == "sleep"
        except psutil.Error:
            continue
    return count


def wait_marked(marker: str, sleeps: int) -> None:
    """Wait until `sleeps` sleep processes carry `marker`."""
    deadline = time.monotonic() + 30
    while sleeping(marker) < sleeps:
        assert time.monotonic() < deadline, f"only {sleeping(marker)} of {sleeps} sleeps started"
        time.sleep(0.05)


def wait_gone(marker: str) -> float:
    """Seconds until no process carries `marker`; fails naming the survivors after GONE_WITHIN."""
    started = time.monotonic()
    while left := marked(marker):
        if time.monotonic() - started > GONE_WITHIN:
            described = [(process.pid, process.cmdline()) for process in left]
            pytest.fail(f"still running {GONE_WITHIN} s after the fault: {described}")
        time.sleep(0.05)
    return time.monotonic() - started


def settings(server: SshServer, marker: str) -> dict[str, Any]:
    """SshExecutor's arguments for `server`, with `marker` in every command's environment."""
    return {
        "host": server.host,
        "port": server.port,
        "user": server.user,
        "client_keys": [server.client_key],
        "known_hosts": server.known_hosts,
        "workdir": server.workdir(),
        "kill_grace": 0.2,
        "envs": {MARKER: marker},
    }


async def client_port(ex: SshExecutor) -> int:
    """The client's port of `ex`'s connection, as sshd tells its commands (`SSH_CONNECTION`)."""
    output = await ex.exec_cmd(Command.shell('echo "$SSH_CONNECTION"'))
    return int(output.stdout.split()[1])


def connection_processes(server: SshServer, port: int) -> list[psutil.Process]:
    """The sshd processes serving the connection from the client's `port`."""
    found = []
    for process in server.serving():
        try:
            links = process.net_connections("tcp")
        except psutil.Error:
            continue
        if any(link.raddr and link.raddr.port == port for link in links):
            found.append(process)
    assert found, f"no sshd process serves the connection from port {port}"
    return found


# --- the executor's own process killed --------------------------------------------


@pytest.mark.usefixtures("leftovers")
@pytest.mark.parametrize("mode", ["exec", "shell"])
def test_a_killed_executor_leaves_nothing_running(
    ssh_server: SshServer, marker: str, mode: str
) -> None:
    """SIGKILL to the executor's process: its remote trees end within seconds.

    `exec`: a command in flight with a background child, and a job a
    finished command left running. `shell`: a persistent shell, a job of
    its, and a command in it with a background child of its own.
    """
    argument = json.dumps({"mode": mode, "executor": settings(ssh_server, marker)})
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, argument],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
    )
    try:
        assert child.stdout is not None
        line = child.stdout.readline()
        assert line == b"ready\n", f"the child did not start its command: {line!r}"
        # exec: the finished command's job and the two of the one in flight.
        # shell: the job and the two of the command in flight.
        wait_marked(marker, 3)
        child.kill()
        child.wait(30)
        wait_gone(marker)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        if child.stdout is not None:
            child.stdout.close()


# --- the connection cut -------------------------------------------------------------


@pytest.fixture
async def ex(ssh_server: SshServer, marker: str) -> AsyncIterator[SshExecutor]:
    """An SshExecutor whose commands all carry `marker`."""
    async with SshExecutor(**settings(ssh_server, marker)) as executor:
        yield executor


async def run_through_fault(ex: SshExecutor, fault: Any, timeout: float) -> ExecutorError:
    """Run a command that starts a background child and says ready; `fault()` at ready.

    Returns the ExecutorError the command raised, which must come well
    before the command's own `timeout`.
    """
    faulted = False

    async def sink(chunk: Chunk) -> None:
        nonlocal faulted
        if b"ready" in chunk.data and not faulted:
            faulted = True
            await anyio.to_thread.run_sync(fault)

    script = "sleep 300 & echo ready; sleep 300"
    started = time.monotonic()
    with pytest.raises(ExecutorError) as caught:
        await ex.exec_cmd_streaming(Command.shell(script).with_timeout(timeout), sink)
    assert time.monotonic() - started < timeout / 2
    assert faulted
    assert caught.value.output.stdout == b"ready\n"
    return caught.value


@pytest.mark.usefixtures("leftovers")
async def test_a_cut_connection_fails_the_command_and_the_next_reconnects(
    ssh_server: SshServer, ex: SshExecutor, marker: str
) -> None:
    """The connection's sshd processes SIGKILLed mid-command: a clear error, then a new one.

    The command fails with ExecutorError naming the host, well before its
    timeout; nothing it started runs on; the same executor runs the next
    command over a new connection.
    """
    first = (await ex.exec_cmd(Command.shell("echo $PPID"))).stdout
    port = await client_port(ex)

    def cut() -> None:
        for process in connection_processes(ssh_server, port):
            process.kill()

    error = await run_through_fault(ex, cut, timeout=120)
    assert f"{ssh_server.host}:{ssh_server.port}" in error.message
    assert "lost" in error.message
    # The next command's own processes end with it; nothing else carries the marker.
    wait_gone(marker)
    again = await ex.exec_cmd(Command.shell("echo $PPID; echo again"))
    parent, word = again.stdout.split()
    assert word == b"again"
    assert parent + b"\n" != first
    wait_gone(marker)


@pytest.mark.usefixtures("leftovers")
async def test_sshd_restarted_with_its_connections(private_server: SshServer, marker: str) -> None:
    """The listener and the processes serving its connections stopped, sshd started again.

    The command in flight fails with ExecutorError naming the host; what it
    started ends; the same executor reconnects to the new sshd.
    """
    async with SshExecutor(**settings(private_server, marker)) as ex:
        await ex.exec_cmd(Command.shell("true"))
        old = private_server.process.pid

        def restart() -> None:
            private_server.restart(sessions=True)

        error = await run_through_fault(ex, restart, timeout=120)
        assert private_server.process.pid != old
        assert f"{private_server.host}:{private_server.port}" in error.message
        wait_gone(marker)
        assert (await ex.exec_cmd(Command.shell("echo again"))).stdout == b"again\n"
        # Over a connection the new sshd accepted.
        listeners = {process.ppid() for process in private_server.serving()}
        assert private_server.process.pid in listeners
    wait_gone(marker)


@pytest.mark.usefixtures("leftovers")
async def test_sshd_restarted_alone_leaves_the_connection_be(
    private_server: SshServer, marker: str
) -> None:
    """OpenSSH's own restart (the listener only): the command in flight runs to its end.

    The connection's processes outlive the listener, so the command's output
    is whole and the executor goes on over the same connection.
    """
    async with SshExecutor(**settings(private_server, marker)) as ex:
        before = (await ex.exec_cmd(Command.shell("echo $PPID"))).stdout
        restarted = False

        async def sink(chunk: Chunk) -> None:
            nonlocal restarted
            if b"ready" in chunk.data and not restarted:
                restarted = True
                await anyio.to_thread.run_sync(lambda: private_server.restart(sessions=False))

        output = await ex.exec_cmd_streaming(
            Command.shell("echo ready; sleep 0.5; echo done").with_timeout(120), sink
        )
        assert restarted
        assert output.stdout == b"ready\ndone\n"
        assert (await ex.exec_cmd(Command.shell("echo $PPID"))).stdout == before
    wait_gone(marker)


@pytest.mark.usefixtures("leftovers")
async def test_a_silent_connection_times_out_and_the_kill_goes_over_a_new_one(
    ssh_server: SshServer, ex: SshExecutor, marker: str
) -> None:
    """The connection's sshd processes stopped mid-command, as a network dropping every packet.

    The keepalives (every 15 s) take most of a minute to give up on it; the
    command's own timeout comes first. It raises TimedOut a bounded time
    after its timeout (the kill waits that long for an answer), the kill
    reaches the tree over a new connection, and the next command runs on
    that one at once.
    """
    first = (await ex.exec_cmd(Command.shell("echo $PPID"))).stdout
    port = await client_port(ex)
    stopped: list[psutil.Process] = []

    async def sink(chunk: Chunk) -> None:
        if b"ready" in chunk.data and not stopped:
            stopped.extend(await anyio.to_thread.run_sync(connection_processes, ssh_server, port))
            for process in stopped:
                process.suspend()

    try:
        started = time.monotonic()
        with pytest.raises(TimedOut) as caught:
            await ex.exec_cmd_streaming(
                Command.shell("sleep 300 & echo ready; sleep 300").with_timeout(2), sink
            )
        # The timeout, the kill's wait for an answer (grace, settling, 5 s),
        # a new connection: well before the keepalives' 45 s.
        assert time.monotonic() - started < 30
        assert caught.value.output.stdout == b"ready\n"
        assert stopped
        wait_gone(marker)
        with anyio.fail_after(20):
            again = await ex.exec_cmd(Command.shell("echo $PPID"))
        assert again.stdout != first
    finally:
        for process in stopped:
            process.kill()
    wait_gone(marker)


@pytest.mark.usefixtures("leftovers")
async def test_a_cut_connection_ends_a_persistent_shell_and_its_jobs(
    ssh_server: SshServer, ex: SshExecutor, marker: str
) -> None:
    """A persistent shell whose connection is cut mid-command: its command fails, nothing runs on.

    The shell, its job and its command's background child all end; the next
    command in the same shell object runs in a new shell over a new connection.
    """
    port = await client_port(ex)
    cut = False

    async def sink(chunk: Chunk) -> None:
        nonlocal cut
        if b"ready" in chunk.data and not cut:
            cut = True
            serving = await anyio.to_thread.run_sync(connection_processes, ssh_server, port)
            for process in serving:
                process.kill()

    async with ex.shell() as sh:
        await sh.start_job("sleep 300")
        started = time.monotonic()
        # The shell is gone with its connection: ShellExited naming the lost
        # connection (not an exit of the command's), the next run in a new one.
        with pytest.raises(ShellExited, match="was lost while the command ran") as raised:
            await sh.run("sleep 300 & echo ready; sleep 300", sink=sink, timeout=120)
        assert isinstance(raised.value.__cause__, ExecutorError)
        assert time.monotonic() - started < 60
        assert cut
        wait_gone(marker)
        again = await sh.run("echo again")
        assert again.stdout == b"again\n"
        assert again.state_lost
    wait_gone(marker)
