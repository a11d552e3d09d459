"""The error tree.

```
CommandError (Exception)             .output: CommandOutput
├── NonZeroExit                      exit code != 0, killed by a signal, or a file I/O error
│   └── OutOfMemory                  the kernel's OOM killer ended it (or a process of its tree)
├── TimedOut (also TimeoutError)     .timeout; .output = what was read before the kill
├── ExecutorError                    the executor itself failed or refused
│   ├── PolicyDenied                 a wrapper refused the command; the message is for the model
│   │   ├── ShellParseError          a policy could not parse the script, so it refused it
│   │   └── PathRefused              a confined executor refused a path outside its workdir
│   ├── EngineError                  the Docker engine answered with an error, or was unreachable
│   └── JournalError                 the idempotency journal refused or failed
│       └── RunInterrupted           a key's earlier run started but never recorded a final
└── ToolStreamError                  a streaming tool failed or broke its event rules
    └── ToolCancelled                it was cancelled before it had a final value
InvalidArgument (ValueError)         a validated argument type rejected a model's value
```

Every `CommandError` carries the output read so far, so a tool can hand the
model what the command printed before it failed.
"""

from __future__ import annotations

import datetime
from typing import Protocol

from executor._core.output import CommandOutput

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


class OutOfMemory(NonZeroExit):
    """The command failed because the kernel's OOM killer ended it, or a process of its tree.

    Raised where the executor can tell (`CommandOutput.oom_killed`: an
    unsandboxed `LocalExecutor` with a memory cgroup, a `DockerExecutor`);
    the message says so, with the executor's memory limit and the peak where
    known. A `NonZeroExit`, so code that catches that catches this too.
    """


class ShellExited(NonZeroExit):
    """The command ended the shell itself (`exit 3`, `kill $$`, `exec true`), or the shell died.

    Raised even when the shell's exit code is 0. `output` is what the command
    printed, with the shell's exit code (128 + N and `signal` N when a
    signal killed it). The next `run` starts a fresh shell, whose output says
    `state_lost`.
    """


class TimedOut(CommandError, TimeoutError):
    """The command ran past its timeout; its process tree was killed.

    `output` holds what was read before the kill.

    Attributes:
        timeout: The seconds that passed: the timeout, or the idle timeout.
        idle: Whether it was the idle timeout: the command printed nothing
            for `timeout` seconds.
    """

    def __init__(
        self, timeout: float, output: CommandOutput | None = None, *, idle: bool = False
    ) -> None:
        message = (
            f"command printed nothing for {timeout:g} s (its idle timeout) and was killed"
            if idle
            else f"command timed out after {timeout:g} s"
        )
        super().__init__(message, output)
        self.timeout = timeout
        self.idle = idle


class ExecutorError(CommandError):
    """The executor itself failed or refused to run the command."""


class PolicyDenied(ExecutorError):
    """A wrapper refused the command; the message says why, in words for the model."""


class ShellParseError(PolicyDenied):
    """A script could not be parsed, so no policy can say what it would run; it is refused.

    Attributes:
        reason: What went wrong, in words.

    """

    rule = "unparseable-script"

    def __init__(self, reason: str) -> None:
        super().__init__(
            f'refused by rule "unparseable-script": the script could not be parsed ({reason}), '
            "so no policy can tell what it would run; check it with `bash -n`, or split it "
            "into smaller commands"
        )
        self.reason = reason


class PathRefused(PolicyDenied):
    """A confined executor refused a path; the message names it and says why.

    Attributes:
        path: The path as the command gave it (joined onto its `current_dir`).
        reason: Why, in words for the model.
        outside: Whether the path leads outside the workdir (rather than
            being refused for its spelling).

    """

    def __init__(self, path: str, reason: str, *, outside: bool = True) -> None:
        verdict = "is outside the workdir" if outside else "is refused"
        super().__init__(f"{path!r} {verdict}: {reason}")
        self.path = path
        self.reason = reason
        self.outside = outside


class EngineError(ExecutorError):
    """The engine answered a request with an error status (or could not be reached).

    Attributes:
        status: The HTTP status, or 0 when the engine could not be reached.

    """

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


class BuildError(ExecutorError):
    """A build failed: `step` is the failing step (`Step 2/3 : RUN make`), `step_output` its output.

    `log` holds the end of the whole build log.
    """

    def __init__(self, message: str, *, step: str | None, step_output: str, log: str) -> None:
        super().__init__(message)
        self.step = step
        self.step_output = step_output
        self.log = log


class RunRecord(Protocol):
    """What `RunInterrupted` tells of a run: the journal's entry (`executor.JournalEntry`)."""

    @property
    def key(self) -> object:
        """The run's idempotency key."""

    @property
    def kind(self) -> str:
        """What kind of run it was (a command, a tool)."""

    @property
    def name(self) -> str:
        """What ran, in words."""

    @property
    def fingerprint(self) -> str:
        """A digest of what ran."""

    @property
    def state(self) -> str:
        """`running`, `interrupted` or `final`."""

    @property
    def started(self) -> datetime.datetime:
        """When it started."""

    @property
    def finished(self) -> datetime.datetime | None:
        """When it was given up as interrupted, if it was."""

    @property
    def attempts(self) -> int:
        """How many times it was started."""

    @property
    def owner(self) -> int | None:
        """The pid of the process that ran it."""


class JournalError(ExecutorError):
    """The journal failed or refused: unreadable, or a key reused for a different run."""


class RunInterrupted(JournalError):
    """A run under this key started and never finished, so whether it took effect is unknown.

    Raised when `on_interrupted="fail"` (the default). Check what the run
    would have done, then run it under a new key, or pass
    `on_interrupted="rerun"` to run it again under this one.

    Attributes:
        key: The key.
        entry: The journal's record of the run (what it was, when it started).
    """

    def __init__(self, entry: RunRecord) -> None:
        started = entry.started.isoformat(timespec="milliseconds")
        super().__init__(
            f"the run under key {entry.key} ({entry.name}) started at {started} and never "
            "finished: it was interrupted, so whether it took effect is unknown. Check, "
            "then run it under a new key, or pass on_interrupted='rerun'"
        )
        self.key = entry.key
        self.entry = entry


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
