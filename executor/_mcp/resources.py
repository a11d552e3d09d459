"""The MCP server's resources: each command's output (live), spilled outputs, the workspace's files.

- `executor://commands/{id}`: a command the server ran (a job's too), its
  output as it is read (the last MiB kept, the cut marked) and, once it has
  ended, how: a subscriber hears `notifications/resources/updated` while it
  runs (at most every 50 ms) and once more when it ends. The newest 200
  ended commands are kept beside those still running.
- `executor://spill/{name}`: the whole output a cut result names as its
  spill file (`spill=` on the executor), in pages of 1 MiB (`?page=N`).
- `executor://files/{path}`: a file of the workspace, read through the
  executor (so a Docker or SSH backend serves its own), in pages of 1 MiB.

Listing is paginated: the commands, the spills, then the workspace's files
as `list_files` finds them, 200 to a page.
"""

from __future__ import annotations

import base64
import collections
import os
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any, TypeAlias
from urllib.parse import parse_qs, quote, unquote, urlsplit

import anyio
import anyio.to_thread
import attrs

from executor._core.commands import Command
from executor._core.errors import InvalidArgument
from executor._core.output import CommandOutput, OutputBuffer
from executor._core.render import for_model
from executor._mcp.roots import RootScope
from executor._policies.observed import (
    CommandCancelled,
    CommandChunk,
    CommandEvent,
    CommandFinished,
    CommandStarted,
)
from executor._tools.args import WorkspacePath

if TYPE_CHECKING:
    import mcp_types

    from executor._core.base import ToolExecutor

_Contents: TypeAlias = "mcp_types.TextResourceContents | mcp_types.BlobResourceContents"

PAGE = 1 << 20
"""Bytes of a file or spill that one read gives (`?page=N` for the others)."""
_KEPT = 1 << 20
_ENDED_KEPT = 200
_LISTED = 200
_QUIET = 0.05
_SPILLS_KEPT = 200
_LISTING_KEPT = 10.0
_SCHEME = "executor://"


@attrs.define(eq=False)
class _Record:
    """What the server knows of one command it ran."""

    id: str
    tool: str
    description: str
    started: float
    buffer: OutputBuffer = attrs.Factory(lambda: OutputBuffer(_KEPT))
    state: str = "running"
    exit_code: int | None = None
    signal: int | None = None
    reason: str | None = None
    duration: float = 0.0
    notified: float = 0.0
    held: bool = False

    @property
    def uri(self) -> str:
        return f"{_SCHEME}commands/{self.id}"

    def text(self) -> str:
        output = self.buffer.output(
            exit_code=self.exit_code, signal=self.signal, duration=self.duration
        )
        body = for_model(output, budget=2 * _KEPT, status=self.state != "running")
        if self.state == "running":
            opening = "" if not body or body.endswith("\n") else "\n"
            return body + opening + "[running]"
        if self.reason and self.state != "exited":
            return f"{body}\n[{self.state}: {self.reason}]"
        return body


class Resources:
    """The resources one MCP server offers, and who hears of their changes.

    Args:
        executor: What workspace files are read and listed through.
        notify: Called with a resource's URI when it changed (a running
            command's output, its end); the server tells the subscribers.
        spawn: Runs a function in a task of the server's (False when it
            cannot): an update held back by the 50 ms quiet time is sent
            from there once it is over.
    """

    def __init__(
        self,
        executor: ToolExecutor,
        notify: Callable[[str], Awaitable[None]],
        spawn: Callable[[Callable[[], Coroutine[Any, Any, Any]]], bool] | None = None,
    ) -> None:
        self._executor = executor
        self._notify = notify
        self._spawn = spawn
        self._records: collections.OrderedDict[str, _Record] = collections.OrderedDict()
        # The ended commands, oldest first: the first to be forgotten.
        self._ended: collections.deque[str] = collections.deque()
        # The spill files results named (the newest _SPILLS_KEPT), by name.
        self._spills: collections.OrderedDict[str, str] = collections.OrderedDict()
        # The workspace's files as last listed (for the pages that follow): when, what.
        self._listing: tuple[float, RootScope | None, tuple[str, ...]] | None = None

    # --- what the server tells us ------------------------------------------------------

    async def observe(self, event: CommandEvent, tool: str) -> None:
        """Record `event` of a command (run by `tool`); tell the subscribers what changed."""
        if isinstance(event, CommandStarted):
            self._records[event.call_id] = _Record(
                event.call_id, tool, event.description, event.time
            )
            return
        record = self._records.get(event.call_id)
        if record is None:
            return
        if isinstance(event, CommandChunk):
            record.buffer.append(event.chunk)
            now = time.monotonic()
            if now - record.notified < _QUIET:
                # Held back; sent once the quiet time is over, if nothing else was by then.
                if not record.held and self._spawn is not None:
                    record.held = self._spawn(lambda: self._later(record))
                return
            record.notified = now
        elif isinstance(event, CommandCancelled):
            record.state, record.reason = "killed", "cancelled"
            record.duration = event.duration
        elif isinstance(event, CommandFinished):
            record.exit_code = event.exit_code
            record.duration = event.duration
            record.state = {
                "ok": "exited",
                "nonzero": "exited",
                "timeout": "killed",
                "denied": "refused",
            }.get(event.outcome, "failed")
            record.reason = event.error
        if not isinstance(event, CommandChunk):
            self._ended.append(record.id)
            while len(self._ended) > _ENDED_KEPT:
                self._records.pop(self._ended.popleft(), None)
        await self._notify(record.uri)

    async def _later(self, record: _Record) -> None:
        await anyio.sleep(max(0.0, record.notified + _QUIET - time.monotonic()))
        record.held = False
        if record.state == "running":
            record.notified = time.monotonic()
            await self._notify(record.uri)

    def spilled(self, output: CommandOutput | None) -> str | None:
        """The resource of `output`'s spill file, if it has one (then it is served)."""
        if output is None or output.elided is None or output.elided.spill is None:
            return None
        path = output.elided.spill
        name = os.path.basename(path)
        self._spills[name] = path
        self._spills.move_to_end(name)
        while len(self._spills) > _SPILLS_KEPT:
            self._spills.popitem(last=False)
        return f"{_SCHEME}spill/{quote(name)}"

    def uri_of(self, call_id: str) -> str | None:
        """The resource of the command `call_id`, while it is kept."""
        record = self._records.get(call_id)
        return None if record is None else record.uri

    # --- what the client asks ----------------------------------------------------------

    async def list(
        self, cursor: str | None, *, files: bool = True
    ) -> tuple[list[mcp_types.Resource], str | None]:
        """One page of the resources, and the cursor of the next (None: the last page).

        Args:
            cursor: Where the page starts: `None`, or a cursor an earlier page gave.
            files: Whether the workspace's files are listed after the rest.

        Raises:
            ValueError: The cursor is none of ours.
        """
        from mcp_types import Resource

        start = _cursor(cursor)
        listed: list[mcp_types.Resource] = []
        for record in reversed(self._records.values()):
            title = f"{record.tool}: {record.description}"
            listed.append(
                Resource(
                    uri=record.uri,
                    name=f"command {record.id[:12]}",
                    title=title[:200],
                    description=f"The output of `{record.description[:200]}` ({record.state})",
                    mime_type="text/plain",
                )
            )
        for name in reversed(self._spills):
            listed.append(
                Resource(
                    uri=f"{_SCHEME}spill/{quote(name)}",
                    name=name,
                    title=f"Whole output {name}",
                    description=f"A cut output kept whole, in pages of {PAGE} bytes",
                    mime_type="text/plain",
                )
            )
        fixed = len(listed)
        end = start + _LISTED
        page = listed[start : end + 1]  # one past the page: is there more?
        if files and len(page) <= _LISTED:
            # The workspace's files after the commands and spills, as list_files finds them.
            paths = await self._files(fresh=start == 0)
            skip = max(0, start - fixed)
            for path in paths[skip : skip + _LISTED + 1 - len(page)]:
                page.append(
                    Resource(uri=f"{_SCHEME}files/{quote(path)}", name=path, mime_type="text/plain")
                )
        more = len(page) > _LISTED
        return page[:_LISTED], str(end) if more else None

    async def _files(self, *, fresh: bool) -> tuple[str, ...]:
        """The workspace's files, listed anew for a first page, else as the last listing had them.

        A listing reads every file (to leave binary ones out), so the pages of
        one listing share it, for `_LISTING_KEPT` seconds.
        """
        from executor._mcp.calls import current_call

        call = current_call()
        scope = None if call is None else call.scope
        now = time.monotonic()
        kept = self._listing
        if not fresh and kept is not None and kept[1] == scope and now - kept[0] < _LISTING_KEPT:
            return kept[2]
        paths = tuple([loaded.path async for loaded in self._executor.stream_files(".")])
        self._listing = (now, scope, paths)
        return paths

    async def read(self, uri: str) -> _Contents:
        """The contents of `uri`.

        Raises:
            LookupError: No such resource (said in the message).
            ValueError: A malformed URI or page.
        """
        from mcp_types import TextResourceContents

        kind, name, page = _parse(uri)
        if kind == "commands":
            record = self._records.get(name)
            if record is None:
                raise LookupError(f"no command {name} is kept (the newest {_ENDED_KEPT} are)")
            return TextResourceContents(
                uri=uri,
                mime_type="text/plain",
                text=record.text(),
                _meta={"state": record.state, "exit_code": record.exit_code},
            )
        if kind == "spill":
            spill = self._spills.get(name)
            if spill is None:
                raise LookupError(f"no spilled output {name} was named by this server")
            try:
                data, size = await anyio.to_thread.run_sync(_read_spill, spill, page)
            except OSError as error:
                raise LookupError(f"the spilled output {name} is gone: {error.strerror}") from None
            return _contents(uri, data, page, size)
        try:
            path = WorkspacePath(name)  # relative, no `..`: inside the workspace, as tools take it
        except InvalidArgument as error:
            raise LookupError(f"no resource {uri}: {error}") from None
        output = await self._executor.exec_cmd(Command.read_file(os.fspath(path)))
        whole = output.stdout
        part = _page(lambda offset, count: whole[offset : offset + count], len(whole), page)
        return _contents(uri, part, page, len(whole))


def _page(read: Callable[[int, int], bytes], size: int, page: int) -> bytes:
    """Page `page` of `size` bytes that `read(offset, count)` gives.

    Its bounds are moved back to the start of a UTF-8 character (at most 3
    bytes), so a page of text decodes on its own and the pages still join
    to the whole, byte for byte.
    """
    pages = max(1, -(-size // PAGE))
    if page >= pages:
        raise ValueError(f"page {page} is past the end ({pages} pages of {PAGE} bytes)")

    def bound(offset: int) -> int:
        if offset <= 0 or offset >= size:
            return max(0, min(offset, size))
        low = max(0, offset - 3)
        window = read(low, offset + 1 - low)
        at = offset
        while at > low and window[at - low] & 0xC0 == 0x80:  # a continuation byte
            at -= 1
        return at

    first, last = bound(page * PAGE), bound((page + 1) * PAGE)
    return read(first, last - first)


def resource_templates() -> list[mcp_types.ResourceTemplate]:
    """The templates of the resources a client may name: files, pages, commands and spills."""
    from mcp_types import ResourceTemplate

    return [
        ResourceTemplate(
            uri_template=_SCHEME + "files/{+path}",
            name="file",
            title="A file of the workspace",
            description=f"A workspace file, read through the executor; ?page=N for the "
            f"pages past the first {PAGE} bytes",
            mime_type="text/plain",
        ),
        ResourceTemplate(
            uri_template=_SCHEME + "commands/{id}",
            name="command",
            title="A command's output",
            description="The output of a command the server ran, live while it runs",
            mime_type="text/plain",
        ),
        ResourceTemplate(
            uri_template=_SCHEME + "spill/{name}",
            name="spill",
            title="A whole output",
            description=f"The whole of a cut output, in pages of {PAGE} bytes (?page=N)",
            mime_type="text/plain",
        ),
    ]


def _read_spill(path: str, page: int) -> tuple[bytes, int]:
    with open(path, "rb") as file:
        size = os.fstat(file.fileno()).st_size

        def read(offset: int, count: int) -> bytes:
            file.seek(offset)
            return file.read(count)

        return _page(read, size, page), size


def _contents(uri: str, data: bytes, page: int, size: int) -> _Contents:
    from mcp_types import BlobResourceContents, TextResourceContents

    meta = {"page": page, "pages": max(1, -(-size // PAGE)), "size": size}
    try:
        text = data.decode()
    except UnicodeDecodeError:
        blob = base64.b64encode(data).decode()
        return BlobResourceContents(
            uri=uri, mime_type="application/octet-stream", blob=blob, _meta=meta
        )
    return TextResourceContents(uri=uri, mime_type="text/plain", text=text, _meta=meta)


def resource_kind(uri: str) -> str:
    """`commands`, `spill` or `files`: which of our resources `uri` names.

    Raises:
        LookupError: It names none of ours.
        ValueError: Its page is not a number.
    """
    return _parse(uri)[0]


def _parse(uri: str) -> tuple[str, str, int]:
    """(kind, name, page) of one of our URIs."""
    parts = urlsplit(uri)
    kind = parts.netloc
    if parts.scheme != "executor" or kind not in ("commands", "spill", "files"):
        raise LookupError(f"no resource {uri}: ours are executor://commands/, spill/ and files/")
    name = unquote(parts.path.lstrip("/"))
    if not name:
        raise LookupError(f"no resource {uri}: it names nothing")
    pages = parse_qs(parts.query).get("page", ["0"])
    if len(pages) != 1 or not pages[0].isdigit():
        raise ValueError(f"page must be a number from 0, got {pages!r} in {uri}")
    return kind, name, int(pages[0])


def _cursor(cursor: str | None) -> int:
    if cursor is None:
        return 0
    if not cursor.isdigit():
        raise ValueError(f"not a cursor of this server: {cursor!r}")
    return int(cursor)
