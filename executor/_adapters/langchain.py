"""Executor tools as LangChain structured tools (`pip install 'tool-executor[langchain]'`).

```python
tools = langchain_tools([run, read_file], LocalExecutor("/srv/checkout"))
message = await tools[0].ainvoke(ai_message.tool_calls[0])  # a ToolMessage
```

Each call goes through `Tool.invoke`: the tool's own types check the
arguments, and the command runs through the executor. A success is the
output's text, with the `ToolOutput` itself as the message's `artifact`. A
failure raises `ToolException` (`ToolCallFailed`, holding the `ToolOutput`),
which LangChain turns into a `ToolMessage` with `status="error"` and the
output's text, for the model to act on: invalid arguments always (they are
the model's to fix and call again, `InvalidToolArguments`), the other kinds
unless `on_failure="raise"`, which lets them propagate instead.
"""

from __future__ import annotations

from collections.abc import Iterable
from contextvars import ContextVar
from typing import Any, Literal

from executor._adapters.common import RETRY_KINDS, ToolRunner, import_framework
from executor._agents.events import ToolCallEvents
from executor._core.base import ToolExecutor
from executor._tools.tools import AgentContext, Tool, ToolOutput, ToolOutputKind

import_framework("langchain_core", "langchain", "langchain-core")

from langchain_core.runnables import RunnableConfig  # noqa: E402
from langchain_core.tools import StructuredTool, ToolException  # noqa: E402

_tool_call_id: ContextVar[str | None] = ContextVar("executor_langchain_tool_call", default=None)


class ToolCallFailed(ToolException):
    """A tool call failed; LangChain reports it as an error `ToolMessage`.

    Attributes:
        output: The `ToolOutput`: its text is the message, its kind what failed.
    """

    def __init__(self, output: ToolOutput) -> None:
        super().__init__(output.text)
        self.output = output


class InvalidToolArguments(ToolCallFailed):
    """The model's arguments were refused: its to fix and call again."""


class _ExecutorTool(StructuredTool):
    """A `StructuredTool` that remembers the id of the tool call it is invoked with."""

    async def ainvoke(
        self, input: str | dict[str, Any] | Any, config: RunnableConfig | None = None, **kwargs: Any
    ) -> Any:
        call_id = (
            input.get("id")
            if isinstance(input, dict) and input.get("type") == "tool_call"
            else None
        )
        token = _tool_call_id.set(call_id if isinstance(call_id, str) and call_id else None)
        try:
            return await super().ainvoke(input, config, **kwargs)
        finally:
            _tool_call_id.reset(token)


def langchain_tool(
    tool: Tool,
    context: AgentContext | ToolExecutor | None = None,
    *,
    events: ToolCallEvents | None = None,
    retry_on: Iterable[ToolOutputKind] = RETRY_KINDS,
    on_failure: Literal["message", "raise"] = "message",
) -> StructuredTool:
    """One executor `Tool` as a LangChain `StructuredTool` (async: `ainvoke`).

    Args:
        tool: The tool.
        context: The agent context (or executor) the tool gets; `None` for a
            tool that takes none, or with `events`.
        events: Run each call through this `ToolCallEvents`, which reports it
            as agent stream events (under the LangChain tool call's id) in its
            own context.
        retry_on: The failure kinds that are the model's to fix
            (`InvalidToolArguments`, always an error message).
        on_failure: What the other failures become: `"message"` an error
            `ToolMessage` (LangChain's `handle_tool_error`), `"raise"` the
            `ToolCallFailed` exception through the caller.

    Raises:
        TypeError: Not a `Tool`, or a context of another type.
        ValueError: Both `context` and `events`, or an unknown `on_failure`.
    """
    if on_failure not in ("message", "raise"):
        raise ValueError(f"on_failure must be 'message' or 'raise', got {on_failure!r}")
    runner = ToolRunner([tool], context, events=events, retry_on=retry_on)

    async def call(**arguments: Any) -> tuple[str, ToolOutput]:
        output = await runner.run(tool, arguments, tool_call_id=_tool_call_id.get())
        if not output.is_error:
            return output.text, output
        if runner.retries(output):
            raise InvalidToolArguments(output)
        raise ToolCallFailed(output)

    def handle(error: ToolException) -> str:
        if on_failure == "raise" and not isinstance(error, InvalidToolArguments):
            raise error
        return str(error)

    return _ExecutorTool(
        name=tool.name,
        description=tool.description,
        args_schema=tool.spec["parameters"],
        coroutine=call,
        handle_tool_error=handle,
        response_format="content_and_artifact",
    )


def langchain_tools(
    tools: Iterable[Tool],
    context: AgentContext | ToolExecutor | None = None,
    *,
    events: ToolCallEvents | None = None,
    retry_on: Iterable[ToolOutputKind] = RETRY_KINDS,
    on_failure: Literal["message", "raise"] = "message",
) -> list[StructuredTool]:
    """Executor `Tool`s as LangChain `StructuredTool`s; see `langchain_tool` for the arguments.

    Raises:
        ValueError: Two tools share a name (and as `langchain_tool`).
    """
    checked = ToolRunner(tools, None, events=None, retry_on=retry_on).tools
    return [
        langchain_tool(tool, context, events=events, retry_on=retry_on, on_failure=on_failure)
        for tool in checked
    ]
