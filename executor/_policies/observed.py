"""Execution events for observers: every command's start, chunks, end or cancellation.

`Observed` reports the tool-execution part of an agent's stream (a call
starts, its output arrives piece by piece, it finishes or is cancelled with
what was pending) to a plain or async callable, so a UI or a tracer sees every
command. When `opentelemetry-api` is importable, each command also gets a span.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import inspect
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any, TypeAlias

import anyio
import attrs

from executor._core.base import ToolExecutor, Watcher, WrappedExecutor, call_sink
from executor._core.cleanup import run_to_completion
from executor._core.commands import Command
from executor._core.errors import CommandError, outcome_of
from executor._core.output import Chunk, CommandOutput, OutputBuffer, Sink
from executor._core.session import ProcessSession, WrappedSession
from executor._policies.policies import describe

SPAN_NAME = "executor.command"
_PARTIAL_LIMIT = 1 << 20


@attrs.frozen(kw_only=True)
class CommandStarted:
    """A command is about to be handed to the inner executor.

    Attributes:
        call_id: A uuid4 hex, the same in every event of this command.
        command: The command as this wrapper received it.
        description: `describe(command)`.
        time: Wall-clock time (seconds since the epoch).
    """

    call_id: str
    command: Command
    description: str
    time: float


@attrs.frozen(kw_only=True)
class CommandChunk:
    """A piece of output, as the command produced it.

    Attributes:
        call_id: The command's id.
        chunk: `Stdout` or `Stderr`, exactly as read.
        sequence: 1 for the first chunk of the command, then 2, 3, ...
        time: Wall-clock time (seconds since the epoch).
    """

    call_id: str
    chunk: Chunk
    sequence: int
    time: float


@attrs.frozen(kw_only=True)
class CommandFinished:
    """A command ended, well or not (cancellation is `CommandCancelled`).

    Attributes:
        call_id: The command's id.
        success: Whether it returned an output rather than raising.
        exit_code: The exit code (`None` for file commands and errors without one).
        duration: Seconds since `CommandStarted`.
        error: The error's message, on failure.
        output_bytes: Bytes of output seen through the stream.
        outcome: "ok", "nonzero", "timeout", "denied", "error" (another
            `CommandError`) or "exception" (any other exception).
        time: Wall-clock time (seconds since the epoch).
    """

    call_id: str
    success: bool
    exit_code: int | None
    duration: float
    error: str | None
    output_bytes: int
    outcome: str
    time: float


@attrs.frozen(kw_only=True)
class CommandCancelled:
    """A command was cancelled (or interrupted) before it ended.

    Attributes:
        call_id: The command's id.
        duration: Seconds since `CommandStarted`.
        partial_output: The chunks seen so far (head and tail kept past 1 MiB,
            with `truncated` set); no exit code.
        pending: `describe(command)` of the command that was running.
        time: Wall-clock time (seconds since the epoch).
    """

    call_id: str
    duration: float
    partial_output: CommandOutput
    pending: str
    time: float


CommandEvent: TypeAlias = CommandStarted | CommandChunk | CommandFinished | CommandCancelled
"""Any event an `Observed` wrapper reports."""

Observer: TypeAlias = Callable[[CommandEvent], Awaitable[None] | None]
"""Receives each event: a plain function, or an async one that is awaited."""


class _ObserverFailed(Exception):
    """Carries an observer's exception past the handlers that would report it."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(error)
        self.error = error


class Observed(WrappedExecutor):
    """Reports each command's start, output chunks, and end or cancellation to `observer`.

    `exec_cmd` runs through the inner executor's `exec_cmd_streaming`, so
    chunks are seen as they are read in both; a caller's sink still receives
    every chunk. The observer is a plain or async callable given a
    `CommandStarted`, then `CommandChunk`s (sequence 1, 2, ...), then one
    `CommandFinished` or `CommandCancelled` (sent under a shield, then the
    cancellation goes on). An exception the observer raises propagates, and
    no more events are sent for that command.

    Sessions (`start()`) are observed the same way: their chunks as the
    reader gets them, then `CommandFinished` when the command ends, or
    `CommandCancelled` when the session is cancelled or left before it
    ended. An observer's exception there kills the command, and
    `finalize()` raises it.

    If `opentelemetry` is importable and `tracing` is true, each command runs
    in a span `executor.command` with attributes `executor.command`,
    `executor.exit_code`, `executor.duration_s` and `executor.outcome`; a
    failure sets an error status. A session's span starts with the session
    and ends with it, but is not made current.
    """

    def __init__(self, inner: ToolExecutor, observer: Observer, *, tracing: bool = True) -> None:
        super().__init__(inner)
        self.observer = observer
        self.tracing = tracing

    def __repr__(self) -> str:
        return f"Observed({self.inner!r})"

    async def exec_cmd(self, cmd: Command) -> CommandOutput:
        """Run `cmd` through the inner executor's streaming, reporting its events."""
        return await self._observed(cmd, None)

    async def exec_cmd_streaming(self, cmd: Command, sink: Sink) -> CommandOutput:
        """Run `cmd` with streaming, reporting its events; `sink` gets every chunk."""
        return await self._observed(cmd, sink)

    async def start(self, cmd: Command, *, pty: bool = False) -> ProcessSession:
        """Start a session on the inner executor, reporting its events (see the class)."""
        call = _ObservedCall(self, cmd)
        trace = self._trace()
        if trace is not None:
            call.span = trace.get_tracer("executor").start_span(
                SPAN_NAME, attributes={"executor.command": call.description}
            )
            call.owns_span = True
        try:
            await call.started()
            session = await self.inner.start(cmd, pty=pty)
        except _ObserverFailed as failed:
            raise failed.error from None
        except BaseException as error:
            await run_to_completion(
                functools.partial(call.failed, error, cancelled=not isinstance(error, Exception))
            )
            raise
        return _ObservedSession(session, call)

    async def _observed(self, cmd: Command, sink: Sink | None) -> CommandOutput:
        call = _ObservedCall(self, cmd)

        async def observing(chunk: Chunk) -> None:
            await call.chunk(chunk)
            if sink is not None:
                await call_sink(sink, chunk)

        try:
            with self._span(call.description) as span:
                call.span = span
                await call.started()
                try:
                    output = await self.inner.exec_cmd_streaming(
                        cmd, Watcher(observing, caller=sink)
                    )
                except _ObserverFailed:
                    raise
                except BaseException as error:
                    await run_to_completion(
                        functools.partial(
                            call.failed, error, cancelled=not isinstance(error, Exception)
                        )
                    )
                    raise
                await call.finished("ok", output.exit_code, None, len(output))
                return output
        except _ObserverFailed as failed:
            raise failed.error from None

    async def _emit(self, event: CommandEvent) -> None:
        try:
            result = self.observer(event)
            if inspect.isawaitable(result):
                await result
        except BaseException as error:
            if isinstance(error, anyio.get_cancelled_exc_class()):
                raise
            raise _ObserverFailed(error) from error

    def _trace(self) -> Any:
        return _opentelemetry_trace() if self.tracing else None

    @contextlib.contextmanager
    def _span(self, description: str) -> Iterator[Any]:
        trace = self._trace()
        if trace is None:
            yield None
            return
        tracer = trace.get_tracer("executor")
        with tracer.start_as_current_span(
            SPAN_NAME,
            attributes={"executor.command": description},
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            yield span


class _ObservedCall:
    """One command's events, from `CommandStarted` to its end, and its span."""

    def __init__(self, observed: Observed, cmd: Command) -> None:
        self._observed = observed
        self.cmd = cmd
        self.call_id = uuid.uuid4().hex
        self.description = describe(cmd)
        self.span: Any = None
        # A session's span is ours to end; a command's ends with its `with` block.
        self.owns_span = False
        self._observer_failed = False
        self._seen = OutputBuffer(_PARTIAL_LIMIT)
        self._sequence = 0
        self._total = 0
        self._started = time.monotonic()
        self._ended = False

    async def _send(self, event: CommandEvent) -> None:
        # After the observer failed once, nothing more is sent for this command.
        if self._observer_failed:
            return
        try:
            await self._observed._emit(event)
        except _ObserverFailed:
            self._observer_failed = True
            self.end_span("error", None, "observer failed")
            raise

    async def started(self) -> None:
        self._started = time.monotonic()
        await self._send(
            CommandStarted(
                call_id=self.call_id,
                command=self.cmd,
                description=self.description,
                time=time.time(),
            )
        )

    async def chunk(self, chunk: Chunk) -> None:
        if not chunk.data:
            return
        self._sequence += 1
        self._total += len(chunk.data)
        self._seen.append(chunk)
        await self._send(
            CommandChunk(
                call_id=self.call_id, chunk=chunk, sequence=self._sequence, time=time.time()
            )
        )

    async def finished(
        self, outcome: str, exit_code: int | None, error: str | None, size: int
    ) -> None:
        duration = time.monotonic() - self._started
        self.end_span(outcome, exit_code, error)
        await self._send(
            CommandFinished(
                call_id=self.call_id,
                success=outcome == "ok",
                exit_code=exit_code,
                duration=duration,
                error=error,
                output_bytes=max(self._total, size),
                outcome=outcome,
                time=time.time(),
            )
        )

    async def failed(self, error: BaseException, *, cancelled: bool) -> None:
        """Report the end by `error`: finished, or cancelled with the output seen so far."""
        if self._observer_failed or isinstance(error, _ObserverFailed):
            return
        if isinstance(error, CommandError) and not cancelled:
            await self.finished(
                outcome_of(error), error.output.exit_code, error.message, len(error.output)
            )
        elif isinstance(error, Exception) and not cancelled:
            await self.finished("exception", None, repr(error), 0)
        else:
            duration = time.monotonic() - self._started
            self.end_span("cancelled", None, None)
            await self._send(
                CommandCancelled(
                    call_id=self.call_id,
                    duration=duration,
                    partial_output=self._seen.output(exit_code=None, duration=duration),
                    pending=self.description,
                    time=time.time(),
                )
            )

    def end_span(self, outcome: str, exit_code: int | None, error: str | None) -> None:
        """Set the span's attributes and status; a session's own span is ended here too."""
        span, self.span = self.span, None
        if span is None:
            return
        _end_span(span, outcome, exit_code, time.monotonic() - self._started, error)
        if self.owns_span:
            span.end()


class _ObservedSession(WrappedSession):
    def __init__(self, inner: ProcessSession, call: _ObservedCall) -> None:
        super().__init__(inner)
        self._call = call

    async def _chunk(self, chunk: Chunk) -> Sequence[Chunk]:
        try:
            await self._call.chunk(chunk)
        except _ObserverFailed as failed:
            raise failed.error from None
        return (chunk,)

    async def _ended(self, output: CommandOutput) -> CommandOutput:
        try:
            await self._call.finished("ok", output.exit_code, None, len(output))
        except _ObserverFailed as failed:
            raise failed.error from None
        return output

    async def _failed(self, error: BaseException) -> None:
        # An observer failing on the end itself is not raised over the session's
        # own error: `_send` has stopped the events and closed the span.
        with contextlib.suppress(_ObserverFailed):
            await self._call.failed(error, cancelled=self.ending)


def _opentelemetry_trace() -> Any:
    """`opentelemetry.trace`, or `None` when it is not installed."""
    try:
        return importlib.import_module("opentelemetry.trace")
    except ImportError:
        return None


def _end_span(
    span: Any, outcome: str, exit_code: int | None, duration: float, error: str | None
) -> None:
    if span is None:
        return
    span.set_attribute("executor.outcome", outcome)
    span.set_attribute("executor.duration_s", duration)
    if exit_code is not None:
        span.set_attribute("executor.exit_code", exit_code)
    if outcome not in ("ok", "cancelled"):
        trace = _opentelemetry_trace()
        if trace is not None:
            span.set_status(trace.Status(trace.StatusCode.ERROR, error))
