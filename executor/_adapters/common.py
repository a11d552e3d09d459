"""What the framework adapters share: the tools, their context, the call, the import."""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Mapping
from types import ModuleType
from typing import Any

from executor._agents.events import ToolCallEvents
from executor._core.base import ToolExecutor
from executor._tools.tools import AgentContext, DefaultContext, Tool, ToolOutput, ToolOutputKind

RETRY_KINDS: frozenset[ToolOutputKind] = frozenset({ToolOutputKind.INVALID_ARGUMENTS})
"""The failures that are the model's to fix and call again (its framework's retry), by default."""


def import_framework(module: str, extra: str, package: str) -> ModuleType:
    """Import a framework's module, or raise an `ImportError` that says what to install."""
    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise ImportError(
            f"this adapter needs {package}: pip install 'tool-executor[{extra}]' ({error})"
        ) from error


def _check_tools(tools: Iterable[Tool]) -> tuple[Tool, ...]:
    if isinstance(tools, Tool):
        tools = (tools,)
    checked: list[Tool] = []
    names: set[str] = set()
    for tool in tools:
        if not isinstance(tool, Tool):
            raise TypeError(f"expected executor Tools, got {tool!r}")
        if tool.name in names:
            raise ValueError(f"two tools are named {tool.name!r}")
        names.add(tool.name)
        checked.append(tool)
    return tuple(checked)


def _check_kinds(kinds: Iterable[ToolOutputKind]) -> frozenset[ToolOutputKind]:
    checked = frozenset(kinds)
    for kind in checked:
        if not isinstance(kind, ToolOutputKind) or kind is ToolOutputKind.OK:
            raise ValueError(f"retry_on takes failure kinds (ToolOutputKind), got {kind!r}")
    return checked


class ToolRunner:
    """Runs a framework's tool calls: through `ToolCallEvents` when given, else `Tool.invoke`.

    Args:
        tools: The executor tools.
        context: The agent context (or executor) the tools get; `None` for
            tools that take none, or when `events` is given (its context is used).
        events: Report each call as agent stream events, and run it there.
        retry_on: The failure kinds that become the framework's retry.
    """

    def __init__(
        self,
        tools: Iterable[Tool],
        context: AgentContext | ToolExecutor | None,
        *,
        events: ToolCallEvents | None,
        retry_on: Iterable[ToolOutputKind],
    ) -> None:
        self.tools = _check_tools(tools)
        if events is not None and not isinstance(events, ToolCallEvents):
            raise TypeError(f"events must be a ToolCallEvents, got {events!r}")
        if events is not None and context is not None:
            raise ValueError("give a context or events, not both: events run in their own context")
        if isinstance(context, ToolExecutor):
            context = DefaultContext.from_executor(context)
        elif context is not None and not isinstance(context, AgentContext):
            raise TypeError(f"expected an AgentContext or a ToolExecutor, got {context!r}")
        self.context = context
        self.events = events
        self.retry_on = _check_kinds(retry_on)

    def find(self, name: str) -> Tool:
        """The tool of that name.

        Raises:
            KeyError: None has it.
        """
        for tool in self.tools:
            if tool.name == name:
                return tool
        raise KeyError(f"no tool named {name!r}; the tools are: {', '.join(self.names)}")

    @property
    def names(self) -> list[str]:
        """The tools' names."""
        return [tool.name for tool in self.tools]

    async def run(
        self,
        tool: Tool,
        arguments: str | Mapping[str, Any] | None,
        *,
        tool_call_id: str | None = None,
        context: AgentContext | None = None,
    ) -> ToolOutput:
        """Run one call and return what the model should see.

        Raises:
            TypeError: The tool takes a context and none was given.
        """
        if self.events is not None:
            return await self.events.call(tool, arguments, tool_call_id=tool_call_id)
        return await tool.invoke(context if context is not None else self.context, arguments)

    def retries(self, output: ToolOutput) -> bool:
        """Whether `output` is a failure the framework should turn into a retry."""
        return output.kind in self.retry_on
