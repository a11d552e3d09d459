"""The log tailer: a read-only streaming tool that reads and follows log files on any executor.

```python
tool = LogTailerTool(DefaultContext.from_executor(ex))
request = LogTailerInput(
    path="logs/*.log",
    follow=True,
    format=LogFormat.JSON,
    filter=LogFilter(level=LogLevel.ERROR, pattern="timeout"),
)
async with StreamingToolSession(tool, request) as session:
    async for entry in session:  # LogEntry(timestamp, level, message, fields, source, line, raw)
        print(entry.level, entry.message)
    result = await session.finalize()  # .final is a LogResult
```

How it reads:

- Files are found by `path`, a path or a glob, relative to the executor's
  workdir; while following, the glob is listed again at every look, so new
  files are picked up (and read from their start).
- On a `LocalExecutor` (alone, or under wrappers that only check commands:
  scopes, `ReadOnly`, rules), files are read directly, each held open, and
  followed through inotify (`executor._builtins.logtail_sources`); every
  wrapper's `check` sees a `Command.read_file` of the path first, so a policy
  that refuses the read refuses the tail. On any other executor (Docker,
  SSH, wrappers that rewrite output) they are read through one `sh` session
  on it, by polling.
- Each file is tracked by device and inode. Rotation is seen three ways: a
  new file at the path (rename-and-create, logrotate's default, and
  delete-and-recreate), whose predecessor is read to its end first; and a
  file shorter than what was read, or whose first bytes changed
  (copytruncate), whose unread end is read from the copy beside it (a file
  in the same folder whose name begins with the log's and whose first bytes
  are the log's), then the file from its start.
- Lines are grouped into entries (`multiline`): a line that is no line of
  the format and looks like the rest of an entry (a stack trace's lines)
  joins the entry before it. While following, an entry is handed over once
  the next one begins, or when nothing more has come for a short grace
  (20 ms by default), so a stack trace written in a few writes stays whole.
- With a journal and a key (`StreamingToolSession(tool, input,
  journal=journal, key=key)`), the position after every entry handed over
  is recorded (per file, by inode; `logtail_offsets`), and a session with
  the same key after a crash continues from there: no entry is handed over
  twice, none is skipped. The tool is `resumable`, so such a session reruns
  an interrupted key without `on_interrupted="rerun"`.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import os
import re
import time
from collections.abc import Mapping
from typing import Any, ClassVar, Self

import anyio
import anyio.lowlevel
import attrs

from executor._builtins.logformats import (
    CONTINUATION_LINES,
    AccessLogFormat,
    LineFormat,
    LogFormat,
    LogLevel,
    Parsed,
    access_log_level,
    detect_format,
    is_continuation,
    json_level_finder,
    json_level_keys,
    json_may_reach,
    line_format,
)
from executor._builtins.logtail_offsets import (
    FilePosition,
    PositionFile,
    head_digest,
    positions_path,
)
from executor._builtins.logtail_sources import FileInfo, FileSource, LocalFiles, ShellFiles
from executor._core.base import CheckedExecutor, ToolExecutor
from executor._core.commands import Command
from executor._core.errors import ExecutorError, InvalidArgument, ToolStreamError
from executor._core.stdin import StdinEvent
from executor._local.executor import LocalExecutor
from executor._tools.handle import Progress, TaskHandle, ToolChannel
from executor._tools.policies import Window
from executor._tools.replay import current_tool_run
from executor._tools.tool import StreamingTool
from executor._tools.tools import AgentContext
from executor._wrappers.read_only import ReadOnly

# Bytes read from a file at a time: large enough that a read costs little per
# line, small enough that the event loop gets its turn between blocks.
_BLOCK = 256 * 1024
# How many first bytes of a file tell it apart from another file, or from
# itself truncated and written again.
_HEAD = 64
# The first bytes a format is detected from.
_SNIFF = 8192


class StartAt(enum.Enum):
    """Where a tail starts in each file that exists when it starts.

    Files that appear later are always read from their start.
    """

    START = "start"
    END = "end"
    LAST = "last"


@dataclasses.dataclass(frozen=True, kw_only=True)
class LogFilter:
    """Which entries a tail hands over; all the given conditions must hold.

    Attributes:
        level: The minimum level (`"error"` passes error, critical, alert
            and emergency). An entry with no level does not pass.
        pattern: A regular expression (Python's syntax) searched for in the
            entry's raw text, all its lines.
        fields: Field values the entry must have, compared as text (a
            number as JSON writes it: `{"status": "500"}`); a dotted name
            reaches into nested objects (`"http.method"`). `level`,
            `message` and `timestamp` name the entry's own when no field
            has that name.
        ignore_case: Match `pattern` regardless of case.
    """

    level: LogLevel | None = None
    pattern: str | None = None
    fields: dict[str, str] = dataclasses.field(default_factory=dict)
    ignore_case: bool = False

    def __post_init__(self) -> None:
        if self.pattern is not None:
            try:
                re.compile(self.pattern)
            except re.error as error:
                raise InvalidArgument(
                    self.pattern, f"pattern is no valid regular expression: {error}"
                ) from None
        for name, value in self.fields.items():
            if not isinstance(name, str) or not name or not isinstance(value, str):
                raise InvalidArgument(
                    dict(self.fields), "fields maps field names to the text of their values"
                )


@dataclasses.dataclass(frozen=True, kw_only=True)
class LogTailerInput:
    """What to tail, and how.

    Attributes:
        path: A log file, or a glob (`logs/*.log`, `/var/log/app-*.log`),
            relative to the executor's workdir unless absolute.
        follow: Keep reading what is added (as `tail -F`), until cancelled,
            `timeout_secs` or `max_entries`; otherwise read to the end and stop.
        start: Where to begin in the files that exist now: `"start"`, `"end"`
            or `"last"` (the last `last_lines` lines). By default the start,
            or the end when following.
        last_lines: How many lines `"last"` begins with.
        format: The lines' format; `"auto"` detects it per file from its first lines.
        filter: Which entries to hand over; all by default.
        multiline: Keep continuation lines (a stack trace) with the entry they belong to.
        max_entries: Stop after handing over this many entries.
        timeout_secs: Stop following after this many seconds (the tail ends
            normally, with its result).
    """

    path: str
    follow: bool = False
    start: StartAt | None = None
    last_lines: int = 10
    format: LogFormat = LogFormat.AUTO
    filter: LogFilter | None = None
    multiline: bool = True
    max_entries: int | None = None
    timeout_secs: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.path, str) or not self.path.strip() or "\0" in self.path:
            raise InvalidArgument(self.path, "path must name a file or a glob")
        if "\n" in self.path:
            raise InvalidArgument(self.path, "path must not contain a newline")
        if isinstance(self.last_lines, bool) or self.last_lines < 0:
            raise InvalidArgument(self.last_lines, "last_lines must be 0 or more")
        if self.max_entries is not None and self.max_entries < 1:
            raise InvalidArgument(self.max_entries, "max_entries must be at least 1")
        if self.timeout_secs is not None and not self.timeout_secs > 0:
            raise InvalidArgument(self.timeout_secs, "timeout_secs must be positive")


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class LogEntry:
    """One log entry: its first line and the continuation lines that belong to it.

    Attributes:
        timestamp: When it was logged, as the line gives it (ISO 8601 where
            the format allows: CLF's and syslog's dates are converted, epoch
            numbers too), or `None`.
        level: Its level, or `None` when the line names none.
        message: The message, followed by the continuation lines.
        fields: Everything else the format gives (a JSON object's keys, a
            logfmt line's pairs, syslog's header and structured data, an
            access log's request, status and size).
        source: The file it was read from, as the executor names it.
        line: The number of its first line in that file, from 1.
        raw: The entry's lines as read, joined by newlines.
    """

    timestamp: str | None
    level: LogLevel | None
    message: str
    fields: dict[str, Any]
    source: str
    line: int
    raw: str


@dataclasses.dataclass(frozen=True, kw_only=True)
class LogResult:
    """How a tail went.

    Attributes:
        lines_read: Lines read, in all files (in this run, when resumed).
        lines_matched: Entries handed over (a multi-line entry counts once).
        files: Every file read, as the executor names it.
        rotations: Rotations seen (a new file at a path, or a file truncated).
    """

    lines_read: int
    lines_matched: int
    files: list[str]
    rotations: int


# --- the engine -----------------------------------------------------------------------


@attrs.define(eq=False)
class _File:
    """One file being tailed, known by its inode."""

    info: FileInfo
    handle: object
    reader: LineFormat | None
    offset: int = 0  # bytes of complete lines taken in
    read_offset: int = 0  # where the next read starts
    line: int = 0  # complete lines taken in
    size: int = -1  # the size last seen
    partial: bytes = b""  # an incomplete last line
    # The entry being assembled: [first line, start offset, lines, token, in a trace]
    pending: list[Any] | None = None
    pending_since: float = 0.0
    head: bytes = b""
    retired: bool = False
    quiet_since: float = 0.0

    @property
    def key(self) -> tuple[int, int]:
        return (self.info.dev, self.info.ino)


@attrs.frozen
class _Item:
    """An entry on its way to the reader, with the position to record once it is handed over."""

    entry: LogEntry
    dev: int
    ino: int
    offset: int
    line: int
    head: bytes
    path: str


def _text(value: object) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _lookup(parsed: Parsed, name: str) -> object:
    fields: Any = parsed.fields
    if name in fields:
        return fields[name]
    if "." in name:
        value: Any = fields
        for part in name.split("."):
            if not isinstance(value, Mapping) or part not in value:
                break
            value = value[part]
        else:
            return value
    if name == "level":
        return None if parsed.level is None else parsed.level.value
    if name == "message":
        return parsed.message
    if name == "timestamp":
        return parsed.timestamp
    return _MISSING


_MISSING = object()
_NOTHING = re.compile(r"(?!)")
_MAYBE_CONTINUED = re.compile(r"\n[ \t\nA-Za-z_$.]")


@attrs.define(eq=False)
class _Tail:
    """One run of the log tailer: finds, reads, follows and parses the files."""

    source: FileSource
    input: LogTailerInput
    positions: PositionFile | None
    shown_path: str
    grace: float
    linger: float
    files: dict[tuple[int, int], _File] = attrs.field(factory=dict)
    by_path: dict[str, tuple[int, int]] = attrs.field(factory=dict)
    seen: dict[str, None] = attrs.field(factory=dict)
    lines_read: int = 0
    matched: int = 0
    rotations: int = 0
    sent: int = 0
    delivered_count: int = 0
    _out: list[_Item] = attrs.field(factory=list)
    _pattern: re.Pattern[str] | None = None
    _rank: int | None = None
    _fields: tuple[tuple[str, str], ...] = ()
    _fixed: LineFormat | None = None

    def __attrs_post_init__(self) -> None:
        wanted = self.input.filter
        if wanted is not None:
            if wanted.pattern is not None:
                flags = re.IGNORECASE if wanted.ignore_case else 0
                self._pattern = re.compile(wanted.pattern, flags)
            if wanted.level is not None:
                self._rank = wanted.level.rank
            self._fields = tuple(wanted.fields.items())
        if self.input.format is not LogFormat.AUTO:
            self._fixed = line_format(self.input.format)

    # --- positions --------------------------------------------------------------------

    def _position(self, file: _File, offset: int, line: int) -> FilePosition:
        return FilePosition(
            dev=file.info.dev,
            ino=file.info.ino,
            offset=offset,
            line=line,
            head=head_digest(file.head),
            head_length=len(file.head),
            path=file.info.path,
        )

    def delivered(self, item: _Item) -> None:
        """Record that `item` was handed over: a resumed tail starts after it."""
        self.delivered_count += 1
        if self.positions is not None:
            self.positions.record(
                FilePosition(
                    dev=item.dev,
                    ino=item.ino,
                    offset=item.offset,
                    line=item.line,
                    head=head_digest(item.head),
                    head_length=len(item.head),
                    path=item.path,
                )
            )

    def _record_all(self) -> None:
        """Record every file's safe position, once everything sent has been handed over."""
        if self.positions is None or self.sent != self.delivered_count:
            return
        for file in self.files.values():
            if file.pending is not None:
                self.positions.record(self._position(file, file.pending[1], file.pending[0] - 1))
            else:
                self.positions.record(self._position(file, file.offset, file.line))

    # --- entries ----------------------------------------------------------------------

    def _reader(self, file: _File) -> LineFormat:
        reader = file.reader
        assert reader is not None
        return reader

    def _close_entry(self, file: _File, pending: list[Any], end: int, end_line: int) -> None:
        """Filter the finished entry `pending`; queue it if it passes."""
        lines: list[str] = pending[2]
        raw = lines[0] if len(lines) == 1 else "\n".join(lines)
        pattern = self._pattern
        if pattern is not None and pattern.search(raw) is None:
            return
        token = pending[3]
        reader = self._reader(file)
        rank = self._rank
        # Most lines of a JSON log are below the level asked for: a search for
        # their level values costs a fraction of parsing them.
        if rank is not None and token:
            if reader.format is LogFormat.JSON and not json_may_reach(lines[0], rank):
                return
            # An access log's level is its status, in the match already made.
            access = isinstance(token, re.Match) and isinstance(reader, AccessLogFormat)
            if access and access_log_level(token).rank < rank:
                return
        parsed = (
            reader.parse(lines[0], token)
            if token
            else line_format(LogFormat.RAW).parse(lines[0], True)
        )
        if rank is not None and (parsed.level is None or parsed.level.rank < rank):
            return
        for name, wanted in self._fields:
            value = _lookup(parsed, name)
            if value is _MISSING or _text(value) != wanted:
                return
        message = parsed.message if len(lines) == 1 else "\n".join([parsed.message, *lines[1:]])
        entry = LogEntry(
            timestamp=parsed.timestamp,
            level=parsed.level,
            message=message,
            fields=parsed.fields,
            source=file.info.path,
            line=pending[0],
            raw=raw,
        )
        self._out.append(
            _Item(entry, file.info.dev, file.info.ino, end, end_line, file.head, file.info.path)
        )

    def _take(self, file: _File, data: bytes) -> None:
        """Split `data` (read from the file's `read_offset`) into lines and lines into entries."""
        if file.partial:
            data = file.partial + data
            file.partial = b""
        # All but the last complete line may go the fast way; the last one stays
        # to be assembled, since continuation lines may follow it.
        last = data.rfind(b"\n", 0, max(0, data.rfind(b"\n")))
        if last > 0 and self._skim(file, data[: last + 1]):
            data = data[last + 1 :]
        parts = data.split(b"\n")
        file.partial = parts.pop()
        if not parts:
            return
        reader = self._reader(file)
        start = reader.start
        raw = reader.format is LogFormat.RAW
        multiline = self.input.multiline
        offset = file.offset
        number = file.line
        pending = file.pending
        close = self._close_entry
        for chunk in parts:
            end = offset + len(chunk) + 1
            number += 1
            line = chunk.decode("utf-8", "replace")
            if line[-1:] == "\r":
                line = line[:-1]
            if raw:
                if multiline and pending is not None and is_continuation(line, pending[4]):
                    pending[2].append(line)
                    pending[4] = True
                else:
                    if pending is not None:
                        close(file, pending, offset, number - 1)
                    pending = [number, offset, [line], True, False]
            else:
                token = start(line)
                if token:
                    if pending is not None:
                        close(file, pending, offset, number - 1)
                    pending = [number, offset, [line], token, False]
                elif multiline and pending is not None and is_continuation(line, pending[4]):
                    pending[2].append(line)
                    pending[4] = True
                else:
                    if pending is not None:
                        close(file, pending, offset, number - 1)
                    pending = [number, offset, [line], None, False]
            offset = end
        self.lines_read += len(parts)
        file.offset = offset
        file.line = number
        file.pending = pending
        file.pending_since = time.monotonic()

    def _take_read(self, file: _File, data: bytes, count: int) -> None:
        """Take in `data`, read as `count` bytes of the file from its `read_offset`."""
        file.read_offset += count
        self._take(file, data)
        if count != len(data):
            # Rewritten on the way (redacted): offsets within the block follow the
            # text as it came, and the file's own offset is put right at its end.
            file.offset += count - len(data)

    def _skim(self, file: _File, block: bytes) -> bool:
        """Take in whole lines the way grep does, looking only at those that may pass; or False.

        Only for a filter with a pattern (or a JSON log and a level), a block of
        ASCII text, and no continuation lines in it: then every line is an
        entry of its own, and only the lines the pattern (or a level value)
        is found on can pass. Those go through `_close_entry` as any would.
        """
        pattern = self._pattern
        reader = self._reader(file)
        by_level = self._rank is not None and reader.format is LogFormat.JSON
        if pattern is None and not by_level:
            return False
        if not block.isascii():
            return False  # character offsets would not be byte offsets
        text = block.decode("ascii")
        # A line that begins with a letter, a blank or a dot might continue an
        # entry: only then is the costlier search for one needed (never in
        # JSON, whose lines begin with "{", nor in access logs).
        if self.input.multiline:
            framed = "\n" + text
            if _MAYBE_CONTINUED.search(framed) and CONTINUATION_LINES.search(framed):
                return False
        if file.pending is not None:
            pending, file.pending = file.pending, None
            self._close_entry(file, pending, file.offset, file.line)
        base, number, counted = file.offset, file.line, 0
        start = reader.start
        close = self._close_entry
        position = 0
        if pattern is not None:
            finder = pattern.search
        else:
            assert self._rank is not None
            # No level key anywhere in the block: no line of it passes.
            keys = json_level_keys(text)
            finder = json_level_finder(self._rank, keys).search if keys else _NOTHING.search
        # With a pattern, a JSON line below the level is dropped here at once
        # (its number need not be known: the next count reaches over it).
        rank = self._rank if by_level and pattern is not None else None
        while (found := finder(text, position)) is not None:
            begin = text.rfind("\n", 0, found.start()) + 1
            end = text.find("\n", found.start())
            if end < 0:
                break
            position = end + 1
            if rank is not None and not json_may_reach(text[begin:end], rank):
                continue
            number += text.count("\n", counted, begin) + 1
            counted = position
            line = text[begin:end]
            if line[-1:] == "\r":
                line = line[:-1]
            token = start(line)
            close(
                file, [number, base + begin, [line], token or None, False], base + position, number
            )
        lines = text.count("\n")
        self.lines_read += lines
        file.offset = base + len(block)
        file.line += lines
        return True

    def _flush_pending(self, file: _File, *, partial: bool = False) -> None:
        """Close the entry being assembled (and, at the very end, an unterminated last line)."""
        if partial and file.partial:
            self._take(file, b"\n")
            # The newline was ours, not the file's: the offset stays at its end.
            file.offset -= 1
        if file.pending is not None:
            pending, file.pending = file.pending, None
            self._close_entry(file, pending, file.offset, file.line)

    async def _send(self, channel: ToolChannel[_Item]) -> bool:
        """Hand the queued entries over; False once `max_entries` are handed over."""
        out, self._out = self._out, []
        limit = self.input.max_entries
        for item in out:
            if limit is not None and self.matched >= limit:
                return False
            self.sent += 1
            self.matched += 1
            await channel.send(item)
        return limit is None or self.matched < limit

    # --- files ------------------------------------------------------------------------

    async def _detect(self, file: _File, final: bool) -> bool:
        """Choose the file's format from its first lines; False while there are none yet."""
        if file.reader is not None:
            return True
        if self._fixed is not None:
            file.reader = self._fixed
            return True
        head = await self.source.head(file.handle, file.info, _SNIFF)
        if head is None:
            # Moved between two looks: detected once discovery has found it again.
            return False
        text = head.decode("utf-8", "replace")
        lines = text.split("\n")
        if not final and len(head) < _SNIFF:
            lines = lines[:-1]  # the last line may still be written
        found = detect_format(line.rstrip("\r") for line in lines)
        if found is None:
            if not final:
                return False
            found = LogFormat.RAW
        file.reader = line_format(found)
        return True

    async def _open(
        self, info: FileInfo, *, offset: int | None, line: int | None, start: StartAt
    ) -> _File | None:
        """Start tracking the file `info`; from `offset`/`line` if given, else from `start`."""
        try:
            handle = await self.source.open(info)
        except FileNotFoundError:
            return None
        except OSError:
            return None
        file = _File(info=info, handle=handle, reader=None)
        file.head = await self.source.head(handle, info, _HEAD) or b""
        size = await self.source.size(handle, info)
        size = info.size if size is None else size
        if offset is None:
            if start is StartAt.START:
                offset = 0
            elif start is StartAt.END:
                offset = size
                if size:
                    # A last line still being written is read whole, from its start.
                    offset = await self.source.last_lines(handle, info, size, 0)
                    tail = await self.source.read(handle, info, max(0, size - 1), 1)
                    if tail is None or tail[0] != b"\n":
                        offset = await self.source.last_lines(handle, info, size, 1)
            else:
                offset = await self.source.last_lines(handle, info, size, self.input.last_lines)
            line = await self.source.count_lines(handle, info, offset) if offset else 0
        file.offset = file.read_offset = offset
        file.line = line or 0
        file.quiet_since = time.monotonic()
        self.files[file.key] = file
        self.by_path[info.path] = file.key
        self.seen.setdefault(info.path)
        return file

    def _drop(self, file: _File) -> None:
        self.files.pop(file.key, None)
        if self.by_path.get(file.info.path) == file.key:
            del self.by_path[file.info.path]
        self.source.close(file.handle)
        if self.positions is not None and self.sent == self.delivered_count:
            self.positions.forget(file.info.dev, file.info.ino)

    async def _copy_of(self, file: _File, upto: int) -> FileInfo | None:
        """The rotated copy of `file` (copytruncate): beside it, named after it, its first bytes."""
        if not file.head:
            return None
        escaped = _glob_escape(file.info.path)
        for candidate in await self.source.glob(escaped + "?*"):
            if candidate.path == file.info.path or candidate.size < upto:
                continue
            handle = await self.source.open(candidate)
            try:
                if await self.source.head(handle, candidate, len(file.head)) == file.head:
                    return candidate
            finally:
                self.source.close(handle)
        return None

    async def _read_copy(self, file: _File, copy: FileInfo, channel: ToolChannel[_Item]) -> bool:
        """Read the end of `file` that only its rotated copy still holds."""
        handle = await self.source.open(copy)
        try:
            while file.read_offset < copy.size:
                read = await self.source.read(handle, copy, file.read_offset, _BLOCK)
                if read is None or not read[1]:
                    break
                self._take_read(file, *read)
                if not await self._send(channel):
                    return False
        finally:
            self.source.close(handle)
        return True

    async def _truncated(self, file: _File, channel: ToolChannel[_Item]) -> bool:
        """The file was truncated (copytruncate): read its end from the copy, then start over."""
        copy = await self._copy_of(file, file.read_offset)
        if copy is not None and not await self._read_copy(file, copy, channel):
            return False
        self._flush_pending(file, partial=True)
        if not await self._send(channel):
            return False
        self.rotations += 1
        file.offset = file.read_offset = 0
        file.line = 0
        file.partial = b""
        file.head = await self.source.head(file.handle, file.info, _HEAD) or b""
        file.reader = None if self._fixed is None else self._fixed
        return True

    async def _read(self, file: _File, channel: ToolChannel[_Item], *, final: bool) -> bool:
        """Read what the file has beyond what was read; False once the tail is to end."""
        if not await self._read_new(file, channel, final=final):
            return False
        if file.retired and file.pending is not None:
            # Rotated away: its last entry goes before the lines of the file after it.
            self._flush_pending(file)
            return await self._send(channel)
        return True

    async def _read_new(self, file: _File, channel: ToolChannel[_Item], *, final: bool) -> bool:
        size = await self.source.size(file.handle, file.info)
        if size is None:
            return True
        if size != file.size:
            known, file.size = file.size, size
            if size < file.read_offset:
                if not await self._truncated(file, channel):
                    return False
            elif len(file.head) < _HEAD or file.read_offset:
                head = await self.source.head(file.handle, file.info, _HEAD)
                if head is None:
                    # Renamed away while we looked, not truncated: discovery finds
                    # where it went, and the next look checks its head again.
                    file.size = known
                    return True
                if head[: len(file.head)] != file.head:
                    if not await self._truncated(file, channel):
                        return False
                else:
                    file.head = head
        if file.read_offset >= size:
            return True
        if not await self._detect(file, final):
            return True
        while file.read_offset < size:
            read = await self.source.read(file.handle, file.info, file.read_offset, _BLOCK)
            if read is None or not read[1]:
                break
            file.quiet_since = time.monotonic()
            self._take_read(file, *read)
            if not await self._send(channel):
                return False
            await anyio.lowlevel.checkpoint()
        return True

    # --- discovery --------------------------------------------------------------------

    async def _list(self) -> list[FileInfo]:
        return await self.source.glob(self.input.path)

    async def _discover(self, start: StartAt, *, initial: bool) -> None:
        """List the path (or glob): take in new files, notice files that left their path."""
        listing = await self._list()
        present = set()
        for info in listing:
            key = (info.dev, info.ino)
            present.add(key)
            known = self.files.get(key)
            if known is not None:
                if known.info.path != info.path:
                    known.info = attrs.evolve(known.info, path=info.path)
                    self.seen.setdefault(info.path)
                self.by_path[info.path] = key
                continue
            previous = self.by_path.get(info.path)
            if previous is not None and previous in self.files:
                # Another file took this path: rotated (renamed away, or deleted).
                self.files[previous].retired = True
                self.rotations += 1
            await self._open(
                info,
                offset=None if initial else 0,
                line=None if initial else 0,
                start=start if initial else StartAt.START,
            )
        for key, file in list(self.files.items()):
            if key in present:
                continue
            if not file.retired:
                file.retired = True
                if self.by_path.get(file.info.path) == key:
                    del self.by_path[file.info.path]
            if isinstance(self.source, ShellFiles):
                # Nothing holds it open over there: find it by inode where it went
                # (again at every look, as a rotation may move it on).
                moved = await self._find_inode(file)
                if moved is None:
                    self._flush_pending(file, partial=True)
                    self._drop(file)
                else:
                    file.info = attrs.evolve(file.info, path=moved.path)

    async def _find_inode(self, file: _File) -> FileInfo | None:
        folder = os.path.dirname(file.info.path) or "."
        for candidate in await self.source.glob(os.path.join(_glob_escape(folder), "*")):
            if (candidate.dev, candidate.ino) == file.key:
                return candidate
        return None

    async def _resume(self, recorded: list[FilePosition]) -> None:
        """Take up the files a killed run had recorded, each where it had got to."""
        for position in recorded:
            info = await self.source.stat(position.path)
            retired = False
            if info is None or (info.dev, info.ino) != (position.dev, position.ino):
                probe = _File(
                    info=FileInfo(position.path, position.dev, position.ino, 0),
                    handle=None,
                    reader=None,
                )
                info = await self._find_inode(probe)
                retired = True
                if info is None:
                    continue
            file = await self._open(
                info, offset=position.offset, line=position.line, start=StartAt.START
            )
            if file is None:
                continue
            file.retired = retired
            if retired and self.by_path.get(info.path) == file.key:
                del self.by_path[info.path]
            if (
                position.head_length
                and head_digest(file.head[: position.head_length]) != position.head
            ):
                # Truncated and written again while no one read it: its old end
                # is in the copy, if there is one.
                file.head = await self._head_matching(file, position)
                file.size = -2
            elif (await self.source.size(file.handle, file.info) or 0) < position.offset:
                file.size = -2

    async def _head_matching(self, file: _File, position: FilePosition) -> bytes:
        """The first bytes the file had when the killed run recorded it, from its copy."""
        escaped = _glob_escape(file.info.path)
        for candidate in await self.source.glob(escaped + "?*"):
            if candidate.size < position.offset:
                continue
            handle = await self.source.open(candidate)
            try:
                head = await self.source.head(handle, candidate, position.head_length)
            finally:
                self.source.close(handle)
            if head is not None and head_digest(head) == position.head:
                return head
        return b"\0" * position.head_length  # matches nothing: read from the start

    def _folders(self) -> set[str]:
        folders = {os.path.dirname(file.info.path) or "." for file in self.files.values()}
        pattern = self.input.path
        base = pattern
        while _has_magic(base):
            base = os.path.dirname(base)
        folders.add(os.path.dirname(base) if base == pattern else base or ".")
        return {folder for folder in folders if folder}

    # --- the run ----------------------------------------------------------------------

    async def run(self, channel: ToolChannel[_Item]) -> LogResult:
        """The tail's task: read and follow until the end; the files are released by the handle."""
        return await self._run(channel)

    async def setup(self) -> None:
        """Find the files and where to start in each (or where a killed run got to).

        Done as the session is entered, so that whatever is written after
        that is read, however soon the tool's own task first runs.
        """
        try:
            recorded = self.positions.positions() if self.positions is not None else []
            if recorded:
                await self._resume(recorded)
            await self._discover(self._start, initial=not recorded)
            if not self.files and not self.input.follow:
                raise ExecutorError(
                    f"no file matches {self.shown_path!r}: there is nothing to read "
                    "(following would wait for one)"
                )
            self._record_all()
        except BaseException:
            try:
                await self.release()
            finally:
                self.close_positions()
            raise

    @property
    def _start(self) -> StartAt:
        return self.input.start or (StartAt.END if self.input.follow else StartAt.START)

    async def release(self) -> None:
        for file in list(self.files.values()):
            self.source.close(file.handle)
        self.files.clear()
        await self.source.aclose()

    def close_positions(self) -> None:
        """Close the position file: after the last entry was handed over (or never will be)."""
        if self.positions is not None:
            self.positions.close()

    async def _run(self, channel: ToolChannel[_Item]) -> LogResult:
        follow = self.input.follow
        start = self._start
        deadline = None
        if self.input.timeout_secs is not None:
            deadline = anyio.current_time() + self.input.timeout_secs
        going = True
        while going:
            for file in list(self.files.values()):
                if not await self._read(file, channel, final=not follow):
                    going = False
                    break
            if not going or not follow:
                break
            now = time.monotonic()
            for file in list(self.files.values()):
                if file.pending is not None and now - file.pending_since >= self.grace:
                    self._flush_pending(file)
                drained = file.retired and file.read_offset >= max(file.size, 0)
                if drained and now - file.quiet_since >= self.linger:
                    self._flush_pending(file, partial=True)
                    if self._out:
                        continue
                    self._drop(file)
            if not await self._send(channel):
                break
            self._record_all()
            wait = self.source.poll_interval if not self.source.watches else 1.0
            if any(file.pending is not None for file in self.files.values()):
                wait = min(wait, self.grace)
            if any(file.retired for file in self.files.values()):
                wait = min(wait, max(self.source.poll_interval, 0.05))
            if deadline is not None:
                left = deadline - anyio.current_time()
                if left <= 0:
                    break
                wait = min(wait, left)
            await self.source.wait(wait, self._folders())
            if deadline is not None and anyio.current_time() >= deadline:
                # One last look, so what came just before the deadline is read.
                for file in list(self.files.values()):
                    if not await self._read(file, channel, final=False):
                        break
                break
            await self._discover(start, initial=False)
        if going:
            for file in list(self.files.values()):
                self._flush_pending(file, partial=not follow)
            await self._send(channel)
        self._record_all()
        return LogResult(
            lines_read=self.lines_read,
            lines_matched=self.matched,
            files=list(self.seen),
            rotations=self.rotations,
        )


_MAGIC = re.compile(r"([*?[])")


def _has_magic(path: str) -> bool:
    return _MAGIC.search(path) is not None


def _glob_escape(path: str) -> str:
    return _MAGIC.sub(r"[\1]", path)


# --- the handle and the tool ------------------------------------------------------------


class _TailHandle:
    """The tool's handle: a `TaskHandle` running the tail; each entry is recorded as handed over."""

    def __init__(self, tail: _Tail) -> None:
        self._tail = tail
        self._inner: TaskHandle[_Item, LogResult] = TaskHandle(tail.run, chunk_buffer=64)

    async def __aenter__(self) -> Self:
        await self._tail.setup()
        try:
            await self._inner.__aenter__()
        except BaseException:
            try:
                await self._tail.release()
            finally:
                self._tail.close_positions()
            raise
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        # Released here, in the task that entered the handle, once the tail's own
        # task has ended: a remote source's session must be left where it was entered.
        try:
            await self._inner.aclose()
        finally:
            try:
                await self._tail.release()
            finally:
                self._tail.close_positions()

    async def next_chunk(self) -> LogEntry | Progress | None:
        item = await self._inner.next_chunk()
        if isinstance(item, _Item):
            # Recorded before the reader has it: a crash from here on resumes after it.
            self._tail.delivered(item)
            return item.entry
        return item

    async def send_stdin(self, event: StdinEvent, /) -> None:
        raise ToolStreamError("the log tailer is read-only: it takes no stdin")

    async def close_stdin(self) -> None:
        await self._inner.close_stdin()

    def cancel(self) -> None:
        self._inner.cancel()

    async def finalize(self) -> LogResult:
        return await self._inner.finalize()


def _executor_of(context: AgentContext | ToolExecutor | None) -> ToolExecutor | None:
    if context is None or isinstance(context, ToolExecutor):
        return context
    if isinstance(context, AgentContext):
        return context.executor()
    raise TypeError(f"LogTailerTool needs an agent context or an executor, got {context!r}")


class LogTailerTool(StreamingTool[LogTailerInput, LogEntry, LogResult]):
    """Reads log files, or follows them as they grow, and streams their entries.

    Give a path or a glob, whether to follow, the format (json, syslog, clf,
    combined, structured for logfmt, raw, or auto to detect it) and a filter
    (minimum level, regex, field values). Each chunk is one entry with its
    timestamp, level, message, fields, file and line; multi-line entries such
    as stack traces stay whole. Rotated files are followed.
    """

    name = "log_tailer"
    policy = Window(max_chunks=200)
    idempotent = True
    resumable: ClassVar[bool] = True

    def __init__(
        self,
        context: AgentContext | ToolExecutor | None = None,
        *,
        poll_interval: float = 0.05,
        inotify: bool = True,
        multiline_grace: float = 0.02,
        rotation_linger: float = 2.0,
        positions_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        """Make the tool for an agent's context.

        Args:
            context: The agent context whose executor holds the files, or the
                executor itself; `None` reads local files relative to the
                current directory.
            poll_interval: Seconds between looks for new lines where nothing
                tells of them (no inotify, a remote executor).
            inotify: Use inotify for local files when the kernel has it.
            multiline_grace: While following, how long an entry waits for
                continuation lines once nothing more arrives.
            rotation_linger: How long a rotated-away file is still read after
                it stops growing (a writer may not have reopened yet).
            positions_dir: Where positions are recorded under a journal; by
                default beside the journal's file (`<journal>.logtail/`).
        """
        for name, value in (
            ("poll_interval", poll_interval),
            ("multiline_grace", multiline_grace),
            ("rotation_linger", rotation_linger),
        ):
            if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                raise ValueError(f"{name} must be a number of seconds, 0 or more, got {value!r}")
        if poll_interval <= 0:
            raise ValueError(f"poll_interval must be positive, got {poll_interval!r}")
        self._executor = _executor_of(context)
        self.poll_interval = float(poll_interval)
        self.inotify = inotify
        self.multiline_grace = float(multiline_grace)
        self.rotation_linger = float(rotation_linger)
        self.positions_dir = None if positions_dir is None else os.fspath(positions_dir)

    def __repr__(self) -> str:
        return f"LogTailerTool({self._executor!r})"

    def render(self, value: object) -> str:
        """An entry as its file, line and raw text; other values as JSON."""
        if isinstance(value, LogEntry):
            return f"{value.source}:{value.line}: {value.raw}"
        return super().render(value)

    async def _source(self, pattern: str) -> tuple[FileSource, str]:
        """How to reach the files, and the pattern as that source takes it."""
        executor = self._executor
        if executor is None:
            return LocalFiles(
                os.getcwd(), poll_interval=self.poll_interval, inotify=self.inotify
            ), pattern
        layer: ToolExecutor = executor
        probe: Command = Command.read_file(pattern)
        while isinstance(layer, CheckedExecutor) and _only_checks(layer):
            # Each wrapper sees the read the tail makes, and may refuse it.
            probe = await layer.check(probe)
            layer = layer.inner
        if isinstance(layer, LocalExecutor):
            path = layer.resolve(probe, getattr(probe, "path", pattern))
            files = LocalFiles(
                layer.workdir,
                confine=layer.confine,
                poll_interval=self.poll_interval,
                inotify=self.inotify,
            )
            return files, path
        return ShellFiles(executor, poll_interval=self.poll_interval), pattern

    def _positions(self) -> PositionFile | None:
        run = current_tool_run()
        if run is None:
            return None
        folder = self.positions_dir
        if folder is None:
            journal_path = getattr(run.journal, "path", None)
            if journal_path is None:
                raise ValueError(
                    "the log tailer records its positions beside the journal's file, and "
                    f"{run.journal!r} has none: pass LogTailerTool(..., positions_dir=...)"
                )
            folder = os.fspath(journal_path) + ".logtail"
        return PositionFile(positions_path(folder, str(run.key)))

    async def start(self, input: LogTailerInput) -> _TailHandle:
        """Start tailing: the files are found and read once the handle is entered."""
        if not isinstance(input, LogTailerInput):
            raise TypeError(f"expected a LogTailerInput, got {type(input).__name__}")
        source, pattern = await self._source(input.path)
        positions = self._positions()
        tail = _Tail(
            source=source,
            input=dataclasses.replace(input, path=pattern),
            positions=positions,
            shown_path=input.path,
            grace=self.multiline_grace,
            linger=self.rotation_linger,
        )
        return _TailHandle(tail)


def _only_checks(layer: CheckedExecutor) -> bool:
    """Whether a wrapper only checks commands (rewrites no output): files may be read past it."""
    if isinstance(layer, ReadOnly):
        return True  # it refuses sessions, but lets reads through, and the tail only reads
    kind = type(layer)
    return all(
        getattr(kind, name) is getattr(CheckedExecutor, name)
        for name in ("exec_cmd", "exec_cmd_streaming", "start")
    )
