"""`SshRun`: a command in a channel of its own on the remote host, as `drive` runs it.

Its output arrives over the connection (`CommandChannel` queues it), so it
is read by `read_arrivals`, which reads on after the exit until the channel's
end of output: sshd sends `exit-status` once it has reaped the command, and
may forward the last of the output after it. OpenSSH ignores the protocol's
signal requests: signals and the kill of the tree go through the executor's
channel for them (see `executor._ssh.executor`).
"""

from __future__ import annotations

import contextlib
import functools
import signal
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from executor._core.cleanup import run_to_completion
from executor._core.errors import ExecutorError
from executor._core.output import Chunk, CommandOutput
from executor._core.run import Arrivals, Exit, Reader, Run, read_arrivals
from executor._ssh.errors import command_lost

if TYPE_CHECKING:
    from executor._ssh.remote import CommandChannel


class Host(Protocol):
    """What a run needs of its executor: the kill and signals by tag, and whether it closed."""

    @property
    def closed(self) -> bool:
        """Whether `aclose()` has begun (it kills every tree of the executor)."""

    @property
    def where(self) -> str:
        """`user@host:port`, for messages."""

    @property
    def kill_grace(self) -> float:
        """The executor's grace between SIGTERM and SIGKILL."""

    async def kill(self, tag: str, grace: float, *, settle: bool) -> None:
        """Kill the tree tagged `tag` (see `SshExecutor._kill`)."""

    async def signal_group(self, tag: str, number: int) -> None:
        """Send `number` to the process group of the command tagged `tag`."""

    async def kill_below(self, tag: str, pid: int) -> None:
        """SIGKILL what runs below process `pid` of the tree tagged `tag`, sparing `pid`."""


class SshRun(Run, Arrivals):
    """One command's channel: its output as it arrives, its exit, its input, its tree."""

    def __init__(self, host: Host, channel: Any, session: CommandChannel, tag: str) -> None:
        self.channel = channel
        self.session = session
        self._host = host
        self._tag = tag

    # --- the output, as it arrives -----------------------------------------

    def take(self) -> Chunk | None:
        """The next chunk that has arrived, if any."""
        return self.session.take()

    @property
    def ended(self) -> bool:
        """Whether the channel's end of output (or its close) has arrived."""
        session = self.session
        return (session.eof or session.closed) and not session.chunks

    async def arrive(self) -> None:
        """Wait until more arrives."""
        await self.session.wait()

    def readers(self) -> Sequence[Reader]:
        """One reader: the channel carries stdout and stderr in order."""
        return (functools.partial(read_arrivals, self),)

    # --- the run -------------------------------------------------------------

    async def wait(self) -> Exit:
        """The exit status (or signal) sshd reported; no `code` if the channel closed first."""
        session = self.session
        await session.exited()
        if session.exit_signal is not None:
            with contextlib.suppress(KeyError):
                number = int(signal.Signals[f"SIG{session.exit_signal}"])
                return Exit(128 + number, number)
        return Exit(session.exit_status)

    async def settle(self, output: CommandOutput) -> CommandOutput:
        """Raise if the channel closed without an exit: the connection was lost."""
        session = self.session
        if session.ended:
            return output
        if self._host.closed:
            # aclose() killed what the executor started, this tree with it.
            raise ExecutorError("the executor was closed while the command ran", output)
        # What still runs over there is found by its tag from a new connection.
        await run_to_completion(lambda: self.kill(self._host.kill_grace))
        raise command_lost(self._host.where, output) from session.error

    async def write(self, data: bytes) -> None:
        """Write `data` one window's worth at a time, waiting while the send buffer is full."""
        session = self.session
        view = memoryview(data)
        while view and not session.closed:
            try:
                self.channel.write(bytes(view[: 1 << 16]))
            except BrokenPipeError:
                return  # The command ended: what it did not take is its choice.
            view = view[1 << 16 :]
            await session.drain()

    async def close_input(self) -> None:
        """Send the end of input."""
        if not self.session.closed:
            # A command that ended already did not want its input.
            with contextlib.suppress(BrokenPipeError):
                self.channel.write_eof()

    async def signal(self, number: int) -> None:
        """Send `number` to the command's process group, if it still runs."""
        session = self.session
        if not session.ended and not session.closed:
            await self._host.signal_group(self._tag, number)

    async def kill_descendants(self, pid: int) -> None:
        """SIGKILL what runs below `pid` (its pid on the host) in the tree, sparing `pid`."""
        session = self.session
        if not session.ended and not session.closed:
            await self._host.kill_below(self._tag, pid)

    async def kill(self, grace: float) -> None:
        """Kill the command's whole remote tree: SIGTERM, `grace`, SIGKILL; also after the exit."""
        session = self.session
        # Not exited yet: it may have only just started, and not carry its tag yet.
        settle = not session.ended and not session.closed
        await self._host.kill(self._tag, grace, settle=settle)

    async def resize(self, cols: int, rows: int) -> None:
        """Set the pseudo-terminal's size through the channel."""
        if not self.session.closed:
            with contextlib.suppress(BrokenPipeError):
                self.channel.change_terminal_size(cols, rows)

    def finish(self) -> None:
        """Close the channel: its slot is freed when the server has closed its end too."""
        self.channel.close()

    async def release(self) -> None:
        """Close the channel (a session's)."""
        self.channel.close()
