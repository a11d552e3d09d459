"""The file tools: `read_file` (numbered lines, by range), `write_file`, `edit_file`.

`write_file` and `edit_file` need nothing of their toolset: they are plain
functions. `read_file` stops at the toolset's output budget, so it is a
method of `FileReader`, which holds the toolset's `Limits`.
"""

from __future__ import annotations

from executor._core.base import ToolExecutor
from executor._core.commands import Command
from executor._core.errors import CommandError, InvalidArgument
from executor._tools.args import WorkspacePath
from executor._tools.tools import Tool, ToolOutput, tool
from executor._toolset.context import ToolsetContext, execute
from executor._toolset.history import CREATED, EditHistory, undo
from executor._toolset.limits import Limits, check_count
from executor._toolset.text import Enough, LineRange, number_lines, replace

_DEFAULT_LINES = 2000
_MAX_LINES = 100_000
# A written file is the largest argument a model sends; 16 MiB is past any real one.
_MAX_WRITE_BYTES = 16 << 20


def file_tools(limits: Limits, history: EditHistory) -> list[Tool]:
    """`read_file` (within `limits.budget`), `write_file`, `edit_file` and `undo_edit`."""
    writer = FileWriter(history)
    return [
        tool(FileReader(limits).read_file),
        tool(max_argument_bytes=_MAX_WRITE_BYTES)(writer.write_file),
        tool(max_argument_bytes=_MAX_WRITE_BYTES)(writer.edit_file),
        tool(writer.undo_edit),
    ]


class FileReader:
    """The `read_file` tool of one toolset, whose output budget it keeps to.

    Args:
        limits: The toolset's limits (`budget` is read at each call).
    """

    def __init__(self, limits: Limits) -> None:
        self._limits = limits

    async def read_file(  # noqa: D417 - context is not an argument
        self,
        context: ToolsetContext,
        path: WorkspacePath,
        offset: int | None = None,
        limit: int | None = None,
        start_line: int | None = None,
        end_line: int | None = None,
    ) -> str | ToolOutput:
        """Read a text file, its lines numbered; a big file a range at a time.

        Give offset and limit (line to start at, how many lines), or start_line
        and end_line (both included); by default the first 2000 lines. Lines
        past 2000 characters are cut.

        Args:
            path: The file, relative to the workspace root.
            offset: The line number to start at (1 is the first line).
            limit: How many lines to read.
            start_line: The first line to read (the same as offset).
            end_line: The last line to read, included.
        """
        if offset is not None and start_line is not None:
            raise InvalidArgument(offset, "give offset or start_line, not both")
        if limit is not None and end_line is not None:
            raise InvalidArgument(limit, "give limit or end_line, not both")
        first = offset if offset is not None else start_line if start_line is not None else 1
        check_count(first, "offset" if offset is not None else "start_line", 1 << 62)
        check_count(limit, "limit", _MAX_LINES)
        if end_line is not None and end_line < first:
            raise InvalidArgument(end_line, f"end_line must be at least the first line, {first}")
        if end_line is not None:
            last = end_line
        else:
            last = first + (limit if limit is not None else _DEFAULT_LINES) - 1
        lines = LineRange(first, last, self._limits.budget)
        executor: ToolExecutor = context.executor()
        try:
            await executor.exec_cmd_streaming(Command.read_file(path), lines)
        except Enough:
            pass
        else:
            lines.finish()
        if lines.binary:
            return ToolOutput.error(
                f"{path} is a binary file (it holds NUL bytes); read_file shows text only"
            )
        if not lines.lines:
            if lines.seen == 0:
                return f"{path} is empty"
            raise InvalidArgument(
                first, f"{path} has {lines.seen} lines; line {first} is past its end"
            )
        body = number_lines(lines.lines, first)
        shown = f"lines {first}-{lines.shown_last}"
        if lines.budget_hit:
            note = (
                f"[{shown} shown: the output budget is reached; continue with "
                f"offset={lines.shown_last + 1}]"
            )
        elif lines.more:
            note = f"[{shown} shown; more follow: continue with offset={lines.shown_last + 1}]"
        else:
            note = f"[{shown} of {lines.seen}]"
        return f"{body}{note}"


class FileWriter:
    """The tools that change files, keeping each file's earlier contents for `undo_edit`.

    Args:
        history: Where the earlier contents are kept (the toolset's, shared
            with the native text editors).
    """

    def __init__(self, history: EditHistory) -> None:
        self._history = history

    async def write_file(  # noqa: D417 - context is not an argument
        self, context: ToolsetContext, path: WorkspacePath, content: str
    ) -> str:
        """Write a text file whole, replacing it if it exists; missing folders are made.

        Args:
            path: The file, relative to the workspace root.
            content: The file's whole new text.
        """
        before = await _contents(context, str(path))
        await execute(context, Command.write_file(path, content))
        self._history.push(context.executor(), str(path), before)
        size = len(content.encode("utf-8", "surrogatepass"))
        lines = content.count("\n") + (not content.endswith("\n") and bool(content))
        return f"wrote {size} bytes ({lines} lines) to {path}"

    async def edit_file(  # noqa: D417 - context is not an argument
        self,
        context: ToolsetContext,
        path: WorkspacePath,
        old_text: str,
        new_text: str,
        replace_all: bool = False,
    ) -> str | ToolOutput:
        """Edit a text file by replacing exact text, as a str_replace editor does.

        old_text must occur exactly once (or set replace_all), whitespace and
        indentation included. Where it does not, whole lines that match it with
        the file's CRLF endings, then ignoring trailing whitespace, then ignoring
        indentation (new_text re-indented to the file's tabs or spaces) are
        replaced, and the reply says so. Otherwise nothing is changed and the
        reply says why, with the closest lines. undo_edit takes an edit back.

        Args:
            path: The file, relative to the workspace root.
            old_text: The exact text to replace.
            new_text: The text to put in its place.
            replace_all: Replace every occurrence instead of requiring exactly one.
        """
        output = await execute(context, Command.read_file(path), stream=False)
        try:
            text = output.stdout.decode("utf-8")
        except UnicodeDecodeError:
            return ToolOutput.error(f"{path} is not UTF-8 text; edit_file edits text files")
        edited, lines, how = replace(text, old_text, new_text, replace_all=replace_all)
        await execute(context, Command.write_file(path, edited))
        self._history.push(context.executor(), str(path), output.stdout)
        count = f"{len(lines)} occurrence{'s' * (len(lines) != 1)}"
        first = lines[0]
        new_lines = edited.splitlines()
        span = new_text.count("\n")
        low = max(first - 3, 1)
        high = min(first + span + 3, len(new_lines))
        snippet = number_lines(new_lines[low - 1 : high], low)
        where = ", ".join(map(str, lines[:20]))
        matched = "" if how is None else f", matched {how}"
        return f"edited {path}: replaced {count} (line {where}{matched})\n{snippet}"

    async def undo_edit(self, context: ToolsetContext, path: WorkspacePath) -> str | ToolOutput:  # noqa: D417
        """Take back the last write_file or edit_file of a file: its earlier bytes, exactly.

        Each call takes back one more, up to the last 10 changes of the file.

        Args:
            path: The file, relative to the workspace root.
        """
        before = await undo(self._history, context, str(path))
        if before == CREATED:
            return ToolOutput.error(
                f"the last change of {path} created it: there is nothing earlier to restore "
                "(undo_edit does not delete files)"
            )
        if not isinstance(before, bytes):
            return ToolOutput.error(f"no edit of {path} to undo (none was made by these tools)")
        return f"undid the last change of {path}: it holds its earlier {len(before)} bytes again"


async def _contents(context: ToolsetContext, path: str) -> bytes | None:
    """The file's bytes, or `None` when it does not exist (or cannot be read)."""
    try:
        output = await context.executor().exec_cmd(Command.read_file(path))
    except CommandError:
        return None
    return output.stdout
