"""One `@tool`, handed to each API and framework: the spec shapes, then three agents.

`tool.spec_for(shape)` writes the spec each API takes: OpenAI's strict mode
(an optional parameter nullable, `null` meaning its default, so strict mode
does not make it required), Anthropic's `input_schema`, MCP's `inputSchema`,
Gemini's function declaration. Then the same tool runs under pydantic-ai
(its `FunctionModel` standing in for a model), the OpenAI Agents SDK (a
scripted `Model`, no network) and LangChain (a tool call invoked on the
structured tool). In each, the model first sends a bad argument: pydantic-ai
turns it into `ModelRetry`, the Agents SDK sends the failure text back, and
LangChain answers with an error `ToolMessage`; the corrected call then runs
its command through a real `LocalExecutor`.
"""

import json
import tempfile
from typing import Any

import anyio
from agents import Agent as OpenAIAgent, RunConfig, Runner, Usage
from agents.items import ModelResponse as AgentsResponse
from agents.models.interface import Model
from langchain_core.messages import ToolMessage
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)
from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from executor import (
    AgentContext,
    Command,
    LocalExecutor,
    PydanticAIToolset,
    langchain_tool,
    openai_agents_tools,
    tool,
)


@tool
async def run(context: AgentContext, command: str, timeout: float = 60) -> str:
    """Runs a shell command in the checkout and returns its output.

    Args:
        command: The shell command.
        timeout: Seconds before it is stopped.
    """
    output = await context.executor().exec_cmd(Command.shell(command).with_timeout(timeout))
    return output.text()


def show_shapes() -> None:
    strict = run.spec_for("openai")["function"]
    timeout = strict["parameters"]["properties"]["timeout"]
    print(f"openai strict={strict['strict']} required={strict['parameters']['required']}")
    print(f"openai timeout: {json.dumps(timeout)}")
    print(f"anthropic: {sorted(run.spec_for('anthropic'))}")
    print(f"mcp: {sorted(run.spec_for('mcp'))}")
    gemini = run.spec_for("gemini")["parameters"]["properties"]["timeout"]
    print(f"gemini timeout: {json.dumps(gemini)}")


async def with_pydantic_ai(executor: LocalExecutor) -> None:
    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        turn = len(messages)
        if turn == 1:  # a bad timeout: the tool refuses it before anything runs
            arguments: dict[str, Any] = {"command": "echo from pydantic-ai", "timeout": "a minute"}
            return ModelResponse(parts=[ToolCallPart("run", arguments, tool_call_id="p1")])
        answer = messages[-1].parts[0]
        assert isinstance(answer, ToolReturnPart)
        if turn == 3:  # the retry: what was wrong, for the model to fix
            print(f"pydantic-ai {answer.outcome}: {answer.content}")
            arguments = {"command": "echo from pydantic-ai", "timeout": None}
            return ModelResponse(parts=[ToolCallPart("run", arguments, tool_call_id="p2")])
        return ModelResponse(parts=[TextPart(f"the tool said: {answer.content}")])

    agent = Agent(FunctionModel(model), toolsets=[PydanticAIToolset([run], executor)])
    result = await agent.run("say hello")
    print(f"pydantic-ai: {result.output.strip()}")


class ScriptedModel(Model):
    """An OpenAI Agents SDK model that answers with scripted items: a test double, no network."""

    def __init__(self, turns: list[Any]) -> None:
        self.turns = turns
        self.inputs: list[Any] = []

    async def get_response(self, *args: Any, **kwargs: Any) -> AgentsResponse:
        """The next scripted item, noting what the model was sent."""
        self.inputs.append(kwargs["input"])
        return AgentsResponse(output=[self.turns.pop(0)], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        """Not scripted: the runner here asks for whole responses."""
        raise NotImplementedError


def function_call(call_id: str, arguments: dict[str, Any]) -> ResponseFunctionToolCall:
    return ResponseFunctionToolCall(
        type="function_call",
        call_id=call_id,
        name="run",
        arguments=json.dumps(arguments),
        status="completed",
    )


async def with_openai_agents(executor: LocalExecutor) -> None:
    done = ResponseOutputMessage(
        id="msg_1",
        type="message",
        role="assistant",
        status="completed",
        content=[ResponseOutputText(type="output_text", text="done", annotations=[])],
    )
    model = ScriptedModel(
        [
            function_call("o1", {"command": "echo from agents", "timeout": "soon"}),
            function_call("o2", {"command": "echo from agents", "timeout": None}),
            done,
        ]
    )
    agent = OpenAIAgent(name="dev", model=model, tools=openai_agents_tools([run], executor))
    await Runner.run(agent, "say hello", run_config=RunConfig(tracing_disabled=True))
    outputs = {
        item["call_id"]: item["output"]
        for item in model.inputs[-1]
        if isinstance(item, dict) and item.get("type") == "function_call_output"
    }
    print(f"openai-agents retry: {outputs['o1']}")
    print(f"openai-agents: {outputs['o2'].strip()}")


async def with_langchain(executor: LocalExecutor) -> None:
    structured = langchain_tool(run, executor)
    for call_id, arguments in (("l1", {"command": "true", "timeout": "x"}), ("l2", {})):
        message = await structured.ainvoke(
            {"type": "tool_call", "id": call_id, "name": "run", "args": arguments}
        )
        assert isinstance(message, ToolMessage)
        print(f"langchain {message.status}: {message.content}")
    message = await structured.ainvoke(
        {"type": "tool_call", "id": "l3", "name": "run", "args": {"command": "echo from langchain"}}
    )
    print(f"langchain {message.status}: {str(message.content).strip()}")


async def main() -> None:
    show_shapes()
    with tempfile.TemporaryDirectory() as workdir:
        async with LocalExecutor(workdir) as executor:
            await with_pydantic_ai(executor)
            await with_openai_agents(executor)
            await with_langchain(executor)


if __name__ == "__main__":
    anyio.run(main)
