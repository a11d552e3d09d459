"""`@tool`: specs from signatures, arguments parsed before the body, errors for the model."""

from __future__ import annotations

import base64
import dataclasses
import enum
import json
import math
import sys
from pathlib import Path
from typing import Annotated, Any, Literal

import annotated_types as at
import attrs
import pydantic
import pytest
import typing_extensions

from executor import (
    AgentContext,
    Command,
    CommandError,
    CommandOutput,
    DefaultContext,
    ExecutorError,
    InvalidArgument,
    LocalExecutor,
    NonZeroExit,
    OutOfMemory,
    PathRefused,
    PolicyDenied,
    ShellParseError,
    Stdout,
    TimedOut,
    Tool,
    ToolOutput,
    ToolStreamError,
    WorkspacePath,
    tool,
)
from executor._tools.tools import ToolOutputKind, json_schema, load_arguments
from executor.testing import FakeExecutor

pytestmark = pytest.mark.anyio


@tool
async def count_lines(context: AgentContext, path: WorkspacePath) -> str:
    """Counts the lines of a file in the workspace.

    Args:
        path: File path relative to the workspace root.
    """
    output = await context.executor().exec_cmd(Command.read_file(path))
    return str(len(output.text().splitlines()))


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Filters(pydantic.BaseModel):
    pattern: str
    limit: int = 10


@tool(name="search")
async def search_code(
    query: str,
    mode: Literal["exact", "regex"] = "exact",
    limit: int = 20,
    paths: list[WorkspacePath] | None = None,
    color: Color = Color.RED,
    ratio: float = 0.5,
    strict: bool = False,
    filters: Filters | None = None,
) -> dict[str, Any]:
    """Search the code.

    Longer explanation that stays in the description.

    Args:
        query: What to look for.
        mode: How to match the query.
        limit: At most this many hits,
            counted per file.
        paths: Where to look.
        color: A color.
        ratio: A ratio.
        strict: Be strict.
        filters: Extra filters.

    Returns:
        The hits.
    """
    return {
        "query": query,
        "mode": mode,
        "limit": limit,
        "paths": [str(p) for p in paths or []],
        "color": color.value,
        "ratio": ratio,
        "strict": strict,
        "filters": filters.model_dump() if filters else None,
    }


def test_spec_from_signature_and_docstring() -> None:
    """The spec has the name, the docstring's text, and each argument's type and description."""
    spec = count_lines.spec
    assert spec["name"] == "count_lines"
    assert spec["description"] == "Counts the lines of a file in the workspace."
    parameters = spec["parameters"]
    assert list(parameters["properties"]) == ["path"]
    assert parameters["properties"]["path"]["type"] == "string"
    assert parameters["properties"]["path"]["description"] == (
        "File path relative to the workspace root."
    )
    assert parameters["required"] == ["path"]
    assert parameters["additionalProperties"] is False
    json.dumps(spec)


def test_spec_of_many_types() -> None:
    """Literals, lists, optionals, enums, floats, booleans and pydantic models are described."""
    spec = search_code.spec
    assert spec["name"] == "search"
    assert spec["description"].startswith("Search the code.\n\nLonger explanation")
    props = spec["parameters"]["properties"]
    assert props["mode"]["enum"] == ["exact", "regex"]
    assert props["mode"]["default"] == "exact"
    assert props["limit"] == {
        "type": "integer",
        "description": "At most this many hits, counted per file.",
        "default": 20,
    }
    assert props["paths"]["anyOf"][0]["type"] == "array"
    assert props["color"]["enum"] == ["red", "blue"]
    assert props["ratio"]["type"] == "number"
    assert props["strict"]["type"] == "boolean"
    assert "pattern" in json.dumps(props["filters"])
    assert spec["parameters"]["required"] == ["query"]
    json.dumps(spec)


async def test_invoke_parses_and_injects_the_context(tmp_path: Path) -> None:
    """Invoking parses JSON arguments into the declared types and passes the context."""
    (tmp_path / "a.txt").write_text("1\n2\n3\n")
    async with LocalExecutor(tmp_path) as ex:
        context = DefaultContext.from_executor(ex)
        assert context.executor() is ex
        result = await count_lines.invoke(context, '{"path": "a.txt"}')
    assert result == ToolOutput("3")


async def test_invoke_converts_every_type() -> None:
    """Each argument arrives as its declared type."""
    result = await search_code.invoke(
        None,
        {
            "query": "x",
            "mode": "regex",
            "limit": 5.0,
            "paths": ["src", "docs/./api"],
            "color": "blue",
            "ratio": 1,
            "strict": True,
            "filters": {"pattern": "*.py"},
        },
    )
    assert not result.is_error
    assert json.loads(result.text) == {
        "query": "x",
        "mode": "regex",
        "limit": 5,
        "paths": ["src", "docs/api"],
        "color": "blue",
        "ratio": 1.0,
        "strict": True,
        "filters": {"pattern": "*.py", "limit": 10},
    }


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ('{"path": "../etc/passwd"}', "'..'"),
        ('{"path": "/etc/passwd"}', "relative"),
        ('{"path": 3}', "a path must be text"),
        ("{}", "missing required argument 'path'"),
        ('{"path": "a", "extra": 1}', "unknown argument"),
        ("not json", "JSON object"),
        ('["a"]', "JSON object"),
    ],
)
async def test_bad_arguments_go_back_to_the_model(arguments: str, expected: str) -> None:
    """A bad argument becomes an error message for the model, and the body never runs."""
    fake = FakeExecutor()
    result = await count_lines.invoke(DefaultContext.from_executor(fake), arguments)
    assert result.is_error
    assert expected in result.text
    assert result.text.startswith("count_lines was not run: ")
    assert fake.calls == []
    assert result.kind is ToolOutputKind.INVALID_ARGUMENTS


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({"query": "x", "mode": "fuzzy"}, "expected one of ['exact', 'regex']"),
        ({"query": "x", "limit": True}, "expected an integer"),
        ({"query": "x", "limit": 2.5}, "expected an integer"),
        ({"query": "x", "paths": ["ok", "../no"]}, "'..'"),
        ({"query": "x", "color": "green"}, "expected one of ['red', 'blue']"),
        ({"query": "x", "filters": {"limit": 3}}, "pattern"),
        ({"query": "x", "strict": "yes"}, "expected true or false"),
    ],
)
async def test_type_errors_name_the_argument(arguments: dict[str, Any], expected: str) -> None:
    """A value of the wrong type is refused with the argument's name and the rule."""
    result = await search_code.invoke(None, arguments)
    assert result.is_error
    assert expected in result.text


async def test_failed_commands_go_back_to_the_model() -> None:
    """A command that fails inside the tool becomes an error message, not an exception."""
    context = DefaultContext.from_executor(FakeExecutor())
    result = await count_lines.invoke(context, {"path": "missing.txt"})
    assert result.is_error
    assert "missing.txt: No such file or directory" in result.text
    assert (result.kind, result.exit_code) == (ToolOutputKind.FAILED, None)


async def test_calling_the_tool_calls_the_function() -> None:
    """A Tool is still callable as the function it wraps."""
    context = DefaultContext.from_executor(FakeExecutor(files={"f": "a\nb\n"}))
    assert await count_lines(context, WorkspacePath("f")) == "2"
    assert isinstance(count_lines, Tool)


def test_bad_tool_definitions_fail_early() -> None:
    """Sync functions, missing annotations and undescribable types fail at decoration."""

    def sync(x: int) -> int:
        return x

    async def unannotated(x) -> None:  # type: ignore[no-untyped-def]
        pass

    async def weird(x: complex) -> None:
        pass

    with pytest.raises(TypeError, match="async"):
        tool(sync)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="annotation"):
        tool(unannotated)
    with pytest.raises(TypeError, match="cannot describe"):
        tool(weird)


def test_default_context_needs_an_executor() -> None:
    """DefaultContext.from_executor refuses what is not an executor."""
    with pytest.raises(TypeError, match="ToolExecutor"):
        DefaultContext.from_executor("not an executor")  # type: ignore[arg-type]


# --- what kind of failure -------------------------------------------------------------


def failing(error: CommandError) -> FakeExecutor:
    """A fake executor whose every command raises `error`."""

    def handler(cmd: Command) -> None:
        raise error

    return FakeExecutor(handler)


@tool
async def run(context: AgentContext, script: str) -> CommandOutput:
    """Runs a script.

    Args:
        script: The shell script.
    """
    return await context.executor().exec_cmd(Command.shell(script))


@pytest.mark.parametrize(
    ("error", "kind", "exit_code"),
    [
        (PolicyDenied("refused by rule"), ToolOutputKind.DENIED, None),
        (ShellParseError("an unclosed quote"), ToolOutputKind.DENIED, None),
        (PathRefused("/etc", "outside"), ToolOutputKind.DENIED, None),
        (TimedOut(0.5, CommandOutput(exit_code=137)), ToolOutputKind.TIMED_OUT, None),
        (NonZeroExit("exit 2", CommandOutput(exit_code=2)), ToolOutputKind.FAILED, 2),
        (
            OutOfMemory("out of memory", CommandOutput(exit_code=137, signal=9, oom_killed=True)),
            ToolOutputKind.OUT_OF_MEMORY,
            137,
        ),
        (NonZeroExit("no such file"), ToolOutputKind.FAILED, None),
        (ExecutorError("the engine is gone"), ToolOutputKind.EXECUTOR_ERROR, None),
        (ToolStreamError("the stream broke"), ToolOutputKind.EXECUTOR_ERROR, None),
        (CommandError("something else"), ToolOutputKind.EXECUTOR_ERROR, None),
    ],
)
async def test_a_failed_command_says_its_kind(
    error: CommandError, kind: ToolOutputKind, exit_code: int | None
) -> None:
    """A command's error becomes an output whose kind (and exit code) follow the error's type."""
    result = await run.invoke(DefaultContext.from_executor(failing(error)), {"script": "x"})
    assert (result.kind, result.exit_code, result.is_error) == (kind, exit_code, True)
    assert result.text == str(error)


async def test_a_real_exit_code_reaches_the_output(tmp_path: Path) -> None:
    """A script that exits 3 is FAILED with exit_code 3; one that succeeds is OK with 0."""
    async with LocalExecutor(tmp_path) as ex:
        context = DefaultContext.from_executor(ex)
        failed = await run.invoke(context, {"script": "echo oops; exit 3"})
        passed = await run.invoke(context, {"script": "echo fine"})
    assert (failed.kind, failed.exit_code) == (ToolOutputKind.FAILED, 3)
    assert "oops" in failed.text
    assert passed == ToolOutput("fine\n", exit_code=0)
    assert (passed.kind, passed.is_error) == (ToolOutputKind.OK, False)


async def test_invalid_argument_raised_by_the_body_is_invalid_arguments() -> None:
    """A body that refuses its own argument gives INVALID_ARGUMENTS, without "was not run"."""

    @tool
    async def picky(name: str) -> str:
        raise InvalidArgument(name, "a name must be lowercase")

    result = await picky.invoke(None, {"name": "Bob"})
    assert result == ToolOutput.error(
        "invalid argument 'Bob': a name must be lowercase", kind=ToolOutputKind.INVALID_ARGUMENTS
    )


async def test_other_exceptions_still_propagate() -> None:
    """An exception that is neither InvalidArgument nor CommandError is the caller's bug."""

    @tool
    async def broken() -> str:
        raise KeyError("bug")

    with pytest.raises(KeyError):
        await broken.invoke(None, {})


def test_tool_output_stays_compatible() -> None:
    """ToolOutput(text), ToolOutput(text, is_error=True) and ToolOutput.error keep their meaning."""
    assert ToolOutput("3").kind is ToolOutputKind.OK
    assert not ToolOutput("3").is_error
    assert ToolOutput("3") == ToolOutput("3", is_error=False) == ToolOutput("3", kind=None)
    plain = ToolOutput.error("no matches")
    assert (plain.kind, plain.is_error, plain.exit_code) == (ToolOutputKind.FAILED, True, None)
    assert ToolOutput("no matches", is_error=True) == plain
    assert ToolOutput("x", True) == plain.__class__("x", kind=ToolOutputKind.FAILED)
    assert attrs.evolve(plain, exit_code=4).exit_code == 4
    assert ToolOutput("x", is_error=True, kind=ToolOutputKind.DENIED).is_error


def test_tool_output_refuses_contradictions() -> None:
    """A kind that contradicts is_error, an OK error, or a non-int exit code is refused."""
    with pytest.raises(ValueError, match="contradicts"):
        ToolOutput("x", is_error=False, kind=ToolOutputKind.DENIED)
    with pytest.raises(ValueError, match="contradicts"):
        ToolOutput("x", is_error=True, kind=ToolOutputKind.OK)
    with pytest.raises(ValueError, match="failure kind"):
        ToolOutput.error("x", kind=ToolOutputKind.OK)
    with pytest.raises(TypeError, match="exit_code"):
        ToolOutput("x", exit_code=True)
    with pytest.raises(TypeError):
        ToolOutput("x", kind="ok")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="InvalidArgument or a CommandError"):
        ToolOutput.from_error(KeyError("x"))  # type: ignore[arg-type]


# --- dataclasses, TypedDicts, bytes ---------------------------------------------------


@dataclasses.dataclass
class Point:
    x: int
    y: int = 0


@dataclasses.dataclass
class Shape:
    """A shape drawn through points."""

    name: str
    corner: Point
    points: list[Point] = dataclasses.field(default_factory=list)
    label: str | None = None


@dataclasses.dataclass
class Tree:
    value: int
    children: list[Tree] = dataclasses.field(default_factory=list)


@dataclasses.dataclass(frozen=True)
class Range:
    start: int
    stop: int

    def __post_init__(self) -> None:
        if self.stop < self.start:
            raise ValueError("stop must not be before start")


class Options(typing_extensions.TypedDict):
    pattern: str
    limit: typing_extensions.NotRequired[int]


class Loose(typing_extensions.TypedDict, total=False):
    name: typing_extensions.Required[str]
    color: str


@tool
async def draw(
    shape: Shape,
    options: Options,
    loose: Loose | None = None,
    tree: Tree | None = None,
    span: Range | None = None,
) -> dict[str, Any]:
    """Draw a shape.

    Args:
        shape: What to draw.
        options: How.
        loose: Extra.
        tree: A tree.
        span: A range.
    """
    return {
        "shape": dataclasses.asdict(shape),
        "corner_type": type(shape.corner).__name__,
        "options": options,
        "loose": loose,
        "tree": dataclasses.asdict(tree) if tree else None,
        "span": [span.start, span.stop] if span else None,
    }


def resolve(root: dict[str, Any], schema: Any) -> None:
    """Assert that every `$ref` in `schema` names an entry of `root["$defs"]`."""
    if isinstance(schema, dict):
        ref = schema.get("$ref")
        if ref is not None:
            assert ref.startswith("#/$defs/")
            assert ref.removeprefix("#/$defs/") in root.get("$defs", {}), ref
        for value in schema.values():
            resolve(root, value)
    elif isinstance(schema, list):
        for value in schema:
            resolve(root, value)


def test_dataclass_and_typeddict_schemas() -> None:
    """Dataclasses and TypedDicts are objects with their fields, required right, nested by $ref."""
    parameters = draw.spec["parameters"]
    props = parameters["properties"]
    shape = props["shape"]
    assert shape["type"] == "object"
    assert shape["required"] == ["name", "corner"]
    assert shape["additionalProperties"] is False
    assert shape["description"] == "What to draw."
    assert shape["properties"]["corner"] == {"$ref": "#/$defs/Point"}
    assert shape["properties"]["points"]["items"] == {"$ref": "#/$defs/Point"}
    assert shape["properties"]["label"]["default"] is None
    assert parameters["$defs"]["Point"]["required"] == ["x"]
    assert parameters["$defs"]["Point"]["properties"]["y"]["default"] == 0
    assert props["options"]["required"] == ["pattern"]
    assert set(props["options"]["properties"]) == {"pattern", "limit"}
    assert props["loose"]["anyOf"][0]["required"] == ["name"]
    assert props["tree"]["anyOf"][0] == {"$ref": "#/$defs/Tree"}
    assert parameters["$defs"]["Tree"]["properties"]["children"]["items"] == {
        "$ref": "#/$defs/Tree"
    }
    assert parameters["required"] == ["shape", "options"]
    resolve(parameters, parameters)
    json.dumps(draw.spec)


async def test_dataclass_and_typeddict_arguments_are_built() -> None:
    """Objects become the dataclasses (defaults filled) and TypedDicts (plain dicts) declared."""
    result = await draw.invoke(
        None,
        json.dumps(
            {
                "shape": {"name": "tri", "corner": {"x": 1}, "points": [{"x": 2, "y": "3"}]},
                "options": {"pattern": "*.py"},
                "loose": {"name": "n"},
                "tree": {"value": 1, "children": [{"value": 2}]},
                "span": {"start": 1, "stop": 2},
            }
        ),
    )
    assert not result.is_error, result.text
    assert json.loads(result.text) == {
        "shape": {
            "name": "tri",
            "corner": {"x": 1, "y": 0},
            "points": [{"x": 2, "y": 3}],
            "label": None,
        },
        "corner_type": "Point",
        "options": {"pattern": "*.py"},
        "loose": {"name": "n"},
        "tree": {"value": 1, "children": [{"value": 2, "children": []}]},
        "span": [1, 2],
    }


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({"shape": {"name": "t"}}, "argument 'shape': missing required field 'corner'"),
        ({"shape": {"name": "t", "corner": {"x": 1, "z": 2}}}, "field 'corner': unknown field"),
        ({"shape": {"name": "t", "corner": {"x": "one"}}}, "field 'corner': field 'x': expected"),
        ({"shape": {"name": "t", "corner": [1, 2]}}, "expected an object (Point)"),
        ({"options": {"limit": 3}}, "argument 'options': missing required field 'pattern'"),
        ({"options": {"pattern": "a", "extra": 1}}, "unknown field; Options takes: pattern"),
        ({"loose": {"color": "red"}}, "missing required field 'name'"),
        ({"span": {"start": 5, "stop": 1}}, "Range: stop must not be before start"),
        ({"tree": {"value": 1, "children": [{"value": "x"}]}}, "item 0: field 'value'"),
    ],
)
async def test_bad_objects_name_the_field(arguments: dict[str, Any], expected: str) -> None:
    """A missing, unknown or wrong field is an invalid-argument error naming the field."""
    valid = {"shape": {"name": "t", "corner": {"x": 1}}, "options": {"pattern": "a"}}
    result = await draw.invoke(None, {**valid, **arguments})
    assert result.kind is ToolOutputKind.INVALID_ARGUMENTS
    assert expected in result.text


@tool
async def upload(data: bytes, chunks: list[bytes] | None = None) -> str:
    """Upload bytes.

    Args:
        data: The content.
        chunks: More content.
    """
    return json.dumps([data.hex(), [chunk.hex() for chunk in chunks or []]])


async def test_bytes_come_as_base64() -> None:
    """A bytes parameter is base64 text in the schema and arrives decoded."""
    assert upload.spec["parameters"]["properties"]["data"] == {
        "type": "string",
        "contentEncoding": "base64",
        "description": "The content.",
    }
    data = b"\x00\xffhello\xfb"
    for text in (
        base64.b64encode(data).decode(),
        base64.urlsafe_b64encode(data).decode(),
        base64.b64encode(data).decode().rstrip("="),
    ):
        result = await upload.invoke(None, {"data": text, "chunks": ["aGk="]})
        assert json.loads(result.text) == [data.hex(), [b"hi".hex()]]


@pytest.mark.parametrize("text", ["not base64!", "aGVsbG8==", "a", "aGk=aGk=", "+_+_", 5])
async def test_bad_base64_is_an_invalid_argument(text: object) -> None:
    """Text that is not base64 (or not text) is refused, naming the argument."""
    result = await upload.invoke(None, {"data": text})
    assert result.kind is ToolOutputKind.INVALID_ARGUMENTS
    assert "argument 'data': expected base64 text" in result.text


# --- Annotated constraints ------------------------------------------------------------


@tool
async def constrained(
    count: Annotated[int, at.Ge(1), at.Le(10)] = 1,
    ratio: Annotated[float, at.Gt(0), at.Lt(1)] = 0.5,
    even: Annotated[int, at.MultipleOf(2)] = 0,
    window: Annotated[int, at.Interval(ge=0, lt=100)] = 0,
    name: Annotated[str, at.MinLen(2), at.MaxLen(5)] = "ab",
    tags: Annotated[list[str], at.Len(1, 2)] = ["x"],  # noqa: B006
    digits: Annotated[str, at.Predicate(str.isdigit)] = "1",
    blob: Annotated[bytes, at.MaxLen(4)] = b"",
    limit: Annotated[int, pydantic.Field(ge=1, le=100, description="How many.")] = 10,
    word: Annotated[str, pydantic.Field(max_length=8, pattern=r"^[a-z]+$")] = "a",
    exact: Annotated[int, pydantic.Field(strict=True)] = 0,
    finite: Annotated[float, pydantic.Field(allow_inf_nan=False)] = 0.0,
    maybe: Annotated[int | None, at.Ge(1)] = None,
    scores: list[Annotated[int, at.Ge(0)]] | None = None,
) -> str:
    """Takes constrained arguments."""
    return "ok"


def test_constraints_appear_in_the_schema() -> None:
    """annotated_types and pydantic Field constraints become JSON schema keywords."""
    props = constrained.spec["parameters"]["properties"]
    assert props["count"] == {"type": "integer", "minimum": 1, "maximum": 10, "default": 1}
    assert props["ratio"] | {} == {
        "type": "number",
        "exclusiveMinimum": 0,
        "exclusiveMaximum": 1,
        "default": 0.5,
    }
    assert props["even"]["multipleOf"] == 2
    assert (props["window"]["minimum"], props["window"]["exclusiveMaximum"]) == (0, 100)
    assert (props["name"]["minLength"], props["name"]["maxLength"]) == (2, 5)
    assert (props["tags"]["minItems"], props["tags"]["maxItems"]) == (1, 2)
    assert props["blob"]["maxLength"] == 8  # base64 of at most 4 bytes
    assert props["limit"] == {
        "type": "integer",
        "minimum": 1,
        "maximum": 100,
        "description": "How many.",
        "default": 10,
    }
    assert (props["word"]["maxLength"], props["word"]["pattern"]) == (8, "^[a-z]+$")
    assert props["maybe"]["anyOf"] == [{"type": "integer", "minimum": 1}, {"type": "null"}]
    assert props["scores"]["anyOf"][0]["items"] == {"type": "integer", "minimum": 0}


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({"count": 0}, "argument 'count': must be at least 1"),
        ({"count": "11"}, "argument 'count': must be at most 10"),
        ({"ratio": 0}, "argument 'ratio': must be greater than 0"),
        ({"ratio": 1.0}, "argument 'ratio': must be less than 1"),
        ({"even": 3}, "argument 'even': must be a multiple of 2"),
        ({"window": 100}, "argument 'window': must be less than 100"),
        ({"name": "a"}, "argument 'name': must have at least 2 characters"),
        ({"name": "abcdef"}, "argument 'name': must have at most 5 characters"),
        ({"tags": []}, "argument 'tags': must have at least 1 items"),
        ({"tags": ["a", "b", "c"]}, "argument 'tags': must have at most 2 items"),
        ({"digits": "12a"}, "argument 'digits': must satisfy str.isdigit"),
        ({"blob": "aGVsbG8="}, "argument 'blob': must have at most 4 bytes"),
        ({"limit": 0}, "argument 'limit': must be at least 1"),
        ({"word": "Hello"}, "argument 'word': must match the pattern '^[a-z]+$'"),
        ({"word": "abcdefghi"}, "argument 'word': must have at most 8 characters"),
        ({"exact": "5"}, "argument 'exact': expected an integer (strict"),
        ({"exact": 5.0}, "argument 'exact': expected an integer (strict"),
        ({"finite": 1e999}, "argument 'finite': must be a finite number"),
        ({"maybe": 0}, "argument 'maybe': must be at least 1"),
        ({"scores": [1, -1]}, "argument 'scores': item 1: must be at least 0"),
    ],
)
async def test_values_outside_a_constraint_are_refused(
    arguments: dict[str, Any], expected: str
) -> None:
    """A value that breaks a constraint is an invalid-argument error naming the rule."""
    result = await constrained.invoke(None, arguments)
    assert result.kind is ToolOutputKind.INVALID_ARGUMENTS
    assert expected in result.text


async def test_values_inside_the_constraints_pass() -> None:
    """Values on the bounds, null for an optional, and quoted numbers (not strict) pass."""
    result = await constrained.invoke(
        None,
        {
            "count": "10",
            "ratio": 0.99,
            "even": -4,
            "window": 99,
            "name": "abcde",
            "tags": ["a", "b"],
            "digits": "007",
            "blob": "AAECAw==",
            "limit": 100,
            "word": "abc",
            "exact": 3,
            "finite": 1.5,
            "maybe": None,
            "scores": [0, 5],
        },
    )
    assert result == ToolOutput("ok")


def test_constraints_that_cannot_be_enforced_fail_at_decoration() -> None:
    """A constraint @tool cannot check (Decimal digits, validators, time zones) fails early."""

    async def digits(x: Annotated[float, pydantic.Field(max_digits=3)]) -> None:
        pass

    async def validated(x: Annotated[int, pydantic.AfterValidator(abs)]) -> None:
        pass

    async def zoned(x: Annotated[str, at.Timezone(None)]) -> None:
        pass

    for function in (digits, validated, zoned):
        with pytest.raises(TypeError, match="cannot enforce"):
            tool(function)


def test_other_metadata_is_left_alone() -> None:
    """Annotated metadata that is no constraint (a note, a marker) changes nothing."""

    @tool
    async def noted(x: Annotated[int, "a note", typing_extensions.Doc("docs")]) -> None:
        pass

    assert noted.spec["parameters"]["properties"]["x"] == {"type": "integer"}


# --- the same schemas as pydantic -----------------------------------------------------


@dataclasses.dataclass
class Forbidding:
    """A dataclass pydantic also describes with extra='forbid'."""

    __pydantic_config__ = pydantic.ConfigDict(extra="forbid")
    count: Annotated[int, at.Ge(0)]
    inner: Pointy
    note: str | None = None
    tags: list[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class Pointy:
    __pydantic_config__ = pydantic.ConfigDict(extra="forbid")
    x: int


class Settings(typing_extensions.TypedDict):
    name: str
    level: typing_extensions.NotRequired[Annotated[int, pydantic.Field(le=5)]]


Settings.__pydantic_config__ = pydantic.ConfigDict(extra="forbid")  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "annotation",
    [
        Annotated[int, pydantic.Field(ge=1, le=10)],
        Annotated[int, at.Interval(gt=0, lt=5), at.MultipleOf(2)],
        Annotated[str, pydantic.Field(max_length=20, pattern="^a")],
        Annotated[str, at.MaxLen(3)],
        Annotated[int, pydantic.Field(title="T", examples=[1], json_schema_extra={"x-unit": "s"})],
        Annotated[list[int], at.Len(1, 3)],
        Annotated[int | None, at.Ge(1)],
        Literal["a", "b"],
        Forbidding,
        Settings,
        Tree,
        Filters,
    ],
)
def test_schemas_match_pydantic(annotation: Any) -> None:
    """Where pydantic describes a type, @tool describes it the same way."""
    if annotation is Tree:
        # Unknown fields are refused: the schema says so, as pydantic's does with forbid.
        expected = pydantic.TypeAdapter(annotation).json_schema()
        expected["$defs"]["Tree"]["additionalProperties"] = False
    else:
        expected = pydantic.TypeAdapter(annotation).json_schema()
    assert json_schema(annotation) == expected


def test_bytes_schema_differs_from_pydantic_on_purpose() -> None:
    """Unlike pydantic's format binary (raw bytes JSON cannot carry), @tool says base64."""
    assert pydantic.TypeAdapter(bytes).json_schema() == {"type": "string", "format": "binary"}
    assert json_schema(bytes) == {"type": "string", "contentEncoding": "base64"}
    # The length limit counts bytes; the schema bounds the base64 text that carries them.
    assert json_schema(Annotated[bytes, at.MinLen(1), at.MaxLen(6)]) == {
        "type": "string",
        "contentEncoding": "base64",
        "minLength": 2,
        "maxLength": 8,
    }


class Leaf(pydantic.BaseModel):
    size: int


class Branch(pydantic.BaseModel):
    leaf: Leaf
    more: list[Leaf] = []


def test_nested_definitions_resolve_from_the_root() -> None:
    """$defs of models and dataclasses move to the parameters object, so each $ref resolves."""

    @tool
    async def grow(branch: Branch | None, shapes: list[Shape], point: Point) -> None:
        pass

    parameters = grow.spec["parameters"]
    for schema in parameters["properties"].values():
        assert '"$defs":' not in json.dumps(schema)
    assert {"Leaf", "Shape", "Point"} <= set(parameters["$defs"])
    # Point is named already (inside Shape), so the parameter refers to it too.
    assert parameters["properties"]["point"] == {"$ref": "#/$defs/Point"}
    resolve(parameters, parameters)


def test_two_types_of_one_name_get_two_definitions() -> None:
    """Two different dataclasses with the same name are both described, under distinct names."""
    first = dataclasses.make_dataclass("Item", [("a", int)])
    second = dataclasses.make_dataclass("Item", [("b", str)])

    async def both(items: Any, others: Any) -> None:
        pass

    annotations = {"items": list[first], "others": list[second]}  # type: ignore[valid-type]
    both.__annotations__ = {**annotations, "return": None}
    parameters = tool(both).spec["parameters"]
    refs = {name: parameters["properties"][name]["items"]["$ref"] for name in ("items", "others")}
    assert refs["items"] != refs["others"]
    assert set(parameters["$defs"]) == {"Item", "Item2"}
    resolve(parameters, parameters)


# --- hostile JSON ---------------------------------------------------------------------


@tool
async def take(count: int = 0, text: str = "", nested: Any = None) -> str:
    """Takes anything.

    Args:
        count: A number.
        text: Some text.
        nested: Anything at all.
    """
    return "ran"


def nest(depth: int) -> Any:
    """A list nested `depth` levels deep, built without recursion."""
    value: Any = []
    for _ in range(depth - 1):
        value = [value]
    return value


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ('{"count": ' + "1" * 4301 + "}", "a number may have at most 4300 digits"),
        ('{"count": -' + "9" * 5000 + "}", "a number may have at most 4300 digits"),
        ("[" * 100_000 + "]" * 100_000, "may nest at most 64 levels (max_argument_depth)"),
        ('{"nested": ' + "[" * 100_000, "may nest at most 64 levels"),
        ('{"a": ' * 100_000 + "1" + "}" * 100_000, "may nest at most 64 levels"),
        ('{"nested": ' + '{"a": ' * 500 + "1" + "}" * 501, "may nest at most 64 levels"),
        ('{"nested": ' + "[" * 64 + "]" * 64 + "}", "may nest at most 64 levels"),
        ('{"count": NaN}', "not a JSON number"),
        ('{"nested": -Infinity}', "not a JSON number"),
        ('{"count": 1', "arguments must be a JSON object"),
    ],
)
async def test_hostile_json_text_is_an_invalid_argument(arguments: str, expected: str) -> None:
    """Huge numbers, deep nesting and non-JSON numbers come back as errors, never exceptions."""
    result = await take.invoke(None, arguments)
    assert result.kind is ToolOutputKind.INVALID_ARGUMENTS
    assert result.text.startswith("take was not run: ")
    assert expected in result.text
    assert len(result.text) < 500


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({"count": 10**4301}, "a number may have at most 4300 digits"),
        ({"nested": nest(100_000)}, "may nest at most 64 levels"),
        ({"nested": nest(64)}, "may nest at most 64 levels"),
        ({"text": "a" * 50_000_000}, "'at least 50,000,012 bytes of JSON'"),
        ({"nested": {1: "a"}}, "object keys must be strings"),
    ],
)
async def test_hostile_decoded_arguments_are_an_invalid_argument(
    arguments: dict[str, Any], expected: str
) -> None:
    """A mapping handed over already decoded gets the same bounds as JSON text."""
    result = await take.invoke(None, arguments)
    assert result.kind is ToolOutputKind.INVALID_ARGUMENTS
    assert expected in result.text
    assert len(result.text) < 500


async def test_nesting_up_to_the_limit_passes() -> None:
    """Arguments nested exactly max_argument_depth levels (the object is level 1) are taken."""
    assert await take.invoke(None, {"nested": nest(63)}) == ToolOutput("ran")
    assert await take.invoke(None, json.dumps({"nested": nest(63)})) == ToolOutput("ran")
    assert await take.invoke(None, {"count": int("9" * 4300)}) == ToolOutput("ran")


async def test_a_huge_string_names_its_size_and_the_limit() -> None:
    """50 MB of JSON is refused before parsing, naming its size and max_argument_bytes."""
    arguments = json.dumps({"text": "é" * 25_000_000}, ensure_ascii=False)
    result = await take.invoke(None, arguments)
    assert result.kind is ToolOutputKind.INVALID_ARGUMENTS
    assert "'50,000,012 bytes of JSON'" in result.text
    assert "at most 1,048,576 bytes (max_argument_bytes)" in result.text


async def test_the_limits_are_options_of_the_decorator() -> None:
    """max_argument_bytes and max_argument_depth set per tool, with a default of 1 MiB and 64."""

    @tool(max_argument_bytes=100, max_argument_depth=3)
    async def small(text: str = "", nested: Any = None) -> str:
        return "ran"

    @tool(max_argument_bytes=60_000_000)
    async def big(text: str) -> str:
        return str(len(text))

    assert (take.max_argument_bytes, take.max_argument_depth) == (1_048_576, 64)
    assert (small.max_argument_bytes, small.max_argument_depth) == (100, 3)
    assert await small.invoke(None, {"text": "a" * 50}) == ToolOutput("ran")
    refused = await small.invoke(None, {"text": "a" * 100})
    assert "at most 100 bytes (max_argument_bytes)" in refused.text
    deep = await small.invoke(None, '{"nested": [[[1]]]}')
    assert "may nest at most 3 levels" in deep.text
    assert await small.invoke(None, '{"nested": [[1]]}') == ToolOutput("ran")
    assert await big.invoke(None, {"text": "a" * 50_000_000}) == ToolOutput("50000000")
    with pytest.raises(ValueError, match="max_argument_bytes"):
        tool(max_argument_bytes=0)(small.function)
    with pytest.raises(ValueError, match="max_argument_depth"):
        tool(max_argument_depth=True)(small.function)


def test_load_arguments_never_raises_anything_but_invalid_argument() -> None:
    """load_arguments turns a host's lower int limit and odd input into InvalidArgument too."""
    limit = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(640)
    try:
        with pytest.raises(InvalidArgument, match="JSON object"):
            load_arguments('{"count": ' + "1" * 1000 + "}")
    finally:
        sys.set_int_max_str_digits(limit)
    assert load_arguments(None) == load_arguments("") == {}
    assert load_arguments('{"x": 1.5}') == {"x": 1.5}
    assert math.isinf(load_arguments('{"x": 1e999}')["x"])
    assert load_arguments({"b": b"raw", "s": Stdout(b"x")})["b"] == b"raw"
