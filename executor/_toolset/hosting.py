"""The resources a toolset holds open between calls (persistent shells, code interpreters).

Such a resource is entered and left in one task, while the calls that use it
come from any task (an MCP server serves each request in its own), so each
one gets a host task that enters it, waits to be told to stop, and leaves it.
`Hosts` keeps them, one per kind and executor, in the task group of the
entered toolset; it knows nothing of what the resources are.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
import anyio.abc
import attrs

from executor._core.base import ToolExecutor
from executor._core.errors import CommandError, ExecutorError, InvalidArgument


@attrs.define(eq=False)
class _Hosted:
    """One resource held open by a host task of its own, and the events that task sets."""

    executor: ToolExecutor
    value: Any = None
    error: BaseException | None = None
    ready: anyio.Event = attrs.Factory(anyio.Event)
    stop: anyio.Event = attrs.Factory(anyio.Event)
    done: anyio.Event = attrs.Factory(anyio.Event)

    async def host(self, factory: Callable[[], Any]) -> None:
        """Enter what `factory` makes, hold it open until `close`, then leave it."""
        try:
            async with factory() as value:
                self.value = value
                self.ready.set()
                await self.stop.wait()
        except Exception as error:  # reported to the call waiting on `ready`
            self.error = error
        finally:
            self.ready.set()
            self.done.set()

    async def close(self) -> None:
        """Tell the host task to leave the resource, and wait until it has."""
        self.stop.set()
        with anyio.CancelScope(shield=True):
            await self.done.wait()


class Hosts:
    """The resources a toolset holds open, by kind and executor, each in a host task.

    The host tasks run in the task group `hosting()` opens (the toolset
    enters it with `async with toolset:`); `aclose()` closes every resource.
    """

    def __init__(self) -> None:
        self._hosted: dict[tuple[str, int], _Hosted] = {}
        self._lock = anyio.Lock()
        self._group: anyio.abc.TaskGroup | None = None

    @contextlib.asynccontextmanager
    async def hosting(self) -> AsyncIterator[None]:
        """The task group the host tasks run in, open while inside; `aclose()` them first."""
        async with anyio.create_task_group() as group:
            self._group = group
            try:
                yield
            finally:
                self._group = None

    async def open(
        self, kind: str, executor: ToolExecutor, factory: Callable[[], Any], restart: bool
    ) -> Any:
        """The `kind` resource `factory` makes for `executor`, opened in a host task once.

        Raises:
            ExecutorError: The toolset is not entered, or the resource did not start.
            CommandError: The resource failed as a command fails.
            InvalidArgument: The resource refused its arguments.
        """
        key = (kind, id(executor))
        async with self._lock:
            hosted = self._hosted.get(key)
            if (
                hosted is not None
                and hosted.executor is executor
                and not restart
                and hosted.value is not None
                and not hosted.done.is_set()
            ):
                return hosted.value
            if hosted is not None:
                del self._hosted[key]
                await hosted.close()
            if self._group is None:
                raise ExecutorError(
                    f"the {kind} needs an entered toolset: `async with toolset:` around the "
                    "calls (it holds it open between them, and closes it at the end)"
                )
            hosted = _Hosted(executor)
            self._group.start_soon(hosted.host, factory)
            await hosted.ready.wait()
            if hosted.error is not None or hosted.value is None:
                error = hosted.error
                if isinstance(error, CommandError | InvalidArgument):
                    raise error
                raise ExecutorError(f"the {kind} did not start: {error}") from error
            self._hosted[key] = hosted
            return hosted.value

    async def spawn(self, function: Callable[..., Any], *args: Any) -> None:
        """Start `function(*args)` in the entered toolset's task group, as `TaskGroup.start` does.

        Raises:
            ExecutorError: The toolset is not entered.
        """
        if self._group is None:
            raise ExecutorError(
                "a yielded command needs an entered toolset: `async with toolset:` around "
                "the calls (it runs on between them, and is ended at the end)"
            )
        await self._group.start(function, *args)

    async def aclose(self) -> None:
        """Close every resource held open. A second call does nothing."""
        hosted, self._hosted = list(self._hosted.values()), {}
        for each in hosted:
            await each.close()
