"""The sandbox server: starts each command of a bubblewrap sandbox in namespaces built once.

Run as `python -I -S programs.py sandbox_server CONTROL_FD` by `executor._sandbox.sandbox`
(see `executor._sandbox.programs`), with the standard library and the
`linux` and `seccomp` files beside it. It starts `bwrap` once,
with the sandbox's mounts and namespaces and `cat` as its command, then
joins that sandbox's user, mount, network, UTS and cgroup namespaces
itself (as `flatpak enter` does). From then on a command costs a fork, not
a `bwrap`, and the fork is made ahead: the server keeps a sandbox ready,
an init it forked straight into a new PID namespace (clone(2) with
CLONE_NEWPID, so no process stands between them). Init makes the command's own
mount namespace (a fresh `/proc` of its PID namespace; a fresh `/tmp`,
`/run`, `/dev/shm` and hidden homes; `/dev` read-only) and IPC namespace,
takes the executor's uid and gid back where the sandbox maps them to 0, and
waits. The command then comes straight from the executor: init sets its
rlimits, drops every capability, and spawns it in a session of its own.
When it ends, init kills and reaps what it left in the PID namespace,
writes its wait status to the status pipe, and exits.

On the control socket the executor asks for a sandbox: the message
`spare`, with a reply socket attached. The reply is init's pid (as the
executor sees it) with a pidfd of it and a socket to it attached; or a JSON
error. On that socket the executor sends the command: a JSON object (or
`@`, with a memfd holding it last), with stdin, stdout, stderr and the
status pipe's write end attached.

When the control socket ends (the executor closed it, or died), the server
kills every init it started and its `bwrap`, and exits.
"""

# This file runs in a bare interpreter (-I -S): the standard library, and the
# package's `linux` and `seccomp` loaded by their paths (`programs.load`: the
# package itself is not importable here). Everything is imported before the
# server enters the sandbox's mount namespace, where the interpreter's own
# files may be hidden.
from __future__ import annotations

import array
import contextlib
import errno
import fcntl
import gc
import json
import os
import resource
import select
import signal
import socket
import struct
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn, Protocol

if TYPE_CHECKING:
    from executor._sandbox import linux, seccomp
else:
    from executor_sandbox_programs import load

    linux = load("linux")
    seccomp = load("seccomp")

_TIOCSCTTY = 0x540E
_NS_GET_USERNS = 0xB701  # _IO(0xb7, 0x1): the user namespace that owns a namespace
# The namespaces joined, user first: it gives the capabilities the others need.
_JOINED = (
    ("user", linux.CLONE_NEWUSER),
    ("mnt", linux.CLONE_NEWNS),
    ("net", linux.CLONE_NEWNET),
    ("uts", linux.CLONE_NEWUTS),
    ("cgroup", linux.CLONE_NEWCGROUP),
)
# Parts of /proc that reach the kernel's settings: read-only, as bwrap has them.
_PROC_COVERED = ("sys", "sysrq-trigger", "irq", "bus")
_MAX_FDS = 8
# Every signal a command may have a handler for (glibc keeps 32 and 33 to itself).
_SIGNALS = tuple(
    number
    for number in signal.valid_signals()
    if number not in (signal.SIGKILL, signal.SIGSTOP) and not 32 <= number < signal.SIGRTMIN
)
# Above the largest request sent inline (64 KiB; larger ones come in a memfd),
# and below the size at which each receive would map a buffer of its own.
_REQUEST_SIZE = (1 << 16) + (1 << 12)
# The sandbox's system call filter, laid out once by the server for every init it forks.
_FILTER: list[seccomp.Prepared] = []


def quiet_signals() -> None:
    """In a child: no wakeup descriptor, and SIGCHLD back to its default."""
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)


def _drop_capabilities() -> None:
    """Drop every capability, from the bounding set too, and set no-new-privs."""
    # The server emptied the bounding set before it forked any init.
    linux.drop_capabilities(bounding_emptied=True)
    linux.prctl(linux.PR_SET_NO_NEW_PRIVS, 1, "prctl(PR_SET_NO_NEW_PRIVS)")


def _fail(status: int, message: str) -> NoReturn:
    """Report a setup failure on the status pipe (init's side) and end."""
    try:
        os.write(status, b"E" + message.encode(errors="replace"))
    finally:
        os._exit(1)


def _fresh_mounts(config: dict[str, Any]) -> None:
    """A fresh tmpfs on each of `fresh`, with the paths bound beneath it bound again.

    Runs in init's own mount namespace, after `/proc` is its own: the
    bound paths are opened before the tmpfs hides them, and bound again
    through `/proc/self/fd`.
    """
    binds: list[tuple[str, bool, int]] = []
    try:
        for path, writable in config["binds"]:
            binds.append((str(path), bool(writable), os.open(str(path), os.O_PATH | os.O_CLOEXEC)))
        for folder in config["fresh"]:
            linux.mount(
                "tmpfs", str(folder), "tmpfs", linux.MS_NOSUID | linux.MS_NODEV, "mode=0755"
            )
        for path, writable, fd in binds:
            if os.path.isdir(f"/proc/self/fd/{fd}"):
                os.makedirs(path, exist_ok=True)
            else:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                os.close(os.open(path, os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, 0o644))
            linux.mount(f"/proc/self/fd/{fd}", path, None, linux.MS_BIND | linux.MS_REC, None)
            flags = linux.MS_BIND | linux.MS_REMOUNT | linux.MS_NOSUID | linux.MS_NODEV
            linux.mount(None, path, None, flags | (0 if writable else linux.MS_RDONLY), None)
    finally:
        for _, _, fd in binds:
            os.close(fd)


def _init(config: dict[str, Any], channel: socket.socket) -> None:
    """Pid 1 of a command's PID namespace: set it up, await the command, run it, report its end."""
    try:
        linux.prctl(linux.PR_SET_PDEATHSIG, signal.SIGKILL, "prctl(PR_SET_PDEATHSIG)")
        # Pid 1 takes no signal it has no handler for from its namespace:
        # a command's `kill -INT 1` must not end the sandbox early.
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.setsid()
        linux.unshare(linux.CLONE_NEWNS | linux.CLONE_NEWIPC)
        linux.mount(None, "/", None, linux.MS_REC | linux.MS_PRIVATE, None)
        linux.mount(
            "proc", "/proc", "proc", linux.MS_NOSUID | linux.MS_NODEV | linux.MS_NOEXEC, None
        )
        for name in _PROC_COVERED:
            path = f"/proc/{name}"
            if os.path.exists(path):
                linux.mount(path, path, None, linux.MS_BIND | linux.MS_REC, None)
                flags = (
                    linux.MS_BIND
                    | linux.MS_REMOUNT
                    | linux.MS_NOSUID
                    | linux.MS_NODEV
                    | linux.MS_NOEXEC
                    | linux.MS_RDONLY
                )
                linux.mount(None, path, None, flags, None)
        _fresh_mounts(config)
        # /dev is the sandbox's, shared by its commands: read-only for each
        # (its devices are mounts of their own, and /dev/shm a fresh tmpfs).
        linux.mount(
            None,
            "/dev",
            None,
            linux.MS_BIND | linux.MS_REMOUNT | linux.MS_RDONLY | linux.MS_NOSUID,
            None,
        )
        _own_ids(config)
        # Keys the executor's process holds stay its own: the command starts
        # in an empty session keyring (and the filter denies every keyring call).
        seccomp.fresh_session_keyring()
        # Nothing of the host's for the command to reach through init: not
        # the executor's stderr (init's own 0-2 are /dev/null), and, as init
        # is not dumpable, not init's memory or descriptors at all.
        null = os.open(os.devnull, os.O_RDWR)
        for target in (0, 1, 2):
            os.dup2(null, target)
        os.close(null)
        # Init needs no capability past its mounts: it waits without any.
        _drop_capabilities()
        linux.prctl(linux.PR_SET_DUMPABLE, 0, "prctl(PR_SET_DUMPABLE)")
        if _FILTER:
            # Last: init itself then only waits, spawns and kills, which it allows.
            seccomp.install(_FILTER[0])
        keep = channel.fileno()
        for fd in map(int, os.listdir("/proc/self/fd")):
            if fd > 2 and fd != keep:
                with contextlib.suppress(OSError):
                    os.close(fd)
    except Exception as error:
        with contextlib.suppress(OSError):
            channel.send(json.dumps({"error": f"cannot set up the sandbox: {error}"}).encode())
        os._exit(1)
    serve_command(channel, _end_namespace)


def serve_command(channel: socket.socket, end: Callable[[], None]) -> NoReturn:
    """Init's second half: say it is ready, await the command on `channel`, run it, report its end.

    `end` kills and reaps whatever the command left once it has exited.
    """
    channel.send(b"ready")
    try:
        data, fds = receive(channel)
    except OSError:
        os._exit(0)  # the server ended
    channel.close()
    taken = read_request(data, fds)
    if taken is None:
        os._exit(0)  # the server ended, or sent nothing to run
    request, (stdin, stdout, stderr, status) = taken
    for number, value, name in request["rlimits"]:
        try:
            resource.setrlimit(number, (value, value))
        except (OSError, ValueError) as error:
            _fail(status, f"cannot set the sandbox's {name}={value}: {error}")
    failed = enter(request, stderr)
    if failed is not None:
        _report(status, failed)
    try:
        command = spawn(request, stdin, stdout, stderr)
    except OSError as error:
        _report(status, spawn_failed(request, error, stderr))
    for fd in (stdin, stdout, stderr):
        os.close(fd)
    # Init reaps whatever ends below it (in its PID namespace, or, as a
    # child subreaper, what is orphaned below it). The command's end is the
    # sandbox's: what it left running is killed, and reaped, before the
    # status goes out, so nothing of the command outlives its report.
    wait_status = await_command(command)
    if wait_status is None:
        _fail(status, "the command vanished")
    end()
    _report(status, wait_status)


def read_request(data: bytes, fds: list[int]) -> tuple[dict[str, Any], tuple[int, ...]] | None:
    """A command's request, and its stdin, stdout, stderr and status pipe; None if there is none.

    The descriptors of a message that holds no request are closed.
    """
    if len(fds) not in (4, 5) or not data:
        for fd in fds:
            os.close(fd)
        return None
    if len(fds) == 5:
        # A large request came in a memfd.
        data = _read_all(fds[4])
        os.close(fds[4])
    return json.loads(data), tuple(fds[:4])


def enter(request: dict[str, Any], stderr: int) -> int | None:
    """Enter the command's folder; on failure say why on its stderr, and give its wait status."""
    cwd = str(request["cwd"])
    try:
        os.chdir(cwd)
    except OSError as error:
        os.write(stderr, f"executor: cannot enter {cwd}: {error.strerror}\n".encode())
        return 1 << 8
    return None


def spawn(request: dict[str, Any], stdin: int, stdout: int, stderr: int) -> int:
    """Start the command of `request` in a session of its own; its pid.

    Raises:
        OSError: It could not be started (see `spawn_failed`).

    """
    argv = [str(arg) for arg in request["argv"]]
    env: dict[str, str] = request["env"]
    # Where the executor found the program, sparing the PATH search.
    program = request.get("program") or argv[0]
    if request["pty"]:
        return _fork_on_terminal(program, argv, env, stdin)
    if "/" not in program:
        _search_path(env)
    actions = [
        (os.POSIX_SPAWN_DUP2, stdin, 0),
        (os.POSIX_SPAWN_DUP2, stdout, 1),
        (os.POSIX_SPAWN_DUP2, stderr, 2),
    ]
    options: dict[str, Any] = {"setsid": True, "setsigdef": _SIGNALS, "setsigmask": ()}
    start = os.posix_spawn if "/" in program else os.posix_spawnp
    try:
        return start(program, argv, env, file_actions=actions, **options)
    except (FileNotFoundError, PermissionError):
        if program == argv[0]:
            raise
        # The host's find is a hint: what the sandbox hides, or a
        # relative PATH entry, makes the search inside the one to trust.
        _search_path(env)
        return os.posix_spawnp(argv[0], argv, env, file_actions=actions, **options)


def spawn_failed(request: dict[str, Any], error: OSError, stderr: int) -> int:
    """Say on the command's stderr why it did not start; the wait status the shell would give."""
    os.write(stderr, f"executor: {request['argv'][0]}: {error.strerror}\n".encode())
    return (127 if error.errno == errno.ENOENT else 126) << 8


def await_command(command: int) -> int | None:
    """Reap children until `command` ends; its wait status (None: it was never ours)."""
    while True:
        try:
            pid, wait_status = os.wait()
        except InterruptedError:
            continue
        except ChildProcessError:
            return None
        if pid == command:
            return wait_status


def _own_ids(config: dict[str, Any]) -> None:
    """Take the executor's uid and gid back, in a user namespace of init's own.

    Run by a user, the namespace that owns the sandbox's mounts maps that
    user to 0; bwrap runs its commands in one more that maps the user back,
    and so does this, so `id` says what it says outside.
    """
    uid, gid = os.getuid(), os.getgid()
    if (uid, gid) == (config["uid"], config["gid"]):
        return
    linux.unshare(linux.CLONE_NEWUSER)
    for name, text in (
        ("setgroups", "deny"),
        ("uid_map", f"{config['uid']} {uid} 1\n"),
        ("gid_map", f"{config['gid']} {gid} 1\n"),
    ):
        with open(f"/proc/self/{name}", "w") as file:
            file.write(text)


def _read_all(fd: int) -> bytes:
    parts = []
    offset = 0
    while chunk := os.pread(fd, 1 << 20, offset):
        parts.append(chunk)
        offset += len(chunk)
    return b"".join(parts)


def _search_path(env: dict[str, str]) -> None:
    """Make `env`'s PATH the one posix_spawnp searches (this process's own)."""
    if "PATH" in env:
        os.putenv("PATH", env["PATH"])
    else:
        os.unsetenv("PATH")


def _end_namespace() -> None:
    """Kill every other process of this PID namespace, and reap them all."""
    # Every process of the namespace descends from init, and an orphan is
    # init's child: with no child left, init is alone.
    try:
        if os.waitpid(-1, os.WNOHANG) == (0, 0):
            pass  # a child still runs
    except ChildProcessError:
        return
    while True:
        others = [int(name) for name in os.listdir("/proc") if name.isdigit() and name != "1"]
        for pid in others:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        try:
            while os.waitpid(-1, 0):
                pass
        except ChildProcessError:
            pass
        if not others:
            return


def _report(status: int, wait_status: int) -> NoReturn:
    os.write(status, b"S" + struct.pack("i", wait_status))
    os._exit(0)


def _fork_on_terminal(program: str, argv: list[str], env: dict[str, str], terminal: int) -> int:
    """Fork the command into a session of its own whose controlling terminal is `terminal`."""
    pid = os.fork()
    if pid:
        return pid
    try:
        os.setsid()
        for target in (0, 1, 2):
            os.dup2(terminal, target)
        os.closerange(3, os.sysconf("SC_OPEN_MAX"))
        fcntl.ioctl(0, _TIOCSCTTY, 0)
        for number in _SIGNALS:
            signal.signal(number, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_SETMASK, [])
        if "/" in program:
            # The host's find is a hint: on failure, the search inside decides.
            with contextlib.suppress(FileNotFoundError, PermissionError):
                os.execve(program, argv, env)
        os.execvpe(argv[0], argv, env)
    except OSError as error:
        os.write(2, f"executor: {argv[0]}: {error.strerror}\n".encode())
        os._exit(127 if error.errno == errno.ENOENT else 126)
    finally:
        os._exit(126)


def receive(sock: socket.socket) -> tuple[bytes, list[int]]:
    """One request (or reply) from `sock`, with the descriptors it carried."""
    return linux.receive(sock, _REQUEST_SIZE, _MAX_FDS)


def _start_holder(config: dict[str, Any]) -> tuple[int, int]:
    """Start `bwrap` with `cat` as its command; return its pid and the sandbox's init pid."""
    info_r, info_w = os.pipe()
    to_cat_r, to_cat_w = os.pipe()
    from_cat_r, from_cat_w = os.pipe()
    errors_r, errors_w = os.pipe()
    os.set_inheritable(info_w, True)
    argv = [*config["bwrap"], "--info-fd", str(info_w), "--die-with-parent"]
    program = -1
    if config.get("filter") is not None:
        # The process bwrap leaves in the sandbox (`cat`) runs under the filter too.
        program = os.memfd_create("executor-seccomp", 0)
        os.set_inheritable(program, True)
        os.write(program, bytes.fromhex(config["filter"]))
        os.lseek(program, 0, os.SEEK_SET)
        argv += ["--seccomp", str(program)]
    argv += ["--", config["cat"]]
    pid = os.fork()
    if pid == 0:
        try:
            os.dup2(to_cat_r, 0)
            os.dup2(from_cat_w, 1)
            os.dup2(errors_w, 2)
            os.execv(argv[0], argv)
        finally:
            os._exit(127)
    for fd in (info_w, to_cat_r, from_cat_w, errors_w):
        os.close(fd)
    if program >= 0:
        os.close(program)
    report = b""
    while chunk := os.read(info_r, 4096):
        report += chunk
        if b"}" in report:
            break
    os.close(info_r)
    if b"}" in report:
        init = json.loads(report)["child-pid"]
        # `cat` answers once it runs, which is after the sandbox is all set up.
        os.write(to_cat_w, b"x")
        answer = os.read(from_cat_r, 1)
    if b"}" not in report or answer != b"x":
        os.waitpid(pid, 0)
        os.set_blocking(errors_r, False)
        try:
            said = os.read(errors_r, 65536).decode(errors="replace").strip()
        except BlockingIOError:
            said = ""
        raise OSError(errno.EIO, said or "bwrap ended before the sandbox was set up")
    os.close(from_cat_r)
    os.close(errors_r)
    # Kept open: `cat`, and so the sandbox, ends when the server does.
    return pid, init


def _join(init: int) -> None:
    """Enter the sandbox's namespaces but its PID and IPC ones.

    The user namespace joined is the one that owns the mount namespace:
    run by a user, bwrap runs its command in a second one nested in that,
    where no capability over the mounts is to be had.
    """
    opened = []
    for name, kind in _JOINED:
        path = f"/proc/{init}/ns/{name}"
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        if kind == linux.CLONE_NEWUSER:
            mounts = os.open(f"/proc/{init}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
            try:
                os.close(fd)
                fd = fcntl.ioctl(mounts, _NS_GET_USERNS)
            finally:
                os.close(mounts)
        if os.fstat(fd).st_ino == os.stat(f"/proc/self/ns/{name}").st_ino:
            os.close(fd)
        else:
            opened.append((fd, kind))
    for fd, kind in opened:
        linux.setns(fd, kind)
        os.close(fd)
    os.chdir("/")


class _Warm:
    """A sandbox made ahead of its command: its init's pid, and the channel to it.

    Init is the server's own child, forked straight into a new PID
    namespace (the server's namespace for its children stays its own).
    """

    def __init__(self, config: dict[str, Any]) -> None:
        self.channel, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.pid = linux.fork_into_pid_namespace()
        if self.pid == 0:
            try:
                self.channel.close()
                quiet_signals()
                _init(config, theirs)
            finally:
                os._exit(1)  # a child never runs on into the server's code
        theirs.close()
        self.pidfd: int | None = os.pidfd_open(self.pid)
        self.set_up = False

    def ready(self) -> tuple[int, int]:
        """Init's pid and a pidfd of it, once init is set up.

        Raises:
            OSError: Init failed; its reason, when it gave one.

        """
        while not self.set_up:
            data, fds = receive(self.channel)
            for fd in fds:
                os.close(fd)
            if data == b"ready":
                self.set_up = True
            else:
                reason = json.loads(data).get("error") if data.startswith(b"{") else None
                raise OSError(errno.EIO, reason or "the sandbox could not be set up")
        assert self.pidfd is not None
        return self.pid, self.pidfd


def main(args: list[str]) -> None:
    """`CONTROL_FD`: serve requests on the control socket until it ends."""
    control = socket.socket(fileno=int(args[0]))
    data, _ = receive(control)
    config = json.loads(data)
    # No parent-death signal here: it follows the thread that started the
    # server, not the process. The control socket ends when the process does.
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    children: set[int] = set()
    holder = 0
    try:
        holder, init = _start_holder(config)
        _join(init)
        # The server execs nothing from here on: each init it forks starts
        # with an empty bounding set (its capabilities in the sandbox's user
        # namespace stay, for the namespaces and mounts it makes).
        linux.empty_bounding_set()
        if config.get("filter") is not None:
            _FILTER.append(seccomp.Prepared(bytes.fromhex(config["filter"])))
        # What the interpreter holds now stays put: the garbage collector
        # does not touch it again, in the server or in a fork of it.
        gc.freeze()
        warm = [_Warm(config) for _ in range(int(config.get("warm", 1)))]
        children.update(sandbox.pid for sandbox in warm)
        warm[0].ready()  # a sandbox that cannot be made fails here, not at the first command
    except OSError as error:
        control.sendall(json.dumps({"error": str(error)}).encode())
        for pid in (*children, holder):
            if pid:
                os.kill(pid, signal.SIGKILL)
        return
    # The sandbox's own pty multiplexer: a terminal opened through it is one
    # of the sandbox's /dev/pts, which its commands' ttyname() finds.
    ptmx = os.open("/dev/pts/ptmx", os.O_PATH | os.O_CLOEXEC)
    control.sendmsg([b"{}"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [ptmx]))])
    os.close(ptmx)
    retiring = False
    try:
        while True:
            ready, _, _ = select.select([control.fileno(), wake_r], [], [])
            if wake_r in ready:
                _reap(wake_r, children, holder)
            if control.fileno() in ready:
                data, fds = receive(control)
                if not data:
                    return
                if data == b"retire":
                    # No more commands: the sandboxes made ahead end (their
                    # init sees its channel end), and the server once the
                    # commands it runs have.
                    retiring = True
                    for sandbox in warm:
                        sandbox.channel.close()
                    warm = []
                elif data != b"spare" or len(fds) != 1 or retiring:
                    for fd in fds:
                        os.close(fd)
                else:
                    sandbox = warm.pop(0) if warm else _Warm(config)
                    children.add(sandbox.pid)
                    hand_over(sandbox, fds[0])
                    while len(warm) < int(config.get("warm", 1)):
                        warm.append(_Warm(config))
                        children.add(warm[-1].pid)
            if retiring and not children:
                return
    except _HolderGone:
        return
    finally:
        for pid in (*children, holder):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


class _HolderGone(Exception):
    pass


def _reap(wake: int, children: set[int], holder: int) -> None:
    while True:
        try:
            if not os.read(wake, 512):
                break
        except BlockingIOError:
            break
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        if pid == holder:
            raise _HolderGone
        children.discard(pid)


class Made(Protocol):
    """A sandbox made ahead of its command (this server's, or the Landlock launcher's)."""

    channel: socket.socket
    pidfd: int | None

    def ready(self) -> tuple[int, int]:
        """Init's pid and a pidfd of it, once init is set up."""
        ...


def hand_over(sandbox: Made, reply_fd: int) -> None:
    """Send a made sandbox to the executor: its init's pid, a pidfd of it, and its channel.

    The executor sends the command on the channel, straight to init.
    """
    reply = socket.socket(fileno=reply_fd)
    try:
        try:
            init, pidfd = sandbox.ready()
        except OSError as error:
            with contextlib.suppress(OSError):
                reply.sendall(json.dumps({"error": str(error)}).encode())
            return
        fds = array.array("i", [pidfd, sandbox.channel.fileno()])
        # If the executor is gone, so is the sandbox: its channel ends here.
        with contextlib.suppress(OSError):
            reply.sendmsg([struct.pack("i", init)], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)])
    finally:
        reply.close()
        sandbox.channel.close()
        if sandbox.pidfd is not None:
            os.close(sandbox.pidfd)
