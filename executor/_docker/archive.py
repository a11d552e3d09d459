"""Files in a container over the engine's archive endpoint: stat, tar in and out, unpacking."""

from __future__ import annotations

import base64
import io
import json
import os
import tarfile
import time
from collections.abc import AsyncIterator
from typing import Any, Final

import anyio
import anyio.from_thread
import anyio.to_thread

from executor._core.errors import EngineError, ExecutorError
from executor._docker.api import EngineClient, _message
from executor._docker.dockerignore import DockerIgnore, pack_context

# Gives the staged file (and the folders made for it) to the command user,
# then renames it over the target: paths are arguments, never script text.
RENAME: Final = """o=$1 s=$2 t=$3
shift 3
if [ -n "$o" ]; then chown -- "$o" "$s" "$@" || exit 1; fi
exec mv -f -- "$s" "$t"
"""
# Go's os.FileMode bits, as the archive endpoint reports a path's mode.
MODE_DIR = 1 << 31
MODE_SYMLINK = 1 << 27
MODE_TYPE = (1 << 31) | (1 << 27) | (1 << 26) | (1 << 25) | (1 << 24) | (1 << 21) | (1 << 19)
SYMLINK_HOPS = 40
_READ_BLOCK = 1 << 16
_READ_BLOCK = 1 << 16


async def stat(api: EngineClient, container_id: str, path: str) -> dict[str, Any] | None:
    """The archive endpoint's stat of `path` (not following a last symlink), or `None`."""
    response, _ = await api.request(
        "HEAD",
        f"/containers/{container_id}/archive",
        query={"path": path},
        ok=(200, 404, 500),
    )
    if response.status == 404:
        return None
    if response.status != 200:
        # A HEAD reply has no body to say why: ask again for the message.
        _, body = await api.request(
            "GET",
            f"/containers/{container_id}/archive",
            query={"path": path},
            ok=(200, 404),
        )
        raise EngineError(f"Docker engine: {_message(body)}", response.status)
    header = response.headers.get("x-docker-container-path-stat")
    if not header:
        return None
    info: dict[str, Any] = json.loads(base64.b64decode(header))
    return info


def reason(error: EngineError) -> str:
    """The OS's words for an archive failure, without the engine's host-side paths."""
    message = error.message.removeprefix("Docker engine: ")
    for words in (
        "Not a directory",
        "No such file or directory",
        "Permission denied",
        # The engine says these in Go's lower case: the OS's words, as Local's.
        "No space left on device",
        "Disk quota exceeded",
        "File too large",
    ):
        if words.lower() in message.lower():
            return words
    if "read-only file system" in message.lower():
        return "Read-only file system"
    return message


async def tar_member(pieces: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """The content of the first member of a tar stream, piece by piece."""
    buffer = bytearray()
    size: int | None = None
    async for piece in pieces:
        if size is None:
            buffer += piece
            while size is None and len(buffer) >= 512:
                header = tarfile.TarInfo.frombuf(bytes(buffer[:512]), "utf-8", "surrogateescape")
                del buffer[:512]
                if header.type in (tarfile.XHDTYPE, tarfile.XGLTYPE, tarfile.GNUTYPE_LONGNAME):
                    # An extended header before the member: skip its padded body.
                    skip = -(-header.size // 512) * 512
                    while len(buffer) < skip:
                        more = await anext(pieces, None)
                        if more is None:
                            return
                        buffer += more
                    del buffer[:skip]
                    continue
                size = header.size
            if size is None:
                continue
            piece = bytes(buffer)
            buffer.clear()
        if size <= 0:
            continue
        data = piece[:size]
        size -= len(data)
        if data:
            yield data
    return


def tar_file(folders: list[str], name: str, content: bytes, mode: int) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        prefix = ""
        now = time.time()
        for folder in folders:
            prefix = f"{prefix}{folder}/"
            info = tarfile.TarInfo(prefix.rstrip("/"))
            info.type = tarfile.DIRTYPE
            info.mode = 0o755
            info.mtime = now
            tar.addfile(info)
        info = tarfile.TarInfo(f"{prefix}{name}")
        info.size = len(content)
        info.mode = mode
        info.mtime = now
        tar.addfile(info, io.BytesIO(content))
    return out.getvalue()


def tar_folder(folder: str) -> bytes:
    if not os.path.isdir(folder):
        raise ExecutorError(f"copy_in: {folder} is not a folder")
    # What `docker build` would send of it: its `.dockerignore` honoured.
    return pack_context(folder, DockerIgnore.of_folder(folder)).data


async def unpack(pieces: AsyncIterator[bytes], destination: str) -> None:
    """Unpack a tar stream into `destination`: folders and regular files only."""
    send, receive = anyio.create_memory_object_stream[bytes | None](4)

    class _Reader(io.RawIOBase):
        def __init__(self) -> None:
            self._rest = b""
            self.ended = False

        def readable(self) -> bool:
            return True

        def readinto(self, target: Any) -> int:
            while not self._rest:
                if self.ended:
                    return 0
                piece = anyio.from_thread.run(receive.receive)
                if piece is None:
                    self.ended = True
                    return 0
                self._rest = piece
            size = min(len(target), len(self._rest))
            target[:size] = self._rest[:size]
            self._rest = self._rest[size:]
            return size

    def extract() -> None:
        reader = _Reader()
        with tarfile.open(fileobj=io.BufferedReader(reader), mode="r|") as tar:
            for member in tar:
                if member.isdir() or member.isreg():
                    tar.extract(member, destination, set_attrs=False, filter="data")
        # Drain what follows the archive's end, so the feeder is never stuck.
        while reader.readinto(bytearray(_READ_BLOCK)):
            pass

    async def feed() -> None:
        async with send:
            async for piece in pieces:
                await send.send(piece)
            await send.send(None)

    with receive:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(feed)
            await anyio.to_thread.run_sync(extract)
