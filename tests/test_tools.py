"""`@tool`: specs from signatures, arguments parsed before the body, errors for the model."""

from __future__ import annotations

import enum
import json
from pathlib import Path
from typing import Any, Literal

import pydantic
import pytest

from executor import (
    AgentContext,
    Command,
    DefaultContext,
    LocalExecutor,
    Tool,
    ToolOutput,
    WorkspacePath,
    tool,
)
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
