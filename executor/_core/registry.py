"""What the layers above the core build for `ToolExecutor`: its shell and two wrappers.

`ToolExecutor.shell()`, `scoped()` and `read_only()` belong to the core's
interface, but what they return is built in folders above it
(`executor._shells`, `executor._wrappers`), which import the core: so the
core imports none of them. Each of those folders, when imported, sets its
slots here to loaders: functions that import its code and return what
builds the object. `executor/__init__.py` imports both folders, and Python
runs it before any other module of the package, so the slots are set before
any executor exists; a slot left empty is an `ExecutorError` naming its
folder (`executor._core.base` reads them).

`import executor` loads this module and the two folders' faces, so none of
them imports anything at run time: anyio and the shell's code load at the
first `ex.shell()`.
"""

from __future__ import annotations

# Not `typing.TYPE_CHECKING`: `import executor` loads this module (see executor/__init__.py).
TYPE_CHECKING = False

if TYPE_CHECKING:
    from collections.abc import Callable

# The loaders return `object` here: their types name `ToolExecutor` and
# `PersistentShell`, which this module may not import (the base imports it, and
# `import executor` must stay light). `executor._core.base` says what each returns
# (`ShellMaker`, `ScopedMaker`, `ReadOnlyMaker`), and the folders that fill the
# slots annotate their loaders with those types: only the hand-off here is unchecked.

shell: Callable[[], object] | None = None
"""Loads what builds the persistent shell of `ToolExecutor.shell()` (`executor._shells`)."""

scoped: Callable[[], object] | None = None
"""Loads what builds the executor of `ToolExecutor.scoped()` (`executor._wrappers`)."""

read_only: Callable[[], object] | None = None
"""Loads what builds the executor of `ToolExecutor.read_only()` (`executor._wrappers`)."""
