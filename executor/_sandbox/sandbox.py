"""`Sandbox`: the kernel keeps a `LocalExecutor`'s commands in bounds.

Two backends, both applied to every process a sandboxed `LocalExecutor`
starts (`exec_cmd`, streaming, sessions and PTYs, which share one spawn path):

- **bubblewrap** (`bwrap`, Debian package `bubblewrap`): a mount namespace
  whose root is the host's, read-only; the writable paths bound read-write
  over it; an empty `/run` (no service sockets); the home folder replaced by
  an empty one; a network namespace of its own (only a private loopback)
  unless the network is asked for; a user namespace with no capability for
  the commands, even for root; UTS namespace. `bwrap` builds that once per
  executor (and once more for read-only commands), and a `SandboxServer`
  joins it and starts each command in namespaces of its own within it: a
  PID namespace, so the command's init takes every process of it along
  when the command ends (a daemon that double-forks and drops every tag
  dies too); a mount namespace with a fresh `/tmp`, `/run`, `/dev/shm` and
  home, and the `/proc` of that PID namespace; an IPC namespace; a session
  of its own (on a PTY, opened on the sandbox's own devpts, its controlling
  terminal). The server dies with the executor's process. A session's
  signals go to the command's process group inside the sandbox, found below
  its init (`signal_served`), as a terminal's keys do.
- **Landlock** (Linux 5.13+, no program needed; see `executor._sandbox.landlock`):
  the same filesystem rules through the Landlock system calls; with ABI 4 no
  TCP `bind` or `connect` unless the network is asked for (run by root, a
  network namespace of its own as well); with ABI 6 no signal to a process
  outside the command's domain. Commands start from a `LandlockLauncher`, a
  process of its own per rule set (see `executor._sandbox.landlock_launcher`),
  whose inits run its commands one at a time (a child subreaper each,
  not dumpable): each command starts from a thread of its init's that has
  joined a fresh session keyring, made (run by root) an IPC namespace,
  dropped every capability, restricted itself in a Landlock domain of its
  own and installed the filter, and init kills what the command left when
  it ends: nothing of the executor's process is within a command's reach.
  It has no private `/tmp` (set `writable` to give one), and, run by a
  user, its network rule covers TCP only.

Both backends install the system call filter of `executor._sandbox.seccomp`
on every command (`Sandbox(syscall_filter=False)` leaves it out).

Resource limits are rlimits set before the command starts, so every process
in the sandbox inherits them: under bubblewrap by the command's init; under
Landlock through util-linux's `prlimit`. `processes`
(`RLIMIT_NPROC`) does not bind uid 0, so a sandbox that asks for it refuses
to run as root. Memory and process limits through cgroup v2 (`memory`,
`pids`) need the controllers delegated to this user.

A sandbox never falls back to running unconfined: `LocalExecutor` checks it
against `Sandbox.probe()` when it is built and raises `ExecutorError`, naming
every guarantee the machine cannot give and how to get it.
"""

from __future__ import annotations

import array
import atexit
import contextlib
import errno
import functools
import json
import os
import pwd
import resource
import select
import shutil
import signal as signals
import socket
import struct
import subprocess
import sys
import threading
import weakref
from collections.abc import Iterable
from stat import S_ISDIR
from typing import Any, Literal, Protocol

import anyio
import attrs
import psutil

from executor._core.cleanup import run_to_completion
from executor._core.commands import StrPath
from executor._core.errors import ExecutorError
from executor._core.proc import proc_stat
from executor._sandbox import cgroup_probe, linux, programs, seccomp
from executor._sandbox.landlock import LandlockRules, abi_version

# "bwrap" is another spelling of "bubblewrap" (the program's name); it is kept as "bubblewrap".
Backend = Literal["auto", "bubblewrap", "bwrap", "landlock"]
_BACKENDS = ("auto", "bubblewrap", "landlock")
_SPELLINGS = {"bwrap": "bubblewrap"}
# What `prlimit` calls each rlimit, by the Sandbox field that sets it.
_RLIMITS = {
    "address_space": "--as",
    "cpu_seconds": "--cpu",
    "file_size": "--fsize",
    "open_files": "--nofile",
    "processes": "--nproc",
}
# The same limits by their resource numbers, for setting them without `prlimit`.
_RESOURCES = {
    "address_space": resource.RLIMIT_AS,
    "cpu_seconds": resource.RLIMIT_CPU,
    "file_size": resource.RLIMIT_FSIZE,
    "open_files": resource.RLIMIT_NOFILE,
    "processes": resource.RLIMIT_NPROC,
}
_CGROUP_LIMITS = {"memory": "memory", "pids": "pids"}
# The namespaces every bubblewrap sandbox uses; the probe tries exactly these. A
# user namespace of its own even for root, with no capability in it: bwrap run
# by root otherwise keeps every capability (mount, chroot, sethostname...).
_NAMESPACES = (
    "--unshare-user",
    "--unshare-pid",
    "--unshare-ipc",
    "--unshare-uts",
    "--unshare-cgroup-try",
    "--cap-drop",
    "ALL",
)


def _paths(values: Iterable[StrPath] | None) -> tuple[str, ...] | None:
    if values is None:
        return None
    if isinstance(values, str | os.PathLike):
        values = (values,)
    return tuple(os.fspath(value) for value in values)


def _readable(values: Iterable[StrPath]) -> tuple[str, ...]:
    return _paths(values) or ()


def _positive(_: object, attribute: attrs.Attribute[int | None], value: int | None) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{attribute.name} must be a positive int or None, got {value!r}")


def _backend(_: object, attribute: attrs.Attribute[str], value: str) -> None:
    if value not in _BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(_BACKENDS)} (or bwrap); got {value!r}")


def _spelled(value: Backend) -> Backend:
    return _SPELLINGS.get(value, value) if isinstance(value, str) else value  # type: ignore[return-value]


def _no_blank(_: object, attribute: attrs.Attribute[Any], value: tuple[str, ...] | None) -> None:
    for path in value or ():
        if not path or "\0" in path:
            raise ValueError(f"{attribute.name}: {path!r} is not a path")


@attrs.frozen(kw_only=True)
class SandboxSupport:
    """What this machine can enforce, as `Sandbox.probe()` found it.

    Attributes:
        bubblewrap: The `bwrap` program, or `None` when it is not installed.
        bubblewrap_error: Why a trial sandbox failed to start ("" if it ran).
        user_namespaces: Whether unprivileged user namespaces are allowed
            (what `bwrap` needs when not run as root).
        root: Whether this process runs as uid 0.
        landlock_abi: The kernel's Landlock ABI; 0 when it has none.
        cgroup2: Where this process's cgroup v2 folder is, or `None` when
            it has none (no unified hierarchy mounted).
        cgroup_controllers: The cgroup v2 controllers delegated to this
            process (enabled there and writable by it).
        prlimit: The `prlimit` program (util-linux), which sets the rlimits.
        seccomp: Whether the system call filter can be installed: seccomp
            filters in the kernel, on an architecture the filter knows
            (x86_64, aarch64).
        keyrings: Whether the kernel has keyrings (`/proc/keys`); each
            sandboxed command then gets a fresh session keyring.
        tiocsti: Whether the kernel lets a program type into its terminal
            with `TIOCSTI` (`dev.tty.legacy_tiocsti`); the filter denies it
            either way.

    """

    bubblewrap: str | None
    bubblewrap_error: str
    user_namespaces: bool
    root: bool
    landlock_abi: int
    cgroup2: str | None
    cgroup_controllers: frozenset[str]
    prlimit: str | None
    seccomp: bool = False
    keyrings: bool = False
    tiocsti: bool = True

    @property
    def bubblewrap_works(self) -> bool:
        """Whether `bwrap` is installed and a trial sandbox ran."""
        return self.bubblewrap is not None and not self.bubblewrap_error

    def protections(self, backend: str, *, syscall_filter: bool = True) -> dict[str, str]:
        """How each protection holds under `backend` on this machine ("missing: ..." if not).

        Args:
            backend: `"bubblewrap"` (or `"bwrap"`) or `"landlock"`.
            syscall_filter: Whether the sandbox asks for the system call filter.

        Raises:
            ValueError: `backend` is not one of those.

        """
        backend = _SPELLINGS.get(backend, backend)
        if backend not in ("bubblewrap", "landlock"):
            raise ValueError(f"backend must be bubblewrap or landlock; got {backend!r}")
        bwrap = backend == "bubblewrap"
        filtered = syscall_filter and self.seccomp
        if not syscall_filter:
            seccomp_state = "missing: turned off (syscall_filter=False)"
        elif self.seccomp:
            seccomp_state = "on (seccomp, EPERM for each denied call)"
        else:
            seccomp_state = (
                "missing: the kernel has no seccomp filters, or the filter does not know "
                "this architecture (x86_64, aarch64)"
            )
        filter_says = "denied by the filter" if filtered else "missing: no system call filter"
        keyring = "a fresh session keyring per command" if self.keyrings else "no keyrings"
        if bwrap:
            memory = "each command in a PID namespace of its own; its init is not dumpable"
            leftovers = "each command's PID namespace ends with it"
            ipc = "an IPC namespace per command"
            sockets = (
                "/run, /tmp, /dev/shm and hidden homes are fresh for each command; a "
                "named socket in any other readable folder stays reachable"
            )
        else:
            memory = (
                "commands start from a launcher process outside the executor; each in a "
                "Landlock domain of its own, its init not dumpable"
            )
            leftovers = (
                "each command's init is a child subreaper that kills what the command "
                "left; the launcher kills what a killed init left"
            )
            if self.root:
                ipc = "an IPC namespace per command"
            elif filtered:
                ipc = "SysV IPC denied by the filter (no IPC namespace for a user)"
            else:
                ipc = "missing: no IPC namespace for a user, and no system call filter"
            sockets = (
                "an empty /run; a named socket in any other readable folder (/tmp "
                "included) stays reachable"
                if self.root
                else "every named socket this user may reach stays reachable (/run and /tmp too)"
            )
        if bwrap:
            signals_out = "no host process in sight (PID namespace)"
        elif self.landlock_abi >= 6:
            signals_out = "none outside the command's Landlock domain (ABI 6)"
        else:
            signals_out = (
                f"missing: Landlock ABI 6 (Linux 6.12) scopes signals; this kernel has "
                f"{self.landlock_abi}, so a command may signal the user's other processes"
            )
        return {
            "system call filter": seccomp_state,
            "executor's memory and environment": memory,
            "signals to host processes": signals_out,
            "processes left behind": leftovers,
            "host keyrings": f"{keyring}; keyctl, add_key, request_key {filter_says}"
            if filtered
            else f"missing: {keyring}, but keyctl is not filtered",
            "host SysV IPC": ipc,
            "host terminals (TIOCSTI, TIOCLINUX)": filter_says,
            "kernel extension points (bpf, perf, modules, kexec), mounts, new user "
            "namespaces": filter_says,
            "named unix sockets": sockets,
        }

    def __str__(self) -> str:
        bwrap = (
            "not installed (apt-get install bubblewrap)"
            if self.bubblewrap is None
            else f"{self.bubblewrap}, "
            + ("works" if not self.bubblewrap_error else f"fails: {self.bubblewrap_error}")
        )
        return "\n".join(
            [
                f"bubblewrap: {bwrap}",
                f"user namespaces: {'allowed' if self.user_namespaces else 'not allowed'}",
                f"running as: {'root' if self.root else f'uid {os.getuid()}'}",
                f"landlock ABI: {self.landlock_abi or 'none'}",
                f"cgroup v2: {self.cgroup2 or 'none'}; delegated controllers: "
                + (", ".join(sorted(self.cgroup_controllers)) or "none"),
                f"prlimit: {self.prlimit or 'not installed (util-linux)'}",
                # What LocalExecutor(memory=, pids=) and its kills use without a sandbox.
                f"unsandboxed commands' cgroups: {cgroup_probe.probe().describe()}",
                f"system call filter: {'available' if self.seccomp else 'not available'}",
                f"keyrings: {'yes' if self.keyrings else 'none'}",
                f"TIOCSTI: {'allowed by the kernel' if self.tiocsti else 'off in the kernel'}",
                *(
                    f"{backend}: {name}: {state}"
                    for backend in ("bubblewrap", "landlock")
                    for name, state in self.protections(backend).items()
                ),
            ]
        )


@attrs.frozen(kw_only=True, repr=False)
class Sandbox:
    """An OS sandbox for `LocalExecutor(sandbox=Sandbox(...))`.

    ```python
    async with LocalExecutor(repo, sandbox=Sandbox(address_space=2 << 30)) as ex:
        await ex.exec_cmd(Command.shell("make test"))   # writes only in repo
    ```

    Every path is read-only but the writable ones; the home folder is hidden;
    there is no network. Under `ReadOnly` nothing is writable at all. A
    guarantee the machine cannot give makes the executor refuse to be built
    (`ExecutorError` saying what is missing); it never runs unconfined.

    Args:
        backend: `"bubblewrap"` (or `"bwrap"`), `"landlock"`, or `"auto"`:
            bubblewrap where it works, else Landlock where it can give what
            is asked.
        writable: Paths commands may write (relative ones join onto the
            workdir). `None` means the workdir; `()` means nothing.
        readable: Paths that stay readable inside hidden places (the home
            folder, and `/tmp` under bubblewrap): an interpreter installed
            under the home folder, say. Relative ones join onto the workdir.
        home: Keep the home folder visible (read-only unless writable).
        network: Give commands the host's network. Without it, bubblewrap
            gives them a network namespace of their own, whose loopback
            reaches nothing outside the sandbox; Landlock (ABI 4) refuses
            TCP `bind` and `connect`.
        address_space: `RLIMIT_AS` in bytes, per process.
        cpu_seconds: `RLIMIT_CPU` in seconds, per process.
        file_size: `RLIMIT_FSIZE` in bytes: the largest file a command writes.
        open_files: `RLIMIT_NOFILE`, per process.
        processes: `RLIMIT_NPROC`: processes of the user (under bubblewrap,
            of the sandbox's user namespace). Not enforced for root, so refused there.
        memory: cgroup v2 `memory.max` in bytes for the whole command.
        pids: cgroup v2 `pids.max` for the whole command.
        syscall_filter: Install the system call filter
            (`executor._sandbox.seccomp`: no keyrings, no typing into
            terminals, no bpf, perf, modules, kexec, mounts or new user
            namespaces; under Landlock run by a user, no SysV IPC). On by
            default; a machine that cannot give it refuses the sandbox
            unless it is turned off here.

    """

    backend: Backend = attrs.field(default="auto", converter=_spelled, validator=_backend)
    writable: tuple[str, ...] | None = attrs.field(
        default=None, converter=_paths, validator=_no_blank
    )
    readable: tuple[str, ...] = attrs.field(default=(), converter=_readable, validator=_no_blank)
    home: bool = False
    network: bool = False
    address_space: int | None = attrs.field(default=None, validator=_positive)
    cpu_seconds: int | None = attrs.field(default=None, validator=_positive)
    file_size: int | None = attrs.field(default=None, validator=_positive)
    open_files: int | None = attrs.field(default=None, validator=_positive)
    processes: int | None = attrs.field(default=None, validator=_positive)
    memory: int | None = attrs.field(default=None, validator=_positive)
    pids: int | None = attrs.field(default=None, validator=_positive)
    syscall_filter: bool = True

    def __repr__(self) -> str:
        # Only what differs from the defaults: the repr sits inside an executor's.
        changed = [
            f"{field.name}={getattr(self, field.name)!r}"
            for field in attrs.fields(Sandbox)
            if getattr(self, field.name) != field.default
        ]
        return f"Sandbox({', '.join(changed)})"

    @staticmethod
    def probe(*, refresh: bool = False) -> SandboxSupport:
        """Find out what this machine can enforce (once per process unless `refresh`)."""
        if refresh:
            _probe.cache_clear()
        return _probe()

    def choose_backend(self, support: SandboxSupport | None = None) -> str:
        """The backend that gives everything asked for here: `"bubblewrap"` or `"landlock"`.

        Raises:
            ExecutorError: No backend can; the message lists what is missing
                and how to get it.

        """
        support = support or self.probe()
        candidates = ("bubblewrap", "landlock") if self.backend == "auto" else (self.backend,)
        missing: dict[str, list[str]] = {}
        for candidate in candidates:
            lacks = self._lacks(candidate, support)
            if not lacks:
                return candidate
            missing[candidate] = lacks
        lines = [f"{name}: {'; '.join(lacks)}" for name, lacks in missing.items()]
        raise ExecutorError(
            "this machine cannot give the sandbox asked for, so nothing runs:\n- "
            + "\n- ".join(lines)
            + "\n(Sandbox.probe() reports what the machine has)"
        )

    def _lacks(self, backend: str, support: SandboxSupport) -> list[str]:
        lacks = []
        if backend == "bubblewrap":
            if support.bubblewrap is None:
                lacks.append("bwrap is not installed (apt-get install bubblewrap)")
            elif support.bubblewrap_error:
                hint = (
                    ""
                    if support.root or support.user_namespaces
                    else " (unprivileged user namespaces are off: sysctl "
                    "kernel.unprivileged_userns_clone=1, user.max_user_namespaces>0, "
                    "kernel.apparmor_restrict_unprivileged_userns=0)"
                )
                lacks.append(f"bwrap cannot start a sandbox: {support.bubblewrap_error}{hint}")
        else:
            if support.landlock_abi < 1:
                lacks.append("the kernel has no Landlock (Linux 5.13+, with landlock in lsm=)")
            elif not self.network and support.landlock_abi < 4:
                lacks.append(
                    f"turning the network off needs Landlock ABI 4 (Linux 6.7+), "
                    f"this kernel has {support.landlock_abi}"
                )
        if self.syscall_filter and not support.seccomp:
            lacks.append(
                "the system call filter needs seccomp filters in the kernel "
                "(CONFIG_SECCOMP_FILTER) and x86_64 or aarch64; Sandbox(syscall_filter=False) "
                "runs without it, leaving the keyrings, terminals (TIOCSTI) and, under "
                "Landlock run by a user, SysV IPC within reach"
            )
        # Under bubblewrap the command's init sets them (`executor._sandbox.sandbox_server`).
        if backend == "landlock" and self.rlimits() and support.prlimit is None:
            lacks.append("resource limits need prlimit (util-linux)")
        if self.processes is not None and support.root:
            lacks.append(
                "processes= (RLIMIT_NPROC) does not bind root, so a fork bomb would "
                "not stop: run the executor as another user"
            )
        for name, controller in _CGROUP_LIMITS.items():
            if getattr(self, name) is None:
                continue
            if controller not in support.cgroup_controllers:
                lacks.append(
                    f"{name}= needs the cgroup v2 {controller} controller delegated to this "
                    "user (a unified cgroup hierarchy, and a cgroup of ours with it enabled: "
                    "systemd-run --user --scope -p Delegate=yes)"
                )
            else:
                # Refused rather than accepted and not enforced.
                lacks.append(
                    f"{name}= (cgroup v2) is not enforced by this version; use "
                    "address_space= and processes= (rlimits)"
                )
        return lacks

    def filter_program(self, backend: str) -> bytes | None:
        """The system call filter for `backend`'s commands, or None when turned off.

        SysV IPC is allowed only where each command has an IPC namespace of
        its own: under bubblewrap, and under Landlock run by root.

        Raises:
            OSError: The filter does not know this machine's architecture.

        """
        if not self.syscall_filter:
            return None
        backend = _SPELLINGS.get(backend, backend)
        return seccomp.program(sysv_ipc=backend == "bubblewrap" or os.geteuid() == 0)

    def hidden(self) -> tuple[str, ...]:
        """The folders hidden from commands: the home folder, unless `home` is set."""
        if self.home:
            return ()
        return _homes()

    def writable_paths(self, workdir: str, *, read_only: bool) -> tuple[str, ...]:
        """The absolute paths commands may write: none when `read_only`."""
        if read_only:
            return ()
        if self.writable is None:
            return (workdir,)
        return tuple(os.path.join(workdir, path) for path in self.writable)

    def readable_paths(self, workdir: str) -> tuple[str, ...]:
        """The absolute paths kept readable, the workdir first."""
        return (workdir, *(os.path.join(workdir, path) for path in self.readable))

    def check_paths(self, workdir: str, *, read_only: bool) -> None:
        """Refuse to start when a path named readable or writable is missing.

        Raises:
            ExecutorError: One is missing (the workdir's own absence is the
                spawn's to report, as without a sandbox).

        """
        for kind, paths in (
            ("readable", self.readable_paths(workdir)[1:]),
            ("writable", self.writable_paths(workdir, read_only=read_only)),
        ):
            for path in paths:
                if not os.path.exists(path):
                    raise ExecutorError(f"the sandbox's {kind} path {path} does not exist")

    def rlimits(self) -> list[tuple[int, int]]:
        """The rlimits asked for: `(resource.RLIMIT_..., value)` pairs."""
        return [(number, value) for number, value, _ in self.named_rlimits()]

    def named_rlimits(self) -> list[tuple[int, int, str]]:
        """The rlimits asked for, each with the field that asked for it."""
        return [
            (number, value, name)
            for name, number in _RESOURCES.items()
            if (value := getattr(self, name)) is not None
        ]

    def rlimit_argv(self, support: SandboxSupport) -> list[str]:
        """`prlimit --as=N ... --` for the rlimits asked for, or nothing."""
        options = [
            f"{option}={getattr(self, name)}"
            for name, option in _RLIMITS.items()
            if getattr(self, name) is not None
        ]
        if not options:
            return []
        assert support.prlimit is not None  # choose_backend refused otherwise
        return [support.prlimit, *options, "--"]

    def bubblewrap_argv(
        self,
        argv: Iterable[str],
        *,
        support: SandboxSupport,
        cwd: str,
        workdir: str,
        read_only: bool,
        pty: bool,
        seccomp_fd: int | None = None,
    ) -> list[str]:
        """The one `bwrap` command line that runs `argv` as the sandbox would, in `cwd`.

        `LocalExecutor` builds the sandbox once and starts each command in it
        (see `SandboxServer`); this line is the same sandbox made for a single
        command, for running by hand or measuring against. `seccomp_fd`, a
        descriptor the `bwrap` process inherits holding `filter_program()`,
        adds the system call filter (`--seccomp`).

        Raises:
            ExecutorError: A writable or readable path does not exist.

        """
        args = [
            *self.rlimit_argv(support),
            *self.bubblewrap_options(support, workdir, read_only)[0],
        ]
        if seccomp_fd is not None:
            args += ["--seccomp", str(seccomp_fd)]
        args += ["--die-with-parent", "--new-session", "--chdir", cwd, "--"]
        if pty:
            args += [_setsid(), "--ctty", "--"]
        return [*args, *argv]

    def bubblewrap_options(
        self, support: SandboxSupport, workdir: str, read_only: bool
    ) -> tuple[list[str], list[str], list[tuple[str, bool]], list[str]]:
        """`bwrap` and its options; its fresh folders; the paths bound in them; every path bound.

        The fresh folders (`/tmp`, `/run`, the hidden homes) get a new tmpfs
        for each command; the bound paths that lie in one, each with whether
        it is writable, in the order they are bound, are bound again over it.

        Raises:
            ExecutorError: A writable or readable path does not exist.

        """
        assert support.bubblewrap is not None
        args = [support.bubblewrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
        fresh = ["/tmp"]
        # /run holds the host's service sockets (docker.sock, D-Bus, systemd):
        # a read-only mount does not stop a connect(), so /run is emptied.
        if os.path.isdir("/run") and not os.path.islink("/run"):
            fresh.append("/run")
        fresh += self.hidden()
        # Shared memory (POSIX semaphores, say), fresh for each command too.
        fresh.append("/dev/shm")
        for folder in fresh:
            args += ["--tmpfs", folder]
        # Bound after the tmpfs mounts, so what lies in /tmp or the home shows through.
        self.check_paths(workdir, read_only=read_only)
        writable = _spellings(self.writable_paths(workdir, read_only=read_only))
        binds: list[tuple[str, bool]] = []
        for path in _spellings(self.readable_paths(workdir)):
            # A path bound writable below needs no read-only mount first (the
            # workdir, usually): each mount costs the sandbox's start time.
            if path not in writable and os.path.exists(path):
                args += ["--ro-bind", path, path]
                binds.append((path, False))
        for path in writable:
            args += ["--bind", path, path]
            binds.append((path, True))
        args += _NAMESPACES
        if not self.network:
            args.append("--unshare-net")
        within = [
            (path, writable)
            for path, writable in binds
            if any(path == folder or path.startswith(folder.rstrip("/") + "/") for folder in fresh)
        ]
        return args, fresh, within, [path for path, _ in binds]

    def server_config(
        self, support: SandboxSupport, workdir: str, *, read_only: bool
    ) -> dict[str, Any]:
        """What `SandboxServer` is told to build: see `executor._sandbox.sandbox_server`.

        Raises:
            ExecutorError: A writable or readable path does not exist, or `cat`
                (which holds the sandbox open) is missing.

        """
        options, fresh, binds, bound = self.bubblewrap_options(support, workdir, read_only)
        cat = shutil.which("cat")
        if cat is None:
            raise ExecutorError("a bubblewrap sandbox needs cat (coreutils), not found in PATH")
        code = self.filter_program("bubblewrap")
        return {
            "filter": None if code is None else code.hex(),
            "bwrap": options,
            "cat": cat,
            "fresh": fresh,
            "binds": binds,
            "bound": bound,
            "warm": 2,
            "uid": os.getuid(),
            "gid": os.getgid(),
        }

    def landlock_rules(self, workdir: str, *, read_only: bool) -> LandlockRules:
        """The Landlock rules for commands run from `workdir`."""
        return LandlockRules(
            writable=self.writable_paths(workdir, read_only=read_only),
            readable=self.readable_paths(workdir),
            hidden=self.hidden(),
            network=self.network,
            syscall_filter=self.syscall_filter,
        )


@functools.cache
def _setsid() -> str:
    found = shutil.which("setsid")
    if found is None:
        raise ExecutorError("a PTY under bubblewrap needs setsid (util-linux), not found in PATH")
    return found


# pidfd_send_signal's flag (Linux 6.9+): to the target's process group.
_PIDFD_SIGNAL_PROCESS_GROUP = 4
# A request larger than this goes through a memfd: a datagram is bounded by
# the socket's buffer, and an environment or a script can be large.
_INLINE = 1 << 16
# How long the server may take to build the sandbox, and to stop.
_START_TIMEOUT = 30.0
_STOP_TIMEOUT = 5.0
# How many times a build the server refused is tried, and the pause before
# the next (times the attempts so far): see `SandboxServer._build`.
_BUILD_ATTEMPTS = 3
_BUILD_PAUSE = 0.05


class _BuildFailed(ExecutorError):
    """The sandbox's server could not build the sandbox (bwrap's or the launcher's words)."""


class SandboxServer:
    """A bubblewrap sandbox built once, that starts each command in namespaces of its own.

    `LocalExecutor` keeps one per set of mounts (read-write, and read-only
    for `ReadOnly`), started at the first command. It runs
    `executor._sandbox.sandbox_server` in a bare interpreter, which runs `bwrap` once
    and joins its namespaces. For each command it makes, ahead of time, an
    init in a new PID namespace with a mount and IPC namespace of its own (a
    fresh `/tmp`, `/run`, `/dev/shm` and hidden homes; `/proc` of the new PID
    namespace), and hands it over; the command goes straight to that init,
    which runs it with no capability. A command then costs a hand-off and an
    exec, not a `bwrap`: see `benchmarks/bench_sandbox.py`. A bound path
    deleted or made again makes the executor build a new one (`stale`).

    The server ends when `aclose` or `close` is called, when this object is
    collected, or when this process dies; every sandbox of it dies with it.
    """

    # The program that serves (see `programs`), and what its sandboxes are called in errors.
    _program: str = "sandbox_server"
    _kind: str = "bubblewrap"

    def __init__(self, config: dict[str, Any]) -> None:
        """Hold `config` (see `Sandbox.server_config`); nothing starts until the first command.

        Raises:
            OSError: A bound path is gone already.

        """
        self._config = config
        self._state: Literal["new", "starting", "ready", "retired", "closed"] = "new"
        self._error = ""
        self._control: socket.socket | None = None
        self._pid: int | None = None
        self._pidfd: int | None = None
        self._finalizer: weakref.finalize[Any, SandboxServer] | None = None
        # An O_PATH descriptor of the sandbox's /dev/pts/ptmx, once started:
        # a session's terminal is opened through it (`spawn_served`).
        self.ptmx: int | None = None
        # Sockets on which the server sends sandboxes made ahead, oldest
        # first, and how many are being asked for. A new server (after one
        # ended) starts a new list, and a new generation.
        self._spares: list[socket.socket] = []
        self._asking = 0
        self._generation = 0
        # Each bound path, held open: its inode cannot be reused while held,
        # so a path deleted and made again is never taken for the same one.
        held = [os.open(path, os.O_PATH | os.O_CLOEXEC) for path in config["bound"]]
        self._held = list(zip(config["bound"], held, strict=True))
        self._release_held = weakref.finalize(self, _close_fds, held)

    async def start_command(self, request: dict[str, Any], fds: list[int]) -> tuple[int, int]:
        """Start a command with `fds` (stdin, stdout, stderr, status); its init's pid and pidfd.

        The command goes straight to a sandbox the server made ahead (asked
        for by an earlier command), and the next command's is asked for once
        it has gone: the server, woken by that, then takes no core from the
        command's start.

        Raises:
            ExecutorError: The sandbox could not be built, or is closed.

        """
        control = await self._started()
        generation = self._generation
        spare = self._spares.pop(0) if self._spares else await self._ask(control)
        init, pidfd, channel = await self._take(spare, generation)
        try:
            if self._pidfd is not None and select.select([self._pidfd], [], [], 0)[0]:
                # The server died after making this sandbox, which dies with it.
                self._lost(generation)
                raise ExecutorError("cannot start the command in the sandbox: its server ended")
        except BaseException:
            os.close(pidfd)
            channel.close()
            raise
        body = json.dumps(request).encode()
        extra: list[int] = []
        if len(body) > _INLINE:
            memfd = os.memfd_create("executor-request", os.MFD_CLOEXEC)
            extra.append(memfd)
            os.write(memfd, body)  # a memfd takes it all at once
            body = b"@"
        try:
            # A new socket pair, its buffer empty: this never blocks.
            channel.sendmsg(
                [body], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds + extra))]
            )
        except OSError as error:
            os.close(pidfd)
            raise ExecutorError(
                f"cannot start the command in the sandbox: its init ended ({error})"
            ) from error
        finally:
            channel.close()
            for fd in extra:
                os.close(fd)
        ready = self._state == "ready" and generation == self._generation
        if ready and len(self._spares) + self._asking < 1:
            # The command runs: nothing may stop its start from being told
            # now. A server that has ended is noticed by the next command.
            with anyio.CancelScope(shield=True), contextlib.suppress(ExecutorError):
                self._spares.append(await self._ask(control))
        return init, pidfd

    async def _ask(self, control: socket.socket) -> socket.socket:
        """Ask the server for a sandbox made ahead; the socket it will come on.

        Raises:
            ExecutorError: The server has ended (the next command starts a new one).

        """
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        generation = self._generation
        self._asking += 1
        try:
            await _send(control, b"spare", [theirs.fileno()])
        except OSError as error:
            ours.close()
            self._lost(generation)
            raise ExecutorError(f"the sandbox's server has ended ({error})") from error
        except BaseException:
            ours.close()
            raise
        finally:
            self._asking -= 1
            theirs.close()
        ours.setblocking(False)
        return ours

    async def _take(self, spare: socket.socket, generation: int) -> tuple[int, int, socket.socket]:
        """The sandbox the server sent on `spare`: its init's pid, a pidfd of it, its channel.

        Raises:
            ExecutorError: The server could not make it, or did not answer.

        """
        data: bytes = b""
        received: list[int] = []
        try:
            with anyio.move_on_after(_START_TIMEOUT):
                while True:
                    try:
                        data, received = _recv(spare)
                        break
                    except BlockingIOError:
                        await anyio.wait_readable(spare)
        except BaseException:
            # Nothing was taken: the sandbox is there for the next command,
            # if its server is still the one in use.
            if generation == self._generation and self._state == "ready":
                self._spares.insert(0, spare)
            else:
                spare.close()
            raise
        spare.close()
        if len(data) == 4 and len(received) == 2:
            (init,) = struct.unpack("i", data)
            return init, received[0], socket.socket(fileno=received[1])
        for fd in received:
            os.close(fd)
        if data.startswith(b"{"):
            error = json.loads(data).get("error", "")
        else:
            # The server ended or is stuck: it is ended, with all it ran.
            self._lost(generation)
            error = f"its server ended or did not answer in {_START_TIMEOUT:g} s"
        raise ExecutorError(f"cannot start the command in the sandbox: {error}")

    def _lost(self, generation: int) -> None:
        """The server of `generation` is gone or stuck: end it; the next command starts anew."""
        if generation == self._generation and self._state == "ready":
            self._abandon()
            self._state = "new"

    def stale(self) -> bool:
        """Whether a path the sandbox binds is no longer the one bound (deleted, or made again)."""
        for path, fd in self._held:
            try:
                now, then = os.stat(path), os.fstat(fd)
            except OSError:
                return True
            if (now.st_dev, now.st_ino) != (then.st_dev, then.st_ino):
                return True
        return False

    async def ready(self) -> None:
        """Build the sandbox, if not yet built.

        Raises:
            ExecutorError: It cannot be built, or the server is closed.

        """
        await self._started()

    async def _started(self) -> socket.socket:
        if self._state == "new":
            self._state = "starting"
            try:
                await self._build()
            except BaseException as error:
                self._abandon()
                # The next command tries again: a build can fail for a
                # passing reason (a host mount that vanished as bwrap read it).
                if self._state == "starting":
                    self._state = "new"
                self._error = str(error)
                raise
            if self._state == "starting":
                self._state = "ready"
        while self._state == "starting":
            await anyio.sleep(0.002)  # another task starts it; no loop-bound lock needed
        if self._state != "ready" or self._control is None:
            raise ExecutorError(self._error or "the executor is closed")
        return self._control

    async def _build(self) -> None:
        """`_start`, again a few times where the server could not build the sandbox.

        A build reads the host's mounts: one that comes or goes meanwhile (a
        container's layer, mounted for a moment while the engine creates it)
        fails bwrap's remount of the tree ("Unable to apply mount flags"),
        and the next build, a moment later, succeeds.
        """
        for attempt in range(_BUILD_ATTEMPTS):
            try:
                await self._start()
                return
            except _BuildFailed:
                if attempt == _BUILD_ATTEMPTS - 1:
                    raise
                self._abandon()
                await anyio.sleep(_BUILD_PAUSE * (attempt + 1))

    async def _start(self) -> None:
        config = json.dumps(self._config).encode()
        if len(config) > _INLINE:
            # The server reads it as one datagram of at most that size.
            raise ExecutorError(
                f"the sandbox's mounts take {len(config)} bytes to describe, over "
                f"{_INLINE}: name fewer readable and writable paths"
            )
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self._pid, self._pidfd = await self._spawn_server(ours, theirs)
        except (OSError, ExecutorError) as error:
            ours.close()
            raise ExecutorError(
                f"cannot start the {self._kind} sandbox's server: {error}"
            ) from error
        finally:
            theirs.close()
        self._control = ours
        self._finalizer = weakref.finalize(
            self, _stop, ours, self._pid, self._pidfd, None, self._spares
        )
        ours.setblocking(False)
        await _send(ours, config, [])
        with anyio.move_on_after(_START_TIMEOUT):
            await anyio.wait_readable(ours)
        try:
            data, received = _recv(ours)
        except BlockingIOError:
            raise ExecutorError(
                f"the {self._kind} sandbox took over {_START_TIMEOUT:g} s to build"
            ) from None
        except OSError as error:
            raise ExecutorError(
                f"cannot build the {self._kind} sandbox: its server ended ({error})"
            ) from error
        reply = json.loads(data) if data.startswith(b"{") else {"error": "its server ended"}
        if "error" in reply or len(received) != 1:
            for fd in received:
                os.close(fd)
            raise _BuildFailed(f"cannot build the {self._kind} sandbox: {reply.get('error')}")
        self.ptmx = received[0]
        self._finalizer.detach()
        self._finalizer = weakref.finalize(
            self, _stop, ours, self._pid, self._pidfd, self.ptmx, self._spares
        )

    async def _spawn_server(self, ours: socket.socket, theirs: socket.socket) -> tuple[int, int]:
        """Start the server with `theirs` as its control socket; its pid and a pidfd of it.

        Raises:
            OSError: It could not be started.

        """
        os.set_inheritable(theirs.fileno(), True)
        argv = programs.command(self._program, str(theirs.fileno()))
        # Its own session, and /dev/null for stdin and stdout; stderr is
        # ours, for what a broken interpreter says.
        pid = os.posix_spawn(  # noqa: ASYNC221 (a spawn, as every command's)
            sys.executable,
            argv,
            dict(os.environ),
            file_actions=[
                (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
            ],
            setsid=True,
        )
        return pid, os.pidfd_open(pid)

    def retire(self) -> None:
        """Take no more commands; the server ends once those it runs have ended."""
        if self._state == "ready" and self._control is not None:
            with contextlib.suppress(OSError):
                self._control.send(b"retire")
            _close_all(self._spares)
        if self._state in ("new", "ready"):
            self._state = "retired"

    def ended(self) -> bool:
        """Whether a retired server has ended (its last command with it); it is then closed."""
        if self._state != "retired":
            return self._state == "closed"
        if self._pidfd is not None and not select.select([self._pidfd], [], [], 0)[0]:
            return False
        self.close()
        return True

    def close(self) -> None:
        """End the server, and every sandbox it made, without waiting for it."""
        self._state = "closed"
        self._abandon()
        self._release_held()

    def _abandon(self) -> None:
        if self._finalizer is not None:
            self._finalizer()
        self._finalizer = None
        self._control = None
        self.ptmx = None
        self._spares = []
        self._generation += 1

    async def aclose(self) -> None:
        """End the server, and wait (a few seconds at most) until it is gone."""
        finalizer, self._finalizer = self._finalizer, None
        self._state = "closed"
        self._release_held()
        if finalizer is None or finalizer.detach() is None:
            return
        assert self._control is not None
        assert self._pid is not None
        assert self._pidfd is not None
        self._control.close()
        _close_all(self._spares)
        pidfd = self._pidfd

        async def stop() -> None:
            with anyio.move_on_after(_STOP_TIMEOUT):
                await anyio.wait_readable(pidfd)
            with contextlib.suppress(ProcessLookupError):
                signals.pidfd_send_signal(pidfd, signals.SIGKILL)
            await anyio.wait_readable(pidfd)

        await run_to_completion(stop)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(self._pid, 0)  # noqa: ASYNC222 (exited: the pidfd said so)
        os.close(self._pidfd)
        if self.ptmx is not None:
            os.close(self.ptmx)
            self.ptmx = None


class LandlockLauncher(SandboxServer):
    """The process that starts the commands of one Landlock rule set, outside this one.

    `executor._sandbox.landlock_launcher` in a bare interpreter with an empty
    environment: it builds the rule set once and keeps a few inits, which
    run its commands one at a time, each from a thread that restricts
    itself with the rule set (a Landlock domain of its own), installs the
    system call filter and spawns the command (see that module). It speaks
    the bubblewrap server's protocol, so commands start as they do under
    bubblewrap (`spawn_served`), and it ends the same ways.
    Nothing of this process is in any Landlock domain: a command can neither
    trace it nor read its memory, environment or `/proc` files.
    """

    _program = "landlock_launcher"
    _kind = "Landlock"

    def __init__(self, rules: LandlockRules, abi: int) -> None:
        """Hold what the launcher is told; nothing starts until the first command.

        Args:
            rules: What its commands may touch.
            abi: The kernel's Landlock ABI (from `abi_version`), at least 1.

        """
        root = os.geteuid() == 0
        code = seccomp.program(sysv_ipc=root) if rules.syscall_filter else None
        self.rules = rules
        super().__init__(
            {
                "rules": rules.as_json(),
                "abi": abi,
                "root": root,
                "filter": None if code is None else code.hex(),
                "warm": 2,
                # Landlock's rules hold the paths' inodes already; nothing to watch.
                "bound": [],
            }
        )

    async def _spawn_server(self, ours: socket.socket, theirs: socket.socket) -> tuple[int, int]:
        """Have the zygote fork the launcher; it says its pid, with a pidfd of it.

        Raises:
            OSError: The zygote could not be started, or the launcher did not say.

        """
        _zygote().launch(theirs)
        theirs.close()
        ours.setblocking(False)
        with anyio.move_on_after(_START_TIMEOUT):
            await anyio.wait_readable(ours)
        data, fds = _recv(ours)
        if not data.isdigit() or len(fds) != 1:
            _close_fds(fds)
            raise OSError(errno.EIO, "the Landlock launcher did not start")
        return int(data), fds[0]


class _Zygote:
    """The process that forks every Landlock launcher of this process (see `landlock_launcher`).

    Started once, the first time a launcher is needed, in a bare
    interpreter with an empty environment; each launcher after that is a
    fork of it, not an interpreter's start. It holds nothing of any
    executor, and ends with this process (its requests socket ends then).
    """

    def __init__(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            os.set_inheritable(theirs.fileno(), True)
            self.pid = os.posix_spawn(
                sys.executable,
                programs.command("landlock_launcher", "zygote", str(theirs.fileno())),
                {},
                file_actions=[
                    (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                    (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
                ],
                setsid=True,
            )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self.requests = ours
        self.owner = os.getpid()

    def launch(self, control: socket.socket) -> None:
        """Ask for a launcher whose control socket is `control` (a datagram: never blocks long).

        Raises:
            OSError: The zygote has ended.

        """
        self.requests.sendmsg(
            [b"launch"],
            [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [control.fileno()]))],
        )

    def ended(self) -> bool:
        """Whether the zygote has ended (it is then reaped)."""
        try:
            return os.waitpid(self.pid, os.WNOHANG)[0] != 0
        except ChildProcessError:
            return True


_zygote_lock = threading.Lock()
_zygotes: list[_Zygote] = []


def _zygote() -> _Zygote:
    """This process's zygote, started (again) when there is none."""
    with _zygote_lock:
        # A forked child of this process has no zygote of its own yet.
        if _zygotes and (_zygotes[0].owner != os.getpid() or _zygotes[0].ended()):
            _zygotes.pop().requests.close()
        if not _zygotes:
            _zygotes.append(_Zygote())
        return _zygotes[0]


# How long the exit waits for the zygote to see its socket end and exit.
_ZYGOTE_EXIT_WAIT = 1.0


def _end_zygote() -> None:
    """At exit: close the zygote's requests socket, so it ends, and reap it.

    Left to the interpreter's teardown, the socket would be closed with a
    `ResourceWarning` and the zygote left a zombie until this process ends.
    """
    with _zygote_lock:
        while _zygotes:
            zygote = _zygotes.pop()
            zygote.requests.close()
            if zygote.owner != os.getpid():
                continue
            try:
                pidfd = os.pidfd_open(zygote.pid)
            except OSError:
                continue
            try:
                if select.select([pidfd], [], [], _ZYGOTE_EXIT_WAIT)[0]:
                    zygote.ended()
            finally:
                os.close(pidfd)


atexit.register(_end_zygote)


def _stop(
    control: socket.socket, pid: int, pidfd: int, ptmx: int | None, spares: list[socket.socket]
) -> None:
    """End a server without waiting: it sees its control socket end, and a thread reaps it."""
    control.close()
    if ptmx is not None:
        os.close(ptmx)
    _close_all(spares)

    def reap() -> None:
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass
        finally:
            os.close(pidfd)

    threading.Thread(target=reap, name="executor-sandbox-reaper", daemon=True).start()


def _close_fds(fds: list[int]) -> None:
    while fds:
        os.close(fds.pop())


def _close_all(spares: list[socket.socket]) -> None:
    # A sandbox made ahead and never taken ends when its socket does.
    while spares:
        spares.pop().close()


async def _send(control: socket.socket, body: bytes, fds: list[int]) -> None:
    ancillary = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))] if fds else []
    while True:
        try:
            control.sendmsg([body], ancillary)
            return
        except BlockingIOError:
            await anyio.wait_writable(control)


def _recv(sock: socket.socket) -> tuple[bytes, list[int]]:
    return linux.receive(sock, 1 << 16, 4)


class _Reaped(Protocol):
    @property
    def returncode(self) -> int | None:
        """Its exit code, once it is reaped."""


class ServedCommand(Protocol):
    """What `signal_served` reads of a served command: a `Spawned` of `executor._local.process`."""

    @property
    def pid(self) -> int:
        """Its init's pid."""

    @property
    def pidfd(self) -> int | None:
        """A pidfd of its init (`None` once closed)."""

    @property
    def process(self) -> _Reaped:
        """Its init, whose `returncode` is set once it is reaped."""


async def signal_served(spawned: ServedCommand, signal: int) -> None:
    """Send `signal` to the process group of a served command, as a terminal's keys do.

    The command is its init's first child, in a session and group of its
    own; it is looked for until it is there (a signal sent the moment a
    session starts) or its init ends. Init itself ignores every signal but
    SIGKILL and SIGSTOP from outside its namespace.
    """
    delay = 0.001
    while spawned.process.returncode is None and spawned.pidfd is not None:
        # While init's pidfd is not readable, its pid is its own: the lookup
        # and the send run with no await between, after that check.
        if select.select([spawned.pidfd], [], [], 0)[0]:
            return
        if _signal_group_below(spawned.pid, signal):
            return
        await anyio.sleep(delay)
        delay = min(delay * 2, 0.02)


def _signal_group_below(init: int, signal: int) -> bool:
    """Signal the group of the command below `init`; False if it is not there yet."""
    commands = _children(init)
    if not commands:
        return False
    command = commands[0]
    try:
        pidfd = os.pidfd_open(command)
    except ProcessLookupError:
        return False
    try:
        # Read after the pidfd holds it: a pid freed and taken again between
        # the listing and the open fails this check.
        if _stat(command) != (init, command):
            return False
        try:
            # To the group the pidfd's process leads.
            signals.pidfd_send_signal(pidfd, signal, None, _PIDFD_SIGNAL_PROCESS_GROUP)
        except ProcessLookupError:
            pass  # the group ended meanwhile
        except OSError as error:
            if error.errno != errno.EINVAL:
                raise
            # A kernel older than 6.9, where the flag is unknown.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(command, signal)
    finally:
        os.close(pidfd)
    return True


def _children(pid: int) -> list[int]:
    """`pid`'s children, oldest first; those of its other threads before its main thread's.

    A Landlock init starts its command from a thread of its own (the
    command is that thread's child while it runs), and what the command
    orphans comes to init's main thread.
    """
    try:
        tasks = sorted(os.listdir(f"/proc/{pid}/task"), key=lambda task: task == str(pid))
        found = []
        for task in tasks:
            try:
                with open(f"/proc/{pid}/task/{task}/children") as file:
                    found += [int(child) for child in file.read().split()]
            except FileNotFoundError:
                if task == str(pid):
                    raise
                # That thread ended meanwhile: its children are the main thread's now.
        return found
    except FileNotFoundError:
        pass  # a kernel without CONFIG_PROC_CHILDREN, or `pid` is gone
    except OSError:
        return []
    try:
        return [child.pid for child in psutil.Process(pid).children()]
    except psutil.Error:
        return []


def _stat(pid: int) -> tuple[int, int] | None:
    """`pid`'s parent and process group, or None when it is gone."""
    stat = proc_stat(pid)
    return None if stat is None else (stat.ppid, stat.pgid)


def _spellings(paths: Iterable[str]) -> list[str]:
    """Each path, and its real path after it where symlinks make that another.

    A command may reach a folder by either (a confined command starts in the
    real one), so both must be bound; bound by one alone, the other would
    show the read-only root.
    """
    found: list[str] = []
    for path in paths:
        for spelling in (path, os.path.realpath(path)):
            if spelling not in found:
                found.append(spelling)
    return found


def _homes() -> tuple[str, ...]:
    found = []
    named = []
    for home in (os.environ.get("HOME"), _passwd_home()):
        if not home or home in named:
            continue
        named.append(home)
        home = os.path.realpath(home)
        if home != "/" and os.path.isdir(home) and home not in found:
            found.append(home)
    return tuple(found)


# The passwd entry's home, by uid, with the /etc/passwd it was read from.
_passwd_homes: dict[int, tuple[tuple[int, int, int], str | None]] = {}


def _passwd_home() -> str | None:
    """This user's home in the passwd database; looked up again whenever /etc/passwd changes.

    Asked at every sandboxed command (it is hidden from them): a lookup
    costs more than the stat that tells the file is the one read before.
    """
    uid = os.getuid()
    try:
        passwd = os.stat("/etc/passwd")
        key: tuple[int, int, int] | None = (passwd.st_ino, passwd.st_mtime_ns, passwd.st_size)
    except OSError:
        key = None
    cached = _passwd_homes.get(uid)
    if key is not None and cached is not None and cached[0] == key:
        return cached[1]
    try:
        home: str | None = pwd.getpwuid(uid).pw_dir
    except KeyError:
        home = None
    if key is not None:
        _passwd_homes[uid] = (key, home)
    return home


def find_program(program: str, env: dict[str, str], cwd: str) -> str:
    """The path `exec` would run for `program`; or raise what it would, as `subprocess.Popen` does.

    A sandbox starts a launcher first (`prlimit`), or runs the command from
    elsewhere; without this check a missing program would be the launcher's
    failure (exit 1), not the shell's "command not found" (127). The path
    found spares the sandbox the same search.

    Raises:
        FileNotFoundError: No such program.
        PermissionError: It is not executable.

    """
    if "/" in program:
        path = os.path.join(cwd, program)
        if not os.path.exists(path):
            raise FileNotFoundError(2, os.strerror(2), program)
        if os.path.isdir(path) or not os.access(path, os.X_OK):
            raise PermissionError(13, os.strerror(13), program)
        return path
    # What shutil.which finds (the first executable file in PATH order),
    # with one stat for each folder that lacks it: this runs at every command.
    search = env.get("PATH", os.defpath)
    for folder in search.split(os.pathsep) if search else ():
        path = os.path.join(folder, program)
        try:
            mode = os.stat(path).st_mode
        except (OSError, ValueError):
            continue
        if not S_ISDIR(mode) and os.access(path, os.X_OK):
            return path
    raise FileNotFoundError(2, os.strerror(2), program)


@functools.cache
def _probe() -> SandboxSupport:
    bwrap = shutil.which("bwrap")
    error = "" if bwrap is None else setuid_problem(bwrap, os.geteuid())
    if bwrap is not None and not error:
        # A trial with exactly the namespaces a sandbox uses: what works here works there.
        try:
            trial = subprocess.run(
                [bwrap, "--ro-bind", "/", "/", *_NAMESPACES, "--unshare-net", "--", "true"],
                capture_output=True,
                timeout=10,
                check=False,
                stdin=subprocess.DEVNULL,
            )
        except (OSError, subprocess.TimeoutExpired) as failure:
            error = str(failure)
        else:
            if trial.returncode:
                error = trial.stderr.decode(errors="replace").strip() or (
                    f"exit code {trial.returncode}"
                )
    cgroup, controllers = _cgroup()
    return SandboxSupport(
        bubblewrap=bwrap,
        bubblewrap_error=error,
        user_namespaces=_user_namespaces(),
        root=os.geteuid() == 0,
        landlock_abi=abi_version(),
        cgroup2=cgroup,
        cgroup_controllers=controllers,
        prlimit=shutil.which("prlimit"),
        seccomp=seccomp.supported(),
        keyrings=os.path.exists("/proc/keys"),
        tiocsti=linux.read_text("/proc/sys/dev/tty/legacy_tiocsti") != "0",
    )


def setuid_problem(bwrap: str, euid: int) -> str:
    """Why a setuid-root `bwrap` cannot serve a user `euid`'s sandbox; "" when it can.

    The sandbox server joins the namespaces `bwrap` made, which it may only
    do where the user owns them: a setuid `bwrap` makes them as root.
    """
    try:
        stat = os.stat(bwrap)
    except OSError:
        return ""
    if euid == 0 or not stat.st_mode & 0o4000 or stat.st_uid != 0:
        return ""
    return (
        f"{bwrap} is setuid root, and a sandbox it builds cannot be joined by this user; "
        "use a bwrap without the setuid bit, with unprivileged user namespaces allowed"
    )


def _user_namespaces() -> bool:
    if linux.read_text("/proc/sys/user/max_user_namespaces") in (None, "0"):
        return False
    # Debian's switch, and Ubuntu's AppArmor restriction.
    if linux.read_text("/proc/sys/kernel/unprivileged_userns_clone") == "0":
        return False
    return linux.read_text("/proc/sys/kernel/apparmor_restrict_unprivileged_userns") != "1"


def _cgroup() -> tuple[str | None, frozenset[str]]:
    """This process's cgroup v2 folder, and the controllers it may hand to children."""
    mount = None
    for line in (linux.read_text("/proc/self/mountinfo") or "").splitlines():
        left, _, right = line.partition(" - ")
        if right.split(" ", 1)[0] == "cgroup2":
            mount = left.split()[4]
            break
    if mount is None:
        return None, frozenset()
    own = next(
        (
            line[3:]
            for line in (linux.read_text("/proc/self/cgroup") or "").splitlines()
            if line.startswith("0::")
        ),
        None,
    )
    if own is None:
        return None, frozenset()
    folder = os.path.join(mount, own.lstrip("/"))
    controllers = frozenset(
        (linux.read_text(os.path.join(folder, "cgroup.controllers")) or "").split()
    )
    # Delegated means we may make a child cgroup and enable controllers for it.
    if not os.access(folder, os.W_OK) or not os.access(
        os.path.join(folder, "cgroup.subtree_control"), os.W_OK
    ):
        controllers = frozenset()
    return folder, controllers
