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

Past its first `_FORK_AFTER` files to read, a walk shares the reading with a
child process it forks (`executor._files.reader`): the walk lists, applies
the rules and keeps the order, and sends the child runs of names with their
folder's descriptor; the child opens, reads and decodes them on the other
core, with a GIL of its own. Threads would not do: each hands the GIL to the
others around every system call, and two reading threads took longer than
one. The files yielded, their order and the warnings about files are the
same either way; a walk ends its child when it ends or is closed.
"""

from __future__ import annotations

import bisect
import errno
import operator
import os
import stat
import types
from collections import deque
from collections.abc import AsyncGenerator, Callable, Coroutine, Generator, Iterator
from typing import Any, TypeVar

import anyio.to_thread
import attrs

from executor._core.base import LoadedFile
from executor._files.reader import (
    FIRST_READ,
    READ_FLAGS,
    REQUEST_FILES,
    REQUEST_RUNS,
    SKIPPED,
    ForkedReader,
    ReaderGone,
    is_regular,
    read_on,
    spare_core,
)
from executor._files.rules import (
    GIT_EXCLUDE,
    RULE_NAMES,
    Compiled,
    IgnoreFileName,
    Rules,
    as_text,
    compile_ignore_text,
    rules_above,
    skipped,
    wanted,
    warn_ignore_file,
    warn_unlistable,
    warn_unreadable,
)

# How each file is opened and first read: see `executor._files.reader`, whose
# forked child reads with the same flags.
_READ_FLAGS = READ_FLAGS
_FIRST_READ = FIRST_READ
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

# The walk reads a folder's files in runs of at most this many (those between
# two subfolders, cut), and yields each run as a list: one step of the
# generators per run, not per file.
_RUN_FILES = 128
# Reads are shared with a forked child (`executor._files.reader`) once the walk
# has found more than this many files to read: a smaller walk is over before
# a fork (a few milliseconds) pays, and never pays for one.
_FORK_AFTER = 2048
# At most this many files asked of the child and not yet answered: enough that
# it never waits for more while the walk lists and reads on, few enough that
# the walk's end does not wait long for its last answers.
_CHILD_WINDOW = 2048
_REQUEST_FILES = REQUEST_FILES
# Files the walk read itself and holds behind an unanswered request, at most:
# past this it waits for the answer.
_HELD_FILES = 8192
# And bytes of text: so that a tree of long files holds no more than a batch
# or so of them.
_HELD_BYTES = 8 << 20
# A request is sent once it holds this many files (or at most `_REQUEST_FILES`
# and `REQUEST_RUNS` runs): fewer, larger messages, each costing two system
# calls a side.
_SEND_FILES = 96

_by_name = operator.attrgetter("name")

# A run asked of the child: the names, the descriptor of their folder (the
# walk's own, kept open until answered), the prefix of their yielded paths and
# of their warnings.
_Request = tuple[list[str], int, str, str]
# A run of text files as the walk yields it: their paths, and their texts.
_Run = tuple[list[str], list[str]]
# Warnings about files the walk read itself, given only once the files before
# them are yielded: as the path and the error.
_Deferred = list[tuple[str, OSError]]

_T = TypeVar("_T")


def iter_text_files(
    root: str | int, *, extensions: frozenset[str] | None, fork_after: int | None = _FORK_AFTER
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
        fork_after: Once the walk has found more files than this to read, a
            forked child process reads a share of them, on another core
            (`executor._files.reader`), if one is free (else the walk asks
            again every `_FORK_AFTER` files); `None`: never. The files and their
            order are the same either way. The child ends with the walk:
            closing the iterator early kills and reaps it at once.

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
    shown = root if isinstance(root, str) else f"<fd {root}>"
    return _each(_walk(root, extensions, shown, None, fork_after=fork_after))


def _each(runs: Generator[_Run, None, None]) -> Generator[tuple[str, str], None, None]:
    """The files of the walk's runs, one by one; closing it closes the walk."""
    try:
        for paths, texts in runs:
            yield from zip(paths, texts, strict=True)
    finally:
        runs.close()


async def stream_text_files(
    root: str | int,
    display_root: str,
    *,
    extensions: frozenset[str] | None,
    base: tuple[int, str] | None = None,
    fork_after: int | None = _FORK_AFTER,
) -> AsyncGenerator[LoadedFile, None]:
    """Yield the text files below `root` as `LoadedFile`s, read in a worker thread.

    The walk (see `iter_text_files`) runs in batches of files in a worker
    thread, so the event loop never blocks on the disk and thread hops stay
    rare; past `fork_after` files, a forked child reads a share of them.
    Closing the iterator early closes the walk, and ends that child.

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
        fork_after: See `iter_text_files`.

    Yields:
        One `LoadedFile` per text file, in the order of `iter_text_files`.

    Raises:
        FileNotFoundError: `root` does not exist; raised before anything is
            yielded, naming `display_root`.
        NotADirectoryError: `root` is a descriptor, but not of a folder.
        OSError: `root` itself cannot be examined or listed.

    """
    files = _walk(root, extensions, display_root or ".", display_root, base, fork_after)
    limit = _BATCH_FILES_FIRST

    def next_batch() -> list[_Run]:
        # Whole runs (up to `_RUN_FILES` files) at a time: a batch may hold
        # a run more than its limits.
        nonlocal limit
        batch: list[_Run] = []
        count = size = 0
        for run in files:
            batch.append(run)
            count += len(run[1])
            size += sum(map(len, run[1]))
            if count >= limit or size >= _BATCH_BYTES:
                break
        limit = min(2 * limit, _BATCH_FILES)
        return batch

    make = _loaded_file
    try:
        # Not abandoned on cancellation, so the walk is never closed while the
        # worker thread is still inside it.
        while batch := await anyio.to_thread.run_sync(next_batch):
            # Each `LoadedFile` is made as it is yielded, not in the batch: a
            # batch of strings only is nothing for the garbage collector to
            # scan, where thousands of objects held in it would be, again
            # and again, and pass to its older generations.
            for paths, texts in batch:
                for path, text in zip(paths, texts, strict=True):
                    yield make(path, text)
    finally:
        files.close()


def _maker_of(cls: type[LoadedFile]) -> Callable[[str, str], LoadedFile]:
    """What makes each `LoadedFile` a stream yields: `cls(path, content)`, in half the time.

    A frozen attrs class sets each field in its `__init__` through
    `object.__setattr__`, looked up per instance; this sets the slots
    directly, as that would, through their descriptors. A stream makes one
    per file it yields, in the process whose Python is the walk's narrowest
    part (its forked reader only reads). Only for the class as it is now:
    two slotted fields, no validator, converter or hook; any other shape
    gets the class itself.
    """
    fields = attrs.fields(cls)
    path_slot, content_slot = cls.__dict__.get("path"), cls.__dict__.get("content")
    if (
        [field.name for field in fields] != ["path", "content"]
        or any(f.validator or f.converter or not f.init for f in fields)
        or hasattr(cls, "__attrs_pre_init__")
        or hasattr(cls, "__attrs_post_init__")
        or cls.__new__ is not object.__new__
        or not isinstance(path_slot, types.MemberDescriptorType)
        or not isinstance(content_slot, types.MemberDescriptorType)
    ):
        return cls
    new, set_path, set_content = object.__new__, path_slot.__set__, content_slot.__set__

    def make(path: str, content: str) -> LoadedFile:
        loaded: LoadedFile = new(cls)
        set_path(loaded, path)
        set_content(loaded, content)
        return loaded

    return make if make("p", "c") == cls("p", "c") else cls


_loaded_file = _maker_of(LoadedFile)


def _walk(
    root: str | int,
    extensions: frozenset[str] | None,
    shown_root: str,
    display: str | None,
    base: tuple[int, str] | None = None,
    fork_after: int | None = None,
) -> Generator[_Run, None, None]:
    # `display` None: paths relative to root (`iter_text_files`); otherwise
    # paths start with it, as `os.path.join(display, relative)` would.
    # `shown_root` names the root in errors and warnings. Each run of files
    # is yielded as two lists, of their paths and of their texts.
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
        yield from _walk_tree(None, root_fd, extensions, out, out, shown_root, rules, fork_after)
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
        yield from _walk_tree(root, root_fd, extensions, out, warn, shown_root, None, fork_after)
    elif stat.S_ISREG(mode):
        name = os.path.basename(os.path.normpath(root))
        if wanted(name, extensions):
            # The root was named explicitly, so a symlink to it is followed.
            text = _read_text(root, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC, shown_root)
            if text is not None:
                yield [name if display is None else display or name], [text]
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


_read_on = read_on
_is_regular = is_regular
# Asked before each fork; the tests make it say yes, to fork on a busy machine too.
_spare_core = spare_core


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
    root_rules: Rules | None = None,
    fork_after: int | None = None,
) -> Iterator[_Run]:
    """Yield `out + relative path` and the text of each text file below the folder `root`.

    A run of files at a time (at most `_RUN_FILES`), as the list of their
    paths and the list of their texts. Takes over
    `root_fd`, the open root folder, and closes it. `root` is its path, or
    None when it was given as a descriptor: then no path is ever used, and
    only ignore files inside the tree count (see `Rules`), unless
    `root_rules` gives the rules of the root folder, its own files included.

    This is the hot loop: syscalls only to open and list folders and to open,
    read and close files (scandir's d_type says what an entry is), and ignore
    patterns only tried where some ignore file applies, and on files or
    folders only when their name may match (`Rules.names`). Each folder's
    files to read come as runs, those between two of its subfolders, and are
    read together.

    Once more than `fork_after` files were found to read (never with None),
    and a core is free (`spare_core`; if not, it is asked again after each
    `_FORK_AFTER` more files), a forked child (`ForkedReader`) reads a share
    of the runs on the other core, while this loop lists on and reads the rest: whenever the child
    has fewer than `_CHILD_WINDOW` files left to answer, the next run goes
    to it, else the loop reads it itself. The files are yielded in the same
    order all the same: what the loop read itself waits behind the child's
    earlier answers (`_Share`). Should the child end early, the loop reads
    what it had asked of it, and the rest, itself. Warnings about folders and
    ignore files are logged as the loop meets them, so they may come before
    those about files ahead of them, which wait with their files.
    """
    # One frame per folder being listed: its descriptor, what is left of its
    # entries, its path relative to root ("" or ending in "/"), the prefix of
    # the paths yielded for its files, and its ignore rules.
    stack: list[tuple[int, Iterator[os.DirEntry[str]], str, str, Rules]] = []
    # Ignore files are named in warnings below this folder.
    named_root = warn if root is None else root
    share: _Share | None = None

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
        os_open, os_close = os.open, os.close
        dir_flags, run_files = _DIR_FLAGS, _RUN_FILES
        # Files found to read so far, until the child is forked.
        found = 0
        while stack:
            dir_fd, remaining, relative, out_folder, rules = stack[-1]
            chain = rules.chain
            file_names, dir_names = rules.names
            run: list[str] = []
            listed = False
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
                run.append(name)
                if len(run) >= run_files:
                    break  # The rest of the folder comes with the next runs.
            else:
                listed = True
            if run:
                if share is None and fork_after is not None:
                    found += len(run)
                    if found <= fork_after:
                        pass
                    elif not _spare_core():
                        fork_after = found + _FORK_AFTER  # Asked again further on.
                    elif (reader := ForkedReader.start()) is None:
                        fork_after = None  # A fork that failed is not tried again.
                    else:
                        share = _Share(reader)
                if share is None:
                    paths, texts, failed, _ = _read_run(dir_fd, run, out_folder, warn + relative)
                    for path, error in failed:
                        warn_unreadable(path, error)
                    if texts:
                        yield paths, texts
                else:
                    rest = share.offer(dir_fd, run, out_folder, warn + relative)
                    if rest:
                        share.hold(*_read_run(dir_fd, rest, out_folder, warn + relative))
                    yield from share.ready(final=False)
            if listed:
                stack.pop()
                if share is None or share.release(dir_fd):
                    os_close(dir_fd)
        if share is not None:
            yield from share.ready(final=True)
    finally:
        if share is not None:
            share.close()
        if root_fd >= 0:
            os.close(root_fd)
        for frame in stack:
            os.close(frame[0])


class _Share:
    """The reads a walk shares with its forked child (see `_walk_tree`), and what waits on them.

    The walk offers each run of files to read (`offer`): what the child's
    window has room for is asked of it, in requests of several runs, and the
    rest the walk reads itself and hands in (`hold`). `ready` yields the
    files in the walk's order, answers and the walk's own reads alike, as far
    as they have come.

    A run asked of the child is read from its folder's descriptor, the
    walk's own, which stays open until the answer came (`release`): should
    the child end, or a request not fit in its socket, the walk reads the
    run itself from it.
    """

    __slots__ = (
        "asked",
        "batch",
        "batch_files",
        "held",
        "held_bytes",
        "held_sizes",
        "lent",
        "orphans",
        "pending",
        "reader",
    )

    def __init__(self, reader: ForkedReader) -> None:
        self.reader: ForkedReader | None = reader
        # In order, what is not yet yielded: runs asked of the child, and
        # files the walk read itself (with their warnings).
        self.pending: deque[_Request | tuple[list[str], list[str], _Deferred]] = deque()
        # How many of those files the walk read itself.
        self.held = 0
        # And the bytes of their texts, with the length of each held run's.
        self.held_bytes = 0
        self.held_sizes: deque[int] = deque()
        # How many runs in `pending` were sent and are not yet answered:
        # the first ones; the runs after them, `batch`, are not yet sent.
        self.asked = 0
        self.batch: list[tuple[int, list[str]]] = []
        self.batch_files = 0
        # The folders' descriptors that runs asked of the child read from,
        # with how many runs each; those whose folder the walk has left are
        # closed once their last run is answered.
        self.lent: dict[int, int] = {}
        self.orphans: set[int] = set()

    def offer(self, dir_fd: int, run: list[str], out_folder: str, warn_folder: str) -> list[str]:
        """Ask the child for what of `run` its window has room for; return the rest, to read."""
        reader = self.reader
        if reader is None:
            return run
        give = min(len(run), _CHILD_WINDOW - reader.outstanding - self.batch_files)
        start = 0
        while start < give:
            if (
                self.batch_files >= _REQUEST_FILES or len(self.batch) >= REQUEST_RUNS
            ) and not self.flush():
                break
            names = run[start : start + min(give - start, _REQUEST_FILES - self.batch_files)]
            self.pending.append((names, dir_fd, out_folder, warn_folder))
            self.batch.append((dir_fd, names))
            self.batch_files += len(names)
            self.lent[dir_fd] = self.lent.get(dir_fd, 0) + 1
            start += len(names)
        if self.batch_files >= _SEND_FILES:
            self.flush()
        return run[start:] if start else run

    def hold(self, paths: list[str], texts: list[str], deferred: _Deferred, size: int) -> None:
        """Queue files the walk read itself, behind the runs asked before them.

        Their `paths` and `texts`; `deferred`: the warnings of that read,
        given when the files are yielded; `size`: the length of their texts.
        """
        if self.batch:
            self.flush()  # They stay at the end of `pending`.
        self.pending.append((paths, texts, deferred))
        self.held += len(texts)
        self.held_bytes += size
        self.held_sizes.append(size)

    def flush(self) -> bool:
        """Send the runs of `batch`; if they cannot be, read them here. False then."""
        batch = self.batch
        if not batch:
            return True
        sent = self.reader is not None and self.reader.send(batch)
        self.batch, self.batch_files = [], 0
        if sent:
            self.asked += len(batch)
            return True
        # They are the last in `pending`: read here, in their place.
        unsent = [self.pending.pop() for _ in batch]
        for request in reversed(unsent):
            assert len(request) == 4
            self.hold(*self._read_here(request))
        return False

    def ready(self, *, final: bool) -> Iterator[_Run]:
        """Yield the files at the front of `pending` that are read; with `final`, all of them.

        Waits for the child's answer only with `final`, or when the walk
        holds more than `_HELD_FILES` of its own files, or `_HELD_BYTES` of
        text, behind it.
        """
        pending = self.pending
        while pending:
            front = pending[0]
            if len(front) == 3:
                pending.popleft()
                paths, texts, deferred = front
                self.held -= len(texts)
                self.held_bytes -= self.held_sizes.popleft()
                for path, error in deferred:
                    warn_unreadable(path, error)
                if texts:
                    yield paths, texts
                continue
            block = final or self.held > _HELD_FILES or self.held_bytes > _HELD_BYTES
            if not self.asked and (not block or not self.flush()):
                # Not sent yet: it will be with the next runs. Or it could
                # not be sent, and was read here.
                if block:
                    continue
                return
            assert self.reader is not None
            try:
                answer = self.reader.take(block=block)
            except ReaderGone:
                self._read_all_here()
                continue
            if answer is None:
                return
            pending.popleft()
            self.asked -= 1
            names, fd, out_folder, warn_folder = front
            self._give_back(fd)
            texts, others = answer
            for index, code in zip(others[::2], others[1::2], strict=True):
                if code != SKIPPED:
                    name = names[index]
                    warn_unreadable(warn_folder + name, OSError(code, os.strerror(code)))
            if not texts:
                continue
            # The paths in one C-level pass, less those of the other files
            # (from the last, so that each index still holds).
            paths = list(map(out_folder.__add__, names))
            for index in reversed(others[::2]):
                del paths[index]
            yield paths, texts

    def release(self, dir_fd: int) -> bool:
        """Whether the walk, leaving the folder open as `dir_fd`, may close it now.

        If not, a run still unanswered reads from it; it is closed with the
        last such run's answer.
        """
        if dir_fd in self.lent:
            self.orphans.add(dir_fd)
            return False
        return True

    def close(self) -> None:
        """End the child, and close the descriptors of folders the walk has left."""
        if self.reader is not None:
            self.reader.close()
            self.reader = None
        for fd in self.orphans:
            os.close(fd)
        self.orphans.clear()

    def _read_here(self, request: _Request) -> tuple[list[str], list[str], _Deferred, int]:
        names, fd, out_folder, warn_folder = request
        try:
            return _read_run(fd, names, out_folder, warn_folder)
        finally:
            self._give_back(fd)

    def _read_all_here(self) -> None:
        # The child ended: what it was asked is read here, and from now on all.
        assert self.reader is not None
        self.reader.close()
        self.reader = None
        self.asked, self.batch, self.batch_files = 0, [], 0
        # The held runs' sizes, in order, with those read now in their place.
        sizes = iter(list(self.held_sizes))
        self.held_sizes.clear()
        for index, item in enumerate(self.pending):
            if len(item) == 4:
                paths, texts, deferred, size = self._read_here(item)
                self.pending[index] = paths, texts, deferred
                self.held += len(texts)
                self.held_bytes += size
            else:
                size = next(sizes)
            self.held_sizes.append(size)

    def _give_back(self, fd: int) -> None:
        left = self.lent[fd] - 1
        if left:
            self.lent[fd] = left
            return
        del self.lent[fd]
        if fd in self.orphans:
            self.orphans.remove(fd)
            os.close(fd)


def _read_run(
    dir_fd: int, names: list[str], out_folder: str, warn_folder: str
) -> tuple[list[str], list[str], _Deferred, int]:
    """`out_folder + name` and the text of each text file of `names` in the folder open as `dir_fd`.

    Each is opened, read with one `pread` (`_read_regular`, inlined: this runs
    for every file the walk reads itself), closed, checked for a NUL byte and
    decoded. Returns the paths and the texts of the text files; the warnings
    of those that could not be read (`warn_folder + name` and the error), for
    the caller to log in their place in the walk's order; and the length of
    the texts.
    """
    paths: list[str] = []
    texts: list[str] = []
    failed: _Deferred = []
    size = 0
    os_open, os_pread, os_close = os.open, os.pread, os.close
    read_flags, first_read = _READ_FLAGS, _FIRST_READ
    for name in names:
        try:
            fd = os_open(name, read_flags, dir_fd=dir_fd)
        except OSError as exc:
            failed.append((warn_folder + name, exc))
            continue
        try:
            data = os_pread(fd, first_read, 0)
            if not 0 < len(data) < first_read:
                whole = _read_on(fd, data)
                if whole is None:
                    continue  # Not a regular file after all.
                data = whole
        except OSError as exc:
            if _is_regular(fd):
                failed.append((warn_folder + name, exc))
            continue
        finally:
            os_close(fd)
        # `as_text`, inlined. `0 not in data` is faster than `b"\0" in data`:
        # no buffer for the needle.
        if 0 not in data:
            paths.append(out_folder + name)
            texts.append(data.decode("utf-8", "replace"))
            size += len(data)
    return paths, texts, failed, size
