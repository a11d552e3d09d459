"""The boundary between asyncssh's exceptions (and the OS's under it) and the package's errors.

Only this module knows asyncssh's exception classes and what each means
here; the rest of `executor._ssh` raises what it makes of them. Most
specific first:

```
what failed          asyncssh / OS                     becomes
reading known_hosts   OSError, ValueError               ExecutorError: cannot read the file
connecting            HostKeyNotVerifiable              ExecutorError: host key unknown / CHANGED
                      PermissionDenied                  ExecutorError: SSH login refused
                      any other asyncssh.Error          ExecutorError: cannot connect
                      OSError naming a client key       ExecutorError: cannot read the client key
                      OSError, TimeoutError             ExecutorError: cannot connect
opening a channel     ChannelOpenError                  ExecutorError: refused a channel
                      asyncssh.Error, OSError           ExecutorError: the connection failed
starting SFTP         asyncssh.Error, OSError           ExecutorError: cannot start SFTP
an SFTP request       a lost connection (`is_lost`)     ExecutorError: the connection was lost
                      SFTPNoSuchFile, SFTPNoSuchPath    OSError ENOENT
                      SFTPPermissionDenied              OSError EACCES
                      SFTPFailure, SFTPNotADirectory    OSError ENOTDIR (makedirs only)
                      any other SFTPError               OSError EIO, in the server's words
a file command        OSError (also from those above)   NonZeroExit, via `file_failure`
```

An SFTP status becomes an OSError, not an error of the package's own, so a
file command words it as a local one does (`file_failure`) and the SFTP
walker handles it as the local walker does.

Each translator takes the exception and returns what to raise instead, or
None when the exception is not one it translates: that one goes on as it
is. `translated()` applies a translator to a block, `raise ... from` the
original.

asyncssh is an optional dependency: this module never imports it for a
check. Before it is loaded no exception of its can exist, so only the OS
rows apply.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from typing import TYPE_CHECKING, Any, Concatenate, Final, ParamSpec, TypeAlias, TypeVar

import attrs

from executor._core.base import file_failure
from executor._core.errors import ExecutorError
from executor._core.output import CommandOutput, Sink

if TYPE_CHECKING:
    from executor._ssh.remote import HostKeyWitness

_P = ParamSpec("_P")
_C = TypeVar("_C")

# A rule of a table: the exception classes it takes, and what it makes of one
# of them (None: not this rule's after all; the next one is tried).
_Rule: TypeAlias = tuple[
    type[BaseException] | tuple[type[BaseException], ...],
    Callable[[Any, _C], ExecutorError | None],
]

# The codes of a channel refused at the server's MaxSessions:
# OPEN_ADMINISTRATIVELY_PROHIBITED, OPEN_CONNECT_FAILED.
_REFUSED_AT_LIMIT: Final = frozenset({1, 2})


def _loaded() -> bool:
    """Whether asyncssh is imported: before that, no exception of its can exist."""
    return "asyncssh" in sys.modules


def _words(error: BaseException) -> str:
    """What `error` says, as the OS words it where it is an OS error."""
    if isinstance(error, OSError) and error.strerror:
        return error.strerror
    return str(error) or type(error).__name__


def _first(rules: tuple[_Rule[_C], ...], error: BaseException, context: _C) -> ExecutorError | None:
    """What the first rule that takes `error` makes of it, or None."""
    for kinds, make in rules:
        if isinstance(error, kinds):
            made = make(error, context)
            if made is not None:
                return made
    return None


@contextlib.contextmanager
def translated(
    translate: Callable[Concatenate[BaseException, _P], BaseException | None],
    /,
    *args: _P.args,
    **kwargs: _P.kwargs,
) -> Iterator[None]:
    """Raise what `translate(error, *args, **kwargs)` makes of an error of the block.

    The translation is raised `from` the error; an error it returns None for
    goes on unchanged. Cancellations and other `BaseException`s are never
    translated.

    Args:
        translate: A translator of this module, such as `connect_error`.
        *args: What it takes after the error.
        **kwargs: Its keyword arguments.

    """
    try:
        yield
    except Exception as error:
        translation = translate(error, *args, **kwargs)
        if translation is None:
            raise
        raise translation from error


# --- predicates: what a failure means, for the code that acts on it ---------------


def is_lost(error: BaseException) -> bool:
    """Whether `error` says the connection is gone (under an SFTP or a channel request).

    A request that failed this way may be made again on a new connection.
    """
    if isinstance(error, ConnectionError):
        return True
    if not _loaded():
        return False
    import asyncssh

    return isinstance(
        error,
        (
            asyncssh.SFTPConnectionLost,
            asyncssh.SFTPNoConnection,
            asyncssh.DisconnectError,
            asyncssh.ChannelOpenError,
        ),
    )


@functools.cache
def _missing() -> tuple[type[Exception], ...]:
    import asyncssh

    return (asyncssh.SFTPNoSuchFile, asyncssh.SFTPNoSuchPath)


def is_missing(error: BaseException) -> bool:
    """Whether `error` is the SFTP server saying that the path does not exist."""
    return _loaded() and isinstance(error, _missing())


def is_unsupported(error: BaseException) -> bool:
    """Whether `error` is the SFTP server saying it has no such operation (an extension)."""
    if not _loaded():
        return False
    import asyncssh

    return isinstance(error, asyncssh.SFTPOpUnsupported)


def is_channel_refusal(error: BaseException) -> bool:
    """Whether `error` is the server refusing to open a channel (not a failed connection)."""
    if not _loaded():
        return False
    import asyncssh

    return isinstance(error, asyncssh.ChannelOpenError)


def refused_at_limit(error: BaseException) -> bool:
    """Whether `error` is a channel refused because the server is at its `MaxSessions`.

    sshd still counts a channel that has just closed until its main loop has
    cleaned it up; OpenSSH reports that as "connect failed", others as
    "administratively prohibited". Asking again a little later works.
    """
    if not _loaded():
        return False
    import asyncssh

    return isinstance(error, asyncssh.ChannelOpenError) and error.code in _REFUSED_AT_LIMIT


# --- the connection ------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class ConnectAttempt:
    """What a connection was opened with, for the words of its failure.

    Attributes:
        where: The server as messages name it, `user@host:port`.
        host: The host name or address the connection went to.
        port: Its port.
        known_hosts: The known_hosts file (the option's value).
        trusted: What was read from it (asyncssh's `SSHKnownHosts`), or None
            when host keys are not checked.
        client_keys: The client key files (the option's value), or None for
            the default keys.
        witness: The client of the connection, which notes the key the
            server offered when known_hosts did not trust it.

    """

    where: str
    host: str
    port: int
    known_hosts: str
    trusted: Any = None
    client_keys: tuple[str, ...] | None = None
    witness: HostKeyWitness | None = None


def known_hosts_error(error: BaseException, path: str) -> ExecutorError | None:
    """The failure to read the known_hosts file `path`, naming the file and the option.

    Args:
        error: What reading it raised: an OSError (it cannot be opened) or a
            ValueError (asyncssh cannot parse it).
        path: The file.

    Returns:
        The ExecutorError to raise, or None for any other error.

    """
    if not isinstance(error, OSError | ValueError):
        return None
    return ExecutorError(f"cannot read the known_hosts file {path} (known_hosts): {_words(error)}")


def _host_key_refused(error: BaseException, attempt: ConnectAttempt) -> ExecutorError:
    """The refusal of a host key known_hosts does not trust, naming its fingerprint."""
    key = attempt.witness.untrusted if attempt.witness is not None else None
    where = attempt.where
    if key is None:
        return ExecutorError(f"the host key of {where} is not trusted")
    offered = f"{key.get_algorithm()} key {key.get_fingerprint('sha256')}"
    listed = []
    with contextlib.suppress(Exception):
        listed = list(attempt.trusted.match(attempt.host, "", attempt.port)[0])
    if listed:
        return ExecutorError(
            f"the host key of {where} has CHANGED: the server offered the "
            f"{offered}, which is not the key {attempt.known_hosts} lists for it; "
            "refusing to connect (someone may be intercepting the connection)"
        )
    return ExecutorError(
        f"the host key of {where} is unknown: the server offered the "
        f"{offered}, and {attempt.known_hosts} has no key for this host; "
        "refusing to connect (add the key to known_hosts once you know it is right)"
    )


def _login_refused(error: Any, attempt: ConnectAttempt) -> ExecutorError:
    return ExecutorError(
        f"SSH login to {attempt.where} refused: no key was accepted ({error.reason})"
    )


def _ssh_failed(error: Any, attempt: ConnectAttempt) -> ExecutorError:
    return ExecutorError(f"cannot connect to {attempt.where}: {error.reason}")


def _unreadable_key(error: OSError, attempt: ConnectAttempt) -> ExecutorError | None:
    """A client key that cannot be read (asyncssh reads them before it connects), or None."""
    if error.filename is None or not attempt.client_keys:
        return None
    named = os.path.normpath(os.fsdecode(error.filename))
    for key in attempt.client_keys:
        if os.path.normpath(key) == named:
            return ExecutorError(f"cannot read the client key {key} (client_keys): {_words(error)}")
    return None


def _os_failed(error: OSError, attempt: ConnectAttempt) -> ExecutorError:
    return ExecutorError(f"cannot connect to {attempt.where}: {_words(error)}")


_CONNECT_OS_RULES: Final[tuple[_Rule[ConnectAttempt], ...]] = (
    (OSError, _unreadable_key),
    ((OSError, TimeoutError), _os_failed),
)


@functools.cache
def _connect_rules() -> tuple[_Rule[ConnectAttempt], ...]:
    import asyncssh

    return (
        (asyncssh.HostKeyNotVerifiable, _host_key_refused),
        (asyncssh.PermissionDenied, _login_refused),
        (asyncssh.Error, _ssh_failed),
        *_CONNECT_OS_RULES,
    )


def connect_error(error: BaseException, attempt: ConnectAttempt) -> ExecutorError | None:
    """What a failed `asyncssh.connect` means, in words that say what to fix.

    Args:
        error: What it raised.
        attempt: What it was given.

    Returns:
        The ExecutorError to raise (an untrusted host key, a refused login,
        an unreadable client key, a server that cannot be reached), or None
        for an error that is none of those.

    """
    rules = _connect_rules() if _loaded() else _CONNECT_OS_RULES
    return _first(rules, error, attempt)


# --- channels and the connection under them ------------------------------------------


def channel_error(error: BaseException, where: str, max_sessions: int) -> ExecutorError | None:
    """What a failed request for a command's channel means.

    Args:
        error: What the request raised.
        where: The server, `user@host:port`.
        max_sessions: The executor's `max_sessions`, which a refusal may be about.

    Returns:
        The ExecutorError to raise, or None for an error that is no SSH or
        OS error (the request may have reached the server).

    """
    if _loaded():
        import asyncssh

        if isinstance(error, asyncssh.ChannelOpenError):
            return ExecutorError(
                f"{where} refused a channel for the command: {error.reason} "
                f"(does its MaxSessions allow max_sessions={max_sessions}?)"
            )
    if _is_ssh_error(error) or isinstance(error, OSError):
        return ExecutorError(f"the connection to {where} failed: {error}")
    return None


def sftp_start_error(error: BaseException, where: str) -> ExecutorError | None:
    """What a failure to start the SFTP subsystem means, or None for no SSH or OS error."""
    if _is_ssh_error(error) or isinstance(error, OSError):
        return ExecutorError(f"cannot start SFTP on {where}: {error}")
    return None


def connection_lost(
    error: BaseException, where: str, output: CommandOutput | None = None
) -> ExecutorError | None:
    """A request that failed because the connection is gone (see `is_lost`), or None.

    Args:
        error: What the request raised.
        where: The server, `user@host:port`.
        output: What the command read before, for the error to carry.

    """
    if not is_lost(error):
        return None
    return ExecutorError(f"the connection to {where} was lost: {error}", output)


def command_lost(where: str, output: CommandOutput) -> ExecutorError:
    """The failure of a command whose channel closed with the connection before it exited.

    Its cause, if asyncssh gave one, is what the channel was closed with.
    """
    return ExecutorError(f"the connection to {where} was lost while the command ran", output)


def _is_ssh_error(error: BaseException) -> bool:
    if not _loaded():
        return False
    import asyncssh

    return isinstance(error, asyncssh.Error)


# --- SFTP ---------------------------------------------------------------------------


@functools.cache
def _sftp_errnos() -> tuple[tuple[type[Exception] | tuple[type[Exception], ...], int], ...]:
    """SFTP statuses as the OS errors they stand for, most specific first."""
    import asyncssh

    return (
        (_missing(), errno.ENOENT),
        (asyncssh.SFTPPermissionDenied, errno.EACCES),
    )


def sftp_os_error(error: BaseException, path: str | None = None) -> OSError | None:
    """An SFTP status as the OS error it stands for, so that it is worded as a local one.

    ENOENT and EACCES get the OS's own words (`FileNotFoundError`,
    `PermissionError`); any other status, a lost connection too, is EIO in
    the server's words.

    Args:
        error: What the SFTP request raised.
        path: The file the OSError names, if any.

    Returns:
        The OSError, or None when `error` is no SFTP status.

    """
    if not _loaded():
        return None
    import asyncssh

    if not isinstance(error, asyncssh.SFTPError):
        return None
    for kinds, number in _sftp_errnos():
        if isinstance(error, kinds):
            return OSError(number, os.strerror(number), *(() if path is None else (path,)))
    words = error.reason or f"SFTP error {error.code}"
    return OSError(errno.EIO, words, *(() if path is None else (path,)))


async def sftp_space_error(sftp: Any, directory: bytes, size: int) -> OSError | None:
    """ENOSPC, when a write of `size` bytes into `directory` failed for want of room.

    OpenSSH's sftp-server answers a full disk (ENOSPC, as a quota's EDQUOT)
    with the generic status `Failure`: the reason is read afterwards from the
    folder's file system (`statvfs@openssh.com`), while the partial temporary
    file still holds what did fit. Fewer bytes free than the write needs, or
    no inode free, is a full disk; anything else (or a server without the
    extension, or a statvfs that fails) is None, and the status goes on.

    Args:
        sftp: The SFTP client the write failed on.
        directory: The folder written into (empty: the login folder).
        size: The bytes the write was to store.

    """
    try:
        space = await sftp.statvfs(directory or b".")
    except Exception:  # An old server or a lost connection: nothing is known.
        return None
    free = space.bavail * (space.frsize or space.bsize)
    if free < size or (space.files and not space.favail):
        return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    return None


def is_generic_failure(error: BaseException) -> bool:
    """Whether `error` is SFTP's catch-all status `Failure` (which may hide a full disk)."""
    if not _loaded():
        return False
    import asyncssh

    return type(error) is asyncssh.SFTPFailure


def makedirs_error(error: BaseException) -> OSError | None:
    """An SFTP `makedirs` that met a file where a folder should be, as the OS says it.

    asyncssh raises SFTPFailure there (SFTPNotADirectory from version 6 on).
    Any other error is None: it goes on as it is, a lost connection too, so
    that the operation can be made again.
    """
    if not _loaded():
        return None
    import asyncssh

    if isinstance(error, asyncssh.SFTPFailure | asyncssh.SFTPNotADirectory):
        return NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR))
    return None


@contextlib.asynccontextmanager
async def file_errors(
    shown: str,
    *,
    where: str,
    started: float,
    sink: Sink | None,
    output: Callable[[], CommandOutput] | None = None,
) -> AsyncIterator[None]:
    """Raise what fails in the block as the failure of a file command on `shown`.

    A lost connection is an ExecutorError (`connection_lost`); an SFTP status
    (`sftp_os_error`) or an OSError is a `NonZeroExit` worded as locally
    (`file_failure`), reported to `sink`. Anything else goes on as it is.

    Args:
        shown: The path as the command gave it.
        where: The server, `user@host:port`.
        started: When the command started (`anyio.current_time()`).
        sink: Where the failure is reported.
        output: What the command read so far, for a lost connection's error.

    """
    try:
        yield
    except Exception as error:
        lost = connection_lost(error, where, None if output is None else output())
        if lost is not None:
            raise lost from error
        reason = error if isinstance(error, OSError) else sftp_os_error(error)
        if reason is None:
            raise
        raise await file_failure(shown, reason, started, sink) from error
