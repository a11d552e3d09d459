"""`RayExecutor`: commands on a Ray cluster's node, through an actor holding a `LocalExecutor`.

`pip install tool-executor[ray]`. The executor places one actor (see
`executor._ray.node`) by resources, a custom resource, a node id or a
placement group bundle, at the first command or on `async with`. Commands
go to that actor over a TCP connection of their own (see
`executor._ray.channel`), or, where the node's address is out of reach
(or `direct=False`), through Ray's calls: streaming generators whose
items gather on the node. Sessions keep one generator open for their
output and send each stdin event as a call, listings come in batches. The
actor is made with no restarts and no task retries, so Ray never runs a
command twice. While a call waits, the actor is pinged: one that stops
answering (its worker or its node died) fails the call with
`ExecutorError` naming it, within `ping_timeout` seconds and a ping
period. The next command places a new actor by the same rules (on a
living node, within `placement_timeout`), in a new workdir unless one was
given: what the lost node held is gone with it, but no command is run
again.

`RayPool` places many executors over the cluster through one placement
group and says where each runs.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from typing import Any, Self, TypeVar

import anyio
import attrs
import sniffio

from executor._core.base import CommandRunner, LoadedFile, PersistentShell, call_sink
from executor._core.cleanup import run_to_completion
from executor._core.commands import Command, Exec, ReadFile, Shell, StrPath, WriteFile, session_argv
from executor._core.errors import ExecutorError
from executor._core.output import Chunk, CommandOutput, Sink
from executor._core.session import ProcessSession
from executor._ray.channel import ChannelBroken, Connection, Connections
from executor._ray.node import (
    IN_FLIGHT,
    INLINE_LIMIT,
    INLINE_VARIABLE,
    NodeExecutor,
    decode_failure,
    decode_runs,
)
from executor._sandbox.sandbox import Sandbox

_T = TypeVar("_T")
_INSTALL = "RayExecutor needs Ray: pip install 'tool-executor[ray]'"
# Seconds to connect to an actor's channel before commands fall back to Ray's calls.
_CONNECT_TIMEOUT = 5.0
# Seconds before an actor whose node died as it started is placed again.
_PLACE_AGAIN_AFTER = 0.5


def _ray() -> Any:
    try:
        import ray
    except ImportError as error:  # pragma: no cover - exercised without the extra
        raise ImportError(_INSTALL) from error
    return ray


def _check_asyncio(who: str) -> None:
    """Raise `ExecutorError` at once if the running async library is not asyncio.

    Ray's object references and generators are asyncio's: awaited under trio
    they fail deep inside trio with its own `TypeError`, after `ray.init` and
    the actor have started. Outside any event loop (a synchronous call) this
    passes: the first await checks again.
    """
    try:
        library = sniffio.current_async_library()
    except sniffio.AsyncLibraryNotFoundError:
        return
    if library != "asyncio":
        raise ExecutorError(
            f"{who} needs asyncio: Ray's client is asyncio's, not {library}'s "
            "(run it under asyncio, e.g. anyio.run(..., backend='asyncio'))"
        )


async def _connected(address: str | None) -> None:
    """Connect this process to the cluster at `address`, unless Ray is connected already."""
    ray = _ray()
    if not ray.is_initialized():
        await anyio.to_thread.run_sync(
            functools.partial(ray.init, address=address, log_to_driver=False)
        )


@functools.cache
def _actor_class() -> Any:
    ray = _ray()
    # Async methods: the actor serves many calls at once on its event loop.
    return ray.remote(max_restarts=0, max_task_retries=0)(NodeExecutor)


@attrs.frozen
class NodeInfo:
    """Where a `RayExecutor`'s actor runs."""

    node_id: str
    hostname: str
    pid: int
    workdir: str


def _mapping(value: Mapping[str, float] | None) -> dict[str, float]:
    return dict(value or {})


@attrs.define(eq=False)
class RayExecutor(CommandRunner):
    """Runs commands on a Ray cluster's node, in a `LocalExecutor` an actor holds there.

    Args:
        address: The cluster (`ray.init(address=...)`: `"auto"`, `"HOST:PORT"`,
            `"ray://HOST:10001"`); `None` uses the Ray this process is connected to,
            or starts one as `ray.init()` does.
        workdir: Where commands start on the node; by default a new temporary
            folder there, removed at `aclose()`.
        resources: Custom resources the actor needs (`{"gpu-node": 0.01}`).
        num_cpus: CPUs the actor holds while it lives (0: none; its commands
            use what the node has).
        node_id: Place the actor on this node (hard affinity).
        placement_group: Place it in this placement group's bundle `bundle_index`.
        bundle_index: The bundle of `placement_group` (`-1`: any).
        sandbox: Run the node's commands under this `Sandbox`.
        runtime_env: Ray's runtime environment for the actor.
        placement_timeout: Seconds to wait for the actor to be placed and start
            (an actor whose node dies as it starts is placed again meanwhile).
        ping_interval: Seconds between liveness checks while a call waits.
        ping_timeout: Seconds a liveness check may take before the actor counts
            as gone (a busy node answers late, so not too few).
        direct: Send commands and their output over a TCP connection straight
            to the actor (on the address Ray knows its node by, checked by a
            token the actor gives through Ray), not through Ray's calls: a
            fraction of their cost per command and per byte. Where that
            address cannot be reached from here (Ray Client) commands fall
            back to Ray's calls; `False` keeps to them from the start. A
            cluster that speaks TLS (`RAY_USE_TLS`) keeps to Ray's calls too:
            the connection is plain TCP, and its token, commands and output
            would cross the network in the clear.

    The other options (`default_timeout`, `kill_grace`, `output_limit`, `envs`, ...)
    are the node's `LocalExecutor`'s. Commands see `EXECUTOR_RAY_NODE_ID`.
    Needs asyncio (Ray's object references are asyncio futures): under trio,
    entering it, every command, session, shell and listing raises
    `ExecutorError` saying so, before Ray is connected or anything started.

    """

    address: str | None = attrs.field(default=None)
    workdir: str | None = attrs.field(default=None, kw_only=True)
    resources: Mapping[str, float] = attrs.field(factory=dict, kw_only=True, converter=_mapping)
    num_cpus: float = attrs.field(default=0, kw_only=True)
    node_id: str | None = attrs.field(default=None, kw_only=True)
    placement_group: Any = attrs.field(default=None, kw_only=True)
    bundle_index: int = attrs.field(default=-1, kw_only=True)
    sandbox: Sandbox | None = attrs.field(default=None, kw_only=True)
    runtime_env: Mapping[str, Any] | None = attrs.field(default=None, kw_only=True)
    placement_timeout: float = attrs.field(default=120.0, kw_only=True)
    ping_interval: float = attrs.field(default=2.0, kw_only=True)
    ping_timeout: float = attrs.field(default=30.0, kw_only=True)
    direct: bool = attrs.field(default=True, kw_only=True)
    _actor: Any = attrs.field(init=False, default=None, repr=False)
    _info: NodeInfo | None = attrs.field(init=False, default=None, repr=False)
    _lock: anyio.Lock | None = attrs.field(init=False, default=None, repr=False)
    _ids: itertools.count[int] = attrs.field(init=False, factory=itertools.count, repr=False)
    _connections: Connections | None = attrs.field(init=False, default=None, repr=False)
    # The actor a call found gone (or not answering): the next `_ensure`
    # pings it once, and places a new one if it is gone indeed.
    _suspect: Any = attrs.field(init=False, default=None, repr=False)

    def __repr__(self) -> str:
        where = self._info.node_id[:12] if self._info else "unplaced"
        return f"RayExecutor({self.address!r}, node={where})"

    async def __aenter__(self) -> Self:
        await self._ensure()
        return self

    def _check_open(self) -> None:
        super()._check_open()
        _check_asyncio("RayExecutor")

    def shell(
        self,
        *,
        login: bool | None = None,
        cwd: StrPath | None = None,
        env: Mapping[str, str] | None = None,
    ) -> PersistentShell:
        """A persistent shell on the node (see `CommandRunner.shell`); refused under trio."""
        _check_asyncio("RayExecutor")
        return super().shell(login=login, cwd=cwd, env=env)

    # --- the actor ----------------------------------------------------------

    def _options(self) -> dict[str, Any]:
        options: dict[str, Any] = {"num_cpus": self.num_cpus}
        if self.resources:
            options["resources"] = dict(self.resources)
        # The actor's items up to `INLINE_LIMIT` travel inside Ray's replies
        # to the driver, not through the object stores of both nodes (see
        # `executor._ray.node`); a value the caller set stands.
        runtime_env = dict(self.runtime_env or {})
        runtime_env["env_vars"] = {
            INLINE_VARIABLE: str(INLINE_LIMIT),
            **dict(runtime_env.get("env_vars") or {}),
        }
        options["runtime_env"] = runtime_env
        if self.node_id is not None:
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(
                self.node_id, soft=False
            )
        elif self.placement_group is not None:
            from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

            options["scheduling_strategy"] = PlacementGroupSchedulingStrategy(
                self.placement_group, placement_group_bundle_index=self.bundle_index
            )
        return options

    def _local_options(self) -> dict[str, Any]:
        return {
            "default_timeout": self.default_timeout,
            "env_clear": self.env_clear,
            "env_remove": self.env_remove,
            "envs": dict(self.envs),
            "output_limit": self.output_limit,
            "stream_output_limit": self.stream_output_limit,
            "kill_grace": self.kill_grace,
            "drain_timeout": self.drain_timeout,
            "read_limit": self.read_limit,
            "spill": self.spill,
            "login": self.login,
        }

    async def _ensure(self) -> Any:
        self._check_open()
        if self._actor is not None and self._suspect is None:
            return self._actor
        if self._lock is None:
            self._lock = anyio.Lock()
        async with self._lock:
            self._check_open()
            if self._suspect is not None:
                await self._forget_if_gone()
            if self._actor is None:
                await _connected(self.address)
                actor, described = await self._place()
                host, port, token, proof = described.pop("channel")
                if self.direct and not _ray_uses_tls():
                    self._connections = Connections(host, port, token, proof, _CONNECT_TIMEOUT)
                self._info = NodeInfo(**described)
                self._actor = actor
        return self._actor

    async def _place(self) -> tuple[Any, dict[str, Any]]:
        """A new actor, placed and started, and what it says of itself (`describe`).

        An actor that dies before it starts because its node died (the
        cluster had not yet seen the node's loss, and placed it there, or in
        a placement group's bundle not yet placed again) is placed again,
        until `placement_timeout`: placement fails only when the cluster
        cannot take the actor in that time.
        """
        deadline = anyio.current_time() + self.placement_timeout
        while True:
            actor = (
                _actor_class()
                .options(**self._options())
                .remote(self.workdir, self._local_options(), self.sandbox)
            )
            try:
                with anyio.fail_after(max(deadline - anyio.current_time(), 0)):
                    described: dict[str, Any] = await actor.describe.remote()
                return actor, described
            except TimeoutError:
                await run_to_completion(functools.partial(self._kill_actor, actor))
                raise ExecutorError(
                    f"no node of the Ray cluster took the actor within "
                    f"{self.placement_timeout}s (it asks for {self._options()})"
                ) from None
            except BaseException as error:
                await run_to_completion(functools.partial(self._kill_actor, actor))
                if isinstance(error, Exception) and _is_ray_error(error):
                    if self._may_place_again(error) and anyio.current_time() < deadline:
                        # Not at once: the cluster needs a moment to see the node gone.
                        await anyio.sleep(min(_PLACE_AGAIN_AFTER, deadline - anyio.current_time()))
                        continue
                    raise ExecutorError(f"the Ray actor could not start: {error}") from None
                raise

    def _may_place_again(self, error: Exception) -> bool:
        """Whether an actor that failed to start so may be placed again.

        Only a system-level death (its node or worker died), never its own
        start's error, and never on a node named by `node_id`: no other
        node will do.
        """
        from ray.exceptions import ActorDiedError

        return (
            self.node_id is None
            and isinstance(error, ActorDiedError)
            and not error.actor_init_failed
        )

    async def _forget_if_gone(self) -> None:
        """Ping the actor a call found gone; forget it (and kill it) unless it takes commands."""
        actor = self._suspect
        if actor is not self._actor:
            self._suspect = None  # already forgotten
            return
        try:
            with anyio.fail_after(self.ping_timeout):
                taking = await actor.ping.remote()
        except Exception:  # any failure of the ping: the actor is gone
            taking = False
        if taking:
            self._suspect = None  # it answers: what failed was passing (a connection, a call)
            return
        # Gone, or ending (its node lost). (Cancelled during the ping, it
        # stayed suspect for the next command.)
        self._suspect = None
        if self._connections is not None:
            self._connections.close()
            self._connections = None
        self._actor = None
        self._info = None
        with contextlib.suppress(Exception):
            # No close first: it would wait on a node that does not answer. A
            # worker that lives on is killed, and its commands' trees with it.
            _ray().kill(actor, no_restart=True)

    def _lost(self, actor: Any) -> None:
        """Note that `actor` failed a call as if gone: the next command checks it."""
        if actor is not None and actor is self._actor:
            self._suspect = actor

    async def node(self) -> NodeInfo:
        """Where the actor runs (placing it first if it is not yet)."""
        await self._ensure()
        assert self._info is not None
        return self._info

    async def _kill_actor(self, actor: Any) -> None:
        ray = _ray()
        with contextlib.suppress(Exception):
            with anyio.move_on_after(self.ping_timeout + self.kill_grace + 5):
                await actor.close.remote()
        with contextlib.suppress(Exception):
            ray.kill(actor, no_restart=True)

    async def _shut_down(self) -> None:
        if self._connections is not None:
            self._connections.close()
            self._connections = None
        actor, self._actor = self._actor, None
        if actor is not None:
            await self._kill_actor(actor)

    def _gone(self, actor: Any, error: BaseException) -> ExecutorError:
        self._lost(actor)
        where = f"on node {self._info.node_id}" if self._info else "being placed"
        return ExecutorError(f"the Ray actor {where} is gone: {type(error).__name__}: {error}")

    async def _watch(self, actor: Any) -> None:
        """Return (raise) once the actor stops answering pings: it or its node died."""
        while True:
            await anyio.sleep(self.ping_interval)
            try:
                with anyio.fail_after(self.ping_timeout):
                    taking = await actor.ping.remote()
            except TimeoutError:
                self._lost(actor)
                raise ExecutorError(
                    f"the Ray actor on node {self._info.node_id if self._info else '?'} "
                    f"did not answer within {self.ping_timeout}s: its worker or node is gone"
                ) from None
            except Exception as error:
                raise self._gone(actor, error) from None
            if not taking:
                # It ends what it runs: its node's raylet is gone.
                self._lost(actor)
                raise ExecutorError(
                    f"the Ray node {self._info.node_id if self._info else '?'} is lost: "
                    "its actor is ending the commands it ran"
                )

    async def _guarded(self, actor: Any, work: Callable[[], Awaitable[_T]]) -> _T:
        """Run `work` while watching the actor: a lost actor ends it with `ExecutorError`.

        Ray's own failures become `ExecutorError`; anything else (a sink's
        error, a cancellation) passes as it is.
        """
        lost: list[ExecutorError] = []
        done: list[_T] = []

        async def watch() -> None:
            try:
                await self._watch(actor)
            except ExecutorError as error:
                lost.append(error)
                tasks.cancel_scope.cancel()

        try:
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(watch)
                try:
                    done.append(await work())
                finally:
                    tasks.cancel_scope.cancel()
        except BaseExceptionGroup as group:
            # Only `work` can fail here: the group holds its one error; raise it as is.
            error = group.exceptions[0] if len(group.exceptions) == 1 else group
            raise self._gone(actor, error) if _is_ray_error(error) else error from None
        if lost:
            raise lost[0]
        return done[0]

    async def _call(self, actor: Any, ref: Any) -> Any:
        """Await one actor call, watching the actor."""

        async def wait() -> Any:
            return await ref

        return await self._guarded(actor, wait)

    async def _stream(
        self, actor: Any, generator: Any, take: Callable[[list[Chunk]], Awaitable[None]]
    ) -> tuple[Any, ...]:
        """Feed the chunks of each item of an output stream to `take`; return the outcome."""

        async def read() -> tuple[Any, ...]:
            async for ref in generator:
                item: tuple[Any, ...] = await ref
                if item[0] == "chunks":
                    await take(decode_runs(item[1]))
                else:
                    return item
            raise ExecutorError("the Ray actor ended the call without an outcome")

        return await self._guarded(actor, read)

    # --- commands -------------------------------------------------------------

    async def _run(self, cmd: Command, sink: Sink | None) -> CommandOutput:
        actor = await self._ensure()
        run_id = next(self._ids)
        finished = False
        connection: Connection | None = None
        connections = self._connections

        async def take(chunks: list[Chunk]) -> None:
            if sink is not None:
                for chunk in chunks:
                    await call_sink(sink, chunk)

        if connections is not None:
            try:
                connection = await connections.take()
            except OSError:
                if not connections.reached:
                    # The node's address is not reachable from this driver:
                    # Ray's calls carry this executor's commands from now on.
                    # Connections other commands opened meanwhile close as
                    # they come back, not left open to the end.
                    if self._connections is connections:
                        self._connections = None
                    connections.close()
                # Else the channel served before (this failure is passing: out
                # of file descriptors, a slow accept): this one command goes
                # through Ray's calls, the next ones try the channel again.
                connections = None
        try:
            if connection is not None:
                outcome = await self._guarded(
                    actor,
                    functools.partial(self._run_direct, actor, connection, run_id, cmd, sink),
                )
            elif sink is None:
                outcome = await self._call(actor, actor.run_whole.remote(run_id, cmd))
            else:
                outcome = await self._stream(actor, _streamed(actor.run).remote(run_id, cmd), take)
            finished = True
        finally:
            if connection is not None and finished:
                assert connections is not None  # a connection comes from them
                connections.give_back(connection)
            elif not finished:
                if connection is not None:
                    connection.close()  # the node cancels the run as it sees the end
                # Cancelled, a failing sink, a lost actor: end the tree on the node.
                await run_to_completion(functools.partial(self._cancel_run, actor, run_id))
        if outcome[0] == "done":
            output: CommandOutput = outcome[1]
            return output
        # The node's executor already streamed a failure's output to the sink.
        raise decode_failure(outcome)

    async def _run_direct(
        self, actor: Any, connection: Connection, run_id: int, cmd: Command, sink: Sink | None
    ) -> tuple[Any, ...]:
        """One command over the actor's channel: its outcome (its output to `sink` as it comes)."""
        take = None if sink is None else functools.partial(call_sink, sink)
        try:
            outcome: tuple[Any, ...] = await connection.run(run_id, cmd, take)
        except ChannelBroken as error:
            # Only the connection's own failures: a sink's error passes as it is.
            raise self._gone(actor, error) from None
        return outcome

    async def _cancel_run(self, actor: Any, run_id: int) -> None:
        with contextlib.suppress(Exception):
            with anyio.move_on_after(self.ping_timeout + self.kill_grace + 5):
                await actor.cancel.remote(run_id)

    async def _process(
        self, cmd: Command, argv: tuple[str, ...], stdin: bytes | None, sink: Sink | None
    ) -> CommandOutput:
        return await self._run(cmd, sink)

    async def _read_file(self, cmd: ReadFile, sink: Sink | None) -> CommandOutput:
        return await self._run(cmd, sink)

    async def _write_file(self, cmd: WriteFile, sink: Sink | None) -> CommandOutput:
        return await self._run(cmd, sink)

    async def start(self, cmd: Command, *, pty: bool = False) -> ProcessSession:
        """A session of `cmd` on the node (see `ToolExecutor.start`)."""
        self._check_open()
        if not isinstance(cmd, Shell | Exec):
            raise ExecutorError(f"RayExecutor cannot start {type(cmd).__name__} sessions")
        session_argv(cmd)  # a #! script cannot be a session: say so now
        return RaySession(self, cmd, pty=pty)

    async def stream_files(
        self, path: StrPath, extensions: Iterable[str] | None = None
    ) -> AsyncIterator[LoadedFile]:
        """The text files below `path` on the node (see `ToolExecutor.stream_files`)."""
        actor = await self._ensure()
        wanted = list(extensions) if extensions is not None else None
        try:
            async for ref in actor.list_files.remote(path, wanted):
                item = await ref
                if item[0] == "files":
                    for loaded in item[1]:
                        yield loaded
                elif item[0] == "done":
                    return
                else:
                    raise decode_failure(item)
        except Exception as error:
            if _is_ray_error(error):
                raise self._gone(actor, error) from None
            raise


def _streamed(method: Any) -> Any:
    """An actor's output method, allowed `IN_FLIGHT` items ahead of the driver.

    Bounds what a stream holds in transit to a few items (in the driver's
    memory until it takes them); what the command writes meanwhile gathers
    on the node into the next one.
    """
    return method.options(_generator_backpressure_num_objects=IN_FLIGHT)


def _ray_uses_tls() -> bool:
    """Whether Ray's own connections use TLS here (as Ray reads `RAY_USE_TLS`)."""
    return os.environ.get("RAY_USE_TLS", "0").lower() in ("1", "true")


def _is_ray_error(error: BaseException) -> bool:
    """Whether `error` is one of Ray's own (a lost actor or node, a failed call)."""
    try:
        from ray.exceptions import RayError
    except ImportError:  # pragma: no cover
        return False
    return isinstance(error, RayError)


class RaySession(ProcessSession):
    """A session of a command on a Ray node: output streamed back, each stdin event a call."""

    def __init__(self, executor: RayExecutor, cmd: Command, *, pty: bool) -> None:
        super().__init__(pty=pty, initial_stdin=cmd.stdin)
        self._executor = executor
        self._cmd = cmd.with_stdin(None) if cmd.stdin is not None else cmd
        self._id = next(executor._ids)
        self._actor: Any = None
        self._pid: int | None = None

    @property
    def pid(self) -> int | None:
        """The command's pid on its node."""
        return self._pid

    async def _begin(self) -> None:
        actor = self._actor = await self._executor._ensure()
        started = await self._executor._call(
            actor, actor.session_open.remote(self._id, self._cmd, self.pty, self._kept)
        )
        if started[0] != "started":
            raise decode_failure(started)
        self._pid = started[1]

    async def _run(self) -> CommandOutput:
        async def take(chunks: list[Chunk]) -> None:
            for chunk in chunks:
                await self._deliver(chunk)

        outcome = await self._executor._stream(
            self._actor, _streamed(self._actor.session_stream).remote(self._id), take
        )
        if outcome[0] == "done":
            output: CommandOutput = outcome[1]
            return output
        raise decode_failure(outcome)

    async def _op(self, op: str, *args: Any) -> None:
        result = await self._executor._call(
            self._actor, self._actor.session_call.remote(self._id, op, *args)
        )
        if result is not None:
            raise decode_failure(result)

    async def _write_input(self, data: bytes) -> None:
        await self._op("write", data)

    async def _close_input(self) -> None:
        await self._op("close")

    async def _signal(self, signal: int) -> None:
        await self._op("signal", signal)

    async def _resize(self, cols: int, rows: int) -> None:
        await self._op("resize", cols, rows)

    async def _kill_descendants(self, pid: int) -> None:
        await self._op("below", pid)

    async def _terminate(self, grace: float | None = None) -> None:
        if self._actor is not None:
            with contextlib.suppress(ExecutorError):
                await run_to_completion(functools.partial(self._op, "cancel"))

    async def _release(self) -> None:
        if self._actor is not None:
            with contextlib.suppress(ExecutorError):
                await run_to_completion(functools.partial(self._op, "release"))


@attrs.define(eq=False)
class RayPool:
    """Many `RayExecutor`s placed over a cluster through one placement group.

    `size` bundles of `bundle` resources, placed by `strategy` (`"SPREAD"`
    over the nodes by default; `"PACK"`, `"STRICT_SPREAD"`, `"STRICT_PACK"`).
    `executor(index)` gives an executor in bundle `index % size`: one per
    agent, or several agents to a bundle. `aclose()` closes every executor
    made and removes the group. Needs asyncio, as `RayExecutor` does.

    A node lost after the group was placed: its commands fail (see
    `RayExecutor`), Ray places its bundles again on living nodes, and the
    next command of each executor there places a new actor in its bundle,
    now on a living node (waiting up to `placement_timeout` for the cluster
    to see the loss and place the bundle); `placements()` says where.
    """

    size: int
    bundle: Mapping[str, float] = attrs.field(factory=lambda: {"CPU": 0.01}, kw_only=True)
    strategy: str = attrs.field(default="SPREAD", kw_only=True)
    address: str | None = attrs.field(default=None, kw_only=True)
    options: Mapping[str, Any] = attrs.field(factory=dict, kw_only=True)
    _group: Any = attrs.field(init=False, default=None, repr=False)
    _executors: list[RayExecutor] = attrs.field(init=False, factory=list, repr=False)

    async def __aenter__(self) -> Self:
        await self.ready()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def ready(self) -> None:
        """Make the placement group and wait until the cluster has placed its bundles."""
        _check_asyncio("RayPool")
        if self._group is not None:
            return
        await _connected(self.address)
        from ray.util.placement_group import placement_group

        group = placement_group([dict(self.bundle)] * self.size, strategy=self.strategy)
        try:
            await group.ready()
        except Exception as error:
            raise ExecutorError(f"the placement group could not be placed: {error}") from None
        self._group = group

    def executor(self, index: int, **options: Any) -> RayExecutor:
        """An executor in bundle `index % size` (the pool's options, then these)."""
        _check_asyncio("RayPool")
        if self._group is None:
            raise ExecutorError("the pool is not ready: `async with pool` or `await pool.ready()`")
        made = RayExecutor(
            self.address,
            placement_group=self._group,
            bundle_index=index % self.size,
            **{**self.options, **options},
        )
        self._executors.append(made)
        return made

    async def placements(self) -> list[NodeInfo]:
        """Where each executor made so far runs, in the order they were made."""
        _check_asyncio("RayPool")
        return [await executor.node() for executor in self._executors]

    async def aclose(self) -> None:
        """Close every executor of the pool, then remove the placement group."""
        async with anyio.create_task_group() as tasks:
            for executor in self._executors:
                tasks.start_soon(executor.aclose)
        if self._group is not None:
            from ray.util.placement_group import remove_placement_group

            with contextlib.suppress(Exception):
                remove_placement_group(self._group)
            self._group = None
