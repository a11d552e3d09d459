"""Where this process may make cgroups for its commands: the probe, once per process.

`executor._local.cgroup` makes an unsandboxed executor's cgroups where this
finds it may (see there); `Sandbox.probe()`'s report says what it found
("unsandboxed commands' cgroups"). The probe reads `/proc/self/mountinfo`,
`/proc/self/cgroup` and the cgroup folders, and makes nothing but, on a
fresh cgroup v2 root, a child cgroup it removes at once (to learn whether
`cgroup.kill` is there). It lives here, in the folder below
`executor._local`, because that report is the sandbox's, and the sandbox
imports nothing of `executor._local` (which imports the sandbox).
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Mapping
from typing import Final

import attrs

from executor._sandbox import linux

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
