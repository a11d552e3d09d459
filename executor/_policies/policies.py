"""Policies that oversee commands: approval by a callback, secrets kept out, an audit trail.

Each is a wrapper that overrides one thing, so they compose in any order with
each other, with `ScopedExecutor`, `ReadOnly`, and the parsed-command rules.
"""

from __future__ import annotations

import enum
import functools
import inspect
import os
import shlex
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Literal, Protocol, TypeAlias

import anyio
import attrs

from executor._core.base import (
    CheckedExecutor,
    PersistentShell,
    ToolExecutor,
    Watcher,
    WrappedExecutor,
    call_sink,
)
from executor._core.cleanup import run_to_completion
from executor._core.commands import Command, Exec, ReadFile, Shell, StrPath, WriteFile
from executor._core.errors import CommandError, PolicyDenied, outcome_of
from executor._core.output import Chunk, CommandOutput, Sink, Stderr, Stdout
from executor._core.session import ProcessSession, WrappedSession
from executor._policies.verdict import Verdict


def describe(cmd: Command) -> str:
    """A one-line rendering of a command, for people and models (approval, audit, errors)."""
    match cmd:
        case Shell():
            text = cmd.script
        case Exec():
            text = shlex.join(cmd.argv)
        case ReadFile():
            text = f"read_file {cmd.path}"
        case WriteFile():
            text = f"write_file {cmd.path} ({len(cmd.content)} bytes)"
        case _:
            text = repr(cmd)
    if cmd.current_dir is not None:
        text = f"{text}  (in {cmd.current_dir})"
    return text


# --- approval -------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class ApprovalRequest:
    """What an approver is asked about.

    Attributes:
        command: The command as it would run.
        description: `describe(command)`, ready to show a person.
    """

    command: Command
    description: str


class Approver(Protocol):
    """Decides whether a command may run: True/False, or a `Verdict` with a reason."""

    def __call__(self, request: ApprovalRequest, /) -> Awaitable[bool | Verdict]:
        """Answer the request."""
        ...


class Approval(CheckedExecutor):
    """Asks an async approver before each command runs.

    Args:
        inner: The executor that runs approved commands.
        approver: An async callable given an `ApprovalRequest`; it returns
            True, False or a `Verdict`.
        timeout: Seconds to wait for an answer; `None` waits as long as it takes.
        on_timeout: `"deny"` (the default) or `"approve"` when no answer came in time.
        ask: Which commands need approval; others pass. By default every
            command but `read_file`.

    Raises:
        PolicyDenied: The approver said no (with its reason), or did not answer
            in time and `on_timeout` is `"deny"`.
    """

    def __init__(
        self,
        inner: ToolExecutor,
        approver: Approver,
        *,
        timeout: float | None = None,
        on_timeout: Literal["deny", "approve"] = "deny",
        ask: Callable[[Command], bool] | None = None,
    ) -> None:
        super().__init__(inner)
        if on_timeout not in ("deny", "approve"):
            raise ValueError(f"on_timeout must be 'deny' or 'approve', got {on_timeout!r}")
        if timeout is not None and not timeout > 0:
            raise ValueError(f"timeout must be positive or None, got {timeout!r}")
        self.approver = approver
        self.timeout = timeout
        self.on_timeout = on_timeout
        self.ask = ask if ask is not None else (lambda cmd: not isinstance(cmd, ReadFile))

    async def check(self, cmd: Command) -> Command:
        """Return `cmd` once approved; raise `PolicyDenied` otherwise."""
        if not self.ask(cmd):
            return cmd
        request = ApprovalRequest(command=cmd, description=describe(cmd))
        answer: bool | Verdict | None = None
        with anyio.move_on_after(
            self.timeout if self.timeout is not None else float("inf")
        ) as waited:
            answer = await self.approver(request)
        if answer is None and not waited.cancelled_caught:
            raise PolicyDenied(f"the approver gave no answer: {request.description}")
        if answer is None:
            assert self.timeout is not None
            if self.on_timeout == "approve":
                return cmd
            raise PolicyDenied(
                f"no approval came within {self.timeout:g} s, so the command did not run: "
                f"{request.description}"
            )
        verdict = answer if isinstance(answer, Verdict) else Verdict(bool(answer))
        if verdict.approved:
            return cmd
        reason = f": {verdict.reason}" if verdict.reason else ""
        raise PolicyDenied(f"the command was not approved{reason}: {request.description}")


# --- secrets --------------------------------------------------------------------------

DEFAULT_SECRET_PATTERNS: tuple[str, ...] = ("*KEY*", "*TOKEN*", "*SECRET*", "*PASSWORD*")
"""Names of variables that look like credentials (matched without regard to case)."""

_REDACTED = b"[REDACTED]"
# Shorter values are too likely to occur by chance ("1", "true") to be redacted.
_MIN_SECRET = 6


class Secrets(CheckedExecutor):
    """Keeps credentials away from commands and out of their output.

    Every command runs without the variables whose names match `patterns`
    (`*KEY*`, `*TOKEN*`, `*SECRET*`, `*PASSWORD*` by default, any case),
    except those in `keep`; a variable the command sets itself is its own.
    Output, in the returned value, in errors and in what sinks see, has each
    value in `redact` replaced by `[REDACTED]`, also when a value is split
    across two reads.

    Args:
        inner: The executor to run commands on.
        keep: Names the patterns leave alone.
        patterns: Names or `*` patterns of variables to drop.
        redact: Secret values to remove from output.
        redact_environment: Also redact the values of this process's own
            variables that match `patterns` (values of 6 characters or more).
    """

    def __init__(
        self,
        inner: ToolExecutor,
        *,
        keep: Iterable[str] = (),
        patterns: Iterable[str] = DEFAULT_SECRET_PATTERNS,
        redact: Iterable[str | bytes] = (),
        redact_environment: bool = True,
    ) -> None:
        super().__init__(inner)
        self.keep = tuple(keep)
        self.patterns = tuple(patterns)
        values = {v.encode() if isinstance(v, str) else bytes(v) for v in redact}
        if redact_environment:
            probe = Command.shell("").with_env_removed(*self.patterns, keep=self.keep)
            kept = probe.environment_over(os.environ)
            values |= {v.encode() for k, v in os.environ.items() if k not in kept}
        self._secrets = tuple(
            sorted((v for v in values if len(v) >= _MIN_SECRET), key=len, reverse=True)
        )

    def __repr__(self) -> str:
        return f"Secrets({self.inner!r})"

    async def check(self, cmd: Command) -> Command:
        """Return `cmd` with the credential variables removed."""
        return cmd.with_env_removed(*self.patterns, keep=self.keep)

    def shell(
        self,
        *,
        login: bool | None = None,
        cwd: StrPath | None = None,
        env: Mapping[str, str] | None = None,
    ) -> PersistentShell:
        """A shell started without credentials, each run's output and each job's redacted."""
        shell = super().shell(login=login, cwd=cwd, env=env)
        shell.change_start(lambda start: start.with_env_removed(*self.patterns, keep=self.keep))
        return shell

    async def start(self, cmd: Command, *, pty: bool = False) -> ProcessSession:
        """Start a session without credentials, its chunks and final output redacted.

        A chunk that ends with what could be the start of a secret is held
        back until the next chunk of its stream (or the end) tells.
        """
        session = await super().start(cmd, pty=pty)
        if not self._secrets:
            return session
        return _RedactingSession(session, self)

    async def exec_cmd(self, cmd: Command) -> CommandOutput:
        """Run `cmd` without credentials, its output redacted."""
        return await self.exec_cmd_streaming(cmd, Watcher(_discard, caller=None))

    async def exec_cmd_streaming(self, cmd: Command, sink: Sink) -> CommandOutput:
        """Run `cmd` without credentials, redacting what reaches `sink` and what comes back."""
        checked = await self.check(cmd)
        if not self._secrets:
            return await self.inner.exec_cmd_streaming(checked, sink)
        redactor = _StreamRedactor(self._secrets)

        async def redacting(chunk: Chunk) -> None:
            for clean in redactor.feed(chunk):
                await call_sink(sink, clean)

        try:
            output = await self.inner.exec_cmd_streaming(checked, Watcher(redacting, caller=sink))
        except CommandError as error:
            for clean in redactor.flush():
                await call_sink(sink, clean)
            error.output = self._redact_output(error.output)
            raise
        for clean in redactor.flush():
            await call_sink(sink, clean)
        return self._redact_output(output)

    def _redact_output(self, output: CommandOutput) -> CommandOutput:
        redactor = _StreamRedactor(self._secrets)
        chunks = [clean for chunk in output.chunks for clean in redactor.feed(chunk)]
        chunks.extend(redactor.flush())
        return attrs.evolve(output, chunks=tuple(chunks))


def _discard(chunk: Chunk) -> None:
    pass


class _RedactingSession(WrappedSession):
    def __init__(self, inner: ProcessSession, policy: Secrets) -> None:
        super().__init__(inner)
        self._policy = policy
        self._redactor = _StreamRedactor(policy._secrets)

    async def _chunk(self, chunk: Chunk) -> Sequence[Chunk]:
        return self._redactor.feed(chunk)

    async def _flush(self) -> Sequence[Chunk]:
        return self._redactor.flush()

    async def _ended(self, output: CommandOutput) -> CommandOutput:
        return self._policy._redact_output(output)

    async def _failed(self, error: BaseException) -> None:
        if isinstance(error, CommandError):
            error.output = self._policy._redact_output(error.output)


class _StreamRedactor:
    """Redacts secrets from two streams of chunks, holding back a possible partial match."""

    def __init__(self, secrets: tuple[bytes, ...]) -> None:
        self._secrets = secrets
        self._held: dict[type[Chunk], bytes] = {Stdout: b"", Stderr: b""}

    def _redact(self, data: bytes) -> bytes:
        for secret in self._secrets:
            data = data.replace(secret, _REDACTED)
        return data

    def _partial(self, data: bytes) -> int:
        # The longest end of `data` that could begin a secret.
        longest = 0
        for secret in self._secrets:
            for size in range(min(len(secret) - 1, len(data)), longest, -1):
                if data.endswith(secret[:size]):
                    longest = size
                    break
        return longest

    def feed(self, chunk: Chunk) -> list[Chunk]:
        kind = type(chunk)
        data = self._redact(self._held[kind] + chunk.data)
        keep = self._partial(data)
        self._held[kind] = data[len(data) - keep :] if keep else b""
        ready = data[: len(data) - keep]
        return [kind(ready)] if ready else []

    def flush(self) -> list[Chunk]:
        out: list[Chunk] = []
        for kind, held in self._held.items():
            if held:
                out.append(kind(self._redact(held)))
        self._held = {Stdout: b"", Stderr: b""}
        return out


# --- audit ----------------------------------------------------------------------------


class AuditEvent(enum.Enum):
    """What an audit record reports."""

    START = "start"
    END = "end"
    DENIED = "denied"


@attrs.frozen(kw_only=True)
class AuditRecord:
    """One structured audit record.

    Attributes:
        event: START before the command is handed on; END when it finished,
            however it ended; DENIED when a policy below refused it.
        command: The command as this wrapper received it.
        description: `describe(command)`.
        time: Wall-clock time of the event (seconds since the epoch).
        exit_code: For END: the exit code (`None` for file commands or errors
            without one).
        duration: For END and DENIED: seconds since START.
        outcome: For END and DENIED: "ok", "nonzero", "timeout", "denied",
            "error" (another CommandError) or "cancelled" (any other exception).
        message: The error's message, for failures.
    """

    event: AuditEvent
    command: Command
    description: str
    time: float
    exit_code: int | None = None
    duration: float | None = None
    outcome: str | None = None
    message: str | None = None

    def as_dict(self) -> dict[str, object]:
        """The record as plain JSON-ready values."""
        return {
            "event": self.event.value,
            "command": self.description,
            "kind": type(self.command).__name__,
            "time": self.time,
            "exit_code": self.exit_code,
            "duration": self.duration,
            "outcome": self.outcome,
            "message": self.message,
        }


Recorder: TypeAlias = Callable[[AuditRecord], Awaitable[None] | None]


class Audit(WrappedExecutor):
    """Reports every command's start and end, and every refusal below it, to `recorder`.

    Place it outermost to see the decisions of every policy inside it. The
    recorder is a plain or async callable; an exception it raises propagates
    (an audit that cannot record must not be ignored).
    """

    def __init__(self, inner: ToolExecutor, recorder: Recorder) -> None:
        super().__init__(inner)
        self.recorder = recorder

    def __repr__(self) -> str:
        return f"Audit({self.inner!r})"

    async def _record(self, record: AuditRecord) -> None:
        result = self.recorder(record)
        if inspect.isawaitable(result):
            await result

    async def exec_cmd(self, cmd: Command) -> CommandOutput:
        """Run `cmd`, recording its start and end."""
        return await self._audited(cmd, None)

    async def exec_cmd_streaming(self, cmd: Command, sink: Sink) -> CommandOutput:
        """Run `cmd` with streaming, recording its start and end."""
        return await self._audited(cmd, sink)

    async def start(self, cmd: Command, *, pty: bool = False) -> ProcessSession:
        """Start a session, recording its start now and its end when it ends.

        The end is recorded when the command ends, or when the session is
        cancelled or left (outcome "cancelled" when it had not ended).
        """
        call = _AuditedCall(self, cmd)
        await call.start()
        try:
            session = await self.inner.start(cmd, pty=pty)
        except BaseException as error:
            await run_to_completion(functools.partial(call.failed, error))
            raise
        return _AuditedSession(session, call)

    async def _audited(self, cmd: Command, sink: Sink | None) -> CommandOutput:
        call = _AuditedCall(self, cmd)
        await call.start()
        try:
            if sink is None:
                output = await self.inner.exec_cmd(cmd)
            else:
                output = await self.inner.exec_cmd_streaming(cmd, sink)
        except BaseException as error:
            await run_to_completion(functools.partial(call.failed, error))
            raise
        await call.ended(output)
        return output


class _AuditedCall:
    """One command's records: its START, then one END or DENIED."""

    def __init__(self, audit: Audit, cmd: Command) -> None:
        self._audit = audit
        self._cmd = cmd
        self._description = describe(cmd)
        self._started = time.monotonic()

    async def start(self) -> None:
        self._started = time.monotonic()
        await self._audit._record(
            AuditRecord(
                event=AuditEvent.START,
                command=self._cmd,
                description=self._description,
                time=time.time(),
            )
        )

    async def ended(self, output: CommandOutput) -> None:
        await self._end(AuditEvent.END, "ok", exit_code=output.exit_code)

    async def failed(self, error: BaseException, *, cancelled: bool = False) -> None:
        if isinstance(error, PolicyDenied):
            await self._end(AuditEvent.DENIED, "denied", message=error.message)
        elif isinstance(error, CommandError) and not cancelled:
            await self._end(
                AuditEvent.END,
                outcome_of(error),
                exit_code=error.output.exit_code,
                message=error.message,
            )
        else:
            await self._end(AuditEvent.END, "cancelled", message=repr(error))

    async def _end(self, event: AuditEvent, outcome: str, **fields: object) -> None:
        await self._audit._record(
            AuditRecord(
                event=event,
                command=self._cmd,
                description=self._description,
                time=time.time(),
                duration=time.monotonic() - self._started,
                outcome=outcome,
                **fields,  # type: ignore[arg-type]
            )
        )


class _AuditedSession(WrappedSession):
    def __init__(self, inner: ProcessSession, call: _AuditedCall) -> None:
        super().__init__(inner)
        self._call = call

    async def _ended(self, output: CommandOutput) -> CommandOutput:
        await self._call.ended(output)
        return output

    async def _failed(self, error: BaseException) -> None:
        await self._call.failed(error, cancelled=self.ending)
