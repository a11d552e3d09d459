"""The scoped and read-only wrappers: what `ToolExecutor.scoped()` and `read_only()` build.

Imported, this folder puts its loaders in the core's registry
(`executor._core.registry`); `executor/__init__.py` imports it before any
other module of the package. The wrappers' own modules load at the first
call, so importing this imports nothing else.
"""

from __future__ import annotations

from executor._core import registry

# Not `typing.TYPE_CHECKING`: `import executor` loads this module.
TYPE_CHECKING = False

if TYPE_CHECKING:
    from executor._core.base import ReadOnlyMaker, ScopedMaker


def _scoped() -> ScopedMaker:
    from executor._wrappers.scoped import ScopedExecutor

    return ScopedExecutor


def _read_only() -> ReadOnlyMaker:
    from executor._wrappers.read_only import ReadOnly

    return ReadOnly


registry.scoped = _scoped
registry.read_only = _read_only
