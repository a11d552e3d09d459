"""The adapters: a tool's spec in each API's shape, and each framework running tools end to end.

Every framework test runs a real command through a real `LocalExecutor`,
driven by that framework's own test model: pydantic-ai's `TestModel` and
`FunctionModel`, a scripted `Model` for the OpenAI Agents SDK (no network),
LangChain's fake chat model and its tool invoke.
"""

from __future__ import annotations

import copy
import dataclasses
import enum
import json
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Literal, TypedDict

import pytest

from executor import (
    AgentContext,
    Command,
    DefaultContext,
    LocalExecutor,
    ToolCallEvents,
    ToolCallStart,
    ToolExecuted,
    ToolOutput,
    ToolOutputKind,
    WorkspacePath,
    tool,
)

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    """The frameworks run on asyncio (the OpenAI Agents SDK and LangChain need it)."""
    return "asyncio"


@pytest.fixture
async def local(tmp_path: Path) -> AsyncIterator[LocalExecutor]:
    async with LocalExecutor(tmp_path) as executor:
        yield executor


@tool
async def run(context: AgentContext, command: str, timeout: float = 30) -> str:
    """Runs a shell command in the workspace and returns its output.

    Args:
        command: The shell command.
        timeout: Seconds before it is stopped.
    """
    output = await context.executor().exec_cmd(Command.shell(command).with_timeout(timeout))
    return output.text()


@tool
async def stamp(context: AgentContext) -> str:
    """Writes the file stamp.txt with a shell command, and says so."""
    await context.executor().exec_cmd(Command.shell("echo stamped > stamp.txt"))
    return "stamped"


class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


@dataclasses.dataclass
class Options:
    depth: int = 2
    names: list[str] = dataclasses.field(default_factory=list)


class Pair(TypedDict):
    left: int
    right: str


@dataclasses.dataclass
class Leaf:
    value: int


@dataclasses.dataclass
class Tree:
    leaves: list[Leaf]
    label: str | None = None


@tool
async def everything(
    path: WorkspacePath,
    mode: Literal["fast", "slow"] = "fast",
    colour: Colour = Colour.RED,
    limit: int = 10,
    ratio: float | None = None,
    options: Options | None = None,
    pair: Pair | None = None,
    tree: Tree | None = None,
    data: bytes = b"",
    span: tuple[int, int] = (1, 2),
    tags: list[str] | None = None,
) -> str:
    """Takes one of every kind of parameter and echoes them back as JSON.

    Args:
        path: A workspace path.
        limit: How many.
    """
    return json.dumps(
        {
            "path": str(path),
            "mode": mode,
            "colour": colour.value,
            "limit": limit,
            "ratio": ratio,
            "options": None if options is None else dataclasses.asdict(options),
            "pair": pair,
            "tree": None if tree is None else dataclasses.asdict(tree),
            "data": data.decode(),
            "span": list(span),
            "tags": tags,
        }
    )


@dataclasses.dataclass
class Node:
    children: list[Node]


@tool
async def walk(root: Node) -> str:
    """Walks a tree."""
    return "ok"


@tool
async def open_ended(settings: dict[str, int], anything: Any = None) -> str:
    """Takes a mapping, which strict mode cannot describe."""
    return "ok"


def _walk(schema: object) -> list[dict[str, Any]]:
    """Every schema object below `schema`, itself included."""
    found: list[dict[str, Any]] = []
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            found.append(node)
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return found


# --- spec shapes ------------------------------------------------------------------------


def test_plain_spec_is_unchanged_by_the_shapes() -> None:
    """`tool.spec` stays OpenAI's plain function shape: optional parameters are not required."""
    spec = everything.spec
    assert set(spec) == {"name", "description", "parameters"}
    assert spec["parameters"]["required"] == ["path"]
    assert spec["parameters"]["properties"]["limit"]["default"] == 10


def test_openai_strict_keeps_optional_parameters_optional() -> None:
    """Strict mode requires every property; the optional ones are nullable, their default named."""
    shaped = everything.spec_for("openai")
    assert shaped["type"] == "function"
    function = shaped["function"]
    assert function["strict"] is True
    parameters = function["parameters"]
    properties = parameters["properties"]
    assert (
        parameters["required"]
        == list(properties)
        == list(everything.spec["parameters"]["properties"])
    )
    assert parameters["additionalProperties"] is False
    assert properties["path"]["type"] == "string"  # required: not nullable
    assert properties["limit"]["type"] == ["integer", "null"]
    assert "null for the default, 10" in properties["limit"]["description"]
    assert None in properties["mode"]["enum"]
    assert {"type": "null"} in properties["ratio"]["anyOf"]
    assert {"type": "null"} in properties["options"]["anyOf"]
    for node in _walk(parameters):
        assert "default" not in node
        if node.get("type") == "object" or "properties" in node:
            assert node["additionalProperties"] is False
            assert node["required"] == list(node["properties"])


def test_openai_strict_schema_is_what_the_agents_sdk_makes_strict_unchanged() -> None:
    """The OpenAI Agents SDK's own `ensure_strict_json_schema` finds nothing to change."""
    from agents.strict_schema import ensure_strict_json_schema

    for each in (everything, run, stamp):
        for shape in ("openai", "openai-responses"):
            shaped = each.spec_for(shape)
            parameters = shaped["function" if shape == "openai" else "parameters"]
            if shape == "openai":
                parameters = parameters["parameters"]
            assert ensure_strict_json_schema(copy.deepcopy(parameters)) == parameters


async def test_strict_nulls_stand_for_the_defaults() -> None:
    """What strict mode sends for the parameters left out (null) runs with their defaults."""
    strict = everything.spec_for("openai")["function"]["parameters"]
    arguments: dict[str, Any] = {name: None for name in strict["properties"]}
    arguments["path"] = "src/app.py"
    arguments["options"] = {"depth": None, "names": None}
    arguments["tree"] = {"leaves": [{"value": 1}], "label": None}
    result = await everything.invoke(None, arguments)
    assert result.kind is ToolOutputKind.OK, result.text
    assert json.loads(result.text) == {
        "path": "src/app.py",
        "mode": "fast",
        "colour": "red",
        "limit": 10,
        "ratio": None,
        "options": {"depth": 2, "names": []},
        "pair": None,
        "tree": {"leaves": [{"value": 1}], "label": None},
        "data": "",
        "span": [1, 2],
        "tags": None,
    }


async def test_null_for_a_required_parameter_is_still_refused() -> None:
    """A null stands for a default only: a required parameter's null is an invalid argument."""
    result = await everything.invoke(None, {"path": None})
    assert result.kind is ToolOutputKind.INVALID_ARGUMENTS
    assert "path" in result.text


def test_openai_shape_without_a_strict_form() -> None:
    """A mapping parameter has no strict form: strict is off, or a TypeError when insisted on."""
    shaped = open_ended.spec_for("openai")["function"]
    assert shaped["strict"] is False
    assert shaped["parameters"] == open_ended.spec["parameters"]
    with pytest.raises(TypeError, match="settings"):
        open_ended.spec_for("openai", strict=True)
    plain = everything.spec_for("openai-responses", strict=False)
    assert plain == {"type": "function", **everything.spec, "strict": False}


def test_anthropic_and_mcp_shapes() -> None:
    """Anthropic takes the schema as `input_schema`, MCP as `inputSchema`, as the MCP SDK reads."""
    from mcp import types

    spec = everything.spec
    assert everything.spec_for("anthropic") == {
        "name": "everything",
        "description": spec["description"],
        "input_schema": spec["parameters"],
    }
    shaped = everything.spec_for("mcp")
    assert shaped["inputSchema"] == spec["parameters"]
    listed = types.Tool.model_validate(shaped)
    assert listed.name == "everything"
    assert listed.input_schema == spec["parameters"]


def test_gemini_shape_is_in_the_openapi_subset() -> None:
    """Gemini's declaration keeps to its subset: no $ref, no number enum; a null is `nullable`."""
    declaration = everything.spec_for("gemini")
    assert set(declaration) == {"name", "description", "parameters"}
    parameters = declaration["parameters"]
    allowed = {
        "type", "format", "description", "nullable", "enum", "properties", "required",
        "items", "minItems", "maxItems", "minimum", "maximum", "minLength", "maxLength",
        "pattern", "anyOf", "minProperties", "maxProperties", "propertyOrdering",
    }  # fmt: skip
    for node in _walk(parameters):
        if node is parameters["properties"] or any(
            node is sub.get("properties") for sub in _walk(parameters)
        ):
            continue  # a properties map: its keys are names
        assert set(node) <= allowed, set(node) - allowed
        assert "enum" not in node or all(isinstance(value, str) for value in node["enum"])
        assert not isinstance(node.get("type"), list)
    properties = parameters["properties"]
    assert parameters["required"] == ["path"]
    assert properties["ratio"] == {"type": "number", "nullable": True}
    assert properties["mode"]["enum"] == ["fast", "slow"]
    assert properties["tree"]["nullable"] is True
    # Tree's leaves refer to Leaf in $defs: inlined.
    assert properties["tree"]["properties"]["leaves"]["items"]["properties"] == {
        "value": {"type": "integer"}
    }
    assert properties["span"]["items"] == {"type": "integer"}
    assert "default: 10" in properties["limit"]["description"]
    assert "parameters" not in stamp.spec_for("gemini")


def test_gemini_refuses_a_type_that_refers_to_itself() -> None:
    """A recursive type has no inline form in Gemini's subset: a TypeError naming it."""
    with pytest.raises(TypeError, match="Node"):
        walk.spec_for("gemini")


def test_unknown_shape_and_strict_elsewhere_are_refused() -> None:
    """An unknown shape, or `strict` for a shape without strict mode, is a ValueError."""
    with pytest.raises(ValueError, match="unknown spec shape 'cohere'"):
        run.spec_for("cohere")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="strict applies to the OpenAI shapes"):
        run.spec_for("anthropic", strict=True)


def test_streaming_tools_and_plain_specs_have_the_shapes() -> None:
    """A StreamingTool's input, and any plain function spec, take the same shapes."""
    from executor import StreamingTool, StreamingToolHandle, spec_in_shape

    class Countdown(StreamingTool[Options, str, int]):
        """Counts down."""

        name = "countdown"

        async def start(self, input: Options) -> StreamingToolHandle[str, int]:
            raise NotImplementedError

    countdown = Countdown()
    assert countdown.spec_for("mcp")["inputSchema"] == countdown.input_schema
    strict = countdown.spec_for("openai-responses")
    assert strict["strict"] is True
    assert strict["parameters"]["required"] == ["depth", "names"]
    plain = {
        "name": "lookup",
        "description": "Looks a word up.",
        "parameters": {
            "type": "object",
            "properties": {"word": {"type": "string"}, "lang": {"type": "string"}},
            "required": ["word"],
        },
    }
    shaped = spec_in_shape(plain, "openai")["function"]["parameters"]
    assert shaped["required"] == ["word", "lang"]
    assert shaped["properties"]["lang"]["type"] == ["string", "null"]
    assert shaped["additionalProperties"] is False


# --- pydantic-ai ------------------------------------------------------------------------


async def test_pydantic_ai_test_model_runs_a_command(local: LocalExecutor, tmp_path: Path) -> None:
    """pydantic-ai's TestModel calls the tool, and its command really runs in the workspace."""
    from pydantic_ai import Agent
    from pydantic_ai.models.test import TestModel

    from executor import PydanticAIToolset

    agent = Agent(TestModel(call_tools=["stamp"]), toolsets=[PydanticAIToolset([stamp], local)])
    result = await agent.run("stamp it")
    assert (tmp_path / "stamp.txt").read_text() == "stamped\n"
    assert json.loads(result.output) == {"stamp": "stamped"}


async def test_pydantic_ai_invalid_argument_is_a_model_retry(
    local: LocalExecutor, tmp_path: Path
) -> None:
    """A bad argument is a ModelRetry, the corrected call runs, a failed command a ToolFailed."""
    from pydantic_ai import Agent
    from pydantic_ai.messages import (
        ModelMessage,
        ModelRequest,
        ModelResponse,
        RetryPromptPart,
        TextPart,
        ToolCallPart,
        ToolReturnPart,
    )
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from executor import PydanticAIToolset

    script = [
        ToolCallPart(
            "run", {"command": "echo one > one.txt", "timeout": "soon"}, tool_call_id="t1"
        ),
        ToolCallPart("run", {"command": "echo one > one.txt", "timeout": None}, tool_call_id="t2"),
        ToolCallPart("run", {"command": "echo broken >&2; exit 4"}, tool_call_id="t3"),
    ]

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        assert [definition.name for definition in info.function_tools] == ["run"]
        if script:
            return ModelResponse(parts=[script.pop(0)])
        return ModelResponse(parts=[TextPart("done")])

    agent = Agent(FunctionModel(model), toolsets=[PydanticAIToolset([run], local)])
    result = await agent.run("write one.txt")
    assert result.output == "done"
    assert (tmp_path / "one.txt").read_text() == "one\n"
    parts = [
        part
        for message in result.all_messages()
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, RetryPromptPart | ToolReturnPart)
    ]
    assert [part.tool_call_id for part in parts] == ["t1", "t2", "t3"]
    retried, ran, failed = parts
    assert isinstance(retried, ToolReturnPart)
    assert "argument 'timeout': expected a number" in str(retried.content)
    assert retried.outcome == "retried"  # a ModelRetry, on the retry budget
    assert isinstance(ran, ToolReturnPart)
    assert ran.content == ""
    assert isinstance(failed, ToolReturnPart)
    assert "command exited with code 4" in str(failed.content)
    assert "broken" in str(failed.content)
    assert failed.outcome == "failed"


async def test_pydantic_ai_takes_the_executor_from_deps(tmp_path: Path) -> None:
    """With no context given, a run's deps that are an executor are the tools' context."""
    from pydantic_ai import Agent
    from pydantic_ai.models.test import TestModel

    from executor import PydanticAIToolset

    agent = Agent(TestModel(call_tools=["stamp"]), deps_type=LocalExecutor)
    async with LocalExecutor(tmp_path) as executor:
        await agent.run("stamp it", deps=executor, toolsets=[PydanticAIToolset([stamp])])
    assert (tmp_path / "stamp.txt").read_text() == "stamped\n"


async def test_pydantic_ai_reports_agent_events(local: LocalExecutor) -> None:
    """Through `events`, each pydantic-ai tool call is reported under pydantic-ai's call id."""
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from executor import PydanticAIToolset

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            return ModelResponse(
                parts=[ToolCallPart("run", {"command": "echo hi"}, tool_call_id="p1")]
            )
        return ModelResponse(parts=[TextPart("done")])

    calls = ToolCallEvents(local)
    agent = Agent(FunctionModel(model), toolsets=[PydanticAIToolset([run], events=calls)])
    await agent.run("go")
    assert calls.history[0] == ToolCallStart(tool_name="run", tool_call_id="p1")
    assert calls.history[-1] == ToolExecuted(
        tool_name="run",
        tool_call_id="p1",
        success=True,
        error=None,
        kind=ToolOutputKind.OK,
    )


async def test_pydantic_ai_toolset_refuses_bad_setup(local: LocalExecutor) -> None:
    """Duplicate names, non-tools, a context with events, and negative retries are refused."""
    from executor import PydanticAIToolset

    with pytest.raises(ValueError, match="two tools are named 'run'"):
        PydanticAIToolset([run, run], local)
    with pytest.raises(TypeError, match="expected executor Tools"):
        PydanticAIToolset([print], local)  # type: ignore[list-item]
    with pytest.raises(ValueError, match="not both"):
        PydanticAIToolset([run], local, events=ToolCallEvents(local))
    with pytest.raises(ValueError, match="max_retries"):
        PydanticAIToolset([run], local, max_retries=-1)


# --- LangChain --------------------------------------------------------------------------


async def test_langchain_tool_runs_a_model_tool_call(local: LocalExecutor, tmp_path: Path) -> None:
    """A fake chat model's tool call, invoked on the structured tool, runs the command."""
    from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
    from langchain_core.utils.function_calling import convert_to_openai_tool

    from executor import langchain_tools

    [structured] = langchain_tools([run], local)
    assert convert_to_openai_tool(structured)["function"]["parameters"]["required"] == ["command"]
    model = FakeMessagesListChatModel(
        responses=[
            AIMessage(
                content="",
                tool_calls=[
                    {"name": "run", "args": {"command": "echo lc > lc.txt; echo ok"}, "id": "l1"}
                ],
            )
        ]
    )
    reply = await model.ainvoke([HumanMessage("go")])
    assert isinstance(reply, AIMessage)
    message = await structured.ainvoke(reply.tool_calls[0])
    assert isinstance(message, ToolMessage)
    assert (message.content, message.status, message.tool_call_id) == ("ok\n", "success", "l1")
    assert message.artifact == ToolOutput("ok\n")
    assert (tmp_path / "lc.txt").read_text() == "lc\n"


async def test_langchain_failures_are_error_messages(local: LocalExecutor) -> None:
    """Invalid arguments and a failing command come back as ToolMessages with status error."""
    from langchain_core.messages import ToolMessage

    from executor import langchain_tool

    structured = langchain_tool(run, local)
    invalid = await structured.ainvoke(
        {
            "type": "tool_call",
            "id": "l2",
            "name": "run",
            "args": {"command": "true", "timeout": "x"},
        }
    )
    assert isinstance(invalid, ToolMessage)
    assert invalid.status == "error"
    assert "argument 'timeout': expected a number" in str(invalid.content)
    failed = await structured.ainvoke(
        {"type": "tool_call", "id": "l3", "name": "run", "args": {"command": "exit 5"}}
    )
    assert isinstance(failed, ToolMessage)
    assert failed.status == "error"
    assert "command exited with code 5" in str(failed.content)


async def test_langchain_on_failure_raise(local: LocalExecutor) -> None:
    """With on_failure="raise" a failed command raises; bad arguments still go to the model."""
    from langchain_core.messages import ToolMessage

    from executor import ToolCallFailed, langchain_tool

    structured = langchain_tool(run, local, on_failure="raise")
    with pytest.raises(ToolCallFailed) as raised:
        await structured.ainvoke({"command": "exit 6"})
    assert raised.value.output.exit_code == 6
    assert raised.value.output.kind is ToolOutputKind.FAILED
    invalid = await structured.ainvoke(
        {"type": "tool_call", "id": "l4", "name": "run", "args": {"commmand": "true"}}
    )
    assert isinstance(invalid, ToolMessage)
    assert invalid.status == "error"
    assert "unknown argument" in str(invalid.content)


async def test_langchain_reports_agent_events(local: LocalExecutor) -> None:
    """Through `events`, a LangChain tool call is reported under its tool call id."""
    from executor import langchain_tool

    calls = ToolCallEvents(local)
    structured = langchain_tool(run, events=calls)
    await structured.ainvoke(
        {"type": "tool_call", "id": "l5", "name": "run", "args": {"command": "true"}}
    )
    assert [getattr(event, "tool_call_id", None) for event in calls.history] == ["l5"] * 4


# --- OpenAI Agents SDK ------------------------------------------------------------------


def _scripted_model(turns: list[Any]) -> Any:
    """A Model of the OpenAI Agents SDK that answers each request with the next scripted item."""
    from agents import Usage
    from agents.items import ModelResponse
    from agents.models.interface import Model

    class Scripted(Model):
        def __init__(self) -> None:
            self.inputs: list[Any] = []

        async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
            self.inputs.append(copy.deepcopy(kwargs["input"]))
            return ModelResponse(output=[turns.pop(0)], usage=Usage(), response_id=None)

        def stream_response(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError("the scripted model answers whole responses only")

    return Scripted()


def _function_call(call_id: str, arguments: dict[str, Any]) -> Any:
    from openai.types.responses import ResponseFunctionToolCall

    return ResponseFunctionToolCall(
        type="function_call",
        call_id=call_id,
        name="run",
        arguments=json.dumps(arguments),
        id=f"fc_{call_id}",
        status="completed",
    )


def _message(text: str) -> Any:
    from openai.types.responses import ResponseOutputMessage, ResponseOutputText

    return ResponseOutputMessage(
        id="msg_1",
        type="message",
        role="assistant",
        status="completed",
        content=[ResponseOutputText(type="output_text", text=text, annotations=[])],
    )


def _outputs(inputs: list[Any]) -> dict[str, str]:
    """The function call outputs the model was sent, by call id."""
    return {
        item["call_id"]: item["output"]
        for item in inputs
        if isinstance(item, dict) and item.get("type") == "function_call_output"
    }


async def test_openai_agents_scripted_model_runs_and_retries(
    local: LocalExecutor, tmp_path: Path
) -> None:
    """A bad call gets the failure text back, the fixed call runs, a failure is the result."""
    from agents import Agent, FunctionTool, RunConfig, Runner

    from executor import openai_agents_tools

    tools = openai_agents_tools([run], local)
    assert isinstance(tools[0], FunctionTool)
    assert tools[0].strict_json_schema is True
    assert tools[0].params_json_schema == run.spec_for("openai-responses")["parameters"]
    model = _scripted_model(
        [
            _function_call("o1", {"command": "echo agents > a.txt", "timeout": "soon"}),
            _function_call("o2", {"command": "echo agents > a.txt", "timeout": None}),
            _function_call("o3", {"command": "echo nope >&2; exit 7", "timeout": None}),
            _message("done"),
        ]
    )
    agent = Agent(name="dev", model=model, tools=tools)
    result = await Runner.run(agent, "go", run_config=RunConfig(tracing_disabled=True))
    assert result.final_output == "done"
    assert (tmp_path / "a.txt").read_text() == "agents\n"
    outputs = _outputs(model.inputs[-1])
    assert "argument 'timeout': expected a number" in outputs["o1"]
    assert outputs["o2"] == ""
    assert "command exited with code 7" in outputs["o3"]
    assert "nope" in outputs["o3"]


async def test_openai_agents_failure_function_none_raises(local: LocalExecutor) -> None:
    """With failure_error_function=None, a refused argument fails the run instead of retrying."""
    from agents import Agent, RunConfig, Runner, UserError

    from executor import ToolArgumentsRejected, openai_agents_tools

    tools = openai_agents_tools([run], local, failure_error_function=None)
    model = _scripted_model(
        [_function_call("o4", {"command": "true", "timeout": "x"}), _message("no")]
    )
    agent = Agent(name="dev", model=model, tools=tools)
    with pytest.raises(UserError) as raised:
        await Runner.run(agent, "go", run_config=RunConfig(tracing_disabled=True))
    # The SDK wraps what a tool raises in its UserError.
    assert isinstance(raised.value.__cause__, ToolArgumentsRejected)
    assert "expected a number" in str(raised.value.__cause__)


async def test_openai_agents_takes_the_run_context(tmp_path: Path) -> None:
    """With no context given, the run's context (an AgentContext) is the tools' context."""
    from agents import Agent, RunConfig, Runner

    from executor import openai_agents_tool

    model = _scripted_model([_function_call("o5", {"command": "echo ctx > c.txt"}), _message("ok")])
    model_tool = openai_agents_tool(run)
    agent: Agent[DefaultContext] = Agent(name="dev", model=model, tools=[model_tool])
    async with LocalExecutor(tmp_path) as executor:
        await Runner.run(
            agent,
            "go",
            context=DefaultContext.from_executor(executor),
            run_config=RunConfig(tracing_disabled=True),
        )
    assert (tmp_path / "c.txt").read_text() == "ctx\n"


# --- the extras -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("module", "framework", "extra"),
    [
        ("pydantic_ai", "pydantic_ai", "pydantic-ai"),
        ("langchain", "langchain_core", "langchain"),
        ("openai_agents", "agents", "openai-agents"),
    ],
)
def test_a_missing_framework_names_its_extra(module: str, framework: str, extra: str) -> None:
    """Without the framework installed, importing its adapter says which extra to install."""
    script = (
        "import sys\n"
        f"sys.modules[{framework!r}] = None\n"
        "try:\n"
        f"    import executor._adapters.{module}\n"
        "except ImportError as error:\n"
        "    print(error)\n"
    )
    printed = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    ).stdout
    assert f"pip install 'tool-executor[{extra}]'" in printed


# --- the standard toolset ---------------------------------------------------------------


def test_every_standard_tool_has_each_shape() -> None:
    """Each standard tool is strict-valid for OpenAI (unless it takes a mapping), MCP and Gemini."""
    from agents.strict_schema import ensure_strict_json_schema
    from mcp import types

    from executor import Toolset, strict_json_schema

    tools = list(Toolset())
    assert tools
    for each in tools:
        function = each.spec_for("openai")["function"]
        parameters = function["parameters"]
        if function["strict"]:
            assert ensure_strict_json_schema(copy.deepcopy(parameters)) == parameters
        else:
            # Only a mapping somewhere (a terminal's `env`) leaves a tool without one.
            assert parameters == each.spec["parameters"]
            with pytest.raises(TypeError, match="open to any keys"):
                strict_json_schema(parameters)
        assert types.Tool.model_validate(each.spec_for("mcp")).name == each.name
        each.spec_for("gemini")
        assert each.spec_for("anthropic")["input_schema"] == each.spec["parameters"]
    assert Toolset()["run"].spec_for("openai")["function"]["strict"] is True


async def test_pydantic_ai_drives_the_standard_toolset(tmp_path: Path) -> None:
    """A FunctionModel writes a file and runs a command through the standard toolset's tools."""
    from pydantic_ai import Agent
    from pydantic_ai.messages import (
        ModelMessage,
        ModelResponse,
        TextPart,
        ToolCallPart,
        ToolReturnPart,
    )
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from executor import PydanticAIToolset, Toolset

    script = [
        ToolCallPart("write_file", {"path": "notes.md", "content": "one\ntwo\n"}, tool_call_id="w"),
        ToolCallPart("run", {"command": "wc -l < notes.md"}, tool_call_id="r"),
        ToolCallPart("read_file", {"path": "../outside"}, tool_call_id="bad"),
    ]

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if script:
            return ModelResponse(parts=[script.pop(0)])
        return ModelResponse(parts=[TextPart("done")])

    toolset = Toolset()
    async with LocalExecutor(tmp_path) as executor, toolset:
        adapter = PydanticAIToolset(list(toolset), toolset.context(executor))
        result = await Agent(FunctionModel(model), toolsets=[adapter]).run("count the lines")
    returns = {
        part.tool_call_id: part
        for message in result.all_messages()
        for part in getattr(message, "parts", ())
        if isinstance(part, ToolReturnPart)
    }
    assert (tmp_path / "notes.md").read_text() == "one\ntwo\n"
    assert "2" in str(returns["r"].content)
    assert returns["bad"].outcome == "retried"
    assert "'..'" in str(returns["bad"].content)
