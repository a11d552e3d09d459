"""The read-only request: `ReadOnly` asks, and executors that enforce read-only honour it.

A context variable carries it through any wrapper in between (scopes,
policies, observers), and into the tasks and threads they start, down to
the sandbox that starts the command (see `ToolExecutor.enforces_read_only`).
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

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
