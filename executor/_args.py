"""Validated argument types: parse a model's value into one that cannot hold a bad path."""

from __future__ import annotations

import os
import posixpath

from executor._errors import InvalidArgument

__all__ = ["WorkspacePath"]


class WorkspacePath(os.PathLike[str]):
    """A path inside the workspace: relative, non-empty, with no `..`, no root and no NUL.

    Surrounding whitespace is trimmed (models add it); what remains must still
    be a path. Usable wherever a path is (`os.PathLike`).

    Raises:
        InvalidArgument: Naming the raw value and the rule it broke.

    """

    __slots__ = ("_path", "raw")

    def __init__(self, raw: str | os.PathLike[str]) -> None:
        value = os.fspath(raw)
        if not isinstance(value, str):
            raise InvalidArgument(value, "a path must be text")
        self.raw = value
        path = value.strip()
        if not path:
            raise InvalidArgument(value, "a path must not be empty or blank")
        if "\0" in path:
            raise InvalidArgument(value, "a path must not contain a NUL byte")
        if path.startswith("/"):
            raise InvalidArgument(value, "a path must be relative to the workspace root")
        if ".." in path.split("/"):
            raise InvalidArgument(value, "a path must not contain '..'")
        normal = posixpath.normpath(path)
        self._path = normal

    def __fspath__(self) -> str:
        return self._path

    def __str__(self) -> str:
        return self._path

    def __repr__(self) -> str:
        return f"WorkspacePath({self._path!r})"

    def __eq__(self, other: object) -> bool:
        if isinstance(other, WorkspacePath):
            return self._path == other._path
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._path)

    @property
    def parts(self) -> tuple[str, ...]:
        """The path's components; `()` for the workspace root itself (`.`)."""
        return () if self._path == "." else tuple(self._path.split("/"))
