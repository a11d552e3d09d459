"""The file walker behind `ToolExecutor.stream_files`: ripgrep's listing, then a read.

What is listed is what `rg --files` lists with its defaults, by the rules of
`executor._files.rules` (shared with the SFTP walker):

- `.ignore` files always count; `.gitignore` files and `.git/info/exclude`
  only inside a git repository (a `.git` in the walked folder or above).
  Ignore files above the walked folder count too, `.gitignore` ones only up
  to the repository's top.
- For each entry, each kind of ignore file is asked from the deepest folder
  up, and the first one with a matching pattern (ignoring or `!`re-including)
  decides for its kind; `.ignore` beats `.gitignore`, which beats
  `.git/info/exclude`. Within one file the last matching pattern wins.
- Hidden entries (names starting with `.`) are skipped unless a `!` pattern
  re-includes them, as in ripgrep; `.git` is skipped always. Symlinks and
  non-regular files are skipped. An ignored folder is not entered, so
  nothing below it can come back.

Then each regular file is read; one with a NUL byte is binary and skipped, the
rest is decoded as UTF-8 with invalid bytes replaced. Not implemented from
ripgrep: `.rgignore`, git's global excludes file (`core.excludesFile`), and
UTF-16 transcoding (such files hold NUL bytes, so they count as binary).

The root is a path, or an open descriptor of a folder (for a caller that
confines the walk, e.g. with `openat2` and `RESOLVE_BENEATH`). From a
descriptor no path is used at all, and only the ignore files inside the tree
count: none above the root, and `.gitignore` files only where the root or a
folder inside holds a `.git` entry (see `iter_text_files`).

Below the root, every folder and file is opened relative to its folder's
descriptor, never following a symlink. Costs, in a tree of small files: per
file, an open, one `pread` and a close (the system calls cost more than all
the Python around them), per folder an open and a `scandir`.
"""

from __future__ import annotations

import bisect
import errno
import operator
import os
import stat
from collections.abc import AsyncGenerator, Callable, Coroutine, Generator, Iterator
from typing import Any, TypeVar

import anyio.to_thread

from executor._core.base import LoadedFile
from executor._files.rules import (
    GIT_EXCLUDE,
    RULE_NAMES,
    Compiled,
    IgnoreFileName,
    Rules,
    as_text,
    compile_ignore_text,
    normalise_extensions,
    rules_above,
    skipped,
    wanted,
    warn_ignore_file,
    warn_unlistable,
    warn_unreadable,
)

__all__ = ["iter_text_files", "normalise_extensions", "stream_text_files"]

# O_NOFOLLOW: an entry swapped for a symlink after listing is refused, not
# followed. O_NONBLOCK: a FIFO swapped in after listing opens at once instead
# of waiting forever for a writer (and is then refused by `pread`, see
# `_read_regular`).
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
# The first read of a file asks for this much: a shorter answer is the whole
# file. Below glibc's mmap threshold (128 KiB), so the buffer Python allocates
# for it, then shrinks to what was read, costs no system call.
_FIRST_READ = 1 << 16
# Folders are opened, listed and read from through their own descriptor, each
# relative to its parent's: a folder swapped for a symlink during the walk is
# refused rather than followed out of the tree, and the kernel resolves one
# name per open instead of a whole path.
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC

# Per hop to the worker thread (some 0.1 ms each): enough files that hops cost
# little next to the reading, few enough bytes that a batch never holds much
# memory. The first batch is smaller, so that the first files come soon; each
# next one holds twice as many files, up to `_BATCH_FILES`.
_BATCH_FILES_FIRST = 64
_BATCH_FILES = 4096
_BATCH_BYTES = 4 << 20

_by_name = operator.attrgetter("name")

_T = TypeVar("_T")


def iter_text_files(
    root: str | int, *, extensions: frozenset[str] | None
) -> Iterator[tuple[str, str]]:
    """Yield every text file below `root`, as `rg --files` lists them, with its content.

    Blocking: run it in a worker thread. Folders are walked depth first, names
    in sorted order, so the same tree always gives the same sequence. A file
    or folder that cannot be read is logged as a warning on the `executor`
    logger and skipped; the walk goes on.

    Args:
        root: The folder to walk, as a path or as an open descriptor.

            A path: a symlink here is followed, as ripgrep follows a path it
            is given; a regular file yields just itself.

            A descriptor (`int`) of a folder, opened by the caller (with
            `O_RDONLY | O_DIRECTORY`, `O_PATH`, or `openat2` with
            `RESOLVE_BENEATH`...): no path is used at all. The walk opens
            `"."` relative to it for a descriptor of its own (what `dup`
            would give, but with its own read offset, and readable even
            from an `O_PATH` one), walks relative to that, and never closes
            or moves the caller's, which must stay open until the walk has
            begun. Only the ignore files inside the tree count: none above
            it, and `.gitignore` files only if the root or a folder above
            them inside the tree has a `.git` entry; ignore files and
            `.git/info/exclude` are not read through a symlink (a warning
            says so for an ignore file), and a `.git` file (a worktree's or
            submodule's) gives no exclude file, since it names a folder
            elsewhere.
        extensions: From `normalise_extensions`; `None` keeps every file.

    Yields:
        `(path, content)`: the path relative to `root` with `/` separators
        (the file's name when `root` is a file), and the text decoded as UTF-8
        with invalid bytes replaced.

    Raises:
        FileNotFoundError: `root` does not exist.
        NotADirectoryError: `root` is a descriptor, but not of a folder.
        OSError: `root` itself cannot be examined or listed (`EBADF`: the
            descriptor is not open).

    """
    return _walk(root, extensions, root if isinstance(root, str) else f"<fd {root}>", None, _pair)


def _pair(path: str, content: str) -> tuple[str, str]:
    return path, content


async def stream_text_files(
    root: str | int,
    display_root: str,
    *,
    extensions: frozenset[str] | None,
    base: tuple[int, str] | None = None,
) -> AsyncGenerator[LoadedFile, None]:
    """Yield the text files below `root` as `LoadedFile`s, read in a worker thread.

    The walk (see `iter_text_files`) runs in batches of files in a worker
    thread, so the event loop never blocks on the disk and thread hops stay
    rare. Closing the iterator early closes the walk.

    Args:
        root: The folder to walk, as the OS should open it, or an open
            descriptor of it (see `iter_text_files`: then no path is used,
            and only the ignore files inside the tree count). The caller
            keeps and closes its descriptor; it must stay open until the
            first file is yielded.
        display_root: What `LoadedFile.path` starts with instead: each path is
            `os.path.join(display_root, relative)`, or `display_root` itself
            when `root` is a file.
        extensions: From `normalise_extensions`; `None` keeps every file.
        base: With a descriptor `root`: the folder it lies beneath, as an
            open descriptor and its (trusted) path. The ignore files of that
            folder, of the folders above it, and of the folders between it
            and `root` (reached by name beneath the descriptor, through no
            symlink) then count as well, as they would for a path. The
            caller keeps and closes the descriptor, open until the first
            file is yielded.

    Yields:
        One `LoadedFile` per text file, in the order of `iter_text_files`.

    Raises:
        FileNotFoundError: `root` does not exist; raised before anything is
            yielded, naming `display_root`.
        NotADirectoryError: `root` is a descriptor, but not of a folder.
        OSError: `root` itself cannot be examined or listed.

    """
    # The class itself makes each file, with its fields positional: no extra
    # call per file, and attrs' keyword call would cost twice as much.
    files = _walk(root, extensions, display_root or ".", display_root, LoadedFile, base)
    limit = _BATCH_FILES_FIRST

    def next_batch() -> list[LoadedFile]:
        nonlocal limit
        batch: list[LoadedFile] = []
        size = 0
        for loaded in files:
            batch.append(loaded)
            size += len(loaded.content)
            if len(batch) >= limit or size >= _BATCH_BYTES:
                break
        limit = min(2 * limit, _BATCH_FILES)
        return batch

    try:
        # Not abandoned on cancellation, so the walk is never closed while the
        # worker thread is still inside it.
        while batch := await anyio.to_thread.run_sync(next_batch):
            for loaded in batch:
                yield loaded
    finally:
        files.close()


def _walk(
    root: str | int,
    extensions: frozenset[str] | None,
    shown_root: str,
    display: str | None,
    make: Callable[[str, str], _T],
    base: tuple[int, str] | None = None,
) -> Generator[_T, None, None]:
    # `display` None: paths relative to root (`iter_text_files`); otherwise
    # paths start with it, as `os.path.join(display, relative)` would.
    # `shown_root` names the root in errors and warnings. Each file is
    # yielded as `make(path, text)`: built right here, in the worker thread,
    # it costs no extra object or generator step per file.
    out = "" if not display else display if display.endswith("/") else display + "/"
    if not isinstance(root, str):
        try:
            if root < 0:
                # Not even AT_FDCWD (-100), which would open the working directory.
                raise OSError(errno.EBADF, os.strerror(errno.EBADF))
            # Not by any name: "." relative to the caller's descriptor is the
            # very folder it holds, wherever that is now.
            root_fd = os.open(".", _DIR_FLAGS, dir_fd=root)
        except OSError as exc:
            raise type(exc)(exc.errno, exc.strerror, shown_root) from exc
        try:
            rules = None if base is None else _rules_of_target(*base, root_fd)
        except BaseException:
            os.close(root_fd)
            raise
        # Warnings name what the caller knows: the displayed path, else the relative one.
        yield from _walk_tree(None, root_fd, extensions, out, out, shown_root, make, rules)
        return
    try:
        mode = os.stat(root).st_mode
    except (FileNotFoundError, NotADirectoryError) as exc:
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), shown_root) from exc
    except OSError as exc:
        raise type(exc)(exc.errno, exc.strerror, shown_root) from exc
    if stat.S_ISDIR(mode):
        try:
            # The root was named explicitly, so a symlink to it is followed.
            root_fd = os.open(root, _DIR_FLAGS & ~os.O_NOFOLLOW)
        except OSError as exc:
            raise type(exc)(exc.errno, exc.strerror, shown_root) from exc
        # Warnings name what the caller knows: the displayed path, else the real one.
        warn = out if display is not None else root if root.endswith("/") else root + "/"
        yield from _walk_tree(root, root_fd, extensions, out, warn, shown_root, make)
    elif stat.S_ISREG(mode):
        name = os.path.basename(os.path.normpath(root))
        if wanted(name, extensions):
            # The root was named explicitly, so a symlink to it is followed.
            text = _read_text(root, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC, shown_root)
            if text is not None:
                yield make(name if display is None else display or name, text)
    # Anything else (FIFO, socket, device) is not a file to read: nothing.


def _read_text(path: str, flags: int, shown: str) -> str | None:
    # One file read outside the hot loop (the root file); warns and gives None
    # on failure, None also for binary and non-regular files.
    data = _read_file(path, flags, None, shown, warn_unreadable, missing_ok=False)
    return None if data is None else as_text(data)


def _read_file(
    path: str,
    flags: int,
    dir_fd: int | None,
    shown: str,
    warn: Callable[[str, OSError], None],
    *,
    missing_ok: bool,
) -> bytes | None:
    """The whole file at `path` (relative to `dir_fd`, if given), or `None` if not regular.

    Also `None` when it cannot be opened or read: `warn(shown, error)` says
    so, unless `missing_ok` and it is missing (or a folder on its path is
    not one).
    """
    try:
        fd = os.open(path, flags, dir_fd=dir_fd)
    except (FileNotFoundError, NotADirectoryError) as exc:
        if not missing_ok:
            warn(shown, exc)
        return None
    except OSError as exc:
        warn(shown, exc)
        return None
    try:
        return _read_regular(fd)
    except OSError as exc:
        warn(shown, exc)
        return None
    finally:
        os.close(fd)


def _read_regular(fd: int) -> bytes | None:
    """Read an open file to its end, or give `None` if it is not a regular file.

    A file is read first with one `pread` at offset 0 of `_FIRST_READ` bytes,
    with no `fstat` (which would cost a quarter of the reading): the usual
    file is shorter, and a short read of a regular file is its end. Only an
    empty or full first read asks `fstat` (`_read_on`) whether it is a
    regular file, and how much is left to read.

    What the listing said was a regular file may have been swapped for
    something else since; none of that can hang or stream forever. A FIFO
    opens at once with O_NONBLOCK, and like a socket or terminal cannot be
    `pread` (ESPIPE): skipped unread. So is a folder (EISDIR). A device, which
    only root can make, is read once, without blocking, at most
    `_FIRST_READ` bytes; it is skipped if that read is empty (`/dev/null`)
    or full (`/dev/zero`), or holds a NUL byte, and kept only if it answered
    with a short text, as a file would.

    The walk's hot loop inlines this.
    """
    try:
        data = os.pread(fd, _FIRST_READ, 0)
    except OSError:
        if _is_regular(fd):
            raise
        return None
    return data if 0 < len(data) < _FIRST_READ else _read_on(fd, data)


def _read_on(fd: int, data: bytes) -> bytes | None:
    """After a first read that gave `data`, empty or as long as asked: the whole file.

    Or `None` if `fd` is not a regular file after all.
    """
    status = os.fstat(fd)
    if not stat.S_ISREG(status.st_mode):
        return None
    if not data:
        return data
    # Asks for one byte more than fstat said is left, so that getting less
    # means the end was reached: the usual long file costs one more read. A
    # file that grew since is read on to its real end.
    chunks = [data]
    offset = len(data)
    while True:
        wanted = max(status.st_size - offset + 1, _FIRST_READ)
        chunk = os.pread(fd, wanted, offset)
        chunks.append(chunk)
        offset += len(chunk)
        if len(chunk) < wanted:
            return b"".join(chunks)


def _is_regular(fd: int) -> bool:
    """Whether a read error on `fd` is worth a warning: it is a regular file (or fstat fails)."""
    try:
        return stat.S_ISREG(os.fstat(fd).st_mode)
    except OSError:
        return True


def _load_ignore_file(
    path: str, dir_fd: int | None = None, shown: str | None = None, *, follow: bool = True
) -> Compiled | None:
    """Compile the ignore file at `path` (relative to `dir_fd`, if given).

    Returns `None` if the file is missing or has no patterns; a file that
    cannot be read, or a bad pattern, is logged as a warning naming `shown`
    (by default `path`). Without `follow`, a symlink is not read (a warning).
    """
    shown = path if shown is None else shown
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    data = _read_file(path, flags, dir_fd, shown, warn_ignore_file, missing_ok=True)
    return None if data is None else compile_ignore_text(data, shown)


def _git_exclude(
    folder: str, dir_fd: int | None = None, *, confined: bool = False
) -> Compiled | None:
    """The `info/exclude` file of the repository whose top is `folder` (open as `dir_fd`).

    `confined` (with `dir_fd`): `folder` only names things in warnings; only
    a `.git` folder inside is read, reached without following a symlink.
    """
    if confined and dir_fd is not None:
        return _exclude_beneath(dir_fd, os.path.join(folder, ".git", "info", "exclude"))
    try:
        dot_git_mode = os.stat(
            ".git" if dir_fd is not None else os.path.join(folder, ".git"), dir_fd=dir_fd
        ).st_mode
    except OSError:
        return None
    is_link_file = stat.S_ISREG(dot_git_mode)
    if not is_link_file:
        if dir_fd is not None:
            return _load_ignore_file(
                ".git/info/exclude", dir_fd, os.path.join(folder, ".git", "info", "exclude")
            )
        return _load_ignore_file(os.path.join(folder, ".git", "info", "exclude"))
    # A worktree or submodule: `.git` is a file naming the real git folder,
    # and a worktree's `commondir` names the folder that holds `info/`.
    dot_git = os.path.join(folder, ".git")
    try:
        with open(dot_git, encoding="utf-8", errors="replace") as file:
            first = file.readline().strip()
    except OSError:
        return None
    if not first.startswith("gitdir:"):
        return None
    git_dir = os.path.join(folder, first.removeprefix("gitdir:").strip())
    try:
        with open(os.path.join(git_dir, "commondir"), encoding="utf-8") as file:
            git_dir = os.path.join(git_dir, file.read().strip())
    except (OSError, ValueError):
        pass
    return _load_ignore_file(os.path.join(git_dir, "info", "exclude"))


def _exclude_beneath(dir_fd: int, shown: str) -> Compiled | None:
    """`.git/info/exclude` below the folder open as `dir_fd`, following no symlink on the way."""
    try:
        git_fd = os.open(".git", _DIR_FLAGS, dir_fd=dir_fd)
    except OSError:
        return None  # Missing, a file (a worktree's or submodule's), a symlink.
    try:
        info_fd = os.open("info", _DIR_FLAGS, dir_fd=git_fd)
    except OSError:
        return None
    finally:
        os.close(git_fd)
    try:
        return _load_ignore_file("exclude", info_fd, shown, follow=False)
    finally:
        os.close(info_fd)


class _Disk:
    """The local disk as the rules' `IgnoreFiles`: by path, or in one folder open as `dir_fd`.

    Its reads are blocking calls that never wait on an event loop, so the
    rules' coroutines built on it run to their end at once (`_run_now`).
    """

    __slots__ = ("confined", "dir_fd")

    def __init__(self, dir_fd: int | None = None, confined: bool = False) -> None:
        # `dir_fd`: the folder `read` is given, already open; the folder's
        # path then only names its files in warnings. `confined`: read no
        # ignore file through a symlink, nor a `.git` file's repository.
        self.dir_fd = dir_fd
        self.confined = confined

    async def read(self, folder: str, name: IgnoreFileName) -> Compiled | None:
        """Compile `folder`'s ignore file `name` (see `IgnoreFiles.read`)."""
        if name == GIT_EXCLUDE:
            return _git_exclude(folder, self.dir_fd, confined=self.confined)
        if self.dir_fd is None:
            return _load_ignore_file(os.path.join(folder, name))
        shown = os.path.join(folder, name)
        return _load_ignore_file(name, self.dir_fd, shown, follow=not self.confined)

    async def has_git(self, folder: str) -> bool:
        """Whether the folder at the path `folder` holds a `.git` entry (see `IgnoreFiles`)."""
        # Blocking on purpose: this coroutine never runs on an event loop (`_run_now`).
        return os.path.lexists(os.path.join(folder, ".git"))  # noqa: ASYNC240


def _run_now(coroutine: Coroutine[Any, Any, _T]) -> _T:
    """The result of `coroutine`, a rule reading through `_Disk`, which never suspends.

    The rules are written once for both walkers, as coroutines, since the
    SFTP walker must await its server; this walker runs in a worker thread
    with no event loop, and reads the disk directly.
    """
    try:
        coroutine.send(None)
    except StopIteration as done:
        result: _T = done.value
        return result
    coroutine.close()
    raise RuntimeError("a local walk's rules waited for something")


def _rules_above(root: str) -> Rules:
    """The ignore files in the folders above `root` that apply below it."""
    return _run_now(rules_above(os.path.realpath(root), _Disk()))


def _with_folder(rules: Rules, folder: str, dir_fd: int, hidden: set[str]) -> Rules:
    """Add the ignore files of `folder`, open as `dir_fd`, to the rules from above it.

    `hidden`: the names of the folder's hidden entries (see `Rules.add_folder`).
    """
    if RULE_NAMES.isdisjoint(hidden):
        # Nothing to read, so nothing added: spares the usual folder a
        # coroutine and an object or two.
        return rules
    return _run_now(rules.add_folder(_Disk(dir_fd, rules.confined), folder, hidden))


def _rules_of_target(base_fd: int, base: str, target_fd: int) -> Rules | None:
    """The rules of the folder open as `target_fd`, beneath the folder `base_fd` at `base`.

    Those of `base` and the folders above it (read by path: `base` is
    trusted), then of each folder down to the target, each opened by name
    beneath the last with no symlink followed. None when the target cannot be
    reached that way (a symlink on the way, or the tree changed meanwhile):
    the walk then applies the ignore files inside the target alone.
    """
    try:
        inside = os.path.relpath(os.readlink(f"/proc/self/fd/{target_fd}"), os.path.realpath(base))
    except OSError:
        return None
    if inside == "..":
        return None
    names = [] if inside == "." else inside.split("/")
    if names and names[0] == "..":
        return None
    above = _rules_above(base)
    try:
        fd = os.open(".", _DIR_FLAGS, dir_fd=base_fd)
    except OSError:
        return None
    try:
        folder = base
        # Read by name beneath `base_fd` from here on, like the walk itself.
        confined = Rules(above.ignores, above.gitignores, above.excludes, above.in_git, True)
        rules = _with_folder(confined, folder, fd, _list(fd)[1])
        for name in names:
            child = os.open(name, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = child
            folder = os.path.join(folder, name)
            rules = _with_folder(rules.descend(name), folder, fd, _list(fd)[1])
        reached, target = os.fstat(fd), os.fstat(target_fd)
    except OSError:
        return None
    finally:
        os.close(fd)
    if (reached.st_dev, reached.st_ino) != (target.st_dev, target.st_ino):
        return None
    return rules


def _list(dir_fd: int) -> tuple[list[os.DirEntry[str]], set[str]]:
    """The entries of the folder open as `dir_fd` but `.git`, by name, and its hidden names."""
    with os.scandir(dir_fd) as scan:
        entries = sorted(scan, key=_by_name)
    # Sorted, the hidden names are together: from the first name >= "." on
    # while they start with "." (no name holds a "/", which sorts next).
    hidden = set()
    dot_git = -1
    index = bisect.bisect_left(entries, ".", key=_by_name)
    while index < len(entries) and (name := entries[index].name)[0] == ".":
        hidden.add(name)
        if name == ".git":
            dot_git = index
        index += 1
    if dot_git >= 0:
        # Never listed, even where ripgrep would (when an ignore file
        # re-includes hidden folders): git's internals are no one's text files.
        del entries[dot_git]
    return entries, hidden


def _walk_tree(
    root: str | None,
    root_fd: int,
    extensions: frozenset[str] | None,
    out: str,
    warn: str,
    shown_root: str,
    make: Callable[[str, str], _T],
    root_rules: Rules | None = None,
) -> Iterator[_T]:
    """Yield `make(out + relative path, text)` for the text files below the folder `root`.

    Takes over `root_fd`, the open root folder, and closes it. `root` is its
    path, or None when it was given as a descriptor: then no path is ever
    used, and only ignore files inside the tree count (see `Rules`), unless
    `root_rules` gives the rules of the root folder, its own files included.

    This is the hot loop: syscalls only to open and list folders and to open,
    read and close files (scandir's d_type says what an entry is), and ignore
    patterns only tried where some ignore file applies, and on files or
    folders only when their name may match (`Rules.names`).
    """
    # One frame per folder being listed: its descriptor, what is left of its
    # entries, its path relative to root ("" or ending in "/"), the prefix of
    # the paths yielded for its files, and its ignore rules.
    stack: list[tuple[int, Iterator[os.DirEntry[str]], str, str, Rules]] = []
    # Ignore files are named in warnings below this folder.
    named_root = warn if root is None else root
    try:
        try:
            entries, hidden = _list(root_fd)
        except OSError as exc:
            raise type(exc)(exc.errno, exc.strerror, shown_root) from exc
        if root_rules is not None:
            rules = root_rules
        elif root is None:
            rules = _with_folder(Rules((), (), (), False, True), named_root, root_fd, hidden)
        else:
            rules = _with_folder(_rules_above(root), root, root_fd, hidden)
        stack.append((root_fd, iter(entries), "", out, rules))
        root_fd = -1
        multi = tuple("." + e for e in extensions if "." in e) if extensions is not None else ()
        os_open, os_pread, os_close = os.open, os.pread, os.close
        read_flags, dir_flags, first_read = _READ_FLAGS, _DIR_FLAGS, _FIRST_READ
        while stack:
            dir_fd, remaining, relative, out_folder, rules = stack[-1]
            chain = rules.chain
            file_names, dir_names = rules.names
            for entry in remaining:
                name = entry.name
                if not chain and name[0] == ".":
                    continue  # Hidden, and no ignore file here could re-include it.
                try:
                    is_file = entry.is_file(follow_symlinks=False)
                    is_dir = not is_file and entry.is_dir(follow_symlinks=False)
                except OSError as exc:
                    # Only when the file system gives no type and the entry is gone.
                    warn_unreadable(warn + relative + name, exc)
                    continue
                if is_dir:
                    # `Rules.keeps`, inlined; the name filter spares most names `skipped`.
                    if chain and (
                        name[0] == "."
                        if dir_names is not None and dir_names.fullmatch(name + "/") is None
                        else skipped(chain, name, True)
                    ):
                        continue
                    try:
                        child_fd = os_open(name, dir_flags, dir_fd=dir_fd)
                    except OSError as exc:
                        warn_unlistable(warn + relative + name, exc)
                        continue
                    try:
                        child_entries, child_hidden = _list(child_fd)
                        child = f"{relative}{name}/"
                        folder = os.path.join(named_root, child)
                        child_rules = _with_folder(
                            rules.descend(name), folder, child_fd, child_hidden
                        )
                    except OSError as exc:
                        os_close(child_fd)
                        warn_unlistable(warn + relative + name, exc)
                        continue
                    except BaseException:
                        os_close(child_fd)
                        raise
                    stack.append(
                        (child_fd, iter(child_entries), child, out_folder + name + "/", child_rules)
                    )
                    break  # Depth first: the child's entries come before our next ones.
                if not is_file:
                    continue  # Symlinks, FIFOs, sockets and devices are never opened.
                # `Rules.keeps`, inlined, as for folders: `wanted`, then the ignore files.
                if extensions is not None:
                    dot = name.rfind(".")
                    if dot < 0 or (
                        name[dot + 1 :] not in extensions and not (multi and name.endswith(multi))
                    ):
                        continue
                if chain and (
                    name[0] == "."
                    if file_names is not None and file_names.fullmatch(name) is None
                    else skipped(chain, name, False)
                ):
                    continue
                try:
                    fd = os_open(name, read_flags, dir_fd=dir_fd)
                except OSError as exc:
                    warn_unreadable(warn + relative + name, exc)
                    continue
                try:
                    # `_read_regular`, inlined: this runs for every file.
                    data = os_pread(fd, first_read, 0)
                    if not 0 < len(data) < first_read:
                        whole = _read_on(fd, data)
                        if whole is None:
                            continue  # Not a regular file after all.
                        data = whole
                except OSError as exc:
                    if _is_regular(fd):
                        warn_unreadable(warn + relative + name, exc)
                    continue
                finally:
                    os_close(fd)
                # `as_text`, inlined. `0 not in data` is faster than `b"\0" in data`:
                # no buffer for the needle.
                if 0 not in data:
                    yield make(out_folder + name, data.decode("utf-8", "replace"))
            else:
                stack.pop()
                os_close(dir_fd)
    finally:
        if root_fd >= 0:
            os.close(root_fd)
        for frame in stack:
            os.close(frame[0])
