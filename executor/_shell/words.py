"""The word model of the shell parser: the values a parsed script is made of.

`SimpleCommand` (one program run: its words, redirects and assignments),
`Word` and the `Part`s it is made of, `Redirect`, and what a word means to
bash: brace expansion, globs, `~` and expansions as `fnmatch` patterns, and
`$'...'` (ANSI-C) quoting. Nothing here reads a script: the walker
(`executor._shell.walker`) makes these values.
"""

from __future__ import annotations

import itertools
import posixpath
import re
import shlex
from collections.abc import Iterable, Sequence
from typing import Literal, TypeAlias

import attrs

from executor._core.errors import ShellParseError

CodeSource: TypeAlias = Literal["parsed", "dynamic", "file", "pipe", "stdin", "inline"]
"""Where a shell or interpreter gets the program it runs.

- `parsed`: shell code that was parsed here (`sh -c '...'`, `eval`, a literal
  here-document); its commands follow in the result.
- `dynamic`: shell code computed at run time (`sh -c "$X"`, `eval "$(...)"`),
  which nobody can check beforehand.
- `file`: a script file (`bash build.sh`, `python3 x.py`, `source env.sh`).
- `pipe`: a pipe or process substitution (`curl ... | sh`, `sh <(curl ...)`).
- `stdin`: the command's own stdin (`sh` alone); `parse_command` parses that
  stdin when it is given.
- `inline`: an interpreter's own code given inline (`python3 -c`, `perl -e`,
  a Python here-document): opaque here.
"""

PartKind: TypeAlias = Literal[
    "text", "parameter", "command", "arithmetic", "process", "tilde", "glob", "brace", "unknown"
]

# Kinds whose value is only known at run time.
EXPANSIONS = frozenset({"parameter", "command", "arithmetic", "process", "unknown"})
# Kinds a word can hold and still reach a program exactly as written (braces
# only if they expand to nothing: `{}`, `{x}`).
_TEXT_KINDS = frozenset({"text", "brace"})

# Brace expansion can multiply words (`{1..9}{1..9}{1..9}`); past this many a
# word is refused rather than checked piece by piece.
_MAX_BRACE_WORDS = 1024


def command_name(value: str) -> str:
    """The program a command word names, without its folder (`/usr/bin/rm` -> `rm`)."""
    return posixpath.basename(value) if "/" in value else value


@attrs.frozen
class Part:
    """One piece of a word.

    Attributes:
        kind: `text`; an expansion (`parameter`, `command`, `arithmetic`,
            `process`, `unknown` for a value only known at run time, such as
            what `xargs` appends); or a pattern character left unquoted
            (`glob` for `*?[`, `brace` for `{,}`, `tilde` for a leading `~user`).
        text: The text (for expansions, as written: `$HOME`, `$(id)`).
        quoted: Whether it was quoted (quoted text is never globbed or split).

    """

    kind: PartKind
    text: str
    quoted: bool = False


def merge(parts: Iterable[Part]) -> tuple[Part, ...]:
    merged: list[Part] = []
    for part in parts:
        if not part.text and part.kind == "text":
            continue
        previous = merged[-1] if merged else None
        if previous and part.kind == previous.kind == "text" and previous.quoted == part.quoted:
            merged[-1] = Part("text", previous.text + part.text, part.quoted)
            continue
        merged.append(part)
    return tuple(merged)


_HOME_PARAMETER = re.compile(r"\$(?:HOME|\{HOME(?:[^A-Za-z0-9_][^}]*)?\})")
_SEQUENCE = re.compile(r"(-?\d+|[A-Za-z])\.\.(-?\d+|[A-Za-z])(?:\.\.(-?\d+))?")


def escape_glob(text: str) -> str:
    """`text` as a glob that matches it literally: each of `*?[` in brackets."""
    return re.sub(r"([*?\[])", r"[\1]", text)


@attrs.frozen(kw_only=True)
class Word:
    """A word of a command: its source text and what it is made of.

    Attributes:
        raw: The text as written in the script.
        parts: What the word is made of, after quote removal.

    """

    raw: str
    parts: tuple[Part, ...]
    # Asked for again and again by every rule: worked out once.
    _value: str = attrs.field(init=False, eq=False, repr=False)
    _kinds: frozenset[str] = attrs.field(init=False, eq=False, repr=False)

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "_value", "".join(part.text for part in self.parts))
        object.__setattr__(self, "_kinds", frozenset(part.kind for part in self.parts))

    @classmethod
    def of(cls, text: str) -> Word:
        """A word whose value is exactly `text` (an argv entry: no shell reads it)."""
        return cls(raw=shlex.quote(text), parts=(Part("text", text, quoted=True),))

    @classmethod
    def unknown(cls, raw: str) -> Word:
        """A word whose value is only known at run time (what `xargs` appends, say)."""
        return cls(raw=raw, parts=(Part("unknown", raw),))

    @property
    def value(self) -> str:
        """The word after quote removal, expansions kept as written (`$HOME/x`)."""
        return self._value

    @property
    def literal(self) -> bool:
        """Whether no expansion (parameter, substitution, arithmetic) is in it."""
        return self._kinds.isdisjoint(EXPANSIONS)

    @property
    def static(self) -> bool:
        """Whether a program would receive exactly `value`: literal, and no glob, brace or `~`."""
        return self._kinds <= _TEXT_KINDS and not self.expands_braces

    @property
    def has_glob(self) -> bool:
        """Whether an unquoted `*`, `?` or `[` makes it a file name pattern."""
        return "glob" in self._kinds

    def alternatives(self) -> tuple[tuple[Part, ...], ...]:
        """The words brace expansion makes of this one (one, usually), each as parts.

        Raises:
            ShellParseError: It expands to more than a policy will check.

        """
        if "brace" not in self._kinds:
            return (self.parts,)
        found: list[tuple[Part, ...]] = []
        _brace_expand(list(self.parts), found)
        return tuple(found)

    @property
    def expands_braces(self) -> bool:
        """Whether brace expansion turns it into other words (`{a,b}`, `{1..3}`)."""
        if "brace" not in self._kinds:
            return False
        alternatives = self.alternatives()
        return len(alternatives) != 1 or alternatives[0] != _braces_as_text(self.parts)

    def values(self) -> tuple[str, ...]:
        """The values of the words brace expansion makes (bash drops empty unquoted ones)."""
        found = []
        for parts in self.alternatives():
            text = "".join(part.text for part in parts)
            if text or any(part.quoted for part in parts):
                found.append(text)
        return tuple(found)

    def patterns(self) -> tuple[str, ...]:
        """Each brace alternative as an `fnmatch` pattern of the path it names.

        `~`, `$HOME` and `${HOME}` at the start become `~`; any other expansion
        becomes `*` (it could be anything); quoted pattern characters are
        escaped; unquoted globs are kept.
        """
        return tuple(glob_pattern(parts) for parts in self.alternatives())

    def fragments(self) -> tuple[str, ...]:
        """Patterns of the pieces between unquoted expansions, which word splitting can separate.

        `x${IFS}/` can run as the two arguments `x` and `/`; a policy that
        looks at `/` on its own sees it.
        """
        pieces: list[str] = []
        for parts in self.alternatives():
            current: list[Part] = []
            for part in parts:
                if part.kind in EXPANSIONS and not part.quoted:
                    pieces.append(glob_pattern(tuple(current)))
                    # $HOME starts a piece that is the home folder: `x${IFS}$HOME`.
                    home = part.kind == "parameter" and _HOME_PARAMETER.fullmatch(part.text)
                    current = [part] if home else []
                else:
                    current.append(part)
            pieces.append(glob_pattern(tuple(current)))
        return tuple(piece for piece in pieces if piece)


def glob_pattern(parts: tuple[Part, ...]) -> str:
    """The glob a word's `parts` stand for: literal text escaped, run-time expansions as `*`."""
    out: list[str] = []
    for index, part in enumerate(parts):
        if part.kind == "text":
            out.append(escape_glob(part.text))
        elif part.kind == "glob":
            out.append(part.text)
        elif part.kind == "tilde":
            out.append(_tilde_path(part.text))
        elif part.kind == "parameter" and index == 0 and _HOME_PARAMETER.fullmatch(part.text):
            out.append("~")
        elif part.kind == "brace":
            out.append(escape_glob(part.text))
        else:
            out.append("*")
    return "".join(out)


def _tilde_path(text: str) -> str:
    user = text[1:]
    if not user:
        return "~"
    if user == "root":
        return "/root"
    if user in ("+", "-"):
        return "*"
    return f"/home/{user}"


def _braces_as_text(parts: Sequence[Part]) -> tuple[Part, ...]:
    return merge(Part("text", p.text) if p.kind == "brace" else p for p in parts)


def _brace_expand(parts: list[Part], found: list[tuple[Part, ...]]) -> None:
    """Expand the first brace group in `parts` into `found` as bash does, recursing on the rest."""
    for start, part in enumerate(parts):
        if part.kind != "brace" or part.text != "{":
            continue
        depth = 0
        commas: list[int] = []
        close = -1
        for index in range(start, len(parts)):
            other = parts[index]
            if other.kind != "brace":
                continue
            if other.text == "{":
                depth += 1
            elif other.text == "}":
                depth -= 1
                if depth == 0:
                    close = index
                    break
            elif depth == 1:
                commas.append(index)
        if close < 0:
            continue
        before, after = parts[:start], parts[close + 1 :]
        if commas:
            bounds = [start, *commas, close]
            for low, high in itertools.pairwise(bounds):
                _brace_expand([*before, *parts[low + 1 : high], *after], found)
            return
        inner = parts[start + 1 : close]
        sequence = _sequence(inner)
        if sequence is not None:
            for item in sequence:
                _brace_expand([*before, Part("text", item), *after], found)
            return
    if len(found) >= _MAX_BRACE_WORDS:
        raise ShellParseError(f"brace expansion makes more than {_MAX_BRACE_WORDS} words")
    found.append(_braces_as_text(parts))


def _sequence(inner: Sequence[Part]) -> list[str] | None:
    if len(inner) != 1 or inner[0].kind != "text" or inner[0].quoted:
        return None
    match = _SEQUENCE.fullmatch(inner[0].text)
    if match is None:
        return None
    first, last, step_text = match.groups()
    step = abs(int(step_text)) if step_text else 1
    step = step or 1
    if first.lstrip("-").isdigit() != last.lstrip("-").isdigit():
        return None
    if first.lstrip("-").isdigit():
        low, high = int(first), int(last)
        count = abs(high - low) // step + 1
        if count > _MAX_BRACE_WORDS:
            raise ShellParseError(f"brace expansion makes more than {_MAX_BRACE_WORDS} words")
        direction = 1 if high >= low else -1
        return [str(low + direction * step * i) for i in range(count)]
    low, high = ord(first), ord(last)
    direction = 1 if high >= low else -1
    return [chr(c) for c in range(low, high + direction, direction * step)]


@attrs.frozen(kw_only=True)
class Redirect:
    """A redirection of a command.

    Attributes:
        op: The operator: `>`, `>>`, `>|`, `<`, `<>`, `&>`, `&>>`, `>&`, `<&`,
            `<<`, `<<-` or `<<<`.
        fd: The file descriptor number written before the operator, if any.
        target: The file (or here-string) word.
        dup: For `>&N`, `<&N` and `>&-`: the descriptor copied, or `-`.
        heredoc: The body of a here-document (`<<`, `<<-`); literal when its
            delimiter was quoted.

    """

    op: str
    fd: int | None = None
    target: Word | None = None
    dup: str | None = None
    heredoc: Word | None = None

    @property
    def writes(self) -> bool:
        """Whether it opens `target` for writing."""
        if self.target is None:
            return False
        return self.op in (">", ">>", ">|", "&>", "&>>", "<>", ">&")

    @property
    def reads_stdin(self) -> bool:
        """Whether it replaces the command's standard input."""
        return self.fd in (None, 0) and self.op in ("<", "<<", "<<-", "<<<", "<>", "<&")


@attrs.frozen(kw_only=True)
class SimpleCommand:
    """One program run (or builtin, or bare assignment) found in a script.

    Attributes:
        words: The program and its arguments.
        redirects: Its redirections, and those of the compound commands around it.
        assignments: `NAME=value` words before the program.
        source: Its text in the script, for messages.
        nesting: Where it was found, outermost first: `$(...)`, `` `...` ``,
            `<(...)`, `sh -c`, `eval`, `run by sudo`, `stdin`, ...; empty at top level.
        pipeline: Its position in a pipeline, as (index, length), if it is in one.
        stdin_piped: Whether its standard input comes from a pipe.
        background: Whether it runs in the background (`&`).
        functions: The shell functions whose bodies hold it, outermost first.
        code: For a shell or interpreter: where its program comes from.
        pipeline_source: The text of the pipeline it is a stage of, if any.

    """

    words: tuple[Word, ...]
    redirects: tuple[Redirect, ...] = ()
    assignments: tuple[Word, ...] = ()
    source: str = ""
    nesting: tuple[str, ...] = ()
    pipeline: tuple[int, int] | None = None
    stdin_piped: bool = False
    background: bool = False
    functions: tuple[str, ...] = ()
    code: CodeSource | None = None
    pipeline_source: str = ""

    @property
    def argv(self) -> tuple[str, ...]:
        """The words' values, after quote removal (expansions kept as written)."""
        return tuple(word.value for word in self.words)

    @property
    def name(self) -> str | None:
        """The program's name without its folder, or `None` for a bare assignment or redirect."""
        return command_name(self.words[0].value) if self.words else None

    @property
    def name_literal(self) -> bool:
        """Whether the program is known before it runs: no expansion, glob or brace in its name."""
        if not self.words:
            return True
        head = self.words[0]
        return head.literal and not head.has_glob and not head.expands_braces

    @property
    def literal(self) -> bool:
        """Whether nothing in it is computed at run time, and its name is no pattern."""
        words = self.words + self.assignments
        return self.name_literal and all(word.literal for word in words)

    def expanded_argv(self) -> tuple[str, ...]:
        """`argv` after brace expansion (`{rm,-rf,/}` -> `rm -rf /`)."""
        return tuple(value for word in self.words for value in word.values())

    def describe(self) -> str:
        """The command's text for a message, shortened, with where it was found."""
        text = " ".join(self.source.split())
        if len(text) > 160:
            text = text[:157] + "..."
        where = []
        if self.nesting:
            where.append(f"inside {' > '.join(self.nesting)}")
        if self.pipeline_source and " ".join(self.pipeline_source.split()) != text:
            pipeline = " ".join(self.pipeline_source.split())
            if len(pipeline) > 160:
                pipeline = pipeline[:157] + "..."
            where.append(f"in the pipeline {pipeline}")
        return f"{text} ({'; '.join(where)})" if where else text


def ansi_c_end(text: str, i: int) -> int:
    while i < len(text):
        if text[i] == "\\":
            i += 2
        elif text[i] == "'":
            return i + 1
        else:
            i += 1
    return -1


_ANSI_SIMPLE = {
    "a": "\a",
    "b": "\b",
    "e": "\x1b",
    "E": "\x1b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
    "v": "\v",
    "\\": "\\",
    "'": "'",
    '"': '"',
    "?": "?",
}


def ansi_c(body: str) -> str:
    """Decode the inside of `$'...'` as bash does; a NUL ends the string."""
    out: list[str] = []
    i = 0
    while i < len(body):
        c = body[i]
        if c != "\\" or i + 1 >= len(body):
            out.append(c)
            i += 1
            continue
        e = body[i + 1]
        i += 2
        if e in _ANSI_SIMPLE:
            out.append(_ANSI_SIMPLE[e])
        elif e in "01234567":
            digits = e
            while i < len(body) and len(digits) < 3 and body[i] in "01234567":
                digits += body[i]
                i += 1
            out.append(chr(int(digits, 8) & 0xFF))
        elif e in "xuU":
            limit = {"x": 2, "u": 4, "U": 8}[e]
            digits = ""
            while i < len(body) and len(digits) < limit and body[i] in "0123456789abcdefABCDEF":
                digits += body[i]
                i += 1
            if not digits:
                out.append("\\" + e)
            else:
                out.append(chr(min(int(digits, 16), 0x10FFFF)))
        elif e == "c" and i < len(body):
            out.append(chr(ord(body[i]) & 0x1F))
            i += 1
        else:
            out.append("\\" + e)
    decoded = "".join(out)
    # bash keeps C strings: what follows a NUL is gone.
    return decoded.split("\0", 1)[0]


# A word that starts as an assignment does: `NAME=`, `NAME+=`, `NAME[i]=`.
ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\[[^]]*\])?\+?=")
