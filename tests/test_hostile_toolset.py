"""Hostile arguments to every toolset tool: a clear refusal or a result, never a crash or a hang.

Property-based (hypothesis), over the tools' own JSON schemas: arguments
drawn from each schema (every type, `anyOf`, `enum`, optional fields left
out or given), and arguments outside it (a field of the wrong type, fields
the schema does not have, required ones missing, a value that is not an
object, JSON text that does not parse). Every call returns a `ToolOutput`
within a bound: a result, or a refusal whose text says what was wrong.

The values that would run something are kept harmless on purpose: a command
or a cell's code is one of a few fixed scripts or an `echo` of random text,
a package list stays empty (nothing is fetched), and the executor is
confined to a folder of its own, so a path that slipped through could not
write outside it.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from executor import LocalExecutor, ToolOutput, ToolOutputKind, Toolset

pytestmark = pytest.mark.anyio

# A call that takes longer than this hung: the toolset's own timeout is 5 s.
CALL_LIMIT = 60.0
SETTINGS = settings(
    max_examples=100,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
# The tools whose every call starts a language kernel: a few calls are enough.
SLOW_TOOLS = {"code_interpreter", "terminal"}
SPECS = {spec["name"]: spec["parameters"] for spec in Toolset().specs}


@pytest.fixture
def anyio_backend() -> str:
    """The tools' argument handling does not depend on the event loop: asyncio only."""
    return "asyncio"


@pytest.fixture
async def toolset() -> AsyncIterator[Toolset]:
    """A toolset with short timeouts (a follow or a wait ends in seconds), closed after."""
    async with Toolset(timeout=5, max_timeout=10) as tools:
        yield tools


@pytest.fixture
async def confined(tmp_path: Path) -> AsyncIterator[LocalExecutor]:
    """A LocalExecutor kept inside a folder with a few files to read, edit and search."""
    work = tmp_path / "work"
    (work / "src").mkdir(parents=True)
    (work / "src" / "app.py").write_text("print('hello')\nvalue = 1\n")
    (work / "notes.txt").write_bytes("plain\n\xff binary \0 line\n".encode("latin-1"))
    (work / "app.log").write_text('{"level": "error", "message": "boom"}\nplain line\n')
    async with LocalExecutor(work, confine=True, kill_grace=0.2) as ex:
        yield ex


# --- values ---------------------------------------------------------------------------

SCRIPTS = st.one_of(
    st.sampled_from(
        [
            "echo hi",
            "true",
            "false",
            "exit 3",
            "printf '\\377\\000x'",
            "cat src/app.py",
            "sleep 0.2",
            "echo out; echo err >&2",
            "",
            "(",
            "cd nowhere",
        ]
    ),
    st.text(max_size=40).map(lambda text: f"echo {shlex.quote(text)}"),
)
CODE = st.one_of(
    st.sampled_from(["1 + 1", "print('hi')", "raise ValueError('no')", "x = (", ""]),
    st.text(max_size=40).map(lambda text: f"print({text!r})"),
)
PATHS = st.one_of(
    st.sampled_from(
        [
            "src/app.py",
            "notes.txt",
            "app.log",
            "src",
            "new/file.txt",
            "",
            ".",
            "..",
            "../outside.txt",
            "src/../../x",
            "/etc/hostname",
            "/",
            "a\0b",
            "*.py",
            "**/*.py",
            "src/{a,b}.py",
            "~",
            "$HOME/x",
            "-rf",
            " ",
            "é/ü.txt",
        ]
    ),
    st.text(max_size=20),
)
NAMES = st.one_of(st.sampled_from(["1", "job-1", "", "SIGTERM", "KILL", "9", "-1"]), st.text())
NUMBERS = st.one_of(
    st.integers(min_value=-(10**20), max_value=10**20),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([0, -1, 0.001, 1e308, -1e308, 2**63, 2**64]),
)
JSON = st.recursive(
    st.none() | st.booleans() | NUMBERS | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)


def string_for(field: str) -> st.SearchStrategy[str]:
    """The strings a field gets: harmless scripts for commands, paths, or any text."""
    if field in ("command", "stdin_command"):
        return SCRIPTS
    if field == "code":
        return CODE
    if field in ("path", "cwd", "glob", "pattern", "old_text", "new_text"):
        return PATHS
    if field in ("job_id", "signal", "session", "language"):
        return NAMES
    return st.text(max_size=40)


def from_schema(schema: dict[str, Any], field: str = "") -> st.SearchStrategy[Any]:
    """Values that `schema` (a tool's parameters, or one of them) allows."""
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    if "anyOf" in schema:
        return st.one_of([from_schema(option, field) for option in schema["anyOf"]])
    kind = schema.get("type")
    if kind == "string":
        return string_for(field)
    if kind == "integer":
        return st.one_of(
            st.integers(min_value=-5, max_value=50), st.sampled_from([-(2**63), 2**63, 10**30])
        )
    if kind == "number":
        return NUMBERS
    if kind == "boolean":
        return st.booleans()
    if kind == "null":
        return st.none()
    if kind == "array":
        if field == "packages":
            # Never a real install: nothing is fetched from a registry.
            return st.just([])
        return st.lists(from_schema(schema.get("items", {}), field), max_size=3)
    if kind == "object":
        properties: dict[str, Any] = schema.get("properties", {})
        if not properties:
            values = schema.get("additionalProperties")
            inner = from_schema(values, field) if isinstance(values, dict) else JSON
            if field == "files":
                # Relative names: a cell's files go into its own folder.
                return st.dictionaries(PATHS, inner, max_size=2)
            return st.dictionaries(st.text(max_size=12), inner, max_size=3)
        required = set(schema.get("required", ()))
        return st.fixed_dictionaries(
            {name: from_schema(properties[name], name) for name in required},
            optional={
                name: from_schema(value, name)
                for name, value in properties.items()
                if name not in required
            },
        )
    return JSON


def wrong_type(schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    """Values of another JSON type than `schema` allows (never a runnable string)."""
    allowed = {option.get("type") for option in schema.get("anyOf", [schema])}
    others: list[st.SearchStrategy[Any]] = []
    if "string" not in allowed:
        others.append(st.text(max_size=10).map(lambda text: f"not a number: {text}"))
    if not allowed & {"integer", "number"}:
        others.append(NUMBERS)
    if "boolean" not in allowed:
        others.append(st.booleans())
    if "null" not in allowed:
        others.append(st.none())
    if "array" not in allowed:
        others.append(st.lists(JSON, max_size=2))
    if "object" not in allowed:
        others.append(st.dictionaries(st.text(max_size=5), JSON, max_size=2))
    return st.one_of(others)


@st.composite
def outside(draw: st.DrawFn, name: str) -> tuple[Any, str | None]:
    """Arguments outside tool `name`'s schema, and the field the refusal should name."""
    schema = SPECS[name]
    properties: dict[str, Any] = schema["properties"]
    how = draw(st.sampled_from(["wrong type", "unknown field", "missing", "not an object", "text"]))
    if how == "not an object":
        return draw(st.one_of(st.lists(JSON, max_size=2), NUMBERS, st.booleans())), None
    if how == "text":
        broken = ["{", '{"command": ', "[1, 2", "{'a': 1}", "nul\0", '{"a": NaN}', "]"]
        return draw(st.sampled_from(broken) | st.text(max_size=20)), None
    valid = draw(from_schema(schema))
    if how == "unknown field" or not properties:
        field = draw(st.text(min_size=1, max_size=12).filter(lambda key: key not in properties))
        return {**valid, field: draw(JSON)}, field
    required = schema.get("required", [])
    if how == "missing" and required:
        field = draw(st.sampled_from(required))
        return {key: value for key, value in valid.items() if key != field}, field
    field = draw(st.sampled_from(sorted(properties)))
    return {**valid, field: draw(wrong_type(properties[field]))}, field


# --- the checks -----------------------------------------------------------------------


async def call(toolset: Toolset, ex: LocalExecutor, name: str, arguments: Any) -> ToolOutput:
    """One call, which must end within `CALL_LIMIT` and return a `ToolOutput`."""
    with anyio.fail_after(CALL_LIMIT):
        output = await toolset.call(toolset.context(ex), name, arguments)
    assert isinstance(output, ToolOutput), f"{name} returned {output!r}"
    assert isinstance(output.text, str)
    if output.is_error:
        # A refusal says something: more than a bare word, never only an exception's class.
        assert len(output.text.strip()) >= 10, f"{name}({arguments!r}) refused with {output.text!r}"
        assert output.text.strip() not in ("Error executing tool", "error", "None")
    return output


TOOLS = [name for name in SPECS if name not in SLOW_TOOLS]


def inside_calls(names: list[str]) -> st.SearchStrategy[tuple[str, Any]]:
    """A tool of `names` and arguments its schema allows."""
    return st.sampled_from(names).flatmap(
        lambda name: st.tuples(st.just(name), from_schema(SPECS[name]))
    )


def outside_calls(names: list[str]) -> st.SearchStrategy[tuple[str, tuple[Any, str | None]]]:
    """A tool of `names` and arguments outside its schema, with the field at fault."""
    return st.sampled_from(names).flatmap(lambda name: st.tuples(st.just(name), outside(name)))


# Drawn before the call, never inside it: a draw that runs out of data stops
# the example with an exception that is no `Exception`, and one raised inside
# the async test would end the event loop's runner for the examples after it.
@settings(SETTINGS, max_examples=120)
@given(drawn=inside_calls(TOOLS))
async def test_arguments_from_the_schema(
    toolset: Toolset, confined: LocalExecutor, drawn: tuple[str, Any]
) -> None:
    """Arguments each tool's schema allows: a result or a clear refusal, never an exception."""
    name, arguments = drawn
    await call(toolset, confined, name, arguments)


async def refused(
    toolset: Toolset, ex: LocalExecutor, name: str, arguments: Any, field: str | None
) -> None:
    """Arguments outside the schema: INVALID_ARGUMENTS, naming `field`, as a mapping and as JSON."""
    given = [arguments, json.dumps(arguments)] if isinstance(arguments, dict) else [arguments]
    for each in given:
        output = await call(toolset, ex, name, each)
        assert output.kind is ToolOutputKind.INVALID_ARGUMENTS, (name, each, output)
        if field is not None:
            # The field at fault is named, or another the tool refused first (an
            # empty path, say: the schema allows it, the tool does not); named as
            # it is, a control character as its escape.
            names = {field, *arguments}
            named = any(repr(key)[1:-1] in output.text for key in names)
            assert named, (name, each, output.text)


@settings(SETTINGS, max_examples=150)
@given(drawn=outside_calls(sorted(TOOLS)))
async def test_arguments_outside_the_schema(
    toolset: Toolset, confined: LocalExecutor, drawn: tuple[str, tuple[Any, str | None]]
) -> None:
    """Arguments outside each tool's schema are refused as such, naming the field at fault."""
    name, (arguments, field) = drawn
    await refused(toolset, confined, name, arguments, field)


@settings(SETTINGS, max_examples=12)
@given(
    drawn=st.one_of(
        inside_calls(sorted(SLOW_TOOLS)).map(lambda drawn: (*drawn, True)),
        outside_calls(sorted(SLOW_TOOLS)).map(lambda drawn: (*drawn, False)),
    )
)
async def test_the_slow_tools_too(
    toolset: Toolset, confined: LocalExecutor, drawn: tuple[str, Any, bool]
) -> None:
    """The terminal and the code interpreter, from their schemas and outside them, a few calls."""
    name, arguments, inside = drawn
    if inside:
        await call(toolset, confined, name, arguments)
    else:
        await refused(toolset, confined, name, *arguments)


# --- found by the tests above: the streaming tools kept no timeout of the toolset's -------


async def test_a_follow_without_a_timeout_ends_at_the_toolsets(
    toolset: Toolset, confined: LocalExecutor
) -> None:
    """log_tailer(follow=True), no timeout_secs nor max_entries: it ends at the toolset's timeout.

    It followed until the client gave up: one call held the model forever.
    """
    started = anyio.current_time()
    arguments = {"path": "app.log", "follow": True, "start": "start"}
    output = await call(toolset, confined, "log_tailer", arguments)
    assert output.kind is ToolOutputKind.OK, output.text
    assert "boom" in output.text
    assert anyio.current_time() - started >= toolset.timeout


async def test_a_terminal_without_a_timeout_is_killed_at_the_toolsets(
    toolset: Toolset, confined: LocalExecutor
) -> None:
    """A terminal with no timeout_secs: the toolset's timeout kills the program, as for `run`."""
    output = await call(toolset, confined, "terminal", {"command": "sleep 300", "pty": False})
    assert output.kind is ToolOutputKind.TIMED_OUT, output.text


@pytest.mark.parametrize("name", ["terminal", "log_tailer", "code_interpreter"])
async def test_a_timeout_past_the_toolsets_longest_is_refused(
    toolset: Toolset, confined: LocalExecutor, name: str
) -> None:
    """timeout_secs past the toolset's max_timeout is refused, naming the limit."""
    arguments = {"terminal": {"command": "true"}, "log_tailer": {"path": "app.log"}}.get(
        name, {"language": "python", "code": "1"}
    )
    output = await call(toolset, confined, name, {**arguments, "timeout_secs": 1e6})
    assert output.kind is ToolOutputKind.INVALID_ARGUMENTS, output.text
    assert "at most 10 seconds" in output.text
