"""`python -m executor run`: a command run the way a shell runs its foreground job.

The command runs as a session (`ToolExecutor.start`): its output is written
as it comes, what is piped into the CLI streams into the command, and the
CLI exits with the command's exit code.

- Stdin: a pipe or a file is forwarded as it is read, and its end closes the
  command's input. A terminal is not read (the command reads end-of-file at
  once, and the CLI never steals keys typed for the shell after it, nor is
  stopped for reading in the background); `--pty` is for interactive use.
- `--pty`: the command gets a terminal of its own. The user's terminal is in
  raw mode while it runs, so every key (Ctrl-C, Ctrl-D, Ctrl-Z too) goes to
  the command's terminal as typed, which signals and echoes as a terminal
  does; the window size is sent at the start and on every SIGWINCH.
- SIGINT, SIGTERM or SIGHUP to the CLI: the command's process group gets
  the same signal (SIGTERM for SIGQUIT, which a session cannot pass on), as
  a shell's foreground job gets the terminal's; what it
  prints while it stops is still written. If it has not stopped after the
  grace (`kill_grace`, or at once on the next such signal), SIGTERM, then
  SIGKILL; leaving the session kills whatever of its tree is left. The CLI
  exits with 128 + the signal's number.
- Exit codes: the command's own (128 + N when a signal N killed it), 124
  when it timed out, 125 when the executor failed, 141 when our output was
  closed (`| head`).
"""

from __future__ import annotations

import contextlib
import math
import os
import select
import signal
import stat
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TypeAlias

import anyio
import anyio.lowlevel

from executor._cli.terminal import is_terminal, raw_mode, window_size
from executor._core.base import ToolExecutor
from executor._core.commands import Command, Exec, Shell
from executor._core.errors import CommandError, ExecutorError, NonZeroExit, TimedOut
from executor._core.output import Chunk, CommandOutput, Stdout
from executor._core.session import ProcessSession
from executor._core.stdin import Bytes, Resize, Signal, UnixSignal

TIMED_OUT = 124
EXECUTOR_FAILED = 125
BROKEN_PIPE = 128 + signal.SIGPIPE

# The signals that stop the command; a second one hurries the stop along.
_STOPPING = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
# Those a session can pass on; the others (SIGQUIT) start the stop at SIGTERM.
_PASSED_ON = frozenset(int(number) for number in UnixSignal)
# Bytes of our stdin read (and sent on) at a time.
_READ_SIZE = 1 << 16

_Reader: TypeAlias = Callable[[], Awaitable[bytes]]


class OutputClosed(Exception):
    """Our own stdout or stderr is gone (a closed pipe, as in `| head -1`)."""


def say(message: str) -> None:
    """Write `executor: MESSAGE` to stderr, if it is still open."""
    with contextlib.suppress(OSError):
        os.write(2, f"executor: {message}\n".encode())


def _write(fd: int, data: bytes) -> None:
    view = memoryview(data)
    try:
        while view:
            try:
                view = view[os.write(fd, view) :]
            except BlockingIOError:
                # Someone made our terminal non-blocking: wait until it takes more.
                select.select([], [fd], [])
    except OSError as error:
        raise OutputClosed from error


def write_chunk(chunk: Chunk) -> None:
    """Write a chunk of the command's output to our stdout or stderr.

    Raises:
        OutputClosed: That stream is closed (or failed).

    """
    _write(1 if isinstance(chunk, Stdout) else 2, chunk.data)


def write_output(output: CommandOutput) -> None:
    """Write all of an output that was never streamed (a command that could not start)."""
    for chunk in output.chunks:
        write_chunk(chunk)


def session_command(command: Shell) -> tuple[Command, bool]:
    """The command a session runs for `command`, and whether our stdin may go to it.

    A `#!` script runs its interpreter with the body as its stdin (as
    `exec_cmd` runs it), so it takes none of ours.
    """
    shebang = command.shebang()
    if shebang is None:
        return command, True
    return Exec(shebang.argv, stdin=shebang.body), False


async def run_session(executor: ToolExecutor, command: Shell, *, pty: bool, grace: float) -> int:
    """Run `command` in `executor` (entered here) as above; return the CLI's exit code."""
    return await _Run(executor, command, pty=pty, grace=grace).run()


class _Run:
    """One `run`: the executor entered, the session run, and the signals that come meanwhile.

    A signal before the command starts (the executor may be starting a
    container) cancels the start; one while it runs stops it step by step
    (`_stop`); one after it ended, while the executor cleans up, is ignored.
    """

    def __init__(self, executor: ToolExecutor, command: Shell, *, pty: bool, grace: float) -> None:
        self._executor = executor
        self._command, self._takes_stdin = session_command(command)
        self._pty = pty
        self._grace = grace
        self.received: int | None = None
        self._phase = "starting"
        self._starting = anyio.CancelScope()
        # Signals that came while the session runs, for the session's own tasks.
        self._send, self._signals = anyio.create_memory_object_stream[int](math.inf)
        # Set by a further signal: the stop goes on to its next step at once.
        self._hurry = anyio.Event()

    async def run(self) -> int:
        watched = (*_STOPPING, signal.SIGWINCH) if self._pty else _STOPPING
        with self._send, self._signals, anyio.open_signal_receiver(*watched) as signals:
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(self._watch, signals)
                code, message = await self._outcome()
                tasks.cancel_scope.cancel()
        # Written once the terminal is back in its own mode.
        if message is not None:
            say(message)
        if self.received is not None:
            return 128 + self.received
        return code

    async def _watch(self, signals: AsyncIterator[int]) -> None:
        async for number in signals:
            if self._phase == "running":
                self._send.send_nowait(number)
            elif self._phase == "starting" and number != signal.SIGWINCH:
                self.received = number
                self._starting.cancel()

    async def _outcome(self) -> tuple[int, str | None]:
        """The exit code and what to say; every failure of the run is turned into one."""
        try:
            with self._starting:
                async with self._executor:
                    return await self._session(), None
        except TimedOut as error:
            return TIMED_OUT, error.message
        except NonZeroExit as error:
            return error.output.exit_code or 1, None
        except OutputClosed:
            return BROKEN_PIPE, None
        except CommandError as error:
            return EXECUTOR_FAILED, error.message
        except ImportError as error:
            # The backend's extra is not installed (`pip install tool-executor[ssh]`).
            return EXECUTOR_FAILED, str(error)
        finally:
            self._phase = "ended"
        # Cancelled by a signal before the command started.
        return 0, None

    async def _session(self) -> int:
        session = await self._executor.start(self._command, pty=self._pty)
        async with contextlib.AsyncExitStack() as stack:
            try:
                await stack.enter_async_context(session)
            except NonZeroExit as error:
                # It could not start (a program not found): say what it said.
                write_output(error.output)
                raise
            if self._pty and is_terminal(0):
                # Left before the session is: the terminal is back before anything else.
                stack.enter_context(raw_mode(0))
            self._phase = "running"
            failure: BaseException | None = None
            output: CommandOutput | None = None
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(self._handle_signals, session)
                if self._takes_stdin and (self._pty or not is_terminal(0)):
                    tasks.start_soon(_forward_stdin, session)
                else:
                    await session.close_stdin()
                if self._pty:
                    await _send_size(session)
                try:
                    while (item := await session.next_chunk()) is not None:
                        write_chunk(item.chunk)
                    output = await session.finalize()
                except (CommandError, OutputClosed) as error:
                    # Raised outside the task group, which would wrap it in a group.
                    failure = error
                finally:
                    self._phase = "ended"
                    tasks.cancel_scope.cancel()
            if failure is not None:
                # Leaving the session (the stack) kills what is left of the command's tree.
                raise failure
            assert output is not None
            return output.exit_code or 0

    async def _handle_signals(self, session: ProcessSession) -> None:
        async with anyio.create_task_group() as tasks:
            async for number in self._signals:
                if number == signal.SIGWINCH:
                    await _send_size(session)
                elif self.received is None:
                    self.received = number
                    tasks.start_soon(self._stop, session, number)
                else:
                    self._hurry.set()

    async def _stop(self, session: ProcessSession, first: int) -> None:
        """Stop the command: `first` (the signal the CLI got), then SIGTERM, then SIGKILL.

        Each step waits the grace for the command to end, or less if another
        signal comes (the user pressing Ctrl-C again).
        """
        if first not in _PASSED_ON:
            first = signal.SIGTERM
        steps = [first, *(step for step in (signal.SIGTERM, signal.SIGKILL) if step != first)]
        for step in steps:
            with contextlib.suppress(ExecutorError):
                await session.send_stdin(Signal(step))
            with anyio.move_on_after(self._grace):
                await self._hurry.wait()
            self._hurry = anyio.Event()


async def _send_size(session: ProcessSession) -> None:
    size = window_size()
    if size is not None:
        with contextlib.suppress(ExecutorError):
            await session.send_stdin(Resize(*size))


async def _forward_stdin(session: ProcessSession) -> None:
    """Send what comes on our stdin to the command as it comes; close its input at our end."""
    read = _stdin_reader()
    with contextlib.suppress(ExecutorError):
        try:
            while data := await read():
                await session.send_stdin(Bytes(data))
        except OSError:
            # Our stdin failed (a terminal that hung up): that is its end.
            pass
        await session.close_stdin()


def _stdin_reader() -> _Reader:
    try:
        mode = os.fstat(0).st_mode
    except OSError:
        # No stdin at all (closed): the command reads end-of-file.
        return _nothing
    if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or is_terminal(0):
        return _read_when_ready
    # A file, or a device like /dev/null: poll cannot wait for it, and a read
    # does not wait long.
    return _read_now


async def _nothing() -> bytes:
    await anyio.lowlevel.checkpoint()
    return b""


async def _read_when_ready() -> bytes:
    await anyio.wait_readable(0)
    return os.read(0, _READ_SIZE)


async def _read_now() -> bytes:
    await anyio.lowlevel.checkpoint()
    return os.read(0, _READ_SIZE)
