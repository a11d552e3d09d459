"""The executor's side of the in-container helper (`helper.py`).

One exec runs the helper for the executor's whole life; every shell and argv
command is a request on its stdin and a series of events on its stdout, told
apart by a command id. There is no background task: whichever command needs
the next event reads it, under a lock, and files events for the others in
their queues, so each call's own task does the reading and cancellation
stays with the caller.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import json
import pathlib
import struct
from typing import Any, Final

import anyio

from executor._core.cleanup import run_to_completion
from executor._core.errors import EngineError, ExecutorError
from executor._docker.api import Connection, EngineClient

START, STDIN, EOF, KILL, SIGNAL, RELEASE = 1, 2, 3, 4, 5, 6
STARTED, OUT, ERR, EXIT, FAILED, KILLED, READY, CLOSED = 10, 11, 12, 13, 14, 15, 16, 17
_HEADER: Final = struct.Struct(">BII")
# How long the helper may take to say it is ready.
_READY_TIMEOUT: Final = 20.0
# How long an ended helper's container or engine may take to show it went away.
_GONE_WAIT: Final = 2.0

Event = tuple[int, bytes]


def helper_source() -> str:
    """The helper's source, as `python3 -c` runs it in the container."""
    return pathlib.Path(__file__).with_name("helper.py").read_text()


class _Queue:
    def __init__(self) -> None:
        self.items: collections.deque[Event] = collections.deque()


class Channel:
    """One helper exec, shared by every command of an executor."""

    def __init__(
        self, api: EngineClient, conn: Connection, exec_id: str, container_id: str = ""
    ) -> None:
        self._api = api
        self._conn = conn
        self.exec_id = exec_id
        self.container_id = container_id
        # Why the helper ended, once asked (see `_gone`).
        self._reason: str | None = None
        # Set once the helper said it is ready: one that never was failed on its own.
        self._ready = False
        self._ids = itertools.count(1)
        self._queues: dict[int, _Queue] = {}
        self._read_lock = anyio.Lock()
        self._write_lock = anyio.Lock()
        self._stdout = bytearray()
        self._stderr = bytearray()
        self.closed = False
        # Set once aclose() has begun: the connection is closed once only.
        self._shut = False

    @classmethod
    async def open(
        cls, api: EngineClient, container_id: str, *, user: str | None, python: str
    ) -> Channel:
        """Start the helper with `python` in the container and wait until it is ready.

        Raises:
            ExecutorError: The helper did not start (no such Python, say).

        """
        config: dict[str, Any] = {
            "AttachStdin": True,
            "AttachStdout": True,
            "AttachStderr": True,
            "Tty": False,
            "Cmd": [python, "-u", "-c", helper_source()],
        }
        if user is not None:
            config["User"] = user
        exec_id = await api.create_exec(container_id, config)
        conn = await api.attach_exec(exec_id, tty=False)
        channel = cls(api, conn, exec_id, container_id)
        try:
            with anyio.fail_after(_READY_TIMEOUT):
                channel._queues.setdefault(0, _Queue())
                while (event := channel.take(0)) is None:
                    await channel.arrive(0)
                kind, _ = event
            if kind != READY:
                raise ExecutorError("the helper did not start")
        except (ExecutorError, TimeoutError) as error:
            await conn.aclose()
            said = channel._stderr.decode("utf-8", "replace").strip()[-500:]
            raise ExecutorError(f"the helper did not start: {said or error}") from error
        except BaseException:
            await conn.aclose()
            raise
        channel._queues.pop(0, None)
        channel._ready = True
        return channel

    def new_id(self) -> int:
        """A command id, and a queue for its events."""
        ident = next(self._ids)
        self._queues[ident] = _Queue()
        return ident

    def forget(self, ident: int) -> None:
        """Drop the queue of a finished command."""
        self._queues.pop(ident, None)

    async def send(self, kind: int, ident: int, payload: bytes = b"") -> None:
        """Send one request, whole: a cancelled send never leaves half a frame."""
        if self.closed:
            raise await self._gone()
        frame = _HEADER.pack(kind, ident, len(payload)) + payload
        async with self._write_lock:
            try:
                # Even asyncio's native cancel cannot cut a frame in two.
                await run_to_completion(lambda: self._conn.send(frame))
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as error:
                self.closed = True
                raise await self._gone() from error

    async def send_json(self, kind: int, ident: int, value: Any) -> None:
        """Send one request with a JSON payload."""
        await self.send(kind, ident, json.dumps(value).encode())

    def take(self, ident: int) -> Event | None:
        """The next event of command `ident` that has arrived, if any; never waits."""
        queue = self._queues.get(ident)
        return queue.items.popleft() if queue is not None and queue.items else None

    async def arrive(self, ident: int) -> None:
        """Wait until an event of command `ident` has arrived, or one of another's was read.

        Safe to cancel: a frame is filed only once it is whole.

        Raises:
            ExecutorError: The helper is gone.

        """
        queue = self._queues.get(ident)
        if queue is None:
            raise ExecutorError(f"no command {ident} on the helper")
        if queue.items:
            return
        if self.closed:
            raise await self._gone()
        async with self._read_lock:
            if not queue.items:
                await self._read_one()

    async def _gone(self) -> ExecutorError:
        """The error for every call once the helper ended, saying why where the engine can tell.

        The helper ends only when its input does: an end it did not choose
        is the container's (stopped, removed) or the engine's (stopped,
        unreachable), asked once and remembered. Not asked of a helper
        that never started (no Python, say): its own stderr says why.
        """
        if self._reason is None and self._ready and not self._shut:
            self._reason = ""
            if self.container_id:
                with contextlib.suppress(ExecutorError):
                    self._reason = (
                        await self._api.went_away(self.container_id, wait=_GONE_WAIT) or ""
                    )
        said = self._stderr.decode("utf-8", "replace").strip()[-1000:]
        why = "; ".join(part for part in (self._reason, said) if part)
        return ExecutorError(f"the helper is gone{': ' + why if why else ''}")

    async def _read_one(self) -> None:
        # Whole helper frames are taken from the buffer only, so a cancelled
        # read leaves the stream where it was.
        while len(self._stdout) < _HEADER.size or len(self._stdout) < _HEADER.size + int(
            _HEADER.unpack_from(self._stdout)[2]
        ):
            frame = await self._conn.receive_frame()
            if frame is None:
                self.closed = True
                return
            stream, data = frame
            if stream == 1:
                self._stdout += data
            else:
                # The helper's own complaints, kept for an error message.
                self._stderr = (self._stderr + data)[-4096:]
        kind, ident, size = _HEADER.unpack_from(self._stdout)
        payload = bytes(self._stdout[_HEADER.size : _HEADER.size + size])
        del self._stdout[: _HEADER.size + size]
        queue = self._queues.get(ident)
        if queue is not None:
            queue.items.append((kind, payload))

    async def aclose(self) -> None:
        """End the helper: its input closes, and it kills every tree it started.

        Runs to its end whatever cancels the caller; a second call does nothing.
        """
        self.closed = True
        if self._shut:
            return
        self._shut = True
        await run_to_completion(self._end)

    async def _end(self) -> None:
        try:
            await self._conn.send_eof()
            with anyio.move_on_after(5):
                while await self._conn.receive_frame() is not None:
                    pass
        except (EngineError, OSError):
            pass
        finally:
            await self._conn.aclose()
