"""`Idempotent`: run a command under an idempotency key at most once, and answer repeats.

```python
idem = Idempotent(LocalExecutor(repo), SqliteJournal("runs.sqlite3"))
push = idem.keyed(key)  # a ToolExecutor bound to one key
output = await push.exec_cmd(Command.shell("git push"))
```

Why a keyed view: `exec_cmd(cmd)` is the contract every wrapper and tool
relies on, so the key cannot be an extra argument; and a key is not a
property of the command (the same command under two keys is two runs).
`idem.keyed(key)` is an executor like any other, so a tool that takes an
executor runs idempotently without knowing it, and the agent, which owns
the key, decides where one run ends and the next begins.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
import types
import typing
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import anyio
import anyio.lowlevel
import attrs

from executor._core.base import LoadedFile, Sink, ToolExecutor, report
from executor._core.commands import Command, StrPath
from executor._core.errors import (
    CommandError,
    ExecutorError,
    InvalidArgument,
    PolicyDenied,
    ToolCancelled,
    ToolStreamError,
)
from executor._core.output import CommandOutput
from executor._core.wrappers import WrappedExecutor
from executor._journal.journal import (
    Claim,
    IdempotencyKey,
    Journal,
    JournalError,
    OnInterrupted,
    Outcome,
    acquire,
    settle,
)
from executor._policies.policies import describe
from executor._tools.tools import convert

if TYPE_CHECKING:
    from executor._core.session import ProcessSession

__all__ = ["Idempotent", "KeyedExecutor", "ToolRecorder", "fingerprint"]


# --- what a run is ---------------------------------------------------------------------


def _canonical(value: Any) -> Any:
    if isinstance(value, bytes):
        return {"bytes": value.hex()}
    if isinstance(value, Mapping):
        return sorted((str(k), _canonical(v)) for k, v in value.items())
    if isinstance(value, list | tuple):
        return [_canonical(item) for item in value]
    return value


def fingerprint(cmd: Command) -> str:
    """A digest of everything about `cmd` that decides what runs (its type and every field)."""
    fields = {field.name: _canonical(getattr(cmd, field.name)) for field in attrs.fields(type(cmd))}
    text = json.dumps([type(cmd).__qualname__, fields], sort_keys=True, default=repr)
    return hashlib.sha256(text.encode()).hexdigest()


# --- the wrapper ------------------------------------------------------------------------


class Idempotent(WrappedExecutor):
    """Runs commands under idempotency keys: each key at most once, repeats answered from a journal.

    `idem.keyed(key)` gives an executor bound to one key. Its first command
    is recorded as started before it runs, and its outcome (the output, exit
    code and chunks exactly, or the error: `NonZeroExit`, `TimedOut`,
    `ExecutorError`) is recorded when it ends. Any later start under the key,
    in this process or another one after a crash, returns that output or
    raises that error again without running anything. While another live
    process or task runs the key, a start waits for its outcome (as long as
    that takes: put the call under `anyio.fail_after` to bound the wait).

    A run that started but has no outcome (its process was killed, or it was
    cancelled) is interrupted: `on_interrupted="fail"` raises
    `RunInterrupted`, `"rerun"` runs it again. A command a policy inside
    refuses (`PolicyDenied`) never ran, so it leaves no trace. A key names
    one run: the same key with a different command raises `JournalError`.

    Commands without a key are refused: a key cannot be made up here, since
    only the caller knows which call a retry repeats. `stream_files`
    passes through; sessions are refused (an interactive run cannot be
    answered from a record).

    Args:
        inner: The executor that runs the commands.
        journal: Where runs are recorded (`SqliteJournal`).
        on_interrupted: `"fail"` (the default) or `"rerun"`.
    """

    def __init__(
        self, inner: ToolExecutor, journal: Journal, *, on_interrupted: OnInterrupted = "fail"
    ) -> None:
        super().__init__(inner)
        if on_interrupted not in ("fail", "rerun"):
            raise ValueError(f"on_interrupted must be 'fail' or 'rerun', got {on_interrupted!r}")
        if not isinstance(journal, Journal):
            raise TypeError(f"journal must be a Journal (SqliteJournal), got {journal!r}")
        self.journal = journal
        self.on_interrupted: OnInterrupted = on_interrupted

    def __repr__(self) -> str:
        return f"Idempotent({self.inner!r}, {self.journal!r})"

    def keyed(
        self, key: IdempotencyKey | str, *, on_interrupted: OnInterrupted | None = None
    ) -> KeyedExecutor:
        """An executor that runs commands under `key` (an `IdempotencyKey` or its text).

        Raises:
            InvalidArgument: `key` is not a UUID v7.
        """
        return KeyedExecutor(
            self,
            IdempotencyKey.parse(key),
            on_interrupted=on_interrupted if on_interrupted is not None else self.on_interrupted,
        )

    def _refuse(self) -> ExecutorError:
        return ExecutorError(
            "Idempotent runs commands only under a key: use idem.keyed(key).exec_cmd(cmd)"
        )

    async def exec_cmd(self, cmd: Command) -> CommandOutput:
        """Refused: run commands through `keyed(key)`."""
        raise self._refuse()

    async def exec_cmd_streaming(self, cmd: Command, sink: Sink) -> CommandOutput:
        """Refused: run commands through `keyed(key)`."""
        raise self._refuse()

    async def start(self, cmd: Command, *, pty: bool = False) -> ProcessSession:
        """Refused: a session cannot be answered from a record."""
        raise ExecutorError("an idempotent executor does not start sessions")


class KeyedExecutor(WrappedExecutor):
    """An `Idempotent` executor bound to one key; made by `Idempotent.keyed(key)`.

    `exec_cmd` and `exec_cmd_streaming` run the command once under the key
    and answer every repeat from the journal (a sink is then handed the
    recorded chunks). `replayed` says how the last call was answered.
    Closing it leaves the executor it came from open.

    Attributes:
        key: The key.
        replayed: `True` when the last call was answered from the journal,
            `False` when it ran the command, `None` before any call.
    """

    def __init__(
        self, idempotent: Idempotent, key: IdempotencyKey, *, on_interrupted: OnInterrupted
    ) -> None:
        super().__init__(idempotent)
        self.idempotent = idempotent
        self.key = key
        self.on_interrupted: OnInterrupted = on_interrupted
        self.replayed: bool | None = None

    def __repr__(self) -> str:
        return f"KeyedExecutor({self.idempotent!r}, {str(self.key)!r})"

    async def exec_cmd(self, cmd: Command) -> CommandOutput:
        """Run `cmd` under the key once; answer a repeat from the journal.

        Raises:
            NonZeroExit: The command failed (now, or when it first ran).
            TimedOut: It timed out (now, or when it first ran).
            RunInterrupted: An earlier run under the key was interrupted and
                `on_interrupted` is `"fail"`.
            JournalError: The key names a different command, or the journal failed.
        """
        return await self.exec_cmd_streaming(cmd, None)

    async def exec_cmd_streaming(self, cmd: Command, sink: Sink | None) -> CommandOutput:
        """As `exec_cmd`, handing each chunk to `sink` (the recorded ones on a repeat)."""
        journal = self.idempotent.journal
        claim = await acquire(
            journal,
            self.key,
            kind="command",
            name=describe(cmd),
            fingerprint=fingerprint(cmd),
            on_interrupted=self.on_interrupted,
        )
        if claim.status == "final":
            self.replayed = True
            outcome = claim.entry.outcome
            assert outcome is not None
            if outcome.output is not None:
                await report(sink, outcome.output)
            return outcome.replay()
        self.replayed = False
        return await self._run(journal, claim, cmd, sink)

    async def _run(
        self, journal: Journal, claim: Claim, cmd: Command, sink: Sink | None
    ) -> CommandOutput:
        inner = self.idempotent.inner
        try:
            if sink is None:
                output = await inner.exec_cmd(cmd)
            else:
                output = await inner.exec_cmd_streaming(cmd, sink)
        except PolicyDenied:
            # Refused before it started: nothing ran, so nothing is remembered.
            await settle(journal, claim, None, ran=False)
            raise
        except CommandError as error:
            await settle(journal, claim, Outcome.of_error(error), ran=True)
            raise
        except BaseException:
            # Cancelled, or a sink failed mid-run: it may have done part of its work.
            await settle(journal, claim, None, ran=True)
            raise
        await settle(journal, claim, Outcome.of_output(output), ran=True)
        return output

    async def start(self, cmd: Command, *, pty: bool = False) -> ProcessSession:
        """Refused: a session cannot be answered from a record."""
        raise ExecutorError("an idempotent executor does not start sessions")

    def stream_files(
        self, path: StrPath, extensions: Iterable[str] | None = None
    ) -> AsyncIterator[LoadedFile]:
        """List files through the executor (a listing is not journaled)."""
        return self.idempotent.stream_files(path, extensions)

    async def aclose(self) -> None:
        """Nothing to close: the executor it came from stays open."""


# --- streaming tools --------------------------------------------------------------------


def _plain(value: Any) -> Any:
    """A final value as JSON-ready data."""
    dump = getattr(value, "model_dump", None)
    if callable(dump) and not isinstance(value, type):
        return dump(mode="json")
    if attrs.has(type(value)):
        return attrs.asdict(value, value_serializer=lambda _i, _a, v: _plain(v))
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, set | frozenset):
        # In a set order is hash order, which differs between processes (str
        # hashes are salted): sorted, one input has one fingerprint everywhere.
        items = [_plain(item) for item in value]
        return sorted(items, key=lambda item: json.dumps(item, sort_keys=True, default=repr))
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    return value


def encode_value(value: Any) -> str:
    """A final value as JSON text.

    Raises:
        JournalError: The value cannot be written as JSON.
    """
    try:
        return json.dumps(_plain(value), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as error:
        raise JournalError(
            f"the final value {type(value).__name__} cannot be stored as JSON: {error}"
        ) from error


def decode_value(text: str, annotation: Any) -> Any:
    """The final value `encode_value` wrote, as `annotation`.

    Raises:
        JournalError: The stored value does not fit `annotation`.
    """
    data = json.loads(text)
    try:
        return _structure(data, annotation)
    except (InvalidArgument, TypeError, ValueError, NameError) as error:
        raise JournalError(f"the stored final does not fit {annotation!r}: {error}") from error


_SEQUENCES = (list, tuple, set, frozenset, Sequence)


def _structure(data: Any, annotation: Any) -> Any:
    """`data` as `annotation`, building attrs classes and dataclasses at any depth.

    `convert` does the rest (scalars, enums, pydantic models); containers and
    unions are walked here so that a structured class inside one is built too.
    """
    if isinstance(annotation, type) and (
        attrs.has(annotation) or dataclasses.is_dataclass(annotation)
    ):
        if not isinstance(data, dict):
            raise InvalidArgument(data, f"expected an object for {annotation.__name__}")
        hints = typing.get_type_hints(annotation)
        return annotation(**{k: _structure(v, hints.get(k, Any)) for k, v in data.items()})
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        rules = []
        for option in args:
            try:
                return _structure(data, option)
            except (InvalidArgument, TypeError, ValueError) as error:
                rules.append(str(error))
        raise InvalidArgument(data, " or ".join(rules))
    if args and origin in _SEQUENCES and isinstance(data, list):
        if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):
            return tuple(_structure(item, arg) for item, arg in zip(data, args, strict=True))
        items = [_structure(item, args[0]) for item in data]
        return items if origin in (list, Sequence) else origin(items)
    if args and origin in (dict, Mapping) and isinstance(data, dict):
        return {key: _structure(value, args[1]) for key, value in data.items()}
    return convert(data, annotation)


def tool_fingerprint(name: str, input: Any) -> str:
    """A digest of a tool's name and input."""
    text = json.dumps([name, _plain(input)], sort_keys=True, default=repr)
    return hashlib.sha256(text.encode()).hexdigest()


@attrs.define(eq=False)
class ToolRecorder:
    """Journals one run of an idempotent streaming tool for `StreamingToolSession`.

    `begin()` claims the key before the tool starts and returns the stored
    final, if the key has one; `finished` and `failed` record the outcome;
    `abandon` marks the run interrupted when it ended without one.
    """

    journal: Journal
    key: IdempotencyKey
    name: str
    input: Any
    final_type: Any
    on_interrupted: OnInterrupted
    claim: Claim | None = None
    settled: bool = False

    async def begin(self) -> Outcome | None:
        """Claim the key; return its final outcome if it has one (the tool must not run)."""
        claim = await acquire(
            self.journal,
            self.key,
            kind="tool",
            name=self.name,
            fingerprint=tool_fingerprint(self.name, self.input),
            on_interrupted=self.on_interrupted,
        )
        if claim.status == "final":
            self.settled = True
            return claim.entry.outcome
        self.claim = claim
        return None

    def replay(self, outcome: Outcome) -> Any:
        """The final value `outcome` holds, or raise its error."""
        if not outcome.ok:
            raise outcome.error()
        if outcome.value is None:
            raise JournalError(f"the run under key {self.key} has no stored final value")
        return decode_value(outcome.value, self.final_type)

    async def _settle(self, outcome: Outcome | None, *, ran: bool) -> None:
        if self.claim is None or self.settled:
            return
        self.settled = True
        await settle(self.journal, self.claim, outcome, ran=ran)

    async def finished(self, final: Any) -> None:
        """Record the tool's final value."""
        try:
            value = encode_value(final)
        except JournalError:
            await self._settle(None, ran=True)
            raise
        await self._settle(Outcome(value=value), ran=True)

    async def failed(self, error: BaseException) -> None:
        """Record the tool's error; a cancellation leaves the run interrupted."""
        if isinstance(error, CommandError) and not isinstance(error, ToolCancelled):
            await self._settle(Outcome.of_error(error), ran=True)
        else:
            await self._settle(None, ran=True)

    async def abandon(self, *, ran: bool = True) -> None:
        """Mark the run interrupted (or forget it, if it never started)."""
        await self._settle(None, ran=ran)


class ReplayHandle:
    """A handle for a tool answered from the journal: no chunks, the stored final."""

    def __init__(self, recorder: ToolRecorder, outcome: Outcome) -> None:
        self._recorder = recorder
        self._outcome = outcome

    async def __aenter__(self) -> ReplayHandle:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        return None

    async def next_chunk(self) -> None:
        """Nothing: the stream was not run again."""
        await anyio.lowlevel.checkpoint()

    async def send_stdin(self, event: object, /) -> None:
        """Refused: the tool is not running."""
        raise ToolStreamError(
            f"the run under key {self._recorder.key} was answered from the journal; "
            "the tool is not running"
        )

    async def close_stdin(self) -> None:
        """Nothing to close."""

    def cancel(self) -> None:
        """Nothing to cancel."""

    async def finalize(self) -> Any:
        """The stored final value, or its stored error."""
        await anyio.lowlevel.checkpoint()
        return self._recorder.replay(self._outcome)
