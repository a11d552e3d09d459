"""Output values: chunks as they were read, and the output of a finished command."""

from __future__ import annotations

import collections
from typing import TypeAlias

import attrs

__all__ = ["Chunk", "CommandOutput", "OutputBuffer", "Stderr", "Stdout"]


@attrs.frozen
class Stdout:
    """A piece of the command's standard output, exactly as read."""

    data: bytes

    def __len__(self) -> int:
        return len(self.data)


@attrs.frozen
class Stderr:
    """A piece of the command's standard error, exactly as read."""

    data: bytes

    def __len__(self) -> int:
        return len(self.data)


Chunk: TypeAlias = Stdout | Stderr


def _drop_empty(chunks: tuple[Chunk, ...]) -> tuple[Chunk, ...]:
    if all(chunk.data for chunk in chunks):
        return chunks
    return tuple(chunk for chunk in chunks if chunk.data)


@attrs.frozen(kw_only=True)
class CommandOutput:
    """What a command printed, how it ended and how long it took.

    Attributes:
        chunks: `Stdout` and `Stderr` chunks in the order they were read; empty
            chunks are dropped.
        exit_code: The exit code, 128 + N for a process killed by signal N, or
            `None` for file commands.
        signal: The signal that killed the process, if one did.
        duration: Seconds from start to end.
        truncated: Whether output was left out of `chunks` because it passed the
            executor's cap on stored output (the head and the tail are kept).

    """

    chunks: tuple[Chunk, ...] = attrs.field(default=(), converter=_drop_empty)
    exit_code: int | None = None
    signal: int | None = None
    duration: float = 0.0
    truncated: bool = False

    @classmethod
    def empty(cls) -> CommandOutput:
        """Return an output with no chunks and no exit code."""
        return _EMPTY

    @property
    def stdout(self) -> bytes:
        """All of standard output, joined."""
        return b"".join(chunk.data for chunk in self.chunks if isinstance(chunk, Stdout))

    @property
    def stderr(self) -> bytes:
        """All of standard error, joined."""
        return b"".join(chunk.data for chunk in self.chunks if isinstance(chunk, Stderr))

    def text(self) -> str:
        """Both streams in the order read, decoded as UTF-8 with replacement.

        Chunks of one stream are joined before decoding, so a character split
        across two reads decodes whole; a switch of stream ends a run.
        """
        parts: list[str] = []
        run: list[bytes] = []
        kind: type | None = None
        for chunk in self.chunks:
            if type(chunk) is not kind and run:
                parts.append(b"".join(run).decode("utf-8", "replace"))
                run = []
            kind = type(chunk)
            run.append(chunk.data)
        if run:
            parts.append(b"".join(run).decode("utf-8", "replace"))
        return "".join(parts)

    def __len__(self) -> int:
        return sum(len(chunk.data) for chunk in self.chunks)

    def __str__(self) -> str:
        return self.text()


_EMPTY = CommandOutput()


class OutputBuffer:
    """Collects chunks in order, keeping at most `limit` bytes: the head and the tail.

    With no limit every chunk is kept. With a limit, the first half of it holds
    the earliest bytes and the second half the latest; what falls between is
    counted and dropped, so memory stays bounded however long the command runs.
    """

    __slots__ = ("_head", "_head_room", "_tail", "_tail_bytes", "_tail_limit", "dropped")

    def __init__(self, limit: int | None = None) -> None:
        if limit is not None and limit < 0:
            raise ValueError(f"output limit must be >= 0, got {limit}")
        self._head: list[Chunk] = []
        self._head_room = limit - limit // 2 if limit is not None else None
        self._tail: collections.deque[Chunk] = collections.deque()
        self._tail_limit = limit // 2 if limit is not None else 0
        self._tail_bytes = 0
        self.dropped = 0

    def append(self, chunk: Chunk) -> None:
        """Add a chunk, dropping the middle of the output when it passes the limit."""
        size = len(chunk.data)
        if not size:
            return
        if self._head_room is None:
            self._head.append(chunk)
            return
        if self._head_room > 0:
            if size <= self._head_room:
                self._head.append(chunk)
                self._head_room -= size
                return
            self._head.append(type(chunk)(chunk.data[: self._head_room]))
            chunk = type(chunk)(chunk.data[self._head_room :])
            size = len(chunk.data)
            self._head_room = 0
        self._append_tail(chunk, size)

    def _append_tail(self, chunk: Chunk, size: int) -> None:
        limit = self._tail_limit
        if size >= limit:
            self.dropped += self._tail_bytes + size - limit
            self._tail.clear()
            self._tail_bytes = 0
            if limit:
                self._tail.append(type(chunk)(chunk.data[size - limit :]))
                self._tail_bytes = limit
            return
        self._tail.append(chunk)
        self._tail_bytes += size
        excess = self._tail_bytes - limit
        while excess > 0:
            first = self._tail[0]
            if len(first.data) <= excess:
                self._tail.popleft()
                self._tail_bytes -= len(first.data)
                self.dropped += len(first.data)
                excess -= len(first.data)
            else:
                self._tail[0] = type(first)(first.data[excess:])
                self._tail_bytes -= excess
                self.dropped += excess
                excess = 0

    @property
    def truncated(self) -> bool:
        """Whether any byte was dropped."""
        return self.dropped > 0

    def chunks(self) -> tuple[Chunk, ...]:
        """The kept chunks, in order."""
        return (*self._head, *self._tail)

    def output(
        self, *, exit_code: int | None, signal: int | None = None, duration: float
    ) -> CommandOutput:
        """Freeze what was kept into a `CommandOutput`."""
        return CommandOutput(
            chunks=self.chunks(),
            exit_code=exit_code,
            signal=signal,
            duration=duration,
            truncated=self.truncated,
        )
