"""A command's way to its actor and back that bypasses Ray's calls: one TCP connection.

Ray carries a call and its reply through several threads and processes on
each side (the core workers, the raylets' gRPC); on a small machine that
costs milliseconds a call, more than the command it carries, and a fast
stream's bytes pay for Ray's messaging too. So the actor also listens on
its node's address (the one Ray knows it by), and a command goes over a
connection to it: the driver sends the request, the node sends the
output as it is read, then the outcome. The connection is then kept for
the next command, or closed. Everything else (placement, liveness, files,
sessions) stays on Ray's calls.

Frames: a kind byte and an 8-byte length, then that many bytes.
- `r` (driver to node): the request, pickled `(run_id, command, streamed)`;
- `o`, `e` (node to driver): stdout, stderr bytes as the node's executor read them;
- `p` (node to driver): the outcome, pickled: `("done", output)` or an encoded failure.

A connection first sends the actor's token (random, given to the driver
by `describe()` through Ray): the node serves no one else. The node answers
with a second secret of the actor's (given the same way), and the driver
sends no request before it has seen it: a process that took the port of an
actor gone (it could answer with any pickle) is never trusted. During a run
the driver sends nothing; its end of the connection (the driver cancelled,
its sink failed, it died) cancels the run, which kills the command's tree.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import pickle
import secrets
import socket
import struct
from collections.abc import Awaitable, Callable
from typing import Any

from executor._core.output import Chunk, Stderr, Stdout

HEADER = struct.Struct("!cQ")
TOKEN_SIZE = 32
# A connection that does not show the token within this many seconds is dropped.
_HELLO_TIMEOUT = 10.0
# Connections that have not shown the token yet, at most: more are closed at
# once, so strangers cannot use up the worker's descriptors.
_UNPROVEN = 64
# Connections kept open between commands, per executor.
_IDLE = 8
# The stream reader's buffer: a batch of output is read whole, not in pieces.
_LIMIT = 1 << 20

RunOne = Callable[[int, Any, "Callable[[Chunk], Awaitable[None]] | None"], Awaitable[Any]]
"""The node's runner: runs a command (chunks to the sink, when streamed); its encoded outcome."""


def _nodelay(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def _frame(kind: bytes, payload: bytes) -> bytes:
    return HEADER.pack(kind, len(payload)) + payload


class ChannelServer:
    """The node's end: listens on `host`, runs each request with `run_one`."""

    def __init__(self, run_one: RunOne) -> None:
        self._run_one = run_one
        self.token = secrets.token_bytes(TOKEN_SIZE)
        # What the node shows a driver that showed `token`: proof it is this actor.
        self.proof = secrets.token_bytes(TOKEN_SIZE)
        self._server: asyncio.base_events.Server | None = None
        self._served: set[asyncio.Task[None]] = set()
        self._unproven = 0

    async def start(self, host: str) -> None:
        """Listen on `host`, on a port the system picks (see `address`)."""
        self._server = await asyncio.start_server(self._serve, host, 0, limit=_LIMIT)

    @property
    def address(self) -> tuple[str, int]:
        """The host and port to connect to, once started."""
        assert self._server is not None, "the channel is not started"
        host, port = self._server.sockets[0].getsockname()[:2]
        return str(host), int(port)

    async def close(self) -> None:
        """Stop listening and end every connection (their runs are cancelled)."""
        if self._server is not None:
            self._server.close()
        for task in list(self._served):
            task.cancel()
        for task in list(self._served):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        if self._unproven >= _UNPROVEN:
            writer.close()
            return
        self._served.add(task)
        self._unproven += 1
        try:
            try:
                token = await asyncio.wait_for(reader.readexactly(TOKEN_SIZE), _HELLO_TIMEOUT)
            finally:
                self._unproven -= 1
            if not hmac.compare_digest(token, self.token):
                return
            _nodelay(writer)
            writer.write(self.proof)
            while await self._one(reader, writer):
                pass
        except (OSError, EOFError, TimeoutError):
            pass  # the driver went away, or never said who it is
        finally:
            self._served.discard(task)
            writer.close()

    async def _one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """Serve one request; whether the connection may carry another."""
        try:
            kind, size = HEADER.unpack(await reader.readexactly(HEADER.size))
        except asyncio.IncompleteReadError:
            return False  # the driver closed a connection it kept idle
        if kind != b"r":
            return False
        run_id, cmd, streamed = pickle.loads(await reader.readexactly(size))

        async def sink(chunk: Chunk) -> None:
            writer.write(_frame(b"e" if isinstance(chunk, Stderr) else b"o", chunk.data))
            await writer.drain()

        run = asyncio.ensure_future(self._run_one(run_id, cmd, sink if streamed else None))
        # The driver sends nothing while its command runs: what it does send
        # is its end (EOF or a reset), which ends the run and its tree.
        hangup = asyncio.ensure_future(reader.read(1))
        try:
            await asyncio.wait({run, hangup}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            hangup.cancel()
            if not run.done():
                run.cancel()
            # Both awaited: the reader has no waiter left for the next
            # request, and a cancelled run's tree is gone before this ends.
            for task in (hangup, run):
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        if run.cancelled() or (hangup.done() and not hangup.cancelled()):
            return False
        writer.write(_frame(b"p", pickle.dumps(run.result(), protocol=pickle.HIGHEST_PROTOCOL)))
        await writer.drain()
        return True


class ChannelBroken(ConnectionError):
    """A connection to a node's channel broke or ended mid-run (never a sink's own error)."""


class Connection:
    """The driver's end of one connection to a node's `ChannelServer`."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer

    async def run(
        self, run_id: int, cmd: Any, take: Callable[[Chunk], Awaitable[None]] | None
    ) -> Any:
        """Send one request; feed its output to `take` (when given) as it comes; its outcome.

        Raises:
            ChannelBroken: The connection broke, or ended before the outcome came.

        """
        request = pickle.dumps((run_id, cmd, take is not None), protocol=pickle.HIGHEST_PROTOCOL)
        self._writer.write(_frame(b"r", request))
        try:
            await self._writer.drain()
        except OSError as error:
            raise ChannelBroken(f"the connection to the node broke: {error}") from None
        while True:
            kind, payload = await self._frame()
            if kind == b"p":
                return pickle.loads(payload)
            if take is not None:
                # Outside the connection's own error handling: a sink's
                # error (an OSError too, perhaps) passes as it is.
                await take(Stderr(payload) if kind == b"e" else Stdout(payload))

    async def _frame(self) -> tuple[bytes, bytes]:
        reader = self._reader
        try:
            kind, size = HEADER.unpack(await reader.readexactly(HEADER.size))
            return kind, await reader.readexactly(size)
        except asyncio.IncompleteReadError:
            raise ChannelBroken("the node ended the connection before the outcome") from None
        except OSError as error:
            raise ChannelBroken(f"the connection to the node broke: {error}") from None

    def close(self) -> None:
        """Close the connection (a run still on it is cancelled on the node)."""
        self._writer.close()


class Connections:
    """The driver's connections to one node's channel: opened as needed, a few kept idle."""

    def __init__(
        self, host: str, port: int, token: bytes, proof: bytes, connect_timeout: float
    ) -> None:
        self.host = host
        self.port = port
        self._token = token
        self._proof = proof
        self._connect_timeout = connect_timeout
        self._idle: list[Connection] = []
        self._closed = False
        self.reached = False
        """Whether a connection was ever made: the node's address is reachable from here."""

    async def take(self) -> Connection:
        """An idle connection, or a new one.

        Raises:
            OSError: The node's address cannot be reached from here (or in
                time), or what answers there is not this executor's actor.

        """
        if self._idle:
            return self._idle.pop()
        writer: asyncio.StreamWriter | None = None
        try:
            async with asyncio.timeout(self._connect_timeout):
                reader, writer = await asyncio.open_connection(self.host, self.port, limit=_LIMIT)
                _nodelay(writer)
                writer.write(self._token)
                proof = await reader.readexactly(TOKEN_SIZE)
        except BaseException as error:
            if writer is not None:
                writer.close()
            if isinstance(error, TimeoutError):
                raise OSError(f"no connection to {self.host}:{self.port} in time") from None
            if isinstance(error, asyncio.IncompleteReadError):
                raise OSError(f"{self.host}:{self.port} closed the connection at once") from None
            raise
        if not hmac.compare_digest(proof, self._proof):
            writer.close()
            raise OSError(f"what listens on {self.host}:{self.port} is not this executor's actor")
        self.reached = True
        return Connection(reader, writer)

    def give_back(self, connection: Connection) -> None:
        """Keep `connection` for the next command (it carried its run to the end)."""
        if self._closed or len(self._idle) >= _IDLE:
            connection.close()
        else:
            self._idle.append(connection)

    def close(self) -> None:
        """Close every idle connection; those in use close as their runs end."""
        self._closed = True
        for connection in self._idle:
            connection.close()
        self._idle.clear()
