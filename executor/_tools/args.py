"""Validated argument types: parse a model's value into one that cannot hold a bad value.

A model's arguments are untrusted text. Each type here takes the raw value a
model sent (a JSON string or number) and either becomes a checked value or
raises `InvalidArgument` naming the raw value and the rule it broke, in words
the model can act on:

- `WorkspacePath`: a relative path that stays inside the workspace.
- `WorkspaceGlob`: a glob pattern that can only match inside the workspace.
- `GitRevision`, `GitRange`: a revision (or `a..b` range) git cannot mistake
  for an option or a reflog or path lookup.
- `BoundedInt`: subclass it with bounds, `class Lines(BoundedInt, minimum=1,
  maximum=10_000)`.
- `RestrictedUrl`: subclass it with the schemes and hosts allowed,
  `class DocsUrl(RestrictedUrl, schemes={"https"}, hosts={"docs.python.org"})`.

Bounded types are declared as subclasses rather than made by a factory call
because a type checker accepts only a class statement as an annotation:
`Lines = BoundedInt(1, 10)` could not be written in a typed signature.

Each type describes itself for `@tool` through a `__json_schema__()`
classmethod, and for pydantic through `__get_pydantic_core_schema__` and
`__get_pydantic_json_schema__`, so a pydantic model (and any agent framework
built on pydantic) checks these types too. pydantic is imported only inside
those hooks: it stays an optional dependency.
"""

from __future__ import annotations

import ipaddress
import itertools
import operator
import os
import posixpath
import re
import urllib.parse
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, ClassVar, Self, cast

from executor._core.errors import InvalidArgument

if TYPE_CHECKING:
    from pydantic import GetCoreSchemaHandler, GetJsonSchemaHandler
    from pydantic_core import CoreSchema


class _Validated:
    """What every validated type shares: its JSON schema and the pydantic hooks.

    A subclass's constructor takes one raw value and raises `InvalidArgument`.
    """

    __slots__ = ()

    @classmethod
    def __json_schema__(cls) -> dict[str, Any]:
        """The JSON schema a model sees for this type."""
        raise NotImplementedError

    def _json_value(self) -> object:
        """This value as JSON (pydantic's `model_dump_json`)."""
        return str(self)

    @classmethod
    def _from_pydantic(cls, value: object) -> Self:
        if isinstance(value, cls):
            return value
        # Each subclass's constructor takes exactly one raw value.
        return cast("Callable[[object], Self]", cls)(value)

    @classmethod
    def __get_pydantic_core_schema__(
        cls, source: type[Any], handler: GetCoreSchemaHandler
    ) -> CoreSchema:
        """Let pydantic validate this type by calling its constructor.

        `InvalidArgument` is a `ValueError`, so pydantic reports it as a
        validation error that carries the rule's words.
        """
        # Imported here, not at the top: pydantic is optional for this package.
        from pydantic_core import core_schema

        return core_schema.no_info_plain_validator_function(
            cls._from_pydantic,
            serialization=core_schema.plain_serializer_function_ser_schema(
                _dump_json, when_used="json"
            ),
        )

    @classmethod
    def __get_pydantic_json_schema__(
        cls, schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> dict[str, Any]:
        """Show pydantic's JSON schema the same schema `@tool` shows."""
        return cls.__json_schema__()


def _dump_json(value: _Validated) -> object:
    return value._json_value()


def _text(raw: object, what: str) -> str:
    """The raw value as text, or `InvalidArgument` saying that it must be text."""
    if not isinstance(raw, str):
        raise InvalidArgument(raw, f"{what} must be text")
    return raw


def _is_valid_unicode(text: str) -> bool:
    r"""Whether `text` encodes as UTF-8 and as a file name.

    JSON can carry lone surrogates (`"\ud800"`), which are not characters:
    they cannot be written to a UTF-8 log or message, and `os.fsencode`
    refuses most of them.
    """
    try:
        text.encode("utf-8")
        os.fsencode(text)
    except UnicodeEncodeError:
        return False
    return True


# --- paths --------------------------------------------------------------------------


class WorkspacePath(_Validated, os.PathLike[str]):
    r"""A path inside the workspace: relative, non-empty, with no `..`, no root and no NUL.

    Surrounding whitespace is trimmed (models add it); what remains must still
    be a path. Usable wherever a path is (`os.PathLike`); `str()` and
    `os.fspath()` give the normalised form (`a//./b` becomes `a/b`, `./`
    becomes `.`, the workspace root).

    Accepted exactly when, after trimming, the value is non-blank, has no NUL,
    does not start with `/`, has no `..` component and is valid Unicode (no
    lone surrogates). A `..` is refused even where `a/../b` would normalise
    to `b`: if `a` is a symlink, the kernel resolves `a/..` to the parent of
    its target, so lexical normalisation cannot prove where `..` leads.

    A backslash is an ordinary file name character on POSIX, so `a\b` is one
    name, not two components; the same holds for look-alikes such as the
    fullwidth solidus `U+FF0F` or two `U+2024` ONE DOT LEADER (a name, not `..`): no Linux file
    system reads them as separators or parent links.

    Raises:
        InvalidArgument: Naming the raw value and the rule it broke.
    """

    __slots__ = ("_path", "raw")

    def __init__(self, raw: str | os.PathLike[str]) -> None:
        value = _text(os.fspath(raw) if isinstance(raw, os.PathLike) else raw, "a path")
        self.raw = value
        path = value.strip()
        if not path:
            raise InvalidArgument(value, "a path must not be empty or blank")
        if "\0" in path:
            raise InvalidArgument(value, "a path must not contain a NUL byte")
        if not _is_valid_unicode(path):
            raise InvalidArgument(
                value, "a path must be valid Unicode text (it holds a lone surrogate)"
            )
        if path.startswith("/"):
            raise InvalidArgument(value, "a path must be relative to the workspace root")
        if ".." in path.split("/"):
            raise InvalidArgument(value, "a path must not contain '..'")
        self._path = posixpath.normpath(path)

    @classmethod
    def __json_schema__(cls) -> dict[str, Any]:
        """The JSON schema a model sees: a string."""
        return {
            "type": "string",
            "description": "A relative path inside the workspace, like src/app.py "
            "(no leading '/', no '..').",
        }

    def joinpath(self, *others: str | os.PathLike[str]) -> WorkspacePath:
        """This path with `others` appended, each checked as a `WorkspacePath` first.

        Raises:
            InvalidArgument: When one of `others` is not a valid workspace path
                (an absolute one is refused, not silently made relative).
        """
        checked = [WorkspacePath(other)._path for other in others]
        return WorkspacePath(posixpath.join(self._path, *checked))

    def __truediv__(self, other: str | os.PathLike[str]) -> WorkspacePath:
        return self.joinpath(other)

    def __fspath__(self) -> str:
        return self._path

    def __str__(self) -> str:
        return self._path

    def __repr__(self) -> str:
        return f"WorkspacePath({self._path!r})"

    def __eq__(self, other: object) -> bool:
        if isinstance(other, WorkspacePath):
            return self._path == other._path
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._path)

    @property
    def parts(self) -> tuple[str, ...]:
        """The path's components; `()` for the workspace root itself (`.`)."""
        return () if self._path == "." else tuple(self._path.split("/"))


# --- globs --------------------------------------------------------------------------

_GLOB_MAX_LENGTH = 1024
# Brace expansion multiplies: `{a,b}{a,b}...` doubles per group. Bound it so a
# short pattern cannot make every match() walk thousands of alternatives.
_GLOB_MAX_ALTERNATIVES = 64
_GLOB_MAX_BRACE_DEPTH = 4
# Characters a shell gives meaning beyond globbing. Refusing them means a
# glob can be expanded by `sh` unquoted without running anything.
_SHELL_SPECIAL = frozenset(";&|<>()$`\"'")


class _Set:
    """A `[...]` bracket expression."""

    __slots__ = ("chars", "negated", "ranges")

    def __init__(
        self, negated: bool, chars: frozenset[str], ranges: tuple[tuple[str, str], ...]
    ) -> None:
        self.negated = negated
        self.chars = chars
        self.ranges = ranges

    def matches(self, char: str) -> bool:
        inside = char in self.chars or any(low <= char <= high for low, high in self.ranges)
        return inside != self.negated

    def may_match_dot(self) -> bool:
        # A shell may order a range by locale; a range with a punctuation end
        # might then take in '.', so assume it does.
        odd_range = any(not (low.isalnum() and high.isalnum()) for low, high in self.ranges)
        return self.matches(".") or odd_range


_STAR = "*"
_ANY = "?"
_Token = str | _Set  # a literal character, _STAR, _ANY or a set; literals '*'/'?' never occur
_GLOBSTAR: tuple[_Token, ...] = ()  # marks a `**` component (a real component is non-empty)


def _glob_tokens(component: str, raw: str) -> tuple[_Token, ...]:
    """Split one path component of a glob into tokens."""
    tokens: list[_Token] = []
    i, n = 0, len(component)
    while i < n:
        char = component[i]
        if char == "*":
            if not tokens or tokens[-1] is not _STAR:
                tokens.append(_STAR)
            i += 1
            continue
        if char == "?":
            tokens.append(_ANY)
            i += 1
            continue
        if char == "[":
            j = i + 1
            negated = j < n and component[j] in "!^"
            if negated:
                j += 1
            start = j
            if j < n and component[j] == "]":  # a ']' right after '[' is a member
                j += 1
            while j < n and component[j] != "]":
                j += 1
            if j < n:
                body = component[start:j]
                if "[" in body:
                    # `[[:punct:]]` is a class to a shell but a plain set to
                    # fnmatch; refusing it keeps both readings the same.
                    raise InvalidArgument(
                        raw,
                        "a glob's [...] set must not contain '[' "
                        "(classes like [[:alpha:]] are not supported)",
                    )
                tokens.append(_parse_set(negated, body))
                i = j + 1
                continue
            # An unclosed '[' is an ordinary character, as in a shell.
        tokens.append(char)
        i += 1
    return tuple(tokens)


def _parse_set(negated: bool, body: str) -> _Set:
    chars: set[str] = set()
    ranges: list[tuple[str, str]] = []
    k = 0
    while k < len(body):
        if k + 2 < len(body) and body[k + 1] == "-":
            ranges.append((body[k], body[k + 2]))
            k += 3
        else:
            chars.add(body[k])
            k += 1
    return _Set(negated, frozenset(chars), tuple(ranges))


def _tokens_match(tokens: tuple[_Token, ...], name: str, *, shell: bool = False) -> bool:
    """Whether `tokens` match all of `name` (an NFA walk: linear, no backtracking).

    With `shell=True`, answer as a shell would when listing a directory: `*`
    and `?` never match a leading '.', and a set is assumed to match '.' when
    it might in some shell.
    """

    def closure(states: set[int]) -> set[int]:
        # A star may match nothing: a state before a star is also after it.
        result = set(states)
        for state in states:
            position = state
            while position < len(tokens) and tokens[position] is _STAR:
                position += 1
                result.add(position)
        return result

    states = closure({0})
    for index, char in enumerate(name):
        leading_dot = shell and index == 0 and char == "."
        following: set[int] = set()
        for state in states:
            if state == len(tokens):
                continue
            token = tokens[state]
            if token is _STAR:
                if not leading_dot:
                    following.add(state)
            elif token is _ANY:
                if not leading_dot:
                    following.add(state + 1)
            elif isinstance(token, _Set):
                if token.may_match_dot() if (shell and char == ".") else token.matches(char):
                    following.add(state + 1)
            elif token == char:
                following.add(state + 1)
        if not following:
            return False
        states = closure(following)
    return len(tokens) in states


def _split_braces(raw: str, text: str) -> list[str]:
    """Expand `{a,b}` groups (as bash does) into brace-free patterns."""
    depth = 0
    for char in text:
        if char == "{":
            depth += 1
            if depth > _GLOB_MAX_BRACE_DEPTH:
                raise InvalidArgument(
                    raw,
                    f"a glob's brace groups must not nest more than {_GLOB_MAX_BRACE_DEPTH} deep",
                )
        elif char == "}":
            depth -= 1
            if depth < 0:
                break
    if depth != 0:
        raise InvalidArgument(raw, "a glob's braces '{' and '}' must be balanced")
    return _expand(raw, text)


def _expand(raw: str, text: str) -> list[str]:
    results = [""]
    i = 0
    while i < len(text):
        if text[i] != "{":
            end = text.find("{", i)
            end = len(text) if end < 0 else end
            results = [result + text[i:end] for result in results]
            i = end
            continue
        depth, j, commas = 0, i, []
        while True:  # balance was checked: the matching '}' exists
            if text[j] == "{":
                depth += 1
            elif text[j] == "}":
                depth -= 1
                if depth == 0:
                    break
            elif text[j] == "," and depth == 1:
                commas.append(j)
            j += 1
        if ".." in text[i + 1 : j]:
            # bash reads `{a..z}` as a sequence, and `{-..0}` gives '-', '.', '/' and '0'.
            raise InvalidArgument(
                raw, "a brace group must not contain '..' (sequences like {1..9} are not supported)"
            )
        if not commas:
            raise InvalidArgument(
                raw, "a brace group must list alternatives separated by commas, like *.{py,pyi}"
            )
        bounds = [i, *commas, j]
        alternatives = [
            expanded
            for start, end in itertools.pairwise(bounds)
            for expanded in _expand(raw, text[start + 1 : end])
        ]
        if len(results) * len(alternatives) > _GLOB_MAX_ALTERNATIVES:
            raise InvalidArgument(
                raw, f"a glob's braces must expand to at most {_GLOB_MAX_ALTERNATIVES} patterns"
            )
        results = [result + alternative for result in results for alternative in alternatives]
        i = j + 1
    return results


def _compile_alternative(raw: str, pattern: str) -> tuple[tuple[_Token, ...], ...]:
    if not pattern:
        raise InvalidArgument(raw, "every alternative of a glob's braces must leave a pattern")
    if pattern.startswith("/"):
        raise InvalidArgument(raw, "a glob must be relative to the workspace root")
    if pattern.startswith("-"):
        raise InvalidArgument(
            raw,
            "a glob must not start with '-' (a program would read it as an option); "
            "write ./-name instead",
        )
    # A shell expands '~' at the start of a word or component to a home folder;
    # bash does so after '=' and ':' too (`a=~/x` becomes `a=/root/x`).
    if any(char == "~" and (i == 0 or pattern[i - 1] in "/=:") for i, char in enumerate(pattern)):
        raise InvalidArgument(
            raw,
            "a glob must not have '~' at the start of a component or after '=' or ':' "
            "(a shell reads it as a home folder)",
        )
    components: list[tuple[_Token, ...]] = []
    for component in pattern.split("/"):
        if component in ("", "."):
            continue
        if component == "..":
            raise InvalidArgument(raw, "a glob must not contain '..'")
        if component == "**":
            components.append(_GLOBSTAR)
            continue
        tokens = _glob_tokens(component, raw)
        if _tokens_match(tokens, "..", shell=True):
            raise InvalidArgument(
                raw,
                f"the glob component {component!r} could match '..' in a shell; "
                "to match hidden names write .[!.]* instead of .*",
            )
        components.append(tokens)
    return tuple(components)


def _path_parts(path: object) -> tuple[str, ...] | None:
    """The components of a relative path inside the workspace, or None for any other."""
    try:
        text = os.fspath(path)  # type: ignore[call-overload]
    except TypeError:
        return None
    if not isinstance(text, str) or "\0" in text or text.startswith("/"):
        return None
    parts = tuple(part for part in text.split("/") if part not in ("", "."))
    if not parts or ".." in parts:
        return None
    return parts


def _parts_match(pattern: tuple[tuple[_Token, ...], ...], parts: tuple[str, ...]) -> bool:
    def closure(states: set[int]) -> set[int]:
        result = set(states)
        for state in states:
            position = state
            while position < len(pattern) and pattern[position] is _GLOBSTAR:
                position += 1
                result.add(position)
        return result

    states = closure({0})
    for part in parts:
        following: set[int] = set()
        for state in states:
            if state == len(pattern):
                continue
            if pattern[state] is _GLOBSTAR:
                following.add(state)
            elif _tokens_match(pattern[state], part):
                following.add(state + 1)
        if not following:
            return False
        states = closure(following)
    return len(pattern) in states


class WorkspaceGlob(_Validated, str):
    """A glob pattern that can only match inside the workspace, like `src/**/*.py`.

    The value is the trimmed pattern. `*`, `?` and `[...]` (`[!...]`
    negates) match within one path component, `**` as a whole component
    matches zero or more components, and `{a,b}` lists alternatives, as in
    bash with `globstar`. Refused: an absolute pattern, a `..` component, a
    component that could match `..` in a shell (`.*`, `.?`), a `~` a shell
    would expand (at a component's start, or after `=` or `:`), a leading `-`
    or `#`, whitespace, control characters, backslashes, the shell's
    `; & | < > ( ) $` and quotes, and `{a..z}` sequences. Each `{a,b}`
    alternative is checked on its own, as a shell would expand it first.
    So the pattern is also safe to hand to `sh` unquoted for
    expansion (after `--`, as a file named `-x` can still match it).

    Raises:
        InvalidArgument: Naming the raw value and the rule it broke.
    """

    _patterns: tuple[tuple[tuple[_Token, ...], ...], ...]
    _alternatives: tuple[str, ...]

    def __new__(cls, raw: str) -> Self:
        value = _text(raw, "a glob")
        pattern = value.strip()
        if not pattern:
            raise InvalidArgument(value, "a glob must not be empty or blank")
        if len(pattern) > _GLOB_MAX_LENGTH:
            raise InvalidArgument(value, f"a glob must be at most {_GLOB_MAX_LENGTH} characters")
        if not _is_valid_unicode(pattern):
            raise InvalidArgument(
                value, "a glob must be valid Unicode text (it holds a lone surrogate)"
            )
        if any(char.isspace() or not char.isprintable() for char in pattern):
            raise InvalidArgument(
                value,
                "a glob must not contain whitespace, NUL or other control characters; "
                "use ? to match one such character",
            )
        if "\\" in pattern:
            raise InvalidArgument(
                value,
                "a glob must not contain a backslash; to match a special character "
                "literally put it in brackets, like [*]",
            )
        if any(char in _SHELL_SPECIAL for char in pattern):
            raise InvalidArgument(
                value,
                "a glob must not contain ; & | < > ( ) $ ` or quotes; "
                "use ? to match one such character",
            )
        if pattern.startswith("#"):
            raise InvalidArgument(value, "a glob must not start with '#'; write ./#name instead")
        alternatives = _split_braces(value, pattern)
        patterns = tuple(_compile_alternative(value, alternative) for alternative in alternatives)
        glob = super().__new__(cls, pattern)
        glob._alternatives = tuple(alternatives)
        glob._patterns = patterns
        return glob

    @classmethod
    def __json_schema__(cls) -> dict[str, Any]:
        """The JSON schema a model sees: a string."""
        return {
            "type": "string",
            "description": "A glob pattern relative to the workspace root, like src/**/*.py "
            "(** spans folders, {a,b} lists alternatives; no '..', no leading '/').",
        }

    @property
    def alternatives(self) -> tuple[str, ...]:
        """The brace-free patterns this glob stands for (`*.{py,pyi}` gives two)."""
        return self._alternatives

    def match(self, path: str | os.PathLike[str]) -> bool:
        """Whether `path`, relative to the workspace root, matches this glob.

        Matching is lexical: it does not look at the file system, so a
        pattern with a trailing `/` matches files too. `*`, `?` and sets match
        names starting with `.` as well (as `pathlib` does). A path that is
        absolute, empty, holds a NUL or a `..` component never matches.

        Args:
            path: A path relative to the workspace root; `./` and `//` are
                normalised away.
        """
        parts = _path_parts(path)
        if parts is None:
            return False
        return any(_parts_match(pattern, parts) for pattern in self._patterns)


# --- git ----------------------------------------------------------------------------

_REVISION_MAX_LENGTH = 255
_REVISION_SUFFIX = re.compile(r"(?:[~^][0-9]*)*")


def _check_revision(raw: object, value: str, *, what: str = "a git revision") -> str:
    """Check one revision; errors name `raw` (the whole value the model sent)."""
    if not value:
        raise InvalidArgument(raw, f"{what} must not be empty or blank")
    if len(value) > _REVISION_MAX_LENGTH:
        raise InvalidArgument(raw, f"{what} must be at most {_REVISION_MAX_LENGTH} characters")
    if value.startswith("-"):
        raise InvalidArgument(raw, f"{what} must not start with '-' (git would read an option)")
    if any(char.isspace() or not char.isprintable() for char in value):
        raise InvalidArgument(raw, f"{what} must not contain whitespace or control characters")
    if ".." in value:
        raise InvalidArgument(raw, f"{what} must not contain '..'; name one commit, like main~2")
    if "@{" in value:
        raise InvalidArgument(
            raw, f"{what} must not use '@{{...}}' (reflog or upstream); name a branch or commit"
        )
    bad = sorted({char for char in value if char in ":?*[\\"})
    if bad:
        raise InvalidArgument(
            raw, f"{what} must not contain {', '.join(map(repr, bad))} (git reads them as syntax)"
        )
    cut = min((value.find(mark) for mark in "~^" if mark in value), default=len(value))
    name, suffix = value[:cut], value[cut:]
    if not name:
        raise InvalidArgument(raw, f"{what} must start with a branch, tag, commit id or HEAD")
    if not _REVISION_SUFFIX.fullmatch(suffix):
        raise InvalidArgument(
            raw,
            f"in {what}, '~' and '^' may only end it, each with optional digits, like HEAD~3 "
            "or main^2",
        )
    if name == "@":
        raise InvalidArgument(raw, f"{what} must not be '@'; write HEAD")
    if name.startswith("/") or name.endswith("/") or "//" in name:
        raise InvalidArgument(
            raw, f"{what} must not start or end with '/' or contain '//', like origin/main"
        )
    if name.endswith("."):
        raise InvalidArgument(raw, f"{what} must not end with '.'")
    components = name.split("/")
    if any(component.startswith(".") for component in components):
        raise InvalidArgument(raw, f"no part of {what} between '/' may start with '.'")
    if any(component.endswith(".lock") for component in components):
        raise InvalidArgument(raw, f"no part of {what} between '/' may end with '.lock'")
    return value


class GitRevision(_Validated, str):
    """One git revision a model may name: a branch, tag, commit id or `HEAD`.

    It may end with `~N` or `^N` steps (`HEAD~3`, `main^2`, `v1.2^`); `N` is
    optional. The name follows `git check-ref-format` (so `origin/main` and
    `refs/tags/v1.2.3` pass) and may not start with `-`, so git never reads it
    as an option. Refused, beyond that: `..` (ranges: see `GitRange`),
    `@{...}` (reflog and upstream lookups), `:` (a path inside a commit),
    `^{...}` and `^!` (peeling and multi-commit shorthands), whitespace and
    control characters, more than 255 characters. Surrounding whitespace is
    trimmed.

    Raises:
        InvalidArgument: Naming the raw value and the rule it broke.
    """

    __slots__ = ()

    def __new__(cls, raw: str) -> Self:
        value = _text(raw, "a git revision")
        return super().__new__(cls, _check_revision(value, value.strip()))

    @classmethod
    def __json_schema__(cls) -> dict[str, Any]:
        """The JSON schema a model sees: a string."""
        return {
            "type": "string",
            "maxLength": _REVISION_MAX_LENGTH,
            "description": "A git revision: a branch, tag, commit id or HEAD, optionally "
            "followed by ~N or ^N, like main, v1.2.3, origin/main or HEAD~2.",
        }


class GitRange(_Validated, str):
    """Two git revisions as a range: `a..b` (in b, not in a) or `a...b` (in either, not both).

    Each side is a `GitRevision`, and both must be named (write `HEAD` for
    the current commit): `a..` and `..b` are refused. Surrounding whitespace
    is trimmed.

    Raises:
        InvalidArgument: Naming the raw value and the rule it broke.
    """

    __slots__ = ()

    def __new__(cls, raw: str) -> Self:
        value = _text(raw, "a git range").strip()
        operator_ = "..." if "..." in value else ".."
        if operator_ not in value:
            raise InvalidArgument(raw, "a git range must be written a..b or a...b, like main..HEAD")
        left, _, right = value.partition(operator_)
        if not left or not right:
            raise InvalidArgument(
                raw, "both sides of a git range must be named; write HEAD for the current commit"
            )
        _check_revision(raw, left, what="the left side of a git range")
        _check_revision(raw, right, what="the right side of a git range")
        return super().__new__(cls, value)

    @classmethod
    def __json_schema__(cls) -> dict[str, Any]:
        """The JSON schema a model sees: a string."""
        return {
            "type": "string",
            "description": "A git range: two revisions joined by .. or ..., like main..HEAD.",
        }

    @property
    def symmetric(self) -> bool:
        """Whether this is `a...b`: commits in either side but not in both."""
        return "..." in self

    @property
    def left(self) -> GitRevision:
        """The revision before the `..` or `...`."""
        return GitRevision(self.partition("..." if self.symmetric else "..")[0])

    @property
    def right(self) -> GitRevision:
        """The revision after the `..` or `...`."""
        return GitRevision(self.partition("..." if self.symmetric else "..")[2])


# --- numbers ------------------------------------------------------------------------

_INTEGER_TEXT = re.compile(r"[+-]?[0-9]{1,20}")


def _whole_number(raw: object) -> int | None:
    if isinstance(raw, bool):
        return None  # True is an int to Python, but never a count a model meant
    if isinstance(raw, float):
        return int(raw) if raw.is_integer() else None
    if isinstance(raw, str):
        text = raw.strip()
        # ASCII digits only: int() would also take '1_000' and other scripts' digits.
        return int(text) if _INTEGER_TEXT.fullmatch(text) else None
    try:
        return operator.index(raw)  # type: ignore[arg-type]
    except TypeError:
        return None


class BoundedInt(_Validated, int):
    """A whole number within bounds; declare one by subclassing with the bounds.

    ```python
    class Lines(BoundedInt, minimum=1, maximum=10_000):
        '''How many lines to show.'''

    Lines(5) == 5; Lines("20") == 20; Lines(0)  # raises InvalidArgument
    ```

    Accepted: an `int`, a float with no fraction (`5.0`), and text of ASCII
    digits with an optional sign (`"5"`), since models often quote numbers.
    Refused: `bool`, other text (`"5.0"`, `"1e3"`, `"1_000"`), and any number
    outside `minimum..maximum` (both included). The value is an `int`.

    Raises:
        InvalidArgument: Naming the raw value and the bounds.
    """

    __slots__ = ()
    minimum: ClassVar[int]
    maximum: ClassVar[int]

    def __init_subclass__(cls, *, minimum: int, maximum: int, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for bound in (minimum, maximum):
            if isinstance(bound, bool) or not isinstance(bound, int):
                raise TypeError(f"{cls.__name__}: bounds must be int, got {bound!r}")
        if minimum > maximum:
            raise ValueError(f"{cls.__name__}: minimum {minimum} is above maximum {maximum}")
        cls.minimum = minimum
        cls.maximum = maximum

    def __new__(cls, raw: object) -> Self:
        if not hasattr(cls, "minimum"):
            raise TypeError(
                "BoundedInt needs bounds: subclass it, "
                "as in class Lines(BoundedInt, minimum=1, maximum=10_000)"
            )
        number = _whole_number(raw)
        if number is None:
            raise InvalidArgument(
                raw, f"expected a whole number from {cls.minimum} to {cls.maximum}"
            )
        if not cls.minimum <= number <= cls.maximum:
            raise InvalidArgument(raw, f"must be from {cls.minimum} to {cls.maximum}")
        return super().__new__(cls, number)

    @classmethod
    def __json_schema__(cls) -> dict[str, Any]:
        """The JSON schema a model sees: an integer with its bounds."""
        if not hasattr(cls, "minimum"):
            raise TypeError("BoundedInt needs bounds: subclass it with minimum= and maximum=")
        return {"type": "integer", "minimum": cls.minimum, "maximum": cls.maximum}

    def _json_value(self) -> object:
        return int(self)


# --- URLs ---------------------------------------------------------------------------

_URL_MAX_LENGTH = 4096
_DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443, "ftp": 21}
_SCHEME = re.compile(r"[a-z][a-z0-9+.-]*")
_LABEL = re.compile(r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?")
# As the WHATWG URL standard: a host whose last label is a number is an IPv4
# address, which clients also read in forms like 127.1 or 0x7f.0.0.1.
_NUMERIC_LABEL = re.compile(r"[0-9]+|0x[0-9a-f]*")
# Percent-encode the rest (non-ASCII, '"', '<', '{', ...) as browsers do.
_URL_SAFE = "!$%&'()*+,/:;=?@~"

_IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


def _domain(text: str) -> str | None:
    """The ASCII (IDNA) form of a domain name, lowercase, no trailing dot; None if invalid.

    Look-alikes are compared in this form: a Cyrillic `U+043E` 'o' gives an `xn--`
    label unlike the Latin one, while a fullwidth `U+FF44` 'd' maps to 'd' (the same
    host, as browsers read it).
    """
    try:
        ascii_host = text.lower().encode("idna").decode("ascii").lower()
    except UnicodeError:
        return None
    ascii_host = ascii_host.removesuffix(".")
    labels = ascii_host.split(".")
    if len(ascii_host) > 253 or not all(_LABEL.fullmatch(label) for label in labels):
        return None
    return ascii_host


def _ip(text: str) -> _IPAddress | None:
    try:
        return ipaddress.ip_address(text.removeprefix("[").removesuffix("]"))
    except ValueError:
        return None


class RestrictedUrl(_Validated, str):
    """A URL limited to given schemes and hosts; declare one by subclassing.

    ```python
    class WebUrl(RestrictedUrl, schemes={"https"}, hosts={"docs.python.org", "*.github.com"}):
        '''A page the agent may fetch.'''
    ```

    `*.github.com` allows any subdomain at any depth (`api.github.com`,
    `a.b.github.com`) but not `github.com` itself: list that too if wanted.
    An IP address is allowed only when listed (`127.0.0.1`, `::1`); a port
    only when it is the scheme's default or in `ports`.

    Refused: other schemes and hosts, user names and passwords (`user@`),
    backslashes, whitespace and control characters, IP addresses in
    shorthand forms (`127.1`), and anything `urllib.parse` cannot split.
    A host in Unicode is compared in its IDNA (ASCII) form, so a look-alike
    with a Cyrillic letter is a different host. The value is the URL
    normalised: scheme and host lowercase and ASCII, the default port
    dropped, non-ASCII in the path, query and fragment percent-encoded. Only
    that value (never the raw text) is checked, so fetch that.

    Raises:
        InvalidArgument: Naming the raw value and the rule it broke.
    """

    schemes: ClassVar[frozenset[str]]
    hosts: ClassVar[frozenset[str]]
    ports: ClassVar[frozenset[int]]
    _exact_hosts: ClassVar[frozenset[str]]
    _wildcard_hosts: ClassVar[tuple[str, ...]]
    _ips: ClassVar[frozenset[_IPAddress]]

    def __init_subclass__(
        cls,
        *,
        schemes: Iterable[str],
        hosts: Iterable[str],
        ports: Iterable[int] = (),
        **kwargs: Any,
    ) -> None:
        super().__init_subclass__(**kwargs)
        if isinstance(schemes, str) or isinstance(hosts, str):
            raise TypeError(f"{cls.__name__}: schemes and hosts are sets of strings")
        hosts = tuple(hosts)
        cls.schemes = frozenset(scheme.lower() for scheme in schemes)
        if not cls.schemes or not all(_SCHEME.fullmatch(scheme) for scheme in cls.schemes):
            raise ValueError(f"{cls.__name__}: schemes must be URL schemes like 'https'")
        cls.ports = frozenset(ports)
        if not all(isinstance(port, int) and 0 < port < 65536 for port in cls.ports):
            raise ValueError(f"{cls.__name__}: ports must be numbers from 1 to 65535")
        exact: set[str] = set()
        wildcard: list[str] = []
        ips: set[_IPAddress] = set()
        for host in hosts:
            address = _ip(host)
            if address is not None:
                ips.add(address)
                continue
            domain = _domain(host.removeprefix("*."))
            if domain is None:
                raise ValueError(f"{cls.__name__}: {host!r} is not a host name or *.domain")
            if host.startswith("*."):
                wildcard.append(domain)
            else:
                exact.add(domain)
        if not (exact or wildcard or ips):
            raise ValueError(f"{cls.__name__}: give at least one allowed host")
        cls.hosts = frozenset(hosts)
        cls._exact_hosts = frozenset(exact)
        cls._wildcard_hosts = tuple(sorted(wildcard))
        cls._ips = frozenset(ips)

    def __new__(cls, raw: str) -> Self:
        if not hasattr(cls, "schemes"):
            raise TypeError("RestrictedUrl needs schemes and hosts: subclass it with them")
        value = _text(raw, "a URL")
        text = value.strip()
        if not text:
            raise InvalidArgument(value, "a URL must not be empty or blank")
        if len(text) > _URL_MAX_LENGTH:
            raise InvalidArgument(value, f"a URL must be at most {_URL_MAX_LENGTH} characters")
        if not _is_valid_unicode(text) or any(
            char.isspace() or not char.isprintable() for char in text
        ):
            raise InvalidArgument(
                value,
                "a URL must not contain whitespace or control characters; "
                "percent-encode them, like %20 for a space",
            )
        if "\\" in text:
            # Browsers read '\' as '/', so `https://evil\@good/` has two readings.
            raise InvalidArgument(value, "a URL must not contain a backslash")
        try:
            parts = urllib.parse.urlsplit(text)
        except ValueError as error:
            raise InvalidArgument(value, f"not a valid URL ({error})") from None
        allowed = " or ".join(sorted(cls.schemes))
        if parts.scheme not in cls.schemes:
            raise InvalidArgument(value, f"a URL must start with {allowed}://")
        if not parts.netloc:
            raise InvalidArgument(value, f"a URL must name a host, like {allowed}://host/path")
        netloc = cls._check_authority(value, parts.scheme, parts.netloc)
        path, query, fragment = (
            urllib.parse.quote(part, safe=_URL_SAFE)
            for part in (parts.path, parts.query, parts.fragment)
        )
        normal = urllib.parse.urlunsplit((parts.scheme, netloc, path, query, fragment))
        return super().__new__(cls, normal)

    @classmethod
    def _check_authority(cls, value: str, scheme: str, netloc: str) -> str:
        """The normalised `host[:port]`, or InvalidArgument."""
        if "@" in netloc:
            raise InvalidArgument(value, "a URL must not carry a user name or password (user@)")
        port_text: str | None = None
        if netloc.startswith("["):
            host_text, _, rest = netloc.partition("]")
            host_text += "]"
            if rest:
                if not rest.startswith(":"):
                    raise InvalidArgument(value, "not a valid URL (text after the IPv6 address)")
                port_text = rest[1:]
        else:
            host_text, colon, port_text_ = netloc.partition(":")
            port_text = port_text_ if colon else None
        host = cls._check_host(value, host_text)
        if port_text is None:
            return host
        if not port_text.isascii() or not port_text.isdigit() or not 0 < int(port_text) < 65536:
            raise InvalidArgument(value, "a URL's port must be a number from 1 to 65535")
        port = int(port_text)
        if port == _DEFAULT_PORTS.get(scheme):
            return host
        if port not in cls.ports:
            allowed = ", ".join(map(str, sorted(cls.ports))) or "none but the default"
            raise InvalidArgument(value, f"port {port} is not allowed (allowed: {allowed})")
        return f"{host}:{port}"

    @classmethod
    def _check_host(cls, value: str, host_text: str) -> str:
        """The normalised host (`[v6]` for IPv6), or InvalidArgument."""
        allowed = ", ".join(sorted(cls.hosts))
        if host_text.startswith("["):
            address = _ip(host_text)
            if not isinstance(address, ipaddress.IPv6Address) or address.scope_id:
                raise InvalidArgument(value, "a URL's [...] host must be an IPv6 address")
            if address not in cls._ips:
                raise InvalidArgument(value, f"the host is not allowed; allowed hosts: {allowed}")
            return f"[{address.compressed}]"
        domain = _domain(host_text)
        if domain is None:
            raise InvalidArgument(value, "the URL's host is not a valid domain name")
        if _NUMERIC_LABEL.fullmatch(domain.rsplit(".", 1)[-1]):
            try:
                address = ipaddress.IPv4Address(domain)
            except ValueError:
                raise InvalidArgument(
                    value, "an IP address must be written as four decimal numbers, like 192.0.2.1"
                ) from None
            if address not in cls._ips:
                raise InvalidArgument(value, f"the host is not allowed; allowed hosts: {allowed}")
            return str(address)
        if domain in cls._exact_hosts or any(
            domain.endswith("." + suffix) for suffix in cls._wildcard_hosts
        ):
            return domain
        raise InvalidArgument(
            value, f"the host {domain!r} is not allowed; allowed hosts: {allowed}"
        )

    @classmethod
    def __json_schema__(cls) -> dict[str, Any]:
        """The JSON schema a model sees: a URI string naming what is allowed."""
        if not hasattr(cls, "schemes"):
            raise TypeError("RestrictedUrl needs schemes and hosts: subclass it with them")
        return {
            "type": "string",
            "format": "uri",
            "maxLength": _URL_MAX_LENGTH,
            "description": f"A URL using {' or '.join(sorted(cls.schemes))}, on one of these "
            f"hosts: {', '.join(sorted(cls.hosts))} (*. means any subdomain).",
        }

    @property
    def scheme(self) -> str:
        """The URL's scheme, lowercase."""
        return urllib.parse.urlsplit(self).scheme

    @property
    def host(self) -> str:
        """The URL's host: lowercase ASCII, an IPv6 address without brackets."""
        return urllib.parse.urlsplit(self).hostname or ""

    @property
    def port(self) -> int | None:
        """The URL's explicit port, or None when it uses the scheme's default."""
        return urllib.parse.urlsplit(self).port
