"""Programs that run other programs: what `sudo`, `env`, `xargs`, `find`, `sh -c`... run.

`analyse` takes a command found in a script and returns it, with `code` set
when it is a shell or an interpreter, followed by the commands it runs: the
program a wrapper runs (`WRAPPERS`), and the shell code given in arguments
or on stdin, read with `executor._shell.walker.parse`.
"""

from __future__ import annotations

import functools
import re
import shlex
from collections.abc import Callable, Sequence
from typing import TypeAlias

import attrs

from executor._core.errors import ShellParseError
from executor._shell.walker import MAX_DEPTH, Ctx, parse
from executor._shell.words import (
    ASSIGNMENT,
    EXPANSIONS,
    CodeSource,
    Part,
    Redirect,
    SimpleCommand,
    Word,
)

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


def _evolve_code(command: SimpleCommand, code: CodeSource | None) -> SimpleCommand:
    return command if code is None else attrs.evolve(command, code=code)


def analyse(command: SimpleCommand, depth: int) -> list[SimpleCommand]:
    """`command`, with `code` set if it runs code, followed by the commands it runs."""
    if depth > MAX_DEPTH:
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
    return analyse(inner, depth + 1)


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
    ctx = Ctx(
        nesting=(*command.nesting, label),
        stdin_piped=command.stdin_piped,
        background=command.background,
        functions=command.functions if same_shell else (),
        redirects=command.redirects,
    )
    return "parsed", parse(word.value, ctx, depth + 1, analyse)


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
        ctx = Ctx(nesting=(*command.nesting, f"{label} <<"), functions=())
        return "parsed", parse(word.value, ctx, depth + 1, analyse)
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
                p.kind in EXPANSIONS and p.kind != "process" and not p.quoted for p in word.parts
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
            while start < len(command.words) and ASSIGNMENT.match(command.words[start].value):
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
    while start < len(command.words) and ASSIGNMENT.match(command.words[start].value):
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
    while start < len(words) and ASSIGNMENT.match(words[start].value):
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
