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
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import anyio

from executor._core.commands import Command
from executor._core.output import CommandOutput
from executor._core.session import ProcessSession

if TYPE_CHECKING:
    from executor._ssh.executor import SshExecutor, _ChannelRun
    from executor._ssh.remote import CommandChannel

__all__ = ["SshSession"]


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
        self._tag: str | None = None
        self._channel: Any = None
        self._session: CommandChannel | None = None
        self._run_state: _ChannelRun | None = None

    async def _begin(self) -> None:
        executor = self._executor
        executor._check_open()
        line, tag = await executor._prepare(self._cmd, self._argv)
        started = anyio.current_time()
        executor._started = True
        # The channel holds one of the connection's slots until it is closed.
        channel, session = await executor._open_channel(line, tag, pty=self.pty)
        from executor._ssh.executor import _ChannelRun

        self._tag = tag
        self._channel, self._session = channel, session
        self._run_state = _ChannelRun(executor, channel, session, tag, self._offer, started)

    async def _run(self) -> CommandOutput:
        assert self._run_state is not None
        return await self._run_state.run(
            self._executor._timeout(self._cmd), stdin=None, close_input=False
        )

    async def _write_input(self, data: bytes) -> None:
        session, channel = self._session, self._channel
        assert session is not None
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
        session = self._session
        if session is not None and not session.closed:
            with contextlib.suppress(BrokenPipeError):
                self._channel.write_eof()

    async def _signal(self, signal: int) -> None:
        session, tag = self._session, self._tag
        if session is None or tag is None or session.ended or session.closed:
            return
        await self._executor._signal_group(tag, signal)

    async def _resize(self, cols: int, rows: int) -> None:
        session = self._session
        if session is not None and not session.closed:
            with contextlib.suppress(BrokenPipeError):
                self._channel.change_terminal_size(cols, rows)

    async def _terminate(self, grace: float | None = None) -> None:
        if self._tag is not None:
            session = self._session
            settle = session is not None and not session.ended and not session.closed
            await self._executor._kill(self._tag, grace, settle=settle)

    async def _release(self) -> None:
        if self._channel is not None:
            self._channel.close()
