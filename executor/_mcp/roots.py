"""The client's roots as a narrowing of the workspace: where file tools reach, where commands start.

An MCP client may offer roots, the folders it wants the server to work in
(`roots/list`). They can only narrow what the server's operator gave it: a
root inside the workspace narrows the file tools to it, a root holding the
whole workspace leaves it whole, and a root elsewhere is ignored (a client
cannot widen the server's reach by naming `/`). Paths stay relative to the
workspace, as the tools take them; roots are read as paths in the
executor's world (on this host, in the container, on the SSH host).
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from urllib.parse import unquote, urlsplit

import attrs

from executor._core.base import CheckedExecutor, LoadedFile, PersistentShell, ToolExecutor
from executor._core.commands import Command, ReadFile, StrPath, WriteFile
from executor._core.errors import PolicyDenied


def root_paths(uris: Iterable[str]) -> tuple[str, ...]:
    """The paths of `file://` root URIs (others are no folders of ours, and skipped)."""
    paths = []
    for uri in uris:
        parts = urlsplit(uri)
        if parts.scheme == "file" and parts.netloc in ("", "localhost") and parts.path:
            paths.append(posixpath.normpath(unquote(parts.path)))
    return tuple(paths)


@attrs.frozen
class RootScope:
    """What the client's roots leave of the workspace.

    Attributes:
        prefixes: The parts of the workspace the roots reach, relative to it
            (`.` for all of it); empty when no root lies in the workspace.
        offered: The roots as the client gave them (paths), for messages.
        workspace: The workspace's paths (as named and resolved).
    """

    prefixes: tuple[str, ...]
    offered: tuple[str, ...]
    workspace: tuple[str, ...]

    def inside(self, relative: str) -> bool:
        """Whether a path relative to the workspace lies in one of the roots."""
        path = posixpath.normpath(relative)
        if path == ".." or path.startswith(("../", "/")):
            return False  # not in the workspace at all
        return any(
            prefix == "." or path == prefix or path.startswith(prefix + "/")
            for prefix in self.prefixes
        )

    def relative(self, path: str) -> str | None:
        """`path` relative to the workspace, or None when it lies outside the workspace."""
        if not posixpath.isabs(path):
            return posixpath.normpath(path)
        path = posixpath.normpath(path)
        for base in self.workspace:
            if path == base:
                return "."
            if path.startswith(base.rstrip("/") + "/"):
                return path[len(base.rstrip("/")) + 1 :]
        return None

    def refusal(self, what: str) -> PolicyDenied:
        """The error for `what`, outside every root."""
        if not self.prefixes:
            return PolicyDenied(
                f"{what}: none of the client's roots ({', '.join(self.offered)}) lies in the "
                f"workspace {self.workspace[0]}"
            )
        return PolicyDenied(
            f"{what} is outside every root the client offered "
            f"({', '.join(self.offered)}; in the workspace: {', '.join(self.prefixes)})"
        )


def scope_of(roots: Sequence[str], workspace: Sequence[str]) -> RootScope:
    """The `RootScope` that `roots` (paths) leave of `workspace` (its paths, as named and real)."""
    prefixes: list[str] = []
    for root in roots:
        for base in workspace:
            if root == base or base.startswith(root.rstrip("/") + "/"):
                prefixes.append(".")
                break
            if root.startswith(base.rstrip("/") + "/"):
                prefixes.append(root[len(base.rstrip("/")) + 1 :])
                break
    return RootScope(tuple(dict.fromkeys(prefixes)), tuple(roots), tuple(workspace))


class Rooted(CheckedExecutor):
    """Keeps commands inside the current call's roots (`scope()`; `None`: no roots offered).

    A file command's path, and a command's `current_dir`, must lie in a
    root; a command without one starts in the first root; a listing below
    a root's parent yields only the files in the roots. Anything else is
    refused (`PolicyDenied`), as a path outside the workspace is.
    """

    def __init__(self, inner: ToolExecutor, scope: Callable[[], RootScope | None]) -> None:
        super().__init__(inner)
        self.scope = scope

    def _where(self, scope: RootScope, path: str, what: str) -> str:
        relative = scope.relative(path)
        if relative is None or not scope.inside(relative):
            raise scope.refusal(f"{what} {path}")
        return relative

    async def check(self, cmd: Command) -> Command:
        """`cmd`, started in the first root when it names no folder; refused outside the roots."""
        scope = self.scope()
        if scope is None:
            return cmd
        if not scope.prefixes:
            raise scope.refusal("every command")
        base = cmd.current_dir
        if base is not None:
            self._where(scope, base, "the folder")
        if isinstance(cmd, ReadFile | WriteFile):
            path = cmd.path
            if not posixpath.isabs(path):
                path = posixpath.join(base or ".", path)
            self._where(scope, path, "the file")
        elif (
            base is None
            and scope.prefixes[0] != "."
            # A persistent shell's commands run where its last `cd` left them.
            and not isinstance(self.inner, PersistentShell)
        ):
            cmd = cmd.with_current_dir(scope.prefixes[0])  # a command starts in the first root
        return cmd

    def shell(
        self,
        *,
        login: bool | None = None,
        cwd: StrPath | None = None,
        env: Mapping[str, str] | None = None,
    ) -> PersistentShell:
        """The inner executor's shell, started in the first root when no folder is named."""
        scope = self.scope()
        if cwd is None and scope is not None and scope.prefixes and scope.prefixes[0] != ".":
            cwd = scope.prefixes[0]
        return super().shell(login=login, cwd=cwd, env=env)

    async def stream_files(
        self, path: StrPath, extensions: Iterable[str] | None = None
    ) -> AsyncIterator[LoadedFile]:
        """The files below `path` that lie in a root; refused when none can."""
        scope = self.scope()
        raw = os.fspath(path)
        if scope is None:
            async for loaded in self.inner.stream_files(raw, extensions):
                yield loaded
            return
        if not scope.prefixes:
            raise scope.refusal("every listing")
        relative = scope.relative(raw)
        if relative is None:
            raise scope.refusal(f"the folder {raw}")
        if scope.inside(relative):
            async for loaded in self.inner.stream_files(raw, extensions):
                yield loaded
            return
        below = relative == "." or any(
            prefix.startswith(relative.rstrip("/") + "/") for prefix in scope.prefixes
        )
        if not below:
            raise scope.refusal(f"the folder {raw}")
        # A parent of some roots: what lies in them, and nothing beside them.
        async for loaded in self.inner.stream_files(raw, extensions):
            found = scope.relative(loaded.path)  # listed paths are relative to the workspace
            if found is not None and scope.inside(found):
                yield loaded
