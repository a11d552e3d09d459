"""`SshExecutor`: commands on a remote host over one multiplexed SSH connection.

Each command is a channel of its own on one connection (opened at the first
command, opened again when it has dropped); files go over SFTP on the same
connection. The remote side needs a POSIX login shell for the user, and for
killing trees Linux's `/proc`, `awk` and a `grep` with `-z` (GNU or BusyBox).

How a command runs there: sshd starts the user's login shell with a line
this module writes, in a new session and process group (sshd calls
`setsid()` for every command). The line exports a tag,
`EXECUTOR_PROCESS_TREE=OWNER_PID:EXECUTOR_ID/C/N`, that every process the
command starts inherits, changes to the command's folder, applies its
environment and `exec`s the program, so the login shell becomes it.
OpenSSH ignores the signal requests of the SSH protocol, so a timeout, a
cancellation or a failing sink kills the tree through a second channel:
a short `sh` script there finds every process whose environment carries the
tag (`grep -z` over `/proc/*/environ`) and their descendants (by parent
links), sends SIGTERM to them and to the process groups they lead, waits
out the grace period, and sends SIGKILL to what is left.

What the executor cannot do is kill anything once its own process is gone
(SIGKILLed, OOM-killed) or its connection is cut: sshd sends no signal to a
command without a terminal when its channel or connection ends, so the tree
would run on, reparented to init. So each connection carries a guard: a
channel opened with the connection, before any command, that runs a short
`sh` script reading its stdin until the end. The executor never writes to
it; the end comes when sshd's process for the connection exits, whichever
way the connection ended, and the guard then kills every tree started over
that connection, as a timeout kills one (`KILL_SCRIPT`, the executor's
grace). Tags carry the connection's number, `OWNER_PID:EXECUTOR_ID/C/N`, so
a guard ends only its own connection's commands, never those the executor
started since over a new one. A command costs nothing more for it.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import itertools
import math
import os
import posixpath
import re
import shlex
import signal
import stat
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, Literal, TypeVar

import anyio
import anyio.lowlevel
import attrs
import sniffio

from executor._core.base import (
    CommandRunner,
    LoadedFile,
    call_sink,
    non_negative,
)
from executor._core.cleanup import run_to_completion
from executor._core.commands import (
    Command,
    ReadFile,
    StrPath,
    WriteFile,
)
from executor._core.errors import ExecutorError, TimedOut
from executor._core.output import CommandOutput, Sink, Stdout
from executor._core.proc import TREE_VARIABLE
from executor._core.session import ProcessSession
from executor._core.treekill import (
    KILL_SCRIPT,
    SETTLE,
    TreeKiller,
    below_argv,
    kill_arguments,
    tree_pattern,
)
from executor._files.rules import normalise_extensions
from executor._ssh.errors import (
    ConnectAttempt,
    channel_error,
    connect_error,
    connection_lost,
    file_errors,
    is_channel_refusal,
    is_generic_failure,
    is_lost,
    is_missing,
    is_unsupported,
    known_hosts_error,
    makedirs_error,
    refused_at_limit,
    sftp_space_error,
    sftp_start_error,
    translated,
)
from executor._ssh.run import SshRun

if TYPE_CHECKING:
    import asyncssh

    from executor._ssh.remote import CommandChannel, HostKeyWitness

_T = TypeVar("_T")

_INSTALL_HINT: Final = "SshExecutor needs asyncssh: pip install 'tool-executor[ssh]'"
# Channels of the connection that commands never take: the SFTP subsystem, the
# channel that kills trees and the guard (OpenSSH counts all against MaxSessions).
_RESERVED_CHANNELS: Final = 3
# A channel refused at the server's MaxSessions is asked for again this many
# times, after 10 ms, 20 ms, ... (2.1 s in all).
_CHANNEL_RETRIES: Final = 20
_CHANNEL_RETRY_DELAY: Final = 0.01
# Seconds a kill, a signal or the close of the connection may take beyond
# the grace period before the executor stops waiting for the peer.
_REMOTE_SLACK: Final = 5.0
# read_file reads this much per request.
_FILE_BLOCK: Final = 1 << 18
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

# Run as `sh -c SIGNAL sh PATTERN NAME`: send signal NAME to the process group
# of the oldest live process whose environment matches PATTERN. That is the
# command's first process, which sshd made a session and group leader; its
# group is the command's, as a terminal's keys reach it.
_SIGNAL_SCRIPT: Final = r"""
pattern=$1 name=$2 oldest= group=
for f in $(grep -lz -e "$pattern" /proc/[0-9]*/environ 2>/dev/null); do
  p=${f#/proc/}; p=${p%/environ}
  { read -r s < "/proc/$p/stat"; } 2>/dev/null || continue
  set -- ${s##*) }
  [ "$1" = Z ] && continue
  if [ -z "$oldest" ] || [ "${20}" -lt "$oldest" ]; then oldest=${20} group=$3; fi
done
[ -z "$group" ] || kill -s "$name" -- "-$group" 2>/dev/null
exit 0
"""

# Run as `sh -c GUARD sh PATTERN GRACE SETTLE` in the guard channel (see the module's
# docstring): wait for the end of stdin, which comes when sshd's process for
# the connection exits, then kill every tree PATTERN finds (`KILL_SCRIPT` with
# no settling). Its output goes nowhere then, the channel's reader being gone;
# not before: the end of its output would have sshd send the channel's EOF.
_GUARD_SCRIPT: Final = (
    r"""
trap '' HUP INT PIPE
while read -r _; do :; done
exec >/dev/null 2>&1
"""
    + KILL_SCRIPT
)


def _remote_path(value: StrPath) -> str:
    path = os.fspath(value)
    if not isinstance(path, str) or not path or "\0" in path:
        raise ValueError(f"a remote path must be a non-empty str without NUL, got {path!r}")
    return path


def _keys(values: Iterable[StrPath] | None) -> tuple[str, ...] | None:
    if values is None:
        return None
    if isinstance(values, str | os.PathLike):
        values = (values,)
    return tuple(os.path.expanduser(os.fspath(value)) for value in values)


def _expanded(value: StrPath) -> str:
    return os.path.expanduser(os.fspath(value))


def _optional_path(value: StrPath | None) -> str | None:
    return None if value is None else _expanded(value)


def _port(_: object, attribute: attrs.Attribute[int], value: int) -> None:
    if not 0 < value < 65536:
        raise ValueError(f"port must be 1..65535, got {value!r}")


def _sessions(_: object, attribute: attrs.Attribute[int], value: int) -> None:
    if value <= _RESERVED_CHANNELS:
        raise ValueError(
            f"max_sessions must be > {_RESERVED_CHANNELS} "
            "(SFTP, kills and the connection's guard take one each), "
            f"got {value!r}"
        )


@attrs.define(eq=False)
class SshExecutor(CommandRunner):
    """Runs commands on a remote host over one SSH connection (`tool-executor[ssh]`, asyncssh).

    The connection opens at the first command and is reused: every command
    is a channel of its own on it, and up to `max_sessions - 3` run at once
    (OpenSSH's `MaxSessions`, 10 by default, counts the SFTP channel, the
    one that kills trees and the connection's guard too); more wait for a
    free channel. Keepalives notice a dead connection; one that dropped
    between commands is opened again at the next command (a command that
    was running when it dropped fails with `ExecutorError`; it is not run
    again). When the connection ends other than by `aclose()` (cut, or this
    process killed outright), the guard on the remote host kills every
    process the executor started over it within the kill grace (see the
    module's docstring).

    Host keys are checked against `known_hosts` (`~/.ssh/known_hosts` by
    default): an unknown or changed key refuses the connection with an
    `ExecutorError` naming the key's fingerprint. `check_host_key=False`
    turns the check off, for throwaway hosts only.

    Commands have the semantics of `LocalExecutor`: `sh -c` scripts, argv
    commands with no shell of their own, `#!` scripts run by their
    interpreter with the body as its stdin, separate streamed stdout and
    stderr, empty stdin unless given, the environment rules (applied on the
    remote host, over the login environment), and each command in its own
    session and process group there. A timeout, a cancellation or a failing
    sink kills the command's whole remote tree through a second channel (see
    the module's docstring); `TimedOut` carries the output read before. Files
    go over SFTP: exact bytes, `write_file` through a temporary file and an
    atomic rename, parents created. `stream_files` lists over SFTP with the
    rules of the local walker.

    sshd runs each command through the user's login shell; give the user a
    plain POSIX shell (`/bin/sh`): bash reads `~/.bashrc` for every command
    started over SSH, which can cost tens of milliseconds per command and may
    print text into the output.

    asyncssh runs on asyncio only: under trio every command raises
    `ExecutorError` saying so.

    Args:
        host: The host name or address.
        port: The SSH port.
        user: The user to log in as; `None` takes the local user name.
        workdir: The remote folder commands start in and file paths are
            relative to; a relative one is relative to the user's home.
        client_keys: Private key files to log in with; `None` tries the
            default keys (`~/.ssh/id_*`) and the agent.
        agent_path: The ssh-agent socket; `None` uses `SSH_AUTH_SOCK`.
        known_hosts: The known_hosts file host keys are checked against.
        check_host_key: Whether to check the host key at all.
        connect_timeout: Seconds to set up a connection (TCP and SSH).
        keepalive_interval: Seconds between keepalives on an idle connection.
        keepalive_count_max: Keepalives left unanswered before it counts as dropped.
        max_sessions: Channels the server allows on one connection.
        default_timeout: Seconds for commands without a timeout of their own.
        env_clear: Start from an empty environment instead of the login one.
        env_remove: Variables to drop from the login environment.
        envs: Variables to set; a command's own `with_env` comes last.
        output_limit: Bytes of output kept in memory per command (head and tail,
            the cut marked in `text()`); file reads are not cut.
        stream_output_limit: Bytes kept when a sink sees the output
            (`exec_cmd_streaming`): at most this (4 MiB by default) and
            `output_limit`; `None` leaves it to `output_limit`. File reads
            keep `output_limit`.
        read_limit: Bytes a `read_file` may return; past it the read fails.
        spill: A folder (or `True`: a temporary one) to keep the whole of a
            cut output in, a file per command (`CommandOutput.elided.spill`).
        login: Run shell scripts in a login shell, `bash --login -c`, so
            `/etc/profile` and the profile files apply; where the host has no
            bash, such a command fails with `ExecutorError`. A command's own
            `Command.shell(..., login=)` wins.
        kill_grace: Seconds between SIGTERM and SIGKILL when a tree is killed.
        drain_timeout: After a command exits, how long to go on reading while
            a background process still holds its output.

    """

    host: str
    port: int = attrs.field(default=22, kw_only=True, validator=_port)
    user: str | None = attrs.field(default=None, kw_only=True)
    workdir: str = attrs.field(default=".", kw_only=True, converter=_remote_path)
    client_keys: tuple[str, ...] | None = attrs.field(default=None, kw_only=True, converter=_keys)
    agent_path: str | None = attrs.field(default=None, kw_only=True, converter=_optional_path)
    known_hosts: str = attrs.field(default="~/.ssh/known_hosts", kw_only=True, converter=_expanded)
    check_host_key: bool = attrs.field(default=True, kw_only=True)
    connect_timeout: float = attrs.field(default=15.0, kw_only=True, validator=non_negative)
    keepalive_interval: float = attrs.field(default=15.0, kw_only=True, validator=non_negative)
    keepalive_count_max: int = attrs.field(default=3, kw_only=True)
    max_sessions: int = attrs.field(default=10, kw_only=True, validator=_sessions)
    _id: str = attrs.field(
        init=False, factory=lambda: f"{os.getpid()}:{uuid.uuid4().hex}", repr=False
    )
    _serial: itertools.count[int] = attrs.field(init=False, factory=itertools.count, repr=False)
    # Numbers the connections: a command's tag says which one it started over.
    _generation: itertools.count[int] = attrs.field(init=False, factory=itertools.count, repr=False)
    _connection: asyncssh.SSHClientConnection | None = attrs.field(
        init=False, default=None, repr=False
    )
    _witness: HostKeyWitness | None = attrs.field(init=False, default=None, repr=False)
    _sftp: asyncssh.SFTPClient | None = attrs.field(init=False, default=None, repr=False)
    _base_env: dict[str, str] | None = attrs.field(init=False, default=None, repr=False)
    _connect_lock: anyio.Lock | None = attrs.field(init=False, default=None, repr=False)
    _kill_lock: anyio.Lock | None = attrs.field(init=False, default=None, repr=False)
    _channels: anyio.CapacityLimiter | None = attrs.field(init=False, default=None, repr=False)
    # Whether a command ever ran: aclose() only has remote processes to end then.
    _started: bool = attrs.field(init=False, default=False, repr=False)
    # Set once aclose() has begun; set when it is done, for a concurrent call to wait on.
    _killer: TreeKiller = attrs.field(init=False, factory=TreeKiller, repr=False)

    def __repr__(self) -> str:
        who = f"{self.user}@{self.host}" if self.user else self.host
        if self.port != 22:
            who = f"{who}:{self.port}"
        return f"SshExecutor({who!r}, workdir={self.workdir!r})"

    # --- the public interface ------------------------------------------------

    async def start(self, cmd: Command, *, pty: bool = False) -> ProcessSession:
        """Return a session for a shell or argv command: `async with await ex.start(cmd)`.

        The command starts on the remote host when the session is entered, as
        `exec_cmd` would start it, in a channel of its own that it holds until
        the session ends; with `pty=True` sshd gives it a pseudo-terminal
        (80x24, `TERM=xterm`). A command's own `stdin` is written first and
        the input stays open. `Signal` reaches the command's process group on
        the remote host; the kill at the end reaches its whole tree.

        Raises:
            ExecutorError: The executor is closed, runs under trio, or the
                command is a file operation or a `#!` script (its body is the
                interpreter's stdin).

        """
        argv = self._session_argv(cmd)
        return self._run_session(functools.partial(self.open_run, cmd, argv, pty=pty), cmd, pty=pty)

    async def stream_files(
        self, path: StrPath, extensions: Iterable[str] | None = None
    ) -> AsyncIterator[LoadedFile]:
        """Yield the text files below `path` (relative to `workdir`), listed over SFTP."""
        from executor._ssh.files import sftp_text_files

        self._check_open()
        raw = os.fspath(path)
        display = posixpath.normpath(raw)
        if display == ".":
            display = ""
        wanted = normalise_extensions(extensions)
        root = self._join(None, raw)
        sftp = await self._sftp_client()
        async for loaded in sftp_text_files(sftp, root, display, wanted):
            yield loaded

    async def _shut_down(self) -> None:
        """aclose()'s work: the kill of every tree of this executor, then the connection's close."""
        if self._connect_lock is not None:
            # A connection being opened closes itself when it sees the executor
            # closed; waited for, a bounded time, so that none is left after this.
            with anyio.move_on_after(_REMOTE_SLACK):
                async with self._connect_lock:
                    pass
        connection, self._connection = self._connection, None
        sftp, self._sftp = self._sftp, None
        if connection is None:
            return
        if self._started and not connection.is_closed():
            deadline = anyio.current_time() + self.kill_grace
            with contextlib.suppress(Exception):
                await self._kill_on(connection, self._id, prefix=True, deadline=deadline)
        await _close_connection(connection, sftp)

    # --- connection ----------------------------------------------------------

    def _check_open(self) -> None:
        super()._check_open()
        if sniffio.current_async_library() != "asyncio":
            raise ExecutorError(
                "SshExecutor needs asyncio: asyncssh has no trio support "
                "(run it under asyncio, e.g. anyio.run(..., backend='asyncio'))"
            )

    def _where(self) -> str:
        user = f"{self.user}@" if self.user else ""
        return f"{user}{self.host}:{self.port}"

    async def _connect(
        self, *, failed: asyncssh.SSHClientConnection | None = None
    ) -> asyncssh.SSHClientConnection:
        """The connection, opened now if there is none, it dropped, or it is `failed`."""
        if self._closed:
            raise ExecutorError("the executor is closed")
        connection = self._connection
        witness = self._witness
        if (
            connection is not None
            and connection is not failed
            and witness is not None
            and not witness.lost
            and not connection.is_closed()
        ):
            return connection
        if self._connect_lock is None:
            self._connect_lock = anyio.Lock()
        async with self._connect_lock:
            if self._closed:
                raise ExecutorError("the executor is closed")
            if self._connection is not None and self._connection is not connection:
                return self._connection  # Another task reconnected meanwhile.
            self._drop()
            opened = await self._open_connection()
            try:
                await self._start_guard(opened)
            except BaseException:
                await run_to_completion(lambda: _close_connection(opened))
                raise
            if self._closed:
                # aclose() came while it opened: nothing may start on it.
                await run_to_completion(lambda: _close_connection(opened))
                raise ExecutorError("the executor is closed")
            self._connection = opened
            return opened

    async def _start_guard(self, connection: asyncssh.SSHClientConnection) -> None:
        """Open the guard channel of a new `connection` (see the module's docstring).

        Returned once sshd has started it, before any command starts over
        the connection.
        """
        from executor._ssh.remote import GuardChannel

        pattern = tree_pattern(_tag_prefix(connection), prefix=True)
        # `exec`: the login shell becomes the guard, one process for the connection's life.
        arguments = kill_arguments(pattern, self.kill_grace)
        line = "exec " + shlex.join(["sh", "-c", _GUARD_SCRIPT, "sh", *arguments])
        try:
            await connection.create_session(GuardChannel, line, encoding=None)
        except BaseException as error:
            failure = channel_error(error, self._where(), self.max_sessions)
            if failure is None:
                raise
            raise failure from error

    def _drop(self) -> None:
        connection, self._connection = self._connection, None
        sftp, self._sftp = self._sftp, None
        self._base_env = None
        if sftp is not None:
            sftp.exit()
        if connection is not None:
            connection.abort()

    async def _open_connection(self) -> asyncssh.SSHClientConnection:
        try:
            from executor._ssh import remote
        except ImportError as error:
            raise ImportError(_INSTALL_HINT) from error
        asyncssh = remote.asyncssh
        known_hosts: Any = None
        if self.check_host_key:
            with translated(known_hosts_error, self.known_hosts):
                try:
                    known_hosts = asyncssh.read_known_hosts(self.known_hosts)
                except FileNotFoundError:
                    # No file: no host is trusted, which the refusal below says.
                    known_hosts = asyncssh.import_known_hosts("")
        witness = remote.HostKeyWitness(f"{self._id}/{next(self._generation)}")
        attempt = ConnectAttempt(
            where=self._where(),
            host=self.host,
            port=self.port,
            known_hosts=self.known_hosts,
            trusted=known_hosts,
            client_keys=self.client_keys,
            witness=witness,
        )
        options: dict[str, Any] = {
            "port": self.port,
            "known_hosts": known_hosts,
            "keepalive_interval": self.keepalive_interval,
            "keepalive_count_max": self.keepalive_count_max,
            "connect_timeout": self.connect_timeout or None,
            "client_factory": lambda: witness,
        }
        if self.user is not None:
            options["username"] = self.user
        if self.client_keys is not None:
            options["client_keys"] = list(self.client_keys)
        if self.agent_path is not None:
            options["agent_path"] = self.agent_path
        with translated(connect_error, attempt):
            connection = await asyncssh.connect(self.host, **options)
        self._witness = witness
        return connection

    def _limiter(self) -> anyio.CapacityLimiter:
        if self._channels is None:
            self._channels = anyio.CapacityLimiter(self.max_sessions - _RESERVED_CHANNELS)
        return self._channels

    async def _open_channel(
        self, line: Callable[[str], str], *, pty: bool = False
    ) -> tuple[Any, CommandChannel, str]:
        """Open a channel running `line(tag)`, waiting for a free one of `max_sessions`.

        Returns the channel, its session and the command's tag, which names
        the connection it started over. The channel holds its slot until the
        server has closed it (sshd counts a channel against MaxSessions until
        then). A dropped connection is opened again, once: the command had
        not started.
        """
        limiter = self._limiter()
        token = object()
        await limiter.acquire_on_behalf_of(token)
        try:
            channel, session, tag = await self._open_channel_in_slot(line, pty=pty)
        except BaseException:
            limiter.release_on_behalf_of(token)
            raise
        session.on_closed(lambda: limiter.release_on_behalf_of(token))
        return channel, session, tag

    async def _open_channel_in_slot(
        self, line: Callable[[str], str], *, pty: bool
    ) -> tuple[Any, CommandChannel, str]:
        from executor._ssh.remote import CommandChannel

        terminal: dict[str, Any] = {"term_type": "xterm", "term_size": (80, 24)} if pty else {}
        failed = None
        refusals = 0
        attempt = 0
        while True:
            attempt += 1
            connection = await self._connect(failed=failed)
            tag = f"{_tag_prefix(connection)}/{next(self._serial)}"
            try:
                channel, session = await connection.create_session(
                    CommandChannel, line(tag), encoding=None, env={}, **terminal
                )
            except BaseException as error:
                failure = channel_error(error, self._where(), self.max_sessions)
                if failure is None:
                    # Cancelled with the request on its way: the server may start the command.
                    await run_to_completion(functools.partial(self._kill, tag, settle=True))
                    raise
                # The command never started: running it on a new connection is
                # safe, once; a refusal only if that came with the connection's end.
                if attempt == 1 and (connection.is_closed() or not is_channel_refusal(error)):
                    failed = connection
                    continue
                if refused_at_limit(error) and refusals < _CHANNEL_RETRIES:
                    # A slot sshd has not cleaned up yet: asked for again a little later.
                    refusals += 1
                    await anyio.sleep(_CHANNEL_RETRY_DELAY * refusals)
                    continue
                raise failure from error
            assert isinstance(session, CommandChannel)
            return channel, session, tag

    async def _sftp_client(self, failed: asyncssh.SFTPClient | None = None) -> asyncssh.SFTPClient:
        """The SFTP client of the connection (started at first use), replacing `failed`."""
        connection = self._connection
        if failed is not None and failed is self._sftp:
            # Its connection went with it: the next one is opened afresh.
            connection = await self._connect(failed=connection)
        else:
            connection = await self._connect()
        if self._sftp is not None and self._connection is connection:
            return self._sftp
        with translated(sftp_start_error, self._where()):
            # Names as bytes: a file name that is not UTF-8 is still a name.
            sftp = await connection.start_sftp_client(path_encoding=None)
        if self._connection is connection:
            self._sftp = sftp
        return sftp

    async def _with_sftp(self, operation: Callable[[asyncssh.SFTPClient], Awaitable[_T]]) -> _T:
        """Run `operation` with the SFTP client; once more on a new connection if it was lost.

        `operation` must be safe to run again when it failed that way (reads
        that delivered nothing yet; writes, whose temporary file is new each time).
        """
        sftp = await self._sftp_client()
        try:
            return await operation(sftp)
        except Exception as error:
            if not is_lost(error):
                raise
        sftp = await self._sftp_client(failed=sftp)
        with translated(connection_lost, self._where()):
            return await operation(sftp)

    # --- commands ------------------------------------------------------------

    def _join(self, cmd: Command | None, path: str | None = None) -> str:
        """The remote folder `cmd` runs in, or `path` resolved against it."""
        parts = [self.workdir]
        if cmd is not None and cmd.current_dir is not None:
            parts.append(cmd.current_dir)
        if path is not None:
            parts.append(path)
        joined = posixpath.join(*parts)
        # "./x" and "x" are the same place; the shorter one reads better in messages.
        return joined[2:] if joined.startswith("./") and len(joined) > 2 else joined

    async def _environment_changes(self, cmd: Command) -> tuple[list[str], dict[str, str]]:
        """What to unset and set over the login environment for `cmd`."""
        if not (self.env_remove or cmd.env_remove):
            return [], {**self.envs, **cmd.env}
        base = await self._login_environment()
        env = dict(base)
        for name in self.env_remove:
            env.pop(name, None)
        env.update(self.envs)
        env = cmd.environment_over(env)
        removed = [name for name in base if name not in env]
        changed = {name: value for name, value in env.items() if base.get(name) != value}
        return removed, changed

    async def _login_environment(self) -> dict[str, str]:
        """The environment a command starts with on the remote host (asked once per connection)."""
        connection = await self._connect()
        if self._base_env is None or self._connection is not connection:
            if self._kill_lock is None:
                self._kill_lock = anyio.Lock()
            # On the channel kept for kills: the commands' slots may all be taken.
            async with self._kill_lock:
                result = await connection.run("env -0", encoding=None, check=False)
            if result.exit_status != 0 or not isinstance(result.stdout, bytes):
                raise ExecutorError(
                    f"cannot read the login environment on {self._where()} "
                    "(`env -0` failed); env_remove needs it"
                )
            env = {}
            for entry in result.stdout.split(b"\0"):
                name, sep, value = entry.decode("utf-8", "surrogateescape").partition("=")
                if sep and name:
                    env[name] = value
            self._base_env = env
        return self._base_env

    def _command_line(
        self,
        cmd: Command,
        argv: Sequence[str],
        tag: str,
        removed: list[str],
        changed: Mapping[str, str],
    ) -> str:
        """The line the remote login shell runs: tag, folder, environment, then `exec` argv."""
        quote = shlex.quote
        parts = [f"{TREE_VARIABLE}={quote(tag)}", f"export {TREE_VARIABLE}"]
        directory = self._join(cmd)
        if directory != ".":
            parts.append(f"cd -- {quote(directory)} || exit 1")
        program = " ".join(quote(arg) for arg in argv)
        names = [*removed, *changed]
        if self.env_clear or not all(_IDENTIFIER.fullmatch(name) for name in names):
            # `env` takes any name; the shell's `export` only identifiers.
            settings = " ".join(quote(f"{name}={value}") for name, value in changed.items())
            if self.env_clear:
                env = dict(changed)
                env[TREE_VARIABLE] = tag
                settings = " ".join(quote(f"{name}={value}") for name, value in env.items())
                parts.append(f"exec env -i {settings} {program}")
            else:
                unset = " ".join(f"-u {quote(name)}" for name in removed)
                parts.append(f"exec env {unset} {settings} {program}")
            return "; ".join(parts)
        if removed:
            parts.append("unset " + " ".join(removed))
        for name, value in changed.items():
            parts.append(f"export {name}={quote(value)}")
        parts.append(f"exec {program}")
        return "; ".join(parts)

    async def _prepare(self, cmd: Command, argv: Sequence[str]) -> Callable[[str], str]:
        """The line that runs `argv` for `cmd` on the remote host, given the tag it carries."""
        if self.env_clear:
            removed: list[str] = []
            changed = cmd.environment_over(
                {k: v for k, v in self.envs.items() if k not in self.env_remove}
            )
        else:
            removed, changed = await self._environment_changes(cmd)
        return lambda tag: self._command_line(cmd, argv, tag, removed, changed)

    async def open_run(self, cmd: Command, argv: Sequence[str], *, pty: bool = False) -> SshRun:
        """Start `argv` for `cmd` in a channel of its own; the run that streams it to its end.

        `exec_cmd` and sessions start their commands here.

        Raises:
            ExecutorError: The executor is closed or runs under trio, or the
                host refused or could not be reached.

        """
        self._check_open()
        line = await self._prepare(cmd, argv)
        # From now on aclose() has remote processes to end.
        self._started = True
        channel, session, tag = await self._open_channel(line, pty=pty)
        return SshRun(_Host(self), channel, session, tag)

    async def _process(
        self, cmd: Command, argv: Sequence[str], stdin: bytes | None, sink: Sink | None
    ) -> CommandOutput:
        run = await self.open_run(cmd, argv)
        # Without stdin the command reads an empty one at once.
        output = await self._drive(run, cmd, b"" if stdin is None else stdin, sink)
        return self._checked(output)

    async def _kill(self, tag: str, grace: float | None = None, *, settle: bool = False) -> None:
        """Kill the remote tree tagged `tag` through a channel of its own.

        Returns about `grace` seconds (the executor's `kill_grace` by
        default) from now at most, wall time, when a process ignores SIGTERM.
        `settle`: the command may have only just started, so an empty search
        is repeated for a moment before it counts as nothing to kill.

        A connection that does not answer the kill in time (a network that
        drops every packet, which the keepalives take a while to notice) is
        dropped, and the kill tried once more over a new one, found within
        a bounded wait; the next command does not wait on the silent one
        either. What neither reaches, the silent connection's guard ends
        once the server sees that connection go.
        """
        grace = self.kill_grace if grace is None else grace
        deadline = anyio.current_time() + grace
        try:
            connection = await self._connect()
        except ExecutorError:
            return  # No way to reach the host (or closed: aclose() kills); nothing more to do.
        answer = await self._kill_on(
            connection, tag, prefix=False, deadline=deadline, settle=settle
        )
        if answer == "done" or (answer == "failed" and not connection.is_closed()):
            return  # Killed, or refused by a live connection, which a retry would not change.
        reconnected = None
        with anyio.move_on_after(_REMOTE_SLACK), contextlib.suppress(ExecutorError):
            # A silent connection is dropped; a closed one is opened again anyway.
            reconnected = await self._connect(failed=connection)
        if reconnected is not None:
            deadline = anyio.current_time() + grace
            await self._kill_on(reconnected, tag, prefix=False, deadline=deadline, settle=settle)

    async def _signal_group(self, tag: str, number: int) -> None:
        """Send signal `number` to the process group of the command tagged `tag`."""
        name = signal.Signals(number).name.removeprefix("SIG")
        line = shlex.join(["sh", "-c", _SIGNAL_SCRIPT, "sh", f"^{TREE_VARIABLE}={tag}$", name])
        connection = await self._connect()
        if self._kill_lock is None:
            self._kill_lock = anyio.Lock()
        async with self._kill_lock:
            with anyio.move_on_after(_REMOTE_SLACK):
                await connection.run(line, check=False)

    async def _kill_below(self, tag: str, pid: int) -> None:
        """SIGKILL what runs below process `pid` of the tree tagged `tag` (`BELOW_SCRIPT`)."""
        line = shlex.join(below_argv(tree_pattern(tag), pid))
        try:
            connection = await self._connect()
        except ExecutorError:
            return  # No way to reach the host: the shell's own kill follows.
        if self._kill_lock is None:
            self._kill_lock = anyio.Lock()
        async with self._kill_lock:
            with contextlib.suppress(Exception), anyio.move_on_after(_REMOTE_SLACK):
                await connection.run(line, check=False)

    async def _kill_on(
        self,
        connection: Any,
        tag: str,
        *,
        prefix: bool,
        deadline: float,
        settle: bool = False,
    ) -> Literal["done", "failed", "silent"]:
        """Kill the tree(s) tagged `tag` over `connection`, SIGKILL at `deadline` (`current_time`).

        The remote script keeps the grace in wall time (see `TreeKiller`).
        Returns whether it ran to its end, failed (its channel refused or
        the connection lost), or had no answer in time.
        """
        pattern = tree_pattern(tag, prefix=prefix)
        if self._kill_lock is None:
            self._kill_lock = anyio.Lock()
        # One kill at a time: they share the one channel kept free for them.
        async with self._kill_lock:
            begun = anyio.current_time()
            argv = self._killer.argv(pattern, deadline=deadline, settle=settle)
            # Bounded: a peer that stopped answering must not hold the caller forever.
            with anyio.move_on_after(deadline - begun + SETTLE + _REMOTE_SLACK) as waiting:
                try:
                    result = await connection.run(shlex.join(argv), check=False)
                except Exception:
                    return "failed"
                self._killer.ran(begun, result.stdout)
                return "done"
            assert waiting.cancelled_caught
            return "silent"

    # --- files ---------------------------------------------------------------

    async def _read_file(self, cmd: ReadFile, sink: Sink | None) -> CommandOutput:
        started = anyio.current_time()
        timeout = self._timeout(cmd)
        buffer = self.file_buffer(cmd.path, sink)
        path = self._join(cmd, cmd.path)

        async def check(sftp: asyncssh.SFTPClient) -> asyncssh.SFTPClient:
            # Before the open: opening a FIFO would stall the server's SFTP
            # process, and with it every file operation of the connection.
            attributes = await sftp.stat(os.fsencode(path))
            if attributes.permissions is not None and not stat.S_ISREG(attributes.permissions):
                if stat.S_ISDIR(attributes.permissions):
                    raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR))
                raise OSError(errno.EINVAL, "not a regular file")
            if attributes.size is not None:
                buffer.check_size(attributes.size)
            return sftp

        deadline = None
        async with file_errors(
            cmd.path,
            where=self._where(),
            started=started,
            sink=sink,
            output=lambda: buffer.output(duration=0.0),
        ):
            sftp = await self._with_sftp(check)
            with anyio.move_on_after(math.inf if timeout is None else timeout) as deadline:
                async with sftp.open(os.fsencode(path), "rb") as file:
                    while block := await file.read(_FILE_BLOCK):
                        assert isinstance(block, bytes)  # "rb": asyncssh decodes nothing
                        chunk = Stdout(block)
                        buffer.append(chunk)
                        if sink is not None:
                            await call_sink(sink, chunk)
        output = buffer.output(duration=anyio.current_time() - started)
        if deadline is not None and deadline.cancelled_caught:
            assert timeout is not None
            raise TimedOut(timeout, output)
        return output

    async def _write_file(self, cmd: WriteFile, sink: Sink | None) -> CommandOutput:
        started = anyio.current_time()
        path = self._join(cmd, cmd.path)

        async def write(sftp: asyncssh.SFTPClient) -> None:
            await _write_atomically(sftp, os.fsencode(path), cmd.content)

        async with file_errors(cmd.path, where=self._where(), started=started, sink=sink):
            # Not abandoned on timeout or cancellation: a write reported as
            # failed must not land later, and its temporary file goes either
            # way. It is bounded by the content's size.
            await run_to_completion(lambda: self._with_sftp(write))
        return CommandOutput(duration=anyio.current_time() - started)


@attrs.frozen
class _Host:
    """An executor as its runs see it (`executor._ssh.run.Host`)."""

    executor: SshExecutor

    @property
    def closed(self) -> bool:
        return self.executor._closed

    @property
    def where(self) -> str:
        return self.executor._where()

    @property
    def kill_grace(self) -> float:
        return self.executor.kill_grace

    async def kill(self, tag: str, grace: float, *, settle: bool) -> None:
        await self.executor._kill(tag, grace, settle=settle)

    async def signal_group(self, tag: str, number: int) -> None:
        await self.executor._signal_group(tag, number)

    async def kill_below(self, tag: str, pid: int) -> None:
        await self.executor._kill_below(tag, pid)


def _tag_prefix(connection: asyncssh.SSHClientConnection) -> str:
    """What the tags of commands started over `connection` begin with: `OWNER_PID:EXECUTOR_ID/C`."""
    from executor._ssh.remote import HostKeyWitness

    witness = connection.get_owner()
    assert isinstance(witness, HostKeyWitness)
    return witness.tag_prefix


async def _write_atomically(sftp: Any, path: bytes, content: bytes) -> None:
    """Replace `path` with `content` over SFTP: a temporary file, then an atomic rename.

    Parents are created. An existing file keeps its permission bits; a new
    one gets the server's default (0o666 less its umask). The rename is
    OpenSSH's `posix-rename`, which replaces the target in one step.
    """
    from executor._ssh.remote import asyncssh

    directory, name = posixpath.split(path)
    if not name or name in (b".", b".."):
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR))
    mode: int | None = None
    try:
        existing = await sftp.lstat(path)
    except Exception as error:
        if not is_missing(error):
            raise
        if directory:
            await _make_folders(sftp, directory)
    else:
        permissions = existing.permissions or 0
        if stat.S_ISDIR(permissions):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR))
        if stat.S_ISREG(permissions):
            mode = stat.S_IMODE(permissions)
    temporary = posixpath.join(
        directory, b".%s.%s.tmp" % (name[:32], uuid.uuid4().hex[:12].encode())
    )
    try:
        flags = asyncssh.FXF_WRITE | asyncssh.FXF_CREAT | asyncssh.FXF_EXCL
        async with sftp.open(temporary, flags, encoding=None) as file:
            await file.write(content)
            if mode is not None:
                await file.chmod(mode)
            try:
                await file.fsync()
            except Exception as error:
                # A server without fsync@openssh.com: the rename is still atomic.
                if not is_unsupported(error):
                    raise
        await sftp.posix_rename(temporary, path)
    except BaseException as error:
        # SFTP's `Failure` says no more than that: a full disk is told apart here.
        full: OSError | None = None
        generic = is_generic_failure(error)

        async def remove() -> None:
            nonlocal full
            if generic:
                # Asked before the partial file goes, while the disk is as the write left it.
                with anyio.move_on_after(_REMOTE_SLACK):
                    full = await sftp_space_error(sftp, directory, len(content))
            with contextlib.suppress(Exception), anyio.move_on_after(_REMOTE_SLACK):
                await sftp.remove(temporary)

        await run_to_completion(remove)
        if full is not None:
            raise full from error
        raise


async def _make_folders(sftp: Any, directory: bytes) -> None:
    with translated(makedirs_error):
        await sftp.makedirs(directory, exist_ok=True)


async def _close_connection(connection: Any, sftp: Any = None) -> None:
    """End `sftp` and close `connection`, waiting a bounded time for the peer to see it."""
    if sftp is not None:
        sftp.exit()
    connection.close()
    with contextlib.suppress(Exception), anyio.move_on_after(_REMOTE_SLACK):
        await connection.wait_closed()
