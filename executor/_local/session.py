"""`LocalSession`: a session of a process on this machine.

It runs its process through the same lifecycle as `exec_cmd` (`spawn` and
`ProcessRun`), so timeouts, the kill of the whole tree and the output cap
are the same.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import struct
import termios
from collections.abc import Awaitable, Callable

import anyio

from executor._core.errors import ExecutorError
from executor._core.output import CommandOutput, OutputBuffer
from executor._core.session import ProcessSession
from executor._local.process import ProcessRun, Spawned, end_tree


class LocalSession(ProcessSession):
    """A session of a process on this machine: pipes or a pty, and `ProcessRun`'s lifecycle."""

    # ProcessRun's reader lets the loop in at least every millisecond of a
    # flood, and a full chunk buffer makes it wait: a trip per chunk besides
    # measured no faster (`bench_sessions.py`, 0.92-1.06x `exec_cmd_streaming`
    # either way).
    _offer_yields = False

    def __init__(
        self,
        open_process: Callable[[], Awaitable[Spawned]],
        *,
        finish: Callable[[CommandOutput], CommandOutput],
        initial_stdin: bytes | None,
        pty: bool,
        output_buffer: Callable[[], OutputBuffer],
        timeout: float | None,
        kill_grace: float,
        drain_timeout: float,
    ) -> None:
        super().__init__(pty=pty, initial_stdin=initial_stdin, finish=finish)
        self._open = open_process
        self._output_buffer = output_buffer
        self._timeout = timeout
        self._kill_grace = kill_grace
        self._drain_timeout = drain_timeout
        self._spawned: Spawned | None = None
        self._stdin: int | None = None
        self._master: int | None = None

    @property
    def pid(self) -> int | None:
        """The command's pid (also its process group), once started."""
        return None if self._spawned is None else self._spawned.pid

    async def _begin(self) -> None:
        spawned = await self._open()
        self._spawned = spawned
        # The session writes stdin itself; ProcessRun leaves the pipe alone.
        self._stdin, spawned.stdin = spawned.stdin, None
        if self.pty and self._stdin is not None:
            # Our own handle on the terminal, for Resize: the run closes its fds at the end.
            self._master = os.dup(self._stdin)

    async def _run(self) -> CommandOutput:
        assert self._spawned is not None
        run = ProcessRun(
            self._spawned,
            stdin=None,
            sink=self._offer,
            buffer=self._output_buffer(),
            timeout=self._timeout,
            kill_grace=self._kill_grace,
            drain_timeout=self._drain_timeout,
            keep_tree=True,
        )
        return await run.run()

    async def _write_input(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            fd = self._stdin
            if fd is None:
                raise ExecutorError("the session's stdin is closed")
            try:
                written = os.write(fd, view[: 1 << 16])
            except BlockingIOError:
                await anyio.wait_writable(fd)
                continue
            except (BrokenPipeError, OSError):
                # The command stopped reading; what it did not take is its choice.
                return
            view = view[written:]

    async def _close_input(self) -> None:
        self._close_stdin_fd()

    async def _signal(self, signal: int) -> None:
        spawned = self._spawned
        assert spawned is not None
        if spawned.signaller is not None:
            await spawned.signaller(signal)
            return
        # The group id is pinned only while the leader is unreaped;
        # this check and the kill run with no await between.
        if spawned.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(spawned.pid, signal)

    async def _resize(self, cols: int, rows: int) -> None:
        if self._master is None:
            raise ExecutorError("the session's terminal is closed")
        size = struct.pack("HHHH", rows, cols, 0, 0)
        with contextlib.suppress(OSError):
            fcntl.ioctl(self._master, termios.TIOCSWINSZ, size)

    async def _terminate(self, grace: float | None = None) -> None:
        spawned = self._spawned
        if spawned is None:
            return
        # As ProcessRun does: through the supervisor's shim, or by tag and group.
        await end_tree(spawned, grace=self._kill_grace if grace is None else grace)

    async def _release(self) -> None:
        if self._spawned is not None:
            self._spawned.close()  # what the run kept for `_terminate`
        self._close_stdin_fd()
        master, self._master = self._master, None
        if master is not None:
            with contextlib.suppress(OSError):
                os.close(master)

    def _close_stdin_fd(self) -> None:
        fd, self._stdin = self._stdin, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)
