"""A private OpenSSH server for the SSH tests and benchmark: own config, keys, port.

`start_server()` runs `/usr/sbin/sshd -D -e` on 127.0.0.1 and a free port,
with a host key, a client key and an `authorized_keys` file of its own in a
temporary folder, and returns an `SshServer` that knows how to reach it and
how to stop it (by pid), or to restart it with or without the processes
serving its connections (for the fault tests). Nothing of the machine's own
ssh setup is used or changed, except that, as root, a user `executor-ssh`
with the login shell `/bin/sh` is created once: sshd runs every command
through the user's login shell, and bash would source `~/.bashrc` each time
(tens of milliseconds per command, and whatever output the file makes).
Without root, the server runs as the current user and logs in as that user.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
import psutil

if TYPE_CHECKING:
    from executor import SshExecutor

__all__ = ["SSHD", "TEST_USER", "SshServer", "start_server"]

SSHD = "/usr/sbin/sshd"
TEST_USER = "executor-ssh"
_TEST_HOME = "/var/lib/executor-ssh"


@attrs.define(eq=False)
class SshServer:
    """A running private sshd and what a client needs to log in to it."""

    host: str
    port: int
    user: str
    client_key: str
    known_hosts: str
    host_key: str
    root: Path
    process: subprocess.Popen[bytes]
    _serial: int = 0

    def workdir(self) -> str:
        """A new empty folder the login user owns, for one test."""
        self._serial += 1
        path = self.root / "work" / str(self._serial)
        path.mkdir(parents=True)
        info = pwd.getpwnam(self.user)
        os.chown(path, info.pw_uid, info.pw_gid)
        return str(path)

    def executor(self, *, workdir: str | None = None, **options: Any) -> SshExecutor:
        """An SshExecutor that logs in to this server, in `workdir` (by default a new `workdir()`).

        `options` go to `SshExecutor` as they are (`kill_grace=`, `login=`, ...).
        """
        from executor import SshExecutor

        return SshExecutor(
            self.host,
            port=self.port,
            user=self.user,
            client_keys=[self.client_key],
            known_hosts=self.known_hosts,
            workdir=self.workdir() if workdir is None else workdir,
            **options,
        )

    def log(self) -> str:
        """What sshd wrote to its log so far."""
        try:
            return (self.root / "sshd.log").read_text(errors="replace")
        except OSError:
            return ""

    def serving(self) -> list[psutil.Process]:
        """The sshd processes serving open connections (not the commands they started)."""
        try:
            below = psutil.Process(self.process.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []
        found = []
        for process in below:
            with contextlib.suppress(psutil.Error):
                if process.exe() == SSHD:
                    found.append(process)
        return found

    def restart(self, *, sessions: bool) -> None:
        """Stop sshd (SIGTERM, by pid) and start it again: the same port, keys and config.

        Args:
            sessions: Also SIGKILL (by pid) the sshd processes serving open
                connections, as a service manager that stops sshd's whole
                group does: every connection drops, and the commands they
                started are left to whatever ends them. Without it this is
                OpenSSH's own restart, which leaves open connections be.

        Raises:
            RuntimeError: sshd did not start again (its log is in the message).

        """
        serving = self.serving() if sessions else []
        self.process.terminate()
        self.process.wait(10)
        for process in serving:
            with contextlib.suppress(psutil.NoSuchProcess):
                process.kill()
        self.process = _launch(self.root)
        if not _listening(self.process, self.port):
            raise RuntimeError(f"sshd did not start again on port {self.port}:\n{self.log()}")

    def stop(self) -> None:
        """Stop the server (by its pid) and remove its folder."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.root, ignore_errors=True)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _keygen(path: Path) -> None:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "executor-test", "-f", str(path)],
        check=True,
        stdin=subprocess.DEVNULL,
    )


def login_user() -> str:
    """The user to log in as: `executor-ssh` (made once, login shell /bin/sh) as root."""
    if os.geteuid() != 0:
        return pwd.getpwuid(os.geteuid()).pw_name
    try:
        pwd.getpwnam(TEST_USER)
    except KeyError:
        subprocess.run(
            [
                "useradd",
                "--system",
                "--shell",
                "/bin/sh",
                "--home-dir",
                _TEST_HOME,
                "--create-home",
                TEST_USER,
            ],
            check=True,
        )
    # useradd locks the password with "!", and sshd then refuses even key
    # logins; "*" allows no password either, but is not "locked". Changed only
    # when needed: usermod rewrites /etc/passwd, which tests running meanwhile
    # (another pytest beside this one) watch for changes.
    if _shadow_password(TEST_USER) != "*":
        subprocess.run(["usermod", "-p", "*", TEST_USER], check=True)
    return TEST_USER


def _shadow_password(user: str) -> str | None:
    """The password field of `user` in /etc/shadow, or None where it cannot be read."""
    try:
        with open("/etc/shadow", encoding="utf-8") as shadow:
            for line in shadow:
                name, _, rest = line.partition(":")
                if name == user:
                    return rest.split(":", 1)[0]
    except OSError:
        return None
    return None


def start_server(*, max_sessions: int = 10) -> SshServer | None:
    """Start a private sshd, or return None when `/usr/sbin/sshd` is not installed.

    Args:
        max_sessions: sshd's `MaxSessions`: channels one connection may hold open.

    Raises:
        RuntimeError: sshd is installed but did not start (its log is in the message).

    """
    if not os.path.exists(SSHD) or shutil.which("ssh-keygen") is None:
        return None
    user = login_user()
    root = Path(tempfile.mkdtemp(prefix="executor-sshd-"))
    # The login user must reach its workdirs below this folder.
    root.chmod(0o755)
    (root / "work").mkdir(mode=0o755)
    host_key = root / "host_ed25519"
    client_key = root / "client_ed25519"
    _keygen(host_key)
    _keygen(client_key)
    authorized = root / "authorized_keys"
    shutil.copy(f"{client_key}.pub", authorized)
    authorized.chmod(0o644)
    port = _free_port()
    host_public = Path(f"{host_key}.pub").read_text().split()
    known_hosts = root / "known_hosts"
    known_hosts.write_text(f"[127.0.0.1]:{port} {host_public[0]} {host_public[1]}\n")
    config = root / "sshd_config"
    config.write_text(
        "\n".join(
            [
                f"Port {port}",
                "ListenAddress 127.0.0.1",
                f"HostKey {host_key}",
                f"PidFile {root / 'sshd.pid'}",
                f"AuthorizedKeysFile {authorized}",
                # The keys live in a temporary folder below /tmp, which is
                # world-writable: the strict checks would refuse them.
                "StrictModes no",
                "PubkeyAuthentication yes",
                "PasswordAuthentication no",
                "KbdInteractiveAuthentication no",
                "UsePAM no",
                f"AllowUsers {user}",
                "PermitRootLogin prohibit-password",
                f"MaxSessions {max_sessions}",
                "Subsystem sftp internal-sftp",
                "PrintMotd no",
                "PrintLastLog no",
                "LogLevel ERROR",
                "",
            ]
        )
    )
    if os.geteuid() == 0:
        # Privilege separation needs this folder (the package makes it at boot).
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
    process = _launch(root)
    server = SshServer(
        host="127.0.0.1",
        port=port,
        user=user,
        client_key=str(client_key),
        known_hosts=str(known_hosts),
        host_key=str(host_key),
        root=root,
        process=process,
    )
    if _listening(process, port):
        return server
    message = server.log()
    server.stop()
    raise RuntimeError(f"sshd did not start on port {port}:\n{message}")


def _launch(root: Path) -> subprocess.Popen[bytes]:
    """Run sshd with the config in `root`, its log appended to `root/sshd.log`."""
    log = open(root / "sshd.log", "ab")  # noqa: SIM115 (handed to the child)
    with log:
        return subprocess.Popen(
            [SSHD, "-D", "-e", "-f", str(root / "sshd_config")],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
        )


def _listening(process: subprocess.Popen[bytes], port: int) -> bool:
    """Wait up to 10 s for sshd to accept connections on `port`; False if it exited or did not."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if process.poll() is not None:
            return False
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return True
        time.sleep(0.02)
    return False
