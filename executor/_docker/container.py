"""A container's state, its labels and owner, its logs' frames, and the removal of leftovers."""

from __future__ import annotations

import os
import socket
from collections.abc import AsyncIterator, Mapping
from typing import Any, Final

import attrs

from executor._core.proc import proc_stat
from executor._docker.api import EngineClient

LABEL_MANAGED: Final = "io.executor.managed"
"""Label on every container a `DockerExecutor` creates."""
LABEL_OWNER: Final = "io.executor.owner"
"""Label naming the process that created the container: `host:pid:start-time`."""
LABEL_KEEP: Final = "io.executor.keep"
"""Label on a container made with `keep=True`: `docker gc` leaves it (unless `--all`)."""

# Prints the container's memory cgroup events (cgroup v2, else v1): `oom_kill N`.
OOM_COUNT = (
    "cat /sys/fs/cgroup/memory.events 2>/dev/null || cat /sys/fs/cgroup/memory/memory.oom_control"
)


def _boot_start_time(pid: int) -> str:
    # A pid alone is reused; its start time (clock ticks since boot) is not.
    stat = proc_stat(pid)
    return "0" if stat is None else str(stat.start)


def owner_label(pid: int | None = None) -> str:
    """The owner label for process `pid` (this one by default): `host:pid:start-time`."""
    pid = os.getpid() if pid is None else pid
    return f"{socket.gethostname()}:{pid}:{_boot_start_time(pid)}"


def owner_alive(label: str) -> bool | None:
    """Whether the process the label names still runs; `None` when it is on another host."""
    host, _, rest = label.partition(":")
    pid_text, _, started = rest.partition(":")
    if host != socket.gethostname() or not pid_text.isdigit():
        return None
    pid = int(pid_text)
    return os.path.exists(f"/proc/{pid}") and _boot_start_time(pid) == started


async def log_frames(pieces: AsyncIterator[bytes]) -> AsyncIterator[tuple[int, bytes]]:
    """The engine's multiplexed frames (8-byte header: stream, 3 zeros, big-endian size)."""
    pending = b""
    async for piece in pieces:
        pending += piece
        while len(pending) >= 8:
            size = int.from_bytes(pending[4:8], "big")
            if len(pending) < 8 + size:
                break
            yield pending[0], pending[8 : 8 + size]
            pending = pending[8 + size :]


def oom_kills(report: str) -> int | None:
    for line in report.splitlines():
        key, _, value = line.partition(" ")
        if key == "oom_kill" and value.strip().isdigit():
            return int(value)
    return None


@attrs.frozen
class ContainerState:
    """A container's state, as the engine reports it."""

    status: str
    """`created`, `running`, `paused`, `restarting`, `removing`, `exited` or `dead`."""
    running: bool
    exit_code: int | None
    """The main process's exit code once it exited; `None` while it runs."""
    oom_killed: bool
    """Whether the kernel's OOM killer ended a process of the container (its memory limit)."""
    oom_kills: int | None = None
    """How many processes the OOM killer ended in a running container, where its cgroup says."""
    error: str | None = None
    pid: int | None = None

    @classmethod
    def from_inspect(cls, state: Mapping[str, Any]) -> ContainerState:
        """The state from the `State` object of the engine's container inspect."""
        running = bool(state.get("Running"))
        return cls(
            status=str(state.get("Status", "")),
            running=running,
            exit_code=None if running else int(state.get("ExitCode", 0)),
            oom_killed=bool(state.get("OOMKilled")),
            error=state.get("Error") or None,
            pid=int(state["Pid"]) if state.get("Pid") else None,
        )


async def collect_garbage(docker_host: str | None = None, *, everything: bool = False) -> list[str]:
    """Remove containers labelled as ours whose owner process is gone.

    Args:
        docker_host: The engine's address; default `DOCKER_HOST`.
        everything: Remove every container labelled as ours, owner alive or not
            (also those made on other hosts, whose owner cannot be checked, and
            those made with `keep=True`, which are otherwise left).

    Returns:
        The ids of the containers removed.

    """
    api = EngineClient(docker_host)
    removed: list[str] = []
    try:
        containers = await api.request_json(
            "GET",
            "/containers/json",
            query={"all": True, "filters": {"label": [LABEL_MANAGED]}},
        )
        for container in containers:
            labels = container.get("Labels") or {}
            owner = str(labels.get(LABEL_OWNER, ""))
            if not everything and (LABEL_KEEP in labels or owner_alive(owner) is not False):
                continue
            await api.request(
                "DELETE",
                f"/containers/{container['Id']}",
                query={"force": True, "v": True},
                ok=(200, 204, 404),
            )
            removed.append(str(container["Id"]))
    finally:
        await api.aclose()
    return removed
