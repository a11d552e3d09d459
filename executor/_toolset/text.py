"""The text work behind the file tools: numbered lines, a line range read as it streams, edits.

Kept apart from the tools themselves so each rule (what counts as a line, when
a read may stop early, when an edit is refused) is stated once.
"""

from __future__ import annotations

from collections.abc import Iterable

from executor._core.errors import InvalidArgument
from executor._core.output import Chunk

LONG_LINE = 2000
"""Characters of one line a read shows; the rest of a longer line is marked as cut."""

_BINARY_PROBE = 8192


class Enough(Exception):
    """Raised from a read's sink once the lines asked for are in: the rest is not read."""


def _show(line: str) -> str:
    if len(line) <= LONG_LINE:
        return line
    return f"{line[:LONG_LINE]}[... {len(line) - LONG_LINE} more characters on this line]"


def number_lines(lines: Iterable[str], first: int) -> str:
    """`lines` (without their newlines) numbered from `first`, as `cat -n` numbers them."""
    return "".join(f"{number:>6}\t{_show(line)}\n" for number, line in enumerate(lines, first))


class LineRange:
    """A sink that keeps lines `first`..`last` (1-based, inclusive) of a file as it streams.

    It raises `Enough` as soon as a byte past line `last` arrives, so a read
    of the head of a huge file stops there; `more` then says that lines
    follow. It also stops once the kept lines would pass `budget` characters.
    A NUL byte in the first 8 KiB marks the file as binary (`binary`), and
    stops the read too.
    """

    def __init__(self, first: int, last: int, budget: int) -> None:
        self.first = first
        self.last = last
        self.budget = budget
        self.lines: list[str] = []
        self.seen = 0  # lines completed so far
        self.more = False
        self.budget_hit = False
        self.binary = False
        self._used = 0
        self._pending = bytearray()
        self._probed = 0

    def __call__(self, chunk: Chunk) -> None:
        """Take one block of the file."""
        data = chunk.data
        if self._probed < _BINARY_PROBE:
            if b"\0" in data[: _BINARY_PROBE - self._probed]:
                self.binary = True
                raise Enough
            self._probed += len(data)
        start = 0
        while True:
            if self.seen >= self.last:
                if start < len(data):
                    self.more = True
                    raise Enough
                return
            end = data.find(b"\n", start)
            if end < 0:
                self._pending += data[start:]
                return
            self._pending += data[start:end]
            start = end + 1
            self._line(bytes(self._pending))
            self._pending.clear()

    def _line(self, raw: bytes) -> None:
        self.seen += 1
        if self.seen < self.first:
            return
        line = raw.decode("utf-8", "replace").removesuffix("\r")
        cost = min(len(line), LONG_LINE) + 8
        if self.lines and self._used + cost > self.budget:
            self.budget_hit = True
            self.more = True
            self.seen -= 1
            raise Enough
        self._used += cost
        self.lines.append(line)

    def finish(self) -> None:
        """The file ended: a last line without a newline still counts."""
        if self._pending and self.seen < self.last:
            self._line(bytes(self._pending))
            self._pending.clear()

    @property
    def shown_last(self) -> int:
        """The number of the last line kept (`first - 1` when none was)."""
        return self.first + len(self.lines) - 1


def _line_of(text: str, index: int) -> int:
    return text.count("\n", 0, index) + 1


def _preview(text: str) -> str:
    one_line = text if len(text) <= 80 else f"{text[:77]}..."
    return one_line


def replace_exact(text: str, old: str, new: str, *, replace_all: bool) -> tuple[str, list[int]]:
    """`text` with `old` replaced by `new`, and the line numbers (1-based) where it was.

    Refused, as agents' str_replace editors refuse, when `old` is empty, equal
    to `new`, missing, or found more than once without `replace_all`; the
    message says which, and where the copies are, so the model can give more
    context and call again.

    Raises:
        InvalidArgument: The edit was refused.
    """
    if not old:
        raise InvalidArgument(old, "old_text must not be empty; use write_file to write a file")
    if old == new:
        raise InvalidArgument(_preview(old), "new_text is the same as old_text: nothing to do")
    places: list[int] = []
    start = 0
    while True:
        found = text.find(old, start)
        if found < 0:
            break
        places.append(found)
        start = found + len(old)
    if not places:
        hint = ""
        if old.strip() and old.strip() in text:
            hint = " (it is there with different surrounding whitespace)"
        raise InvalidArgument(
            _preview(old),
            f"old_text was not found in the file{hint}; read the file and copy the text exactly, "
            "whitespace and indentation included",
        )
    lines = [_line_of(text, index) for index in places]
    if len(places) > 1 and not replace_all:
        where = ", ".join(str(line) for line in lines[:20])
        raise InvalidArgument(
            _preview(old),
            f"old_text occurs {len(places)} times (lines {where}); include more of the "
            "surrounding text to make it unique, or set replace_all to replace every one",
        )
    if replace_all:
        return text.replace(old, new), lines
    index = places[0]
    return text[:index] + new + text[index + len(old) :], lines
