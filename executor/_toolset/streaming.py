"""A streaming tool (terminal, log tailer, code interpreter) as an ordinary `Tool` of the toolset.

A `StreamingTool` takes one typed input and streams chunks before a final
value; an agent's function-calling API wants a function with arguments and
one result. `streaming_tool` bridges the two: the input's fields become the
tool's parameters (with the descriptions its docstring's `Attributes:` gives
them), the run goes through a `StreamingToolSession` (so the tool's own
policy decides what the model's context keeps), each chunk's text goes to
the context's `on_output` sink as it comes, and the result is the text the
policy held, then the final value, cut to the toolset's budget.

`streaming_tools` makes the toolset's three: the terminal and the log tailer
new for each call, the code interpreter kept open, one per executor, in the
toolset's `Hosts` (its sessions outlive a call).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import re
import typing
from collections.abc import Awaitable, Callable
from typing import Any

import attrs

from executor._core.base import ToolExecutor, call_sink
from executor._core.output import CommandOutput, Stdout
from executor._core.render import for_model
from executor._tools.context import join_texts
from executor._tools.session import StreamingToolSession
from executor._tools.tool import StreamingTool
from executor._tools.tools import Tool, ToolOutput, ToolOutputKind, tool
from executor._toolset.context import ToolsetContext
from executor._toolset.hosting import Hosts
from executor._toolset.limits import Limits

_ATTRIBUTE = re.compile(r"^\s{4}(\w+):\s*(.*)$")
# The field of a streaming tool's input that bounds its run, in seconds.
_TIMEOUT = "timeout_secs"


def _fields(input_type: Callable[..., Any]) -> set[str]:
    """The field names of an input dataclass."""
    return {field.name for field in dataclasses.fields(input_type)}  # type: ignore[arg-type]


def _attributes(doc: str | None) -> dict[str, str]:
    """The `Attributes:` section of a Google-style docstring, name by name."""
    found: dict[str, str] = {}
    current: str | None = None
    inside = False
    for line in inspect.cleandoc(doc or "").splitlines():
        stripped = line.strip()
        if stripped.endswith(":") and stripped[:-1] in ("Attributes", "Raises", "Returns"):
            inside = stripped == "Attributes:"
            current = None
            continue
        if not inside:
            continue
        match = _ATTRIBUTE.match(line)
        if match:
            current = match.group(1)
            found[current] = match.group(2).strip()
        elif current is not None and stripped:
            found[current] = f"{found[current]} {stripped}"
    return found


def _outcome(final: object, text: str) -> ToolOutput:
    """The output of a final value, a failure where it says one: timed out, failed, an exit code."""
    exit_code = getattr(final, "exit_code", None)
    code = exit_code if isinstance(exit_code, int) and not isinstance(exit_code, bool) else None
    if getattr(final, "timed_out", False) is True:
        return ToolOutput(text, kind=ToolOutputKind.TIMED_OUT)
    if (code is not None and code != 0) or getattr(final, "success", True) is False:
        return ToolOutput(text, kind=ToolOutputKind.FAILED, exit_code=code)
    return ToolOutput(text, exit_code=code)


@attrs.frozen
class StreamingRun:
    """One call of a streaming tool, from the model's arguments to the output for the model.

    Attributes:
        input_type: The tool's input dataclass, made from the arguments.
        get: Gives the tool instance for a call's context.
        budget: Characters of text the result may hand the model.
        limits: The toolset's limits: a `timeout_secs` the model gives is at
            most the toolset's `max_timeout`, and one it leaves out is the
            toolset's timeout where the tool has no default of its own
            (`None`: the tool's own rules).
        own_timeout: Whether the tool bounds a run without `timeout_secs`
            itself (the code interpreter's `default_timeout`).
    """

    input_type: Callable[..., Any]
    get: Callable[[Any], Awaitable[StreamingTool[Any, Any, Any]]]
    budget: int
    limits: Limits | None = None
    own_timeout: bool = False

    async def __call__(self, context: Any, arguments: dict[str, Any]) -> ToolOutput:
        """Run the tool on `arguments`, its chunks' text going to the context's `on_output`."""
        given = arguments.get(_TIMEOUT)
        if self.limits is not None and _TIMEOUT in _fields(self.input_type):
            if given is not None:
                arguments = {**arguments, _TIMEOUT: self.limits.timeout_for(given)}
            elif not self.own_timeout:
                # As for every command of the toolset: a follow of a log, or a
                # terminal's program, left without a timeout would hold the
                # call (and the model) until the client gave up.
                arguments = {**arguments, _TIMEOUT: self.limits.timeout}
        # The dataclass checks its fields together (`__post_init__`): InvalidArgument.
        value = self.input_type(**arguments)
        instance = await self.get(context)
        sink = getattr(context, "on_output", None)
        async with StreamingToolSession(instance, value) as session:
            async for chunk in session:
                if callable(sink):
                    text = instance.render(chunk)
                    if text and not text.endswith("\n"):
                        text += "\n"
                    await call_sink(sink, Stdout(text.encode()))
            result = await session.finalize()
        held = [instance.render(chunk) for chunk in result.chunks]
        if result.summary:
            held.insert(0, f"[summary of earlier output] {result.summary}")
        held.append(instance.render(result.final))
        output = CommandOutput(chunks=(Stdout(join_texts(held).encode()),))
        return _outcome(result.final, for_model(output, budget=self.budget))


def streaming_tool(
    tool_type: type[StreamingTool[Any, Any, Any]],
    get: Callable[[Any], Awaitable[StreamingTool[Any, Any, Any]]],
    *,
    budget: int,
    limits: Limits | None = None,
    own_timeout: bool = False,
) -> Tool:
    """`tool_type` as a `Tool` whose parameters are the fields of its input dataclass.

    Args:
        tool_type: The streaming tool's class (its `name`, `description`
            and `input_type` are read from it).
        get: Gives the tool instance for a call's context (a new one, or
            one the toolset keeps open, as the code interpreter's sessions need).
        budget: Characters of text the result may hand the model.
        limits: The toolset's limits, which bound a `timeout_secs` field
            (see `StreamingRun`).
        own_timeout: Whether the tool bounds a run without `timeout_secs` itself.

    Raises:
        TypeError: The input type is not a dataclass.
    """
    input_type = tool_type.input_type
    if not (isinstance(input_type, type) and dataclasses.is_dataclass(input_type)):
        raise TypeError(f"{tool_type.__name__}'s input is no dataclass: {input_type!r}")
    hints = typing.get_type_hints(input_type, include_extras=True)
    described = _attributes(input_type.__doc__)
    parameters = [
        inspect.Parameter("context", inspect.Parameter.KEYWORD_ONLY, annotation=ToolsetContext)
    ]
    annotations: dict[str, Any] = {"context": ToolsetContext, "return": ToolOutput}
    docs: list[str] = []
    for field in dataclasses.fields(input_type):
        default: Any = inspect.Parameter.empty
        if field.default is not dataclasses.MISSING:
            default = field.default
        elif field.default_factory is not dataclasses.MISSING:
            default = field.default_factory()
        parameters.append(
            inspect.Parameter(
                field.name,
                inspect.Parameter.KEYWORD_ONLY,
                annotation=hints[field.name],
                default=default,
            )
        )
        annotations[field.name] = hints[field.name]
        if field.name in described:
            docs.append(f"    {field.name}: {described[field.name]}")

    run = StreamingRun(input_type, get, budget, limits, own_timeout)

    # The one thing a function of its own is needed for: the signature `tool` reads.
    async def call(**arguments: Any) -> ToolOutput:
        return await run(arguments.pop("context"), arguments)

    description = inspect.cleandoc(getattr(tool_type, "description", "") or "")
    doc = description + ("\n\nArgs:\n" + "\n".join(docs) if docs else "")
    call.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
    call.__annotations__ = annotations
    call.__doc__ = doc
    call.__name__ = call.__qualname__ = tool_type.name
    return tool(name=tool_type.name)(call)


def streaming_tools(budget: int, hosts: Hosts, limits: Limits | None = None) -> list[Tool]:
    """The built-in streaming tools (terminal, log tailer, code interpreter), each a `Tool`.

    Args:
        budget: Characters of text a result may hand the model.
        hosts: Where the toolset holds each executor's code interpreter open.
        limits: The toolset's limits: the longest timeout a call may ask
            for, and the one a terminal or a log's follow gets when the
            model gives none (a cell has the interpreter's own).
    """
    from executor._builtins.interpreter import CodeInterpreterTool
    from executor._builtins.logtail import LogTailerTool
    from executor._builtins.terminal import TerminalTool

    return [
        streaming_tool(
            TerminalTool, functools.partial(_new, TerminalTool), budget=budget, limits=limits
        ),
        streaming_tool(
            LogTailerTool, functools.partial(_new, LogTailerTool), budget=budget, limits=limits
        ),
        streaming_tool(
            CodeInterpreterTool,
            functools.partial(_interpreter, hosts),
            budget=budget,
            limits=limits,
            own_timeout=True,
        ),
    ]


async def _new(tool_type: Callable[[ToolExecutor], Any], context: Any) -> Any:
    """A new `tool_type` over the call's executor."""
    return tool_type(context.executor())


async def _interpreter(hosts: Hosts, context: Any) -> Any:
    """The code interpreter of the call's executor, opened once in `hosts` and kept open."""
    from executor._builtins.interpreter import CodeInterpreterTool

    executor: ToolExecutor = context.executor()
    return await hosts.open(
        "code interpreter", executor, lambda: CodeInterpreterTool(executor), False
    )
