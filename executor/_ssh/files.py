"""`stream_files` over SFTP, with the local walker's rules (see `executor._files.rules`).

The same listing as `rg --files`: `.ignore` files always, `.gitignore` files
and `.git/info/exclude` inside a git repository (ignore files above the
walked folder count too, `.gitignore` ones up to the repository's top),
hidden entries skipped unless re-included, `.git` never listed, symlinks and
non-regular files skipped, files with a NUL byte skipped as binary. The
rules are decided, and the patterns compiled and matched, by the very code
the local walker uses; only the reading goes over SFTP. The files of one
folder are read with several requests in flight, since each request waits a
network round trip.
Not followed from the local walker: a `.git` file (a worktree's or
submodule's) gives no exclude file here.
"""

from __future__ import annotations

import asyncio
import os
import posixpath
import stat
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Final

from executor._core.base import LoadedFile
from executor._files.rules import (
    Compiled,
    IgnoreFileName,
    Rules,
    as_text,
    compile_ignore_text,
    rules_above,
    wanted,
    warn_ignore_file,
    warn_unlistable,
    warn_unreadable,
)
from executor._ssh.errors import sftp_os_error, translated

if TYPE_CHECKING:
    import asyncssh

# Files of one folder read at once, ahead of the consumer: enough to hide the
# round trips, few enough that little waits in memory.
_READS_IN_FLIGHT: Final = 16


async def sftp_text_files(
    sftp: asyncssh.SFTPClient, root: str, display: str, extensions: frozenset[str] | None
) -> AsyncIterator[LoadedFile]:
    """Yield the text files below the remote folder `root`, named from `display` on.

    Raises:
        FileNotFoundError: `root` does not exist (named as `display`).
        OSError: `root` cannot be examined or listed.

    """
    shown = display or "."
    with translated(sftp_os_error, shown):
        attributes = await sftp.stat(os.fsencode(root))
    mode = attributes.permissions or 0
    if stat.S_ISREG(mode):
        name = posixpath.basename(posixpath.normpath(root))
        if wanted(name, extensions):
            text = await _read_text(sftp, root, shown)
            if text is not None:
                yield LoadedFile(display or name, text)
        return
    if not stat.S_ISDIR(mode):
        return  # A FIFO, socket or device is no file to list.
    real = os.fsdecode(await sftp.realpath(os.fsencode(root)))
    above = await rules_above(real, _Server(sftp))
    with translated(sftp_os_error, shown):
        entries, hidden = await _list(sftp, real)
    rules = await _with_folder(sftp, real, hidden, above)
    out = f"{display}/" if display and not display.endswith("/") else display
    async for loaded in _walk(sftp, real, entries, rules, out, extensions):
        yield loaded


async def _walk(
    sftp: asyncssh.SFTPClient,
    folder: str,
    entries: list[asyncssh.SFTPName],
    rules: Rules,
    out: str,
    extensions: frozenset[str] | None,
) -> AsyncIterator[LoadedFile]:
    kept: list[tuple[str, bool]] = []
    for entry in entries:
        name = _name(entry)
        mode = entry.attrs.permissions or 0
        is_dir = stat.S_ISDIR(mode)
        if not is_dir and not stat.S_ISREG(mode):
            continue  # Symlinks, FIFOs, sockets and devices are never opened.
        if rules.keeps(name, is_dir, extensions):
            kept.append((name, is_dir))
    # Reads run ahead of the consumer over a window of files, in order: the
    # round trips overlap, and at most that many files wait in memory.
    files = [name for name, is_dir in kept if not is_dir]
    reads: dict[str, asyncio.Future[str | None]] = {}
    started = 0

    def read_ahead() -> None:
        nonlocal started
        while started < len(files) and len(reads) < _READS_IN_FLIGHT:
            name = files[started]
            started += 1
            reads[name] = asyncio.ensure_future(_read_text(sftp, f"{folder}/{name}", out + name))

    try:
        for name, is_dir in kept:
            if not is_dir:
                read_ahead()
                text = await reads.pop(name)
                read_ahead()
                if text is not None:
                    yield LoadedFile(out + name, text)
                continue
            child = f"{folder}/{name}"
            try:
                with translated(sftp_os_error):
                    child_entries, child_hidden = await _list(sftp, child)
            except OSError as error:
                warn_unlistable(out + name, error)
                continue
            child_rules = await _with_folder(sftp, child, child_hidden, rules.descend(name))
            async for loaded in _walk(
                sftp, child, child_entries, child_rules, f"{out}{name}/", extensions
            ):
                yield loaded
    finally:
        for pending in reads.values():
            pending.cancel()


async def _list(sftp: asyncssh.SFTPClient, folder: str) -> tuple[list[asyncssh.SFTPName], set[str]]:
    """A folder's entries but `.`, `..` and `.git`, sorted by name, and its hidden names."""
    names = await sftp.readdir(os.fsencode(folder))
    entries = sorted(
        (entry for entry in names if _name(entry) not in (".", "..")),
        key=lambda entry: _name(entry),
    )
    hidden = {_name(entry) for entry in entries if _name(entry).startswith(".")}
    # Never listed, even where ripgrep would: git's internals are no one's text files.
    return [entry for entry in entries if _name(entry) != ".git"], hidden


async def _read_text(sftp: asyncssh.SFTPClient, path: str, shown: str) -> str | None:
    """The file's text, or None when it is binary or cannot be read (a warning says so)."""
    try:
        with translated(sftp_os_error):
            async with sftp.open(os.fsencode(path), "rb") as file:
                data = await file.read()
    except OSError as error:
        warn_unreadable(shown, error)
        return None
    return as_text(data) if isinstance(data, bytes) else None


def _name(entry: asyncssh.SFTPName) -> str:
    # The client runs without a path encoding: names come as bytes, and are
    # decoded as the local walker's are (undecodable bytes kept as surrogates).
    name = entry.filename
    return os.fsdecode(name) if isinstance(name, bytes) else str(name)


class _Server:
    """The SFTP server as the rules' `IgnoreFiles`: every file by its path."""

    __slots__ = ("sftp",)

    def __init__(self, sftp: asyncssh.SFTPClient) -> None:
        self.sftp = sftp

    async def read(self, folder: str, name: IgnoreFileName) -> Compiled | None:
        """Compile `folder`'s ignore file `name` (see `IgnoreFiles.read`).

        The lines are read as a local ignore file's are (`compile_ignore_text`).
        """
        path = posixpath.join(folder, name)
        try:
            with translated(sftp_os_error):
                async with self.sftp.open(os.fsencode(path), "rb") as file:
                    data = await file.read()
        except FileNotFoundError:
            return None  # No ignore file of that name here.
        except OSError as error:
            warn_ignore_file(path, error)
            return None
        if not isinstance(data, bytes):
            return None
        return compile_ignore_text(data, path)

    async def has_git(self, folder: str) -> bool:
        """Whether `folder` holds a `.git` entry (see `IgnoreFiles.has_git`)."""
        try:
            with translated(sftp_os_error):
                await self.sftp.lstat(os.fsencode(posixpath.join(folder, ".git")))
        except OSError:
            return False
        return True


async def _with_folder(
    sftp: asyncssh.SFTPClient, folder: str, hidden: set[str], rules: Rules
) -> Rules:
    """Add the ignore files of `folder` to the rules from above it (see `Rules.add_folder`)."""
    # The trailing "/": its ignore files are named `folder/name`, as the walk
    # names the folder's entries, even below `/` (`//.ignore`, where the
    # folders above are joined as paths: `/.ignore`).
    return await rules.add_folder(_Server(sftp), f"{folder}/", hidden)
