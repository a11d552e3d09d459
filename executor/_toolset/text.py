"""The text work behind the file tools: numbered lines, a line range read as it streams, edits.

Kept apart from the tools themselves so each rule (what counts as a line, when
a read may stop early, when an edit is refused) is stated once.
"""

from __future__ import annotations

import difflib
import itertools
from collections.abc import Callable, Iterable

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


def replace(
    text: str, old: str, new: str, *, replace_all: bool
) -> tuple[str, list[int], str | None]:
    """`text` with `old` replaced by `new`, the lines (1-based) where it was, and how it matched.

    The exact text is looked for first. Failing that, with lines of the
    file's own endings (`old` and `new` written with bare newlines in a
    CRLF file), then line by line ignoring trailing whitespace, then ignoring each
    line's indentation as well (`new` is then re-indented by the difference):
    the third value says which way it matched (`None`: exactly; else
    `"with the file's CRLF line endings"`, `"ignoring trailing whitespace"`
    or `"ignoring indentation"`). Every byte outside the replaced text is
    kept as it was.

    Refused, as agents' str_replace editors refuse, when `old` is empty, equal
    to `new`, missing, or found more than once without `replace_all`; the
    message says which, and where the copies are (or the closest lines), so
    the model can give more context and call again.

    Raises:
        InvalidArgument: The edit was refused.
    """
    if not old:
        raise InvalidArgument(old, "old_text must not be empty; use write_file to write a file")
    if old == new:
        raise InvalidArgument(_preview(old), "new_text is the same as old_text: nothing to do")
    places = _find_all(text, old)
    if places:
        return _splice(text, old, new, places, replace_all=replace_all), _lines(text, places), None
    if "\r\n" in text and "\n" in old and "\r\n" not in old:
        crlf_old, crlf_new = _crlf(old), _crlf(new)
        places = _find_all(text, crlf_old)
        if places:
            edited = _splice(text, crlf_old, crlf_new, places, replace_all=replace_all)
            return edited, _lines(text, places), "with the file's CRLF line endings"
    for how, key in (
        ("ignoring trailing whitespace", str.rstrip),
        ("ignoring indentation", str.strip),
    ):
        windows = _line_windows(text, old, key)
        if windows:
            return _splice_lines(text, old, new, windows, how, replace_all=replace_all)
    raise InvalidArgument(
        _preview(old),
        "old_text was not found in the file, even ignoring trailing whitespace and "
        f"indentation; read the file and copy the text exactly{_closest(text, old)}",
    )


def _find_all(text: str, old: str) -> list[int]:
    places: list[int] = []
    start = 0
    while (found := text.find(old, start)) >= 0:
        places.append(found)
        start = found + len(old)
    return places


def _lines(text: str, places: list[int]) -> list[int]:
    return [_line_of(text, index) for index in places]


def _unique(old: str, lines: list[int], *, replace_all: bool) -> None:
    if len(lines) > 1 and not replace_all:
        where = ", ".join(str(line) for line in lines[:20])
        raise InvalidArgument(
            _preview(old),
            f"old_text occurs {len(lines)} times (lines {where}); include more of the "
            "surrounding text to make it unique, or set replace_all to replace every one",
        )


def _splice(text: str, old: str, new: str, places: list[int], *, replace_all: bool) -> str:
    _unique(old, _lines(text, places), replace_all=replace_all)
    if replace_all:
        return text.replace(old, new)
    index = places[0]
    return text[:index] + new + text[index + len(old) :]


def _crlf(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\n", "\r\n")


def _line_windows(text: str, old: str, key: Callable[[str], str]) -> list[int]:
    """Where (0-based first lines) runs of whole lines of `text` match `old`'s by `key`."""
    wanted = [key(line) for line in old.strip("\r\n").splitlines()]
    if not any(wanted):
        return []
    lines = [key(line) for line in text.splitlines()]
    size = len(wanted)
    windows: list[int] = []
    start = 0
    while start + size <= len(lines):
        if lines[start : start + size] == wanted:
            windows.append(start)
            start += size
        else:
            start += 1
    return windows


def _splice_lines(
    text: str, old: str, new: str, windows: list[int], how: str, *, replace_all: bool
) -> tuple[str, list[int], str]:
    """Replace each window of whole lines with `new`, in the file's line endings and indentation."""
    _unique(old, [window + 1 for window in windows], replace_all=replace_all)
    if not replace_all:
        windows = windows[:1]
    lines = text.splitlines(keepends=True)
    old_lines = old.strip("\r\n").splitlines()
    size = len(old_lines)
    newline = "\r\n" if "\r\n" in text else "\n"
    new_lines = new.strip("\r\n").splitlines()
    for window in reversed(windows):
        matched = lines[window : window + size]
        replacement = new_lines
        if how == "ignoring indentation":
            # Each indentation of old_text stands for the file's at the same line.
            pairs = zip(old_lines, matched, strict=True)
            indents = {_indent(given): _indent(found) for given, found in pairs}
            unit = _unit(indents)
            base = _indent(matched[0])
            replacement = [_reindent(line, indents, base, unit) for line in replacement]
        # The last line keeps the end it had (none, at the end of a file without one).
        ending = matched[-1][len(matched[-1].rstrip("\r\n")) :]
        body = newline.join(replacement)
        lines[window : window + size] = [body + ending] if replacement else []
    return "".join(lines), [window + 1 for window in windows], how


def _indent(line: str) -> str:
    return line[: len(line) - len(line.lstrip(" \t"))]


def _unit(indents: dict[str, str]) -> tuple[str, str] | None:
    """One step of indentation as old_text wrote it and as the file does (four spaces, a tab)."""
    pairs = sorted(indents.items(), key=lambda pair: len(pair[0]))
    for (short, short_file), (long, long_file) in itertools.pairwise(pairs):
        if (
            long.startswith(short)
            and long_file.startswith(short_file)
            and len(long_file) > len(short_file)
        ):
            return long[len(short) :], long_file[len(short_file) :]
    return None


def _reindent(line: str, indents: dict[str, str], base: str, unit: tuple[str, str] | None) -> str:
    """`line` with its indentation as the file writes it (tabs or spaces).

    An indentation old_text had maps to the file's at that line; a deeper
    one maps its longest such prefix, and the steps beyond it one step of
    the file's each; one of its own goes below the first line's.
    """
    if not line.strip():
        return line
    indent = _indent(line)
    for given in sorted(indents, key=len, reverse=True):
        if indent.startswith(given):
            extra = indent[len(given) :]
            if unit is not None and unit[0] and extra == unit[0] * (len(extra) // len(unit[0])):
                extra = unit[1] * (len(extra) // len(unit[0]))
            return indents[given] + extra + line[len(indent) :]
    return base + line.lstrip(" \t")


def _closest(text: str, old: str) -> str:
    """Where the lines most like `old` are, numbered, for the model to compare."""
    wanted = old.strip("\r\n").splitlines()
    lines = text.splitlines()
    if not wanted or not lines:
        return ""
    size = len(wanted)
    target = "\n".join(line.strip() for line in wanted)
    best, best_start = 0.0, 0
    for start in range(max(len(lines) - size + 1, 1)):
        window = "\n".join(line.strip() for line in lines[start : start + size])
        ratio = difflib.SequenceMatcher(None, target, window, autojunk=False).quick_ratio()
        if ratio > best:
            ratio = difflib.SequenceMatcher(None, target, window, autojunk=False).ratio()
            if ratio > best:
                best, best_start = ratio, start
    if best < 0.5:
        return ""
    shown = number_lines(lines[best_start : best_start + size][:20], best_start + 1)
    return f". The closest lines ({best:.0%} alike):\n{shown}"
