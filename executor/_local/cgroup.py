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

Where this process may make cgroups (`probe`, `CgroupSupport`) is found in
`executor._sandbox.cgroup_probe`, below this folder: `Sandbox.probe()`'s
report says it too, and the sandbox imports nothing of `executor._local`.
The folders are made, swept, emptied and removed here.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import time
import uuid
from typing import Any, Final

from executor._core.proc import proc_stat

# Kept here too: the supervisor, and tests that stand in for it, look the probe up here.
from executor._sandbox.cgroup_probe import CgroupSupport as CgroupSupport, probe as probe


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
