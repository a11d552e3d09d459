"""Yield instead of kill: a command still running past its yield window comes back with a handle.

A tool given a yield window (`Toolset(yield_after=...)`, or the model's
`yield_after` argument) does not wait for the command's end: past the window
it returns what the command printed so far and the id of a job, which the
job tools take (`job_read` for what follows and how it ended, `job_write` to
answer its input, `job_signal` and `job_stop` to end it). A command that ends
within the window is answered exactly as without one.

- A one-shot command (`run`, `local_shell`) is a session of the executor,
  served as a background job (`ShellJob`) from the start, so a handle can
  write its stdin. Its input stays open while it runs (a prompt waits for
  the model's answer, not for end-of-file) unless the call gave its stdin.
- A command of the persistent shell (`shell`, `bash`) runs in the shell's
  frame, in a task of the toolset's own: `FrameJob` collects its output. Its
  stdin is `/dev/null`, so it takes no input; stopping it interrupts the
  command only, and the shell keeps its state. The shell runs one command at
  a time: a call while one is yielded is told which job holds it.

`Yielded` keeps the handles of one toolset, by executor, and ends them when
the toolset is closed.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import anyio.abc

from executor._core.base import ToolExecutor, failure_message
from executor._core.commands import Command
from executor._core.errors import (
    CommandError,
    ExecutorError,
    InvalidArgument,
    NonZeroExit,
    TimedOut,
)
from executor._core.jobs import Job, JobState, JobStatus
from executor._core.output import Chunk, CommandOutput, OutputBuffer
from executor._core.stdin import UnixSignal
from executor._shells.jobs import ShellJob

JOB_BUFFER = 1 << 20
"""Bytes of unread output a yielded job keeps (head and tail, its cut marked)."""


class FrameJob(Job):
    """A command of the persistent shell that outlived its yield window, run on in a task.

    Its output is collected as the shell's frame reads it; `read` takes what
    arrived since the last read. It takes no input (the shell gives its
    commands `/dev/null`). SIGINT, SIGTERM, SIGKILL and `kill` interrupt the
    command the way a timeout does, keeping the shell.
    """

    def __init__(self, job_id: str, command: str) -> None:
        """A job `job_id` for `command`, not yet running (`serve` runs it)."""
        self.id = job_id
        self.command = command
        self._unread = OutputBuffer(JOB_BUFFER)
        self._unread_bytes = 0
        self._started = time.time()
        self._clock = time.monotonic()
        self._ended_at: float | None = None
        self._state = JobState.RUNNING
        self._output: CommandOutput | None = None
        self._error: BaseException | None = None
        self._scope = anyio.CancelScope()
        self._done = anyio.Event()
        self._changed = anyio.Event()

    def __repr__(self) -> str:
        return f"FrameJob({self.id!r}, {self.command!r}, {self._state.value})"

    def sink(self, chunk: Chunk) -> None:
        """Take a chunk of the command's output (the frame's sink)."""
        self._unread.append(chunk)
        self._unread_bytes += len(chunk.data)
        self._wake()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    async def serve(
        self,
        run: Callable[[], Awaitable[CommandOutput]],
        *,
        task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Run the command (`run` reads it through `sink`) to its end in this task."""
        task_status.started()
        try:
            with self._scope:
                self._output = await run()
                self._state = JobState.EXITED
        except TimedOut as error:
            self._output, self._state = error.output, JobState.TIMED_OUT
        except NonZeroExit as error:
            self._output, self._state = error.output, JobState.EXITED
        except Exception as error:
            self._error, self._state = error, JobState.KILLED
        finally:
            if self._scope.cancelled_caught:
                self._state = JobState.KILLED
            self._ended_at = time.monotonic()
            self._done.set()
            self._wake()

    @property
    def done(self) -> bool:
        """Whether the command has ended."""
        return self._done.is_set()

    @property
    def error(self) -> BaseException | None:
        """What ended the command, when it failed other than by its exit code or timeout."""
        return self._error

    def status(self) -> JobStatus:
        """The job's state now."""
        end = self._ended_at if self._ended_at is not None else time.monotonic()
        output = self._output
        return JobStatus(
            id=self.id,
            command=self.command,
            state=self._state,
            exit_code=None if output is None else output.exit_code,
            signal=None if output is None else output.signal,
            started=self._started,
            duration=end - self._clock,
            unread=self._unread_bytes,
        )

    async def read(self, max_bytes: int | None = None, *, wait: float = 0.0) -> CommandOutput:
        """The output that arrived since the last read; with the exit code once it has ended."""
        if wait > 0 and not self._unread_bytes and not self.done:
            changed = self._changed
            with anyio.move_on_after(wait):
                await changed.wait()
        buffer, self._unread = self._unread, OutputBuffer(JOB_BUFFER)
        self._unread_bytes = 0
        output = buffer.output(
            exit_code=None if self._output is None else self._output.exit_code,
            signal=None if self._output is None else self._output.signal,
            duration=self.status().duration,
        )
        if max_bytes is not None and len(output.stdout) + len(output.stderr) > max_bytes:
            again = OutputBuffer(max_bytes)
            for chunk in output.chunks:
                again.append(chunk)
            output = again.output(
                exit_code=output.exit_code, signal=output.signal, duration=output.duration
            )
        return output

    async def write(self, data: str | bytes) -> None:
        """Refused: a command of the persistent shell reads `/dev/null`."""
        raise ExecutorError(
            f"job {self.id} is a command of the persistent shell, whose input is /dev/null: "
            "it takes none; run a command that needs input with the run tool"
        )

    async def close_stdin(self) -> None:
        """Nothing to close: the command's input is `/dev/null`."""

    async def signal(self, signal: UnixSignal | int) -> None:
        """SIGINT, SIGTERM or SIGKILL interrupt the command (the shell stays); others: refused."""
        number = UnixSignal(signal)
        if number not in (UnixSignal.SIGINT, UnixSignal.SIGTERM, UnixSignal.SIGKILL):
            raise ExecutorError(
                f"job {self.id} is a command of the persistent shell: it can be interrupted "
                f"(SIGINT, SIGTERM, SIGKILL), not sent {number.name}; "
                "start it with job_start to signal it freely"
            )
        self.cancel()

    async def wait(self, timeout: float | None = None) -> JobStatus:
        """Wait until the command ends, or `timeout` seconds pass; return its status."""
        with anyio.move_on_after(timeout):
            await self._done.wait()
        return self.status()

    async def kill(self) -> JobStatus:
        """Interrupt the command (the shell keeps its state) and wait for its end."""
        self.cancel()
        await self._done.wait()
        return self.status()

    def cancel(self) -> None:
        """Start interrupting the command without waiting."""
        self._scope.cancel()


class Yielded:
    """The yielded jobs of one toolset, by executor; each served in the toolset's task group.

    Args:
        spawn: Starts a task in the entered toolset's task group and returns
            once it has started (`Hosts.spawn`).
    """

    def __init__(self, spawn: Callable[..., Awaitable[Any]]) -> None:
        self._spawn = spawn
        self._jobs: dict[tuple[int, str], Job] = {}
        self._shells: dict[tuple[int, str], FrameJob] = {}
        self._next = 1

    def _id(self, prefix: str) -> str:
        job_id = f"{prefix}{self._next}"
        self._next += 1
        return job_id

    def get(self, executor: ToolExecutor, job_id: str) -> Job | None:
        """The yielded job `job_id` of `executor`, if there is one."""
        return self._jobs.get((id(executor), str(job_id).strip()))

    def statuses(self, executor: ToolExecutor) -> list[JobStatus]:
        """The statuses of `executor`'s yielded jobs, in start order."""
        key = id(executor)
        return [job.status() for (owner, _), job in self._jobs.items() if owner == key]

    def check_shell_free(self, executor: ToolExecutor, host: str) -> None:
        """Refuse a command of the shell `host` while a yielded one still holds it.

        Raises:
            InvalidArgument: A yielded command of this executor's shell still runs.
        """
        held = self._shells.get((id(executor), host))
        if held is not None and not held.done:
            raise InvalidArgument(
                held.command,
                f"the shell is still running job {held.id}: read it with job_read, "
                "or stop it with job_stop (the shell keeps its state), then call again",
            )

    async def stop_shell(self, executor: ToolExecutor, host: str) -> None:
        """Stop the yielded command holding the shell `host`, if any (a restart's first step)."""
        held = self._shells.get((id(executor), host))
        if held is not None and not held.done:
            await held.kill()

    async def run(
        self, executor: ToolExecutor, cmd: Command, command: str, window: float
    ) -> CommandOutput | Job:
        """Start `cmd` as a session; its output if it ends within `window`, else its job.

        Raises:
            TimedOut: It ended within the window by its own timeout.
            NonZeroExit: It ended within the window with a failure.
        """
        session = await executor.start(cmd)
        job = ShellJob(self._id("r"), command, session, buffer=JOB_BUFFER)
        await self._spawn(job.serve)
        self._jobs[(id(executor), job.id)] = job
        status = await job.wait(window)
        if status.state is JobState.RUNNING:
            return job
        del self._jobs[(id(executor), job.id)]
        output = await job.read()
        if job.timed_out is not None:
            # Its own error, idle or not, with all the output it had.
            raise TimedOut(job.timed_out.timeout, output, idle=job.timed_out.idle)
        return _ended(output, status, cmd.timeout)

    async def frame(
        self,
        executor: ToolExecutor,
        host: str,
        command: str,
        run: Callable[[Callable[[Chunk], None]], Awaitable[CommandOutput]],
        window: float,
    ) -> CommandOutput | Job:
        """Run a persistent shell's command in a task; its output if it ends within `window`.

        `run(sink)` runs the command in the shell, handing its output to `sink`.

        Raises:
            CommandError: What the command's run raised, when it ended within the window.
        """
        self.check_shell_free(executor, host)
        job = FrameJob(self._id("s"), command)

        async def go() -> CommandOutput:
            return await run(job.sink)

        self._shells[(id(executor), host)] = job
        await self._spawn(job.serve, go)
        status = await job.wait(window)
        if status.state is JobState.RUNNING:
            self._jobs[(id(executor), job.id)] = job
            return job
        if job.error is not None:
            raise job.error
        return _ended(await job.read(), status, None)

    async def aclose(self) -> None:
        """Kill every yielded job still running."""
        jobs = [*self._jobs.values(), *self._shells.values()]
        self._jobs.clear()
        self._shells.clear()
        for job in jobs:
            if not job.done:
                with anyio.CancelScope(shield=True):
                    await job.kill()


def _ended(output: CommandOutput, status: JobStatus, timeout: float | None) -> CommandOutput:
    """The output of a job that ended, or the error its end means."""
    if status.state is JobState.TIMED_OUT:
        raise TimedOut(timeout if timeout is not None else status.duration, output)
    if output.exit_code:
        raise NonZeroExit(failure_message(output), output)
    if status.state is JobState.KILLED and output.exit_code is None:
        raise CommandError("the command was stopped", output)
    return output


def handed_back(job: Job, window: float) -> str:
    """The words after a yielded command's output so far: it runs on, as job `job.id`."""
    return (
        f"[still running after {window:g} s, as job {job.id}: job_read gives what it prints "
        f"next and how it ends; job_write answers its input; job_stop ends it]"
    )
