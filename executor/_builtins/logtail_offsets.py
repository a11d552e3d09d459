"""Where a log tail under an idempotency key records how far it has read each file.

One small file per key, `<journal file>.logtail/<key>.pos`, beside the
journal that holds the key's claim and final. It has a slot per file,
holding the file's device and inode, the offset and line number of the end
of the last entry handed over, a digest of the file's first bytes (to tell
the file from another that got its inode, or from itself truncated) and
its path. A slot is two copies of 512 bytes, each with a sequence number
and a CRC, written alternately with one `pwrite`: a process killed at any
instant leaves the older copy whole, so the position read back is one that
was written, never a torn mix. Writing one costs a system call (about a
microsecond), so a tail records its position at every entry it hands over.

The file survives a crash of the process (the page cache holds it); like
the journal with `synchronous="normal"`, it is not synced against a power
loss.
"""

from __future__ import annotations

import contextlib
import os
import struct
import time
import zlib
from pathlib import Path

import attrs

_MAGIC = b"executor log positions 1\n"
_HEADER = 4096
_COPY = 512
_SLOT = 2 * _COPY
_RECORD = struct.Struct("<IQQQQQHH16s")
_MAX_PATH = _COPY - _RECORD.size
# Position files of keys untouched this long are deleted when another is
# opened: as the journal forgets its finals after 30 days by default.
_MAX_AGE = 30 * 24 * 3600


@attrs.frozen(kw_only=True)
class FilePosition:
    """How far a tail has read one file.

    Attributes:
        dev: The file's device.
        ino: Its inode.
        offset: Bytes of it read and handed over (or filtered out).
        line: Lines before `offset`.
        head: A digest of its first `head_length` bytes.
        head_length: How many first bytes `head` covers (up to 64).
        path: Where the file was when last seen.
    """

    dev: int
    ino: int
    offset: int
    line: int
    head: bytes
    head_length: int
    path: str


def positions_path(folder: str | os.PathLike[str], key: str) -> Path:
    """The position file of the tail under `key`, in `folder`."""
    return Path(folder) / f"{key}.pos"


def head_digest(data: bytes) -> bytes:
    """The digest kept of a file's first bytes."""
    return zlib.crc32(data).to_bytes(4, "little") + data[:12].ljust(12, b"\0")


class PositionFile:
    """The position file of one tail: read at start, one slot rewritten per update."""

    def __init__(self, path: Path) -> None:
        self.path = path
        folder = path.parent
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        _prune(folder, keep=path)
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        self._seq = 0
        self._slots: dict[tuple[int, int], int] = {}
        self._free: list[int] = []
        self._last: dict[int, tuple[int, int, int]] = {}
        # Which copy of each slot holds its newest record: the next write goes to the other.
        self._newest: dict[int, int] = {}
        self._count = 0
        self._positions: list[FilePosition] = []
        self._load()

    def _load(self) -> None:
        data = b""
        size = os.fstat(self._fd).st_size
        if size:
            data = os.pread(self._fd, size, 0)
        if not data.startswith(_MAGIC):
            os.ftruncate(self._fd, 0)
            os.pwrite(self._fd, _MAGIC.ljust(_HEADER, b"\0"), 0)
            return
        self._count = (len(data) - _HEADER) // _SLOT
        for slot in range(self._count):
            base = _HEADER + slot * _SLOT
            best: tuple[int, FilePosition | None] | None = None
            for copy in (0, 1):
                found = _decode(data[base + copy * _COPY : base + (copy + 1) * _COPY])
                if found is not None and (best is None or found[0] > best[0]):
                    best = found
                    self._newest[slot] = copy
            if best is None:
                self._free.append(slot)
                continue
            self._seq = max(self._seq, best[0])
            position = best[1]
            if position is None:
                self._free.append(slot)
                continue
            self._slots[(position.dev, position.ino)] = slot
            self._positions.append(position)

    def positions(self) -> list[FilePosition]:
        """The positions recorded when the file was opened."""
        return list(self._positions)

    def record(self, position: FilePosition) -> None:
        """Record `position` for its file, in the file's slot (given one the first time)."""
        key = (position.dev, position.ino)
        last = (position.offset, position.line, len(position.path))
        slot = self._slots.get(key)
        if slot is None:
            if self._free:
                slot = self._free.pop(0)
            else:
                slot = self._count
                self._count += 1
            self._slots[key] = slot
        elif self._last.get(slot) == last:
            return
        self._last[slot] = last
        self._write(slot, position)

    def forget(self, dev: int, ino: int) -> None:
        """Free the slot of a file the tail no longer reads."""
        slot = self._slots.pop((dev, ino), None)
        if slot is None:
            return
        self._last.pop(slot, None)
        self._write(slot, None)
        self._free.append(slot)

    def _write(self, slot: int, position: FilePosition | None) -> None:
        self._seq += 1
        copy = 1 - self._newest.get(slot, 1)
        os.pwrite(self._fd, _encode(self._seq, position), _HEADER + slot * _SLOT + copy * _COPY)
        self._newest[slot] = copy

    def close(self) -> None:
        """Close the file (its positions stay recorded)."""
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)


def _encode(seq: int, position: FilePosition | None) -> bytes:
    if position is None:
        body = _RECORD.pack(0, seq, 0, 0, 0, 0, 0, 0, b"")[4:]
    else:
        path = os.fsencode(position.path)[:_MAX_PATH]
        body = (
            _RECORD.pack(
                0,
                seq,
                position.dev,
                position.ino,
                position.offset,
                position.line,
                position.head_length,
                len(path),
                position.head,
            )[4:]
            + path
        )
    body = body.ljust(_COPY - 4, b"\0")
    return zlib.crc32(body).to_bytes(4, "little") + body


def _decode(record: bytes) -> tuple[int, FilePosition | None] | None:
    if len(record) != _COPY or zlib.crc32(record[4:]) != int.from_bytes(record[:4], "little"):
        return None
    _crc, seq, dev, ino, offset, line, head_length, path_length, head = _RECORD.unpack_from(record)
    if seq == 0:
        return None
    if dev == 0 and ino == 0:
        return seq, None
    path = os.fsdecode(record[_RECORD.size : _RECORD.size + path_length])
    return seq, FilePosition(
        dev=dev,
        ino=ino,
        offset=offset,
        line=line,
        head=head,
        head_length=head_length,
        path=path,
    )


def _prune(folder: Path, *, keep: Path) -> None:
    cutoff = time.time() - _MAX_AGE
    with contextlib.suppress(OSError):
        for entry in os.scandir(folder):
            if entry.name.endswith(".pos") and entry.path != str(keep):
                with contextlib.suppress(OSError):
                    if entry.stat().st_mtime < cutoff:
                        os.unlink(entry.path)
