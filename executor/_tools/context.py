"""The context a session holds of a stream: the chunks and summary kept, and their measure.

A session's policy decides what enters its `HeldOutput`; `ContextWindow`
measures what is held (characters, UTF-8 bytes, estimated tokens) and counts
what was read, and `finalize()` returns it all as a `StreamingToolResult`.
`truncate` and `join_texts` shape the text a summary is made of.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import Generic, TypeVar

import attrs

ChunkT = TypeVar("ChunkT")
FinalT = TypeVar("FinalT")


@attrs.frozen(kw_only=True)
class ContextWindow:
    """What a session holds for the model's context, and what it read to get there.

    Sizes are of the text the tool's `render` gives: the summary, the chunks
    held, and (after `finalize()`) the final value.

    Attributes:
        chunks: Chunks held now.
        characters: Characters of the text held.
        utf8_bytes: Its size in UTF-8.
        estimated_tokens: About `utf8_bytes / 4`, rounded up, as models
            tokenise English and code.
        received: Chunks read from the tool.
        dropped: Chunks read and not held: slid out of a window, denied, or
            read by `finalize()` under `Manual` without being released.
        summarised: Chunks folded into the summary.
        summaries: Summary passes made.
        truncations: Passes that truncated instead of summarising (no
            summarizer, or it failed or timed out).
    """

    chunks: int = 0
    characters: int = 0
    utf8_bytes: int = 0
    estimated_tokens: int = 0
    received: int = 0
    dropped: int = 0
    summarised: int = 0
    summaries: int = 0
    truncations: int = 0


@attrs.frozen(kw_only=True)
class StreamingToolResult(Generic[ChunkT, FinalT]):
    """What `finalize()` returns: the tool's final value and what the context holds of its stream.

    Attributes:
        final: The tool's final value.
        chunks: The chunks the policy holds (all of them for `Buffer`, the
            last N for `Window`, those since the last summary for
            `Summarise`, the approved ones for `Manual`).
        summary: The summary of the rest (`Summarise`), or `None`.
        context: The context window at the end, final value included.
    """

    final: FinalT
    chunks: tuple[ChunkT, ...]
    summary: str | None
    context: ContextWindow


def _size(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def join_texts(texts: Iterable[str]) -> str:
    """The texts as one, a newline between two where the first does not end in one."""
    # Chunks are often lines that end in a newline already; add one only between
    # pieces that lack it, so a summarizer sees the output as it was printed.
    parts: list[str] = []
    for text in texts:
        if parts and not parts[-1].endswith("\n"):
            parts.append("\n")
        parts.append(text)
    return "".join(parts)


def truncate(text: str, limit: int) -> str:
    """`text` cut to at most `limit` characters, keeping its head and its tail."""
    if len(text) <= limit:
        return text
    # The note's width is that of the largest count it could show, so the result
    # never passes the limit.
    note_width = len(f"\n[... {len(text)} characters left out ...]\n")
    room = limit - note_width
    if room < 2:
        return text[:limit]
    head, tail = room - room // 2, room // 2
    left_out = len(text) - head - tail
    return f"{text[:head]}\n[... {left_out} characters left out ...]\n{text[len(text) - tail :]}"


@attrs.define(eq=False)
class HeldOutput(Generic[ChunkT]):
    """The chunks and summary held for the context, with their sizes kept current.

    A session changes it as its policy says and reads `window()` from it.

    Attributes:
        chunks: Each chunk held, with its text's length in characters and in UTF-8.
        summary: The summary of the chunks no longer held one by one, if any.
        final_text: The final value's text, once the session has it.
        chunk_characters: The characters of the chunks held.
        chunk_bytes: Their size in UTF-8.
        received: Chunks read from the tool.
        dropped: Chunks read and not held.
        summarised: Chunks folded into the summary.
        summaries: Summary passes made.
        truncations: Passes that truncated instead of summarising.
    """

    chunks: deque[tuple[ChunkT, int, int]] = attrs.field(factory=deque)
    summary: str | None = None
    final_text: str | None = None
    chunk_characters: int = 0
    chunk_bytes: int = 0
    received: int = 0
    dropped: int = 0
    summarised: int = 0
    summaries: int = 0
    truncations: int = 0

    def hold(self, chunk: ChunkT, text: str) -> None:
        """Hold `chunk`, whose text is `text`, after the others."""
        size = (len(text), _size(text))
        self.chunks.append((chunk, *size))
        self.chunk_characters += size[0]
        self.chunk_bytes += size[1]

    def drop_oldest(self) -> None:
        """Drop the chunk held longest (a window slides on)."""
        _, characters, size = self.chunks.popleft()
        self.chunk_characters -= characters
        self.chunk_bytes -= size
        self.dropped += 1

    def replace_with_summary(self, summary: str) -> None:
        """Fold the chunks held, and the summary before them, into `summary`."""
        self.summarised += len(self.chunks)
        self.chunks.clear()
        self.chunk_characters = self.chunk_bytes = 0
        self.summary = summary

    def window(self) -> ContextWindow:
        """What is held now, measured, with the counts of what was read."""
        extras = [text for text in (self.summary, self.final_text) if text is not None]
        characters = self.chunk_characters + sum(len(text) for text in extras)
        size = self.chunk_bytes + sum(_size(text) for text in extras)
        return ContextWindow(
            chunks=len(self.chunks),
            characters=characters,
            utf8_bytes=size,
            estimated_tokens=(size + 3) // 4,
            received=self.received,
            dropped=self.dropped,
            summarised=self.summarised,
            summaries=self.summaries,
            truncations=self.truncations,
        )
