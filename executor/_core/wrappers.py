"""Wrappers: executors that hold another one and change one thing about it."""

from __future__ import annotations

import contextlib
import contextvars
import os
import posixpath
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING

from executor._core.base import LoadedFile, Sink, ToolExecutor
from executor._core.commands import Command, Exec, ReadFile, Shell, StrPath, WriteFile
from executor._core.errors import PolicyDenied
from executor._core.output import CommandOutput

if TYPE_CHECKING:
    from executor._core.session import ProcessSession
    from executor._core.shell import PersistentShell

_read_only: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "executor_read_only", default=False
)


def running_read_only() -> bool:
    """Whether the commands started now must see every path read-only (`ReadOnly` asked)."""
    return _read_only.get()


@contextlib.contextmanager
def read_only_commands() -> Iterator[None]:
    """Within this block, sandboxed executors start commands with nothing writable.

    `ReadOnly` wraps its calls in it. A context variable carries the request
    through any wrapper in between (scopes, policies, observers), and into
    the tasks and threads they start. An executor whose `enforces_read_only`
    is true promises to honour it: `ReadOnly` runs shell and argv commands
    on such an executor only.
    """
    token = _read_only.set(True)
    try:
        yield
    finally:
        _read_only.reset(token)


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


class ScopedExecutor(CheckedExecutor):
    """Runs commands in a folder of the inner executor's working directory.

    A command without `current_dir` runs in `scope`; a relative one joins onto
    it; an absolute one is left alone. Scopes nest. A scope chooses where
    commands start; it does not keep them inside (see `WorkspacePath` and the
    sandbox for that).
    """

    def __init__(self, inner: ToolExecutor, scope: StrPath) -> None:
        super().__init__(inner)
        self.scope = os.fspath(scope)

    def __repr__(self) -> str:
        return f"ScopedExecutor({self.inner!r}, {self.scope!r})"

    def shell(
        self,
        *,
        login: bool | None = None,
        cwd: StrPath | None = None,
        env: Mapping[str, str] | None = None,
    ) -> PersistentShell:
        """The inner executor's shell, started in the scope (or `cwd` joined onto it).

        The scope is where the shell starts, not where each command runs: a
        `cd` carries to the next command, as at any shell.
        """
        where = self.scope if cwd is None else os.path.join(self.scope, os.fspath(cwd))
        return self.inner.shell(login=login, cwd=where, env=env)

    async def check(self, cmd: Command) -> Command:
        """Return `cmd` with its `current_dir` placed in the scope."""
        if cmd.current_dir is None:
            return cmd.with_current_dir(self.scope)
        return cmd.with_current_dir(os.path.join(self.scope, cmd.current_dir))

    async def stream_files(
        self, path: StrPath, extensions: Iterable[str] | None = None
    ) -> AsyncIterator[LoadedFile]:
        """List files below `path` joined onto the scope; paths come back relative to the scope."""
        raw = os.fspath(path)
        if os.path.isabs(raw):
            async for loaded in self.inner.stream_files(raw, extensions):
                yield loaded
            return
        async for loaded in self.inner.stream_files(os.path.join(self.scope, raw), extensions):
            yield LoadedFile(_relative_to(loaded.path, self.scope), loaded.content)


def _relative_to(path: str, scope: str) -> str:
    if os.path.isabs(path) != os.path.isabs(scope):
        return path
    return posixpath.relpath(path, scope)


class ReadOnly(CheckedExecutor):
    """Refuses every command that could write, with `PolicyDenied`.

    `ReadFile` runs. `WriteFile` is refused. Shell and argv commands are
    refused too, unless the inner executor enforces read-only at the OS level
    (a sandbox), where they run with every path read-only: the request
    reaches the sandbox through a context variable, past any wrapper in
    between (see `read_only_commands`). A command of a kind
    it does not know is refused: it fails closed.
    """

    async def exec_cmd(self, cmd: Command) -> CommandOutput:
        """Check `cmd`, then run it on the inner executor with nothing writable."""
        checked = await self.check(cmd)
        with read_only_commands():
            return await self.inner.exec_cmd(checked)

    async def exec_cmd_streaming(self, cmd: Command, sink: Sink) -> CommandOutput:
        """Check `cmd`, then run it on the inner executor with nothing writable, streaming."""
        checked = await self.check(cmd)
        with read_only_commands():
            return await self.inner.exec_cmd_streaming(checked, sink)

    async def start(self, cmd: Command, *, pty: bool = False) -> ProcessSession:
        """Check `cmd`, then start a session for it with nothing writable."""
        checked = await self.check(cmd)
        with read_only_commands():
            return await self.inner.start(checked, pty=pty)

    def shell(
        self,
        *,
        login: bool | None = None,
        cwd: StrPath | None = None,
        env: Mapping[str, str] | None = None,
    ) -> PersistentShell:
        """The inner executor's shell, started with nothing writable, each command checked.

        On an executor that cannot enforce read-only, every `run` and job is refused.
        """
        with read_only_commands():
            shell = self.inner.shell(login=login, cwd=cwd, env=env)
        shell.wrap(self)
        return shell

    async def check(self, cmd: Command) -> Command:
        """Return `cmd` if it cannot write; raise `PolicyDenied` if it could."""
        if isinstance(cmd, ReadFile):
            return cmd
        if isinstance(cmd, WriteFile):
            raise PolicyDenied(f"this executor is read-only: it does not write files ({cmd.path})")
        if isinstance(cmd, Shell | Exec):
            if self.inner.enforces_read_only:
                return cmd
            raise PolicyDenied(
                "this executor is read-only and cannot stop a shell or program from "
                "writing, so it runs none; read files with read_file instead"
            )
        raise PolicyDenied(f"this executor is read-only and does not run {type(cmd).__name__}")
