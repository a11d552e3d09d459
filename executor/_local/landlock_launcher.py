"""The Landlock launcher: starts each command of one rule set, from a process of its own.

Run as `python -I -S landlock_launcher.py zygote REQUESTS_FD` by
`executor._local.sandbox` (`CONTROL_FD` instead runs one launcher), with an empty environment and
the standard library only (the package's `linux`, `seccomp` and
`sandbox_server` loaded by their paths). The Landlock system calls are made
here (the rules are `executor._local.landlock.LandlockRules`, as JSON).

The executor's process starts one zygote (`zygote`), which imports all
this once and forks a launcher for each rule set (`launch`): a launcher
costs a fork, not an interpreter's start. A launcher speaks the bubblewrap
server's protocol (see `executor._local.sandbox_server`), so the executor
starts a Landlock command as it starts a bubblewrap one:

- at start it says its pid (with a pidfd of itself), reads the rules,
  makes (run by root) a network namespace without network and an empty
  `/run`, builds the Landlock rule set once, becomes a child subreaper and
  not dumpable, and answers `{}` with an `O_PATH` descriptor of `/dev/ptmx`;
- ahead of each command it forks an init, which joins a fresh session
  keyring, makes (run by root) an IPC namespace of its own, becomes a child
  subreaper, drops every capability, restricts itself with the rule set (a
  Landlock domain of its own, shared with no other command), stops being
  dumpable, installs the system call filter, and waits for its command;
- on `spare` it hands a made init to the executor, which sends the command
  straight to it; init runs it (`sandbox_server.serve_command`) and, when
  it exits, kills and reaps every process still below it before it reports.

Nothing a command can reach holds the executor's memory or environment:
the executor's process is in no Landlock domain (a command may not trace
it, read its `/proc` files or signal it), the launcher neither, and init,
in the command's domain, is not dumpable. A process orphaned when its init
was killed (a timeout, `aclose`) comes to the launcher, as subreaper, which
kills it at once; when the control socket ends the launcher kills every
init and everything below them, and exits.
"""

from __future__ import annotations

import array
import contextlib
import ctypes
import errno
import json
import os
import select
import signal
import socket
import stat
import sys
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from executor._local import linux, sandbox_server, seccomp
else:

    def _sibling(name: str) -> Any:
        """A module of the package loaded by its file, the package itself not importable here.

        Each is loaded once (the server and the launcher share them), through
        the loader the interpreter starts with, which keeps the compiled
        code in `__pycache__` as an import does.
        """
        import types
        from importlib.machinery import SourceFileLoader

        key = f"executor_sandbox_{name}"
        if key in sys.modules:
            return sys.modules[key]
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), f"{name}.py")
        loader = SourceFileLoader(key, path)
        module = types.ModuleType(key)
        module.__file__ = path
        module.__loader__ = loader
        # Registered first: what the module defines may look itself up while made.
        sys.modules[key] = module
        loader.exec_module(module)
        return module

    linux = _sibling("linux")
    seccomp = _sibling("seccomp")
    sandbox_server = _sibling("sandbox_server")

_PR_SET_CHILD_SUBREAPER = 36

# The system call numbers are the same on every architecture (the generic table).
_CREATE_RULESET: Final = 444
_ADD_RULE: Final = 445
_RESTRICT_SELF: Final = 446
_CREATE_RULESET_VERSION: Final = 1
_RULE_PATH_BENEATH: Final = 1
_RULE_NET_PORT: Final = 2

_EXECUTE: Final = 1 << 0
_WRITE_FILE: Final = 1 << 1
_READ_FILE: Final = 1 << 2
_READ_DIR: Final = 1 << 3
_REMOVE_DIR: Final = 1 << 4
_REMOVE_FILE: Final = 1 << 5
_MAKE_CHAR: Final = 1 << 6
_MAKE_DIR: Final = 1 << 7
_MAKE_REG: Final = 1 << 8
_MAKE_SOCK: Final = 1 << 9
_MAKE_FIFO: Final = 1 << 10
_MAKE_BLOCK: Final = 1 << 11
_MAKE_SYM: Final = 1 << 12
_REFER: Final = 1 << 13  # ABI 2
_TRUNCATE: Final = 1 << 14  # ABI 3
_BIND_TCP: Final = 1 << 0  # ABI 4
_CONNECT_TCP: Final = 1 << 1  # ABI 4
_SCOPE_ABSTRACT_UNIX_SOCKET: Final = 1 << 0  # ABI 6
_SCOPE_SIGNAL: Final = 1 << 1  # ABI 6

_READ: Final = _EXECUTE | _READ_FILE | _READ_DIR
# The rights that only make sense on a file (a rule on a file may hold no others).
_FILE_RIGHTS: Final = _EXECUTE | _WRITE_FILE | _READ_FILE | _TRUNCATE
# Device files written by ordinary programs; writing them changes no file.
_DEVICES: Final = (
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/tty",
    "/dev/ptmx",
    "/dev/pts",
)


class _RulesetAttr(ctypes.Structure):
    _fields_ = (
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    )


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = (("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32))


_syscall = linux.libc.syscall
_check = linux.check


def _visible(hidden: Iterable[str]) -> list[str]:
    """Folders and files that together cover everything but `hidden` (and symlinks).

    Landlock grants by subtree, so hiding `/root` means granting every
    sibling on the way down to it instead of `/`. Symlinks are left out: a
    rule is about the file a path ends at, whatever links led there.
    """
    found: list[str] = []

    def split(folder: str, below: list[str]) -> None:
        if not below:
            found.append(folder)
            return
        if folder in below:
            return
        try:
            entries = list(os.scandir(folder))
        except OSError:
            return
        for entry in entries:
            child = entry.path
            inside = [h for h in below if h == child or h.startswith(child.rstrip("/") + "/")]
            if entry.is_symlink():
                continue
            split(child, inside)

    split("/", [os.path.normpath(h) for h in hidden])
    return found


def _add_path(ruleset: int, path: str, rights: int, handled: int) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return  # what does not exist needs no rule
    try:
        if not stat.S_ISDIR(os.fstat(fd).st_mode):
            rights &= _FILE_RIGHTS
        rights &= handled
        if not rights:
            return
        attr = _PathBeneathAttr(allowed_access=rights, parent_fd=fd)
        _check(
            _syscall(_ADD_RULE, ruleset, _RULE_PATH_BENEATH, ctypes.byref(attr), 0),
            f"landlock_add_rule({path})",
        )
    finally:
        os.close(fd)


def build_ruleset(rules: dict[str, Any], abi: int) -> int:
    """A Landlock rule set for `rules` (`LandlockRules.as_json`): a descriptor for `restrict_self`.

    Built once per launcher: the walk that grants everything but the hidden
    folders opens a descriptor per path.

    Raises:
        OSError: The kernel refused the rule set or a rule.

    """
    handled = (
        _READ
        | _WRITE_FILE
        | _REMOVE_DIR
        | _REMOVE_FILE
        | _MAKE_CHAR
        | _MAKE_DIR
        | _MAKE_REG
        | _MAKE_SOCK
        | _MAKE_FIFO
        | _MAKE_BLOCK
        | _MAKE_SYM
    )
    if abi >= 2:
        handled |= _REFER
    if abi >= 3:
        handled |= _TRUNCATE
    attr = _RulesetAttr(handled_access_fs=handled)
    size = 8
    if abi >= 4:
        size = 16
        if not rules["network"]:
            attr.handled_access_net = _BIND_TCP | _CONNECT_TCP
    if abi >= 6:
        size = 24
        attr.scoped = _SCOPE_ABSTRACT_UNIX_SOCKET | _SCOPE_SIGNAL
    ruleset = _check(
        _syscall(_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), 0),
        "landlock_create_ruleset",
    )
    try:
        for path in _visible(rules["hidden"]):
            _add_path(ruleset, path, _READ, handled)
        for path in rules["readable"]:
            _add_path(ruleset, path, _READ, handled)
        for path in _DEVICES:
            _add_path(ruleset, path, _READ | _WRITE_FILE, handled)
        for path in rules["writable"]:
            _add_path(ruleset, path, handled, handled)
    except BaseException:
        os.close(ruleset)
        raise
    os.set_inheritable(ruleset, False)
    return ruleset


def restrict_self(ruleset: int) -> None:
    """Put the calling process (and what it starts) in a new Landlock domain of `ruleset`.

    No-new-privileges is set first: without it an unprivileged process may
    not restrict itself.

    Raises:
        OSError: The kernel refused.

    """
    linux.prctl(linux.PR_SET_NO_NEW_PRIVS, 1, "prctl(PR_SET_NO_NEW_PRIVS)")
    _check(_syscall(_RESTRICT_SELF, ruleset, 0), "landlock_restrict_self")


def isolate(rules: dict[str, Any]) -> None:
    """Run by root, in the launcher: a network namespace (without network) and an empty /run.

    Namespaces made here belong to the launcher and every command it starts.
    The capabilities root still needs (an IPC namespace per command) are
    dropped by each command's init before the command runs.

    Raises:
        OSError: A namespace or mount failed.

    """
    if os.geteuid() != 0:
        return
    if not rules["network"]:
        # Nothing at all gets out, UDP included, which Landlock's TCP rules
        # leave open.
        linux.unshare(linux.CLONE_NEWNET)
    _empty_run()


def _empty_run() -> None:
    """Give the calling process a mount namespace whose /run is an empty tmpfs.

    /run holds the host's service sockets (docker.sock, D-Bus, systemd), and
    Landlock has no rule for connecting to a unix socket; as root, reaching
    docker.sock is reaching everything.
    """
    if not os.path.isdir("/run") or os.path.islink("/run"):
        return
    linux.unshare(linux.CLONE_NEWNS)
    # Private first, so the tmpfs never shows in the host's namespace.
    linux.mount("none", "/", None, linux.MS_REC | linux.MS_PRIVATE, None)
    linux.mount("tmpfs", "/run", "tmpfs", 0, "mode=0755")


def _children() -> list[int]:
    """This process's children (zombies too)."""
    me = os.getpid()
    try:
        with open(f"/proc/{me}/task/{me}/children") as file:
            return [int(child) for child in file.read().split()]
    except FileNotFoundError:
        pass  # a kernel without CONFIG_PROC_CHILDREN
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as file:
                stat = file.read()
        except OSError:
            continue
        # The parent is the second field after the command's closing parenthesis.
        if int(stat[stat.rindex(b")") + 2 :].split()[1]) == me:
            found.append(int(name))
    return found


def _end_children() -> None:
    """Kill and reap every process below this one (as subreaper, the orphans come here)."""
    while True:
        others = _children()
        if not others:
            try:
                if os.waitpid(-1, os.WNOHANG) == (0, 0):
                    continue  # one is there after all: list again
            except ChildProcessError:
                return
            continue
        for pid in others:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return
        except InterruptedError:
            pass


def _init(config: dict[str, Any], channel: socket.socket, ruleset: int, launcher: int) -> None:
    """A command's init: set it up, then await the command, run it, and report its end."""
    try:
        sandbox_server.quiet_signals()
        linux.prctl(linux.PR_SET_PDEATHSIG, signal.SIGKILL, "prctl(PR_SET_PDEATHSIG)")
        if os.getppid() != launcher:
            os._exit(1)  # the launcher died before the death signal was set
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.setsid()
        if config["root"]:
            # SysV IPC of the command's own: the host's segments are not there.
            linux.unshare(linux.CLONE_NEWIPC)
        seccomp.fresh_session_keyring()
        linux.prctl(_PR_SET_CHILD_SUBREAPER, 1, "prctl(PR_SET_CHILD_SUBREAPER)")
        null = os.open(os.devnull, os.O_RDWR)
        for target in (0, 1, 2):
            os.dup2(null, target)
        os.close(null)
        if config["root"]:
            linux.drop_capabilities(lock_root=True)
        restrict_self(ruleset)
        os.close(ruleset)
        linux.prctl(linux.PR_SET_DUMPABLE, 0, "prctl(PR_SET_DUMPABLE)")
        if config.get("filter") is not None:
            seccomp.install(bytes.fromhex(config["filter"]))
        keep = channel.fileno()
        for fd in map(int, os.listdir("/proc/self/fd")):
            if fd > 2 and fd != keep:
                with contextlib.suppress(OSError):
                    os.close(fd)
    except Exception as error:
        with contextlib.suppress(OSError):
            channel.send(json.dumps({"error": f"cannot set up the sandbox: {error}"}).encode())
        os._exit(1)
    sandbox_server.serve_command(channel, _end_children)


class _Warm:
    """An init forked ahead of its command, and the channel to it."""

    def __init__(self, config: dict[str, Any], ruleset: int) -> None:
        self.channel, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        launcher = os.getpid()
        self.pid = os.fork()
        if self.pid == 0:
            try:
                self.channel.close()
                _init(config, theirs, ruleset, launcher)
            finally:
                os._exit(1)  # a child never runs on into the launcher's code
        theirs.close()
        self.pidfd: int | None = os.pidfd_open(self.pid)
        self.set_up = False

    def ready(self) -> tuple[int, int]:
        """Init's pid and a pidfd of it, once init is set up.

        Raises:
            OSError: Init failed; its reason, when it gave one.

        """
        while not self.set_up:
            data, fds = sandbox_server.receive(self.channel)
            for fd in fds:
                os.close(fd)
            if data == b"ready":
                self.set_up = True
            else:
                reason = json.loads(data).get("error") if data.startswith(b"{") else None
                raise OSError(errno.EIO, reason or "the sandbox could not be set up")
        assert self.pidfd is not None
        return self.pid, self.pidfd


def _reap(wake: int, inits: set[int]) -> None:
    """Reap what ended; kill at once any child that is no init of ours (an orphan)."""
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
            break
        if pid == 0:
            break
        inits.discard(pid)
    for pid in _children():
        if pid not in inits:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def launch(control_fd: int) -> None:
    """Serve requests on the control socket until it ends; then end everything below.

    First the launcher says who it is: its pid, with a pidfd of itself, on
    the control socket (its parent is the zygote, not the executor).
    """
    control = socket.socket(fileno=control_fd)
    me = os.pidfd_open(os.getpid())
    control.sendmsg(
        [str(os.getpid()).encode()],
        [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [me]))],
    )
    os.close(me)
    data, _ = sandbox_server.receive(control)
    config = json.loads(data)
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    inits: set[int] = set()
    warm: list[_Warm] = []
    try:
        try:
            linux.prctl(_PR_SET_CHILD_SUBREAPER, 1, "prctl(PR_SET_CHILD_SUBREAPER)")
            linux.prctl(linux.PR_SET_DUMPABLE, 0, "prctl(PR_SET_DUMPABLE)")
            rules = config["rules"]
            isolate(rules)
            ruleset = build_ruleset(rules, int(config["abi"]))
            count = int(config.get("warm", 1))
            warm = [_Warm(config, ruleset) for _ in range(count)]
            inits.update(made.pid for made in warm)
            warm[0].ready()  # a sandbox that cannot be made fails here, not at the first command
            ptmx = os.open("/dev/ptmx", os.O_PATH | os.O_CLOEXEC)
        except OSError as error:
            control.sendall(json.dumps({"error": str(error)}).encode())
            return
        control.sendmsg([b"{}"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [ptmx]))])
        os.close(ptmx)
        _serve(control, config, ruleset, wake_r, inits, warm)
    finally:
        for made in warm:
            made.channel.close()
        _end_children()


def _serve(
    control: socket.socket,
    config: dict[str, Any],
    ruleset: int,
    wake: int,
    inits: set[int],
    warm: list[_Warm],
) -> None:
    count = int(config.get("warm", 1))
    retiring = False
    while True:
        ready, _, _ = select.select([control.fileno(), wake], [], [])
        if wake in ready:
            _reap(wake, inits)
        if control.fileno() in ready:
            data, fds = sandbox_server.receive(control)
            if not data:
                return
            if data == b"retire":
                # No more commands: the inits made ahead end (each sees its
                # channel end), and the launcher once those running have.
                retiring = True
                for made in warm:
                    made.channel.close()
                warm.clear()
            elif data != b"spare" or len(fds) != 1 or retiring:
                for fd in fds:
                    os.close(fd)
            else:
                made = warm.pop(0) if warm else _Warm(config, ruleset)
                inits.add(made.pid)
                sandbox_server.hand_over(made, fds[0])
                while len(warm) < count:
                    warm.append(_Warm(config, ruleset))
                    inits.add(warm[-1].pid)
        if retiring and not inits:
            return


def zygote(requests_fd: int) -> None:
    """Fork a launcher for each `launch` request, until the requests socket ends.

    The executor's process starts one zygote, the first time it needs a
    launcher: each launcher after it is a fork of a process that has
    imported everything already, not an interpreter's start. A request
    carries the new launcher's control socket; the zygote reaps the
    launchers it forked, and holds nothing of any executor.
    """
    requests = socket.socket(fileno=requests_fd)
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    linux.prctl(linux.PR_SET_DUMPABLE, 0, "prctl(PR_SET_DUMPABLE)")
    while True:
        ready, _, _ = select.select([requests.fileno(), wake_r], [], [])
        if wake_r in ready:
            with contextlib.suppress(BlockingIOError):
                while os.read(wake_r, 512):
                    pass
            with contextlib.suppress(ChildProcessError):
                while os.waitpid(-1, os.WNOHANG)[0]:
                    pass
        if requests.fileno() not in ready:
            continue
        try:
            data, fds = sandbox_server.receive(requests)
        except OSError:
            return
        if not data:
            return
        if data != b"launch" or len(fds) != 1:
            for fd in fds:
                os.close(fd)
            continue
        if os.fork() == 0:
            try:
                requests.close()
                signal.set_wakeup_fd(-1)
                os.close(wake_r)
                os.close(wake_w)
                launch(fds[0])
            finally:
                os._exit(0)
        os.close(fds[0])


def main() -> None:
    """`zygote REQUESTS_FD`, or `CONTROL_FD` for a single launcher."""
    if sys.argv[1] == "zygote":
        zygote(int(sys.argv[2]))
    else:
        launch(int(sys.argv[1]))


if __name__ == "__main__":
    main()
