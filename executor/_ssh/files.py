"""`stream_files` over SFTP, with the local walker's rules (see `executor._files.walk`).

The same listing as `rg --files`: `.ignore` files always, `.gitignore` files
and `.git/info/exclude` inside a git repository (ignore files above the
walked folder count too, `.gitignore` ones up to the repository's top),
hidden entries skipped unless re-included, `.git` never listed, symlinks and
non-regular files skipped, files with a NUL byte skipped as binary. The
patterns are compiled and matched by the very code the local walker uses;
only the reading goes over SFTP. The files of one folder are read with
several requests in flight, since each request waits a network round trip.
Not followed from the local walker: a `.git` file (a worktree's or
submodule's) gives no exclude file here.
"""

from __future__ import annotations

import asyncio
import errno
import os
import posixpath
import stat
from collections.abc import AsyncIterator
from typing import Final

from executor._core.base import LoadedFile
from executor._files.walk import (
    _compile_ignore_text,
    _Compiled,
    _descend,
    _logger,
    _Rules,
    _skipped,
    _wanted,
    _warn_unlistable,
    _warn_unreadable,
)
from executor._ssh.remote import asyncssh

__all__ = ["sftp_text_files"]

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
    try:
        attributes = await sftp.stat(os.fsencode(root))
    except asyncssh.SFTPNoSuchFile as error:
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), shown) from error
    except asyncssh.SFTPError as error:
        raise OSError(errno.EIO, error.reason, shown) from error
    mode = attributes.permissions or 0
    if stat.S_ISREG(mode):
        name = posixpath.basename(posixpath.normpath(root))
        if _wanted(name, extensions):
            text = await _read_text(sftp, root, shown)
            if text is not None:
                yield LoadedFile(display or name, text)
        return
    if not stat.S_ISDIR(mode):
        return  # A FIFO, socket or device is no file to list.
    real = os.fsdecode(await sftp.realpath(os.fsencode(root)))
    above = await _rules_above(sftp, real)
    try:
        entries, hidden = await _list(sftp, real)
    except asyncssh.SFTPError as error:
        raise OSError(errno.EIO, error.reason, shown) from error
    rules = await _local_rules(sftp, real, hidden, above)
    out = f"{display}/" if display and not display.endswith("/") else display
    async for loaded in _walk(sftp, real, entries, rules, out, extensions):
        yield loaded


async def _walk(
    sftp: asyncssh.SFTPClient,
    folder: str,
    entries: list[asyncssh.SFTPName],
    rules: _Rules,
    out: str,
    extensions: frozenset[str] | None,
) -> AsyncIterator[LoadedFile]:
    chain = rules.chain
    kept: list[tuple[str, bool]] = []
    for entry in entries:
        name = _name(entry)
        mode = entry.attrs.permissions or 0
        is_dir = stat.S_ISDIR(mode)
        if not is_dir and not stat.S_ISREG(mode):
            continue  # Symlinks, FIFOs, sockets and devices are never opened.
        if not is_dir and not _wanted(name, extensions):
            continue
        if _skipped(chain, name, is_dir) if chain else name.startswith("."):
            continue
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
                child_entries, child_hidden = await _list(sftp, child)
            except asyncssh.SFTPError as error:
                _warn_unlistable(out + name, OSError(errno.EIO, error.reason))
                continue
            child_rules = await _local_rules(sftp, child, child_hidden, _enter(rules, name))
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
        async with sftp.open(os.fsencode(path), "rb") as file:
            data = await file.read()
    except asyncssh.SFTPError as error:
        _warn_unreadable(shown, OSError(_errno(error), error.reason))
        return None
    if not isinstance(data, bytes) or b"\0" in data:
        return None
    return data.decode("utf-8", "replace")


def _name(entry: asyncssh.SFTPName) -> str:
    # The client runs without a path encoding: names come as bytes, and are
    # decoded as the local walker's are (undecodable bytes kept as surrogates).
    name = entry.filename
    return os.fsdecode(name) if isinstance(name, bytes) else str(name)


def _errno(error: asyncssh.SFTPError) -> int:
    return {2: errno.ENOENT, 3: errno.EACCES}.get(error.code, errno.EIO)


async def _load_ignore_file(sftp: asyncssh.SFTPClient, path: str) -> _Compiled | None:
    """Compile the remote ignore file at `path`; None if it is missing or has no pattern.

    The lines are read as a local ignore file's are (`_compile_ignore_text`).
    """
    try:
        async with sftp.open(os.fsencode(path), "rb") as file:
            data = await file.read()
    except (asyncssh.SFTPNoSuchFile, asyncssh.SFTPNoSuchPath):
        return None
    except asyncssh.SFTPError as error:
        _logger.warning("stream_files could not read ignore file %s: %s", path, error.reason)
        return None
    if not isinstance(data, bytes):
        return None
    return _compile_ignore_text(data, path)


async def _exists(sftp: asyncssh.SFTPClient, path: str) -> bool:
    try:
        await sftp.lstat(os.fsencode(path))
    except asyncssh.SFTPError:
        return False
    return True


async def _local_rules(
    sftp: asyncssh.SFTPClient, folder: str, hidden: set[str], rules: _Rules
) -> _Rules:
    """Add the ignore files of `folder` to the rules from above it (as `_Rules.local`)."""
    ignores, gitignores, excludes, in_git = (
        rules.ignores,
        rules.gitignores,
        rules.excludes,
        rules.in_git,
    )
    changed = False
    if ".git" in hidden:
        # The top of a repository: .gitignore files above it do not count.
        in_git, gitignores, changed = True, (), True
        exclude = await _load_ignore_file(sftp, f"{folder}/.git/info/exclude")
        excludes = ((exclude, ""),) if exclude is not None else ()
    if ".ignore" in hidden:
        found = await _load_ignore_file(sftp, f"{folder}/.ignore")
        if found is not None:
            ignores, changed = ((found, ""), *ignores), True
    if in_git and ".gitignore" in hidden:
        found = await _load_ignore_file(sftp, f"{folder}/.gitignore")
        if found is not None:
            gitignores, changed = ((found, ""), *gitignores), True
    if not changed:
        return rules
    return _Rules(ignores, gitignores, excludes, in_git, False)


async def _rules_above(sftp: asyncssh.SFTPClient, real: str) -> _Rules:
    """The ignore files in the folders above `real` that apply below it (as `_rules_above`)."""
    folders = []
    child = real
    while (parent := posixpath.dirname(child)) != child:
        folders.append((parent, posixpath.relpath(real, parent) + "/"))
        child = parent
    ignores: list[tuple[_Compiled, str]] = []
    for folder, prefix in folders:
        found = await _load_ignore_file(sftp, posixpath.join(folder, ".ignore"))
        if found is not None:
            ignores.append((found, prefix))
    gitignores: list[tuple[_Compiled, str]] = []
    excludes: list[tuple[_Compiled, str]] = []
    in_git = await _exists(sftp, posixpath.join(real, ".git"))
    if not in_git:
        for folder, prefix in folders:
            found = await _load_ignore_file(sftp, posixpath.join(folder, ".gitignore"))
            if found is not None:
                gitignores.append((found, prefix))
            if await _exists(sftp, posixpath.join(folder, ".git")):
                in_git = True
                exclude = await _load_ignore_file(sftp, posixpath.join(folder, ".git/info/exclude"))
                if exclude is not None:
                    excludes.append((exclude, prefix))
                break
        if not in_git:
            gitignores.clear()
    return _Rules(tuple(ignores), tuple(gitignores), tuple(excludes), in_git, False)


def _enter(rules: _Rules, name: str) -> _Rules:
    """The rules from above for `rules`' child folder `name`, before its own ignore files."""
    return _Rules(
        _descend(rules.ignores, name),
        _descend(rules.gitignores, name),
        _descend(rules.excludes, name),
        rules.in_git,
        False,
        rules.names,
    )
