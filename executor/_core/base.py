"""The core's interfaces: `ToolExecutor`, the `PersistentShell` it gives, the wrapper bases.

A backend implements `ToolExecutor`'s two abstract methods and gets the
rest; `CommandRunner` is what the backends that run commands themselves
share; `WrappedExecutor` and `CheckedExecutor` are what every wrapper and
policy builds on. They live in one module because they name each other (a
wrapper's `shell()` wraps the shell, `PersistentShell.wrap` takes the
wrapper). What `shell()`, `scoped()` and `read_only()` build lives in layers
above the core (`executor._shells`, `executor._wrappers`), which fill the
core's registry (`executor._core.registry`) that those methods read.
"""

from __future__ import annotations

import abc
import errno
import inspect
import os
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, Protocol, TypeAlias, TypeVar, cast

import anyio
import attrs

from executor._core import registry
from executor._core.cleanup import run_to_completion
from executor._core.commands import (
    NO_LOGIN_SHELL,
    Command,
    Env,
    Exec,
    ReadFile,
    Shell,
    StrPath,
    Timeout,
    WriteFile,
    process_argv,
    session_argv,
    timeout_seconds,
)
from executor._core.errors import CommandError, ExecutorError, NonZeroExit, OutOfMemory
from executor._core.output import (
    Chunk,
    CommandOutput,
    Elision,
    OutputBuffer,
    ShellOutput,
    Sink,
    Stderr,
    count_newlines,
)
from executor._core.render import out_of_memory, signal_name
from executor._core.resource import AsyncResource
from executor._core.run import Run, drive
from executor._core.session import RunSession

if TYPE_CHECKING:
    from executor._core.jobs import Job, JobStatus
    from executor._core.session import ProcessSession

P = ParamSpec("P")
W = TypeVar("W", bound="ToolExecutor")


@attrs.frozen
class Watcher:
    """A sink a wrapper puts between its caller and the executor it wraps, to watch each chunk.

    A policy that redacts or observes output passes one of these down in
    place of its caller's sink, which it names (`caller`, `None` when the
    caller did not stream: `exec_cmd`). The backend keeps as much output as
    for the caller's own call: `stream_output_limit` applies only when the
    caller streams.
    """

    watch: Callable[[Chunk], Awaitable[None] | None]
    caller: Sink | None

    def __call__(self, chunk: Chunk) -> Awaitable[None] | None:
        return self.watch(chunk)


def caller_streams(sink: Sink | None) -> bool:
    """Whether a sink stands for a caller's own (not only for a wrapper's `Watcher`)."""
    while isinstance(sink, Watcher):
        sink = sink.caller
    return sink is not None


async def call_sink(sink: Sink, chunk: Chunk) -> None:
    """Hand `chunk` to `sink`, awaiting it if it is async."""
    result = sink(chunk)
    if inspect.isawaitable(result):
        await result


def failure_message(output: CommandOutput, *, memory_limit: int | None = None) -> str:
    """What a nonzero exit says: the code, or the signal that killed the command.

    After an OOM kill (`CommandOutput.oom_killed`) it says `out of memory`
    too, with `memory_limit` (the executor's, where it sets one) and the
    output's peak where known.
    """
    if output.signal is not None:
        message = f"command was killed by {signal_name(output.signal)}"
        cause = ": "
    else:
        message = f"command exited with code {output.exit_code}"
        cause = " after a process of it was killed: "
    if output.oom_killed:
        message += cause + out_of_memory(memory_limit, output.memory_peak)
    return message


async def report(sink: Sink | None, output: CommandOutput) -> None:
    """Hand every chunk of `output` to `sink` (if any), in order."""
    if sink is not None:
        for chunk in output.chunks:
            await call_sink(sink, chunk)


async def report_failure(sink: Sink | None, failure: CommandError) -> None:
    """Hand the output of a failure to `sink`: a sink sees every chunk, a failure's message too."""
    await report(sink, failure.output)


async def file_failure(
    shown: str, reason: str | OSError, started: float, sink: Sink | None
) -> NonZeroExit:
    """The failure of a file operation on `shown`, its message on stderr, reported to `sink`.

    `reason` is the words to give, or the error whose words they are.
    """
    if isinstance(reason, OSError):
        reason = reason.strerror or str(reason)
    message = f"{shown}: {reason}"
    output = CommandOutput(
        chunks=(Stderr(f"{message}\n".encode()),), duration=anyio.current_time() - started
    )
    failure = NonZeroExit(message, output)
    await report_failure(sink, failure)
    return failure


@attrs.frozen
class LoadedFile:
    """A text file found by `stream_files`.

    Attributes:
        path: Absolute, or relative to the working directory (and scope) of the
            executor that listed it, so it can be handed back to that executor.
        content: The file's text, decoded as UTF-8 (invalid bytes replaced).

    """

    path: str
    content: str


class ToolExecutor(AsyncResource):
    """Runs commands somewhere: a backend implements `exec_cmd` and `stream_files`.

    Everything else has a default built on those two: streaming that reports
    the chunks once the command is done, `shell()`, `scoped()`, `read_only()`,
    and an `async with` block that calls `aclose()`.
    """

    @abc.abstractmethod
    async def exec_cmd(self, cmd: Command) -> CommandOutput:
        """Run `cmd` to the end and return its output.

        Raises:
            NonZeroExit: The command failed (or a file operation did).
            TimedOut: It ran past its timeout; its process tree was killed.
            ExecutorError: The executor failed or refused.

        """

    async def exec_cmd_streaming(self, cmd: Command, sink: Sink) -> CommandOutput:
        """Run `cmd`, handing each chunk to `sink` as it is read.

        Returns and raises as `exec_cmd`. An exception raised by the sink stops
        the command and propagates. This default runs `exec_cmd` and reports the
        chunks when the command is done; backends that can stream override it.
        """
        try:
            output = await self.exec_cmd(cmd)
        except CommandError as error:
            await report_failure(sink, error)
            raise
        await report(sink, output)
        return output

    async def start(self, cmd: Command, *, pty: bool = False) -> ProcessSession:
        """Check `cmd` and return a session for it, to enter: `async with await ex.start(cmd)`.

        The process starts when the session is entered. With `pty=True` it
        runs on a pseudo-terminal (its controlling terminal). This default
        refuses; backends that run processes override it.

        Raises:
            PolicyDenied: A policy refused `cmd`.
            ExecutorError: This executor cannot start sessions, or not this command.

        """
        raise ExecutorError(f"{type(self).__name__} cannot start sessions")

    def shell(
        self,
        *,
        login: bool | None = None,
        cwd: StrPath | None = None,
        env: Mapping[str, str] | None = None,
    ) -> PersistentShell:
        """A persistent shell on this executor, to enter: `async with ex.shell() as sh`.

        Its state (working directory, variables, functions, aliases, options)
        carries from one `sh.run(...)` to the next; see `PersistentShell`.
        It runs as a session of this executor (`start`), so an executor
        without sessions refuses it when it is entered.

        Args:
            login: Run a login shell, which reads `/etc/profile` and the
                profile files (`None`: as the executor's `login` option says,
                where it has one; else not).
            cwd: Where it starts; relative paths join onto the working directory.
            env: Variables set in it at its start.

        """
        return cast(ShellMaker, _provided(registry.shell, "shell"))(
            self, login=bool(login), cwd=cwd, env=env
        )

    @abc.abstractmethod
    def stream_files(
        self, path: StrPath, extensions: Iterable[str] | None = None
    ) -> AsyncIterator[LoadedFile]:
        """Yield the text files below `path`, which is relative to the working directory.

        Respects `.gitignore`, `.ignore` and `.git/info/exclude` as ripgrep
        does, skips hidden entries and binary files, and follows no symlinks.

        Args:
            path: The folder to list.
            extensions: Keep only these extensions (`"py"` or `".py"`); `None`
                or empty keeps all.

        """

    @property
    def enforces_read_only(self) -> bool:
        """Whether the OS keeps this executor's commands from writing (a sandbox)."""
        return False

    def scoped(self, path: StrPath) -> CheckedExecutor:
        """Return an executor whose commands run in `path`, relative to this one's.

        It is a `ScopedExecutor(self, path)`, a `CheckedExecutor`: that class
        lives above the core (`executor._wrappers`), so it is typed as its base.
        """
        make = cast(ScopedMaker, _provided(registry.scoped, "scoped"))
        return make(self, path)

    def read_only(self) -> CheckedExecutor:
        """Return an executor that refuses every command that could write.

        It is a `ReadOnly(self)`, a `CheckedExecutor`: that class lives above
        the core (`executor._wrappers`), so it is typed as its base.
        """
        make = cast(ReadOnlyMaker, _provided(registry.read_only, "read_only"))
        return make(self)

    def with_policy(
        self,
        policy: Callable[Concatenate[ToolExecutor, P], W],
        /,
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> W:
        """Wrap this executor in `policy(self, *args, **kwargs)`; chains read left to right.

        ```python
        ex = LocalExecutor(repo).with_policy(CommandRules, deny=["git push"]).scoped("src")
        ```
        """
        return policy(self, *args, **kwargs)

    async def aclose(self) -> None:
        """Release what the executor holds and end every process it started.

        A second call does nothing. Most executors hold nothing, so this
        default has nothing to do.
        """


class PersistentShell(AsyncResource):
    """A long-lived shell from `ex.shell()`; `async with` it, then `run` commands in it.

    Entering starts the shell (raising as `exec_cmd` would if it cannot
    start); leaving, or `aclose()`, kills it and every job, and waits for
    them. A shell is entered and left in the same task.

    One command runs at a time: a second `run` (or `start_job`, which reads
    the shell's state) waits for the one running, first come first served;
    its timeout counts from when it starts. Jobs run beside the shell and
    each other. The package's shell (`executor._shells.shell`) says how it
    frames and interrupts commands.

    `PersistentShell(executor, ...)` builds the package's shell, as
    `executor.shell(...)` does (see `ShellMaker` for the options).
    """

    def __new__(cls, *args: Any, **kwargs: Any) -> PersistentShell:
        if cls is PersistentShell:
            # The interface named as a class builds the package's shell (whose
            # `__init__` Python then calls with the same arguments).
            cls = cast(type[PersistentShell], _provided(registry.shell, "shell"))
        return super().__new__(cls)

    def wrap(self, wrapper: WrappedExecutor) -> None:
        """Route every `run` and `start_job` through `wrapper`'s own checks and records.

        A wrapper's `shell()` calls this on the shell of the executor it
        wraps: each command then goes through a copy of `wrapper` whose inner
        executor is this shell, by the wrapper's `exec_cmd_streaming` (a run)
        or `start` (a job), as a command of `exec_cmd` would.

        Raises:
            ExecutorError: The shell was entered already.

        """
        raise NotImplementedError

    def change_start(self, change: Callable[[Command], Command]) -> None:
        """Change the command that starts the shell process (`Secrets` removes credentials).

        Raises:
            ExecutorError: The shell was entered already.

        """
        raise NotImplementedError

    async def aclose(self) -> None:
        """Kill every job and the shell, then wait till they are gone; a second call is harmless."""
        raise NotImplementedError

    @property
    def pid(self) -> int | None:
        """The pid of the running shell on its host (as `$$` says), if one runs."""
        raise NotImplementedError

    @property
    def state_lost(self) -> bool:
        """Whether the last `run` ran in a fresh shell that replaced a lost one."""
        raise NotImplementedError

    @property
    def restarts(self) -> int:
        """How many times a fresh shell replaced one that had ended."""
        raise NotImplementedError

    async def run(
        self,
        command: str,
        *,
        timeout: Timeout = None,
        stdin: str | bytes | None = None,
        sink: Sink | None = None,
        idle_timeout: Timeout = None,
    ) -> ShellOutput:
        """Run `command` in the shell and return its own output.

        Args:
            command: A shell script, run as typed at the prompt (it may span lines).
            timeout: Seconds before it is interrupted (the shell's default if `None`).
            idle_timeout: Seconds it may print nothing before it is interrupted
                as a timeout interrupts it (`TimedOut` with `idle` set); `None`: no limit.
            stdin: Its input, then end of file; without it, it reads end of file at once.
            sink: Called with each chunk of its output as it is read.

        Raises:
            NonZeroExit: It exited with a code other than 0.
            TimedOut: It ran past `timeout` and was interrupted.
            ShellExited: It ended the shell (or the shell died while it ran).
            PolicyDenied: A policy of the executor refused it; nothing ran.
            ExecutorError: The shell is closed, or could not start.

        """
        raise NotImplementedError

    async def start_job(self, command: str, *, timeout: Timeout = None) -> Job:
        """Start `command` as a background job beside the shell and return its handle.

        The job is a process of its own (a session of the executor), started
        in the shell's current working directory with its exported variables,
        functions and aliases (as they are when the job starts; plain
        variables and options are not carried). It runs until it ends, is
        killed, or the shell is closed; a shell restart leaves it running.

        Args:
            command: The shell script to run.
            timeout: Seconds before the job is killed (`None`: it runs until it ends).

        Raises:
            PolicyDenied: A policy of the executor refused it.
            ExecutorError: The shell is closed, or the job could not start.

        """
        raise NotImplementedError

    def jobs(self) -> list[JobStatus]:
        """Every job this shell started, in start order, ended ones too.

        Of the ended jobs whose output has all been read, only the newest 200
        are remembered: a shell that starts jobs for hours stays its size.
        """
        raise NotImplementedError

    def job(self, job_id: str) -> Job:
        """The job with this id.

        Raises:
            ExecutorError: No job of this shell has that id.

        """
        raise NotImplementedError


class WrappedExecutor(ToolExecutor):
    """An executor that forwards everything to `inner`; subclasses override one thing.

    Forwarding covers streaming, file listing, `enforces_read_only` and the
    context (`aclose`), so a wrapper that overrides only `exec_cmd`-side checks
    still streams and closes like the executor it wraps.
    """

    def __init__(self, inner: ToolExecutor) -> None:
        self.inner = inner

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.inner!r})"

    async def exec_cmd(self, cmd: Command) -> CommandOutput:
        """Run `cmd` on the inner executor."""
        return await self.inner.exec_cmd(cmd)

    async def exec_cmd_streaming(self, cmd: Command, sink: Sink) -> CommandOutput:
        """Run `cmd` on the inner executor, streaming to `sink`."""
        return await self.inner.exec_cmd_streaming(cmd, sink)

    async def start(self, cmd: Command, *, pty: bool = False) -> ProcessSession:
        """Start a session for `cmd` on the inner executor."""
        return await self.inner.start(cmd, pty=pty)

    def stream_files(
        self, path: StrPath, extensions: Iterable[str] | None = None
    ) -> AsyncIterator[LoadedFile]:
        """List files through the inner executor."""
        return self.inner.stream_files(path, extensions)

    def shell(
        self,
        *,
        login: bool | None = None,
        cwd: StrPath | None = None,
        env: Mapping[str, str] | None = None,
    ) -> PersistentShell:
        """The inner executor's shell, each `run` and job going through this wrapper.

        Each command goes through a copy of this wrapper whose inner executor
        is the shell (`PersistentShell.wrap`): a run by `exec_cmd_streaming`
        (or `exec_cmd`), a job by `start`, so a wrapper's checks and records
        apply to them as to any command.
        """
        shell = self.inner.shell(login=login, cwd=cwd, env=env)
        shell.wrap(self)
        return shell

    @property
    def enforces_read_only(self) -> bool:
        """Whether the inner executor's OS keeps commands from writing."""
        return self.inner.enforces_read_only

    async def aclose(self) -> None:
        """Close the inner executor."""
        await self.inner.aclose()


class CheckedExecutor(WrappedExecutor):
    """A wrapper that looks at each command before the inner executor runs it.

    Subclasses override `check`, which returns the command to run (the same,
    or a changed copy) or raises `PolicyDenied`; `exec_cmd`,
    `exec_cmd_streaming` and `start` all go through it, so a policy cannot be
    bypassed by streaming or by a session.
    """

    async def check(self, cmd: Command) -> Command:
        """Return the command to run in place of `cmd`, or raise `PolicyDenied`."""
        return cmd

    async def exec_cmd(self, cmd: Command) -> CommandOutput:
        """Check `cmd`, then run it on the inner executor."""
        return await self.inner.exec_cmd(await self.check(cmd))

    async def exec_cmd_streaming(self, cmd: Command, sink: Sink) -> CommandOutput:
        """Check `cmd`, then run it on the inner executor, streaming to `sink`."""
        return await self.inner.exec_cmd_streaming(await self.check(cmd), sink)

    async def start(self, cmd: Command, *, pty: bool = False) -> ProcessSession:
        """Check `cmd`, then start a session for it on the inner executor."""
        return await self.inner.start(await self.check(cmd), pty=pty)


class ShellMaker(Protocol):
    """Builds the shell of `ToolExecutor.shell()`; nothing starts before it is entered.

    `executor._shells` provides it (see `executor._core.registry`). The
    options: `login` runs a login shell; `cwd` and `env` say where and with
    what it starts; `default_timeout` is the timeout of a `run` that gives
    none; `kill_grace` the seconds between SIGINT, SIGTERM and SIGKILL when a
    command is interrupted; `output_buffer` makes the buffer for one
    command's output (its cap); `job_buffer` is the bytes of unread output a
    job keeps.
    """

    def __call__(
        self,
        executor: ToolExecutor,
        *,
        login: bool = False,
        cwd: StrPath | None = None,
        env: Mapping[str, str] | None = None,
        default_timeout: float | None = None,
        kill_grace: float = 1.0,
        output_buffer: Callable[[], OutputBuffer] | None = None,
        job_buffer: int | None = None,
    ) -> PersistentShell: ...


ScopedMaker: TypeAlias = Callable[[ToolExecutor, StrPath], CheckedExecutor]
"""Builds the executor of `ToolExecutor.scoped()` (`executor._wrappers` provides it)."""

ReadOnlyMaker: TypeAlias = Callable[[ToolExecutor], CheckedExecutor]
"""Builds the executor of `ToolExecutor.read_only()` (`executor._wrappers` provides it)."""

# Where each registry slot is filled, for the error when it is not.
_PROVIDERS = {
    "shell": "executor._shells",
    "scoped": "executor._wrappers",
    "read_only": "executor._wrappers",
}


def _provided(load: Callable[[], object] | None, slot: str) -> object:
    """What a slot of the registry loads (`load`, from `registry.<slot>`), or why nothing does."""
    if load is None:
        raise ExecutorError(
            f"ToolExecutor.{slot}() is built by {_PROVIDERS[slot]}, which was not imported: "
            "importing it fills executor._core.registry (executor/__init__.py does, "
            "before any other module of the package)"
        )
    return load()


DEFAULT_OUTPUT_LIMIT = 32 << 20
"""Bytes of output a command keeps in memory unless told otherwise: a guard against floods."""

DEFAULT_STREAM_OUTPUT_LIMIT = 4 << 20
"""Bytes of output a streamed command (one with a sink) keeps in memory unless told otherwise.

A sink sees every byte as it is read, so what the returned output keeps is
a second copy: small by default, so a flood streamed for minutes grows the
process by a few MiB, not by `DEFAULT_OUTPUT_LIMIT`. `spill=` keeps the
whole of a cut output on disk.
"""


def names(values: Iterable[str] | None) -> tuple[str, ...]:
    """Variable names as given: one, several, or none (`None`)."""
    if values is None:
        return ()
    if isinstance(values, str):
        return (values,)
    return tuple(values)


def _variables(values: Mapping[str, str] | None) -> Env:
    return Env(values or {})


def non_negative(_: object, attribute: attrs.Attribute[float], value: float) -> None:
    """An attrs validator: `value` is zero or more."""
    if not value >= 0:
        raise ValueError(f"{attribute.name} must be >= 0, got {value!r}")


def _limit(_: object, attribute: attrs.Attribute[Any], value: int | None) -> None:
    if value is not None and value < 0:
        raise ValueError(f"{attribute.name} must be >= 0 or None, got {value!r}")


# Where `spill=True` keeps whole outputs: one folder per user, kept until removed.
_SPILL_DIR = os.path.join(tempfile.gettempdir(), f"executor-output-{os.getuid()}")


def _spill_folder(value: StrPath | bool) -> str | bool:
    return value if isinstance(value, bool) else os.fspath(value)


class FileBuffer:
    """A file's content as it is read: whole, or a clear failure; never head and tail glued.

    Without a sink every block is kept, however large the file, unless it
    passes `read_limit`: then the read fails (an `OSError` EFBIG naming the
    size and the limit, which the backends report as a file failure). With a
    sink the blocks go to the sink as read and the output keeps them only
    while they fit in `keep` bytes; past that it keeps none, and says so
    (`truncated`, with an `Elision` at 0 counting every byte), so what it
    holds is the whole file or nothing of it.
    """

    def __init__(self, shown: str, *, read_limit: int | None, keep: int | None) -> None:
        self._shown = shown
        self._read_limit = read_limit
        self._keep = keep
        self._chunks: list[Chunk] = []
        self._read = 0
        self._lines = 0
        self._dropped = False

    def check_size(self, size: int) -> None:
        """Fail before reading when the file's size is past `read_limit`."""
        if self._read_limit is not None and size > self._read_limit:
            raise self._too_large(f"{size} bytes")

    def _too_large(self, size: str) -> OSError:
        return OSError(
            errno.EFBIG,
            f"the file has {size}, more than the read limit of {self._read_limit} bytes "
            "(read_limit); nothing of it was returned",
        )

    def append(self, chunk: Chunk) -> None:
        """Take the next block, failing if the file grew past `read_limit`."""
        self._read += len(chunk.data)
        if self._read_limit is not None and self._read > self._read_limit:
            raise self._too_large(f"more than {self._read_limit} bytes")
        if self._keep is None:
            self._chunks.append(chunk)
            return
        if self._dropped or self._read > self._keep:
            self._lines += count_newlines(chunk.data)
            if not self._dropped:
                self._dropped = True
                self._lines += sum(count_newlines(kept.data) for kept in self._chunks)
                self._chunks.clear()
            return
        self._chunks.append(chunk)

    def output(self, *, duration: float) -> CommandOutput:
        """The file read so far as an output (no exit code: a file command)."""
        elided = Elision(at=0, bytes=self._read, lines=self._lines) if self._dropped else None
        return CommandOutput(
            chunks=tuple(self._chunks), duration=duration, truncated=self._dropped, elided=elided
        )


# A login-shell command's words where there is no bash (see `process_argv`).
_NO_BASH = NO_LOGIN_SHELL.encode()


@attrs.define(eq=False)
class CommandRunner(ToolExecutor):
    """A backend that runs commands itself (local, Docker, SSH): one dispatch for them all.

    `exec_cmd` and `exec_cmd_streaming` check that the executor is open and
    hand each kind of command to the subclass: shell and argv commands to
    `_process` (as `process_argv` spells them), file reads and writes to
    `_read_file` and `_write_file`; `_checked` turns a finished command's
    exit into its error. It holds the options every backend takes (each
    backend's docstring says what they mean there), and the subclass may
    extend `_check_open` and `_killed_by_close`.
    """

    default_timeout: float | None = attrs.field(
        default=None, kw_only=True, converter=timeout_seconds
    )
    env_clear: bool = attrs.field(default=False, kw_only=True)
    env_remove: tuple[str, ...] = attrs.field(default=(), kw_only=True, converter=names)
    envs: Env = attrs.field(factory=Env, kw_only=True, converter=_variables)
    output_limit: int | None = attrs.field(
        default=DEFAULT_OUTPUT_LIMIT, kw_only=True, validator=_limit
    )
    stream_output_limit: int | None = attrs.field(
        default=DEFAULT_STREAM_OUTPUT_LIMIT, kw_only=True, validator=_limit
    )
    kill_grace: float = attrs.field(default=1.0, kw_only=True, validator=non_negative)
    drain_timeout: float = attrs.field(default=0.1, kw_only=True, validator=non_negative)
    read_limit: int | None = attrs.field(default=None, kw_only=True, validator=_limit)
    spill: str | bool = attrs.field(default=False, kw_only=True, converter=_spill_folder)
    login: bool = attrs.field(default=False, kw_only=True)
    _closed: bool = attrs.field(init=False, default=False, repr=False)
    _closing: anyio.Event | None = attrs.field(init=False, default=None, repr=False)

    async def aclose(self) -> None:
        """Kill every process this executor started that still runs, release what it holds.

        New commands are refused from the start of the call. A second call,
        also one made meanwhile from another task, does nothing but wait until
        the first is done. The work (`_shut_down`) runs to its end whatever
        cancels the caller, then the cancellation goes on.
        """
        self._closed = True
        if self._closing is not None:
            await self._closing.wait()
            return
        self._closing = anyio.Event()
        try:
            await run_to_completion(self._shut_down)
        finally:
            self._closing.set()

    @abc.abstractmethod
    async def _shut_down(self) -> None:
        """`aclose()`'s work: end every process, release every resource, once."""

    def shell(
        self,
        *,
        login: bool | None = None,
        cwd: StrPath | None = None,
        env: Mapping[str, str] | None = None,
    ) -> PersistentShell:
        """A persistent shell with this executor's default timeout, kill grace and output cap.

        See `ToolExecutor.shell`; `login=None` follows this executor's `login`.
        """
        return cast(ShellMaker, _provided(registry.shell, "shell"))(
            self,
            login=self.login if login is None else login,
            cwd=cwd,
            env=env,
            default_timeout=self.default_timeout,
            kill_grace=self.kill_grace,
            output_buffer=self.output_buffer,
            job_buffer=min(self.output_limit, 1 << 20) if self.output_limit is not None else None,
        )

    def output_buffer(self, sink: Sink | None = None) -> OutputBuffer:
        """A buffer for one command's output: `output_limit` bytes kept, the rest spilled.

        With a sink (which sees every chunk) the buffer keeps no more than
        `stream_output_limit` either.
        """
        return self._buffer(streamed=caller_streams(sink))

    def session_buffer(self) -> OutputBuffer:
        """A buffer for a session's output, for its `finalize()`: what a streamed call keeps.

        A session's reader sees every chunk as it comes, as a sink does, so
        `stream_output_limit` caps what it keeps too: a persistent shell that
        runs for hours holds at most that much of its own output, not
        `output_limit` (32 MiB) of it.
        """
        return self._buffer(streamed=True)

    def _buffer(self, *, streamed: bool) -> OutputBuffer:
        spill_dir: str | None = None
        if self.spill:
            spill_dir = _SPILL_DIR if self.spill is True else str(self.spill)
        return OutputBuffer(self._kept(streamed=streamed), spill_dir=spill_dir)

    def stored_limit(self, sink: Sink | None) -> int | None:
        """Bytes of output kept in memory: `output_limit`, with a sink `stream_output_limit` too."""
        return self._kept(streamed=caller_streams(sink))

    def _kept(self, *, streamed: bool) -> int | None:
        limit, streamed_limit = self.output_limit, self.stream_output_limit
        if streamed_limit is None or not streamed:
            return limit
        return streamed_limit if limit is None else min(limit, streamed_limit)

    def file_buffer(self, shown: str, sink: Sink | None) -> FileBuffer:
        """A buffer for one file read: the whole file, or the read fails (see `FileBuffer`).

        A streamed read keeps the file (whole, or nothing of it) up to
        `output_limit`, not `stream_output_limit`: a file comes back whole
        wherever it can.
        """
        keep = None if sink is None else self.output_limit
        return FileBuffer(shown, read_limit=self.read_limit, keep=keep)

    async def exec_cmd(self, cmd: Command) -> CommandOutput:
        """Run `cmd` to the end and return its output (see `ToolExecutor.exec_cmd`)."""
        return await self._run(cmd, None)

    async def exec_cmd_streaming(self, cmd: Command, sink: Sink) -> CommandOutput:
        """Run `cmd`, handing each chunk to `sink` as it is read."""
        return await self._run(cmd, sink)

    def _check_open(self) -> None:
        if self._closed:
            raise ExecutorError("the executor is closed")

    def _session_argv(self, cmd: Command) -> tuple[str, ...]:
        """The argv a session runs for `cmd` (see `session_argv`).

        Raises:
            ExecutorError: The executor is closed, or `cmd` is a file operation
                or a `#!` script.

        """
        self._check_open()
        match cmd:
            case Shell() | Exec():
                return session_argv(cmd, login=self.login)
            case _:
                kind = type(cmd).__name__
                raise ExecutorError(f"{type(self).__name__} cannot start {kind} sessions")

    def _checked(self, output: CommandOutput) -> CommandOutput:
        """Return `output` of a finished command, or raise what its exit means."""
        if output.exit_code:
            if self._closed and self._killed_by_close(output):
                raise ExecutorError("the executor was closed while the command ran", output)
            if output.oom_killed:
                message = failure_message(output, memory_limit=self._memory_limit())
                raise OutOfMemory(message, output)
            raise NonZeroExit(failure_message(output), output)
        return output

    def _memory_limit(self) -> int | None:
        """The memory limit of each command's tree, where this executor sets one (its messages)."""
        return None

    def _killed_by_close(self, output: CommandOutput) -> bool:
        """Whether a failed command, ended after `aclose()`, was ended by it.

        By default any failure then counts: a remote shell whose child was
        killed first reports that as an exit code, not a signal.
        """
        return True

    def _timeout(self, cmd: Command) -> float | None:
        return cmd.timeout if cmd.timeout is not None else self.default_timeout

    async def _drive(
        self, run: Run, cmd: Command, stdin: bytes | None, sink: Sink | None
    ) -> CommandOutput:
        """Run a started command to its end with this executor's cap, timeout, grace and drain."""
        return await drive(
            run,
            buffer=self.output_buffer(sink),
            sink=sink,
            stdin=stdin,
            timeout=self._timeout(cmd),
            kill_grace=self.kill_grace,
            drain_timeout=self.drain_timeout,
            idle_timeout=cmd.idle_timeout,
        )

    def _run_session(
        self,
        start: Callable[[], Awaitable[Run]],
        cmd: Command,
        *,
        pty: bool,
        offer_yields: bool = True,
    ) -> RunSession:
        """A session of `cmd` that `start` starts, run as `exec_cmd` runs it (see `RunSession`)."""
        return RunSession(
            start,
            pty=pty,
            initial_stdin=cmd.stdin,
            finish=self._checked,
            output_buffer=self.session_buffer,
            timeout=self._timeout(cmd),
            kill_grace=self.kill_grace,
            drain_timeout=self.drain_timeout,
            idle_timeout=cmd.idle_timeout,
            offer_yields=offer_yields,
        )

    async def _run(self, cmd: Command, sink: Sink | None) -> CommandOutput:
        self._check_open()
        match cmd:
            case Shell() | Exec():
                argv, stdin = process_argv(cmd, login=self.login)
                try:
                    return await self._process(cmd, argv, stdin, sink)
                except NonZeroExit as error:
                    if error.output.exit_code == 127 and _NO_BASH in error.output.stderr:
                        raise ExecutorError(
                            f"{cmd!r} asks for a login shell (bash --login), "
                            f"and {self!r} has no bash"
                        ) from error
                    raise
            case ReadFile():
                return await self._read_file(cmd, sink)
            case WriteFile():
                return await self._write_file(cmd, sink)
            case _:
                raise ExecutorError(
                    f"{type(self).__name__} cannot run {type(cmd).__name__} commands"
                )

    @abc.abstractmethod
    async def _process(
        self, cmd: Command, argv: tuple[str, ...], stdin: bytes | None, sink: Sink | None
    ) -> CommandOutput:
        """Run a shell or argv command, as `argv` with `stdin`."""

    @abc.abstractmethod
    async def _read_file(self, cmd: ReadFile, sink: Sink | None) -> CommandOutput:
        """Read a file."""

    @abc.abstractmethod
    async def _write_file(self, cmd: WriteFile, sink: Sink | None) -> CommandOutput:
        """Write a file."""
