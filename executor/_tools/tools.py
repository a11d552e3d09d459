"""Tools for agents: a function's signature becomes a JSON-schema spec and a checked call.

```python
@tool
async def count_lines(context: AgentContext, path: WorkspacePath) -> str:
    '''Counts the lines of a file in the workspace.

Args:
        path: File path relative to the workspace root.
    '''
    output = await context.executor().exec_cmd(Command.read_file(path))
    return str(len(output.text().splitlines()))

result = await count_lines.invoke(context, '{"path": "src/main.py"}')
```

A model's arguments are parsed into the declared types before the body runs;
a bad argument, and a command that fails, come back to the model as a
`ToolOutput` with `is_error=True` and a message that says what was wrong,
instead of an exception through the agent.
"""

from __future__ import annotations

import enum
import inspect
import json
import re
import types
import typing
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import attrs

from executor._core.base import ToolExecutor
from executor._core.errors import CommandError, InvalidArgument
from executor._core.output import CommandOutput

__all__ = ["AgentContext", "DefaultContext", "Tool", "ToolOutput", "tool"]


@runtime_checkable
class AgentContext(Protocol):
    """What a tool gets from the agent: at least the executor to run commands with."""

    def executor(self) -> ToolExecutor:
        """The executor this agent's tools run commands through."""
        ...


@attrs.define(eq=False)
class DefaultContext:
    """A plain agent context that holds an executor.

    Use `DefaultContext.from_executor(ex)`; `context.executor()` returns it.
    """

    _executor: ToolExecutor

    @classmethod
    def from_executor(cls, executor: ToolExecutor) -> DefaultContext:
        """Build a context whose tools run commands through `executor`."""
        if not isinstance(executor, ToolExecutor):
            raise TypeError(f"expected a ToolExecutor, got {type(executor).__name__}")
        return cls(executor)

    def executor(self) -> ToolExecutor:
        """The executor this agent's tools run commands through."""
        return self._executor


@attrs.frozen
class ToolOutput:
    """What a tool hands back to the model.

    Attributes:
        text: The text for the model.
        is_error: Whether the call failed (bad arguments, a failed command);
            the text then says why.
    """

    text: str
    is_error: bool = False

    @classmethod
    def error(cls, text: str) -> ToolOutput:
        """An error message for the model."""
        return cls(text, is_error=True)


class _Unset:
    pass


_UNSET = _Unset()


@attrs.frozen
class _Parameter:
    name: str
    annotation: Any
    default: Any
    description: str | None

    @property
    def required(self) -> bool:
        return self.default is _UNSET


@attrs.define(eq=False)
class Tool:
    """A function an agent can call, with its JSON-schema spec.

    Build one with `@tool`. Calling the tool object calls the function as it
    is; `invoke` parses a model's JSON arguments first.
    """

    function: Callable[..., Awaitable[Any]]
    name: str
    description: str
    parameters: tuple[_Parameter, ...]
    context_parameter: str | None

    @property
    def spec(self) -> dict[str, Any]:
        """The tool's spec in the JSON-schema form function-calling APIs take."""
        properties: dict[str, Any] = {}
        for parameter in self.parameters:
            schema = json_schema(parameter.annotation)
            if parameter.description:
                schema = {**schema, "description": parameter.description}
            if not parameter.required and _json_safe(parameter.default):
                schema = {**schema, "default": parameter.default}
            properties[parameter.name] = schema
        return {
            "name": self.name,
            "description": self.description,
            "parameters": {
                "type": "object",
                "properties": properties,
                "required": [p.name for p in self.parameters if p.required],
                "additionalProperties": False,
            },
        }

    def parse_arguments(self, arguments: str | Mapping[str, Any] | None) -> dict[str, Any]:
        """Parse a model's arguments into the declared types.

        Raises:
            InvalidArgument: A message for the model naming what was wrong.
        """
        if arguments is None or arguments == "":
            raw: Any = {}
        elif isinstance(arguments, str):
            try:
                raw = json.loads(arguments)
            except json.JSONDecodeError as error:
                raise InvalidArgument(
                    arguments, f"arguments must be a JSON object: {error}"
                ) from None
        else:
            raw = dict(arguments)
        if not isinstance(raw, dict):
            raise InvalidArgument(raw, "arguments must be a JSON object")
        known = {p.name for p in self.parameters}
        unknown = sorted(set(raw) - known)
        if unknown:
            takes = ", ".join(p.name for p in self.parameters) or "no arguments"
            raise InvalidArgument(
                ", ".join(unknown), f"unknown argument; {self.name} takes: {takes}"
            )
        parsed: dict[str, Any] = {}
        for parameter in self.parameters:
            if parameter.name not in raw:
                if parameter.required:
                    raise InvalidArgument(raw, f"missing required argument {parameter.name!r}")
                continue
            try:
                parsed[parameter.name] = convert(raw[parameter.name], parameter.annotation)
            except InvalidArgument as error:
                raise InvalidArgument(
                    error.value, f"argument {parameter.name!r}: {error.rule}"
                ) from None
        return parsed

    async def invoke(
        self, context: AgentContext | None, arguments: str | Mapping[str, Any] | None
    ) -> ToolOutput:
        """Run the tool on a model's arguments and return what the model should see.

        Bad arguments, `InvalidArgument` raised by the body, and a
        `CommandError` (a failed command, a refusal) become an error
        `ToolOutput`; any other exception propagates.
        """
        try:
            kwargs = self.parse_arguments(arguments)
        except InvalidArgument as error:
            return ToolOutput.error(f"{self.name} was not run: {error}")
        if self.context_parameter is not None:
            if context is None:
                raise TypeError(f"tool {self.name} needs an agent context")
            kwargs[self.context_parameter] = context
        try:
            result = await self.function(**kwargs)
        except InvalidArgument as error:
            return ToolOutput.error(str(error))
        except CommandError as error:
            return ToolOutput.error(str(error))
        return _to_output(result)

    async def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return await self.function(*args, **kwargs)


def _to_output(result: object) -> ToolOutput:
    if isinstance(result, ToolOutput):
        return result
    if isinstance(result, str):
        return ToolOutput(result)
    if isinstance(result, CommandOutput):
        return ToolOutput(result.text())
    if result is None:
        return ToolOutput("")
    return ToolOutput(json.dumps(result, default=str))


def _json_safe(value: object) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


_ARG_LINE = re.compile(r"^\s*[-*]?\s*`?(\w+)`?\s*(?:\([^)]*\))?\s*:\s*(.*)$")


def _parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """Split a Google-style docstring (or swiftide's `# Arguments` list) into text and arguments."""
    lines = inspect.cleandoc(doc).splitlines()
    description: list[str] = []
    arguments: dict[str, str] = {}
    section: str | None = None
    current: str | None = None
    for line in lines:
        stripped = line.strip()
        heading = stripped.rstrip(":").lstrip("# ").lower()
        if (stripped.endswith(":") and heading in {"args", "arguments", "parameters"}) or (
            stripped.startswith("#") and heading in {"arguments", "args", "parameters"}
        ):
            section, current = "args", None
            continue
        if stripped.endswith(":") and heading in {"returns", "raises", "yields", "examples"}:
            section, current = "other", None
            continue
        if section == "args":
            match = _ARG_LINE.match(line)
            if match and (line.startswith(("    ", "-", "*", "`")) or line[:1].isalpha()):
                current = match.group(1)
                arguments[current] = match.group(2).strip()
            elif current and stripped:
                arguments[current] = f"{arguments[current]} {stripped}".strip()
            continue
        if section is None:
            description.append(line)
    return "\n".join(description).strip(), arguments


def _is_context(annotation: Any, name: str) -> bool:
    if isinstance(annotation, type):
        try:
            return issubclass(annotation, AgentContext | DefaultContext)
        except TypeError:
            return False
    return name == "context" and annotation is inspect.Parameter.empty


@typing.overload
def tool(function: Callable[..., Awaitable[Any]], /) -> Tool: ...


@typing.overload
def tool(
    *, name: str | None = None, description: str | None = None
) -> Callable[[Callable[..., Awaitable[Any]]], Tool]: ...


def tool(
    function: Callable[..., Awaitable[Any]] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
) -> Tool | Callable[[Callable[..., Awaitable[Any]]], Tool]:
    """Turn an async function into a `Tool` (use as `@tool` or `@tool(name=...)`).

    The name is the function's unless given; the description is the
    docstring's text before its `Args:` section; each argument's description
    comes from that section. A parameter annotated with `AgentContext` (or
    named `context`) receives the agent's context and is left out of the spec.
    """

    def build(func: Callable[..., Awaitable[Any]]) -> Tool:
        if not inspect.iscoroutinefunction(func):
            raise TypeError(f"@tool needs an async function, got {func!r}")
        text, argument_docs = _parse_docstring(func.__doc__ or "")
        hints = typing.get_type_hints(func)
        parameters: list[_Parameter] = []
        context_parameter: str | None = None
        for parameter in inspect.signature(func).parameters.values():
            annotation = hints.get(parameter.name, inspect.Parameter.empty)
            if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
                raise TypeError(f"@tool cannot describe *{parameter.name} in {func.__name__}")
            if context_parameter is None and _is_context(annotation, parameter.name):
                context_parameter = parameter.name
                continue
            if annotation is inspect.Parameter.empty:
                raise TypeError(
                    f"@tool needs a type annotation on {func.__name__}({parameter.name})"
                )
            json_schema(annotation)  # fail at decoration time on a type we cannot describe
            parameters.append(
                _Parameter(
                    name=parameter.name,
                    annotation=annotation,
                    default=_UNSET if parameter.default is parameter.empty else parameter.default,
                    description=argument_docs.get(parameter.name),
                )
            )
        return Tool(
            function=func,
            name=name or func.__name__,
            description=description if description is not None else text,
            parameters=tuple(parameters),
            context_parameter=context_parameter,
        )

    if function is not None:
        return build(function)
    return build


# --- types: JSON schema and conversion ------------------------------------------------

_NoneType = type(None)


def _union_args(annotation: Any) -> tuple[Any, ...] | None:
    origin = typing.get_origin(annotation)
    if origin is typing.Union or origin is types.UnionType:
        return typing.get_args(annotation)
    return None


def json_schema(annotation: Any) -> dict[str, Any]:
    """The JSON schema of a parameter type.

    Handles str, int, float, bool, None, lists, tuples, dicts with str keys,
    unions and optionals, Literal, Enum, types with a `__json_schema__()`
    classmethod (the validated argument types), and pydantic models.

    Raises:
        TypeError: For a type it cannot describe.
    """
    if annotation is str:
        return {"type": "string"}
    if annotation is bool:
        return {"type": "boolean"}
    if annotation is int:
        return {"type": "integer"}
    if annotation is float:
        return {"type": "number"}
    if annotation is _NoneType or annotation is None:
        return {"type": "null"}
    if annotation is Any:
        return {}
    custom = getattr(annotation, "__json_schema__", None)
    if callable(custom):
        return dict(custom())
    union = _union_args(annotation)
    if union is not None:
        return {"anyOf": [json_schema(arg) for arg in union]}
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Literal:
        return {"enum": list(args)}
    if origin in (list, Sequence, set, frozenset) or annotation in (list, set, frozenset):
        items = json_schema(args[0]) if args else {}
        return {"type": "array", "items": items}
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return {"type": "array", "items": json_schema(args[0])}
        return {
            "type": "array",
            "prefixItems": [json_schema(a) for a in args],
            "minItems": len(args),
            "maxItems": len(args),
        }
    if origin in (dict, Mapping):
        if args and args[0] is not str:
            raise TypeError(f"JSON object keys are strings; cannot describe {annotation!r}")
        return {"type": "object", "additionalProperties": json_schema(args[1]) if args else {}}
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return {"enum": [member.value for member in annotation]}
    pydantic_schema = getattr(annotation, "model_json_schema", None)
    if callable(pydantic_schema):
        return dict(pydantic_schema())
    raise TypeError(f"@tool cannot describe the type {annotation!r}")


def _item(index: int, value: Any, annotation: Any) -> Any:
    try:
        return convert(value, annotation)
    except InvalidArgument as error:
        raise InvalidArgument(value, f"item {index}: {error.rule}") from None


def _pydantic_message(error: ValueError) -> str:
    # pydantic's own text repeats the input and adds links; a model needs where and what.
    errors = getattr(error, "errors", None)
    if not callable(errors):
        return str(error)
    parts = []
    for item in errors():
        where = ".".join(str(part) for part in item.get("loc", ())) or "value"
        parts.append(f"{where}: {item.get('msg', 'invalid')}")
    return "; ".join(parts)


def convert(value: Any, annotation: Any) -> Any:
    """Convert a JSON value into `annotation`, or raise `InvalidArgument` saying why."""
    if annotation is Any:
        return value
    if annotation is str:
        if not isinstance(value, str):
            raise InvalidArgument(value, "expected a string")
        return value
    if annotation is bool:
        if not isinstance(value, bool):
            raise InvalidArgument(value, "expected true or false")
        return value
    if annotation is int:
        # Models send "5" as often as 5; text of digits is taken, "5.5" and "1e3" are not.
        if isinstance(value, str) and re.fullmatch(r"[+-]?[0-9]{1,30}", value.strip()):
            return int(value)
        if isinstance(value, bool) or not (
            isinstance(value, int) or (isinstance(value, float) and value.is_integer())
        ):
            raise InvalidArgument(value, "expected an integer")
        return int(value)
    if annotation is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise InvalidArgument(value, "expected a number")
        return float(value)
    if annotation is _NoneType or annotation is None:
        if value is not None:
            raise InvalidArgument(value, "expected null")
        return None
    union = _union_args(annotation)
    if union is not None:
        rules = []
        for option in union:
            try:
                return convert(value, option)
            except InvalidArgument as error:
                rules.append(error.rule)
        raise InvalidArgument(value, " or ".join(dict.fromkeys(rules)))
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Literal:
        if value not in args or type(value) not in {type(a) for a in args}:
            raise InvalidArgument(value, f"expected one of {list(args)}")
        return value
    if origin in (list, Sequence, set, frozenset) or annotation in (list, set, frozenset):
        if not isinstance(value, list):
            raise InvalidArgument(value, "expected a list")
        items = [_item(index, item, args[0]) if args else item for index, item in enumerate(value)]
        container = origin or annotation
        return items if container in (list, Sequence) else container(items)
    if origin is tuple:
        if not isinstance(value, list):
            raise InvalidArgument(value, "expected a list")
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_item(index, item, args[0]) for index, item in enumerate(value))
        if len(value) != len(args):
            raise InvalidArgument(value, f"expected a list of {len(args)} items")
        return tuple(convert(item, arg) for item, arg in zip(value, args, strict=True))
    if origin in (dict, Mapping):
        if not isinstance(value, dict):
            raise InvalidArgument(value, "expected an object")
        return {k: convert(v, args[1]) if args else v for k, v in value.items()}
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        try:
            return annotation(value)
        except ValueError:
            raise InvalidArgument(
                value, f"expected one of {[m.value for m in annotation]}"
            ) from None
    validate = getattr(annotation, "model_validate", None)
    if callable(validate):
        try:
            return validate(value)
        except ValueError as error:
            raise InvalidArgument(value, _pydantic_message(error)) from None
    if isinstance(annotation, type):
        # Validated argument types take the raw value and raise InvalidArgument.
        try:
            return annotation(value)
        except InvalidArgument:
            raise
        except (TypeError, ValueError) as error:
            raise InvalidArgument(value, str(error)) from None
    raise InvalidArgument(value, f"cannot convert to {annotation!r}")
