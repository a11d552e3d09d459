"""The actor a `RayExecutor` places on a node: a `LocalExecutor` there, driven from afar.

It runs in a Ray worker process on the chosen node, as an async actor (its
methods run on the worker's event loop, many at once). Commands run
through a `LocalExecutor` (sandboxed when asked), created on the first
call. A command comes over the actor's channel (`executor._ray.channel`)
or through Ray's calls; there, output travels back as Ray streaming
generators: `("chunks", runs)` items, then one outcome item. A run is one
stream's output (stdout or stderr) as the chunks' buffers, pickled out of band so Ray copies them
once, into its message; the driver joins each run into one chunk. Items
gather on the node while the one before travels (see `_Outbox`) and go
inline in Ray's messages up to `INLINE_LIMIT`. Failures cross as values,
never as raised exceptions (which Ray would wrap, and whose `output` pickling would lose):
`("error", class name, message, output)`.

Sessions each live in one task of their own here, which enters the local
session and serves the operations the driver sends, so the session's task
group is entered and left by the same task.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import pickle
import shutil
import signal
import socket
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

from executor._core import errors
from executor._core.base import LoadedFile
from executor._core.commands import Command, StrPath
from executor._core.errors import CommandError
from executor._core.output import Chunk, CommandOutput, Stderr, Stdout
from executor._core.session import ProcessSession
from executor._core.stdin import Bytes, Resize, Signal, UnixSignal
from executor._local.executor import LocalExecutor
from executor._ray.channel import ChannelServer
from executor._sandbox.sandbox import Sandbox

NODE_VARIABLE = "EXECUTOR_RAY_NODE_ID"
"""Set in every command's environment: the Ray node id the command runs on."""

# How output crosses to the driver (see `_Outbox`). Ray carries each item
# of a streaming generator at a fixed cost besides its cost per byte, so a
# fast stream goes in items of up to `_BATCH` bytes, gathered on the node:
# output that follows close on the item before lingers up to `_LINGER`
# seconds for more, while output after a quiet spell leaves at once (a
# command's first line is not held back).
_BATCH = 4 << 20
_LINGER = 0.01
# Bytes that may wait on the node before the command's reader waits too
# (and with it the command, once its pipe is full).
_WAITING = 2 * _BATCH
# Items the node may yield ahead of the driver (Ray's generator
# backpressure): what a stream holds in transit is bounded, and what the
# command writes meanwhile gathers into the next item.
IN_FLIGHT = 2
# Items up to this size travel inline, inside Ray's message to the driver,
# rather than through the object stores of both nodes (a copy into each and
# the raylets' transfer between them: several times the cost per byte).
# Ray's default is 100 KiB, below a batch; its processes read
# `RAY_<setting>` as they start, so the actor's environment sets it. It stays
# under Ray's 10 MiB of inline bytes per message (a batch and its framing).
INLINE_LIMIT = 8 << 20
INLINE_VARIABLE = "RAY_max_direct_call_object_size"
# A listing's files cross in batches of about this many bytes (or 256 files).
_FILES_BATCH = 1 << 20
# Seconds between checks that the node's raylet lives; most a lost node's close may take.
_RAYLET_CHECK = 0.25
_CLOSE_ON_NODE_LOSS = 10.0
# Ids of cancelled runs this actor had not (or no longer) running, at most.
_CANCELLED_KEPT = 4096

Failure = tuple[str, str, tuple[Any, ...], dict[str, Any]]


def encode_failure(error: BaseException) -> Failure:
    """An executor error (or an OS error of a listing) as a value Ray carries intact.

    The class by name, the exception's args and its attributes (`output`,
    `timeout`, `path`, ...): enough to make the same exception again.
    """
    if isinstance(error, CommandError):
        return ("error", type(error).__name__, error.args, dict(vars(error)))
    if isinstance(error, FileNotFoundError | NotADirectoryError | PermissionError):
        return ("oserror", type(error).__name__, (str(error),), {})
    return ("error", "ExecutorError", (f"{type(error).__name__}: {error}",), {})


def decode_failure(item: tuple[Any, ...]) -> BaseException:
    """The exception `encode_failure` encoded, as the caller would have seen it locally."""
    kind, name, args, attributes = item
    if kind == "oserror":
        oserrors = {"NotADirectoryError": NotADirectoryError, "PermissionError": PermissionError}
        return oserrors.get(name, FileNotFoundError)(*args)
    cls = getattr(errors, name, None)
    if not (isinstance(cls, type) and issubclass(cls, CommandError)):
        return errors.ExecutorError(str(args[0]) if args else name)
    # Made again without its own __init__, whose arguments differ class by class.
    error = cls.__new__(cls)
    Exception.__init__(error, *args)
    error.__dict__.update(attributes)
    error.__dict__.setdefault("message", str(args[0]) if args else name)
    error.__dict__.setdefault("output", CommandOutput.empty())
    return error


Run = tuple[bool, list[pickle.PickleBuffer]]
"""Output of one stream (stderr: True) as it was read: the buffers of its chunks."""


def decode_runs(runs: list[tuple[bool, list[Any]]]) -> list[Chunk]:
    """The chunks a `("chunks", runs)` item carries: one chunk a run, its buffers joined."""
    return [(Stderr if is_stderr else Stdout)(b"".join(buffers)) for is_stderr, buffers in runs]


class _Outbox:
    """Output waiting to cross to the driver, bounded in bytes, then the outcome.

    `put` takes chunks as the node's executor reads them (waiting while
    `_WAITING` bytes wait already) and, last, the outcome. `take` gives what
    waits, up to about `_BATCH` bytes, as runs of one stream (stdout and
    stderr apart, in their order) that the driver joins into one chunk each.

    Like Nagle's algorithm: output that comes after a quiet spell leaves at
    once; output that follows close on the last item (a stream) lingers up
    to `_LINGER` seconds, gathering into a larger item.
    """

    def __init__(self) -> None:
        self._items: collections.deque[Any] = collections.deque()
        self._size = 0
        self._ended = False
        self._arrived = asyncio.Event()
        self._room = asyncio.Event()
        self._room.set()
        self._left = -_LINGER

    async def put(self, item: Any) -> None:
        if isinstance(item, Stdout | Stderr):
            while self._size >= _WAITING:
                self._room.clear()
                await self._room.wait()
            self._size += len(item.data)
        else:
            self._ended = True
        self._items.append(item)
        self._arrived.set()

    def outcome_now(self) -> Any:
        """The outcome, if it is the only thing waiting (a session that failed to start)."""
        if len(self._items) == 1 and not isinstance(self._items[0], Stdout | Stderr):
            return self._items.popleft()
        return None

    async def _arrival(self) -> None:
        self._arrived.clear()
        await self._arrived.wait()

    async def take(self) -> tuple[list[Run], Any]:
        """The output that waits (one item at least waited for), and the outcome if it came."""
        while not self._items:
            await self._arrival()
        loop = asyncio.get_running_loop()
        now = loop.time()
        if now - self._left < _LINGER:
            # A stream: let more gather, up to a batch or the outcome.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout_at(now + _LINGER):
                    while self._size < _BATCH and not self._ended:
                        await self._arrival()
        runs: list[Run] = []
        size = 0
        outcome = None
        while self._items:
            item = self._items[0]
            if isinstance(item, Stdout | Stderr) and size and size + len(item.data) > _BATCH:
                break
            self._items.popleft()
            if not isinstance(item, Stdout | Stderr):
                outcome = item
                break
            is_stderr = isinstance(item, Stderr)
            if not runs or runs[-1][0] != is_stderr:
                runs.append((is_stderr, []))
            # Out of band: Ray copies the bytes once, into its message, and
            # pickles no copy of them.
            runs[-1][1].append(pickle.PickleBuffer(item.data))
            size += len(item.data)
        self._size -= size
        self._room.set()
        self._left = loop.time()
        return runs, outcome


class _SessionHost:
    """One session on this node: its task enters it and serves the driver's operations."""

    def __init__(self, local: LocalExecutor, cmd: Command, pty: bool, kept: int | None) -> None:
        self.out = _Outbox()
        self.ops: asyncio.Queue[tuple[str, tuple[Any, ...], asyncio.Future[Any]]] = asyncio.Queue()
        self.ready: asyncio.Future[int | None] = asyncio.get_running_loop().create_future()
        self.task = asyncio.ensure_future(self._main(local, cmd, pty, kept))

    async def _main(self, local: LocalExecutor, cmd: Command, pty: bool, kept: int | None) -> None:
        try:
            session = await local.start(cmd, pty=pty)
            if kept is not None:
                session.keep_output(kept)
            async with session:
                self.ready.set_result(session.pid)
                forward = asyncio.ensure_future(self._forward(session))
                try:
                    await self._serve(session)
                finally:
                    forward.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await forward
        except BaseException as error:
            if not self.ready.done():
                self.ready.set_result(None)
                await self.out.put(encode_failure(error))
            if not isinstance(error, Exception):
                raise

    async def _forward(self, session: ProcessSession) -> None:
        async for item in session:
            await self.out.put(item.chunk)
        try:
            output = await session.finalize()
        except Exception as error:
            await self.out.put(encode_failure(error))
        else:
            await self.out.put(("done", output))

    async def _serve(self, session: ProcessSession) -> None:
        while True:
            op, args, reply = await self.ops.get()
            if op == "release":
                reply.set_result(None)
                return
            try:
                if op == "write":
                    await session.send_stdin(Bytes(args[0]))
                elif op == "close":
                    await session.close_stdin()
                elif op == "signal":
                    await session.send_stdin(Signal(UnixSignal(args[0])))
                elif op == "resize":
                    await session.send_stdin(Resize(*args))
                elif op == "below":
                    await session.kill_descendants(args[0])
                elif op == "cancel":
                    session.cancel()
                reply.set_result(None)
            except Exception as error:
                reply.set_result(encode_failure(error))

    async def call(self, op: str, *args: Any) -> Any:
        reply: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        if self.task.done():
            return None
        await self.ops.put((op, args, reply))
        done, _ = await asyncio.wait({reply, self.task}, return_when=asyncio.FIRST_COMPLETED)
        return reply.result() if reply in done else None


class NodeExecutor:
    """The actor's class (made remote by `RayExecutor`): a `LocalExecutor` on this node."""

    def __init__(
        self, workdir: str | None, options: Mapping[str, Any], sandbox: Sandbox | None
    ) -> None:
        self._workdir = workdir
        self._made_workdir: str | None = None
        self._options = dict(options)
        self._sandbox = sandbox
        self._local: LocalExecutor | None = None
        # A Ray worker is a child of its node's raylet: a new parent means the
        # raylet died, and with it the node (see `_watch_node`).
        self._raylet = os.getppid()
        # Set once the actor ends what it runs (its node lost, or closed):
        # a ping then says so, and the driver places no more commands here.
        self._closing = False
        self._watching: asyncio.Task[None] | None = None
        self._runs: dict[int, asyncio.Task[Any]] = {}
        # Runs cancelled before they started here (the calls may cross), or
        # after they ended (the channel's end came first): a few are kept.
        self._cancelled: collections.OrderedDict[int, None] = collections.OrderedDict()
        self._sessions: dict[int, _SessionHost] = {}
        self._channel: ChannelServer | None = None

    def _executor(self) -> LocalExecutor:
        if self._watching is None:
            self._watching = asyncio.ensure_future(self._watch_node())
        if self._local is None:
            import ray

            # Ray blocks SIGINT in the thread its async actors run on, and a
            # process started from it inherits the mask: a command on a pty
            # would never see the Ctrl-C typed there.
            signal.pthread_sigmask(signal.SIG_SETMASK, set())

            workdir = self._workdir
            if workdir is None:
                workdir = self._made_workdir = tempfile.mkdtemp(prefix="executor-ray-")
            options = dict(self._options)
            node = ray.get_runtime_context().get_node_id()
            envs = {**dict(options.pop("envs", None) or {}), NODE_VARIABLE: node}
            self._local = LocalExecutor(workdir, sandbox=self._sandbox, envs=envs, **options)
        return self._local

    async def _watch_node(self) -> None:
        """End everything this actor started, and the worker, once the node's raylet is gone.

        The worker outlives its raylet for a while, and so would the commands
        it runs; Ray's own view of the node comes only seconds later.
        """
        while os.getppid() == self._raylet:
            await asyncio.sleep(_RAYLET_CHECK)
        try:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.close(), _CLOSE_ON_NODE_LOSS)
        finally:
            os._exit(1)

    async def describe(self) -> dict[str, Any]:
        """Where this actor runs: node id, host name, worker pid, workdir; and its channel.

        The channel (see `executor._ray.channel`) listens on the address Ray
        knows the node by; `"channel": (host, port, token, proof)` says
        where, what to show it and what it shows back.
        """
        import ray

        local = self._executor()
        if self._channel is None:
            host: str = ray.util.get_node_ip_address()  # type: ignore[no-untyped-call]
            self._channel = ChannelServer(self._run_one)
            await self._channel.start(host)
        return {
            "node_id": ray.get_runtime_context().get_node_id(),
            "hostname": socket.gethostname(),
            "pid": os.getpid(),
            "workdir": local.workdir,
            "channel": (*self._channel.address, self._channel.token, self._channel.proof),
        }

    async def ping(self) -> bool:
        """Answer at once: whether this actor still takes commands (False once it is ending)."""
        return not self._closing

    async def run(self, run_id: int, cmd: Command) -> AsyncIterator[tuple[Any, ...]]:
        """Run `cmd`, yielding `("chunks", [...])` items as output comes, then the outcome."""
        out = _Outbox()

        async def main() -> None:
            await out.put(await self._run_one(run_id, cmd, out.put))

        task = asyncio.ensure_future(main())
        try:
            while True:
                runs, outcome = await out.take()
                if runs:
                    yield ("chunks", runs)
                if outcome is not None:
                    yield outcome
                    return
        finally:
            if not task.done():
                # The driver went away: the run is cancelled, and its tree killed.
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    async def run_whole(self, run_id: int, cmd: Command) -> tuple[Any, ...]:
        """Run `cmd` with no sink: one call, one reply (its outcome)."""
        return await self._run_one(run_id, cmd, None)

    async def _run_one(
        self, run_id: int, cmd: Command, sink: Callable[[Chunk], Awaitable[None]] | None
    ) -> tuple[Any, ...]:
        """Run `cmd` (its output to `sink`, when given); its outcome, encoded.

        Cancelling this (the driver gave up) kills the command's tree.
        """
        if run_id in self._cancelled:
            del self._cancelled[run_id]
            return encode_failure(errors.ExecutorError("the run was cancelled before it started"))
        local = self._executor()

        async def main() -> tuple[Any, ...]:
            try:
                if sink is None:
                    return ("done", await local.exec_cmd(cmd))
                return ("done", await local.exec_cmd_streaming(cmd, sink))
            except Exception as error:
                return encode_failure(error)

        task = self._runs[run_id] = asyncio.ensure_future(main())
        try:
            outcome: tuple[Any, ...] = await task
            return outcome
        finally:
            await self._end_run(run_id, task)

    async def _end_run(self, run_id: int, task: asyncio.Task[Any]) -> None:
        """Forget run `run_id`; if its task still runs, cancel it and wait for it.

        A task still running here means the driver went away (cancelled, or
        its sink failed): cancelling it kills the command's tree.
        """
        self._runs.pop(run_id, None)
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def cancel(self, run_id: int) -> None:
        """End a run the driver gave up on: its process tree is killed."""
        task = self._runs.get(run_id)
        if task is None:
            self._cancelled[run_id] = None
            while len(self._cancelled) > _CANCELLED_KEPT:
                self._cancelled.popitem(last=False)
        elif not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def list_files(
        self, path: StrPath, extensions: list[str] | None
    ) -> AsyncIterator[tuple[Any, ...]]:
        """`stream_files` on this node, in batches of files, then `("done",)` or the error."""
        batch: list[LoadedFile] = []
        size = 0
        try:
            async for loaded in self._executor().stream_files(path, extensions):
                batch.append(loaded)
                size += len(loaded.content)
                if size >= _FILES_BATCH or len(batch) >= 256:
                    yield ("files", batch)
                    batch = []
                    size = 0
        except Exception as error:
            if batch:
                yield ("files", batch)
            yield encode_failure(error)
            return
        if batch:
            yield ("files", batch)
        yield ("done",)

    async def session_open(
        self, session_id: int, cmd: Command, pty: bool, kept: int | None = None
    ) -> Any:
        """Start a session (keeping `kept` bytes, see `keep_output`); its pid, or the failure."""
        host = _SessionHost(self._executor(), cmd, pty, kept)
        self._sessions[session_id] = host
        pid = await host.ready
        failure = host.out.outcome_now() if pid is None else None
        if failure is not None:
            self._sessions.pop(session_id, None)
            return failure
        return ("started", pid)

    async def session_stream(self, session_id: int) -> AsyncIterator[tuple[Any, ...]]:
        """The session's output as it comes, then its outcome."""
        host = self._sessions[session_id]
        while True:
            runs, outcome = await host.out.take()
            if runs:
                yield ("chunks", runs)
            if outcome is not None:
                yield outcome
                return

    async def session_call(self, session_id: int, op: str, *args: Any) -> Any:
        """One operation on a session: write, close, signal, resize, below, cancel or release."""
        host = self._sessions.get(session_id)
        if host is None:
            return None
        result = await host.call(op, *args)
        if op == "release":
            with contextlib.suppress(Exception):
                await host.task
            self._sessions.pop(session_id, None)
        return result

    async def close(self) -> None:
        """End every run and session, close the executor, remove a workdir made here."""
        self._closing = True
        if self._channel is not None:
            await self._channel.close()
        for host in list(self._sessions.values()):
            with contextlib.suppress(Exception):
                await host.call("release")
                await host.task
        self._sessions.clear()
        for task in list(self._runs.values()):
            task.cancel()
        if self._local is not None:
            await self._local.aclose()
        if self._made_workdir is not None:
            shutil.rmtree(self._made_workdir, ignore_errors=True)
