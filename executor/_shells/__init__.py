"""The persistent shell (`shell`) and its jobs (`jobs`): what `ToolExecutor.shell()` builds.

Imported, this folder puts its loader in the core's registry
(`executor._core.registry`); `executor/__init__.py` imports it before any
other module of the package. The shell's own modules (and anyio) load at
the first `ex.shell()`, so importing this imports nothing else.
"""

from __future__ import annotations

from executor._core import registry

# Not `typing.TYPE_CHECKING`: `import executor` loads this module.
TYPE_CHECKING = False

if TYPE_CHECKING:
    from executor._core.base import ShellMaker


def _framed_shell() -> ShellMaker:
    from executor._shells.shell import FramedShell

    return FramedShell


registry.shell = _framed_shell
