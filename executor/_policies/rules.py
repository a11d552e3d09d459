"""Policies on parsed commands: allow and deny rules, and dangerous-command detection.

Both are `CheckedExecutor`s: they parse a command with `executor._shell.parser`
(tree-sitter-bash, so `ls; rm -rf x`, `$(...)`, pipes, `&&`, `case`, `[[ ]]`,
here-documents and `sh -c '...'` nesting are all seen), judge every simple
command in it with its redirects and assignments, and raise `PolicyDenied`
naming the rule and the piece of script (and, where a plainer spelling would
pass, what to write), or pass the command on unchanged. A script that cannot
be parsed is refused with `ShellParseError`.

- `CommandRules(inner, allow=..., deny=..., allow_writes=...)`: argv-prefix
  rules. With `allow`, every simple command anywhere in a script must match
  one (fail closed), redirects may write only to `/dev/null`, descriptors and
  `allow_writes` paths, and `PATH`, `IFS` and the loader's variables stay as
  they are; `deny` refuses a script when any command matches.
- `DangerousCommands(inner)`: refuses the commands in `RULES` (fork bombs,
  `rm -rf /` in any spelling, disk formatting, writes into /etc, ~/.ssh or
  git hooks, `curl ... | sh`, ...); `check_script` is the same judgement as
  a pure function.

Neither is a sandbox. A denylist sees only what a script says: a program
that runs code from a file (`python3 x.py`, `make`, `bash build.sh` after a
`git pull`) is as opaque to it as to any reader. Use an allowlist, a
read-only or sandboxed executor, or both, where that matters.
"""

from __future__ import annotations

import os
import posixpath
import re
import shlex
import unicodedata
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from fnmatch import fnmatchcase
from typing import TypeAlias

import anyio.to_thread
import attrs

from executor._core.base import CheckedExecutor, ToolExecutor
from executor._core.commands import Command, Exec, ReadFile, Shell, WriteFile
from executor._core.errors import PolicyDenied, ShellParseError
from executor._shell.parser import parse_command, parse_script
from executor._shell.words import (
    Redirect,
    SimpleCommand,
    Word,
    command_name,
    escape_glob,
    glob_pattern,
)

Rule: TypeAlias = str | Callable[[SimpleCommand], bool]
"""An allow or deny rule: an argv prefix (`"git status"`, `"rm"`), or a predicate on a command."""

# Parsing a long script takes milliseconds; past this size it runs in a worker
# thread so the event loop keeps serving other commands meanwhile.
_THREAD_THRESHOLD = 4096


async def _parse(cmd: Shell | Exec) -> tuple[SimpleCommand, ...]:
    size = len(cmd.script) if isinstance(cmd, Shell) else sum(len(a) for a in cmd.argv)
    if size + len(cmd.stdin or b"") > _THREAD_THRESHOLD:
        return await anyio.to_thread.run_sync(parse_command, cmd)
    return parse_command(cmd)


def _functions(commands: Iterable[SimpleCommand]) -> frozenset[str]:
    return frozenset(name for command in commands for name in command.functions)


# --- CommandRules ----------------------------------------------------------------

# An allow rule `ls` admits `/usr/bin/ls` but not `./ls` or `/tmp/ls`: a program
# of that name in some other folder may be anything.
_SYSTEM_BIN = frozenset(
    {
        "/bin",
        "/sbin",
        "/usr/bin",
        "/usr/sbin",
        "/usr/local/bin",
        "/usr/local/sbin",
        "/opt/homebrew/bin",
    }
)


@attrs.frozen
class _Rule:
    text: str
    words: tuple[str, ...] = ()
    predicate: Callable[[SimpleCommand], bool] | None = None

    def matches(self, command: SimpleCommand, *, allow: bool) -> bool:
        if self.predicate is not None:
            return bool(self.predicate(command))
        return any(self._prefix(argv, allow=allow) for argv in _argvs(command, nfkc=not allow))

    def _prefix(self, argv: Sequence[str], *, allow: bool) -> bool:
        if len(argv) < len(self.words) or not argv:
            return False
        head, program = self.words[0], argv[0]
        if "/" in head:
            if program != head:
                return False
        else:
            if "/" in program:
                if allow and posixpath.dirname(program) not in _SYSTEM_BIN:
                    return False
                program = command_name(program)
            if program != head:
                return False
        return tuple(argv[1 : len(self.words)]) == self.words[1:]


def _argvs(command: SimpleCommand, *, nfkc: bool) -> Iterator[tuple[str, ...]]:
    seen = {command.argv, command.expanded_argv()}
    if nfkc:
        seen |= {tuple(unicodedata.normalize("NFKC", a) for a in argv) for argv in list(seen)}
    yield from seen


def _compile(rule: Rule) -> _Rule:
    if isinstance(rule, str):
        words = tuple(shlex.split(rule))
        if not words:
            raise ValueError(f"a rule must name a program, got {rule!r}")
        return _Rule(text=rule, words=words)
    if callable(rule):
        name = getattr(rule, "__name__", None) or repr(rule)
        return _Rule(text=name, predicate=rule)
    raise TypeError(f"a rule is a string or a callable, got {type(rule).__name__}")


class CommandRules(CheckedExecutor):
    """Allows or refuses commands by rules matched against every command a script runs.

    A rule is an argv prefix written as a shell would (`"git status"`,
    `"rm"`, `"npm run test"`), or a predicate on a `SimpleCommand`. A
    program given with a folder (`/bin/rm`) matches a rule naming it alone;
    for allow rules only in the system's bin folders, so `./ls` is not `ls`.

    With `allow`, every simple command anywhere in a script (substitutions,
    pipelines, `sh -c`, the program behind `sudo` or `xargs`, a shell's code
    given on stdin) must match an allow rule, and a wrapper is a command too:
    `timeout 5 ls` needs `timeout` allowed as well as `ls`. Calls of shell
    functions the script defines are allowed, as their bodies are checked,
    and so are the tests `[ ... ]` and `test ...` (they run nothing; the
    shell's `[[ ]]` and `(( ))` are not commands at all). A command whose
    program or code is only known at run time (`$X args`, `sh -c "$X"`,
    `curl ... | sh`) is refused. An allowed interpreter runs whatever code
    it is given: allowing `python3` allows `python3 -c ...` and a
    `#!/usr/bin/env python3` script.

    With `allow`, the script may not change what runs either: a redirect
    that writes a file (`>`, `>>`, `>|`, `&>`, `<>`) is refused unless its
    target is `/dev/null` (or `/dev/stdout`, `/dev/stderr`), a descriptor
    (`2>&1`), or a path an `allow_writes` pattern matches; and setting
    `PATH`, `IFS`, `LD_PRELOAD`, `LD_LIBRARY_PATH`, `BASH_ENV`, `ENV` and the
    other variables in `RUN_VARIABLES` is refused, in front of a command
    (`PATH=bin:$PATH ls` runs a planted `bin/ls`), alone, through `export`,
    `declare`, `env` or a `for` loop.

    `deny` refuses a script when any command in it matches a deny rule
    (brace expansion applied, and names compared after NFKC normalisation).
    A deny list is best effort: `X=rm; $X -rf /` matches no rule. Pair it
    with `DangerousCommands`, or use `allow`, to fail closed.

    `ReadFile` and `WriteFile` pass, unless `allow_files=False`. Other
    command variants are refused.

    Args:
        inner: The executor that runs what is allowed.
        allow: Allow rules; `None` allows every command no deny rule matches.
        deny: Deny rules, checked before the allow rules.
        allow_files: Whether file reads and writes pass.
        allow_writes: Glob patterns (`fnmatch`, where `*` also matches `/`) of
            the paths redirects may write under `allow`, matched against the
            path as written, `.` and `..` resolved (`"build/*"`, `"*.log"`,
            `"/tmp/*"`). A target computed at run time matches none.

    """

    def __init__(
        self,
        inner: ToolExecutor,
        *,
        allow: Iterable[Rule] | None = None,
        deny: Iterable[Rule] = (),
        allow_files: bool = True,
        allow_writes: Iterable[str] = (),
    ) -> None:
        super().__init__(inner)
        self.allow = None if allow is None else tuple(_compile(rule) for rule in allow)
        self.deny = tuple(_compile(rule) for rule in deny)
        self.allow_files = allow_files
        if isinstance(allow_writes, str):
            allow_writes = [allow_writes]
        self.allow_writes = tuple(allow_writes)
        for pattern in self.allow_writes:
            if not isinstance(pattern, str) or not pattern:
                raise ValueError(f"an allow_writes pattern is a non-empty string, got {pattern!r}")

    def __repr__(self) -> str:
        allow = None if self.allow is None else [rule.text for rule in self.allow]
        deny = [rule.text for rule in self.deny]
        writes = f", allow_writes={list(self.allow_writes)!r}" if self.allow_writes else ""
        return f"CommandRules({self.inner!r}, allow={allow!r}, deny={deny!r}{writes})"

    async def check(self, cmd: Command) -> Command:
        """Return `cmd` if the rules allow it; raise `PolicyDenied` naming the rule if not."""
        if isinstance(cmd, ReadFile | WriteFile):
            if self.allow_files:
                return cmd
            what = "reads" if isinstance(cmd, ReadFile) else "writes"
            raise PolicyDenied(
                f"refused by rule allow_files=False: this executor runs no file {what} ({cmd.path})"
            )
        if not isinstance(cmd, Shell | Exec):
            raise PolicyDenied(
                f"refused: the command rules do not know {type(cmd).__name__} commands"
            )
        refusal = self.refusal(await _parse(cmd))
        if refusal is not None:
            raise PolicyDenied(refusal)
        return cmd

    def refusal(self, commands: Sequence[SimpleCommand]) -> str | None:
        """Why the rules refuse a script made of `commands`, or `None` if they allow it."""
        for command in commands:
            if not command.words:
                continue
            for rule in self.deny:
                if rule.matches(command, allow=False):
                    return f'refused by rule deny "{rule.text}": {command.describe()}'
        if self.allow is None:
            return None
        defined = _functions(commands)
        for command in commands:
            reason = self._allow_reason(command, defined)
            if reason is not None:
                text, hint = reason
                message = f"refused by the allow rules: {text}: {command.describe()}"
                return f"{message}; {hint}" if hint else message
        return None

    def _allow_reason(
        self, command: SimpleCommand, defined: frozenset[str]
    ) -> tuple[str, str] | None:
        for redirect in command.redirects:
            reason = self._redirect_reason(redirect)
            if reason is not None:
                return reason
        variable = _run_variable(command)
        if variable is not None:
            return (
                f"setting {variable} changes which program runs or how",
                "run the program by its full path instead (/usr/bin/ls, ./bin/tool), "
                "and leave PATH and the loader alone",
            )
        program = self._program_reason(command, defined)
        return None if program is None else (program, _program_hint(command))

    def _redirect_reason(self, redirect: Redirect) -> tuple[str, str] | None:
        if not redirect.writes or redirect.target is None:
            return None
        target = redirect.target
        spelled = f"{redirect.fd if redirect.fd is not None else ''}{redirect.op} {target.raw}"
        hint = (
            "send the output to /dev/null, or leave the redirect out and write files "
            "with the file-writing tool"
        )
        if not target.static:
            return f"the redirect {spelled} writes a file only known at run time", hint
        path = target.value
        if path in _HARMLESS_TARGETS:
            return None
        normal = posixpath.normpath(path) if path else path
        if any(fnmatchcase(normal, pattern) for pattern in self.allow_writes):
            return None
        if self.allow_writes:
            allowed = ", ".join(f'"{p}"' for p in self.allow_writes[:8])
            hint = f"write only where allow_writes allows ({allowed}), or to /dev/null"
        return f"the redirect {spelled} writes a file, which no allow_writes rule allows", hint

    def _program_reason(self, command: SimpleCommand, defined: frozenset[str]) -> str | None:
        assert self.allow is not None
        if not command.words:
            return None
        if not command.name_literal:
            return f"cannot tell which program {command.words[0].raw!r} runs"
        if command.code == "dynamic":
            return f"cannot tell what code {command.name!r} runs: it is computed at run time"
        if command.code == "pipe":
            return f"{command.name!r} runs code read from a pipe, which cannot be checked"
        if command.name in defined and "/" not in command.words[0].value:
            return None
        if command.words[0].value in _TESTS:
            return None
        if not command.words[0].value.isascii():
            return f"the program name {command.words[0].value!r} is not plain ASCII"
        if any(rule.matches(command, allow=True) for rule in self.allow):
            return None
        allowed = ", ".join(f'"{rule.text}"' for rule in self.allow[:12])
        more = ", ..." if len(self.allow) > 12 else ""
        return f"no allow rule matches (allowed: {allowed}{more})"


# `[ -f x ]` and `test -f x` only answer yes or no: allowed with any allow list.
_TESTS = frozenset({"[", "test"})
# Redirect targets that write nothing anywhere.
_HARMLESS_TARGETS = frozenset({"/dev/null", "/dev/stdout", "/dev/stderr"})

RUN_VARIABLES = frozenset(
    {
        "PATH", "IFS", "LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT", "BASH_ENV", "ENV",
        "PROMPT_COMMAND", "SHELLOPTS", "BASHOPTS", "PS4", "GLOBIGNORE", "CDPATH",
    }
)  # fmt: skip
"""Variables that change which program a command runs, or what it loads: refused under `allow`."""

_DECLARERS = frozenset({"export", "declare", "typeset", "local", "readonly", "env"})


def _assigned(command: SimpleCommand) -> list[str]:
    """The names of the variables a command sets: in front of it, or through `export`, `env`, ..."""
    names = [w.value.partition("=")[0] for w in command.assignments]
    if command.name in _DECLARERS:
        names += [w.value.partition("=")[0] for w in command.words[1:] if "=" in w.value]
    return [name.partition("[")[0].rstrip("+") for name in names]


def _run_variable(command: SimpleCommand) -> str | None:
    for name in _assigned(command):
        if name in RUN_VARIABLES or name.startswith("BASH_FUNC_"):
            return name
    return None


def _program_hint(command: SimpleCommand) -> str:
    """What to write instead of a command an allow list refuses, where something would pass."""
    if not command.words:
        return ""
    if not command.name_literal:
        return _literal_name_hint(command.words[0])
    if command.code == "dynamic":
        return "write the code out literally instead of computing it"
    if command.code == "pipe":
        return "save what it reads to a file and read that file first"
    return ""


def _literal_name_hint(head: Word) -> str:
    """How to write a command's name so that a policy can read it."""
    kinds = {part.kind for part in head.parts}
    if kinds & {"parameter", "command", "arithmetic", "process", "unknown"}:
        return (
            "write the program's name out as plain text (rm, not $X, $(echo rm) or r$()m); "
            "a name computed at run time can be any program"
        )
    if "glob" in kinds:
        return "write the program's name without *, ? or [...] (a pattern can match any file)"
    return "write the words out instead of a brace expansion ({a,b})"


# --- DangerousCommands -----------------------------------------------------------

RULES: Mapping[str, str] = {
    "fork-bomb": "a shell function that starts copies of itself in a pipe or in the background",
    "rm-root": "a recursive delete or move of /, the home folder or a top-level system folder",
    "rm-variable-target": (
        "a recursive delete whose target, or the folder it runs in, is only a variable "
        "or substitution, which may be empty or /"
    ),
    "disk-format": "formatting, partitioning or wiping a disk",
    "disk-write": "writing to a device file such as /dev/sda",
    "chmod-root": "changing the mode or owner of /, the home folder or a system folder",
    "pipe-to-shell": (
        "running code read from a pipe or process substitution, such as a download (curl ... | sh)"
    ),
    "dynamic-code": (
        "running shell code computed at run time (eval or sh -c of a variable or substitution)"
    ),
    "run-written-file": "running a file the same script has just written or downloaded",
    "write-etc": "writing into /etc",
    "write-ssh": "writing into an .ssh folder (keys, authorized_keys, config)",
    "write-git-hooks": (
        "installing git hooks (.git/hooks, core.hooksPath, or writing .git/config, which can "
        "set them), which run on later git commands"
    ),
    "write-shell-startup": (
        "writing a shell startup file (~/.bashrc, ~/.profile, ...), which runs in later shells"
    ),
    "shutdown": "shutting down or rebooting the machine",
    "kill-all": "killing every process (kill -9 -1, killall, pkill -f)",
    "alias": "defining aliases, which can rename a command into a dangerous one",
    "non-literal-command": (
        "a command whose program is computed at run time ($X, $(...), ${IFS} tricks, globs, braces)"
    ),
    "non-ascii-command-name": "a command name with non-ASCII (look-alike) characters",
    "env-hijack": (
        "setting a variable that loads code into other programs or moves cd "
        "(LD_PRELOAD, LD_LIBRARY_PATH, BASH_ENV, ENV, PROMPT_COMMAND, CDPATH, ...)"
    ),
    "opaque-code": (
        "running a script or inline program this policy cannot read "
        "(only with allow_interpreters=False)"
    ),
}
"""The rules of `DangerousCommands`, by name, with what each refuses."""


@attrs.frozen(kw_only=True)
class Finding:
    """One reason a policy refuses a script.

    Attributes:
        rule: The rule's name (a key of `RULES`, or `unparseable-script`).
        command: The offending command, as written, with where it was found.
        reason: What the rule refuses, in words.
        hint: A plainer spelling that would pass, or what to do instead, if
            there is one; empty otherwise.

    """

    rule: str
    command: str
    reason: str
    hint: str = ""

    def __str__(self) -> str:
        text = f'rule "{self.rule}" ({self.reason}): {self.command}'
        return f"{text}; {self.hint}" if self.hint else text


def _message(findings: Sequence[Finding]) -> str:
    text = f"refused by {findings[0]}"
    others = sorted({f.rule for f in findings[1:]} - {findings[0].rule})
    if others:
        text += "; also against " + ", ".join(f'"{rule}"' for rule in others)
    return text


def check_script(
    script: str,
    *,
    allow: Iterable[str] = (),
    allow_interpreters: bool = True,
    home: str | None = None,
    current_dir: str | None = None,
) -> list[Finding]:
    """Judge a shell script as `DangerousCommands` would, without running anything.

    Args:
        script: Shell code, as given to `sh -c`.
        allow: Names of rules (keys of `RULES`) to leave out.
        allow_interpreters: Whether scripts and programs this policy cannot
            read (`python3 x.py`, `bash build.sh`) pass.
        home: The home folder, so absolute paths into it count as `~`.
        current_dir: Where the script starts, if known.

    Returns:
        What is wrong with it, first finding first; empty when nothing is.
        A script that cannot be parsed gives one `unparseable-script` finding.

    """
    try:
        commands = parse_script(script)
    except ShellParseError as error:
        text = " ".join(script.split())
        return [
            Finding(
                rule=ShellParseError.rule,
                command=text if len(text) <= 160 else text[:157] + "...",
                reason=f"the script could not be parsed: {error.reason}",
                hint="check it with `bash -n`, or split it into smaller commands",
            )
        ]
    judge = _Judge(_disabled(allow), allow_interpreters, home or "", current_dir)
    return judge.commands(commands)


def _disabled(allow: Iterable[str]) -> frozenset[str]:
    names = frozenset([allow] if isinstance(allow, str) else allow)
    unknown = sorted(names - set(RULES))
    if unknown:
        raise ValueError(f"no such rule: {', '.join(unknown)} (rules: {', '.join(RULES)})")
    return names


class DangerousCommands(CheckedExecutor):
    r"""Refuses commands that destroy, take over or escape the machine, whatever their spelling.

    Each rule in `RULES` names one kind (`rm-root`, `pipe-to-shell`,
    `write-ssh`, ...); the `PolicyDenied` message names the rule and the
    command. Commands are parsed first, so the rules see through lists,
    pipes, substitutions, `sh -c`, `eval`, wrappers such as `sudo`,
    `timeout`, `xargs` and `find -exec`, quoting (`r""m`, `$'\\x72m'`),
    brace expansion, `${IFS}` splitting, `cd` before a relative path, and
    code fed to a shell on stdin or in a here-document. A script that cannot
    be parsed is refused (`ShellParseError`). Redirect targets (`>`, `>>`,
    `&>`, `<>`) and the files `tee`, `cp`, `mv`, `sed -i`, `dd of=`,
    `install` and the like write are judged as `WriteFile` paths are:
    `.git/config`, `.git/hooks`, shell startup files, `/etc`, `.ssh`,
    devices. `WriteFile` to a protected path is refused too; `ReadFile`
    passes; other command variants are refused, as they cannot be checked.

    Scripts are read as bash reads them, which covers what a POSIX `sh`
    (dash) reads; where the two would split a script differently
    (`$'...\\'...'`), it is refused.

    What it does not do: it is a denylist, so it cannot see code in files
    (`python3 x.py`, `make`), only that a file written by the same script is
    run. Scripts and inline programs it cannot read pass unless
    `allow_interpreters=False`, which refuses them (`opaque-code`): #! scripts
    for interpreters other than a shell, `python3 -c`, `awk`, `bash x.sh`,
    `source x.sh`. Programs that run commands through their own options
    (`tar --checkpoint-action=exec=...`, `vim -c '!...'`, `sed 's/x/y/e'`,
    `docker exec`) are not followed. A path computed at run time is only
    judged for recursive deletes, which it refuses (`rm -rf "$D"`,
    `cd "$D" && rm -rf *`); a write to one (`> "$(echo /etc)/x"`) passes.
    `while true; do ... & done` style loops are not
    detected as fork bombs (only functions that call themselves, directly or
    through each other). `PATH` changes pass: agents prepend tool folders
    all the time, and a planted program is beyond static checks anyway (see
    `env-hijack` for the variables that are refused).

    Args:
        inner: The executor that runs what passes.
        allow: Names of rules to leave out, for example `("kill-all",)`.
        allow_interpreters: Whether programs it cannot read pass.
        home: The home folder, for absolute paths into it (`/home/me/.bashrc`);
            by default the one of this process.

    Raises:
        ValueError: `allow` names a rule that does not exist.

    """

    RULES = RULES

    def __init__(
        self,
        inner: ToolExecutor,
        *,
        allow: Iterable[str] = (),
        allow_interpreters: bool = True,
        home: str | None = None,
    ) -> None:
        super().__init__(inner)
        self.allow = _disabled(allow)
        self.allow_interpreters = allow_interpreters
        self.home = os.path.expanduser("~") if home is None else home

    def __repr__(self) -> str:
        extra = f", allow={sorted(self.allow)!r}" if self.allow else ""
        if not self.allow_interpreters:
            extra += ", allow_interpreters=False"
        return f"DangerousCommands({self.inner!r}{extra})"

    async def check(self, cmd: Command) -> Command:
        """Return `cmd` if no rule refuses it; raise `PolicyDenied` naming the rule if one does."""
        if isinstance(cmd, ReadFile):
            return cmd
        judge = _Judge(self.allow, self.allow_interpreters, self.home, cmd.current_dir)
        if isinstance(cmd, WriteFile):
            findings = judge.write_file(cmd.path)
        elif isinstance(cmd, Shell | Exec):
            findings = judge.commands(await _parse(cmd))
        else:
            raise PolicyDenied(
                f"refused: the dangerous-command rules cannot check {type(cmd).__name__} commands"
            )
        if findings:
            raise PolicyDenied(_message(findings))
        return cmd

    def findings(self, cmd: Shell | Exec | WriteFile) -> list[Finding]:
        """What is wrong with `cmd`, as `check` sees it (parse failures raise `ShellParseError`)."""
        judge = _Judge(self.allow, self.allow_interpreters, self.home, cmd.current_dir)
        if isinstance(cmd, WriteFile):
            return judge.write_file(cmd.path)
        return judge.commands(parse_command(cmd))


# --- paths ------------------------------------------------------------------------

# A path as the rules see it: a root ("/" absolute, "~" the home folder, ""
# relative to where the command starts) and its components as fnmatch
# patterns ("." and ".." resolved).
_Path: TypeAlias = tuple[str, tuple[str, ...]]

_TOP_DIRS = (
    "bin", "boot", "dev", "etc", "home", "lib", "lib32", "lib64", "libx32", "media", "mnt",
    "opt", "proc", "root", "run", "sbin", "srv", "snap", "sys", "tmp", "usr", "var",
)  # fmt: skip
_SECOND_DIRS = {"usr": ("bin", "lib", "lib64", "local", "sbin", "share"), "var": ("lib", "log")}
_STARTUP_FILES = frozenset(
    {
        ".bashrc", ".bash_profile", ".bash_login", ".bash_logout", ".profile", ".zshrc",
        ".zshenv", ".zprofile", ".zlogin", ".zlogout", ".kshrc", ".mkshrc", ".cshrc", ".tcshrc",
        ".login", ".logout", ".inputrc", ".xinitrc", ".xprofile", ".xsession", ".pam_environment",
    }
)  # fmt: skip
_BENIGN_DEVICES = frozenset(
    {"null", "zero", "full", "random", "urandom", "stdin", "stdout", "stderr", "tty"}
)
_BENIGN_DEVICE_DIRS = frozenset({"fd", "shm", "pts", "mqueue"})
_GLOB_CHARS = re.compile(r"[*?\[]")


def _match(name: str, pattern: str) -> bool:
    """Whether glob `pattern` can match the file name `name`, as bash globs do."""
    if not _GLOB_CHARS.search(pattern):
        return name == pattern
    # Without dotglob, bash's * and ? do not match a leading dot.
    if name.startswith(".") and not pattern.startswith("."):
        return False
    return fnmatchcase(name, pattern)


def _split(pattern: str) -> _Path:
    if pattern.startswith("/"):
        root, rest = "/", pattern
    elif pattern == "~" or pattern.startswith("~/"):
        root, rest = "~", pattern[1:]
    else:
        root, rest = "", pattern
    parts: list[str] = []
    for piece in rest.split("/"):
        if piece in ("", "."):
            continue
        if piece == "..":
            if parts and parts[-1] != "..":
                parts.pop()
            elif root == "~":
                # The folder holding home: as dangerous as / for these rules.
                root = "/"
            elif root == "":
                parts.append("..")
            continue
        parts.append(piece)
    return root, tuple(parts)


def _join(base: _Path, path: _Path) -> _Path:
    if path[0]:
        return path
    root, parts = base
    joined = "/".join((*parts, *path[1])) or "."
    prefix = {"/": "/", "~": "~/", "": ""}[root]
    return _split(prefix + joined)


def _is_root_like(path: _Path) -> bool:
    """Whether deleting `path` recursively deletes /, home, or a top-level system folder."""
    root, parts = path
    if root == "~":
        # ~, or everything in it (~/*).
        return not parts or (len(parts) == 1 and bool(_GLOB_CHARS.search(parts[0])))
    if root == "":
        # Only `..` steps (`..`, `../..`, `../*`): could be anything up to /.
        return (
            bool(parts)
            and parts[0] == ".."
            and all(p == ".." or _GLOB_CHARS.search(p) for p in parts)
        )
    if not parts:
        return True
    top = [d for d in _TOP_DIRS if _match(d, parts[0])]
    if not top:
        return False
    if len(parts) == 1:
        return True
    if len(parts) == 2:
        if _GLOB_CHARS.search(parts[1]):
            return True
        return any(_match(s, parts[1]) for d in top for s in _SECOND_DIRS.get(d, ()))
    return False


# --- the judge --------------------------------------------------------------------

# Variables that make other programs load code, or (CDPATH) send `cd x` elsewhere
# than ./x, behind the back of the `cd` the rules follow.
_HIJACK = frozenset(
    {
        "LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT", "BASH_ENV", "ENV", "PROMPT_COMMAND",
        "SHELLOPTS", "BASHOPTS", "PS4", "CDPATH",
    }
)  # fmt: skip
_DISK_TOOLS = re.compile(
    r"mkfs(\..+)?|mke2fs|mkswap|mkntfs|mkdosfs|mkexfatfs|mkfs\.\w+|wipefs|fdisk|sfdisk|cfdisk"
    r"|gdisk|sgdisk|cgdisk|parted|blkdiscard"
)
_POWER = frozenset({"shutdown", "reboot", "halt", "poweroff", "kexec"})
_SYSTEMCTL_POWER = frozenset(
    {
        "poweroff", "reboot", "halt", "kexec", "emergency", "rescue", "suspend", "hibernate",
        "hybrid-sleep", "isolate", "soft-reboot", "default",
    }
)  # fmt: skip
# Programs whose arguments name files they write (see `_Judge.write_operands`).
_WRITERS = frozenset(
    {
        "tee", "truncate", "touch", "mkdir", "rmdir", "unlink", "shred", "mkfifo", "mknod", "rm",
        "setfacl", "sponge", "mv", "cp", "install", "ln", "rsync", "chmod", "chown", "chgrp",
        "chattr", "sed", "perl", "dd", "curl", "wget", "sort", "unzip", "ssh-keygen", "tar",
        "vi", "vim", "nvim", "nano", "emacs", "ed", "ex", "pico", "joe", "mcedit", "sudoedit",
        "gzip", "gunzip", "bzip2", "bunzip2", "xz", "unxz", "zstd", "lzma",
    }
)  # fmt: skip
_SAMPLE_PROCESSES = ("a", "init", "sshd", "python3", "Z9", "x-y.z")
# Writers that change a file's mode, owner or attributes, not what it holds.
_METADATA_WRITERS = frozenset({"chmod", "chown", "chgrp", "chattr", "setfacl", "touch"})
# What to write instead, for the rules where a plainer spelling would pass.
_HINTS = {
    "rm-variable-target": (
        'put a literal folder after the variable ("$DIR/build") or check it is set '
        '("${DIR:?}/build"), or write the path out'
    ),
    "non-ascii-command-name": "write the program's name in plain ASCII letters",
    "dynamic-code": "write the code out literally instead of computing it (sh -c 'ls -l')",
    "pipe-to-shell": "download to a file, read it, and run it in a later command if it is safe",
    "alias": "call the program by its own name, or define a shell function",
    "unparseable-script": "check it with `bash -n`, or split it into smaller commands",
}
_EDITORS = frozenset(
    {"vi", "vim", "nvim", "nano", "emacs", "ed", "ex", "pico", "joe", "mcedit", "sudoedit"}
)
_COMPRESSORS = frozenset({"gzip", "gunzip", "bzip2", "bunzip2", "xz", "unxz", "zstd", "lzma"})
_ALL_OPERANDS = frozenset(
    {
        "tee", "truncate", "touch", "mkdir", "rmdir", "unlink", "shred", "mkfifo", "mknod", "rm",
        "setfacl", "sponge", "mv",
    }
)  # fmt: skip
_OPTION_VALUES = {
    "cp": "St",
    "install": "mogSt",
    "ln": "St",
    "mv": "St",
    "truncate": "sr",
    "touch": "drt",
    "mkdir": "m",
    "mkfifo": "m",
    "mknod": "m",
    "shred": "ns",
    "sed": "efl",
    "perl": "eEIMmx",
    "chmod": "",
    "chown": "",
    "chgrp": "",
    "sort": "oSTtk",
    "curl": "oHdXAeuTFbcKrEmwxyYzCQ",
    "wget": "OPoaeiUtTwQBhl",
    "tar": "CfbTXgHIKNV",
    "unzip": "dxP",
    "ssh-keygen": "fbtCNIOnsrZaEmPwYz",
    "rsync": "eTfM",
}


def _operands(words: Sequence[Word], values: str = "") -> tuple[list[Word], dict[str, Word]]:
    """Split arguments into operands and options (with the value of each option taking one)."""
    operands: list[Word] = []
    options: dict[str, Word] = {}
    i = 0
    while i < len(words):
        word = words[i]
        value = word.value
        if word.static and value == "--":
            operands.extend(words[i + 1 :])
            break
        if word.static and value.startswith("--") and len(value) > 2:
            key, eq, rest = value.partition("=")
            options[key] = Word.of(rest) if eq else Word.of("")
        elif word.static and value.startswith("-") and len(value) > 1:
            for index, flag in enumerate(value[1:], start=1):
                if flag in values:
                    rest = value[index + 1 :]
                    if rest:
                        options["-" + flag] = Word.of(rest)
                    elif i + 1 < len(words):
                        options["-" + flag] = words[i + 1]
                        i += 1
                    break
                options["-" + flag] = Word.of("")
        else:
            operands.append(word)
        i += 1
    return operands, options


class _Judge:
    """Applies the rules to the commands of one script, in order (following `cd`)."""

    def __init__(
        self,
        disabled: frozenset[str],
        allow_interpreters: bool,
        home: str,
        current_dir: str | None,
    ) -> None:
        self.disabled = disabled
        self.allow_interpreters = allow_interpreters
        self.home = home.rstrip("/") if home not in ("", "/") else ""
        self.cwd: _Path | None = ("", ())
        if current_dir is not None:
            self.cwd = _join(("", ()), _split(self._home_relative(current_dir)))
        self.written: set[_Path] = set()
        self.findings: list[Finding] = []

    def _home_relative(self, pattern: str) -> str:
        if self.home and (pattern == self.home or pattern.startswith(self.home + "/")):
            return "~" + pattern[len(self.home) :]
        return pattern

    def flag(self, rule: str, command: SimpleCommand | str, hint: str = "") -> None:
        if rule in self.disabled:
            return
        text = command if isinstance(command, str) else command.describe()
        finding = Finding(
            rule=rule, command=text, reason=RULES[rule], hint=hint or _HINTS.get(rule, "")
        )
        if finding not in self.findings:
            self.findings.append(finding)

    # entry points

    def commands(self, commands: Sequence[SimpleCommand]) -> list[Finding]:
        for command in commands:
            self.command(command)
        self.fork_bombs(commands)
        return self.findings

    def write_file(self, path: str) -> list[Finding]:
        for resolved in self.paths(Word.of(path)):
            self.write_rules(resolved, f"write_file {path}")
        return self.findings

    # paths

    def resolve(self, pattern: str) -> _Path | None:
        path = _split(self._home_relative(pattern))
        if path[0]:
            return path
        if self.cwd is None:
            return None
        return _join(self.cwd, path)

    def paths(self, word: Word) -> list[_Path]:
        found = []
        for pattern in {*word.patterns(), *word.fragments()}:
            path = self.resolve(pattern)
            if path is not None:
                found.append(path)
        return found

    # the rules, per command

    def command(self, command: SimpleCommand) -> None:
        self.environment(command)
        for redirect in command.redirects:
            if redirect.writes and redirect.target is not None:
                self.write_target(redirect.target, command)
        if not command.words:
            return
        head = command.words[0]
        if not command.name_literal:
            self.flag("non-literal-command", command, _literal_name_hint(head))
            return
        if not head.value.isascii():
            self.flag("non-ascii-command-name", command)
        name = command.name or ""
        args = command.words[1:]
        if command.code == "pipe":
            self.flag("pipe-to-shell", command)
        elif command.code == "dynamic":
            self.flag("dynamic-code", command)
        elif command.code in ("file", "inline") and not self.allow_interpreters:
            self.flag("opaque-code", command)
        if command.code == "file" or "/" in head.value:
            self.run_written(command)
        before = len(self.findings)
        self.program(name, args, command)
        if name in ("rm", "find") and len(self.findings) > before:
            # Already refused as a delete; that it also "writes" /etc says nothing more.
            return
        if name in _WRITERS:
            content = name not in _METADATA_WRITERS
            for word in self.write_operands(name, args):
                self.write_target(word, command, content=content)
        if name in ("cd", "pushd", "popd"):
            self.change_dir(name, args)

    def environment(self, command: SimpleCommand) -> None:
        names = _assigned(command)
        if any(n in _HIJACK or n.startswith("BASH_FUNC_") for n in names):
            self.flag("env-hijack", command)

    def program(self, name: str, args: Sequence[Word], command: SimpleCommand) -> None:
        if name == "rm":
            self.rm(args, command)
        elif name == "mv":
            sources, _ = _operands(args, _OPTION_VALUES["mv"])
            if any(_is_root_like(p) for w in sources for p in self.paths(w)):
                self.flag("rm-root", command)
        elif name == "find":
            self.find(args, command)
        elif name in ("chmod", "chown", "chgrp", "chattr", "setfacl"):
            operands, options = _operands(args)
            if name in ("chmod", "chown", "chgrp") and "--reference" not in options:
                operands = operands[1:]
            elif name == "chattr":
                operands = [w for w in operands if not w.value.startswith(("+", "="))]
            if any(_is_root_like(p) for w in operands for p in self.paths(w)):
                self.flag("chmod-root", command)
        elif name == "shred":
            operands, _ = _operands(args, _OPTION_VALUES["shred"])
            paths = [p for w in operands for p in self.paths(w)]
            if any(root == "/" and parts and _match("dev", parts[0]) for root, parts in paths):
                self.flag("disk-format", command)
        elif _DISK_TOOLS.fullmatch(name):
            if not any(w.value in ("-l", "--list") for w in args):
                self.flag("disk-format", command)
        elif name in _POWER:
            self.flag("shutdown", command)
        elif name in ("init", "telinit"):
            if any(w.value in ("0", "6", "1", "s", "S") for w in args):
                self.flag("shutdown", command)
        elif name in ("systemctl", "loginctl"):
            if any(w.value in _SYSTEMCTL_POWER for w in args):
                self.flag("shutdown", command)
        elif name == "kill":
            self.kill(args, command)
        elif name in ("killall", "killall5"):
            self.flag("kill-all", command)
        elif name == "pkill":
            self.pkill(args, command)
        elif name in ("alias", "unalias"):
            if args:
                self.flag("alias", command)
        elif name == "shopt":
            if any(w.value == "expand_aliases" for w in args):
                self.flag("alias", command)
        elif name == "git" and any(
            w.value.lower().startswith(("core.hookspath", "core.fsmonitor")) for w in args
        ):
            self.flag("write-git-hooks", command)

    def rm(self, args: Sequence[Word], command: SimpleCommand) -> None:
        recursive = False
        operands: list[Word] = []
        options_done = False
        for word in args:
            value = word.value
            if options_done:
                operands.append(word)
            elif word.static and value == "--":
                options_done = True
            elif word.static and value.startswith("--"):
                recursive = recursive or value == "--recursive"
                if value == "--no-preserve-root":
                    self.flag("rm-root", command)
            elif word.static and value.startswith("-") and len(value) > 1:
                recursive = recursive or "r" in value or "R" in value
            elif (
                word.parts
                and word.parts[0].kind in ("parameter", "command", "arithmetic", "unknown")
                and not word.parts[0].quoted
            ):
                # `rm $FLAGS x`: word splitting may make options, -r among them.
                recursive = True
                operands.append(word)
            else:
                operands.append(word)
        # Without a terminal, `rm -r` asks nothing: -f is not needed to do damage.
        if recursive:
            self.deletes(operands, command)

    def deletes(self, operands: Sequence[Word], command: SimpleCommand) -> None:
        for word in operands:
            if any(_is_root_like(p) for p in self.paths(word)):
                self.flag("rm-root", command)
                return
            # After `cd "$D"` a relative target is anywhere: `cd $D && rm -rf *`
            # with D empty deletes the home folder.
            relative_unknown = self.cwd is None and not word.patterns()[0].startswith(("/", "~"))
            if relative_unknown or self.variable_target(word):
                self.flag("rm-variable-target", command)
                return

    @staticmethod
    def variable_target(word: Word) -> bool:
        """Whether a target starts with a value only known at run time and adds nothing safe.

        `"$DIR"`, `$DIR/`, `"$DIR"/*` and `$(pwd)` are `/` or `/*` when the
        value is empty (Steam's `rm -rf "$STEAMROOT/"*`); `"$DIR/build"` is not.
        """
        for parts in word.alternatives():
            if not parts or parts[0].kind not in ("parameter", "command", "unknown", "arithmetic"):
                continue
            if glob_pattern(parts[:1]) == "~":
                continue
            rest = glob_pattern(parts[1:])
            if not rest or _is_root_like(_split("/" + rest)):
                return True
        return False

    def find(self, args: Sequence[Word], command: SimpleCommand) -> None:
        starts: list[Word] = []
        for word in args:
            if word.value.startswith("-") or word.value in ("(", "!"):
                break
            starts.append(word)
        if not starts:
            starts = [Word.of(".")]
        if any(w.value == "-delete" for w in args):
            self.deletes(starts, command)
            for word in starts:
                self.write_target(word, command)

    def kill(self, args: Sequence[Word], command: SimpleCommand) -> None:
        i = 0
        signal_given = False
        pids: Sequence[Word] = ()
        while i < len(args):
            value = args[i].value
            if value == "--":
                pids = args[i + 1 :]
                break
            if value in ("-s", "-n"):
                i += 2
                signal_given = True
                continue
            if value.startswith("-") and not signal_given and value not in ("-l", "-L"):
                signal_given = True
                i += 1
                continue
            pids = args[i:]
            break
        if any(w.value in ("-1", "1") for w in pids):
            self.flag("kill-all", command)

    def pkill(self, args: Sequence[Word], command: SimpleCommand) -> None:
        operands, options = _operands(args, "gGPsStuUF")
        if "-f" in options or "--full" in options:
            self.flag("kill-all", command)
            return
        for word in operands:
            try:
                pattern = re.compile(word.value)
            except re.error:
                continue
            # A pattern that matches any name (`.`, `.*`, `^`) kills everything.
            if all(pattern.search(name) for name in _SAMPLE_PROCESSES):
                self.flag("kill-all", command)
                return

    def change_dir(self, name: str, args: Sequence[Word]) -> None:
        operands = [
            w for w in args if not (w.static and w.value.startswith("-") and w.value != "-")
        ]
        if name == "popd":
            self.cwd = None
        elif not operands:
            self.cwd = ("~", ())
        elif operands[0].static and operands[0].value == "-":
            self.cwd = None
        else:
            patterns = operands[0].patterns()
            if len(patterns) != 1 or "*" in patterns[0] or not operands[0].literal:
                self.cwd = None
            else:
                self.cwd = self.resolve(patterns[0])

    # writes

    def write_operands(self, name: str, args: Sequence[Word]) -> list[Word]:
        """The paths a command writes to, as far as its arguments say."""
        values = _OPTION_VALUES.get(name, "")
        if name in _ALL_OPERANDS or name in _EDITORS:
            operands, options = _operands(args, values)
            found = [w for w in operands if not w.value.startswith("+")]
            if name == "mv" and "-t" in options:
                found.append(options["-t"])
            return found
        if name in ("cp", "install", "ln", "rsync"):
            operands, options = _operands(args, values)
            targets = [options[k] for k in ("-t", "--target-directory") if k in options]
            if name == "ln":
                # The link's target counts too: `ln -s ~/.ssh/authorized_keys k` and
                # then `echo ... >> k` writes into ~/.ssh.
                return [*operands, *targets]
            if targets:
                return targets
            if name == "install" and "-d" in options:
                return operands
            return operands[-1:] if len(operands) >= 2 else []
        if name in ("chmod", "chown", "chgrp", "chattr"):
            operands, options = _operands(args)
            if name != "chattr" and "--reference" not in options:
                return operands[1:]
            return [w for w in operands if not w.value.startswith(("+", "="))]
        if name in ("sed", "perl"):
            operands, options = _operands(args, values)
            in_place = any(k.startswith("--in-place") or k == "-i" for k in options)
            if not in_place:
                return []
            if name == "sed" and "-e" not in options and "-f" not in options:
                return operands[1:]
            return operands
        if name in _COMPRESSORS:
            operands, options = _operands(args)
            if any(k in options for k in ("-c", "--stdout", "-t", "--test", "-l", "--list")):
                return []
            return operands
        if name == "dd":
            return [
                Word.of(w.value[3:]) if w.static else w for w in args if w.value.startswith("of=")
            ]
        _, options = _operands(args, values)
        keys = {
            "curl": ("-o", "--output", "--output-dir"),
            "wget": ("-O", "--output-document", "-P", "--directory-prefix"),
            "sort": ("-o", "--output"),
            "unzip": ("-d",),
            "ssh-keygen": ("-f",),
        }.get(name, ())
        if name == "tar" and self.tar_extracts(args):
            keys = ("-C", "--directory")
        return [options[k] for k in keys if k in options and options[k].value not in ("", "-")]

    @staticmethod
    def tar_extracts(args: Sequence[Word]) -> bool:
        if not args:
            return False
        first = args[0].value
        if not first.startswith("-") and "x" in first:
            return True
        return any(
            w.value in ("--extract", "--get")
            or (w.value.startswith("-") and not w.value.startswith("--") and "x" in w.value)
            for w in args
        )

    def write_target(self, word: Word, command: SimpleCommand, *, content: bool = True) -> None:
        for path in self.paths(word):
            self.write_rules(path, command)
            if content:
                # Only a write of what a file holds makes running it later new code;
                # `chmod +x build.sh && ./build.sh` runs what was there.
                self.written.add(path)

    def write_rules(self, path: _Path, command: SimpleCommand | str) -> None:
        root, parts = path
        if root == "/" and parts and _match("etc", parts[0]):
            self.flag("write-etc", command)
        if any(_match(".ssh", p) for p in parts):
            self.flag("write-ssh", command)
        for index in range(len(parts) - 1):
            if _match(".git", parts[index]) and _match("hooks", parts[index + 1]):
                self.flag("write-git-hooks", command)
                break
            if (
                index == len(parts) - 2
                and _match(".git", parts[index])
                and _match("config", parts[index + 1])
            ):
                # core.hooksPath, core.fsmonitor, core.sshCommand, aliases: code git runs.
                self.flag("write-git-hooks", command)
                break
        if self.startup_file(path):
            self.flag("write-shell-startup", command)
        if root == "/" and parts and _match("dev", parts[0]):
            benign = len(parts) >= 2 and (
                (len(parts) == 2 and parts[1] in _BENIGN_DEVICES) or parts[1] in _BENIGN_DEVICE_DIRS
            )
            if not benign:
                self.flag("disk-write", command)
        if (
            root == "/"
            and len(parts) == 2
            and _match("proc", parts[0])
            and (_match("sysrq-trigger", parts[1]))
        ):
            self.flag("shutdown", command)

    @staticmethod
    def startup_file(path: _Path) -> bool:
        root, parts = path
        if root == "~":
            rest = parts
        elif root == "/" and len(parts) >= 2 and _match("root", parts[0]):
            rest = parts[1:]
        elif root == "/" and len(parts) >= 3 and _match("home", parts[0]):
            rest = parts[2:]
        else:
            return False
        if len(rest) == 1:
            return any(_match(name, rest[0]) for name in _STARTUP_FILES)
        return len(rest) == 3 and rest[:2] == (".config", "fish")

    def run_written(self, command: SimpleCommand) -> None:
        if not self.written:
            return
        for word in command.words:
            if not word.static:
                continue
            path = self.resolve(escape_glob(word.value))
            if path is not None and path in self.written:
                self.flag("run-written-file", command)
                return

    # across commands

    def fork_bombs(self, commands: Sequence[SimpleCommand]) -> None:
        defined = _functions(commands)
        if not defined:
            return
        calls: dict[str, set[str]] = {}
        spawning: list[tuple[str, str, SimpleCommand]] = []
        for command in commands:
            name = command.name
            if not command.functions or name not in defined or not command.name_literal:
                continue
            caller = command.functions[-1]
            calls.setdefault(caller, set()).add(name)
            if command.background or command.pipeline is not None:
                spawning.append((caller, name, command))
        for caller, callee, command in spawning:
            if _reaches(calls, callee, caller):
                self.flag("fork-bomb", f"{command.describe()} (in function {caller!r})")
                return


def _reaches(calls: Mapping[str, set[str]], start: str, goal: str) -> bool:
    seen: set[str] = set()
    todo = [start]
    while todo:
        name = todo.pop()
        if name == goal:
            return True
        if name in seen:
            continue
        seen.add(name)
        todo.extend(calls.get(name, ()))
    return False
