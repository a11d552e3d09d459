"""Agent stream events for tool calls: what a UI shows while an agent's tools run.

```python
async with ToolCallEvents(LocalExecutor("/srv/checkout"), tools=[run]) as calls:
    with calls.subscribe() as events:
        output = await calls.call("run", '{"command": "make test"}', tool_call_id="call_1")
        # events: ToolCallStart, ToolCallDelta, ToolCallComplete, ToolExecuted
```

The tool-call subset of the agent stream's events, field for field:

- `ToolCallStart{tool_name, tool_call_id}`: the model began a tool call;
- `ToolCallDelta{delta, tool_call_id}`: a piece of its arguments (JSON text);
- `ToolCallComplete{tool_name, tool_call_id}`: the arguments are all in;
- `ToolExecuted{tool_name, tool_call_id, success, error}`: the tool ran, and
  how it went (with the `ToolOutputKind` and exit code besides);
- `Cancelled{partial_text, partial_thinking, pending_tools}`: the run (or a
  call) was cancelled with these tool calls in progress.

`ToolCallEvents` runs `Tool`s and makes these events for each call, in order:
Start, Delta (none or more), Complete, then exactly one of ToolExecuted or
Cancelled. It hands the tools an executor wrapped in `Observed`, so every
command a tool runs is seen while it runs; on a bus each call is one stream
of `ToolEvent`s under the call's id, as `bridge` publishes a tool's stream.
"""

from __future__ import annotations

import json
import uuid
from collections import deque
from collections.abc import Iterable, Mapping
from contextvars import ContextVar
from types import TracebackType
from typing import Any, Self, TypeAlias

import anyio
import attrs
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from executor._core.base import ToolExecutor
from executor._core.cleanup import run_to_completion
from executor._core.errors import ToolCancelled, ToolStreamError
from executor._policies.observed import CommandChunk, CommandEvent, Observed
from executor._tools.events import Bus, Envelope, EventSequencer, ToolEvent, ToolEventKind, Topic
from executor._tools.tools import AgentContext, DefaultContext, Tool, ToolOutput, ToolOutputKind

# How long the end of a cancelled call may still spend reaching subscribers and the
# bus: enough for in-process consumers, short enough that cancellation stays prompt.
_CANCEL_GRACE = 5.0


@attrs.frozen(kw_only=True)
class ToolCallStart:
    """The model began a tool call.

    Attributes:
        tool_name: The tool it calls.
        tool_call_id: The call's id (the model's, or one made up when it gave none).
    """

    tool_name: str
    tool_call_id: str | None


@attrs.frozen(kw_only=True)
class ToolCallDelta:
    """A piece of a tool call's arguments, as JSON text (the pieces joined are the arguments).

    Attributes:
        delta: The piece.
        tool_call_id: The call's id.
    """

    delta: str
    tool_call_id: str | None


@attrs.frozen(kw_only=True)
class ToolCallComplete:
    """A tool call's arguments are all received; the tool runs next.

    Attributes:
        tool_name: The tool it calls.
        tool_call_id: The call's id.
    """

    tool_name: str
    tool_call_id: str | None


@attrs.frozen(kw_only=True)
class ToolExecuted:
    """A tool ran: whether it succeeded, and if not, why.

    Attributes:
        tool_name: The tool that ran.
        tool_call_id: The call's id.
        success: Whether the tool succeeded (its `ToolOutput` was no error).
        error: On failure, what the model is told (the error output's text,
            or the exception a tool raised); `None` on success.
        kind: What became of the call (`ToolOutputKind`); `None` when the
            tool raised an exception instead of returning an output.
        exit_code: The exit code of the command behind the output, when known.
    """

    tool_name: str
    tool_call_id: str | None
    success: bool
    error: str | None
    kind: ToolOutputKind | None = None
    exit_code: int | None = None


def _names(values: Iterable[str]) -> list[str]:
    return list(values)


def _ids(values: Iterable[str | None]) -> list[str | None]:
    return list(values)


@attrs.frozen(kw_only=True)
class Cancelled:
    """The run, or a tool call, was cancelled before it finished.

    Attributes:
        partial_text: Text the model had produced before the cancellation;
            tool calls alone have none (`None`).
        partial_thinking: Likewise for the model's thinking (`None` here).
        pending_tools: The names of the tool calls in progress, in the order
            they began.
        pending_tool_call_ids: Their ids, in the same order.
    """

    partial_text: str | None = None
    partial_thinking: str | None = None
    pending_tools: list[str] = attrs.field(factory=list, converter=_names)
    pending_tool_call_ids: list[str | None] = attrs.field(factory=list, converter=_ids)


AgentStreamEvent: TypeAlias = (
    ToolCallStart | ToolCallDelta | ToolCallComplete | ToolExecuted | Cancelled
)
"""Any event `ToolCallEvents` makes."""


class _ObservedContext:
    """The caller's agent context with its executor observed; all else is the caller's.

    Attributes are read from and written to the caller's context, and
    `isinstance` sees its class, so a tool that records on its own kind of
    context (the standard toolset's `last_output`) still does.
    """

    _own = frozenset({"_inner", "_calls", "_observed"})

    def __init__(self, inner: AgentContext, calls: ToolCallEvents) -> None:
        self._inner = inner
        self._calls = calls
        self._observed: tuple[ToolExecutor, Observed] | None = None

    def executor(self) -> ToolExecutor:
        inner = self._inner.executor()
        if self._observed is None or self._observed[0] is not inner:
            self._observed = (inner, Observed(inner, self._calls._observe))
        return self._observed[1]

    @property  # type: ignore[misc]
    def __class__(self) -> type:
        return type(self._inner)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in self._own:
            object.__setattr__(self, name, value)
        else:
            setattr(self._inner, name, value)

    def __repr__(self) -> str:
        return f"observed {self._inner!r}"


_TOPICS = {
    ToolEventKind.PROGRESS: Topic.PROGRESS,
    ToolEventKind.PARTIAL: Topic.PARTIAL,
    ToolEventKind.COMPLETE: Topic.RESULT,
    ToolEventKind.ERROR: Topic.RESULT,
}

_current: ContextVar[PendingToolCall | None] = ContextVar("executor_tool_call", default=None)


class PendingToolCall:
    """One tool call on its way: arguments arriving, then the run. Made by `ToolCallEvents.begin`.

    `await call.delta(text)` for each piece of the arguments as the model
    streams them, then `await call.run()` (which sends `ToolCallComplete` first
    if `complete()` was not called).
    """

    def __init__(self, calls: ToolCallEvents, tool: Tool, tool_call_id: str) -> None:
        self._calls = calls
        self.tool = tool
        self.tool_call_id = tool_call_id
        self._arguments: list[str] = []
        self._sequencer = EventSequencer()
        self._completed = False
        self._running = False
        self._ended = False
        self._scope: anyio.CancelScope | None = None
        self._cancel_requested = False
        self._done = anyio.Event()

    def __repr__(self) -> str:
        return f"PendingToolCall({self.tool.name!r}, {self.tool_call_id!r})"

    @property
    def tool_name(self) -> str:
        """The tool this call calls."""
        return self.tool.name

    @property
    def arguments(self) -> str:
        """The arguments received so far, joined."""
        return "".join(self._arguments)

    @property
    def ended(self) -> bool:
        """Whether the call has ended (executed or cancelled)."""
        return self._ended

    def _check_open(self, what: str) -> None:
        if self._cancel_requested:
            raise ToolCancelled(f"{self.tool.name} ({self.tool_call_id}) was cancelled")
        if self._ended:
            raise RuntimeError(f"tool call {self.tool_call_id} has ended; cannot {what}")

    async def delta(self, text: str) -> None:
        """Report a piece of the arguments (`ToolCallDelta`); empty pieces are skipped.

        Raises:
            RuntimeError: The arguments are complete already, or the call ended.
            ToolCancelled: The run was cancelled.
        """
        if not isinstance(text, str):
            raise TypeError(f"an arguments delta must be text, got {type(text).__name__}")
        self._check_open("take arguments")
        if self._completed:
            raise RuntimeError(f"the arguments of tool call {self.tool_call_id} are complete")
        if not text:
            return
        self._arguments.append(text)
        await self._calls._emit(self, ToolCallDelta(delta=text, tool_call_id=self.tool_call_id))

    async def complete(self) -> None:
        """Report that the arguments are all in (`ToolCallComplete`); a second call does nothing."""
        self._check_open("complete")
        if self._completed:
            return
        self._completed = True
        await self._calls._emit(
            self, ToolCallComplete(tool_name=self.tool.name, tool_call_id=self.tool_call_id)
        )

    async def run(self, arguments: str | Mapping[str, Any] | None = None) -> ToolOutput:
        """Run the tool on the arguments received (or on `arguments`), reporting how it went.

        A `ToolOutput` (success or error) ends the call with `ToolExecuted`;
        so does an exception the tool raises, which then propagates.
        Cancellation from outside ends it with `Cancelled` naming this call,
        and goes on; `ToolCallEvents.cancel()` ends it with the run's one
        `Cancelled`, and `run` raises `ToolCancelled`.

        Raises:
            ToolCancelled: The run was cancelled through `ToolCallEvents.cancel()`.
            RuntimeError: The call already ran.
        """
        self._check_open("run")
        if self._running:
            raise RuntimeError(f"tool call {self.tool_call_id} is running already")
        self._running = True
        token = _current.set(self)
        try:
            await self.complete()
            given = self.arguments if arguments is None else arguments
            with anyio.CancelScope() as scope:
                self._scope = scope
                if self._cancel_requested:
                    scope.cancel()
                output = await self.tool.invoke(self._calls.context, given or None)
            if scope.cancelled_caught or self._cancel_requested:
                raise ToolCancelled(f"{self.tool.name} ({self.tool_call_id}) was cancelled")
        except anyio.get_cancelled_exc_class():
            await run_to_completion(self._cancelled_from_outside)
            raise
        except ToolCancelled:
            raise
        except Exception as error:
            await self._end(
                ToolExecuted(
                    tool_name=self.tool.name,
                    tool_call_id=self.tool_call_id,
                    success=False,
                    error=str(error) or repr(error),
                ),
                error,
            )
            raise
        finally:
            _current.reset(token)
            self._ended = True
            self._done.set()
        executed = ToolExecuted(
            tool_name=self.tool.name,
            tool_call_id=self.tool_call_id,
            success=not output.is_error,
            error=output.text if output.is_error else None,
            kind=output.kind,
            exit_code=output.exit_code,
        )
        failure = ToolStreamError(output.text) if output.is_error else None
        # Ended before reporting: an observer's error on this last event must not make
        # the call look pending to a later cancel.
        await self._end(executed, failure)
        return output

    async def _end(self, event: ToolExecuted, failure: Exception | None) -> None:
        self._ended = True
        self._calls._forget(self)
        await self._calls._emit(self, event, failure=failure, final=True)

    async def _cancelled_from_outside(self) -> None:
        if self._cancel_requested:
            return  # the run's Cancelled already named this call
        self._ended = True
        self._calls._forget(self)
        with anyio.move_on_after(_CANCEL_GRACE):
            cancelled = Cancelled(
                pending_tools=[self.tool.name], pending_tool_call_ids=[self.tool_call_id]
            )
            await self._calls._emit(
                self,
                cancelled,
                failure=ToolCancelled(f"{self.tool.name} ({self.tool_call_id}) was cancelled"),
                final=True,
            )

    def _bus_event(
        self, event: AgentStreamEvent | Any, failure: Exception | None, final: bool
    ) -> ToolEvent:
        if final and failure is not None:
            return attrs.evolve(self._sequencer.error(failure), payload=event)
        if final:
            return self._sequencer.complete(event)
        if isinstance(event, CommandChunk):
            return self._sequencer.partial(event.chunk)
        return self._sequencer.progress(payload=event)


class ToolCallEvents:
    """Runs tool calls and reports each one as agent stream events, to subscribers and a bus.

    Args:
        context: The agent context the tools get (an executor is wrapped in a
            `DefaultContext`). Its executor is handed to the tools wrapped in
            `Observed`, so the commands of each call are seen as they run.
        tools: The tools `call` and `begin` find by name (a `Tool` can also
            be passed to them directly).
        bus: Where each call is also published: one `ToolEvent` stream per
            call under its id (the envelopes' `parent_id`) and the tool's name
            (`source`): `tool.stream.progress` events whose payload is the
            `ToolCallStart`, each `ToolCallDelta` and the `ToolCallComplete`;
            `tool.stream.partial` events with each chunk of output the tool's
            commands print (`Stdout`/`Stderr`); then one `tool.result`, a
            COMPLETE whose payload is the `ToolExecuted` when it succeeded, or
            an ERROR whose payload is the `ToolExecuted` (error
            `ToolStreamError`) or the `Cancelled` (error `ToolCancelled`).
        keep: How many of the latest events `history` keeps (`None`: all).

    Subscribers (`subscribe()`) get every event from then on, through a
    bounded buffer: a slow subscriber slows the calls rather than letting
    events pile up. Calls may run concurrently; each call's events are in
    order, calls' events interleave. A call without an id gets a made-up one
    (`call_` and 24 hex digits), so every event names its call.
    """

    def __init__(
        self,
        context: AgentContext | ToolExecutor,
        *,
        tools: Iterable[Tool] = (),
        bus: Bus | None = None,
        keep: int | None = 1000,
    ) -> None:
        if isinstance(context, ToolExecutor):
            context = DefaultContext.from_executor(context)
        elif not isinstance(context, AgentContext):
            raise TypeError(f"expected an AgentContext or a ToolExecutor, got {context!r}")
        if keep is not None and keep < 0:
            raise ValueError(f"keep must be >= 0 or None, got {keep}")
        self.tools: dict[str, Tool] = {}
        for tool in tools:
            if not isinstance(tool, Tool):
                raise TypeError(f"expected a Tool, got {tool!r}")
            if tool.name in self.tools:
                raise ValueError(f"two tools are named {tool.name!r}")
            self.tools[tool.name] = tool
        self.context: AgentContext = _ObservedContext(context, self)
        self.bus = bus
        self.history: deque[AgentStreamEvent] = deque(maxlen=keep)
        self._subscribers: list[MemoryObjectSendStream[AgentStreamEvent]] = []
        self._pending: dict[str, PendingToolCall] = {}
        self._cancelled = False
        # Events go out one at a time, in the order they were made: concurrent calls
        # interleave, but never overtake one another's events (nor `pending`'s order).
        self._lock = anyio.Lock()

    def __repr__(self) -> str:
        return f"ToolCallEvents({list(self.tools)!r})"

    @property
    def cancelled(self) -> bool:
        """Whether `cancel()` ended the run."""
        return self._cancelled

    @property
    def pending(self) -> list[PendingToolCall]:
        """The calls begun and not yet ended, in the order they began."""
        return list(self._pending.values())

    def subscribe(self, max_buffer: int = 256) -> MemoryObjectReceiveStream[AgentStreamEvent]:
        """A stream of the events made from now on; it ends when the run is cancelled or closed.

        Close it (or leave its `with` block) to unsubscribe.
        """
        send, receive = anyio.create_memory_object_stream[AgentStreamEvent](max_buffer)
        if self._cancelled:
            send.close()
        else:
            self._subscribers.append(send)
        return receive

    def _tool(self, tool: Tool | str) -> Tool:
        if isinstance(tool, Tool):
            return tool
        found = self.tools.get(tool)
        if found is None:
            known = ", ".join(self.tools) or "none"
            raise KeyError(f"no tool named {tool!r}; the tools are: {known}")
        return found

    async def begin(self, tool: Tool | str, *, tool_call_id: str | None = None) -> PendingToolCall:
        """Begin a call (`ToolCallStart`); feed it arguments and run it through the result.

        Raises:
            KeyError: No tool of that name.
            ValueError: A call with that id is in progress.
            ToolCancelled: The run was cancelled.
        """
        found = self._tool(tool)
        if self._cancelled:
            raise ToolCancelled("the run was cancelled: no more tool calls")
        if tool_call_id is None:
            tool_call_id = f"call_{uuid.uuid4().hex[:24]}"
        elif not isinstance(tool_call_id, str) or not tool_call_id:
            raise ValueError(f"tool_call_id must be a non-empty string, got {tool_call_id!r}")
        if tool_call_id in self._pending:
            raise ValueError(f"tool call {tool_call_id!r} is in progress already")
        call = PendingToolCall(self, found, tool_call_id)
        self._pending[tool_call_id] = call
        await self._emit(call, ToolCallStart(tool_name=found.name, tool_call_id=tool_call_id))
        return call

    async def call(
        self,
        tool: Tool | str,
        arguments: str | Mapping[str, Any] | None = None,
        *,
        tool_call_id: str | None = None,
    ) -> ToolOutput:
        """Run one tool call whose arguments are all there, reporting each of its events.

        The arguments (JSON text, or a mapping, sent as JSON) are one
        `ToolCallDelta`. Returns what the model should see; see
        `PendingToolCall.run` for failures and cancellation.
        """
        call = await self.begin(tool, tool_call_id=tool_call_id)
        if isinstance(arguments, Mapping):
            arguments = json.dumps(dict(arguments), ensure_ascii=False)
        if arguments:
            await call.delta(arguments)
        return await call.run()

    async def cancel(self) -> None:
        """Cancel the run: one `Cancelled` naming every call in progress, then each is stopped.

        Their commands are killed (the executor's cancellation does that), and
        each one's `run()` raises `ToolCancelled`. Waits until the running
        calls have ended, then ends every subscription; later calls are
        refused. A second `cancel()` does nothing.
        """
        if self._cancelled:
            return
        self._cancelled = True
        pending = self.pending
        for call in pending:
            call._cancel_requested = True
        cancelled = Cancelled(
            pending_tools=[call.tool_name for call in pending],
            pending_tool_call_ids=[call.tool_call_id for call in pending],
        )

        async def finish() -> None:
            with anyio.move_on_after(_CANCEL_GRACE):
                await self._send(cancelled)
            for call in pending:
                with anyio.move_on_after(_CANCEL_GRACE):
                    await self._publish(
                        call,
                        cancelled,
                        ToolCancelled(f"{call.tool_name} ({call.tool_call_id}) was cancelled"),
                        final=True,
                    )

        await run_to_completion(finish)
        for call in pending:
            self._forget(call)
            if call._scope is not None:
                call._scope.cancel()
            if call._running:
                await call._done.wait()
            else:
                call._ended = True
        self._close_subscribers()

    def _forget(self, call: PendingToolCall) -> None:
        self._pending.pop(call.tool_call_id, None)

    def _close_subscribers(self) -> None:
        for send in self._subscribers:
            send.close()
        self._subscribers.clear()

    async def aclose(self) -> None:
        """End every subscription (their `async for` finishes). Calls still running go on."""
        self._close_subscribers()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def _observe(self, event: CommandEvent) -> None:
        """The `Observed` observer: a command's output goes on the bus under its tool call."""
        call = _current.get()
        if call is None or call._calls is not self or call._ended:
            return
        if isinstance(event, CommandChunk) and self.bus is not None:
            await self._publish(call, event, None, final=False)

    async def _locked(self) -> None:
        # The lock without a checkpoint when it is free: an event costs no trip
        # through the event loop unless another call's event is going out.
        try:
            self._lock.acquire_nowait()
        except anyio.WouldBlock:
            await self._lock.acquire()

    async def _send(self, event: AgentStreamEvent) -> None:
        await self._locked()
        try:
            await self._deliver(event)
        finally:
            self._lock.release()

    async def _deliver(self, event: AgentStreamEvent) -> None:
        self.history.append(event)
        for send in list(self._subscribers):
            try:
                await send.send(event)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                send.close()
                if send in self._subscribers:
                    self._subscribers.remove(send)

    async def _publish(
        self,
        call: PendingToolCall,
        event: AgentStreamEvent | CommandChunk,
        failure: Exception | None,
        *,
        final: bool,
    ) -> None:
        if self.bus is None or call._sequencer.ended:
            return
        tool_event = call._bus_event(event, failure, final)
        topic = _TOPICS[tool_event.kind]
        envelope = Envelope(
            topic=topic, event=tool_event, parent_id=call.tool_call_id, source=call.tool_name
        )
        result = self.bus.publish(topic, envelope)
        if result is not None:
            await result

    async def _emit(
        self,
        call: PendingToolCall,
        event: AgentStreamEvent,
        *,
        failure: Exception | None = None,
        final: bool = False,
    ) -> None:
        await self._locked()
        try:
            await self._deliver(event)
            await self._publish(call, event, failure, final=final)
        finally:
            self._lock.release()
