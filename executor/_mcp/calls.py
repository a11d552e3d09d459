"""One MCP request's call, and the rounds of a call that asks its client a question (2026-07-28).

A call (`Call`) is what the server's hooks need of the request they serve:
its context, its log level, the client's roots, the commands it ran. The
hooks find it through `current_call()`; the context variable holds a weak
reference, so a task a call happened to spawn (a persistent shell's host,
a job) does not keep the call, its request and its connection alive.

On the handshake era an approval is a request to the client
(`elicitation/create`) awaited where it is asked. 2026-07-28 has no
server-to-client requests: the question goes back in an
`InputRequiredResult`, and the answer comes with the client's retry of the
call. Re-running the call from the start at each retry would run again
every command approved in an earlier round, so a call that may ask runs in
a task of the server's own (`Rounds`), which waits at the question until
the retry brings the answer, then goes on: each approved command runs once.
The retry finds the call by the id in its `request_state`, which the SDK's
`RequestStateBoundary` sealed (AES-GCM under a key of this process, bound
to the tool, a digest of its arguments, the principal and an expiry) and
verified before it reaches the server; each state is good for one retry.
"""

from __future__ import annotations

import contextvars
import hashlib
import secrets
import weakref
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import anyio
import attrs

from executor._mcp.roots import RootScope
from executor._policies.policies import ApprovalRequest
from executor._policies.verdict import Verdict

if TYPE_CHECKING:
    import mcp_types
    from mcp.server.context import ServerRequestContext


@attrs.define(eq=False)
class Call:
    """What the server's hooks need of the request a tool call or a read serves.

    Attributes:
        ctx: The request being served (on 2026-07-28, the latest retry's).
        name: The tool called, or the method (`resources/read`).
        rounds: The call's rounds, when it runs in a task of its own.
        log_level: The lowest log level the client takes (an index), or None.
        scope: What the roots leave of the workspace.
        active: Whether a request is still served (a job's events come later).
        commands: The ids of the commands the call ran, in order.
        missing_elicitation: The client was to be asked and cannot be.
    """

    ctx: ServerRequestContext[Any, Any]
    name: str
    rounds: Rounds | None = None
    log_level: int | None = None
    scope: RootScope | None = None
    active: bool = True
    commands: list[str] = attrs.Factory(list)
    missing_elicitation: bool = False


_CURRENT: contextvars.ContextVar[weakref.ref[Call] | None] = contextvars.ContextVar(
    "executor_mcp_call", default=None
)


def current_call() -> Call | None:
    """The call the running code serves, if any (and if it still exists)."""
    ref = _CURRENT.get()
    return None if ref is None else ref()


def use_call(call: Call | None) -> contextvars.Token[weakref.ref[Call] | None]:
    """Make `call` the current call; `_CURRENT.reset(token)` undoes it."""
    return _CURRENT.set(None if call is None else weakref.ref(call))


def reset_call(token: contextvars.Token[weakref.ref[Call] | None]) -> None:
    """Undo `use_call`."""
    _CURRENT.reset(token)


class _Answer:
    """One question of a round: its request, and the answer once it came."""

    def __init__(self, request: Any) -> None:
        self.request = request
        self.value: Any = None
        self.given = anyio.Event()


class Rounds:
    """A call that runs in a task of the server's own, asking its client between rounds.

    The task runs `work` to its end; a question (`ask`) waits for the
    client's retry, or for `ttl` seconds. Each request serving the call
    awaits `next_round()`: the call's result when it ended, else the
    questions asked and not yet answered, to send back with a fresh state id.

    Args:
        call: The call.
        ttl: Seconds a question waits for its answer, from the round that
            asked it.
    """

    def __init__(self, call: Call, ttl: float) -> None:
        self.id = secrets.token_urlsafe(16)
        self.call = call
        self.ttl = ttl
        self.state_id: str | None = None
        self._questions: dict[str, _Answer] = {}
        self._changed = anyio.Event()
        self._done = False
        self._result: Any = None
        self._error: BaseException | None = None
        self._scope: anyio.CancelScope | None = None

    @property
    def done(self) -> bool:
        """Whether the call ended."""
        return self._done

    async def run(self, work: Callable[[], Awaitable[Any]]) -> None:
        """Run `work` as the call (in the server's task), keeping its result or error."""
        token = use_call(self.call)
        try:
            with anyio.CancelScope() as self._scope:
                self._result = await work()
        except Exception as error:  # handed to the request that serves the call
            self._error = error
        finally:
            reset_call(token)
            self._done = True
            self._wake()

    def cancel(self) -> None:
        """End the call: its commands are killed (the client went away, or the server ends)."""
        if self._scope is not None:
            self._scope.cancel()

    async def ask(self, key: str, request: Any) -> Any:
        """Ask the client `request` under `key`; its answer, or None when none came in time."""
        question = self._questions.get(key)
        if question is None:
            question = self._questions[key] = _Answer(request)
            self._wake()
        with anyio.move_on_after(self.ttl):
            await question.given.wait()
        self._questions.pop(key, None)
        return question.value

    def answer(self, responses: dict[str, Any]) -> None:
        """Take the answers to the questions waiting (any other is ignored, as SEP-2322 asks)."""
        for key, question in list(self._questions.items()):
            if key in responses and not question.given.is_set():
                question.value = responses[key]
                question.given.set()

    async def next_round(self) -> tuple[bool, Any]:
        """(True, the result) once the call ended, or (False, the questions waiting).

        Raises:
            Exception: What the call raised.
        """
        while True:
            if self._done:
                if self._error is not None:
                    raise self._error
                return True, self._result
            waiting = {k: q.request for k, q in self._questions.items() if not q.given.is_set()}
            if waiting:
                return False, waiting
            changed = self._changed
            await changed.wait()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()


_APPROVAL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "approve": {
            "type": "boolean",
            "title": "Run it",
            "description": "Whether this command may run",
        }
    },
    "required": ["approve"],
}


def _verdict(result: mcp_types.ElicitResult) -> Verdict:
    if result.action == "accept":
        approved = bool((result.content or {}).get("approve"))
        return Verdict(approved, None if approved else "the person said no")
    if result.action == "decline":
        return Verdict(False, "the person declined")
    return Verdict(False, "the person cancelled the approval")


def elicits(ctx: ServerRequestContext[Any, Any]) -> bool:
    """Whether the client of `ctx` declares elicitation: it can be asked for an approval."""
    capabilities = ctx.session.client_capabilities
    return capabilities is not None and capabilities.elicitation is not None


def offers_roots(ctx: ServerRequestContext[Any, Any]) -> bool:
    """Whether the client of `ctx` declares roots."""
    capabilities = ctx.session.client_capabilities
    return capabilities is not None and capabilities.roots is not None


def modern(ctx: ServerRequestContext[Any, Any]) -> bool:
    """Whether `ctx` speaks 2026-07-28 (no handshake, input asked for in results)."""
    from mcp_types.version import MODERN_PROTOCOL_VERSIONS

    return ctx.protocol_version in MODERN_PROTOCOL_VERSIONS


async def elicitation_approver(request: ApprovalRequest) -> Verdict:
    """An `Approval` approver that asks the MCP client serving the current call.

    Outside an MCP call, or with a client that does not declare the
    elicitation capability, it refuses, saying why.
    """
    call = current_call()
    if call is None:
        return Verdict(False, "approval is needed, and there is no MCP client to ask")
    from mcp_types import ElicitRequest, ElicitRequestFormParams, ElicitResult

    ctx = call.ctx
    if not elicits(ctx):
        call.missing_elicitation = True
        return Verdict(
            False,
            "approval is needed, and this MCP client cannot be asked (it does not support "
            "elicitation)",
        )
    message = f"Allow this command to run?\n\n{request.description}"
    if not modern(ctx):
        result = await ctx.session.elicit_form(
            message, _APPROVAL_SCHEMA, related_request_id=ctx.request_id
        )
        return _verdict(result)
    if call.rounds is None:
        return Verdict(False, "approval is needed, and this call cannot wait for an answer")
    key = "approve-" + hashlib.sha256(request.description.encode()).hexdigest()[:16]
    answer = await call.rounds.ask(
        key,
        ElicitRequest(
            params=ElicitRequestFormParams(message=message, requested_schema=_APPROVAL_SCHEMA)
        ),
    )
    if answer is None:
        return Verdict(False, f"no answer came within {call.rounds.ttl:g} s")
    if not isinstance(answer, ElicitResult):
        return Verdict(False, "the client answered the approval with something else")
    return _verdict(answer)
