"""SshExecutor against a real OpenSSH server: the contract, remote kills, reconnects, host keys.

The tests start a private sshd (see `ssh_server.py`) and skip when
`/usr/sbin/sshd` is missing; with `EXECUTOR_REQUIRE_SSH=1` (CI) they fail
instead. sshd runs on this machine, so the remote processes are local ones
too: the shared check that no test leaves a tagged process running covers
them as well.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import anyio.lowlevel
import pytest
from ssh_server import SshServer

from executor import (
    Chunk,
    Command,
    ExecutorError,
    LocalExecutor,
    NonZeroExit,
    ReadOnly,
    SshExecutor,
    TimedOut,
    ToolExecutor,
)
from executor.testing import ExecutorContract, ReadOnlyContract, SessionContract, read_until

pytestmark = pytest.mark.anyio

REQUIRED = os.environ.get("EXECUTOR_REQUIRE_SSH") == "1"


@pytest.fixture
def anyio_backend() -> str:
    """Only asyncio: asyncssh has no trio support (the refusal under trio is tested below)."""
    return "asyncio"


def connect(server: SshServer, workdir: str | None = None, **options: Any) -> SshExecutor:
    """An executor for the test server, in a new empty workdir unless given one."""
    settings: dict[str, Any] = {
        "port": server.port,
        "user": server.user,
        "client_keys": [server.client_key],
        "known_hosts": server.known_hosts,
        "workdir": workdir if workdir is not None else server.workdir(),
        "kill_grace": 0.2,
    }
    return SshExecutor(server.host, **{**settings, **options})


class SshFixtures:
    """An SshExecutor in a new empty remote folder, closed after the test."""

    @pytest.fixture
    async def executor(self, ssh_server: SshServer) -> AsyncIterator[ToolExecutor]:
        """The executor under test."""
        async with connect(ssh_server) as executor:
            yield executor


class TestSshContract(ExecutorContract, SshFixtures):
    """The shared contract, against an SshExecutor and a real sshd."""


class TestSshSessions(SessionContract, SshFixtures):
    """The session contract, against an SshExecutor and a real sshd."""


class TestSshReadOnly(ReadOnlyContract):
    """ReadOnly over SSH: reads work, writes and shell commands are refused."""

    @pytest.fixture
    async def writer(self, ssh_server: SshServer) -> AsyncIterator[ToolExecutor]:
        """An SshExecutor that may write, in a new folder."""
        async with connect(ssh_server) as executor:
            yield executor

    @pytest.fixture
    async def executor(
        self, ssh_server: SshServer, writer: SshExecutor
    ) -> AsyncIterator[ToolExecutor]:
        """A read-only SshExecutor on the writer's folder."""
        async with connect(ssh_server, writer.workdir) as executor:
            yield ReadOnly(executor)


@pytest.fixture
async def ex(ssh_server: SshServer) -> AsyncIterator[SshExecutor]:
    """An SshExecutor in a new empty remote folder."""
    async with connect(ssh_server) as executor:
        yield executor


async def remote_alive(ex: SshExecutor, pids: list[int]) -> list[int]:
    """Which of `pids` still run (not zombies), asked on the remote host through a new channel."""
    script = 'for p in "$@"; do s=$(cat /proc/$p/stat 2>/dev/null) || continue; '
    script += 'set -- ${s##*) }; [ "$1" = Z ] || echo "$p"; done'
    output = await ex.exec_cmd(Command.exec(["sh", "-c", script, "sh", *map(str, pids)]))
    return [int(line) for line in output.stdout.split()]


async def read_pids(ex: SshExecutor, *names: str) -> list[int]:
    """Wait until each pid file in the workdir holds a pid, and return them."""
    pids = []
    with anyio.fail_after(10):
        for name in names:
            while True:
                try:
                    text = (await ex.exec_cmd(Command.read_file(name))).stdout.strip()
                except NonZeroExit:
                    text = b""
                if text:
                    pids.append(int(text))
                    break
                await anyio.sleep(0.02)
    return pids


async def wait_gone(ex: SshExecutor, pids: list[int]) -> None:
    """Wait until none of `pids` runs on the remote host; fail naming the survivors."""
    deadline = time.monotonic() + 5
    while left := await remote_alive(ex, pids):
        if time.monotonic() > deadline:
            raise AssertionError(f"still running on the remote host: {left}")
        await anyio.sleep(0.05)


# A background sleep, a setsid escapee, one that also drops the tag (found
# as a descendant), a TERM-ignorer and a daemon that double-forks away from
# the group and the session.
TREE = """
sleep 300 & echo $! > bg.pid
setsid sleep 301 & echo $! > setsid.pid
setsid env -u EXECUTOR_PROCESS_TREE sh -c 'echo $$ > untagged.pid; exec sleep 302' &
sh -c 'trap "" TERM; echo $$ > stubborn.pid; while :; do sleep 0.05; done' &
python3 -c '
import os, time
if os.fork(): os._exit(0)
os.setsid()
if os.fork(): os._exit(0)
open("daemon.pid", "w").write(str(os.getpid()))
time.sleep(300)
' &
echo started
sleep 300
"""
PID_FILES = ("bg.pid", "setsid.pid", "untagged.pid", "stubborn.pid", "daemon.pid")


async def test_timeout_kills_the_whole_remote_tree(ex: SshExecutor) -> None:
    """After a timeout no process of the command survives remotely, and TimedOut has the output."""
    started = time.monotonic()
    with pytest.raises(TimedOut) as caught:
        await ex.exec_cmd(Command.shell(TREE).with_timeout(1.5))
    assert time.monotonic() - started < 10
    assert caught.value.output.stdout == b"started\n"
    pids = await read_pids(ex, *PID_FILES)
    assert await remote_alive(ex, pids) == []


async def test_cancellation_kills_the_remote_tree(ex: SshExecutor) -> None:
    """A cancelled command's remote tree is killed before the cancellation goes on."""
    with anyio.move_on_after(1.5) as scope:
        await ex.exec_cmd(Command.shell(TREE))
    assert scope.cancelled_caught
    pids = await read_pids(ex, *PID_FILES)
    assert await remote_alive(ex, pids) == []


async def test_sink_error_kills_the_remote_tree(ex: SshExecutor) -> None:
    """A failing sink stops the remote command and its background child, and propagates."""

    class Stop(Exception):
        pass

    def sink(chunk: Chunk) -> None:
        if b"ready" in chunk.data:
            raise Stop

    with pytest.raises(Stop):
        await ex.exec_cmd_streaming(
            Command.shell("sleep 300 & echo $! > bg.pid; echo ready; sleep 300"), sink
        )
    pids = await read_pids(ex, "bg.pid")
    assert await remote_alive(ex, pids) == []


async def test_aclose_ends_background_jobs(ssh_server: SshServer) -> None:
    """A job left running by a finished command runs until aclose(), which kills it."""
    workdir = ssh_server.workdir()
    async with connect(ssh_server, workdir) as ex:
        await ex.exec_cmd(Command.shell("nohup sleep 300 >/dev/null 2>&1 & echo $! > job.pid"))
        pids = await read_pids(ex, "job.pid")
        assert await remote_alive(ex, pids) == pids
    async with connect(ssh_server, workdir) as checker:
        await wait_gone(checker, pids)


async def test_dropped_connection_is_reopened(ex: SshExecutor) -> None:
    """When the connection drops between commands, the next command opens a new one."""
    first = int((await ex.exec_cmd(Command.shell("echo $PPID"))).stdout)
    # The parent of the login shell is sshd's process for this connection:
    # killing it drops the connection as a network failure would.
    os.kill(first, signal.SIGKILL)
    output = await ex.exec_cmd(Command.shell("echo $PPID; echo again"))
    second, again = output.stdout.split()
    assert again == b"again"
    assert int(second) != first
    assert (await ex.exec_cmd(Command.write_file("f", "x"))).exit_code is None
    os.kill(int(second), signal.SIGKILL)
    # File commands too, at once and after the connection noticed.
    assert (await ex.exec_cmd(Command.read_file("f"))).stdout == b"x"
    third = int((await ex.exec_cmd(Command.shell("echo $PPID"))).stdout)
    os.kill(third, signal.SIGKILL)
    await anyio.sleep(0.2)
    assert (await ex.exec_cmd(Command.write_file("f", "y"))).exit_code is None
    assert (await ex.exec_cmd(Command.read_file("f"))).stdout == b"y"


async def test_connection_lost_during_a_command(ex: SshExecutor) -> None:
    """A command whose connection drops fails with ExecutorError, and its remote tree is killed."""
    script = "echo $PPID; sleep 300 & echo $! > bg.pid; sleep 300"
    seen: list[bytes] = []

    def sink(chunk: Chunk) -> None:
        if not seen:
            # The parent of the login shell is sshd's process for the connection.
            os.kill(int(chunk.data.split()[0]), signal.SIGKILL)
        seen.append(chunk.data)

    with anyio.fail_after(20), pytest.raises(ExecutorError, match="lost") as caught:
        await ex.exec_cmd_streaming(Command.shell(script), sink)
    assert caught.value.output.stdout == seen[0]
    pids = await read_pids(ex, "bg.pid")
    await wait_gone(ex, pids)


async def test_commands_share_one_connection(ex: SshExecutor) -> None:
    """Sequential and concurrent commands run over the one connection."""
    parents = set()
    for _ in range(3):
        parents.add((await ex.exec_cmd(Command.shell("echo $PPID"))).stdout)
    outputs: list[bytes] = []

    async def one(number: int) -> None:
        output = await ex.exec_cmd(Command.shell(f"sleep 0.1; echo {number} $PPID"))
        outputs.append(output.stdout)

    # More than sshd's MaxSessions (10): the rest wait for a free channel.
    async with anyio.create_task_group() as tasks:
        for number in range(30):
            tasks.start_soon(one, number)
    assert sorted(int(line.split()[0]) for line in outputs) == list(range(30))
    parents |= {line.split()[1] + b"\n" for line in outputs}
    assert len(parents) == 1


def make_key(path: Path) -> Path:
    """A new ed25519 key pair at `path` and `path.pub`."""
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    return path


def fingerprint(public_key: str) -> str:
    """The SHA256 fingerprint ssh-keygen prints for a public key file."""
    listed = subprocess.run(
        ["ssh-keygen", "-l", "-E", "sha256", "-f", public_key],
        capture_output=True,
        check=True,
        text=True,
    ).stdout
    return listed.split()[1]


async def test_changed_host_key_is_refused(ssh_server: SshServer, tmp_path: Path) -> None:
    """A host key other than the one known_hosts lists refuses the connection, naming it."""
    make_key(tmp_path / "other")
    kind, key = (tmp_path / "other.pub").read_text().split()[:2]
    known = tmp_path / "known_hosts"
    known.write_text(f"[127.0.0.1]:{ssh_server.port} {kind} {key}\n")
    async with connect(ssh_server, known_hosts=str(known)) as ex:
        with pytest.raises(ExecutorError, match="CHANGED") as caught:
            await ex.exec_cmd(Command.shell("echo never"))
    assert fingerprint(f"{ssh_server.host_key}.pub") in str(caught.value)


async def test_unknown_host_key_is_refused(ssh_server: SshServer, tmp_path: Path) -> None:
    """A host known_hosts does not list is refused, with the offered key's fingerprint."""
    known = tmp_path / "known_hosts"
    known.write_text("")
    async with connect(ssh_server, known_hosts=str(known)) as ex:
        with pytest.raises(ExecutorError, match="unknown") as caught:
            await ex.exec_cmd(Command.shell("echo never"))
        with pytest.raises(ExecutorError, match="unknown"):
            await ex.exec_cmd(Command.read_file("x"))
    assert fingerprint(f"{ssh_server.host_key}.pub") in str(caught.value)


async def test_host_key_check_can_be_turned_off(ssh_server: SshServer, tmp_path: Path) -> None:
    """check_host_key=False connects to a host that known_hosts does not list."""
    known = tmp_path / "known_hosts"
    known.write_text("")
    async with connect(ssh_server, known_hosts=str(known), check_host_key=False) as ex:
        assert (await ex.exec_cmd(Command.shell("echo in"))).stdout == b"in\n"


async def test_wrong_key_is_refused(ssh_server: SshServer, tmp_path: Path) -> None:
    """A client key the server does not accept gives a clear ExecutorError."""
    key = make_key(tmp_path / "stranger")
    async with connect(ssh_server, client_keys=[str(key)], agent_path="") as ex:
        with pytest.raises(ExecutorError, match="refused"):
            await ex.exec_cmd(Command.shell("echo never"))


async def test_missing_client_key_is_named(ssh_server: SshServer, tmp_path: Path) -> None:
    """A client key file that does not exist fails the connection naming the file and the option."""
    key = tmp_path / "id_ed25519"
    expected = f"cannot read the client key {key} (client_keys): No such file or directory"
    async with connect(ssh_server, client_keys=[str(key)], agent_path="") as ex:
        with pytest.raises(ExecutorError, match=f"^{re.escape(expected)}$") as caught:
            await ex.exec_cmd(Command.shell("echo never"))
    assert isinstance(caught.value.__cause__, FileNotFoundError)


async def test_unreadable_known_hosts_is_named(ssh_server: SshServer, tmp_path: Path) -> None:
    """An unreadable known_hosts file fails the connection naming the file and the option."""
    expected = f"cannot read the known_hosts file {tmp_path} (known_hosts): Is a directory"
    async with connect(ssh_server, known_hosts=str(tmp_path)) as ex:
        with pytest.raises(ExecutorError, match=f"^{re.escape(expected)}$") as caught:
            await ex.exec_cmd(Command.read_file("x"))
    assert isinstance(caught.value.__cause__, IsADirectoryError)


@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_trio_is_refused_clearly(ssh_server: SshServer) -> None:
    """Under trio every command and listing raises ExecutorError saying asyncio is needed."""
    async with connect(ssh_server) as ex:
        with pytest.raises(ExecutorError, match="asyncio"):
            await ex.exec_cmd(Command.shell("echo hi"))
        with pytest.raises(ExecutorError, match="asyncio"):
            await ex.exec_cmd(Command.read_file("x"))
        with pytest.raises(ExecutorError, match="asyncio"):
            async for _ in ex.stream_files("."):
                pass


async def test_environment_rules(ssh_server: SshServer) -> None:
    """envs, env_remove (names and the command's patterns) and env_clear apply remotely."""
    async with connect(ssh_server, envs={"EXTRA": "it's $here", "odd-name": "v"}) as ex:
        output = await ex.exec_cmd(Command.shell('printf %s "$EXTRA"'))
        assert output.stdout == b"it's $here"
        # A name no shell accepts reaches a program started without one.
        listed = await ex.exec_cmd(Command.exec(["env"]))
        assert b"\nodd-name=v\n" in listed.stdout
        gone = await ex.exec_cmd(
            Command.shell('echo "${USER-unset} ${LOGNAME-unset} ${EXTRA-unset}"')
            .with_env_removed("user", "LOG*", "extra", keep=["LOGNAME"])
            .with_env({"EXTRA": "back"})
        )
        assert gone.stdout == b"unset " + ssh_server.user.encode() + b" back\n"
    async with connect(ssh_server, env_remove=["HOME"]) as ex:
        assert (await ex.exec_cmd(Command.shell('echo "${HOME-unset}"'))).stdout == b"unset\n"
    async with connect(ssh_server, env_clear=True, envs={"ONLY": "1"}) as ex:
        names = (await ex.exec_cmd(Command.exec(["/usr/bin/env"]))).stdout.decode().split()
        assert sorted(name.split("=")[0] for name in names) == ["EXECUTOR_PROCESS_TREE", "ONLY"]


async def test_killed_by_a_signal(ex: SshExecutor) -> None:
    """A command killed by a signal fails with 128 + N and the signal, as locally."""
    with pytest.raises(NonZeroExit, match="SIGKILL") as caught:
        await ex.exec_cmd(Command.shell("kill -9 $$"))
    assert caught.value.output.exit_code == 128 + 9
    assert caught.value.output.signal == 9


async def test_flood_is_exact_and_capped(ssh_server: SshServer) -> None:
    """A large output arrives whole to the sink, and the stored output keeps head and tail."""
    seen = 0

    async def sink(chunk: Chunk) -> None:
        nonlocal seen
        seen += len(chunk.data)
        await anyio.lowlevel.checkpoint()

    async with connect(ssh_server, output_limit=1000) as ex:
        output = await ex.exec_cmd_streaming(
            Command.shell("head -c 20000000 /dev/zero; printf end"), sink
        )
    assert seen == 20_000_003
    assert output.truncated
    assert output.stdout.endswith(b"end")
    assert len(output.stdout) == 1000


async def test_write_file_is_atomic_and_keeps_the_mode(ex: SshExecutor) -> None:
    """write_file replaces through a rename, keeps the mode, and leaves no temporary file."""
    await ex.exec_cmd(Command.write_file("bin/tool.sh", "#!/bin/sh\necho v1\n"))
    await ex.exec_cmd(Command.shell("chmod 750 bin/tool.sh; ls -i bin/tool.sh > inode"))
    await ex.exec_cmd(Command.write_file("bin/tool.sh", "#!/bin/sh\necho v2\n"))
    assert (await ex.exec_cmd(Command.shell("./bin/tool.sh"))).stdout == b"v2\n"
    listing = await ex.exec_cmd(
        Command.shell("stat -c %a bin/tool.sh; ls -A bin; ls -i bin/tool.sh")
    )
    mode, name, inode = listing.stdout.decode().splitlines()
    assert (mode, name) == ("750", "tool.sh")
    before = (await ex.exec_cmd(Command.read_file("inode"))).stdout.decode()
    assert inode != before.strip()
    with pytest.raises(NonZeroExit, match="Is a directory"):
        await ex.exec_cmd(Command.write_file("bin", "x"))


async def test_read_file_refuses_a_fifo(ex: SshExecutor) -> None:
    """Reading a FIFO fails at once instead of stalling the SFTP channel."""
    await ex.exec_cmd(Command.shell("mkfifo pipe"))
    with anyio.fail_after(5), pytest.raises(NonZeroExit, match="not a regular file"):
        await ex.exec_cmd(Command.read_file("pipe"))
    assert (await ex.exec_cmd(Command.write_file("after", "ok"))).exit_code is None


async def test_missing_current_dir_fails_the_command(ex: SshExecutor) -> None:
    """A current_dir that does not exist fails the command with exit code 1."""
    with pytest.raises(NonZeroExit) as caught:
        await ex.exec_cmd(Command.shell("echo never").with_current_dir("nowhere"))
    assert caught.value.output.exit_code == 1
    assert b"nowhere" in caught.value.output.stderr
    assert caught.value.output.stdout == b""


async def test_stream_files_matches_the_local_walker(ex: SshExecutor) -> None:
    """Over SFTP, stream_files lists what LocalExecutor lists for the same tree."""
    tree = {
        ".gitignore": "*.log\nbuild/\n!keep.log\n",
        ".ignore": "secret*\n",
        "a.py": "print(1)\n",
        "debug.log": "noise\n",
        "keep.log": "kept\n",
        "secret.txt": "hidden by .ignore\n",
        "build/out.py": "x\n",
        "src/.hidden.py": "x\n",
        "src/deep/b.py": "b\n",
        "src/deep/.gitignore": "*.tmp\n",
        "src/deep/c.tmp": "c\n",
        "src/bin.dat": "\x00\x01",
        ".git/info/exclude": "excluded.md\n",
        "excluded.md": "x\n",
        "docs/é.md": "ünïcode\n",
    }
    for name, content in tree.items():
        await ex.exec_cmd(Command.write_file(name, content))
    await ex.exec_cmd(Command.shell("ln -s a.py link.py; mkfifo fifo.py"))
    remote = [(f.path, f.content) async for f in ex.stream_files(".")]
    async with LocalExecutor(ex.workdir) as local:
        expected = [(f.path, f.content) async for f in local.stream_files(".")]
        for root, extensions in (("src", None), ("src", ["py"]), (".", [".md"]), ("a.py", None)):
            there = [(f.path, f.content) async for f in ex.stream_files(root, extensions)]
            here = [(f.path, f.content) async for f in local.stream_files(root, extensions)]
            assert there == here
    assert remote == expected
    assert {path for path, _ in remote} == {"a.py", "keep.log", "src/deep/b.py", "docs/é.md"}


def test_import_does_not_load_asyncssh() -> None:
    """`import executor` leaves asyncssh unloaded until an SSH connection is made."""
    code = "import sys, executor; print('asyncssh' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, check=True)
    assert result.stdout == b"False\n"


def test_loading_asyncssh_warns_of_nothing() -> None:
    """The first connection's import of asyncssh says nothing, also where warnings are errors.

    cryptography 51 warns that DSA is deprecated when asyncssh's import
    touches it: every program would print that at its first connection.
    """
    code = "import executor._ssh.remote"
    result = subprocess.run(
        [sys.executable, "-W", "error", "-c", code], capture_output=True, check=False
    )
    assert (result.returncode, result.stderr) == (0, b"")


# --- sessions ------------------------------------------------------------------------


async def test_session_cancel_and_timeout(ex: SshExecutor) -> None:
    """cancel() ends the output and finalize raises; a timeout raises TimedOut, tree killed."""
    with anyio.fail_after(20):
        async with await ex.start(Command.shell("echo up; sleep 300")) as session:
            await read_until(session, b"up")
            session.cancel()
            assert await session.next_chunk() is None
            with pytest.raises(NonZeroExit):
                await session.finalize()
        script = "sleep 300 & echo $! > bg.pid; echo partial; wait"
        async with await ex.start(Command.shell(script).with_timeout(1)) as session:
            with pytest.raises(TimedOut) as caught:
                await session.finalize()
    assert b"partial" in caught.value.output.stdout
    assert await remote_alive(ex, await read_pids(ex, "bg.pid")) == []


async def test_session_exit_kills_background_child(ex: SshExecutor) -> None:
    """Leaving the session's block kills a background child the command left running."""
    script = "sleep 300 >/dev/null 2>&1 & echo $! > bg.pid; echo ready; sleep 300"
    with anyio.fail_after(20):
        async with await ex.start(Command.shell(script)) as session:
            await read_until(session, b"ready")
            pids = await read_pids(ex, "bg.pid")
            assert await remote_alive(ex, pids) == pids
    assert await remote_alive(ex, pids) == []


async def test_session_missing_program(ex: SshExecutor) -> None:
    """A program that does not exist on the host fails the session with exit code 127."""
    with anyio.fail_after(20):
        async with await ex.start(Command.exec(["definitely-not-a-program-xyz"])) as session:
            with pytest.raises(NonZeroExit) as caught:
                await session.finalize()
    assert caught.value.output.exit_code == 127
    assert b"definitely-not-a-program-xyz" in caught.value.output.stderr


async def test_aclose_during_a_command(ssh_server: SshServer) -> None:
    """aclose() while a command runs ends it with ExecutorError and kills its remote tree."""
    workdir = ssh_server.workdir()
    ex = connect(ssh_server, workdir)
    failure: list[BaseException] = []

    async def run() -> None:
        try:
            await ex.exec_cmd(Command.shell("sleep 300 & echo $! > bg.pid; sleep 300"))
        except ExecutorError as error:
            failure.append(error)

    async with connect(ssh_server, workdir) as checker:
        with anyio.fail_after(20):
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(run)
                pids = await read_pids(checker, "bg.pid")
                await ex.aclose()
        assert len(failure) == 1
        assert "closed" in str(failure[0])
        await wait_gone(checker, pids)
        with pytest.raises(ExecutorError, match="closed"):
            await ex.exec_cmd(Command.shell("true"))


async def test_non_utf8_file_names(ex: SshExecutor) -> None:
    """A file name that is not UTF-8 does not end a listing; its text file is still listed."""
    await ex.exec_cmd(Command.shell(r"printf x > \"$(printf 'bad\377.txt')\"; echo ok > good.txt"))
    async with LocalExecutor(ex.workdir) as local:
        here = sorted([f.path async for f in local.stream_files(".")])
    there = sorted([f.path async for f in ex.stream_files(".")])
    assert there == here
    assert "good.txt" in there


@pytest.fixture
def ssh_agent(ssh_server: SshServer, tmp_path: Path) -> Iterator[str]:
    """A private ssh-agent holding the test key; its socket path. Stopped by pid."""
    socket_path = str(tmp_path / "agent.sock")
    started = subprocess.run(
        ["ssh-agent", "-a", socket_path, "-s"], capture_output=True, text=True, check=True
    )
    pid = int(re.search(r"SSH_AGENT_PID=(\d+)", started.stdout).group(1))  # type: ignore[union-attr]
    try:
        subprocess.run(
            ["ssh-add", "-q", ssh_server.client_key],
            env={**os.environ, "SSH_AUTH_SOCK": socket_path},
            check=True,
            capture_output=True,
        )
        yield socket_path
    finally:
        os.kill(pid, signal.SIGTERM)


async def test_login_through_the_agent(ssh_server: SshServer, ssh_agent: str) -> None:
    """With no key files given, the key the ssh-agent holds logs in."""
    async with connect(ssh_server, client_keys=None, agent_path=ssh_agent) as ex:
        assert (await ex.exec_cmd(Command.shell("echo hi"))).stdout == b"hi\n"


async def test_keepalives_notice_a_silent_peer(ssh_server: SshServer) -> None:
    """A peer that stops answering is dropped by keepalives, and the next command reconnects."""
    async with connect(ssh_server, keepalive_interval=0.2, keepalive_count_max=2) as ex:
        first = int((await ex.exec_cmd(Command.shell("echo $PPID"))).stdout)
        # The connection stays open, but nothing answers on it any more.
        os.kill(first, signal.SIGSTOP)
        try:
            await anyio.sleep(1.5)
            with anyio.fail_after(10):
                second = int((await ex.exec_cmd(Command.shell("echo $PPID"))).stdout)
        finally:
            os.kill(first, signal.SIGKILL)
    assert second != first


async def test_cancellation_at_any_moment_leaves_nothing(ex: SshExecutor) -> None:
    """Cancelled while its channel opens or while it runs, a command leaves no remote process."""
    await ex.exec_cmd(Command.shell("true"))  # connected: the steps below cancel commands only
    for step in range(40):
        with anyio.move_on_after(step * 0.0003):
            await ex.exec_cmd(Command.shell("sleep 300"))
    # Before aclose(): every process this test process started over SSH (sshd
    # runs on this host) but the checking shell itself, which carries a tag too.
    pattern = f"^EXECUTOR_PROCESS_TREE={os.getpid()}:"
    left = await ex.exec_cmd(
        Command.shell(f"grep -lz '{pattern}' /proc/[0-9]*/environ; echo self=$$")
    )
    lines = left.stdout.decode().split()
    assert lines[:-1] == [f"/proc/{lines[-1].removeprefix('self=')}/environ"]


async def test_slow_sink_sees_every_chunk_after_the_exit(ex: SshExecutor) -> None:
    """A chunk that arrives after the exit reaches a slow sink whole: the drain never cuts it."""
    seen: list[bytes] = []

    async def sink(chunk: Chunk) -> None:
        if b"late" in chunk.data:
            await anyio.sleep(0.4)  # longer than the drain period (0.1 s)
        seen.append(chunk.data)

    script = "echo early; (sleep 0.05; echo late) &"
    output = await ex.exec_cmd_streaming(Command.shell(script), sink)
    assert b"".join(seen) == output.stdout == b"early\nlate\n"


async def test_flood_meets_its_timeout(ssh_server: SshServer) -> None:
    """A command that floods without pause is still killed at its timeout."""
    async with connect(ssh_server, output_limit=1 << 16) as ex:
        started = time.monotonic()
        with pytest.raises(TimedOut) as caught:
            await ex.exec_cmd(Command.shell("yes flood").with_timeout(1))
        assert time.monotonic() - started < 10
    assert caught.value.output.truncated
    assert caught.value.output.stdout.startswith(b"flood\nflood\n")


async def test_stream_files_many_files_in_order(ex: SshExecutor) -> None:
    """Past the read-ahead window, files come whole and in the local walker's order."""
    await ex.exec_cmd(
        Command.shell(
            "mkdir -p many/sub; for i in $(seq 60); do echo $i > many/f$i.txt; done; "
            "for i in $(seq 30); do echo s$i > many/sub/g$i.txt; done"
        )
    )
    remote = [(f.path, f.content) async for f in ex.stream_files("many")]
    async with LocalExecutor(ex.workdir) as local:
        expected = [(f.path, f.content) async for f in local.stream_files("many")]
    assert remote == expected
    assert len(remote) == 90


# --- the lifecycle contract ----------------------------------------------------------

# A command that ignores SIGTERM (and so does its child): only SIGKILL ends it.
STUBBORN = "trap '' TERM; sleep 30"
# A background job that ignores SIGTERM, left running by a command that has exited.
STUBBORN_JOB = (
    "nohup sh -c 'trap \"\" TERM; echo $$ > job.pid; while :; do sleep 0.05; done' "
    ">/dev/null 2>&1 & echo $PPID"
)


async def test_kill_grace_is_wall_time(ssh_server: SshServer) -> None:
    """A TERM-ignorer dies within kill_grace (wall time) of its timeout, cancel or session end."""
    grace = 1.0
    async with connect(ssh_server, kill_grace=grace) as ex:
        await ex.exec_cmd(Command.shell("true"))  # connected: only the kill is measured
        started = anyio.current_time()
        with pytest.raises(TimedOut):
            await ex.exec_cmd(Command.shell(STUBBORN).with_timeout(0.5))
        timed_out = anyio.current_time() - started - 0.5
        started = anyio.current_time()
        with anyio.move_on_after(0.5):
            await ex.exec_cmd(Command.shell(STUBBORN))
        cancelled = anyio.current_time() - started - 0.5
        async with await ex.start(Command.shell(f"echo up; {STUBBORN}")) as session:
            await read_until(session, b"up")
            started = anyio.current_time()
        left = anyio.current_time() - started
    assert timed_out < grace + 0.3
    assert cancelled < grace + 0.3
    assert left < grace + 0.3


async def test_double_cancel_during_the_kill_leaves_nothing(ssh_server: SshServer) -> None:
    """A command or session cancelled twice while its remote tree is killed leaves no survivor."""
    async with connect(ssh_server, kill_grace=1.0) as ex:

        async def command() -> None:
            await ex.exec_cmd(Command.shell(TREE))

        async def session() -> None:
            async with await ex.start(Command.shell(TREE)):
                await anyio.sleep(300)

        for run in (command, session):
            await ex.exec_cmd(Command.shell("rm -f *.pid"))
            task = asyncio.ensure_future(run())
            pids = await read_pids(ex, *PID_FILES)
            task.cancel()
            await anyio.sleep(0.3)  # within the grace: the stubborn process ignores TERM
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert await remote_alive(ex, pids) == []


async def test_cancelled_aclose_still_kills_and_closes(ssh_server: SshServer) -> None:
    """aclose() cancelled twice mid-kill still ends every remote process and the connection."""
    workdir = ssh_server.workdir()
    ex = connect(ssh_server, workdir, kill_grace=1.0)
    sshd = int((await ex.exec_cmd(Command.shell(STUBBORN_JOB))).stdout)
    async with connect(ssh_server, workdir) as checker:
        pids = await read_pids(checker, "job.pid")
        task = asyncio.ensure_future(ex.aclose())
        await anyio.sleep(0.3)  # within the grace: the job ignores TERM
        task.cancel()
        await anyio.sleep(0.1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert await remote_alive(checker, pids) == []
        # sshd's process for the connection ends once the connection is closed.
        await wait_gone(checker, [sshd])


@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
async def test_aclose_twice_is_harmless(ssh_server: SshServer) -> None:
    """aclose() after `async with`, twice, and from two tasks at once, returns quietly each time."""
    async with connect(ssh_server) as ex:
        await ex.aclose()
    await ex.aclose()
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(ex.aclose)
        tasks.start_soon(ex.aclose)


async def test_concurrent_aclose_returns_when_all_is_ended(ssh_server: SshServer) -> None:
    """Each of two concurrent aclose() calls returns only once the remote processes are killed."""
    workdir = ssh_server.workdir()
    ex = connect(ssh_server, workdir, kill_grace=1.0)
    await ex.exec_cmd(Command.shell(STUBBORN_JOB))
    survivors: dict[str, list[int]] = {}
    async with connect(ssh_server, workdir) as checker:
        pids = await read_pids(checker, "job.pid")

        async def close(name: str) -> None:
            await ex.aclose()
            survivors[name] = await remote_alive(checker, pids)

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(close, "first")
            await anyio.wait_all_tasks_blocked()
            tasks.start_soon(close, "second")
    assert survivors == {"first": [], "second": []}
    await ex.aclose()


@contextlib.asynccontextmanager
async def held_proxy(server: SshServer) -> AsyncIterator[tuple[int, anyio.Event, anyio.Event]]:
    """A TCP proxy to the sshd: its port, an event set when a client arrives, one that lets it on.

    Each connection waits, accepted but not forwarded, until the second event is set.
    """
    arrived, release = anyio.Event(), anyio.Event()

    async def copy(source: anyio.abc.ByteStream, target: anyio.abc.ByteStream) -> None:
        with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
            async for data in source:
                await target.send(data)
            await target.send_eof()

    async def forward(client: anyio.abc.SocketStream) -> None:
        arrived.set()
        await release.wait()
        upstream = await anyio.connect_tcp(server.host, server.port)
        async with client, upstream, anyio.create_task_group() as pumps:
            pumps.start_soon(copy, client, upstream)
            pumps.start_soon(copy, upstream, client)

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    async with listener, anyio.create_task_group() as tasks:
        tasks.start_soon(listener.serve, forward)
        yield port, arrived, release
        tasks.cancel_scope.cancel()


async def test_aclose_while_connecting(ssh_server: SshServer) -> None:
    """A command whose connection is still being opened when aclose() comes never runs."""
    workdir = ssh_server.workdir()
    failures: list[ExecutorError] = []
    with anyio.fail_after(20):
        async with held_proxy(ssh_server) as (port, arrived, release):
            ex = connect(ssh_server, workdir, port=port, check_host_key=False)

            async def run() -> None:
                try:
                    await ex.exec_cmd(Command.shell("echo ran > ran.txt; sleep 300"))
                except ExecutorError as error:
                    failures.append(error)

            async with anyio.create_task_group() as tasks:
                tasks.start_soon(run)
                await arrived.wait()  # the connection is on its way, held
                tasks.start_soon(ex.aclose)
                await anyio.wait_all_tasks_blocked()
                release.set()
    assert len(failures) == 1
    assert "closed" in str(failures[0])
    async with connect(ssh_server, workdir) as checker:
        assert (await checker.exec_cmd(Command.shell("ls -A"))).stdout == b""


async def test_write_file_cut_off_leaves_old_or_new(ex: SshExecutor) -> None:
    """A write_file cut off leaves no temporary file, and either the old content or all the new."""
    content = os.urandom(10 << 20)
    for cut in ("scope", "timeout", "task", "task twice"):
        await ex.exec_cmd(Command.write_file("big", b"old"))
        write = Command.write_file("big", content)
        if cut == "scope":
            with anyio.move_on_after(0.05):
                await ex.exec_cmd(write)
        elif cut == "timeout":
            with contextlib.suppress(TimedOut):
                await ex.exec_cmd(write.with_timeout(0.05))
        else:
            task = asyncio.ensure_future(ex.exec_cmd(write))
            await anyio.sleep(0.05)
            task.cancel()
            if cut == "task twice":
                await anyio.sleep(0.01)
                task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        assert (await ex.exec_cmd(Command.shell("ls -A"))).stdout == b"big\n", cut
        assert (await ex.exec_cmd(Command.read_file("big"))).stdout in (b"old", content), cut
