"""Background jobs of a `PersistentShell`: the handle's interface, and its state as values.

`Job` is what `PersistentShell.start_job` returns; the jobs of the shell
the package provides are in `executor._shells.jobs`.
"""

from __future__ import annotations

import abc
import enum

import attrs

from executor._core.output import CommandOutput
from executor._core.resource import AsyncResource
from executor._core.stdin import UnixSignal


class JobState(enum.Enum):
    """Where a job is in its life."""

    RUNNING = "running"
    """It runs (or is starting)."""
    EXITED = "exited"
    """It ended by itself, with any exit code."""
    KILLED = "killed"
    """`kill()` ended it, or a signal did."""
    TIMED_OUT = "timed_out"
    """It ran past its own timeout and was killed."""


@attrs.frozen(kw_only=True)
class JobStatus:
    """A job's state at one moment.

    Attributes:
        id: The job's id in its shell ("1", "2", ...).
        command: The command it runs.
        state: Running, exited, killed or timed out.
        exit_code: Its exit code once it has ended (128 + N when killed by
            signal N), else `None`.
        signal: The signal that ended it, if one did.
        started: When it started, on `time.time()`'s clock.
        duration: Seconds it has run (until its end, once it has ended).
        unread: Bytes of output that arrived since the last `read()`
            (what the buffer still holds).

    """

    id: str
    command: str
    state: JobState
    exit_code: int | None
    signal: int | None
    started: float
    duration: float
    unread: int


class Job(AsyncResource):
    """A command running in the background, from `PersistentShell.start_job`.

    `read()` returns the output that arrived since the last read; `write()`
    feeds its stdin; `signal()` signals its process group; `wait()` waits for
    its end (or a timeout); `kill()` ends its whole tree, as does leaving an
    `async with job:` block. Closing the shell kills every job still running.

    Attributes:
        id: The job's id in its shell ("1", "2", ...).
        command: The command it runs.

    """

    id: str
    command: str

    @property
    @abc.abstractmethod
    def done(self) -> bool:
        """Whether the job has ended."""

    @abc.abstractmethod
    def status(self) -> JobStatus:
        """The job's state now."""

    @abc.abstractmethod
    async def read(self, max_bytes: int | None = None, *, wait: float = 0.0) -> CommandOutput:
        """The output that arrived since the last read, at most `max_bytes` of it.

        The unread output is bounded (the shell's job buffer): what overflowed
        it, and what passes `max_bytes`, is cut from the middle, and the
        output says so (`truncated`, `elided`, the marker in `text()`); a cut
        part is gone, not left for the next read. `exit_code` is set once the
        job has ended.

        Args:
            max_bytes: The most bytes to return (head and tail); `None` for all.
            wait: Seconds to wait for output when none has arrived yet.

        """

    @abc.abstractmethod
    async def write(self, data: str | bytes) -> None:
        """Write `data` (text as UTF-8) to the job's stdin.

        Raises:
            ExecutorError: The job has ended, or its stdin was closed.

        """

    @abc.abstractmethod
    async def close_stdin(self) -> None:
        """End the job's input (end of file); closing twice is harmless."""

    @abc.abstractmethod
    async def signal(self, signal: UnixSignal | int) -> None:
        """Send `signal` to the job's process group, if it still runs."""

    @abc.abstractmethod
    async def wait(self, timeout: float | None = None) -> JobStatus:
        """Wait until the job ends, or `timeout` seconds pass; return its status either way."""

    @abc.abstractmethod
    async def kill(self) -> JobStatus:
        """Kill the job's whole tree and wait until it is reaped; return its final status."""

    @abc.abstractmethod
    def cancel(self) -> None:
        """Start killing the job's tree without waiting (`kill()` waits)."""

    async def aclose(self) -> None:
        """Kill the job if it still runs."""
        await self.kill()
