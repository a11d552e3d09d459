"""Run the tool commands of AI agents: shell scripts, argv commands, file reads and writes.

```python
from executor import Command, LocalExecutor

async with LocalExecutor("/srv/checkout", default_timeout=30) as ex:
    output = await ex.exec_cmd(Command.shell("git status --short"))
    print(output.text())
```
"""

# `ToolExecutor.shell()`, `scoped()` and `read_only()` build what these two folders
# hold, above the core: imported, each puts in the core's registry a loader of its
# code (`executor._core.registry`). Python runs this module before any other of the
# package, so the loaders are in place before any executor exists; the folders import
# nothing else until their code is first used.
from executor import _shells, _wrappers  # noqa: F401

# Not `typing.TYPE_CHECKING`: importing `typing` costs more than all the rest
# of `import executor`. Type checkers take any name TYPE_CHECKING as true.
TYPE_CHECKING = False

if TYPE_CHECKING:
    from typing import Any

    # The public names, each where it lives. Type checkers read them here; at run
    # time nothing here is imported (see `_HOME_OF`).
    from executor._adapters.langchain import (
        InvalidToolArguments as InvalidToolArguments,
        ToolCallFailed as ToolCallFailed,
        langchain_tool as langchain_tool,
        langchain_tools as langchain_tools,
    )
    from executor._adapters.openai_agents import (
        ToolArgumentsRejected as ToolArgumentsRejected,
        openai_agents_tool as openai_agents_tool,
        openai_agents_tools as openai_agents_tools,
    )
    from executor._adapters.pydantic_ai import (
        PydanticAIToolset as PydanticAIToolset,
    )
    from executor._agents.events import (
        AgentStreamEvent as AgentStreamEvent,
        Cancelled as Cancelled,
        PendingToolCall as PendingToolCall,
        ToolCallComplete as ToolCallComplete,
        ToolCallDelta as ToolCallDelta,
        ToolCallEvents as ToolCallEvents,
        ToolCallStart as ToolCallStart,
        ToolExecuted as ToolExecuted,
    )
    from executor._builtins.interpreter import (
        CodeChunk as CodeChunk,
        CodeInterpreterInput as CodeInterpreterInput,
        CodeInterpreterTool as CodeInterpreterTool,
        CodeResult as CodeResult,
        CodeStream as CodeStream,
    )
    from executor._builtins.logformats import (
        LogFormat as LogFormat,
        LogLevel as LogLevel,
    )
    from executor._builtins.logtail import (
        LogEntry as LogEntry,
        LogFilter as LogFilter,
        LogResult as LogResult,
        LogTailerInput as LogTailerInput,
        LogTailerTool as LogTailerTool,
        StartAt as StartAt,
    )
    from executor._builtins.terminal import (
        TerminalChunk as TerminalChunk,
        TerminalInput as TerminalInput,
        TerminalResult as TerminalResult,
        TerminalTool as TerminalTool,
    )
    from executor._core.base import (
        DEFAULT_OUTPUT_LIMIT as DEFAULT_OUTPUT_LIMIT,
        DEFAULT_STREAM_OUTPUT_LIMIT as DEFAULT_STREAM_OUTPUT_LIMIT,
        CheckedExecutor as CheckedExecutor,
        LoadedFile as LoadedFile,
        PersistentShell as PersistentShell,
        ToolExecutor as ToolExecutor,
        WrappedExecutor as WrappedExecutor,
    )
    from executor._core.commands import (
        Command as Command,
        Exec as Exec,
        ReadFile as ReadFile,
        Shell as Shell,
        StrPath as StrPath,
        WriteFile as WriteFile,
    )
    from executor._core.errors import (
        BuildError as BuildError,
        CommandError as CommandError,
        EngineError as EngineError,
        ExecutorError as ExecutorError,
        InvalidArgument as InvalidArgument,
        JournalError as JournalError,
        NonZeroExit as NonZeroExit,
        OutOfMemory as OutOfMemory,
        PathRefused as PathRefused,
        PolicyDenied as PolicyDenied,
        RunInterrupted as RunInterrupted,
        ShellExited as ShellExited,
        ShellParseError as ShellParseError,
        TimedOut as TimedOut,
        ToolCancelled as ToolCancelled,
        ToolStreamError as ToolStreamError,
    )
    from executor._core.jobs import (
        Job as Job,
        JobState as JobState,
        JobStatus as JobStatus,
    )
    from executor._core.output import (
        Chunk as Chunk,
        CommandOutput as CommandOutput,
        Elision as Elision,
        ShellOutput as ShellOutput,
        Sink as Sink,
        Stderr as Stderr,
        Stdout as Stdout,
    )
    from executor._core.render import for_model as for_model
    from executor._core.session import (
        ProcessSession as ProcessSession,
        SessionChunk as SessionChunk,
        WrappedSession as WrappedSession,
    )
    from executor._core.stdin import (
        Bytes as Bytes,
        Resize as Resize,
        Signal as Signal,
        StdinEvent as StdinEvent,
        Text as Text,
        UnixSignal as UnixSignal,
    )
    from executor._docker.build import (
        BuiltImage as BuiltImage,
        DockerBuild as DockerBuild,
        build_image as build_image,
    )
    from executor._docker.container import ContainerState as ContainerState
    from executor._docker.dockerignore import (
        DockerIgnore as DockerIgnore,
    )
    from executor._docker.executor import DockerExecutor as DockerExecutor
    from executor._journal.codec import Outcome as Outcome
    from executor._journal.keys import IdempotencyKey as IdempotencyKey
    from executor._journal.protocol import (
        Claim as Claim,
        Journal as Journal,
        JournalEntry as JournalEntry,
    )
    from executor._journal.sqlite import SqliteJournal as SqliteJournal
    from executor._local.executor import (
        LocalExecutor as LocalExecutor,
    )
    from executor._mcp.calls import elicitation_approver as elicitation_approver
    from executor._mcp.config import (
        McpConfig as McpConfig,
        load_mcp_config as load_mcp_config,
    )
    from executor._mcp.server import McpServer as McpServer
    from executor._policies.idempotent import (
        Idempotent as Idempotent,
        KeyedExecutor as KeyedExecutor,
    )
    from executor._policies.observed import (
        CommandCancelled as CommandCancelled,
        CommandChunk as CommandChunk,
        CommandEvent as CommandEvent,
        CommandFinished as CommandFinished,
        CommandStarted as CommandStarted,
        Observed as Observed,
        Observer as Observer,
    )
    from executor._policies.policies import (
        Approval as Approval,
        ApprovalRequest as ApprovalRequest,
        Approver as Approver,
        Audit as Audit,
        AuditEvent as AuditEvent,
        AuditRecord as AuditRecord,
        Secrets as Secrets,
        describe as describe,
    )
    from executor._policies.rules import (
        CommandRules as CommandRules,
        DangerousCommands as DangerousCommands,
        Finding as Finding,
        check_script as check_script,
    )
    from executor._policies.verdict import Verdict as Verdict
    from executor._ray.executor import (
        NodeInfo as NodeInfo,
        RayExecutor as RayExecutor,
        RayPool as RayPool,
        RaySession as RaySession,
    )
    from executor._sandbox.sandbox import (
        Sandbox as Sandbox,
        SandboxSupport as SandboxSupport,
    )
    from executor._shell.parser import (
        parse_command as parse_command,
        parse_script as parse_script,
    )
    from executor._shell.words import (
        SimpleCommand as SimpleCommand,
    )
    from executor._ssh.executor import (
        SshExecutor as SshExecutor,
    )
    from executor._tools.args import (
        BoundedInt as BoundedInt,
        GitRange as GitRange,
        GitRevision as GitRevision,
        RestrictedUrl as RestrictedUrl,
        WorkspaceGlob as WorkspaceGlob,
        WorkspacePath as WorkspacePath,
    )
    from executor._tools.context import (
        ContextWindow as ContextWindow,
        StreamingToolResult as StreamingToolResult,
    )
    from executor._tools.events import (
        Bus as Bus,
        Envelope as Envelope,
        EventSequencer as EventSequencer,
        MemoryBus as MemoryBus,
        ToolEvent as ToolEvent,
        ToolEventKind as ToolEventKind,
        Topic as Topic,
        bridge as bridge,
    )
    from executor._tools.handle import (
        Progress as Progress,
        StreamingToolHandle as StreamingToolHandle,
        TaskHandle as TaskHandle,
        ToolChannel as ToolChannel,
    )
    from executor._tools.policies import (
        Buffer as Buffer,
        Manual as Manual,
        OutputApprovalRequest as OutputApprovalRequest,
        OutputApprover as OutputApprover,
        StreamingPolicy as StreamingPolicy,
        Summarise as Summarise,
        Summarizer as Summarizer,
        TimeoutAction as TimeoutAction,
        Window as Window,
    )
    from executor._tools.session import (
        StreamingToolSession as StreamingToolSession,
    )
    from executor._tools.shapes import (
        SpecShape as SpecShape,
        gemini_schema as gemini_schema,
        spec_in_shape as spec_in_shape,
        strict_json_schema as strict_json_schema,
    )
    from executor._tools.tool import (
        StreamingTool as StreamingTool,
    )
    from executor._tools.tools import (
        AgentContext as AgentContext,
        DefaultContext as DefaultContext,
        Tool as Tool,
        ToolOutput as ToolOutput,
        ToolOutputKind as ToolOutputKind,
        tool as tool,
    )
    from executor._toolset.context import ToolsetContext as ToolsetContext
    from executor._toolset.native import NATIVE_TOOLS as NATIVE_TOOLS
    from executor._toolset.toolset import (
        NATIVE_TOOL_NAMES as NATIVE_TOOL_NAMES,
        READ_ONLY_TOOLS as READ_ONLY_TOOLS,
        TOOL_NAMES as TOOL_NAMES,
        Toolset as Toolset,
    )
    from executor._wrappers.read_only import ReadOnly as ReadOnly
    from executor._wrappers.scoped import ScopedExecutor as ScopedExecutor

__version__ = "0.1.0"


# Each public name's module, imported the first time the name is used: `import executor`
# loads none of them, so a program that needs only the local executor never pays for
# Docker's, SSH's or the shell parser's imports. The `TYPE_CHECKING` imports above say the
# same for type checkers; tests/test_values.py holds the two to each other.
_HOME_OF: dict[str, str] = {
    "AgentContext": "executor._tools.tools",
    "AgentStreamEvent": "executor._agents.events",
    "Approval": "executor._policies.policies",
    "ApprovalRequest": "executor._policies.policies",
    "Approver": "executor._policies.policies",
    "Audit": "executor._policies.policies",
    "AuditEvent": "executor._policies.policies",
    "AuditRecord": "executor._policies.policies",
    "BoundedInt": "executor._tools.args",
    "bridge": "executor._tools.events",
    "Buffer": "executor._tools.policies",
    "build_image": "executor._docker.build",
    "BuildError": "executor._core.errors",
    "BuiltImage": "executor._docker.build",
    "Bus": "executor._tools.events",
    "Bytes": "executor._core.stdin",
    "Cancelled": "executor._agents.events",
    "check_script": "executor._policies.rules",
    "CheckedExecutor": "executor._core.base",
    "Chunk": "executor._core.output",
    "Claim": "executor._journal.protocol",
    "CodeChunk": "executor._builtins.interpreter",
    "CodeInterpreterInput": "executor._builtins.interpreter",
    "CodeInterpreterTool": "executor._builtins.interpreter",
    "CodeResult": "executor._builtins.interpreter",
    "CodeStream": "executor._builtins.interpreter",
    "Command": "executor._core.commands",
    "CommandCancelled": "executor._policies.observed",
    "CommandChunk": "executor._policies.observed",
    "CommandError": "executor._core.errors",
    "CommandEvent": "executor._policies.observed",
    "CommandFinished": "executor._policies.observed",
    "CommandOutput": "executor._core.output",
    "CommandRules": "executor._policies.rules",
    "CommandStarted": "executor._policies.observed",
    "ContainerState": "executor._docker.container",
    "ContextWindow": "executor._tools.context",
    "DangerousCommands": "executor._policies.rules",
    "DEFAULT_OUTPUT_LIMIT": "executor._core.base",
    "DEFAULT_STREAM_OUTPUT_LIMIT": "executor._core.base",
    "DefaultContext": "executor._tools.tools",
    "describe": "executor._policies.policies",
    "DockerBuild": "executor._docker.build",
    "DockerExecutor": "executor._docker.executor",
    "DockerIgnore": "executor._docker.dockerignore",
    "elicitation_approver": "executor._mcp.calls",
    "Elision": "executor._core.output",
    "EngineError": "executor._core.errors",
    "Envelope": "executor._tools.events",
    "EventSequencer": "executor._tools.events",
    "Exec": "executor._core.commands",
    "ExecutorError": "executor._core.errors",
    "Finding": "executor._policies.rules",
    "for_model": "executor._core.render",
    "gemini_schema": "executor._tools.shapes",
    "GitRange": "executor._tools.args",
    "GitRevision": "executor._tools.args",
    "IdempotencyKey": "executor._journal.keys",
    "Idempotent": "executor._policies.idempotent",
    "InvalidArgument": "executor._core.errors",
    "InvalidToolArguments": "executor._adapters.langchain",
    "Job": "executor._core.jobs",
    "JobState": "executor._core.jobs",
    "JobStatus": "executor._core.jobs",
    "Journal": "executor._journal.protocol",
    "JournalEntry": "executor._journal.protocol",
    "JournalError": "executor._core.errors",
    "KeyedExecutor": "executor._policies.idempotent",
    "langchain_tool": "executor._adapters.langchain",
    "langchain_tools": "executor._adapters.langchain",
    "load_mcp_config": "executor._mcp.config",
    "LoadedFile": "executor._core.base",
    "LocalExecutor": "executor._local.executor",
    "LogEntry": "executor._builtins.logtail",
    "LogFilter": "executor._builtins.logtail",
    "LogFormat": "executor._builtins.logformats",
    "LogLevel": "executor._builtins.logformats",
    "LogResult": "executor._builtins.logtail",
    "LogTailerInput": "executor._builtins.logtail",
    "LogTailerTool": "executor._builtins.logtail",
    "Manual": "executor._tools.policies",
    "McpConfig": "executor._mcp.config",
    "McpServer": "executor._mcp.server",
    "MemoryBus": "executor._tools.events",
    "NodeInfo": "executor._ray.executor",
    "NonZeroExit": "executor._core.errors",
    "Observed": "executor._policies.observed",
    "Observer": "executor._policies.observed",
    "openai_agents_tool": "executor._adapters.openai_agents",
    "openai_agents_tools": "executor._adapters.openai_agents",
    "Outcome": "executor._journal.codec",
    "OutOfMemory": "executor._core.errors",
    "OutputApprovalRequest": "executor._tools.policies",
    "OutputApprover": "executor._tools.policies",
    "parse_command": "executor._shell.parser",
    "parse_script": "executor._shell.parser",
    "PathRefused": "executor._core.errors",
    "PendingToolCall": "executor._agents.events",
    "PersistentShell": "executor._core.base",
    "PolicyDenied": "executor._core.errors",
    "ProcessSession": "executor._core.session",
    "Progress": "executor._tools.handle",
    "PydanticAIToolset": "executor._adapters.pydantic_ai",
    "RayExecutor": "executor._ray.executor",
    "RayPool": "executor._ray.executor",
    "RaySession": "executor._ray.executor",
    "READ_ONLY_TOOLS": "executor._toolset.toolset",
    "NATIVE_TOOLS": "executor._toolset.native",
    "NATIVE_TOOL_NAMES": "executor._toolset.toolset",
    "ReadFile": "executor._core.commands",
    "ReadOnly": "executor._wrappers.read_only",
    "Resize": "executor._core.stdin",
    "RestrictedUrl": "executor._tools.args",
    "RunInterrupted": "executor._core.errors",
    "Sandbox": "executor._sandbox.sandbox",
    "SandboxSupport": "executor._sandbox.sandbox",
    "ScopedExecutor": "executor._wrappers.scoped",
    "Secrets": "executor._policies.policies",
    "SessionChunk": "executor._core.session",
    "Shell": "executor._core.commands",
    "ShellExited": "executor._core.errors",
    "ShellOutput": "executor._core.output",
    "ShellParseError": "executor._core.errors",
    "Signal": "executor._core.stdin",
    "SimpleCommand": "executor._shell.words",
    "Sink": "executor._core.output",
    "spec_in_shape": "executor._tools.shapes",
    "SpecShape": "executor._tools.shapes",
    "SqliteJournal": "executor._journal.sqlite",
    "SshExecutor": "executor._ssh.executor",
    "StartAt": "executor._builtins.logtail",
    "Stderr": "executor._core.output",
    "StdinEvent": "executor._core.stdin",
    "Stdout": "executor._core.output",
    "StreamingPolicy": "executor._tools.policies",
    "StreamingTool": "executor._tools.tool",
    "StreamingToolHandle": "executor._tools.handle",
    "StreamingToolResult": "executor._tools.context",
    "StreamingToolSession": "executor._tools.session",
    "strict_json_schema": "executor._tools.shapes",
    "StrPath": "executor._core.commands",
    "Summarise": "executor._tools.policies",
    "Summarizer": "executor._tools.policies",
    "TaskHandle": "executor._tools.handle",
    "TerminalChunk": "executor._builtins.terminal",
    "TerminalInput": "executor._builtins.terminal",
    "TerminalResult": "executor._builtins.terminal",
    "TerminalTool": "executor._builtins.terminal",
    "Text": "executor._core.stdin",
    "TimedOut": "executor._core.errors",
    "TimeoutAction": "executor._tools.policies",
    "Tool": "executor._tools.tools",
    "tool": "executor._tools.tools",
    "TOOL_NAMES": "executor._toolset.toolset",
    "ToolArgumentsRejected": "executor._adapters.openai_agents",
    "ToolCallComplete": "executor._agents.events",
    "ToolCallDelta": "executor._agents.events",
    "ToolCallEvents": "executor._agents.events",
    "ToolCallFailed": "executor._adapters.langchain",
    "ToolCallStart": "executor._agents.events",
    "ToolCancelled": "executor._core.errors",
    "ToolChannel": "executor._tools.handle",
    "ToolEvent": "executor._tools.events",
    "ToolEventKind": "executor._tools.events",
    "ToolExecuted": "executor._agents.events",
    "ToolExecutor": "executor._core.base",
    "ToolOutput": "executor._tools.tools",
    "ToolOutputKind": "executor._tools.tools",
    "Toolset": "executor._toolset.toolset",
    "ToolsetContext": "executor._toolset.context",
    "ToolStreamError": "executor._core.errors",
    "Topic": "executor._tools.events",
    "UnixSignal": "executor._core.stdin",
    "Verdict": "executor._policies.verdict",
    "Window": "executor._tools.policies",
    "WorkspaceGlob": "executor._tools.args",
    "WorkspacePath": "executor._tools.args",
    "WrappedExecutor": "executor._core.base",
    "WrappedSession": "executor._core.session",
    "WriteFile": "executor._core.commands",
}

__all__ = [
    "DEFAULT_OUTPUT_LIMIT",
    "DEFAULT_STREAM_OUTPUT_LIMIT",
    "NATIVE_TOOLS",
    "NATIVE_TOOL_NAMES",
    "READ_ONLY_TOOLS",
    "TOOL_NAMES",
    "AgentContext",
    "AgentStreamEvent",
    "Approval",
    "ApprovalRequest",
    "Approver",
    "Audit",
    "AuditEvent",
    "AuditRecord",
    "BoundedInt",
    "Buffer",
    "BuildError",
    "BuiltImage",
    "Bus",
    "Bytes",
    "Cancelled",
    "CheckedExecutor",
    "Chunk",
    "Claim",
    "CodeChunk",
    "CodeInterpreterInput",
    "CodeInterpreterTool",
    "CodeResult",
    "CodeStream",
    "Command",
    "CommandCancelled",
    "CommandChunk",
    "CommandError",
    "CommandEvent",
    "CommandFinished",
    "CommandOutput",
    "CommandRules",
    "CommandStarted",
    "ContainerState",
    "ContextWindow",
    "DangerousCommands",
    "DefaultContext",
    "DockerBuild",
    "DockerExecutor",
    "DockerIgnore",
    "Elision",
    "EngineError",
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
    "InvalidToolArguments",
    "Job",
    "JobState",
    "JobStatus",
    "Journal",
    "JournalEntry",
    "JournalError",
    "KeyedExecutor",
    "LoadedFile",
    "LocalExecutor",
    "LogEntry",
    "LogFilter",
    "LogFormat",
    "LogLevel",
    "LogResult",
    "LogTailerInput",
    "LogTailerTool",
    "Manual",
    "McpConfig",
    "McpServer",
    "MemoryBus",
    "NodeInfo",
    "NonZeroExit",
    "Observed",
    "Observer",
    "OutOfMemory",
    "Outcome",
    "OutputApprovalRequest",
    "OutputApprover",
    "PathRefused",
    "PendingToolCall",
    "PersistentShell",
    "PolicyDenied",
    "ProcessSession",
    "Progress",
    "PydanticAIToolset",
    "RayExecutor",
    "RayPool",
    "RaySession",
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
    "ShellExited",
    "ShellOutput",
    "ShellParseError",
    "Signal",
    "SimpleCommand",
    "Sink",
    "SpecShape",
    "SqliteJournal",
    "SshExecutor",
    "StartAt",
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
    "TerminalChunk",
    "TerminalInput",
    "TerminalResult",
    "TerminalTool",
    "Text",
    "TimedOut",
    "TimeoutAction",
    "Tool",
    "ToolArgumentsRejected",
    "ToolCallComplete",
    "ToolCallDelta",
    "ToolCallEvents",
    "ToolCallFailed",
    "ToolCallStart",
    "ToolCancelled",
    "ToolChannel",
    "ToolEvent",
    "ToolEventKind",
    "ToolExecuted",
    "ToolExecutor",
    "ToolOutput",
    "ToolOutputKind",
    "ToolStreamError",
    "Toolset",
    "ToolsetContext",
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
    "build_image",
    "check_script",
    "describe",
    "elicitation_approver",
    "for_model",
    "gemini_schema",
    "langchain_tool",
    "langchain_tools",
    "load_mcp_config",
    "openai_agents_tool",
    "openai_agents_tools",
    "parse_command",
    "parse_script",
    "spec_in_shape",
    "strict_json_schema",
    "tool",
]

# Hidden from type checkers, so that a misspelt name is an error there too.
if not TYPE_CHECKING:
    import importlib as _importlib
    import sys as _sys
    import types as _types

    _SHOWN: set[str] = set()

    def _show_as_public() -> None:
        # The public errors and functions of every module loaded so far show as
        # `executor.NAME` in tracebacks and reprs, not by their private homes, as
        # anyio's and httpx's do; each name once. Other classes keep their module:
        # it is where `typing.get_type_hints` resolves their string annotations
        # (a function resolves them through its own globals, whatever its module).
        for name, module in _HOME_OF.items():
            if name in _SHOWN or module not in _sys.modules:
                continue
            _SHOWN.add(name)
            value = getattr(_sys.modules[module], name, None)
            public = isinstance(value, _types.FunctionType) or (
                isinstance(value, type) and issubclass(value, BaseException)
            )
            if public and value.__module__ == module:
                value.__module__ = __name__

    def __getattr__(name: str) -> "Any":
        module = _HOME_OF.get(name)
        if module is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = getattr(_importlib.import_module(module), name)
        _show_as_public()
        # Kept, so the next use is a plain attribute lookup.
        globals()[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*globals(), *__all__})


del TYPE_CHECKING
