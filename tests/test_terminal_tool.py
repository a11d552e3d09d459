"""The terminal tool: the seed's `python3 -i` example, Ctrl-C, resizes, refusals, on every backend.

Each backend runs the same tests (`TerminalContract`) with its own executor:
a `LocalExecutor`, one in each OS sandbox, a `DockerExecutor` on the Python
test image, and an `SshExecutor` on the private sshd.
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from conftest import require_sandbox
from docker_engine import PYTHON_IMAGE, labelled_container
from ssh_server import SshServer

from executor import (
    DefaultContext,
    DockerExecutor,
    InvalidArgument,
    LocalExecutor,
    PolicyDenied,
    Resize,
    Sandbox,
    Signal,
    StreamingToolSession,
    TerminalChunk,
    TerminalInput,
    TerminalResult,
    TerminalTool,
    Text,
    ToolExecutor,
    UnixSignal,
    Window,
)

pytestmark = pytest.mark.anyio

# The interpreter may live under the home folder (pyenv), which a sandbox hides.
PYTHON_DIRS = tuple(
    dict.fromkeys([sys.prefix, sys.base_prefix, os.path.dirname(os.path.realpath(sys.executable))])
)


async def read_until(session: StreamingToolSession[Any, TerminalChunk, Any], text: str) -> str:
    """Read chunks until their joined text holds `text`; fail after 20 s."""
    seen = ""
    with anyio.fail_after(20):
        while text not in seen:
            chunk = await session.next_chunk()
            assert chunk is not None, f"the output ended before {text!r}: {seen!r}"
            seen += chunk.text
    return seen


class TerminalContract:
    """What the terminal does on any backend; a subclass supplies `executor`."""

    async def test_the_seeds_python_example(self, executor: ToolExecutor) -> None:
        """`python3 -i`, sent `print('hello')`, prints hello back; exit ends it with status 0."""
        tool = TerminalTool(DefaultContext.from_executor(executor))
        given = TerminalInput(command="python3 -i", env={"PYTHONPATH": "/lib"}, timeout_secs=120)
        async with StreamingToolSession(tool, given) as session:
            await session.send_stdin(Text("print('hello')\n"))
            seen = await read_until(session, "hello\r\n>>> ")
            await session.send_stdin(Text("import os; print(os.environ['PYTHONPATH'])\n"))
            seen += await read_until(session, "/lib\r\n")
            await session.send_stdin(Text("exit()\n"))
            result = await session.finalize()
        # The output line itself, not the echo of the input that printed it.
        assert "hello\r\n>>> " in seen.replace("print('hello')", "")
        assert isinstance(result.final, TerminalResult)
        assert result.final.exit_code == 0
        assert result.final.signal is None
        assert result.final.duration > 0
        assert not result.final.timed_out
        assert all(chunk.stream == "stdout" for chunk in result.chunks)

    async def test_ctrl_c_stops_a_busy_loop(self, executor: ToolExecutor) -> None:
        """SIGINT stops a busy loop in the REPL, which goes on; a shell loop dies of Ctrl-C."""
        tool = TerminalTool(executor)
        async with StreamingToolSession(tool, TerminalInput(command="python3 -i")) as session:
            await read_until(session, ">>> ")
            await session.send_stdin(Text("while True: pass\n"))
            await session.send_stdin(Text("\n"))
            await read_until(session, "... ")
            await anyio.sleep(0.3)
            await session.send_stdin(Signal(UnixSignal.SIGINT))
            await read_until(session, "KeyboardInterrupt")
            await session.send_stdin(Text("print(6 * 7)\n"))
            await read_until(session, "42")
            await session.send_stdin(Text("exit()\n"))
            result = await session.finalize()
        assert result.final.exit_code == 0
        script = "while :; do :; done"
        async with StreamingToolSession(tool, TerminalInput(command=script)) as session:
            await anyio.sleep(0.3)
            await session.send_stdin(Text("\x03"))  # Ctrl-C, through the terminal
            result = await session.finalize()
        assert result.final.exit_code == 130
        # A container's exec reports only the code; the other backends see the signal.
        assert result.final.signal in (2, None)

    async def test_a_resize_is_seen_by_stty(self, executor: ToolExecutor) -> None:
        """After `Resize(cols=100, rows=33)` the command's terminal says `33 100`."""
        tool = TerminalTool(executor)
        async with StreamingToolSession(
            tool, TerminalInput(command="read x; stty size")
        ) as session:
            await session.send_stdin(Resize(cols=100, rows=33))
            await session.send_stdin(Text("\n"))
            result = await session.finalize()
        assert "33 100" in "".join(chunk.text for chunk in result.chunks)
        assert result.final.exit_code == 0

    async def test_rm_rf_root_is_refused_before_it_starts(self, executor: ToolExecutor) -> None:
        """`rm -rf /` is refused by DangerousCommands as the session is entered, naming the rule."""
        tool = TerminalTool(executor)
        with pytest.raises(PolicyDenied, match="rm-root"):
            async with StreamingToolSession(tool, TerminalInput(command="rm -rf /")):
                pytest.fail("the session started")
        with pytest.raises(PolicyDenied, match="fork"):
            async with StreamingToolSession(tool, TerminalInput(command=":(){ :|:& };:")):
                pytest.fail("the session started")

    async def test_without_a_pty_streams_are_apart(self, executor: ToolExecutor) -> None:
        """With `pty=False` stderr is stderr; a failing exit code is the result, not an error."""
        tool = TerminalTool(executor)
        given = TerminalInput(command="echo out; echo err >&2; exit 3", pty=False, cwd=".")
        async with StreamingToolSession(tool, given) as session:
            result = await session.finalize()
        streams = {chunk.stream: chunk.text for chunk in result.chunks}
        assert streams == {"stdout": "out\n", "stderr": "err\n"}
        assert result.final.exit_code == 3

    async def test_a_timeout_ends_the_command(self, executor: ToolExecutor) -> None:
        """A command past `timeout_secs` is killed and the result says it timed out."""
        tool = TerminalTool(executor)
        given = TerminalInput(command="sleep 30", timeout_secs=0.5)
        async with StreamingToolSession(tool, given) as session:
            result = await session.finalize()
        assert result.final.timed_out
        assert result.final.duration < 20


class TestLocal(TerminalContract):
    """The terminal on a LocalExecutor."""

    @pytest.fixture
    async def executor(self, tmp_path: Path) -> AsyncIterator[ToolExecutor]:
        """A LocalExecutor in an empty folder."""
        async with LocalExecutor(tmp_path, kill_grace=0.2) as executor:
            yield executor


class TestSandboxed(TerminalContract):
    """The terminal in each OS sandbox."""

    @pytest.fixture
    def anyio_backend(self) -> str:
        """One event loop: trio is covered by TestLocal, the sandbox is the point here."""
        return "asyncio"

    @pytest.fixture(params=["bubblewrap", "landlock"])
    async def executor(
        self, tmp_path: Path, request: pytest.FixtureRequest
    ) -> AsyncIterator[ToolExecutor]:
        """A sandboxed LocalExecutor that can run this Python."""
        sandbox = require_sandbox(Sandbox(backend=request.param, readable=PYTHON_DIRS))
        async with LocalExecutor(tmp_path, sandbox=sandbox, kill_grace=0.2) as executor:
            yield executor


@pytest.fixture(scope="module")
def container() -> Iterator[str]:
    """One idle container of the Python image for the Docker tests, labelled as ours."""
    with labelled_container(PYTHON_IMAGE) as found:
        yield found


class TestDocker(TerminalContract):
    """The terminal in a container of the Python test image (busybox: no bash)."""

    @pytest.fixture
    def anyio_backend(self) -> str:
        """The Docker client runs on asyncio."""
        return "asyncio"

    @pytest.fixture
    async def executor(self, container: str) -> AsyncIterator[ToolExecutor]:
        """A DockerExecutor in a new folder of the module's container."""
        async with DockerExecutor(
            container=container, workdir=f"/workspace/{uuid.uuid4().hex}", kill_grace=0.2
        ) as executor:
            yield executor


class TestSsh(TerminalContract):
    """The terminal on an SSH host (the private sshd)."""

    @pytest.fixture
    def anyio_backend(self) -> str:
        """Only asyncio: asyncssh has no trio support."""
        return "asyncio"

    @pytest.fixture
    async def executor(self, ssh_server: SshServer) -> AsyncIterator[ToolExecutor]:
        """An SshExecutor in a new remote folder."""
        async with ssh_server.executor(kill_grace=0.2) as executor:
            yield executor


def test_the_tool_declares_its_schemas_and_policy(tmp_path: Path) -> None:
    """The spec names the tool and its input fields; the policy is a window of 200 chunks."""
    tool = TerminalTool(LocalExecutor(tmp_path))
    spec = tool.spec
    assert spec["name"] == "terminal"
    assert set(spec["parameters"]["properties"]) == {"command", "cwd", "env", "timeout_secs", "pty"}
    assert spec["chunk_schema"]["properties"]["stream"]["enum"] == ["stdout", "stderr"]
    assert {"exit_code", "signal", "duration", "truncated"} <= set(
        spec["final_schema"]["properties"]
    )
    assert tool.policy == Window(max_chunks=200)
    parsed = tool.parse_input('{"command": "ls", "env": {"A": "1"}, "timeout_secs": 5}')
    assert parsed == TerminalInput(command="ls", env={"A": "1"}, timeout_secs=5)


def test_bad_input_is_refused_with_a_reason() -> None:
    """An empty command, a NUL, a bad variable name or timeout is an InvalidArgument."""
    for bad in (
        {"command": " "},
        {"command": "ls\0"},
        {"command": "ls", "env": {"A=B": "1"}},
        {"command": "ls", "timeout_secs": 0},
    ):
        with pytest.raises(InvalidArgument):
            TerminalInput(**bad)
    with pytest.raises(TypeError, match="agent context"):
        TerminalTool("not an executor")  # type: ignore[arg-type]
