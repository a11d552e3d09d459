"""Run the tool commands of AI agents: shell scripts, argv commands, file reads and writes.

```python
from executor import Command, LocalExecutor

async with LocalExecutor("/srv/checkout", default_timeout=30) as ex:
    output = await ex.exec_cmd(Command.shell("git status --short"))
    print(output.text())
```
"""

from executor._args import (
    BoundedInt,
    GitRange,
    GitRevision,
    RestrictedUrl,
    WorkspaceGlob,
    WorkspacePath,
)
from executor._base import LoadedFile, Sink, ToolExecutor
from executor._commands import Command, Exec, ReadFile, Shell, StrPath, WriteFile
from executor._errors import (
    CommandError,
    ExecutorError,
    InvalidArgument,
    NonZeroExit,
    PolicyDenied,
    TimedOut,
)
from executor._events import (
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
from executor._local import LocalExecutor
from executor._observed import (
    CommandCancelled,
    CommandChunk,
    CommandEvent,
    CommandFinished,
    CommandStarted,
    Observed,
    Observer,
)
from executor._output import Chunk, CommandOutput, Stderr, Stdout
from executor._policies import (
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
from executor._rules import CommandRules, DangerousCommands, Finding, check_script
from executor._sandbox import Sandbox, SandboxSupport
from executor._session import ProcessSession, SessionChunk
from executor._shell import ShellParseError, SimpleCommand, parse_command, parse_script
from executor._ssh import SshExecutor
from executor._streaming import (
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
from executor._tools import AgentContext, DefaultContext, Tool, ToolOutput, tool
from executor._wrappers import CheckedExecutor, ReadOnly, ScopedExecutor, WrappedExecutor

__version__ = "0.1.0"

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
    "Envelope",
    "EventSequencer",
    "Exec",
    "ExecutorError",
    "Finding",
    "GitRange",
    "GitRevision",
    "InvalidArgument",
    "LoadedFile",
    "LocalExecutor",
    "Manual",
    "MemoryBus",
    "NonZeroExit",
    "Observed",
    "Observer",
    "OutputApprovalRequest",
    "OutputApprover",
    "PolicyDenied",
    "ProcessSession",
    "Progress",
    "ReadFile",
    "ReadOnly",
    "Resize",
    "RestrictedUrl",
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
    "WriteFile",
    "bridge",
    "check_script",
    "describe",
    "parse_command",
    "parse_script",
    "tool",
]
