"""The MCP server: the standard toolset over an executor, on the official `mcp` SDK.

```python
async with LocalExecutor("/srv/checkout") as ex, Toolset() as toolset:
    await McpServer(ex, toolset).run_stdio()
```

It is built on the SDK's low-level `Server`, not its high-level one, because
the high-level one turns a failed tool into a bare "Error executing tool
..." text. Here every call's result carries, besides the text the model
reads, `structuredContent` with the outcome's `kind` (`ok`, `failed`,
`timed_out`, `out_of_memory`, `denied`, `invalid_arguments`,
`executor_error`), and for a command its `exit_code`, `signal`,
`oom_killed`, `stdout`, `stderr` and `duration`; `isError` is set for every
failure.

- Output streams to the client as progress notifications while a command
  runs (when the call carries a progress token): each notification's
  `message` is the next piece of output, its `progress` the bytes so far.
- A client's cancellation (`notifications/cancelled`, or the SDK client's
  cancelled call) cancels the call, and the executor kills the command's
  whole process tree.
- Approval (`Approval` in the executor's chain, with `elicitation_approver`
  as its approver) asks the client through MCP elicitation: a server-to-client
  `elicitation/create` request on protocol versions up to 2025-11-25, an
  `InputRequiredResult` the client answers and retries with on 2026-07-28,
  the call waiting between rounds (see `executor._mcp.calls`). A client
  that cannot elicit is refused (it fails closed): error -32021 on
  2026-07-28, a `denied` result on the handshake era.
- A tool the server does not offer is error -32602, as the spec lists it.
- `run_stdio()` serves one client on stdin and stdout; `run_http()` serves
  streamable HTTP on 127.0.0.1, each request needing `Authorization: Bearer
  <token>` (the scheme in any case).
"""

from __future__ import annotations

import codecs
import contextlib
import hashlib
import hmac
import json
import secrets
import socket
import warnings
import weakref
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Coroutine,
    Iterator,
    MutableMapping,
    Sequence,
)
from typing import TYPE_CHECKING, Any, TypeVar

import anyio
import anyio.abc
import anyio.lowlevel

from executor._core.base import ToolExecutor
from executor._core.commands import Command, ReadFile, WriteFile
from executor._core.errors import CommandError, NonZeroExit, PolicyDenied
from executor._core.output import Chunk, CommandOutput, Stderr, Stdout
from executor._core.render import for_model
from executor._mcp.calls import (
    Call,
    Rounds,
    current_call,
    elicits,
    modern,
    offers_roots,
    reset_call,
    use_call,
)
from executor._mcp.envelope import envelope_problem, invalid_request
from executor._mcp.resources import Resources, resource_kind, resource_templates
from executor._mcp.roots import Rooted, RootScope, root_paths, scope_of
from executor._policies.observed import (
    CommandCancelled,
    CommandChunk,
    CommandEvent,
    CommandFinished,
    CommandStarted,
    Observed,
)
from executor._policies.policies import Approval
from executor._tools.tools import Tool, ToolOutput
from executor._toolset.context import ToolsetContext
from executor._toolset.toolset import READ_ONLY_TOOLS, Toolset
from executor._wrappers.scoped import ScopedExecutor

if TYPE_CHECKING:
    import mcp_types
    from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
    from mcp.server.lowlevel.server import Server

_R = TypeVar("_R")

_INSTALL_HINT = "the MCP server needs the mcp SDK: pip install 'tool-executor[mcp]'"
# Per call: what progress notifications may carry before the rest is left to the result.
_STREAM_LIMIT = 4 << 20
_PIECE = 8192
# What of a command's stdout and stderr the structured content carries, each.
_STREAM_BUDGET = 16_000
_WRITES = frozenset(
    {"run", "shell", "job_start", "job_write", "job_signal", "job_stop", "terminal"}
    | {"code_interpreter", "write_file", "edit_file"}
)


def _require_mcp() -> None:
    try:
        import mcp  # noqa: F401
    except ImportError as error:
        raise ImportError(_INSTALL_HINT) from error


# How long a person has to answer an approval (2026-07-28), from the round that asked.
APPROVAL_TTL = 600.0
# Calls waiting between rounds at once; past it a call that would wait is refused (-32602).
_ROUNDS_LIMIT = 1000


_TITLES = {
    "run": "Run a command",
    "shell": "Run in a persistent shell",
    "job_start": "Start a background job",
    "job_read": "Read a job's output",
    "job_write": "Write to a job's input",
    "job_signal": "Signal a job",
    "job_stop": "Stop a job",
    "job_list": "List jobs",
    "read_file": "Read a file",
    "write_file": "Write a file",
    "edit_file": "Edit a file",
    "list_files": "List files",
    "glob": "Find files by pattern",
    "search": "Search file contents",
    "terminal": "Use a terminal",
    "log_tailer": "Tail a log",
    "code_interpreter": "Run code in an interpreter",
}
# Calling these again with the same arguments changes nothing more (MCP's idempotentHint):
# the reads, a write of the same content, a stop of a job already stopped.
_IDEMPOTENT = READ_ONLY_TOOLS | {"job_list", "write_file", "job_stop"}


def output_schema(name: str) -> dict[str, Any]:
    """The JSON schema of the `structuredContent` that `tool_result` gives for tool `name`."""
    from executor._tools.tools import ToolOutputKind

    maybe_int = {"type": ["integer", "null"]}
    return {
        "type": "object",
        "properties": {
            "tool": {"const": name, "description": "The tool called"},
            "kind": {
                "enum": [kind.value for kind in ToolOutputKind],
                "description": "What became of the call: ok, or which kind of failure",
            },
            "is_error": {"type": "boolean"},
            "exit_code": {**maybe_int, "description": "The last command's exit code"},
            "signal": {**maybe_int, "description": "The signal that killed the last command"},
            "oom_killed": {
                "type": "boolean",
                "description": "Whether the OOM killer ended a process of the last command",
            },
            "stdout": {"type": "string", "description": "The last command's stdout, cut"},
            "stderr": {"type": "string", "description": "The last command's stderr, cut"},
            "duration": {"type": "number", "minimum": 0, "description": "Seconds it ran"},
            "truncated": {
                "type": "boolean",
                "description": "Whether the executor kept only part of the output",
            },
            "resource": {
                "type": "string",
                "format": "uri",
                "description": "The resource of the call's last command: its output, live",
            },
            "spill": {
                "type": "string",
                "format": "uri",
                "description": "The resource of the whole output, where it was cut and kept",
            },
        },
        "required": ["tool", "kind", "is_error", "exit_code"],
        "additionalProperties": False,
    }


def mcp_tool(tool: Tool) -> mcp_types.Tool:
    """The MCP `Tool` listing of one of our tools: names, schemas and hints.

    `outputSchema` describes the `structuredContent` of every result the
    tool gives (`tool_result`). Annotations hint which tools only read
    (`readOnlyHint`), which run commands or write (`destructiveHint`) and
    which change nothing more when called again (`idempotentHint`); none
    reaches outside the executor's world (`openWorldHint` false).
    """
    from mcp_types import Tool as McpTool, ToolAnnotations

    shape = tool.spec_for("mcp")
    read_only = tool.name in READ_ONLY_TOOLS
    title = _TITLES.get(tool.name, tool.name.replace("_", " ").capitalize())
    return McpTool(
        name=shape["name"],
        title=title,
        description=shape["description"],
        input_schema=shape["inputSchema"],
        output_schema=output_schema(tool.name),
        annotations=ToolAnnotations(
            title=title,
            read_only_hint=read_only,
            destructive_hint=tool.name in _WRITES,
            idempotent_hint=tool.name in _IDEMPOTENT,
            open_world_hint=False,
        ),
    )


def _cut_text(data: bytes) -> str:
    output = CommandOutput(chunks=(Stdout(data),), exit_code=None)
    return for_model(output, budget=_STREAM_BUDGET)


def tool_result(
    name: str, output: ToolOutput, last: CommandOutput | None
) -> mcp_types.CallToolResult:
    """The MCP result of one call: the model's text, and the outcome in structured content.

    `structuredContent` holds `tool`, `kind` (a `ToolOutputKind` value),
    `is_error` and `exit_code`; when the call ran a process command also its
    `signal`, `oom_killed`, `stdout`, `stderr` (each cut to 16,000
    characters as `for_model` cuts), `duration` and `truncated`.
    """
    from mcp_types import CallToolResult, TextContent

    structured: dict[str, Any] = {
        "tool": name,
        "kind": output.kind.value,
        "is_error": output.is_error,
        "exit_code": output.exit_code,
    }
    if last is not None and last.exit_code is not None:
        structured.update(
            exit_code=last.exit_code,
            signal=last.signal,
            oom_killed=last.oom_killed,
            stdout=_cut_text(last.stdout),
            stderr=_cut_text(last.stderr),
            duration=round(last.duration, 6),
            truncated=last.truncated,
        )
    return CallToolResult(
        content=[TextContent(type="text", text=output.text)],
        structured_content=structured,
        is_error=output.is_error,
    )


class _Progress:
    """A sink sending each piece of output to the client as progress notifications.

    They go to the request that serves the call now: on 2026-07-28 a call
    that waits between rounds is served by each retry in turn.
    """

    def __init__(self, call: Call) -> None:
        self._call = call
        self._sent = 0
        self._decoders = {
            Stdout: codecs.getincrementaldecoder("utf-8")("replace"),
            Stderr: codecs.getincrementaldecoder("utf-8")("replace"),
        }
        self._stopped = False

    async def __call__(self, chunk: Chunk) -> None:
        if self._stopped:
            return
        self._sent += len(chunk.data)
        text = self._decoders[type(chunk)].decode(chunk.data)
        if self._sent > _STREAM_LIMIT:
            self._stopped = True
            text = f"[... further output is not streamed; the result holds its end ...]\n{text}"
        ctx = self._call.ctx
        if not self._call.active or not _wants_progress(ctx):
            return
        for start in range(0, len(text), _PIECE):
            await ctx.session.report_progress(self._sent, None, text[start : start + _PIECE])


_FILE_COMMANDS = (ReadFile, WriteFile)

# The key of the roots question in a 2026-07-28 round.
_ROOTS_KEY = "roots"

# RFC 5424's levels, as MCP names them, from the least severe.
_LEVELS: tuple[mcp_types.LoggingLevel, ...] = (
    "debug",
    "info",
    "notice",
    "warning",
    "error",
    "critical",
    "alert",
    "emergency",
)


@contextlib.contextmanager
def _deprecated_api() -> Iterator[None]:
    """Quiet the SDK's warning that logging and roots are deprecated, around a call not awaited.

    From 2026-07-28 on (SEP-2577) a request opts into log messages through its
    `_meta`, and roots are asked in a round; the handshake era still sets a
    level with `logging/setLevel` and lists roots with `roots/list`, and the
    SDK warns at each use of the API that serves them. Nothing here awaits,
    so no other task runs while the filter is changed.
    """
    from mcp.shared.exceptions import MCPDeprecationWarning

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MCPDeprecationWarning)
        yield


def _connection_of(ctx: ServerRequestContext[Any, Any]) -> Any:
    # The SDK makes a session object per request; the connection behind it is what
    # a handshake-era logging/setLevel belongs to.
    return getattr(ctx.session, "_connection", ctx.session)


def _log_entry(tool: str, event: CommandEvent) -> tuple[mcp_types.LoggingLevel, dict[str, Any]]:
    """The level and data of the log message that tells a client about `event`.

    A command started is `info`; one that ended is `debug` when it
    succeeded, `notice` with a non-zero exit, `warning` when it was killed
    (its timeout, a cancel) or refused (a policy), `error` when the
    executor failed.
    """
    if isinstance(event, CommandStarted):
        return "info", {"event": "started", "tool": tool, "command": event.description}
    if isinstance(event, CommandCancelled):
        return "warning", {
            "event": "killed",
            "tool": tool,
            "command": event.pending,
            "reason": "cancelled",
            "duration": round(event.duration, 6),
        }
    assert isinstance(event, CommandFinished)
    data: dict[str, Any] = {
        "tool": tool,
        "exit_code": event.exit_code,
        "duration": round(event.duration, 6),
    }
    if event.outcome == "denied":
        return "warning", {"event": "refused", **data, "reason": event.error}
    if event.outcome == "timeout":
        return "warning", {"event": "killed", **data, "reason": event.error}
    if event.outcome in ("error", "exception"):
        return "error", {"event": "failed", **data, "reason": event.error}
    level: mcp_types.LoggingLevel = "debug" if event.outcome == "ok" else "notice"
    return level, {"event": "finished", **data}


def _chain(executor: ToolExecutor) -> Iterator[ToolExecutor]:
    """`executor`, then each executor it wraps, to the backend."""
    inner: object = executor
    while isinstance(inner, ToolExecutor):
        yield inner
        inner = getattr(inner, "inner", None)


def _has_approval(executor: ToolExecutor) -> bool:
    """Whether an `Approval` is in `executor`'s chain: then a call may ask its client."""
    return any(isinstance(each, Approval) for each in _chain(executor))


def _refuse_if_missing_elicitation(call: Call) -> None:
    """-32021 on 2026-07-28 when the call was to ask a client that cannot be asked."""
    from mcp.shared.exceptions import MCPError
    from mcp_types import (
        MISSING_REQUIRED_CLIENT_CAPABILITY,
        ClientCapabilities,
        ElicitationCapability,
        MissingRequiredClientCapabilityErrorData,
    )

    if not (call.missing_elicitation and modern(call.ctx)):
        return
    data = MissingRequiredClientCapabilityErrorData(
        required_capabilities=ClientCapabilities(elicitation=ElicitationCapability())
    )
    raise MCPError(
        MISSING_REQUIRED_CLIENT_CAPABILITY,
        "approval is needed, and this client does not declare elicitation",
        data.model_dump(by_alias=True, mode="json", exclude_none=True),
    )


# How many of a refused request's problems its error names (a union's are many).
_PROBLEMS_SHOWN = 3


async def _explain_invalid_params(
    ctx: ServerRequestContext[Any, Any], call_next: CallNext
) -> HandlerResult:
    """Say which parameter of a request was wrong, where the SDK says only "Invalid request".

    The SDK answers a request whose params fail validation with
    `Invalid request parameters` and nothing else, so a client (or a model)
    cannot tell what to fix. The error names each wrong field by its path
    and what was expected of it, never the value sent.
    """
    from mcp.shared.exceptions import MCPError
    from mcp_types import INVALID_PARAMS
    from pydantic import ValidationError

    try:
        return await call_next(ctx)
    except ValidationError as error:
        problems = []
        for each in error.errors(include_input=False, include_url=False):
            where = ".".join(str(part) for part in each["loc"]) or "params"
            problem = f"{where}: {each['msg']}"
            if problem not in problems:
                problems.append(problem)
        shown = "; ".join(problems[:_PROBLEMS_SHOWN])
        more = len(problems) - _PROBLEMS_SHOWN
        if more > 0:
            shown += f"; and {more} more"
        raise MCPError(
            INVALID_PARAMS, f"Invalid request parameters for {ctx.method}: {shown}"
        ) from None


def _principal(ctx: ServerRequestContext[Any, Any]) -> str | None:
    """Who a sealed request state belongs to: the bearer token and session of the request.

    Over stdio the process serves one client and its key is its own, so
    nothing more is needed there (None). Over HTTP the state is bound to the
    token the client showed (its digest) and, on the handshake era, to its
    `Mcp-Session-Id`: a state minted for one is refused from another.
    """
    request = ctx.request
    headers = getattr(request, "headers", None)
    if headers is None:
        return None
    token = _bearer(headers.get("authorization", "")) or ""
    session = headers.get("mcp-session-id", "")
    return json.dumps([hashlib.sha256(token.encode()).hexdigest(), session])


def _bearer(value: str) -> str | None:
    """The token of an `Authorization: Bearer` value (the scheme's case does not matter)."""
    scheme, _, token = value.strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def _wants_progress(ctx: ServerRequestContext[Any, Any]) -> bool:
    meta = ctx.meta
    return bool(meta) and meta.get("progress_token") is not None  # type: ignore[union-attr]


class McpServer:
    """Serves a `Toolset` over MCP, its tools running through `executor`.

    Args:
        executor: What the tools run commands through, policies included (see
            `build_executor` for the chain the command line builds).
        toolset: The tools to offer; `Toolset()` by default.
        name: The server's name in the MCP handshake.
        instructions: What the server tells the client about itself.
        approval_ttl: Seconds a person has to answer an approval asked on
            2026-07-28, whose question and answers travel through the client
            in a sealed `request_state` that expires then.

    Raises:
        ImportError: The `mcp` SDK is not installed (`tool-executor[mcp]`).
    """

    def __init__(
        self,
        executor: ToolExecutor,
        toolset: Toolset | None = None,
        *,
        name: str = "executor",
        instructions: str | None = None,
        approval_ttl: float = APPROVAL_TTL,
    ) -> None:
        _require_mcp()
        if not 0 < approval_ttl < float("inf"):
            raise ValueError(f"approval_ttl must be a positive number of seconds: {approval_ttl}")
        if not isinstance(executor, ToolExecutor):
            raise TypeError(f"expected a ToolExecutor, got {type(executor).__name__}")
        self.executor = executor
        self.toolset = toolset if toolset is not None else Toolset()
        self.name = name
        self.instructions = instructions or (
            "Tools to run commands and read, write, edit and search files in one workspace. "
            "A result's structuredContent holds the exit code and stderr of a command."
        )
        self.approval_ttl = approval_ttl
        self._server: Server[Any] | None = None
        # Calls that may ask their 2026-07-28 client run in tasks of this group (the
        # server's lifespan), waiting between rounds; found again by their rounds' id.
        self._host: anyio.abc.TaskGroup | None = None
        self._rounds: dict[str, Rounds] = {}
        self._asks = _has_approval(executor)
        # Commands run through this wrapper, so the server can tell its client what
        # became of each (the logging capability). One wrapper for every call: the
        # toolset keeps a persistent shell per executor object.
        # Inside it, the client's roots narrow where commands reach (`Rooted`).
        self._rooted = Rooted(executor, self._current_scope)
        self._observed = Observed(self._rooted, self._observe, tracing=False)
        # The level each handshake-era connection set (logging/setLevel), by connection.
        self._levels: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()
        # Each handshake-era connection's roots, until it says they changed.
        self._roots: weakref.WeakKeyDictionary[Any, tuple[str, ...]] = weakref.WeakKeyDictionary()
        # How often each connection said its roots changed: an answer to a roots/list
        # asked before the last change is not kept.
        self._roots_changes: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()
        self._workspace: tuple[str, ...] | None = None
        self._resources = Resources(self._rooted, self._resource_changed, self._spawn)
        # Subscriptions: the handshake era's, the URIs each connection subscribed to
        # (kept no longer than the connection); 2026-07-28's through subscriptions/listen
        # streams fed by the bus.
        self._subscribers: weakref.WeakKeyDictionary[Any, set[str]] = weakref.WeakKeyDictionary()
        self._bus = _Bus()
        self._tool_names = frozenset(tool.name for tool in self.toolset.tools)

    def __repr__(self) -> str:
        return f"McpServer({self.executor!r}, {self.toolset!r})"

    @property
    def server(self) -> Server[Any]:
        """The SDK's low-level `Server`, built on first use."""
        if self._server is None:
            self._server = self._build()
        return self._server

    def _build(self) -> Server[Any]:
        from importlib.metadata import PackageNotFoundError, version

        from mcp.server.lowlevel.server import Server
        from mcp.server.subscriptions import ListenHandler

        try:
            ours = version("tool-executor")
        except PackageNotFoundError:
            ours = "0"
        from mcp.server.request_state import RequestStateBoundary, RequestStateSecurity

        with _deprecated_api():
            server: Server[Any] = Server(
                self.name,
                version=ours,
                instructions=self.instructions,
                on_list_tools=self._list_tools,
                on_call_tool=self._call_tool,
                on_list_resources=self._list_resources,
                on_list_resource_templates=self._list_resource_templates,
                on_read_resource=self._read_resource,
                on_subscribe_resource=self._subscribe,
                on_unsubscribe_resource=self._unsubscribe,
                on_subscriptions_listen=ListenHandler(self._bus),
                on_set_logging_level=self._set_logging_level,
                on_roots_list_changed=self._roots_changed,
                lifespan=self._lifespan,
            )
        # The approvals' state travels through the client: sealed under a key of this
        # process, bound to the call and the principal, refused when it fails verification.
        security = RequestStateSecurity.ephemeral(ttl=self.approval_ttl)
        security.bind_principal = _principal
        server.middleware.append(RequestStateBoundary(security, default_audience=self.name))
        server.middleware.append(_explain_invalid_params)
        return server

    async def _list_tools(
        self,
        ctx: ServerRequestContext[Any, Any],
        params: mcp_types.PaginatedRequestParams | None,
    ) -> mcp_types.ListToolsResult:
        from mcp_types import ListToolsResult

        return ListToolsResult(tools=[mcp_tool(t) for t in self.toolset.tools])

    @contextlib.asynccontextmanager
    async def _lifespan(self, server: Any) -> AsyncIterator[dict[str, Any]]:
        """While the server serves: the task group of the calls that wait between rounds."""
        async with anyio.create_task_group() as host:
            self._host = host
            try:
                yield {}
            finally:
                self._host = None
                host.cancel_scope.cancel()

    def _spawn(self, function: Callable[[], Coroutine[Any, Any, Any]]) -> bool:
        """Run `function` in the server's task group; False when the server is not serving."""
        if self._host is None:
            return False
        self._host.start_soon(function)
        return True

    async def _call_tool(
        self, ctx: ServerRequestContext[Any, Any], params: mcp_types.CallToolRequestParams
    ) -> mcp_types.CallToolResult | mcp_types.InputRequiredResult:
        from mcp.shared.exceptions import MCPError
        from mcp_types import INVALID_PARAMS

        if params.name not in self._tool_names:
            raise MCPError(
                INVALID_PARAMS,
                f"Unknown tool: {params.name!r}; the tools are: {', '.join(self.toolset.names)}",
            )

        async def work(call: Call) -> mcp_types.CallToolResult:
            context = ToolsetContext(
                self._observed, on_output=_Progress(call) if _wants_progress(ctx) else None
            )
            output = await self.toolset.call(context, params.name, params.arguments or {})
            _refuse_if_missing_elicitation(call)
            result = tool_result(params.name, output, context.last_output)
            links = {
                "resource": self._resources.uri_of(call.commands[-1]) if call.commands else None,
                "spill": self._resources.spilled(context.last_output),
            }
            assert result.structured_content is not None
            result.structured_content.update({k: v for k, v in links.items() if v is not None})
            return result

        return await self._serve(ctx, params, params.name, work)

    async def _serve(
        self,
        ctx: ServerRequestContext[Any, Any],
        params: Any,
        name: str,
        work: Callable[[Call], Awaitable[_R]],
        *,
        roots: bool = True,
    ) -> _R | mcp_types.InputRequiredResult:
        """Serve one request of a call: its first, or a 2026-07-28 retry with answers.

        The call gets its log level and (`roots`) the client's roots, asked
        first in a round of their own on 2026-07-28. A call that may ask its
        2026-07-28 client for an approval runs in a task of the server's
        (`Rounds`), so that it can wait between rounds; the others run here.
        """
        from mcp.shared.exceptions import MCPError
        from mcp_types import INVALID_PARAMS, InputRequiredResult, ListRootsRequest

        # Our own plaintext: the boundary verified and opened it.
        state = json.loads(params.request_state) if params.request_state else {}
        responses = dict(params.input_responses or {})
        if "c" in state:
            rounds = self._rounds.get(state["c"])
            if rounds is None or rounds.state_id is None or rounds.state_id != state.get("id"):
                raise MCPError(
                    INVALID_PARAMS, "this requestState was used already, or its call has ended"
                )
            rounds.state_id = None  # each state is good for one retry
            rounds.call.ctx = ctx
            rounds.call.active = True
            rounds.answer(responses)
            retried: _R | mcp_types.InputRequiredResult = await self._next_round(rounds)
            return retried
        call = Call(ctx, name, log_level=self._log_level(ctx))
        if roots and offers_roots(ctx):
            offered = await self._client_roots(ctx, state, responses)
            if offered is None:  # 2026-07-28: asked in a round of its own
                # The sealed state says the roots were asked (see _client_roots).
                return InputRequiredResult(
                    input_requests={_ROOTS_KEY: ListRootsRequest()},
                    request_state=json.dumps({"roots": None}),
                )
            call.scope = scope_of(offered, await self._workspace_paths())
        if not (self._asks and modern(ctx) and elicits(ctx)):
            token = use_call(call)
            try:
                return await work(call)
            finally:
                call.active = False
                reset_call(token)
        if len(self._rounds) >= _ROUNDS_LIMIT:
            raise MCPError(INVALID_PARAMS, "too many calls wait for approvals; answer those first")
        rounds = call.rounds = Rounds(call, self.approval_ttl)

        async def run() -> None:
            await rounds.run(lambda: work(call))
            if rounds.state_id is not None:  # a round went out, and no retry came
                self._rounds.pop(rounds.id, None)

        if not self._spawn(run):
            raise MCPError(-32603, "the server is not serving")
        self._rounds[rounds.id] = rounds
        first: _R | mcp_types.InputRequiredResult = await self._next_round(rounds)
        return first

    async def _next_round(self, rounds: Rounds) -> Any:
        """The call's result once it ended, else its questions with the state of the next retry."""
        from mcp_types import InputRequiredResult

        try:
            finished, value = await rounds.next_round()
        except anyio.get_cancelled_exc_class():
            # The client went away mid-call: its commands are ended.
            rounds.cancel()
            self._rounds.pop(rounds.id, None)
            raise
        except BaseException:
            self._rounds.pop(rounds.id, None)
            raise
        finally:
            rounds.call.active = False
        if finished:
            self._rounds.pop(rounds.id, None)
            return value
        rounds.state_id = secrets.token_urlsafe(16)
        state = json.dumps({"c": rounds.id, "id": rounds.state_id})
        return InputRequiredResult(input_requests=value, request_state=state)

    # --- resources -------------------------------------------------------------------

    async def _list_resources(
        self,
        ctx: ServerRequestContext[Any, Any],
        params: mcp_types.PaginatedRequestParams | None,
    ) -> mcp_types.ListResourcesResult:
        from mcp.shared.exceptions import MCPError
        from mcp_types import INVALID_PARAMS, ListResourcesResult

        # The workspace's files are listed as the client's roots leave them; on 2026-07-28
        # a listing cannot ask for the roots, so a client that offers them reads files
        # through the template instead.
        call = Call(ctx, "resources/list")
        files = True
        if offers_roots(ctx) and modern(ctx):
            files = False
        elif offers_roots(ctx):
            roots = await self._client_roots(ctx, {}, {})
            assert roots is not None
            call.scope = scope_of(roots, await self._workspace_paths())
            files = bool(call.scope.prefixes)
        token = use_call(call)
        try:
            listed, cursor = await self._resources.list(
                params.cursor if params is not None else None, files=files
            )
        except ValueError as error:
            raise MCPError(INVALID_PARAMS, str(error)) from None
        finally:
            reset_call(token)
        return ListResourcesResult(resources=listed, next_cursor=cursor)

    async def _list_resource_templates(
        self,
        ctx: ServerRequestContext[Any, Any],
        params: mcp_types.PaginatedRequestParams | None,
    ) -> mcp_types.ListResourceTemplatesResult:
        from mcp_types import ListResourceTemplatesResult

        return ListResourceTemplatesResult(resource_templates=resource_templates())

    async def _read_resource(
        self, ctx: ServerRequestContext[Any, Any], params: mcp_types.ReadResourceRequestParams
    ) -> mcp_types.ReadResourceResult | mcp_types.InputRequiredResult:
        from mcp.shared.exceptions import MCPError
        from mcp_types import INTERNAL_ERROR, INVALID_PARAMS, ReadResourceResult

        uri = str(params.uri)
        try:
            kind = resource_kind(uri)
        except (LookupError, ValueError) as error:
            raise MCPError(INVALID_PARAMS, str(error), {"uri": uri}) from None

        async def work(call: Call) -> mcp_types.ReadResourceResult:
            try:
                contents = await self._resources.read(uri)
            except (LookupError, ValueError, PolicyDenied, NonZeroExit) as error:
                # SEP-2164: a resource that is not there is invalid params, naming its URI;
                # so is one a policy or the roots keep from this client.
                _refuse_if_missing_elicitation(call)
                raise MCPError(INVALID_PARAMS, str(error), {"uri": uri}) from None
            except CommandError as error:  # a timeout, the executor's own failure
                raise MCPError(INTERNAL_ERROR, str(error), {"uri": uri}) from None
            return ReadResourceResult(contents=[contents])

        # Only the workspace's files are the roots' business: a command's output or a
        # spill is read without asking for them.
        return await self._serve(ctx, params, "resources/read", work, roots=kind == "files")

    async def _subscribe(
        self, ctx: ServerRequestContext[Any, Any], params: mcp_types.SubscribeRequestParams
    ) -> mcp_types.EmptyResult:
        from mcp_types import EmptyResult

        connection = _connection_of(ctx)
        self._subscribers.setdefault(connection, set()).add(str(params.uri))
        return EmptyResult()

    async def _unsubscribe(
        self, ctx: ServerRequestContext[Any, Any], params: mcp_types.UnsubscribeRequestParams
    ) -> mcp_types.EmptyResult:
        from mcp_types import EmptyResult

        self._subscribers.get(_connection_of(ctx), set()).discard(str(params.uri))
        return EmptyResult()

    async def _resource_changed(self, uri: str) -> None:
        """Tell those who subscribed to `uri` (either era) that it changed."""
        if self._bus.listening:
            from mcp.server.subscriptions import ResourceUpdated

            await self._bus.publish(ResourceUpdated(uri))
        for connection, uris in list(self._subscribers.items()):
            if uri not in uris:
                continue
            with contextlib.suppress(Exception):  # a client gone: its connection is dropped
                await connection.outbound.notify("notifications/resources/updated", {"uri": uri})

    def _current_scope(self) -> RootScope | None:
        call = current_call()
        return None if call is None else call.scope

    async def _client_roots(
        self, ctx: ServerRequestContext[Any, Any], state: dict[str, Any], responses: dict[str, Any]
    ) -> tuple[str, ...] | None:
        """The roots of this call's client (paths); None when they must be asked first.

        On the handshake era they are asked by `roots/list` once per
        connection, and again after `notifications/roots/list_changed`; on
        2026-07-28 a call asks in an `InputRequiredResult` round, whose
        retry brings them (its sealed state says they were asked).
        """
        from mcp.shared.exceptions import MCPError
        from mcp_types import INTERNAL_ERROR, ListRootsResult

        if modern(ctx):
            answer = responses.get(_ROOTS_KEY)
            if "roots" in state and isinstance(answer, ListRootsResult):
                return root_paths(str(root.uri) for root in answer.roots)
            return None
        connection = _connection_of(ctx)
        known = self._roots.get(connection)
        if known is None:
            changes = self._roots_changes.get(connection, 0)
            try:
                with _deprecated_api():  # the SDK warns when the method is called
                    asking = ctx.session.list_roots()
                result = await asking
            except Exception as error:
                raise MCPError(
                    INTERNAL_ERROR, f"could not list the client's roots: {error}"
                ) from None
            known = root_paths(str(root.uri) for root in result.roots)
            # Kept only if the roots did not change while they were asked for.
            if self._roots_changes.get(connection, 0) == changes:
                self._roots[connection] = known
        return known

    async def _roots_changed(
        self, ctx: ServerRequestContext[Any, Any], params: mcp_types.NotificationParams | None
    ) -> None:
        connection = _connection_of(ctx)
        self._roots.pop(connection, None)
        self._roots_changes[connection] = self._roots_changes.get(connection, 0) + 1

    async def _workspace_paths(self) -> tuple[str, ...]:
        """Where commands start, as named and resolved: what the client's roots are held to.

        Asked once, past the policies (they are for the model's commands, not
        the server's own question) but through a scope (`ScopedExecutor`),
        which chooses where commands start.
        """
        if self._workspace is None:
            # The first scope, else the backend.
            chain = list(_chain(self.executor))
            inner = next((each for each in chain if isinstance(each, ScopedExecutor)), chain[-1])
            output = await inner.exec_cmd(Command.shell("pwd; pwd -P"))
            lines = output.stdout.decode(errors="surrogateescape").splitlines()
            self._workspace = tuple(dict.fromkeys(line for line in lines if line))
        return self._workspace

    async def _set_logging_level(
        self, ctx: ServerRequestContext[Any, Any], params: mcp_types.SetLevelRequestParams
    ) -> mcp_types.EmptyResult:
        from mcp_types import EmptyResult

        self._levels[_connection_of(ctx)] = _LEVELS.index(params.level)
        return EmptyResult()

    def _log_level(self, ctx: ServerRequestContext[Any, Any]) -> int | None:
        """The lowest level this call's client takes log messages at, or None for none.

        On 2026-07-28 a request opts in through its `_meta`; on the handshake
        era the connection's `logging/setLevel` holds until changed, and a
        client that never set one gets none.
        """
        from mcp_types import LOG_LEVEL_META_KEY

        if modern(ctx):
            asked = (ctx.meta or {}).get(LOG_LEVEL_META_KEY)
            return _LEVELS.index(asked) if asked in _LEVELS else None
        return self._levels.get(_connection_of(ctx))

    async def _observe(self, event: CommandEvent) -> None:
        """Record each command as a resource; tell the call's client what became of it."""
        call = current_call()
        if isinstance(event, CommandStarted) and call is not None:
            call.commands.append(event.call_id)
        if not (isinstance(event, CommandStarted) and isinstance(event.command, _FILE_COMMANDS)):
            await self._resources.observe(event, call.name if call is not None else "")
        if call is None or not call.active or call.log_level is None:
            return
        if isinstance(event, CommandChunk):
            return
        level, data = _log_entry(call.name, event)
        if _LEVELS.index(level) < call.log_level:
            return
        with _deprecated_api():  # the SDK warns when the method is called, not awaited
            sending = call.ctx.session.send_log_message(
                level, data, logger="executor", related_request_id=call.ctx.request_id
            )
        with contextlib.suppress(Exception):  # a client gone away must not fail the command
            await sending

    async def run_stdio(self) -> None:
        """Serve one client on this process's stdin and stdout until it closes them."""
        from executor._mcp.stdio import stdio_streams

        server = self.server
        async with stdio_streams() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())

    def http_app(
        self,
        token: str | None,
        *,
        host: str = "127.0.0.1",
        allowed_origins: Sequence[str] = (),
    ) -> Any:
        """The streamable HTTP ASGI app at `/mcp`, guarded by `token` (`None`: no guard).

        Against DNS rebinding, a request's `Host` must name the bound address
        (any port; on loopback, any loopback name) and its `Origin`, when it
        has one, must be loopback's or one of `allowed_origins`: 421 and 403
        otherwise. A bind to every address (0.0.0.0, ::) checks the `Origin`
        alone, since the names it is reached by are not known. A body that is
        JSON but not one JSON-RPC message (a batch, `"jsonrpc": "1.0"`, a
        request without a method) gets error -32600 before it reaches the SDK
        (`envelope_guard`).

        Raises:
            ValueError: An origin is not `scheme://host[:port]` (`:*` for any
                port).
        """
        from mcp.server.transport_security import TransportSecuritySettings

        from executor._mcp.config import check_origin, is_loopback

        origins = [check_origin(origin) for origin in allowed_origins]
        loopback_hosts = ["127.0.0.1:*", "localhost:*", "[::1]:*"]
        loopback_origins = ["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"]
        everywhere = host in ("0.0.0.0", "::", "")
        shown = f"[{host}]" if ":" in host else host
        hosts = [shown, f"{shown}:*", *loopback_hosts]
        if is_loopback(host):
            hosts += ["127.0.0.1", "localhost", "[::1]"]
        security = TransportSecuritySettings(
            enable_dns_rebinding_protection=not everywhere,
            allowed_hosts=hosts,
            allowed_origins=[*loopback_origins, *origins],
        )
        app: Any = envelope_guard(
            self.server.streamable_http_app(host=host, transport_security=security)
        )
        if everywhere:
            app = origin_guard(app, [*loopback_origins, *origins])
        return app if token is None else bearer_guard(app, token)

    async def run_http(
        self,
        *,
        token: str | None,
        host: str = "127.0.0.1",
        port: int = 8765,
        ready: Callable[[str], Any] | None = None,
        allowed_origins: Sequence[str] = (),
    ) -> None:
        """Serve streamable HTTP at `http://HOST:PORT/mcp` until cancelled.

        Args:
            token: The bearer token every request must carry; `None` serves
                without one (only when asked for explicitly, and on loopback).
            host: The address to bind; 127.0.0.1 by default.
            port: The port; 0 picks a free one.
            ready: Called with the URL once the socket is bound (with the
                real port), before the first request is taken.
            allowed_origins: Browser origins accepted besides loopback's (see
                `http_app`).

        Raises:
            ValueError: No token for a bind off loopback, or an origin that is
                not one.
        """
        try:
            import uvicorn
        except ImportError as error:
            raise ImportError(_INSTALL_HINT) from error
        from executor._mcp.config import is_loopback

        if token is None and not is_loopback(host):
            raise ValueError(f"serving on {host}, off loopback, needs a bearer token")
        app = self.http_app(token, host=host, allowed_origins=allowed_origins)
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, port))
            sock.listen(128)
            sock.set_inheritable(False)
            bound = sock.getsockname()[1]
            shown = f"[{host}]" if family == socket.AF_INET6 else host
            url = f"http://{shown}:{bound}/mcp"
            config = uvicorn.Config(
                app,
                log_level="warning",
                lifespan="on",
                timeout_graceful_shutdown=1,
            )
            server = _uvicorn_server()(config)
            if ready is not None:
                ready(url)

            async def serve() -> None:
                # Shielded: a cancel asks uvicorn to shut down (below) instead of tearing
                # it apart mid-request; its own shutdown ends the calls still running.
                with anyio.CancelScope(shield=True):
                    await server.serve(sockets=[sock])

            async with anyio.create_task_group() as group:
                group.start_soon(serve)
                try:
                    await anyio.sleep_forever()
                finally:
                    server.should_exit = True
        finally:
            sock.close()


class _Bus:
    """The SDK's in-process subscription bus, at no cost while nobody listens.

    The SDK's own passes through the event loop on every publish, which is
    twice a command here (a command's start and end are resource updates).
    """

    def __init__(self) -> None:
        self._listeners: dict[object, Callable[[Any], None]] = {}

    @property
    def listening(self) -> bool:
        """Whether a `subscriptions/listen` stream is open."""
        return bool(self._listeners)

    async def publish(self, event: Any) -> None:
        """Hand `event` to every listener; one that raises is skipped."""
        for listener in list(self._listeners.values()):
            with contextlib.suppress(Exception):
                listener(event)
        # Lets the listen streams drain between the events of a burst.
        await anyio.lowlevel.checkpoint()

    def subscribe(self, listener: Callable[[Any], None]) -> Callable[[], None]:
        """Register `listener`; the callable returned unregisters it (twice is harmless)."""
        token = object()
        self._listeners[token] = listener

        def unsubscribe() -> None:
            self._listeners.pop(token, None)

        return unsubscribe


def _uvicorn_server() -> type[Any]:
    import uvicorn

    class Quiet(uvicorn.Server):
        """uvicorn's server, leaving signals to the caller.

        Its own handlers would re-raise SIGTERM once it stopped, killing the
        process before the executor had ended the commands it runs.
        """

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield

    return Quiet


def bearer_guard(app: Any, token: str) -> Callable[..., Awaitable[None]]:
    """An ASGI app that passes to `app` only HTTP requests with `Authorization: Bearer <token>`.

    The scheme's name is matched in any case (RFC 7235). A missing or wrong
    token gets 401 with `WWW-Authenticate: Bearer`; the
    comparison takes the same time whatever the token sent.
    """
    if not token:
        raise ValueError("the bearer token must not be empty")
    expected = token.encode()

    async def guarded(
        scope: MutableMapping[str, Any],
        receive: Callable[[], Awaitable[Any]],
        send: Callable[[Any], Awaitable[None]],
    ) -> None:
        if scope.get("type") != "http":
            await app(scope, receive, send)
            return
        given: str | None = None
        for name, value in scope.get("headers", ()):
            if name.lower() == b"authorization":
                given = value.decode("latin-1")
                break
        # RFC 7235: the scheme's name is case-insensitive ("bearer", "BEARER").
        presented = _bearer(given) if given is not None else None
        if presented is not None and hmac.compare_digest(presented.encode("latin-1"), expected):
            await app(scope, receive, send)
            return
        reason = "missing bearer token" if given is None else "wrong bearer token"
        await _send_json(
            send,
            401,
            {"error": "unauthorized", "error_description": reason},
            headers=[(b"www-authenticate", b'Bearer realm="executor"')],
        )

    return guarded


# What the SDK's HTTP transport reads of a body before it answers 413 (its default).
_BODY_LIMIT = 4 << 20


def envelope_guard(app: Any) -> Callable[..., Awaitable[None]]:
    """An ASGI app that answers -32600 (HTTP 400) to a POST that is not one JSON-RPC message.

    The SDK's handshake-era transport answers those with -32602 and a dump
    of its validation errors, after it made a session for them. A body that
    is not JSON, or larger than the transport reads (4 MiB), passes on
    untouched for the transport's own answer (-32700, 413).
    """

    async def guarded(
        scope: MutableMapping[str, Any],
        receive: Callable[[], Awaitable[Any]],
        send: Callable[[Any], Awaitable[None]],
    ) -> None:
        if scope.get("type") != "http" or scope.get("method") != "POST":
            await app(scope, receive, send)
            return
        pieces: list[bytes] = []
        size = 0
        more = True
        first: dict[str, Any] | None = None
        while more and size <= _BODY_LIMIT:
            event = await receive()
            if event.get("type") != "http.request":
                first = event  # a disconnect: the app hears it in its turn
                break
            piece = event.get("body", b"")
            pieces.append(piece)
            size += len(piece)
            more = bool(event.get("more_body"))
        body = b"".join(pieces)
        if first is None and not more:
            try:
                problem = envelope_problem(json.loads(body))
            except ValueError:
                problem = None  # not JSON: the transport answers -32700
            except RecursionError:
                problem = "the message is nested too deeply"
            if problem is not None:
                await _send_json(send, 400, invalid_request(problem))
                return
        replayed = False

        async def replay() -> Any:
            nonlocal replayed
            if not replayed:
                replayed = True
                if first is not None and not pieces:
                    return first
                return {"type": "http.request", "body": body, "more_body": more}
            if first is not None:
                return first
            return await receive()

        await app(scope, replay, send)

    return guarded


def origin_guard(app: Any, allowed: Sequence[str]) -> Callable[..., Awaitable[None]]:
    """An ASGI app that answers 403 to an HTTP request whose `Origin` is not in `allowed`.

    A request without an `Origin` (not from a browser) passes; an entry
    ending in `:*` takes any port, as the SDK's own check does.
    """

    def accepted(origin: str) -> bool:
        for entry in allowed:
            if origin == entry or (entry.endswith(":*") and origin.startswith(entry[:-1])):
                return True
        return False

    async def guarded(
        scope: MutableMapping[str, Any],
        receive: Callable[[], Awaitable[Any]],
        send: Callable[[Any], Awaitable[None]],
    ) -> None:
        if scope.get("type") == "http":
            for name, value in scope.get("headers", ()):
                if name.lower() == b"origin" and not accepted(value.decode("latin-1")):
                    await _send_json(send, 403, {"error": "this Origin is not allowed"})
                    return
        await app(scope, receive, send)

    return guarded


async def _send_json(
    send: Callable[[Any], Awaitable[None]],
    status: int,
    value: Any,
    *,
    headers: Sequence[tuple[bytes, bytes]] = (),
) -> None:
    """Answer an ASGI HTTP request with `value` as JSON, `headers` besides."""
    body = json.dumps(value, separators=(",", ":")).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
