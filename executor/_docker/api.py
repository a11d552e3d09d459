"""A small HTTP/1.1 client for the Docker Engine API, over anyio streams.

It speaks to the engine `DOCKER_HOST` names: a unix socket (`unix://`, the
default `/var/run/docker.sock`), TCP (`tcp://`, with TLS when
`DOCKER_TLS_VERIFY` is set, certificates from `DOCKER_CERT_PATH`), or a
remote engine over SSH (`ssh://[user@]host[:port]`, through
`ssh -o BatchMode=yes host docker system dial-stdio`, as the docker CLI does).

Why not httpx or the Docker SDK: `exec` attach needs the connection itself
once the engine answers `101 UPGRADED` (stdin goes up it and the multiplexed
output comes down it), and the executor must run on asyncio and trio alike.
The SDK is synchronous; httpx has no public hijack. The protocol needed here
is small: requests with a JSON or byte body, replies with a length, chunked
or closed-by-peer body, and the upgrade.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import ssl
import urllib.parse
from collections.abc import AsyncIterator, Mapping
from typing import Any, Final

import anyio
import anyio.abc
import anyio.lowlevel
import attrs

from executor._core.cleanup import run_to_completion
from executor._core.errors import EngineError, ExecutorError

API_VERSION: Final = "v1.41"
"""The Engine API version spoken: Docker 20.10 and every later engine answer it."""

_DEFAULT_SOCKET = "/var/run/docker.sock"
# Idle keep-alive connections kept per client: more are opened when needed.
_POOL = 16
_READ = 65536
# A response head larger than this is not an engine's.
_MAX_HEAD = 1 << 16


class _ProcessStream(anyio.abc.ByteStream):
    """The stdin and stdout of a subprocess, as one byte stream (for `ssh ... dial-stdio`)."""

    def __init__(self, process: anyio.abc.Process) -> None:
        self._process = process
        assert process.stdin is not None
        assert process.stdout is not None
        self._stdin = process.stdin
        self._stdout = process.stdout

    async def receive(self, max_bytes: int = _READ) -> bytes:
        return await self._stdout.receive(max_bytes)

    async def send(self, item: bytes) -> None:
        await self._stdin.send(item)

    async def send_eof(self) -> None:
        await self._stdin.aclose()

    async def aclose(self) -> None:
        # Reaps `ssh`, whatever cancels the caller.
        await run_to_completion(self._process.aclose)


@attrs.frozen
class _Host:
    scheme: str
    address: str
    port: int = 0
    tls: ssl.SSLContext | None = None


def _parse_host(value: str | None) -> _Host:
    text = value or os.environ.get("DOCKER_HOST") or f"unix://{_DEFAULT_SOCKET}"
    parsed = urllib.parse.urlsplit(text)
    if parsed.scheme == "unix":
        return _Host("unix", parsed.path or _DEFAULT_SOCKET)
    if parsed.scheme in ("tcp", "http", "https"):
        if not parsed.hostname:
            raise ExecutorError(f"DOCKER_HOST {text!r} names no host")
        tls = None
        if parsed.scheme == "https" or os.environ.get("DOCKER_TLS_VERIFY"):
            tls = _tls_context()
        return _Host("tcp", parsed.hostname, parsed.port or (2376 if tls else 2375), tls)
    if parsed.scheme == "ssh":
        if not parsed.hostname:
            raise ExecutorError(f"DOCKER_HOST {text!r} names no host")
        target = f"{parsed.username}@{parsed.hostname}" if parsed.username else parsed.hostname
        return _Host("ssh", target, parsed.port or 0)
    raise ExecutorError(f"DOCKER_HOST {text!r}: expected unix://, tcp:// or ssh://")


def _tls_context() -> ssl.SSLContext:
    folder = os.environ.get("DOCKER_CERT_PATH") or os.path.expanduser("~/.docker")
    context = ssl.create_default_context(cafile=os.path.join(folder, "ca.pem"))
    context.load_cert_chain(os.path.join(folder, "cert.pem"), os.path.join(folder, "key.pem"))
    return context


class Connection:
    """One connection to the engine, with a read buffer; after an upgrade, the raw stream."""

    def __init__(self, stream: anyio.abc.ByteStream, address: str = "") -> None:
        self.stream = stream
        # Where the engine is, for error messages.
        self.address = address
        self._buffer = bytearray()
        self.reusable = True
        self._closed = False
        # A UNIX socket is read and written here, waiting with `wait_readable`
        # and `wait_writable`: anyio's UNIX stream on asyncio leaves its reader
        # (writer) registered for a moment after a cancelled receive (send),
        # and a read that comes then sets a cancelled future's result, an
        # InvalidStateError in the event loop. A read cut off at the end of a
        # drain, a write of stdin the command stopped taking, cancel so.
        self._socket: socket.socket | None = None
        if isinstance(stream, anyio.abc.UNIXSocketStream):
            self._socket = stream.extra(anyio.abc.SocketAttribute.raw_socket)

    @property
    def where(self) -> str:
        """` at ADDRESS`, or nothing when the address is not known: for messages."""
        return f" at {self.address}" if self.address else ""

    async def receive(self, max_bytes: int = _READ) -> bytes:
        """Bytes from the buffer first, then from the stream; `b""` at the end."""
        if self._buffer:
            data = bytes(self._buffer[:max_bytes])
            del self._buffer[:max_bytes]
            return data
        return await self._receive(max_bytes)

    async def receive_exactly(self, size: int) -> bytes:
        """Exactly `size` bytes, or fewer only when the stream ends."""
        while len(self._buffer) < size:
            data = await self._fill()
            if not data:
                break
        data = bytes(self._buffer[:size])
        del self._buffer[:size]
        return data

    async def receive_frame(self) -> tuple[int, bytes] | None:
        """One frame of a multiplexed exec stream (stream number, data); `None` at the end.

        Safe to cancel: nothing is taken from the buffer until the whole
        frame is in it, so a cancelled read loses no byte.
        """
        while len(self._buffer) < 8:
            if not await self._fill():
                return None
        size = int.from_bytes(self._buffer[4:8], "big")
        while len(self._buffer) < 8 + size:
            if not await self._fill():
                return None
        kind = self._buffer[0]
        data = bytes(self._buffer[8 : 8 + size])
        del self._buffer[: 8 + size]
        return kind, data

    async def receive_until(self, delimiter: bytes, limit: int) -> bytes:
        """The bytes up to `delimiter` (dropped), failing past `limit`."""
        start = 0
        while True:
            found = self._buffer.find(delimiter, start)
            if found >= 0:
                data = bytes(self._buffer[:found])
                del self._buffer[: found + len(delimiter)]
                return data
            if len(self._buffer) > limit:
                raise EngineError("the engine's reply is not HTTP")
            start = max(0, len(self._buffer) - len(delimiter) + 1)
            if not await self._fill():
                raise EngineError(f"the Docker engine{self.where} closed the connection")

    async def _fill(self) -> bytes:
        data = await self._receive(_READ)
        self._buffer += data
        return data

    async def _receive(self, max_bytes: int) -> bytes:
        """What the stream has next, up to `max_bytes`; `b""` at its end (or once it broke)."""
        sock = self._socket
        if sock is None:
            try:
                return await self.stream.receive(max_bytes)
            except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
                return b""
        # As the stream's own receive: the loop gets its turn before each read.
        await anyio.lowlevel.checkpoint()
        while True:
            try:
                return sock.recv(max_bytes)
            except BlockingIOError:
                pass
            except OSError:
                return b""
            try:
                await anyio.wait_readable(sock)
            except (anyio.ClosedResourceError, OSError):
                return b""

    async def send(self, data: bytes) -> None:
        """Write `data`.

        Raises:
            OSError: The connection is broken or closed.

        """
        sock = self._socket
        if sock is None:
            # A TCP, TLS or `ssh` stream says so with anyio's own errors: the
            # callers expect the OSError a socket gives, whatever the stream.
            try:
                await self.stream.send(data)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError) as error:
                raise BrokenPipeError(f"the connection is broken: {error!r}") from error
            return
        await anyio.lowlevel.checkpoint()
        view = memoryview(data)
        while view:
            try:
                view = view[sock.send(view) :]
                continue
            except BlockingIOError:
                pass
            try:
                await anyio.wait_writable(sock)
            except anyio.ClosedResourceError as error:
                raise BrokenPipeError("the connection is closed") from error

    def heard_from(self) -> bool:
        """Whether the other end has sent something or hung up, seen without waiting.

        Known for a unix socket only (one look at its receive queue); `False`
        elsewhere, where it cannot be told without a read.
        """
        if self._buffer or self._closed:
            return True
        sock = self._socket
        if sock is None:
            return False
        try:
            sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
        except BlockingIOError:
            return False
        except OSError:
            return True
        return True

    async def send_eof(self) -> None:
        """Close the writing half: the engine sees the end of stdin."""
        with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
            if isinstance(self.stream, anyio.abc.SocketStream | _ProcessStream):
                await self.stream.send_eof()

    async def aclose(self) -> None:
        """Close the connection, whatever cancels the caller; a second call does nothing."""
        if self._closed:
            return
        self._closed = True
        self.reusable = False
        await run_to_completion(self.stream.aclose)


@attrs.define(eq=False)
class Response:
    """An engine's reply; read its body once, with `read()` or `iter_bytes()`."""

    status: int
    headers: dict[str, str]
    connection: Connection
    _remaining: int | None = None
    _chunked: bool = False
    _done: bool = False

    async def iter_bytes(self) -> AsyncIterator[bytes]:
        """The body, piece by piece as it arrives."""
        conn = self.connection
        if self._chunked:
            while True:
                line = await conn.receive_until(b"\r\n", 1024)
                size = int(line.split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    await conn.receive_until(b"\r\n", 1 << 16)
                    break
                left = size
                while left:
                    data = await conn.receive(min(left, _READ))
                    if not data:
                        raise EngineError(
                            f"the Docker engine{conn.where} closed the connection mid-reply"
                        )
                    left -= len(data)
                    yield data
                await conn.receive_exactly(2)
        elif self._remaining is not None:
            while self._remaining:
                data = await conn.receive(min(self._remaining, _READ))
                if not data:
                    raise EngineError(
                        f"the Docker engine{conn.where} closed the connection mid-reply"
                    )
                self._remaining -= len(data)
                yield data
        else:
            conn.reusable = False
            while data := await conn.receive():
                yield data
        self._done = True

    async def read(self) -> bytes:
        """The whole body."""
        return b"".join([piece async for piece in self.iter_bytes()])

    def json(self, body: bytes) -> Any:
        """`body` parsed as JSON."""
        return json.loads(body) if body else None

    @property
    def done(self) -> bool:
        """Whether the body was read to its end (the connection can be reused)."""
        return self._done


def _message(body: bytes) -> str:
    try:
        return str(json.loads(body)["message"])
    except (ValueError, KeyError, TypeError):
        return body.decode("utf-8", "replace").strip()


@attrs.define(eq=False)
class EngineClient:
    """Requests to one Docker engine, over a small pool of keep-alive connections.

    Args:
        host: A `DOCKER_HOST`-style address; `None` reads `DOCKER_HOST`, then
            falls back to the local unix socket.

    """

    host: str | None = None
    _target: _Host = attrs.field(init=False)
    _idle: list[Connection] = attrs.field(init=False, factory=list)
    _closed: bool = attrs.field(init=False, default=False)

    def __attrs_post_init__(self) -> None:
        self._target = _parse_host(self.host)

    @property
    def address(self) -> str:
        """Where the engine is, as `DOCKER_HOST` would say it."""
        target = self._target
        if target.scheme == "tcp":
            return f"tcp://{target.address}:{target.port}"
        return f"{target.scheme}://{target.address}"

    async def connect(self) -> Connection:
        """A new connection to the engine.

        Raises:
            EngineError: The engine cannot be reached.

        """
        target = self._target
        try:
            if target.scheme == "unix":
                stream: anyio.abc.ByteStream = await anyio.connect_unix(target.address)
            elif target.scheme == "tcp" and target.tls is not None:
                stream = await anyio.connect_tcp(
                    target.address, target.port, ssl_context=target.tls, tls=True
                )
            elif target.scheme == "tcp":
                stream = await anyio.connect_tcp(target.address, target.port)
            else:
                argv = ["ssh", "-o", "BatchMode=yes"]
                if target.port:
                    argv += ["-p", str(target.port)]
                argv += ["--", target.address, "docker", "system", "dial-stdio"]
                process = await anyio.open_process(argv, stderr=None)
                stream = _ProcessStream(process)
        except OSError as error:
            raise EngineError(
                f"cannot reach the Docker engine at {self.address}: {error.strerror or error}"
            ) from error
        return Connection(stream, self.address)

    def gone(self, reason: str) -> EngineError:
        """The error for an engine that went away mid-conversation, saying where and why."""
        return EngineError(f"the Docker engine at {self.address} is gone: {reason}")

    async def _acquire(self) -> Connection:
        if self._closed:
            raise ExecutorError("the Docker client is closed")
        if self._idle:
            return self._idle.pop()
        return await self.connect()

    async def _release(self, conn: Connection, response: Response | None) -> None:
        if (
            not self._closed
            and conn.reusable
            and response is not None
            and response.done
            and response.headers.get("connection", "").lower() != "close"
            and len(self._idle) < _POOL
        ):
            self._idle.append(conn)
        else:
            await conn.aclose()

    async def _send(
        self,
        conn: Connection,
        method: str,
        path: str,
        query: Mapping[str, Any] | None,
        body: bytes | None,
        content_type: str | None,
        upgrade: bool,
    ) -> Response:
        target = f"/{API_VERSION}{path}"
        if query:
            target += "?" + urllib.parse.urlencode(
                {k: _query_value(v) for k, v in query.items() if v is not None},
                quote_via=urllib.parse.quote,
            )
        lines = [f"{method} {target} HTTP/1.1", "Host: docker"]
        if upgrade:
            lines += ["Connection: Upgrade", "Upgrade: tcp"]
        if body is not None:
            lines.append(f"Content-Length: {len(body)}")
            if content_type:
                lines.append(f"Content-Type: {content_type}")
        head = ("\r\n".join(lines) + "\r\n\r\n").encode()
        try:
            await conn.send(head + body if body is not None and len(body) < _READ else head)
            if body is not None and len(body) >= _READ:
                view = memoryview(body)
                for start in range(0, len(body), 1 << 20):
                    await conn.send(bytes(view[start : start + (1 << 20)]))
        except OSError as error:
            # The engine went away (or closed a kept-alive connection): an
            # EngineError, so `stream` tries once more on a new connection.
            raise self.gone(error.strerror or str(error) or type(error).__name__) from error
        raw = await conn.receive_until(b"\r\n\r\n", _MAX_HEAD)
        status_line, *header_lines = raw.decode("latin-1").split("\r\n")
        parts = status_line.split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/"):
            raise EngineError(f"the engine's reply is not HTTP: {status_line[:80]!r}")
        headers: dict[str, str] = {}
        for line in header_lines:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        status = int(parts[1])
        response = Response(status, headers, conn)
        if status == 101 or (upgrade and status == 200):
            conn.reusable = False
            return response
        if "chunked" in headers.get("transfer-encoding", "").lower():
            response._chunked = True
        elif "content-length" in headers:
            response._remaining = int(headers["content-length"])
        elif status in (204, 304):
            response._remaining = 0
        if method == "HEAD":
            response._remaining = 0
        if response._remaining == 0:
            response._done = True
        return response

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, Any] | None = None,
        json_body: Any = None,
        body: bytes | None = None,
        content_type: str | None = None,
        ok: tuple[int, ...] = (200, 201, 204, 304),
    ) -> tuple[Response, bytes]:
        """Send a request and read the whole reply.

        Raises:
            EngineError: The status is not in `ok`; the message is the engine's.

        """
        async with self.stream(
            method,
            path,
            query=query,
            json_body=json_body,
            body=body,
            content_type=content_type,
            ok=ok,
        ) as response:
            data = await response.read()
        return response, data

    async def request_json(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, Any] | None = None,
        json_body: Any = None,
        ok: tuple[int, ...] = (200, 201, 204, 304),
    ) -> Any:
        """Send a request and return the reply parsed as JSON (`None` for an empty one)."""
        response, data = await self.request(method, path, query=query, json_body=json_body, ok=ok)
        return response.json(data)

    @contextlib.asynccontextmanager
    async def stream(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, Any] | None = None,
        json_body: Any = None,
        body: bytes | None = None,
        content_type: str | None = None,
        ok: tuple[int, ...] = (200, 201, 204, 304),
    ) -> AsyncIterator[Response]:
        """Send a request and yield the reply, to read its body as it arrives.

        Raises:
            EngineError: The status is not in `ok`; the message is the engine's.

        """
        if json_body is not None:
            body = json.dumps(json_body).encode()
            content_type = "application/json"
        # A kept-alive connection may have been closed by the engine meanwhile:
        # a request that finds it so is sent again once, on a new connection.
        for attempt in range(2):
            conn = await self._acquire()
            try:
                response = await self._send(
                    conn, method, path, query, body, content_type, upgrade=False
                )
            except EngineError:
                await conn.aclose()
                if attempt or self._closed:
                    raise
                continue
            except BaseException:
                await conn.aclose()
                raise
            break
        try:
            if response.status not in ok:
                data = await response.read()
                raise EngineError(
                    f"Docker engine: {_message(data) or f'HTTP {response.status}'}",
                    response.status,
                )
            yield response
        except BaseException:
            await conn.aclose()
            raise
        else:
            await self._release(conn, response)

    async def upgrade(
        self, method: str, path: str, *, json_body: Any = None
    ) -> tuple[Response, Connection]:
        """Send a request that asks for the connection itself (exec attach).

        Returns:
            The reply's head and the connection, now a raw stream in both directions.

        Raises:
            EngineError: The engine refused; the message is its own.

        """
        conn = await self.connect()
        try:
            body = json.dumps(json_body).encode() if json_body is not None else None
            response = await self._send(
                conn, method, path, None, body, "application/json", upgrade=True
            )
            if response.status not in (101, 200):
                data = await response.read()
                raise EngineError(
                    f"Docker engine: {_message(data) or f'HTTP {response.status}'}",
                    response.status,
                )
        except BaseException:
            await conn.aclose()
            raise
        return response, conn

    async def create_exec(self, container_id: str, config: Mapping[str, Any]) -> str:
        """Create an exec in the container from `config` (Engine API `ExecConfig`); its id.

        Raises:
            EngineError: The engine refused; the message is its own.

        """
        created = await self.request_json(
            "POST", f"/containers/{container_id}/exec", json_body=config
        )
        return str(created["Id"])

    async def attach_exec(self, exec_id: str, *, tty: bool) -> Connection:
        """Start the exec attached; the connection then carries its streams both ways.

        Raises:
            EngineError: The engine refused; the message is its own.

        """
        _, conn = await self.upgrade(
            "POST", f"/exec/{exec_id}/start", json_body={"Detach": False, "Tty": tty}
        )
        return conn

    async def went_away(self, container_id: str, *, wait: float) -> str | None:
        """Why an exec ended that its command did not end: the engine or the container went away.

        Asks the engine about the container until it stops, or the engine
        cannot be asked, for up to `wait` seconds: a stopping engine kills
        the container's processes a moment before it says the container
        stopped, or stops answering. `None` when the container runs on.
        """
        short = container_id[:12]
        with anyio.move_on_after(wait):
            while True:
                try:
                    info = await self.request_json("GET", f"/containers/{container_id}/json")
                except EngineError as error:
                    if not error.status:
                        return str(error)
                    where = f"on the Docker engine at {self.address}"
                    return f"the container {short} {where} is gone: {error}"
                state = (info or {}).get("State") or {}
                if not state.get("Running") or state.get("Restarting"):
                    code = state.get("ExitCode")
                    return (
                        f"the container {short} on the Docker engine at {self.address}"
                        f" stopped (exit code {code})"
                    )
                await anyio.sleep(0.05)
        return None

    async def aclose(self) -> None:
        """Close every idle connection and refuse new requests."""
        self._closed = True
        idle, self._idle = self._idle, []
        for conn in idle:
            await conn.aclose()


def _query_value(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, dict | list):
        return json.dumps(value)
    return str(value)
