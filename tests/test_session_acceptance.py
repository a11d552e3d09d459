"""ProcessSession acceptance: a REPL, a resized pty, a group kill, 200 MB, byte order."""

from __future__ import annotations

import hashlib
import shutil
import sys
from pathlib import Path

import anyio
import psutil
import pytest
from conftest import alive
from hypothesis import HealthCheck, given, settings, strategies as st

from executor import (
    Command,
    LocalExecutor,
    NonZeroExit,
    ProcessSession,
    Resize,
    Signal,
    Stderr,
    Stdout,
    Text,
    ToolExecutor,
    UnixSignal,
)

pytestmark = pytest.mark.anyio

PY = sys.executable


async def read_until(
    session: ProcessSession, needle: bytes, seen: bytes = b"", start: int | None = None
) -> bytes:
    """Read stdout chunks until `needle` appears in `seen` past `start` (its end); return all."""
    start = len(seen) if start is None else start
    while needle not in seen[start:]:
        chunk = await session.next_chunk()
        assert chunk is not None, f"output ended before {needle!r}: {seen!r}"
        if isinstance(chunk.chunk, Stdout):
            seen += chunk.chunk.data
    return seen


async def drive_repl_on_a_pty(ex: ToolExecutor) -> None:
    """Drive `python3 -i` on a pty: compute, Ctrl-C a loop, go on, exit 0."""
    cmd = Command.exec([PY, "-i", "-q"]).with_env({"TERM": "dumb", "PYTHON_BASIC_REPL": "1"})
    with anyio.fail_after(30):
        async with await ex.start(cmd, pty=True) as session:
            seen = await read_until(session, b">>> ")
            await session.send_stdin(Text("print(6*7)\n"))
            seen = await read_until(session, b"42", seen)
            seen = await read_until(session, b">>> ", seen, seen.index(b"42"))
            await session.send_stdin(Text("while True: pass\n\n"))
            await anyio.sleep(0.3)
            await session.send_stdin(Text("\x03"))
            seen = await read_until(session, b"KeyboardInterrupt", seen)
            seen = await read_until(session, b">>> ", seen, seen.index(b"KeyboardInterrupt"))
            await session.send_stdin(Text("print('still ' + 'here')\n"))
            seen = await read_until(session, b"still here", seen)
            await session.send_stdin(Text("exit()\n"))
            output = await session.finalize()
    assert output.exit_code == 0


async def drive_repl_through_pipes(ex: ToolExecutor) -> None:
    """Drive `python3 -i -u` over pipes: Signal(SIGINT) interrupts a loop, the REPL goes on."""
    cmd = Command.exec([PY, "-i", "-u", "-q"])
    with anyio.fail_after(30):
        async with await ex.start(cmd) as session:
            await session.send_stdin(Text("print(6*7)\n"))
            seen = await read_until(session, b"42")
            await session.send_stdin(Text("while True: pass\n\n"))
            await anyio.sleep(0.3)
            await session.send_stdin(Signal(UnixSignal.SIGINT))
            # Over pipes the prompt and traceback go to stderr; stdout shows the next result.
            await session.send_stdin(Text("print('still ' + 'here')\n"))
            seen = await read_until(session, b"still here", seen)
            await session.send_stdin(Text("exit()\n"))
            output = await session.finalize()
    assert output.exit_code == 0
    assert b"KeyboardInterrupt" in output.stderr


async def test_python_repl_through_pty(tmp_path: Path) -> None:
    """An interactive `python3 -i` on a pty computes, survives Ctrl-C of a loop, and exits 0."""
    async with LocalExecutor(tmp_path, kill_grace=0.2) as ex:
        await drive_repl_on_a_pty(ex)


async def test_python_repl_through_pipes(tmp_path: Path) -> None:
    """`python3 -i -u` over pipes: SIGINT to the group interrupts a loop and the REPL goes on."""
    async with LocalExecutor(tmp_path, kill_grace=0.2) as ex:
        await drive_repl_through_pipes(ex)


@pytest.mark.skipif(shutil.which("tput") is None, reason="tput is not installed")
async def test_tput_cols_follows_resize(tmp_path: Path) -> None:
    """On a pty, `tput cols` reports the width of each `Resize`."""
    cmd = Command.shell("read x; tput cols; read y; tput cols").with_env({"TERM": "xterm"})
    async with LocalExecutor(tmp_path, kill_grace=0.2) as ex:
        with anyio.fail_after(20):
            async with await ex.start(cmd, pty=True) as session:
                await session.send_stdin(Resize(cols=100, rows=30))
                await session.send_stdin(Text("\n"))
                seen = await read_until(session, b"100\r\n")
                await session.send_stdin(Resize(cols=132, rows=30))
                await session.send_stdin(Text("\n"))
                seen = await read_until(session, b"132\r\n", seen)
                output = await session.finalize()
    assert output.exit_code == 0
    assert seen.index(b"100") < seen.index(b"132")


async def test_sigterm_kills_the_group(tmp_path: Path) -> None:
    """SIGTERM sent to a session reaches its background children: all of them end."""
    script = (
        "sleep 60 & echo $! > a.pid; sleep 60 & echo $! > b.pid; "
        "sleep 60 & echo $! > c.pid; echo started; wait"
    )
    async with LocalExecutor(tmp_path, kill_grace=0.2) as ex:
        with anyio.fail_after(20):
            async with await ex.start(Command.shell(script)) as session:
                await read_until(session, b"started")
                pids = [int((tmp_path / f"{n}.pid").read_text()) for n in "abc"]
                assert all(alive(pid) for pid in pids)
                await session.send_stdin(Signal(UnixSignal.SIGTERM))
                with pytest.raises(NonZeroExit) as caught:
                    await session.finalize()
                # Within the block: the exit's own tree kill has not run yet.
                while any(alive(pid) for pid in pids):
                    await anyio.sleep(0.01)
    assert caught.value.output is not None
    assert caught.value.output.signal == int(UnixSignal.SIGTERM)


TOTAL = 200 * 10**6
WRITE = 1 << 16
PATTERN_CHILD = f"""\
import sys
out = sys.stdout.buffer
total, size, i = {TOTAL}, {WRITE}, 0
while total > 0:
    n = min(size, total)
    block = (i.to_bytes(8, "big") * (n // 8 + 1))[:n]
    out.write(block)
    out.flush()
    total -= n
    i += 1
"""


def expected_pattern_digest() -> str:
    """The sha256 of what PATTERN_CHILD writes."""
    digest = hashlib.sha256()
    total, i = TOTAL, 0
    while total > 0:
        n = min(WRITE, total)
        digest.update((i.to_bytes(8, "big") * (n // 8 + 1))[:n])
        total -= n
        i += 1
    return digest.hexdigest()


@pytest.mark.slow
async def test_slow_reader_of_200_mb(tmp_path: Path) -> None:
    """A slow reader of 200 MB loses no byte, and this process's memory grows under 64 MiB."""
    expected = expected_pattern_digest()
    me = psutil.Process()
    start = me.memory_info().rss
    peak = start
    digest = hashlib.sha256()
    count = 0
    chunks = 0
    async with LocalExecutor(tmp_path, kill_grace=0.2, output_limit=1 << 20) as ex:
        with anyio.fail_after(240):
            async with await ex.start(Command.exec([PY, "-c", PATTERN_CHILD])) as session:
                async for item in session:
                    assert isinstance(item.chunk, Stdout)
                    digest.update(item.chunk.data)
                    count += len(item.chunk.data)
                    chunks += 1
                    # Chunks are up to 1 MiB: a pause after each keeps the pipe full.
                    peak = max(peak, me.memory_info().rss)
                    await anyio.sleep(0.005)
                output = await session.finalize()
    peak = max(peak, me.memory_info().rss)
    assert output.exit_code == 0
    assert count == TOTAL
    assert digest.hexdigest() == expected
    assert peak - start < 64 << 20, f"RSS grew by {(peak - start) / (1 << 20):.1f} MiB"


ORDER_CHILD = """\
import sys
plan = [(s, int(n)) for s, n in (p.split(":") for p in sys.argv[1:])]
for index, (stream, size) in enumerate(plan):
    out = (sys.stdout if stream == "out" else sys.stderr).buffer
    out.write(bytes([index % 251]) * size)
    out.flush()
"""


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    plan=st.lists(
        st.tuples(st.sampled_from(["out", "err"]), st.integers(1, 70000)), min_size=1, max_size=12
    ),
    delays=st.lists(st.integers(0, 3), min_size=1, max_size=8),
)
async def test_bytes_per_stream_in_order(
    tmp_path: Path, plan: list[tuple[str, int]], delays: list[int]
) -> None:
    """For any chunk sizes and consumer delays, each stream yields exactly what the child wrote."""
    expected = {"out": b"", "err": b""}
    for index, (stream, size) in enumerate(plan):
        expected[stream] += bytes([index % 251]) * size
    got = {"out": b"", "err": b""}
    argv = [PY, "-c", ORDER_CHILD, *(f"{s}:{n}" for s, n in plan)]
    async with LocalExecutor(tmp_path, kill_grace=0.2) as ex:
        with anyio.fail_after(30):
            async with await ex.start(Command.exec(argv)) as session:
                index = 0
                async for item in session:
                    key = "out" if isinstance(item.chunk, Stdout) else "err"
                    assert isinstance(item.chunk, Stdout | Stderr)
                    got[key] += item.chunk.data
                    await anyio.sleep(delays[index % len(delays)] / 1000)
                    index += 1
                output = await session.finalize()
    assert output.exit_code == 0
    assert got == expected
