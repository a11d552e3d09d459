"""The asyncssh side of `SshExecutor`: imported only when an SSH connection is made.

asyncssh takes a few hundred milliseconds to import, so `import executor`
does not pay for it: `executor._ssh.executor` imports this module at the first
connection, and an `ImportError` there says which extra to install.
"""

from __future__ import annotations

import asyncio
import collections
import warnings
from collections.abc import Callable
from typing import Final

with warnings.catch_warnings():
    # cryptography 51 deprecates DSA, which asyncssh's import touches (for
    # its DSA keys): a warning at every program's first connection that says
    # nothing of the program, and an error where warnings are errors. Only
    # that warning, raised in asyncssh, during its import.
    warnings.filterwarnings("ignore", message="DSA is deprecated", module=r"asyncssh(\.|$)")
    import asyncssh as asyncssh  # the module other files of the folder use, once imported so

from executor._core.output import Chunk, Stderr, Stdout

# A reader that falls this far behind pauses the channel; SSH's flow control
# then stops the remote command once the window is spent.
_HIGH_WATER: Final = 1 << 20
_LOW_WATER: Final = 1 << 18


class HostKeyWitness(asyncssh.SSHClient):
    """A connection's client: the key a server offered that known_hosts did not trust, its loss.

    `tag_prefix` is what the tags of the commands started over the
    connection begin with (`OWNER_PID:EXECUTOR_ID/C`), which its guard kills by.
    """

    def __init__(self, tag_prefix: str) -> None:
        self.tag_prefix = tag_prefix
        self.untrusted: asyncssh.SSHKey | None = None
        self.lost = False

    def validate_host_public_key(
        self, host: str, addr: str, port: int, key: asyncssh.SSHKey
    ) -> bool:
        """Refuse the key (asyncssh asks only about keys known_hosts does not trust)."""
        self.untrusted = key
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        """Mark the connection as gone, so the next command opens a new one."""
        self.lost = True


class GuardChannel(asyncssh.SSHClientSession[bytes]):
    """The channel of a connection's guard: open as long as the connection.

    The client never closes it: its close would end the guard's input,
    which the guard takes for the connection's end.
    """

    def eof_received(self) -> bool:
        """Keep the channel open (asyncssh would close it at the end of output)."""
        return True


class CommandChannel(asyncssh.SSHClientSession[bytes]):
    """One remote command's channel: its chunks in the order they came, and how it ended."""

    def __init__(self) -> None:
        self.channel: asyncssh.SSHClientChannel[bytes] | None = None
        self.chunks: collections.deque[Chunk] = collections.deque()
        self.queued = 0
        self.paused = False
        self.exit_status: int | None = None
        self.exit_signal: str | None = None
        self.eof = False
        self.closed = False
        self.error: Exception | None = None
        self._wakeup = asyncio.Event()
        # Set at the exit or the close: what a run's wait for the exit awaits.
        self._over = asyncio.Event()
        self._writable = asyncio.Event()
        self._writable.set()
        self._closed_callbacks: list[Callable[[], None]] = []

    def connection_made(self, chan: asyncssh.SSHClientChannel[bytes]) -> None:
        """Keep the channel, to pause it and write to it."""
        self.channel = chan

    def data_received(self, data: bytes, datatype: int | None) -> None:
        """Queue a chunk; pause the channel while the reader is far behind."""
        if not data:
            return
        chunk = Stderr(data) if datatype == asyncssh.EXTENDED_DATA_STDERR else Stdout(data)
        self.chunks.append(chunk)
        self.queued += len(data)
        if self.queued >= _HIGH_WATER and not self.paused and self.channel is not None:
            self.paused = True
            self.channel.pause_reading()
        self._wakeup.set()

    def eof_received(self) -> bool:
        """Keep the channel open: the exit status and the close come after the end of output."""
        self.eof = True
        self._wakeup.set()
        return True

    def exit_status_received(self, status: int) -> None:
        """Note the exit status."""
        self.exit_status = status
        self._wakeup.set()
        self._over.set()

    def exit_signal_received(self, signal: str, core_dumped: bool, msg: str, lang: str) -> None:
        """Note the signal that ended the command."""
        self.exit_signal = signal
        self._wakeup.set()
        self._over.set()

    def connection_lost(self, exc: Exception | None) -> None:
        """The channel is closed (by the server, by us, or with the connection)."""
        self.closed = True
        self.error = exc
        self._wakeup.set()
        self._over.set()
        self._writable.set()
        callbacks, self._closed_callbacks = self._closed_callbacks, []
        for callback in callbacks:
            callback()

    def on_closed(self, callback: Callable[[], None]) -> None:
        """Call `callback` once the channel is closed (at once if it is already)."""
        if self.closed:
            callback()
        else:
            self._closed_callbacks.append(callback)

    def pause_writing(self) -> None:
        """The channel's send buffer is full: writers wait (see `drain`)."""
        self._writable.clear()

    def resume_writing(self) -> None:
        """The channel's send buffer has room again."""
        self._writable.set()

    async def drain(self) -> None:
        """Wait while the channel's send buffer is full (a closed channel never is)."""
        await self._writable.wait()

    def take(self) -> Chunk | None:
        """The next queued chunk, if any."""
        if not self.chunks:
            return None
        chunk = self.chunks.popleft()
        self.queued -= len(chunk.data)
        if self.paused and self.queued <= _LOW_WATER and self.channel is not None:
            self.paused = False
            self.channel.resume_reading()
        return chunk

    @property
    def ended(self) -> bool:
        """Whether the command exited (with a status or a signal)."""
        return self.exit_status is not None or self.exit_signal is not None

    async def exited(self) -> None:
        """Wait until the command exits or the channel is closed."""
        await self._over.wait()

    async def wait(self) -> None:
        """Wait until something arrives: a chunk, the end of output, the exit, the close."""
        if self.chunks or self.closed:
            return
        self._wakeup.clear()
        await self._wakeup.wait()
