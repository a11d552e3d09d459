"""Output values: chunks as they were read, and the output of a finished command (or shell run)."""

from __future__ import annotations

import collections
import contextlib
import os
import tempfile
from collections.abc import Awaitable, Callable
from typing import BinaryIO, TypeAlias

import attrs


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

Sink: TypeAlias = Callable[[Chunk], Awaitable[None] | None]
"""Called with each chunk as it is read: a plain function, or an async one that is awaited."""


def _drop_empty(chunks: tuple[Chunk, ...]) -> tuple[Chunk, ...]:
    if all(chunk.data for chunk in chunks):
        return chunks
    return tuple(chunk for chunk in chunks if chunk.data)


@attrs.frozen(kw_only=True)
class Elision:
    """Where a command's stored output was cut, and how much was cut out.

    Attributes:
        at: The index in `CommandOutput.chunks` where the cut-out part stood:
            the chunks before it are the head, the ones from it on the tail.
        bytes: How many bytes were left out.
        lines: How many newlines were among them.
        spill: The file on this machine that holds the whole output, both
            streams in the order read, when the executor was asked to keep it
            (`spill=`); `None` otherwise.
        spill_error: Why the whole output could not be kept, when the executor
            was asked to keep it and writing it failed (a full disk: `No space
            left on device`); then `spill` is `None`, the partial file is
            removed, and the head and the tail are kept as without a spill.

    """

    at: int
    bytes: int
    lines: int
    spill: str | None = None
    spill_error: str | None = None

    def marker(self) -> str:
        """The line that stands in for the cut-out part in `text()`."""
        where = f"; the whole output is in {self.spill}" if self.spill else ""
        if self.spill_error:
            where = f"; the whole output could not be kept: {self.spill_error}"
        return f"[... {self.lines} lines ({self.bytes} bytes) elided{where} ...]"


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
        elided: Where it was left out and how much (`None` when nothing was,
            or when that is not known, as for an output replayed from a journal).
        memory_peak: The most memory (bytes) the command's whole tree used at
            once, where the executor ran it in a cgroup with the memory
            controller (an unsandboxed `LocalExecutor` on a machine that
            delegates one, or as root); `None` where that is not measured.
        oom_killed: Whether the kernel's OOM killer ended a process of the
            command's tree while it ran (past its memory limit, or the
            machine's): told by the command's own cgroup under an
            unsandboxed `LocalExecutor`, and by the container's under a
            `DockerExecutor` for a command that died of SIGKILL meanwhile.
            `False` where no OOM kill was counted, or none can be.

    """

    chunks: tuple[Chunk, ...] = attrs.field(default=(), converter=_drop_empty)
    exit_code: int | None = None
    signal: int | None = None
    duration: float = 0.0
    truncated: bool = False
    elided: Elision | None = None
    # A measurement of the run, not of what it printed: two outputs of the same
    # bytes and exit are equal whatever it was (a journal's replay has none).
    memory_peak: int | None = attrs.field(default=None, eq=False)
    # Of the run too, as the exit's cause: the code and signal say how it ended.
    oom_killed: bool = attrs.field(default=False, eq=False)

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
        across two reads decodes whole; a switch of stream ends a run. Where
        output was cut (`elided`), a marker line stands at the cut and says
        how much is missing (and where the whole of it was kept).
        """
        elided = self.elided
        if elided is None or not 0 <= elided.at <= len(self.chunks):
            return _decode(self.chunks)
        head = _decode(self.chunks[: elided.at])
        tail = _decode(self.chunks[elided.at :])
        opening = "\n" if head and not head.endswith("\n") else ""
        return f"{head}{opening}{elided.marker()}\n{tail}"

    def __len__(self) -> int:
        return sum(len(chunk.data) for chunk in self.chunks)

    def __str__(self) -> str:
        return self.text()


_EMPTY = CommandOutput()


@attrs.frozen(kw_only=True)
class ShellOutput(CommandOutput):
    """The output of one command run in a `PersistentShell`.

    Attributes:
        state_lost: Whether the command ran in a fresh shell that replaced
            one that had ended (a command exited or killed it, it had to be
            killed after an interrupt, or it died): the working directory,
            variables, functions and options set before are gone.

    """

    state_lost: bool = False


def _decode(chunks: tuple[Chunk, ...]) -> str:
    parts: list[str] = []
    run: list[bytes] = []
    kind: type | None = None
    for chunk in chunks:
        if type(chunk) is not kind and run:
            parts.append(b"".join(run).decode("utf-8", "replace"))
            run = []
        kind = type(chunk)
        run.append(chunk.data)
    if run:
        parts.append(b"".join(run).decode("utf-8", "replace"))
    return "".join(parts)


def count_newlines(data: bytes, end: int | None = None, start: int = 0) -> int:
    """The newlines in `data[start:end]` (no copy made), cheaply where there are none.

    `bytes.count` scans at about 1 GiB/s; the `in` test (memchr) at tens of
    GiB/s, so a flood of binary output or of long lines pays for its cut
    almost nothing, and only newlines that are there are counted.
    """
    if end is None and not start:
        return data.count(b"\n") if b"\n" in data else 0
    return data.count(b"\n", start, end) if data.find(b"\n", start, end) >= 0 else 0


class OutputBuffer:
    """Collects chunks in order, keeping at most `limit` bytes: the head and the tail.

    With no limit every chunk is kept. With a limit, the first half of it holds
    the earliest bytes and the second half the latest; what falls between is
    counted (bytes and line ends) and dropped, so memory stays bounded however
    long the command runs.

    With `spill_dir`, the whole output is also kept aside in a file of its own
    in that folder, once (and only if) the limit is passed: what was held so
    far goes into it, then every byte that follows, both streams in the order
    read. The file is the caller's to keep or remove. A spill that cannot be
    written (a full disk, a folder that cannot be made) is given up: its
    partial file is removed, the head and the tail are kept as without one,
    and the cut's marker says why (`Elision.spill_error`); nothing is raised.
    """

    __slots__ = (
        "_head",
        "_head_room",
        "_spill",
        "_spill_dir",
        "_spill_error",
        "_spill_path",
        "_tail",
        "_tail_bytes",
        "_tail_limit",
        "_tail_skip",
        "dropped",
        "dropped_lines",
    )

    def __init__(self, limit: int | None = None, *, spill_dir: str | None = None) -> None:
        if limit is not None and limit < 0:
            raise ValueError(f"output limit must be >= 0, got {limit}")
        self._head: list[Chunk] = []
        self._head_room = limit - limit // 2 if limit is not None else None
        self._tail: collections.deque[Chunk] = collections.deque()
        self._tail_limit = limit // 2 if limit is not None else 0
        self._tail_bytes = 0
        # The bytes at the front of the tail's first chunk that are cut already:
        # sliced off only when the output is made, not at every chunk (a
        # flood's chunk of 1 MiB would cost a copy of half of it each time).
        self._tail_skip = 0
        self._spill_dir = spill_dir
        self._spill: BinaryIO | None = None
        self._spill_path: str | None = None
        self._spill_error: str | None = None
        self.dropped = 0
        self.dropped_lines = 0

    def append(self, chunk: Chunk) -> None:
        """Add a chunk, dropping the middle of the output when it passes the limit."""
        size = len(chunk.data)
        if not size:
            return
        if self._spill is not None:
            try:
                self._spill.write(chunk.data)
            except OSError as error:
                self._give_up_spill(error)
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
        if self._spill_dir is not None and self._spill is None and self._tail_bytes + size > limit:
            self._start_spill(chunk)
        self._tail.append(chunk)
        self._tail_bytes += size
        excess = self._tail_bytes - limit
        while excess > 0:
            first = self._tail[0].data
            kept = len(first) - self._tail_skip
            if kept <= excess:
                self._tail.popleft()
                self.dropped_lines += count_newlines(first, start=self._tail_skip)
                self._tail_skip = 0
                self._tail_bytes -= kept
                self.dropped += kept
                excess -= kept
            else:
                self.dropped_lines += count_newlines(
                    first, self._tail_skip + excess, start=self._tail_skip
                )
                self._tail_skip += excess
                self._tail_bytes -= excess
                self.dropped += excess
                excess = 0
                if self._tail_skip > limit:
                    # A chunk far larger than the tail: what it cuts would be held
                    # for nothing (more than the tail itself), so it goes now.
                    self._tail[0] = type(self._tail[0])(first[self._tail_skip :])
                    self._tail_skip = 0

    def _kept_tail(self) -> list[Chunk]:
        """The tail's chunks, less the front of the first that is cut already."""
        tail = list(self._tail)
        if self._tail_skip:
            first = tail[0]
            tail[0] = type(first)(first.data[self._tail_skip :])
        return tail

    def _start_spill(self, pending: Chunk) -> None:
        """Keep the whole output aside from here on: what is held, then `pending`."""
        assert self._spill_dir is not None
        try:
            # Made here, at the first cut, not per command: most outputs never spill.
            os.makedirs(self._spill_dir, mode=0o700, exist_ok=True)
            fd, path = tempfile.mkstemp(dir=self._spill_dir, prefix="output-", suffix=".log")
            self._spill_path = path
            self._spill = os.fdopen(fd, "wb")
            # In the order read: the head (whose last piece may be the front of the
            # chunk being added, whose rest is `pending`), the tail, then `pending`.
            for kept in (*self._head, *self._kept_tail(), pending):
                self._spill.write(kept.data)
        except OSError as error:
            self._give_up_spill(error)

    def _give_up_spill(self, error: OSError) -> None:
        """Stop keeping the whole output: remove the partial file, remember why.

        A full disk must not cost the command's output and exit status, nor
        stay full of a file that holds only part of it.
        """
        self._spill_error = error.strerror or str(error) or type(error).__name__
        # Not tried again for this output: it would hold a part, not the whole.
        self._spill_dir = None
        spill, self._spill = self._spill, None
        if spill is not None:
            # Its flush fails the same way; the descriptor is closed all the same.
            with contextlib.suppress(OSError):
                spill.close()
        path, self._spill_path = self._spill_path, None
        if path is not None:
            with contextlib.suppress(OSError):
                os.unlink(path)

    @property
    def truncated(self) -> bool:
        """Whether any byte was dropped."""
        return self.dropped > 0

    def elision(self) -> Elision | None:
        """Where the output was cut and how much was cut out; `None` if nothing was."""
        if not self.dropped:
            return None
        self.close()
        return Elision(
            at=len(self._head),
            bytes=self.dropped,
            lines=self.dropped_lines,
            spill=self._spill_path,
            spill_error=self._spill_error,
        )

    def close(self) -> None:
        """Finish the spill file, if there is one (a second call does nothing).

        A spill whose last bytes cannot be written is given up (see the class).
        """
        spill = self._spill
        if spill is not None:
            try:
                spill.close()
            except OSError as error:
                self._give_up_spill(error)
            self._spill = None

    def chunks(self) -> tuple[Chunk, ...]:
        """The kept chunks, in order."""
        return (*self._head, *self._kept_tail())

    def output(
        self,
        *,
        exit_code: int | None,
        signal: int | None = None,
        duration: float,
        memory_peak: int | None = None,
        oom_killed: bool = False,
    ) -> CommandOutput:
        """Freeze what was kept into a `CommandOutput`."""
        return CommandOutput(
            chunks=self.chunks(),
            exit_code=exit_code,
            signal=signal,
            duration=duration,
            truncated=self.truncated,
            elided=self.elision(),
            memory_peak=memory_peak,
            oom_killed=oom_killed,
        )
