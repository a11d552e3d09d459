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
from executor._toolset.commands import command_tools
from executor._toolset.context import ToolsetContext
from executor._toolset.files import file_tools
from executor._toolset.hosting import Hosts
from executor._toolset.limits import Limits
from executor._toolset.search import search_tools
from executor._toolset.streaming import streaming_tools

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
        self._limits = Limits(float(timeout), float(max_timeout), budget)
        self._hosts = Hosts()
        self._stack: contextlib.AsyncExitStack | None = None
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

    def _build(self) -> dict[str, Tool]:
        """Every standard tool by name, each given the state it needs, not the toolset."""
        built = [
            # The streaming tools' budget is the one at construction, as it always was.
            *streaming_tools(self.budget, self._hosts),
            *command_tools(self._limits, self._hosts),
            *file_tools(self._limits),
            *search_tools(self._limits),
        ]
        return {t.name: t for t in built}
