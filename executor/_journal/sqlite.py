"""The SQLite journal: one file in WAL mode, every change one transaction, shared by processes.

```python
journal = SqliteJournal("runs.sqlite3")
key = IdempotencyKey.new()  # keep it with the agent's own checkpoint
push = Idempotent(LocalExecutor(repo), journal).keyed(key)
output = await push.exec_cmd(Command.shell("git push"))  # runs once
output = await push.exec_cmd(Command.shell("git push"))  # answered from the journal
```

`SqliteJournal` is the embedded default `Journal`: claims are taken under
`BEGIN IMMEDIATE`, so several processes on one machine can share the file
and a crash at any instant leaves it consistent. Whether a run's owner is
still alive is judged by `executor._journal.liveness`.
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import math
import os
import random
import secrets
import sqlite3
import threading
import time
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, TypeVar

import anyio
import anyio.to_thread
import attrs

from executor._core.errors import JournalError
from executor._core.output import CommandOutput
from executor._journal.codec import (
    Outcome,
    decode_chunks,
    decode_elision,
    encode_chunks,
    encode_elision,
)
from executor._journal.keys import IdempotencyKey
from executor._journal.liveness import THIS_PROCESS, Owner
from executor._journal.protocol import Claim, EntryState, JournalEntry

T = TypeVar("T")


_SCHEMA_VERSION = 2
_SCHEMA = (
    """
CREATE TABLE IF NOT EXISTS runs (
    key TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    name TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    started REAL NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 1,
    owner_boot TEXT,
    owner_pid INTEGER,
    owner_started REAL,
    owner_token TEXT,
    finished REAL,
    outcome TEXT,
    message TEXT,
    timeout REAL,
    has_output INTEGER NOT NULL DEFAULT 0,
    chunks BLOB,
    exit_code INTEGER,
    signal INTEGER,
    duration REAL,
    truncated INTEGER,
    value TEXT,
    elided TEXT,
    memory_peak INTEGER
) WITHOUT ROWID
""",
    "CREATE INDEX IF NOT EXISTS runs_finished ON runs (finished) WHERE finished IS NOT NULL",
)
_COLUMNS = (
    "key, kind, name, fingerprint, started, attempts, owner_boot, owner_pid, owner_started, "
    "owner_token, finished, outcome, message, timeout, has_output, chunks, exit_code, signal, "
    "duration, truncated, value, elided, memory_peak"
)
# Format 1 had no record of where an output was cut: its rows read back with
# `elided` and `memory_peak` unknown.
_UPGRADE_FROM_1 = (
    "ALTER TABLE runs ADD COLUMN elided TEXT",
    "ALTER TABLE runs ADD COLUMN memory_peak INTEGER",
)

# SQLite's primary result codes (an error's sqlite_errorcode & 0xFF).
_SQLITE_BUSY = 5
_SQLITE_LOCKED = 6
# Stored output up to this size is written and read on the event loop (a copy
# of a few hundred microseconds at most); more goes through a worker thread.
_INLINE_BYTES = 256 * 1024


# What a change adds to the WAL besides its data: about two 4 KiB pages (a
# leaf and its index entry), each written whole.
_ROW_BYTES = 8192
# Changes made on the event loop add up to about this much WAL before a worker
# thread checkpoints it: SQLite's own default, 1000 pages.
_CHECKPOINT_BYTES = 1000 * 4096


class _WouldBlock(Exception):
    """Raised inside an inline call that would take long; the call is made in a thread instead."""


DEFAULT_MAX_AGE = datetime.timedelta(days=30)
"""How long finals are kept unless told: the window in which a repeat is recognised."""

# Pruning on write runs at most this often, so a busy journal pays for it rarely.
_PRUNE_EVERY = 60.0


def default_journal_path() -> Path:
    """Where the journal lives unless told: `$EXECUTOR_JOURNAL`, or under `$XDG_STATE_HOME`.

    The default is `~/.local/state/executor/journal.sqlite3`.
    """
    explicit = os.environ.get("EXECUTOR_JOURNAL")
    if explicit:
        return Path(explicit)
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(
        os.path.expanduser("~"), ".local", "state"
    )
    return Path(state) / "executor" / "journal.sqlite3"


def _seconds(value: float | datetime.timedelta | None, what: str) -> float | None:
    if value is None:
        return None
    seconds = value.total_seconds() if isinstance(value, datetime.timedelta) else float(value)
    if not seconds > 0 or math.isinf(seconds):
        raise ValueError(f"{what} must be a positive number of seconds or None, got {value!r}")
    return seconds


def _count(value: int | None, what: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{what} must be an integer >= 1 or None, got {value!r}")
    return value


def _create_private(path: Path) -> None:
    """Create the journal file (and its folder) readable by its owner alone, unless it exists.

    The journal holds commands and their output, which may carry secrets.
    SQLite gives the `-wal` and `-shm` files it adds the mode of the database
    file, so they are private too. Made here rather than by SQLite so that a
    path that cannot be written fails with the OS's reason (permission
    denied, read-only file system, is a directory), not "unable to open
    database file".
    """
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    except FileExistsError as error:
        # exist_ok covers folders: what stands in the way is a file.
        raise NotADirectoryError(errno.ENOTDIR, "not a folder", error.filename) from None
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        if path.is_dir():
            raise IsADirectoryError(errno.EISDIR, "it is a directory", str(path)) from None
        return  # there already (an empty file is an empty database to SQLite)
    os.close(fd)


def _text_in(text: str | None) -> str | bytes | None:
    """`text` as SQLite can store it: as it is, or as bytes if it holds lone surrogates.

    A command line or a message may carry bytes that are not UTF-8 (as
    surrogate escapes); SQLite text must be UTF-8, so such text is kept as a
    BLOB of its exact code points, which `_text_out` reads back.
    """
    if text is None:
        return None
    try:
        text.encode()
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogatepass")
    return text


@typing.overload
def _text_out(stored: str | bytes) -> str: ...
@typing.overload
def _text_out(stored: str | bytes | None) -> str | None: ...
def _text_out(stored: str | bytes | None) -> str | None:
    """What `_text_in` stored, as the text it was."""
    if isinstance(stored, bytes):
        return stored.decode("utf-8", "surrogatepass")
    return stored


def _utc(timestamp: float) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(timestamp, tz=datetime.UTC)


def _result_code(error: sqlite3.Error) -> int:
    """SQLite's primary result code of `error`: 0 for an error the sqlite3 module raises itself."""
    return getattr(error, "sqlite_errorcode", 0) & 0xFF


def _roll_back(conn: sqlite3.Connection) -> None:
    """End the transaction `conn` has open, if any, undoing it."""
    if conn.in_transaction:
        conn.execute("ROLLBACK")


def _rolled_back_on_error(
    conn: sqlite3.Connection, function: Callable[[sqlite3.Connection], T]
) -> T:
    """`function(conn)`; if it raises, the transaction it left open is rolled back first.

    Every way out of a call leaves the connection outside a transaction, so
    the next call can begin its own.
    """
    try:
        return function(conn)
    except BaseException:
        _roll_back(conn)
        raise


class SqliteJournal:
    """The journal in one SQLite file: WAL mode, one transaction per change, safe across processes.

    A crash at any instant (of the process, or with `synchronous="full"` of
    the machine) leaves the file consistent: SQLite commits atomically, and
    every change here is one transaction. Claims take the write lock first
    (`BEGIN IMMEDIATE`), so of two processes racing on one key exactly one
    runs it.

    With `synchronous="normal"`, a claim, a final or a lookup runs on the
    event loop itself when it cannot wait: it does not wait for another
    process's lock (it passes to a worker thread then) and it writes no
    fsync, so it takes tens of microseconds, less than a trip to a thread
    and back (see `benchmarks/bench_journal.py`). Everything that can wait
    (an fsync with `"full"`, a lock held elsewhere, a checkpoint of the WAL,
    pruning, listing, an output over 256 KiB) runs in a worker thread, off
    the event loop.

    The processes sharing a journal must be on one machine, and the file
    must not be on a network file system (WAL needs memory shared through
    it). A run's owner is judged alive by its pid, so a run held by a
    process in another pid namespace (another container) cannot be judged:
    it counts as running, never as interrupted, and its interruption is seen
    only from its own namespace. The file is created readable by its owner
    alone (its folder too, when made here): it holds commands and their
    output.

    Args:
        path: The database file; its folder is created. `default_journal_path()` if omitted.
        max_age: Finals (and interrupted runs) older than this are deleted:
            seconds or a timedelta, `None` to keep them. A repeat after
            that runs again: this is the recovery window.
        max_entries: Keep at most this many finals, the newest; `None` for no cap.
        synchronous: `"normal"` (the default) makes each commit durable against
            a crash of any process (SIGKILL included) but not of the machine:
            after a power loss the last commits may be lost, and a run
            whose claim was lost runs again on a repeat. `"full"` also
            survives that, for about 1 to 3 ms more per command (an fsync
            per commit, and the commits go through a worker thread).
        busy_timeout: Seconds to wait for another process's write lock.
        create: Create the file if it does not exist (else `JournalError`).

    Retention is applied by `prune()`, and on write at most once a minute.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        max_age: float | datetime.timedelta | None = DEFAULT_MAX_AGE,
        max_entries: int | None = None,
        synchronous: Literal["normal", "full"] = "normal",
        busy_timeout: float = 30.0,
        create: bool = True,
    ) -> None:
        self.path = Path(path) if path is not None else default_journal_path()
        self.max_age = _seconds(max_age, "max_age")
        self.max_entries = _count(max_entries, "max_entries")
        if synchronous not in ("normal", "full"):
            raise ValueError(f"synchronous must be 'normal' or 'full', got {synchronous!r}")
        self.synchronous = synchronous
        if not busy_timeout > 0:
            raise ValueError(f"busy_timeout must be positive, got {busy_timeout!r}")
        self.busy_timeout = busy_timeout
        self.create = create
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self._pid = -1
        self._fast_lock = threading.Lock()
        self._fast: sqlite3.Connection | None = None
        self._fast_pid = -1
        self._pruned: float | None = None
        self._unchecked = 0

    def __repr__(self) -> str:
        return f"SqliteJournal({str(self.path)!r})"

    # --- connection -------------------------------------------------------------------

    def _connection(self) -> sqlite3.Connection:
        if self._conn is not None and self._pid == os.getpid():
            return self._conn
        # A connection must not cross a fork: the child opens its own.
        self._conn = None
        if not self.create and not self.path.exists():
            raise JournalError(f"no journal at {self.path}")
        try:
            if self.create:
                _create_private(self.path)
            conn = sqlite3.connect(
                self.path,
                timeout=self.busy_timeout,
                isolation_level=None,  # transactions are begun and ended explicitly
                check_same_thread=False,  # used from worker threads, one at a time
            )
        except (OSError, sqlite3.Error) as error:
            raise JournalError(f"cannot open the journal at {self.path}: {error}") from error
        try:
            self._set_up(conn)
        except sqlite3.Error as error:
            conn.close()
            raise JournalError(f"cannot use the journal at {self.path}: {error}") from error
        except BaseException:
            conn.close()
            raise
        self._conn = conn
        self._pid = os.getpid()
        return conn

    def _set_up(self, conn: sqlite3.Connection) -> None:
        """Put a new connection in WAL mode and create the schema, if not yet there.

        Switching a fresh file to WAL takes an exclusive lock, and SQLite may answer
        "database is locked" at once, without its busy handler, to a connection
        opening the same new file as others at the same moment. So the setup is
        tried again, with a growing pause, for up to ``busy_timeout``.
        """
        deadline = time.monotonic() + self.busy_timeout
        pause = 0.001
        while True:
            try:
                self._set_up_once(conn)
                return
            except sqlite3.OperationalError as error:
                _roll_back(conn)
                if _result_code(error) not in (_SQLITE_BUSY, _SQLITE_LOCKED):
                    raise
                if time.monotonic() + pause > deadline:
                    raise
            time.sleep(pause * (0.5 + random.random()))
            pause = min(pause * 2, 0.05)

    def _set_up_once(self, conn: sqlite3.Connection) -> None:
        conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout * 1000)}")
        mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise JournalError(f"the journal at {self.path} cannot use WAL mode ({mode})")
        conn.execute(f"PRAGMA synchronous = {self.synchronous.upper()}")
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version not in (0, 1, _SCHEMA_VERSION):
            raise JournalError(
                f"the journal at {self.path} has format {version}; this version of "
                f"executor reads formats 1 to {_SCHEMA_VERSION}"
            )
        if version == 1:
            conn.execute("BEGIN IMMEDIATE")
            # Another process may have upgraded it while this one waited for the lock.
            if conn.execute("PRAGMA user_version").fetchone()[0] == 1:
                for statement in _UPGRADE_FROM_1:
                    conn.execute(statement)
                conn.execute(f"PRAGMA user_version = {_SCHEMA_VERSION}")
            conn.execute("COMMIT")
        elif version == 0:
            # One transaction (not executescript, which commits first), so a
            # process racing to set up the same file sees all of it or none.
            conn.execute("BEGIN IMMEDIATE")
            for statement in _SCHEMA:
                conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {_SCHEMA_VERSION}")
            conn.execute("COMMIT")

    def _call(self, function: Callable[[sqlite3.Connection], T]) -> T:
        with self._lock:
            conn = self._connection()
            try:
                return _rolled_back_on_error(conn, function)
            except sqlite3.Error as error:
                raise self._failed(error) from error

    def _failed(self, error: sqlite3.Error) -> JournalError:
        """The `JournalError` to raise for an SQLite `error` in a call on the journal."""
        return JournalError(f"the journal at {self.path} failed: {error}")

    def _fast_connection(self) -> sqlite3.Connection | None:
        """A second connection that never waits for a lock, once the file is set up."""
        if self._fast is not None and self._fast_pid == os.getpid():
            return self._fast
        self._fast = None
        if self._conn is None or self._pid != os.getpid():
            return None  # the first call opens (and may create) the file in a thread
        try:
            conn = sqlite3.connect(
                self.path, timeout=0, isolation_level=None, check_same_thread=False
            )
            conn.execute("PRAGMA busy_timeout = 0")
            conn.execute("PRAGMA synchronous = NORMAL")
            # A commit that fills the WAL past its limit would copy it into the
            # database and fsync both, on the event loop: `_run` has a worker
            # thread do that instead.
            conn.execute("PRAGMA wal_autocheckpoint = 0")
        except sqlite3.Error:
            return None
        self._fast = conn
        self._fast_pid = os.getpid()
        return conn

    def _try_inline(self, function: Callable[[sqlite3.Connection], T]) -> tuple[bool, T | None]:
        """Run `function` now if that cannot block; `(False, None)` when it would have to wait."""
        if not self._fast_lock.acquire(blocking=False):
            return False, None
        try:
            conn = self._fast_connection()
            if conn is None:
                return False, None
            try:
                return True, _rolled_back_on_error(conn, function)
            except _WouldBlock:
                return False, None
            except sqlite3.Error as error:
                if (
                    isinstance(error, sqlite3.OperationalError)
                    and _result_code(error) == _SQLITE_BUSY
                ):
                    # Another process holds the write lock: wait for it in a thread.
                    return False, None
                raise self._failed(error) from error
        finally:
            self._fast_lock.release()

    async def _run(
        self, function: Callable[[sqlite3.Connection], T], *, inline: bool = False, writes: int = 0
    ) -> T:
        """Run `function` on the event loop if `inline` and it cannot wait, else in a thread.

        `writes` is about how many bytes the call adds to the WAL.
        """
        if inline and self.synchronous == "normal":
            done, result = self._try_inline(function)
            if done:
                self._unchecked += writes
                if self._unchecked >= _CHECKPOINT_BYTES:
                    self._unchecked = 0
                    await anyio.to_thread.run_sync(self._checkpoint)
                return typing.cast(T, result)
        return await anyio.to_thread.run_sync(self._call, function)

    def _checkpoint(self) -> None:
        """Copy the WAL into the database, as SQLite's automatic checkpoint would (in a thread).

        PASSIVE: it waits for no reader or writer, and leaves what it cannot
        copy now for the next time. A failure here is not the caller's (its
        own change is committed), so it is left for the next checkpoint, or
        for the next change to report.
        """
        with contextlib.suppress(JournalError):
            self._call(lambda conn: conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall())

    def close(self) -> None:
        """Close the database connections (a later call opens them again)."""
        with self._lock:
            if self._conn is not None and self._pid == os.getpid():
                self._conn.close()
            self._conn = None
        with self._fast_lock:
            if self._fast is not None and self._fast_pid == os.getpid():
                self._fast.close()
            self._fast = None

    async def aclose(self) -> None:
        """Close the database connections (in a thread: a call in flight may hold them)."""
        await anyio.to_thread.run_sync(self.close)

    async def __aenter__(self) -> SqliteJournal:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    # --- rows -------------------------------------------------------------------------

    def _entry(self, row: sqlite3.Row | tuple[Any, ...]) -> JournalEntry:
        (
            key,
            kind,
            name,
            fingerprint,
            started,
            attempts,
            owner_boot,
            owner_pid,
            owner_started,
            owner_token,
            finished,
            outcome_kind,
            message,
            timeout,
            has_output,
            chunks,
            exit_code,
            signal,
            duration,
            truncated,
            value,
            elided,
            memory_peak,
        ) = row
        outcome: Outcome | None = None
        state: EntryState
        if outcome_kind is not None:
            output = None
            if has_output:
                output = CommandOutput(
                    chunks=decode_chunks(chunks or b""),
                    exit_code=exit_code,
                    signal=signal,
                    duration=duration or 0.0,
                    truncated=bool(truncated),
                    elided=decode_elision(elided),
                    memory_peak=memory_peak,
                )
            outcome = Outcome(
                kind=outcome_kind,
                output=output,
                message=_text_out(message),
                timeout=timeout,
                value=_text_out(value),
            )
            state = "final"
        elif owner_pid is not None and THIS_PROCESS.alive(
            Owner(owner_boot, owner_pid, owner_started), owner_token
        ):
            state = "running"
        else:
            state = "interrupted"
        return JournalEntry(
            key=IdempotencyKey(key),
            kind=kind,
            name=_text_out(name),
            fingerprint=fingerprint,
            state=state,
            started=_utc(started),
            finished=_utc(finished) if finished is not None else None,
            attempts=attempts,
            owner=owner_pid if state == "running" else None,
            outcome=outcome,
        )

    def _select(self, conn: sqlite3.Connection, key: str) -> tuple[Any, ...] | None:
        if conn is self._fast:
            # On the event loop, a large stored output is not read: a thread does that.
            size = conn.execute(
                "SELECT coalesce(length(chunks), 0) + coalesce(length(value), 0) "
                "FROM runs WHERE key = ?",
                (key,),
            ).fetchone()
            if size is None:
                return None
            if size[0] > _INLINE_BYTES:
                raise _WouldBlock
        row: tuple[Any, ...] | None = conn.execute(
            f"SELECT {_COLUMNS} FROM runs WHERE key = ?", (key,)
        ).fetchone()
        return row

    # --- the protocol -----------------------------------------------------------------

    async def claim(
        self,
        key: IdempotencyKey,
        *,
        kind: str,
        name: str,
        fingerprint: str,
        rerun_interrupted: bool = False,
    ) -> Claim:
        """Record a start under `key` unless the key has a run already; see `Claim`.

        Raises:
            JournalError: `key` was used for a run with another fingerprint,
                or the journal failed.
        """
        key = IdempotencyKey.parse(key)
        return await self._run(
            lambda conn: self._claim(conn, key, kind, name, fingerprint, rerun_interrupted),
            inline=True,
            writes=_ROW_BYTES + len(name),
        )

    def _claim(
        self,
        conn: sqlite3.Connection,
        key: IdempotencyKey,
        kind: str,
        name: str,
        fingerprint: str,
        rerun: bool,
    ) -> Claim:
        me = THIS_PROCESS.me()
        token = secrets.token_hex(8)
        # Counted as ours before the commit: the moment another process can
        # see the claim, it must also see it alive.
        THIS_PROCESS.hold(token)
        try:
            conn.execute("BEGIN IMMEDIATE")
            row = self._select(conn, str(key))
            now = time.time()
            if row is None:
                conn.execute(
                    "INSERT INTO runs (key, kind, name, fingerprint, started, owner_boot, "
                    "owner_pid, owner_started, owner_token) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        str(key),
                        kind,
                        _text_in(name),
                        fingerprint,
                        now,
                        me.boot,
                        me.pid,
                        me.started,
                        token,
                    ),
                )
                conn.execute("COMMIT")
                entry = JournalEntry(
                    key=key,
                    kind=kind,
                    name=name,
                    fingerprint=fingerprint,
                    state="running",
                    started=_utc(now),
                    owner=me.pid,
                )
                return Claim(status="run", entry=entry, token=token)
            entry = self._entry(row)
            if entry.fingerprint != fingerprint:
                conn.execute("ROLLBACK")
                raise JournalError(
                    f"the key {key} was used for another run ({entry.kind} {entry.name!r}); "
                    f"it cannot also name {kind} {name!r}: make a new key for each run"
                )
            if entry.state != "interrupted" or not rerun:
                conn.execute("ROLLBACK")
                THIS_PROCESS.release(token)
                return Claim(status=entry.state, entry=entry)
            conn.execute(
                "UPDATE runs SET attempts = attempts + 1, owner_boot = ?, owner_pid = ?, "
                "owner_started = ?, owner_token = ? WHERE key = ?",
                (me.boot, me.pid, me.started, token, str(key)),
            )
            conn.execute("COMMIT")
            entry = attrs.evolve(entry, state="running", attempts=entry.attempts + 1, owner=me.pid)
            return Claim(status="rerun", entry=entry, token=token)
        except BaseException:
            THIS_PROCESS.release(token)
            raise

    async def complete(self, claim: Claim, outcome: Outcome) -> None:
        """Record `outcome` as the final of the run `claim` started, and release the claim.

        Raises:
            JournalError: The claim is not held (any more), or the journal failed.
        """
        token = _token(claim)
        try:
            size = len(outcome.output) if outcome.output is not None else 0
            size += len(outcome.value or "") + len(outcome.message or "")
            await self._run(
                lambda conn: self._complete(conn, claim, token, outcome),
                inline=size <= _INLINE_BYTES,
                writes=_ROW_BYTES + size,
            )
        finally:
            THIS_PROCESS.release(token)
        if self.max_age is not None or self.max_entries is not None:
            now = time.monotonic()
            if self._pruned is None or now - self._pruned >= _PRUNE_EVERY:
                self._pruned = now
                # The final is recorded: a pruning that fails (another process
                # held the lock past busy_timeout) must not fail the run that
                # succeeded. The next one, a minute on, tries again.
                with contextlib.suppress(JournalError):
                    await self.prune()

    def _complete(
        self, conn: sqlite3.Connection, claim: Claim, token: str, outcome: Outcome
    ) -> None:
        output = outcome.output
        conn.execute("BEGIN IMMEDIATE")
        cursor = conn.execute(
            "UPDATE runs SET finished = ?, outcome = ?, message = ?, timeout = ?, has_output = ?, "
            "chunks = ?, exit_code = ?, signal = ?, duration = ?, truncated = ?, value = ?, "
            "elided = ?, memory_peak = ?, "
            "owner_boot = NULL, owner_pid = NULL, owner_started = NULL, owner_token = NULL "
            "WHERE key = ? AND owner_token = ?",
            (
                time.time(),
                outcome.kind,
                _text_in(outcome.message),
                outcome.timeout,
                output is not None,
                encode_chunks(output.chunks) if output is not None else None,
                output.exit_code if output is not None else None,
                output.signal if output is not None else None,
                output.duration if output is not None else None,
                output.truncated if output is not None else None,
                _text_in(outcome.value),
                encode_elision(output.elided) if output is not None else None,
                output.memory_peak if output is not None else None,
                str(claim.entry.key),
                token,
            ),
        )
        if cursor.rowcount != 1:
            conn.execute("ROLLBACK")
            raise JournalError(f"the run under key {claim.entry.key} is no longer held here")
        conn.execute("COMMIT")

    async def abandon(self, claim: Claim, *, ran: bool) -> None:
        """Give up `claim` without a final.

        If the run may have done anything (`ran`), the key stays, interrupted;
        if it certainly did nothing, a first claim is forgotten, so the key
        can run later as if new.
        """
        token = _token(claim)
        try:
            await self._run(
                lambda conn: self._abandon(conn, claim, token, ran),
                inline=True,
                writes=_ROW_BYTES,
            )
        finally:
            THIS_PROCESS.release(token)

    @staticmethod
    def _abandon(conn: sqlite3.Connection, claim: Claim, token: str, ran: bool) -> None:
        conn.execute("BEGIN IMMEDIATE")
        if not ran and claim.status == "run":
            conn.execute(
                "DELETE FROM runs WHERE key = ? AND owner_token = ?", (str(claim.entry.key), token)
            )
        else:
            conn.execute(
                "UPDATE runs SET owner_boot = NULL, owner_pid = NULL, owner_started = NULL, "
                "owner_token = NULL WHERE key = ? AND owner_token = ?",
                (str(claim.entry.key), token),
            )
        conn.execute("COMMIT")

    async def get(self, key: IdempotencyKey | str) -> JournalEntry | None:
        """The entry for `key`, or `None`.

        Raises:
            InvalidArgument: `key` is not a UUID v7.
        """
        text = str(IdempotencyKey.parse(key))
        return await self._run(lambda conn: self._get(conn, text), inline=True)

    def _get(self, conn: sqlite3.Connection, key: str) -> JournalEntry | None:
        row = self._select(conn, key)
        return self._entry(row) if row is not None else None

    # --- listing and retention --------------------------------------------------------

    async def entries(
        self, *, state: EntryState | None = None, limit: int | None = 100
    ) -> list[JournalEntry]:
        """The newest entries first, optionally only those in `state`; at most `limit`."""
        if state not in (None, "running", "interrupted", "final"):
            raise ValueError(f"state must be running, interrupted, final or None, got {state!r}")
        return await self._run(lambda conn: self._entries(conn, state, limit))

    def _entries(
        self, conn: sqlite3.Connection, state: EntryState | None, limit: int | None
    ) -> list[JournalEntry]:
        where = ""
        if state == "final":
            where = "WHERE outcome IS NOT NULL"
        elif state is not None:
            # Running and interrupted differ only by the owner's liveness, checked below.
            where = "WHERE outcome IS NULL"
        found: list[JournalEntry] = []
        for row in conn.execute(f"SELECT {_COLUMNS} FROM runs {where} ORDER BY key DESC"):
            entry = self._entry(row)
            if state is None or entry.state == state:
                found.append(entry)
                if limit is not None and len(found) >= limit:
                    break
        return found

    async def prune(
        self,
        *,
        max_age: float | datetime.timedelta | None = None,
        max_entries: int | None = None,
    ) -> int:
        """Delete expired finals and interrupted runs; return how many were deleted.

        Args:
            max_age: Overrides the journal's `max_age` for this call.
            max_entries: Overrides the journal's `max_entries` for this call.

        A run that is still going is never deleted.
        """
        age = _seconds(max_age, "max_age") if max_age is not None else self.max_age
        count = _count(max_entries, "max_entries") if max_entries is not None else self.max_entries
        return await self._run(lambda conn: self._prune(conn, age, count))

    def _prune(
        self, conn: sqlite3.Connection, max_age: float | None, max_entries: int | None
    ) -> int:
        deleted = 0
        conn.execute("BEGIN IMMEDIATE")
        if max_age is not None:
            cutoff = time.time() - max_age
            deleted += conn.execute(
                "DELETE FROM runs WHERE outcome IS NOT NULL AND finished < ?", (cutoff,)
            ).rowcount
            # Unfinished runs are deleted only once their owner is gone.
            stale = [
                row[0]
                for row in conn.execute(
                    f"SELECT {_COLUMNS} FROM runs WHERE outcome IS NULL AND started < ?", (cutoff,)
                )
                if self._entry(row).state == "interrupted"
            ]
            for key in stale:
                deleted += conn.execute("DELETE FROM runs WHERE key = ?", (key,)).rowcount
        if max_entries is not None:
            deleted += conn.execute(
                "DELETE FROM runs WHERE outcome IS NOT NULL AND key NOT IN "
                "(SELECT key FROM runs WHERE outcome IS NOT NULL "
                "ORDER BY finished DESC, key DESC LIMIT ?)",
                (max_entries,),
            ).rowcount
        conn.execute("COMMIT")
        return deleted

    async def integrity_check(self) -> list[str]:
        """SQLite's `PRAGMA integrity_check`: `["ok"]` for a sound file, else what is wrong."""
        return await self._run(
            lambda conn: [row[0] for row in conn.execute("PRAGMA integrity_check")]
        )


def _token(claim: Claim) -> str:
    if claim.token is None:
        raise ValueError(f"this claim ({claim.status}) holds no run")
    return claim.token
