"""Replay for idempotent streaming tools: a run's final value journaled, and answered again.

`StreamingToolSession` claims a key with `ToolRecorder` before the tool
starts; a key that already has a final is answered by a `ReplayHandle`
instead of running the tool again. Values go to the journal as JSON and
come back as the tool's declared final type (`convert` does the scalars).
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import enum
import hashlib
import json
import types
import typing
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import anyio
import anyio.lowlevel
import attrs

from executor._core.errors import (
    CommandError,
    InvalidArgument,
    JournalError,
    ToolCancelled,
    ToolStreamError,
)
from executor._core.resource import AsyncResource
from executor._journal.codec import Outcome
from executor._journal.keys import IdempotencyKey
from executor._journal.protocol import Claim, Journal, OnInterrupted, acquire, settle
from executor._tools.tools import convert

if TYPE_CHECKING:
    pass


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


_current_run: contextvars.ContextVar[ToolRecorder | None] = contextvars.ContextVar(
    "executor_tool_run", default=None
)


def current_tool_run() -> ToolRecorder | None:
    """The journaled run a tool's `start()` is called for (its journal and key), or `None`.

    A resumable tool keeps its own progress under the run's key, beside the
    journal (the log tailer keeps its per-file offsets so).
    """
    return _current_run.get()


@contextlib.contextmanager
def bind_tool_run(recorder: ToolRecorder | None) -> Iterator[None]:
    """Make `recorder` the `current_tool_run()` for the block (a session's call to `start()`)."""
    token = _current_run.set(recorder)
    try:
        yield
    finally:
        _current_run.reset(token)


class ReplayHandle(AsyncResource):
    """A handle for a tool answered from the journal: no chunks, the stored final."""

    def __init__(self, recorder: ToolRecorder, outcome: Outcome) -> None:
        self._recorder = recorder
        self._outcome = outcome

    async def aclose(self) -> None:
        """Nothing to release: the tool did not run."""

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
