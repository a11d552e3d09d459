"""Cleanup that survives cancellation: one primitive for every backend and wrapper.

A bare `CancelScope(shield=True)` holds off anyio's and trio's cancellation,
but not asyncio's native `Task.cancel()` (`asyncio.wait_for`, `TaskGroup`,
a second cancel of a task already being cancelled): the shielded cleanup then
stops at its next await. Whatever kills, reaps or records at the end goes
through `run_to_completion` instead.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio
import sniffio

T = TypeVar("T")


async def run_to_completion(cleanup: Callable[[], Awaitable[T]]) -> T:
    """Run `cleanup` to its end whatever cancels the caller, then let the cancellation on.

    Returns what `cleanup` returns (when nothing cancelled the caller) and
    raises what it raises. An anyio shield holds off anyio's cancellation;
    on asyncio it does not hold off a native `Task.cancel()`
    (`asyncio.wait_for`, `TaskGroup`), so there the cleanup runs in a task of
    its own and is awaited through `asyncio.shield` until it is done, however
    often the caller is cancelled meanwhile.
    """
    with anyio.CancelScope(shield=True):
        if sniffio.current_async_library() != "asyncio":
            return await cleanup()
        import asyncio

        async def wrapped() -> T:
            return await cleanup()

        task = asyncio.ensure_future(wrapped())
        cancelled = False
        while True:
            try:
                result = await asyncio.shield(task)
            except asyncio.CancelledError:
                if task.done():
                    raise
                cancelled = True
                continue
            break
    if cancelled:
        raise asyncio.CancelledError
    return result
