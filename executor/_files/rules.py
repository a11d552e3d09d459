"""The listing rules of `stream_files`, shared by the local and the SFTP walker.

Both walkers list what `rg --files` lists with its defaults:

- `.ignore` files always count; `.gitignore` files and `.git/info/exclude`
  only inside a git repository (a `.git` in the walked folder or above).
  Ignore files above the walked folder count too, `.gitignore` ones only up
  to the repository's top (`rules_above`).
- For each entry, each kind of ignore file is asked from the deepest folder
  up, and the first one with a matching pattern (ignoring or `!`re-including)
  decides for its kind; `.ignore` beats `.gitignore`, which beats
  `.git/info/exclude` (`Rules`, `skipped`). Within one file the last
  matching pattern wins.
- Hidden entries (names starting with `.`) are skipped unless a `!` pattern
  re-includes them, as in ripgrep; `.git` is skipped always.
- A file with a NUL byte is binary and skipped (`as_text`).

This module decides; the walkers read. Where a rule needs an ignore file,
the walker's `IgnoreFiles` reads it: from the local disk in a worker thread,
or over SFTP. The rules are written once, as coroutines, for both: the SFTP
walker awaits them, the local one runs them to their end at once, since its
reads never wait on an event loop.

Patterns are compiled by `pathspec`'s gitignore pattern class, one line at a
time, but not matched with `GitIgnoreSpec.match_file`: that answers git's
question, "is this path or a folder above it ignored?", while a walk asks
about the entry itself. The folders above were already decided, and may have
been re-included by a deeper or stronger ignore file, in which case an entry
below must not be ignored again through them. So each pathspec regex is
rewritten to match the whole path only (see `_compile`).
"""

from __future__ import annotations

import errno
import logging
import posixpath
import re
from collections.abc import Iterable, Set
from typing import Final, Literal, Protocol

from pathspec.patterns.gitignore.spec import GitIgnoreSpecPattern

from executor._core.errors import InvalidArgument

_logger = logging.getLogger("executor")

# The group name pathspec gives the "/" that ends a folder's part of a match:
# a regex with it matches a path or anything below it; one without it matches
# everything below a prefix (`foo/**`, `*`).
_DIR_MARK = "ps_d"

GIT_EXCLUDE: Final = ".git/info/exclude"
"""The name, below a repository's top folder, of its exclude file."""

RULE_NAMES: Final = frozenset((".git", ".ignore", ".gitignore"))
"""The hidden names that make `Rules.add_folder` read something: without them, it adds nothing."""

IgnoreFileName = Literal[".ignore", ".gitignore", ".git/info/exclude"]
"""The ignore files of a folder that count, by their path below it."""


def normalise_extensions(extensions: Iterable[str] | None) -> frozenset[str] | None:
    """Normalise the `extensions` argument of `stream_files`.

    `"py"` and `".py"` both become `"py"`. A single string counts as one
    extension, not as a sequence of one-letter ones. An extension with an
    inner dot (`"d.ts"`) keeps files whose names end with it (`x.d.ts`).

    Args:
        extensions: Extensions with or without their leading dot, or `None`.

    Returns:
        The extensions without dots, or `None` (keep every file) when
        `extensions` is `None` or empty.

    Raises:
        InvalidArgument: An entry is empty, blank, `"."`, or could never match
            a file name (holds `/` or NUL, or starts or ends with a dot after
            the leading one is removed).

    """
    if extensions is None:
        return None
    if isinstance(extensions, str):
        extensions = (extensions,)
    normalised: set[str] = set()
    for raw in extensions:
        if not isinstance(raw, str):
            raise InvalidArgument(raw, "an extension must be a string")
        extension = raw.removeprefix(".")
        if not extension.strip():
            raise InvalidArgument(raw, "an extension must not be empty")
        if "/" in extension or "\0" in extension:
            raise InvalidArgument(raw, "an extension must not contain '/' or NUL")
        if extension.startswith(".") or extension.endswith(".") or ".." in extension:
            raise InvalidArgument(raw, "an extension is written as 'py' or '.py'")
        normalised.add(extension)
    return frozenset(normalised) or None


def wanted(name: str, extensions: frozenset[str] | None) -> bool:
    """Whether a file named `name` has one of `extensions`.

    The local walk's hot loop inlines this.

    Args:
        name: The file's name (no folder).
        extensions: From `normalise_extensions`; `None` keeps every file.

    Returns:
        True when `extensions` is `None`, or the name ends with `.` and one
        of them (`x.d.ts` has both `ts` and `d.ts`).

    """
    if extensions is None:
        return True
    dot = name.rfind(".")
    if dot < 0:
        return False
    if name[dot + 1 :] in extensions:
        return True
    return any(name.endswith("." + extension) for extension in extensions if "." in extension)


def as_text(data: bytes) -> str | None:
    """The text of a file that holds `data`, as ripgrep reads it.

    The local walk's hot loop inlines this.

    Args:
        data: The whole file.

    Returns:
        `None` for a binary file (one with a NUL byte), else the bytes
        decoded as UTF-8 with invalid bytes replaced.

    """
    if b"\0" in data:
        return None
    return data.decode("utf-8", "replace")


def warn_unreadable(path: str, exc: OSError) -> None:
    """Log on the `executor` logger that the file or entry at `path` is skipped.

    Args:
        path: The entry, as the caller of `stream_files` would name it.
        exc: Why it cannot be read.

    """
    _logger.warning("stream_files skipped %s: %s", path, _describe(exc))


def warn_unlistable(path: str, exc: OSError) -> None:
    """Log on the `executor` logger that the folder at `path` is not walked.

    Args:
        path: The folder, as the caller of `stream_files` would name it.
        exc: Why it cannot be opened or listed.

    """
    _logger.warning("stream_files could not list %s: %s", path, _describe(exc))


def warn_ignore_file(path: str, problem: OSError | str) -> None:
    """Log on the `executor` logger that the ignore file at `path` does not count.

    Args:
        path: The ignore file, as the walker names it.
        problem: Why it cannot be read: the error, or what the server said.

    """
    reason = problem if isinstance(problem, str) else _describe(problem)
    _logger.warning("stream_files could not read ignore file %s: %s", path, reason)


def _describe(exc: OSError) -> str:
    if exc.errno is not None and exc.strerror:
        return f"{exc.strerror} ({errno.errorcode.get(exc.errno, exc.errno)})"
    return str(exc)


# One ignore file, compiled: runs of patterns of one kind, last run first, each
# as (whether it ignores, then regexes for: the entry's name, its whole path,
# and what lies below a prefix), see `_compile`; once for files and once for
# folders, since folder-only patterns (`build/`) need not be tried on files.
# Then, for files and for folders, the sources of its name regexes when it has
# only those, or None (see `Rules.names`).
_Run = tuple[bool, "re.Pattern[str] | None", "re.Pattern[str] | None", "re.Pattern[str] | None"]
_Runs = tuple[_Run, ...]
Compiled = tuple[_Runs, _Runs, "tuple[str, ...] | None", "tuple[str, ...] | None"]
"""One ignore file, compiled (by `compile_ignore_text`) to decide about an entry itself."""

# How pathspec starts a pattern without a slash (`*.log`), which matches a name
# in any folder: "any folders, then".
_ANY_FOLDERS = "^(?:.+/)?"
# How the folder mark ends a pattern once its group is unnamed: "a folder" for
# `build/`, "this, or a folder" for `build`.
_FOLDER_ONLY = "(?:/)"
_MARK_ENDINGS = (_FOLDER_ONLY, "(?:(?:/)|$)")


def compile_ignore_text(data: bytes, shown: str) -> Compiled | None:
    """Compile the bytes of an ignore file, read as ripgrep reads them.

    A bad pattern is logged as a warning naming `shown`, and the rest is kept.

    Args:
        data: The whole ignore file: UTF-8 (invalid bytes replaced, a byte
            order mark dropped), one pattern a line.
        shown: The ignore file's name in warnings.

    Returns:
        The compiled file, or `None` if it holds no pattern.

    """
    cached = _compiled.get(data)
    if cached is not None:
        return cached[0]
    text = data.decode("utf-8", "replace").removeprefix("\ufeff")
    patterns = []
    bad = False
    for number, line in enumerate(text.split("\n"), start=1):
        line = line.removesuffix("\r")
        if not line or line.startswith("#"):
            continue
        if line.rstrip(" ").endswith("/**/"):
            # ripgrep reads `a/**/` as the folders below `a`; pathspec, as `a/`.
            line = line.rstrip(" ") + "*/"
        try:
            patterns.append(GitIgnoreSpecPattern(line))
        except (ValueError, re.error) as exc:
            # As ripgrep does: report the bad line, keep the rest of the file.
            _logger.warning(
                "stream_files ignored invalid pattern %r (%s line %d): %s", line, shown, number, exc
            )
            bad = True
    compiled = _compile(patterns)
    if not bad:
        # Not with a bad pattern, whose warning each file holding it must give.
        if len(_compiled) >= _COMPILED_KEPT:
            _compiled.clear()
        _compiled[data] = (compiled,)
    return compiled


# The ignore files compiled lately, by content: trees repeat the same few
# (one per package, or generated), and compiling one costs far more than
# reading it. Each compiled file is immutable, so walks share them.
_COMPILED_KEPT = 256
_compiled: dict[bytes, tuple[Compiled | None]] = {}


def _compile(patterns: Iterable[GitIgnoreSpecPattern]) -> Compiled | None:
    """Compile one ignore file's patterns to decide about an entry itself.

    Consecutive patterns of the same kind (ignoring or `!`re-including) form a
    run with combined regexes; since the last matching pattern wins, runs are
    tried from the last one back and the first run that matches decides.

    Each pathspec regex is searched for in a path and matches the path or
    anything below it. Rewritten to match the whole path: a regex with the
    folder mark (`(?P<ps_d>/)`, which ends it) must match up to the end of
    the path, given with a trailing `/` for a folder so that folder-only
    patterns (`build/`) match folders only; one without it (`foo/**`, `*`)
    matches everything below its prefix, and is given the path without a `/`
    so that `foo/**` does not match the folder `foo` itself. The common
    patterns without a slash (`*.log`, `build/`) only need the entry's name,
    which spares building its path and scanning every folder of it.

    Returns:
        The runs for files and the runs for folders, or `None` when there is
        no pattern at all.

    """
    runs: list[tuple[bool, list[tuple[bool, str, str]]]] = []
    for pattern in patterns:
        if pattern.include is None or pattern.regex is None:
            continue
        ignores = pattern.include
        if not runs or runs[-1][0] != ignores:
            runs.append((ignores, []))
        source = pattern.regex.pattern
        for group in pattern.regex.groupindex:
            # Named groups would clash once patterns are combined.
            source = source.replace(f"(?P<{group}>", "(?:")
        folders_only = source.endswith(_FOLDER_ONLY)
        if _DIR_MARK not in pattern.regex.groupindex:
            kind, source = "below", source + ".*" if source.startswith("^") else f".*{source}.*"
        elif not source.startswith("^"):
            kind, source = "path", ".*" + source
        elif source.startswith(_ANY_FOLDERS) and _one_name(source[len(_ANY_FOLDERS) :]):
            kind, source = "name", "^" + source[len(_ANY_FOLDERS) :]
        else:
            kind = "path"
        runs[-1][1].append((folders_only, kind, source))
    if not runs:
        return None
    return (
        _runs(runs, for_folders=False),
        _runs(runs, for_folders=True),
        _name_sources(runs, for_folders=False),
        _name_sources(runs, for_folders=True),
    )


def _runs(runs: list[tuple[bool, list[tuple[bool, str, str]]]], *, for_folders: bool) -> _Runs:
    compiled = []
    for ignores, sources in reversed(runs):
        kept = [(kind, source) for only, kind, source in sources if for_folders or not only]
        if kept:
            compiled.append(
                (
                    ignores,
                    _combine([source for kind, source in kept if kind == "name"]),
                    _combine([source for kind, source in kept if kind == "path"]),
                    _combine([source for kind, source in kept if kind == "below"]),
                )
            )
    return tuple(compiled)


def _name_sources(
    runs: list[tuple[bool, list[tuple[bool, str, str]]]], *, for_folders: bool
) -> tuple[str, ...] | None:
    """The sources of all name regexes, or None if some pattern needs the path."""
    sources = []
    for _, patterns in runs:
        for only, kind, source in patterns:
            if for_folders or not only:
                if kind != "name":
                    return None
                sources.append(source)
    return tuple(sources)


def _one_name(source: str) -> bool:
    """Whether `source` matches one name, and maybe the folder mark, never more."""
    for ending in _MARK_ENDINGS:
        if source.endswith(ending):
            # `[^/]` is how pathspec writes `*` and `?`: any character but a slash.
            return "/" not in source[: -len(ending)].replace("[^/]", "")
    return False


def _combine(sources: list[str]) -> re.Pattern[str] | None:
    if not sources:
        return None
    # DOTALL: a name may hold a newline, and `.` stands for any character.
    return re.compile("|".join(f"(?:{source})" for source in sources), re.DOTALL)


# The compiled runs of one ignore file (see `_compile`) with the path from
# its folder to the folder being listed ("" or ending in "/").
_Link = tuple[Compiled, str]
Chain = tuple[_Link, ...]
"""Ignore files of one kind, deepest first, each with the path from its folder down."""
# For files and for folders: see `Rules.names`.
_Names = tuple["re.Pattern[str] | None", "re.Pattern[str] | None"]

# Matches nothing: the filter of a chain with no pattern for that kind of entry.
_NOTHING = re.compile("(?!)")


class IgnoreFiles(Protocol):
    """Where a walker reads the ignore files the rules ask for."""

    async def read(self, folder: str, name: IgnoreFileName) -> Compiled | None:
        """Compile the ignore file `name` below `folder`.

        Args:
            folder: The folder, as the walker named it to `Rules.add_folder`
                or as `rules_above` names the folders above a path.
            name: Which of its ignore files.

        Returns:
            The compiled file, or `None` if it is missing or holds no
            pattern; one that cannot be read gives `None` and a warning
            (`warn_ignore_file`).

        """
        ...

    async def has_git(self, folder: str) -> bool:
        """Whether `folder`, a path, holds a `.git` entry of any kind (a repository's top).

        Args:
            folder: A folder as `rules_above` names it.

        Returns:
            True if a `.git` entry is there, even a broken symlink.

        """
        ...


class Rules:
    """The ignore files that apply in one folder, by kind.

    Attributes:
        ignores: The `.ignore` files, deepest first.
        gitignores: The `.gitignore` files, deepest first (up to the
            repository's top).
        excludes: The repository's `.git/info/exclude`, if any.
        in_git: Whether the folder is inside a git repository: only then do
            `gitignores` and `excludes` count.
        confined: The walk was given a descriptor, and uses no path; ignore
            files are then read only inside the walked tree, never through a
            symlink.
        chain: The files to ask, in order: the first file with a matching
            pattern decides (see `skipped`).
        names: For files and for folders (whose names end with "/"): a regex
            that every name some pattern of the chain may match matches, so
            that another name needs no `skipped`; or None when some pattern
            needs the entry's path.

    """

    __slots__ = ("chain", "confined", "excludes", "gitignores", "ignores", "in_git", "names")

    def __init__(
        self,
        ignores: Chain,
        gitignores: Chain,
        excludes: Chain,
        in_git: bool,
        confined: bool,
        names: _Names | None = None,
    ) -> None:
        self.ignores = ignores
        self.gitignores = gitignores
        self.excludes = excludes
        self.in_git = in_git
        self.confined = confined
        self.chain = ignores + gitignores + excludes if in_git else ignores
        # It only depends on the chain's compiled files, so a folder with no
        # ignore file of its own takes its parent's.
        self.names = names if names is not None else _name_filters(self.chain)

    def descend(self, name: str) -> Rules:
        """The rules from above for the child folder `name`, before its own ignore files.

        Args:
            name: The child folder's name.

        Returns:
            The same ignore files, each with `name/` added to its path down.

        """
        return Rules(
            _descend(self.ignores, name),
            _descend(self.gitignores, name),
            _descend(self.excludes, name),
            self.in_git,
            self.confined,
            self.names,
        )

    def keeps(self, name: str, is_dir: bool, extensions: frozenset[str] | None) -> bool:
        """Whether the walk keeps the entry `name` of this folder: enters it, or reads it.

        The local walk's hot loop inlines this.

        Args:
            name: The entry's name.
            is_dir: Whether it is a folder; else a regular file.
            extensions: From `normalise_extensions`, for files; `None` keeps
                every file.

        Returns:
            False for a file without one of `extensions`, and for an entry
            that the ignore files skip (or, where none decides, a hidden one).

        """
        if not is_dir and not wanted(name, extensions):
            return False
        chain = self.chain
        return not (skipped(chain, name, is_dir) if chain else name.startswith("."))

    async def add_folder(self, files: IgnoreFiles, folder: str, hidden: Set[str]) -> Rules:
        """Add the ignore files of `folder` to these rules, the rules from above it.

        A `.git` entry makes `folder` a repository's top: `.gitignore` files
        above it no longer count, its exclude file does. The files are read
        in this order: the exclude file, `.ignore`, `.gitignore`.

        Args:
            files: Where to read them.
            folder: The folder, as `files` names it.
            hidden: The names of its hidden entries: which ignore files it
                holds, and whether it holds a `.git`.

        Returns:
            The rules in `folder`.

        """
        ignores, gitignores, excludes = self.ignores, self.gitignores, self.excludes
        in_git = self.in_git
        # Kept if nothing is added; else None, for the constructor to compute.
        names: _Names | None = self.names
        if ".git" in hidden:
            # The top of a repository: .gitignore files above it do not count.
            in_git = True
            gitignores = ()
            exclude = await files.read(folder, GIT_EXCLUDE)
            excludes = ((exclude, ""),) if exclude is not None else ()
            names = None
        if ".ignore" in hidden:
            found = await files.read(folder, ".ignore")
            if found is not None:
                ignores = ((found, ""), *ignores)
                names = None
        if in_git and ".gitignore" in hidden:
            found = await files.read(folder, ".gitignore")
            if found is not None:
                gitignores = ((found, ""), *gitignores)
                names = None
        return Rules(ignores, gitignores, excludes, in_git, self.confined, names)


def _name_filters(chain: Chain) -> _Names:
    return _name_filter(chain, for_folders=False), _name_filter(chain, for_folders=True)


def _name_filter(chain: Chain, *, for_folders: bool) -> re.Pattern[str] | None:
    sources: list[str] = []
    for compiled, _ in chain:
        found = compiled[3] if for_folders else compiled[2]
        if found is None:
            return None
        sources.extend(found)
    # `re` caches compiled patterns: folders with the same ignore files share one.
    return _combine(sources) or _NOTHING


def _descend(chain: Chain, name: str) -> Chain:
    if not chain:
        return chain
    return tuple((compiled, f"{prefix}{name}/") for compiled, prefix in chain)


async def rules_above(real: str, files: IgnoreFiles) -> Rules:
    """The ignore files in the folders above `real` that apply below it.

    Every `.ignore` file above counts; `.gitignore` files up to the nearest
    folder with a `.git` entry (the repository's top, whose exclude file
    counts too), and none if there is no such folder or `real` holds a
    `.git` itself (then `real`'s own files, added by `Rules.add_folder`,
    start the repository).

    Args:
        real: The walked folder's path with no symlink, `.` or `..` in it.
        files: Where to read the ignore files, by path.

    Returns:
        The rules from above `real`, not confined, before its own files.

    """
    folders = []
    child = real
    while (parent := posixpath.dirname(child)) != child:
        folders.append((parent, posixpath.relpath(real, parent) + "/"))
        child = parent
    ignores: list[_Link] = []
    for folder, prefix in folders:
        found = await files.read(folder, ".ignore")
        if found is not None:
            ignores.append((found, prefix))
    gitignores: list[_Link] = []
    excludes: list[_Link] = []
    in_git = await files.has_git(real)
    if not in_git:
        for folder, prefix in folders:
            found = await files.read(folder, ".gitignore")
            if found is not None:
                gitignores.append((found, prefix))
            if await files.has_git(folder):
                in_git = True
                exclude = await files.read(folder, GIT_EXCLUDE)
                if exclude is not None:
                    excludes.append((exclude, prefix))
                break
        if not in_git:
            gitignores.clear()
    return Rules(tuple(ignores), tuple(gitignores), tuple(excludes), in_git, False)


def skipped(chain: Chain, name: str, is_dir: bool) -> bool:
    """Whether the ignore files in `chain` (or, when none matches, being hidden) skip `name`.

    Inlined over the whole chain: this runs for every entry where an ignore
    file applies.

    Args:
        chain: The rules' `chain` in the entry's folder.
        name: The entry's name.
        is_dir: Whether the entry is a folder.

    Returns:
        What the first ignore file with a matching pattern says, else
        whether the name is hidden.

    """
    marked = name + "/" if is_dir else name
    for compiled, prefix in chain:
        for ignores, by_name, by_path, below in compiled[1] if is_dir else compiled[0]:
            if by_name is not None and by_name.fullmatch(marked) is not None:
                # As in ripgrep, a `!` pattern that matches re-includes even a hidden entry.
                return ignores
            if by_path is not None and by_path.fullmatch(prefix + marked) is not None:
                return ignores
            if below is not None and below.fullmatch(prefix + name) is not None:
                return ignores
    return name[0] == "."
