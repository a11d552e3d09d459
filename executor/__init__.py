"""Run the tool commands of AI agents: shell scripts, argv commands, file reads and writes.

```python
from executor import Command, LocalExecutor

async with LocalExecutor("/srv/checkout", default_timeout=30) as ex:
    output = await ex.exec_cmd(Command.shell("git status --short"))
    print(output.text())
```
"""

# Not `typing.TYPE_CHECKING`: importing `typing` costs more than all the rest
# of `import executor`. Type checkers take any name TYPE_CHECKING as true.
TYPE_CHECKING = False

if TYPE_CHECKING:
    from typing import Any

    # The public names, each where it lives. Type checkers read them here; at run
    # time nothing here is imported (see `_homes`).
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
        LoadedFile as LoadedFile,
        Sink as Sink,
        ToolExecutor as ToolExecutor,
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
        CommandError as CommandError,
        EngineError as EngineError,
        ExecutorError as ExecutorError,
        InvalidArgument as InvalidArgument,
        JournalError as JournalError,
        NonZeroExit as NonZeroExit,
        PathRefused as PathRefused,
        PolicyDenied as PolicyDenied,
        RunInterrupted as RunInterrupted,
        ShellParseError as ShellParseError,
        TimedOut as TimedOut,
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
        Stderr as Stderr,
        Stdout as Stdout,
    )
    from executor._core.render import for_model as for_model
    from executor._core.session import (
        ProcessSession as ProcessSession,
        SessionChunk as SessionChunk,
        WrappedSession as WrappedSession,
    )
    from executor._core.shell import (
        PersistentShell as PersistentShell,
        ShellExited as ShellExited,
        ShellOutput as ShellOutput,
    )
    from executor._core.stdin import (
        Bytes as Bytes,
        Resize as Resize,
        Signal as Signal,
        StdinEvent as StdinEvent,
        Text as Text,
        UnixSignal as UnixSignal,
    )
    from executor._core.wrappers import (
        CheckedExecutor as CheckedExecutor,
        ReadOnly as ReadOnly,
        ScopedExecutor as ScopedExecutor,
        WrappedExecutor as WrappedExecutor,
    )
    from executor._docker.build import (
        BuildError as BuildError,
        BuiltImage as BuiltImage,
        DockerBuild as DockerBuild,
        build_image as build_image,
    )
    from executor._docker.dockerignore import (
        DockerIgnore as DockerIgnore,
    )
    from executor._docker.executor import (
        ContainerState as ContainerState,
        DockerExecutor as DockerExecutor,
    )
    from executor._journal import (
        Claim as Claim,
        IdempotencyKey as IdempotencyKey,
        Journal as Journal,
        JournalEntry as JournalEntry,
        Outcome as Outcome,
        SqliteJournal as SqliteJournal,
    )
    from executor._local.executor import (
        LocalExecutor as LocalExecutor,
    )
    from executor._local.sandbox import (
        Sandbox as Sandbox,
        SandboxSupport as SandboxSupport,
    )
    from executor._mcp.config import (
        McpConfig as McpConfig,
        load_mcp_config as load_mcp_config,
    )
    from executor._mcp.server import (
        McpServer as McpServer,
        elicitation_approver as elicitation_approver,
    )
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
        Verdict as Verdict,
        describe as describe,
    )
    from executor._policies.rules import (
        CommandRules as CommandRules,
        DangerousCommands as DangerousCommands,
        Finding as Finding,
        check_script as check_script,
    )
    from executor._ray.executor import (
        NodeInfo as NodeInfo,
        RayExecutor as RayExecutor,
        RayPool as RayPool,
        RaySession as RaySession,
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
        ToolCancelled as ToolCancelled,
        ToolEvent as ToolEvent,
        ToolEventKind as ToolEventKind,
        ToolStreamError as ToolStreamError,
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
    from executor._toolset.toolset import (
        READ_ONLY_TOOLS as READ_ONLY_TOOLS,
        TOOL_NAMES as TOOL_NAMES,
        Toolset as Toolset,
        ToolsetContext as ToolsetContext,
    )

__version__ = "0.1.0"


def _homes() -> dict[str, str]:
    """Each public name's module, read from the `TYPE_CHECKING` imports above.

    Those imports are the one list of what the package exports: `import
    executor` loads none of the modules, and a name's module (with the backend
    or dependency behind it) is imported the first time the name is used, so a
    program that needs only the local executor never pays for Docker's, SSH's
    or the shell parser's imports.
    """
    # A plain scan of the lines, as the formatter lays them out, instead of
    # `ast` (which costs more than all the rest of `import executor`);
    # tests/test_values.py checks it against an `ast` parse.
    homes: dict[str, str] = {}
    module = ""
    with open(__file__, encoding="utf-8") as source:
        for line in source:
            if line.startswith("    from executor."):
                module = line.split()[1]
                if not line.rstrip().endswith("("):
                    homes[line.split()[3]] = module
            elif line.startswith("        ") and " as " in line and module:
                homes[line.split()[0]] = module
            elif line.startswith("__version__"):
                break
    return homes


_HOME_OF = _homes()
__all__ = sorted(_HOME_OF)


# Hidden from type checkers, so that a misspelt name is an error there too.
if not TYPE_CHECKING:
    import importlib as _importlib

    def __getattr__(name: str) -> "Any":
        module = _HOME_OF.get(name)
        if module is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = getattr(_importlib.import_module(module), name)
        # Kept, so the next use is a plain attribute lookup.
        globals()[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*globals(), *__all__})


del TYPE_CHECKING
