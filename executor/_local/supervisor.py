"""The supervisor: a child subreaper that starts every command of an unsandboxed `LocalExecutor`.

Run as `python -I -S supervisor.py SOCKET_FD PARENT_PID CONFIG` by
`executor._local.process.Supervisor`, with the standard library only, so it
starts in a few milliseconds. It is made a child subreaper
(`PR_SET_CHILD_SUBREAPER`) and gets SIGTERM when the executor's thread that
started it ends (`PR_SET_PDEATHSIG`); the executor's own process is never
made a subreaper.

For each command it forks a *shim*: a copy of itself that is a subreaper of
its own, so every process the command starts, and every orphan among them
(a double-forked daemon, `setsid`, `env -i`, `nohup`, `disown`), has the
shim as an ancestor until it is reaped: nothing can leave the tree. The
shim spawns the command (in a session of its own, in its cgroup when there
is one), tells the executor its pid on the command's control socket,
reports the leader's wait status there when it exits, and exits itself
once its whole tree is gone. On the control socket the executor sends

- `T` + a grace period in seconds: SIGTERM (and SIGCONT) to every process of
  the tree, then, if any is left when the grace is up, what `K` does;
- `K`: SIGKILL to every process of the tree, until none is left; then the shim exits;
- `G` + a signal number: the signal to the command's process group (a session's keys).

The tree is found in the command's cgroup (`cgroup.procs`, ended at once with
`cgroup.kill`) where there is one; otherwise from one pass over `/proc`'s
parent links below the shim. Either way a kill ends when the shim has no
child left, which is when the tree is empty (every orphan comes to it).

On its own socket the supervisor takes `R` (a command: a marshalled request,
with stdin, stdout, stderr, the control socket and, optionally, the folder
to start in attached) and `X` + a grace period in seconds (end everything:
SIGTERM, the grace, SIGKILL; then exit). When the socket ends (the executor
closed it, or died) or SIGTERM comes, everything is killed at once. A shim
whose supervisor dies kills its tree and exits.
"""

from __future__ import annotations

import array
import contextlib
import ctypes
import errno
import json
import marshal
import math
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import time
from typing import Any

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
_TIOCSCTTY = 0x540E
# Every signal a command starts with at its default disposition: whatever the
# executor's process ignores (a `nohup`, the interpreter's SIGPIPE and SIGXFSZ)
# or the supervisor and shim handle; its mask starts empty too. (Signals 32
# and 33, the C library's own, have its handlers here, which exec resets:
# the supervisor is started by fork and exec, never by posix_spawn.)
_DEFAULTS = tuple(
    number for number in signal.valid_signals() if number not in (signal.SIGKILL, signal.SIGSTOP)
)
_MAX_FDS = 5
# How long a kill waits for a process that does not die of SIGKILL (one in
# uninterruptible sleep) before it looks again.
_KILL_PAUSE = 0.001


def _prctl(option: int, value: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    zero = ctypes.c_ulong(0)
    if libc.prctl(option, ctypes.c_ulong(value), zero, zero, zero) != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"prctl({option}): {os.strerror(code)}")


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _read(path: str) -> str | None:
    try:
        with open(path) as file:
            return file.read()
    except OSError:
        return None


class _Wake:
    """A pipe that signal handlers make readable (`signal.set_wakeup_fd`), and flags they set."""

    def __init__(self) -> None:
        self.read, write = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        signal.set_wakeup_fd(write, warn_on_full_buffer=False)
        self.flags: set[int] = set()
        for number in (signal.SIGCHLD, signal.SIGTERM, signal.SIGUSR1, signal.SIGHUP):
            signal.signal(number, self._handle)
        # Not SIG_IGN, which the commands would inherit: a handler, that exec resets.
        signal.signal(signal.SIGINT, self._ignore)

    def _handle(self, number: int, frame: object) -> None:
        self.flags.add(number)

    def _ignore(self, number: int, frame: object) -> None:
        pass

    def drain(self) -> None:
        try:
            while os.read(self.read, 4096):
                pass
        except BlockingIOError:
            pass


def _descendants(root: int) -> list[int]:
    """Every live process below `root`, from one pass over `/proc`'s parent links."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as file:
                data = file.read()
        except OSError:
            continue
        fields = data[data.rfind(b")") + 2 :].split()
        if fields[0] == b"Z":
            continue
        children.setdefault(int(fields[1]), []).append(int(name))
    found: list[int] = []
    stack = [root]
    while stack:
        for child in children.get(stack.pop(), ()):
            found.append(child)
            stack.append(child)
    return found


class _Cgroups:
    """The command's cgroup folders (v2, and v1 `memory`/`pids` on a hybrid host), or none."""

    def __init__(self, config: dict[str, Any], name: str) -> None:
        self.v2: str | None = None
        self.folders: list[str] = []
        self.memory: str | None = None
        self.home: dict[str, str] = config.get("home", {})
        # The pids limit, and where it is set: one more until the shim leaves.
        self.pids_max: str | None = None
        limits = config.get("limits", {})
        self.pids = limits.get("pids")
        base = config.get("v2")
        memory, pids = limits.get("memory"), limits.get("pids")
        if base:
            self.v2 = os.path.join(base, name)
            os.mkdir(self.v2)
            self.folders.append(self.v2)
            v2_controllers = config.get("v2_controllers", ())
            if memory is not None and "memory" in v2_controllers:
                _write(os.path.join(self.v2, "memory.max"), str(memory))
                _write(os.path.join(self.v2, "memory.swap.max"), "0")
                memory = None
            if "memory" in v2_controllers:
                self.memory = os.path.join(self.v2, "memory.peak")
            if pids is not None and "pids" in v2_controllers:
                self.pids_max = os.path.join(self.v2, "pids.max")
                _write(self.pids_max, str(pids + 1))
                pids = None
        v1 = config.get("v1", {})
        if "memory" in v1:
            folder = os.path.join(v1["memory"], name)
            os.mkdir(folder)
            self.folders.append(folder)
            if memory is not None:
                _write(os.path.join(folder, "memory.limit_in_bytes"), str(memory))
                # With swap accounting, the limit holds for memory and swap together.
                with contextlib.suppress(OSError):
                    _write(os.path.join(folder, "memory.memsw.limit_in_bytes"), str(memory))
            if self.memory is None:
                self.memory = os.path.join(folder, "memory.max_usage_in_bytes")
        if "pids" in v1:
            folder = os.path.join(v1["pids"], name)
            os.mkdir(folder)
            self.folders.append(folder)
            if pids is not None:
                self.pids_max = os.path.join(folder, "pids.max")
                _write(self.pids_max, str(pids + 1))

    def join(self) -> None:
        for folder in self.folders:
            _write(os.path.join(folder, "cgroup.procs"), "0")

    def leave(self) -> None:
        """Back to the supervisor's cgroups; the command alone is in its own, and counted."""
        for folder in self.home.values():
            with contextlib.suppress(OSError):
                _write(os.path.join(folder, "cgroup.procs"), "0")
        if self.pids_max is not None:
            with contextlib.suppress(OSError):
                _write(self.pids_max, str(self.pids))

    def procs(self) -> list[int] | None:
        if self.v2 is None:
            return None
        text = _read(os.path.join(self.v2, "cgroup.procs"))
        return None if text is None else [int(pid) for pid in text.split()]

    def kill(self) -> bool:
        if self.v2 is None:
            return False
        try:
            _write(os.path.join(self.v2, "cgroup.kill"), "1")
        except OSError:
            return False
        return True

    def peak(self) -> int:
        text = None if self.memory is None else _read(self.memory)
        try:
            return int(text or "")
        except ValueError:
            return -1

    def remove(self) -> None:
        for folder in reversed(self.folders):
            # A v1 memory cgroup may hold page cache charges a moment longer.
            for _ in range(50):
                try:
                    os.rmdir(folder)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.001)


class _Shim:
    """One command's subreaper (in the forked child of the supervisor)."""

    def __init__(
        self,
        request: dict[str, Any],
        fds: list[int],
        config: dict[str, Any],
        cgroups: _Cgroups | None,
        taken: int,
    ) -> None:
        self.taken = taken
        self.request = request
        self.config = config
        self.ctl = socket.socket(fileno=fds[3])
        self.io = fds[:3]
        self.cwd_fd = fds[4] if len(fds) > 4 else None
        self.leader = 0
        self.status: int | None = None
        self.cgroups = cgroups
        self.me = os.getpid()

    def start(self) -> None:
        wake = _Wake()
        try:
            if self.cwd_fd is not None:
                os.fchdir(self.cwd_fd)
            else:
                os.chdir(self.request["cwd"])
        except OSError as error:
            self.fail(error, "cwd")
        try:
            self.leader = self._spawn()
        except OSError as error:
            self.fail(error, "exec")
        for fd in self.io:
            os.close(fd)
        me = os.pidfd_open(self.me)
        self.ctl.sendmsg(
            [b"P" + struct.pack("i", self.leader)],
            [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [me]))],
        )
        os.close(me)
        self._taken()
        if self.cgroups is not None:
            # Out of the command's cgroup, now that the command is in it: the
            # shim survives its cgroup's kill to report, and is not counted.
            self.cgroups.leave()
        self._loop(wake)

    def _taken(self) -> None:
        """Tell the supervisor the command started (or failed to): time for the next spare."""
        if self.taken >= 0:
            with contextlib.suppress(OSError):
                os.write(self.taken, b"s")
                os.close(self.taken)
            self.taken = -1

    def fail(self, error: OSError, where: str) -> None:
        """Report a failed start on the control socket, and exit."""
        self._taken()
        report = {
            "errno": error.errno or 0,
            "message": error.strerror or str(error),
            "where": where,
        }
        with contextlib.suppress(OSError):
            self.ctl.send(b"E" + json.dumps(report).encode())
        if self.cgroups is not None:
            self.cgroups.remove()
        os._exit(0)

    def _spawn(self) -> int:
        request = self.request
        argv, env = request["argv"], request["env"]
        if request.get("pty"):
            return self._fork_exec(argv, env, pty=True)
        # Popen's vfork and exec: a fraction of what a fork of this process
        # costs, and unlike glibc's posix_spawn it leaves the C library's own
        # signals (32 and 33) alone. Handlers are reset by exec; SIGPIPE and
        # SIGXFSZ by restore_signals; nothing else is ignored here (see `main`).
        child = subprocess.Popen(
            argv,
            stdin=self.io[0],
            stdout=self.io[1],
            stderr=self.io[2],
            env=env,
            start_new_session=True,
        )
        # Reaped by `_reap` (any child), not by Popen, which would warn.
        child.returncode = 0
        return child.pid

    def _fork_exec(self, argv: list[str], env: dict[str, str], *, pty: bool) -> int:
        # A pty must become the controlling terminal after setsid, which
        # neither posix_spawn nor Popen can do: fork, reset every ignored
        # disposition and the mask, and report exec's failure on a pipe.
        report_r, report_w = os.pipe2(os.O_CLOEXEC)
        pid = os.fork()
        if pid == 0:
            try:
                os.setsid()
                signal.set_wakeup_fd(-1)
                for number in _DEFAULTS:
                    # exec resets what has a handler; what is ignored stays so.
                    if signal.getsignal(number) == signal.SIG_IGN:
                        signal.signal(number, signal.SIG_DFL)
                signal.pthread_sigmask(signal.SIG_SETMASK, ())
                for target, fd in enumerate(self.io):
                    os.dup2(fd, target)
                if pty:
                    import fcntl

                    fcntl.ioctl(0, _TIOCSCTTY, 0)
                # The child's PATH decides where the program is found, as for subprocess.
                os.execvpe(argv[0], argv, env)
            except OSError as error:
                os.write(report_w, struct.pack("i", error.errno or errno.ENOEXEC))
            finally:
                os._exit(127)
        os.close(report_w)
        data = os.read(report_r, 4)
        os.close(report_r)
        if data:
            os.waitpid(pid, 0)
            code = struct.unpack("i", data)[0]
            raise OSError(code, os.strerror(code), argv[0])
        return pid

    def _tree(self) -> list[int]:
        procs = None if self.cgroups is None else self.cgroups.procs()
        if procs is None:
            return _descendants(self.me)
        return procs

    def _signal_tree(self, number: int) -> None:
        for pid in self._tree():
            if pid == self.me:
                continue
            try:
                os.kill(pid, number)
                if number == signal.SIGTERM:
                    # A stopped process acts on SIGTERM only once continued.
                    os.kill(pid, signal.SIGCONT)
            except OSError:
                pass

    def _reap(self) -> bool:
        """Reap what has exited; report the leader's end. False once the shim has no child."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return False
            if pid == 0:
                return True
            if pid == self.leader and self.status is None:
                self.status = status
                peak = -1 if self.cgroups is None else self.cgroups.peak()
                with contextlib.suppress(OSError):
                    self.ctl.send(b"S" + struct.pack("=iq", status, peak))

    def _kill(self) -> None:
        """SIGKILL the whole tree until the shim has no child left; then exit."""
        while True:
            if self.cgroups is None or not self.cgroups.kill():
                self._signal_tree(signal.SIGKILL)
            if not self._reap():
                break
            time.sleep(_KILL_PAUSE)
        self._exit()

    def _exit(self) -> None:
        if self.cgroups is not None:
            self.cgroups.remove()
        os._exit(0)

    def _loop(self, wake: _Wake) -> None:
        poller = select.poll()
        poller.register(wake.read, select.POLLIN)
        poller.register(self.ctl.fileno(), select.POLLIN)
        # Set by `T<grace>`: when what SIGTERM did not end gets SIGKILL.
        deadline: float | None = None
        while True:
            if signal.SIGTERM in wake.flags or signal.SIGHUP in wake.flags:
                self._kill()
            if signal.SIGUSR1 in wake.flags:
                wake.flags.discard(signal.SIGUSR1)
                self._signal_tree(signal.SIGTERM)
            if not self._reap():
                if self.status is None:
                    # The leader was reaped by no one else: it cannot be.
                    self.status = signal.SIGKILL
                self._exit()
            wake.flags.discard(signal.SIGCHLD)
            timeout = None
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    self._kill()
                timeout = max(1, math.ceil(left * 1000))
            for fd, _ in poller.poll(timeout):
                if fd == wake.read:
                    wake.drain()
                    continue
                try:
                    message = self.ctl.recv(64)
                except OSError:
                    message = b""
                if not message:
                    # The executor is done with this command; the tree (a
                    # background job) runs on until it ends or is killed.
                    poller.unregister(fd)
                    continue
                kind = message[:1]
                if kind == b"T":
                    self._signal_tree(signal.SIGTERM)
                    with contextlib.suppress(ValueError):
                        # The grace is kept here: no round trip to the executor for the kill.
                        grace = float(message[1:] or "nan")
                        if grace == grace:  # not NaN
                            deadline = time.monotonic() + grace
                elif kind == b"K":
                    self._kill()
                elif kind == b"G" and self.status is None:
                    with contextlib.suppress(OSError, ValueError):
                        os.killpg(self.leader, int(message[1:]))


class _Supervisor:
    def __init__(self, requests: socket.socket, control: socket.socket, config: dict[str, Any]):
        self.requests = requests
        self.control = control
        self.config = config
        self.shims: set[int] = set()
        self.spare = 0
        # The shim that took the last request, until its command has started.
        self.taking = 0
        self.me = os.getpid()
        self.taken_r, self.taken_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)

    def run(self) -> None:
        wake = _Wake()
        poller = select.poll()
        for fd in (wake.read, self.control.fileno(), self.taken_r):
            poller.register(fd, select.POLLIN)
        self._fork_spare(wake)
        while True:
            if wake.flags & {signal.SIGTERM, signal.SIGHUP}:
                self._shut_down(0.0, wake)
            wake.flags.discard(signal.SIGCHLD)
            self._reap()
            if not self.spare and not self.taking:
                self._fork_spare(wake)
            for fd, _ in poller.poll():
                if fd == wake.read:
                    wake.drain()
                elif fd == self.taken_r:
                    # `t`: the spare took a request and is a command's shim now;
                    # `s`: its command started, so the next spare is forked now
                    # (forking it meanwhile would take the CPU the start needs).
                    with contextlib.suppress(BlockingIOError):
                        for note in os.read(self.taken_r, 64):
                            if note == ord("t"):
                                self.taking, self.spare = self.spare, 0
                            else:
                                self.taking = 0
                else:
                    try:
                        message = self.control.recv(64)
                    except InterruptedError:
                        continue
                    except OSError:
                        message = b""
                    if message[:1] == b"X":
                        self._shut_down(float(message[1:]), wake)
                    elif not message:
                        # The executor closed its end, or died: nothing may outlive it.
                        self._shut_down(0.0, wake)

    def _fork_spare(self, wake: _Wake) -> None:
        """Fork the next shim ahead, so a command's start costs no fork of ours."""
        try:
            pid = os.fork()
        except OSError:
            return  # out of processes: the next loop tries again
        if pid == 0:
            try:
                self.control.close()
                os.close(wake.read)
                os.close(self.taken_r)
                _Spare(self.requests, self.taken_w, self.config, self.me).run()
            finally:
                os._exit(0)
        self.spare = pid
        self.shims.add(pid)

    def _reap(self) -> bool:
        """Reap what has exited. False once the supervisor has no child."""
        while True:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return False
            if pid == 0:
                return True
            self.shims.discard(pid)
            if pid == self.spare:
                self.spare = 0
            if pid == self.taking:
                self.taking = 0

    def _shut_down(self, grace: float, wake: _Wake) -> None:
        """End every command's tree: SIGTERM, up to `grace`, SIGKILL; then exit."""
        if self.spare:
            _send(self.spare, signal.SIGKILL)
        deadline = time.monotonic() + grace
        if grace > 0:
            for pid in self.shims:
                _send(pid, signal.SIGUSR1)
            while self.shims and self._reap() and time.monotonic() < deadline:
                select.select([wake.read], [], [], max(0.0, deadline - time.monotonic()))
                wake.drain()
        for pid in self.shims:
            _send(pid, signal.SIGTERM)
        # Orphans of a shim that was killed are the supervisor's now.
        while self._reap():
            base = self.config.get("v2")
            if base:
                with contextlib.suppress(OSError):
                    _write(os.path.join(base, "cgroup.kill"), "1")
            for pid in _descendants(self.me) if not self.shims else ():
                _send(pid, signal.SIGKILL)
            select.select([wake.read], [], [], 0.01)
            wake.drain()
        _remove_folders(self.config)
        os._exit(0)


def _remove_folders(config: dict[str, Any]) -> None:
    """Remove the executor's cgroup folders: every command's, then its own (all empty now)."""
    for base in [config.get("v2"), *config.get("v1", {}).values()]:
        if not base:
            continue
        with contextlib.suppress(OSError):
            for name in os.listdir(base):
                folder = os.path.join(base, name)
                if os.path.isdir(folder):
                    _rmdir(folder)
        _rmdir(base)


def _rmdir(folder: str) -> None:
    # A v1 memory cgroup may be busy a moment longer after its last process.
    for _ in range(50):
        try:
            os.rmdir(folder)
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.001)


class _Spare:
    """A shim forked ahead: a subreaper, in its cgroup already, waiting for a command."""

    def __init__(
        self, requests: socket.socket, taken: int, config: dict[str, Any], supervisor: int
    ) -> None:
        self.requests = requests
        self.taken = taken
        self.config = config
        self.supervisor = supervisor

    def run(self) -> None:
        # Until it has a tree, the supervisor's signals simply end it.
        signal.set_wakeup_fd(-1)
        for number in (signal.SIGTERM, signal.SIGUSR1, signal.SIGHUP, signal.SIGCHLD):
            signal.signal(number, signal.SIG_DFL)
        _prctl(_PR_SET_CHILD_SUBREAPER, 1)
        _prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != self.supervisor:
            return
        # A session of its own, and so (with autogroup scheduling) a share of
        # the CPU of its own: the start of its command never waits behind the
        # supervisor or another shim on a busy machine.
        os.setsid()
        me = os.getpid()
        cgroups: _Cgroups | None = None
        failure: OSError | None = None
        try:
            cgroups = _Cgroups(self.config, f"c{me}")
            cgroups.join()
        except OSError as error:
            failure = error
        while True:
            try:
                message, ancillary, _, _ = self.requests.recvmsg(
                    1 << 20, socket.CMSG_LEN(_MAX_FDS * 4), socket.MSG_CMSG_CLOEXEC
                )
            except OSError:
                message, ancillary = b"", []
            fds = array.array("i")
            for level, kind, payload in ancillary:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    fds.frombytes(payload[: len(payload) - len(payload) % 4])
            if not message:
                if cgroups is not None:
                    cgroups.leave()
                    cgroups.remove()
                return
            if message[:1] == b"R" and len(fds) >= 4:
                break
            for fd in fds:
                os.close(fd)
        # No longer a spare the supervisor may simply kill: a shim.
        os.write(self.taken, b"t")
        self.requests.close()
        shim = _Shim(marshal.loads(message[1:]), list(fds), self.config, cgroups, self.taken)
        if failure is not None:
            shim.fail(failure, "cgroup")
        shim.start()


def _send(pid: int, number: int) -> None:
    with contextlib.suppress(OSError):
        os.kill(pid, number)


def main() -> None:
    """Run the supervisor: `supervisor.py REQUESTS_FD CONTROL_FD PARENT_PID CONFIG`."""
    requests = socket.socket(fileno=int(sys.argv[1]))
    control = socket.socket(fileno=int(sys.argv[2]))
    parent = int(sys.argv[3])
    config = json.loads(sys.argv[4])
    # The mask of the thread that started it (a worker thread that blocks
    # SIGINT, say) is no business of the commands', nor of their shims', nor
    # is what the executor's process ignores (a `nohup`'s SIGHUP, say).
    signal.pthread_sigmask(signal.SIG_SETMASK, ())
    for number in _DEFAULTS:
        if signal.getsignal(number) == signal.SIG_IGN:
            signal.signal(number, signal.SIG_DFL)
    for sock in (requests, control):
        os.set_inheritable(sock.fileno(), False)
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)
    _prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent:
        return  # the executor died before the death signal was set
    _Supervisor(requests, control, config).run()


if __name__ == "__main__":
    main()
