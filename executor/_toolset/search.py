"""The search tools: `list_files`, `glob` and `search`, over the executor's `stream_files`.

Ignore files are respected, binary and hidden files skipped, as ripgrep does.
`list_files` and `glob` need nothing of their toolset: they are plain
functions. `search` cuts its matches to the toolset's output budget, so it is
a method of `Searcher`, which holds the toolset's `Limits`.
"""

from __future__ import annotations

import contextlib
import posixpath
import re
from collections.abc import AsyncGenerator, Sequence
from typing import Any

import anyio
import anyio.lowlevel

from executor._core.base import ToolExecutor
from executor._core.errors import InvalidArgument
from executor._core.output import CommandOutput, Stdout
from executor._core.render import for_model
from executor._tools.args import WorkspaceGlob, WorkspacePath
from executor._tools.tools import Tool, tool
from executor._toolset.context import ToolsetContext
from executor._toolset.limits import Limits, check_count

_MAX_LISTED = 1000
_MAX_MATCHES = 1000


def search_tools(limits: Limits) -> list[Tool]:
    """`list_files`, `glob` and `search` (within `limits.budget`), as `Tool`s."""
    return [tool(list_files), tool(glob), tool(Searcher(limits).search)]


async def list_files(  # noqa: D417 - context is not an argument
    context: ToolsetContext,
    path: WorkspacePath | None = None,
    extensions: list[str] | None = None,
    limit: int = 500,
) -> str:
    """List the text files below a folder, ignore files respected, hidden files skipped.

    Args:
        path: The folder, relative to the workspace root (the root if omitted).
        extensions: Keep only these extensions, like ["py", "md"].
        limit: The most paths to return.
    """
    check_count(limit, "limit", _MAX_LISTED * 10)
    root = _root(path)
    found = sorted([f.path async for f in _files(context, root, extensions)])
    return _listing(found, limit, f"no text files below {root}")


async def glob(  # noqa: D417 - context is not an argument
    context: ToolsetContext,
    pattern: WorkspaceGlob,
    path: WorkspacePath | None = None,
    limit: int = 500,
) -> str:
    """Find text files whose path matches a glob, like "src/**/*.py".

    Args:
        pattern: The glob, relative to path (** spans folders, {a,b} alternatives).
        path: The folder to search, relative to the workspace root (the root if omitted).
        limit: The most paths to return.
    """
    check_count(limit, "limit", _MAX_LISTED * 10)
    root = _root(path)
    found = sorted(
        [f.path async for f in _files(context, root, None) if pattern.match(_below(f.path, root))]
    )
    return _listing(found, limit, f"no text files below {root} match {pattern}")


class Searcher:
    """The `search` tool of one toolset, whose output budget it keeps to.

    Args:
        limits: The toolset's limits (`budget` is read at each call).
    """

    def __init__(self, limits: Limits) -> None:
        self._limits = limits

    async def search(  # noqa: D417 - context is not an argument
        self,
        context: ToolsetContext,
        pattern: str,
        path: WorkspacePath | None = None,
        glob: WorkspaceGlob | None = None,
        ignore_case: bool = False,
        literal: bool = False,
        max_matches: int = 200,
    ) -> str:
        """Search the contents of text files for a regular expression, as ripgrep does.

        Lines come back as path:line:text. Ignore files are respected; hidden and
        binary files are skipped.

        Args:
            pattern: A Python regular expression (or plain text with literal).
            path: The folder to search, relative to the workspace root (the root if omitted).
            glob: Search only files matching this glob, as ripgrep's -g: "*.py" matches
                at any depth, "src/**/*.py" a path (relative to path).
            ignore_case: Match without regard to case.
            literal: Take pattern as plain text, not a regular expression.
            max_matches: The most matching lines to return.
        """
        check_count(max_matches, "max_matches", _MAX_MATCHES)
        try:
            regex = re.compile(
                re.escape(pattern) if literal else pattern, re.IGNORECASE if ignore_case else 0
            )
        except re.error as error:
            raise InvalidArgument(pattern, f"not a valid regular expression: {error}") from None
        matches: list[str] = []
        files = 0
        stopped = False
        root = _root(path)
        async with contextlib.aclosing(_files(context, root, None)) as walk:
            async for loaded in walk:
                # The walk goes on to its end even once enough matched: a backend's
                # walker left unfinished would be closed only at garbage collection.
                if stopped or (
                    glob is not None and not _filter_match(glob, _below(loaded.path, root))
                ):
                    continue
                files += 1
                for number, line in enumerate(loaded.content.splitlines(), 1):
                    if regex.search(line):
                        shown = line if len(line) <= 300 else f"{line[:300]}[...]"
                        matches.append(f"{loaded.path}:{number}:{shown}")
                        if len(matches) >= max_matches:
                            stopped = True
                            break
                await anyio.lowlevel.checkpoint()
        if not matches:
            return f"no matches for {pattern!r} in {files} files below {root}"
        text = "\n".join(matches)
        if stopped:
            text += (
                f"\n[stopped after {max_matches} matches; narrow the search or raise max_matches]"
            )
        return _cut(text, self._limits.budget)


def _root(path: WorkspacePath | None) -> str:
    return "." if path is None else str(path)


async def _files(
    context: Any, root: str, extensions: Sequence[str] | None
) -> AsyncGenerator[Any, None]:
    executor: ToolExecutor = context.executor()
    found = executor.stream_files(root, extensions or None)
    try:
        async for loaded in found:
            yield loaded
    except FileNotFoundError:
        raise InvalidArgument(root, "no such folder") from None
    except NotADirectoryError:
        raise InvalidArgument(root, "not a folder") from None
    finally:
        # A search that stops early must end the walk now, not at garbage collection.
        close = getattr(found, "aclose", None)
        if close is not None:
            await close()


def _below(found: str, root: str) -> str:
    if root in ("", ".") or posixpath.isabs(found):
        return found
    return posixpath.relpath(found, root)


def _filter_match(glob: WorkspaceGlob, path: str) -> bool:
    """Match as ripgrep's `-g` does: a glob without `/` matches a file's name at any depth."""
    if "/" not in glob and glob.match(posixpath.basename(path)):
        return True
    return glob.match(path)


def _listing(paths: list[str], limit: int, empty: str) -> str:
    if not paths:
        return empty
    shown = "\n".join(paths[:limit])
    if len(paths) > limit:
        shown += f"\n[... {len(paths) - limit} more paths; raise limit or narrow the path]"
    return shown


def _cut(text: str, budget: int) -> str:
    output = CommandOutput(chunks=(Stdout(text.encode()),), exit_code=None, duration=0.0)
    return for_model(output, budget=budget)
