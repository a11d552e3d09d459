"""ProcessSession: interactive commands through `ToolExecutor.start`."""

from __future__ import annotations

import itertools
import os
import re
from pathlib import Path

import anyio
import pytest
from conftest import alive

from executor import (
    Bytes,
    Command,
    CommandOutput,
    DangerousCommands,
    ExecutorError,
    LocalExecutor,
    NonZeroExit,
    PolicyDenied,
    ProcessSession,
    ReadOnly,
    Resize,
    Secrets,
    SessionChunk,
    Signal,
    Stdout,
    Text,
    TimedOut,
    UnixSignal,
)
from executor._streaming import StreamingToolHandle

pytestmark = pytest.mark.anyio


async def read_until(session: ProcessSession, needle: bytes) -> bytes:
    """Read chunks until their stdout contains `needle`; return what was read."""
    seen = b""
    while needle not in seen:
        chunk = await session.next_chunk()
        assert chunk is not None, f"output ended before {needle!r}: {seen!r}"
        if isinstance(chunk.chunk, Stdout):
            seen += chunk.chunk.data
    return seen


async def wait_for_file(path: Path) -> str:
    """Wait until `path` exists and is not empty, and return its text."""
    while not path.exists() or not path.read_text().strip():
        await anyio.sleep(0.01)
    return path.read_text()


async def test_echo_through_cat(ex: LocalExecutor) -> None:
    """Text sent to `cat` comes back as a chunk while it runs."""
    with anyio.fail_after(10):
        async with await ex.start(Command.shell("cat")) as session:
            await session.send_stdin(Text("hello\n"))
            assert await read_until(session, b"hello\n") == b"hello\n"
            await session.send_stdin(Bytes(b"again\n"))
            await read_until(session, b"again\n")
            output = await session.finalize()
    assert output.exit_code == 0
    assert output.stdout == b"hello\nagain\n"


async def test_sequence_and_time(ex: LocalExecutor) -> None:
    """Chunks are numbered from 1 upwards and their times never go back."""
    script = "for i in 1 2 3 4 5; do echo $i; sleep 0.02; done"
    chunks: list[SessionChunk] = []
    with anyio.fail_after(10):
        async with await ex.start(Command.shell(script)) as session:
            async for chunk in session:
                chunks.append(chunk)
            output = await session.finalize()
    assert [c.sequence for c in chunks] == list(range(1, len(chunks) + 1))
    assert len(chunks) >= 2
    assert all(a.time <= b.time for a, b in itertools.pairwise(chunks))
    assert b"".join(c.chunk.data for c in chunks) == output.stdout == b"1\n2\n3\n4\n5\n"


async def test_close_stdin_ends_cat(ex: LocalExecutor) -> None:
    """Closing stdin gives `cat` its end of input, and it exits."""
    with anyio.fail_after(10):
        async with await ex.start(Command.shell("cat; echo done")) as session:
            await session.send_stdin(Text("x\n"))
            await session.close_stdin()
            await session.close_stdin()
            assert await session.next_chunk() is not None
            rest = b""
            while (chunk := await session.next_chunk()) is not None:
                rest += chunk.chunk.data
            output = await session.finalize()
        with pytest.raises(ExecutorError, match="stdin is closed"):
            await session.send_stdin(Text("late"))
    assert output.stdout == b"x\ndone\n"


async def test_signal_reaches_trap(ex: LocalExecutor) -> None:
    """Signal(SIGINT) reaches a shell's trap."""
    script = "trap 'echo got-int; exit 3' INT; echo ready; while :; do sleep 0.05; done"
    with anyio.fail_after(10):
        async with await ex.start(Command.shell(script)) as session:
            await read_until(session, b"ready")
            await session.send_stdin(Signal(UnixSignal.SIGINT))
            await read_until(session, b"got-int")
            with pytest.raises(NonZeroExit) as caught:
                await session.finalize()
    assert caught.value.output.exit_code == 3


async def test_cancel_then_finalize_raises(ex: LocalExecutor) -> None:
    """After cancel() the output ends and finalize raises NonZeroExit for a signal."""
    with anyio.fail_after(10):
        async with await ex.start(Command.shell("echo up; sleep 30")) as session:
            await read_until(session, b"up")
            session.cancel()
            assert await session.next_chunk() is None
            with pytest.raises(NonZeroExit) as caught:
                await session.finalize()
    assert caught.value.output.signal is not None


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


async def test_start_refuses_file_commands(ex: LocalExecutor) -> None:
    """A file command cannot be a session."""
    with pytest.raises(ExecutorError, match="cannot start ReadFile"):
        await ex.start(Command.read_file("x"))


async def test_resize_needs_pty(ex: LocalExecutor) -> None:
    """Resize on a session without a pty is refused."""
    with anyio.fail_after(10):
        async with await ex.start(Command.shell("cat")) as session:
            with pytest.raises(ExecutorError, match="pty"):
                await session.send_stdin(Resize(80, 24))
            await session.finalize()


async def test_pty_tty(ex: LocalExecutor) -> None:
    """Under a pty `tty` names a /dev/pts device."""
    with anyio.fail_after(10):
        async with await ex.start(Command.shell("tty"), pty=True) as session:
            output = await session.finalize()
    assert re.match(rb"/dev/pts/\d+\r?\n", output.stdout)


async def test_pty_resize_and_winch(ex: LocalExecutor) -> None:
    """Resize sets the terminal's size and sends SIGWINCH."""
    script = "trap 'echo winch; stty size' WINCH; echo ready; while :; do sleep 0.05; done"
    with anyio.fail_after(10):
        async with await ex.start(Command.shell(script), pty=True) as session:
            await read_until(session, b"ready")
            await session.send_stdin(Resize(100, 40))
            seen = await read_until(session, b"40 100")
            assert b"winch" in seen
            session.cancel()
            with pytest.raises(NonZeroExit):
                await session.finalize()


async def test_pty_ctrl_c(ex: LocalExecutor) -> None:
    """Ctrl-C typed on the pty interrupts `sleep 30`."""
    with anyio.fail_after(10):
        async with await ex.start(Command.shell("echo ready; exec sleep 30"), pty=True) as session:
            await read_until(session, b"ready")
            await anyio.sleep(0.1)
            await session.send_stdin(Text("\x03"))
            with pytest.raises(NonZeroExit) as caught:
                await session.finalize()
    assert caught.value.output.signal == int(UnixSignal.SIGINT)


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
