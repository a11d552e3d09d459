"""`Sandbox`: the kernel keeps a `LocalExecutor`'s commands in bounds.

Two backends, both applied to every process a sandboxed `LocalExecutor`
starts (`exec_cmd`, streaming, sessions and PTYs, which share one spawn path):

- **bubblewrap** (`bwrap`, Debian package `bubblewrap`): a mount namespace
  whose root is the host's, read-only; the writable paths bound read-write
  over it; a private `/tmp`; an empty `/run` (no service sockets); the home
  folder replaced by an empty one; a PID
  namespace, so the command's pid 1 takes every process of the sandbox with
  it when it ends (a daemon that double-forks and drops every tag dies too);
  a network namespace of its own (only a private loopback) unless the network
  is asked for; user (with no capability, even for root), IPC and UTS
  namespaces; `--die-with-parent`, and a new session (on a PTY the command
  makes one more, below the namespace's init, and takes the terminal as its
  controlling one). A session's signals go to the command's process group
  inside the sandbox, found below `bwrap` (`signal_bubblewrapped`), as a
  terminal's keys do.
- **Landlock** (Linux 5.13+, no program needed; see `executor._landlock`):
  the same filesystem rules through the Landlock system calls; with ABI 4 no
  TCP `bind` or `connect` unless the network is asked for (run by root, a
  network namespace of its own as well); with ABI 6 no signal to a process
  outside the sandbox. It has no private `/tmp` (set `writable` to give
  one), no PID namespace, and, run by a user, its network rule covers TCP
  only.

Resource limits are rlimits set before the command starts, so every process
in the sandbox inherits them: under bubblewrap by the executor itself, on
`bwrap`'s child while it waits (`--info-fd`, `--block-fd`); under Landlock
through util-linux's `prlimit`. `processes`
(`RLIMIT_NPROC`) does not bind uid 0, so a sandbox that asks for it refuses
to run as root. Memory and process limits through cgroup v2 (`memory`,
`pids`) need the controllers delegated to this user.

A sandbox never falls back to running unconfined: `LocalExecutor` checks it
against `Sandbox.probe()` when it is built and raises `ExecutorError`, naming
every guarantee the machine cannot give and how to get it.
"""

from __future__ import annotations

import contextlib
import contextvars
import errno
import functools
import json
import os
import pwd
import resource
import shutil
import signal as signals
import subprocess
from collections.abc import Iterable, Iterator
from typing import Any, Literal

import anyio
import attrs
import psutil

from executor._commands import StrPath
from executor._errors import ExecutorError
from executor._landlock import LandlockRules, abi_version
from executor._landlock import _read_text as _read
from executor._process import Spawned, proc_stat

__all__ = ["Backend", "Sandbox", "SandboxSupport", "read_only_commands", "running_read_only"]

Backend = Literal["auto", "bubblewrap", "landlock"]
_BACKENDS = ("auto", "bubblewrap", "landlock")
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

_read_only: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "executor_sandbox_read_only", default=False
)


def running_read_only() -> bool:
    """Whether the commands started now must see every path read-only (`ReadOnly` asked)."""
    return _read_only.get()


@contextlib.contextmanager
def read_only_commands() -> Iterator[None]:
    """Within this block, sandboxed executors start commands with nothing writable.

    `ReadOnly` wraps its calls in it. A context variable carries the request
    through any wrapper in between (scopes, policies, observers), and into
    the tasks and threads they start. An executor whose `enforces_read_only`
    is true promises to honour it: `ReadOnly` runs shell and argv commands
    on such an executor only.
    """
    token = _read_only.set(True)
    try:
        yield
    finally:
        _read_only.reset(token)


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
        raise ValueError(f"backend must be one of {', '.join(_BACKENDS)}; got {value!r}")


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

    """

    bubblewrap: str | None
    bubblewrap_error: str
    user_namespaces: bool
    root: bool
    landlock_abi: int
    cgroup2: str | None
    cgroup_controllers: frozenset[str]
    prlimit: str | None

    @property
    def bubblewrap_works(self) -> bool:
        """Whether `bwrap` is installed and a trial sandbox ran."""
        return self.bubblewrap is not None and not self.bubblewrap_error

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
        backend: `"bubblewrap"`, `"landlock"`, or `"auto"`: bubblewrap where
            it works, else Landlock where it can give what is asked.
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

    """

    backend: Backend = attrs.field(default="auto", validator=_backend)
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
        # Under bubblewrap the executor sets them itself (`limit_bubblewrapped`).
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
        return [
            (number, value)
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
        handshake: tuple[int, int] | None = None,
    ) -> list[str]:
        """The whole command line that runs `argv` under bubblewrap in `cwd`.

        With rlimits asked for and a `handshake` (the write end of a pipe
        for `--info-fd` and the read end of one for `--block-fd`, both
        passed to `bwrap`), the sandbox waits for `limit_bubblewrapped` to
        set them; without one, `prlimit` runs `bwrap` with them.

        Raises:
            ExecutorError: A writable or readable path does not exist.

        """
        assert support.bubblewrap is not None
        limited = handshake is not None and bool(self.rlimits())
        args = [
            *([] if limited else self.rlimit_argv(support)),
            support.bubblewrap,
            "--ro-bind",
            "/",
            "/",
            "--dev",
            "/dev",
            "--proc",
            "/proc",
            "--tmpfs",
            "/tmp",
        ]
        # /run holds the host's service sockets (docker.sock, D-Bus, systemd):
        # a read-only mount does not stop a connect(), so /run is emptied.
        if os.path.isdir("/run") and not os.path.islink("/run"):
            args += ["--tmpfs", "/run"]
        for folder in self.hidden():
            args += ["--tmpfs", folder]
        # Bound after the tmpfs mounts, so what lies in /tmp or the home shows through.
        self.check_paths(workdir, read_only=read_only)
        writable = _spellings(self.writable_paths(workdir, read_only=read_only))
        for path in _spellings(self.readable_paths(workdir)):
            # A path bound writable below needs no read-only mount first (the
            # workdir, usually): each mount costs the sandbox's start time.
            if path not in writable and os.path.exists(path):
                args += ["--ro-bind", path, path]
        for path in writable:
            args += ["--bind", path, path]
        args += _NAMESPACES
        if not self.network:
            args.append("--unshare-net")
        # A session of its own, made by the namespace's init, which forks the
        # command into it: no terminal of the host's to reach (TIOCSTI), and
        # no group shared with `bwrap`, which would end the sandbox on a
        # session's SIGINT. On a pty (which the spawn then leaves free) the
        # command makes a session of its own below init's and takes the pty
        # as its controlling terminal, so the terminal's keys reach its group.
        if limited:
            assert handshake is not None
            args += ["--info-fd", str(handshake[0]), "--block-fd", str(handshake[1])]
        args += ["--die-with-parent", "--new-session", "--chdir", cwd, "--"]
        if pty:
            args += [_setsid(), "--ctty", "--"]
        args += argv
        return args

    def landlock_rules(self, workdir: str, *, read_only: bool) -> LandlockRules:
        """The Landlock rules for commands run from `workdir`."""
        return LandlockRules(
            writable=self.writable_paths(workdir, read_only=read_only),
            readable=self.readable_paths(workdir),
            hidden=self.hidden(),
            network=self.network,
        )


async def limit_bubblewrapped(
    spawned: Spawned, info: int, block: int, limits: list[tuple[int, int]]
) -> None:
    """Set the rlimits on the sandbox `bwrap` started, then let it go on.

    `bwrap` (`--info-fd`) reports the pid of its child, the namespace's init
    to be, and that child waits (`--block-fd`) until a byte arrives: set on
    it before it forks the command, the limits bind every process of the
    sandbox, with no `prlimit` program run in front (an exec less). The
    caller closes `info` and `block`; it must kill the tree when this
    raises, since a child that reads the end of `block` goes on unlimited.

    Raises:
        ExecutorError: A limit could not be set (above the hard limit, say).

    """
    report = b""
    while b"}" not in report:
        try:
            data = os.read(info, 4096)
        except BlockingIOError:
            await anyio.wait_readable(info)
            continue
        if not data:
            return  # `bwrap` failed before its child; it says why and exits
        report += data
    child = json.loads(report)["child-pid"]
    # The child waits on `block`, so it cannot have ended on its own; a kill
    # from elsewhere could free its pid, which this check catches.
    if (_stat(child) or (0, 0))[0] != spawned.pid:
        raise ExecutorError(f"the sandbox's process {child} ended before its limits were set")
    for number, value in limits:
        try:
            resource.prlimit(child, number, (value, value))
        except (OSError, ValueError) as error:
            name = next(key for key, known in _RESOURCES.items() if known == number)
            raise ExecutorError(f"cannot set the sandbox's {name}={value}: {error}") from error
    os.write(block, b"x")


@functools.cache
def _setsid() -> str:
    found = shutil.which("setsid")
    if found is None:
        raise ExecutorError("a PTY under bubblewrap needs setsid (util-linux), not found in PATH")
    return found


# pidfd_send_signal's flag (Linux 6.9+): to the target's process group.
_PIDFD_SIGNAL_PROCESS_GROUP = 4


async def signal_bubblewrapped(spawned: Spawned, signal: int) -> None:
    """Send `signal` to the process group of the command `bwrap` runs, as a terminal's keys do.

    `spawned` is `bwrap`, which forks the PID namespace's init, which makes
    a session and forks the command into it (on a pty the command then makes
    its own). The command is init's first child; it is looked for until it
    is there (a signal sent the moment a session starts) or `bwrap` ends.
    Init itself, in the group, ignores every signal but SIGKILL and SIGSTOP
    from outside its namespace when it has no handler, so the sandbox lives
    on unless the command dies of it.
    """
    delay = 0.001
    # While `bwrap` is unreaped its pid is ours: the lookup and the send run
    # with no await between, after that check.
    while spawned.process.returncode is None:
        if _signal_command(spawned.pid, signal):
            return
        await anyio.sleep(delay)
        delay = min(delay * 2, 0.02)


def _signal_command(bwrap: int, signal: int) -> bool:
    """Signal the group of the command below `bwrap`'s init; False if it is not there yet."""
    inits = _children(bwrap)
    if not inits:
        return False
    init = inits[0]
    commands = _children(init)
    if not commands:
        return False
    command = commands[0]
    # The group is init's session's, or on a pty the command's own (once it
    # has called setsid); either way its leader is one of the two.
    group = (_stat(command) or (0, 0))[1]
    parents = {init: bwrap, command: init}
    if group not in parents:
        return False
    try:
        pidfd = os.pidfd_open(group)
    except ProcessLookupError:
        return False
    try:
        # Read after the pidfd holds the leader: a pid freed and taken again
        # between the listing and the open fails these checks (unless it was
        # taken inside this very sandbox).
        leader = _stat(group)
        if leader is None or leader != (parents[group], group):
            return False
        if group == command and (_stat(init) or (0, 0))[0] != bwrap:
            return False
        try:
            # To the group the pidfd's process leads.
            signals.pidfd_send_signal(pidfd, signal, None, _PIDFD_SIGNAL_PROCESS_GROUP)
        except ProcessLookupError:
            pass  # the group ended meanwhile, and the sandbox with it
        except OSError as error:
            if error.errno != errno.EINVAL:
                raise
            # A kernel older than 6.9, where the flag is unknown.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(group, signal)
    finally:
        os.close(pidfd)
    return True


def _children(pid: int) -> list[int]:
    """`pid`'s children, oldest first."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as file:
            return [int(child) for child in file.read().split()]
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
    for home in (os.environ.get("HOME"), _passwd_home()):
        if not home:
            continue
        home = os.path.realpath(home)
        if home != "/" and os.path.isdir(home) and home not in found:
            found.append(home)
    return tuple(found)


def _passwd_home() -> str | None:
    try:
        return pwd.getpwuid(os.getuid()).pw_dir
    except KeyError:
        return None


def find_program(program: str, env: dict[str, str], cwd: str) -> None:
    """Raise what `exec` would for `program`, as `subprocess.Popen` does.

    A sandbox starts a launcher first (`bwrap`, `prlimit`); without this check
    a missing program would be the launcher's failure (exit 1), not the
    shell's "command not found" (127).

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
        return
    if shutil.which(program, path=env.get("PATH", os.defpath)) is None:
        raise FileNotFoundError(2, os.strerror(2), program)


@functools.cache
def _probe() -> SandboxSupport:
    bwrap = shutil.which("bwrap")
    error = ""
    if bwrap is not None:
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
    )


def _user_namespaces() -> bool:
    if _read("/proc/sys/user/max_user_namespaces") in (None, "0"):
        return False
    # Debian's switch, and Ubuntu's AppArmor restriction.
    if _read("/proc/sys/kernel/unprivileged_userns_clone") == "0":
        return False
    return _read("/proc/sys/kernel/apparmor_restrict_unprivileged_userns") != "1"


def _cgroup() -> tuple[str | None, frozenset[str]]:
    """This process's cgroup v2 folder, and the controllers it may hand to children."""
    mount = None
    for line in (_read("/proc/self/mountinfo") or "").splitlines():
        left, _, right = line.partition(" - ")
        if right.split(" ", 1)[0] == "cgroup2":
            mount = left.split()[4]
            break
    if mount is None:
        return None, frozenset()
    own = next(
        (
            line[3:]
            for line in (_read("/proc/self/cgroup") or "").splitlines()
            if line.startswith("0::")
        ),
        None,
    )
    if own is None:
        return None, frozenset()
    folder = os.path.join(mount, own.lstrip("/"))
    controllers = frozenset((_read(os.path.join(folder, "cgroup.controllers")) or "").split())
    # Delegated means we may make a child cgroup and enable controllers for it.
    if not os.access(folder, os.W_OK) or not os.access(
        os.path.join(folder, "cgroup.subtree_control"), os.W_OK
    ):
        controllers = frozenset()
    return folder, controllers
