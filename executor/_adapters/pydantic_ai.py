"""Executor tools as a pydantic-ai toolset (`pip install 'tool-executor[pydantic-ai]'`).

```python
agent = Agent(model, toolsets=[PydanticAIToolset([run, read_file], LocalExecutor("/srv/checkout"))])
```

Each call goes through `Tool.invoke`: the arguments are checked by the tool's
own types, the command runs through the executor, and the `ToolOutput`'s kind
decides what pydantic-ai sees. An `INVALID_ARGUMENTS` output raises
`ModelRetry` (the model is asked to fix its arguments and call again, within
the tool's `max_retries`); the other failures (`DENIED`, `TIMED_OUT`,
`OUT_OF_MEMORY`, `FAILED`, `EXECUTOR_ERROR`) raise `ToolFailed`, a failed tool result the model
sees and works with, which spends no retry; a success returns the output's text.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from executor._adapters.common import RETRY_KINDS, ToolRunner, import_framework
from executor._agents.events import ToolCallEvents
from executor._core.base import ToolExecutor
from executor._tools.tools import AgentContext, DefaultContext, Tool, ToolOutput, ToolOutputKind

import_framework("pydantic_ai", "pydantic-ai", "pydantic-ai-slim")

from pydantic_ai import ModelRetry, RunContext, ToolFailed  # noqa: E402
from pydantic_ai.tools import ToolDefinition  # noqa: E402
from pydantic_ai.toolsets import AbstractToolset, ToolsetTool  # noqa: E402
from pydantic_core import SchemaValidator, core_schema  # noqa: E402

# The tools check their own arguments (with the messages a model can act on), so
# pydantic-ai passes them through as decoded JSON.
_ANY_ARGUMENTS = SchemaValidator(core_schema.dict_schema(core_schema.str_schema()))


class PydanticAIToolset(AbstractToolset[Any]):
    """A pydantic-ai toolset of executor `Tool`s.

    Args:
        tools: The tools.
        context: The agent context (or executor) the tools get. `None` takes
            the run's `deps` when they are an `AgentContext` or a
            `ToolExecutor`, for an agent whose deps carry the executor.
        events: Run each call through this `ToolCallEvents`, which reports
            it as agent stream events (under pydantic-ai's tool call id) and
            hands the tools its own context; then `context` stays `None`.
        max_retries: How many times in a row the model may retry one tool
            after a `ModelRetry` (pydantic-ai's budget per tool).
        retry_on: The failure kinds that raise `ModelRetry`;
            `INVALID_ARGUMENTS` by default. The others raise `ToolFailed`.
        id: The toolset's id, unique among an agent's toolsets (needed for
            durable execution).

    Raises:
        TypeError: Something other than `Tool`s, or a context of another type.
        ValueError: Two tools share a name, or both `context` and `events`.
    """

    def __init__(
        self,
        tools: Iterable[Tool],
        context: AgentContext | ToolExecutor | None = None,
        *,
        events: ToolCallEvents | None = None,
        max_retries: int = 1,
        retry_on: Iterable[ToolOutputKind] = RETRY_KINDS,
        id: str | None = None,
    ) -> None:
        if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
            raise ValueError(f"max_retries must be an int >= 0, got {max_retries!r}")
        self._runner = ToolRunner(tools, context, events=events, retry_on=retry_on)
        self.max_retries = max_retries
        self._id = id

    def __repr__(self) -> str:
        return f"PydanticAIToolset({self._runner.names!r})"

    @property
    def id(self) -> str | None:
        """The id given, or `None`."""
        return self._id

    @property
    def tools(self) -> tuple[Tool, ...]:
        """The executor tools."""
        return self._runner.tools

    async def get_tools(self, ctx: RunContext[Any]) -> dict[str, ToolsetTool[Any]]:
        """The tools, as pydantic-ai lists them to the model."""
        return {
            tool.name: ToolsetTool(
                toolset=self,
                tool_def=ToolDefinition(
                    name=tool.name,
                    description=tool.description,
                    parameters_json_schema=tool.spec["parameters"],
                ),
                max_retries=self.max_retries,
                args_validator=_ANY_ARGUMENTS,
            )
            for tool in self._runner.tools
        }

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any]
    ) -> Any:
        """Run one call; a failure raises `ModelRetry` or `ToolFailed` (see the class).

        Raises:
            ModelRetry: The output's kind is in `retry_on`.
            ToolFailed: Any other failure.
        """
        found = self._runner.find(name)
        context: AgentContext | None = None
        if self._runner.context is None and self._runner.events is None:
            context = _context_from_deps(ctx.deps, found)
        output: ToolOutput = await self._runner.run(
            found, tool_args, tool_call_id=ctx.tool_call_id, context=context
        )
        if not output.is_error:
            return output.text
        if self._runner.retries(output):
            raise ModelRetry(output.text)
        raise ToolFailed(output.text)


def _context_from_deps(deps: object, tool: Tool) -> AgentContext | None:
    if isinstance(deps, ToolExecutor):
        return DefaultContext.from_executor(deps)
    if isinstance(deps, AgentContext):
        return deps
    if tool.context_parameter is None:
        return None
    raise TypeError(
        f"tool {tool.name} needs an agent context: give PydanticAIToolset a context "
        f"or an executor, or run the agent with deps that are one (got {type(deps).__name__})"
    )
