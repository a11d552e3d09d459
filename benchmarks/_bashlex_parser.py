"""The shell parser before tree-sitter: bashlex behind a lexer of its own (a benchmark baseline).

A verbatim copy of `executor/_shell/parser.py` as it was when the policies
parsed with bashlex, kept only so that `bench_policy.py` can time the two
parsers in one run. Nothing in `executor` imports it. It needs `bashlex`
(`pip install bashlex`), which the package no longer depends on;
`AVAILABLE` says whether it is installed.

Shell parsing for policies: every simple command a script would run, wherever it hides.

`parse_script(script)` reads a script the way `sh -c` would and returns the
simple commands in it as `SimpleCommand` values, in the order they appear:
top level, lists (`;`, `&&`, `||`, `&`), pipelines, compound commands (`if`,
`for`, `while`, `until`, subshells, brace groups, function bodies), command
and process substitutions (also inside double quotes, `${...}` and
here-document bodies), and the programs other programs run: `sh -c`, `eval`,
`trap`, `sudo`, `env`, `xargs`, `find -exec`, `timeout`, `nohup` and the other
wrappers listed in `WRAPPERS`. A wrapped program is reported as a command of
its own, after the command that wraps it.

The structure comes from bashlex; the rest is done here, because bashlex
gets it wrong in ways a policy cannot afford: it does not see substitutions
inside `${...}` or here-documents, cannot read `$(a && b)`, re-parses single
quoted text, and does not follow backslashes inside backticks. So a small
lexer first finds every substitution, quote and here-document as bash would,
and masks them in the text handed to bashlex (same length, so positions
agree); each substitution's text is then parsed on its own, and each word's
value (quote removal, `$'...'`, expansions kept as written) is computed here
from the original text.

Fails closed: a script that cannot be read (bashlex's limits include
`case`, `[[ ]]`, `select`, `coproc`, `for ((...))` and `$((...))` holding a
command substitution) raises `ShellParseError`, a `PolicyDenied`.

A `#!` script (see `Shell.shebang()`) is its interpreter run on the body as
stdin; `parse_command` handles that, and a command's own stdin fed to a shell.
"""

from __future__ import annotations

import functools
import importlib
import itertools
import posixpath
import re
import shlex
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Literal, TypeAlias

import attrs

from executor._core.commands import Exec, Shell
from executor._core.errors import ShellParseError

try:
    # bashlex is no dependency any more: this baseline runs only where it is installed.
    bashlex: Any = importlib.import_module("bashlex")
    importlib.import_module("bashlex.errors")
except ImportError:
    bashlex = None

AVAILABLE = bashlex is not None
"""Whether bashlex is installed, so that this baseline can run."""

__all__ = [
    "INTERPRETERS",
    "SHELLS",
    "WRAPPERS",
    "CodeSource",
    "Part",
    "Redirect",
    "ShellParseError",
    "SimpleCommand",
    "Word",
    "command_name",
    "escape_glob",
    "glob_pattern",
    "is_interpreter",
    "parse_argv",
    "parse_command",
    "parse_script",
]

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
_EXPANSIONS = frozenset({"parameter", "command", "arithmetic", "process", "unknown"})
# Kinds a word can hold and still reach a program exactly as written (braces
# only if they expand to nothing: `{}`, `{x}`).
_TEXT_KINDS = frozenset({"text", "brace"})

# How deep `sh -c "sh -c '...'"`, substitutions and wrappers may nest before a
# script is refused; real scripts stay far below, and it bounds the recursion.
_MAX_DEPTH = 24
# Bigger scripts are refused rather than parsed: bashlex reads some 40 KB of
# commands a second (here-document bodies much faster), and a policy must not
# become a way to keep a worker thread busy for minutes.
_MAX_SCRIPT = 256 * 1024
# Brace expansion can multiply words (`{1..9}{1..9}{1..9}`); past this many a
# word is refused rather than checked piece by piece.
_MAX_BRACE_WORDS = 1024

SHELLS = frozenset(
    {
        "sh", "bash", "dash", "zsh", "ksh", "ksh93", "mksh", "pdksh", "lksh", "oksh",
        "ash", "yash", "posh", "rbash", "fish", "csh", "tcsh",
    }
)  # fmt: skip
"""Program names that run shell code."""

# name pattern, options giving inline code, options giving a module or script,
# options taking an argument (so the next word is not the script file).
_Interpreter: TypeAlias = tuple[re.Pattern[str], frozenset[str], frozenset[str], frozenset[str]]


def _interp(pattern: str, inline: str, module: str, args: str) -> _Interpreter:
    return (
        re.compile(pattern),
        frozenset(inline.split()),
        frozenset(module.split()),
        frozenset(args.split()),
    )


_INTERPRETERS: tuple[_Interpreter, ...] = (
    _interp(r"(python|pypy)[0-9.]*", "-c", "-m", "-W -X -Q"),
    # perl's other options take their value glued on (`-Idir`, `-i.bak`), never the next word.
    _interp(r"perl[0-9.]*", "-e -E", "", ""),
    _interp(r"ruby[0-9.]*", "-e", "", "-I -r -E -C -F -x -K -T -W"),
    _interp(
        r"node|nodejs|bun",
        "-e --eval -p --print",
        "",
        "-r --require --import --loader --experimental-loader -C --conditions --input-type",
    ),
    _interp(r"deno", "eval", "", ""),
    _interp(r"php[0-9.]*", "-r -R -B -E -F", "", "-d -c -z"),
    _interp(r"lua[0-9.]*|luajit", "-e", "", "-l"),
    _interp(r"tclsh[0-9.]*|wish[0-9.]*|expect", "-c", "", ""),
    _interp(r"Rscript|R", "-e", "", ""),
    _interp(r"osascript", "-e", "", "-l"),
    _interp(r"pwsh|powershell", "-c -Command -command -EncodedCommand -e", "", "-File -f"),
    _interp(r"jshell|groovy|julia|guile|racket|ghci|runghc|scala", "-e --eval", "", ""),
)

# awk's program is its first operand, not a file: it needs its own reading.
_AWK = re.compile(r"[gmn]?awk")

INTERPRETERS = (*(pattern.pattern for pattern, *_ in _INTERPRETERS), _AWK.pattern)
"""Patterns (full match) of program names that run code in a language other than shell."""


def is_interpreter(name: str) -> bool:
    """Whether `name` (a command name, no folder) runs code of some language other than shell."""
    return bool(_AWK.fullmatch(name)) or any(p.fullmatch(name) for p, *_ in _INTERPRETERS)


def command_name(value: str) -> str:
    """The program a command word names, without its folder (`/usr/bin/rm` -> `rm`)."""
    return posixpath.basename(value) if "/" in value else value


# --- values --------------------------------------------------------------------


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


def _merge(parts: Iterable[Part]) -> tuple[Part, ...]:
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
        return self._kinds.isdisjoint(_EXPANSIONS)

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
                if part.kind in _EXPANSIONS and not part.quoted:
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
    return _merge(Part("text", p.text) if p.kind == "brace" else p for p in parts)


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


# --- the lexer -------------------------------------------------------------------


@attrs.frozen
class _Span:
    kind: Literal["command", "process", "backtick", "arith", "param"]
    end: int
    inner: str = ""


_NAME_START = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_")
_NAME_CHARS = _NAME_START | frozenset("0123456789")
_SPECIAL_PARAMETERS = frozenset("0123456789@*#?-$!")
_WORD_BREAK = frozenset(" \t\n;&|()<>")
_ARITH_SAFE = re.compile(r"[A-Za-z0-9_ \t+\-*/%<>=!&|^~?:,()${}#@\[\].]*")


class _Lexer:
    """Finds quotes, substitutions and here-documents in a script as bash reads them.

    Records the extent of every `$(...)`, `` `...` ``, `<(...)`, `$((...))`
    and `${...}` by its start, and builds the masked copy of the script that
    bashlex parses: quoted text and substitutions replaced by filler of the
    same length, here-document delimiters unquoted.
    """

    def __init__(self, text: str) -> None:
        self.text = text
        self.spans: dict[int, _Span] = {}
        self.masked = list(text)
        self.depth = 0

    def run(self) -> str:
        self.script(0, until_paren=False)
        return "".join(self.masked)

    def fill(self, start: int, end: int) -> None:
        for index in range(start, end):
            if self.masked[index] != "\n":
                self.masked[index] = "_"

    def placeholder(self, start: int, end: int) -> None:
        # A parameter of the same length: bashlex reads it as one plain word part.
        length = end - start
        filler = "$" + "_" * (length - 1) if length <= 3 else "${" + "_" * (length - 3) + "}"
        self.masked[start:end] = list(filler)

    def error(self, reason: str) -> ShellParseError:
        return ShellParseError(reason)

    def script(self, i: int, *, until_paren: bool, quoted: bool = False) -> int:
        """Read shell code from `i`; return the index of the closing `)` (or the end)."""
        text = self.text
        n = len(text)
        parens = 0
        pending: list[tuple[str, bool, bool]] = []
        word_start = True
        while i < n:
            c = text[i]
            if c == "\n":
                i += 1
                if pending:
                    i = self.heredocs(i, pending)
                    pending = []
                word_start = True
                continue
            if c == "\\":
                i += 2
                word_start = False
                continue
            if c == "'":
                close = text.find("'", i + 1)
                if close < 0:
                    raise self.error("a single quote is not closed")
                if not quoted:
                    self.fill(i + 1, close)
                i = close + 1
                word_start = False
                continue
            if c == '"':
                i = self.double(i + 1, quoted=quoted)
                word_start = False
                continue
            if c == "`":
                i = self.backtick(i, in_double=False, quoted=quoted)
                word_start = False
                continue
            if c == "$":
                i = self.dollar(i, quoted=quoted, in_double=False)
                word_start = False
                continue
            if c in "<>" and text.startswith("(", i + 1):
                i = self.substitution(i, "process", quoted=quoted)
                word_start = False
                continue
            if c == "<" and text.startswith("<<<", i):
                i += 3
                word_start = True
                continue
            if c == "<" and text.startswith("<<", i):
                i, delimiter = self.heredoc_operator(i, quoted=quoted)
                pending.append(delimiter)
                word_start = False
                continue
            if c == "#" and word_start:
                newline = text.find("\n", i)
                i = n if newline < 0 else newline
                continue
            if c == "(":
                parens += 1
            elif c == ")":
                if parens == 0 and until_paren:
                    if pending:
                        raise self.error("a here-document inside $(...) is not closed")
                    return i
                parens -= 1
            word_start = c in _WORD_BREAK
            i += 1
        if pending:
            # bash would run the here-document up to the end of the script; bashlex
            # refuses it too, so say why.
            raise self.error(f"here-document delimited by end of script (wanted {pending[0][0]!r})")
        if until_paren:
            raise self.error("a $( or ( is not closed")
        return i

    def heredoc_operator(self, i: int, *, quoted: bool) -> tuple[int, tuple[str, bool, bool]]:
        text = self.text
        i += 2
        strip = text.startswith("-", i)
        if strip:
            i += 1
        while i < len(text) and text[i] in " \t":
            i += 1
        start = i
        while i < len(text) and text[i] not in _WORD_BREAK:
            if text[i] == "\\":
                i += 2
                continue
            if text[i] in "'\"":
                close = text.find(text[i], i + 1)
                if close < 0:
                    raise self.error("a here-document delimiter's quote is not closed")
                i = close + 1
                continue
            i += 1
        raw = text[start:i]
        if not raw:
            raise self.error("a here-document has no delimiter")
        delimiter_quoted = any(c in raw for c in "'\"\\")
        delimiter = raw.replace("\\", "").replace("'", "").replace('"', "")
        if delimiter_quoted and not quoted:
            # bashlex compares body lines with the delimiter as written, quotes
            # and all; hand it the unquoted delimiter, padded to the same length.
            self.masked[start:i] = list(delimiter.ljust(len(raw)))
        return i, (delimiter, strip, delimiter_quoted)

    def heredocs(self, i: int, pending: list[tuple[str, bool, bool]]) -> int:
        """Skip the bodies of the pending here-documents, finding substitutions in unquoted ones."""
        text = self.text
        for delimiter, strip, delimiter_quoted in pending:
            while True:
                if i >= len(text):
                    raise self.error(
                        f"here-document delimited by end of script (wanted {delimiter!r})"
                    )
                newline = text.find("\n", i)
                line_end = len(text) if newline < 0 else newline
                line = text[i:line_end]
                if (line.lstrip("\t") if strip else line) == delimiter:
                    i = line_end + 1
                    break
                if delimiter_quoted:
                    i = line_end + 1
                    continue
                i = self.heredoc_line(i)
        return i

    def heredoc_line(self, i: int) -> int:
        # An unquoted body expands like double-quoted text, except that quotes are
        # plain characters; a substitution can run over several lines.
        text = self.text
        while i < len(text):
            c = text[i]
            if c == "\n":
                return i + 1
            if c == "\\":
                i += 2
            elif c == "$":
                i = self.dollar(i, quoted=True, in_double=True)
            elif c == "`":
                i = self.backtick(i, in_double=False, quoted=True)
            else:
                i += 1
        return i

    def double(self, i: int, *, quoted: bool) -> int:
        """Read double-quoted text from `i`; return the index after the closing quote."""
        text = self.text
        start = i
        while i < len(text):
            c = text[i]
            if c == '"':
                if not quoted:
                    self.fill(start, i)
                return i + 1
            if c == "\\":
                i += 2
            elif c == "$":
                i = self.dollar(i, quoted=True, in_double=True)
            elif c == "`":
                i = self.backtick(i, in_double=True, quoted=True)
            else:
                i += 1
        raise self.error("a double quote is not closed")

    def dollar(self, i: int, *, quoted: bool, in_double: bool) -> int:
        text = self.text
        following = text[i + 1 : i + 2]
        if following == "'" and not in_double:
            end = _ansi_c_end(text, i + 2)
            if end < 0:
                raise self.error("a $'...' string is not closed")
            if end != text.find("'", i + 2) + 1:
                # bash ends $'a\'...' at a later quote than a POSIX sh (dash, which
                # is /bin/sh on Debian) does, so the two run different code.
                raise self.error("a $'...' string holds \\', which bash and sh read differently")
            if not quoted:
                # bashlex reads $'...' as a parameter; a plain quoted filler it reads right.
                self.masked[i] = "'"
                self.fill(i + 1, end - 1)
                self.masked[i + 1] = "_"
            return end
        if following == '"' and not in_double:
            return self.double(i + 2, quoted=quoted)
        if following == "(":
            if text.startswith("((", i + 1):
                arithmetic_end = self.arithmetic(i)
                if arithmetic_end is not None:
                    self.spans[i] = _Span("arith", arithmetic_end)
                    if not quoted:
                        self.placeholder(i, arithmetic_end)
                    return arithmetic_end
            return self.substitution(i, "command", quoted=quoted)
        if following == "{":
            return self.parameter(i, quoted=quoted, in_double=in_double)
        return i + 1

    def arithmetic(self, i: int) -> int | None:
        """The end of `$((...))` at `i` if bash reads it as arithmetic, else `None`.

        bash matches the parenthesis opened by the second `(`; when a `)`
        follows at once it is arithmetic, otherwise a command substitution
        holding a subshell (`$((cd x; ls) | wc)`). Only plain arithmetic is
        taken: no quotes, and substitutions only as operands.
        """
        text = self.text
        j = i + 3
        depth = 1
        plain: list[str] = []
        while j < len(text):
            c = text[j]
            if c == "$" and text.startswith("(", j + 1):
                j = self.dollar(j, quoted=True, in_double=True)
                plain.append("0")
                continue
            if c == "`":
                j = self.backtick(j, in_double=True, quoted=True)
                plain.append("0")
                continue
            if c == "(":
                depth += 1
            elif c == ")":
                depth -= 1
                if depth == 0:
                    if text.startswith(")", j + 1) and _ARITH_SAFE.fullmatch("".join(plain)):
                        return j + 2
                    return None
            elif c in "'\"\\\n":
                return None
            plain.append(c)
            j += 1
        return None

    def substitution(self, i: int, kind: Literal["command", "process"], *, quoted: bool) -> int:
        self.depth += 1
        if self.depth > _MAX_DEPTH:
            raise self.error("substitutions are nested too deeply")
        close = self.script(i + 2, until_paren=True, quoted=True)
        self.depth -= 1
        self.spans[i] = _Span(kind, close + 1, self.text[i + 2 : close])
        if not quoted:
            self.placeholder(i, close + 1)
        return close + 1

    def backtick(self, i: int, *, in_double: bool, quoted: bool) -> int:
        text = self.text
        j = i + 1
        inner: list[str] = []
        while j < len(text):
            c = text[j]
            if c == "\\" and j + 1 < len(text):
                following = text[j + 1]
                # Inside backticks a backslash quotes only $ ` \ (and " in double quotes).
                if following in "$`\\" or (in_double and following == '"'):
                    inner.append(following)
                else:
                    inner.append(c + following)
                j += 2
                continue
            if c == "`":
                self.spans[i] = _Span("backtick", j + 1, "".join(inner))
                if not quoted:
                    self.placeholder(i, j + 1)
                return j + 1
            inner.append(c)
            j += 1
        raise self.error("a backtick is not closed")

    def parameter(self, i: int, *, quoted: bool, in_double: bool) -> int:
        text = self.text
        j = i + 2
        braces = 0
        while j < len(text):
            c = text[j]
            if c == "\\":
                j += 2
            elif c == "'" and not in_double:
                close = text.find("'", j + 1)
                if close < 0:
                    raise self.error("a single quote is not closed")
                j = close + 1
            elif c == '"':
                j = self.double(j + 1, quoted=True)
            elif c == "$":
                j = self.dollar(j, quoted=True, in_double=in_double)
            elif c == "`":
                j = self.backtick(j, in_double=in_double, quoted=True)
            elif c == "{":
                braces += 1
                j += 1
            elif c == "}":
                if braces == 0:
                    self.spans[i] = _Span("param", j + 1)
                    if not quoted:
                        self.placeholder(i, j + 1)
                    return j + 1
                braces -= 1
                j += 1
            else:
                j += 1
        raise self.error("a ${ is not closed")


def _ansi_c_end(text: str, i: int) -> int:
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


def _ansi_c(body: str) -> str:
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


# --- walking bashlex's tree ------------------------------------------------------


@attrs.frozen
class _Ctx:
    nesting: tuple[str, ...] = ()
    pipeline: tuple[int, int] | None = None
    stdin_piped: bool = False
    background: bool = False
    functions: tuple[str, ...] = ()
    redirects: tuple[Redirect, ...] = ()
    pipeline_source: str = ""


_TIME = re.compile(
    r"(?:^|(?<=[;&|({!\n])|(?<=\bthen)|(?<=\bdo)|(?<=\belse))(\s*)(time(?:\s+-p)?)(?=\s)"
)


def _bashlex_trees(masked: str) -> list[Any]:
    for _ in range(8):
        try:
            trees: list[Any] = bashlex.parse(masked)
            return trees
        except bashlex.errors.ParsingError as error:
            raise ShellParseError(f"{error.message} at offset {error.position}") from None
        except NotImplementedError as error:
            if "time" in str(error):
                # bashlex has no `time` keyword; it changes nothing a policy cares
                # about, so blank it (same length) and read the command it times.
                masked = _TIME.sub(lambda m: m.group(1) + " " * len(m.group(2)), masked)
                continue
            raise ShellParseError(f"it uses a construct the parser cannot read: {error}") from None
        except RecursionError:
            raise ShellParseError("it is nested too deeply") from None
        except Exception as error:  # bashlex fails in many shapes on odd input
            raise ShellParseError(f"the parser failed ({type(error).__name__})") from None
    raise ShellParseError("the parser failed")


_FAST = re.compile(r"[A-Za-z0-9_./,:+@%=-]+(?:[ \t]+[A-Za-z0-9_./,:+@%=-]+)*")
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\+?=")
_RESERVED = frozenset(
    {
        "if", "then", "else", "elif", "fi", "case", "esac", "for", "select", "while", "until",
        "do", "done", "in", "function", "time", "coproc",
    }
)  # fmt: skip


def _parse(script: str, ctx: _Ctx, depth: int) -> list[SimpleCommand]:
    if depth > _MAX_DEPTH:
        raise ShellParseError("commands are nested too deeply")
    if "\0" in script:
        raise ShellParseError("it holds a NUL byte")
    if len(script) > _MAX_SCRIPT:
        raise ShellParseError(f"it is longer than {_MAX_SCRIPT} characters")
    stripped = script.strip(" \t\n")
    if _FAST.fullmatch(stripped):
        # Most agent commands are a plain `ls -la` or `git status`: words of
        # characters no shell treats specially. They need no parser, and the
        # policy's overhead per command stays far below the spawn's.
        words = stripped.split()
        if words[0] not in _RESERVED:
            count = 0
            while count < len(words) and _ASSIGNMENT.match(words[count]):
                count += 1
            command = SimpleCommand(
                words=tuple(Word(raw=w, parts=(Part("text", w),)) for w in words[count:]),
                assignments=tuple(Word(raw=w, parts=(Part("text", w),)) for w in words[:count]),
                source=stripped,
                nesting=ctx.nesting,
                stdin_piped=ctx.stdin_piped,
                background=ctx.background,
                functions=ctx.functions,
                redirects=ctx.redirects,
            )
            return _analyse(command, depth)
    if all(not line.strip() or line.lstrip().startswith("#") for line in script.split("\n")):
        return []
    lexer = _Lexer(script)
    try:
        masked = lexer.run()
    except RecursionError:
        raise ShellParseError("it is nested too deeply") from None
    walker = _Walker(script, lexer.spans, depth)
    for tree in _bashlex_trees(masked):
        walker.node(tree, ctx)
    return walker.out


class _Walker:
    """Turns bashlex's tree of one script into `SimpleCommand`s, reading words from the original."""

    def __init__(self, source: str, spans: dict[int, _Span], depth: int) -> None:
        self.source = source
        self.spans = spans
        self.depth = depth
        self.out: list[SimpleCommand] = []

    # structure

    def node(self, node: Any, ctx: _Ctx) -> None:
        kind = node.kind
        if kind == "list":
            parts = node.parts
            for index, part in enumerate(parts):
                if part.kind == "operator":
                    continue
                following = parts[index + 1] if index + 1 < len(parts) else None
                background = following is not None and getattr(following, "op", None) == "&"
                self.node(part, attrs.evolve(ctx, background=ctx.background or background))
        elif kind == "pipeline":
            stages = [p for p in node.parts if p.kind not in ("pipe", "reservedword")]
            text = self.source[node.pos[0] : node.pos[1]] if len(stages) > 1 else ""
            for index, stage in enumerate(stages):
                self.node(
                    stage,
                    attrs.evolve(
                        ctx,
                        pipeline=(index, len(stages)) if len(stages) > 1 else ctx.pipeline,
                        stdin_piped=ctx.stdin_piped if index == 0 else True,
                        pipeline_source=text or ctx.pipeline_source,
                    ),
                )
        elif kind == "command":
            self.simple(node, ctx)
        elif kind == "compound":
            redirects = tuple(self.redirect(r, ctx) for r in getattr(node, "redirects", ()))
            inner = attrs.evolve(ctx, redirects=ctx.redirects + redirects)
            for part in node.list:
                self.node(part, inner)
        elif kind in ("if", "for", "while", "until"):
            for part in node.parts:
                if part.kind == "word":
                    # `for x in $(cmd)`: the loop's words run their substitutions.
                    self.word(part, ctx)
                else:
                    self.node(part, ctx)
        elif kind == "function":
            names = [p for p in node.parts if p.kind == "word"]
            bodies = [p for p in node.parts if p.kind == "compound"]
            if not names or not bodies:
                raise ShellParseError("a function definition has no name or body")
            name = self.word(names[0], ctx).value
            self.node(bodies[-1], attrs.evolve(ctx, functions=(*ctx.functions, name)))
        elif kind in ("reservedword", "operator", "pipe"):
            return
        else:
            raise ShellParseError(f"it uses a construct this policy does not follow ({kind})")

    def simple(self, node: Any, ctx: _Ctx) -> None:
        words: list[Word] = []
        assignments: list[Word] = []
        redirects: list[Redirect] = []
        for part in node.parts:
            if part.kind == "word":
                words.append(self.word(part, ctx))
            elif part.kind == "assignment":
                assignments.append(self.word(part, ctx, assignment=True))
            elif part.kind == "redirect":
                redirects.append(self.redirect(part, ctx))
            else:
                raise ShellParseError(f"a command holds an unexpected {part.kind}")
        start, end = node.pos
        command = SimpleCommand(
            words=tuple(words),
            redirects=ctx.redirects + tuple(redirects),
            assignments=tuple(assignments),
            source=self.source[start:end],
            nesting=ctx.nesting,
            pipeline=ctx.pipeline,
            stdin_piped=ctx.stdin_piped,
            background=ctx.background,
            functions=ctx.functions,
            pipeline_source=ctx.pipeline_source,
        )
        self.out.extend(_analyse(command, self.depth))

    def redirect(self, node: Any, ctx: _Ctx) -> Redirect:
        op = str(node.type)
        fd = node.input if isinstance(node.input, int) else None
        output = node.output
        if op in ("<<", "<<-"):
            heredoc = node.heredoc
            if heredoc is None:
                raise ShellParseError("a here-document has no body")
            start, end = output.pos
            # The lexer unquoted the delimiter for bashlex; the original says if it was quoted.
            quoted = any(c in self.source[start:end] for c in "'\"\\")
            h_start, h_end = heredoc.pos
            text = self.source[h_start:h_end]
            body = text[: text.rfind("\n") + 1] if "\n" in text else ""
            if quoted:
                word = Word(raw=body, parts=(Part("text", body, quoted=True),))
            else:
                parts: list[Part] = []
                self.scan_heredoc(h_start, h_start + len(body), ctx, parts)
                word = Word(raw=body, parts=_merge(parts))
            return Redirect(op=op, fd=fd, heredoc=word)
        if isinstance(output, int):
            return Redirect(op=op, fd=fd, dup=str(output))
        if isinstance(output, str):
            return Redirect(op=op, fd=fd, dup=output)
        target = self.word(output, ctx)
        if op in (">&", "<&") and target.static and (target.value.isdigit() or target.value == "-"):
            return Redirect(op=op, fd=fd, dup=target.value)
        return Redirect(op=op, fd=fd, target=target)

    # words

    def word(self, node: Any, ctx: _Ctx, *, assignment: bool = False) -> Word:
        start, end = node.pos
        if not 0 <= start < end <= len(self.source):
            raise ShellParseError("lost track of a word")
        parts: list[Part] = []
        self.scan(start, end, ctx, parts, assignment=assignment)
        return Word(raw=self.source[start:end], parts=_merge(parts))

    def scan(self, i: int, end: int, ctx: _Ctx, parts: list[Part], *, assignment: bool) -> None:
        src = self.source
        first = i
        while i < end:
            c = src[i]
            if c == "\\":
                if i + 1 < end:
                    if src[i + 1] != "\n":
                        parts.append(Part("text", src[i + 1], quoted=True))
                    i += 2
                else:
                    parts.append(Part("text", "\\", quoted=True))
                    i += 1
            elif c == "'":
                close = src.find("'", i + 1, end)
                if close < 0:
                    raise ShellParseError("a single quote is not closed")
                parts.append(Part("text", src[i + 1 : close], quoted=True))
                i = close + 1
            elif c == '"':
                i = self.double(i + 1, end, ctx, parts)
            elif c == "$":
                i = self.dollar(i, end, ctx, parts, quoted=False)
            elif c == "`" or (c in "<>" and src.startswith("(", i + 1)):
                i = self.substitution(i, ctx, parts, quoted=False)
            elif c in "*?[":
                parts.append(Part("glob", c))
                i += 1
            elif c in "{},":
                parts.append(Part("brace", c))
                i += 1
            elif c == "~" and (i == first or (assignment and src[i - 1] in "=:")):
                j = i + 1
                while j < end and (src[j] in _NAME_CHARS or src[j] in ".-+"):
                    j += 1
                if j == end or src[j] == "/" or (assignment and src[j] == ":"):
                    parts.append(Part("tilde", src[i:j]))
                    i = j
                else:
                    parts.append(Part("text", c))
                    i += 1
            else:
                parts.append(Part("text", c))
                i += 1

    def double(self, i: int, end: int, ctx: _Ctx, parts: list[Part]) -> int:
        src = self.source
        while i < end:
            c = src[i]
            if c == '"':
                return i + 1
            if c == "\\" and i + 1 < end and src[i + 1] in '$`"\\\n':
                if src[i + 1] != "\n":
                    parts.append(Part("text", src[i + 1], quoted=True))
                i += 2
            elif c == "$":
                i = self.dollar(i, end, ctx, parts, quoted=True)
            elif c == "`":
                i = self.substitution(i, ctx, parts, quoted=True)
            else:
                parts.append(Part("text", c, quoted=True))
                i += 1
        raise ShellParseError("a double quote is not closed")

    def scan_heredoc(self, i: int, end: int, ctx: _Ctx, parts: list[Part]) -> None:
        src = self.source
        while i < end:
            c = src[i]
            if c == "\\" and i + 1 < end and src[i + 1] in "$`\\\n":
                if src[i + 1] != "\n":
                    parts.append(Part("text", src[i + 1], quoted=True))
                i += 2
            elif c == "$":
                i = self.dollar(i, end, ctx, parts, quoted=True)
            elif c == "`":
                i = self.substitution(i, ctx, parts, quoted=True)
            else:
                parts.append(Part("text", c, quoted=True))
                i += 1

    def dollar(self, i: int, end: int, ctx: _Ctx, parts: list[Part], *, quoted: bool) -> int:
        src = self.source
        following = src[i + 1] if i + 1 < end else ""
        if following == "'" and not quoted:
            close = _ansi_c_end(src, i + 2)
            if close < 0 or close > end:
                raise ShellParseError("a $'...' string is not closed")
            parts.append(Part("text", _ansi_c(src[i + 2 : close - 1]), quoted=True))
            return close
        if following == '"' and not quoted:
            return self.double(i + 2, end, ctx, parts)
        if following in ("(", "{"):
            span = self.spans.get(i)
            if span is None or span.end > end:
                raise ShellParseError("lost track of a substitution")
            text = src[i : span.end]
            if span.kind == "arith":
                self.scan_parameter(i + 3, span.end - 2, ctx)
                parts.append(Part("arithmetic", text, quoted))
            elif span.kind == "param":
                self.scan_parameter(i + 2, span.end - 1, ctx)
                parts.append(Part("parameter", text, quoted))
            else:
                self.nested(i, span, ctx)
                parts.append(Part("command", text, quoted))
            return span.end
        if following and following in _NAME_START:
            j = i + 1
            while j < end and src[j] in _NAME_CHARS:
                j += 1
            parts.append(Part("parameter", src[i:j], quoted))
            return j
        if following and following in _SPECIAL_PARAMETERS:
            parts.append(Part("parameter", src[i : i + 2], quoted))
            return i + 2
        parts.append(Part("text", "$", quoted))
        return i + 1

    def scan_parameter(self, i: int, end: int, ctx: _Ctx) -> None:
        # Only the substitutions inside `${...}` matter; their values are unknown anyway.
        src = self.source
        ignored: list[Part] = []
        while i < end:
            c = src[i]
            if c == "\\":
                i += 2
            elif c == '"':
                i = self.double(i + 1, end, ctx, ignored)
            elif c == "$":
                i = self.dollar(i, end, ctx, ignored, quoted=True)
            elif c in "`<>" and (c == "`" or src.startswith("(", i + 1)):
                i = self.substitution(i, ctx, ignored, quoted=True)
            else:
                i += 1

    def substitution(self, i: int, ctx: _Ctx, parts: list[Part], *, quoted: bool) -> int:
        span = self.spans.get(i)
        if span is None:
            raise ShellParseError("lost track of a substitution")
        self.nested(i, span, ctx)
        kind: PartKind = "process" if span.kind == "process" else "command"
        parts.append(Part(kind, self.source[i : span.end], quoted))
        return span.end

    def nested(self, start: int, span: _Span, ctx: _Ctx) -> None:
        if span.kind == "process":
            label = "<(...)" if self.source[start] == "<" else ">(...)"
            # `tee >(sh)`: what runs in >(...) reads the pipe.
            piped = label == ">(...)" or ctx.stdin_piped
        else:
            label = "`...`" if span.kind == "backtick" else "$(...)"
            piped = ctx.stdin_piped
        inner = _Ctx(
            nesting=(*ctx.nesting, label),
            stdin_piped=piped,
            functions=ctx.functions,
            redirects=ctx.redirects,
        )
        self.out.extend(_parse(span.inner, inner, self.depth + 1))


# --- programs that run other programs ---------------------------------------------


def _evolve_code(command: SimpleCommand, code: CodeSource | None) -> SimpleCommand:
    return command if code is None else attrs.evolve(command, code=code)


def _analyse(command: SimpleCommand, depth: int) -> list[SimpleCommand]:
    """`command`, with `code` set if it runs code, followed by the commands it runs."""
    if depth > _MAX_DEPTH:
        raise ShellParseError("commands are nested too deeply")
    if not command.words or not command.name_literal:
        return [command]
    name = command.name or ""
    handler = WRAPPERS.get(name)
    if handler is not None:
        return handler(command, name, depth)
    if name in SHELLS:
        return _shell(command, name, depth)
    if _AWK.fullmatch(name):
        # `awk -f prog.awk` runs a file; otherwise the first operand is the program.
        files = any(w.value == "-f" or w.value.startswith("--file") for w in command.words[1:])
        return [attrs.evolve(command, code="file" if files else "inline")]
    interpreter = _interpreter(name)
    if interpreter is not None:
        code = _interpreter_code(command, *interpreter[1:])
        return [_evolve_code(command, code)]
    return [command]


@functools.lru_cache(maxsize=512)
def _interpreter(name: str) -> _Interpreter | None:
    # Every command asks; most names are not interpreters, and there are many patterns.
    for interpreter in _INTERPRETERS:
        if interpreter[0].fullmatch(name):
            return interpreter
    return None


def _inner(
    command: SimpleCommand,
    words: Sequence[Word],
    label: str,
    depth: int,
    *,
    stdin_piped: bool | None = None,
    redirects: tuple[Redirect, ...] | None = None,
) -> list[SimpleCommand]:
    if not words:
        return []
    inner = SimpleCommand(
        words=tuple(words),
        redirects=command.redirects if redirects is None else redirects,
        source=" ".join(word.raw for word in words),
        nesting=(*command.nesting, label),
        pipeline=command.pipeline,
        stdin_piped=command.stdin_piped if stdin_piped is None else stdin_piped,
        background=command.background,
        functions=command.functions,
        pipeline_source=command.pipeline_source,
    )
    return _analyse(inner, depth + 1)


def _unknown_inner(
    command: SimpleCommand, words: Sequence[Word], label: str, depth: int
) -> list[SimpleCommand]:
    """A wrapped command whose program cannot be told: reported with an unknown name."""
    if not words:
        return []
    rest = [Word.unknown(words[0].raw), *words[1:]]
    return _inner(command, rest, label, depth)


def _nested_script(
    command: SimpleCommand, word: Word | None, label: str, depth: int, *, same_shell: bool
) -> tuple[CodeSource, list[SimpleCommand]]:
    # A `~` may stay: read again as code, it expands to the same folder.
    if word is None or not word.literal or word.has_glob or word.expands_braces:
        return "dynamic", []
    ctx = _Ctx(
        nesting=(*command.nesting, label),
        stdin_piped=command.stdin_piped,
        background=command.background,
        functions=command.functions if same_shell else (),
        redirects=command.redirects,
    )
    return "parsed", _parse(word.value, ctx, depth + 1)


def _stdin_code(
    command: SimpleCommand, label: str, depth: int, *, shell: bool
) -> tuple[CodeSource, list[SimpleCommand]]:
    """Where a program that reads its code from stdin gets it, parsing a literal here-document."""
    source = None
    for redirect in command.redirects:
        if redirect.reads_stdin:
            source = redirect
    if source is None:
        return ("pipe" if command.stdin_piped else "stdin"), []
    if source.op in ("<<", "<<-", "<<<"):
        word = source.heredoc if source.heredoc is not None else source.target
        if not shell:
            return "inline", []
        if word is None or not word.literal or any(p.kind == "tilde" for p in word.parts):
            return "dynamic", []
        ctx = _Ctx(nesting=(*command.nesting, f"{label} <<"), functions=())
        return "parsed", _parse(word.value, ctx, depth + 1)
    if source.op == "<&" or source.target is None:
        return "pipe", []
    return _file_code(source.target), []


_STDIN_FILES = frozenset({"-", "/dev/stdin", "/dev/fd/0", "/proc/self/fd/0"})


def _file_code(word: Word) -> CodeSource:
    if any(part.kind == "process" for part in word.parts):
        return "pipe"
    if word.static and (
        word.value in ("-", "/dev/stdin") or word.value.startswith(("/dev/fd/", "/proc/self/fd/"))
    ):
        return "pipe"
    return "file"


def _shell(command: SimpleCommand, name: str, depth: int) -> list[SimpleCommand]:
    args = command.words[1:]
    command_mode = stdin_mode = False
    i = 0
    while i < len(args):
        word = args[i]
        if not word.static:
            if not command_mode and any(
                p.kind in _EXPANSIONS and p.kind != "process" and not p.quoted for p in word.parts
            ):
                # `bash $FLAGS ...`: word splitting may make options of it (`-c ...`).
                return [attrs.evolve(command, code="dynamic")]
            break
        value = word.value
        if value in ("--", "-"):
            i += 1
            stdin_mode = stdin_mode or (value == "-" and not command_mode)
            break
        if value.startswith("--"):
            key, eq, rest = value.partition("=")
            if key == "--command":
                # fish: --command=CODE, or --command CODE.
                script = Word.of(rest) if eq else (args[i + 1] if i + 1 < len(args) else None)
                label = f"{name} --command"
                code, nested = _nested_script(command, script, label, depth, same_shell=False)
                return [attrs.evolve(command, code=code), *nested]
            with_value = key in ("--rcfile", "--init-file", "--init-command") and not eq
            i += 2 if with_value else 1
            continue
        if len(value) > 1 and value[0] in "-+":
            values = 0
            for flag in value[1:]:
                if flag == "c" and value[0] == "-":
                    command_mode = True
                elif flag == "s" and value[0] == "-":
                    stdin_mode = True
                elif flag in "oO" or (name == "fish" and flag == "C"):
                    values += 1
            i += 1 + values
            continue
        break
    operands = args[i:]
    if command_mode:
        if not operands:
            return [command]
        code, nested = _nested_script(command, operands[0], f"{name} -c", depth, same_shell=False)
        return [attrs.evolve(command, code=code), *nested]
    script = operands[0] if operands else None
    if stdin_mode or script is None or (script.static and script.value in _STDIN_FILES):
        code, nested = _stdin_code(command, name, depth, shell=True)
        return [attrs.evolve(command, code=code), *nested]
    return [attrs.evolve(command, code=_file_code(script))]


def _interpreter_code(
    command: SimpleCommand,
    inline: frozenset[str],
    module: frozenset[str],
    arguments: frozenset[str],
) -> CodeSource:
    args = command.words[1:]
    i = 0
    while i < len(args):
        word = args[i]
        if not word.static:
            # An option or the script, only known at run time; if it is an option,
            # the code may come from stdin.
            return "pipe" if command.stdin_piped else "file"
        value = word.value
        if value == "--":
            i += 1
            break
        if value == "-" or not value.startswith("-"):
            break
        key = value.partition("=")[0]
        if key in inline or value in inline:
            return "inline"
        if key in module or value in module:
            return "file"
        if value.startswith("--") or len(value) == 2:
            i += 2 if value in arguments else 1
            continue
        # A cluster such as `-Wignore`, `-lne`, `-pi`: the first flag taking a value ends it.
        for index, flag in enumerate(value[1:], start=1):
            option = "-" + flag
            if option in inline:
                return "inline"
            if option in module:
                return "file"
            if option in arguments:
                if index == len(value) - 1:
                    i += 1
                break
        i += 1
    operands = args[i:]
    if operands and not (operands[0].static and operands[0].value in _STDIN_FILES):
        return _file_code(operands[0])
    source = None
    for redirect in command.redirects:
        if redirect.reads_stdin:
            source = redirect
    if source is None:
        return "pipe" if command.stdin_piped else "stdin"
    if source.op in ("<<", "<<-", "<<<"):
        return "inline"
    if source.op == "<&" or source.target is None:
        return "pipe"
    return _file_code(source.target)


@attrs.frozen
class _Options:
    """The option syntax of a wrapper: which options exist and which take a value."""

    flags: str = ""
    args: str = ""
    long_flags: frozenset[str] = frozenset()
    long_args: frozenset[str] = frozenset()
    digits: bool = False


def _options(
    flags: str = "",
    args: str = "",
    long_flags: str = "",
    long_args: str = "",
    *,
    digits: bool = False,
) -> _Options:
    return _Options(
        flags, args, frozenset(long_flags.split()), frozenset(long_args.split()), digits
    )


@attrs.frozen
class _Parsed:
    index: int
    seen: dict[str, list[Word]]


def _read_options(words: Sequence[Word], start: int, spec: _Options) -> _Parsed | None:
    """Read the options of a wrapper; `None` when one is unknown or computed at run time."""
    seen: dict[str, list[Word]] = {}
    i = start
    while i < len(words):
        word = words[i]
        value = word.value
        if not word.static:
            # Taken as the first operand: if it turns out to be an option at run
            # time, what follows is reported as a program with an unknown name,
            # which policies refuse, so nothing slips through.
            return _Parsed(i, seen)
        if value == "--":
            return _Parsed(i + 1, seen)
        if value.startswith("--") and len(value) > 2:
            key, eq, rest = value.partition("=")
            if key in spec.long_args:
                if eq:
                    seen.setdefault(key, []).append(Word.of(rest))
                    i += 1
                elif i + 1 < len(words):
                    seen.setdefault(key, []).append(words[i + 1])
                    i += 2
                else:
                    return None
            elif key in spec.long_flags:
                seen.setdefault(key, []).append(Word.of(rest))
                i += 1
            else:
                return None
            continue
        if value.startswith("-") and len(value) > 1:
            if spec.digits and value[1:].isdigit():
                i += 1
                continue
            j = 1
            used_next = False
            while j < len(value):
                flag = value[j]
                if flag in spec.args:
                    rest = value[j + 1 :]
                    if rest:
                        seen.setdefault("-" + flag, []).append(Word.of(rest))
                    elif i + 1 < len(words):
                        seen.setdefault("-" + flag, []).append(words[i + 1])
                        used_next = True
                    else:
                        return None
                    break
                if flag in spec.flags:
                    seen.setdefault("-" + flag, []).append(Word.of(""))
                    j += 1
                    continue
                return None
            i += 2 if used_next else 1
            continue
        return _Parsed(i, seen)
    return _Parsed(i, seen)


_Handler: TypeAlias = Callable[[SimpleCommand, str, int], list[SimpleCommand]]


def _wrapper(
    spec: _Options,
    *,
    positional: int = 0,
    no_command: tuple[str, ...] = (),
    assignments: bool = False,
) -> _Handler:
    """A handler for a program that runs the command after its options (and `positional` words)."""

    def handle(command: SimpleCommand, name: str, depth: int) -> list[SimpleCommand]:
        label = f"run by {name}"
        parsed = _read_options(command.words, 1, spec)
        if parsed is None:
            return [command, *_unknown_inner(command, command.words[1:], label, depth)]
        if any(option in parsed.seen for option in no_command):
            return [command]
        start = parsed.index + positional
        if assignments:
            while start < len(command.words) and _ASSIGNMENT.match(command.words[start].value):
                start += 1
        return [command, *_inner(command, command.words[start:], label, depth)]

    return handle


def _sudo(command: SimpleCommand, name: str, depth: int) -> list[SimpleCommand]:
    spec = _options(
        flags="AbEHKklnPSsiVvNBe",
        args="CDghpRrTtUu",
        long_flags="--askpass --background --preserve-env --set-home --login --non-interactive "
        "--preserve-groups --stdin --shell --reset-timestamp --remove-timestamp --list "
        "--validate --bell --edit --version --help",
        long_args="--close-from --chdir --group --host --prompt --chroot --role --type "
        "--command-timeout --other-user --user",
    )
    label = f"run by {name}"
    parsed = _read_options(command.words, 1, spec)
    if parsed is None:
        return [command, *_unknown_inner(command, command.words[1:], label, depth)]
    start = parsed.index
    while start < len(command.words) and _ASSIGNMENT.match(command.words[start].value):
        start += 1
    rest = command.words[start:]
    moved = _chdir(command, parsed, ("-D", "--chdir"), label, depth)
    if "-e" in parsed.seen or "--edit" in parsed.seen:
        return [command, *moved, *_inner(command, [Word.of("sudoedit"), *rest], label, depth)]
    if not rest:
        if any(o in parsed.seen for o in ("-s", "-i", "--shell", "--login")):
            code, nested = _stdin_code(command, name, depth, shell=True)
            return [attrs.evolve(command, code=code), *moved, *nested]
        return [command]
    return [command, *moved, *_inner(command, rest, label, depth)]


def _doas(command: SimpleCommand, name: str, depth: int) -> list[SimpleCommand]:
    parsed = _read_options(command.words, 1, _options(flags="nsL", args="uC"))
    label = f"run by {name}"
    if parsed is None:
        return [command, *_unknown_inner(command, command.words[1:], label, depth)]
    rest = command.words[parsed.index :]
    if not rest and "-s" in parsed.seen:
        code, nested = _stdin_code(command, name, depth, shell=True)
        return [attrs.evolve(command, code=code), *nested]
    return [command, *_inner(command, rest, label, depth)]


def _env(command: SimpleCommand, name: str, depth: int) -> list[SimpleCommand]:
    spec = _options(
        flags="i0v",
        args="uCS",
        long_flags="--ignore-environment --null --debug --list-signal-handling "
        "--default-signal --ignore-signal --block-signal",
        long_args="--unset --chdir --split-string",
    )
    label = f"run by {name}"
    words = list(command.words)
    # `env -` is `env -i`.
    words = [Word.of("-i") if w.static and w.value == "-" else w for w in words]
    parsed = _read_options(words, 1, spec)
    if parsed is None:
        return [command, *_unknown_inner(command, words[1:], label, depth)]
    start = parsed.index
    while start < len(words) and _ASSIGNMENT.match(words[start].value):
        start += 1
    rest = words[start:]
    split = parsed.seen.get("-S") or parsed.seen.get("--split-string")
    if split:
        word = split[-1]
        if not word.static:
            return [command, *_unknown_inner(command, [word, *rest], label, depth)]
        try:
            head = [Word.of(piece) for piece in shlex.split(word.value)]
        except ValueError:
            return [command, *_unknown_inner(command, [word, *rest], label, depth)]
        if any("$" in w.value for w in head):
            # env -S expands ${VAR} itself.
            return [command, *_unknown_inner(command, [word, *rest], label, depth)]
        rest = [*head, *rest]
    return [
        command,
        *_chdir(command, parsed, ("-C", "--chdir"), label, depth),
        *_inner(command, rest, label, depth),
    ]


def _chdir(
    command: SimpleCommand, parsed: _Parsed, keys: tuple[str, ...], label: str, depth: int
) -> list[SimpleCommand]:
    """A `cd` standing for a wrapper's change of folder (`env -C /`, `sudo -D /`).

    Policies follow `cd` from command to command; the folder then stays
    changed for later commands too, which errs on the side of refusing.
    """
    for key in keys:
        if key in parsed.seen:
            return _inner(command, [Word.of("cd"), parsed.seen[key][-1]], label, depth)
    return []


def _xargs(command: SimpleCommand, name: str, depth: int) -> list[SimpleCommand]:
    spec = _options(
        flags="0rtpxoe",
        args="adEILnPs",
        long_flags="--null --no-run-if-empty --verbose --interactive --exit --open-tty "
        "--show-limits --eof",
        long_args="--arg-file --delimiter --max-lines --max-args --max-procs --max-chars "
        "--process-slot-var",
    )
    label = f"run by {name}"
    words = command.words
    replace: str | None = None
    # `-i` and `-l` take an optional value glued to them (`-i{}`), which the
    # general reader cannot express: take them out of the option words first.
    kept: list[Word] = [words[0]]
    i = 1
    while i < len(words):
        word = words[i]
        value = word.value
        if not word.static or not value.startswith("-") or value == "--":
            break
        if value.startswith("--replace"):
            replace = value.partition("=")[2] or "{}"
        elif value.startswith("-i"):
            replace = value[2:] or "{}"
        elif not re.fullmatch(r"-l\d*", value):
            kept.append(word)
            if value in ("-a", "-d", "-E", "-I", "-L", "-n", "-P", "-s") and i + 1 < len(words):
                kept.append(words[i + 1])
                i += 1
        i += 1
    kept.extend(words[i:])
    parsed = _read_options(kept, 1, spec)
    if parsed is None:
        return [command, *_unknown_inner(command, kept[1:], label, depth)]
    if "-I" in parsed.seen:
        replace = parsed.seen["-I"][-1].value
    rest = kept[parsed.index :] or [Word.of("echo")]
    if replace:
        rest = [Word.unknown(w.raw) if replace in w.value else w for w in rest]
    else:
        rest = [*rest, Word.unknown("<arguments read by xargs>")]
    # xargs gives the commands it runs /dev/null as stdin.
    return [command, *_inner(command, rest, label, depth, stdin_piped=False, redirects=())]


_FIND_ACTIONS = frozenset({"-exec", "-execdir", "-ok", "-okdir"})


def _find(command: SimpleCommand, name: str, depth: int) -> list[SimpleCommand]:
    words = command.words
    i = 1
    while i < len(words) and words[i].value in ("-H", "-L", "-P"):
        i += 1
    while i < len(words) and (words[i].value == "-D" or words[i].value.startswith("-O")):
        i += 2 if words[i].value == "-D" else 1
    starts: list[Word] = []
    while i < len(words):
        value = words[i].value
        if value.startswith("-") or value in ("(", "!", ","):
            break
        starts.append(words[i])
        i += 1
    if not starts:
        starts = [Word.of(".")]
    found = [command]
    while i < len(words):
        action = words[i].value
        i += 1
        if action not in _FIND_ACTIONS:
            continue
        begin = i
        while i < len(words) and words[i].value not in (";", "+"):
            i += 1
        inner = words[begin:i]
        i += 1
        for start in starts[:8]:
            # `{}` is each path found below `start`: `start/*`, as a pattern.
            path = Word(raw="{}", parts=(*start.parts, Part("text", "/"), Part("glob", "*")))
            replaced = [
                path if w.value == "{}" else (Word.unknown(w.raw) if "{}" in w.value else w)
                for w in inner
            ]
            found.extend(_inner(command, replaced, f"run by find {action}", depth))
    return found


def _watch(command: SimpleCommand, name: str, depth: int) -> list[SimpleCommand]:
    spec = _options(
        flags="bdegtxcprwC",
        args="nq",
        long_flags="--beep --differences --errexit --chgexit --no-title --exec --color "
        "--precise --no-wrap --no-color --no-linewrap",
        long_args="--interval --equexit",
    )
    label = f"run by {name}"
    parsed = _read_options(command.words, 1, spec)
    if parsed is None:
        return [command, *_unknown_inner(command, command.words[1:], label, depth)]
    rest = command.words[parsed.index :]
    if "-x" in parsed.seen or "--exec" in parsed.seen:
        return [command, *_inner(command, rest, label, depth)]
    if not rest:
        return [command]
    # Without -x, watch joins its arguments with spaces and runs them with sh -c.
    joined = (
        Word.of(" ".join(w.value for w in rest))
        if all(w.static for w in rest)
        else Word.unknown(" ".join(w.raw for w in rest))
    )
    code, nested = _nested_script(command, joined, "watch", depth, same_shell=False)
    return [attrs.evolve(command, code=code), *nested]


def _su(command: SimpleCommand, name: str, depth: int) -> list[SimpleCommand]:
    # su reorders its options (`su root -c 'x'`), so look for -c anywhere.
    words = command.words
    label = f"run by {name}"
    for index, word in enumerate(words[1:], start=1):
        value = word.value
        if not word.static:
            continue
        script: Word | None
        if value in ("-c", "--command", "--session-command"):
            script = words[index + 1] if index + 1 < len(words) else None
        elif value.startswith(("--command=", "--session-command=")):
            script = Word.of(value.partition("=")[2])
        elif value.startswith("-c") and not value.startswith("--"):
            script = Word.of(value[2:])
        elif value == "--" and name == "runuser":
            return [command, *_inner(command, words[index + 1 :], label, depth)]
        else:
            continue
        code, nested = _nested_script(command, script, f"{name} -c", depth, same_shell=False)
        return [attrs.evolve(command, code=code), *nested]
    if name == "runuser" and any(w.value in ("-u", "--user") for w in words):
        parsed = _read_options(words, 1, _options(args="ugGw", long_args="--user --group"))
        if parsed is None:
            return [command, *_unknown_inner(command, words[1:], label, depth)]
        return [command, *_inner(command, words[parsed.index :], label, depth)]
    # No command: a login shell that reads its commands from stdin.
    code, nested = _stdin_code(command, name, depth, shell=True)
    return [attrs.evolve(command, code=code), *nested]


def _flock(command: SimpleCommand, name: str, depth: int) -> list[SimpleCommand]:
    spec = _options(
        flags="sexunoFhV",
        args="wEc",
        long_flags="--shared --exclusive --unlock --nonblock --nb --close --no-fork --verbose",
        long_args="--timeout --wait --conflict-exit-code --command",
    )
    label = f"run by {name}"
    parsed = _read_options(command.words, 1, spec)
    if parsed is None:
        return [command, *_unknown_inner(command, command.words[1:], label, depth)]
    script = parsed.seen.get("-c") or parsed.seen.get("--command")
    rest = command.words[parsed.index + 1 :]
    if not script and rest and rest[0].value in ("-c", "--command"):
        script = list(rest[1:2])
    if script:
        code, nested = _nested_script(command, script[-1], "flock -c", depth, same_shell=False)
        return [attrs.evolve(command, code=code), *nested]
    return [command, *_inner(command, rest, label, depth)]


def _eval(command: SimpleCommand, name: str, depth: int) -> list[SimpleCommand]:
    args = command.words[1:]
    if args and args[0].static and args[0].value == "--":
        args = args[1:]
    if not args:
        return [command]
    # eval joins its words after expansion and reads them again as code; `~`,
    # globs and braces read again expand the same way, so only values computed
    # at run time make the code unknown.
    joined = (
        Word.of(" ".join(w.value for w in args))
        if all(w.literal for w in args)
        else Word.unknown(" ".join(w.raw for w in args))
    )
    code, nested = _nested_script(command, joined, "eval", depth, same_shell=True)
    return [attrs.evolve(command, code=code), *nested]


def _source(command: SimpleCommand, name: str, depth: int) -> list[SimpleCommand]:
    args = command.words[1:]
    if args and args[0].static and args[0].value == "--":
        args = args[1:]
    if not args:
        return [command]
    code = _file_code(args[0])
    if code == "pipe" and args[0].static and not command.stdin_piped:
        # `source /dev/stdin` reads whatever the command's stdin holds.
        code, nested = _stdin_code(command, name, depth, shell=True)
        return [attrs.evolve(command, code=code), *nested]
    return [attrs.evolve(command, code=code)]


def _trap(command: SimpleCommand, name: str, depth: int) -> list[SimpleCommand]:
    args = list(command.words[1:])
    while args and args[0].static and args[0].value.startswith("-") and args[0].value != "-":
        if args.pop(0).value == "--":
            break
    if len(args) < 2 or (args[0].static and args[0].value in ("", "-")):
        return [command]
    # The action runs later, when the signal comes; it is code all the same.
    code, nested = _nested_script(command, args[0], "trap", depth, same_shell=True)
    return [attrs.evolve(command, code=code), *nested]


def _command_builtin(command: SimpleCommand, name: str, depth: int) -> list[SimpleCommand]:
    parsed = _read_options(command.words, 1, _options(flags="pvV"))
    label = f"run by {name}"
    if parsed is None:
        return [command, *_unknown_inner(command, command.words[1:], label, depth)]
    if "-v" in parsed.seen or "-V" in parsed.seen:
        return [command]
    return [command, *_inner(command, command.words[parsed.index :], label, depth)]


def _ssh(command: SimpleCommand, name: str, depth: int) -> list[SimpleCommand]:
    """The command words of `ssh host ...`, joined by spaces, run in the remote shell."""
    spec = _options(
        flags="46AaCfGgKkMNnqsTtVvXxYy",
        args="BbcDEeFIiJLlmOoPpQRSWw",
    )
    parsed = _read_options(command.words, 1, spec)
    if parsed is None:
        return [command, *_unknown_inner(command, command.words[1:], f"run by {name}", depth)]
    rest = command.words[parsed.index + 1 :]
    if not rest:
        return [command]
    joined = (
        Word.of(" ".join(w.value for w in rest))
        if all(w.literal for w in rest)
        else Word.unknown(" ".join(w.raw for w in rest))
    )
    code, nested = _nested_script(command, joined, "ssh", depth, same_shell=False)
    return [attrs.evolve(command, code=code), *nested]


_GIT_ALIAS = re.compile(r"alias\.[^=]+=!(.*)", re.DOTALL)


def _git(command: SimpleCommand, name: str, depth: int) -> list[SimpleCommand]:
    """A git alias starting with `!` is shell code (`git -c alias.x='!cmd' x`, `git config`)."""
    found = [command]
    words = command.words
    for index, word in enumerate(words):
        match = _GIT_ALIAS.fullmatch(word.value)
        script: Word | None = None
        if match:
            script = Word(raw=word.raw, parts=(Part("text", match.group(1), quoted=True),))
            if not word.literal:
                script = None
        elif word.value.startswith("alias.") and index + 1 < len(words):
            value = words[index + 1]
            if value.value.startswith("!"):
                script = Word(raw=value.raw, parts=(Part("text", value.value[1:], quoted=True),))
                if not value.literal:
                    script = None
            else:
                continue
        else:
            continue
        code, nested = _nested_script(command, script, "git alias", depth, same_shell=False)
        found[0] = attrs.evolve(found[0], code=code)
        found.extend(nested)
    return found


def _busybox(command: SimpleCommand, name: str, depth: int) -> list[SimpleCommand]:
    rest = command.words[1:]
    if not rest or (rest[0].static and rest[0].value.startswith("-")):
        return [command]
    return [command, *_inner(command, rest, f"run by {name}", depth)]


def _candidates(command: SimpleCommand, name: str, depth: int) -> list[SimpleCommand]:
    """For wrappers with too many options to model: any word not an option may be the program."""
    found = [command]
    label = f"run by {name}"
    seen = 0
    for index in range(1, len(command.words)):
        word = command.words[index]
        if word.static and word.value.startswith("-"):
            continue
        found.extend(_inner(command, command.words[index:], label, depth))
        seen += 1
        if seen == 4:
            break
    return found


WRAPPERS: dict[str, _Handler] = {
    "nohup": _wrapper(_options()),
    "timeout": _wrapper(
        _options(
            flags="v",
            args="sk",
            long_flags="--preserve-status --foreground --verbose",
            long_args="--signal --kill-after",
        ),
        positional=1,
    ),
    "nice": _wrapper(_options(args="n", long_args="--adjustment", digits=True)),
    "ionice": _wrapper(
        _options(
            flags="t",
            args="cnpPu",
            long_flags="--ignore",
            long_args="--class --classdata --pid --pgid --uid",
        ),
        no_command=("-p", "-P", "-u", "--pid", "--pgid", "--uid"),
    ),
    "stdbuf": _wrapper(_options(args="ioe", long_args="--input --output --error")),
    "setsid": _wrapper(_options(flags="cfw", long_flags="--ctty --fork --wait")),
    "chroot": _wrapper(
        _options(long_flags="--skip-chdir", long_args="--userspec --groups"), positional=1
    ),
    "time": _wrapper(
        _options(
            flags="pavq",
            args="fo",
            long_flags="--portability --append --verbose --quiet",
            long_args="--format --output",
        )
    ),
    "taskset": _wrapper(
        _options(flags="acp", long_flags="--all-tasks --cpu-list --pid"),
        positional=1,
        no_command=("-p", "--pid"),
    ),
    "chrt": _wrapper(
        _options(
            flags="abdfiormRpve",
            args="TPD",
            long_flags="--all-tasks --batch --deadline --fifo --idle --other --rr "
            "--reset-on-fork --max --pid --verbose",
            long_args="--sched-runtime --sched-period --sched-deadline",
        ),
        positional=1,
        no_command=("-p", "--pid", "-m", "--max"),
    ),
    "exec": _wrapper(_options(flags="cl", args="a")),
    "builtin": _wrapper(_options()),
    "command": _command_builtin,
    "sudo": _sudo,
    "doas": _doas,
    "env": _env,
    "xargs": _xargs,
    "find": _find,
    "watch": _watch,
    "su": _su,
    "runuser": _su,
    "flock": _flock,
    "eval": _eval,
    "source": _source,
    ".": _source,
    "trap": _trap,
    "busybox": _busybox,
    "ssh": _ssh,
    "git": _git,
    **dict.fromkeys(
        [
            "unshare", "nsenter", "strace", "ltrace", "valgrind", "firejail", "bwrap",
            "systemd-run", "fakeroot", "torsocks", "proxychains", "proxychains4", "unbuffer",
            "catchsegv", "faketime", "xvfb-run", "dbus-run-session", "ssh-agent", "script",
            "sg", "newgrp", "pkexec", "caffeinate", "numactl", "cgexec", "prlimit",
        ],
        _candidates,
    ),
}  # fmt: skip
"""Programs that run another program (or shell code) given in their arguments."""


# --- entry points ----------------------------------------------------------------


def parse_script(script: str) -> tuple[SimpleCommand, ...]:
    """Every simple command `sh -c script` would run, in the order they appear.

    Args:
        script: Shell code, as given to `sh -c` (no `#!` handling; see `parse_command`).

    Returns:
        The commands, each with where it was found; wrapped programs and the
        code of `sh -c`, `eval` and literal here-documents fed to a shell
        follow the command that runs them.

    Raises:
        ShellParseError: The script cannot be parsed, holds a NUL byte, nests
            too deeply or is too long; the message says which.

    """
    return tuple(_parse(script, _Ctx(), 0))


def parse_argv(argv: Sequence[str]) -> tuple[SimpleCommand, ...]:
    """The commands an argv (run without a shell) runs: itself, and what it wraps.

    Raises:
        ShellParseError: Shell code it runs (`sh -c ...`) cannot be parsed.

    """
    words = tuple(Word.of(arg) for arg in argv)
    command = SimpleCommand(words=words, source=shlex.join(argv))
    return tuple(_analyse(command, 0))


def parse_command(command: Shell | Exec) -> tuple[SimpleCommand, ...]:
    """The commands a `Shell` or `Exec` command runs, including code fed to a shell on stdin.

    A `#!` script runs its interpreter with the body as stdin, so a shell
    interpreter's body is parsed as shell; any other interpreter's is opaque
    (`code == "inline"`). Likewise a shell that reads the command's own
    stdin (`Command.exec(["sh"]).with_stdin(...)`) has that stdin parsed.

    Raises:
        ShellParseError: Some shell code in it cannot be parsed.

    """
    stdin: bytes | None
    if isinstance(command, Shell):
        shebang = command.shebang()
        if shebang is None:
            found = parse_script(command.script)
            stdin = command.stdin
        else:
            found = parse_argv(shebang.argv)
            stdin = shebang.body
    else:
        found = parse_argv(command.argv)
        stdin = command.stdin
    if not stdin or not any(c.code == "stdin" for c in found):
        return found
    try:
        text = stdin.decode()
    except UnicodeDecodeError:
        raise ShellParseError("its stdin, which a shell reads as code, is not UTF-8") from None
    result: list[SimpleCommand] = []
    parsed_once = False
    for item in found:
        if item.code != "stdin":
            result.append(item)
            continue
        if item.name in SHELLS or item.name in ("sudo", "doas", "su", "runuser", "chroot"):
            result.append(attrs.evolve(item, code="parsed"))
            if not parsed_once:
                ctx = _Ctx(nesting=(*item.nesting, "stdin"))
                result.extend(_parse(text, ctx, 1))
                parsed_once = True
        else:
            result.append(attrs.evolve(item, code="inline"))
    return tuple(result)
