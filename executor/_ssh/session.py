"""`SshSession`: a `ProcessSession` whose command runs on the remote host of an `SshExecutor`.

The command runs in a channel of its own, as `exec_cmd` runs it (the same
line, tag, folder and environment), with stdin left open for the session's
events and, with `pty=True`, a pseudo-terminal that sshd allocates (80x24;
`Resize` changes it through the channel). OpenSSH ignores the protocol's
signal requests, so `Signal` and the kill of the tree go through a second
channel, to the command's process group and to every process carrying its
tag (see `executor._ssh.executor`).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING

from executor._core.cleanup import run_to_completion
from executor._core.commands import Command
from executor._core.output import CommandOutput
from executor._core.session import ProcessSession

if TYPE_CHECKING:
    from executor._ssh.executor import ChannelRun, SshExecutor


class SshSession(ProcessSession):
    """A session of a command on an SSH host: one channel, stdin open, optionally a pty."""

    def __init__(
        self,
        executor: SshExecutor,
        cmd: Command,
        argv: Sequence[str],
        *,
        pty: bool,
    ) -> None:
        super().__init__(pty=pty, initial_stdin=cmd.stdin, finish=executor._checked)
        self._executor = executor
        self._cmd = cmd
        self._argv = tuple(argv)
        # The run of the command's channel, once started; the channel holds
        # one of the connection's slots until it is closed.
        self._channel_run: ChannelRun | None = None

    async def _begin(self) -> None:
        self._channel_run = await self._executor.open_run(
            self._cmd, self._argv, self._offer, pty=self.pty
        )

    async def _run(self) -> CommandOutput:
        assert self._channel_run is not None
        return await self._channel_run.run(
            self._executor._timeout(self._cmd), stdin=None, close_input=False
        )

    async def _write_input(self, data: bytes) -> None:
        assert self._channel_run is not None
        channel, session = self._channel_run.channel, self._channel_run.session
        view = memoryview(data)
        while view and not session.closed:
            # One window's worth at a time, waiting while the send buffer is full.
            try:
                channel.write(bytes(view[: 1 << 16]))
            except BrokenPipeError:
                return  # The command ended: what it did not take is its choice.
            view = view[1 << 16 :]
            await session.drain()

    async def _close_input(self) -> None:
        run = self._channel_run
        if run is not None and not run.session.closed:
            with contextlib.suppress(BrokenPipeError):
                run.channel.write_eof()

    async def _signal(self, signal: int) -> None:
        if self._channel_run is not None:
            await self._channel_run.signal(signal)

    async def _resize(self, cols: int, rows: int) -> None:
        run = self._channel_run
        if run is not None and not run.session.closed:
            with contextlib.suppress(BrokenPipeError):
                run.channel.change_terminal_size(cols, rows)

    async def _terminate(self, grace: float | None = None) -> None:
        run = self._channel_run
        if run is not None:
            # Also from cancel(), whose task the block's end may cancel.
            await run_to_completion(functools.partial(run.kill, grace))

    async def _release(self) -> None:
        if self._channel_run is not None:
            self._channel_run.channel.close()
