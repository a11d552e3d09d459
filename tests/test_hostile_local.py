"""Hostile probes of LocalExecutor: hangs, leaks, lost bytes, wrong errors, cancellation holes.

Passing tests are regression guards. Tests marked `xfail(strict=True)` show a
bug that is still there; the reason names it.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import io
import os
import resource
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import cast

import anyio
import pytest
from conftest import alive

from executor import (
    DEFAULT_STREAM_OUTPUT_LIMIT,
    Chunk,
    Command,
    CommandError,
    ExecutorError,
    InvalidArgument,
    LocalExecutor,
    NonZeroExit,
    PolicyDenied,
    Sink,
    Stderr,
    Stdout,
    TimedOut,
)

pytestmark = pytest.mark.anyio


# --- helpers ------------------------------------------------------------------------


def cmdline(pid: int) -> bytes:
    """The command line of `pid`, or b"" when it is gone."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return b""


def kill_if_ours(pid: int, marker: bytes) -> None:
    """SIGKILL `pid` if it still runs a command line containing `marker` (one we started)."""
    if alive(pid) and marker in cmdline(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


async def read_pid(path: Path, timeout: float = 5) -> int:
    """Wait for a pid file to hold a pid, and return it."""
    with anyio.fail_after(timeout):
        while not (path.exists() and path.read_text().strip()):
            await anyio.sleep(0.01)
    return int(path.read_text())


async def wait_dead(pid: int, timeout: float = 5) -> bool:
    """Wait up to `timeout` for `pid` to die; return whether it did."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not alive(pid):
            return True
        await anyio.sleep(0.01)
    return False


def open_fds() -> set[str]:
    """The file descriptors this process holds."""
    return set(os.listdir("/proc/self/fd"))


def py(code: str) -> Command:
    """A Python one-liner as an argv command."""
    return Command.exec([sys.executable, "-c", code])


# --- exit codes and signals ---------------------------------------------------------


async def test_exit_255(ex: LocalExecutor) -> None:
    """`exit 255` raises NonZeroExit with exit code 255 and no signal."""
    with anyio.fail_after(10), pytest.raises(NonZeroExit) as caught:
        await ex.exec_cmd(Command.shell("printf partial; exit 255"))
    assert caught.value.output.exit_code == 255
    assert caught.value.output.signal is None
    assert caught.value.output.stdout == b"partial"


async def test_self_sigterm_is_143(ex: LocalExecutor) -> None:
    """A shell that sends itself SIGTERM reports exit code 143, signal 15, named in the message."""
    with anyio.fail_after(10), pytest.raises(NonZeroExit) as caught:
        await ex.exec_cmd(Command.shell("kill -TERM $$"))
    assert caught.value.output.exit_code == 143
    assert caught.value.output.signal == signal.SIGTERM
    assert "SIGTERM" in str(caught.value)


async def test_exit_code_143_is_not_a_signal(ex: LocalExecutor) -> None:
    """A plain `exit 143` is an exit code, not a signal."""
    with anyio.fail_after(10), pytest.raises(NonZeroExit) as caught:
        await ex.exec_cmd(Command.shell("exit 143"))
    assert caught.value.output.exit_code == 143
    assert caught.value.output.signal is None


async def test_stopped_leader_times_out(ex: LocalExecutor) -> None:
    """A command that stops itself with SIGSTOP still times out and is killed."""
    with anyio.fail_after(10), pytest.raises(TimedOut):
        await ex.exec_cmd(Command.shell("echo before; kill -STOP $$; echo after").with_timeout(0.5))


# --- output exactness ---------------------------------------------------------------


async def test_no_trailing_newline(ex: LocalExecutor) -> None:
    """Output without a trailing newline is returned exactly."""
    with anyio.fail_after(10):
        output = await ex.exec_cmd(Command.exec(["printf", "a\nb"]))
    assert output.stdout == b"a\nb"
    assert output.text() == "a\nb"


async def test_stderr_only(ex: LocalExecutor) -> None:
    """A command that writes only stderr has empty stdout and only Stderr chunks."""
    with anyio.fail_after(10):
        output = await ex.exec_cmd(Command.shell("printf oops >&2"))
    assert output.stdout == b""
    assert output.stderr == b"oops"
    assert all(isinstance(chunk, Stderr) for chunk in output.chunks)
    assert output.exit_code == 0


async def test_ten_megabyte_single_line(ex: LocalExecutor) -> None:
    """A 10 MiB line with no newline arrives whole and exact."""
    size = 10 << 20
    code = f"import sys; sys.stdout.buffer.write(bytes(range(97, 123)) * {size // 26 + 1})"
    with anyio.fail_after(30):
        output = await ex.exec_cmd(py(code))
    expected = (bytes(range(97, 123)) * (size // 26 + 1))[: (size // 26 + 1) * 26]
    assert output.stdout == expected
    assert not output.truncated


async def test_thousand_tiny_chunks_keep_order(ex: LocalExecutor) -> None:
    """1000 tiny writes per stream arrive in order, and the sink sees exactly the stored chunks."""
    code = (
        "import os\n"
        "for i in range(1000):\n"
        "    os.write(1, b'o%d,' % i)\n"
        "    os.write(2, b'e%d,' % i)\n"
    )
    seen: list[Chunk] = []
    with anyio.fail_after(30):
        output = await ex.exec_cmd_streaming(py(code), seen.append)
    assert output.stdout == b"".join(b"o%d," % i for i in range(1000))
    assert output.stderr == b"".join(b"e%d," % i for i in range(1000))
    assert tuple(seen) == output.chunks


async def test_unicode_argv_and_env(ex: LocalExecutor) -> None:
    """Non-ASCII arguments, variable names and values reach the process as UTF-8."""
    cmd = Command.exec(["printf", "%s|", "héllo wörld ✓", "日本語"]).with_env({"ÜNÏ": "välue ✓"})
    with anyio.fail_after(10):
        output = await ex.exec_cmd(cmd)
        env = await ex.exec_cmd(Command.exec(["env"]).with_env({"ÜNÏ": "välue ✓"}))
    assert output.stdout == "héllo wörld ✓|日本語|".encode()
    assert "ÜNÏ=välue ✓".encode() in env.stdout.splitlines()


async def test_env_value_with_equals(ex: LocalExecutor) -> None:
    """A variable whose value holds '=' signs arrives unchanged."""
    cmd = Command.shell('printf %s "$EQ"').with_env({"EQ": "a=b==c="})
    with anyio.fail_after(10):
        output = await ex.exec_cmd(cmd)
    assert output.stdout == b"a=b==c="


async def test_output_limit_zero(tmp_path: Path) -> None:
    """With output_limit=0 nothing is stored, truncated tells if output came, sinks see all."""
    seen = bytearray()
    async with LocalExecutor(tmp_path, output_limit=0) as ex:
        with anyio.fail_after(10):
            output = await ex.exec_cmd_streaming(
                Command.shell("echo out; echo err >&2"), lambda c: seen.extend(c.data)
            )
            quiet = await ex.exec_cmd(Command.shell("true"))
    assert output.chunks == ()
    assert output.truncated
    assert sorted(bytes(seen).splitlines()) == [b"err", b"out"]
    assert not quiet.truncated


async def test_shebang_with_crlf(ex: LocalExecutor) -> None:
    """A #! line ending in CRLF runs the interpreter (CR trimmed); the body stays exact."""
    with anyio.fail_after(10):
        plain = await ex.exec_cmd(Command.shell("#!/bin/sh\r\nprintf 'hi'\r\n"))
        with_arg = await ex.exec_cmd(Command.shell("#!/usr/bin/env sh\r\nprintf 'ok'\r\n"))
    # The body's CR is part of the word `'hi'\r`: the shell prints it, as the body says.
    assert plain.stdout == b"hi\r"
    assert with_arg.stdout == b"ok\r"


async def test_closed_stdout_keeps_running(ex: LocalExecutor) -> None:
    """A command that closes stdout early is still awaited to its exit; its later stderr is kept."""
    started = time.monotonic()
    with anyio.fail_after(10):
        output = await ex.exec_cmd(Command.shell("echo early; exec >&-; sleep 0.3; echo late >&2"))
    assert time.monotonic() - started >= 0.3
    assert output.stdout == b"early\n"
    assert output.stderr == b"late\n"


async def test_closed_stderr_keeps_stdout(ex: LocalExecutor) -> None:
    """A command that closes stderr but not stdout loses nothing on stdout."""
    with anyio.fail_after(10):
        output = await ex.exec_cmd(Command.shell("exec 2>&-; echo a; sleep 0.1; echo b"))
    assert output.stdout == b"a\nb\n"
    assert output.stderr == b""


async def test_stderr_held_by_background_child_drains(ex: LocalExecutor, tmp_path: Path) -> None:
    """A background child holding only stderr does not hold the call past the drain period."""
    started = time.monotonic()
    with anyio.fail_after(10):
        output = await ex.exec_cmd(Command.shell("sleep 30 >/dev/null & echo $! > bg.pid; echo hi"))
    # Seconds, against the 30 s the child holds stderr: a loaded machine's start fits.
    assert time.monotonic() - started < 3
    assert output.stdout == b"hi\n"
    pid = await read_pid(tmp_path / "bg.pid")
    await ex.aclose()
    assert await wait_dead(pid)


# --- stdin ----------------------------------------------------------------------------


async def test_drain_is_bounded_with_a_slow_sink(tmp_path: Path) -> None:
    """A chatty background child plus a slow async sink still returns soon after the exit."""

    async def sink(chunk: Chunk) -> None:
        await anyio.sleep(0.02)

    async with LocalExecutor(tmp_path, kill_grace=0.2, output_limit=1 << 20) as ex:
        started = time.monotonic()
        with anyio.fail_after(5):
            output = await ex.exec_cmd_streaming(Command.shell("echo started; yes & yes &"), sink)
        assert output.stdout.startswith(b"started\n")
        assert time.monotonic() - started < 3


async def test_slow_sink_loses_no_output_written_before_exit(ex: LocalExecutor) -> None:
    """Bytes the command wrote before it exited all arrive, however slow the async sink is."""
    seen = bytearray()

    async def sink(chunk: Chunk) -> None:
        seen.extend(chunk.data)
        await anyio.sleep(0.3)

    with anyio.fail_after(10):
        output = await ex.exec_cmd_streaming(Command.shell("printf a; sleep 0.05; printf b"), sink)
    assert output.stdout == b"ab"
    assert bytes(seen) == b"ab"


async def test_huge_stdin_command_exits_at_once(ex: LocalExecutor) -> None:
    """64 MiB of stdin for a command that never reads it neither hangs nor fails."""
    started = time.monotonic()
    with anyio.fail_after(10):
        output = await ex.exec_cmd(Command.shell("echo done").with_stdin(b"x" * (64 << 20)))
    assert output.stdout == b"done\n"
    assert time.monotonic() - started < 5


async def test_stdin_partly_read(ex: LocalExecutor) -> None:
    """A command that reads ten bytes of a large stdin and exits gets those ten bytes."""
    data = bytes(range(256)) * 40000
    with anyio.fail_after(10):
        output = await ex.exec_cmd(Command.exec(["head", "-c", "10"]).with_stdin(data))
    assert output.stdout == data[:10]


async def test_stdin_held_by_silent_background_child(ex: LocalExecutor, tmp_path: Path) -> None:
    """A background child that inherits stdin and never reads it does not hold the call."""
    script = "sleep 30 >/dev/null 2>&1 & echo $! > bg.pid; echo started"
    started = time.monotonic()
    with anyio.fail_after(10):
        output = await ex.exec_cmd(Command.shell(script).with_stdin(b"y" * (8 << 20)))
    assert output.stdout == b"started\n"
    assert time.monotonic() - started < 2
    pid = await read_pid(tmp_path / "bg.pid")
    await ex.aclose()
    assert await wait_dead(pid)


async def test_twenty_megabytes_through_cat(ex: LocalExecutor) -> None:
    """20 MiB through `cat` comes back byte for byte (stdin and stdout pumped at once)."""
    data = os.urandom(1 << 20) * 20
    with anyio.fail_after(30):
        output = await ex.exec_cmd(Command.exec(["cat"]).with_stdin(data))
    assert output.stdout == data


# --- sinks ----------------------------------------------------------------------------


async def test_slow_async_sink_loses_nothing(ex: LocalExecutor) -> None:
    """A slow async sink under 8 MiB of output sees every byte in order (backpressure)."""
    size = 8 << 20
    seen = bytearray()

    async def sink(chunk: Chunk) -> None:
        await anyio.sleep(0.002)
        seen.extend(chunk.data)

    code = f"import sys; sys.stdout.buffer.write(bytes(range(251)) * {size // 251})"
    with anyio.fail_after(60):
        output = await ex.exec_cmd_streaming(py(code), sink)
    expected = bytes(range(251)) * (size // 251)
    assert bytes(seen) == expected
    # The sink has every byte; the output keeps its head and tail, and says so.
    kept = DEFAULT_STREAM_OUTPUT_LIMIT
    assert output.elided is not None
    assert output.elided.bytes == len(expected) - kept
    assert output.stdout == expected[: kept // 2] + expected[-kept // 2 :]


async def test_sync_sink_returning_a_value(ex: LocalExecutor) -> None:
    """A plain sync sink that happens to return a value (like file.write) works, as for files."""
    buffer = io.BytesIO()

    def write(chunk: Chunk) -> int:
        return buffer.write(chunk.data)

    with anyio.fail_after(10):
        await ex.exec_cmd(Command.write_file("f.txt", "file"))
        await ex.exec_cmd_streaming(Command.read_file("f.txt"), cast(Sink, write))
        output = await ex.exec_cmd_streaming(Command.shell("echo hi"), cast(Sink, write))
    assert output.stdout == b"hi\n"
    assert buffer.getvalue() == b"filehi\n"


async def test_timeout_is_not_held_by_a_blocked_sink(ex: LocalExecutor) -> None:
    """A command timeout raises TimedOut on time even while an async sink is blocked."""

    async def sink(chunk: Chunk) -> None:
        await anyio.sleep(30)

    with pytest.raises(TimedOut), anyio.fail_after(4):
        await ex.exec_cmd_streaming(Command.shell("echo hi; sleep 30").with_timeout(0.5), sink)


async def test_sink_exception_group_propagates_unchanged(ex: LocalExecutor) -> None:
    """An ExceptionGroup raised by a sink reaches the caller as that group, not flattened."""
    raised = ExceptionGroup("sink", [ValueError("inner")])

    def sink(chunk: Chunk) -> None:
        raise raised

    with anyio.fail_after(10), pytest.raises(ExceptionGroup) as caught:
        await ex.exec_cmd_streaming(Command.shell("echo hi; sleep 30"), sink)
    # trio may hand on a copy of the group (it splits out its own Cancelled);
    # what matters is that the group itself, with its exception, comes through.
    assert caught.value.message == "sink"
    assert caught.value.exceptions == raised.exceptions


async def test_sink_error_mid_flood_kills_tree(ex: LocalExecutor, tmp_path: Path) -> None:
    """A sink failing mid-flood stops the command, kills its tree and closes every fd."""
    before = open_fds()
    count = 0

    def sink(chunk: Chunk) -> None:
        nonlocal count
        count += 1
        if count == 5:
            raise RuntimeError("enough")

    with anyio.fail_after(10), pytest.raises(RuntimeError, match="enough"):
        await ex.exec_cmd_streaming(
            Command.shell("sleep 30 & echo $! > bg.pid; yes").with_stdin(b"z" * (4 << 20)), sink
        )
    pid = await read_pid(tmp_path / "bg.pid")
    assert not alive(pid)
    assert open_fds() <= before


# --- files ----------------------------------------------------------------------------


async def test_exec_a_directory_is_126(ex: LocalExecutor, tmp_path: Path) -> None:
    """Running a directory as a program fails with exit code 126."""
    (tmp_path / "sub").mkdir()
    with anyio.fail_after(10), pytest.raises(NonZeroExit) as caught:
        await ex.exec_cmd(Command.exec([str(tmp_path / "sub")]))
    assert caught.value.output.exit_code == 126


async def test_exec_the_workdir_is_126(ex: LocalExecutor, tmp_path: Path) -> None:
    """Running the working directory itself as a program is a 126, not an executor failure."""
    with anyio.fail_after(10), pytest.raises(NonZeroExit) as caught:
        await ex.exec_cmd(Command.exec([str(tmp_path)]))
    assert caught.value.output.exit_code == 126


async def test_current_dir_is_a_file(ex: LocalExecutor, tmp_path: Path) -> None:
    """A current_dir that is a file fails with NonZeroExit naming it."""
    (tmp_path / "plain").write_text("x")
    with anyio.fail_after(10), pytest.raises(NonZeroExit) as caught:
        await ex.exec_cmd(Command.shell("true").with_current_dir("plain"))
    assert "plain" in str(caught.value)


async def test_write_under_a_file_fails_cleanly(ex: LocalExecutor, tmp_path: Path) -> None:
    """write_file below a path that is a file fails, leaving that file and no temporary file."""
    (tmp_path / "plain").write_text("keep")
    with anyio.fail_after(10):
        for path in ("plain/x.txt", "plain/deeper/x.txt"):
            with pytest.raises(NonZeroExit):
                await ex.exec_cmd(Command.write_file(path, "data"))
    assert (tmp_path / "plain").read_text() == "keep"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plain"]


async def test_write_empty_content(ex: LocalExecutor, tmp_path: Path) -> None:
    """Writing zero bytes creates an empty file, and empties an existing one."""
    (tmp_path / "full.txt").write_text("old content")
    with anyio.fail_after(10):
        await ex.exec_cmd(Command.write_file("new/empty.txt", b""))
        await ex.exec_cmd(Command.write_file("full.txt", ""))
    assert (tmp_path / "new" / "empty.txt").read_bytes() == b""
    assert (tmp_path / "full.txt").read_bytes() == b""


async def test_write_long_file_name(ex: LocalExecutor, tmp_path: Path) -> None:
    """A file name of 250 bytes (legal: NAME_MAX is 255) can be written."""
    name = "n" * 250
    with anyio.fail_after(10):
        await ex.exec_cmd(Command.write_file(name, "data"))
    assert (tmp_path / name).read_text() == "data"


async def test_failed_write_has_no_side_effect(ex: LocalExecutor, tmp_path: Path) -> None:
    """A write to a path ending in '/' fails without creating anything."""
    with anyio.fail_after(10), pytest.raises(NonZeroExit):
        await ex.exec_cmd(Command.write_file("newdir/", "x"))
    assert not (tmp_path / "newdir").exists()


async def test_read_proc_file_with_zero_size(ex: LocalExecutor) -> None:
    """read_file of /proc/self/status (st_size 0) returns its whole content."""
    with anyio.fail_after(10):
        output = await ex.exec_cmd(Command.read_file("/proc/self/status"))
    assert output.stdout.startswith(b"Name:")
    assert b"\nPid:" in output.stdout


async def test_concurrent_writes_same_path(ex: LocalExecutor, tmp_path: Path) -> None:
    """Twenty concurrent writes to one path leave one whole content and no temporary file."""
    contents = [bytes([65 + i]) * 100_000 for i in range(20)]

    async def write(content: bytes) -> None:
        await ex.exec_cmd(Command.write_file("same.bin", content))

    with anyio.fail_after(30):
        async with anyio.create_task_group() as tasks:
            for content in contents:
                tasks.start_soon(write, content)
    assert (tmp_path / "same.bin").read_bytes() in contents
    assert [p.name for p in tmp_path.iterdir()] == ["same.bin"]


READ_BIG = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
import anyio
from executor import Command, LocalExecutor, NonZeroExit

async def main() -> None:
    seen = 0

    def count(chunk: object) -> None:
        nonlocal seen
        seen += len(chunk.data)  # type: ignore[attr-defined]

    async with LocalExecutor(sys.argv[1], output_limit=1000) as ex:
        out = await ex.exec_cmd_streaming(Command.read_file("sparse.bin"), count)
        # Streamed to the sink whole; the output holds none of it, and says so.
        assert seen == 2 << 30 and out.stdout == b"" and out.truncated, (seen, len(out.stdout))
        assert out.elided is not None and out.elided.bytes == 2 << 30
    async with LocalExecutor(sys.argv[1], read_limit=1 << 20) as ex:
        try:
            await ex.exec_cmd(Command.read_file("sparse.bin"))
        except NonZeroExit as error:
            assert "read limit of 1048576 bytes" in error.message, error.message
            assert error.output.stdout == b""
        else:
            raise AssertionError("a file past read_limit was read")
    print("ok")

anyio.run(main)
"""


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_read_file_memory_is_bounded_through_a_sink_or_a_limit(tmp_path: Path) -> None:
    """A 2 GiB (sparse) file streams to a sink, or fails past read_limit, in 1 GiB of memory."""
    (tmp_path / "sparse.bin").touch()
    os.truncate(tmp_path / "sparse.bin", 2 << 30)
    with anyio.fail_after(60):
        result = await anyio.run_process(
            [sys.executable, "-c", READ_BIG, str(tmp_path)], check=False
        )
    assert result.returncode == 0, result.stderr.decode()[-400:]
    assert result.stdout == b"ok\n"


# --- invalid text from a model ------------------------------------------------------

SURROGATE = "\ud83d"  # half of a UTF-16 pair: json.loads('"\\ud83d"') produces it


def _surrogate_commands() -> Iterator[tuple[str, Callable[[], Command]]]:
    yield "shell", lambda: Command.shell(f"echo {SURROGATE}")
    yield "argv", lambda: Command.exec(["echo", SURROGATE])
    yield "env", lambda: Command.shell("true").with_env({"X": SURROGATE})
    yield "current_dir", lambda: Command.shell("true").with_current_dir(SURROGATE)
    yield "read_path", lambda: Command.read_file(f"a{SURROGATE}")
    yield "write_path", lambda: Command.write_file(f"a{SURROGATE}", "x")
    yield "write_content", lambda: Command.write_file("a.txt", SURROGATE)
    yield "stdin", lambda: Command.shell("cat").with_stdin(SURROGATE)


@pytest.mark.parametrize(
    "build",
    [build for _, build in _surrogate_commands()],
    ids=[n for n, _ in _surrogate_commands()],
)
async def test_lone_surrogate_is_a_clear_error(
    ex: LocalExecutor, build: Callable[[], Command]
) -> None:
    """Text with a lone surrogate is refused as InvalidArgument or a CommandError, nothing raw."""
    with anyio.fail_after(10), pytest.raises((InvalidArgument, CommandError)):
        await ex.exec_cmd(build())


# --- file descriptor exhaustion -----------------------------------------------------


def _free_fds(count: int) -> list[int]:
    free: list[int] = []
    fd = 0
    while len(free) < count:
        try:
            os.fstat(fd)
        except OSError:
            free.append(fd)
        fd += 1
    return free


@contextlib.contextmanager
def _fd_budget(new: int) -> Iterator[None]:
    """Let this process open only `new` more descriptors inside the block."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (_free_fds(new + 1)[new], hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


async def test_fd_exhaustion_leaks_nothing(ex: LocalExecutor) -> None:
    """When pipes cannot be made (EMFILE), the call fails and no descriptor is left open."""
    await ex.exec_cmd(Command.shell("true"))
    before = open_fds()
    with _fd_budget(2), contextlib.suppress(CommandError, OSError):
        await ex.exec_cmd(Command.shell("true"))
    assert open_fds() <= before


async def test_fd_exhaustion_is_an_executor_error(ex: LocalExecutor) -> None:
    """Running out of descriptors is the executor's failure (ExecutorError), not exit code 126."""
    await ex.exec_cmd(Command.shell("true"))
    with _fd_budget(2), pytest.raises(ExecutorError):
        await ex.exec_cmd(Command.shell("true"))


# --- process trees ------------------------------------------------------------------


async def test_leader_exits_grandchild_holds_pipe(ex: LocalExecutor, tmp_path: Path) -> None:
    """With a timeout set, a leader that exits while a grandchild holds stdout returns at once."""
    started = time.monotonic()
    with anyio.fail_after(10):
        output = await ex.exec_cmd(
            Command.shell("sleep 30 & echo $! > bg.pid; echo started").with_timeout(5)
        )
    assert output.stdout == b"started\n"
    # Seconds, against the timeout's 5 and the grandchild's 30.
    assert time.monotonic() - started < 3
    pid = await read_pid(tmp_path / "bg.pid")
    assert alive(pid)
    await ex.aclose()
    assert await wait_dead(pid)


async def test_fork_loop_during_kill(tmp_path: Path) -> None:
    """A TERM-ignoring loop that keeps forking through the grace period is killed entirely."""
    # At most 300 children of 3 s each; SIG_IGN for TERM is inherited by every one.
    script = "trap '' TERM; i=0; while [ $i -lt 300 ]; do sleep 3 & i=$((i+1)); sleep 0.01; done"
    async with LocalExecutor(tmp_path, kill_grace=0.3) as ex:
        started = time.monotonic()
        with anyio.fail_after(15), pytest.raises(TimedOut):
            await ex.exec_cmd(Command.shell(script).with_timeout(0.5))
        assert time.monotonic() - started < 5


async def test_zombie_grandchildren_do_not_stall_kill(ex: LocalExecutor) -> None:
    """A leader with unreaped zombie children times out and is killed promptly."""
    started = time.monotonic()
    with anyio.fail_after(10), pytest.raises(TimedOut):
        await ex.exec_cmd(
            Command.shell("sleep 0.01 & sleep 0.01 & exec sleep 30").with_timeout(0.5)
        )
    assert time.monotonic() - started < 3


async def test_untagged_background_job_dies_at_aclose(tmp_path: Path) -> None:
    """A background job that dropped the tag from its environment still dies at aclose()."""
    ex = LocalExecutor(tmp_path, kill_grace=0.2)
    pid = 0
    try:
        with anyio.fail_after(10):
            await ex.exec_cmd(
                Command.shell(
                    "env -u EXECUTOR_PROCESS_TREE sleep 31 >/dev/null 2>&1 & echo $! > bg.pid"
                )
            )
            pid = await read_pid(tmp_path / "bg.pid")
            while not cmdline(pid).startswith(b"sleep\x0031"):
                await anyio.sleep(0.01)  # until `env` has exec'd sleep without the tag
            await ex.aclose()
            assert await wait_dead(pid, timeout=1)
    finally:
        await ex.aclose()
        if pid:
            kill_if_ours(pid, b"sleep\x0031")


async def test_untagged_daemon_dies_on_timeout(tmp_path: Path) -> None:
    """A double-forked, setsid daemon without the tag dies when its command times out."""
    script = (
        "(setsid env -u EXECUTOR_PROCESS_TREE sh -c 'echo $$ > d.pid; exec sleep 32' "
        ">/dev/null 2>&1 &); while [ ! -s d.pid ]; do sleep 0.01; done; sleep 30"
    )
    ex = LocalExecutor(tmp_path, kill_grace=0.2)
    pid = 0
    try:
        with anyio.fail_after(10):
            with pytest.raises(TimedOut):
                await ex.exec_cmd(Command.shell(script).with_timeout(1))
            pid = await read_pid(tmp_path / "d.pid")
            assert await wait_dead(pid, timeout=1)
    finally:
        await ex.aclose()
        if pid:
            kill_if_ours(pid, b"sleep\x0032")


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_sink_error_after_exit_spares_a_reused_pid(tmp_path: Path) -> None:
    """A sink failing after the leader was reaped never signals another process that got its pid."""
    if not os.access("/proc/sys/kernel/ns_last_pid", os.W_OK):
        pytest.skip("cannot steer pid allocation here")
    state: dict[str, int] = {}
    victims: list[subprocess.Popen[bytes]] = []

    def sink(chunk: Chunk) -> None:
        if chunk.data.startswith(b"pid="):
            state["leader"] = int(chunk.data.split(b"=")[1].split()[0])
            return
        if b"late" not in chunk.data:
            return
        leader = state["leader"]
        if os.path.exists(f"/proc/{leader}"):
            return  # not reaped yet: nothing to show
        with open("/proc/sys/kernel/ns_last_pid", "w") as f:
            f.write(str(leader - 1))
        victim = subprocess.Popen(["sleep", "33"], start_new_session=True)
        victims.append(victim)
        if victim.pid == leader:
            # Only now, when the pid is surely ours, does the sink fail.
            raise RuntimeError("sink failed after the exit")

    script = "echo pid=$$; setsid sh -c 'sleep 0.3; echo late' & exit 0"
    try:
        async with LocalExecutor(tmp_path, kill_grace=0.2, drain_timeout=3) as ex:
            with anyio.fail_after(10), contextlib.suppress(RuntimeError):
                await ex.exec_cmd_streaming(Command.shell(script), sink)
        if not victims or victims[0].pid != state["leader"]:
            pytest.skip("the pid was not reused as planned")
        await anyio.sleep(0.1)
        assert victims[0].poll() is None, f"unrelated process killed: {victims[0].returncode}"
    finally:
        for victim in victims:
            if victim.poll() is None:
                victim.kill()
            victim.wait()


# --- closing --------------------------------------------------------------------------


async def test_closed_executor_refuses_everything(tmp_path: Path) -> None:
    """After aclose() (twice is fine) every kind of call raises ExecutorError."""
    ex = LocalExecutor(tmp_path)
    await ex.aclose()
    await ex.aclose()
    with anyio.fail_after(10):
        for cmd in (
            Command.shell("true"),
            Command.exec(["true"]),
            Command.read_file("x"),
            Command.write_file("x", "y"),
        ):
            with pytest.raises(ExecutorError, match="closed"):
                await ex.exec_cmd(cmd)
            with pytest.raises(ExecutorError, match="closed"):
                await ex.exec_cmd_streaming(cmd, lambda chunk: None)
        with pytest.raises(ExecutorError, match="closed"):
            async for _ in ex.stream_files("."):
                pass
    assert not (tmp_path / "x").exists()


async def test_exec_concurrent_with_aclose(tmp_path: Path) -> None:
    """Commands running while aclose() runs end promptly with a CommandError, and new ones fail."""
    ex = LocalExecutor(tmp_path, kill_grace=0.3)
    errors: list[BaseException] = []

    async def one() -> None:
        try:
            await ex.exec_cmd(Command.shell("trap '' TERM; sleep 30 & wait"))
        except CommandError as error:
            errors.append(error)

    started = time.monotonic()
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tasks:
            for _ in range(8):
                tasks.start_soon(one)
            await anyio.sleep(0.3)
            tasks.start_soon(ex.aclose)
            await anyio.sleep(0.05)
            with pytest.raises(ExecutorError, match="closed"):
                await ex.exec_cmd(Command.shell("true"))
    assert len(errors) == 8
    assert time.monotonic() - started < 5


# --- cancellation ---------------------------------------------------------------------


async def test_cancellation_propagates_unchanged(ex: LocalExecutor) -> None:
    """Cancelling a command with stdin and a busy async sink raises the bare cancel exception."""

    async def sink(chunk: Chunk) -> None:
        await anyio.sleep(10)

    caught: list[BaseException] = []
    with anyio.fail_after(10):
        with anyio.move_on_after(0.3) as scope:
            try:
                await ex.exec_cmd_streaming(
                    Command.shell("echo go; cat; sleep 30").with_stdin(b"s" * (1 << 20)), sink
                )
            except BaseException as exc:
                caught.append(exc)
                raise
    assert scope.cancelled_caught
    assert len(caught) == 1
    assert type(caught[0]) is anyio.get_cancelled_exc_class()


async def test_cancellation_during_kill_grace(tmp_path: Path) -> None:
    """A second cancellation during the kill grace neither cuts the kill short nor wraps it."""
    # The grace is long beside the 0.3 s wait so that a loaded machine that wakes
    # this task late still cancels in the middle of it, not after the kill ended.
    async with LocalExecutor(tmp_path, kill_grace=2.0) as ex:
        caught: list[BaseException] = []
        outer, inner = anyio.CancelScope(), anyio.CancelScope()

        async def run() -> None:
            with outer, inner:
                try:
                    await ex.exec_cmd(
                        Command.shell("trap '' TERM; echo $$ > s.pid; while :; do sleep 0.05; done")
                    )
                except BaseException as exc:
                    caught.append(exc)
                    raise

        with anyio.fail_after(30):
            async with anyio.create_task_group() as group:
                group.start_soon(run)
                # The first cancel once TERM is trapped (the grace is then waited out,
                # however long a loaded machine took to start the command); the
                # second in the middle of the grace.
                pid = await read_pid(tmp_path / "s.pid")
                started = time.monotonic()
                inner.cancel()
                await anyio.sleep(0.3)
                outer.cancel()
        elapsed = time.monotonic() - started
        assert not alive(pid)
    assert outer.cancelled_caught
    assert 2.0 <= elapsed < 6
    assert type(caught[0]) is anyio.get_cancelled_exc_class()


async def test_cancellation_during_timeout_grace(tmp_path: Path) -> None:
    """Cancellation arriving while a timed-out command is being killed wins over TimedOut."""
    # The cancel (0.6 s) falls well inside the grace (0.3 s + 2 s), however late it wakes.
    async with LocalExecutor(tmp_path, kill_grace=2.0) as ex:
        with anyio.fail_after(10), anyio.move_on_after(0.6) as scope:
            await ex.exec_cmd(
                Command.shell("trap '' TERM; while :; do sleep 0.05; done").with_timeout(0.3)
            )
    assert scope.cancelled_caught


async def test_fds_after_cancellations(ex: LocalExecutor) -> None:
    """Cancelled commands (with and without stdin) leave no descriptor open."""
    await ex.exec_cmd(Command.shell("true").with_stdin(b"w"))
    before = open_fds()
    with anyio.fail_after(30):
        for i in range(20):
            cmd = Command.shell("cat >/dev/null; sleep 30")
            if i % 2:
                cmd = cmd.with_stdin(b"d" * (1 << 20))
            with anyio.move_on_after(0.05):
                await ex.exec_cmd(cmd)
    assert open_fds() <= before


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_asyncio_wait_for_kills_the_tree(ex: LocalExecutor, tmp_path: Path) -> None:
    """A native asyncio.wait_for timeout kills the command's tree before it returns."""
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(
            ex.exec_cmd(Command.shell("sleep 30 & echo $! > bg.pid; wait")), timeout=0.5
        )
    pid = await read_pid(tmp_path / "bg.pid")
    assert not alive(pid)


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_native_cancel_during_kill_grace(tmp_path: Path) -> None:
    """A native asyncio cancel arriving during the kill grace does not leave the tree running."""
    ex = LocalExecutor(tmp_path, kill_grace=2)

    def sink(chunk: Chunk) -> None:
        raise RuntimeError("sink failed")

    script = "trap '' TERM; echo $$ > s.pid; echo go; while :; do sleep 0.05; done"
    pid = 0
    try:
        with anyio.fail_after(10), pytest.raises((asyncio.TimeoutError, RuntimeError)):
            # The sink fails at once; the kill waits out its grace; wait_for fires meanwhile.
            await asyncio.wait_for(ex.exec_cmd_streaming(Command.shell(script), sink), 0.5)
        pid = await read_pid(tmp_path / "s.pid")
        assert not alive(pid)
    finally:
        await ex.aclose()
        # Reap the leader the library lost track of, so no Popen warns later.
        for obj in gc.get_objects():
            if isinstance(obj, subprocess.Popen) and obj.pid == pid and obj.returncode is None:
                obj.wait()


# --- wrappers -------------------------------------------------------------------------


async def test_nested_scopes_and_read_only(ex: LocalExecutor, tmp_path: Path) -> None:
    """Scopes nest through ReadOnly; ReadOnly refuses writes, shells and unknown kinds."""
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "f.txt").write_text("inner")
    nested = ex.scoped("a").scoped("b")
    chains = [
        ex.scoped("a").read_only().scoped("b"),
        ex.read_only().scoped("a").scoped("b"),
        ex.scoped("a").scoped("b").read_only().read_only(),
    ]
    seen: list[Chunk] = []
    with anyio.fail_after(10):
        assert (await nested.exec_cmd(Command.exec(["pwd"]))).stdout == (
            f"{tmp_path / 'a' / 'b'}\n".encode()
        )
        absolute = Command.exec(["pwd"]).with_current_dir(str(tmp_path))
        assert (await nested.exec_cmd(absolute)).stdout == f"{tmp_path}\n".encode()
        for chain in chains:
            assert (await chain.exec_cmd(Command.read_file("f.txt"))).stdout == b"inner"
            for cmd in (
                Command.write_file("w.txt", "x"),
                Command.shell("touch w.txt"),
                Command.exec(["touch", "w.txt"]),
                Command(),
            ):
                with pytest.raises(PolicyDenied):
                    await chain.exec_cmd(cmd)
                with pytest.raises(PolicyDenied):
                    await chain.exec_cmd_streaming(cmd, seen.append)
        with pytest.raises(ExecutorError):
            await ex.exec_cmd(Command())
    assert seen == []
    assert not any(p.name == "w.txt" for p in tmp_path.rglob("*"))


async def test_stdout_chunks_are_stdout(ex: LocalExecutor) -> None:
    """Chunks carry the right stream type through a scoped streaming call."""
    (Path(ex.workdir) / "s").mkdir()
    seen: list[Chunk] = []
    with anyio.fail_after(10):
        await ex.scoped("s").exec_cmd_streaming(Command.shell("echo o; echo e >&2"), seen.append)
    assert {(type(c), c.data) for c in seen} == {(Stdout, b"o\n"), (Stderr, b"e\n")}
