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
respelt as bash would read them (see `_repair` in `reading`) and parsed
again. Some misreadings give no error: a backtick closed by another backtick
than the one bash closes it with, a command run on into the next line
(`a >x | b | c` then `rm -rf /`), a `0` before a redirect taken for a word.
The walk checks for those and respells them too (`Misread`). Every respelling keeps the
script's length, so positions (and the lines messages name) are those of
the original text, from which every word is read; a backtick or `$(...)`
substitution tree-sitter cannot read is hidden from it (spelt `$___`) and
its code parsed on its own, as bash parses it. Hostile input is bounded: scripts
over `_MAX_SCRIPT` characters, deeper nesting than `_MAX_NESTING` levels or
`MAX_DEPTH` substitutions, and brace expansions over `_MAX_BRACE_WORDS`
words are refused; the tree is walked with an explicit stack, never by
recursion.

A `#!` script (see `Shell.shebang()`) is its interpreter run on the body as
stdin; `parse_command` handles that, and a command's own stdin fed to a shell.

This module holds only the entry points. The work is done in four modules
of `executor._shell`, one job each: `words` (the values: `SimpleCommand`,
`Word`, `Part`, `Redirect`), `reading` (tree-sitter-bash, and the
respellings of what it misreads), `walker` (the walk of the tree into
commands) and `programs` (the programs other programs run). Each imports
only the ones before it: the walker is handed `programs.analyse`.
"""

from __future__ import annotations

import functools
import shlex
from collections.abc import Sequence

import attrs

from executor._core.commands import Exec, Shell
from executor._core.errors import ShellParseError
from executor._shell.programs import SHELLS, analyse
from executor._shell.walker import Ctx, parse
from executor._shell.words import SimpleCommand, Word


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
    return tuple(parse(script, Ctx(), 0, analyse))


# Agents run the same short commands again and again (`ls`, `git status`, a
# test command), and a script's reading is a function of its text alone (the
# commands are immutable): the last ones read are kept. A refusal is raised
# again each time, never kept.
_CACHED_SCRIPT = 2048


@functools.lru_cache(maxsize=1024)
def _parse_cached(script: str) -> tuple[SimpleCommand, ...]:
    return tuple(parse(script, Ctx(), 0, analyse))


def parse_argv(argv: Sequence[str]) -> tuple[SimpleCommand, ...]:
    """The commands an argv (run without a shell) runs: itself, and what it wraps.

    Raises:
        ShellParseError: Shell code it runs (`sh -c ...`) cannot be parsed.

    """
    words = tuple(Word.of(arg) for arg in argv)
    command = SimpleCommand(words=words, source=shlex.join(argv))
    return tuple(analyse(command, 0))


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
                ctx = Ctx(nesting=(*item.nesting, "stdin"))
                result.extend(parse(text, ctx, 1, analyse))
                parsed_once = True
        else:
            result.append(attrs.evolve(item, code="inline"))
    return tuple(result)
