"""Shell parsing for policies: every simple command a script would run, wherever it hides.

`parse_script(script)` reads a script the way bash would and returns the
simple commands in it as `SimpleCommand` values, in the order they appear:
top level, lists (`;`, `&&`, `||`, `&`), pipelines, compound commands (`if`,
`for`, `for ((...))`, `select`, `while`, `until`, `case`, `coproc`,
subshells, brace groups, function bodies), command and process substitutions
(also inside double quotes, `${...}`, `$((...))`, `[[ ... ]]`, `(( ... ))`,
arrays and here-document bodies), and the programs other programs run:
`sh -c`, `eval`, `trap`, `sudo`, `env`, `xargs`, `find -exec`, `timeout`,
`nohup` and the other wrappers listed in `WRAPPERS`. A wrapped program is
reported as a command of its own, after the command that wraps it. `[ ... ]`
is the program `[` (as `test`); `[[ ... ]]` and `(( ... ))` are the shell's
own syntax and run nothing but their substitutions.

The structure comes from tree-sitter-bash. Each word's value (quote
removal, `$'...'`, expansions kept as written) is read here from the
original text, with the substitutions tree-sitter found in it; where the two
readings disagree (a `$(` tree-sitter did not see) the script is refused.
Backtick substitutions are parsed again after bash's backslash removal.

Fails closed: a tree with ERROR or MISSING nodes is refused with
`ShellParseError` (a `PolicyDenied`) naming the line and the part that could
not be read, except for the spellings tree-sitter-bash misreads and bash
accepts (`for x do`, `<>file`, a here-string after another redirect, `;&`,
`((cmd) | x)`, a `[` test without its `]`, quoted blanks in case patterns,
a backtick substitution holding what it cannot read, ...), which are
respelt as bash would read them (see `_repair`) and parsed again. Some
misreadings give no error: a backtick closed by another backtick than the
one bash closes it with, a command run on into the next line (`a >x | b | c`
then `rm -rf /`), a `0` before a redirect taken for a word. The walk checks
for those and respells them too (`_Misread`). Every respelling keeps the
script's length, so positions (and the lines messages name) are those of
the original text, from which every word is read; a backtick or `$(...)`
substitution tree-sitter cannot read is hidden from it (spelt `$___`) and
its code parsed on its own, as bash parses it. Hostile input is bounded: scripts
over `_MAX_SCRIPT` characters, deeper nesting than `_MAX_NESTING` levels or
`_MAX_DEPTH` substitutions, and brace expansions over `_MAX_BRACE_WORDS`
words are refused; the tree is walked with an explicit stack, never by
recursion.

A `#!` script (see `Shell.shebang()`) is its interpreter run on the body as
stdin; `parse_command` handles that, and a command's own stdin fed to a shell.
"""

from __future__ import annotations

import functools
import itertools
import posixpath
import re
import shlex
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Literal, TypeAlias

import attrs
import tree_sitter
import tree_sitter_bash

from executor._core.commands import Exec, Shell
from executor._core.errors import ShellParseError

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
# How deep compound commands (subshells, groups, ifs, loops) may nest; the
# walk is iterative, this only keeps hostile trees from costing much.
_MAX_NESTING = 200
# Bigger scripts are refused rather than parsed: the biggest shell scripts of
# a Debian system are some 60 KB, and a policy must not become a way to keep
# a worker thread busy.
_MAX_SCRIPT = 256 * 1024
# Respellings of what tree-sitter misreads (see `_repair`), per script: each
# costs a parse (and maybe a walk) of the whole script, so they are few.
_MAX_REPAIRS = 16
# How deep `${a:-"${b:-...}"}` may nest inside one word (each level is a call).
_MAX_WORD_NESTING = 64
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


_NAME_START = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_")
_NAME_CHARS = _NAME_START | frozenset("0123456789")
_SPECIAL_PARAMETERS = frozenset("0123456789@*#?-$!")


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


# --- reading the script with tree-sitter-bash ---------------------------------------

_local = threading.local()


def _ts_parser() -> tree_sitter.Parser:
    # A Parser is not safe to share between threads, and long scripts are
    # parsed in worker threads: one per thread, made once.
    parser: tree_sitter.Parser | None = getattr(_local, "parser", None)
    if parser is None:
        parser = tree_sitter.Parser(tree_sitter.Language(tree_sitter_bash.language()))
        _local.parser = parser
    return parser


@attrs.frozen
class _Ctx:
    nesting: tuple[str, ...] = ()
    pipeline: tuple[int, int] | None = None
    stdin_piped: bool = False
    background: bool = False
    functions: tuple[str, ...] = ()
    redirects: tuple[Redirect, ...] = ()
    pipeline_source: str = ""


_FAST = re.compile(r"[A-Za-z0-9_./,:+@%=-]+(?:[ \t]+[A-Za-z0-9_./,:+@%=-]+)*")
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\[[^]]*\])?\+?=")
_RESERVED = frozenset(
    {
        "if", "then", "else", "elif", "fi", "case", "esac", "for", "select", "while", "until",
        "do", "done", "in", "function", "time", "coproc", "{", "}", "!", "[[", "]]",
    }
)  # fmt: skip

# Nodes that hold statements, walked child by child.
_CONTAINERS = frozenset(
    {
        "program", "do_group", "compound_statement", "subshell", "else_clause", "elif_clause",
        "if_statement", "while_statement", "negated_command", "case_item",
    }
)  # fmt: skip
# Nodes of word syntax: their values are read by `_Walker.word`.
_WORD_NODES = frozenset(
    {
        "word", "string", "raw_string", "ansi_c_string", "translated_string", "concatenation",
        "simple_expansion", "expansion", "command_substitution", "process_substitution",
        "arithmetic_expansion", "number", "brace_expression", "extglob_pattern", "regex",
        "special_variable_name", "variable_name", "array", "test_operator",
    }
)  # fmt: skip
# Inside these, a word's text is scanned with the substitutions tree-sitter found.
_SPAN_NODES = frozenset(
    {"command_substitution", "process_substitution", "expansion", "arithmetic_expansion"}
)
_WORD_SPECIAL = re.compile(r"[\\'\"$`*?\[{,}~<>\n]")
_SUBSTITUTION_START = re.compile(r"[$`]|[<>]\(")
_PLAIN_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_./,:+@%=-")
_STRAY = frozenset({"done", "fi", "esac", "then", "do", "else", "elif", "}", "in", "]]"})
_EMPTY_ASSIGNMENTS = re.compile(
    r"^([ \t]*)((?:[A-Za-z_][A-Za-z0-9_]*=[^\s'\"`$\\;&|()<>]*[ \t]+)+)([A-Za-z_][A-Za-z0-9_]*=)$",
    re.MULTILINE,
)
_NEGATED_COMPOUND = re.compile(
    r"(?:^|(?<=[\n;&|({)!])|(?<=\bthen)|(?<=\bdo)|(?<=\belse)|(?<=\bif)|(?<=\belif)"
    r"|(?<=\bwhile)|(?<=\buntil))([ \t]*)"
    r"(?:time(?:[ \t]+-p)?(?=[ \t\n]|$)"
    r"|!(?=[ \t]+(?:(?:if|while|until|for|case|select|function|time)[ \t\n]|[{(!]|\[\["
    r"|[A-Za-z_][A-Za-z0-9_-]*[ \t]*\(\))))",
    re.MULTILINE,
)
_TEST_BRACKET = re.compile(r"(?:^|(?<=[\s;&|(!{]))\[(?=[ \t])", re.MULTILINE)
_CONTINUATION = re.compile(r"(?:\\\n)*")
_COMMENT = re.compile(r"(?<![^ \t\n])#[^\n]*")
_QUOTED_NODES = frozenset(
    {"raw_string", "string_content", "comment", "heredoc_body", "heredoc_content", "ansi_c_string"}
)
_EMPTY_SUBSTITUTION = re.compile(r"\$\([ \t]*\)")
_REDIRECT_NODES = frozenset({"file_redirect", "heredoc_redirect", "herestring_redirect"})
# Tokens tree-sitter makes operators of, even among a command's words.
_OPERATOR_WORDS = frozenset({"==", "!=", "=~"})
_COMPOUND_START = re.compile(r"[{(]|(?:while|until|if|for|case|select|\[\[)(?=[\s;&|()])")
_COPROC = re.compile(
    r"(?:^|(?<=[\n;&|({)!])|(?<=\bthen)|(?<=\bdo)|(?<=\belse)|(?<=\bif)|(?<=\belif)"
    r"|(?<=\bwhile)|(?<=\buntil))"
    r"([ \t]*)(coproc[ \t]+(?:[A-Za-z_][A-Za-z0-9_]*[ \t]+)?)"
    r"(?=[{(]|(?:while|until|if|for|case|select|\[\[)[\s;&|()])",
    re.MULTILINE,
)


class _Text:
    """The script as tree-sitter reads it (UTF-8) and as this module does (str)."""

    def __init__(self, text: str, repaired: str) -> None:
        self.text = text
        self.repaired = repaired
        self.data = repaired.encode("utf-8", "surrogatepass")
        self.ascii = len(self.data) == len(text)
        self._chars: list[int] | None = None
        # Operators a repair respelled, by the byte where the node now starts.
        self.ops: dict[int, str] = {}
        # Substitutions a repair hid from tree-sitter (spelt `$___`), by the
        # character where they start: where they end, the code inside (parsed
        # apart, as bash parses it) and the label of the substitution.
        self.deferred: dict[int, tuple[int, str, str]] = {}

    def respelt(self, repaired: str) -> _Text:
        """The same script respelt otherwise, keeping what the repairs noted."""
        chars = _Text(self.text, repaired)
        chars.ops, chars.deferred = self.ops, self.deferred
        return chars

    def defer(self, start: int, end: int, code: str, label: str) -> str:
        """Hide the substitution `text[start:end]` from tree-sitter; the respelt script.

        It is spelt `$___` (as long as it was), a parameter to tree-sitter;
        its code is parsed on its own, as bash parses a substitution's code.
        Lines are told from the original text, so the newlines it hides move
        no message.
        """
        self.deferred[start] = (end, code, label)
        return self.repaired[:start] + "$" + "_" * (end - start - 1) + self.repaired[end:]

    def char(self, byte: int) -> int:
        if self.ascii:
            return byte
        if self._chars is None:
            chars = [0] * (len(self.data) + 1)
            position = 0
            for index, c in enumerate(self.repaired):
                size = len(c.encode("utf-8", "surrogatepass"))
                for k in range(size):
                    chars[position + k] = index
                position += size
            chars[position] = len(self.repaired)
            self._chars = chars
        return self._chars[byte]

    def span(self, node: tree_sitter.Node) -> tuple[int, int]:
        return self.char(node.start_byte), self.char(node.end_byte)

    def of(self, node: tree_sitter.Node) -> str:
        start, end = self.span(node)
        return self.text[start:end]


class _Misread(Exception):
    """tree-sitter read, without an error, something bash reads otherwise.

    `repaired` is the script respelt so that tree-sitter reads it as bash
    does, or `None` when there is no such respelling (it is then refused,
    with `reason`).
    """

    def __init__(self, reason: str, repaired: str | None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.repaired = repaired


def _first_error(root: tree_sitter.Node) -> tree_sitter.Node:
    """The first ERROR or MISSING node, innermost, in document order (iteratively)."""
    node = root
    while True:
        for child in node.children:
            if child.is_missing or (child.is_error and not child.has_error):
                return child
            if child.has_error:
                node = child
                break
        else:
            return node


def _describe_error(text: str, node: tree_sitter.Node, chars: _Text) -> str:
    start, end = chars.span(node)
    # From the text, not the tree: a respelling may have moved tree-sitter's rows.
    line = text.count("\n", 0, start) + 1
    if node.is_missing:
        return f"line {line}: a {node.type!r} is missing before {_snippet(text, start)}"
    piece = " ".join(text[start:end].split())
    if not piece:
        return f"line {line}: it cannot read {_snippet(text, start)}"
    if len(piece) > 60:
        piece = piece[:57] + "..."
    return f"line {line}: it cannot read {piece!r}"


def _snippet(text: str, start: int) -> str:
    line_start = text.rfind("\n", 0, start) + 1
    line_end = text.find("\n", start)
    line = text[line_start : len(text) if line_end < 0 else line_end].strip()
    if len(line) > 60:
        line = line[:57] + "..."
    return repr(line) if line else "the end of the script"


def _replace(text: str, start: int, new: str) -> str:
    return text[:start] + new + text[start + len(new) :]


def _repair(chars: _Text, node: tree_sitter.Node) -> str | None:
    """A respelling of the script that bash reads the same way and tree-sitter can read.

    tree-sitter-bash misreads a few things bash accepts. Each repair here
    keeps the script's length (so positions agree with the original, from
    which every word is read) and its meaning for the policies; anything
    else stays unreadable and is refused.
    """
    text = chars.repaired
    start, end = chars.span(node)
    parent = node.parent
    line_start = text.rfind("\n", 0, start) + 1
    line_end = text.find("\n", start)
    line_end = len(text) if line_end < 0 else line_end
    line = text[line_start:line_end]
    # `$()`: an empty substitution (expands to nothing), which tree-sitter wants a
    # command in. Spelt as a parameter for the parser; the words say `$()`.
    empty: tree_sitter.Node | None = node
    while empty is not None and empty.type != "command_substitution":
        empty = empty.parent
    if empty is not None and _EMPTY_SUBSTITUTION.fullmatch(chars.of(empty)):
        first, last = chars.span(empty)
        return text[:first] + "$" + "_" * (last - first - 1) + text[last:]
    # A backtick tree-sitter pairs otherwise than bash, or that holds what it
    # cannot read (a subshell, backslashes in quotes over lines): hidden, its
    # code parsed apart, as bash parses it.
    fixed = _backticks(chars, node, start, end)
    if fixed is not None:
        return fixed
    # A command run on into the next line before the error (see `_joined`).
    root = node
    while root.parent is not None:
        root = root.parent
    fixed = _first_joined(chars, root, end)
    if fixed is not None:
        return fixed
    # A case pattern tree-sitter cannot read (`less' '4*`, `$MIME\\;*`): its quoted
    # and escaped characters respelt `_`. They are literal, and a pattern's
    # text matters to no policy; its substitutions are kept.
    fixed = _case_pattern(chars, node)
    if fixed is not None:
        return fixed
    # `{a,b}` at the start of a command is a word, not a group (`{` needs a blank after it).
    group: tree_sitter.Node | None = node
    while group is not None and group.type != "compound_statement":
        group = group.parent
    if group is not None and group.children and group.children[0].type == "{":
        brace = chars.char(group.children[0].start_byte)
        if brace + 1 < len(text) and text[brace + 1] not in " \t\n":
            return _replace(text, brace, "_")
    if text.startswith("{", start) and start + 1 < len(text) and text[start + 1] not in " \t\n":
        return _replace(text, start, "_")
    # `cmd 2>&1 <<< word`: a here-string after another redirect.
    if node.is_error and text[start:end] == "<<" and text.startswith("<<<", start):
        chars.ops[node.start_byte] = "<<<"
        return _replace(text, start, "<  ")
    # `for name do` (no `in`, no `;`): POSIX, and bash's own scripts use it.
    match = re.search(r"\bfor[ \t]+[A-Za-z_][A-Za-z0-9_]*([ \t]+)do\b", line)
    if match is not None:
        return _replace(text, line_start + match.end(1) - 1, ";")
    # `;&` and `;;&` end a case item too; the policies read every item anyway.
    match = re.search(r";;&|;&", line)
    if match is not None:
        new = ";; " if match.group() == ";;&" else ";;"
        return _replace(text, line_start + match.start(), new)
    # `[ ... ` without its `]`, or with a bare `~` operand: `[` is a command, read as one.
    test = node if node.type == "test_command" else parent
    while test is not None and test.type not in ("test_command", "program"):
        test = test.parent
    if test is not None and test.type == "test_command":
        opener = test.children[0] if test.children else None
        if opener is not None and opener.type == "[":
            return _replace(text, chars.char(opener.start_byte), "_")
    # `((cmd) | x)`: two subshells, not arithmetic (bash reads it so too, when
    # what follows `((` is no arithmetic). Found in the error, or opening a node
    # around it (`((gzip -cd x) | y)` fails at `-cd`, inside the `((`).
    index = text.find("((", start, max(end, start + 2))
    around: tree_sitter.Node | None = node
    while index < 0 and around is not None:
        if around.children and around.children[0].type == "((":
            index = chars.char(around.children[0].start_byte)
        around = around.parent
    if index >= 0 and text[index - 1 : index] in (" ", "\t"):
        return text[: index - 1] + "( (" + text[index + 2 :]
    if index >= 0 and text[index + 2 : index + 3] in (" ", "\t"):
        return text[:index] + "( (" + text[index + 3 :]
    if index >= 0:
        # No blank to make room (`((a) | b)` at the start of a line): the outer
        # parentheses blanked. Its commands, and the redirects after it, are
        # found all the same (a subshell changes nothing the policies judge).
        closing = _closing(text, index)
        if closing > index:
            return text[:index] + " " + text[index + 1 : closing] + " " + text[closing + 1 :]
    # `$` before `)` is a plain character: `$(grep p$)`.
    match = re.search(r"\$\)", line)
    if match is not None:
        return _replace(text, line_start + match.start(), "_")
    # Whatever tree-sitter cannot read inside a `$( ... )` (`$((cmd) | x)`, say):
    # the substitution is hidden from it and its code parsed on its own.
    opening = text.rfind("$(", 0, start + 1)
    root = node
    while root.parent is not None:
        root = root.parent
    while opening >= 0:
        closing = _closing(text, opening + 1)
        if closing >= start and opening not in chars.deferred and _code_at(root, chars, opening):
            return chars.defer(opening, closing + 1, chars.text[opening + 2 : closing], "$(...)")
        opening = text.rfind("$(", 0, opening)
    # `a@` or `0@` as a command name: plain characters to bash, which tree-sitter
    # takes for some parameter syntax. Respelt with other plain characters.
    first, last = start, start
    while first > 0 and text[first - 1] in _PLAIN_CHARS:
        first -= 1
    while last < len(text) and text[last] in _PLAIN_CHARS:
        last += 1
    piece = text[first:last]
    bounded = text[first - 1 : first] in ("", " ", "\t", "\n", ";", "(", "|", "&")
    after = text[last : last + 1]
    if (
        bounded
        and after in ("", " ", "\t", "\n", ";", ")", "|", "&")
        and any(c in piece for c in "@%:+,")
    ):
        return _replace(text, first, re.sub(r"[@%:+,]", "_", piece))
    # `1=x`: no assignment (a name cannot start with a digit) but a command
    # name to bash; tree-sitter reads an assignment and then stumbles.
    match = re.search(r"(?:^|(?<=[\s;&|(]))\d[A-Za-z0-9_]*(=)", line)
    if match is not None:
        return _replace(text, line_start + match.start(1), "_")
    # A here-document followed by `;` on its line (after redirects too: `cat <<EOF
    # >x; ls`): spelt `&&`, which tree-sitter reads there; the same commands run.
    # (It may be on an earlier line: tree-sitter stumbles where the body ends.)
    next_line = text.find("\n", end)
    fixed = _glued_heredoc(chars, 0, len(text) if next_line < 0 else next_line)
    if fixed is not None:
        return fixed
    match = re.search(r"<<-?[ \t]*\S+[^;\n]*?([ \t]*;[ \t])", line)
    if match is not None and "&&" not in match.group(1):
        semicolon = line_start + match.start(1) + match.group(1).index(";")
        if text[semicolon + 1] in " \t":
            return _replace(text, semicolon, "&&")
    return None


_GLUED_HEREDOC = re.compile(r"([A-Za-z0-9_./'\"-]) (<<-?)([A-Za-z0-9_]+); ")
_CASE_ITEM_END = frozenset({"in", ";;", ";&", ";;&"})
# Quoted text respelt in a case pattern holds nothing that could end a command
# or start a substitution, were the quotes not what bash reads: a misreading
# of where they are can then hide no command.
_INERT = re.compile(r"[^;&|<>()$`\"'\n]*")


def _case_pattern(chars: _Text, node: tree_sitter.Node) -> str | None:
    """Respell the case patterns around the error `node` so that tree-sitter can read them.

    The pattern is found from the tree (after the `in`, or after the `;;` of
    the item before) and read to its `)` as bash reads it; inside it, the
    characters quoted by `'...'`, `$'...'` or a backslash become `_`: still
    quoted text to bash, of the same length, which changes no structure. A
    line continuation in it becomes two blanks.
    """
    start = chars.char(node.start_byte)
    item: tree_sitter.Node | None = node
    while item is not None:
        kind = item.type
        if kind == "case_item" or (
            kind in ("case_statement", "ERROR") and any(c.type == "case" for c in item.children)
        ):
            break
        item = item.parent
    if item is None:
        return None
    if item.type == "case_item":
        first = chars.char(item.start_byte)
    else:
        first = -1
        for child in item.children:
            if chars.char(child.start_byte) >= start:
                break
            if child.type in _CASE_ITEM_END or child.type == "case_item":
                first = chars.char(child.end_byte)
        if first < 0:
            return None
    text = chars.repaired
    found = _pattern_quotes(text, first)
    if not found:
        return None
    out = list(text)
    for low, high in found:
        if text[low : low + 2] == "\\\n":
            # A line continuation: nothing, to bash; blanks do as well.
            out[low:high] = "  "
        else:
            out[low:high] = "_" * (high - low)
    fixed = "".join(out)
    # Respelt already, and the error is another one.
    return None if fixed == text else fixed


def _pattern_quotes(text: str, i: int) -> list[tuple[int, int]]:
    """The quoted characters of the case pattern (or patterns, `a | b`) that starts near `i`.

    Empty when it is no pattern bash would read (no `)` before a bare newline).
    """
    n = len(text)
    while i < n:
        if text[i] in " \t\n":
            i += 1
        elif text.startswith("\\\n", i):
            i += 2
        elif text[i] == "#":
            newline = text.find("\n", i)
            i = n if newline < 0 else newline
        else:
            break
    if text.startswith("(", i):
        i += 1
    found: list[tuple[int, int]] = []
    depth = 0
    while i < n:
        c = text[i]
        if c == "\\":
            if text[i + 1 : i + 2] != "":
                found.append((i, i + 2))
            i += 2
        elif c == "'":
            close = text.find("'", i + 1)
            if close < 0:
                return []
            if _INERT.fullmatch(text, i + 1, close):
                found.append((i + 1, close))
            i = close + 1
        elif text.startswith("$'", i):
            close = _ansi_c_end(text, i + 2)
            if close < 0:
                return []
            if _INERT.fullmatch(text, i + 2, close - 1):
                found.append((i + 2, close - 1))
            i = close
        elif c == '"':
            i = _double_end(text, i + 1)
        elif c == "`":
            i = _backtick_end(text, i, n)
        elif text.startswith("$(", i):
            close = _closing(text, i + 1)
            i = close + 1 if close >= 0 else -1
        elif text.startswith("${", i):
            close = _closing_brace(text, i + 1, n)
            i = close + 1 if close >= 0 else -1
        elif c == "(":
            # An extglob group: `@(a|b)`, `+(x)`.
            depth += 1
            i += 1
        elif c == ")":
            if depth == 0:
                return found
            depth -= 1
            i += 1
        elif c == "\n":
            return []
        else:
            i += 1
        if i < 0:
            return []
    return []


def _double_end(text: str, i: int) -> int:
    """The index after the `"` closing a double-quoted string whose text starts at `i`, or -1."""
    n = len(text)
    while i < n:
        c = text[i]
        if c == "\\":
            i += 2
        elif c == '"':
            return i + 1
        elif c == "`":
            i = _backtick_end(text, i, n)
            if i < 0:
                return -1
        elif text.startswith("$(", i):
            close = _closing(text, i + 1)
            if close < 0:
                return -1
            i = close + 1
        else:
            i += 1
    return -1


def _backticks(chars: _Text, node: tree_sitter.Node, start: int, end: int) -> str | None:
    """Hide the first backtick substitution tree-sitter misreads, up to the error at `start`.

    The backticks tree-sitter read as code are paired as bash pairs them
    (each opening one closed by the next unescaped backtick); the first pair
    that holds the error, or that tree-sitter closed elsewhere, is hidden.
    """
    root = node
    while root.parent is not None:
        root = root.parent
    text = chars.repaired
    if "`" not in text:
        return None
    ticks: list[tree_sitter.Node] = []
    todo = [root]
    while todo:
        current = todo.pop()
        if current.type == "`" and not current.is_missing:
            ticks.append(current)
        elif current.child_count and chars.char(current.start_byte) <= end:
            todo.extend(current.children)
    ticks.sort(key=lambda tick: tick.start_byte)
    after = 0
    for tick in ticks:
        # A "`" token may start at the blanks before it.
        opening = chars.char(tick.end_byte) - 1
        if opening < after:
            continue
        if opening > end or opening in chars.deferred or not _code_at(root, chars, opening):
            return None
        stop = _backtick_end(text, opening, len(text))
        if stop < 0:
            return None
        parent = tick.parent
        closed = (
            parent is not None
            and parent.type == "command_substitution"
            and parent.children[0] == tick
            and parent.children[-1].type == "`"
            and chars.char(parent.end_byte) == stop
        )
        if not closed or opening <= start < stop:
            return chars.defer(opening, stop, chars.text[opening + 1 : stop - 1], "`...`")
        after = stop
    return None


def _joined(chars: _Text, node: tree_sitter.Node) -> tuple[str, int | None] | None:
    """Whether tree-sitter ran the simple command `node` on past the end of its line.

    It sometimes does (`a >x | b | c` and the next line `rm -rf /` become
    one command `c rm -rf /`): bash ends a command at a newline that no
    quote, backslash or here-document holds, and so must the policies. For
    such a command: why it is wrong, and where a `;` ends it as bash does
    (`None` if no `;` can go there).
    """
    if node.start_point.row == node.end_point.row:
        return None
    text = chars.text
    previous: tree_sitter.Node | None = None
    for child in node.children:
        if child.type == "comment":
            continue
        if previous is None:
            previous = child
            continue
        first, last = chars.char(previous.end_byte), chars.char(child.start_byte)
        heredoc = previous.type == "heredoc_redirect"
        previous = child
        # Blanks, line continuations and a comment may stand between words.
        gap = _COMMENT.sub("", text[first:last].replace("\\\n", "  "))
        if "\n" not in gap:
            continue
        reason = f"it cannot tell where a command ends: {_snippet(text, first)}"
        line_start = text.rfind("\n", 0, first) + 1
        if heredoc or "<<" in text[line_start:first] or gap[:1] not in (" ", "\t", "\n"):
            return reason, None
        return reason, first
    return None


def _run_ons(
    chars: _Text, root: tree_sitter.Node, descend: Callable[[tree_sitter.Node], bool]
) -> Iterator[int | None]:
    """Where each command of the tree that runs on into the next line ends, in script order.

    `None` for one that cannot be respelt. Only the nodes `descend` accepts
    are looked into.
    """
    todo = [root]
    while todo:
        current = todo.pop()
        if current.type in ("command", "declaration_command"):
            joined = _joined(chars, current)
            if joined is not None:
                yield joined[1]
        if current.child_count and descend(current):
            todo.extend(reversed(current.children))


def _all_joined(chars: _Text, root: tree_sitter.Node) -> str | None:
    """The script respelt where every command of the tree runs on into the next line.

    `None` if one of them cannot be respelt.
    """
    text = chars.repaired
    for at in _run_ons(chars, root, lambda node: node.start_point.row != node.end_point.row):
        if at is None:
            return None
        # Each respelling is one `;` for one character: they add up.
        text = _replace(text, at, ";")
    return text


def _first_joined(chars: _Text, root: tree_sitter.Node, end: int) -> str | None:
    """The script respelt where the first command before `end` runs on into the next line."""
    for at in _run_ons(chars, root, lambda node: chars.char(node.start_byte) <= end):
        # Only the first: after it, a tree with an error is no guide.
        return None if at is None else _replace(chars.repaired, at, ";")
    return None


def _glued_heredoc(chars: _Text, start: int, end: int) -> str | None:
    """The first `cat <<EOF; ls` between `start` and `end`, respelt `cat<<EOF &&ls`; else `None`.

    tree-sitter takes `EOF;` for the delimiter. Moved one to the left over
    the blank before it, with `&&` for `; ` (the same commands run), it is
    read; the operator and the delimiter keep their text (`_Text.ops`).
    """
    text = chars.repaired
    glued = _GLUED_HEREDOC.search(text, start, end)
    if glued is None:
        return None
    op, delimiter = glued.group(2), glued.group(3)
    blank = glued.start(2) - 1
    byte = len(text[:blank].encode("utf-8", "surrogatepass"))
    chars.ops[byte] = op
    chars.ops[byte + len(op.encode())] = delimiter
    return text[:blank] + op + delimiter + " &&" + text[glued.end() :]


def _code_at(root: tree_sitter.Node, chars: _Text, index: int) -> bool:
    """Whether tree-sitter reads the character at `index` as code, not as quoted text.

    A `$(` inside quotes, a comment or a here-document is no substitution:
    hiding text from there to a `)` would hide commands.
    """
    byte = len(chars.repaired[:index].encode("utf-8", "surrogatepass"))
    here: tree_sitter.Node | None = root.descendant_for_byte_range(byte, byte + 2)
    while here is not None:
        if here.type in _QUOTED_NODES:
            return False
        here = here.parent
    return True


def _closing(text: str, i: int) -> int:
    """The index of the `)` that closes the `(` at `i`, as bash pairs them; -1 if none.

    Quotes, backslashes, backticks and comments are skipped; a `)` that bash
    reads otherwise (a `case` pattern) ends the match early, so the code
    inside is cut short and fails to parse: refused, never skipped.
    """
    waiting = [")"]
    j = i + 1
    n = len(text)
    while j < n:
        c = text[j]
        top = waiting[-1]
        if c == "\\":
            j += 2
            continue
        if top in ('"', "`"):
            if c == top:
                waiting.pop()
            elif top == '"' and c == "$" and text.startswith("(", j + 1):
                waiting.append(")")
                j += 1
            elif top == '"' and c == "`":
                waiting.append("`")
            j += 1
            continue
        if c == "'":
            close = text.find("'", j + 1)
            if close < 0:
                return -1
            j = close + 1
            continue
        if c in ('"', "`", "("):
            waiting.append(")" if c == "(" else c)
        elif c == ")":
            waiting.pop()
            if not waiting:
                return j
        elif c == "#" and (j == 0 or text[j - 1] in " \t\n;&|("):
            newline = text.find("\n", j)
            j = n if newline < 0 else newline
            continue
        j += 1
    return -1


def _closing_brace(text: str, i: int, end: int) -> int:
    """The index of the `}` closing the `{` of a `${` at `i`; -1 if none before `end`."""
    depth = 0
    j = i
    while j < end:
        c = text[j]
        if c == "\\":
            j += 2
            continue
        if c == "'":
            close = text.find("'", j + 1, end)
            if close < 0:
                return -1
            j = close + 1
            continue
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return j
        j += 1
    return -1


def _backtick_end(text: str, i: int, end: int) -> int:
    """The index after the backtick closing the one at `i`; -1 if none before `end`."""
    j = i + 1
    while j < end:
        if text[j] == "\\":
            j += 2
        elif text[j] == "`":
            return j + 1
        else:
            j += 1
    return -1


def _respell(script: str) -> str:
    """The script with what tree-sitter always misreads respelt, position for position."""
    repaired = script
    # `! if ...; fi`, `time { ...; }`: tree-sitter reads these keywords only
    # before simple commands and pipelines; and `coproc [NAME] compound` it takes
    # for a command named coproc. None of them changes what runs: blanked (a
    # coproc's compound runs in the background), over and over, since one
    # blanked may show the next (`! time if`, `time coproc {`, `! coproc {`).
    for _ in range(8):
        blanked = repaired
        if "!" in blanked or "time" in blanked:
            blanked = _NEGATED_COMPOUND.sub(
                lambda m: m.group(1) + " " * (m.end() - m.start(1) - len(m.group(1))), blanked
            )
        if "coproc" in blanked:
            blanked = _COPROC.sub(lambda m: m.group(1) + " " * len(m.group(2)), blanked)
        if blanked == repaired:
            break
        repaired = blanked
    if "=" in repaired:
        # `a= b=` at the end of a line: tree-sitter runs the statement on into the
        # next line (`a= b=\nls` becomes `ls` with two assignments). As `a=;b=`
        # it reads the line alone; the assignments are the same.
        repaired = _EMPTY_ASSIGNMENTS.sub(
            lambda m: (
                m.group(1)
                + re.sub(r"[ \t]+", lambda b: ";" + b.group()[1:], m.group(2))
                + m.group(3)
            ),
            repaired,
        )
    if "[" in repaired:
        # `[` is a program, and tree-sitter's reading of `[ ... ]` tests fails on
        # plenty bash runs (`\\(`, a bare `~`, a missing `]`): spelt `_`, it is read
        # as the command it is, its words taken from the original text.
        repaired = _TEST_BRACKET.sub("_", repaired)
    return repaired


_READ_WRITE = re.compile(r"(?<![<>])<>(?![<>&|])")


def _read_write(chars: _Text) -> _Text:
    """`<>file` and `n<>file` (open to read and write) respelt `> file`, which tree-sitter reads.

    tree-sitter-bash reads no `<>` at all. The redirect keeps its operator
    (`_Text.ops`, by the byte where the `>` now is); a `<>` in quotes or a
    comment is respelt too, which changes no word (words are read from the
    original text) and no structure.
    """
    text = chars.repaired
    out = _READ_WRITE.sub("> ", text)
    respelt = chars.respelt(out)
    for match in _READ_WRITE.finditer(text):
        byte = len(text[: match.start()].encode("utf-8", "surrogatepass"))
        respelt.ops[byte] = "<>"
    return respelt


def _tree(chars: _Text, budget: list[int]) -> tuple[tree_sitter.Node, _Text]:
    """Parse `chars`, repairing what tree-sitter misreads; refuse what stays unreadable.

    `budget` holds how many respellings are left for the whole script (the
    walker spends it too, on misreadings it finds in a tree without errors).
    """
    while True:
        root = _ts_parser().parse(chars.data).root_node
        if not root.has_error:
            return root, chars
        error = _first_error(root)
        fixed = _repair(chars, error) if budget[0] > 0 else None
        if fixed is None or fixed == chars.repaired:
            raise ShellParseError(_describe_error(chars.text, error, chars))
        budget[0] -= 1
        chars = chars.respelt(fixed)


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
    if not stripped:
        return []
    try:
        chars = _Text(script, _respell(script))
    except UnicodeEncodeError:
        raise ShellParseError("it is not valid text (a lone surrogate)") from None
    if "<>" in script:
        chars = _read_write(chars)
    budget = [_MAX_REPAIRS]
    while True:
        root, chars = _tree(chars, budget)
        walker = _Walker(chars, depth)
        try:
            walker.walk(root, ctx)
        except _Misread as misread:
            # The tree has no error but says something bash does not: respelt
            # where it went wrong, and read again from the start.
            if misread.repaired is None or budget[0] <= 0:
                raise ShellParseError(misread.reason) from None
            budget[0] -= 1
            chars = chars.respelt(misread.repaired)
            continue
        walker.finish()
        return walker.out


@attrs.frozen
class _Emit:
    """A stack item: a command whose substitutions have been queued before it."""

    command: SimpleCommand


@attrs.frozen
class _Ready:
    """A stack item: commands already parsed and analysed (a backtick substitution's)."""

    commands: tuple[SimpleCommand, ...]


@attrs.frozen
class _Visit:
    node: tree_sitter.Node
    ctx: _Ctx
    level: int


class _Walker:
    """Turns tree-sitter's tree of one script into `SimpleCommand`s, in script order.

    Statements are walked with an explicit stack (a script nested 100,000
    levels deep is refused, not a `RecursionError`); words are read from the
    original text, with the substitutions tree-sitter found in them.
    """

    def __init__(self, chars: _Text, depth: int) -> None:
        self.chars = chars
        self.text = chars.text
        self.depth = depth
        self.out: list[SimpleCommand] = []
        self.stack: list[_Item] = []
        # Substitutions the word scanner found and tree-sitter did not.
        self.pending: list[_Item] = []
        # The substitutions a respelling hid that were met (see `deferred`).
        self.taken: set[int] = set()
        # Words tree-sitter hung on a redirect, which are the command's (`>&2 "x"`).
        self.extra: list[Word] = []
        # Those words, by the command they belong to (the byte where it starts).
        self.arguments: dict[int, tuple[Word, ...]] = {}
        # The text of commands with trailing redirects, by where they start.
        self.sources: dict[int, str] = {}

    # structure

    def walk(self, root: tree_sitter.Node, ctx: _Ctx) -> None:
        self.stack.append(_Visit(root, ctx, 0))
        while self.stack:
            item = self.stack.pop()
            if isinstance(item, _Emit):
                self.out.extend(_analyse(item.command, self.depth))
                continue
            if isinstance(item, _Ready):
                self.out.extend(item.commands)
                continue
            if item.level > _MAX_NESTING:
                raise ShellParseError(f"it nests more than {_MAX_NESTING} levels deep")
            self.node(item.node, item.ctx, item.level)

    def push(self, items: Iterable[_Item]) -> None:
        # The stack runs last in, first out: push in reverse to keep script order.
        self.stack.extend(reversed(list(items)))

    def node(self, node: tree_sitter.Node, ctx: _Ctx, level: int) -> None:
        kind = node.type
        if kind in _CONTAINERS or kind == "list":
            self.push(self.statements(node, ctx, level))
        elif kind == "pipeline":
            self.pipeline(node, ctx, level)
        elif kind == "redirected_statement":
            self.redirected(node, ctx, level)
        elif kind == "command":
            self.command(node, ctx, level)
        elif kind in ("declaration_command", "unset_command"):
            self.declaration(node, ctx, level)
        elif kind == "test_command":
            self.test(node, ctx, level)
        elif kind in ("variable_assignment", "variable_assignments"):
            self.bare_assignment(node, ctx, level)
        elif kind in ("for_statement", "c_style_for_statement"):
            self.loop(node, ctx, level)
        elif kind == "case_statement":
            items: list[_Item] = []
            for child in node.named_children:
                if child.type == "case_item":
                    items.append(_Visit(child, ctx, level + 1))
                elif child.type != "comment":
                    items.extend(self.substitutions(child, ctx, level))
            self.push(items)
        elif kind == "function_definition":
            name_node = node.child_by_field_name("name")
            body = node.child_by_field_name("body")
            if name_node is None or body is None:
                raise ShellParseError("a function definition has no name or body")
            name = self.word(name_node, ctx, level).value
            inner = attrs.evolve(ctx, functions=(*ctx.functions, name))
            items = [_Visit(body, inner, level + 1)]
            for child in node.children_by_field_name("redirect"):
                items.extend(self.substitutions(child, ctx, level))
            self.push(items)
        elif kind in ("comment", "heredoc_body", "heredoc_end", "heredoc_start"):
            return
        elif kind in _EXPRESSIONS or kind in _WORD_NODES:
            # `(( ... ))`, arithmetic and test operands: only their substitutions run.
            self.push(self.substitutions(node, ctx, level))
        elif not node.is_named:
            return
        else:
            raise ShellParseError(f"it uses a construct the policies do not follow ({kind})")

    def covered(self, node: tree_sitter.Node, children: list[tree_sitter.Node]) -> None:
        """Refuse a statement list in which tree-sitter passed over a word.

        Between the statements (and their operators) of a list there is only
        blank space to bash. tree-sitter-bash sometimes drops a token without
        an error (`- A=` reads as the assignment `A=`, where bash runs `-`): a
        byte no node holds is a word the tree says nothing of, so the script
        is refused rather than judged on a reading bash does not make.
        """
        data = self.chars.data
        # The tree's root spans its first token to its last: the whole text is the script's.
        whole = node.parent is None
        at = 0 if whole else node.start_byte
        for child in (*children, None):
            end = (len(data) if whole else node.end_byte) if child is None else child.start_byte
            if end > at and data[at:end].replace(b"\\\n", b"").strip(b" \t\r\n"):
                where = _snippet(self.text, self.chars.char(at))
                raise ShellParseError(f"tree-sitter-bash passed over a word here: {where}")
            if child is not None:
                at = max(at, child.end_byte)

    def statements(self, node: tree_sitter.Node, ctx: _Ctx, level: int) -> Iterator[_Item]:
        children = node.children
        self.covered(node, children)
        for index, child in enumerate(children):
            if not child.is_named:
                if child.type in (";;", ";&", ";;&") and node.type != "case_item":
                    # tree-sitter takes `x ;; y` for two commands; bash refuses it.
                    where = _snippet(self.text, self.chars.char(child.start_byte))
                    raise ShellParseError(f"{child.type!r} outside a case: {where}")
                continue
            following = children[index + 1] if index + 1 < len(children) else None
            background = following is not None and following.type == "&"
            inner = attrs.evolve(ctx, background=True) if background else ctx
            # `a && b && c` nests lists to the left: as long as it is, it is one level.
            deeper = 0 if node.type == "list" and child.type == "list" else 1
            yield _Visit(child, inner, level + deeper)

    def pipeline(self, node: tree_sitter.Node, ctx: _Ctx, level: int) -> None:
        stages = [child for child in node.named_children if child.type != "comment"]
        text = self.chars.of(node) if len(stages) > 1 else ""
        items = []
        for index, stage in enumerate(stages):
            inner = attrs.evolve(
                ctx,
                pipeline=(index, len(stages)) if len(stages) > 1 else ctx.pipeline,
                stdin_piped=ctx.stdin_piped if index == 0 else True,
                pipeline_source=text or ctx.pipeline_source,
            )
            items.append(_Visit(stage, inner, level + 1))
        self.push(items)

    def redirected(self, node: tree_sitter.Node, ctx: _Ctx, level: int) -> None:
        body = node.child_by_field_name("body")
        redirects: list[Redirect] = []
        items: list[_Item] = []
        after: list[_Item] = []
        for child in node.children:
            if child.type in _REDIRECT_NODES:
                redirects.extend(self.redirect(child, ctx, level, items, after))
        inner = attrs.evolve(ctx, redirects=ctx.redirects + tuple(redirects))
        if self.extra:
            # They belong to the last command before the redirect (tree-sitter
            # hangs a redirect after `a && b` on the list).
            last = body
            while last is not None and last.type in ("list", "pipeline", "redirected_statement"):
                last = last.named_children[-1] if last.named_children else None
                if last is not None and last.type == "redirected_statement":
                    last = last.child_by_field_name("body")
            if last is None or last.type != "command":
                where = _snippet(self.text, self.chars.char(node.start_byte))
                raise ShellParseError(f"words after a redirect belong to no command: {where}")
            self.arguments[last.start_byte] = tuple(self.extra)
            self.extra.clear()
        if body is not None:
            if body.type == "command":
                # The command's text, for messages, is with its redirects: `ls > x`
                # (up to the line's end where a here-document's body follows).
                text = self.chars.of(node)
                if any(child.type == "heredoc_redirect" for child in node.children):
                    text = text.split("\n", 1)[0]
                self.sources[body.start_byte] = text
            items.append(_Visit(body, inner, level + 1))
        else:
            # `> file` alone: a command with no words that still opens the file.
            items.append(_Emit(self.simple(node, (), (), inner)))
        self.push([*items, *after])

    def redirect(
        self,
        node: tree_sitter.Node,
        ctx: _Ctx,
        level: int,
        queued: list[_Item],
        after: list[_Item],
    ) -> list[Redirect]:
        """The redirects in `node`, queueing their substitutions first.

        tree-sitter hangs the rest of a here-document's line (`| sh`, `&& x`,
        `> f`) onto the here-document's node: redirects among it are returned
        with this one, and commands go to `after`, walked after the command.
        """
        fd: int | None = None
        op = ""
        target: tree_sitter.Node | None = None
        body: tree_sitter.Node | None = None
        opened: tree_sitter.Node | None = None
        closed: tree_sitter.Node | None = None
        delimiter = ""
        found: list[Redirect] = []
        piped_after = False
        for child in node.children:
            kind = child.type
            if kind == "file_descriptor":
                text = self.chars.of(child)
                fd = int(text) if text.isdigit() else None
            elif not child.is_named and not op:
                op = self.chars.ops.get(child.start_byte) or self.chars.of(child)
                if fd is None and op[:1] in "<>":
                    fd = self.glued(self.chars.char(child.start_byte))
            elif kind == "heredoc_start":
                delimiter = self.chars.ops.get(child.start_byte) or self.chars.of(child)
                opened = child
            elif kind == "heredoc_body":
                body = child
            elif kind == "heredoc_end":
                closed = child
            elif kind == "comment":
                continue
            elif kind in _REDIRECT_NODES:
                found.extend(self.redirect(child, ctx, level, queued, after))
            elif not child.is_named:
                # `|`, `|&`, `&&`, `||` after a here-document's start.
                piped_after = piped_after or kind in ("|", "|&")
            elif (
                node.type == "heredoc_redirect"
                and kind in _WORD_NODES
                and self.on_line(opened, child)
            ):
                # `rm <<EOF -rf /`: the words after a here-document's start, on its
                # line, are the command's (those after it are its body's, which
                # tree-sitter makes words when the body starts with a backslash).
                self.extra.append(self.read(child, ctx, level, queued))
            elif node.type == "heredoc_redirect":
                if kind == "pipeline" and child.children and child.children[0].type in ("|", "|&"):
                    piped_after = True
                inner = attrs.evolve(ctx, stdin_piped=True) if piped_after else ctx
                after.append(_Visit(child, inner, level + 1))
            elif target is None:
                target = child
            else:
                # `>&2 echo x`: tree-sitter hangs the words after a redirect on
                # it; bash gives them to the command, and so do the policies.
                self.extra.append(self.read(child, ctx, level, queued))
        if op in ("<<", "<<-"):
            quoted = any(c in delimiter for c in "'\"\\")
            self.check_heredoc_end(delimiter, op == "<<-", opened, closed)
            word = self.heredoc(node, body, (opened, closed), quoted, ctx, level, queued)
            return [Redirect(op=op, fd=fd, heredoc=word), *found]
        if target is None:
            if op in ("<&-", ">&-"):
                return [Redirect(op=op[:-1], fd=fd, dup="-"), *found]
            raise ShellParseError(f"a redirect has no target: {self.chars.of(node)}")
        word = self.read(target, ctx, level, queued)
        if op in (">&", "<&") and word.static and (word.value.isdigit() or word.value == "-"):
            return [Redirect(op=op, fd=fd, dup=word.value), *found]
        return [Redirect(op=op, fd=fd, target=word), *found]

    def one_line(self, node: tree_sitter.Node) -> None:
        """Check that tree-sitter did not run a simple command on past the end of its line.

        Where it did, every such command of the tree is respelt at once
        (each costs a parse otherwise, and a hostile script can hold many).
        """
        joined = _joined(self.chars, node)
        if joined is None:
            return
        reason, position = joined
        root = node
        while root.parent is not None:
            root = root.parent
        raise _Misread(reason, None if position is None else _all_joined(self.chars, root))

    def descriptor(self, node: tree_sitter.Node) -> int | None:
        """The number of a word that is all digits and glued to a `<` or `>` after it."""
        start, end = self.chars.span(node)
        if self.text[end : end + 1] not in ("<", ">") or not self.text[start:end].isdigit():
            return None
        return self.glued(end)

    def glued(self, op: int) -> int | None:
        """The file descriptor written just before the operator at `op`, as bash reads it.

        Digits glued to `<` or `>` and standing alone as a word (`cat 0>x`)
        name the descriptor; tree-sitter reads `0` so as a word of the command.
        """
        first = op
        while first > 0 and self.text[first - 1] in "0123456789":
            first -= 1
        if first == op or (first > 0 and self.text[first - 1] not in " \t\n;&|()"):
            return None
        return int(self.text[first:op])

    def on_line(self, opened: tree_sitter.Node | None, node: tree_sitter.Node) -> bool:
        """Whether `node` starts on the line of the here-document start `opened`."""
        if opened is None:
            return False
        newline = self.text.find("\n", self.chars.char(opened.end_byte))
        while newline > 0 and self.text[newline - 1] == "\\":
            # A line continued with a backslash goes on: `rm <<EOF -rf \<newline> /`.
            newline = self.text.find("\n", newline + 1)
        return newline < 0 or self.chars.char(node.start_byte) < newline

    def check_heredoc_end(
        self,
        delimiter: str,
        strip: bool,
        opened: tree_sitter.Node | None,
        closed: tree_sitter.Node | None,
    ) -> None:
        """Refuse a here-document whose end tree-sitter did not put where bash does.

        bash ends the body at the first line that is the delimiter exactly
        (tabs removed for `<<-`); tree-sitter sometimes takes a line that
        only starts with it. A body that ended anywhere else would hide
        commands from the policies, or show them text as commands.
        """
        if opened is None or closed is None:
            return
        word = delimiter.replace("\\", "").replace("'", "").replace('"', "")
        newline = self.text.find("\n", self.chars.char(opened.end_byte))
        start = len(self.text) if newline < 0 else newline + 1
        end = self.chars.char(closed.end_byte)
        lines = self.text[start:end].split("\n")
        # The closing line runs to its newline, past the node.
        line_end = self.text.find("\n", end)
        lines[-1] += self.text[end : len(self.text) if line_end < 0 else line_end]
        found = [line.lstrip("\t") if strip else line for line in lines]
        if found[-1] != word or word in found[:-1]:
            where = _snippet(self.text, self.chars.char(closed.start_byte))
            reason = f"it cannot tell where the here-document delimited by {word!r} ends: {where}"
            start = self.chars.char(opened.start_byte)
            line_end = self.text.find("\n", start)
            fixed = _glued_heredoc(
                self.chars,
                self.text.rfind("\n", 0, start) + 1,
                len(self.text) if line_end < 0 else line_end,
            )
            raise _Misread(reason, fixed)

    def heredoc(
        self,
        node: tree_sitter.Node,
        body: tree_sitter.Node | None,
        bounds: tuple[tree_sitter.Node | None, tree_sitter.Node | None],
        quoted: bool,
        ctx: _Ctx,
        level: int,
        queued: list[_Item],
    ) -> Word:
        """A here-document's body, as bash reads it: the lines up to the delimiter's.

        The lines are taken from the text, not from tree-sitter's body node,
        which misses some (a body that starts with a backslash becomes words
        of the redirect); the substitutions in them come from the tree.
        """
        opened, closed = bounds
        if opened is not None and closed is not None:
            newline = self.text.find("\n", self.chars.char(opened.end_byte))
            start = len(self.text) if newline < 0 else newline + 1
            end = max(start, self.chars.char(closed.start_byte))
            if self.text[end - 1 : end] not in ("", "\n"):
                # `<<-` delimiters may be indented with tabs: the body ends before them.
                end = self.text.rfind("\n", start, end) + 1 or start
        elif body is not None:
            start, end = self.chars.span(body)
        else:
            return Word(raw="", parts=())
        text = self.text[start:end]
        if quoted:
            return Word(raw=text, parts=(Part("text", text, quoted=True),))
        if body is not None:
            queued.extend(self.substitutions(body, ctx, level))
        parts: list[Part] = []
        spans = self.spans(node)
        _Scanner(self, spans, ctx, level).heredoc(start, end, parts)
        queued.extend(self.pending)
        self.pending.clear()
        return Word(raw=text, parts=_merge(parts))

    def command(self, node: tree_sitter.Node, ctx: _Ctx, level: int) -> None:
        # Words and assignments in order, with where each ends in the text.
        items: list[tuple[bool, Word, int]] = []
        redirects: list[Redirect] = []
        queued: list[_Item] = []
        after: list[_Item] = []
        if node.start_point.row != node.end_point.row:
            self.one_line(node)
        data = self.chars.data
        for child in node.children:
            kind = child.type
            if kind in _REDIRECT_NODES:
                redirects.extend(self.redirect(child, ctx, level, queued, after))
                continue
            if kind in _OPERATOR_WORDS:
                # tree-sitter takes these for operators; in a command, bash takes
                # them for words (`[ a == b ]`, `0 == 0`).
                start, end = self.chars.span(child)
                items.append((False, _plain_word(self.text[start:end]), end))
                continue
            if kind == "comment" or not child.is_named:
                continue
            if (
                # A word of digits glued to `<` or `>` (`cat 0<f`), told from a byte
                # first: asked of every word.
                48 <= data[child.start_byte] <= 57
                and data[child.end_byte : child.end_byte + 1] in (b"<", b">")
                and kind in ("number", "word", "command_name")
                and self.descriptor(child) is not None
            ):
                # `cat 0>x`: tree-sitter takes the 0 for a word; bash, for the redirect's.
                continue
            # tree-sitter takes `1=x` for an assignment; bash, for a command name.
            # Once the name is read, `A=x` is an argument (`ls A=x`).
            assignment = (
                kind == "variable_assignment"
                and not any(not is_assignment for is_assignment, _, _ in items)
                and bool(_ASSIGNMENT.match(self.text, self.chars.char(child.start_byte)))
            )
            word = self.read(child, ctx, level, queued, assignment=assignment)
            start, end = self.chars.span(child)
            if items and _CONTINUATION.fullmatch(self.text, items[-1][2], start):
                # `r\<newline>m` and `'r'\m`: one word to bash, which removes the
                # pair before it splits words, and splits only at blanks and
                # operators; tree-sitter splits both. Joined, as bash reads them.
                was_assignment, previous, _ = items[-1]
                joined = Word(
                    raw=previous.raw + self.text[items[-1][2] : end],
                    parts=_merge((*previous.parts, *word.parts)),
                )
                items[-1] = (was_assignment, joined, end)
                continue
            items.append((assignment, word, end))
        assignments = [word for is_assignment, word, _ in items if is_assignment]
        words = [word for is_assignment, word, _ in items if not is_assignment]
        words.extend(self.extra)
        self.extra.clear()
        words.extend(self.arguments.pop(node.start_byte, ()))
        while words and _ASSIGNMENT.match(words[0].raw.replace("\\\n", "")):
            # `PA\<newline>TH=x cmd`, joined above: an assignment after all.
            assignments.append(words.pop(0))
        if words and words[0].raw in _STRAY:
            # tree-sitter reads a stray `done` or `fi` as a command; bash refuses the script.
            where = _snippet(self.text, self.chars.char(node.start_byte))
            raise ShellParseError(f"a {words[0].raw!r} that closes nothing: {where}")
        if words and words[0].raw == "time":
            # The `time` keyword times what follows; it runs nothing itself.
            words.pop(0)
            while words and words[0].raw in ("-p", "--"):
                words.pop(0)
        command = self.simple(node, words, assignments, ctx, redirects)
        source = self.sources.pop(node.start_byte, None)
        if source is not None:
            command = attrs.evolve(command, source=source)
        self.push([*queued, _Emit(command), *after])

    def read(
        self,
        node: tree_sitter.Node,
        ctx: _Ctx,
        level: int,
        queued: list[_Item],
        *,
        assignment: bool = False,
    ) -> Word:
        """A word's value, queueing the commands of its substitutions first."""
        if self.maybe_substitutions(node):
            queued.extend(self.substitutions(node, ctx, level))
        word = self.word(node, ctx, level, assignment=assignment)
        if self.pending:
            queued.extend(self.pending)
            self.pending.clear()
        return word

    def simple(
        self,
        node: tree_sitter.Node,
        words: Sequence[Word],
        assignments: Sequence[Word],
        ctx: _Ctx,
        redirects: Sequence[Redirect] = (),
    ) -> SimpleCommand:
        return SimpleCommand(
            words=tuple(words),
            redirects=ctx.redirects + tuple(redirects),
            assignments=tuple(assignments),
            source=self.chars.of(node),
            nesting=ctx.nesting,
            pipeline=ctx.pipeline,
            stdin_piped=ctx.stdin_piped,
            background=ctx.background,
            functions=ctx.functions,
            pipeline_source=ctx.pipeline_source,
        )

    def declaration(self, node: tree_sitter.Node, ctx: _Ctx, level: int) -> None:
        # `export X=1`, `declare -a a=(...)`, `local x`, `unset y`: a builtin and its words.
        words: list[Word] = []
        queued: list[_Item] = []
        for child in node.children:
            if child.type == "comment":
                continue
            if not child.is_named:
                text = self.chars.of(child)
                words.append(Word(raw=text, parts=(Part("text", text),)))
            else:
                words.append(self.read(child, ctx, level, queued, assignment=True))
        self.push([*queued, _Emit(self.simple(node, words, (), ctx))])

    def test(self, node: tree_sitter.Node, ctx: _Ctx, level: int) -> None:
        queued: list[_Item] = []
        first = node.children[0] if node.children else None
        if first is not None and first.type == "[":
            # `[ -f x ]` is the program `[` (as `test -f x`): a command like any other.
            words = [self.word_or_token(token, ctx, level, queued) for token in self.tokens(node)]
            queued.append(_Emit(self.simple(node, words, (), ctx)))
        else:
            queued.extend(self.substitutions(node, ctx, level))
        # `[[ ... ]]` is the shell's own syntax: only its substitutions run.
        self.push(queued)

    def tokens(self, node: tree_sitter.Node) -> Iterator[tree_sitter.Node]:
        """The words of a `[ ... ]` test, in order, as the program `[` receives them."""
        todo = [node]
        while todo:
            current = todo.pop()
            if current is not node and (current.type in _WORD_NODES or current.child_count == 0):
                yield current
                continue
            todo.extend(reversed(current.children))

    def word_or_token(
        self, node: tree_sitter.Node, ctx: _Ctx, level: int, queued: list[_Item]
    ) -> Word:
        if node.is_named:
            return self.read(node, ctx, level, queued)
        text = self.chars.of(node)
        return Word(raw=text, parts=(Part("text", text),))

    def bare_assignment(self, node: tree_sitter.Node, ctx: _Ctx, level: int) -> None:
        nodes = [node] if node.type == "variable_assignment" else node.named_children
        queued: list[_Item] = []
        assignments = []
        words: list[Word] = []
        for child in nodes:
            if child.type != "variable_assignment":
                continue
            if words or not _ASSIGNMENT.match(self.text, self.chars.char(child.start_byte)):
                # `1=x` alone: a command of that name to bash, and what follows its words.
                words.append(self.read(child, ctx, level, queued))
                continue
            assignments.append(self.read(child, ctx, level, queued, assignment=True))
        self.push([*queued, _Emit(self.simple(node, words, assignments, ctx))])

    def loop(self, node: tree_sitter.Node, ctx: _Ctx, level: int) -> None:
        items: list[_Item] = []
        body = node.child_by_field_name("body")
        variable = node.child_by_field_name("variable")
        for child in node.named_children:
            if child == body or child.type == "comment":
                continue
            items.extend(self.substitutions(child, ctx, level))
        name = self.chars.of(variable) if variable is not None else ""
        if variable is not None and name in LOOP_VARIABLES:
            # `for PATH in ...` sets PATH as `PATH=...` would.
            value = Word(
                raw=f"{name}=", parts=(Part("text", f"{name}="), Part("unknown", "<each item>"))
            )
            items.append(_Emit(self.simple(variable, (), (value,), ctx)))
        if body is not None:
            items.append(_Visit(body, ctx, level + 1))
        self.push(items)

    # substitutions

    def maybe_substitutions(self, node: tree_sitter.Node) -> bool:
        start, end = self.chars.span(node)
        return _SUBSTITUTION_START.search(self.text, start, end) is not None

    def substitutions(self, node: tree_sitter.Node, ctx: _Ctx, level: int) -> list[_Item]:
        """The commands inside `node`'s substitutions, as stack items, outermost only."""
        found: list[_Item] = []
        todo = [node]
        while todo:
            current = todo.pop()
            kind = current.type
            if kind in ("command_substitution", "process_substitution"):
                found.extend(self.substitution(current, ctx, level))
                continue
            if kind == "simple_expansion" and self.chars.deferred:
                start = self.chars.char(current.start_byte)
                if start in self.chars.deferred:
                    found.extend(self.deferred(start, ctx, _backtick_mode(current)))
                    continue
            if current.child_count:
                todo.extend(reversed(current.children))
        return found

    def substitution(self, node: tree_sitter.Node, ctx: _Ctx, level: int) -> list[_Item]:
        opener = node.children[0].type if node.children else ""
        if node.type == "process_substitution":
            label = "<(...)" if opener == "<(" else ">(...)"
            # `tee >(sh)`: what runs in >(...) reads the pipe.
            piped = label == ">(...)" or ctx.stdin_piped
        else:
            label = "`...`" if opener == "`" else "$(...)"
            piped = ctx.stdin_piped
        inner = _Ctx(
            nesting=(*ctx.nesting, label),
            stdin_piped=piped,
            functions=ctx.functions,
            redirects=ctx.redirects,
        )
        if len(ctx.nesting) > _MAX_DEPTH:
            raise ShellParseError("substitutions are nested too deeply")
        if opener == "`":
            # tree-sitter starts the node (and its "`" token) at the blanks before it.
            start = self.chars.char(node.children[0].end_byte) - 1
            end = self.chars.char(node.end_byte)
            stop = _backtick_end(self.text, start, len(self.text))
            if stop != end:
                # tree-sitter paired this backtick with another than bash does
                # (`"`x 'y'`"` is read on past the second backtick): hidden, and
                # its code, up to the backtick bash closes it with, parsed apart.
                if stop < 0:
                    raise _Misread(f"a backtick is not closed: {_snippet(self.text, start)}", None)
                raise _Misread(
                    "it cannot tell where a backtick substitution ends: "
                    + _snippet(self.text, start),
                    self.chars.defer(start, stop, self.text[start + 1 : stop - 1], label),
                )
            return [self.backtick(self.text[start + 1 : end - 1], _backtick_mode(node), ctx)]
        return [
            _Visit(child, inner, level + 1)
            for child in node.named_children
            if child.type != "comment"
        ]

    def backtick(self, inner: str, mode: _BacktickMode, ctx: _Ctx) -> _Ready:
        r"""The commands of a backtick substitution's text, read as bash (and sh) read it.

        Inside backticks a backslash quotes `$`, `` ` `` and `\` (and `"`
        inside double quotes): the shell reads the text again after removing
        those backslashes, so that is what is parsed. Where bash and dash
        remove different ones (a here-document, `${x:-...}`), both readings
        are parsed, and the commands of both are judged.
        """
        readings = _backtick_readings(inner, mode)
        if len(readings) == 1:
            return self.nested(readings[0], "`...`", ctx)
        found: list[SimpleCommand] = []
        for reading in readings:
            found.extend(self.nested(reading, "`...`", ctx).commands)
        return _Ready(tuple(found))

    def deferred(self, start: int, ctx: _Ctx, mode: _BacktickMode = "plain") -> list[_Item]:
        """The commands of a substitution a respelling hid, the first time it is met."""
        if start in self.taken:
            return []
        self.taken.add(start)
        _, code, label = self.chars.deferred[start]
        if label == "`...`":
            return [self.backtick(code, mode, ctx)]
        return [self.nested(code, label, ctx)]

    def finish(self) -> None:
        """Refuse the script if a substitution a respelling hid was met nowhere."""
        for start in self.chars.deferred:
            if start not in self.taken:
                raise ShellParseError(f"lost track of a substitution: {_snippet(self.text, start)}")

    def nested(self, script: str, label: str, ctx: _Ctx) -> _Ready:
        """The commands of a substitution's code, parsed on its own."""
        piped = ctx.stdin_piped or label == ">(...)"
        inner = _Ctx(
            nesting=(*ctx.nesting, label),
            stdin_piped=piped,
            functions=ctx.functions,
            redirects=ctx.redirects,
        )
        if len(ctx.nesting) > _MAX_DEPTH:
            raise ShellParseError("substitutions are nested too deeply")
        return _Ready(tuple(_parse(script, inner, self.depth + 1)))

    # words

    def spans(self, node: tree_sitter.Node) -> dict[int, tree_sitter.Node]:
        """The substitutions and expansions in a word, by the character where they start."""
        found: dict[int, tree_sitter.Node] = {}
        todo = [node]
        while todo:
            current = todo.pop()
            if current.type in _SPAN_NODES or current.type == "ansi_c_string":
                opener = current.children[0] if current.children else current
                # tree-sitter starts some nodes at the blanks, comments or
                # line continuations before them: the opening token says where.
                start = self.chars.char(opener.end_byte) - len(opener.type)
                if opener is current:
                    start = self.chars.char(current.start_byte)
                found[start] = current
                if current.type != "expansion" and current.type != "arithmetic_expansion":
                    continue
            todo.extend(current.children)
        return found

    def word(
        self, node: tree_sitter.Node, ctx: _Ctx, level: int, *, assignment: bool = False
    ) -> Word:
        start, end = self.chars.span(node)
        raw = self.text[start:end]
        if not _WORD_SPECIAL.search(raw):
            # Most words are plain text: nothing to scan.
            return _plain_word(raw)
        parts: list[Part] = []
        _Scanner(self, self.spans(node), ctx, level).scan(start, end, parts, assignment=assignment)
        return Word(raw=raw, parts=_merge(parts))


@functools.lru_cache(maxsize=4096)
def _plain_word(raw: str) -> Word:
    # Words are immutable, and the same plain ones (`-rf`, `echo`, `/dev/null`)
    # come again and again: made once.
    return Word(raw=raw, parts=(Part("text", raw),) if raw else ())


_Item: TypeAlias = "_Visit | _Emit | _Ready"

LOOP_VARIABLES = frozenset(
    {
        "PATH", "IFS", "LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT", "BASH_ENV", "ENV",
        "PROMPT_COMMAND", "CDPATH", "SHELLOPTS", "BASHOPTS", "PS4",
    }
)  # fmt: skip
"""Variables a `for` or `select` loop over them reports as an assignment (`for PATH in ...`)."""

_EXPRESSIONS = frozenset(
    {
        "binary_expression", "unary_expression", "ternary_expression", "postfix_expression",
        "parenthesized_expression", "subscript",
    }
)  # fmt: skip


_BacktickMode: TypeAlias = Literal["plain", "double", "either"]


def _backtick_text(inner: str, quoted: bool = False) -> str:
    """The code of `` `inner` `` after the shell's backslash removal (`"` too if in quotes)."""
    special = '$`\\"' if quoted else "$`\\"
    out: list[str] = []
    i = 0
    while i < len(inner):
        c = inner[i]
        if c == "\\" and i + 1 < len(inner) and inner[i + 1] in special:
            out.append(inner[i + 1])
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out)


def _backtick_readings(inner: str, mode: _BacktickMode) -> tuple[str, ...]:
    r"""The code a backtick substitution runs: one reading, or bash's and dash's if they differ.

    `mode` says where the backticks are: `plain` (code), `double` (in double
    quotes, where bash and dash both remove the backslash of `\"`), or
    `either` (a here-document, a `${...}` in double quotes: dash removes
    it, bash keeps it).
    """
    if '\\"' not in inner or mode == "plain":
        return (_backtick_text(inner),)
    if mode == "double":
        return (_backtick_text(inner, quoted=True),)
    return (_backtick_text(inner), _backtick_text(inner, quoted=True))


def _backtick_mode(node: tree_sitter.Node) -> _BacktickMode:
    """Where tree-sitter found the backtick substitution `node`: in code, double quotes, or else."""
    parent = node.parent
    if parent is None:
        return "plain"
    if parent.type == "string":
        return "double"
    while parent is not None and parent.type not in ("command_substitution", "program"):
        if parent.type in ("heredoc_body", "expansion"):
            return "either"
        parent = parent.parent
    return "plain"


class _Scanner:
    """Reads a word's value from the original text, as bash does after quote removal.

    Substitutions and `${...}` come from tree-sitter (`spans`); a `$(`, `${`
    or backtick tree-sitter did not see is refused, so the two readings
    cannot disagree silently.
    """

    def __init__(
        self, walker: _Walker, spans: dict[int, tree_sitter.Node], ctx: _Ctx, level: int
    ) -> None:
        self.walker = walker
        self.src = walker.text
        self.spans = spans
        self.ctx = ctx
        self.level = level
        # How many `${...}` deep the reading is: each is read by a recursive call.
        self.nested = 0

    def span_end(self, i: int, end: int, mode: _BacktickMode = "plain") -> int:
        node = self.spans.get(i)
        if node is None:
            return self.unseen(i, end, mode)
        stop = self.walker.chars.char(node.end_byte)
        if stop > end:
            raise ShellParseError(f"lost track of a substitution: {_snippet(self.src, i)}")
        return stop

    def unseen(self, i: int, end: int, mode: _BacktickMode) -> int:
        """A substitution tree-sitter did not see (or a repair hid): parsed here, on its own."""
        src = self.src
        deferred = self.walker.chars.deferred.get(i)
        if deferred is not None:
            # Its commands were queued from the tree's `$___` stand-in, if the
            # tree has it where the words have it; if not, they are now.
            self.walker.pending.extend(self.walker.deferred(i, self.ctx, mode))
            return deferred[0]
        if src[i] == "`":
            stop = _backtick_end(src, i, end)
            if stop < 0:
                raise ShellParseError(f"a backtick is not closed: {_snippet(src, i)}")
            self.walker.pending.append(self.walker.backtick(src[i + 1 : stop - 1], mode, self.ctx))
            return stop
        elif src.startswith("${", i):
            # `${a%${a#?}}`: tree-sitter saw the outer one only. Its value is
            # unknown anyway; the substitutions in it are found all the same.
            close = _closing_brace(src, i + 1, end)
            if close < 0:
                raise ShellParseError(f"a ${{ is not closed: {_snippet(src, i)}")
            self.inside(i + 2, close, in_double=True)
            return close + 1
        else:
            close = _closing(src, i + 1)
            if close < 0 or close >= end:
                raise ShellParseError(f"a {src[i : i + 2]} is not closed: {_snippet(src, i)}")
            stop = close + 1
            script = src[i + 2 : close]
            label = {"$": "$(...)", "<": "<(...)", ">": ">(...)"}[src[i]]
        self.walker.pending.append(self.walker.nested(script, label, self.ctx))
        return stop

    def inside(self, i: int, end: int, *, in_double: bool) -> None:
        """Find the substitutions in `${...}` or `$((...))` tree-sitter left as plain words.

        tree-sitter reads `${X:-`cmd`}` as a word; bash runs `cmd`. Their
        values are unknown anyway: only the commands in them matter.
        """
        src = self.src
        ignored: list[Part] = []
        self.nested += 1
        if self.nested > _MAX_WORD_NESTING:
            raise ShellParseError(f"a word nests more than {_MAX_WORD_NESTING} levels deep")
        while i < end:
            c = src[i]
            if c == "\\":
                i += 2
            elif c == "'" and not in_double:
                close = src.find("'", i + 1, end)
                i = end if close < 0 else close + 1
            elif c == '"':
                i = self.double(i + 1, end, ignored)
            elif c == "$":
                i = self.dollar(i, end, ignored, quoted=True)
            elif c == "`" or (c in "<>" and src.startswith("(", i + 1)):
                i = self.span_end(i, end, "either")
            else:
                i += 1
        self.nested -= 1

    def scan(self, i: int, end: int, parts: list[Part], *, assignment: bool) -> None:
        src = self.src
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
                i = self.double(i + 1, end, parts)
            elif c == "$":
                i = self.dollar(i, end, parts, quoted=False)
            elif c == "`" or (c in "<>" and src.startswith("(", i + 1)):
                stop = self.span_end(i, end)
                kind: PartKind = "command" if c == "`" else "process"
                parts.append(Part(kind, src[i:stop], False))
                i = stop
            elif c in "*?":
                parts.append(Part("glob", c))
                i += 1
            elif c == "[":
                # A bracket expression needs its `]`; a lone `[` (the program `[`) is text.
                closing = src.find("]", i + 2, end)
                parts.append(Part("glob" if closing >= 0 else "text", c))
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

    def double(self, i: int, end: int, parts: list[Part]) -> int:
        src = self.src
        while i < end:
            c = src[i]
            if c == '"':
                return i + 1
            if c == "\\" and i + 1 < end and src[i + 1] in '$`"\\\n':
                if src[i + 1] != "\n":
                    parts.append(Part("text", src[i + 1], quoted=True))
                i += 2
            elif c == "$":
                i = self.dollar(i, end, parts, quoted=True)
            elif c == "`":
                stop = self.span_end(i, end, "double")
                parts.append(Part("command", src[i:stop], True))
                i = stop
            else:
                parts.append(Part("text", c, quoted=True))
                i += 1
        raise ShellParseError("a double quote is not closed")

    def heredoc(self, i: int, end: int, parts: list[Part]) -> None:
        src = self.src
        while i < end:
            c = src[i]
            if c == "\\" and i + 1 < end and src[i + 1] in "$`\\\n":
                if src[i + 1] != "\n":
                    parts.append(Part("text", src[i + 1], quoted=True))
                i += 2
            elif c == "$":
                i = self.dollar(i, end, parts, quoted=True)
            elif c == "`":
                stop = self.span_end(i, end, "either")
                parts.append(Part("command", src[i:stop], True))
                i = stop
            else:
                parts.append(Part("text", c, quoted=True))
                i += 1

    def dollar(self, i: int, end: int, parts: list[Part], *, quoted: bool) -> int:
        src = self.src
        following = src[i + 1] if i + 1 < end else ""
        if following == "'" and not quoted:
            close = _ansi_c_end(src, i + 2)
            if close < 0 or close > end:
                raise ShellParseError("a $'...' string is not closed")
            if close != src.find("'", i + 2) + 1:
                # bash ends $'a\'...' at a later quote than a POSIX sh (dash, which
                # is /bin/sh on Debian) does, so the two run different code.
                raise ShellParseError(
                    "a $'...' string holds \\', which bash and sh read differently"
                )
            parts.append(Part("text", _ansi_c(src[i + 2 : close - 1]), quoted=True))
            return close
        if following == '"' and not quoted:
            return self.double(i + 2, end, parts)
        if following == "(":
            empty = _EMPTY_SUBSTITUTION.match(src, i, end)
            if empty is not None:
                parts.append(Part("command", empty.group(), quoted))
                return empty.end()
        if following in ("(", "{"):
            stop = self.span_end(i, end)
            node = self.spans.get(i)
            text = src[i:stop]
            if node is None:
                parts.append(Part("command", text, quoted))
            elif node.type == "arithmetic_expansion":
                self.inside(i + 3, stop - 2, in_double=True)
                parts.append(Part("arithmetic", text, quoted))
            elif node.type == "expansion":
                self.inside(i + 2, stop - 1, in_double=quoted)
                parts.append(Part("parameter", text, quoted))
            else:
                parts.append(Part("command", text, quoted))
            return stop
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
    # `coproc cmd args`; the compound forms are read as their compound.
    "coproc": _wrapper(_options()),
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
    if len(script) <= _CACHED_SCRIPT:
        return _parse_cached(script)
    return tuple(_parse(script, _Ctx(), 0))


# Agents run the same short commands again and again (`ls`, `git status`, a
# test command), and a script's reading is a function of its text alone (the
# commands are immutable): the last ones read are kept. A refusal is raised
# again each time, never kept.
_CACHED_SCRIPT = 2048


@functools.lru_cache(maxsize=1024)
def _parse_cached(script: str) -> tuple[SimpleCommand, ...]:
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
