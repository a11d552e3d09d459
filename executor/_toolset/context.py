"""The agent context the toolset's tools run in, and how a tool runs a command through it.

Every tool takes its context as its first argument: `ToolsetContext` (made by
`Toolset.context`) or any other `AgentContext`. `execute` is the one way a
tool runs a command: through `context.executor()`, so the executor's own
wrappers enforce policy, streaming to the context's `on_output` sink and
recording the output in `last_output`. A `ToolsetContext` hands out its
executor in the agent-safe environment (`executor._toolset.environment`):
pagers off, editors that fail, prompts that fail or read end of file.
"""

from __future__ import annotations

from typing import Any

import attrs

from executor._core.base import ToolExecutor
from executor._core.commands import Command
from executor._core.errors import CommandError
from executor._core.output import CommandOutput, Sink
from executor._toolset.environment import EnvironmentSetting, agent_executor, check_environment


@attrs.define(eq=False)
class ToolsetContext:
    """The agent context the toolset's tools run in.

    It holds the executor, and two things a server or UI wants of each call:
    `on_output`, a sink (`chunk -> None`, sync or async) that sees each
    command's output as it is read, and `last_output`, the `CommandOutput` of
    the call's last command (also a failed one), which the tools set so a
    caller can report the exit code and stderr apart. Use one context per
    call when calls run concurrently. Any other `AgentContext` works too: the
    tools then stream nothing and record nothing, and run their commands in
    its executor's environment as it is.

    Attributes:
        on_output: Where live output goes, or `None`.
        last_output: The last command's output, once a tool ran one.
        environment: The agent-safe environment the commands get, as
            `Toolset(environment=...)` takes it (`True`, `False`, or the
            defaults changed per variable); `None`: the toolset's, which
            `Toolset.call` sets, else the defaults.
    """

    _executor: ToolExecutor = attrs.field(alias="executor")
    on_output: Sink | None = None
    last_output: CommandOutput | None = None
    environment: EnvironmentSetting | None = attrs.field(default=None, kw_only=True)

    def __attrs_post_init__(self) -> None:
        if not isinstance(self._executor, ToolExecutor):
            raise TypeError(f"expected a ToolExecutor, got {type(self._executor).__name__}")
        if self.environment is not None:
            self.environment = check_environment(self.environment)

    def executor(self) -> ToolExecutor:
        """The executor the tools run commands through: the context's, in its environment.

        With the environment on it is an `AgentEnvironment` around the
        context's executor, the same one for every context of that executor
        (the toolset keeps its persistent shell by executor); off, the
        context's executor itself.
        """
        setting = True if self.environment is None else self.environment
        return agent_executor(self._executor, setting)


def output_sink(context: object) -> Sink | None:
    """The context's live-output sink (`on_output`), or `None` when it has none."""
    sink = getattr(context, "on_output", None)
    return sink if callable(sink) else None


def remember(context: object, output: CommandOutput) -> None:
    """Record `output` as the context's `last_output` (a `ToolsetContext` only)."""
    if isinstance(context, ToolsetContext):
        context.last_output = output


async def execute(context: Any, cmd: Command, *, stream: bool = True) -> CommandOutput:
    """Run `cmd` through the context's executor, streaming to its sink, recording the output."""
    executor: ToolExecutor = context.executor()
    sink = output_sink(context) if stream else None
    try:
        if sink is None:
            output = await executor.exec_cmd(cmd)
        else:
            output = await executor.exec_cmd_streaming(cmd, sink)
    except CommandError as error:
        remember(context, error.output)
        raise
    remember(context, output)
    return output
