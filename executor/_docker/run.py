"""A command in a container, as `drive` runs it: by the helper (`HelperRun`) or an exec (`ExecRun`).

Both are remote runs: their output arrives over a connection to the engine,
and `read_arrivals` reads it (see `executor._core.run`).

- `HelperRun`: one process of the in-container helper, told apart from the
  others on the helper's one exec by its id. Its events (output, exit, end
  of output, killed) are pulled from the channel by whichever task needs
  the next one, the reader or the kill, and its chunks kept in order for the
  reader.
- `ExecRun`: one engine exec under the wrapper script, attached through one
  upgraded connection. The wrapper writes the command's pid first, and after
  the command a marker line with its exit code on both streams (see
  `_WRAPPER` in `executor._docker.executor`): the exit is known once both
  have come, since each stream's marker follows all the command wrote
  there. An exec whose wrapper was killed has no marker; the engine's
  inspect tells how it ended.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import json
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final

import anyio

from executor._core.errors import EngineError, ExecutorError
from executor._core.output import Chunk, Stderr, Stdout
from executor._core.run import Arrivals, Drain, Emit, Exit, Reader, Run, read_arrivals
from executor._docker import channel as _channel
from executor._docker.api import Connection, EngineClient
from executor._docker.channel import Channel

# Stdin goes to the engine (or the helper) this much at a time.
_STDIN_BLOCK: Final = 1 << 16
# How long the stdout marker may come after the one on stderr.
_STDOUT_MARKER_WAIT: Final = 5.0
# How long the engine may take to report an exec over once its output ended.
_EXEC_END_WAIT: Final = 5.0
# How long a killed exec's container or engine may take to show it went away.
_GONE_WAIT: Final = 0.5
# Seconds a kill through the helper may take beyond its grace.
_KILL_WAIT: Final = 10.0
# How long a kill or a signal waits for the wrapper's pid line: the exec's start.
_PID_WAIT: Final = 5.0
# The signal the OOM killer sends (its number on Linux, where containers run).
_SIGKILL: Final = 9

KillTree = Callable[[float], Awaitable[None]]
"""Kills a command's tree in the container, with the grace given."""

SignalGroup = Callable[[int, int], Awaitable[None]]
"""Sends a signal to a process group in the container: (the group, the signal)."""

KillBelow = Callable[[int], Awaitable[None]]
"""SIGKILLs what runs below a process of a command's tree in the container (its pid there)."""


def signal_of(code: int) -> int | None:
    """The signal N of an exit status 128 + N, as the engine reports a death by signal."""
    number = code - 128
    return number if 0 < number < 65 else None


def reported_exit(report: bytes) -> Exit:
    """The exit the helper or the wrapper reports: `CODE`, then ` SIGNAL` and ` oom` if so.

    ` oom` says the container's memory cgroup counted an OOM kill while the
    command ran. The count is the container's, shared by every command in
    it: only a command that died of SIGKILL meanwhile (exit code 137) is
    taken for the one killed, not one that failed otherwise.
    """
    fields = report.split()
    oom = b"oom" in fields
    numbers = [field for field in fields if field != b"oom"]
    code = int(numbers[0]) if numbers and numbers[0].isdigit() else 1
    signal = int(numbers[1]) if len(numbers) > 1 and numbers[1].isdigit() else None
    killed = signal == _SIGKILL or code == 128 + _SIGKILL
    return Exit(code, signal, oom_killed=oom and killed)


class HelperRun(Run, Arrivals):
    """A command the in-container helper runs: its events, pulled from the helper's channel."""

    def __init__(self, channel: Channel, ident: int) -> None:
        self.channel = channel
        self.ident = ident
        self.failure: tuple[int, str] | None = None
        self._pid: int | None = None
        self._exit: Exit | None = None
        self._exited = anyio.Event()
        self._closed = False
        self._killed = False
        self._kill_wait: anyio.CancelScope | None = None
        self._chunks: collections.deque[Chunk] = collections.deque()

    async def start(self, request: dict[str, Any]) -> None:
        """Ask the helper to start the command; `failure` says why if it could not."""
        await self.channel.send_json(_channel.START, self.ident, request)
        while self._pid is None and self.failure is None:
            await self.arrive()
            self._pull()

    @property
    def pid(self) -> int | None:
        """The command's pid in the container."""
        return self._pid

    # --- the output, as it arrives -----------------------------------------

    def _pull(self) -> None:
        """Take the events that have arrived; chunks are kept for the reader, in order."""
        while (event := self.channel.take(self.ident)) is not None:
            kind, payload = event
            if kind == _channel.OUT:
                self._chunks.append(Stdout(payload))
            elif kind == _channel.ERR:
                self._chunks.append(Stderr(payload))
            elif kind == _channel.EXIT:
                # `CODE`, or `CODE SIGNAL` for a process a signal killed (and ` oom`).
                self._exit = reported_exit(payload)
                self._exited.set()
            elif kind == _channel.CLOSED:
                self._closed = True
            elif kind == _channel.KILLED:
                self._killed = True
                if self._kill_wait is not None:
                    # The kill waits for the next event: this was it.
                    self._kill_wait.cancel()
            elif kind == _channel.STARTED:
                self._pid = int(payload)
            elif kind == _channel.FAILED:
                info = json.loads(payload)
                self.failure = (int(info["code"]), str(info["message"]))

    def take(self) -> Chunk | None:
        """The next chunk that has arrived, if any."""
        if not self._chunks:
            self._pull()
        return self._chunks.popleft() if self._chunks else None

    @property
    def ended(self) -> bool:
        """Whether the output has ended and the exit has come (the helper sends both)."""
        return self._closed and self._exit is not None and not self._chunks

    async def arrive(self) -> None:
        """Wait until one more of the helper's events arrives (this command's or another's)."""
        await self.channel.arrive(self.ident)

    def readers(self) -> Sequence[Reader]:
        """One reader: the helper sends stdout and stderr in the order it read them."""
        return (functools.partial(read_arrivals, self),)

    # --- the run -------------------------------------------------------------

    async def wait(self) -> Exit:
        """The exit the helper reported (it sees the wait status)."""
        await self._exited.wait()
        assert self._exit is not None
        return self._exit

    async def write(self, data: bytes) -> None:
        """Send `data` to the command's stdin through the helper."""
        view = memoryview(data)
        with contextlib.suppress(ExecutorError):
            for start in range(0, len(data), _STDIN_BLOCK):
                await self.channel.send(
                    _channel.STDIN, self.ident, bytes(view[start : start + _STDIN_BLOCK])
                )

    async def close_input(self) -> None:
        """End the command's stdin."""
        with contextlib.suppress(ExecutorError):
            await self.channel.send(_channel.EOF, self.ident)

    async def signal(self, number: int) -> None:
        """Send `number` to the command's process group."""
        if self._exit is None:
            with contextlib.suppress(ExecutorError):
                await self.channel.send(_channel.SIGNAL, self.ident, str(number).encode())

    async def kill(self, grace: float) -> None:
        """Kill the command's tree through the helper and wait until it says none is left."""
        if self.channel.closed:
            return
        self._killed = False
        with contextlib.suppress(ExecutorError):
            await self.channel.send_json(_channel.KILL, self.ident, {"grace": grace})
            with anyio.move_on_after(grace + _KILL_WAIT):
                # The reader may take the answer meanwhile: it cancels this wait then.
                while not self._killed:
                    with anyio.CancelScope() as self._kill_wait:
                        await self.arrive()
                    self._kill_wait = None
                    self._pull()

    async def release(self) -> None:
        """Tell the helper the command is done with, and forget its events."""
        with contextlib.suppress(ExecutorError):
            await self.channel.send(_channel.RELEASE, self.ident)
        self.channel.forget(self.ident)


class ExecRun(Run, Arrivals):
    """An engine exec under the wrapper: its pid line, its chunks, its exit markers."""

    def __init__(
        self,
        nonce: bytes,
        api: EngineClient,
        exec_id: str,
        conn: Connection,
        *,
        kill_tree: KillTree,
        signal_group: SignalGroup,
        kill_below: KillBelow | None = None,
        tty: bool = False,
        container_id: str = "",
        on_gone: Callable[[], None] | None = None,
    ) -> None:
        self.marker = b"\0" + nonce + b" "
        # Told when the exec ended with its container or the engine.
        self._on_gone = on_gone
        self._api = api
        self._container_id = container_id
        # Set once this executor kills the tree: an exec ended by it is the command's own end.
        self._killing = False
        self.exec_id = exec_id
        self._conn = conn
        self._kill_tree = kill_tree
        self._signal_group = signal_group
        self._kill_below = kill_below
        # On a terminal the wrapper's lines come with the output, as \r\n.
        self.tty = tty
        self._control = 1 if tty else 2
        self._pid: int | None = None
        # How the command ended, as the wrapper's marker says (a signal when its shell saw one).
        self._marked: Exit | None = None
        # Set once the wrapper's pid line is read (or the output ended without one).
        self.pid_known = anyio.Event()
        self._receiving = anyio.Lock()
        # Set at the exit marker or the end of the output; at the stdout marker or the end.
        self._over = anyio.Event()
        self._stdout_marked = anyio.Event()
        self._eof = False
        self._head = b""
        self._pending: dict[int, bytes] = {}
        # The streams whose marker has come.
        self._seen: set[int] = set()
        self._chunks: collections.deque[Chunk] = collections.deque()
        self._exit: Exit | None = None

    @property
    def pid(self) -> int | None:
        """The wrapper's pid in the container (its process group is the command's)."""
        return self._pid or None

    # --- the output, as it arrives -----------------------------------------

    def take(self) -> Chunk | None:
        """The next chunk that has arrived, if any."""
        return self._chunks.popleft() if self._chunks else None

    @property
    def ended(self) -> bool:
        """Whether the exec's output has ended."""
        return self._eof and not self._chunks

    async def arrive(self) -> None:
        """Read one frame (or, on a terminal, what the stream has) and sort it out."""
        # One reader of the connection at a time: the run's reader, or a kill
        # looking for the pid line once that reader was cancelled.
        async with self._receiving:
            await self._arrive()

    async def _arrive(self) -> None:
        if self.tty:
            data = await self._conn.receive()
            frame = (1, data) if data else None
        else:
            frame = await self._conn.receive_frame()
        if frame is None:
            self._end()
            return
        self._sort(*frame)

    def readers(self) -> Sequence[Reader]:
        """One reader: the engine multiplexes stdout and stderr on the one connection."""
        return (self._read,)

    async def _read(self, emit: Emit, drain: Drain) -> None:
        await read_arrivals(self, emit, drain)
        # A tail held back as the possible start of a marker that never came.
        for kind, pending in self._pending.items():
            await emit(Stdout(pending) if kind == 1 else Stderr(pending))
        self._pending.clear()

    def _end(self) -> None:
        self._eof = True
        self.pid_known.set()
        self._over.set()
        self._stdout_marked.set()

    def _sort(self, kind: int, data: bytes) -> None:
        if kind == self._control and self._pid is None:
            self._head += data
            line, newline, rest = self._head.partition(b"\n")
            if not newline:
                return
            line = line.strip()
            self._pid = int(line) if line.isdigit() else 0
            self.pid_known.set()
            self._head = b""
            data = rest
            if not data:
                return
        if kind in self._seen or kind not in (1, 2):
            self._keep(kind, data)
            return
        data = self._pending.pop(kind, b"") + data
        found = data.find(self.marker)
        if found >= 0:
            end = data.find(b"\n", found)
            if end < 0:
                self._pending[kind] = data
                return
            before, code, after = (
                data[:found],
                data[found + len(self.marker) : end],
                data[end + 1 :],
            )
            self._keep(kind, before)
            self._seen.add(kind)
            if kind == 1:
                self._stdout_marked.set()
            if kind == self._control:
                # `CODE`, or `CODE SIGNAL`, and ` oom` (see `_WRAPPER`).
                self._marked = reported_exit(code)
                self._over.set()
            self._keep(kind, after)
            return
        # Hold back a tail that could be the start of the marker.
        keep = 0
        for size in range(min(len(self.marker), len(data)), 0, -1):
            if self.marker.startswith(data[-size:]):
                keep = size
                break
        if keep:
            self._pending[kind] = data[-keep:]
            data = data[:-keep]
        self._keep(kind, data)

    def _keep(self, kind: int, data: bytes) -> None:
        if data:
            self._chunks.append(Stdout(data) if kind == 1 else Stderr(data))

    # --- the run -------------------------------------------------------------

    async def wait(self) -> Exit:
        """The exit the wrapper's markers tell, or, without them, the engine's inspect."""
        if self._exit is not None:
            return self._exit
        await self._over.wait()
        if self._marked is not None:
            if not self.tty:
                # Stdout is a pipe of its own: what the command wrote there
                # before it ended comes before the marker the wrapper wrote
                # there after it, however the engine interleaves the pipes.
                with anyio.move_on_after(_STDOUT_MARKER_WAIT):
                    await self._stdout_marked.wait()
            self._exit = self._marked
            return self._exit
        # No marker: the wrapper itself was killed. The engine knows how it
        # ended, once its exec is over (the output can end a moment before).
        info: dict[str, Any] = {}
        try:
            with anyio.move_on_after(_EXEC_END_WAIT):
                while True:
                    info = await self._api.request_json("GET", f"/exec/{self.exec_id}/json")
                    if not info.get("Running") and info.get("ExitCode") is not None:
                        break
                    await anyio.sleep(0.02)
        except EngineError as error:
            # Gone with the engine (unreachable), or with the container (no such exec).
            raise await self._gone(str(error)) from error
        code = int(info.get("ExitCode") or 0)
        if self._container_id and not self._killing and (code == 128 + _SIGKILL or not info):
            # A wrapper that traps every other signal died of SIGKILL: the
            # OOM killer's, or the engine's as it stops the container (a
            # stopping engine, a `docker stop`). The latter is no end of the
            # command's own, and must not read as one (nor as an OOM kill).
            reason = await self._api.went_away(self._container_id, wait=_GONE_WAIT)
            if reason is not None:
                raise await self._gone(reason)
        # The inspect has no signal field: a death by signal N is `ExitCode`
        # 128 + N. The wrapper leaves only by its `exit` after the marker, so an
        # exec without one was ended by a signal: 128 + N here means signal N.
        self._exit = Exit(code, signal_of(code))
        return self._exit

    async def _gone(self, reason: str) -> ExecutorError:
        """The error for an exec that ended with the container or the engine, not by itself."""
        if self._on_gone is not None:
            self._on_gone()
        if self._container_id and "Docker engine" not in reason:
            # The exec's own error (no such exec, say) tells less than the container's state.
            reason = await self._api.went_away(self._container_id, wait=_GONE_WAIT) or reason
        return ExecutorError(f"the command did not end by itself: {reason}")

    async def write(self, data: bytes) -> None:
        """Send `data` up the connection to the exec's stdin."""
        view = memoryview(data)
        with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            for start in range(0, len(data), _STDIN_BLOCK):
                await self._conn.send(bytes(view[start : start + _STDIN_BLOCK]))

    async def close_input(self) -> None:
        """End the exec's stdin (on a terminal the session typed Ctrl-D instead)."""
        # Closing the connection's writing half of a terminal would make the
        # engine hang up the terminal, output and all.
        if not self.tty:
            with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                await self._conn.send_eof()

    async def signal(self, number: int) -> None:
        """Send `number` to the command's process group in the container."""
        # Stdout and stderr are two pipes: the command's first output can come
        # before the wrapper's pid line on stderr.
        await self._await_pid()
        if self._pid and self._marked is None:
            await self._signal_group(self._pid, number)

    async def kill(self, grace: float) -> None:
        """Kill the command's tree in the container (also what it left after its exit)."""
        self._killing = True
        # The engine starts an exec's process after it answers the attach: a
        # kill right after the start (a job killed as soon as it began) would
        # look for the tree before it exists, find none and leave the command
        # to run on. Its wrapper's pid line says it exists.
        await self._await_pid()
        await self._kill_tree(grace)

    async def _await_pid(self) -> None:
        """Wait for the wrapper's pid line, at most `_PID_WAIT` seconds, reading it if need be.

        A run cancelled right after its start (a caller giving up) has had
        its reader cancelled before the line came: nobody else would read
        it, and the kill would wait out `_PID_WAIT` for nothing.
        """
        with anyio.move_on_after(_PID_WAIT):
            while not self.pid_known.is_set():
                async with self._receiving:
                    # The run's reader may have read it while this waited its turn.
                    if not self.pid_known.is_set():
                        await self._arrive()

    async def kill_descendants(self, pid: int) -> None:
        """SIGKILL what runs below `pid` (its pid in the container) in the tree, sparing `pid`."""
        if self._kill_below is None:
            await super().kill_descendants(pid)
        elif self._marked is None:
            await self._kill_below(pid)

    async def resize(self, cols: int, rows: int) -> None:
        """Resize the exec's terminal through the engine."""
        with contextlib.suppress(EngineError):
            await self._api.request(
                "POST", f"/exec/{self.exec_id}/resize", query={"h": rows, "w": cols}
            )

    async def release(self) -> None:
        """Close the connection."""
        await self._conn.aclose()
