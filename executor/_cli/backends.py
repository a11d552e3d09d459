"""The backend flags of `run` and `files`: `--sandbox`, `--docker IMAGE`, `--ssh HOST`.

Without one, commands run on this machine as `LocalExecutor` runs them. The
backends are imported only when asked for, so the plain `run` stays fast.
"""

from __future__ import annotations

import argparse
import os
import re
from typing import Any

import attrs

from executor._core.base import ToolExecutor

_SANDBOX_BACKENDS = ("auto", "bubblewrap", "landlock")
_HOSTNAME = re.compile(r"[^\s/@\[\]]+")


@attrs.frozen
class SshTarget:
    """Where `--ssh [USER@]HOST[:PORT]` logs in."""

    host: str
    user: str | None = None
    port: int = 22


def ssh_target(text: str) -> SshTarget:
    """Parse `[USER@]HOST[:PORT]`; an IPv6 address with a port is written `[ADDR]:PORT`."""
    user, at, rest = text.rpartition("@")
    if at and not user:
        raise argparse.ArgumentTypeError(f"expected [USER@]HOST[:PORT], got {text!r}: empty user")
    port_text = ""
    if rest.startswith("["):
        host, bracket, tail = rest[1:].partition("]")
        if not bracket or (tail and not tail.startswith(":")):
            raise argparse.ArgumentTypeError(
                f"expected [USER@]HOST[:PORT], got {text!r}: write an IPv6 address as [ADDR]:PORT"
            )
        port_text = tail[1:] if tail else ""
        if tail and not port_text:
            raise argparse.ArgumentTypeError(f"expected a port after ':', got {text!r}")
    elif rest.count(":") == 1:
        host, _, port_text = rest.partition(":")
        if not port_text:
            raise argparse.ArgumentTypeError(f"expected a port after ':', got {text!r}")
    else:
        # A bare IPv6 address (several colons) has no port.
        host = rest
    if not host or not _HOSTNAME.fullmatch(host):
        what = f"bad host {host!r}" if host else "no host"
        raise argparse.ArgumentTypeError(f"expected [USER@]HOST[:PORT], got {text!r}: {what}")
    port = 22
    if port_text:
        if not port_text.isdigit() or not 0 < int(port_text) < 65536:
            raise argparse.ArgumentTypeError(
                f"expected a port from 1 to 65535, got {port_text!r} in {text!r}"
            )
        port = int(port_text)
    return SshTarget(host, user or None, port)


def add_backend_flags(parser: argparse.ArgumentParser, *, sandbox: bool) -> None:
    """Add `--docker`, `--ssh` (with `--ssh-key`, `--known-hosts`) and, if asked, `--sandbox`."""
    where = "on this machine, unconfined" if sandbox else "on this machine"
    group = parser.add_argument_group("where it runs", f"At most one of these; without, {where}.")
    choice = group.add_mutually_exclusive_group()
    if sandbox:
        choice.add_argument(
            "--sandbox",
            nargs="?",
            const="auto",
            choices=_SANDBOX_BACKENDS,
            metavar="BACKEND",
            help=(
                "on this machine under an OS sandbox: read-only but for the workdir, no home "
                "folder, no network; BACKEND is bubblewrap, landlock or auto (the default)"
            ),
        )
    choice.add_argument(
        "--docker",
        metavar="IMAGE",
        help="in a new container of IMAGE (network none, workdir /workspace), removed after",
    )
    choice.add_argument(
        "--ssh",
        type=ssh_target,
        metavar="[USER@]HOST[:PORT]",
        help="on a remote host over SSH (workdir: the user's home)",
    )
    group.add_argument(
        "--ssh-key",
        action="append",
        default=[],
        metavar="PATH",
        help="private key to log in with (repeatable; default: ~/.ssh/id_* and the agent)",
    )
    group.add_argument(
        "--known-hosts",
        metavar="PATH",
        help="the known_hosts file the host key must be in (default: ~/.ssh/known_hosts)",
    )


def check_backend_flags(args: argparse.Namespace) -> str | None:
    """What is wrong with the backend flags, naming the flag and the file; `None` if nothing."""
    if args.ssh is None:
        for flag, given in (("--ssh-key", args.ssh_key), ("--known-hosts", args.known_hosts)):
            if given:
                return f"{flag} needs --ssh [USER@]HOST[:PORT]"
        return None
    for flag, path in [("--ssh-key", key) for key in args.ssh_key] + [
        ("--known-hosts", args.known_hosts)
    ]:
        if path is None:
            continue
        problem = _unreadable(path)
        if problem is not None:
            return f"{flag} {path}: {problem}"
    return None


def _unreadable(path: str) -> str | None:
    """Why the file at `path` cannot be read, or `None` when it can."""
    expanded = os.path.expanduser(path)
    if os.path.isdir(expanded):
        return "is a folder, not a file"
    try:
        with open(expanded, "rb"):
            pass
    except OSError as error:
        return error.strerror or type(error).__name__
    return None


def make_executor(
    args: argparse.Namespace, *, workdir: str | None = None, **options: Any
) -> ToolExecutor:
    """The executor the backend flags ask for, with `workdir` (else the backend's) and `options`.

    Raises:
        ExecutorError: The sandbox asked for cannot be given here.
        ImportError: The backend's extra (`tool-executor[docker]`, `tool-executor[ssh]`) is missing.
        ValueError: An option the backend refuses (a malformed `DOCKER_HOST`, say).

    """
    if workdir is not None:
        options["workdir"] = workdir
    if args.docker is not None:
        from executor._docker.executor import DockerExecutor

        return DockerExecutor(args.docker, **options)
    if args.ssh is not None:
        from executor._ssh.executor import SshExecutor

        target: SshTarget = args.ssh
        ssh: dict[str, Any] = {"port": target.port, "user": target.user}
        if args.ssh_key:
            ssh["client_keys"] = args.ssh_key
        if args.known_hosts is not None:
            ssh["known_hosts"] = args.known_hosts
        return SshExecutor(target.host, **ssh, **options)
    from executor._local.executor import LocalExecutor

    sandbox = getattr(args, "sandbox", None)
    if sandbox is not None:
        from executor._sandbox.sandbox import Sandbox

        options["sandbox"] = Sandbox(backend=sandbox)
    return LocalExecutor(**options)
