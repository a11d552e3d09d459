"""What the editing tools keep to undo: each file's earlier contents, the last few edits deep.

`edit_file`, `write_file` and the native text editors push a file's bytes
before each change; `undo_edit` pops the last and writes it back. A file
the tools created is remembered as such, so its undo says so rather than
guessing. The history is per executor and per path, bounded in depth and in
bytes, and lives as long as its toolset.
"""

from __future__ import annotations

from typing import Final, Literal

from executor._core.base import ToolExecutor
from executor._core.commands import Command
from executor._toolset.context import ToolsetContext, execute

CREATED: Final = "created"
"""What `undo` gives for a file whose last change created it: nothing to restore."""

DEPTH: Final = 10
"""The edits of one file that can be undone, newest first."""

MAX_BYTES: Final = 64 << 20
"""Bytes of earlier contents kept in all; past it the oldest go first."""


class EditHistory:
    """Earlier contents of edited files, by executor and path (see the module docstring)."""

    def __init__(self) -> None:
        self._files: dict[tuple[int, str], tuple[ToolExecutor, list[bytes | None]]] = {}
        self._bytes = 0

    def push(self, executor: ToolExecutor, path: str, before: bytes | None) -> None:
        """Remember `before`, the contents of `path` before an edit (`None`: it did not exist)."""
        key = (id(executor), path)
        held = self._files.get(key)
        if held is None or held[0] is not executor:
            held = (executor, [])
            self._files[key] = held
        stack = held[1]
        stack.append(before)
        self._bytes += len(before or b"")
        while len(stack) > DEPTH:
            self._bytes -= len(stack.pop(0) or b"")
        self._trim()

    def created(self, executor: ToolExecutor, path: str) -> None:
        """Remember that `path` was created: its undo removes nothing but says so."""
        self.push(executor, path, None)

    def pop(self, executor: ToolExecutor, path: str) -> bytes | None:
        """The contents before the last edit of `path`, forgotten here; `None` if there is none.

        Raises:
            LookupError: The last change created the file: there is nothing to restore.
        """
        key = (id(executor), path)
        held = self._files.get(key)
        if held is None or held[0] is not executor or not held[1]:
            return None
        before = held[1].pop()
        if not held[1]:
            del self._files[key]
        if before is None:
            raise LookupError(path)
        self._bytes -= len(before)
        return before

    def _trim(self) -> None:
        """Drop the oldest contents of the largest histories until the whole fits `MAX_BYTES`."""
        while self._bytes > MAX_BYTES and self._files:
            key = max(self._files, key=lambda k: sum(len(b or b"") for b in self._files[k][1]))
            stack = self._files[key][1]
            self._bytes -= len(stack.pop(0) or b"")
            if not stack:
                del self._files[key]


async def undo(
    history: EditHistory, context: ToolsetContext, path: str
) -> bytes | Literal["created"] | None:
    """Write back the contents of `path` before its last change, and return them.

    `CREATED` when the last change made the file (nothing is written: an undo
    deletes no file); `None` when these tools changed nothing there.
    """
    try:
        before = history.pop(context.executor(), path)
    except LookupError:
        return CREATED
    if before is not None:
        await execute(context, Command.write_file(path, before))
    return before
