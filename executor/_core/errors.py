"""The error tree.

```
CommandError (Exception)             .output: CommandOutput
├── NonZeroExit                      exit code != 0, killed by a signal, or a file I/O error
├── TimedOut (also TimeoutError)     .timeout; .output = what was read before the kill
├── ExecutorError                    the executor itself failed or refused
│   ├── PolicyDenied                 a wrapper refused the command; the message is for the model
│   └── JournalError                 the idempotency journal refused or failed (executor._journal.journal)
│       └── RunInterrupted           a key's earlier run started but never recorded a final
└── ToolStreamError                  a streaming tool failed or broke its event rules
    └── ToolCancelled                it was cancelled before it had a final value
InvalidArgument (ValueError)         a validated argument type rejected a model's value
```

Every `CommandError` carries the output read so far, so a tool can hand the
model what the command printed before it failed.
"""

from __future__ import annotations

from executor._core.output import CommandOutput

__all__ = [
    "CommandError",
    "ExecutorError",
    "InvalidArgument",
    "NonZeroExit",
    "PolicyDenied",
    "TimedOut",
    "ToolCancelled",
    "ToolStreamError",
]

# How much of a failed command's output its message repeats: enough for a model
# to see what went wrong, never so much that one error floods its context.
_MESSAGE_TAIL = 4000
# How much of a rejected value an InvalidArgument message shows.
_VALUE_SHOWN = 200


class CommandError(Exception):
    """A command did not succeed; `output` holds what it printed."""

    def __init__(self, message: str, output: CommandOutput | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.output = output if output is not None else CommandOutput.empty()

    def __str__(self) -> str:
        text = self.output.text()
        if not text or text.strip() == self.message:
            return self.message
        if len(text) > _MESSAGE_TAIL:
            text = f"[... {len(text) - _MESSAGE_TAIL} characters before]\n{text[-_MESSAGE_TAIL:]}"
        return f"{self.message}\n{text}"


class NonZeroExit(CommandError):
    """The command ran and failed: a non-zero exit code, a signal, or a file I/O error.

    `output.exit_code` is the exit code (128 + N when killed by signal N, as a
    shell reports it, with `output.signal` set to N), or `None` for a file
    command, whose OS error message is the output's stderr.
    """


class TimedOut(CommandError, TimeoutError):
    """The command ran past its timeout; its process tree was killed.

    `output` holds what was read before the kill.
    """

    def __init__(self, timeout: float, output: CommandOutput | None = None) -> None:
        super().__init__(f"command timed out after {timeout:g} s", output)
        self.timeout = timeout


class ExecutorError(CommandError):
    """The executor itself failed or refused to run the command."""


class PolicyDenied(ExecutorError):
    """A wrapper refused the command; the message says why, in words for the model."""


class ToolStreamError(CommandError):
    """A streaming tool failed, was refused stdin, or its event stream broke the rules.

    A tool's own exception is the `__cause__`; the message names the tool and
    the error, in words a model can act on.
    """


class ToolCancelled(ToolStreamError):
    """The tool was cancelled before it finished, so it has no final value."""


def outcome_of(error: CommandError) -> str:
    """A one-word outcome for records and spans: timeout, nonzero, denied or error."""
    if isinstance(error, TimedOut):
        return "timeout"
    if isinstance(error, NonZeroExit):
        return "nonzero"
    if isinstance(error, PolicyDenied):
        return "denied"
    return "error"


class InvalidArgument(ValueError):
    """A validated argument type rejected a value.

    The message names the value and the rule it broke, so it can go back to the
    model as it is.
    """

    def __init__(self, value: object, rule: str) -> None:
        shown = repr(value)
        if len(shown) > _VALUE_SHOWN:
            # A model may send megabytes; the message must stay short enough to send back.
            shown = f"{shown[: _VALUE_SHOWN // 2]}...{shown[-_VALUE_SHOWN // 4 :]}"
        super().__init__(f"invalid argument {shown}: {rule}")
        self.value = value
        self.rule = rule
