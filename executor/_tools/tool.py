"""The streaming tool: a typed tool whose output arrives in chunks before a final value.

A `StreamingTool` declares its name, description and input, chunk and final
types (JSON schema for each), a default `policy`, whether it is `idempotent`
and the capability it needs; `start(input)` returns a `StreamingToolHandle`,
and `render` gives the text of its values as the model's context holds them.
"""

from __future__ import annotations

import abc
import dataclasses
import enum
import inspect
import json
import typing
from collections.abc import Mapping
from typing import Any, ClassVar, Generic, TypeVar

import attrs

from executor._core.output import CommandOutput, Stderr, Stdout
from executor._tools.handle import StreamingToolHandle
from executor._tools.policies import Buffer, StreamingPolicy, check_policy
from executor._tools.shapes import SpecShape, spec_in_shape
from executor._tools.tools import convert, json_schema, load_arguments

InputT = TypeVar("InputT")
ChunkT = TypeVar("ChunkT")
FinalT = TypeVar("FinalT")


class StreamingTool(abc.ABC, Generic[InputT, ChunkT, FinalT]):
    """A tool whose output streams in typed chunks before a typed final value.

    Subclass it with the three types, `StreamingTool[Input, Chunk, Final]`,
    set `name` (and `description`, or write a docstring), and implement
    `start`. The types come from the subscript unless set as `input_type`,
    `chunk_type` and `final_type`; each must be one `json_schema` can
    describe (str, int, lists, dicts, Literal, Enum, pydantic models...).

    Attributes:
        name: The name a model calls it by.
        description: What it does, for the model; the class docstring by default.
        policy: How a session keeps its output for the context (`Buffer()`
            unless overridden here or per session).
        idempotent: Whether the tool opts into recovery from a journal: a
            session given a `journal` records its final value under an
            idempotency key and answers a repeat with it.
        required_capability: The capability a runtime must grant before
            running it (e.g. `"process"`, `"network"`), or `None`. Declared
            here for the runtime to check; the session does not enforce it.
    """

    name: ClassVar[str]
    description: ClassVar[str]
    input_type: ClassVar[Any]
    chunk_type: ClassVar[Any]
    final_type: ClassVar[Any]
    policy: ClassVar[StreamingPolicy] = Buffer()
    idempotent: ClassVar[bool] = False
    required_capability: ClassVar[str | None] = None
    _description_from_doc: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for base in cls.__dict__.get("__orig_bases__", ()):
            if typing.get_origin(base) is not StreamingTool:
                continue
            names = ("input_type", "chunk_type", "final_type")
            for attribute, argument in zip(names, typing.get_args(base), strict=True):
                if attribute not in cls.__dict__ and not isinstance(argument, TypeVar):
                    setattr(cls, attribute, argument)
        own_doc = cls.__dict__.get("__doc__")
        if "description" in cls.__dict__:
            cls._description_from_doc = False
        elif own_doc and (getattr(cls, "description", None) is None or cls._description_from_doc):
            # A docstring describes its own class: a subclass's replaces its parent's,
            # but never a description set explicitly.
            cls.description = inspect.cleandoc(own_doc)
            cls._description_from_doc = True
        policy = cls.__dict__.get("policy")
        if policy is not None:
            check_policy(policy, f"{cls.__name__}.policy")

    @abc.abstractmethod
    async def start(self, input: InputT) -> StreamingToolHandle[ChunkT, FinalT]:
        """Start the tool on `input` and return its handle, not yet entered.

        Any async code can be behind the handle: `TaskHandle(run)` for a
        Python function, or a process session for a command.
        """

    @property
    def input_schema(self) -> dict[str, Any]:
        """The JSON schema of the input."""
        return json_schema(declared_types(self)[0])

    @property
    def chunk_schema(self) -> dict[str, Any]:
        """The JSON schema of each chunk."""
        return json_schema(declared_types(self)[1])

    @property
    def final_schema(self) -> dict[str, Any]:
        """The JSON schema of the final value."""
        return json_schema(declared_types(self)[2])

    @property
    def spec(self) -> dict[str, Any]:
        """The tool's spec: name, description and the three schemas.

        `parameters` is the input's schema, in the place function-calling
        APIs take it (they want an object: use a model or a dict type).

        Raises:
            TypeError: The name is missing, or a type cannot be described.
        """
        check_tool(self)
        return {
            "name": self.name,
            "description": getattr(self, "description", ""),
            "parameters": self.input_schema,
            "chunk_schema": self.chunk_schema,
            "final_schema": self.final_schema,
        }

    def spec_for(self, shape: SpecShape, *, strict: bool | None = None) -> dict[str, Any]:
        """The input's spec in the shape one model API takes, as `Tool.spec_for` writes it.

        Raises:
            ValueError: An unknown shape.
            TypeError: The input has no form in that shape (see `spec_in_shape`).
        """
        return spec_in_shape(self.spec, shape, strict=strict)

    def parse_input(self, arguments: str | Mapping[str, Any] | Any) -> InputT:
        """Parse a model's arguments (JSON text or a decoded value) into the input type.

        Raises:
            InvalidArgument: A message for the model saying what was wrong.
        """
        raw: Any = arguments
        if isinstance(arguments, str) and declared_types(self)[0] is not str:
            # Bounded as a tool's arguments are: size, depth and digits.
            raw = load_arguments(arguments)
        return typing.cast(InputT, convert(raw, declared_types(self)[0]))

    def render(self, value: object) -> str:
        """The text of a chunk or final value, as the model's context holds it.

        Strings are themselves, bytes and `Stdout`/`Stderr` are decoded as
        UTF-8, a `CommandOutput` is its `text()`, `None` is empty, and other
        values are JSON. Override it to show a type differently; the policies
        measure, summarise and preview this text.
        """
        return _render(value)


def _render(value: object) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).decode("utf-8", "replace")
    if isinstance(value, Stdout | Stderr):
        return value.data.decode("utf-8", "replace")
    if isinstance(value, CommandOutput):
        return value.text()
    if value is None:
        return ""
    dump = getattr(value, "model_dump_json", None)
    if callable(dump) and not isinstance(value, type):
        return str(dump())
    data: Any = value
    if attrs.has(type(value)):
        data = attrs.asdict(value)  # type: ignore[arg-type]
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        data = dataclasses.asdict(value)
    elif isinstance(value, enum.Enum):
        data = value.value
    try:
        return json.dumps(data, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return str(value)


def check_tool(tool: object) -> StreamingTool[Any, Any, Any]:
    """`tool` itself, if it is a `StreamingTool` with a name.

    Raises:
        TypeError: It is no `StreamingTool`, or its name is missing or empty.
    """
    if not isinstance(tool, StreamingTool):
        raise TypeError(f"expected a StreamingTool, got {type(tool).__name__}")
    name = getattr(tool, "name", None)
    if not isinstance(name, str) or not name:
        raise TypeError(f"{type(tool).__name__} needs a name: a non-empty string")
    return tool


def declared_types(tool: StreamingTool[Any, Any, Any]) -> tuple[Any, Any, Any]:
    """The tool's input, chunk and final types, as its class declares them.

    Raises:
        TypeError: The class declares some of them neither by subscript nor
            as class attributes.
    """
    missing = [
        attribute
        for attribute in ("input_type", "chunk_type", "final_type")
        if not hasattr(tool, attribute)
    ]
    if missing:
        raise TypeError(
            f"{type(tool).__name__} does not declare {', '.join(missing)}: subclass "
            "StreamingTool[Input, Chunk, Final] or set them as class attributes"
        )
    return tool.input_type, tool.chunk_type, tool.final_type
