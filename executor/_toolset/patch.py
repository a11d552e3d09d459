"""The V4A `apply_patch` engine: Codex CLI's patch format, parsed, and applied atomically.

The format is the one OpenAI's Codex CLI gives its models (`codex-rs/apply-patch`):

```
*** Begin Patch
*** Add File: path/new.py
+line of the new file
*** Delete File: path/old.py
*** Update File: path/app.py
*** Move to: path/renamed.py
@@ def handler():
 context line
-removed line
+added line
*** End of File
*** End Patch
```

`parse_patch` reads it as Codex's lenient parser does (markers may be padded
with whitespace; the whole patch may come wrapped in a heredoc, `<<'EOF'` ...
`EOF`, as models write it for a shell). `apply_chunks` is the pure update of
one file's text. `apply_patch` applies a whole patch through an executor:

- every file it needs is read first, and every new content computed in
  memory; a hunk that does not apply fails the patch before anything is
  written;
- then the changes are made in the patch's order; if one fails (a write
  refused, a folder in the way), those already made are undone (files
  restored to their former bytes, added files and the folders made for them
  removed), so the patch applies whole or not at all. Codex leaves a patch
  half-applied there; we do not.

Lines are found as Codex's `seek_sequence` finds them: exactly, then ignoring
trailing whitespace, then whitespace at both ends, then with typographic
punctuation (dashes, quotes, odd spaces) read as ASCII. Line endings are kept
as Codex keeps them with its line-ending preservation on: untouched lines keep
their bytes and ending, new lines take the file's first ending (LF when it has
none), and every line of an updated file ends with one (a missing final
newline is added, as Codex does).

Paths are relative to the executor's working folder; absolute paths and `..`
are refused (Codex accepts both). A file that is not UTF-8 can still be
updated: its other bytes pass through unchanged.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Sequence
from typing import TypeAlias

import anyio
import attrs

from executor._core.base import ToolExecutor
from executor._core.commands import Command
from executor._core.errors import CommandError, InvalidArgument, NonZeroExit
from executor._tools.args import WorkspacePath

__all__ = [
    "AddFile",
    "DeleteFile",
    "PatchError",
    "PatchOp",
    "PatchResult",
    "UpdateChunk",
    "UpdateFile",
    "apply_chunks",
    "apply_patch",
    "parse_patch",
]

_BEGIN_PATCH = "*** Begin Patch"
_END_PATCH = "*** End Patch"
_ADD_FILE = "*** Add File: "
_DELETE_FILE = "*** Delete File: "
_UPDATE_FILE = "*** Update File: "
_MOVE_TO = "*** Move to: "
_END_OF_FILE = "*** End of File"
_ENVIRONMENT_ID = "*** Environment ID:"
_CONTEXT = "@@ "
_EMPTY_CONTEXT = "@@"
_HEREDOC_OPENERS = ("<<EOF", "<<'EOF'", '<<"EOF"')

# Rust's `char::is_whitespace` (Unicode White_Space), which Codex trims with.
# Python's own `str.strip()` also strips U+001C..U+001F; the patch must read the same here.
_WHITESPACE = (
    "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006"
    "\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)

# Codex's last matching pass reads typographic punctuation as ASCII.
_DASHES = "\u2010\u2011\u2012\u2013\u2014\u2015\u2212"
_SINGLE_QUOTES = "\u2018\u2019\u201a\u201b"
_DOUBLE_QUOTES = "\u201c\u201d\u201e\u201f"
_SPACES = "\xa0\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u202f\u205f\u3000"
_PUNCTUATION = str.maketrans(
    _DASHES + _SINGLE_QUOTES + _DOUBLE_QUOTES + _SPACES,
    "-" * len(_DASHES) + "'" * len(_SINGLE_QUOTES) + '"' * len(_DOUBLE_QUOTES) + " " * len(_SPACES),
)

_HEADERS_HELP = (
    "Valid hunk headers: '*** Add File: {path}', '*** Delete File: {path}', "
    "'*** Update File: {path}'"
)
_LINE_HELP = (
    "Every line should start with ' ' (context line), '+' (added line), or '-' (removed line)"
)
_NOT_APPLIED = "the patch was not applied: no file was changed"
_LINE_BREAK = re.compile(r"\r\n|\r|\n")
_BODY_MARKS = ("+", "-", " ")


class PatchError(ValueError):
    """A patch that is malformed, or does not apply; the message says where and why.

    Its words are meant for the model that wrote the patch. A patch that
    failed to apply changed no file (unless the message says that undoing a
    failed change failed too).

    Attributes:
        line: The line of the patch text at fault (1-based), when there is one.
    """

    def __init__(self, message: str, line: int | None = None) -> None:
        super().__init__(message)
        self.line = line


@attrs.frozen
class UpdateChunk:
    """One `@@` section of an update: lines to find, and what replaces them.

    Attributes:
        anchor: The text after `@@ `: a line (a class or function header, say)
            to find first; the old lines are sought after it. `None` for `@@`.
        old_lines: The lines to find (context and `-` lines), without endings.
        new_lines: The lines that replace them (context and `+` lines).
        context: Pairs of indices into `old_lines` and `new_lines` of the
            context lines: those stay in the file as they are there.
        end_of_file: `*** End of File` followed: the old lines end the file.
        line: The line of the patch where the section starts (0: not
            parsed from a patch).
    """

    anchor: str | None
    old_lines: tuple[str, ...]
    new_lines: tuple[str, ...]
    context: tuple[tuple[int, int], ...] = ()
    end_of_file: bool = False
    line: int = 0


@attrs.frozen
class AddFile:
    """`*** Add File: path`: create the file (or replace it) with `content`.

    Attributes:
        path: The file, relative to the workspace root (normalised).
        content: Its whole text: each `+` line with a newline.
        line: The line of the patch holding the header (0: not parsed from
            a patch).
    """

    path: str
    content: str
    line: int = 0


@attrs.frozen
class DeleteFile:
    """`*** Delete File: path`: remove the file (a folder is refused).

    Attributes:
        path: The file, relative to the workspace root (normalised).
        line: The line of the patch holding the header (0: not parsed from
            a patch).
    """

    path: str
    line: int = 0


@attrs.frozen
class UpdateFile:
    """`*** Update File: path`: change the file's lines, and maybe move it.

    Attributes:
        path: The file, relative to the workspace root (normalised).
        move_to: Where the updated file goes (`*** Move to:`), or `None`.
        chunks: Its `@@` sections, in the order they apply down the file.
        line: The line of the patch holding the header (0: not parsed from
            a patch).
    """

    path: str
    move_to: str | None
    chunks: tuple[UpdateChunk, ...]
    line: int = 0


PatchOp: TypeAlias = AddFile | DeleteFile | UpdateFile
"""One file operation of a patch."""


@attrs.frozen
class PatchResult:
    """What an applied patch changed, listed per operation as Codex lists them.

    A moved file is listed in `modified` under its new path, as Codex does,
    and in `moved` as `(from, to)` besides.

    Attributes:
        added: Paths of `*** Add File` operations.
        modified: Paths of `*** Update File` operations (the new path of a move).
        deleted: Paths of `*** Delete File` operations.
        moved: `(from, to)` of each update with `*** Move to`.
    """

    added: tuple[str, ...] = ()
    modified: tuple[str, ...] = ()
    deleted: tuple[str, ...] = ()
    moved: tuple[tuple[str, str], ...] = ()

    def summary(self) -> str:
        """Codex's report: `Success. Updated the following files:` then `A`/`M`/`D` lines."""
        lines = ["Success. Updated the following files:"]
        lines += [f"A {path}" for path in self.added]
        lines += [f"M {path}" for path in self.modified]
        lines += [f"D {path}" for path in self.deleted]
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary()


# --- parsing ------------------------------------------------------------------


def parse_patch(text: str) -> list[PatchOp]:
    """The file operations of a V4A patch, parsed as Codex's lenient parser does.

    Around the markers (`*** Begin Patch`, the file headers, `*** End Patch`)
    whitespace is allowed; a patch wrapped in a heredoc (`<<'EOF'`, `<<EOF`
    or `<<"EOF"` first, `EOF` last) is unwrapped. A patch with no operation
    parses to `[]` (`apply_patch` refuses it). Paths must be relative and
    stay inside the workspace.

    Raises:
        PatchError: The patch is malformed; the message names the line (of
            `text` as given) and what is wrong with it.
    """
    if not isinstance(text, str):
        raise TypeError(f"a patch must be str, got {type(text).__name__}")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        raise PatchError(
            "Invalid patch: it holds a lone surrogate (not valid Unicode) at character "
            f"{error.start}"
        ) from None
    stripped = text.strip(_WHITESPACE)
    # Line numbers in messages count lines of `text` as given, before the trim.
    offset = text[: len(text) - len(text.lstrip(_WHITESPACE))].count("\n")
    lines = stripped.split("\n") if stripped else []
    if "\r" in stripped:
        lines = [_strip_cr(line) for line in lines]
    failure = _boundaries(lines, offset)
    if failure is not None:
        if not (len(lines) >= 4 and lines[0] in _HEREDOC_OPENERS and lines[-1].endswith("EOF")):
            raise failure
        lines = lines[1:-1]
        offset += 1
        inner = _boundaries(lines, offset)
        if inner is not None:
            raise inner
    if "\r" in stripped:
        # Codex's line reader drops one more CR than Rust's `lines()` (the last line aside).
        lines = [_strip_cr(line) for line in lines[:-1]] + lines[-1:]
    return _Parser(offset).parse(lines)


def _strip_cr(line: str) -> str:
    # Rust's `lines()` drops one CR before each LF.
    return line[:-1] if line.endswith("\r") else line


def _boundaries(lines: list[str], offset: int) -> PatchError | None:
    first = lines[0].strip(_WHITESPACE) if lines else None
    last = lines[-1].strip(_WHITESPACE) if lines else None
    if first == _BEGIN_PATCH and last == _END_PATCH:
        return None
    if first != _BEGIN_PATCH:
        shown = f"line {offset + 1} is {_clip(lines[0])!r}" if lines else "the patch is empty"
        return PatchError(
            f"Invalid patch: the first line of the patch must be '{_BEGIN_PATCH}' ({shown})",
            offset + 1 if lines else None,
        )
    return PatchError(
        f"Invalid patch: the last line of the patch must be '{_END_PATCH}' "
        f"(line {offset + len(lines)} is {_clip(lines[-1])!r})",
        offset + len(lines),
    )


def _clip(line: str) -> str:
    return line if len(line) <= 80 else f"{line[:77]}..."


@attrs.define
class _Update:
    """An update section while it is being read."""

    path: str
    line: int
    move_to: str | None = None
    chunks: list[_Chunk] = attrs.field(factory=list)


@attrs.define
class _Chunk:
    line: int
    anchor: str | None = None
    old: list[str] = attrs.field(factory=list)
    new: list[str] = attrs.field(factory=list)
    context: list[tuple[int, int]] = attrs.field(factory=list)
    end_of_file: bool = False

    def empty(self) -> bool:
        return not self.old and not self.new

    def frozen(self) -> UpdateChunk:
        return UpdateChunk(
            self.anchor,
            tuple(self.old),
            tuple(self.new),
            tuple(self.context),
            self.end_of_file,
            self.line,
        )


@attrs.define
class _Add:
    path: str
    line: int
    content: list[str] = attrs.field(factory=list)


_Pending: TypeAlias = _Add | DeleteFile | _Update


class _Parser:
    """Codex's `StreamingPatchParser`, line by line, with the same states and the same checks."""

    def __init__(self, offset: int) -> None:
        self._offset = offset
        self._number = 0  # the line being read, in the text as given
        self._ops: list[_Pending] = []
        self._started = False
        self._ended = False
        self._environment: str | None = None

    def parse(self, lines: list[str]) -> list[PatchOp]:
        last = len(lines) - 1
        index = 0
        while index <= last:
            line = lines[index]
            self._number = self._offset + index + 1
            if index == last and line.strip(_WHITESPACE) == _END_PATCH:
                # The last line ends the patch however it is padded.
                self._check_update_not_empty(_END_PATCH)
                self._ended = True
                break
            current = self._ops[-1] if self._ops else None
            if isinstance(current, _Add) and line[:1] == "+" and not self._ended:
                # A new file's lines, taken as a run: most of a big patch.
                end = index + 1
                while end < last and lines[end][:1] == "+":
                    end += 1
                current.content += [added[1:] for added in lines[index:end]]
                index = end
                continue
            self._line(line)
            index += 1
        return [self._op(pending) for pending in self._ops]

    @staticmethod
    def _op(pending: _Pending) -> PatchOp:
        if isinstance(pending, _Add):
            content = "\n".join(pending.content) + "\n" if pending.content else ""
            return AddFile(pending.path, content, pending.line)
        if isinstance(pending, _Update):
            chunks = tuple(chunk.frozen() for chunk in pending.chunks)
            return UpdateFile(pending.path, pending.move_to, chunks, pending.line)
        return pending

    def _error(self, message: str, line: int | None = None) -> PatchError:
        number = self._number if line is None else line
        return PatchError(f"Invalid patch hunk on line {number}: {message}", number)

    def _path(self, raw: str) -> str:
        try:
            return str(WorkspacePath(raw))
        except InvalidArgument as error:
            raise self._error(f"path {raw!r} is refused: {error.rule}") from None

    def _line(self, line: str) -> None:
        current = self._ops[-1] if self._ops else None
        if line[:1] in _BODY_MARKS and not self._ended:
            # The bulk of a patch: a body line is never a header (a header,
            # trimmed, starts with `***` or `@@`), so it goes straight in.
            if isinstance(current, _Add) and line[0] == "+":
                current.content.append(line[1:])
                return
            if isinstance(current, _Update) and self._body_line(current, line):
                return
        trimmed = line.strip(_WHITESPACE)
        if self._ended:
            if trimmed:
                raise PatchError(
                    f"Invalid patch: the last line of the patch must be '{_END_PATCH}' "
                    f"(line {self._number} follows it: {_clip(line)!r})",
                    self._number,
                )
            return
        if not self._started:
            # The boundaries were checked: this is the `*** Begin Patch` line.
            self._started = True
            return
        if isinstance(current, _Update):
            self._update_line(current, line)
            return
        if self._header(trimmed):
            return
        raise self._error(f"{trimmed!r} is not a valid hunk header. {_HEADERS_HELP}")

    def _header(self, trimmed: str) -> bool:
        """Take a file header or `*** End Patch`; whether `trimmed` was one."""
        if not self._ops and trimmed.startswith(_ENVIRONMENT_ID):
            # Codex picks one of several environments by it; there is one here.
            if self._environment is not None:
                raise self._error("the environment ID must not be given more than once")
            environment = trimmed[len(_ENVIRONMENT_ID) :].strip(_WHITESPACE)
            if not environment:
                raise self._error("the environment ID must not be empty")
            self._environment = environment
            return True
        if trimmed == _END_PATCH:
            self._check_update_not_empty(trimmed)
            self._ended = True
            return True
        for marker in (_ADD_FILE, _DELETE_FILE, _UPDATE_FILE):
            if trimmed.startswith(marker):
                self._check_update_not_empty(trimmed)
                path = self._path(trimmed[len(marker) :])
                if marker == _ADD_FILE:
                    self._ops.append(_Add(path, self._number))
                elif marker == _DELETE_FILE:
                    self._ops.append(DeleteFile(path, self._number))
                else:
                    self._ops.append(_Update(path, self._number))
                return True
        return False

    def _check_update_not_empty(self, line: str) -> None:
        current = self._ops[-1] if self._ops else None
        if not isinstance(current, _Update):
            return
        if not current.chunks:
            raise self._error(f"Update file hunk for path {current.path!r} is empty", current.line)
        if current.chunks[-1].empty():
            if line == _END_PATCH:
                raise self._error("Update hunk does not contain any lines")
            raise self._error(f"Unexpected line found in update hunk: {line!r}. {_LINE_HELP}")

    def _body_line(self, update: _Update, line: str) -> bool:
        """Take a context (` ` or empty), `+` or `-` line into the last section; whether it did.

        Refused (`False`) after `*** End of File`, where only a new `@@` may come.
        """
        chunks = update.chunks
        if chunks and chunks[-1].end_of_file:
            return False
        if not chunks:
            chunks.append(_Chunk(self._number))
        last = chunks[-1]
        mark = line[:1]
        if mark == "+":
            last.new.append(line[1:])
        elif mark == "-":
            last.old.append(line[1:])
        else:
            # A context line stays on both sides; its indices mark it as context.
            last.context.append((len(last.old), len(last.new)))
            last.old.append(line[1:])
            last.new.append(line[1:])
        return True

    def _update_line(self, update: _Update, line: str) -> None:
        text = line.rstrip(_WHITESPACE)
        if self._header(text):
            return
        chunks = update.chunks
        last = chunks[-1] if chunks else None
        is_context = text == _EMPTY_CONTEXT or text.startswith(_CONTEXT)
        if last is not None and last.end_of_file:
            if not text:
                return
            if not is_context:
                raise self._error(
                    f"Expected update hunk to start with a @@ context marker, got: {line!r}"
                )
        if not chunks and update.move_to is None and text.startswith(_MOVE_TO):
            update.move_to = self._path(text[len(_MOVE_TO) :])
            return
        if is_context:
            if last is not None and last.empty():
                raise self._error(f"Unexpected line found in update hunk: {line!r}. {_LINE_HELP}")
            anchor = None if text == _EMPTY_CONTEXT else text[len(_CONTEXT) :]
            chunks.append(_Chunk(self._number, anchor))
            return
        if text == _END_OF_FILE:
            if last is not None and last.empty():
                raise self._error("Update hunk does not contain any lines")
            if last is not None:
                last.end_of_file = True
            return
        if not line and self._body_line(update, line):
            return
        if last is not None and not last.empty():
            raise self._error(
                f"Expected update hunk to start with a @@ context marker, got: {line!r}"
            )
        raise self._error(f"Unexpected line found in update hunk: {line!r}. {_LINE_HELP}")


# --- updating one file's text ---------------------------------------------------


def _rstrip(line: str) -> str:
    return line.rstrip(_WHITESPACE)


def _strip(line: str) -> str:
    return line.strip(_WHITESPACE)


def _normalise(line: str) -> str:
    return line.strip(_WHITESPACE).translate(_PUNCTUATION)


_KEYS = (_rstrip, _strip, _normalise)


class _Lines:
    """A file's lines (without endings) and each one's ending, as Codex's `SourceFile` splits them.

    CRLF, CR and LF all end a line; the last line's ending is `""` when the
    file does not end with one. `endings` is `None` for a file without CR:
    then every line ends with LF (but maybe the last), and the file is
    rebuilt with one join. The fuzzy forms of the lines are computed once,
    when first needed.
    """

    def __init__(self, text: str) -> None:
        self.endings: list[str] | None = None
        self.preferred = "\n"
        if "\r" not in text:
            # The common case: no regular expression, no list of endings.
            self.lines = text.split("\n")
            if self.lines[-1] == "":
                self.lines.pop()
        else:
            self.lines = _LINE_BREAK.split(text)
            self.endings = [*_LINE_BREAK.findall(text), ""]
            if self.lines[-1] == "":
                self.lines.pop()
                self.endings.pop()
            # New lines take the file's first ending.
            self.preferred = self.endings[0] or "\n"
        self._keyed: dict[Callable[[str], str], list[str]] = {}

    def keyed(self, key: Callable[[str], str]) -> list[str]:
        """The lines as `key` makes them."""
        if key not in self._keyed:
            self._keyed[key] = [key(line) for line in self.lines]
        return self._keyed[key]


def _find(haystack: list[str], pattern: list[str], start: int, last: int) -> int | None:
    """The first `i` in `start..last` where `haystack[i:i+len(pattern)] == pattern`."""
    first = pattern[0]
    size = len(pattern)
    index = start
    while index <= last:
        try:
            # `list.index` runs in C: only the lines equal to the first are compared further.
            index = haystack.index(first, index, last + 1)
        except ValueError:
            return None
        if size == 1 or haystack[index + 1 : index + size] == pattern[1:]:
            return index
        index += 1
    return None


def _seek(source: _Lines, pattern: Sequence[str], start: int, eof: bool) -> int | None:
    """Codex's `seek_sequence`: where `pattern` starts at or after `start`, strictest match first.

    With `eof`, the search starts where the pattern would end the file (or at
    `start`, if later), as Codex does when it preserves line endings.
    """
    if not pattern:
        return start
    lines = source.lines
    if len(pattern) > len(lines):
        return None
    last = len(lines) - len(pattern)
    if eof:
        start = max(last, start)
    found = _find(lines, list(pattern), start, last)
    if found is not None:
        return found
    for key in _KEYS:
        found = _find(source.keyed(key), [key(line) for line in pattern], start, last)
        if found is not None:
            return found
    return None


def apply_chunks(text: str, chunks: Sequence[UpdateChunk], path: str = "the file") -> str:
    """`text` with the update `chunks` applied, as Codex applies them keeping line endings.

    Each chunk's anchor (its `@@` line), then its old lines, are sought
    below the previous chunk; a chunk with no old lines appends its new lines
    at the end of the file (as Codex does). Lines kept (context and all
    others) keep their text and ending; new lines take the file's first
    ending. Every line of the result ends with one.

    Raises:
        PatchError: An anchor or a chunk's old lines were not found; the
            message names `path` and the lines.
    """
    source = _Lines(text)
    total = len(source.lines)
    replacements: list[tuple[int, int, Sequence[str]]] = []
    index = 0
    for chunk in chunks:
        if chunk.anchor is not None:
            found = _seek(source, (chunk.anchor,), index, False)
            if found is None:
                raise PatchError(
                    f"Failed to find context {chunk.anchor!r} in {path}"
                    + (f" (the hunk at line {chunk.line} of the patch)" if chunk.line else ""),
                    chunk.line or None,
                )
            index = found + 1
        if not chunk.old_lines:
            replacements.append((total, 0, chunk.new_lines))
            continue
        pattern: Sequence[str] = chunk.old_lines
        new: Sequence[str] = chunk.new_lines
        found = _seek(source, pattern, index, chunk.end_of_file)
        if found is None and pattern[-1] == "":
            # A last empty line stands for the file's final newline, which is no line here.
            pattern = pattern[:-1]
            if new and new[-1] == "":
                new = new[:-1]
            found = _seek(source, pattern, index, chunk.end_of_file)
        if found is None:
            where = f" (the hunk at line {chunk.line} of the patch)" if chunk.line else ""
            raise PatchError(
                f"Failed to find expected lines in {path}{where}:\n" + "\n".join(chunk.old_lines),
                chunk.line or None,
            )
        # Context lines stay as they are in the file (their exact text and
        # ending): only the runs between them are replaced.
        old_start = new_start = 0
        for old_context, new_context in chunk.context:
            if old_context >= len(pattern) or new_context >= len(new):
                break
            if old_start != old_context or new_start != new_context:
                replacements.append(
                    (found + old_start, old_context - old_start, new[new_start:new_context])
                )
            old_start, new_start = old_context + 1, new_context + 1
        if old_start != len(pattern) or new_start != len(new):
            replacements.append((found + old_start, len(pattern) - old_start, new[new_start:]))
        index = found + len(pattern)
    replacements.sort(key=lambda replacement: replacement[0])
    return _rebuild(source, replacements)


def _rebuild(source: _Lines, replacements: list[tuple[int, int, Sequence[str]]]) -> str:
    """The file with the replacements `(first line, lines replaced, new lines)` made, in order.

    Lines kept keep their endings; new lines take the preferred one; a last
    line without one gets it (Codex ends every line of an updated file).
    """
    lines, endings, preferred = source.lines, source.endings, source.preferred
    out: list[str] = []
    out_endings: list[str] = []
    position = 0
    for start, length, new in replacements:
        out += lines[position:start]
        out += new
        if endings is not None:
            out_endings += endings[position:start]
            out_endings += [preferred] * len(new)
        position = max(position, start + length)
    out += lines[position:]
    if not out:
        return ""
    if endings is None:
        return "\n".join(out) + "\n"
    out_endings += endings[position:]
    return "".join(
        [line + (ending or preferred) for line, ending in zip(out, out_endings, strict=True)]
    )


# --- applying a patch through an executor ------------------------------------


@attrs.frozen
class _Unreadable:
    """A path whose file could not be read (a folder, say): `reason` says why."""

    reason: str


class _Unread:
    """A path not read at all: the patch only adds that one file, so nothing needs its bytes."""


_UNREAD = _Unread()

_Original: TypeAlias = bytes | _Unreadable | _Unread | None
"""What a path held before the patch: bytes, no file (`None`), or why it is not known."""


def _reason(error: NonZeroExit, path: str) -> str:
    """A failure's reason in words: the OS error of a file command, else the command's stderr."""
    if error.output.exit_code is None:
        # A file command's failure reads `path: reason` on every backend.
        return error.message.removeprefix(f"{path}: ")
    said = error.output.stderr.decode("utf-8", "replace").strip()
    return said or error.message


def _absent(reason: str) -> bool:
    # "Not a directory": a folder on the way is a file, so there is no file there either.
    return reason in ("No such file or directory", "Not a directory")


async def _read(executor: ToolExecutor, path: str) -> bytes | _Unreadable | None:
    """The file's bytes, `None` when there is none, or why it could not be read."""
    try:
        output = await executor.exec_cmd(Command.read_file(path))
    except NonZeroExit as error:
        reason = _reason(error, path)
        return None if _absent(reason) else _Unreadable(reason)
    return output.stdout


@attrs.frozen
class _Plan:
    """What a patch does: each changed path's final content (`None`: removed), in order."""

    final: dict[str, bytes | None]
    result: PatchResult


def _refused(what: str, path: str, reason: str, op: PatchOp) -> PatchError:
    return PatchError(
        f"{what} {path}: {reason} (line {op.line} of the patch); {_NOT_APPLIED}", op.line or None
    )


def _plan(ops: Sequence[PatchOp], originals: dict[str, _Original]) -> _Plan:
    """Run the patch on the files' contents in memory, as Codex runs it on the disk: op by op.

    Raises:
        PatchError: An operation cannot be done (a missing file, a hunk that
            does not apply).
    """
    state: dict[str, _Original] = dict(originals)
    order: dict[str, None] = {}
    added: list[str] = []
    modified: list[str] = []
    deleted: list[str] = []
    moved: list[tuple[str, str]] = []

    def change(path: str, content: bytes | None) -> None:
        state[path] = content
        # A path changes where the patch last touched it: a file deleted
        # before a folder of its name is made goes first, as in Codex.
        order.pop(path, None)
        order[path] = None

    for op in ops:
        current = state[op.path]
        if isinstance(op, AddFile):
            if isinstance(current, _Unreadable):
                raise _refused("Failed to write file", op.path, current.reason, op)
            change(op.path, op.content.encode("utf-8"))
            added.append(op.path)
            continue
        if isinstance(current, _Unreadable) or current is None:
            what = (
                "Failed to delete file"
                if isinstance(op, DeleteFile)
                else "Failed to read file to update"
            )
            reason = "No such file or directory" if current is None else current.reason
            raise _refused(what, op.path, reason, op)
        assert isinstance(current, bytes)  # only a lone Add File leaves a path unread
        if isinstance(op, DeleteFile):
            change(op.path, None)
            deleted.append(op.path)
            continue
        # Bytes that are not UTF-8 ride along as surrogates and come back as they were.
        text = current.decode("utf-8", "surrogateescape")
        try:
            updated = apply_chunks(text, op.chunks, op.path)
        except PatchError as error:
            raise PatchError(f"{error}\n({_NOT_APPLIED})", error.line) from None
        content = updated.encode("utf-8", "surrogateescape")
        target = op.path if op.move_to is None else op.move_to
        if target == op.path:
            # Codex would write the file, then remove it as the move's source.
            change(op.path, content)
        else:
            there = state[target]
            if isinstance(there, _Unreadable):
                raise _refused("Failed to write file", target, there.reason, op)
            change(target, content)
            change(op.path, None)
            moved.append((op.path, target))
        modified.append(target)
    final: dict[str, bytes | None] = {}
    for path in order:
        now = state[path]
        assert now is None or isinstance(now, bytes)
        if now != originals[path]:
            final[path] = now
    return _Plan(final, PatchResult(tuple(added), tuple(modified), tuple(deleted), tuple(moved)))


@attrs.define
class _Change:
    """A change under way or made, and what undoes it."""

    path: str
    before: bytes | None  # `None`: there was no file
    folders: list[str]  # folders a write makes for the file, deepest first


async def _missing_folders(executor: ToolExecutor, path: str) -> list[str]:
    """The folders above `path` that do not exist yet, deepest first: a write will make them."""
    missing: list[str] = []
    folder = path.rpartition("/")[0]
    while folder:
        try:
            await executor.exec_cmd(Command.read_file(folder))
        except NonZeroExit as error:
            if not _absent(_reason(error, folder)):
                break  # there: a folder reads as "Is a directory"
        else:
            break  # a file: the write will fail, and make nothing
        missing.append(folder)
        folder = folder.rpartition("/")[0]
    return missing


def _rm(*args: str) -> Command:
    # The executors have no removal of their own: `rm` (or `rmdir`), in the
    # workdir, without a shell. Each path was read through the executor
    # first, so a confined executor has already refused one that leads out.
    return Command.exec([*args])


async def _undo(executor: ToolExecutor, changes: list[_Change]) -> list[str]:
    """Undo `changes`, last first; what could not be undone, in words."""
    failed: list[str] = []
    for change in reversed(changes):
        try:
            if change.before is None:
                # `-f`: a change cut short by a cancellation may not have been made.
                await executor.exec_cmd(_rm("rm", "-f", "--", change.path))
            else:
                await executor.exec_cmd(Command.write_file(change.path, change.before))
        except CommandError as error:
            failed.append(f"{change.path} ({error.message})")
            continue
        if change.folders:
            # Left alone if not empty: then something else put a file there.
            with contextlib.suppress(CommandError):
                await executor.exec_cmd(_rm("rmdir", "--", *change.folders))
    return failed


async def _make(executor: ToolExecutor, plan: _Plan, originals: dict[str, _Original]) -> None:
    """Make the planned changes in order; if one fails, undo those made, then raise."""
    changes: list[_Change] = []
    # With one change there is nothing to undo: each write and removal is atomic.
    undoable = len(plan.final) > 1
    current = ""
    try:
        for path, content in plan.final.items():
            current = path
            before = originals[path]
            if isinstance(before, _Unread):
                assert content is not None
                await executor.exec_cmd(Command.write_file(path, content))
                continue
            assert not isinstance(before, _Unreadable)
            folders = await _missing_folders(executor, path) if before is None and undoable else []
            # Recorded before it is made: a cancellation may land once it is.
            changes.append(_Change(path, before, folders))
            if content is None:
                await executor.exec_cmd(_rm("rm", "--", path))
            else:
                await executor.exec_cmd(Command.write_file(path, content))
    except BaseException as error:
        refused = isinstance(error, NonZeroExit)
        folders = []
        if refused and changes and changes[-1].path == current:
            # A refused change was not made (a write is atomic, `rm` removes or
            # not), though a write may have made its folders first.
            folders = changes.pop().folders
        with anyio.CancelScope(shield=True):
            # Undone even when the caller is cancelled: a patch never stays half-applied.
            if folders:
                with contextlib.suppress(CommandError):
                    await executor.exec_cmd(_rm("rmdir", "--", *folders))
            failed = await _undo(executor, changes)
        if not isinstance(error, NonZeroExit):
            raise
        what = "delete" if plan.final[current] is None else "write"
        message = f"Failed to {what} file {current}: {_reason(error, current)}; "
        if failed:
            message += (
                "the patch was not applied, but undoing the changes made before it failed for "
                + ", ".join(failed)
            )
        elif changes:
            message += f"{_NOT_APPLIED} (the {len(changes)} change(s) made before were undone)"
        else:
            message += _NOT_APPLIED
        raise PatchError(message) from error


async def apply_patch(executor: ToolExecutor, text: str) -> PatchResult:
    """Apply a V4A patch (Codex's `apply_patch` format) to the files of `executor`'s workdir.

    Every file the patch needs is read through `executor` first, and every
    new content computed in memory; only then are files written (each write
    atomic) and removed (`rm`, run by `executor`), in the patch's order. If
    any hunk fails, nothing is written. If a change fails midway, those
    already made are undone: files get their former bytes back, added files
    and the folders made for them go. Parent folders are made as needed.

    Returns:
        What changed; its `str()` is Codex's summary, for the model.

    Raises:
        PatchError: The patch is malformed, does not apply, or a change
            failed (and those before it were undone); the message is for
            the model.
        CommandError: The executor refused or failed otherwise (a policy, a
            timeout, a lost connection); changes made were undone first.
    """
    ops = parse_patch(text)
    if not ops:
        raise PatchError(
            "No files were modified: the patch holds no '*** Add File', '*** Delete File' "
            "or '*** Update File' section"
        )
    paths = {path: None for op in ops for path in _paths(op)}
    originals: dict[str, _Original] = {}
    if len(ops) == 1 and isinstance(ops[0], AddFile):
        # Its old bytes could only serve to put it back after a later change failed.
        originals[ops[0].path] = _UNREAD
    else:
        for path in paths:
            originals[path] = await _read(executor, path)
    plan = _plan(ops, originals)
    await _make(executor, plan, originals)
    return plan.result


def _paths(op: PatchOp) -> tuple[str, ...]:
    if isinstance(op, UpdateFile) and op.move_to is not None:
        return (op.path, op.move_to)
    return (op.path,)
