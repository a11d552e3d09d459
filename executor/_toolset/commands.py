"""The command tools: `run` (one-shot), `shell` (persistent), and the `job_*` background jobs.

They are the methods of `CommandTools`, which holds what they need of their
toolset, handed in when the toolset builds them: its `Limits` (timeouts,
output budget) and its `Hosts` (where the persistent shell of each executor
is held open between calls).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, cast

from executor._core.base import ToolExecutor, call_sink
from executor._core.commands import Command
from executor._core.errors import CommandError, ExecutorError, InvalidArgument
from executor._core.jobs import Job, JobState
from executor._core.output import Chunk, CommandOutput, Sink
from executor._core.render import for_model
from executor._core.stdin import UnixSignal
from executor._tools.args import WorkspacePath
from executor._tools.tools import Tool, ToolOutput, tool
from executor._toolset.context import ToolsetContext, execute, output_sink, remember
from executor._toolset.hosting import Hosts
from executor._toolset.limits import Limits, check_count
from executor._toolset.yielding import Yielded, handed_back

_SHELL = "persistent shell"
"""The host of the `shell` tool's shell (the native `bash` has one of its own)."""


class _Job(Protocol):
    """A background job of a persistent shell (`PersistentShell.start_job`)."""

    id: str

    async def read(self, max_bytes: int | None = ...) -> CommandOutput: ...
    async def write(self, data: str | bytes) -> None: ...
    async def signal(self, signal: UnixSignal) -> None: ...
    async def kill(self) -> Any: ...


class _Shell(Protocol):
    """A persistent shell, as `executor.shell()` gives one."""

    @property
    def state_lost(self) -> bool: ...

    async def run(
        self,
        command: str,
        *,
        timeout: float | None = ...,
        stdin: str | None = ...,
        sink: Sink | None = ...,
        idle_timeout: float | None = ...,
    ) -> CommandOutput: ...
    async def start_job(self, command: str, *, timeout: float | None = ...) -> _Job: ...
    def jobs(self) -> Sequence[Any]: ...
    def job(self, job_id: str) -> _Job: ...


def command_tools(commands: CommandTools) -> list[Tool]:
    """`run`, `shell` and the `job_*` tools of `commands`, as `Tool`s."""
    return [
        tool(commands.run),
        tool(commands.shell),
        tool(commands.job_start),
        tool(commands.job_read),
        tool(commands.job_write),
        tool(commands.job_signal),
        tool(commands.job_stop),
        tool(commands.job_list),
    ]


class CommandTools:
    """The command tools of one toolset, each a method (`command_tools` makes them `Tool`s).

    The persistent shell is opened on first use, one per executor the calls
    come with, through `hosts`, which closes it, with its jobs.

    Args:
        limits: The toolset's timeouts, yield window and output budget.
        hosts: Where the toolset holds its persistent shells open.
        yielded: The commands that outlived their yield window, as jobs.
    """

    def __init__(self, limits: Limits, hosts: Hosts, yielded: Yielded) -> None:
        self._limits = limits
        self._hosts = hosts
        self._yielded = yielded

    async def run(  # noqa: D417 - context is not an argument
        self,
        context: ToolsetContext,
        command: str,
        timeout: float | None = None,
        cwd: WorkspacePath | None = None,
        stdin: str | None = None,
        yield_after: float | None = None,
        idle_timeout: float | None = None,
    ) -> ToolOutput:
        """Run a shell command (sh -c) to its end and return its output and exit code.

        Each call starts afresh: nothing (cd, variables) carries over; use the
        shell tool for that. The command's whole process tree is killed when it
        runs past its timeout, or prints nothing for its idle timeout. With a
        yield window, a command still running when it passes comes back with
        its output so far and a job id, for job_read, job_write and job_stop.

        Args:
            command: The shell script to run, e.g. "pytest -q tests/test_x.py".
            timeout: Seconds before the command is killed (the toolset's default if omitted).
            cwd: Folder to run in, relative to the workspace root.
            stdin: Text to give the command on its standard input (none if omitted).
            yield_after: Seconds to wait before handing back a job id while it runs on.
            idle_timeout: Seconds it may print nothing before it is killed.
        """
        cmd = Command.shell(command).with_timeout(self._limits.timeout_for(timeout))
        cmd = cmd.with_idle_timeout(self._limits.idle_for(idle_timeout))
        if cwd is not None:
            cmd = cmd.with_current_dir(str(cwd))
        if stdin is not None:
            cmd = cmd.with_stdin(stdin)
        return await self.one_shot(context, cmd, command, yield_after)

    async def one_shot(
        self, context: ToolsetContext, cmd: Command, command: str, yield_after: float | None
    ) -> ToolOutput:
        """Run `cmd` to its end, or past the yield window as a job (see `yielding`)."""
        window = self._limits.yield_for(yield_after)
        if window is None:
            output = await execute(context, cmd)
        else:
            ran = await self._yielded.run(context.executor(), cmd, command, window)
            if not isinstance(ran, CommandOutput):
                return await self._handed_back(ran, window)
            output = ran
            remember(context, output)
        return ToolOutput(for_model(output, budget=self._limits.budget), exit_code=output.exit_code)

    async def _handed_back(self, job: Job, window: float) -> ToolOutput:
        """What the model reads of a command that runs on as `job`: its output so far."""
        so_far = await job.read()
        text = for_model(so_far, budget=self._limits.budget, status=False)
        opening = "" if not text or text.endswith("\n") else "\n"
        return ToolOutput(f"{text}{opening}{handed_back(job, window)}")

    async def shell(  # noqa: D417 - context is not an argument
        self,
        context: ToolsetContext,
        command: str,
        timeout: float | None = None,
        restart: bool = False,
        yield_after: float | None = None,
        idle_timeout: float | None = None,
    ) -> ToolOutput:
        """Run a command in a persistent shell: cd, variables and functions carry over.

        With a yield window, a command still running when it passes comes back
        with its output so far and a job id (job_read, job_stop); the shell is
        busy with it until it ends.

        Args:
            command: The shell command to run, e.g. "cd src && export DEBUG=1".
            timeout: Seconds before the command is interrupted; the shell itself stays.
            restart: Start a fresh shell first, dropping the old one's state and jobs.
            yield_after: Seconds to wait before handing back a job id while it runs on.
            idle_timeout: Seconds it may print nothing before it is interrupted.
        """
        return await self.in_shell(
            context, command, timeout, restart, yield_after, idle_timeout=idle_timeout
        )

    async def restart_shell(self, context: ToolsetContext, host: str = _SHELL) -> None:
        """Start the persistent shell `host` afresh, stopping a yielded command that holds it."""
        await self._yielded.stop_shell(context.executor(), host)
        await self._shell(context, restart=True, host=host)

    async def in_shell(
        self,
        context: ToolsetContext,
        command: str,
        timeout: float | None,
        restart: bool,
        yield_after: float | None,
        *,
        host: str = _SHELL,
        idle_timeout: float | None = None,
    ) -> ToolOutput:
        """Run `command` in the persistent shell `host`, or past the yield window as a job."""
        seconds = self._limits.timeout_for(timeout)
        window = self._limits.yield_for(yield_after)
        idle = self._limits.idle_for(idle_timeout)
        executor = context.executor()
        if restart:
            await self._yielded.stop_shell(executor, host)
        self._yielded.check_shell_free(executor, host)
        sh = await self._shell(context, restart=restart, host=host)
        live = output_sink(context)
        try:
            if window is None:
                output = await sh.run(command, timeout=seconds, sink=live, idle_timeout=idle)
            else:

                async def run(sink: Sink) -> CommandOutput:
                    async def both(chunk: Chunk) -> None:
                        sink(chunk)
                        if live is not None:
                            await call_sink(live, chunk)

                    return await sh.run(command, timeout=seconds, sink=both, idle_timeout=idle)

                ran = await self._yielded.frame(executor, host, command, run, window)
                if not isinstance(ran, CommandOutput):
                    return await self._handed_back(ran, window)
                output = ran
        except CommandError as error:
            remember(context, error.output)
            raise
        remember(context, output)
        text = for_model(output, budget=self._limits.budget)
        if sh.state_lost:
            text = f"[the shell was restarted and its state lost]\n{text}"
        return ToolOutput(text, exit_code=output.exit_code)

    async def job_start(self, context: ToolsetContext, command: str) -> str:  # noqa: D417
        """Start a command as a background job of the persistent shell; return its id.

        Args:
            command: The command, e.g. "python -m http.server 8000".
        """
        sh = await self._shell(context)
        job = await sh.start_job(command)
        return f"started job {job.id}: {command}"

    async def job_read(  # noqa: D417 - context is not an argument
        self, context: ToolsetContext, job_id: str, max_bytes: int = 16000
    ) -> str:
        """Read what a background job printed since the last read.

        Args:
            job_id: The job's id, from job_start or job_list.
            max_bytes: The most output to return; older output past it is elided.
        """
        check_count(max_bytes, "max_bytes", 1 << 20)
        job = await self._job(context, job_id)
        text = _job_output(await job.read(max_bytes=max_bytes), self._limits.budget)
        status = getattr(job, "status", None)
        if callable(status) and getattr(status(), "state", None) is JobState.TIMED_OUT:
            # The exit status says only that a signal ended it; the model needs to know why.
            text = f"{text}\n[the job ran past its timeout or idle timeout and was killed]"
        return text

    async def job_write(self, context: ToolsetContext, job_id: str, text: str) -> str:  # noqa: D417
        """Write text to a background job's standard input (end a line with a newline).

        Args:
            job_id: The job's id.
            text: What to write.
        """
        job = await self._job(context, job_id)
        await job.write(text)
        return f"wrote {len(text)} characters to job {job_id}"

    async def job_signal(  # noqa: D417 - context is not an argument
        self,
        context: ToolsetContext,
        job_id: str,
        signal: str,
    ) -> str:
        """Send a signal to a background job's process group (SIGINT is Ctrl-C).

        Args:
            job_id: The job's id.
            signal: The signal, by name (SIGINT, SIGTERM, SIGKILL, SIGHUP, SIGUSR1,
                SIGUSR2, SIGQUIT, SIGCONT, SIGSTOP, ...) or number.
        """
        job = await self._job(context, job_id)
        number = UnixSignal.parse(signal)
        await job.signal(number)
        return f"sent {number.name} to job {job_id}"

    async def job_stop(self, context: ToolsetContext, job_id: str) -> str:  # noqa: D417
        """Stop a background job (its whole process tree) and return how it ended.

        Args:
            job_id: The job's id.
        """
        job = await self._job(context, job_id)
        status = await job.kill()
        return _status_line(status) if status is not None else f"stopped job {job_id}"

    async def job_list(self, context: ToolsetContext) -> str:
        """List the background jobs of the persistent shell, running and ended."""
        sh = await self._shell(context)
        statuses = [*self._yielded.statuses(context.executor()), *sh.jobs()]
        if not statuses:
            return "no jobs"
        return "\n".join(_status_line(status) for status in statuses)

    # --- the persistent shell ---------------------------------------------------------

    async def _shell(self, context: Any, *, restart: bool = False, host: str = _SHELL) -> _Shell:
        executor: ToolExecutor = context.executor()
        factory = getattr(executor, "shell", None)
        if not callable(factory):
            raise ExecutorError(f"{type(executor).__name__} has no persistent shell; use run")
        return cast(_Shell, await self._hosts.open(host, executor, factory, restart))

    async def _job(self, context: Any, job_id: str) -> _Job:
        yielded = self._yielded.get(context.executor(), job_id)
        if yielded is not None:
            return yielded
        shell = await self._shell(context)
        try:
            return shell.job(job_id)
        except ExecutorError:
            statuses = [*self._yielded.statuses(context.executor()), *shell.jobs()]
            known = ", ".join(_field(status, "id") for status in statuses) or "none"
            raise InvalidArgument(job_id, f"no such job; the jobs are: {known}") from None


def _field(value: object, name: str) -> str:
    found = getattr(value, name, None)
    if found is None:
        return ""
    # An enum (the job's state) reads as its value, not as `JobState.RUNNING`.
    return str(getattr(found, "value", found))


def _status_line(status: object) -> str:
    """One line for a job's status: its id, state, exit code and command."""
    parts = [f"job {_field(status, 'id')}", _field(status, "state")]
    exit_code = getattr(status, "exit_code", None)
    if exit_code is not None:
        parts.append(f"exit code {exit_code}")
    parts.append(_field(status, "command"))
    return "  ".join(part for part in parts if part)


def _job_output(output: CommandOutput, budget: int) -> str:
    """A job's new output for the model; once the job ended, with how it ended."""
    text = for_model(output, budget=budget)
    if not output.chunks:
        still = "the job is still running" if output.exit_code is None else "the job has ended"
        text = f"[no new output; {still}]" + (f"\n{text}" if text else "")
    return text
