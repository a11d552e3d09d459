"""The jobs of the package's persistent shell: handles to read, write, signal, wait for and kill.

A job is a session of the executor (`ToolExecutor.start`), entered and left
by a task of its shell's task group. That task reads the job's output as it
comes into a bounded buffer of unread output, so the job never blocks on a
full pipe however seldom it is read; `read()` takes what arrived since the
last read.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import anyio
from anyio.abc import TaskStatus

from executor._core.errors import CommandError, ExecutorError, TimedOut
from executor._core.jobs import Job, JobState, JobStatus
from executor._core.output import Chunk, CommandOutput, Elision, OutputBuffer
from executor._core.session import READER_KEPT
from executor._core.stdin import Bytes, Signal, UnixSignal

if TYPE_CHECKING:
    from executor._core.session import ProcessSession


class ShellJob(Job):
    """A `Job` of the shell: a session its shell's task serves (see the module docstring)."""

    def __init__(self, job_id: str, command: str, session: ProcessSession, *, buffer: int) -> None:
        """Hold `session` (not yet entered) as job `job_id`; its shell's task serves it."""
        self.id = job_id
        self.command = command
        # The job keeps its output itself (`read`): the session only its exit.
        session.keep_output(READER_KEPT)
        # Let go of once the job has ended (see `serve`): a shell that starts
        # jobs for hours keeps only their statuses, not their sessions.
        self._session: ProcessSession | None = session
        self._limit = buffer
        self._unread = OutputBuffer(buffer)
        self._unread_bytes = 0
        self._started = time.time()
        self._clock = time.monotonic()
        self._ended_at: float | None = None
        self._state = JobState.RUNNING
        self._exit_code: int | None = None
        self._signal: int | None = None
        self._killed = False
        self._failure: BaseException | None = None
        # What ended it past its timeout or idle timeout, to raise again as it was.
        self.timed_out: TimedOut | None = None
        self._done = anyio.Event()
        self._changed = anyio.Event()
        self._live = False

    def __repr__(self) -> str:
        return f"Job({self.id!r}, {self.command!r}, {self._state.value})"

    async def serve(self, *, task_status: TaskStatus[None]) -> None:
        """Run the job to its end in this task: enter the session, read it, leave it."""
        assert self._session is not None
        try:
            async with self._session as session:
                self._live = True
                task_status.started()
                while (item := await session.next_chunk()) is not None:
                    self._append(item.chunk)
                try:
                    output = await session.finalize()
                except TimedOut as error:
                    self.timed_out = error
                    self._end(error.output, JobState.TIMED_OUT)
                except CommandError as error:
                    killed = self._killed or error.output.signal is not None
                    self._end(error.output, JobState.KILLED if killed else JobState.EXITED)
                else:
                    self._end(output, JobState.EXITED)
        except Exception as error:
            # The job could not start (raised to `start_job` through `started`),
            # or its session failed: either way it has ended.
            self._failure = error
            if self._state is JobState.RUNNING:
                self._state = JobState.KILLED if self._killed else JobState.EXITED
            if not self._live:
                raise
        finally:
            self._live = False
            self._session = None
            if self._ended_at is None:
                self._ended_at = time.monotonic()
            self._done.set()
            self._wake()

    def _append(self, chunk: Chunk) -> None:
        self._unread.append(chunk)
        self._unread_bytes += len(chunk.data)
        self._wake()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    def _end(self, output: CommandOutput, state: JobState) -> None:
        self._ended_at = time.monotonic()
        self._exit_code = output.exit_code
        self._signal = output.signal
        self._state = state

    @property
    def done(self) -> bool:
        """Whether the job has ended."""
        return self._done.is_set()

    def status(self) -> JobStatus:
        """The job's state now."""
        end = self._ended_at if self._ended_at is not None else time.monotonic()
        return JobStatus(
            id=self.id,
            command=self.command,
            state=self._state,
            exit_code=self._exit_code,
            signal=self._signal,
            started=self._started,
            duration=end - self._clock,
            unread=self._unread_bytes,
        )

    async def read(self, max_bytes: int | None = None, *, wait: float = 0.0) -> CommandOutput:
        """The output that arrived since the last read (see `Job.read`)."""
        if max_bytes is not None and max_bytes < 0:
            raise ValueError(f"max_bytes must be >= 0 or None, got {max_bytes!r}")
        if wait > 0 and not self._unread_bytes and not self.done:
            changed = self._changed
            with anyio.move_on_after(wait):
                await changed.wait()
        buffer, self._unread = self._unread, OutputBuffer(self._limit)
        self._unread_bytes = 0
        chunks = buffer.chunks()
        elided = buffer.elision()
        if max_bytes is not None and sum(len(c.data) for c in chunks) > max_bytes:
            chunks, elided = _cut(chunks, elided, max_bytes)
        exit_code = self._exit_code if self.done else None
        return CommandOutput(
            chunks=chunks,
            exit_code=exit_code,
            signal=self._signal if self.done else None,
            duration=self.status().duration,
            truncated=elided is not None,
            elided=elided,
        )

    async def write(self, data: str | bytes) -> None:
        """Write `data` (text as UTF-8) to the job's stdin.

        Raises:
            ExecutorError: The job has ended, or its stdin was closed.

        """
        session = self._session
        if self.done or session is None:
            raise ExecutorError(f"job {self.id} has ended; it takes no more input")
        await session.send_stdin(Bytes(data.encode() if isinstance(data, str) else data))

    async def close_stdin(self) -> None:
        """End the job's input (end of file); closing twice is harmless."""
        session = self._session
        if not self.done and session is not None:
            await session.close_stdin()

    async def signal(self, signal: UnixSignal | int) -> None:
        """Send `signal` to the job's process group, if it still runs."""
        session = self._session
        if not self.done and session is not None:
            await session.send_stdin(Signal(UnixSignal(signal)))

    async def wait(self, timeout: float | None = None) -> JobStatus:
        """Wait until the job ends, or `timeout` seconds pass; return its status either way."""
        with anyio.move_on_after(timeout):
            await self._done.wait()
        return self.status()

    async def kill(self) -> JobStatus:
        """Kill the job's whole tree and wait until it is reaped; return its final status."""
        self.cancel()
        await self._done.wait()
        return self.status()

    def cancel(self) -> None:
        """Start killing the job's tree without waiting (`kill()` waits)."""
        if self.done or self._killed:
            return
        self._killed = True
        if self._live and self._session is not None:
            self._session.cancel()


def _cut(
    chunks: tuple[Chunk, ...], elided: Elision | None, limit: int
) -> tuple[tuple[Chunk, ...], Elision]:
    """Keep `limit` bytes of `chunks` (head and tail); count the rest with what was cut before."""
    again = OutputBuffer(limit)
    for chunk in chunks:
        again.append(chunk)
    cut = again.elision()
    assert cut is not None
    before = elided or Elision(at=0, bytes=0, lines=0)
    return again.chunks(), Elision(
        at=cut.at, bytes=cut.bytes + before.bytes, lines=cut.lines + before.lines
    )
