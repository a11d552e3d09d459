"""`DockerExecutor`: the executor contract inside a container, through the Docker Engine API.

Commands run through the Engine API's exec endpoints (or an in-container
helper, `helper.py`), files move through its archive endpoints; no
`docker` CLI is involved, and no shell parses a path or sees a file's content.
See `DockerExecutor` for what it guarantees.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import os
import posixpath
import tempfile
import urllib.parse
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Iterable, Mapping
from typing import Any, Final, Self

import anyio
import attrs

from executor._core.base import (
    CommandRunner,
    LoadedFile,
    call_sink,
    file_failure,
    report_failure,
)
from executor._core.cleanup import run_to_completion
from executor._core.commands import (
    Command,
    ReadFile,
    StrPath,
    WriteFile,
)
from executor._core.errors import CommandError, EngineError, ExecutorError, NonZeroExit, TimedOut
from executor._core.output import Chunk, CommandOutput, Sink, Stderr, Stdout
from executor._core.run import Run
from executor._core.session import ProcessSession
from executor._core.treekill import (
    KILL_SCRIPT,
    SETTLE,
    TreeKiller,
    below_argv,
    kill_arguments,
    tree_pattern,
)
from executor._docker import archive, container
from executor._docker.api import Connection, EngineClient
from executor._docker.build import BuiltImage, DockerBuild, build_image
from executor._docker.channel import Channel
from executor._docker.container import (
    LABEL_KEEP,
    LABEL_MANAGED,
    LABEL_OWNER,
    ContainerState,
    owner_label,
)
from executor._docker.run import ExecRun, HelperRun
from executor._files.rules import normalise_extensions
from executor._files.walk import stream_text_files

# The variable every process of a command inherits: how the kill finds them.
TREE_VARIABLE: Final = "EXECUTOR_DOCKER_TREE"

# Keeps the container alive under its init; a TERM ends it at once.
_KEEPALIVE = "trap 'exit 0' TERM; while :; do sleep 3600 & wait $!; done"
# Runs each shell or argv command. It prints its pid (the process group: the
# engine starts every exec in a session of its own) as the first line of
# stderr, moves to the command's folder, runs the command and prints a marker
# with the exit code: the command's end is known at once, even while a
# background process keeps the output open. Its traps keep it alive through
# the TERM of a kill, so the marker still comes; the command gets the default
# actions back, as POSIX resets caught signals in a subshell and on exec.
#
# How the command ended: a shell's `$?` is 128 + N both for a child killed
# by signal N and for one that exits with 128 + N, and the engine's exec
# inspect says no more (its `ExitCode` is 128 + N for a death by signal; it
# has no signal field). But a shell whose child a signal killed says so on
# its own stderr ("Killed", "Terminated": busybox ash and dash do, for every
# signal but INT and PIPE). So the command runs as the child of a command
# substitution, with the real stdout and stderr (fds 3 and 4 there) and
# nothing of the substitution's pipe; the substitution's stderr is that
# pipe, so those words stay out of the command's stderr, and their presence
# is what tells a death by signal from an exit with the same code. The marker
# then carries the signal: `NONCE CODE SIGNAL`. Where the shell says nothing
# (SIGINT, SIGPIPE, or a /bin/sh such as bash, which does not announce the
# child of a substitution), only the exit code is reported: no signal is
# claimed that the backend did not see.
#
# The container's memory cgroup counts its OOM kills (`oom_kill`: v2
# `memory.events`, else v1 `memory.oom_control`, read with builtins alone);
# a count that rose while the command ran adds ` oom` to the marker.
_WRAPPER: Final = """n=$1 d=$2
shift 2
trap : HUP INT QUIT TERM
o() {
    m=
    for f in /sys/fs/cgroup/memory.events /sys/fs/cgroup/memory/memory.oom_control; do
        [ -r "$f" ] || continue
        while read -r a b; do [ "$a" = oom_kill ] && m=$b; done < "$f"
        return 0
    done
}
printf '%s\\n' "$$" >&2
if ! cd -- "$d" 2>/dev/null; then
    printf 'cannot run in %s: No such file or directory\\n' "$d" >&2
    [ -t 2 ] || printf '\\000%s 1\\n' "$n"
    printf '\\000%s 1\\n' "$n" >&2
    exit 1
fi
o; m0=$m
{ s=$(
    exec 2>&1
    trap : HUP INT QUIT TERM
    (exec 1>&3 2>&4 3>&- 4>&-; exec "$@")
    printf ' %s' "$?"
); } 3>&1 4>&2
c=$?
case $s in *' '[0-9]*) c=${s##* } ;; esac
k=
[ -n "${s% *}" ] && [ "$c" -gt 128 ] && k=" $((c - 128))"
o
[ -n "$m0" ] && [ -n "$m" ] && [ "$m" != "$m0" ] && k="$k oom"
[ -t 2 ] || printf '\\000%s %s%s\\n' "$n" "$c" "$k"
printf '\\000%s %s%s\\n' "$n" "$c" "$k" >&2
exit $c
"""
# Past its grace, how long a kill may take before it is given up.
_KILL_WAIT = 20.0
# The guard of an executor's trees in the container: one exec, for as long as
# the executor lives, that reads its input, where only `aclose()` writes (a
# line `end`). The engine ends that input when the executor's connection to
# it closes, which the kernel does when the executor's process dies however
# it dies (SIGKILL, the OOM killer); the guard then kills every tree of the
# executor (`KILL_SCRIPT`, as `_kill` runs it, with the prefix pattern), and
# looks again three times a second apart: an exec the engine was starting
# as the executor died may start after the first kill. Nothing of it is on
# a command's path: it starts before the first engine exec of a command. The
# helper guards its own commands the same way.
_GUARD: Final = """# the guard of an executor's trees
while read -r line; do [ "$line" = end ] && break; done
exec >/dev/null 2>&1
sh -c "$1" sh "$2" "$3" "$4"
[ "$line" = end ] && exit 0
for i in 1 2 3; do sleep 1; sh -c "$1" sh "$2" 0 0; done
"""


def _absolute_workdir(value: str | None) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.startswith("/"):
        raise ValueError(f"workdir must be an absolute path inside the container, got {value!r}")
    return posixpath.normpath(value)


def _host_path(value: StrPath | None) -> str | None:
    return None if value is None else os.path.abspath(os.fspath(value))


def _non_negative(_: object, attribute: attrs.Attribute[Any], value: float | None) -> None:
    if value is not None and not value >= 0:
        raise ValueError(f"{attribute.name} must be >= 0, got {value!r}")


def _memory(value: int | str | None) -> int | None:
    if value is None or isinstance(value, int):
        if value is not None and value <= 0:
            raise ValueError(f"memory must be a positive number of bytes, got {value!r}")
        return value
    text = value.strip().lower()
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    try:
        if text and text[-1] in units:
            return int(float(text[:-1]) * units[text[-1]])
        return int(text)
    except ValueError:
        raise ValueError(f"memory must be bytes or like '512m' or '2g', got {value!r}") from None


@attrs.define(eq=False)
class DockerExecutor(CommandRunner):
    """Runs commands in a Docker container, through the Engine API (`tool-executor[docker]`).

    Give an `image` to start a new container (or `build`, to build its image
    first), or `container` (a name or id) to use one that runs already. A
    new container runs under an init that reaps orphans (`docker run
    --init`), with network `none` unless told otherwise, the given memory,
    CPU and pids limits, `user`, and `workdir` (created if missing), and
    labels that mark it as ours (`LABEL_MANAGED`, and `LABEL_OWNER` naming
    this process, for `python -m executor docker gc`). It starts at the
    first command or on `async with`, and `aclose()` removes it (unless
    `keep=True`). A used container is never removed; `aclose()` kills what
    our commands left running in it.

    Shell, argv and `#!` commands run as exec processes. Each runs under a
    small `/bin/sh` wrapper (the image needs one) that reports its process
    group and exit code, so a command ends when its process does even while
    a background child holds the output. Every process of a command
    inherits a variable that marks its tree; on timeout, cancellation or a
    failing sink the tree is killed inside the container (SIGTERM to the
    group and every marked process, `kill_grace` seconds of wall time,
    SIGKILL), found again by that mark even when a daemon left the group.
    A command a signal killed reports it as `CommandOutput.signal`: through
    the helper always (it sees the wait status), as an engine exec when the
    image's `/bin/sh` announces the death (busybox ash and dash do, for all
    but SIGINT and SIGPIPE); an exit with 128 + N is never taken for one.
    A command that dies of SIGKILL (exit code 137) while the container's
    memory cgroup counts an OOM kill raises `OutOfMemory` (its output's
    `oom_killed` set): the count is the container's, so a command that
    failed otherwise while another was OOM-killed is not taken for one.

    Nothing of ours outlives this process, however it dies (SIGKILL
    included): the helper, and for engine execs (commands, sessions,
    persistent shells and their jobs) a guard exec started before the first
    of them, read an input the engine ends when this process's connection
    closes, and then kill every tree of this executor in the container. The
    container itself stays, labelled with its dead owner, until `docker gc`.

    When the engine goes away, the commands in flight and the next ones
    raise `ExecutorError` naming it, never the command's own failure. A
    container the engine stopped (a restart of the engine) is started again
    at the next command, with its files, if this executor made it; a
    container given as `container` is not ours to start, and the next
    commands say it is not running until it runs again.

    Files go through the archive endpoints, never a shell: exact bytes,
    parents created, an existing file's mode kept, and the new content
    written beside the target and renamed over it (one `mv` exec, argv only)
    so a reader never sees half a file. `stream_files` reads a tar stream of
    the folder and applies the same ignore, hidden and binary rules as
    `LocalExecutor`, with the ignore files inside the listed folder. A full
    disk fails the write with "No space left on device", the old file
    whole. The engine's archive endpoints see the container's layers and
    its bind mounts, not a tmpfs mounted inside a given container (`docker
    run --tmpfs`): files there are out of their reach.

    The engine is the one `DOCKER_HOST` names (unix socket, `tcp://`, or
    `ssh://` through `docker system dial-stdio`), or `docker_host`.

    Args:
        image: Image for a new container.
        container: Name or id of a running container to use instead.
        build: An image to build first (`DockerBuild`: a Dockerfile and a
            context), for the new container, instead of `image`.
        build_log: Where the build's log goes as it comes, chunk by chunk.
        workdir: Where commands start, inside the container; `None` takes the
            image's `WORKDIR` (or the given container's), `/` without one.
        user: User (name or `uid[:gid]`) commands run as; default the image's.
        network: Network mode for a new container.
        memory: Memory limit of a new container, in bytes or like `"512m"`.
        cpus: CPU limit of a new container, in CPUs (`1.5`).
        pids_limit: Most processes a new container may hold.
        mount: A host folder bound at `workdir` in a new container.
        mount_read_only: Bind `mount` read-only.
        copy_in: A host folder whose contents are copied into `workdir` at start.
        labels: More labels for a new container.
        keep: Leave a new container in place at `aclose()`.
        docker_host: The engine's address; default `DOCKER_HOST`.
        default_timeout: Seconds for commands without a timeout of their own.
        env_clear: Start commands from an empty environment, not the container's.
        env_remove: Variables to drop (after `env_clear`).
        envs: Variables to set (after `env_remove`).
        output_limit: Bytes of output kept in memory per command (head and tail,
            the cut marked in `text()`); file reads are not cut.
        stream_output_limit: Bytes kept when a sink sees the output
            (`exec_cmd_streaming`): at most this (4 MiB by default) and
            `output_limit`; `None` leaves it to `output_limit`. File reads
            keep `output_limit`.
        read_limit: Bytes a `read_file` may return; past it the read fails.
        spill: A folder (or `True`: a temporary one) to keep the whole of a
            cut output in, a file per command (`CommandOutput.elided.spill`).
        login: Run shell scripts in a login shell, `bash --login -c`, so
            `/etc/profile` and the profile files apply; where the image has no
            bash, such a command fails with `ExecutorError`. A command's own
            `Command.shell(..., login=)` wins.
        kill_grace: Seconds between SIGTERM and SIGKILL when a tree is killed.
        drain_timeout: After a command exits, how long to go on reading while a
            background process still holds its output.
        helper: Run shell and argv commands through the in-container helper
            (one long-lived `python` exec that starts them itself, a few ms
            each instead of an engine exec's tens): `True` requires it,
            `False` never uses it, `None` (the default) uses it where the
            image has `python`.
        python: The Python that runs the helper inside the container.

    """

    image: str | None = None
    container: str | None = attrs.field(default=None, kw_only=True)
    build: DockerBuild | None = attrs.field(default=None, kw_only=True)
    build_log: Sink | None = attrs.field(default=None, kw_only=True, eq=False, repr=False)
    workdir: str | None = attrs.field(
        default="/workspace", kw_only=True, converter=_absolute_workdir
    )
    user: str | None = attrs.field(default=None, kw_only=True)
    network: str = attrs.field(default="none", kw_only=True)
    memory: int | None = attrs.field(default=None, kw_only=True, converter=_memory)
    cpus: float | None = attrs.field(default=None, kw_only=True, validator=_non_negative)
    pids_limit: int | None = attrs.field(default=None, kw_only=True, validator=_non_negative)
    mount: str | None = attrs.field(default=None, kw_only=True, converter=_host_path)
    mount_read_only: bool = attrs.field(default=False, kw_only=True)
    copy_in: str | None = attrs.field(default=None, kw_only=True, converter=_host_path)
    labels: Mapping[str, str] = attrs.field(factory=dict, kw_only=True)
    keep: bool = attrs.field(default=False, kw_only=True)
    docker_host: str | None = attrs.field(default=None, kw_only=True)
    helper: bool | None = attrs.field(default=None, kw_only=True)
    python: str = attrs.field(default="python3", kw_only=True)
    _id: str = attrs.field(init=False, factory=lambda: uuid.uuid4().hex[:16], repr=False)
    _killer: TreeKiller = attrs.field(init=False, factory=TreeKiller, repr=False)
    _serial: itertools.count[int] = attrs.field(init=False, factory=itertools.count, repr=False)
    _api: EngineClient | None = attrs.field(init=False, default=None, repr=False)
    _container_id: str | None = attrs.field(init=False, default=None, repr=False)
    _created: bool = attrs.field(init=False, default=False, repr=False)
    _lock: anyio.Lock | None = attrs.field(init=False, default=None, repr=False)
    _base_env: dict[str, str] | None = attrs.field(init=False, default=None, repr=False)
    _owner_ids: tuple[int, int] | None = attrs.field(init=False, default=None, repr=False)
    _channel: Channel | None = attrs.field(init=False, default=None, repr=False)
    _helper_tried: bool = attrs.field(init=False, default=False, repr=False)
    _workdir: str = attrs.field(init=False, default="/", repr=False)
    _built: BuiltImage | None = attrs.field(init=False, default=None, repr=False)
    # The guard's connection (see `_GUARD`), once an engine exec ran a command.
    _guard: Connection | None = attrs.field(init=False, default=None, repr=False)
    # Set when a call failed as the engine or the container may fail: the
    # next one asks the engine about the container first (see `_revive`).
    _recheck: bool = attrs.field(init=False, default=False, repr=False)
    # Set by the first aclose(): later calls wait for it to be done.

    def __attrs_post_init__(self) -> None:
        if sum(given is not None for given in (self.image, self.container, self.build)) != 1:
            raise ValueError(
                "give either image or build (a new container) or container (a running one)"
            )
        if self.workdir is not None:
            self._workdir = self.workdir
        if self.container is not None and (
            self.mount or self.copy_in or self.memory or self.cpus or self.pids_limit
        ):
            raise ValueError("mount, copy_in and limits apply to a new container, not `container`")
        if self.mount is not None and self.copy_in is not None:
            raise ValueError("give mount or copy_in, not both")
        # A malformed engine address is the caller's error: say so at once.
        self._api = EngineClient(self.docker_host)

    def __repr__(self) -> str:
        if self.image is not None:
            return f"DockerExecutor({self.image!r})"
        if self.build is not None:
            return f"DockerExecutor(build={self.build.context!r})"
        return f"DockerExecutor(container={self.container!r})"

    @property
    def container_id(self) -> str | None:
        """The container's id, once it runs."""
        return self._container_id

    @property
    def built_image(self) -> BuiltImage | None:
        """The image `build` made (or found made), once the container runs."""
        return self._built

    @property
    def effective_workdir(self) -> str:
        """Where commands start: `workdir`, or for `None` the image's `WORKDIR` (else `/`)."""
        return self._workdir

    # --- lifecycle -----------------------------------------------------------

    async def __aenter__(self) -> Self:
        await self._ensure()
        return self

    async def _ensure(self) -> tuple[EngineClient, str]:
        if self._closed:
            raise ExecutorError("the executor is closed")
        api = self._api
        assert api is not None
        if self._container_id is not None and not self._recheck:
            return api, self._container_id
        if self._lock is None:
            self._lock = anyio.Lock()
        async with self._lock:
            if self._closed:
                raise ExecutorError("the executor is closed")
            if self._container_id is None:
                self._container_id = await self._open_container(api)
            elif self._recheck:
                await self._revive(api, self._container_id)
                self._recheck = False
        return api, self._container_id

    def _suspect(self) -> None:
        """A call failed as a lost engine or container fails: look at the container first."""
        if not self._closed:
            self._recheck = True

    async def _revive(self, api: EngineClient, container_id: str) -> None:
        """Find the container running again after a failure, or start it again if it is ours.

        An engine that stops (a restart of the host's Docker, say) stops every
        container, and leaves them stopped when it comes back. A container
        this executor made is its own: it is started again, with its files
        (its writable layer outlives the stop); its processes died with it,
        and the commands then in flight said so. The helper and the guard
        start again with the next commands. A container given by name is not
        ours to start: the call fails, saying it is not running. A container
        that is gone fails likewise.

        Raises:
            EngineError: The engine still cannot be reached.
            ExecutorError: The container is gone, or not ours and not running.

        """
        short = container_id[:12]
        where = f"on the Docker engine at {api.address}"
        try:
            info = await api.request_json("GET", f"/containers/{container_id}/json")
        except EngineError as error:
            if error.status != 404:
                raise
            raise ExecutorError(
                f"the container {short} {where} is gone (removed): "
                f"{self!r} cannot run commands any more"
            ) from error
        state = (info or {}).get("State") or {}
        if state.get("Running") and not state.get("Restarting"):
            return
        if not self._created:
            raise ExecutorError(
                f"the container {short} {where} is not running"
                f" (it stopped with exit code {state.get('ExitCode')}): start it again"
            )
        # What ran in it is gone, the helper and the guard too: their
        # connections are closed here, and replaced at the next command.
        guard, self._guard = self._guard, None
        if self._channel is not None:
            await self._channel.aclose()
        if guard is not None:
            await guard.aclose()
        await api.request("POST", f"/containers/{container_id}/start", ok=(204, 304))

    async def _run(self, cmd: Command, sink: Sink | None) -> CommandOutput:
        try:
            return await super()._run(cmd, sink)
        except ExecutorError:
            self._suspect()
            raise

    async def _open_container(self, api: EngineClient) -> str:
        if self.container is not None:
            info = await api.request_json("GET", f"/containers/{_quote(self.container)}/json")
            if not info["State"]["Running"]:
                raise ExecutorError(f"container {self.container} is not running")
            container_id = str(info["Id"])
            if self.workdir is None:
                self._workdir = info["Config"].get("WorkingDir") or "/"
            elif self.workdir != info["Config"].get("WorkingDir"):
                # A workdir of our own in a shared container: made if missing.
                await self._plain_exec(
                    api, container_id, ["mkdir", "-p", "--", self.workdir], user=self.user
                )
            return container_id
        image = self.image
        if self.build is not None:
            self._built = await build_image(
                self.build, docker_host=self.docker_host, sink=self.build_log
            )
            image = self._built.id
        if self.workdir is None:
            found = await api.request_json("GET", f"/images/{_quote(str(image))}/json")
            # The engine makes a missing WORKDIR when the container starts.
            self._workdir = (found.get("Config") or {}).get("WorkingDir") or "/"
        host_config: dict[str, Any] = {"Init": True, "NetworkMode": self.network}
        if self.memory is not None:
            host_config["Memory"] = self.memory
        if self.cpus is not None:
            host_config["NanoCpus"] = int(self.cpus * 1e9)
        if self.pids_limit is not None:
            host_config["PidsLimit"] = self.pids_limit
        if self.mount is not None:
            suffix = ":ro" if self.mount_read_only else ""
            host_config["Binds"] = [f"{self.mount}:{self._workdir}{suffix}"]
        config: dict[str, Any] = {
            "Image": image,
            "Entrypoint": ["/bin/sh", "-c", _KEEPALIVE],
            "Cmd": [],
            "WorkingDir": self._workdir,
            "Labels": {
                **self.labels,
                LABEL_MANAGED: "1",
                LABEL_OWNER: owner_label(),
                **({LABEL_KEEP: "1"} if self.keep else {}),
            },
            "HostConfig": host_config,
            "NetworkDisabled": self.network == "none",
        }
        if self.user is not None:
            config["User"] = self.user
        created = await api.request_json("POST", "/containers/create", json_body=config)
        container_id = str(created["Id"])
        self._created = True
        self._container_id = container_id
        try:
            await api.request("POST", f"/containers/{container_id}/start")
            if self.user is not None and self.mount is None:
                # The engine makes a missing workdir as root: hand it to the user.
                await self._plain_exec(api, container_id, ["chown", self.user, self._workdir])
            if self.copy_in is not None:
                tarball = await anyio.to_thread.run_sync(archive.tar_folder, self.copy_in)
                await api.request(
                    "PUT",
                    f"/containers/{container_id}/archive",
                    query={"path": self._workdir, "copyUIDGID": self.user is not None},
                    body=tarball,
                    content_type="application/x-tar",
                )
        except BaseException:
            self._container_id = None
            await run_to_completion(lambda: self._remove(api, container_id))
            raise
        return container_id

    async def _remove(self, api: EngineClient, container_id: str) -> None:
        with contextlib.suppress(EngineError):
            await api.request(
                "DELETE",
                f"/containers/{container_id}",
                query={"force": True, "v": True},
                ok=(200, 204, 404),
            )

    async def _shut_down(self) -> None:
        api, container_id = self._api, self._container_id
        if api is None:
            return
        guard, self._guard = self._guard, None
        try:
            if self._channel is not None:
                # The helper kills every tree it started when its input ends.
                await self._channel.aclose()
            if container_id is not None:
                if self._created and not self.keep:
                    await self._remove(api, container_id)
                else:
                    if guard is not None:
                        # Its input ends: it kills our trees and ends itself.
                        await self._end_guard(guard)
                    with contextlib.suppress(CommandError, OSError):
                        await self._kill(api, container_id, self._id, prefix=True)
        finally:
            if guard is not None:
                await guard.aclose()
            await api.aclose()

    async def _guarded(self, api: EngineClient, container_id: str) -> None:
        """Start the guard of this executor's trees (`_GUARD`), unless it runs already.

        Started again when its connection shows it ended (a command that
        killed it, say): one look at the socket, no round trip.
        """
        guard = self._guard
        if guard is not None and not guard.heard_from():
            return
        assert self._lock is not None
        async with self._lock:
            guard = self._guard
            if guard is not None and not guard.heard_from():
                return
            self._guard = None
            if guard is not None:
                await guard.aclose()
            pattern = tree_pattern(self._id, prefix=True, variable=TREE_VARIABLE)
            config = {
                "AttachStdin": True,
                "AttachStdout": True,
                "AttachStderr": True,
                "User": "0",
                "Cmd": [
                    "/bin/sh",
                    "-c",
                    _GUARD,
                    "sh",
                    KILL_SCRIPT,
                    *kill_arguments(pattern, self.kill_grace, SETTLE),
                ],
            }
            exec_id = await api.create_exec(container_id, config)
            self._guard = await api.attach_exec(exec_id, tty=False)

    async def _end_guard(self, guard: Connection) -> None:
        """Tell the guard to kill our trees once and end, and wait, for a while, until it did."""
        with contextlib.suppress(OSError), anyio.move_on_after(self.kill_grace + _KILL_WAIT):
            await guard.send(b"end\n")
            while await guard.receive_frame() is not None:
                pass

    # --- the container ---------------------------------------------------------

    def _named(self) -> str:
        """The container to ask the engine about: ours once made, else the one given."""
        if self._container_id is not None:
            return self._container_id
        if self.container is not None:
            return self.container
        raise ExecutorError("the container is not made yet: run a command or `async with` first")

    async def state(self) -> ContainerState:
        """The container's state: running, or exited with its code, and whether OOM killed in it.

        Raises:
            ExecutorError: The container is not made yet, or the engine failed.

        """
        api = self._api
        assert api is not None
        name = self._named()
        info = await api.request_json("GET", f"/containers/{_quote(name)}/json")
        state = ContainerState.from_inspect(info["State"])
        if state.running:
            # The engine marks an OOM kill only when the container ends; while it
            # runs, the container's memory cgroup counts them (v2 or v1 names).
            with contextlib.suppress(ExecutorError, EngineError):
                report = await self._plain_exec(api, name, ["/bin/sh", "-c", container.OOM_COUNT])
                kills = container.oom_kills(report.decode("utf-8", "replace"))
                state = attrs.evolve(state, oom_kills=kills, oom_killed=bool(kills))
        return state

    async def logs(
        self, *, follow: bool = False, tail: int | None = None, since: float | None = None
    ) -> AsyncIterator[Chunk]:
        """The output of the container's main process, as `Stdout` and `Stderr` chunks.

        For a container given as `container`: what it printed (a container
        this executor made runs only a keep-alive, which prints nothing; its
        commands' output goes to their own callers). `follow=True` goes on
        until the container stops, or the caller stops iterating; `tail`
        gives only the last lines, `since` only what came after that Unix
        time.
        """
        api = self._api
        assert api is not None
        name = _quote(self._named())
        info = await api.request_json("GET", f"/containers/{name}/json")
        tty = bool(info["Config"].get("Tty"))
        query: dict[str, Any] = {"stdout": True, "stderr": True, "follow": follow}
        if tail is not None:
            query["tail"] = str(tail)
        if since is not None:
            query["since"] = str(since)
        async with api.stream("GET", f"/containers/{name}/logs", query=query) as response:
            if tty:
                async for data in response.iter_bytes():
                    yield Stdout(data)
                return
            async for kind, data in container.log_frames(response.iter_bytes()):
                yield Stderr(data) if kind == 2 else Stdout(data)

    # --- commands ------------------------------------------------------------

    def resolve(self, cmd: Command, path: StrPath | None = None) -> str:
        """The absolute folder `cmd` runs in inside the container, or `path` resolved against it."""
        directory = self._workdir
        if cmd.current_dir is not None:
            directory = posixpath.join(directory, cmd.current_dir)
        if path is not None:
            directory = posixpath.join(directory, os.fspath(path))
        return posixpath.normpath(directory)

    async def _env_request(
        self, api: EngineClient, container_id: str, cmd: Command, mark: str
    ) -> tuple[dict[str, str], bool]:
        """The command's variables, and whether they replace the container's environment."""
        if not (self.env_clear or self.env_remove or cmd.env_remove):
            # Only additions: they win over the container's variables.
            return {**self.envs, **cmd.env, TREE_VARIABLE: mark}, False
        # Removals need the whole environment: taken once from the container.
        base = {} if self.env_clear else dict(await self._container_env(api, container_id))
        for name in self.env_remove:
            base.pop(name, None)
        base.update(self.envs)
        env = cmd.environment_over(base)
        env[TREE_VARIABLE] = mark
        return env, True

    async def _environment(
        self, api: EngineClient, container_id: str, cmd: Command, argv: tuple[str, ...], mark: str
    ) -> tuple[list[str], tuple[str, ...]]:
        """The exec's `Env` and the argv that applies the command's environment."""
        env, replace = await self._env_request(api, container_id, cmd, mark)
        if not replace:
            return [f"{k}={v}" for k, v in env.items()], argv
        # `env -i` applies the whole environment, the variables passed as argv.
        assignments = [f"{k}={v}" for k, v in env.items()]
        return [f"{TREE_VARIABLE}={mark}"], ("env", "-i", "--", *assignments, *argv)

    async def _container_env(self, api: EngineClient, container_id: str) -> dict[str, str]:
        if self._base_env is None:
            data = await self._plain_exec(
                api, container_id, ["cat", "/proc/self/environ"], user=self.user
            )
            pairs = (item.partition("=") for item in data.decode().split("\0") if item)
            self._base_env = {name: value for name, _, value in pairs}
        return self._base_env

    async def _prepare(
        self, cmd: Command, argv: tuple[str, ...], *, stdin: bool, tty: bool
    ) -> tuple[EngineClient, str, _Prepared]:
        """The exec for `argv` under the wrapper: its config, tree mark and marker nonce."""
        api, container_id = await self._ensure()
        mark = f"{self._id}/{next(self._serial)}."
        env, argv = await self._environment(api, container_id, cmd, argv, mark)
        nonce = uuid.uuid4().hex
        config: dict[str, Any] = {
            "AttachStdin": stdin,
            "AttachStdout": True,
            "AttachStderr": True,
            "Tty": tty,
            "Env": env,
            "Cmd": ["/bin/sh", "-c", _WRAPPER, "sh", nonce, self.resolve(cmd), *argv],
        }
        if self.user is not None:
            config["User"] = self.user
        return api, container_id, _Prepared(config, mark, nonce.encode())

    async def _start_exec(
        self, api: EngineClient, container_id: str, prepared: _Prepared, *, tty: bool
    ) -> ExecRun:
        """Create and attach the prepared exec: the run that streams it to its end."""
        await self._guarded(api, container_id)
        exec_id = await api.create_exec(container_id, prepared.config)
        conn = await api.attach_exec(exec_id, tty=tty)

        async def kill_tree(grace: float) -> None:
            with contextlib.suppress(CommandError, OSError):
                await self._kill(api, container_id, prepared.tag, grace=grace)

        async def signal_group(group: int, number: int) -> None:
            with contextlib.suppress(CommandError):
                await self._plain_exec(api, container_id, ["kill", f"-{number}", f"-{group}"])

        async def kill_below(pid: int) -> None:
            pattern = tree_pattern(prepared.tag, variable=TREE_VARIABLE)
            with contextlib.suppress(CommandError, OSError), anyio.move_on_after(_KILL_WAIT):
                await self._plain_exec(api, container_id, below_argv(pattern, pid))

        return ExecRun(
            prepared.nonce,
            api,
            exec_id,
            conn,
            kill_tree=kill_tree,
            signal_group=signal_group,
            kill_below=kill_below,
            tty=tty,
            container_id=container_id,
            on_gone=self._suspect,
        )

    async def _helper_channel(self) -> Channel | None:
        """The helper, started at the first command; `None` where it is not used."""
        if self.helper is False:
            return None
        if self._channel is not None and not self._channel.closed:
            return self._channel
        # Where the image has no helper, once asked is enough; one that ran
        # and ended (with its container, say) is started again.
        if self._helper_tried and self.helper is None and self._channel is None:
            return None
        api, container_id = await self._ensure()
        assert self._lock is not None
        async with self._lock:
            if self._channel is not None and not self._channel.closed:
                return self._channel
            self._helper_tried = True
            try:
                self._channel = await Channel.open(
                    api, container_id, user=self.user, python=self.python
                )
            except ExecutorError:
                self._channel = None
                if self.helper:
                    raise
                return None
        return self._channel

    def _memory_limit(self) -> int | None:
        return self.memory

    async def _process(
        self, cmd: Command, argv: tuple[str, ...], stdin: bytes | None, sink: Sink | None
    ) -> CommandOutput:
        channel = await self._helper_channel()
        if channel is not None:
            return await self._process_helper(channel, cmd, argv, stdin, sink)
        return await self._process_exec(cmd, argv, stdin, sink)

    async def _process_helper(
        self,
        channel: Channel,
        cmd: Command,
        argv: tuple[str, ...],
        stdin: bytes | None,
        sink: Sink | None,
    ) -> CommandOutput:
        started = anyio.current_time()
        api, container_id = await self._ensure()
        mark = f"{self._id}/{next(self._serial)}."
        env, replace = await self._env_request(api, container_id, cmd, mark)
        run = HelperRun(channel, channel.new_id())
        request = {
            "argv": list(argv),
            "cwd": self.resolve(cmd),
            "env": env,
            "replace": replace,
            "stdin": stdin is not None,
            "mark": f"{TREE_VARIABLE}={mark}",
        }
        try:
            await run.start(request)
            if run.failure is None:
                output = await self._drive(run, cmd, stdin, sink)
        finally:
            await run_to_completion(run.release)
        if run.failure is not None:
            code, message = run.failure
            output = CommandOutput(
                chunks=(Stderr(f"{message}\n".encode()),),
                exit_code=code,
                duration=anyio.current_time() - started,
            )
            failure = NonZeroExit(message, output)
            await report_failure(sink, failure)
            raise failure
        return self._checked(output)

    async def _process_exec(
        self, cmd: Command, argv: tuple[str, ...], stdin: bytes | None, sink: Sink | None
    ) -> CommandOutput:
        api, container_id, prepared = await self._prepare(
            cmd, argv, stdin=stdin is not None, tty=False
        )
        run = await self._start_exec(api, container_id, prepared, tty=False)
        try:
            output = await self._drive(run, cmd, stdin, sink)
        finally:
            await run_to_completion(run.release)
        return self._checked(output)

    async def start(self, cmd: Command, *, pty: bool = False) -> ProcessSession:
        """Return a session for a shell or argv command: `async with await ex.start(cmd)`.

        The exec starts when the session is entered, in the folder and
        environment `exec_cmd` would use, with the command's timeout (or
        `default_timeout`), attached through one upgraded connection: stdin
        goes up it, output comes down it. With `pty=True` the exec gets a
        terminal (`Tty`), and `Resize` resizes it through the engine.
        `Signal` goes to the command's process group inside the container;
        `cancel()` and leaving the block kill its whole tree there.

        Raises:
            ExecutorError: The executor is closed, the command is a file
                operation, or a `#!` script (its body is the interpreter's stdin).

        """
        argv = self._session_argv(cmd)

        async def start() -> Run:
            try:
                api, container_id, prepared = await self._prepare(cmd, argv, stdin=True, tty=pty)
                return await self._start_exec(api, container_id, prepared, tty=pty)
            except ExecutorError:
                self._suspect()
                raise

        return self._run_session(start, cmd, pty=pty)

    async def _plain_exec(
        self,
        api: EngineClient,
        container_id: str,
        argv: list[str],
        *,
        user: str | None = "0",
    ) -> bytes:
        """Run `argv` (no wrapper) and return its stdout; raise with its stderr on failure."""
        config: dict[str, Any] = {"AttachStdout": True, "AttachStderr": True, "Cmd": argv}
        if user is not None:
            config["User"] = user
        exec_id = await api.create_exec(container_id, config)
        conn = await api.attach_exec(exec_id, tty=False)
        out, err = bytearray(), bytearray()
        try:
            async for kind, data in _frames(conn):
                (err if kind == 2 else out).extend(data)
        finally:
            await conn.aclose()
        info = await api.request_json("GET", f"/exec/{exec_id}/json")
        code = int(info.get("ExitCode") or 0)
        if code:
            message = err.decode("utf-8", "replace").strip() or f"exit code {code}"
            raise ExecutorError(f"{argv[0]} in the container failed: {message}")
        return bytes(out)

    async def _kill(
        self,
        api: EngineClient,
        container_id: str,
        tag: str,
        *,
        prefix: bool = False,
        grace: float | None = None,
    ) -> None:
        """Kill the tree tagged `tag` (every tree below `tag/` with `prefix`) in the container.

        SIGTERM, and SIGKILL `grace` seconds (the executor's `kill_grace` by
        default) from now, wall time (see `TreeKiller`), as root. Call it
        through `run_to_completion`.
        """
        grace = self.kill_grace if grace is None else grace
        begun = anyio.current_time()
        pattern = tree_pattern(tag, prefix=prefix, variable=TREE_VARIABLE)
        argv = self._killer.argv(pattern, deadline=begun + grace)
        config = {"AttachStdout": True, "AttachStderr": True, "User": "0", "Cmd": argv}
        with anyio.move_on_after(grace + _KILL_WAIT):
            exec_id = await api.create_exec(container_id, config)
            conn = await api.attach_exec(exec_id, tty=False)
            said = bytearray()
            try:
                while (frame := await conn.receive_frame()) is not None:
                    if frame[0] == 1:
                        said += frame[1]
            finally:
                await conn.aclose()
            self._killer.ran(begun, bytes(said))

    # --- files ---------------------------------------------------------------

    async def _read_file(self, cmd: ReadFile, sink: Sink | None) -> CommandOutput:
        started = anyio.current_time()
        try:
            return await self._read_file_at(cmd, sink, started)
        except EngineError as error:
            if not error.status:
                raise
            raise await file_failure(cmd.path, archive.reason(error), started, sink) from error
        except OSError as error:
            # The read limit, passed (see `FileBuffer`).
            raise await file_failure(cmd.path, error, started, sink) from error

    async def _read_file_at(
        self, cmd: ReadFile, sink: Sink | None, started: float
    ) -> CommandOutput:
        api, container_id = await self._ensure()
        timeout = self._timeout(cmd)
        buffer = self.file_buffer(cmd.path, sink)
        path = self.resolve(cmd, cmd.path)
        with anyio.move_on_after(math.inf if timeout is None else timeout) as deadline:
            for _ in range(archive.SYMLINK_HOPS):
                info = await archive.stat(api, container_id, path)
                if info is None:
                    raise await file_failure(cmd.path, "No such file or directory", started, sink)
                mode = int(info.get("mode", 0))
                if mode & archive.MODE_SYMLINK:
                    target = str(info.get("linkTarget") or "")
                    path = posixpath.normpath(posixpath.join(posixpath.dirname(path), target))
                    continue
                if mode & archive.MODE_DIR:
                    raise await file_failure(cmd.path, "Is a directory", started, sink)
                if mode & archive.MODE_TYPE:
                    raise await file_failure(cmd.path, "not a regular file", started, sink)
                break
            else:
                raise await file_failure(
                    cmd.path, "Too many levels of symbolic links", started, sink
                )
            buffer.check_size(int(info.get("size", 0)))
            async with api.stream(
                "GET", f"/containers/{container_id}/archive", query={"path": path}
            ) as response:
                async for data in archive.tar_member(response.iter_bytes()):
                    chunk = Stdout(data)
                    buffer.append(chunk)
                    if sink is not None:
                        await call_sink(sink, chunk)
        output = buffer.output(duration=anyio.current_time() - started)
        if deadline.cancelled_caught:
            assert timeout is not None
            raise TimedOut(timeout, output)
        return output

    async def _write_file(self, cmd: WriteFile, sink: Sink | None) -> CommandOutput:
        # Writes are not abandoned on timeout or cancellation: a write reported
        # as failed must not land later, and no temporary file may stay behind
        # (an upload cut midway leaves what the engine had unpacked of it). The
        # write runs to its end whatever cancels the caller (asyncio's native
        # cancel too), bounded by the content size; then the cancellation goes on.
        started = anyio.current_time()
        done: list[CommandOutput] = []

        async def write() -> None:
            try:
                done.append(await self._write_file_at(cmd, sink, started))
            except EngineError as error:
                if not error.status:
                    raise
                raise await file_failure(cmd.path, archive.reason(error), started, sink) from error

        await run_to_completion(write)
        return done[0]

    async def _write_file_at(
        self, cmd: WriteFile, sink: Sink | None, started: float
    ) -> CommandOutput:
        api, container_id = await self._ensure()
        path = self.resolve(cmd, cmd.path)
        directory, name = posixpath.split(path)
        if not name or name in (".", "..") or cmd.path.endswith("/"):
            raise await file_failure(cmd.path, "Is a directory", started, sink)
        existing = await archive.stat(api, container_id, path)
        mode = 0o644
        if existing is not None:
            kind = int(existing.get("mode", 0))
            if kind & archive.MODE_DIR:
                raise await file_failure(cmd.path, "Is a directory", started, sink)
            if not kind & archive.MODE_TYPE:
                mode = kind & 0o7777
        uid, gid = await self._owner(api, container_id)
        # The deepest folder that exists receives the archive; the missing
        # folders below it come in the archive, so the engine creates them.
        base = directory
        missing: list[str] = []
        while True:
            info = await archive.stat(api, container_id, base)
            if info is not None:
                if not int(info.get("mode", 0)) & archive.MODE_DIR:
                    raise await file_failure(cmd.path, "Not a directory", started, sink)
                break
            base, part = posixpath.split(base)
            missing.insert(0, part)
        temporary = f".{name[:32]}.{uuid.uuid4().hex[:12]}.tmp"
        staged = posixpath.join(directory, temporary)
        tarball = archive.tar_file(missing, temporary, cmd.content, mode)
        try:
            await api.request(
                "PUT",
                f"/containers/{container_id}/archive",
                query={"path": base},
                body=tarball,
                content_type="application/x-tar",
            )
        except EngineError as error:
            # The engine may have unpacked part of it (a full disk, say).
            with contextlib.suppress(ExecutorError):
                await self._plain_exec(api, container_id, ["rm", "-f", "--", staged])
            raise await file_failure(cmd.path, archive.reason(error), started, sink) from error
        # The engine unpacks as root; the new folders and the file go to the
        # user, then the rename makes the new content appear all at once.
        created = [posixpath.join(base, *missing[: i + 1]) for i in range(len(missing))]
        owner = f"{uid}:{gid}" if (uid, gid) != (0, 0) else ""
        argv = ["/bin/sh", "-c", archive.RENAME, "sh", owner, staged, path, *created]
        try:
            await self._plain_exec(api, container_id, argv)
        except ExecutorError as error:
            with contextlib.suppress(ExecutorError):
                await self._plain_exec(api, container_id, ["rm", "-f", "--", staged])
            raise await file_failure(cmd.path, error.message, started, sink) from error
        return CommandOutput(duration=anyio.current_time() - started)

    async def _owner(self, api: EngineClient, container_id: str) -> tuple[int, int]:
        """The uid and gid files are written as: the command user's (root by default)."""
        if self._owner_ids is None:
            if self.user is None:
                self._owner_ids = (0, 0)
            else:
                uid = await self._plain_exec(api, container_id, ["id", "-u"], user=self.user)
                gid = await self._plain_exec(api, container_id, ["id", "-g"], user=self.user)
                self._owner_ids = (int(uid), int(gid))
        return self._owner_ids

    async def stream_files(
        self, path: StrPath, extensions: Iterable[str] | None = None
    ) -> AsyncIterator[LoadedFile]:
        """Yield the text files below `path` (relative to `workdir`); see `ToolExecutor`.

        The folder comes out of the container as one tar stream, unpacked
        (folders and regular files only) into a private temporary folder,
        where the local walker applies its rules. Ignore files above the
        listed folder are not consulted.
        """
        api, container_id = await self._ensure()
        raw = os.fspath(path)
        display = posixpath.normpath(raw)
        if display == ".":
            display = ""
        wanted = normalise_extensions(extensions)
        source = self.resolve(Command.shell(":"), raw)
        info = await archive.stat(api, container_id, source)
        if info is None:
            raise FileNotFoundError(f"no such folder: {raw}")
        mode = int(info.get("mode", 0))
        if mode & archive.MODE_SYMLINK:
            return
        with tempfile.TemporaryDirectory(prefix="executor-docker-") as scratch:
            async with api.stream(
                "GET", f"/containers/{container_id}/archive", query={"path": source}
            ) as response:
                await archive.unpack(response.iter_bytes(), scratch)
            name = posixpath.basename(source) or "root"
            unpacked = os.path.join(scratch, name)
            if not mode & archive.MODE_DIR:
                if mode & archive.MODE_TYPE or not os.path.isfile(unpacked):  # noqa: ASYNC240 (scratch)
                    return
                # Closed at once when the caller stops early, not when collected.
                single = stream_text_files(unpacked, display, extensions=wanted)
                async with contextlib.aclosing(single) as files:
                    async for loaded in files:
                        yield loaded
                return
            fd = os.open(unpacked, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            try:
                # Closed before the descriptor it walks, even when the caller stops early.
                walked = stream_text_files(fd, display, extensions=wanted)
                async with contextlib.aclosing(walked) as files:
                    async for loaded in files:
                        yield loaded
            finally:
                os.close(fd)


def _quote(name: str) -> str:
    return urllib.parse.quote(name, safe="")


@attrs.frozen
class _Prepared:
    config: dict[str, Any]
    # The command's tree tag (`EXECUTOR_PROCESS_TREE`'s value).
    tag: str
    nonce: bytes


async def _frames(conn: Connection) -> AsyncGenerator[tuple[int, bytes], None]:
    """The (stream, data) frames of a multiplexed exec stream, until it ends."""
    while True:
        header = await conn.receive_exactly(8)
        if len(header) < 8:
            return
        size = int.from_bytes(header[4:8], "big")
        data = await conn.receive_exactly(size)
        if data:
            yield header[0], data
        if len(data) < size:
            return
