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

The tools live by family, each module one job: `commands` (`run`, `shell`,
the `job_*` tools), `files` (`read_file`, `write_file`, `edit_file`),
`search` (`list_files`, `glob`, `search`) and `streaming` (the terminal, the
log tailer, the code interpreter). A tool that needs nothing of its toolset
is a plain function; one that does is a method of a small class given what
it needs when the toolset builds it, never the toolset itself: its `Limits`
(`limits`: the timeouts and the output budget) and its `Hosts` (`hosting`:
the persistent shells and code interpreters it holds open, one per
executor). All run in a `ToolsetContext` (`context`). This module chooses the
tools, calls them by name, and opens and closes the hosts.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from executor._core.base import ToolExecutor
from executor._core.output import Sink
from executor._core.render import DEFAULT_BUDGET
from executor._tools.tools import Tool, ToolOutput, ToolOutputKind
from executor._toolset.commands import CommandTools, command_tools
from executor._toolset.context import ToolsetContext
from executor._toolset.environment import EnvironmentSetting, check_environment
from executor._toolset.files import file_tools
from executor._toolset.history import EditHistory
from executor._toolset.hosting import Hosts
from executor._toolset.limits import Limits
from executor._toolset.native import NATIVE_TOOLS, NativeTools, native_tools
from executor._toolset.search import search_tools
from executor._toolset.streaming import streaming_tools
from executor._toolset.yielding import Yielded

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
    "undo_edit",
    "list_files",
    "glob",
    "search",
    "terminal",
    "log_tailer",
    "code_interpreter",
)
"""Every tool of the standard toolset, in the order `Toolset.tools` lists them."""

NATIVE_TOOL_NAMES: tuple[str, ...] = tuple(
    name for names in NATIVE_TOOLS.values() for name in names
)
"""The native tools (`NATIVE_TOOLS` gives them by family), offered with `Toolset(native=...)`."""

_JOB_TOOLS = ("job_read", "job_write", "job_signal", "job_stop", "job_list")


class Toolset:
    """The standard tools for an agent, each an ordinary `Tool`.

    - `run`: a shell command, one-shot, with a timeout.
    - `shell`: a command in a persistent shell (cwd, variables and functions
      carry over); `job_start`, `job_read`, `job_write`, `job_signal`,
      `job_stop`, `job_list`: background jobs of that shell.
    - `read_file` (numbered lines, by range or offset and limit),
      `write_file`, `edit_file` (string replacement, refused when the text
      is missing or not unique, with whitespace fallbacks it names),
      `undo_edit` (the last changes of a file, taken back byte for byte).
    - `list_files`, `glob`, `search`: listings and a content search through
      `stream_files` (ignore files respected, binary and hidden files
      skipped, as ripgrep does).

    The persistent shell is opened on first use, one per executor the calls
    come with, and closed, with its jobs, by `aclose()` (or `async with`).

    With `native`, the tools offered are those models were trained on
    (`NATIVE_TOOLS`): `"anthropic"` gives `bash` and
    `str_replace_based_edit_tool`, `"openai"` `shell`, `local_shell` and
    `apply_patch`, `"swe-agent"` `str_replace_editor`; a list gives several
    families. `include` may add standard tools whose names do not clash.
    With a yield window, the job tools come too, to take the handles.

    Args:
        read_only: Offer only `READ_ONLY_TOOLS`.
        native: Offer the native tools of these families instead of the
            standard set.
        include: Offer only these tools (names from `TOOL_NAMES`, or with
            `native`, from `NATIVE_TOOL_NAMES` too).
        exclude: Leave these tools out.
        timeout: Seconds a command may run when the model gives no timeout.
        max_timeout: The longest timeout a model may ask for.
        budget: Characters of output a tool hands the model (`for_model`).
        yield_after: Seconds after which a command of `run`, `shell`, `bash`
            or `local_shell` still running comes back with its output so far
            and a job id (`job_read`, `job_write`, `job_stop` take it) instead
            of being waited for; `None` (the default) waits, to the timeout.
            The model may give its own `yield_after` to `run` and `shell`.
        idle_timeout: Seconds a command of `run` may print nothing before it
            is killed; `None`: no idle timeout.
        max_characters: The most characters the text editors' `view` shows
            (declared natively as `max_characters`); the budget by default.
        extra: Tools of your own (any `Tool`, from `@tool` say) offered after
            the standard ones, through the same `call`, MCP server and
            adapters; `read_only` does not filter them.
        environment: The agent-safe environment every command gets
            (`executor._toolset.environment`: pagers off, editors that fail,
            prompts that fail or read end of file): `True` (the default),
            `False` for none, or a mapping that changes it per variable (a
            value of your own; `None` leaves one to the executor).

    Raises:
        ValueError: A name in `include` or `exclude` is no tool of the set, a
            tool of `extra` has the name of another tool offered, or a
            number is out of range.
    """

    def __init__(
        self,
        *,
        read_only: bool = False,
        native: str | Iterable[str] = (),
        include: Iterable[str] | None = None,
        exclude: Iterable[str] = (),
        timeout: float = 120.0,
        max_timeout: float = 3600.0,
        budget: int = DEFAULT_BUDGET,
        yield_after: float | None = None,
        idle_timeout: float | None = None,
        max_characters: int | None = None,
        extra: Iterable[Tool] = (),
        environment: EnvironmentSetting = True,
    ) -> None:
        self._environment = check_environment(environment)
        if not timeout > 0 or not max_timeout >= timeout:
            raise ValueError(f"need 0 < timeout <= max_timeout, got {timeout!r}, {max_timeout!r}")
        if budget < 100:
            raise ValueError(f"budget must be at least 100 characters, got {budget!r}")
        for name, value in (("yield_after", yield_after), ("idle_timeout", idle_timeout)):
            if value is not None and not 0 < value <= max_timeout:
                raise ValueError(
                    f"{name} must be more than 0 and at most max_timeout, got {value!r}"
                )
        if max_characters is not None and max_characters < 100:
            raise ValueError(f"max_characters must be at least 100, got {max_characters!r}")
        self._limits = Limits(
            float(timeout),
            float(max_timeout),
            budget,
            yield_after=yield_after,
            idle_timeout=idle_timeout,
        )
        self._hosts = Hosts()
        self._yielded = Yielded(self._hosts.spawn)
        self._history = EditHistory()
        self._max_characters = max_characters
        self._stack: contextlib.AsyncExitStack | None = None
        families = (native,) if isinstance(native, str) else tuple(native)
        for family in families:
            if family not in NATIVE_TOOLS:
                raise ValueError(
                    f"no native tools {family!r}; the families are {list(NATIVE_TOOLS)}"
                )
        offered = [name for family in families for name in NATIVE_TOOLS[family]]
        order = (*offered, *(name for name in TOOL_NAMES if name not in offered))
        if include is not None:
            chosen = set(include)
        elif families:
            chosen = set(offered) | (set(_JOB_TOOLS) if yield_after is not None else set())
        else:
            chosen = set(TOOL_NAMES)
        known = set(TOOL_NAMES) | (set(NATIVE_TOOL_NAMES) if families else set())
        unknown = (chosen | set(exclude)) - known
        if unknown:
            raise ValueError(f"no such tools: {sorted(unknown)}; the tools are {sorted(known)}")
        chosen -= set(exclude)
        if read_only:
            chosen &= READ_ONLY_TOOLS
        built = self._build(native=bool(families))
        standard = tuple(built[name] for name in dict.fromkeys(order) if name in chosen)
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

    @property
    def timeout(self) -> float:
        """Seconds a command may run when the model gives no timeout."""
        return self._limits.timeout

    @timeout.setter
    def timeout(self, value: float) -> None:
        self._limits.timeout = value

    @property
    def max_timeout(self) -> float:
        """The longest timeout a model may ask for."""
        return self._limits.max_timeout

    @max_timeout.setter
    def max_timeout(self, value: float) -> None:
        self._limits.max_timeout = value

    @property
    def budget(self) -> int:
        """Characters of output a tool hands the model (`for_model`)."""
        return self._limits.budget

    @budget.setter
    def budget(self, value: int) -> None:
        self._limits.budget = value

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
        return ToolsetContext(executor, on_output=on_output, environment=self._environment)

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
        if isinstance(context, ToolsetContext) and context.environment is None:
            context.environment = self._environment
        return await found.invoke(context, arguments)

    async def aclose(self) -> None:
        """Close the persistent shells, ending their jobs and yielded commands. Again: nothing."""
        await self._yielded.aclose()
        await self._hosts.aclose()

    async def __aenter__(self) -> Toolset:
        """Enter the toolset: the persistent shells live until it is left."""
        if self._stack is not None:
            raise RuntimeError("this Toolset is already entered")
        stack = contextlib.AsyncExitStack()
        await stack.enter_async_context(self._hosts.hosting())
        self._stack = stack
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        stack, self._stack = self._stack, None
        try:
            await self.aclose()
        finally:
            if stack is not None:
                await stack.aclose()

    def _build(self, *, native: bool) -> dict[str, Tool]:
        """Every standard tool by name, each given the state it needs, not the toolset."""
        commands = CommandTools(self._limits, self._hosts, self._yielded)
        built = [
            # The streaming tools' budget is the one at construction, as it always was.
            *streaming_tools(self.budget, self._hosts, self._limits),
            *command_tools(commands),
            *file_tools(self._limits, self._history),
            *search_tools(self._limits),
        ]
        standard = {t.name: t for t in built}
        if not native:
            return standard
        tools = NativeTools(
            self._limits, commands, self._history, max_characters=self._max_characters
        )
        # A native tool of the same name as a standard one (OpenAI's `shell`) wins
        # where the native families are asked for.
        return {**standard, **native_tools(tools)}
