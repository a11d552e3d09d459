"""`.dockerignore` read and matched as Docker's own client does, and a build context packed with it.

Docker's rules (the `moby/patternmatcher` module its CLI uses), kept here
to the letter because a context that differs from `docker build`'s builds a
different image:

- One pattern a line, trimmed; lines starting with `#` and empty lines are
  skipped. `!` re-includes what an earlier pattern excluded. Each pattern is
  cleaned as a path (`a//b/../c` is `a/c`) and a leading `/` dropped: every
  pattern is relative to the context's root.
- `*` matches within one path component, `?` one character of one,
  `[...]` a character class, a backslash escapes the next character, and `**`
  any number of components, none included (`**/x` matches `x`).
- A path is excluded when the last pattern that matches it, or one of its
  parent folders, excludes it.
- The Dockerfile and `.dockerignore` are sent even when they are listed (the
  engine drops them from the build's files again itself).
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import re
import stat
import tarfile
from collections.abc import Iterator, Mapping

import attrs

from executor._core.errors import ExecutorError


def _clean(pattern: str) -> str:
    cleaned = posixpath.normpath(pattern)
    if len(cleaned) > 1 and cleaned.startswith("/"):
        cleaned = cleaned.lstrip("/") or "/"
    return cleaned


def _regex(pattern: str) -> re.Pattern[str]:
    """The pattern as a regular expression, built as `patternmatcher.compile` builds it."""
    out = ["^"]
    i, n = 0, len(pattern)
    in_class = False
    while i < n:
        ch = pattern[i]
        i += 1
        if ch == "\\":
            # An escaped character stands for itself; a trailing `\\` is kept as one.
            if i < n:
                out.append(re.escape(pattern[i]))
                i += 1
            else:
                out.append(r"\\")
        elif in_class:
            # Inside `[...]` the characters are the class's, as in Go's `filepath.Match`.
            in_class = ch != "]"
            out.append(ch)
        elif ch == "[":
            in_class = True
            out.append(ch)
        elif ch == "*":
            if i < n and pattern[i] == "*":
                i += 1
                if i < n and pattern[i] == "/":
                    i += 1
                # `**` at the end takes everything; elsewhere any number of folders.
                out.append(".*" if i == n else "(.*/)?")
            else:
                out.append("[^/]*")
        elif ch == "?":
            out.append("[^/]")
        else:
            out.append(re.escape(ch))
    out.append("$")
    try:
        return re.compile("".join(out), re.DOTALL)
    except re.error as error:
        raise ExecutorError(f".dockerignore: bad pattern {pattern!r}: {error}") from None


@attrs.frozen
class _Pattern:
    text: str
    exclusion: bool
    regex: re.Pattern[str]

    def match(self, path: str) -> bool:
        return self.regex.match(path) is not None


@attrs.frozen
class DockerIgnore:
    """The patterns of a `.dockerignore`, and the matching Docker applies to a context."""

    patterns: tuple[str, ...] = ()
    _compiled: tuple[_Pattern, ...] = attrs.field(init=False, repr=False, eq=False)
    _parents: dict[tuple[int, str], bool] = attrs.field(
        init=False, repr=False, eq=False, factory=dict
    )

    def __attrs_post_init__(self) -> None:
        compiled = []
        for raw in self.patterns:
            text = raw.strip()
            exclusion = text.startswith("!")
            if exclusion:
                text = text[1:].strip()
                if not text:
                    raise ExecutorError('.dockerignore: illegal exclusion pattern "!"')
            text = _clean(text)
            compiled.append(_Pattern(text, exclusion, _regex(text)))
        object.__setattr__(self, "_compiled", tuple(compiled))

    @classmethod
    def parse(cls, text: str) -> DockerIgnore:
        """The patterns of a `.dockerignore` file's text, as Docker's client reads them."""
        patterns = []
        for number, line in enumerate(text.splitlines()):
            if number == 0:
                line = line.removeprefix("\ufeff")
            pattern = line.strip()
            if not pattern or pattern.startswith("#"):
                continue
            invert = pattern.startswith("!")
            if invert:
                pattern = pattern[1:].strip()
            if pattern:
                pattern = _clean(pattern)
            patterns.append(("!" if invert else "") + pattern)
        return cls(tuple(patterns))

    @classmethod
    def of_folder(cls, folder: str) -> DockerIgnore:
        """The `.dockerignore` at the root of `folder`, or no patterns when there is none."""
        try:
            with open(os.path.join(folder, ".dockerignore"), encoding="utf-8") as file:
                return cls.parse(file.read())
        except FileNotFoundError:
            return cls()

    def plus(self, *patterns: str) -> DockerIgnore:
        """These patterns followed by `patterns` (a later pattern wins)."""
        return DockerIgnore(self.patterns + patterns)

    def excludes(self, path: str) -> bool:
        """Whether the context-relative `path` is left out (`MatchesOrParentMatches`)."""
        matched = False
        parent = posixpath.dirname(path)
        for index, pattern in enumerate(self._compiled):
            # An inclusion cannot change a match, nor an exclusion a miss.
            if pattern.exclusion != matched:
                continue
            if pattern.match(path) or (parent and self._parent_hit(index, parent)):
                matched = not pattern.exclusion
        return matched

    def _parent_hit(self, index: int, folder: str) -> bool:
        """Whether pattern `index` matches `folder` or a folder above it (cached per folder)."""
        key = (index, folder)
        hit = self._parents.get(key)
        if hit is None:
            above = posixpath.dirname(folder)
            hit = self._compiled[index].match(folder) or bool(
                above and self._parent_hit(index, above)
            )
            self._parents[key] = hit
        return hit

    def may_include_below(self, folder: str) -> bool:
        """Whether a re-inclusion could bring back something inside the excluded `folder`."""
        prefix = folder + "/"
        return any(p.exclusion and (p.text + "/").startswith(prefix) for p in self._compiled)

    def walk(self, root: str) -> Iterator[tuple[str, os.stat_result]]:
        """The context-relative paths of `root` that are sent, each with its `lstat`."""
        stack = [""]
        while stack:
            relative = stack.pop()
            folder = os.path.join(root, relative) if relative else root
            try:
                with os.scandir(folder) as scan:
                    entries = sorted(scan, key=lambda entry: entry.name)
            except OSError as error:
                raise ExecutorError(f"build context: cannot read {folder}: {error}") from None
            below = []
            for entry in entries:
                path = f"{relative}/{entry.name}" if relative else entry.name
                is_dir = entry.is_dir(follow_symlinks=False)
                if self.excludes(path):
                    if is_dir and self.may_include_below(path):
                        below.append(path)
                    continue
                yield path, entry.stat(follow_symlinks=False)
                if is_dir:
                    below.append(path)
            stack.extend(reversed(below))


@attrs.frozen
class ContextArchive:
    """A build context as a tar stream, with the digest of what it holds."""

    data: bytes
    digest: str
    files: int


_BLOCK = 512


def _octal(value: int, width: int) -> bytes:
    return b"%0*o\0" % (width - 1, value)


def _header(name: str, kind: bytes, mode: int, size: int, mtime: int, link: str = "") -> bytes:
    """One tar header as Docker's client writes it: root's, whole-second times.

    A plain ustar block where the names fit (the common case, and far
    cheaper than `tarfile`'s general writer); `tarfile`'s PAX form where
    they do not (long or non-ASCII names, huge files).
    """
    raw, target = name.encode(), link.encode()
    prefix = b""
    if len(raw) > 100:
        # ustar's prefix field holds the folders in front of the last 100 bytes.
        cut = raw.find(b"/", len(raw) - 101)
        if cut > 0:
            prefix, raw = raw[:cut], raw[cut + 1 :]
    if (
        len(raw) > 100
        or len(prefix) > 155
        or len(target) > 100
        or not (name + link).isascii()
        or size >= 8**11
    ):
        info = tarfile.TarInfo(name)
        info.type, info.mode, info.size, info.mtime, info.linkname = kind, mode, size, mtime, link
        return info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")
    block = bytearray(_BLOCK)
    block[0:100] = raw.ljust(100, b"\0")
    block[100:108] = _octal(mode, 8)
    block[108:116] = _octal(0, 8)
    block[116:124] = _octal(0, 8)
    block[124:136] = _octal(size, 12)
    block[136:148] = _octal(mtime, 12)
    block[148:156] = b" " * 8
    block[156:157] = kind
    block[157:257] = target.ljust(100, b"\0")
    block[257:265] = b"ustar\x0000"
    block[329:337] = _octal(0, 8)
    block[337:345] = _octal(0, 8)
    block[345:500] = prefix.ljust(155, b"\0")
    block[148:156] = b"%06o\0 " % sum(block)
    return bytes(block)


def _padding(size: int) -> bytes:
    return b"\0" * (-size % _BLOCK)


def pack_context(
    root: str,
    ignore: DockerIgnore,
    *,
    extra: Mapping[str, bytes] | None = None,
) -> ContextArchive:
    """Pack `root` as a tar, as `ignore` lets it through; `extra` (name: content) replaces or adds.

    The digest covers each sent path, its type, mode, size, link target and
    content, not times or owners: an unchanged context has the same digest
    after a fresh checkout.
    """
    if not os.path.isdir(root):
        raise ExecutorError(f"build context {root} is not a folder")
    parts: list[bytes] = []
    digest = hashlib.sha256()
    count = 0
    added = dict(extra or {})
    for path, info in ignore.walk(root):
        if path in added:
            continue
        full = os.path.join(root, path)
        mode, mtime = stat.S_IMODE(info.st_mode), int(info.st_mtime)
        if stat.S_ISREG(info.st_mode):
            with open(full, "rb") as file:
                content = file.read()
            digest.update(f"{path}\0file\0{mode}\0".encode() + hashlib.sha256(content).digest())
            parts += [_header(path, tarfile.REGTYPE, mode, len(content), mtime), content]
            parts.append(_padding(len(content)))
            count += 1
        elif stat.S_ISDIR(info.st_mode):
            digest.update(f"{path}\0dir\0{mode}\0".encode())
            parts.append(_header(path, tarfile.DIRTYPE, mode, 0, mtime))
        elif stat.S_ISLNK(info.st_mode):
            link = os.readlink(full)
            digest.update(f"{path}\0link\0{link}\0".encode())
            parts.append(_header(path, tarfile.SYMTYPE, 0o777, 0, mtime, link))
        elif stat.S_ISFIFO(info.st_mode):
            digest.update(f"{path}\0fifo\0{mode}\0".encode())
            parts.append(_header(path, tarfile.FIFOTYPE, mode, 0, mtime))
        else:
            raise ExecutorError(f"build context: {path} is a device or socket; it cannot be sent")
    for name, content in added.items():
        digest.update(f"{name}\0extra\0".encode() + hashlib.sha256(content).digest())
        parts += [_header(name, tarfile.REGTYPE, 0o644, len(content), 0), content]
        parts.append(_padding(len(content)))
    parts.append(b"\0" * (2 * _BLOCK))
    return ContextArchive(b"".join(parts), digest.hexdigest(), count)
