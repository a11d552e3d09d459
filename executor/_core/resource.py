"""Async resources: `async with` ends them, `async for` reads them (as anyio's `AsyncResource`).

Executors, sessions, tool handles and events all close with `aclose()` and
some are read chunk by chunk with `next_chunk()`; the dunder methods that make
them context managers and async iterators are written once, here.
"""

from __future__ import annotations

import abc
from typing import Generic, Self, TypeVar

T = TypeVar("T")


class AsyncResource(abc.ABC):
    """Something to close: `async with resource:` calls `aclose()` as the block is left."""

    @abc.abstractmethod
    async def aclose(self) -> None:
        """Release what the resource holds; a second call does nothing."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> bool | None:
        await self.aclose()
        return None


class AsyncChunks(Generic[T], abc.ABC):
    """Something read piece by piece: `async for item in it` calls `next_chunk()` until `None`."""

    @abc.abstractmethod
    async def next_chunk(self) -> T | None:
        """The next item; `None` at the end."""

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> T:
        item = await self.next_chunk()
        if item is None:
            raise StopAsyncIteration
        return item
