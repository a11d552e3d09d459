"""The in-container helper: one long-lived exec that starts the commands itself.

`DockerExecutor` runs this file's source with `python3 -c` inside the
container (never imported by the package). It reads requests on stdin and
writes events on stdout, both as frames: a kind byte, a command id and a
payload length (`>BII`), then the payload. Starting a process here costs a
fork and an exec instead of an Engine API exec (about 40 ms of runc), with
the same guarantees: every command runs in its own session and process
group with its tree's mark in the environment, and a kill ends the group and
every marked process (SIGTERM, the grace, SIGKILL) and reports when none is
left. When its input ends (the executor is gone) it kills every tree it
started and exits.

Written for any Python 3.7 or later, with the standard library alone: the
image's Python is not ours to choose (annotations are never evaluated).
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import struct
import subprocess
import sys
import time
from typing import Any

# Requests.
START, STDIN, EOF, KILL, SIGNAL, RELEASE = 1, 2, 3, 4, 5, 6
# Events.
STARTED, OUT, ERR, EXIT, FAILED, KILLED, READY, CLOSED = 10, 11, 12, 13, 14, 15, 16, 17
HEADER = struct.Struct(">BII")
BLOCK = 65536
# Where the container's memory cgroup counts its OOM kills: v2, else v1.
OOM_FILES = ("/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory/memory.oom_control")


def send(kind: int, ident: int, payload: bytes = b"") -> None:
    """Write one event frame to stdout, whole."""
    data = HEADER.pack(kind, ident, len(payload)) + payload
    view = memoryview(data)
    while view:
        view = view[os.write(1, view) :]


def marked(mark: str) -> list[int]:
    """Pids of the processes whose environment holds `mark` (NAME=VALUE)."""
    needle = mark.encode()
    found = []
    me = os.getpid()
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                entries = f.read().split(b"\0")
        except OSError:
            continue
        if needle in entries:
            found.append(int(name))
    return found


def signal_tree(group: int, mark: str, number: int) -> bool:
    """Send `number` to the group and every marked process; return whether any was left."""
    left = False
    if group:
        try:
            os.killpg(group, number)
            left = True
        except OSError:
            pass
    for pid in marked(mark):
        try:
            os.kill(pid, number)
            left = True
        except OSError:
            pass
    return left


def oom_count() -> int | None:
    """The container's count of OOM kills (`oom_kill`), or `None` where its cgroup has none."""
    for path in OOM_FILES:
        try:
            with open(path, "rb") as f:
                text = f.read()
        except OSError:
            continue
        for line in text.splitlines():
            key, _, value = line.partition(b" ")
            if key == b"oom_kill" and value.strip().isdigit():
                return int(value)
        return None
    return None


def _ignore(number: int, frame: Any) -> None:
    """A SIGCHLD handler that does nothing: the wakeup fd is what wakes the loop."""


class Command:
    """One started process and its pipes."""

    def __init__(
        self, ident: int, process: subprocess.Popen[bytes], mark: str, oom: int | None
    ) -> None:
        self.ident = ident
        # The container's OOM kills when it started.
        self.oom = oom
        self.process = process
        self.mark = mark
        self.pid = process.pid
        self.exited = False
        self.pending = b""
        self.close_input = False
        self.kill_at: float | None = None
        self.killing = False
        self.released = False
        self.streams: dict[int, tuple[int, Any]] = {}
        for kind, stream in ((OUT, process.stdout), (ERR, process.stderr)):
            if stream is not None:
                os.set_blocking(stream.fileno(), False)
                self.streams[stream.fileno()] = (kind, stream)
        if process.stdin is not None:
            os.set_blocking(process.stdin.fileno(), False)


class Helper:
    """The request loop."""

    def __init__(self) -> None:
        self.selector = selectors.DefaultSelector()
        self.commands: dict[int, Command] = {}
        self.input = b""
        self.wake_read, self.wake_write = os.pipe()
        os.set_blocking(self.wake_read, False)
        os.set_blocking(self.wake_write, False)
        signal.set_wakeup_fd(self.wake_write)
        signal.signal(signal.SIGCHLD, _ignore)
        self.selector.register(0, selectors.EVENT_READ, "control")
        self.selector.register(self.wake_read, selectors.EVENT_READ, "wake")

    def run(self) -> None:
        send(READY, 0, json.dumps({"pid": os.getpid()}).encode())
        while True:
            timeout: float | None = None
            now = time.monotonic()
            for command in self.commands.values():
                if command.kill_at is not None:
                    # Checked every 20 ms: a tree gone before its grace ends sooner.
                    wait = max(0.0, min(command.kill_at - now, 0.02))
                    timeout = wait if timeout is None else min(timeout, wait)
            for key, events in self.selector.select(timeout):
                if key.data == "control":
                    if not self.read_control():
                        self.shutdown()
                        return
                elif key.data == "wake":
                    with contextlib.suppress(OSError):
                        os.read(self.wake_read, 4096)
                elif events & selectors.EVENT_WRITE:
                    # An earlier event of this batch may have closed it.
                    stdin = key.data.process.stdin
                    if stdin is not None and not stdin.closed and stdin.fileno() == key.fd:
                        self.write_input(key.data)
                elif key.fd in key.data.streams:
                    self.read_output(key.data, key.fd)
            self.reap()
            self.kills()

    def read_control(self) -> bool:
        try:
            data = os.read(0, BLOCK)
        except OSError:
            return False
        if not data:
            return False
        self.input += data
        while len(self.input) >= HEADER.size:
            kind, ident, size = HEADER.unpack_from(self.input)
            if len(self.input) < HEADER.size + size:
                break
            payload = self.input[HEADER.size : HEADER.size + size]
            self.input = self.input[HEADER.size + size :]
            self.request(kind, ident, payload)
        return True

    def request(self, kind: int, ident: int, payload: bytes) -> None:
        if kind == START:
            self.start(ident, json.loads(payload.decode()))
            return
        command = self.commands.get(ident)
        if command is None:
            if kind == KILL:
                send(KILLED, ident)
            return
        if kind == STDIN:
            self.queue_input(command, payload)
        elif kind == EOF:
            command.close_input = True
            self.queue_input(command, b"")
        elif kind == KILL:
            grace = float(json.loads(payload.decode())["grace"])
            command.killing = True
            self.close_stdin(command)
            signal_tree(command.pid if not command.exited else 0, command.mark, signal.SIGTERM)
            command.kill_at = time.monotonic() + grace
        elif kind == SIGNAL:
            if not command.exited:
                with contextlib.suppress(OSError):
                    os.killpg(command.pid, int(payload.decode()))
        elif kind == RELEASE:
            self.forget(command)

    def start(self, ident: int, request: dict[str, Any]) -> None:
        argv = request["argv"]
        cwd = request["cwd"]
        if request.get("replace"):
            env = dict(request["env"])
        else:
            env = dict(os.environ)
            env.update(request["env"])
        if not os.path.isdir(cwd):
            self.failed(ident, 1, f"cannot run in {cwd}: No such file or directory")
            return
        oom = oom_count()
        try:
            process = subprocess.Popen(
                argv,
                cwd=cwd,
                env=env,
                stdin=subprocess.PIPE if request.get("stdin") else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
                close_fds=True,
                restore_signals=True,
            )
        except FileNotFoundError:
            self.failed(ident, 127, f"{argv[0]}: command not found")
            return
        except OSError as error:
            self.failed(ident, 126, f"{argv[0]}: {error.strerror or error}")
            return
        command = Command(ident, process, request["mark"], oom)
        self.commands[ident] = command
        for fd in command.streams:
            self.selector.register(fd, selectors.EVENT_READ, command)
        send(STARTED, ident, str(process.pid).encode())

    def failed(self, ident: int, code: int, message: str) -> None:
        send(FAILED, ident, json.dumps({"code": code, "message": message}).encode())

    def read_output(self, command: Command, fd: int) -> bool:
        """Read once from a command's pipe; return whether there may be more right away."""
        kind, stream = command.streams[fd]
        try:
            data = os.read(fd, BLOCK)
        except BlockingIOError:
            return False
        except OSError:
            data = b""
        if data:
            send(kind, command.ident, data)
            return True
        self.selector.unregister(fd)
        stream.close()
        del command.streams[fd]
        if not command.streams:
            send(CLOSED, command.ident)
        return False

    def queue_input(self, command: Command, data: bytes) -> None:
        stdin = command.process.stdin
        if stdin is None or stdin.closed:
            return
        registered = bool(command.pending)
        command.pending += data
        if not registered:
            self.write_input(command)

    def write_input(self, command: Command) -> None:
        stdin = command.process.stdin
        if stdin is None or stdin.closed:
            return
        fd = stdin.fileno()
        try:
            while command.pending:
                written = os.write(fd, command.pending[:BLOCK])
                command.pending = command.pending[written:]
        except BlockingIOError:
            pass
        except OSError:
            # The command stopped reading: what it did not take is dropped.
            command.pending = b""
        with contextlib.suppress(KeyError, ValueError):
            self.selector.unregister(fd)
        if command.pending:
            self.selector.register(fd, selectors.EVENT_WRITE, command)
        elif command.close_input:
            self.close_stdin(command)

    def close_stdin(self, command: Command) -> None:
        stdin = command.process.stdin
        if stdin is not None and not stdin.closed:
            with contextlib.suppress(KeyError, ValueError):
                self.selector.unregister(stdin.fileno())
            with contextlib.suppress(OSError):
                stdin.close()

    def reap(self) -> None:
        for command in list(self.commands.values()):
            if command.exited:
                continue
            code = command.process.poll()
            if code is None:
                continue
            command.exited = True
            self.close_stdin(command)
            # What the process wrote before it ended is in its pipes now: it
            # goes out before the exit, however late the loop got to it.
            for fd in list(command.streams):
                while fd in command.streams and self.read_output(command, fd):
                    pass
            # A signal's death is told apart from an exit with the same code:
            # `CODE SIGNAL` then, as the wait status says.
            status = f"{128 - code} {-code}" if code < 0 else str(code)
            # ` oom`: the container counted an OOM kill while it ran.
            if command.oom is not None and (oom_count() or 0) > command.oom:
                status += " oom"
            send(EXIT, command.ident, status.encode())
            if command.released and command.kill_at is None:
                del self.commands[command.ident]

    def kills(self) -> None:
        now = time.monotonic()
        for command in list(self.commands.values()):
            if command.kill_at is None:
                continue
            group = command.pid if not command.exited else 0
            if command.kill_at > now and signal_tree(group, command.mark, 0):
                continue
            for _ in range(100):
                if not signal_tree(group, command.mark, signal.SIGKILL):
                    break
                time.sleep(0.005)
                self.reap()
                group = command.pid if not command.exited else 0
            command.kill_at = None
            send(KILLED, command.ident)
            if command.released and command.exited:
                del self.commands[command.ident]

    def forget(self, command: Command) -> None:
        self.close_stdin(command)
        for fd, (_, stream) in list(command.streams.items()):
            with contextlib.suppress(KeyError, ValueError):
                self.selector.unregister(fd)
            stream.close()
        command.streams.clear()
        command.released = True
        if command.exited and command.kill_at is None:
            del self.commands[command.ident]

    def shutdown(self) -> None:
        for command in list(self.commands.values()):
            signal_tree(command.pid if not command.exited else 0, command.mark, signal.SIGKILL)
        for command in list(self.commands.values()):
            for _ in range(100):
                if not signal_tree(0, command.mark, signal.SIGKILL):
                    break
                time.sleep(0.005)


if __name__ == "__main__":
    # Our stdout carries frames only; a stray print would break them.
    sys.stdout = sys.stderr
    Helper().run()
