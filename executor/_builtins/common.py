"""What the built-in streaming tools share: their executor, input checks, text decoding."""

from __future__ import annotations

import codecs
import math

from executor._core.base import ToolExecutor
from executor._core.errors import InvalidArgument
from executor._tools.tools import AgentContext


def executor_of(context: AgentContext | ToolExecutor) -> ToolExecutor:
    """The executor a built-in tool runs its processes through.

    Used standalone, a built-in tool runs its commands in that executor's
    environment as it is. Built on a toolset's context
    (`TerminalTool(toolset.context(ex))`), as the toolset itself builds
    them, it gets the context's executor in the agent-safe environment
    (`executor._toolset.environment`): pagers off, editors that fail,
    prompts that fail or read end of file.

    Args:
        context: An agent context (`DefaultContext.from_executor(ex)`), or
            the executor itself.

    Raises:
        TypeError: `context` is neither.
    """
    if isinstance(context, ToolExecutor):
        return context
    if isinstance(context, AgentContext):
        executor = context.executor()
        if isinstance(executor, ToolExecutor):
            return executor
        raise TypeError(
            f"the agent context's executor() returned {type(executor).__name__}, not a ToolExecutor"
        )
    raise TypeError(
        "a built-in tool needs an agent context (DefaultContext.from_executor(ex)) or a "
        f"ToolExecutor, got {type(context).__name__}"
    )


def is_unattended(executor: ToolExecutor) -> bool:
    """Whether nobody types into the terminals of `executor`'s commands.

    An executor says so with a true `unattended` attribute, itself or one it
    wraps (`inner`, down the chain): the agent-safe environment of a
    toolset's context (`AgentEnvironment`) does, since a model calling the
    toolset's tools has no keyboard.
    """
    seen: set[int] = set()
    current: object = executor
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if getattr(current, "unattended", False) is True:
            return True
        try:
            current = getattr(current, "inner", None)
        except Exception:  # a wrapper whose executor is gone
            return False
    return False


def check_timeout_secs(timeout: object) -> None:
    """Refuse a tool input's `timeout_secs` unless it is None or a positive, finite number.

    Raises:
        InvalidArgument: `timeout` is a bool, not a number, not finite, or not positive.
    """
    if timeout is not None and (
        isinstance(timeout, bool)
        or not isinstance(timeout, int | float)
        or not math.isfinite(timeout)
        or timeout <= 0
    ):
        raise InvalidArgument(timeout, "timeout_secs must be a positive number of seconds")


class StreamDecoder:
    """Decodes a stream's bytes as UTF-8 as they come, a character split across chunks kept whole.

    Invalid bytes become U+FFFD, as `CommandOutput.text()` decodes them.
    """

    def __init__(self) -> None:
        """A decoder with nothing held back."""
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")

    def decode(self, data: bytes) -> str:
        """The text of `data`, less the start of a character it ends in (held for the next call)."""
        return self._decoder.decode(data)

    def flush(self) -> str:
        """What is held back, at the end of the stream (an incomplete character as U+FFFD)."""
        return self._decoder.decode(b"", final=True)
