"""MCP's stdio transport without threads: newline-delimited JSON-RPC on stdin and stdout.

The SDK's `stdio_server` reads each line and writes each message in a worker
thread (`anyio.wrap_file`): three thread hand-offs per call, which on a busy
machine cost more than the rest of the call. Here the pipes are read and
written non-blocking from the event loop (`anyio.wait_readable` /
`wait_writable`), on asyncio and trio alike.

As the SDK's transport does, it serves from private copies of fds 0 and 1
and points those at /dev/null and stderr while it serves, so that nothing
else in the process, nor a child that inherits them, reads the wire or
writes onto it; they are restored at the end. Where stdin or stdout is not a
pipe, socket or terminal (a regular file, which cannot be polled), the SDK's
own transport is used instead.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
from collections.abc import AsyncIterator
from typing import Any

import anyio

from executor._mcp.envelope import PARSE_ERROR, envelope_problem, invalid_request, readable_id

_READ = 1 << 16


def _pollable(fd: int) -> bool:
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or os.isatty(fd)


def _refusal(line: bytes, error: ValueError | RecursionError) -> dict[str, Any]:
    """The error for a line that is not one JSON-RPC message: not JSON, or not a message.

    It carries the message's id where that could be read.
    """
    try:
        value = json.loads(line)
    except ValueError:
        return invalid_request("the line is not JSON", PARSE_ERROR)
    except RecursionError:
        return invalid_request("the message is nested too deeply")
    problem = envelope_problem(value) or f"the message is not one MCP knows: {_shape(value, error)}"
    return invalid_request(problem, ident=readable_id(value))


# The SDK's class for each kind of message, by the field that tells it.
_KINDS = (("error", "JSONRPCError"), ("result", "JSONRPCResponse"), ("id", "JSONRPCRequest"))


def _shape(value: object, error: ValueError | RecursionError) -> str:
    """What is wrong with a message of the right frame, in a few words (no values quoted).

    The SDK's validation error lists every kind of message the value is not,
    each with the value itself; only the kind the message claims to be matters.
    """
    from pydantic import ValidationError

    if not isinstance(error, ValidationError) or not isinstance(value, dict):
        return type(error).__name__
    kind = next((name for field, name in _KINDS if field in value), "JSONRPCNotification")
    problems = [
        f"{'.'.join(str(part) for part in each['loc'][1:]) or 'message'}: {each['msg']}"
        for each in error.errors(include_input=False, include_url=False)
        if each["loc"] and each["loc"][0] == kind
    ]
    return "; ".join(problems[:3]) or "its fields are not those of a message"


@contextlib.asynccontextmanager
async def stdio_streams() -> AsyncIterator[tuple[Any, Any]]:
    """The (read, write) streams of MCP messages on this process's stdin and stdout."""
    if not (_pollable(0) and _pollable(1)):
        from mcp.server.stdio import stdio_server

        async with stdio_server() as streams:
            yield streams
        return
    import mcp_types
    from mcp.shared.message import SessionMessage

    notification = mcp_types.JSONRPCNotification

    reader, writer = os.dup(0), os.dup(1)  # not inherited by children (PEP 446)
    blocking = os.get_blocking(reader), os.get_blocking(writer)
    saved_in, saved_out = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.dup2(2, 1)
    os.set_blocking(reader, False)
    os.set_blocking(writer, False)
    incoming_send, incoming = anyio.create_memory_object_stream[Any](0)
    outgoing, outgoing_receive = anyio.create_memory_object_stream[Any](0)

    async def read() -> None:
        buffer = bytearray()
        async with incoming_send:
            while True:
                await anyio.wait_readable(reader)
                try:
                    data = os.read(reader, _READ)
                except BlockingIOError:
                    continue
                if not data:
                    return
                buffer += data
                while (end := buffer.find(b"\n")) >= 0:
                    line = bytes(buffer[:end])
                    del buffer[: end + 1]
                    if not line.strip():
                        continue
                    try:
                        message = mcp_types.jsonrpc_message_adapter.validate_json(
                            line, by_name=False
                        )
                        if isinstance(message, notification) and b'"id"' in line:
                            # An id the SDK cannot take (1.5, true, an object) makes
                            # it read a request as a notification and answer nothing:
                            # the client would wait for ever.
                            problem = envelope_problem(json.loads(line))
                            if problem is not None:
                                raise ValueError(problem)
                    except (ValueError, RecursionError) as error:
                        # Not one message: answered here with -32700 or -32600 (id null), as
                        # JSON-RPC asks; the SDK would only log it, leaving the client waiting.
                        refusal = _refusal(line, error)
                        await write_line(json.dumps(refusal, separators=(",", ":")).encode())
                        continue
                    await incoming_send.send(SessionMessage(message))

    written = anyio.Event()
    # One line at a time on the wire: the reader's refusals and the server's messages.
    wire = anyio.Lock()

    async def write_line(data: bytes) -> None:
        view = memoryview(data + b"\n")
        async with wire:
            while view:
                try:
                    view = view[os.write(writer, view) :]
                except BlockingIOError:
                    await anyio.wait_writable(writer)

    async def write() -> None:
        try:
            async with outgoing_receive:
                async for session_message in outgoing_receive:
                    message = session_message.message
                    text = message.model_dump_json(by_alias=True, exclude_unset=True)
                    await write_line(text.encode())
        finally:
            written.set()

    try:
        async with anyio.create_task_group() as group:
            group.start_soon(read)
            group.start_soon(write)
            try:
                yield incoming, outgoing
            finally:
                # The server is done: let the writer send what it holds, then stop reading.
                outgoing.close()
                with anyio.move_on_after(5, shield=True):
                    await written.wait()
                group.cancel_scope.cancel()
    finally:
        for fd, was in zip((reader, writer), blocking, strict=True):
            with contextlib.suppress(OSError):
                os.set_blocking(fd, was)
            os.close(fd)
        os.dup2(saved_in, 0)
        os.dup2(saved_out, 1)
        os.close(saved_in)
        os.close(saved_out)
