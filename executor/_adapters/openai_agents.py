"""Executor tools as OpenAI Agents SDK tools (`pip install 'tool-executor[openai-agents]'`).

```python
tools = openai_agents_tools([run, read_file], LocalExecutor("/srv/checkout"))
agent = Agent(name="dev", tools=tools)
```

The parameters are the tool's spec in OpenAI's strict form
(`Tool.spec_for("openai-responses")`): strict mode stays on, and an optional
parameter is nullable rather than required-by-surprise; `null` stands for its
default. Each call goes through `Tool.invoke`. The native tools
(`Toolset(native="openai")`: `shell`, `local_shell`, `apply_patch`) become
the SDK's own `ShellTool`, `LocalShellTool` and `ApplyPatchTool`, backed by
the executor: the model calls them as the tools it was trained on, and a
patch's operations are applied through the toolset's `apply_patch`. An invalid-arguments output is
a failure for the SDK's `failure_error_function`: by default its text (what
was wrong) goes back to the model to fix and call again; with `None` it
raises `ToolArgumentsRejected` through the run. The other failures (denied,
timed out, failed, executor error) are the tool's result: the model reads
the error and the exit code. An exception a tool raises goes to the failure
function too (by default the SDK's words, which keep its details from the
model).
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from executor._adapters.common import RETRY_KINDS, ToolRunner, import_framework
from executor._agents.events import ToolCallEvents
from executor._core.base import ToolExecutor
from executor._tools.tools import AgentContext, DefaultContext, Tool, ToolOutputKind

import_framework("agents", "openai-agents", "openai-agents")

from agents import (  # noqa: E402
    ApplyPatchOperation,
    ApplyPatchResult,
    ApplyPatchTool,
    FunctionTool,
    LocalShellCommandRequest,
    LocalShellTool,
    RunContextWrapper,
    ShellCallOutcome,
    ShellCommandOutput,
    ShellCommandRequest,
    ShellResult,
    ShellTool,
    Tool as AgentsTool,
)
from agents.tool import default_tool_error_function  # noqa: E402
from agents.tool_context import ToolContext  # noqa: E402

FailureFunction = Callable[[RunContextWrapper[Any], Exception], str | Awaitable[str]]
"""The SDK's `failure_error_function`: the text the model gets for a failed call."""


class ToolArgumentsRejected(Exception):
    """The tool refused the model's arguments; the message says what was wrong."""


def default_failure(context: RunContextWrapper[Any], error: Exception) -> str:
    """The model's text for a failed call: what was wrong with its arguments, else the SDK's."""
    if isinstance(error, ToolArgumentsRejected):
        return str(error)
    return default_tool_error_function(context, error)


def openai_agents_tool(
    tool: Tool,
    context: AgentContext | ToolExecutor | None = None,
    *,
    events: ToolCallEvents | None = None,
    retry_on: Iterable[ToolOutputKind] = RETRY_KINDS,
    failure_error_function: FailureFunction | None = default_failure,
    strict: bool | None = None,
) -> AgentsTool:
    """One executor `Tool` as an OpenAI Agents SDK `FunctionTool`, or its native tool.

    A tool declared natively for the Responses API (`Tool.native`: OpenAI's
    `shell`, `local_shell`, `apply_patch`) becomes the SDK's `ShellTool`,
    `LocalShellTool` or `ApplyPatchTool` over the same call.

    Args:
        tool: The tool.
        context: The agent context (or executor) the tool gets. `None` takes
            the run's context (`Runner.run(..., context=...)`) when it is an
            `AgentContext` or a `ToolExecutor`.
        events: Run each call through this `ToolCallEvents`, which reports it
            as agent stream events (under the SDK's tool call id) in its own
            context.
        retry_on: The failure kinds handed to `failure_error_function`
            (`INVALID_ARGUMENTS` by default).
        failure_error_function: The text the model gets for those failures
            and for exceptions; `None` raises them through the run instead.
        strict: Strict mode: `None` where the schema has a strict form (most
            have), `True` insisting (a `TypeError` otherwise), `False` off.

    Raises:
        TypeError: Not a `Tool`, a context of another type, or `strict=True`
            for a schema without a strict form.
        ValueError: Both `context` and `events`.
    """
    runner = ToolRunner([tool], context, events=events, retry_on=retry_on)
    native = tool.native.get("openai-responses", {}).get("type")
    if native in _NATIVE:
        return _NATIVE[native](runner, tool)
    spec = tool.spec_for("openai-responses", strict=strict, native=False)

    async def failed(ctx: RunContextWrapper[Any], error: Exception) -> str:
        if failure_error_function is None:
            raise error
        text = failure_error_function(ctx, error)
        return await text if inspect.isawaitable(text) else text

    async def invoke(ctx: ToolContext[Any], arguments: str) -> str:
        given: AgentContext | None = None
        if runner.context is None and runner.events is None:
            given = _context_from_run(ctx.context, tool)
        try:
            output = await runner.run(
                tool, arguments, tool_call_id=ctx.tool_call_id or None, context=given
            )
        except Exception as error:
            return await failed(ctx, error)
        if output.is_error and runner.retries(output):
            return await failed(ctx, ToolArgumentsRejected(output.text))
        return output.text

    return FunctionTool(
        name=tool.name,
        description=tool.description,
        params_json_schema=spec["parameters"],
        on_invoke_tool=invoke,
        strict_json_schema=spec["strict"],
    )


def openai_agents_tools(
    tools: Iterable[Tool],
    context: AgentContext | ToolExecutor | None = None,
    *,
    events: ToolCallEvents | None = None,
    retry_on: Iterable[ToolOutputKind] = RETRY_KINDS,
    failure_error_function: FailureFunction | None = default_failure,
    strict: bool | None = None,
) -> list[AgentsTool]:
    """Executor `Tool`s as `FunctionTool`s, for `Agent(tools=...)`; see `openai_agents_tool`.

    Raises:
        ValueError: Two tools share a name (and as `openai_agents_tool`).
    """
    checked = ToolRunner(tools, None, events=None, retry_on=retry_on).tools
    return [
        openai_agents_tool(
            tool,
            context,
            events=events,
            retry_on=retry_on,
            failure_error_function=failure_error_function,
            strict=strict,
        )
        for tool in checked
    ]


def _context_from_run(run_context: object, tool: Tool) -> AgentContext | None:
    if isinstance(run_context, ToolExecutor):
        return DefaultContext.from_executor(run_context)
    if isinstance(run_context, AgentContext):
        return run_context
    if tool.context_parameter is None:
        return None
    raise TypeError(
        f"tool {tool.name} needs an agent context: give openai_agents_tool a context or an "
        f"executor, or run the agent with one as its context (got {type(run_context).__name__})"
    )


# --- the native tools -------------------------------------------------------------------


async def _call(runner: ToolRunner, tool: Tool, arguments: dict[str, Any], run: Any) -> Any:
    """Invoke `tool` on `arguments` for a native tool's request, with the run's context."""
    given = None
    if runner.context is None and runner.events is None:
        given = _context_from_run(getattr(run, "context", None), tool)
    return await runner.run(tool, json.dumps(arguments), context=given)


def _shell_tool(runner: ToolRunner, tool: Tool) -> AgentsTool:
    """The SDK's `ShellTool`, each request run by our `shell` tool, outcome by outcome."""

    async def execute(request: ShellCommandRequest) -> ShellResult | str:
        action = request.data.action
        arguments: dict[str, Any] = {"commands": list(action.commands)}
        if action.timeout_ms is not None:
            arguments["timeout_ms"] = action.timeout_ms
        if action.max_output_length is not None:
            arguments["max_output_length"] = action.max_output_length
        output = await _call(runner, tool, arguments, request.ctx_wrapper)
        if output.is_error:
            return str(output.text)
        answer = json.loads(output.text)
        return ShellResult(
            output=[
                ShellCommandOutput(
                    stdout=each["stdout"],
                    stderr=each["stderr"],
                    outcome=ShellCallOutcome(
                        type=each["outcome"]["type"], exit_code=each["outcome"].get("exit_code")
                    ),
                    command=each["command"],
                )
                for each in answer["output"]
            ],
            max_output_length=answer.get("max_output_length"),
        )

    return ShellTool(executor=execute, name=tool.name)


def _local_shell_tool(runner: ToolRunner, tool: Tool) -> AgentsTool:
    """The SDK's `LocalShellTool`, each `exec` action run by our `local_shell` tool."""

    async def execute(request: LocalShellCommandRequest) -> str:
        action = request.data.action
        arguments: dict[str, Any] = {"command": list(action.command)}
        if action.env:
            arguments["env"] = dict(action.env)
        for name in ("timeout_ms", "working_directory", "user"):
            value = getattr(action, name, None)
            if value is not None:
                arguments[name] = value
        output = await _call(runner, tool, arguments, request.ctx_wrapper)
        return str(output.text)

    return LocalShellTool(executor=execute)


class _Editor:
    """The SDK's `ApplyPatchEditor`: each operation applied as a one-file V4A patch."""

    def __init__(self, runner: ToolRunner, tool: Tool) -> None:
        self._runner = runner
        self._tool = tool

    async def _apply(self, operation: ApplyPatchOperation, body: str) -> ApplyPatchResult:
        patch = f"*** Begin Patch\n{body}*** End Patch\n"
        output = await _call(self._runner, self._tool, {"input": patch}, operation.ctx_wrapper)
        if output.is_error:
            return ApplyPatchResult(status="failed", output=output.text)
        return ApplyPatchResult(status="completed", output=output.text)

    async def create_file(self, operation: ApplyPatchOperation) -> ApplyPatchResult:
        """Add the file, its lines the `+` lines of the operation's diff."""
        diff = _lines(operation.diff or "")
        return await self._apply(operation, f"*** Add File: {operation.path}\n{diff}")

    async def update_file(self, operation: ApplyPatchOperation) -> ApplyPatchResult:
        """Apply the operation's hunks to the file (and move it, with `move_to`)."""
        moved = f"*** Move to: {operation.move_to}\n" if operation.move_to else ""
        diff = _lines(operation.diff or "")
        return await self._apply(operation, f"*** Update File: {operation.path}\n{moved}{diff}")

    async def delete_file(self, operation: ApplyPatchOperation) -> ApplyPatchResult:
        """Delete the file."""
        return await self._apply(operation, f"*** Delete File: {operation.path}\n")


def _lines(diff: str) -> str:
    return diff if not diff or diff.endswith("\n") else diff + "\n"


def _apply_patch_tool(runner: ToolRunner, tool: Tool) -> AgentsTool:
    """The SDK's `ApplyPatchTool`, its operations applied by our `apply_patch` tool."""
    return ApplyPatchTool(editor=_Editor(runner, tool), name=tool.name)


_NATIVE: dict[str, Callable[[ToolRunner, Tool], AgentsTool]] = {
    "shell": _shell_tool,
    "local_shell": _local_shell_tool,
    "apply_patch": _apply_patch_tool,
}
