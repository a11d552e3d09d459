"""Run the tool commands of AI agents: shell scripts, argv commands, file reads and writes.

```python
from executor import Command, LocalExecutor

async with LocalExecutor("/srv/checkout", default_timeout=30) as ex:
    output = await ex.exec_cmd(Command.shell("git status --short"))
    print(output.text())
```
"""

import importlib as _importlib
import typing as _typing

if _typing.TYPE_CHECKING:
    from executor._core.base import (
        LoadedFile,
        Sink,
        ToolExecutor,
    )
    from executor._core.commands import (
        Command,
        Exec,
        ReadFile,
        Shell,
        StrPath,
        WriteFile,
    )
    from executor._core.errors import (
        CommandError,
        ExecutorError,
        InvalidArgument,
        NonZeroExit,
        PolicyDenied,
        TimedOut,
    )
    from executor._core.output import (
        Chunk,
        CommandOutput,
        Stderr,
        Stdout,
    )
    from executor._core.session import (
        ProcessSession,
        SessionChunk,
        WrappedSession,
    )
    from executor._core.wrappers import (
        CheckedExecutor,
        ReadOnly,
        ScopedExecutor,
        WrappedExecutor,
    )
    from executor._docker.executor import (
        DockerExecutor,
    )
    from executor._journal import (
        Claim,
        IdempotencyKey,
        Journal,
        JournalEntry,
        JournalError,
        Outcome,
        RunInterrupted,
        SqliteJournal,
    )
    from executor._local.executor import (
        LocalExecutor,
    )
    from executor._local.sandbox import (
        Sandbox,
        SandboxSupport,
    )
    from executor._policies.idempotent import (
        Idempotent,
        KeyedExecutor,
    )
    from executor._policies.observed import (
        CommandCancelled,
        CommandChunk,
        CommandEvent,
        CommandFinished,
        CommandStarted,
        Observed,
        Observer,
    )
    from executor._policies.policies import (
        Approval,
        ApprovalRequest,
        Approver,
        Audit,
        AuditEvent,
        AuditRecord,
        Secrets,
        Verdict,
        describe,
    )
    from executor._policies.rules import (
        CommandRules,
        DangerousCommands,
        Finding,
        check_script,
    )
    from executor._shell.parser import (
        ShellParseError,
        SimpleCommand,
        parse_command,
        parse_script,
    )
    from executor._ssh.executor import (
        SshExecutor,
    )
    from executor._tools.args import (
        BoundedInt,
        GitRange,
        GitRevision,
        RestrictedUrl,
        WorkspaceGlob,
        WorkspacePath,
    )
    from executor._tools.events import (
        Bus,
        Envelope,
        EventSequencer,
        MemoryBus,
        ToolCancelled,
        ToolEvent,
        ToolEventKind,
        ToolStreamError,
        Topic,
        bridge,
    )
    from executor._tools.streaming import (
        Buffer,
        Bytes,
        ContextWindow,
        Manual,
        OutputApprovalRequest,
        OutputApprover,
        Progress,
        Resize,
        Signal,
        StdinEvent,
        StreamingPolicy,
        StreamingTool,
        StreamingToolHandle,
        StreamingToolResult,
        StreamingToolSession,
        Summarise,
        Summarizer,
        TaskHandle,
        Text,
        TimeoutAction,
        ToolChannel,
        UnixSignal,
        Window,
    )
    from executor._tools.tools import (
        AgentContext,
        DefaultContext,
        Tool,
        ToolOutput,
        tool,
    )

__version__ = "0.1.0"

# Where each public name lives. `import executor` loads none of them: a name's
# module (and the backend or dependency behind it) is imported the first time
# the name is used, so a program that needs the local executor never pays for
# Docker's, SSH's or the shell parser's imports.
_HOMES: dict[str, tuple[str, ...]] = {
    "executor._core.base": (
        "LoadedFile",
        "Sink",
        "ToolExecutor",
    ),
    "executor._core.commands": (
        "Command",
        "Exec",
        "ReadFile",
        "Shell",
        "StrPath",
        "WriteFile",
    ),
    "executor._core.errors": (
        "CommandError",
        "ExecutorError",
        "InvalidArgument",
        "NonZeroExit",
        "PolicyDenied",
        "TimedOut",
    ),
    "executor._core.output": (
        "Chunk",
        "CommandOutput",
        "Stderr",
        "Stdout",
    ),
    "executor._core.session": (
        "ProcessSession",
        "SessionChunk",
        "WrappedSession",
    ),
    "executor._core.wrappers": (
        "CheckedExecutor",
        "ReadOnly",
        "ScopedExecutor",
        "WrappedExecutor",
    ),
    "executor._docker.executor": ("DockerExecutor",),
    "executor._journal": (
        "Claim",
        "IdempotencyKey",
        "Journal",
        "JournalEntry",
        "JournalError",
        "Outcome",
        "RunInterrupted",
        "SqliteJournal",
    ),
    "executor._local.executor": ("LocalExecutor",),
    "executor._local.sandbox": (
        "Sandbox",
        "SandboxSupport",
    ),
    "executor._policies.idempotent": (
        "Idempotent",
        "KeyedExecutor",
    ),
    "executor._policies.observed": (
        "CommandCancelled",
        "CommandChunk",
        "CommandEvent",
        "CommandFinished",
        "CommandStarted",
        "Observed",
        "Observer",
    ),
    "executor._policies.policies": (
        "Approval",
        "ApprovalRequest",
        "Approver",
        "Audit",
        "AuditEvent",
        "AuditRecord",
        "Secrets",
        "Verdict",
        "describe",
    ),
    "executor._policies.rules": (
        "CommandRules",
        "DangerousCommands",
        "Finding",
        "check_script",
    ),
    "executor._shell.parser": (
        "ShellParseError",
        "SimpleCommand",
        "parse_command",
        "parse_script",
    ),
    "executor._ssh.executor": ("SshExecutor",),
    "executor._tools.args": (
        "BoundedInt",
        "GitRange",
        "GitRevision",
        "RestrictedUrl",
        "WorkspaceGlob",
        "WorkspacePath",
    ),
    "executor._tools.events": (
        "Bus",
        "Envelope",
        "EventSequencer",
        "MemoryBus",
        "ToolCancelled",
        "ToolEvent",
        "ToolEventKind",
        "ToolStreamError",
        "Topic",
        "bridge",
    ),
    "executor._tools.streaming": (
        "Buffer",
        "Bytes",
        "ContextWindow",
        "Manual",
        "OutputApprovalRequest",
        "OutputApprover",
        "Progress",
        "Resize",
        "Signal",
        "StdinEvent",
        "StreamingPolicy",
        "StreamingTool",
        "StreamingToolHandle",
        "StreamingToolResult",
        "StreamingToolSession",
        "Summarise",
        "Summarizer",
        "TaskHandle",
        "Text",
        "TimeoutAction",
        "ToolChannel",
        "UnixSignal",
        "Window",
    ),
    "executor._tools.tools": (
        "AgentContext",
        "DefaultContext",
        "Tool",
        "ToolOutput",
        "tool",
    ),
}
_HOME_OF = {name: module for module, names in _HOMES.items() for name in names}

__all__ = [
    "AgentContext",
    "Approval",
    "ApprovalRequest",
    "Approver",
    "Audit",
    "AuditEvent",
    "AuditRecord",
    "BoundedInt",
    "Buffer",
    "Bus",
    "Bytes",
    "CheckedExecutor",
    "Chunk",
    "Claim",
    "Command",
    "CommandCancelled",
    "CommandChunk",
    "CommandError",
    "CommandEvent",
    "CommandFinished",
    "CommandOutput",
    "CommandRules",
    "CommandStarted",
    "ContextWindow",
    "DangerousCommands",
    "DefaultContext",
    "DockerExecutor",
    "Envelope",
    "EventSequencer",
    "Exec",
    "ExecutorError",
    "Finding",
    "GitRange",
    "GitRevision",
    "IdempotencyKey",
    "Idempotent",
    "InvalidArgument",
    "Journal",
    "JournalEntry",
    "JournalError",
    "KeyedExecutor",
    "LoadedFile",
    "LocalExecutor",
    "Manual",
    "MemoryBus",
    "NonZeroExit",
    "Observed",
    "Observer",
    "Outcome",
    "OutputApprovalRequest",
    "OutputApprover",
    "PolicyDenied",
    "ProcessSession",
    "Progress",
    "ReadFile",
    "ReadOnly",
    "Resize",
    "RestrictedUrl",
    "RunInterrupted",
    "Sandbox",
    "SandboxSupport",
    "ScopedExecutor",
    "Secrets",
    "SessionChunk",
    "Shell",
    "ShellParseError",
    "Signal",
    "SimpleCommand",
    "Sink",
    "SqliteJournal",
    "SshExecutor",
    "Stderr",
    "StdinEvent",
    "Stdout",
    "StrPath",
    "StreamingPolicy",
    "StreamingTool",
    "StreamingToolHandle",
    "StreamingToolResult",
    "StreamingToolSession",
    "Summarise",
    "Summarizer",
    "TaskHandle",
    "Text",
    "TimedOut",
    "TimeoutAction",
    "Tool",
    "ToolCancelled",
    "ToolChannel",
    "ToolEvent",
    "ToolEventKind",
    "ToolExecutor",
    "ToolOutput",
    "ToolStreamError",
    "Topic",
    "UnixSignal",
    "Verdict",
    "Window",
    "WorkspaceGlob",
    "WorkspacePath",
    "WrappedExecutor",
    "WrappedSession",
    "WriteFile",
    "bridge",
    "check_script",
    "describe",
    "parse_command",
    "parse_script",
    "tool",
]


# Hidden from type checkers, so that a misspelt name is an error there too.
if not _typing.TYPE_CHECKING:

    def __getattr__(name: str) -> _typing.Any:
        module = _HOME_OF.get(name)
        if module is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = getattr(_importlib.import_module(module), name)
        # Kept, so the next use is a plain attribute lookup.
        globals()[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*globals(), *__all__})
