"""Commands: immutable values that say what to run, not where.

`Command.shell(script)`, `Command.exec(argv)`, `Command.read_file(path)` and
`Command.write_file(path, content)` build the four variants `Shell`, `Exec`,
`ReadFile` and `WriteFile`. The `with_*` methods return changed copies.
Consumers treat the set of variants as open: a wrapper that meets a variant it
does not know passes it on or refuses it.
"""

from __future__ import annotations

import datetime
import fnmatch
import os
from collections.abc import Iterable, Iterator, Mapping
from typing import Final, Self, TypeAlias

import attrs

from executor._core.errors import ExecutorError, InvalidArgument

StrPath: TypeAlias = str | os.PathLike[str]
Timeout: TypeAlias = float | int | datetime.timedelta | None


def _no_nul(value: str, what: str) -> str:
    if "\0" in value:
        raise InvalidArgument(value, f"{what} must not contain a NUL byte")
    try:
        # What the OS will be handed: UTF-8, or bytes a listing decoded with surrogateescape.
        os.fsencode(value)
    except UnicodeEncodeError:
        raise InvalidArgument(value, f"{what} must be valid Unicode (a lone surrogate)") from None
    return value


def _encode(value: str, what: str) -> bytes:
    try:
        return value.encode()
    except UnicodeEncodeError:
        raise InvalidArgument(value, f"{what} must be valid Unicode (a lone surrogate)") from None


def _path(value: StrPath) -> str:
    path = os.fspath(value)
    if not isinstance(path, str):
        raise TypeError(f"path must be str or os.PathLike[str], got {type(path).__name__}")
    if not path:
        raise InvalidArgument(path, "path must not be empty")
    return _no_nul(path, "a path")


def _optional_path(value: StrPath | None) -> str | None:
    return None if value is None else _path(value)


def timeout_seconds(value: Timeout) -> float | None:
    """A timeout as seconds (`None`: none), checked to be positive.

    Raises:
        InvalidArgument: It is zero or negative.

    """
    if value is None:
        return None
    seconds = value.total_seconds() if isinstance(value, datetime.timedelta) else float(value)
    if not seconds > 0:
        raise InvalidArgument(value, "a timeout must be a positive number of seconds")
    return seconds


class Env(Mapping[str, str]):
    """An immutable, hashable mapping of environment variables."""

    __slots__ = ("_items",)

    def __init__(self, items: Mapping[str, str] | Iterable[tuple[str, str]] = ()) -> None:
        pairs = dict(items)
        for key, value in pairs.items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise TypeError(f"environment entries must be str, got {key!r}={value!r}")
            if not key or "=" in key:
                raise InvalidArgument(key, "a variable name must be non-empty and without '='")
            _no_nul(key, "a variable name")
            _no_nul(value, "a variable's value")
        self._items = pairs

    def __getitem__(self, key: str) -> str:
        return self._items[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return hash(frozenset(self._items.items()))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Mapping):
            return self._items == dict(other)
        return NotImplemented

    def __repr__(self) -> str:
        return f"Env({self._items!r})"


def _env(value: Mapping[str, str] | Env) -> Env:
    return value if isinstance(value, Env) else Env(value)


def _names(value: Iterable[str]) -> tuple[str, ...]:
    names = (value,) if isinstance(value, str) else tuple(value)
    for name in names:
        if not isinstance(name, str) or not name:
            raise InvalidArgument(name, "a variable name or pattern must be a non-empty string")
    return names


def _stdin(value: bytes | str | None) -> bytes | None:
    if isinstance(value, str):
        return _encode(value, "stdin")
    if value is None or isinstance(value, bytes):
        return value
    return bytes(value)


@attrs.frozen(kw_only=True)
class Command:
    """A command for an executor; build one with the static constructors.

    Attributes:
        current_dir: Where the command runs. A relative one joins onto the
            executor's working directory; `None` means that directory itself.
        timeout: Seconds before the command is killed; `None` leaves it to the
            executor's default. A command's own timeout wins, also when longer.
        idle_timeout: Seconds the command may go without printing anything
            before it is killed (`TimedOut` with `idle` set); `None`: no limit.
            A command that keeps printing runs on, to its `timeout`.
        env: Variables set for this command, over the executor's environment.
        env_remove: Variables removed from the executor's environment before
            `env` is applied: names, or patterns with `*` and `?` matched
            without regard to case (`*TOKEN*`).
        env_keep: Names that `env_remove` patterns leave alone.
        stdin: Bytes written to the command's standard input; `None` gives it
            an empty one, so nothing ever waits on a terminal.

    """

    current_dir: str | None = attrs.field(default=None, converter=_optional_path)
    timeout: float | None = attrs.field(default=None, converter=timeout_seconds)
    idle_timeout: float | None = attrs.field(default=None, converter=timeout_seconds)
    env: Env = attrs.field(factory=Env, converter=_env)
    env_remove: tuple[str, ...] = attrs.field(default=(), converter=_names)
    env_keep: tuple[str, ...] = attrs.field(default=(), converter=_names)
    stdin: bytes | None = attrs.field(default=None, converter=_stdin)

    @staticmethod
    def shell(script: str, *, login: bool | None = None) -> Shell:
        """A script run with `sh -c`, or by the interpreter its `#!` line names.

        `login=True` runs it in a login shell instead, `bash --login -c`, so
        `/etc/profile` and the profile files apply (`None`: as the executor's
        `login` option says).
        """
        return Shell(script, login=login)

    @staticmethod
    def exec(argv: Iterable[str]) -> Exec:
        """A program and its arguments, run without any shell."""
        return Exec(argv)

    @staticmethod
    def read_file(path: StrPath) -> ReadFile:
        """Read a file; no shell sees the path."""
        return ReadFile(path)

    @staticmethod
    def write_file(path: StrPath, content: str | bytes) -> WriteFile:
        """Write a file atomically, creating its parents; no shell sees the path."""
        return WriteFile(path, content)

    def with_current_dir(self, path: StrPath | None) -> Self:
        """Return a copy that runs in `path`."""
        return attrs.evolve(self, current_dir=path)

    def with_timeout(self, timeout: Timeout) -> Self:
        """Return a copy with its own timeout (seconds or a timedelta; `None` for the default)."""
        return attrs.evolve(self, timeout=timeout)

    def with_idle_timeout(self, timeout: Timeout) -> Self:
        """Return a copy killed once it prints nothing for `timeout` (seconds; `None`: never)."""
        return attrs.evolve(self, idle_timeout=timeout)

    def with_env(self, env: Mapping[str, str]) -> Self:
        """Return a copy with these variables added to its own environment."""
        return attrs.evolve(self, env=Env({**self.env, **env}))

    def with_env_removed(self, *patterns: str, keep: Iterable[str] = ()) -> Self:
        """Return a copy that removes these variables (names or `*` patterns) except `keep`."""
        return attrs.evolve(
            self,
            env_remove=(*self.env_remove, *patterns),
            env_keep=(*self.env_keep, *keep),
        )

    def environment_over(self, base: Mapping[str, str]) -> dict[str, str]:
        """Apply this command's `env_remove`, `env_keep` and `env` to `base`."""
        env = dict(base)
        if self.env_remove:
            keep = set(self.env_keep)
            patterns = [pattern.upper() for pattern in self.env_remove]
            for name in list(env):
                if name not in keep and any(
                    fnmatch.fnmatchcase(name.upper(), pattern) for pattern in patterns
                ):
                    del env[name]
        env.update(self.env)
        return env

    def with_stdin(self, data: bytes | str | None) -> Self:
        """Return a copy whose standard input is `data` (text is encoded as UTF-8)."""
        return attrs.evolve(self, stdin=data)


def _script(value: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"a shell script must be str, got {type(value).__name__}")
    return _no_nul(value, "a shell script")


def _argv(value: Iterable[str]) -> tuple[str, ...]:
    if isinstance(value, str):
        raise TypeError("argv must be a sequence of strings, not one string; use Command.shell")
    argv = tuple(value)
    if not argv:
        raise InvalidArgument(argv, "argv must name a program")
    for arg in argv:
        if not isinstance(arg, str):
            raise TypeError(f"argv entries must be str, got {arg!r}")
        _no_nul(arg, "an argument")
    if not argv[0]:
        raise InvalidArgument(argv, "the program name must not be empty")
    return argv


def _content(value: str | bytes) -> bytes:
    if isinstance(value, str):
        return _encode(value, "file content")
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    raise TypeError(f"file content must be str or bytes, got {type(value).__name__}")


@attrs.frozen(kw_only=True)
class ShebangScript:
    """A script whose first line names its interpreter.

    Attributes:
        program: The text after `#!` up to the first whitespace.
        argument: The trimmed rest of that line, passed as one argument, if any.
        body: Everything after the first newline; it goes to the interpreter's stdin.

    """

    program: str
    argument: str | None
    body: bytes

    @property
    def argv(self) -> tuple[str, ...]:
        """The interpreter's argv."""
        if self.argument:
            return (self.program, self.argument)
        return (self.program,)


@attrs.frozen
class Shell(Command):
    """A shell script, run with `sh -c`.

    A script whose first line starts with `#!` runs that interpreter instead:
    the text up to the first whitespace is the program, the trimmed rest of the
    line is one argument, and the body after the first newline is its stdin.
    """

    script: str = attrs.field(converter=_script)
    login: bool | None = attrs.field(default=None, kw_only=True)

    def __attrs_post_init__(self) -> None:
        # A bad #! line is the caller's error: say so when the command is built.
        if self.shebang() is not None and self.login:
            raise InvalidArgument(
                self.script.partition("\n")[0], "a #! script names its own interpreter: no login"
            )

    def shebang(self) -> ShebangScript | None:
        """The parsed `#!` line, or `None` for a plain `sh -c` script."""
        if not self.script.startswith("#!"):
            return None
        line, _, body = self.script.partition("\n")
        words = line[2:].strip().split(maxsplit=1)
        if not words:
            raise InvalidArgument(line, "a #! line must name an interpreter")
        argument = words[1].strip() if len(words) > 1 else None
        return ShebangScript(program=words[0], argument=argument, body=body.encode())


@attrs.frozen
class Exec(Command):
    """A program and its arguments, run without a shell."""

    argv: tuple[str, ...] = attrs.field(converter=_argv)


@attrs.frozen
class ReadFile(Command):
    """Read a file's bytes; they come back as stdout."""

    path: str = attrs.field(converter=_path)


@attrs.frozen
class WriteFile(Command):
    """Write bytes to a file: parents created, replaced atomically."""

    path: str = attrs.field(converter=_path)
    content: bytes = attrs.field(converter=_content, repr=lambda c: f"<{len(c)} bytes>")


NO_LOGIN_SHELL: Final = "executor: login=True runs the script in bash --login, and there is no bash"
"""What a login-shell command prints on stderr (exit code 127) where there is no bash."""
# Runs "$1" in a login bash, or says plainly why it cannot.
_LOGIN = (
    "command -v bash >/dev/null 2>&1 || { printf '%s\\n' \"$2\" >&2; exit 127; }; "
    'exec bash --login -c "$1"'
)


def _login_argv(script: str) -> tuple[str, ...]:
    return ("/bin/sh", "-c", _LOGIN, "sh", script, NO_LOGIN_SHELL)


def process_argv(cmd: Shell | Exec, *, login: bool = False) -> tuple[tuple[str, ...], bytes | None]:
    """The argv that runs `cmd` as a process, and the bytes for its stdin.

    A plain script runs as `/bin/sh -c SCRIPT` with the command's stdin, or
    in `bash --login -c SCRIPT` when it asks for a login shell (`cmd.login`,
    else `login`); a `#!` script runs its interpreter with the body as stdin.

    Raises:
        ExecutorError: A `#!` script was given stdin of its own.

    """
    if isinstance(cmd, Exec):
        return cmd.argv, cmd.stdin
    shebang = cmd.shebang()
    if shebang is None:
        if cmd.login if cmd.login is not None else login:
            return _login_argv(cmd.script), cmd.stdin
        return ("/bin/sh", "-c", cmd.script), cmd.stdin
    if cmd.stdin is not None:
        raise ExecutorError(
            "a #! script is written to its interpreter's stdin, "
            "so it cannot be given stdin of its own"
        )
    return shebang.argv, shebang.body


def session_argv(cmd: Shell | Exec, *, login: bool = False) -> tuple[str, ...]:
    """The argv that runs `cmd` as a session, whose stdin stays open to the caller.

    Raises:
        ExecutorError: `cmd` is a `#!` script: its body is the interpreter's stdin.

    """
    if isinstance(cmd, Exec):
        return cmd.argv
    if cmd.shebang() is not None:
        raise ExecutorError(
            "a #! script is written to its interpreter's stdin, so it cannot run as a session"
        )
    if cmd.login if cmd.login is not None else login:
        return _login_argv(cmd.script)
    return ("/bin/sh", "-c", cmd.script)
