"""How the log tailer reaches files: directly on this machine, or through a shell on the executor.

`LocalFiles` reads files of a `LocalExecutor` itself: each file it tails is
held open (so a file renamed or deleted by a rotation is still read to its
end), and it waits on inotify (through libc, with `ctypes`) where the kernel
has it, polling otherwise. `ShellFiles` works through any executor that can
`start()` a session (Docker, SSH, a wrapped or custom executor): one
long-running `sh` loop on the far side answers small requests on its stdin
(list a glob with `stat`, read a file from an offset with `tail -c +N |
head -c N`, count lines, read a file's first bytes), so the tail costs one
process, not one per poll, and needs only POSIX `sh`, `stat`, `head`,
`tail` and `wc` (busybox has them). It polls, and it finds a renamed file
by its inode among its folder's files; a file deleted on the far side
before its last lines were read loses those lines, since nothing holds it
open there.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import functools
import glob
import os
import secrets
import stat
from typing import Protocol

import anyio
import anyio.lowlevel
import attrs

from executor._core.base import ToolExecutor
from executor._core.commands import Command
from executor._core.errors import ExecutorError
from executor._core.output import Stdout
from executor._core.session import READER_KEPT, ProcessSession
from executor._core.stdin import Text


@attrs.frozen
class FileInfo:
    """A regular file as a listing finds it."""

    path: str
    dev: int
    ino: int
    size: int


class FileSource(Protocol):
    """Where the tailer's files are, and how it reads them."""

    poll_interval: float
    watches: bool

    async def glob(self, pattern: str) -> list[FileInfo]:
        """The regular files matching `pattern` (a path or a glob), sorted by path."""
        ...

    async def stat(self, path: str) -> FileInfo | None:
        """The file at `path` now, or `None`."""
        ...

    async def open(self, info: FileInfo) -> object:
        """A handle on the file `info` names, kept until `close`."""
        ...

    async def read(
        self, handle: object, info: FileInfo, offset: int, limit: int
    ) -> tuple[bytes, int] | None:
        """Up to `limit` bytes of the file from `offset`, and how many bytes of the file they are.

        The two differ only where a wrapper rewrote what was read (`Secrets`
        redacting it). `None` if the file cannot be read any more.
        """
        ...

    async def size(self, handle: object, info: FileInfo) -> int | None:
        """The file's size now; `None` when it is gone (or the path holds another file)."""
        ...

    async def head(self, handle: object, info: FileInfo, length: int) -> bytes | None:
        """The file's first `length` bytes (fewer if it is shorter).

        `None` when they cannot be told: the path holds another file now (a
        rotation between two looks), which is not the file being truncated.
        """
        ...

    async def count_lines(self, handle: object, info: FileInfo, upto: int) -> int:
        """How many lines end before `upto`."""
        ...

    async def last_lines(self, handle: object, info: FileInfo, size: int, count: int) -> int:
        """Where the last `count` lines before `size` begin."""
        ...

    def close(self, handle: object) -> None:
        """Let go of a handle from `open`."""
        ...

    async def wait(self, timeout: float, folders: set[str]) -> None:
        """Wait until something may have changed in `folders`, or `timeout` seconds."""
        ...

    async def aclose(self) -> None:
        """Release what the source holds."""
        ...


# --- local files ----------------------------------------------------------------------

_IN_MODIFY = 0x002
_IN_ATTRIB = 0x004
_IN_CLOSE_WRITE = 0x008
_IN_MOVED_FROM = 0x040
_IN_MOVED_TO = 0x080
_IN_CREATE = 0x100
_IN_DELETE = 0x200
_IN_DELETE_SELF = 0x400
_IN_MOVE_SELF = 0x800
_IN_NONBLOCK = os.O_NONBLOCK
_IN_CLOEXEC = os.O_CLOEXEC
_WATCHED = (
    _IN_MODIFY
    | _IN_ATTRIB
    | _IN_CLOSE_WRITE
    | _IN_MOVED_FROM
    | _IN_MOVED_TO
    | _IN_CREATE
    | _IN_DELETE
    | _IN_DELETE_SELF
    | _IN_MOVE_SELF
)


@functools.cache
def _libc() -> ctypes.CDLL:
    """The C library, loaded once (`find_library` runs programs: only when the usual name fails)."""
    try:
        return ctypes.CDLL("libc.so.6", use_errno=True)
    except OSError:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so", use_errno=True)


class _Inotify:
    """An inotify instance through libc: watches folders, wakes a waiter on any change."""

    def __init__(self) -> None:
        libc = _libc()
        self._add = libc.inotify_add_watch
        self._add.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32)
        self._add.restype = ctypes.c_int
        fd = libc.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC)
        if fd < 0:
            error = ctypes.get_errno()
            raise OSError(error, os.strerror(error))
        self.fd: int = fd
        self._watched: set[str] = set()

    def watch(self, path: str) -> None:
        if path in self._watched:
            return
        if self._add(self.fd, os.fsencode(path), _WATCHED) >= 0:
            self._watched.add(path)
        # A folder that cannot be watched (gone, no permission) is polled.

    def drain(self) -> None:
        with contextlib.suppress(BlockingIOError, InterruptedError):
            while os.read(self.fd, 65536):
                pass

    def close(self) -> None:
        fd, self.fd = self.fd, -1
        if fd >= 0:
            os.close(fd)


def _open_inotify() -> _Inotify | None:
    try:
        return _Inotify()
    except (OSError, AttributeError):
        # No inotify (another kernel, a seccomp filter, no libc symbol): poll.
        return None


def _info(path: str, status: os.stat_result) -> FileInfo:
    return FileInfo(path=path, dev=status.st_dev, ino=status.st_ino, size=status.st_size)


@attrs.define(eq=False)
class LocalFiles:
    """Files on this machine, read directly, watched with inotify where there is one.

    Args:
        root: The folder relative paths are taken from (the executor's workdir).
        confine: Refuse files whose real path is outside `root` (a confined executor).
        poll_interval: Seconds between looks when no inotify is at hand; with
            inotify, the longest wait between looks anyway (a file behind a
            symlink into another folder changes unseen).
        inotify: Use inotify if the kernel has it.
    """

    root: str
    confine: bool = False
    poll_interval: float = 0.05
    inotify: bool = True
    watches: bool = attrs.field(init=False, default=False)
    _notify: _Inotify | None = attrs.field(init=False, default=None)
    _real_root: str = attrs.field(init=False, default="")

    def __attrs_post_init__(self) -> None:
        self._real_root = os.path.realpath(self.root)
        if self.inotify:
            self._notify = _open_inotify()
            self.watches = self._notify is not None

    def absolute(self, path: str) -> str:
        """`path` joined onto the root."""
        return os.path.normpath(os.path.join(self.root, path))

    def _check(self, path: str) -> None:
        if not self.confine:
            return
        real = os.path.realpath(path)
        if real != self._real_root and not real.startswith(self._real_root.rstrip("/") + "/"):
            raise ExecutorError(f"{path} is outside the workdir {self.root}; it is not read")

    async def glob(self, pattern: str) -> list[FileInfo]:
        found = []
        absolute = self.absolute(pattern)
        paths = glob.glob(absolute) if glob.has_magic(absolute) else [absolute]
        for path in sorted(paths):
            try:
                status = os.stat(path)
            except OSError:
                continue
            if stat.S_ISREG(status.st_mode):
                found.append(_info(path, status))
        return found

    async def stat(self, path: str) -> FileInfo | None:
        try:
            status = os.stat(path)
        except OSError:
            return None
        return _info(path, status) if stat.S_ISREG(status.st_mode) else None

    async def open(self, info: FileInfo) -> object:
        self._check(info.path)
        fd = os.open(info.path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
        status = os.fstat(fd)
        if (status.st_dev, status.st_ino) != (info.dev, info.ino):
            # Replaced between the listing and the open: the caller lists again.
            os.close(fd)
            raise FileNotFoundError(errno.ENOENT, "the file was replaced", info.path)
        if self._notify is not None:
            self._notify.watch(info.path)
        return fd

    async def read(
        self, handle: object, info: FileInfo, offset: int, limit: int
    ) -> tuple[bytes, int] | None:
        assert isinstance(handle, int)
        try:
            # Straight from the page cache, on the event loop: a worker thread's
            # round trip would cost more than the read of a block.
            data = os.pread(handle, limit, offset)
        except OSError:
            return None
        return data, len(data)

    async def size(self, handle: object, info: FileInfo) -> int | None:
        assert isinstance(handle, int)
        try:
            return os.fstat(handle).st_size
        except OSError:
            return None

    async def head(self, handle: object, info: FileInfo, length: int) -> bytes | None:
        assert isinstance(handle, int)
        try:
            return os.pread(handle, length, 0)
        except OSError:
            return b""

    async def count_lines(self, handle: object, info: FileInfo, upto: int) -> int:
        assert isinstance(handle, int)
        lines = 0
        offset = 0
        while offset < upto:
            block = os.pread(handle, min(1 << 20, upto - offset), offset)
            if not block:
                break
            lines += block.count(b"\n")
            offset += len(block)
            await anyio.lowlevel.checkpoint()
        return lines

    async def last_lines(self, handle: object, info: FileInfo, size: int, count: int) -> int:
        assert isinstance(handle, int)
        if count <= 0:
            return size
        position = size
        if size and os.pread(handle, 1, size - 1) == b"\n":
            position = size - 1  # the last line's own newline ends it, begins nothing
        found = 0
        while position > 0:
            start = max(0, position - 65536)
            block = os.pread(handle, position - start, start)
            index = len(block)
            while (index := block.rfind(b"\n", 0, index)) >= 0:
                found += 1
                if found == count:
                    return start + index + 1
            position = start
            await anyio.lowlevel.checkpoint()
        return 0

    def close(self, handle: object) -> None:
        assert isinstance(handle, int)
        with contextlib.suppress(OSError):
            os.close(handle)

    async def wait(self, timeout: float, folders: set[str]) -> None:
        notify = self._notify
        if notify is None:
            await anyio.sleep(min(timeout, self.poll_interval))
            return
        for folder in folders:
            notify.watch(folder)
        with anyio.move_on_after(timeout):
            await anyio.wait_readable(notify.fd)
        notify.drain()

    async def aclose(self) -> None:
        if self._notify is not None:
            self._notify.close()
            self._notify = None


# --- files through a shell ------------------------------------------------------------

# The far side's loop. Each request is one line, `OP ARGS`; each answer is its
# data, then a NUL, the cookie and the answer's fields on one line. The cookie
# is random per tail, so no file's content can pass for an answer's end.
_SCRIPT = r"""
c=%(cookie)s
st() { stat -L -c '%%d %%i %%s' "$1" 2>/dev/null || echo '- - -'; }
while IFS= read -r q; do
  op=${q%%%%" "*}; a=${q#*" "}
  case $op in
  G) (IFS='
'
      for f in $a; do [ -f "$f" ] && stat -L -c '%%d %%i %%s %%n' "$f" 2>/dev/null; done); m=ok;;
  S) m=$(st "$a");;
  R) o=${a%%%%" "*}; a=${a#*" "}; l=${a%%%%" "*}; p=${a#*" "}
     s=$(st "$p"); z=${s##*" "}; n=0
     if [ "$z" != - ] && [ "$z" -gt "$o" ]; then
       n=$((z-o)); [ "$n" -gt "$l" ] && n=$l
       tail -c +$((o+1)) "$p" 2>/dev/null | head -c "$n"
     fi
     m="$s $n $(st "$p")";;
  H) n=${a%%%%" "*}; p=${a#*" "}; head -c "$n" "$p" 2>/dev/null; m=$(st "$p");;
  C) n=${a%%%%" "*}; p=${a#*" "}; m="$(head -c "$n" "$p" 2>/dev/null | wc -l)";;
  T) n=${a%%%%" "*}; a=${a#*" "}; z=${a%%%%" "*}; p=${a#*" "}
     m="$(head -c "$z" "$p" 2>/dev/null | tail -n "$n" | wc -c)";;
  *) m=bad;;
  esac
  printf '\000%%s %%s\n' "$c" "$m"
done
"""


def _shell_path(path: str) -> str:
    """A path the far side takes as a path, never as an option."""
    return path if path.startswith(("/", "./", "../")) else f"./{path}"


def _parse_stat(fields: list[str]) -> tuple[int, int, int] | None:
    if len(fields) < 3 or fields[0] == "-":
        return None
    try:
        return int(fields[0]), int(fields[1]), int(fields[2])
    except ValueError:
        return None


@attrs.define(eq=False)
class ShellFiles:
    """Files read through a long-running `sh` session on an executor (Docker, SSH, any).

    Paths are the far side's: relative ones are taken from where the
    executor runs commands.

    Args:
        executor: Where the files are.
        poll_interval: Seconds between looks for new lines.
    """

    executor: ToolExecutor
    poll_interval: float = 0.05
    watches: bool = attrs.field(init=False, default=False)
    _cookie: bytes = attrs.field(init=False, factory=lambda: secrets.token_hex(12).encode())
    _session: ProcessSession | None = attrs.field(init=False, default=None)
    _stack: contextlib.AsyncExitStack | None = attrs.field(init=False, default=None)
    _buffer: bytearray = attrs.field(init=False, factory=bytearray)
    _lock: anyio.Lock = attrs.field(init=False, factory=anyio.Lock)

    async def _started(self) -> ProcessSession:
        if self._session is not None:
            return self._session
        script = _SCRIPT % {"cookie": self._cookie.decode()}
        try:
            session = await self.executor.start(Command.shell(script))
            # Its answers are read as they come: kept once, not twice.
            session.keep_output(READER_KEPT)
        except NotImplementedError as error:
            raise ExecutorError(
                f"{self.executor!r} cannot start a session, which the log tailer reads "
                "files through"
            ) from error
        stack = contextlib.AsyncExitStack()
        await stack.enter_async_context(session)
        self._stack = stack
        self._session = session
        return session

    def absolute(self, path: str) -> str:
        """`path` as the far side's shell is given it."""
        return _shell_path(path)

    async def _ask(self, request: str) -> tuple[bytes, list[str]]:
        """Send one request; its answer's data and the fields of its end line."""
        if "\n" in request:
            raise ExecutorError(f"a path with a newline cannot be tailed: {request!r}")
        async with self._lock:
            session = await self._started()
            await session.send_stdin(Text(request + "\n"))
            marker = b"\0" + self._cookie + b" "
            while True:
                index = self._buffer.find(marker)
                if index >= 0:
                    end = self._buffer.find(b"\n", index)
                    if end >= 0:
                        data = bytes(self._buffer[:index])
                        fields = self._buffer[index + len(marker) : end].decode().split()
                        del self._buffer[: end + 1]
                        return data, fields
                item = await session.next_chunk()
                if item is None:
                    output = None
                    with contextlib.suppress(Exception):
                        output = await session.finalize()
                    detail = output.text().strip()[-300:] if output is not None else ""
                    raise ExecutorError(
                        "the shell the log tailer reads files through has ended"
                        + (f": {detail}" if detail else "")
                    )
                if isinstance(item.chunk, Stdout):
                    self._buffer += item.chunk.data

    async def glob(self, pattern: str) -> list[FileInfo]:
        data, _ = await self._ask(f"G {_shell_path(pattern)}")
        found = []
        for line in data.decode("utf-8", "surrogateescape").splitlines():
            parts = line.split(" ", 3)
            if len(parts) == 4 and (numbers := _parse_stat(parts)) is not None:
                found.append(FileInfo(parts[3], *numbers))
        return sorted(found, key=lambda info: info.path)

    async def stat(self, path: str) -> FileInfo | None:
        _, fields = await self._ask(f"S {path}")
        numbers = _parse_stat(fields)
        return None if numbers is None else FileInfo(path, *numbers)

    async def open(self, info: FileInfo) -> object:
        return info.path

    async def read(
        self, handle: object, info: FileInfo, offset: int, limit: int
    ) -> tuple[bytes, int] | None:
        data, fields = await self._ask(f"R {offset} {limit} {info.path}")
        before, after = _parse_stat(fields[0:3]), _parse_stat(fields[4:7])
        identity = (info.dev, info.ino)
        if before is None or after is None or before[:2] != identity or after[:2] != identity:
            # The path holds another file now, or none: the caller finds out which.
            return None
        try:
            count = int(fields[3])
        except (IndexError, ValueError):
            return None
        # The far side read `count` bytes of the file; a wrapper that rewrites
        # output (redaction) may hand over another length of text for them.
        return data, count

    async def size(self, handle: object, info: FileInfo) -> int | None:
        found = await self.stat(info.path)
        if found is None or (found.dev, found.ino) != (info.dev, info.ino):
            return None
        return found.size

    async def head(self, handle: object, info: FileInfo, length: int) -> bytes | None:
        data, fields = await self._ask(f"H {length} {info.path}")
        numbers = _parse_stat(fields)
        if numbers is None or numbers[:2] != (info.dev, info.ino):
            # Renamed away between the read and the stat: what was read may be
            # another file's, so nothing is known of this one's first bytes.
            return None
        return data

    async def count_lines(self, handle: object, info: FileInfo, upto: int) -> int:
        _, fields = await self._ask(f"C {upto} {info.path}")
        try:
            return int(fields[0])
        except (IndexError, ValueError):
            return 0

    async def last_lines(self, handle: object, info: FileInfo, size: int, count: int) -> int:
        if count <= 0:
            return size
        _, fields = await self._ask(f"T {count} {size} {info.path}")
        try:
            return max(0, size - int(fields[0]))
        except (IndexError, ValueError):
            return 0

    def close(self, handle: object) -> None:
        return

    async def wait(self, timeout: float, folders: set[str]) -> None:
        await anyio.sleep(min(timeout, self.poll_interval))

    async def aclose(self) -> None:
        stack, self._stack = self._stack, None
        session, self._session = self._session, None
        if stack is None or session is None:
            return
        with anyio.CancelScope(shield=True):
            # Asked to end first: the loop ends at end of input, and nothing is killed.
            with contextlib.suppress(Exception):
                await session.close_stdin()
            with anyio.move_on_after(2), contextlib.suppress(Exception):
                await session.finalize()
        # Left outside any scope of ours: the session's own task group was entered
        # in the enclosing one (its exit kills what still runs, under its own shield).
        await stack.aclose()
