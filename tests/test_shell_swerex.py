"""SWE-ReX's session tests, as behaviours of our persistent shell (on a LocalExecutor).

SWE-ReX's `run_in_session` tests check that sessions are isolated, that an
interactive Python runs inside a session, that a running command can be
interrupted and the session goes on, and the plain cases (an empty command,
a missing program, a failing command's exit code, a multi-line command with
a heredoc). Here each is a test of `PersistentShell`.
"""

from __future__ import annotations

import sys

import anyio
import pytest

from executor import JobState, LocalExecutor, NonZeroExit, TimedOut

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    """Asyncio only: the shell's contract runs on trio in test_shells.py."""
    return "asyncio"


async def test_sessions_are_isolated(ex: LocalExecutor) -> None:
    """A variable exported in one shell is not seen by another of the same executor."""
    async with ex.shell() as first, ex.shell() as second:
        await first.run("export MY_VAR=first")
        assert (await first.run('echo "[$MY_VAR]"')).stdout == b"[first]\n"
        assert (await second.run('echo "[$MY_VAR]"')).stdout == b"[]\n"


async def test_interactive_python_inside_a_session(ex: LocalExecutor) -> None:
    """An interactive Python runs as a job: lines written to it are run, its answers read."""
    async with ex.shell() as sh:
        await sh.run("export GREETING=hello")
        python = await sh.start_job(f"{sys.executable} -i -u -q")
        await python.write("import os\n")
        await python.write("print(os.environ['GREETING'], 'world')\n")
        seen = b""
        with anyio.fail_after(20):
            while b"hello world\n" not in seen:
                seen += (await python.read(wait=0.2)).stdout
        await python.write("x = 6 * 7\nprint(x)\n")
        with anyio.fail_after(20):
            while b"42\n" not in seen:
                seen += (await python.read(wait=0.2)).stdout
        await python.write("quit()\n")
        status = await python.wait(timeout=20)
    assert (status.state, status.exit_code) == (JobState.EXITED, 0)


async def test_python_reads_its_program_from_stdin_inside_a_session(ex: LocalExecutor) -> None:
    """Python run with input inside the shell sees the shell's variables and ends at EOF."""
    async with ex.shell() as sh:
        await sh.run("export GREETING=hello")
        output = await sh.run(
            f"{sys.executable} -", stdin="import os\nprint(os.environ['GREETING'])\n"
        )
    assert output.stdout == b"hello\n"


async def test_interrupting_a_running_command(ex: LocalExecutor) -> None:
    """A long command is interrupted (by its timeout, or by cancelling); the session goes on."""
    async with ex.shell() as sh:
        await sh.run("cd /tmp")
        with anyio.fail_after(10), pytest.raises(TimedOut):
            await sh.run("sleep 10", timeout=0.3)
        with anyio.fail_after(10), anyio.move_on_after(0.3):
            await sh.run("sleep 10")
        output = await sh.run("echo still here; pwd")
    assert output.stdout == b"still here\n/tmp\n"
    assert not output.state_lost


async def test_interrupting_an_interactive_program(ex: LocalExecutor) -> None:
    """SIGINT to an interactive Python job raises KeyboardInterrupt there; it keeps running."""
    async with ex.shell() as sh:
        python = await sh.start_job(f"{sys.executable} -i -u -q")
        await python.write("import time\nprint('sleeping'); time.sleep(30)\n")
        seen = b""
        with anyio.fail_after(20):
            while b"sleeping\n" not in seen:
                seen += (await python.read(wait=0.2)).stdout
            await anyio.sleep(0.2)
            await python.signal(2)
            while b"KeyboardInterrupt" not in seen:
                seen += (await python.read(wait=0.2)).stderr
            await python.write("print('after')\n")
            while b"after\n" not in seen:
                seen += (await python.read(wait=0.2)).stdout
        assert python.status().state is JobState.RUNNING
        await python.kill()


async def test_empty_command(ex: LocalExecutor) -> None:
    """An empty command succeeds with no output."""
    async with ex.shell() as sh:
        output = await sh.run("")
    assert (output.stdout, output.stderr, output.exit_code) == (b"", b"", 0)


async def test_missing_program_and_failing_command(ex: LocalExecutor) -> None:
    """A missing program is exit 127 with bash's message; a failing command keeps its code."""
    async with ex.shell() as sh:
        with pytest.raises(NonZeroExit) as missing:
            await sh.run("doesnotexist")
        with pytest.raises(NonZeroExit) as failing:
            await sh.run("ls /no/such/folder")
        assert (await sh.run("echo fine")).stdout == b"fine\n"
    assert missing.value.output.exit_code == 127
    assert b"doesnotexist" in missing.value.output.stderr
    assert failing.value.output.exit_code == 2


async def test_multiline_command_with_a_heredoc(ex: LocalExecutor) -> None:
    """A command over several lines, with a heredoc, runs whole."""
    script = "cat <<'EOF' > note.txt\nline one\nline 'two'\nEOF\nwc -l < note.txt\ncat note.txt"
    async with ex.shell() as sh:
        output = await sh.run(script)
    assert output.stdout == b"2\nline one\nline 'two'\n"
