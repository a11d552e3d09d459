"""Execution events for observers: every command's start, chunks, end or cancellation.

`Observed` reports the tool-execution part of an agent's stream (a call
starts, its output arrives piece by piece, it finishes or is cancelled with
what was pending) to a plain or async callable, so a UI or a tracer sees every
command. When `opentelemetry-api` is importable, each command also gets a span.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeAlias

import anyio
import attrs

from executor._base import Sink, ToolExecutor, call_sink
from executor._commands import Command
from executor._errors import CommandError, outcome_of
from executor._output import Chunk, CommandOutput, OutputBuffer
from executor._policies import describe
from executor._wrappers import WrappedExecutor

if TYPE_CHECKING:
    from executor._session import ProcessSession

__all__ = [
    "CommandCancelled",
    "CommandChunk",
    "CommandEvent",
    "CommandFinished",
    "CommandStarted",
    "Observed",
    "Observer",
]

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

    `start()` reports `CommandStarted` for the session and forwards; a
    session's chunks and end are not observed yet.

    If `opentelemetry` is importable and `tracing` is true, each command runs
    in a span `executor.command` with attributes `executor.command`,
    `executor.exit_code`, `executor.duration_s` and `executor.outcome`; a
    failure sets an error status.
    """

    def __init__(self, inner: ToolExecutor, observer: Observer, *, tracing: bool = True) -> None:
        super().__init__(inner)
        self.observer = observer
        self.tracing = tracing

    def __repr__(self) -> str:
        return f"Observed({self.inner!r})"

    async def _emit(self, event: CommandEvent) -> None:
        try:
            result = self.observer(event)
            if inspect.isawaitable(result):
                await result
        except BaseException as error:
            if isinstance(error, anyio.get_cancelled_exc_class()):
                raise
            raise _ObserverFailed(error) from error

    async def exec_cmd(self, cmd: Command) -> CommandOutput:
        """Run `cmd` through the inner executor's streaming, reporting its events."""
        return await self._observed(cmd, None)

    async def exec_cmd_streaming(self, cmd: Command, sink: Sink) -> CommandOutput:
        """Run `cmd` with streaming, reporting its events; `sink` gets every chunk."""
        return await self._observed(cmd, sink)

    async def start(self, cmd: Command, *, pty: bool = False) -> ProcessSession:
        """Report `CommandStarted` for a session, then start it on the inner executor."""
        description = describe(cmd)
        try:
            await self._emit(
                CommandStarted(
                    call_id=uuid.uuid4().hex, command=cmd, description=description, time=time.time()
                )
            )
        except _ObserverFailed as failed:
            raise failed.error from None
        return await self.inner.start(cmd, pty=pty)

    async def _observed(self, cmd: Command, sink: Sink | None) -> CommandOutput:
        try:
            return await self._run(cmd, sink)
        except _ObserverFailed as failed:
            raise failed.error from None

    async def _run(self, cmd: Command, sink: Sink | None) -> CommandOutput:
        call_id = uuid.uuid4().hex
        description = describe(cmd)
        seen = OutputBuffer(_PARTIAL_LIMIT)
        sequence = 0
        total = 0

        async def observing(chunk: Chunk) -> None:
            nonlocal sequence, total
            if chunk.data:
                sequence += 1
                total += len(chunk.data)
                seen.append(chunk)
                await self._emit(
                    CommandChunk(call_id=call_id, chunk=chunk, sequence=sequence, time=time.time())
                )
            if sink is not None:
                await call_sink(sink, chunk)

        with self._span(description) as span:
            await self._emit(
                CommandStarted(
                    call_id=call_id, command=cmd, description=description, time=time.time()
                )
            )
            started = time.monotonic()

            def finished(
                outcome: str, exit_code: int | None, error: str | None, size: int
            ) -> CommandFinished:
                duration = time.monotonic() - started
                _end_span(span, outcome, exit_code, duration, error)
                return CommandFinished(
                    call_id=call_id,
                    success=outcome == "ok",
                    exit_code=exit_code,
                    duration=duration,
                    error=error,
                    output_bytes=max(total, size),
                    outcome=outcome,
                    time=time.time(),
                )

            try:
                output = await self.inner.exec_cmd_streaming(cmd, observing)
            except _ObserverFailed:
                _end_span(span, "error", None, time.monotonic() - started, "observer failed")
                raise
            except CommandError as error:
                outcome = outcome_of(error)
                with anyio.CancelScope(shield=True):
                    await self._emit(
                        finished(outcome, error.output.exit_code, error.message, len(error.output))
                    )
                raise
            except Exception as error:
                with anyio.CancelScope(shield=True):
                    await self._emit(finished("exception", None, repr(error), 0))
                raise
            except BaseException:
                duration = time.monotonic() - started
                _end_span(span, "cancelled", None, duration, None)
                with anyio.CancelScope(shield=True):
                    await self._emit(
                        CommandCancelled(
                            call_id=call_id,
                            duration=duration,
                            partial_output=seen.output(exit_code=None, duration=duration),
                            pending=description,
                            time=time.time(),
                        )
                    )
                raise
            await self._emit(finished("ok", output.exit_code, None, len(output)))
            return output

    @contextlib.contextmanager
    def _span(self, description: str) -> Iterator[Any]:
        trace = _opentelemetry_trace() if self.tracing else None
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
