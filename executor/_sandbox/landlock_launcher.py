"""The Landlock launcher: starts each command of one rule set, from a process of its own.

Run as `python -I -S programs.py landlock_launcher zygote REQUESTS_FD` by
`executor._sandbox.sandbox` (`CONTROL_FD` instead runs one launcher; see
`executor._sandbox.programs`), with an empty environment and the standard
library only (the package's `linux`, `seccomp` and `sandbox_server` loaded
by their paths). The Landlock system calls are made
here (the rules are `executor._sandbox.landlock.LandlockRules`, as JSON).

The executor's process starts one zygote (`zygote`), which imports all
this once and forks a launcher for each rule set (`launch`): a launcher
costs a fork, not an interpreter's start. A launcher speaks the bubblewrap
server's protocol (see `executor._sandbox.sandbox_server`), so the executor
starts a Landlock command as it starts a bubblewrap one:

- at start it says its pid (with a pidfd of itself), reads the rules,
  makes (run by root) a network namespace without network and an empty
  `/run`, builds the Landlock rule set once, becomes a child subreaper and
  not dumpable, forks its first inits (`_Pool`), and answers `{}` with an
  `O_PATH` descriptor of `/dev/ptmx` once the first is ready;
- an init (`_init`) is a process of its own that runs the rule set's
  commands one at a time: set up once (a session of its own, a fresh
  session keyring, a child subreaper, stdio on `/dev/null`, no descriptor
  of the launcher's, not dumpable, no-new-privileges; run by root, locked
  securebits, an empty bounding set and only `CAP_SYS_ADMIN` left), it
  starts a thread for each command, ahead of it. That thread confines
  itself for good (`_confine`: run by root, an IPC namespace of its own and
  no capability at all; a fresh session keyring; a new Landlock domain of
  the rule set, shared with no other command; the system call filter),
  offers the launcher a channel for the command, and runs the command
  it receives there: it spawns it (so it inherits all of that), waits for
  it, kills and reaps every process still below init, and reports. Init's
  own main thread holds none of the command's confinement, only waits;
- on `spare` the launcher hands an idle init's channel to the executor,
  which sends the command straight to it; once the executor has closed
  the command's status pipe (it has taken the report, and holds nothing
  that could still kill that init for that command), init comes back idle
  with a new thread. A command thus costs a thread, a spawn and a few
  messages, not a fork of Python: the launcher forks inits only to keep
  `warm` idle (two), and lets one idle beyond two more go.

Nothing a command can reach holds the executor's memory or environment:
the executor's process is in no Landlock domain (a command may not trace
it, read its `/proc` files or signal it), the launcher neither, and init
is not dumpable (its command's thread, in the command's domain, is one of
its threads). A process orphaned when its init was killed (a timeout,
`aclose`) comes to the launcher, as subreaper, which kills it at once; when
the control socket ends the launcher kills every init and everything below
them, and exits.
"""

from __future__ import annotations

import array
import contextlib
import ctypes
import errno
import gc
import json
import os
import resource
import select
import signal
import socket
import stat
import struct
import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Final, NoReturn

if TYPE_CHECKING:
    from executor._sandbox import linux, sandbox_server, seccomp
else:
    from executor_sandbox_programs import load

    linux = load("linux")
    seccomp = load("seccomp")
    sandbox_server = load("sandbox_server")

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
    if os.path.exists(f"/proc/{me}/task/{me}/children"):
        # Each thread's own: a child stays its thread's until that thread ends.
        children: list[int] = []
        for task in os.listdir(f"/proc/{me}/task"):
            try:
                with open(f"/proc/{me}/task/{task}/children") as file:
                    children += [int(child) for child in file.read().split()]
            except FileNotFoundError:
                pass  # the thread ended meanwhile
        return children
    # A kernel without CONFIG_PROC_CHILDREN.
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


def _init(config: dict[str, Any], link: socket.socket, ruleset: int, launcher: int) -> NoReturn:
    """An init: set itself up once, then run the rule set's commands one at a time, until told.

    Each command has a thread of init's of its own, started as soon as
    the one before has ended, which confines itself (`_confine`), offers
    the launcher a channel for the command, and runs it (`_serve_one`):
    the command inherits that thread's Landlock domain (a new one, shared
    with no other command), keyring, IPC namespace, filter and lack of
    capabilities. Init's main thread keeps none of these; it only waits.
    """
    try:
        sandbox_server.quiet_signals()
        linux.prctl(linux.PR_SET_PDEATHSIG, signal.SIGKILL, "prctl(PR_SET_PDEATHSIG)")
        if os.getppid() != launcher:
            os._exit(1)  # the launcher died before the death signal was set
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.setsid()
        # Init's own keyring is not the host's either (each command gets one more).
        seccomp.fresh_session_keyring()
        linux.prctl(_PR_SET_CHILD_SUBREAPER, 1, "prctl(PR_SET_CHILD_SUBREAPER)")
        null = os.open(os.devnull, os.O_RDWR)
        for target in (0, 1, 2):
            os.dup2(null, target)
        os.close(null)
        # The launcher's descriptors are not init's (another init's link
        # held here would keep it from ending).
        for fd in map(int, os.listdir("/proc/self/fd")):
            if fd > 2 and fd not in (link.fileno(), ruleset):
                with contextlib.suppress(OSError):
                    os.close(fd)
        if config["root"]:
            # Locked securebits and an empty bounding set: nothing below
            # init gains a capability by exec. Init keeps CAP_SYS_ADMIN
            # alone, for each command's IPC namespace; the command's
            # thread drops it.
            linux.drop_capabilities(lock_root=True, keep=(linux.CAP_SYS_ADMIN,))
        linux.prctl(linux.PR_SET_NO_NEW_PRIVS, 1, "prctl(PR_SET_NO_NEW_PRIVS)")
        linux.prctl(linux.PR_SET_DUMPABLE, 0, "prctl(PR_SET_DUMPABLE)")
        code = None if config.get("filter") is None else bytes.fromhex(config["filter"])
    except Exception as error:
        _said_error(link, error)
    while True:
        outcome: list[bool] = []
        thread = threading.Thread(
            target=_serve_one, args=(config, ruleset, code, link, outcome), name="executor-command"
        )
        thread.start()
        thread.join()
        if outcome != [True]:
            os._exit(0)


def _said_error(link: socket.socket, error: BaseException) -> NoReturn:
    """Tell the launcher init could not be set up, and end."""
    with contextlib.suppress(OSError):
        link.send(json.dumps({"error": f"cannot set up the sandbox: {error}"}).encode())
    os._exit(1)


def _serve_one(
    config: dict[str, Any],
    ruleset: int,
    code: bytes | None,
    link: socket.socket,
    outcome: list[bool],
) -> None:
    """A command's thread: confine itself, offer a channel, run the command.

    Whether init may run another is put in `outcome`.

    A sandbox that cannot be made fails here before any command (an init's
    first thread is its trial), not at the command's start.
    """
    try:
        _confine(config, ruleset, code)
    except OSError as error:
        _said_error(link, error)
    while True:
        # The executor's end of the channel for the command, through the launcher.
        channel, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        link.sendmsg(
            [b"ready"],
            [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [theirs.fileno()]))],
        )
        theirs.close()
        _wait_for(link, channel.fileno(), select.POLLIN)
        data, fds = sandbox_server.receive(channel)
        channel.close()
        taken = sandbox_server.read_request(data, fds)
        if taken is not None:
            outcome.append(_run(link, *taken))
            return
        # The channel was dropped unused (its executor closed): offer a new one.


def _wait_for(link: socket.socket, fd: int, events: int) -> None:
    """Wait until `fd` has `events` (or an error, or its end); end init if the launcher says so.

    The launcher closes its link to an init it needs no more (retired, or
    one idle too many), and sends nothing else on it.
    """
    poller = select.poll()
    poller.register(link, select.POLLIN)
    poller.register(fd, events)
    while True:
        for ready, _ in poller.poll():
            if ready == link.fileno():
                os._exit(0)
            return


def _run(link: socket.socket, request: dict[str, Any], fds: tuple[int, ...]) -> bool:
    """Run one command and report its end; whether init may run another.

    Once the executor has taken the report (it closed its end of the status
    pipe, so it holds nothing that could still kill this init for that
    command), init is ready for the next.
    """
    stdin, stdout, stderr, status = fds
    reusable = True
    for number, value, name in request["rlimits"]:
        # Limits are init's own, for the rest of its life: it runs no other command.
        reusable = False
        try:
            resource.setrlimit(number, (value, value))
        except (OSError, ValueError) as error:
            _fail(status, f"cannot set the sandbox's {name}={value}: {error}")
    wait_status = sandbox_server.enter(request, stderr)
    if wait_status is None:
        try:
            command = sandbox_server.spawn(request, stdin, stdout, stderr)
        except OSError as error:
            wait_status = sandbox_server.spawn_failed(request, error, stderr)
    for fd in (stdin, stdout, stderr):
        os.close(fd)
    if wait_status is None:
        # What the command left running (below it, or orphaned to init) is
        # killed and reaped before the status goes out: nothing of the
        # command outlives its report.
        wait_status = sandbox_server.await_command(command)
        if wait_status is None:
            _fail(status, "the command vanished")
        _end_children()
    os.write(status, b"S" + struct.pack("i", wait_status))
    # A pipe's write end has an error once no reader is left.
    _wait_for(link, status, 0)
    os.close(status)
    return reusable


def _confine(config: dict[str, Any], ruleset: int, code: bytes | None) -> None:
    """Confine the calling thread as a command must be, for good; what it starts inherits it all.

    Each of these is the thread's own, not the process's: a session keyring
    of its own, (run by root) an IPC namespace of its own and no capability
    left, a new Landlock domain of `ruleset`, and the system call filter.

    Raises:
        OSError: A step failed.

    """
    if config["root"]:
        # SysV IPC of the command's own: the host's segments are not there.
        linux.unshare(linux.CLONE_NEWIPC)
    seccomp.fresh_session_keyring()
    if config["root"]:
        linux.set_capabilities(())
    restrict_self(ruleset)
    if code is not None:
        seccomp.install(code)


def _fail(status: int, message: str) -> NoReturn:
    """Report a failure to set the command up on its status pipe; this init ends."""
    with contextlib.suppress(OSError):
        os.write(status, b"E" + message.encode(errors="replace"))
    os._exit(1)


class _Init:
    """An init of the launcher's, and the link to it; while idle, the channel it offers."""

    def __init__(self, config: dict[str, Any], ruleset: int) -> None:
        self.link, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        launcher = os.getpid()
        self.pid = os.fork()
        if self.pid == 0:
            try:
                self.link.close()
                _init(config, theirs, ruleset, launcher)
            finally:
                os._exit(1)  # a child never runs on into the launcher's code
        theirs.close()
        self.pidfd = os.pidfd_open(self.pid)
        # The executor's end of the channel to init, while init is idle.
        self.offer: int | None = None
        self.ever_ready = False
        self.dropped = False

    def heard(self) -> str | None:
        """Read what init said: None when it is ready (`offer` set), else why it is not.

        Raises:
            OSError: The link failed.

        """
        data, fds = sandbox_server.receive(self.link)
        if data == b"ready" and len(fds) == 1:
            self.offer = fds[0]
            self.ever_ready = True
            return None
        for fd in fds:
            os.close(fd)
        reason = json.loads(data).get("error") if data.startswith(b"{") else None
        return reason or "the sandbox could not be set up"

    def drop(self) -> None:
        """Close the link (init ends when it is idle, or its command is), and the offer."""
        self.dropped = True
        self.link.close()
        self.close_offer()

    def close_offer(self) -> None:
        """Close the launcher's copy of the offered channel (handed over, or not wanted)."""
        offer, self.offer = self.offer, None
        if offer is not None:
            os.close(offer)

    def hand_over(self, reply_fd: int) -> None:
        """Send init's pid, a pidfd of it and the offered channel to the executor on `reply_fd`."""
        reply = socket.socket(fileno=reply_fd)
        try:
            assert self.offer is not None
            fds = array.array("i", [self.pidfd, self.offer])
            # If the executor is gone, the channel ends here: init offers another.
            with contextlib.suppress(OSError):
                reply.sendmsg(
                    [struct.pack("i", self.pid)], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)]
                )
        finally:
            reply.close()
            self.close_offer()


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
    pool = _Pool(config)
    try:
        try:
            linux.prctl(_PR_SET_CHILD_SUBREAPER, 1, "prctl(PR_SET_CHILD_SUBREAPER)")
            linux.prctl(linux.PR_SET_DUMPABLE, 0, "prctl(PR_SET_DUMPABLE)")
            rules = config["rules"]
            isolate(rules)
            pool.ruleset = build_ruleset(rules, int(config["abi"]))
            first = pool.start(int(config.get("warm", 1)))
            # A sandbox that cannot be made fails here, not at the first command.
            reason = first.heard()
            if reason is not None:
                raise OSError(errno.EIO, reason)
            pool.idle.append(first)
            ptmx = os.open("/dev/ptmx", os.O_PATH | os.O_CLOEXEC)
        except OSError as error:
            control.sendall(json.dumps({"error": str(error)}).encode())
            return
        control.sendmsg([b"{}"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [ptmx]))])
        os.close(ptmx)
        # Commands one after another keep one init running, one held by the
        # executor and `warm` idle: made now, none of them is forked while
        # the first commands run.
        pool.start(2)
        # What the interpreter holds now stays put: the garbage collector
        # does not touch it again, in the launcher or in an init forked later.
        gc.freeze()
        pool.serve(control, wake_r)
    finally:
        for init in pool.inits.values():
            init.drop()
        _end_children()


class _Pool:
    """The launcher's inits: those idle (each offering a channel), and requests waiting for one.

    `warm` inits are kept idle for the executor's next requests, forked
    ahead; an init whose command has ended comes back idle, and one idle
    beyond `warm + 2` is let go. Starting an init is a fork; a command is a
    thread of an init, a spawn, and the messages around it.
    """

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        self.warm = int(config.get("warm", 1))
        self.ruleset = -1
        self.inits: dict[int, _Init] = {}  # by pid
        self.idle: list[_Init] = []
        self.waiting: list[int] = []  # reply sockets of requests no init was idle for
        self.retiring = False
        self.failing = False
        self.poller = select.poll()
        self.links: dict[int, _Init] = {}  # by the link's descriptor

    @property
    def starting(self) -> int:
        """How many inits are forked and have not said yet whether they are ready."""
        return sum(1 for init in self.inits.values() if not init.ever_ready and not init.dropped)

    def start(self, count: int) -> _Init:
        """Fork `count` inits; the first."""
        made = []
        for _ in range(count):
            init = _Init(self.config, self.ruleset)
            self.inits[init.pid] = init
            self.links[init.link.fileno()] = init
            self.poller.register(init.link, select.POLLIN)
            made.append(init)
        return made[0]

    def forget(self, init: _Init) -> None:
        """Stop hearing from `init` (it ends, or has ended)."""
        if init.link.fileno() >= 0:
            self.poller.unregister(init.link)
            del self.links[init.link.fileno()]
        if init in self.idle:
            self.idle.remove(init)
        init.drop()

    def serve(self, control: socket.socket, wake: int) -> None:
        self.poller.register(control, select.POLLIN)
        self.poller.register(wake, select.POLLIN)
        while True:
            for fd, _ in self.poller.poll():
                if fd == wake:
                    self.reap(wake)
                elif fd == control.fileno():
                    if not self.request(control):
                        return
                elif fd in self.links:
                    self.heard(self.links[fd])
            while self.waiting and self.idle:
                self.idle.pop(0).hand_over(self.waiting.pop(0))
            if self.retiring:
                if not self.inits:
                    return
                continue
            wanted = self.warm + len(self.waiting) - len(self.idle) - self.starting
            if self.failing:
                # Inits failed to set up: one more only for a request, one at a time.
                wanted = 1 if self.waiting and not self.starting else 0
            if wanted > 0:
                self.start(wanted)

    def request(self, control: socket.socket) -> bool:
        """Take one request from the executor; False once the control socket has ended."""
        data, fds = sandbox_server.receive(control)
        if not data:
            return False
        if data == b"retire":
            # No more commands: the idle inits end (each sees its link end),
            # and the launcher once the commands running have.
            self.retiring = True
            for init in list(self.idle):
                self.forget(init)
            _close(self.waiting)
        elif data != b"spare" or len(fds) != 1 or self.retiring:
            _close(fds)
        else:
            self.waiting.append(fds[0])
        return True

    def heard(self, init: _Init) -> None:
        """An init spoke: ready (again), or failed, or its link ended."""
        try:
            reason = init.heard()
        except OSError as error:
            reason = str(error)
        if reason is None and not self.retiring and len(self.idle) < self.warm + 2:
            self.failing = False
            self.idle.append(init)
            return
        self.forget(init)
        if reason is not None and not init.ever_ready:
            self.failing = True
            # A request waiting for an init hears why none could be made.
            if self.waiting:
                reply = socket.socket(fileno=self.waiting.pop(0))
                with contextlib.suppress(OSError):
                    reply.sendall(json.dumps({"error": reason}).encode())
                reply.close()

    def reap(self, wake: int) -> None:
        """Reap what ended; kill at once any child that is no init of ours (an orphan)."""
        with contextlib.suppress(BlockingIOError):
            while os.read(wake, 512):
                pass
        while True:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            init = self.inits.pop(pid, None)
            if init is not None:
                self.forget(init)
                os.close(init.pidfd)
        for pid in _children():
            if pid not in self.inits:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)


def _close(fds: list[int]) -> None:
    while fds:
        os.close(fds.pop())


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


def main(args: list[str]) -> None:
    """`zygote REQUESTS_FD`, or `CONTROL_FD` for a single launcher."""
    if args[0] == "zygote":
        zygote(int(args[1]))
    else:
        launch(int(args[0]))
