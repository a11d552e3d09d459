"""The code interpreter's kernels: an interpreter on a session of the executor, run cell by cell.

A `StdioKernel` starts a small driver in the target interpreter through
`ex.start(...)` (`pydriver.py`, `nodedriver.js`, `shdriver.sh`, `rdriver.R`: their text
is sent as the program, nothing is installed) and speaks a line protocol with
it over the session's stdin and stdout. So it works wherever the executor
runs commands: locally, in an OS sandbox, in a container without network,
on an SSH host. A `JupyterKernel` runs `ipykernel` through the executor the
same way and talks the Jupyter protocol to it over ZeroMQ on UNIX sockets in
a folder of this host's, which only a local executor can reach;
`CodeInterpreterTool` picks it there when `jupyter_client` is installed here
and `ipykernel` where the kernel runs.

Where a kernel runs is its `KernelHost`, opened for as long as it runs: by
default the executor it was given; `CodeInterpreterTool` opens one of its
own to run it in an OS sandbox (a sandboxed twin of a `LocalExecutor`, with
a folder of the kernel's own bound writable, for Jupyter's sockets).

Each kernel runs one cell at a time (`run_cell`), handing the cell's output
to an `emit` callback as `CodeChunk`s. A cell that runs past its time is
interrupted with SIGINT, sent to the session's process group, and the kernel
lives on with its state; one that does not stop within a grace period is
killed, and its session's state is lost (the error says so).
"""

from __future__ import annotations

import abc
import base64
import contextlib
import dataclasses
import importlib.util
import json
import math
import os
import pathlib
import re
import secrets
import socket
import stat
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import AbstractAsyncContextManager
from typing import Any, Final, Literal

import anyio
import anyio.abc
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from executor._builtins.common import StreamDecoder
from executor._core.base import ToolExecutor
from executor._core.cleanup import run_to_completion
from executor._core.commands import Command
from executor._core.errors import CommandError, ExecutorError
from executor._core.output import CommandOutput, Stderr
from executor._core.session import READER_KEPT, ProcessSession
from executor._core.stdin import Signal, Text, UnixSignal

# How long an interrupted cell has to stop before its kernel is killed.
INTERRUPT_GRACE: Final = 3.0
# How long an interpreter has to come up and say it is ready.
START_TIMEOUT: Final = 60.0

_HERE = pathlib.Path(__file__).parent
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def driver_source(name: str) -> str:
    """The text of a driver shipped with the package (`pydriver.py`, ...)."""
    return (_HERE / name).read_text(encoding="utf-8")


Emit = Callable[[Any], Awaitable[None]]
"""Where a kernel hands a cell's chunks: the tool's channel."""


@dataclasses.dataclass(frozen=True)
class KernelHost:
    """Where a kernel's process runs, for as long as it runs.

    Attributes:
        executor: What starts the kernel's process (`executor.start(...)`).
        folder: A folder of this host's that the kernel may write and sees
            at the same path (Jupyter's sockets go there); `None`: a
            temporary folder of this host's (the executor is not sandboxed).
        env: Variables for the kernel besides its own (a scratch `TMPDIR`).
        lost: Returns if the host is lost while the kernel runs (the
            executor it was made from is closed): the kernel then ends, as
            it would have with that executor. `None`: never lost.
    """

    executor: ToolExecutor
    folder: str | None = None
    env: dict[str, str] = dataclasses.field(default_factory=dict)
    lost: Callable[[], Awaitable[None]] | None = None


Opener = Callable[[], AbstractAsyncContextManager[KernelHost]]
"""Opens a kernel's host, for as long as the kernel runs."""


@contextlib.asynccontextmanager
async def _plain(executor: ToolExecutor) -> AsyncIterator[KernelHost]:
    yield KernelHost(executor)


@contextlib.contextmanager
def _unwrapped() -> Iterator[None]:
    """Raise the lone error of a kernel's task groups as itself: its start failure reads so."""
    try:
        yield
    except BaseExceptionGroup as group:
        error: BaseException = group
        while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
            error = error.exceptions[0]
        if error is group:
            raise
        raise error from None


async def _end_when_lost(host: KernelHost, close: Callable[[], None]) -> None:
    if host.lost is not None:
        await host.lost()
        close()


class CellOutcome:
    """How a cell ended: whether it succeeded, its error's one line, and whether it was cut short.

    Attributes:
        ok: Whether it ran to the end without an error.
        error: The error in one line (`NameError: name 'x' is not defined`).
        timed_out: Whether it ran past its time and was interrupted.
        lost: Whether the kernel died with it (its state is gone).
    """

    def __init__(
        self, *, ok: bool, error: str | None = None, timed_out: bool = False, lost: bool = False
    ) -> None:
        """An outcome."""
        self.ok = ok
        self.error = error
        self.timed_out = timed_out
        self.lost = lost


class Kernel(abc.ABC):
    """A running interpreter that keeps its state across cells."""

    language: str

    @property
    @abc.abstractmethod
    def alive(self) -> bool:
        """Whether the interpreter still runs (a cell can be sent)."""

    @abc.abstractmethod
    async def serve(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        """Run the interpreter until `close()`; report started once it is ready.

        Raises:
            ExecutorError: It could not be started, or died before it was ready.
        """

    @abc.abstractmethod
    async def run_cell(self, code: str, timeout: float | None, emit: Emit) -> CellOutcome:
        """Run `code`, emitting its chunks; interrupt it after `timeout` seconds."""

    @abc.abstractmethod
    def close(self) -> None:
        """Ask the interpreter to end; `serve` returns once it has."""


# --- the stdio protocol --------------------------------------------------------------


class _Frames:
    """Splits one output stream into its own text and the driver's frames.

    A frame is `RS nonce ":" json LF`; anything else is the stream's text,
    decoded as UTF-8 as it arrives. The start of a possible frame is held
    back until it is known to be one or not, so text is never mistaken for a
    frame nor a frame for text.
    """

    def __init__(self, nonce: str) -> None:
        self.marker = b"\x1e" + nonce.encode() + b":"
        self._buffer = b""
        self._decoder = StreamDecoder()

    def feed(self, data: bytes) -> list[str | bytes]:
        """Text (`str`) and frame bodies (`bytes`) found in `data`, in order."""
        found: list[str | bytes] = []
        buffer = self._buffer + data
        marker = self.marker
        while buffer:
            start = buffer.find(marker)
            if start < 0:
                keep = _partial_marker(buffer, marker)
                text, buffer = buffer[: len(buffer) - keep], buffer[len(buffer) - keep :]
                if text and (decoded := self._decoder.decode(text)):
                    found.append(decoded)
                break
            if start and (decoded := self._decoder.decode(buffer[:start])):
                found.append(decoded)
            end = buffer.find(b"\n", start)
            if end < 0:
                buffer = buffer[start:]
                break
            found.append(buffer[start + len(marker) : end])
            buffer = buffer[end + 1 :]
        self._buffer = buffer
        return found

    def flush(self) -> str:
        """What is left at the end of the stream, as text."""
        rest, self._buffer = self._buffer, b""
        return self._decoder.decode(rest) + self._decoder.flush()


def _partial_marker(buffer: bytes, marker: bytes) -> int:
    """How many bytes at the end of `buffer` could begin `marker`."""
    for size in range(min(len(marker) - 1, len(buffer)), 0, -1):
        if buffer.endswith(marker[:size]):
            return size
    return 0


_Event = tuple[Literal["stdout", "stderr", "frame", "end", "exit"], Any]


class StdioKernel(Kernel):
    """An interpreter running a driver on a session, spoken to over its stdin and stdout.

    Args:
        executor: Where the interpreter runs.
        language: `"python"`, `"javascript"` or `"bash"`.
        argv: The interpreter's command line, before the driver's program
            (`["python3", "-u", "-c"]`); the driver's text and the nonce follow.
        driver: The driver's file name in this folder.
        name_argument: Whether a `$0` goes between the program and the nonce
            (`sh -c program name nonce`).
        make_chunk: Builds a chunk from a stream name and its content.
        env: Variables for the interpreter.
        encode: How a cell's code goes on the request line.
        host: Opens where the interpreter runs (an OS sandbox of the
            tool's); `executor` itself when `None`.
    """

    def __init__(
        self,
        executor: ToolExecutor,
        *,
        language: str,
        argv: list[str],
        driver: str,
        make_chunk: Callable[..., Any],
        name_argument: bool = False,
        env: dict[str, str] | None = None,
        encode: Callable[[str], str] = lambda code: json.dumps({"code": code}),
        host: Opener | None = None,
    ) -> None:
        """A kernel, not started: `serve` starts it."""
        self.executor = executor
        self._host = host
        self.language = language
        self.nonce = secrets.token_hex(8)
        name = ["executor-driver"] if name_argument else []
        self._argv = [*argv, driver_source(driver), *name, self.nonce]
        self._env = env or {}
        self._make = make_chunk
        self._encode = encode
        self._session: ProcessSession | None = None
        self._alive = False
        self._lock = anyio.Lock()
        self._stop = anyio.Event()
        self._ready = anyio.Event()
        # Made by `serve`, closed when it ends: a kernel never served holds nothing.
        self._send: MemoryObjectSendStream[_Event] | None = None
        self._receive: MemoryObjectReceiveStream[_Event] | None = None
        self._exit: CommandOutput | None = None
        self._start_error: str = ""

    def __repr__(self) -> str:
        return f"StdioKernel({self.language!r}, {self.executor!r})"

    @property
    def alive(self) -> bool:
        """Whether the interpreter still runs."""
        return self._alive

    async def serve(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Start the interpreter and pump its output until it ends or `close()` is called."""
        opened = self._host() if self._host is not None else _plain(self.executor)
        with _unwrapped():
            async with opened as host:
                await self._serve(host, task_status)

    async def _serve(self, host: KernelHost, task_status: anyio.abc.TaskStatus[None]) -> None:
        cmd = Command.exec(self._argv)
        if self._env or host.env:
            cmd = cmd.with_env({**self._env, **host.env})
        session = await host.executor.start(cmd)
        # The kernel's output is read as it comes: kept once, not twice.
        session.keep_output(READER_KEPT)
        started = False
        self._send, self._receive = anyio.create_memory_object_stream[_Event](64)
        try:
            async with session:
                self._session = session
                self._alive = True
                async with anyio.create_task_group() as group:
                    group.start_soon(self._pump, session)
                    group.start_soon(_end_when_lost, host, self.close)
                    with anyio.move_on_after(START_TIMEOUT):
                        await self._wait_ready()
                    if not self._ready.is_set():
                        raise ExecutorError(self._failed_to_start())
                    started = True
                    task_status.started()
                    await self._stop.wait()
                    group.cancel_scope.cancel()
        except ExecutorError:
            raise
        except CommandError as error:
            if not started:
                raise ExecutorError(
                    f"the {self.language} interpreter could not start: {error}"
                ) from error
            raise
        finally:
            self._alive = False
            self._send.close()
            self._receive.close()

    async def _wait_ready(self) -> None:
        # Events before the ready frame are the interpreter's own start-up messages.
        assert self._receive is not None
        while not self._ready.is_set():
            try:
                kind, value = await self._receive.receive()
            except (anyio.EndOfStream, anyio.ClosedResourceError):
                return
            if kind == "frame" and value.get("t") == "ready":
                self._ready.set()
            elif kind in ("stdout", "stderr"):
                self._start_error += value
            elif kind == "exit":
                return

    def _failed_to_start(self) -> str:
        said = self._start_error.strip()[-2000:]
        if self._exit is not None:
            how = f"exited with status {self._exit.exit_code}"
        else:
            how = f"did not get ready within {START_TIMEOUT:g} s"
        return f"the {self.language} interpreter {how}" + (f": {said}" if said else "")

    async def _pump(self, session: ProcessSession) -> None:
        streams: dict[Literal["stdout", "stderr"], _Frames] = {
            "stdout": _Frames(self.nonce),
            "stderr": _Frames(self.nonce),
        }
        send = self._send
        assert send is not None
        try:
            while (item := await session.next_chunk()) is not None:
                name: Literal["stdout", "stderr"] = (
                    "stderr" if isinstance(item.chunk, Stderr) else "stdout"
                )
                for piece in streams[name].feed(item.chunk.data):
                    if isinstance(piece, str):
                        await send.send((name, piece))
                    elif name == "stderr":
                        await send.send(("end", None))
                    else:
                        try:
                            frame = json.loads(piece)
                        except ValueError:
                            continue
                        if isinstance(frame, dict):
                            await send.send(("frame", frame))
            for stream, frames in streams.items():
                if rest := frames.flush():
                    await send.send((stream, rest))
            try:
                self._exit = await session.finalize()
            except CommandError as error:
                self._exit = error.output
            self._alive = False
            await send.send(("exit", self._exit))
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass
        finally:
            self._alive = False
            # The interpreter is gone: nothing keeps the kernel up any more.
            self._stop.set()

    def close(self) -> None:
        """End the interpreter (its session is left, which kills its tree)."""
        self._stop.set()

    async def run_cell(self, code: str, timeout: float | None, emit: Emit) -> CellOutcome:
        """Run `code` in the interpreter, emitting its chunks as they come.

        After `timeout` seconds the cell is interrupted (SIGINT) and reported
        as timed out; the interpreter and its state live on. If the caller is
        cancelled, the cell is interrupted the same way before the
        cancellation goes on.
        """
        async with self._lock:
            session = self._session
            if not self._alive or session is None:
                return await self._dead(emit)
            await session.send_stdin(Text(self._encode(code) + "\n"))
            state = _CellState()
            try:
                with anyio.move_on_after(timeout if timeout is not None else math.inf) as scope:
                    await self._collect(state, emit)
            except anyio.get_cancelled_exc_class():
                await run_to_completion(self._interrupt_quietly)
                raise
            if not scope.cancelled_caught:
                return self._outcome(state)
            state.timed_out = True
            await self._interrupt(session)
            with anyio.move_on_after(INTERRUPT_GRACE):
                await self._collect(state, emit)
            if state.finished:
                outcome = self._outcome(state)
                outcome.error = (
                    f"TimedOut: the cell ran past {timeout:g} s and was interrupted; "
                    "the session's state is kept"
                )
                return outcome
            # It would not stop: the interpreter goes, and its state with it.
            self.close()
            message = (
                f"TimedOut: the cell ran past {timeout:g} s and did not stop when interrupted; "
                f"the {self.language} session was ended and its state is lost"
            )
            await emit(self._make("error", message))
            return CellOutcome(ok=False, error=message, timed_out=True, lost=True)

    async def _interrupt(self, session: ProcessSession) -> None:
        with contextlib.suppress(CommandError):
            await session.send_stdin(Signal(UnixSignal.SIGINT))

    async def _interrupt_quietly(self) -> None:
        """On cancellation: interrupt the cell and read to its end, within the grace."""
        session = self._session
        if session is None or not self._alive:
            return
        with anyio.move_on_after(INTERRUPT_GRACE) as scope:
            await self._interrupt(session)

            async def drop(chunk: Any) -> None:
                return None

            state = _CellState()
            await self._collect(state, drop)
        if scope.cancelled_caught:
            self.close()

    async def _dead(self, emit: Emit) -> CellOutcome:
        message = f"the {self.language} session has ended; its state is lost"
        if self._exit is not None:
            message = (
                f"the {self.language} interpreter exited with status {self._exit.exit_code}; "
                "the session's state is lost"
            )
        await emit(self._make("error", message))
        return CellOutcome(ok=False, error=message, lost=True)

    async def _collect(self, state: _CellState, emit: Emit) -> None:
        """Read the cell's events until its `done` frame and the end of its stderr."""
        receive = self._receive
        while not state.finished:
            try:
                if receive is None:
                    raise anyio.ClosedResourceError
                kind, value = await receive.receive()
            except (anyio.EndOfStream, anyio.ClosedResourceError):
                kind, value = "exit", self._exit
            if kind in ("stdout", "stderr"):
                await emit(self._make(kind, value))
            elif kind == "end":
                state.stderr_ended = True
            elif kind == "exit":
                state.exited = True
                output: CommandOutput | None = value
                code = output.exit_code if output is not None else None
                message = (
                    f"the {self.language} interpreter exited (status {code}) during the cell; "
                    "the session's state is lost"
                )
                state.error = state.error or message
                await emit(self._make("error", message))
                return
            elif kind == "frame":
                await self._frame(value, state, emit)

    async def _frame(self, frame: dict[str, Any], state: _CellState, emit: Emit) -> None:
        kind = frame.get("t")
        if kind == "done":
            state.done = True
            state.ok = bool(frame.get("ok"))
            status = frame.get("status")
            if not state.ok and state.error is None and isinstance(status, int):
                state.error = f"exit status {status}"
        elif kind == "result":
            html = frame.get("html")
            await emit(
                self._make(
                    "result",
                    str(frame.get("plain", "")),
                    html=html if isinstance(html, str) else None,
                )
            )
        elif kind == "image":
            try:
                if "hex" in frame:
                    data = bytes.fromhex(str(frame["hex"]))
                else:
                    data = base64.b64decode(str(frame.get("data", "")), validate=True)
            except ValueError:
                return
            await emit(self._make("image", "", mime_type=str(frame.get("mime")), data=data))
        elif kind == "error":
            name, value = str(frame.get("ename", "Error")), str(frame.get("evalue", ""))
            state.error = f"{name}: {value}" if value else name
            await emit(
                self._make("error", _ANSI.sub("", str(frame.get("traceback") or state.error)))
            )

    def _outcome(self, state: _CellState) -> CellOutcome:
        return CellOutcome(
            ok=state.ok and not state.exited,
            error=None if state.ok and not state.exited else state.error or "the cell failed",
            timed_out=state.timed_out,
            lost=state.exited,
        )


def _listening(path: str) -> bool:
    """Whether `path` is a UNIX socket (not a link to one) that takes connections.

    Bound is not enough: a client whose connect comes between the kernel's
    `bind` and its `listen` is refused, and, never reconnecting, stays so.
    """
    try:
        if not stat.S_ISSOCK(os.lstat(path).st_mode):
            return False
    except OSError:
        return False
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.setblocking(False)
        try:
            probe.connect(path)
        except OSError:
            return False
    return True


class _CellState:
    """What a cell's collection has seen so far."""

    def __init__(self) -> None:
        self.done = False
        self.stderr_ended = False
        self.exited = False
        self.ok = False
        self.error: str | None = None
        self.timed_out = False
        self.started = time.monotonic()

    @property
    def finished(self) -> bool:
        return self.exited or (self.done and self.stderr_ended)


# --- a Jupyter kernel --------------------------------------------------------------

_JUPYTER_HINT = (
    "the Jupyter kernel needs jupyter_client here and ipykernel for the kernel's Python: "
    "pip install 'tool-executor[interpreter]'"
)


class JupyterKernel(Kernel):
    """Python on a real `ipykernel`, started through the executor and spoken to over ZeroMQ.

    The kernel's process is the executor's (`ex.start(python -m
    ipykernel_launcher -f <connection file>)`), so it is killed with the
    executor like any command; the client (`jupyter_client`) connects to its
    UNIX sockets in a folder of this host's, which is why this fits only a
    local executor: one without a sandbox (a private temporary folder), or a
    sandboxed twin whose host gives a folder bound writable in the sandbox
    (`KernelHost.folder`). The client connects once the kernel's sockets are
    there, never again (no heartbeat channel, no reconnection): a kernel
    that later swaps a socket for a link cannot send the client elsewhere.
    Interrupts are SIGINT to the kernel's process group, as ipykernel's
    `interrupt_mode = "signal"` expects. Runs on asyncio only (zmq.asyncio).

    Args:
        executor: A local executor.
        python: The Python to run the kernel with (it must have ipykernel).
        make_chunk: Builds a chunk from a stream name and its content.
        host: Opens where the kernel runs (an OS sandbox of the tool's);
            `executor` itself when `None`.
    """

    language = "python"

    def __init__(
        self,
        executor: ToolExecutor,
        *,
        python: str,
        make_chunk: Callable[..., Any],
        host: Opener | None = None,
    ) -> None:
        """A kernel, not started: `serve` starts it."""
        self.executor = executor
        self._python = python
        self._make = make_chunk
        self._host = host
        self._session: ProcessSession | None = None
        self._client: Any = None
        self._alive = False
        self._lock = anyio.Lock()
        self._stop = anyio.Event()
        self._said = ""
        self._exit: CommandOutput | None = None

    def __repr__(self) -> str:
        return f"JupyterKernel({self.executor!r})"

    @property
    def alive(self) -> bool:
        """Whether the kernel still runs."""
        return self._alive

    async def serve(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Start the kernel, connect to it, and keep it until `close()` or its death."""
        if importlib.util.find_spec("jupyter_client") is None:  # pragma: no cover - checked before
            raise ExecutorError(_JUPYTER_HINT)
        opened = self._host() if self._host is not None else _plain(self.executor)
        with _unwrapped():
            async with opened as host:
                # The host's folder is the kernel's own already; else a private one of ours.
                owned = None if host.folder else tempfile.TemporaryDirectory(prefix="jupyter-")
                try:
                    folder = owned.name if owned is not None else str(host.folder)
                    await self._serve(host, pathlib.Path(folder), task_status)
                finally:
                    self._alive = False
                    if owned is not None:
                        owned.cleanup()

    async def _serve(
        self, host: KernelHost, here: pathlib.Path, task_status: anyio.abc.TaskStatus[None]
    ) -> None:
        import zmq
        from jupyter_client.asynchronous.client import AsyncKernelClient
        from jupyter_client.connect import write_connection_file

        # Unix sockets in a folder only we (and the kernel) can enter: no port for
        # another local user to reach, and messages signed with a key of this run's.
        path, info = write_connection_file(
            str(here / "kernel.json"),
            ip=str(here / "kernel"),
            transport="ipc",
            key=secrets.token_hex(16).encode(),
        )
        cmd = Command.exec(
            [self._python, "-m", "ipykernel_launcher", "-f", path, "--HistoryManager.enabled=False"]
        ).with_env(
            # IPython's profile and caches go to the kernel's own folder, not the home.
            {
                "PYDEVD_DISABLE_FILE_VALIDATION": "1",
                "IPYTHONDIR": str(here / "ipython"),
                **host.env,
            }
        )
        ports = (info["shell_port"], info["iopub_port"], info["stdin_port"])
        sockets = [f"{info['ip']}-{port}" for port in (*ports, info["control_port"])]
        session = await host.executor.start(cmd)
        # The kernel's output is read as it comes: kept once, not twice.
        session.keep_output(READER_KEPT)
        async with session, anyio.create_task_group() as group:
            self._session = session
            self._alive = True
            group.start_soon(self._pump, session)
            group.start_soon(_end_when_lost, host, self.close)
            client = AsyncKernelClient()
            client.load_connection_file(path)
            # Connected once, to the sockets the kernel made, and never again.
            client.context.setsockopt(zmq.RECONNECT_IVL, -1)
            channels = False
            try:
                await self._wait_bound(sockets)
                client.start_channels(hb=False)
                channels = True
                self._client = client
                await self._wait_ready(client)
                task_status.started()
                await self._stop.wait()
            finally:
                if channels:
                    client.stop_channels()
                else:
                    client.context.destroy(linger=0)
                group.cancel_scope.cancel()

    async def _wait_bound(self, sockets: list[str]) -> None:
        """Wait until each of the kernel's sockets is there (a socket, not a link) and listens."""
        with anyio.move_on_after(START_TIMEOUT):
            while self._alive:
                if all(_listening(path) for path in sockets):
                    return
                await anyio.sleep(0.02)
        said = self._said.strip()[-2000:]
        how = "did not get ready" if self._alive else "exited"
        raise ExecutorError(f"the Jupyter kernel {how}" + (f": {said}" if said else ""))

    async def _wait_ready(self, client: Any) -> None:
        # kernel_info answered means the shell and iopub channels are both up.
        with anyio.move_on_after(START_TIMEOUT) as scope:
            while self._alive:
                with anyio.move_on_after(1.0):
                    await client.wait_for_ready(timeout=START_TIMEOUT)
                    return
        said = self._said.strip()[-2000:]
        how = "did not get ready" if scope.cancelled_caught or self._alive else "exited"
        raise ExecutorError(f"the Jupyter kernel {how}" + (f": {said}" if said else ""))

    async def _pump(self, session: ProcessSession) -> None:
        # The kernel's own stdout and stderr carry its logs, not the cells' output.
        try:
            while (item := await session.next_chunk()) is not None:
                self._said = (self._said + item.chunk.data.decode("utf-8", "replace"))[-4000:]
            try:
                self._exit = await session.finalize()
            except CommandError as error:
                self._exit = error.output
        finally:
            self._alive = False
            self._stop.set()

    def close(self) -> None:
        """End the kernel (its session is left, which kills its tree)."""
        self._stop.set()

    async def run_cell(self, code: str, timeout: float | None, emit: Emit) -> CellOutcome:
        """Execute `code`, emitting its stream, display, result and error messages."""
        async with self._lock:
            client, session = self._client, self._session
            if not self._alive or client is None or session is None:
                message = "the python session has ended; its state is lost"
                await emit(self._make("error", message))
                return CellOutcome(ok=False, error=message, lost=True)
            await self._drop_replies(client)
            msg_id = client.execute(code, store_history=True, allow_stdin=False)
            state = _CellState()
            try:
                with anyio.move_on_after(timeout if timeout is not None else math.inf) as scope:
                    await self._collect(client, msg_id, state, emit)
            except anyio.get_cancelled_exc_class():
                await run_to_completion(lambda: self._interrupt_quietly(client, msg_id))
                raise
            if scope.cancelled_caught:
                state.timed_out = True
                await self._interrupt(session)
                with anyio.move_on_after(INTERRUPT_GRACE):
                    await self._collect(client, msg_id, state, emit)
                if not state.done:
                    self.close()
                    message = (
                        f"TimedOut: the cell ran past {timeout:g} s and did not stop when "
                        "interrupted; the python session was ended and its state is lost"
                    )
                    await emit(self._make("error", message))
                    return CellOutcome(ok=False, error=message, timed_out=True, lost=True)
                return CellOutcome(
                    ok=False,
                    error=f"TimedOut: the cell ran past {timeout:g} s and was interrupted; "
                    "the session's state is kept",
                    timed_out=True,
                )
            if state.exited:
                return CellOutcome(ok=False, error=state.error, lost=True)
            return CellOutcome(ok=state.ok, error=None if state.ok else state.error)

    async def _interrupt(self, session: ProcessSession) -> None:
        with contextlib.suppress(CommandError):
            await session.send_stdin(Signal(UnixSignal.SIGINT))

    async def _drop_replies(self, client: Any) -> None:
        # The cell's outcome comes on iopub; its execute_reply, on the shell
        # channel, is read and dropped so replies do not pile up there.
        import queue

        while True:
            try:
                await client.get_shell_msg(timeout=0)
            except queue.Empty:
                return

    async def _interrupt_quietly(self, client: Any, msg_id: str) -> None:
        session = self._session
        if session is None or not self._alive:
            return
        with anyio.move_on_after(INTERRUPT_GRACE) as scope:
            await self._interrupt(session)

            async def drop(chunk: Any) -> None:
                return None

            await self._collect(client, msg_id, _CellState(), drop)
        if scope.cancelled_caught:
            self.close()

    async def _collect(self, client: Any, msg_id: str, state: _CellState, emit: Emit) -> None:
        """Read iopub until the kernel is idle again after this cell."""
        import queue

        while not state.done:
            if not self._alive:
                state.exited = True
                state.error = "the python kernel died during the cell; the session's state is lost"
                await emit(self._make("error", state.error))
                return
            try:
                message = await client.get_iopub_msg(timeout=0.5)
            except queue.Empty:
                continue
            if message.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            kind, content = message.get("msg_type"), message.get("content", {})
            if kind == "stream":
                name = "stderr" if content.get("name") == "stderr" else "stdout"
                await emit(self._make(name, str(content.get("text", ""))))
            elif kind in ("execute_result", "display_data"):
                await self._bundle(content.get("data", {}), emit)
            elif kind == "error":
                state.error = f"{content.get('ename', 'Error')}: {content.get('evalue', '')}"
                traceback = "\n".join(str(line) for line in content.get("traceback", []))
                await emit(self._make("error", _ANSI.sub("", traceback) or state.error))
            elif kind == "status" and content.get("execution_state") == "idle":
                state.done = True
        state.ok = state.error is None

    async def _bundle(self, data: dict[str, Any], emit: Emit) -> None:
        images = [mime for mime in ("image/png", "image/jpeg", "image/gif") if mime in data]
        for mime in images:
            try:
                raw = base64.b64decode(str(data[mime]))
            except ValueError:
                continue
            await emit(self._make("image", "", mime_type=mime, data=raw))
        html = data.get("text/html")
        plain = data.get("text/plain")
        if plain is not None and not (images and str(plain).startswith("<Figure")):
            await emit(
                self._make("result", str(plain), html=html if isinstance(html, str) else None)
            )
        elif html is not None and not images:
            await emit(self._make("result", "", html=str(html)))
