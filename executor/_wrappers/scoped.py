"""`ScopedExecutor`: commands run in a folder of the inner executor's working directory."""

from __future__ import annotations

import os
import posixpath
from collections.abc import AsyncIterator, Iterable, Mapping

from executor._core.base import CheckedExecutor, LoadedFile, PersistentShell, ToolExecutor
from executor._core.commands import Command, StrPath


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
