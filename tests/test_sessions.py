"""ProcessSession: interactive commands through `ToolExecutor.start`."""

from __future__ import annotations

import os
from pathlib import Path

import anyio
import pytest
from conftest import alive

from executor import (
    Command,
    CommandOutput,
    DangerousCommands,
    LocalExecutor,
    NonZeroExit,
    PolicyDenied,
    ReadOnly,
    Secrets,
    SessionChunk,
    Text,
    TimedOut,
)
from executor._tools.handle import StreamingToolHandle
from executor.testing import LocalFixtures, SessionContract, read_until

pytestmark = pytest.mark.anyio


class TestLocalSessions(SessionContract, LocalFixtures):
    pass


async def wait_for_file(path: Path) -> str:
    """Wait until `path` exists and is not empty, and return its text."""
    while not path.exists() or not path.read_text().strip():
        await anyio.sleep(0.01)
    return path.read_text()


async def test_timeout_kills_tree(ex: LocalExecutor, tmp_path: Path) -> None:
    """A session past its timeout raises TimedOut with its partial output, its tree gone."""
    pids = tmp_path / "pids"
    script = f"sleep 30 & echo $! > {pids}; echo partial; wait"
    with anyio.fail_after(10):
        async with await ex.start(Command.shell(script).with_timeout(0.5)) as session:
            with pytest.raises(TimedOut) as caught:
                await session.finalize()
    assert b"partial" in caught.value.output.stdout
    assert not alive(int((await wait_for_file(pids)).strip()))


async def test_exit_kills_background_child(ex: LocalExecutor, tmp_path: Path) -> None:
    """Leaving the session's block kills a background child it left running."""
    pids = tmp_path / "pids"
    script = f"(trap '' HUP; sleep 30) & echo $! > {pids}; echo ready; sleep 30"
    with anyio.fail_after(10):
        async with await ex.start(Command.shell(script)) as session:
            await read_until(session, b"ready")
            child = int((await wait_for_file(pids)).strip())
            assert alive(child)
    assert not alive(child)


async def test_backpressure_blocks_the_writer(tmp_path: Path) -> None:
    """A consumer that does not read stops a 50 MiB writer after little output."""
    progress = tmp_path / "progress"
    writer = (
        "import os\n"
        "block = b'x' * 65536\n"
        "for i in range(800):\n"
        "    os.write(1, block)\n"
        f"    open({str(progress)!r} + '.new', 'w').write(str(i + 1))\n"
        f"    os.replace({str(progress)!r} + '.new', {str(progress)!r})\n"
    )
    with anyio.fail_after(30):
        async with LocalExecutor(tmp_path, kill_grace=0.2, output_limit=1 << 20) as ex:
            session = await ex.start(Command.exec(["python3", "-c", writer]))
            async with session:
                # Wait until the writer stops making progress: it is blocked.
                await wait_for_file(progress)
                before, now = -1, int(progress.read_text())
                while now != before:
                    await anyio.sleep(0.3)
                    before, now = now, int(progress.read_text())
                # Blocked after the chunk buffer and a pipe or two, not 50 MiB.
                assert now * 65536 < 24 << 20
                total = 0
                async for chunk in session:
                    total += len(chunk.chunk.data)
                output = await session.finalize()
    assert total == 800 * 65536
    assert output.truncated
    assert len(output.stdout) <= 1 << 20


async def test_read_only_refuses(ex: LocalExecutor) -> None:
    """ReadOnly refuses to start a shell session."""
    with pytest.raises(PolicyDenied):
        await ReadOnly(ex).start(Command.shell("true"))


async def test_dangerous_refused(ex: LocalExecutor) -> None:
    """DangerousCommands refuses `rm -rf /` at start."""
    with pytest.raises(PolicyDenied):
        await DangerousCommands(ex).start(Command.shell("rm -rf /"))


async def test_secrets_drop_token(ex: LocalExecutor, monkeypatch: pytest.MonkeyPatch) -> None:
    """Secrets removes a *_TOKEN variable from a session's environment."""
    monkeypatch.setenv("SESSION_TEST_TOKEN", "sekrit-value-123")
    script = 'echo "[${SESSION_TEST_TOKEN:-unset}]"'
    # Without values to redact: a session's output is not redacted yet, so
    # Secrets refuses sessions while it knows secret values.
    guarded = Secrets(ex, redact_environment=False)
    with anyio.fail_after(10):
        async with await guarded.start(Command.shell(script)) as session:
            output = await session.finalize()
    assert output.stdout == b"[unset]\n"


async def test_scoped_session(ex: LocalExecutor, tmp_path: Path) -> None:
    """A scoped executor's session runs in its scope."""
    (tmp_path / "sub").mkdir()
    with anyio.fail_after(10):
        async with await ex.scoped("sub").start(Command.shell("pwd")) as session:
            output = await session.finalize()
    assert os.path.realpath(output.stdout.decode().strip()) == os.path.realpath(tmp_path / "sub")


async def test_missing_program_fails_at_enter(ex: LocalExecutor) -> None:
    """A program that cannot start fails when the session is entered, as exec_cmd does."""
    session = await ex.start(Command.exec(["definitely-not-a-program-xyz"]))
    with pytest.raises(NonZeroExit) as caught:
        async with session:
            pass
    assert caught.value.output.exit_code == 127


async def test_session_is_a_streaming_handle(ex: LocalExecutor) -> None:
    """A ProcessSession satisfies StreamingToolHandle, so a StreamingTool can return it."""
    handle: StreamingToolHandle[SessionChunk, CommandOutput] = await ex.start(
        Command.shell("echo hi")
    )
    with anyio.fail_after(10):
        async with handle:
            assert await handle.next_chunk() is not None
            output = await handle.finalize()
    assert output.stdout == b"hi\n"


async def test_command_stdin_is_written_first(ex: LocalExecutor) -> None:
    """A command's own stdin is written when the session starts, and the input stays open."""
    with anyio.fail_after(10):
        async with await ex.start(Command.shell("cat").with_stdin(b"first\n")) as session:
            await read_until(session, b"first\n")
            await session.send_stdin(Text("second\n"))
            await read_until(session, b"second\n")
            output = await session.finalize()
    assert output.stdout == b"first\nsecond\n"


async def test_exit_kills_what_outlived_the_command(ex: LocalExecutor, tmp_path: Path) -> None:
    """A background job still running after the command ended dies when the block is left."""
    pids = tmp_path / "pids"
    script = f"sleep 30 >/dev/null 2>&1 & echo $! > {pids}"
    with anyio.fail_after(10):
        async with await ex.start(Command.shell(script)) as session:
            await session.finalize()
            child = int((await wait_for_file(pids)).strip())
            assert alive(child)
    assert not alive(child)
