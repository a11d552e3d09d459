"""Cgroups for an unsandboxed executor's commands: where this process may make them, and how.

A `LocalExecutor` without a sandbox starts its commands through a supervisor
(`executor._local.supervisor`). Where this process may make cgroups, the
executor gets a folder of its own and each command a cgroup in it:

- cgroup v2 (the unified hierarchy), where this process's cgroup is
  writable (root, or delegated: `systemd-run --user --scope -p Delegate=yes`).
  The command's tree is then read from `cgroup.procs`, not looked for in
  `/proc`, and ended at once with `cgroup.kill` (Linux 5.14+). `memory=` and
  `pids=` are enforced with `memory.max` and `pids.max`, and the memory peak
  read from `memory.peak`, where those controllers can be enabled for our
  cgroups (they are in the parent's `cgroup.subtree_control`, or this
  process sits in the root cgroup and is root).
- cgroup v1 `memory` and `pids` hierarchies, on a hybrid host where the
  controllers are bound there rather than to v2 (Docker's default on older
  hosts), where this process's cgroups in them are writable (root):
  `memory.limit_in_bytes`, `pids.max` and `memory.max_usage_in_bytes`.

Nothing here is needed for the supervisor to contain a tree: without cgroups
it finds the tree from the children lists of the tasks below the command's
subreaper (`/proc/PID/task/TID/children`).
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import signal
import time
import uuid
from collections.abc import Mapping
from typing import Any, Final

import attrs

from executor._core.proc import proc_stat
from executor._local import linux

__all__ = [
    "CgroupSupport",
    "end_and_remove_cgroups",
    "executor_cgroups",
    "probe",
    "remove_cgroups",
    "sweep",
]

_LIMITED: Final = ("memory", "pids")


@attrs.frozen(kw_only=True)
class CgroupSupport:
    """Where this process may make cgroups for its commands, as `probe()` found it.

    Attributes:
        v2: This process's cgroup v2 folder, when it may make cgroups there.
        v2_controllers: The controllers (of `memory`, `pids`) it may enable
            for them there.
        v2_kill: Whether those cgroups have `cgroup.kill` (Linux 5.14+).
        v1: For a controller bound to a cgroup v1 hierarchy (`memory`,
            `pids`), this process's folder there, when it may make cgroups in it.

    """

    v2: str | None
    v2_controllers: frozenset[str]
    v2_kill: bool
    v1: Mapping[str, str]

    @property
    def limits(self) -> frozenset[str]:
        """The limits (`memory`, `pids`) a command's cgroup can enforce here."""
        return self.v2_controllers | frozenset(self.v1)

    @property
    def available(self) -> bool:
        """Whether commands get a cgroup at all."""
        return self.v2 is not None or bool(self.v1)

    def describe(self) -> str:
        """One line for `Sandbox.probe()`'s report: what an unsandboxed command's cgroup gives."""
        if not self.available:
            return "none (the tree is found from /proc below the supervisor)"
        parts = []
        if self.v2 is not None:
            parts.append(
                f"v2 in {self.v2}"
                + (", cgroup.kill" if self.v2_kill else "")
                + (f", {'+'.join(sorted(self.v2_controllers))}" if self.v2_controllers else "")
            )
        parts.extend(f"v1 {name} in {folder}" for name, folder in sorted(self.v1.items()))
        limits = ", ".join(f"{name}=" for name in sorted(self.limits)) or "no limits"
        return "; ".join(parts) + f" (enforces {limits})"


def _mounts() -> tuple[tuple[str, str] | None, dict[str, tuple[str, str]]]:
    """The cgroup v2 mount (point, root), and each v1 controller's (point, root)."""
    v2 = None
    v1: dict[str, tuple[str, str]] = {}
    for line in (linux.read_text("/proc/self/mountinfo") or "").splitlines():
        left, _, right = line.partition(" - ")
        fields, kind = left.split(), right.split()
        if len(fields) < 5 or not kind:
            continue
        if kind[0] == "cgroup2" and v2 is None:
            v2 = (fields[4], fields[3])
        elif kind[0] == "cgroup" and len(kind) >= 3:
            for option in kind[2].split(","):
                if option in _LIMITED:
                    v1[option] = (fields[4], fields[3])
    return v2, v1


def _folder(mount: tuple[str, str], path: str) -> str | None:
    point, root = mount
    if root != "/" and not (path == root or path.startswith(root + "/")):
        return None
    inside = path[len(root) :] if root != "/" else path
    folder = os.path.join(point, inside.lstrip("/"))
    return folder if os.path.isdir(folder) else None


def _writable(folder: str) -> bool:
    return os.access(folder, os.W_OK) and os.access(os.path.join(folder, "cgroup.procs"), os.W_OK)


@functools.cache
def probe() -> CgroupSupport:
    """Find where this process may make cgroups (once per process)."""
    v2_mount, v1_mounts = _mounts()
    own: dict[str, str] = {}
    for line in (linux.read_text("/proc/self/cgroup") or "").splitlines():
        number, names, path = ([*line.split(":", 2), "", ""])[:3]
        if number == "0" and names == "":
            own["v2"] = path
        for name in names.split(","):
            if name in _LIMITED:
                own[name] = path
    v2 = None
    controllers: frozenset[str] = frozenset()
    kill = False
    if v2_mount is not None and "v2" in own:
        folder = _folder(v2_mount, own["v2"])
        if folder is not None and _writable(folder):
            v2 = folder
            kill = os.path.exists(os.path.join(folder, "cgroup.kill")) or _children_have_kill(
                folder
            )
            enabled = set(
                (linux.read_text(os.path.join(folder, "cgroup.subtree_control")) or "").split()
            )
            offered = set(
                (linux.read_text(os.path.join(folder, "cgroup.controllers")) or "").split()
            )
            # Only the root cgroup may hold processes and hand controllers down.
            if own["v2"] == "/" and os.geteuid() == 0:
                enabled |= offered
            controllers = frozenset(enabled & set(_LIMITED))
    v1 = {}
    for name, mount in v1_mounts.items():
        if name in own and name not in controllers:
            folder = _folder(mount, own[name])
            if folder is not None and _writable(folder):
                v1[name] = folder
    return CgroupSupport(v2=v2, v2_controllers=controllers, v2_kill=kill, v1=v1)


def _children_have_kill(folder: str) -> bool:
    # The root cgroup has no cgroup.kill of its own; its children do (Linux 5.14+).
    try:
        with os.scandir(folder) as entries:
            folders = [entry.path for entry in entries if entry.is_dir()]
    except OSError:
        return False
    if any(os.path.exists(os.path.join(folder, "cgroup.kill")) for folder in folders):
        return True
    # A root with no child yet (a fresh host) is asked through a child made
    # for the question, since the kernel's version alone does not tell.
    probe = os.path.join(folder, f"executor-probe-{os.getpid()}-{os.urandom(4).hex()}")
    try:
        os.mkdir(probe)
    except OSError:
        return False
    try:
        return os.path.exists(os.path.join(probe, "cgroup.kill"))
    finally:
        with contextlib.suppress(OSError):
            os.rmdir(probe)


def executor_cgroups(support: CgroupSupport | None = None) -> dict[str, Any] | None:
    """Make an executor's cgroup folders; the supervisor's configuration for them.

    Returns `None` where no cgroup can be made. A folder that cannot be made
    is left out: the supervisor then does without it.
    """
    support = support or probe()
    if not support.available:
        return None
    for parent in (support.v2, *support.v1.values()):
        if parent is not None:
            sweep(parent)
    name = f"executor-{os.getpid()}-{uuid.uuid4().hex[:12]}"
    config: dict[str, Any] = {"v1": {}, "home": {}, "v2_controllers": []}
    if support.v2 is not None:
        base = os.path.join(support.v2, name)
        try:
            os.mkdir(base)
            enable = sorted(support.v2_controllers)
            if enable:
                parent = os.path.join(support.v2, "cgroup.subtree_control")
                wanted = " ".join(f"+{controller}" for controller in enable)
                with contextlib.suppress(OSError):
                    linux_write(parent, wanted)
                linux_write(os.path.join(base, "cgroup.subtree_control"), wanted)
            config["v2"] = base
            config["v2_controllers"] = enable
            config["home"]["v2"] = support.v2
        except OSError:
            with contextlib.suppress(OSError):
                os.rmdir(base)
    for controller, folder in support.v1.items():
        base = os.path.join(folder, name)
        try:
            os.mkdir(base)
        except OSError:
            continue
        config["v1"][controller] = base
        config["home"][controller] = folder
    if "v2" not in config and not config["v1"]:
        return None
    return config


def sweep(parent: str) -> list[str]:
    """Remove the folders in `parent` that executors killed outright left behind; those removed.

    An executor's supervisor removes its folders as it ends; one killed at
    once (SIGKILL to its whole process group, the OOM killer) cannot, and
    its empty folders would pile up on a long-lived host. A folder is taken
    for such a one only if it has our name (`executor-PID-...`), its process
    is gone, and it holds no folder of its own: a live executor's always
    holds its idle shims' cgroups, so one whose process another PID
    namespace hides is left alone. The kernel refuses to remove a cgroup
    that still has a process in it.
    """
    removed = []
    with contextlib.suppress(OSError), os.scandir(parent) as entries:
        for entry in entries:
            match = _FOLDER.fullmatch(entry.name)
            if match is None or not entry.is_dir(follow_symlinks=False):
                continue
            pid = int(match[1])
            if pid == os.getpid() or proc_stat(pid) is not None:
                continue
            try:
                with os.scandir(entry.path) as inside:
                    if any(child.is_dir(follow_symlinks=False) for child in inside):
                        continue
                os.rmdir(entry.path)
            except OSError:
                continue
            removed.append(entry.path)
    return removed


# An executor's folder: its process's pid, and a random part.
_FOLDER: Final = re.compile(r"executor-([0-9]+)-[0-9a-f]{12}")


def limits_enforced(config: dict[str, Any] | None) -> frozenset[str]:
    """The limits the cgroups of `config` (from `executor_cgroups`) enforce."""
    if config is None:
        return frozenset()
    return frozenset(config.get("v2_controllers", ())) | frozenset(config.get("v1", {}))


def remove_cgroups(config: dict[str, Any] | None) -> None:
    """Remove an executor's cgroup folders (the supervisor has ended every command's)."""
    if config is None:
        return
    for folder in _folders(config):
        with contextlib.suppress(OSError), os.scandir(folder) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    with contextlib.suppress(OSError):
                        os.rmdir(entry.path)
        with contextlib.suppress(OSError):
            os.rmdir(folder)


def _folders(config: dict[str, Any]) -> list[str]:
    return [folder for folder in (config.get("v2"), *config.get("v1", {}).values()) if folder]


def end_and_remove_cgroups(config: dict[str, Any] | None, within: float) -> bool:
    """End what is left in a dead supervisor's cgroup folders, then remove them; whether gone.

    Its shims end on their own (their parent-death signal, their request
    socket's end), but not at once: whatever is still in the folders, in
    this executor's folders and so its own, is killed (`cgroup.kill` where
    cgroup v2 has it, and by pid from each folder's `cgroup.procs`, for v1
    and kernels without it), and the folders are removed as they empty, for
    up to `within` seconds.
    """
    if config is None:
        return True
    folders = _folders(config)
    v2 = config.get("v2")
    if v2:
        with contextlib.suppress(OSError):
            linux_write(os.path.join(v2, "cgroup.kill"), "1")
    for folder in folders:
        with contextlib.suppress(OSError), os.scandir(folder) as entries:
            places = [folder, *(entry.path for entry in entries if entry.is_dir())]
            for place in places:
                with (
                    contextlib.suppress(OSError),
                    open(os.path.join(place, "cgroup.procs")) as file,
                ):
                    for line in file:
                        with contextlib.suppress(OSError):
                            os.kill(int(line), signal.SIGKILL)
    deadline = time.monotonic() + within
    while True:
        remove_cgroups(config)
        if not any(os.path.exists(folder) for folder in folders):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.005)


def linux_write(path: str, text: str) -> None:
    """Write `text` to a cgroup file in one write.

    Raises:
        OSError: The kernel refused it.

    """
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)
