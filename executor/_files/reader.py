"""A forked process that reads files for the walk, so that two cores read at once.

Why a process: the walk's cost is its system calls (an open, a `pread` and a
close per file), and a thread that makes them hands the GIL to the other
threads around each one; two reading threads took longer than one on a quiet
machine. A child forked from the walk (no exec, so it starts in a few
milliseconds with this module's code already loaded) holds a GIL of its own.

The split: the walk itself (listing folders, the ignore rules, the order)
stays in the parent, which sends the child requests of a few runs of names
to read, each run with the descriptor of its folder (`SCM_RIGHTS` over a
`SOCK_SEQPACKET` socket: the very folder the parent listed, so nothing is
resolved by path, and a confined walk stays confined). The child answers
each request, in order, through a pipe: one `marshal`ed list per request, of
one `Answer` per run: the texts of its text files (`str`), in order, and what
became of the others, by their index in the run: skipped without a word
(binary, or no regular file), or the `errno` of a file that could not be
read, which the parent turns into the warning a serial walk logs. Nothing is
logged in the child. Texts come back decoded: `marshal` loads a `str` as fast
as `bytes`, so the decoding costs the parent nothing; and the parent yields
a run's list of texts as it comes.

The child's life is the walk's: it gets SIGKILL when the thread that forked it
ends (`PR_SET_PDEATHSIG`), ends on its own at the end of its socket, and the
parent kills and reaps it when the walk is closed (`ForkedReader.close`). It
blocks every signal it can, closes every descriptor it does not use, runs no
garbage collection (the parent's objects it holds are never finalised), and
leaves with `os._exit`, running nothing of the parent's.
"""

from __future__ import annotations

import array
import contextlib
import ctypes
import fcntl
import gc
import marshal
import os
import select
import signal
import socket
import stat
import sys
import threading
import warnings
from collections import deque
from typing import Final

# O_NOFOLLOW: an entry swapped for a symlink after listing is refused, not
# followed. O_NONBLOCK: a FIFO swapped in after listing opens at once instead
# of waiting forever for a writer (and is then refused by `pread`).
READ_FLAGS: Final = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
# The first read of a file asks for this much: a shorter answer is the whole
# file. Below glibc's mmap threshold (128 KiB), so the buffer Python allocates
# for it, then shrinks to what was read, costs no system call.
FIRST_READ: Final = 1 << 16

Answer = tuple[list[str], list[int]]
"""What the child says of a run of files: the texts of its text files, and the others.

The others as a flat list of pairs: a file's index in the run, then the
`errno` it failed with, or `SKIPPED`.
"""

SKIPPED: Final = 0
"""In an `Answer`, for a file skipped without a word: binary, or no regular file (no `errno`)."""

# Names per request, at most (the parent cuts longer runs). 128 of the longest
# (255 bytes, each undecodable byte marshalled as 3) fit in a datagram of
# `_RECEIVE_BYTES`, within what the socket's default buffer takes.
REQUEST_FILES: Final = 128
# Runs per request, at most: each brings its folder's descriptor.
REQUEST_RUNS: Final = 32
_RECEIVE_BYTES: Final = 1 << 17
# Each answer starts with its length, as 8 bytes.
_HEADER: Final = 8
# The pipe of answers is made this large when the kernel lets it (the
# unprivileged maximum, `/proc/sys/fs/pipe-max-size`), so that the child
# rarely waits for the parent to take what it has read.
_PIPE_BYTES: Final = 1 << 20
_F_SETPIPE_SZ: Final = 1031
_PR_SET_PDEATHSIG: Final = 1
# How long closing waits for the killed child to end before leaving it to a
# thread to reap, in seconds.
_REAP_WAIT: Final = 1.0

_LIBC: ctypes.CDLL | None = None


def spare_core() -> bool:
    """Whether a core is free for a child now, so that forking one pays.

    This process may run on two CPUs or more, and no more tasks are running
    on the machine than it may use, this one included (the fourth field of
    `/proc/loadavg`, counted as the kernel schedules). Where the others keep
    every core busy, a child would only take turns with the walk, and cost
    its messages on top.
    """
    try:
        cpus = len(os.sched_getaffinity(0))
    except OSError:
        cpus = os.cpu_count() or 1
    if cpus < 2:
        return False
    try:
        fd = os.open("/proc/loadavg", os.O_RDONLY | os.O_CLOEXEC)
        try:
            running = int(os.read(fd, 256).split()[3].split(b"/")[0])
        finally:
            os.close(fd)
    except (OSError, ValueError, IndexError):
        return True
    return running <= cpus


class ReaderGone(Exception):
    """The child ended before it answered every request (killed, or it failed)."""


def read_on(fd: int, data: bytes) -> bytes | None:
    """After a first read that gave `data`, empty or as long as asked: the whole file.

    Or `None` if `fd` is not a regular file after all.
    """
    status = os.fstat(fd)
    if not stat.S_ISREG(status.st_mode):
        return None
    if not data:
        return data
    # Asks for one byte more than fstat said is left, so that getting less
    # means the end was reached: the usual long file costs one more read. A
    # file that grew since is read on to its real end.
    chunks = [data]
    offset = len(data)
    while True:
        wanted = max(status.st_size - offset + 1, FIRST_READ)
        chunk = os.pread(fd, wanted, offset)
        chunks.append(chunk)
        offset += len(chunk)
        if len(chunk) < wanted:
            return b"".join(chunks)


def is_regular(fd: int) -> bool:
    """Whether a read error on `fd` is worth a warning: it is a regular file (or fstat fails)."""
    try:
        return stat.S_ISREG(os.fstat(fd).st_mode)
    except OSError:
        return True


def read_names(dir_fd: int, names: list[str]) -> Answer:
    """Read the files `names` in the folder open as `dir_fd`: what the child answers.

    The same reads, checks and decoding as the walk's own loop (`_read_run`
    in `executor._files.walk`), with the outcomes as an `Answer`.
    """
    texts: list[str] = []
    others: list[int] = []
    append = texts.append
    os_open, os_pread, os_close = os.open, os.pread, os.close
    for index, name in enumerate(names):
        try:
            fd = os_open(name, READ_FLAGS, dir_fd=dir_fd)
        except OSError as exc:
            others += index, exc.errno or SKIPPED
            continue
        try:
            data = os_pread(fd, FIRST_READ, 0)
            if not 0 < len(data) < FIRST_READ:
                whole = read_on(fd, data)
                if whole is None:
                    others += index, SKIPPED  # Not a regular file after all.
                    continue
                data = whole
        except OSError as exc:
            others += index, (exc.errno or SKIPPED) if is_regular(fd) else SKIPPED
            continue
        finally:
            os_close(fd)
        if 0 in data:
            others += index, SKIPPED
        else:
            append(data.decode("utf-8", "replace"))
    return texts, others


class ForkedReader:
    """The parent's end of a forked child that reads runs of files (see the module).

    Requests go out with `send`, answers come back in the same order with
    `take`; `outstanding` counts the files asked for and not yet taken.
    Used from one thread at a time (the walk's).
    """

    __slots__ = (
        "_answered",
        "_answers",
        "_buffer",
        "_pid",
        "_poll",
        "_runs",
        "_socket",
        "outstanding",
    )

    def __init__(self, pid: int, requests: socket.socket, answers: int) -> None:
        self._pid = pid
        self._socket = requests
        self._answers = answers
        self._buffer = bytearray()
        # Answers to runs received but not yet taken.
        self._answered: deque[Answer] = deque()
        # How many names each run sent and not yet taken holds.
        self._runs: deque[int] = deque()
        self._poll = select.poll()
        self._poll.register(answers, select.POLLIN)
        self.outstanding = 0

    @classmethod
    def start(cls) -> ForkedReader | None:
        """Fork the child; `None` where that cannot be done (no fork, or it failed)."""
        global _LIBC
        if sys.platform != "linux" or not hasattr(os, "fork"):
            return None
        try:
            if _LIBC is None:
                _LIBC = ctypes.CDLL(None, use_errno=True)
            libc = _LIBC
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        except OSError:
            return None
        try:
            answers, answer_to = os.pipe()
        except OSError:
            ours.close()
            theirs.close()
            return None
        try:
            # Not an error when refused (a user's pipe quota): only slower.
            with contextlib.suppress(OSError):
                fcntl.fcntl(answer_to, _F_SETPIPE_SZ, _PIPE_BYTES)
            os.set_blocking(answers, False)
            parent = os.getpid()
            # The child starts with every signal blocked: none can run one of
            # the parent's handlers there before it is set up.
            mask = signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
            try:
                if sys.version_info >= (3, 12):
                    with warnings.catch_warnings():
                        # Python 3.12 warns that a fork with threads may
                        # deadlock the child: this one takes no lock but the
                        # GIL, which Python makes anew in the child.
                        warnings.simplefilter("ignore", DeprecationWarning)
                        pid = os.fork()
                else:
                    pid = os.fork()
                if pid == 0:
                    _serve(libc, theirs, answer_to, parent)  # Never returns.
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        except (OSError, RuntimeError):  # RuntimeError: no fork here (a subinterpreter).
            ours.close()
            os.close(answers)
            return None
        finally:
            theirs.close()
            os.close(answer_to)
        return cls(pid, ours, answers)

    def send(self, runs: list[tuple[int, list[str]]]) -> bool:
        """Ask the child to read runs of files: each the names in a folder open as a descriptor.

        At most `REQUEST_RUNS` runs of `REQUEST_FILES` names in all, in one
        message. Never blocks: False when it does not fit in the socket now,
        or the child is gone; the caller then reads those files itself.
        """
        # `sendmsg` itself, not `socket.send_fds`, which drops its flags
        # before Python 3.12: a send that waited for room in the socket,
        # while the child waits for room in the pipe of answers this thread
        # would empty, would wait forever (long names, long files).
        rights = (socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd for fd, _ in runs]))
        try:
            self._socket.sendmsg(
                [marshal.dumps([names for _, names in runs])], [rights], socket.MSG_DONTWAIT
            )
        except OSError:
            return False
        for _, names in runs:
            self._runs.append(len(names))
            self.outstanding += len(names)
        return True

    def take(self, *, block: bool) -> Answer | None:
        """The answer for the oldest run sent and not yet taken.

        Without `block`, `None` when it has not fully arrived yet.

        Raises:
            ReaderGone: The child ended before answering it.

        """
        if self._answered:
            self.outstanding -= self._runs.popleft()
            return self._answered.popleft()
        buffer = self._buffer
        if not block and len(buffer) < _HEADER and not self._poll.poll(0):
            return None  # A poll costs a third of a read that fails.
        while True:
            wanted = FIRST_READ
            if len(buffer) >= _HEADER:
                end = _HEADER + int.from_bytes(buffer[:_HEADER], "little")
                if len(buffer) >= end:
                    # Through views, released before the buffer shrinks: no
                    # copy of a long answer.
                    with memoryview(buffer) as view, view[_HEADER:end] as frame:
                        answers: list[Answer] = marshal.loads(frame)
                    del buffer[:end]
                    self._answered.extend(answers)
                    self.outstanding -= self._runs.popleft()
                    return self._answered.popleft()
                wanted = max(wanted, end - len(buffer))
            try:
                chunk = os.read(self._answers, wanted)
            except BlockingIOError:
                if not block:
                    return None
                self._poll.poll()
                continue
            if not chunk:
                raise ReaderGone
            buffer += chunk

    def close(self) -> None:
        """Kill the child, reap it, and close this end; at once, whatever it was doing.

        Waits for the child's end at most `_REAP_WAIT` seconds (a child
        killed in a read that cannot be interrupted, from a hung network
        file system, ends only when the read does): past that, a daemon
        thread reaps it, and this returns.
        """
        pid, self._pid = self._pid, 0
        if not pid:
            return
        self._socket.close()
        os.close(self._answers)
        try:
            ended = os.pidfd_open(pid)
        except OSError:
            ended = -1  # Gone already, or no pidfd (Linux < 5.3): wait.
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        if ended >= 0:
            try:
                waiting = select.poll()
                waiting.register(ended, select.POLLIN)
                gone = bool(waiting.poll(_REAP_WAIT * 1000))
            finally:
                os.close(ended)
            if not gone:
                threading.Thread(target=_reap, args=(pid,), name="walk-reaper", daemon=True).start()
                return
        _reap(pid)


def _reap(pid: int) -> None:
    # Unless reaped already by someone waiting for any child.
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)


def _serve(libc: ctypes.CDLL, requests: socket.socket, answers: int, parent: int) -> None:
    """The child: answer requests until the parent closes its end, then exit."""
    code = 1
    try:
        gc.disable()
        libc.prctl(_PR_SET_PDEATHSIG, ctypes.c_ulong(signal.SIGKILL), 0, 0, 0)
        if os.getppid() == parent:  # Else the parent is already gone.
            mine = sorted((requests.fileno(), answers))
            os.closerange(3, mine[0])
            os.closerange(mine[0] + 1, mine[1])
            os.closerange(mine[1] + 1, max(os.sysconf("SC_OPEN_MAX"), mine[1] + 1))
            receive, dumps, writev = socket.recv_fds, marshal.dumps, os.writev
            while True:
                data, fds, _, _ = receive(requests, _RECEIVE_BYTES, REQUEST_RUNS)
                if not data:
                    break  # The parent closed its end.
                try:
                    runs = marshal.loads(data)
                    results = [read_names(fd, names) for fd, names in zip(fds, runs, strict=True)]
                finally:
                    for fd in fds:
                        os.close(fd)
                blob = dumps(results)
                pending = memoryview(len(blob).to_bytes(_HEADER, "little") + blob)
                while pending:
                    pending = pending[writev(answers, [pending]) :]
        code = 0
    finally:
        os._exit(code)
