"""What the built-in streaming tools share: their executor, input checks, text decoding."""

from __future__ import annotations

import codecs
import math

from executor._core.base import ToolExecutor
from executor._core.errors import InvalidArgument
from executor._tools.tools import AgentContext


def executor_of(context: AgentContext | ToolExecutor) -> ToolExecutor:
    """The executor a built-in tool runs its processes through.

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
