"""The standard toolset: the tools every coding agent needs, over any executor.

```python
toolset = Toolset()
async with LocalExecutor("/srv/checkout") as ex, toolset:
    context = toolset.context(ex)
    out = await toolset.call(context, "run", {"command": "pytest -q", "timeout": 300})
```

Every tool is an ordinary `Tool` (built with `@tool`): its arguments are
validated types, its output the model rendering (`for_model`, `ToolOutput`
kinds), and each command goes through `context.executor()`, so the
executor's own wrappers (`ReadOnly`, `CommandRules`, `Approval`, `Audit`...)
enforce policy; the toolset adds none of its own. `Toolset(read_only=True)`
offers only the tools that never write (`READ_ONLY_TOOLS`): reading,
listing, globbing and searching, all through `read_file` and
`stream_files`, which `ReadOnly` lets through.
"""

from __future__ import annotations

import contextlib
import posixpath
import re
from collections.abc import AsyncGenerator, Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Literal, Protocol, cast

import anyio
import anyio.abc
import attrs

from executor._core.base import Sink, ToolExecutor
from executor._core.commands import Command
from executor._core.errors import CommandError, ExecutorError, InvalidArgument
from executor._core.output import CommandOutput, Stdout
from executor._core.render import DEFAULT_BUDGET, for_model
from executor._core.stdin import UnixSignal
from executor._tools.args import WorkspaceGlob, WorkspacePath
from executor._tools.tools import Tool, ToolOutput, ToolOutputKind, tool
from executor._toolset.text import Enough, LineRange, number_lines, replace_exact

__all__ = ["READ_ONLY_TOOLS", "TOOL_NAMES", "Toolset", "ToolsetContext"]

READ_ONLY_TOOLS: frozenset[str] = frozenset({"read_file", "list_files", "glob", "search"})
"""The tools that never write nor run a command: what `Toolset(read_only=True)` offers."""

TOOL_NAMES: tuple[str, ...] = (
    "run",
    "shell",
    "job_start",
    "job_read",
    "job_write",
    "job_signal",
    "job_stop",
    "job_list",
    "read_file",
    "write_file",
    "edit_file",
    "list_files",
    "glob",
    "search",
    "terminal",
    "log_tailer",
    "code_interpreter",
)
"""Every tool of the standard toolset, in the order `Toolset.tools` lists them."""

_DEFAULT_LINES = 2000
_MAX_LINES = 100_000
_MAX_LISTED = 1000
_MAX_MATCHES = 1000
# A written file is the largest argument a model sends; 16 MiB is past any real one.
_MAX_WRITE_BYTES = 16 << 20
_SIGNALS = {
    "SIGINT": UnixSignal.SIGINT,
    "SIGTERM": UnixSignal.SIGTERM,
    "SIGKILL": UnixSignal.SIGKILL,
    "SIGHUP": UnixSignal.SIGHUP,
}


@attrs.define(eq=False)
class ToolsetContext:
    """The agent context the toolset's tools run in.

    It holds the executor, and two things a server or UI wants of each call:
    `on_output`, a sink (`chunk -> None`, sync or async) that sees each
    command's output as it is read, and `last_output`, the `CommandOutput` of
    the call's last command (also a failed one), which the tools set so a
    caller can report the exit code and stderr apart. Use one context per
    call when calls run concurrently. Any other `AgentContext` works too: the
    tools then stream nothing and record nothing.

    Attributes:
        on_output: Where live output goes, or `None`.
        last_output: The last command's output, once a tool ran one.
    """

    _executor: ToolExecutor = attrs.field(alias="executor")
    on_output: Sink | None = None
    last_output: CommandOutput | None = None

    def __attrs_post_init__(self) -> None:
        if not isinstance(self._executor, ToolExecutor):
            raise TypeError(f"expected a ToolExecutor, got {type(self._executor).__name__}")

    def executor(self) -> ToolExecutor:
        """The executor the tools run commands through."""
        return self._executor


def _sink(context: object) -> Sink | None:
    sink = getattr(context, "on_output", None)
    return sink if callable(sink) else None


def _remember(context: object, output: CommandOutput) -> None:
    if isinstance(context, ToolsetContext):
        context.last_output = output


async def _execute(context: Any, cmd: Command, *, stream: bool = True) -> CommandOutput:
    """Run `cmd` through the context's executor, streaming to its sink, recording the output."""
    executor: ToolExecutor = context.executor()
    sink = _sink(context) if stream else None
    try:
        if sink is None:
            output = await executor.exec_cmd(cmd)
        else:
            output = await executor.exec_cmd_streaming(cmd, sink)
    except CommandError as error:
        _remember(context, error.output)
        raise
    _remember(context, output)
    return output


def _seconds(value: float | None, default: float | None, maximum: float, name: str) -> float | None:
    if value is None:
        return default
    if not value > 0 or value > maximum:
        raise InvalidArgument(value, f"{name} must be more than 0 and at most {maximum:g} seconds")
    return float(value)


def _positive(value: int | None, name: str, maximum: int) -> None:
    if value is not None and not 1 <= value <= maximum:
        raise InvalidArgument(value, f"{name} must be from 1 to {maximum}")


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
    ) -> CommandOutput: ...
    async def start_job(self, command: str, *, timeout: float | None = ...) -> _Job: ...
    def jobs(self) -> Sequence[Any]: ...
    def job(self, job_id: str) -> _Job: ...


@attrs.define(eq=False)
class _Hosted:
    """A resource (a persistent shell, the code interpreter) held open by a task of its own.

    Such a resource is entered and left in one task, while the calls that
    use it come from any task (an MCP server serves each request in its
    own), so the toolset gives each one a host task that enters it, waits
    to be told to stop, and leaves it.
    """

    executor: ToolExecutor
    value: Any = None
    error: BaseException | None = None
    ready: anyio.Event = attrs.Factory(anyio.Event)
    stop: anyio.Event = attrs.Factory(anyio.Event)
    done: anyio.Event = attrs.Factory(anyio.Event)

    async def host(self, factory: Callable[[], Any]) -> None:
        try:
            async with factory() as value:
                self.value = value
                self.ready.set()
                await self.stop.wait()
        except Exception as error:  # reported to the call waiting on `ready`
            self.error = error
        finally:
            self.ready.set()
            self.done.set()

    async def close(self) -> None:
        self.stop.set()
        with anyio.CancelScope(shield=True):
            await self.done.wait()


class Toolset:
    """The standard tools for an agent, each an ordinary `Tool`.

    - `run`: a shell command, one-shot, with a timeout.
    - `shell`: a command in a persistent shell (cwd, variables and functions
      carry over); `job_start`, `job_read`, `job_write`, `job_signal`,
      `job_stop`, `job_list`: background jobs of that shell.
    - `read_file` (numbered lines, by range or offset and limit),
      `write_file`, `edit_file` (exact string replacement, refused when the
      text is missing or not unique).
    - `list_files`, `glob`, `search`: listings and a content search through
      `stream_files` (ignore files respected, binary and hidden files
      skipped, as ripgrep does).

    The persistent shell is opened on first use, one per executor the calls
    come with, and closed, with its jobs, by `aclose()` (or `async with`).

    Args:
        read_only: Offer only `READ_ONLY_TOOLS`.
        include: Offer only these tools (names from `TOOL_NAMES`).
        exclude: Leave these tools out.
        timeout: Seconds a command may run when the model gives no timeout.
        max_timeout: The longest timeout a model may ask for.
        budget: Characters of output a tool hands the model (`for_model`).
        extra: Tools of your own (any `Tool`, from `@tool` say) offered after
            the standard ones, through the same `call`, MCP server and
            adapters; `read_only` does not filter them.

    Raises:
        ValueError: A name in `include` or `exclude` is no tool of the set, a
            tool of `extra` has the name of another tool offered, or a
            number is out of range.
    """

    def __init__(
        self,
        *,
        read_only: bool = False,
        include: Iterable[str] | None = None,
        exclude: Iterable[str] = (),
        timeout: float = 120.0,
        max_timeout: float = 3600.0,
        budget: int = DEFAULT_BUDGET,
        extra: Iterable[Tool] = (),
    ) -> None:
        if not timeout > 0 or not max_timeout >= timeout:
            raise ValueError(f"need 0 < timeout <= max_timeout, got {timeout!r}, {max_timeout!r}")
        if budget < 100:
            raise ValueError(f"budget must be at least 100 characters, got {budget!r}")
        self.timeout = float(timeout)
        self.max_timeout = float(max_timeout)
        self.budget = budget
        self._hosted: dict[tuple[str, int], _Hosted] = {}
        self._lock = anyio.Lock()
        self._stack: contextlib.AsyncExitStack | None = None
        self._group: anyio.abc.TaskGroup | None = None
        chosen = set(TOOL_NAMES if include is None else include)
        unknown = (chosen | set(exclude)) - set(TOOL_NAMES)
        if unknown:
            raise ValueError(f"no such tools: {sorted(unknown)}; the tools are {list(TOOL_NAMES)}")
        chosen -= set(exclude)
        if read_only:
            chosen &= READ_ONLY_TOOLS
        built = self._build()
        standard = tuple(built[name] for name in TOOL_NAMES if name in chosen)
        extra = tuple(extra)
        for each in extra:
            if not isinstance(each, Tool):
                raise TypeError(f"extra tools must be Tool objects, got {type(each).__name__}")
        self.tools: tuple[Tool, ...] = (*standard, *extra)
        self._by_name = {t.name: t for t in self.tools}
        if len(self._by_name) != len(self.tools):
            names = [t.name for t in self.tools]
            twice = sorted({name for name in names if names.count(name) > 1})
            raise ValueError(f"two tools are named {', '.join(map(repr, twice))}")

    def __repr__(self) -> str:
        return f"Toolset({[t.name for t in self.tools]!r})"

    def __iter__(self) -> Iterator[Tool]:
        return iter(self.tools)

    def __len__(self) -> int:
        return len(self.tools)

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def __getitem__(self, name: str) -> Tool:
        """The tool called `name`; `KeyError` naming the tools there are."""
        try:
            return self._by_name[name]
        except KeyError:
            raise KeyError(f"no tool {name!r}; this toolset has {list(self._by_name)}") from None

    @property
    def names(self) -> tuple[str, ...]:
        """The names of the tools offered, in order."""
        return tuple(self._by_name)

    @property
    def specs(self) -> list[dict[str, Any]]:
        """Each tool's `spec` (the function-calling JSON-schema form)."""
        return [t.spec for t in self.tools]

    def context(self, executor: ToolExecutor, *, on_output: Sink | None = None) -> ToolsetContext:
        """A `ToolsetContext` for calls through `executor`."""
        return ToolsetContext(executor, on_output=on_output)

    async def call(
        self, context: Any, name: str, arguments: str | Mapping[str, Any] | None
    ) -> ToolOutput:
        """Invoke the tool `name` on a model's arguments; an unknown name is an error output."""
        found = self._by_name.get(name)
        if found is None:
            return ToolOutput.error(
                f"there is no tool {name!r}; the tools are: {', '.join(self._by_name)}",
                kind=ToolOutputKind.INVALID_ARGUMENTS,
            )
        return await found.invoke(context, arguments)

    async def aclose(self) -> None:
        """Close the persistent shells, ending their jobs. A second call does nothing."""
        hosted, self._hosted = list(self._hosted.values()), {}
        for each in hosted:
            await each.close()

    async def __aenter__(self) -> Toolset:
        """Enter the toolset: the persistent shells live until it is left."""
        if self._stack is not None:
            raise RuntimeError("this Toolset is already entered")
        stack = contextlib.AsyncExitStack()
        self._group = await stack.enter_async_context(anyio.create_task_group())
        self._stack = stack
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        stack, self._stack = self._stack, None
        try:
            await self.aclose()
        finally:
            self._group = None
            if stack is not None:
                await stack.aclose()

    # --- the persistent shell ---------------------------------------------------------

    async def _shell(self, context: Any, *, restart: bool = False) -> _Shell:
        executor: ToolExecutor = context.executor()
        factory = getattr(executor, "shell", None)
        if not callable(factory):
            raise ExecutorError(f"{type(executor).__name__} has no persistent shell; use run")
        return cast(_Shell, await self._open("persistent shell", executor, factory, restart))

    async def _interpreter(self, context: Any) -> Any:
        from executor._builtins.interpreter import CodeInterpreterTool

        executor: ToolExecutor = context.executor()
        return await self._open(
            "code interpreter", executor, lambda: CodeInterpreterTool(executor), False
        )

    async def _open(
        self, kind: str, executor: ToolExecutor, factory: Callable[[], Any], restart: bool
    ) -> Any:
        """The `kind` resource `factory` makes for `executor`, opened in a host task once."""
        key = (kind, id(executor))
        async with self._lock:
            hosted = self._hosted.get(key)
            if (
                hosted is not None
                and hosted.executor is executor
                and not restart
                and hosted.value is not None
                and not hosted.done.is_set()
            ):
                return hosted.value
            if hosted is not None:
                del self._hosted[key]
                await hosted.close()
            if self._group is None:
                raise ExecutorError(
                    f"the {kind} needs an entered toolset: `async with toolset:` around the "
                    "calls (it holds it open between them, and closes it at the end)"
                )
            hosted = _Hosted(executor)
            self._group.start_soon(hosted.host, factory)
            await hosted.ready.wait()
            if hosted.error is not None or hosted.value is None:
                error = hosted.error
                if isinstance(error, CommandError | InvalidArgument):
                    raise error
                raise ExecutorError(f"the {kind} did not start: {error}") from error
            self._hosted[key] = hosted
            return hosted.value

    async def _job(self, context: Any, job_id: str) -> _Job:
        shell = await self._shell(context)
        try:
            return shell.job(job_id)
        except ExecutorError:
            known = ", ".join(_field(status, "id") for status in shell.jobs()) or "none"
            raise InvalidArgument(job_id, f"no such job; the jobs are: {known}") from None

    # --- the tools ----------------------------------------------------------------------

    def _builtins(self) -> list[Tool]:
        """The built-in streaming tools, each as a `Tool` (see `streaming_tool`)."""
        from executor._builtins.interpreter import CodeInterpreterTool
        from executor._builtins.logtail import LogTailerTool
        from executor._builtins.terminal import TerminalTool
        from executor._toolset.streaming import streaming_tool

        async def terminal(context: Any) -> Any:
            return TerminalTool(context.executor())

        async def log_tailer(context: Any) -> Any:
            return LogTailerTool(context.executor())

        return [
            streaming_tool(TerminalTool, terminal, budget=self.budget),
            streaming_tool(LogTailerTool, log_tailer, budget=self.budget),
            streaming_tool(CodeInterpreterTool, self._interpreter, budget=self.budget),
        ]

    def _build(self) -> dict[str, Tool]:
        toolset = self

        @tool
        async def run(  # noqa: D417 - context is not an argument
            context: ToolsetContext,
            command: str,
            timeout: float | None = None,
            cwd: WorkspacePath | None = None,
            stdin: str | None = None,
        ) -> ToolOutput:
            """Run a shell command (sh -c) to its end and return its output and exit code.

            Each call starts afresh: nothing (cd, variables) carries over; use the
            shell tool for that. The command's whole process tree is killed when it
            runs past its timeout.

            Args:
                command: The shell script to run, e.g. "pytest -q tests/test_x.py".
                timeout: Seconds before the command is killed (the toolset's default if omitted).
                cwd: Folder to run in, relative to the workspace root.
                stdin: Text to give the command on its standard input (none if omitted).
            """
            seconds = _seconds(timeout, toolset.timeout, toolset.max_timeout, "timeout")
            cmd = Command.shell(command).with_timeout(seconds)
            if cwd is not None:
                cmd = cmd.with_current_dir(str(cwd))
            if stdin is not None:
                cmd = cmd.with_stdin(stdin)
            output = await _execute(context, cmd)
            return ToolOutput(for_model(output, budget=toolset.budget), exit_code=output.exit_code)

        @tool
        async def shell(  # noqa: D417 - context is not an argument
            context: ToolsetContext,
            command: str,
            timeout: float | None = None,
            restart: bool = False,
        ) -> ToolOutput:
            """Run a command in a persistent shell: cd, variables and functions carry over.

            Args:
                command: The shell command to run, e.g. "cd src && export DEBUG=1".
                timeout: Seconds before the command is interrupted; the shell itself stays.
                restart: Start a fresh shell first, dropping the old one's state and jobs.
            """
            seconds = _seconds(timeout, toolset.timeout, toolset.max_timeout, "timeout")
            sh = await toolset._shell(context, restart=restart)
            try:
                output = await sh.run(command, timeout=seconds, sink=_sink(context))
            except CommandError as error:
                _remember(context, error.output)
                raise
            _remember(context, output)
            text = for_model(output, budget=toolset.budget)
            if sh.state_lost:
                text = f"[the shell was restarted and its state lost]\n{text}"
            return ToolOutput(text, exit_code=output.exit_code)

        @tool
        async def job_start(context: ToolsetContext, command: str) -> str:  # noqa: D417
            """Start a command as a background job of the persistent shell; return its id.

            Args:
                command: The command, e.g. "python -m http.server 8000".
            """
            sh = await toolset._shell(context)
            job = await sh.start_job(command)
            return f"started job {job.id}: {command}"

        @tool
        async def job_read(context: ToolsetContext, job_id: str, max_bytes: int = 16000) -> str:  # noqa: D417
            """Read what a background job printed since the last read.

            Args:
                job_id: The job's id, from job_start or job_list.
                max_bytes: The most output to return; older output past it is elided.
            """
            _positive(max_bytes, "max_bytes", 1 << 20)
            job = await toolset._job(context, job_id)
            return _job_output(await job.read(max_bytes=max_bytes), toolset.budget)

        @tool
        async def job_write(context: ToolsetContext, job_id: str, text: str) -> str:  # noqa: D417
            """Write text to a background job's standard input (end a line with a newline).

            Args:
                job_id: The job's id.
                text: What to write.
            """
            job = await toolset._job(context, job_id)
            await job.write(text)
            return f"wrote {len(text)} characters to job {job_id}"

        @tool
        async def job_signal(  # noqa: D417 - context is not an argument
            context: ToolsetContext,
            job_id: str,
            signal: Literal["SIGINT", "SIGTERM", "SIGKILL", "SIGHUP"],
        ) -> str:
            """Send a signal to a background job (SIGINT is Ctrl-C).

            Args:
                job_id: The job's id.
                signal: The signal to send.
            """
            job = await toolset._job(context, job_id)
            await job.signal(_SIGNALS[signal])
            return f"sent {signal} to job {job_id}"

        @tool
        async def job_stop(context: ToolsetContext, job_id: str) -> str:  # noqa: D417
            """Stop a background job (its whole process tree) and return how it ended.

            Args:
                job_id: The job's id.
            """
            job = await toolset._job(context, job_id)
            status = await job.kill()
            return _status_line(status) if status is not None else f"stopped job {job_id}"

        @tool
        async def job_list(context: ToolsetContext) -> str:
            """List the background jobs of the persistent shell, running and ended."""
            sh = await toolset._shell(context)
            statuses = list(sh.jobs())
            if not statuses:
                return "no jobs"
            return "\n".join(_status_line(status) for status in statuses)

        @tool
        async def read_file(  # noqa: D417 - context is not an argument
            context: ToolsetContext,
            path: WorkspacePath,
            offset: int | None = None,
            limit: int | None = None,
            start_line: int | None = None,
            end_line: int | None = None,
        ) -> str | ToolOutput:
            """Read a text file, its lines numbered; a big file a range at a time.

            Give offset and limit (line to start at, how many lines), or start_line
            and end_line (both included); by default the first 2000 lines. Lines
            past 2000 characters are cut.

            Args:
                path: The file, relative to the workspace root.
                offset: The line number to start at (1 is the first line).
                limit: How many lines to read.
                start_line: The first line to read (the same as offset).
                end_line: The last line to read, included.
            """
            if offset is not None and start_line is not None:
                raise InvalidArgument(offset, "give offset or start_line, not both")
            if limit is not None and end_line is not None:
                raise InvalidArgument(limit, "give limit or end_line, not both")
            first = offset if offset is not None else start_line if start_line is not None else 1
            _positive(first, "offset" if offset is not None else "start_line", 1 << 62)
            _positive(limit, "limit", _MAX_LINES)
            if end_line is not None and end_line < first:
                raise InvalidArgument(
                    end_line, f"end_line must be at least the first line, {first}"
                )
            if end_line is not None:
                last = end_line
            else:
                last = first + (limit if limit is not None else _DEFAULT_LINES) - 1
            lines = LineRange(first, last, toolset.budget)
            executor: ToolExecutor = context.executor()
            try:
                await executor.exec_cmd_streaming(Command.read_file(path), lines)
            except Enough:
                pass
            else:
                lines.finish()
            if lines.binary:
                return ToolOutput.error(
                    f"{path} is a binary file (it holds NUL bytes); read_file shows text only"
                )
            if not lines.lines:
                if lines.seen == 0:
                    return f"{path} is empty"
                raise InvalidArgument(
                    first, f"{path} has {lines.seen} lines; line {first} is past its end"
                )
            body = number_lines(lines.lines, first)
            shown = f"lines {first}-{lines.shown_last}"
            if lines.budget_hit:
                note = (
                    f"[{shown} shown: the output budget is reached; continue with "
                    f"offset={lines.shown_last + 1}]"
                )
            elif lines.more:
                note = f"[{shown} shown; more follow: continue with offset={lines.shown_last + 1}]"
            else:
                note = f"[{shown} of {lines.seen}]"
            return f"{body}{note}"

        @tool(max_argument_bytes=_MAX_WRITE_BYTES)
        async def write_file(context: ToolsetContext, path: WorkspacePath, content: str) -> str:  # noqa: D417
            """Write a text file whole, replacing it if it exists; missing folders are made.

            Args:
                path: The file, relative to the workspace root.
                content: The file's whole new text.
            """
            await _execute(context, Command.write_file(path, content))
            size = len(content.encode("utf-8", "surrogatepass"))
            lines = content.count("\n") + (not content.endswith("\n") and bool(content))
            return f"wrote {size} bytes ({lines} lines) to {path}"

        @tool(max_argument_bytes=_MAX_WRITE_BYTES)
        async def edit_file(  # noqa: D417 - context is not an argument
            context: ToolsetContext,
            path: WorkspacePath,
            old_text: str,
            new_text: str,
            replace_all: bool = False,
        ) -> str | ToolOutput:
            """Edit a text file by replacing exact text, as a str_replace editor does.

            old_text must occur exactly once (or set replace_all), whitespace and
            indentation included; otherwise nothing is changed and the reply says why.

            Args:
                path: The file, relative to the workspace root.
                old_text: The exact text to replace.
                new_text: The text to put in its place.
                replace_all: Replace every occurrence instead of requiring exactly one.
            """
            output = await _execute(context, Command.read_file(path), stream=False)
            try:
                text = output.stdout.decode("utf-8")
            except UnicodeDecodeError:
                return ToolOutput.error(f"{path} is not UTF-8 text; edit_file edits text files")
            edited, lines = replace_exact(text, old_text, new_text, replace_all=replace_all)
            await _execute(context, Command.write_file(path, edited))
            count = f"{len(lines)} occurrence{'s' * (len(lines) != 1)}"
            first = lines[0]
            new_lines = edited.splitlines()
            span = new_text.count("\n")
            low = max(first - 3, 1)
            high = min(first + span + 3, len(new_lines))
            snippet = number_lines(new_lines[low - 1 : high], low)
            where = ", ".join(map(str, lines[:20]))
            return f"edited {path}: replaced {count} (line {where})\n{snippet}"

        @tool
        async def list_files(  # noqa: D417 - context is not an argument
            context: ToolsetContext,
            path: WorkspacePath | None = None,
            extensions: list[str] | None = None,
            limit: int = 500,
        ) -> str:
            """List the text files below a folder, ignore files respected, hidden files skipped.

            Args:
                path: The folder, relative to the workspace root (the root if omitted).
                extensions: Keep only these extensions, like ["py", "md"].
                limit: The most paths to return.
            """
            _positive(limit, "limit", _MAX_LISTED * 10)
            root = _root(path)
            found = sorted([f.path async for f in _files(context, root, extensions)])
            return _listing(found, limit, f"no text files below {root}")

        @tool
        async def glob(  # noqa: D417 - context is not an argument
            context: ToolsetContext,
            pattern: WorkspaceGlob,
            path: WorkspacePath | None = None,
            limit: int = 500,
        ) -> str:
            """Find text files whose path matches a glob, like "src/**/*.py".

            Args:
                pattern: The glob, relative to path (** spans folders, {a,b} alternatives).
                path: The folder to search, relative to the workspace root (the root if omitted).
                limit: The most paths to return.
            """
            _positive(limit, "limit", _MAX_LISTED * 10)
            root = _root(path)
            found = sorted(
                [
                    f.path
                    async for f in _files(context, root, None)
                    if pattern.match(_below(f.path, root))
                ]
            )
            return _listing(found, limit, f"no text files below {root} match {pattern}")

        @tool
        async def search(  # noqa: D417 - context is not an argument
            context: ToolsetContext,
            pattern: str,
            path: WorkspacePath | None = None,
            glob: WorkspaceGlob | None = None,
            ignore_case: bool = False,
            literal: bool = False,
            max_matches: int = 200,
        ) -> str:
            """Search the contents of text files for a regular expression, as ripgrep does.

            Lines come back as path:line:text. Ignore files are respected; hidden and
            binary files are skipped.

            Args:
                pattern: A Python regular expression (or plain text with literal).
                path: The folder to search, relative to the workspace root (the root if omitted).
                glob: Search only files matching this glob, as ripgrep's -g: "*.py" matches
                    at any depth, "src/**/*.py" a path (relative to path).
                ignore_case: Match without regard to case.
                literal: Take pattern as plain text, not a regular expression.
                max_matches: The most matching lines to return.
            """
            _positive(max_matches, "max_matches", _MAX_MATCHES)
            try:
                regex = re.compile(
                    re.escape(pattern) if literal else pattern, re.IGNORECASE if ignore_case else 0
                )
            except re.error as error:
                raise InvalidArgument(pattern, f"not a valid regular expression: {error}") from None
            matches: list[str] = []
            files = 0
            stopped = False
            root = _root(path)
            async with contextlib.aclosing(_files(context, root, None)) as walk:
                async for loaded in walk:
                    # The walk goes on to its end even once enough matched: a backend's
                    # walker left unfinished would be closed only at garbage collection.
                    if stopped or (
                        glob is not None and not _filter_match(glob, _below(loaded.path, root))
                    ):
                        continue
                    files += 1
                    for number, line in enumerate(loaded.content.splitlines(), 1):
                        if regex.search(line):
                            shown = line if len(line) <= 300 else f"{line[:300]}[...]"
                            matches.append(f"{loaded.path}:{number}:{shown}")
                            if len(matches) >= max_matches:
                                stopped = True
                                break
                    await anyio.lowlevel.checkpoint()
            if not matches:
                return f"no matches for {pattern!r} in {files} files below {root}"
            text = "\n".join(matches)
            if stopped:
                text += (
                    f"\n[stopped after {max_matches} matches; narrow the search or raise "
                    "max_matches]"
                )
            return _cut(text, toolset.budget)

        tools = [
            *self._builtins(),
            run,
            shell,
            job_start,
            job_read,
            job_write,
            job_signal,
            job_stop,
            job_list,
            read_file,
            write_file,
            edit_file,
            list_files,
            glob,
            search,
        ]
        return {t.name: t for t in tools}


def _root(path: WorkspacePath | None) -> str:
    return "." if path is None else str(path)


async def _files(
    context: Any, root: str, extensions: Sequence[str] | None
) -> AsyncGenerator[Any, None]:
    executor: ToolExecutor = context.executor()
    found = executor.stream_files(root, extensions or None)
    try:
        async for loaded in found:
            yield loaded
    except FileNotFoundError:
        raise InvalidArgument(root, "no such folder") from None
    except NotADirectoryError:
        raise InvalidArgument(root, "not a folder") from None
    finally:
        # A search that stops early must end the walk now, not at garbage collection.
        close = getattr(found, "aclose", None)
        if close is not None:
            await close()


def _below(found: str, root: str) -> str:
    if root in ("", ".") or posixpath.isabs(found):
        return found
    return posixpath.relpath(found, root)


def _filter_match(glob: WorkspaceGlob, path: str) -> bool:
    """Match as ripgrep's `-g` does: a glob without `/` matches a file's name at any depth."""
    if "/" not in glob and glob.match(posixpath.basename(path)):
        return True
    return glob.match(path)


def _listing(paths: list[str], limit: int, empty: str) -> str:
    if not paths:
        return empty
    shown = "\n".join(paths[:limit])
    if len(paths) > limit:
        shown += f"\n[... {len(paths) - limit} more paths; raise limit or narrow the path]"
    return shown


def _cut(text: str, budget: int) -> str:
    output = CommandOutput(chunks=(Stdout(text.encode()),), exit_code=None, duration=0.0)
    return for_model(output, budget=budget)


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
