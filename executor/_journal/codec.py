"""Outcomes: how a run ended, in the form a journal stores, and back to the output or error.

`Outcome.of_output` and `Outcome.of_error` take a run's end apart into plain
fields; `Outcome.replay` makes it again: the same output, or an error of the
same type raised anew. `encode_chunks` and `decode_chunks` turn an output's
chunks into one byte string and back, so a store can keep them in one field.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Sequence

import attrs

from executor._core.errors import (
    CommandError,
    ExecutorError,
    JournalError,
    NonZeroExit,
    OutOfMemory,
    PolicyDenied,
    TimedOut,
    ToolCancelled,
    ToolStreamError,
)
from executor._core.output import Chunk, CommandOutput, Elision, Stderr, Stdout

# Each kind names the error a repeat raises again; a subclass the journal does
# not know is stored as the nearest of these, most specific first.
_ERROR_KINDS: tuple[tuple[str, type[CommandError]], ...] = (
    ("TimedOut", TimedOut),
    ("OutOfMemory", OutOfMemory),
    ("NonZeroExit", NonZeroExit),
    ("JournalError", JournalError),
    ("PolicyDenied", PolicyDenied),
    ("ExecutorError", ExecutorError),
    ("ToolCancelled", ToolCancelled),
    ("ToolStreamError", ToolStreamError),
    ("CommandError", CommandError),
)
_REPLAYED: dict[str, type[CommandError]] = dict(_ERROR_KINDS)

_STDOUT, _STDERR = 1, 2
_CHUNK_HEAD = struct.Struct(">BI")


def encode_chunks(chunks: Sequence[Chunk]) -> bytes:
    """Chunks as bytes: for each, a stream byte and a 4-byte length, then the data."""
    parts: list[bytes] = []
    for chunk in chunks:
        parts.append(
            _CHUNK_HEAD.pack(_STDOUT if isinstance(chunk, Stdout) else _STDERR, len(chunk))
        )
        parts.append(chunk.data)
    return b"".join(parts)


def encode_elision(elided: Elision | None) -> str | None:
    """Where an output was cut, as the JSON text a journal stores (`None` for an uncut one)."""
    if elided is None:
        return None
    fields: dict[str, object] = {
        "at": elided.at,
        "bytes": elided.bytes,
        "lines": elided.lines,
        "spill": elided.spill,
    }
    if elided.spill_error is not None:
        fields["spill_error"] = elided.spill_error
    return json.dumps(fields)


def decode_elision(text: str | None) -> Elision | None:
    """The `Elision` that `encode_elision` wrote.

    Raises:
        JournalError: The text is not what `encode_elision` writes.
    """
    if text is None:
        return None
    try:
        fields = json.loads(text)
        return Elision(
            at=int(fields["at"]),
            bytes=int(fields["bytes"]),
            lines=int(fields["lines"]),
            spill=None if fields.get("spill") is None else str(fields["spill"]),
            spill_error=None if fields.get("spill_error") is None else str(fields["spill_error"]),
        )
    except (ValueError, TypeError, KeyError) as error:
        raise JournalError(f"a stored output's cut is damaged: {text[:100]!r}") from error


def decode_chunks(data: bytes) -> tuple[Chunk, ...]:
    """The chunks `encode_chunks` wrote.

    Raises:
        JournalError: The bytes are not what `encode_chunks` writes.
    """
    chunks: list[Chunk] = []
    view = memoryview(data)
    at = 0
    while at < len(view):
        if at + _CHUNK_HEAD.size > len(view):
            raise JournalError("a stored output is cut short")
        stream, size = _CHUNK_HEAD.unpack_from(view, at)
        at += _CHUNK_HEAD.size
        if stream not in (_STDOUT, _STDERR) or at + size > len(view):
            raise JournalError("a stored output is damaged")
        payload = bytes(view[at : at + size])
        chunks.append(Stdout(payload) if stream == _STDOUT else Stderr(payload))
        at += size
    return tuple(chunks)


@attrs.frozen(kw_only=True)
class Outcome:
    """How a run ended, as the journal keeps it: a value or output, or an error to raise again.

    Attributes:
        kind: `"ok"`, or the name of the error: `"NonZeroExit"`, `"TimedOut"`,
            `"ExecutorError"`, `"ToolStreamError"`...
        output: The command's output (for an error, the output it carried);
            `None` for a streaming tool's final value.
        message: The error's message.
        timeout: The timeout of a `TimedOut`.
        value: A streaming tool's final value, as JSON text.
    """

    kind: str = "ok"
    output: CommandOutput | None = None
    message: str | None = None
    timeout: float | None = None
    value: str | None = None

    @property
    def ok(self) -> bool:
        """Whether the run succeeded."""
        return self.kind == "ok"

    @classmethod
    def of_output(cls, output: CommandOutput) -> Outcome:
        """The outcome of a command that succeeded."""
        return cls(output=output)

    @classmethod
    def of_error(cls, error: CommandError) -> Outcome:
        """The outcome of a run that raised `error`."""
        kind = next(name for name, base in _ERROR_KINDS if isinstance(error, base))
        return cls(
            kind=kind,
            output=error.output,
            message=error.message,
            timeout=error.timeout if isinstance(error, TimedOut) else None,
        )

    def error(self) -> CommandError:
        """The error this outcome records, made again (of the same type).

        Raises:
            ValueError: The outcome is a success.
        """
        if self.ok:
            raise ValueError("this outcome is a success, not an error")
        output = self.output if self.output is not None else CommandOutput.empty()
        if self.kind == "TimedOut":
            return TimedOut(self.timeout if self.timeout is not None else math.nan, output)
        if self.kind == "OutOfMemory" and not output.oom_killed:
            # The store keeps no flag of its own: the kind says it.
            output = attrs.evolve(output, oom_killed=True)
        cls = _REPLAYED.get(self.kind, CommandError)
        return cls(self.message or f"the run failed ({self.kind})", output)

    def replay(self) -> CommandOutput:
        """The recorded output, or raise the recorded error again.

        Raises:
            CommandError: The recorded error (`NonZeroExit`, `TimedOut`...).
        """
        if not self.ok:
            raise self.error()
        return self.output if self.output is not None else CommandOutput.empty()
