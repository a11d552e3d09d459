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
instead of an exception through the agent. Its `kind` (a `ToolOutputKind`)
tells a framework which failure it was: the model's arguments to fix and
retry, a refusal, a timeout, a command the OOM killer ended, a command that
failed, or the executor.

Arguments are untrusted text, so `invoke` bounds them before parsing:
`max_argument_bytes` of JSON (1 MiB by default), `max_argument_depth` levels
of nesting (64), numbers of at most 4300 digits, and no `NaN` or `Infinity`
(not JSON). Anything past those is an invalid-argument `ToolOutput`, never
an exception (`RecursionError`, Python's int-string limit) through the agent.
"""

from __future__ import annotations

import base64
import dataclasses
import enum
import functools
import inspect
import json
import math
import re
import sys
import types
import typing
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import attrs

from executor._core.base import ToolExecutor
from executor._core.errors import (
    CommandError,
    InvalidArgument,
    NonZeroExit,
    OutOfMemory,
    PolicyDenied,
    TimedOut,
)
from executor._core.output import CommandOutput
from executor._core.render import for_model
from executor._tools.shapes import SHAPES, SpecShape, spec_in_shape


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


class ToolOutputKind(enum.Enum):
    """What became of a tool call: success, or which kind of failure.

    A framework maps these onto its own notions: `INVALID_ARGUMENTS` is the
    model's to fix and call again (pydantic-ai's `ModelRetry`); the others
    are the call's own failures, reported to the model as a tool result.

    Attributes:
        OK: The tool ran and succeeded.
        INVALID_ARGUMENTS: The arguments were refused (`InvalidArgument`,
            malformed or oversized JSON); the tool body did not run, or
            refused them itself.
        DENIED: A policy refused a command (`PolicyDenied`).
        TIMED_OUT: A command ran past its timeout (`TimedOut`).
        OUT_OF_MEMORY: A command failed because the kernel's OOM killer ended
            it or a process of its tree, past its memory limit (`OutOfMemory`;
            `ToolOutput.exit_code` holds its exit code).
        FAILED: A command ran and failed (`NonZeroExit`; `ToolOutput.exit_code`
            holds its exit code, `None` for a file command), or the tool
            reported a failure of its own (`ToolOutput.error`).
        EXECUTOR_ERROR: The executor itself failed (another `ExecutorError`
            or `CommandError`).
    """

    OK = "ok"
    INVALID_ARGUMENTS = "invalid_arguments"
    DENIED = "denied"
    TIMED_OUT = "timed_out"
    OUT_OF_MEMORY = "out_of_memory"
    FAILED = "failed"
    EXECUTOR_ERROR = "executor_error"


def _exit_code(value: object) -> int | None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
        raise TypeError(f"exit_code must be an int or None, got {value!r}")
    return value


@attrs.frozen(init=False)
class ToolOutput:
    """What a tool hands back to the model.

    `ToolOutput(text)` is a success; `ToolOutput.error(text)` (or the older
    `ToolOutput(text, is_error=True)`) a failure of kind `FAILED`.

    Attributes:
        text: The text for the model.
        kind: What became of the call (`ToolOutputKind.OK` unless it failed).
        exit_code: The exit code of the command behind the output, when
            known: set from a `NonZeroExit` and from a returned `CommandOutput`
            (not from a `TimedOut`, whose killed process's status says only
            that it was killed).
        is_error: Whether the call failed (any kind but `OK`); the text then
            says why.
    """

    text: str = attrs.field(validator=attrs.validators.instance_of(str))
    kind: ToolOutputKind = attrs.field(validator=attrs.validators.instance_of(ToolOutputKind))
    exit_code: int | None = attrs.field(converter=_exit_code)

    def __init__(
        self,
        text: str,
        is_error: bool | None = None,
        *,
        kind: ToolOutputKind | None = None,
        exit_code: int | None = None,
    ) -> None:
        """Build an output; give `kind`, or `is_error` for the plain OK/FAILED pair.

        Raises:
            ValueError: `is_error` contradicts `kind`.
        """
        if kind is None:
            kind = ToolOutputKind.FAILED if is_error else ToolOutputKind.OK
        elif is_error is not None and is_error != (kind is not ToolOutputKind.OK):
            raise ValueError(f"is_error={is_error} contradicts kind={kind.name}")
        self.__attrs_init__(text, kind, exit_code)

    @property
    def is_error(self) -> bool:
        """Whether the call failed: any kind but `OK`."""
        return self.kind is not ToolOutputKind.OK

    @classmethod
    def error(
        cls,
        text: str,
        *,
        kind: ToolOutputKind = ToolOutputKind.FAILED,
        exit_code: int | None = None,
    ) -> ToolOutput:
        """An error message for the model, of kind `FAILED` unless told otherwise.

        Raises:
            ValueError: `kind` is `OK`.
        """
        if kind is ToolOutputKind.OK:
            raise ValueError("an error needs a failure kind, not OK")
        return cls(text, kind=kind, exit_code=exit_code)

    @classmethod
    def from_error(cls, error: InvalidArgument | CommandError) -> ToolOutput:
        """The output for an exception a tool raised, its kind chosen by the error's type.

        Most specific first: `InvalidArgument` is `INVALID_ARGUMENTS`,
        `PolicyDenied` `DENIED`, `TimedOut` `TIMED_OUT`, `OutOfMemory`
        `OUT_OF_MEMORY` and any other `NonZeroExit` `FAILED` (both with the
        output's exit code), and any other `CommandError`
        (an `ExecutorError`, a `ToolStreamError`) `EXECUTOR_ERROR`.
        """
        if isinstance(error, InvalidArgument):
            return cls(str(error), kind=ToolOutputKind.INVALID_ARGUMENTS)
        if isinstance(error, PolicyDenied):
            return cls(_failure_text(error), kind=ToolOutputKind.DENIED)
        if isinstance(error, TimedOut):
            # The exit status of a killed process says only that it was killed.
            return cls(_failure_text(error), kind=ToolOutputKind.TIMED_OUT)
        if isinstance(error, OutOfMemory):
            return cls(
                _failure_text(error),
                kind=ToolOutputKind.OUT_OF_MEMORY,
                exit_code=error.output.exit_code,
            )
        if isinstance(error, NonZeroExit):
            return cls(
                _failure_text(error), kind=ToolOutputKind.FAILED, exit_code=error.output.exit_code
            )
        if isinstance(error, CommandError):
            return cls(_failure_text(error), kind=ToolOutputKind.EXECUTOR_ERROR)
        raise TypeError(f"expected an InvalidArgument or a CommandError, got {error!r}")


def _failure_text(error: CommandError) -> str:
    """What a model reads of a failure: the reason, then the output as `for_model` renders it."""
    body = for_model(error.output, status=False)
    if not body.strip() or body.strip() == error.message:
        return error.message
    return f"{error.message}\n{body}"


class _Unset:
    pass


_UNSET = _Unset()

# A model's arguments rarely reach a few kilobytes; a whole file written by a
# tool is the largest real case, and models emit well under 1 MiB in one turn.
_DEFAULT_MAX_ARGUMENT_BYTES = 1 << 20
# Real tool arguments nest a handful of levels; 64 keeps conversion, error
# messages (repr) and pydantic far from Python's recursion limit.
_DEFAULT_MAX_ARGUMENT_DEPTH = 64
# Python's own default int-string limit, applied whatever the interpreter's
# setting: int() on decimal text is quadratic, and a model needs no more.
_MAX_INT_DIGITS = 4300
_INT_LIMIT = 10**_MAX_INT_DIGITS


def _positive(instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{attribute.name} must be a positive int, got {value!r}")


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

    Attributes:
        max_argument_bytes: The largest arguments `invoke` parses, in bytes
            of JSON (UTF-8); larger is an invalid-argument error. 1 MiB by
            default.
        max_argument_depth: How deep the arguments may nest (the arguments
            object itself is level 1); 64 by default.
        native: The tool's native declaration by spec shape, for an API that
            has the tool as a type of its own (Anthropic's
            `{"type": "bash_20250124", "name": "bash"}`); `spec_for` gives it
            in place of the function spec.
    """

    function: Callable[..., Awaitable[Any]]
    name: str
    description: str
    parameters: tuple[_Parameter, ...]
    context_parameter: str | None
    max_argument_bytes: int = attrs.field(default=_DEFAULT_MAX_ARGUMENT_BYTES, validator=_positive)
    max_argument_depth: int = attrs.field(default=_DEFAULT_MAX_ARGUMENT_DEPTH, validator=_positive)
    native: Mapping[str, Mapping[str, Any]] = attrs.field(factory=dict, kw_only=True)

    @property
    def spec(self) -> dict[str, Any]:
        """The tool's spec in the JSON-schema form function-calling APIs take.

        Dataclasses and TypedDicts nested in a parameter are named under the
        parameters object's `$defs` and referred to by `$ref`, as pydantic
        does; so are the `$defs` of pydantic models.
        """
        builder = _SchemaBuilder()
        properties: dict[str, Any] = {}
        for parameter in self.parameters:
            schema = builder.schema(parameter.annotation, inline=True)
            if parameter.description:
                schema = {**schema, "description": parameter.description}
            if not parameter.required:
                default = _json_default(parameter.default)
                if default is not _UNSET:
                    schema = {**schema, "default": default}
            properties[parameter.name] = schema
        parameters: dict[str, Any] = {
            "type": "object",
            "properties": properties,
            "required": [p.name for p in self.parameters if p.required],
            "additionalProperties": False,
        }
        if builder.defs:
            parameters["$defs"] = builder.defs
        return {"name": self.name, "description": self.description, "parameters": parameters}

    def spec_for(
        self, shape: SpecShape, *, strict: bool | None = None, native: bool = True
    ) -> dict[str, Any]:
        """The tool's spec in the shape one model API takes (`spec` is OpenAI's function shape).

        A tool with a native declaration for `shape` (`Tool.native`) gives
        that, unless `native=False`. `"openai"` (Chat Completions) and
        `"openai-responses"` write strict mode where the parameters have a
        strict form: every property required, an optional one nullable,
        `null` standing for its default (which `invoke` honours).
        `"anthropic"` gives `input_schema`, `"mcp"` `inputSchema`, `"gemini"`
        a function declaration in Gemini's OpenAPI subset. See `spec_in_shape` for `strict`.

        Raises:
            ValueError: An unknown shape.
            TypeError: The parameters have no form in that shape (see
                `spec_in_shape`).
        """
        declared = self.native.get(shape) if native else None
        if declared is not None:
            if shape not in SHAPES:
                raise ValueError(
                    f"unknown spec shape {shape!r}; the shapes are: {', '.join(SHAPES)}"
                )
            return dict(declared)
        return spec_in_shape(self.spec, shape, strict=strict)

    def parse_arguments(self, arguments: str | Mapping[str, Any] | None) -> dict[str, Any]:
        """Parse a model's arguments into the declared types.

        A `null` for a parameter with a default, whose type does not itself
        take `None`, is taken as not given (the default applies), as OpenAI's
        strict mode sends an optional parameter; so is a `null` for such a
        field of a dataclass or TypedDict.

        Raises:
            InvalidArgument: A message for the model naming what was wrong,
                also for arguments past `max_argument_bytes` or
                `max_argument_depth`.
        """
        raw = load_arguments(
            arguments, max_bytes=self.max_argument_bytes, max_depth=self.max_argument_depth
        )
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
            if _null_for_default(raw.get(parameter.name, 0), parameter):
                continue
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
            except RecursionError:
                # Bounded depth keeps this away; a recursive type on a deep stack may not.
                raise InvalidArgument(
                    parameter.name, f"argument {parameter.name!r} nests too deeply to convert"
                ) from None
        return parsed

    async def invoke(
        self, context: AgentContext | None, arguments: str | Mapping[str, Any] | None
    ) -> ToolOutput:
        """Run the tool on a model's arguments and return what the model should see.

        Bad arguments (kind `INVALID_ARGUMENTS`, the text starting
        `"<name> was not run: "`), and `InvalidArgument` or a `CommandError`
        raised by the body (kind by the error's type, see
        `ToolOutput.from_error`) become an error `ToolOutput`; any other
        exception propagates.
        """
        try:
            kwargs = self.parse_arguments(arguments)
        except InvalidArgument as error:
            return ToolOutput.error(
                f"{self.name} was not run: {error}", kind=ToolOutputKind.INVALID_ARGUMENTS
            )
        if self.context_parameter is not None:
            if context is None:
                raise TypeError(f"tool {self.name} needs an agent context")
            kwargs[self.context_parameter] = context
        try:
            result = await self.function(**kwargs)
        except (InvalidArgument, CommandError) as error:
            return ToolOutput.from_error(error)
        return _to_output(result)

    async def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return await self.function(*args, **kwargs)


def _null_for_default(value: object, parameter: _Parameter | _Field) -> bool:
    """Whether `value` is a `null` standing for an optional parameter's default (strict mode)."""
    if value is not None or parameter.required:
        return False
    try:
        convert(None, parameter.annotation)
    except InvalidArgument:
        return True
    return False


def _to_output(result: object) -> ToolOutput:
    if isinstance(result, ToolOutput):
        return result
    if isinstance(result, str):
        return ToolOutput(result)
    if isinstance(result, CommandOutput):
        return ToolOutput(for_model(result, status=False), exit_code=result.exit_code)
    if result is None:
        return ToolOutput("")
    return ToolOutput(json.dumps(result, default=str))


def _json_safe(value: object) -> bool:
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return False
    return True


def _json_default(value: object) -> Any:
    """A default value as the schema shows it (an enum by its value), or `_UNSET`."""
    if isinstance(value, enum.Enum):
        value = value.value
    elif isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    return value if _json_safe(value) else _UNSET


# --- arguments as untrusted JSON ------------------------------------------------------


def _utf8_size(text: str) -> int:
    # surrogatepass: JSON can carry lone surrogates, which still take three bytes.
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def _parse_int(text: str) -> int:
    digits = len(text) - text.startswith("-")
    if digits > _MAX_INT_DIGITS:
        raise InvalidArgument(
            f"a number of {digits:,} digits", f"a number may have at most {_MAX_INT_DIGITS} digits"
        )
    return int(text)


def _refuse_constant(text: str) -> object:
    raise InvalidArgument(text, "not a JSON number (JSON has no NaN or Infinity)")


def _too_deep(max_depth: int) -> InvalidArgument:
    return InvalidArgument(
        f"JSON nested more than {max_depth} levels deep",
        f"the arguments may nest at most {max_depth} levels (max_argument_depth)",
    )


def _too_big(size: str, max_bytes: int) -> InvalidArgument:
    return InvalidArgument(
        f"{size} bytes of JSON",
        f"the arguments may be at most {max_bytes:,} bytes (max_argument_bytes)",
    )


def load_arguments(
    arguments: str | Mapping[str, Any] | None,
    *,
    max_bytes: int = _DEFAULT_MAX_ARGUMENT_BYTES,
    max_depth: int = _DEFAULT_MAX_ARGUMENT_DEPTH,
) -> Any:
    """A model's arguments (JSON text, or a mapping already decoded) as plain JSON values.

    `None` and `""` are `{}`. Text must be at most `max_bytes` of UTF-8; a
    mapping at most about that much once written as JSON. Either may nest at
    most `max_depth` levels, hold numbers of at most 4300 digits, and object
    keys that are strings; text must be standard JSON (no `NaN`, `Infinity`).

    Raises:
        InvalidArgument: What was wrong, with the size or depth and the limit;
            never `RecursionError` or Python's int-string `ValueError`.
    """
    if arguments is None or (isinstance(arguments, str) and not arguments):
        return {}
    if isinstance(arguments, str):
        size = _utf8_size(arguments)
        if size > max_bytes:
            raise _too_big(f"{size:,}", max_bytes)
        try:
            raw = json.loads(arguments, parse_int=_parse_int, parse_constant=_refuse_constant)
        except RecursionError:
            raise _too_deep(max_depth) from None
        except InvalidArgument:
            raise
        except ValueError as error:  # JSONDecodeError, or a lower int limit set by the host
            raise InvalidArgument(arguments, f"arguments must be a JSON object: {error}") from None
        _check_shape(raw, max_bytes=None, max_depth=max_depth)
        return raw
    if not isinstance(arguments, Mapping):
        # A caller's decoded JSON may be any value: a list of pairs would
        # otherwise pass as an object, a number raise TypeError.
        raise InvalidArgument(
            arguments, f"arguments must be a JSON object, not {type(arguments).__name__}"
        )
    raw = dict(arguments)
    size = _check_shape(raw, max_bytes=max_bytes, max_depth=max_depth)
    if size > max_bytes:
        raise _too_big(f"at least {size:,}", max_bytes)
    return raw


def _check_shape(value: Any, *, max_bytes: int | None, max_depth: int) -> int:
    """Check depth, numbers and keys without recursing; return the size as JSON, roughly.

    Counting stops once past `max_bytes` (the arguments are refused then);
    with `None`, string sizes are not counted.
    """
    size = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list | tuple):
            if depth > max_depth:
                raise _too_deep(max_depth)
            size += 2 + len(item)
            if isinstance(item, dict):
                for key, child in item.items():
                    if not isinstance(key, str):
                        raise InvalidArgument(
                            f"a {type(key).__name__} key", "object keys must be strings"
                        )
                    if max_bytes is not None:
                        size += _utf8_size(key) + 3
                    stack.append((child, depth + 1))
            else:
                stack.extend((child, depth + 1) for child in item)
        elif isinstance(item, bool) or item is None:
            size += 5
        elif isinstance(item, int):
            if abs(item) >= _INT_LIMIT:
                raise InvalidArgument(
                    f"a number of over {_MAX_INT_DIGITS} digits",
                    f"a number may have at most {_MAX_INT_DIGITS} digits",
                )
            size += item.bit_length() // 3 + 1
        elif isinstance(item, str):
            if max_bytes is not None:
                size += _utf8_size(item) + 2
        else:
            size += 8
        if max_bytes is not None and size > max_bytes:
            return size
    return size


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
    annotation = _strip_annotated(annotation)[0]
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
    *,
    name: str | None = None,
    description: str | None = None,
    max_argument_bytes: int = _DEFAULT_MAX_ARGUMENT_BYTES,
    max_argument_depth: int = _DEFAULT_MAX_ARGUMENT_DEPTH,
) -> Callable[[Callable[..., Awaitable[Any]]], Tool]: ...


def tool(
    function: Callable[..., Awaitable[Any]] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    max_argument_bytes: int = _DEFAULT_MAX_ARGUMENT_BYTES,
    max_argument_depth: int = _DEFAULT_MAX_ARGUMENT_DEPTH,
) -> Tool | Callable[[Callable[..., Awaitable[Any]]], Tool]:
    """Turn an async function into a `Tool` (use as `@tool` or `@tool(name=...)`).

    The name is the function's unless given; the description is the
    docstring's text before its `Args:` section; each argument's description
    comes from that section. A parameter annotated with `AgentContext` (or
    named `context`) receives the agent's context and is left out of the spec.
    See `json_schema` for the parameter types it takes, `Annotated`
    constraints included.

    Args:
        function: The async function (when used as `@tool`).
        name: The name the model calls it by.
        description: What it does, for the model.
        max_argument_bytes: The largest arguments `invoke` takes, in bytes of
            JSON; 1 MiB (1,048,576) by default. Raise it for a tool that is
            handed whole files.
        max_argument_depth: How many levels the arguments may nest; 64 by default.

    Raises:
        TypeError: The function is not async, a parameter has no annotation,
            or a type (or an `Annotated` constraint) cannot be described.
    """

    def build(func: Callable[..., Awaitable[Any]]) -> Tool:
        if not inspect.iscoroutinefunction(func):
            raise TypeError(f"@tool needs an async function, got {func!r}")
        text, argument_docs = _parse_docstring(func.__doc__ or "")
        # include_extras: Annotated constraints are part of the type.
        hints = typing.get_type_hints(func, include_extras=True)
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
            max_argument_bytes=max_argument_bytes,
            max_argument_depth=max_argument_depth,
        )

    if function is not None:
        return build(function)
    return build


# --- types: constraints from Annotated ------------------------------------------------

_NoneType = type(None)


def _strip_annotated(annotation: Any) -> tuple[Any, tuple[Any, ...]]:
    """`Annotated[T, *metadata]` as `(T, metadata)`; any other type with no metadata."""
    if typing.get_origin(annotation) is typing.Annotated:
        return typing.get_args(annotation)[0], tuple(annotation.__metadata__)
    return annotation, ()


@attrs.frozen
class _Constraints:
    """The rules of an `Annotated` type's metadata, and what its schema gains besides."""

    rules: tuple[tuple[str, Any], ...] = ()
    notes: tuple[tuple[str, Any], ...] = ()  # description, title, examples, json_schema_extra
    strict: bool = False


_NUMERIC_RULES = {
    "gt": "exclusiveMinimum",
    "ge": "minimum",
    "lt": "exclusiveMaximum",
    "le": "maximum",
    "multiple_of": "multipleOf",
}
_AT_RULES = {
    "Gt": "gt",
    "Ge": "ge",
    "Lt": "lt",
    "Le": "le",
    "MultipleOf": "multiple_of",
    "MinLen": "min_length",
    "MaxLen": "max_length",
}


def _annotated_types_rule(at: types.ModuleType | None, item: object) -> str | None:
    """The rule (`"ge"`, `"max_length"`, ...) of an `annotated_types` bound, or None."""
    if at is None:
        return None
    return next(
        (rule for name, rule in _AT_RULES.items() if isinstance(item, getattr(at, name))), None
    )


def _constraints(metadata: tuple[Any, ...]) -> _Constraints:
    """Read `annotated_types` constraints and pydantic `Field(...)` metadata.

    Neither package is imported here: an object of theirs exists only once
    its module is loaded, so `sys.modules` has it, and without them no
    metadata can be a constraint. Metadata of other kinds (strings, markers,
    `Doc`) is left alone.

    Raises:
        TypeError: For a constraint of either package that cannot be enforced.
    """
    rules: list[tuple[str, Any]] = []
    notes: list[tuple[str, Any]] = []
    strict = False
    at = sys.modules.get("annotated_types")
    fields = sys.modules.get("pydantic.fields")
    pending = list(metadata)
    while pending:
        item = pending.pop(0)
        kind = type(item).__name__
        from_pydantic = type(item).__module__.partition(".")[0] in {"pydantic", "pydantic_core"}
        if fields is not None and isinstance(item, fields.FieldInfo):
            for attribute in ("title", "description", "examples", "json_schema_extra"):
                note = getattr(item, attribute, None)
                if note is not None:
                    notes.append((attribute, note))
            pending[:0] = item.metadata
        elif (rule := _annotated_types_rule(at, item)) is not None:
            rules.append((rule, getattr(item, rule)))
        elif at is not None and isinstance(item, at.Predicate):
            rules.append(("predicate", item.func))
        elif at is not None and isinstance(item, at.GroupedMetadata):
            pending[:0] = list(item)  # Interval, Len, pydantic's StringConstraints
        elif from_pydantic and kind == "_PydanticGeneralMetadata":
            for key, value in vars(item).items():
                if key != "pattern":
                    raise TypeError(f"@tool cannot enforce the constraint {key}={value!r}")
                try:
                    rules.append(("pattern", re.compile(value)))
                except re.error as error:
                    raise TypeError(f"@tool: invalid pattern {value!r}: {error}") from None
        elif from_pydantic and kind == "Strict":
            strict = strict or bool(item.strict)
        elif from_pydantic and kind == "AllowInfNan":
            if not item.allow_inf_nan:
                rules.append(("finite", True))
        elif from_pydantic and kind == "FailFast":
            pass  # conversion stops at the first bad item anyway
        elif from_pydantic or (at is not None and isinstance(item, at.BaseMetadata)):
            # Timezone, Unit, pydantic's validators...: refusing beats not checking.
            raise TypeError(f"@tool cannot enforce the constraint {item!r}")
    return _Constraints(rules=tuple(rules), notes=tuple(notes), strict=strict)


def _count_words(value: object) -> str:
    if isinstance(value, str):
        return "characters"
    if isinstance(value, bytes):
        return "bytes"
    if isinstance(value, dict):
        return "keys"
    return "items"


def _multiple(value: float, step: float) -> bool:
    if isinstance(value, int) and isinstance(step, int):
        return value % step == 0
    quotient = value / step
    return math.isfinite(quotient) and abs(quotient - round(quotient)) < 1e-9


def _violation(rule: str, limit: Any, value: Any) -> str | None:
    """How `value` breaks `rule`, in words for the model; `None` if it does not.

    A rule is about values of one kind (numbers, sizes, text), as a JSON
    schema keyword is: `minimum` says nothing of null.
    """
    number = isinstance(value, int | float) and not isinstance(value, bool)
    sized = isinstance(value, str | bytes | list | tuple | dict | set | frozenset)
    # Written `not (value >= limit)` so that NaN, which compares false, is refused.
    if rule == "ge" and number and not value >= limit:
        return f"must be at least {limit}"
    if rule == "gt" and number and not value > limit:
        return f"must be greater than {limit}"
    if rule == "le" and number and not value <= limit:
        return f"must be at most {limit}"
    if rule == "lt" and number and not value < limit:
        return f"must be less than {limit}"
    if rule == "multiple_of" and number and not _multiple(value, limit):
        return f"must be a multiple of {limit}"
    if rule == "finite" and isinstance(value, float) and not math.isfinite(value):
        return "must be a finite number"
    if rule == "min_length" and sized and len(value) < limit:
        return f"must have at least {limit} {_count_words(value)}"
    if rule == "max_length" and sized and len(value) > limit:
        return f"must have at most {limit} {_count_words(value)}"
    if rule == "pattern" and isinstance(value, str) and not limit.search(value):
        return f"must match the pattern {limit.pattern!r}"
    if rule == "predicate":
        try:
            passed = bool(limit(value))
        except (TypeError, ValueError, AttributeError):
            passed = False
        if not passed:
            name = getattr(limit, "__qualname__", None) or repr(limit)
            return f"must satisfy {name}"
    return None


def _constrain(schema: dict[str, Any], rules: tuple[tuple[str, Any], ...]) -> dict[str, Any]:
    """`schema` with the JSON schema keywords of `rules`, pushed into union branches."""
    if "anyOf" in schema:
        return {**schema, "anyOf": [_constrain(branch, rules) for branch in schema["anyOf"]]}
    kind = schema.get("type")
    result = dict(schema)
    for rule, limit in rules:
        if rule in _NUMERIC_RULES and kind in ("integer", "number"):
            keyword = _NUMERIC_RULES[rule]
            if keyword in result and rule != "multiple_of":
                # Both apply, so the tighter one is the schema's.
                tighter = max if rule in ("ge", "gt") else min
                limit = tighter(result[keyword], limit)
            result[keyword] = limit
        elif rule in ("min_length", "max_length"):
            if kind == "string" and result.get("contentEncoding") == "base64":
                # The limit counts decoded bytes; n bytes are 4n/3 base64 characters.
                keyword = "minLength" if rule == "min_length" else "maxLength"
                limit = -(-4 * limit // 3) if rule == "min_length" else 4 * -(-limit // 3)
            elif kind in ("string", "array", "object"):
                noun = {"string": "Length", "array": "Items", "object": "Properties"}[kind]
                keyword = ("min" if rule == "min_length" else "max") + noun
            else:
                continue
            result[keyword] = limit
        elif rule == "pattern" and kind == "string":
            result["pattern"] = limit.pattern
    return result


def _with_notes(schema: dict[str, Any], constraints: _Constraints) -> dict[str, Any]:
    result = dict(schema)
    for key, note in constraints.notes:
        if key == "json_schema_extra":
            if callable(note):
                note(result)
            else:
                result.update(note)
        else:
            result[key] = note
    return result


# --- types: dataclasses and TypedDicts ------------------------------------------------


@attrs.frozen
class _Field:
    name: str
    annotation: Any
    required: bool
    default: Any  # _UNSET when there is none to show (none, or a default_factory)


def _is_typeddict(annotation: Any) -> bool:
    # typing.is_typeddict misses typing_extensions' TypedDict before 3.13.
    return (
        isinstance(annotation, type)
        and issubclass(annotation, dict)
        and hasattr(annotation, "__required_keys__")
        and hasattr(annotation, "__total__")
    )


def _is_structured(annotation: Any) -> bool:
    """Whether `@tool` describes and builds `annotation` field by field itself."""
    if not isinstance(annotation, type):
        return False
    if _is_typeddict(annotation):
        return True
    # A pydantic dataclass validates itself, as a pydantic model does.
    return dataclasses.is_dataclass(annotation) and not hasattr(
        annotation, "__pydantic_validator__"
    )


@functools.lru_cache(maxsize=512)
def _fields_of(cls: type) -> tuple[_Field, ...]:
    """The fields of a dataclass (those `__init__` takes) or of a TypedDict.

    Raises:
        TypeError: A field's annotation cannot be resolved.
    """
    try:
        hints = typing.get_type_hints(cls, include_extras=True)
    except (NameError, TypeError) as error:
        raise TypeError(
            f"@tool cannot resolve the field types of {cls.__name__}: {error}"
        ) from None
    if not _is_typeddict(cls):
        fields = []
        for field in dataclasses.fields(cls):
            if not field.init:
                continue
            has_default = field.default is not dataclasses.MISSING
            required = not has_default and field.default_factory is dataclasses.MISSING
            default = field.default if has_default else _UNSET
            fields.append(_Field(field.name, hints[field.name], required, default))
        return tuple(fields)
    required_keys: frozenset[str] = cls.__required_keys__  # type: ignore[attr-defined]
    typed_fields = []
    for name, annotation in hints.items():
        required = name in required_keys
        # Required[] and NotRequired[] are read here: on Python 3.11 a string
        # annotation (`from __future__ import annotations`) leaves them out
        # of __required_keys__.
        while typing.get_origin(annotation) in (typing.Required, typing.NotRequired):
            required = typing.get_origin(annotation) is typing.Required
            annotation = typing.get_args(annotation)[0]
        typed_fields.append(_Field(name, annotation, required, _UNSET))
    return tuple(typed_fields)


@functools.lru_cache(maxsize=128)
def _pydantic_adapter(cls: type) -> Any:
    """The `TypeAdapter` of a pydantic dataclass (whose pydantic is then installed)."""
    from pydantic import TypeAdapter

    return TypeAdapter(cls)


def _title(name: str) -> str:
    return name.title().replace("_", " ").strip()  # pydantic's field titles


def _description(cls: type) -> str | None:
    doc = cls.__doc__
    # dataclasses write a signature as the docstring of a class without one.
    if not doc or doc.startswith(f"{cls.__name__}("):
        return None
    return inspect.cleandoc(doc)


def _wants_title(schema: dict[str, Any]) -> bool:
    # As pydantic: a field naming a type by $ref (or an optional one) shows that type's title.
    if "$ref" in schema:
        return False
    branches = schema.get("anyOf", ())
    return not (
        len(branches) == 2
        and {"type": "null"} in branches
        and any("$ref" in branch for branch in branches)
    )


def _convert_object(value: Any, cls: type) -> Any:
    if not isinstance(value, dict):
        raise InvalidArgument(value, f"expected an object ({cls.__name__})")
    fields = _fields_of(cls)
    names = {field.name for field in fields}
    unknown = [str(key) for key in value if key not in names]
    if unknown:
        takes = ", ".join(field.name for field in fields) or "no fields"
        raise InvalidArgument(", ".join(unknown), f"unknown field; {cls.__name__} takes: {takes}")
    converted: dict[str, Any] = {}
    for field in fields:
        if _null_for_default(value.get(field.name, 0), field):
            continue
        if field.name not in value:
            if field.required:
                raise InvalidArgument(value, f"missing required field {field.name!r}")
            continue
        try:
            converted[field.name] = convert(value[field.name], field.annotation)
        except InvalidArgument as error:
            raise InvalidArgument(error.value, f"field {field.name!r}: {error.rule}") from None
    if _is_typeddict(cls):
        return converted
    try:
        return cls(**converted)
    except InvalidArgument:
        raise
    except (TypeError, ValueError) as error:  # a __post_init__ that checks
        raise InvalidArgument(value, f"{cls.__name__}: {error}") from None


# --- types: JSON schema ---------------------------------------------------------------


def _union_args(annotation: Any) -> tuple[Any, ...] | None:
    origin = typing.get_origin(annotation)
    if origin is typing.Union or origin is types.UnionType:
        return typing.get_args(annotation)
    return None


_JSON_TYPES: tuple[tuple[type, str], ...] = (
    (bool, "boolean"),
    (int, "integer"),
    (float, "number"),
    (str, "string"),
    (_NoneType, "null"),
)


def _enum_schema(values: list[Any]) -> dict[str, Any]:
    """`{"enum": values}`, with their `type` when they share one (as pydantic)."""
    names = {
        next((name for kind, name in _JSON_TYPES if isinstance(value, kind)), None)
        for value in values
    }
    if len(names) == 1 and None not in names:
        return {"enum": values, "type": names.pop()}
    return {"enum": values}


_REF_PREFIX = "#/$defs/"


def _rename_refs(schema: Any, renames: Mapping[str, str]) -> Any:
    if isinstance(schema, dict):
        result = {key: _rename_refs(value, renames) for key, value in schema.items()}
        ref = result.get("$ref")
        if isinstance(ref, str) and ref.startswith(_REF_PREFIX):
            name = ref.removeprefix(_REF_PREFIX)
            result["$ref"] = _REF_PREFIX + renames.get(name, name)
        return result
    if isinstance(schema, list):
        return [_rename_refs(item, renames) for item in schema]
    return schema


class _SchemaBuilder:
    """JSON schemas for the parameters of one tool, sharing one `$defs`.

    A dataclass or TypedDict is written out in place where it is the
    parameter's own type (or a branch of an optional one), unless it refers
    to itself, and named in `$defs` where it is nested in a field, list or
    dict, as pydantic's `TypeAdapter(...).json_schema()` does. A pydantic
    model is written out in place, as before, its own `$defs` merged into
    ours (renamed where two differ under one name) so that every `$ref`
    resolves from the root.
    """

    def __init__(self) -> None:
        self.defs: dict[str, dict[str, Any]] = {}
        self._names: dict[Any, str] = {}
        self._referenced: set[str] = set()

    def document(self, annotation: Any) -> dict[str, Any]:
        schema = self.schema(annotation, inline=True)
        return {**schema, "$defs": self.defs} if self.defs else schema

    def _taken(self, name: str) -> bool:
        return name in self.defs or name in self._names.values()

    def _unique(self, base: str) -> str:
        base = re.sub(r"[^A-Za-z0-9_.-]", "_", base) or "Type"
        name, number = base, 2
        while self._taken(name):
            name, number = f"{base}{number}", number + 1
        return name

    def _ref(self, name: str) -> dict[str, Any]:
        self._referenced.add(name)
        return {"$ref": _REF_PREFIX + name}

    def _merge(self, schema: dict[str, Any]) -> dict[str, Any]:
        """`schema` with its own `$defs` moved into ours (renamed on a clash)."""
        if not isinstance(schema.get("$defs"), dict):
            return schema
        incoming: dict[str, dict[str, Any]] = schema["$defs"]
        schema = {key: value for key, value in schema.items() if key != "$defs"}
        renames: dict[str, str] = {
            name: self._unique(name)
            for name, body in incoming.items()
            if self._taken(name) and self.defs.get(name) != body
        }
        if renames:
            schema = _rename_refs(schema, renames)
        for name, body in incoming.items():
            self.defs.setdefault(renames.get(name, name), _rename_refs(body, renames))
        return schema

    def _structured(self, cls: type, inline: bool) -> dict[str, Any]:
        if cls in self._names:
            return self._ref(self._names[cls])
        name = self._unique(cls.__name__)
        self._names[cls] = name
        try:
            body = self._object(cls)
        except BaseException:
            del self._names[cls]
            raise
        if inline and name not in self._referenced:
            del self._names[cls]  # written out here; a nested use names it in $defs
            return body
        self.defs[name] = body
        return self._ref(name)

    def _object(self, cls: type) -> dict[str, Any]:
        properties: dict[str, Any] = {}
        for field in _fields_of(cls):
            schema = self.schema(field.annotation)
            if _wants_title(schema):
                schema = {**schema, "title": _title(field.name)}
            default = _json_default(field.default)
            if default is not _UNSET:
                schema = {**schema, "default": default}
            properties[field.name] = schema
        body: dict[str, Any] = {"type": "object", "title": cls.__name__, "properties": properties}
        required = [field.name for field in _fields_of(cls) if field.required]
        if required:
            body["required"] = required
        # Unknown fields are refused (see convert), and the schema says so.
        body["additionalProperties"] = False
        description = _description(cls)
        if description:
            body["description"] = description
        return body

    def schema(self, annotation: Any, *, inline: bool = False) -> dict[str, Any]:
        """The schema of `annotation`; `inline` for a parameter's own type (not nested)."""
        if annotation is str:
            return {"type": "string"}
        if annotation is bool:
            return {"type": "boolean"}
        if annotation is int:
            return {"type": "integer"}
        if annotation is float:
            return {"type": "number"}
        if annotation is bytes:
            return {"type": "string", "contentEncoding": "base64"}
        if annotation is _NoneType or annotation is None:
            return {"type": "null"}
        if annotation is Any:
            return {}
        base, metadata = _strip_annotated(annotation)
        if metadata:
            constraints = _constraints(metadata)
            schema = _constrain(self.schema(base, inline=inline), constraints.rules)
            return _with_notes(schema, constraints)
        custom = getattr(annotation, "__json_schema__", None)
        if callable(custom):
            return dict(custom())
        union = _union_args(annotation)
        if union is not None:
            # A parameter's `X | None` writes X out in place, as X alone would be.
            return {"anyOf": [self.schema(arg, inline=inline) for arg in union]}
        origin = typing.get_origin(annotation)
        args = typing.get_args(annotation)
        if origin is typing.Literal:
            return _enum_schema(list(args))
        if origin in (list, Sequence, set, frozenset) or annotation in (list, set, frozenset):
            items = self.schema(args[0]) if args else {}
            return {"type": "array", "items": items}
        if origin is tuple:
            if len(args) == 2 and args[1] is Ellipsis:
                return {"type": "array", "items": self.schema(args[0])}
            return {
                "type": "array",
                "prefixItems": [self.schema(a) for a in args],
                "minItems": len(args),
                "maxItems": len(args),
            }
        if origin in (dict, Mapping):
            if args and args[0] is not str:
                raise TypeError(f"JSON object keys are strings; cannot describe {annotation!r}")
            return {
                "type": "object",
                "additionalProperties": self.schema(args[1]) if args else {},
            }
        if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
            return _enum_schema([member.value for member in annotation])
        if _is_structured(annotation):
            return self._structured(annotation, inline)
        pydantic_schema = getattr(annotation, "model_json_schema", None)
        if callable(pydantic_schema):
            return self._merge(dict(pydantic_schema()))
        if isinstance(annotation, type) and dataclasses.is_dataclass(annotation):  # pydantic's
            return self._merge(_pydantic_adapter(annotation).json_schema())
        raise TypeError(f"@tool cannot describe the type {annotation!r}")


def json_schema(annotation: Any) -> dict[str, Any]:
    """The JSON schema of a parameter type.

    Handles str, int, float, bool, None, `bytes` (base64 text: `{"type":
    "string", "contentEncoding": "base64"}`), lists, tuples, sets, dicts with
    str keys, unions and optionals, Literal, Enum, dataclasses and TypedDicts
    (objects with their fields, unknown fields refused), types with a
    `__json_schema__()` classmethod (the validated argument types), pydantic
    models and dataclasses, and `Annotated[T, ...]` with `annotated_types`
    constraints (`Ge`, `Gt`, `Le`, `Lt`, `MultipleOf`, `MinLen`, `MaxLen`,
    `Len`, `Interval`, `Predicate`) or pydantic's `Field(...)` (those, plus
    `pattern`, `strict`, `allow_inf_nan`, `title`, `description`,
    `examples`, `json_schema_extra`). Dataclasses and TypedDicts are written
    as pydantic writes them with `extra="forbid"`; nested ones are named in
    `$defs`.

    Raises:
        TypeError: For a type, or a constraint, it cannot describe.
    """
    return _SchemaBuilder().document(annotation)


# --- types: conversion ----------------------------------------------------------------


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


# Standard or URL-safe alphabet (not mixed); padding optional, but right if present.
_BASE64 = re.compile(r"[A-Za-z0-9+/]*={0,2}|[A-Za-z0-9_-]*={0,2}")
_BASE64_RULE = "expected base64 text (A-Z, a-z, 0-9 and + /, or - _), like 'aGVsbG8='"


def _from_base64(value: Any) -> bytes:
    if not isinstance(value, str):
        raise InvalidArgument(value, _BASE64_RULE)
    body = value.rstrip("=")
    padded = body != value
    if not _BASE64.fullmatch(value) or len(body) % 4 == 1 or (padded and len(value) % 4):
        raise InvalidArgument(value, _BASE64_RULE)
    body = body.replace("-", "+").replace("_", "/")
    return base64.b64decode(body + "=" * (-len(body) % 4), validate=True)


def _convert_annotated(value: Any, base: Any, metadata: tuple[Any, ...]) -> Any:
    constraints = _constraints(metadata)
    if constraints.strict and base is int and (isinstance(value, bool) or type(value) is not int):
        raise InvalidArgument(value, "expected an integer (strict: no text or decimal point)")
    if constraints.strict and base is float and not isinstance(value, int | float):
        raise InvalidArgument(value, "expected a number (strict)")
    result = convert(value, base)
    for rule, limit in constraints.rules:
        words = _violation(rule, limit, result)
        if words is not None:
            raise InvalidArgument(value, words)
    return result


def convert(value: Any, annotation: Any) -> Any:
    """Convert a JSON value into `annotation`, or raise `InvalidArgument` saying why.

    `bytes` come as base64 text (standard or URL-safe alphabet, padding
    optional); a dataclass or TypedDict as an object with its fields, no
    others; an `Annotated` type's constraints are checked on the converted
    value, each rule on the values it is about (`Ge` on numbers, `MaxLen`
    on text, bytes and containers).
    """
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
    if annotation is bytes:
        return _from_base64(value)
    if annotation is _NoneType or annotation is None:
        if value is not None:
            raise InvalidArgument(value, "expected null")
        return None
    base, metadata = _strip_annotated(annotation)
    if metadata:
        return _convert_annotated(value, base, metadata)
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
    if _is_structured(annotation):
        return _convert_object(value, annotation)
    validate = getattr(annotation, "model_validate", None)
    if callable(validate):
        try:
            return validate(value)
        except ValueError as error:
            raise InvalidArgument(value, _pydantic_message(error)) from None
    if isinstance(annotation, type) and dataclasses.is_dataclass(annotation):  # pydantic's
        try:
            return _pydantic_adapter(annotation).validate_python(value)
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
