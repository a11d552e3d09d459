"""Idempotency keys, outcomes, and the SQLite journal: claims, liveness, retention, the CLI."""

from __future__ import annotations

import contextlib
import datetime
import io
import json
import os
import sqlite3
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import given, strategies as st

from executor import (
    CommandError,
    CommandOutput,
    Elision,
    ExecutorError,
    IdempotencyKey,
    InvalidArgument,
    Journal,
    JournalError,
    NonZeroExit,
    Outcome,
    PolicyDenied,
    SqliteJournal,
    Stderr,
    Stdout,
    TimedOut,
    ToolStreamError,
)
from executor._cli.main import main
from executor._core.proc import proc_stat
from executor._journal.codec import decode_chunks, decode_elision, encode_chunks, encode_elision

LIMIT = 30.0


# --- keys -----------------------------------------------------------------------------


def test_new_keys_are_uuid_v7_with_the_time() -> None:
    """A new key is a UUID of version 7, RFC variant, stamped with the current millisecond."""
    before = datetime.datetime.now(datetime.UTC) - datetime.timedelta(milliseconds=1)
    key = IdempotencyKey.new()
    after = datetime.datetime.now(datetime.UTC) + datetime.timedelta(milliseconds=1)
    assert key.uuid.version == 7
    assert key.uuid.variant == uuid.RFC_4122
    assert before <= key.created <= after
    assert IdempotencyKey(str(key)) == key
    assert IdempotencyKey.parse(key) is key
    assert IdempotencyKey(key.uuid) == key


def test_keys_made_in_one_millisecond_still_rise() -> None:
    """Thousands of keys made back to back are unique and sort in the order they were made."""
    keys = [IdempotencyKey.new() for _ in range(20_000)]
    assert len(set(keys)) == len(keys)
    assert sorted(keys) == keys
    assert sorted(str(key) for key in keys) == [str(key) for key in keys]
    # Many share a millisecond, so the counting within one was exercised.
    assert len({key.created for key in keys}) < len(keys)


def test_keys_made_in_threads_are_unique() -> None:
    """Keys made from several threads at once never collide."""
    import threading

    made: list[IdempotencyKey] = []

    def make() -> None:
        made.extend(IdempotencyKey.new() for _ in range(2000))

    threads = [threading.Thread(target=make) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(set(made)) == 8000


@given(st.uuids())
def test_only_version_7_parses(value: uuid.UUID) -> None:
    """A UUID parses as a key exactly when it is of version 7 with the RFC variant."""
    is_v7 = value.version == 7 and value.variant == uuid.RFC_4122
    try:
        key = IdempotencyKey.parse(str(value).upper())
    except InvalidArgument:
        assert not is_v7
    else:
        assert is_v7
        assert str(key) == str(value)


@given(st.integers(min_value=0, max_value=(1 << 128) - 1))
def test_v7_bits_parse_whatever_the_rest(bits: int) -> None:
    """Any 128 bits with the version and variant of a v7 parse, and keep their timestamp."""
    bits = (bits & ~(0xF << 76) & ~(0b11 << 62)) | (7 << 76) | (0b10 << 62)
    key = IdempotencyKey(str(uuid.UUID(int=bits)))
    assert key.uuid.int == bits
    assert key.unix_ms == bits >> 80
    if key.unix_ms < 253402300800000:  # 10000-01-01
        assert key.created.timestamp() * 1000 == pytest.approx(key.unix_ms, abs=1)
    else:
        with pytest.raises(ValueError, match="after the year 9999"):
            _ = key.created


@pytest.mark.parametrize(
    ("value", "rule"),
    [
        ("abc", "must be a UUID"),
        ("", "must be a UUID"),
        # A fixed one: a random value would name the test differently in each
        # pytest-xdist worker, and the workers must collect the same tests.
        ("5659bbe6-bfcd-49b8-8fed-fe8cdaff7b45", "version 7 (got version 4)"),
        ("00000000-0000-7000-0000-000000000000", "not RFC 9562"),
        ("0189e4a0-0000-7000-c000-000000000000", "not RFC 9562"),
        (123, "must be a UUID string"),
        (None, "must be a UUID string"),
    ],
)
def test_bad_keys_are_refused_with_the_rule(value: object, rule: str) -> None:
    """Text that is not a UUID v7 (or not text) raises InvalidArgument naming the rule."""
    with pytest.raises(InvalidArgument, match="idempotency key") as caught:
        IdempotencyKey.parse(value)  # type: ignore[arg-type]
    assert rule in str(caught.value)


# --- outcomes -------------------------------------------------------------------------

chunks = st.lists(
    st.builds(Stdout, st.binary(min_size=1, max_size=40))
    | st.builds(Stderr, st.binary(min_size=1, max_size=40)),
    max_size=12,
)


@given(chunks)
def test_chunks_round_trip_exactly(items: list[Stdout | Stderr]) -> None:
    """Any chunks, any bytes, come back from their encoding the same, in order."""
    assert decode_chunks(encode_chunks(items)) == tuple(items)


def test_damaged_chunks_are_an_error() -> None:
    """A cut or damaged encoding raises JournalError instead of inventing output."""
    data = encode_chunks([Stdout(b"hello")])
    with pytest.raises(JournalError, match=r"cut short|damaged"):
        decode_chunks(data[:-1])
    with pytest.raises(JournalError, match="damaged"):
        decode_chunks(b"\x07" + data[1:])


def test_outcomes_make_the_same_errors_again() -> None:
    """An error's outcome raises the same type again, with its message, output and timeout."""
    output = CommandOutput(chunks=(Stdout(b"so far"),), exit_code=124, duration=0.5)

    class Custom(NonZeroExit):
        pass

    cases: list[tuple[CommandError, type[CommandError]]] = [
        (NonZeroExit("command exited with code 1", output), NonZeroExit),
        (TimedOut(2.5, output), TimedOut),
        (ExecutorError("spawn failed", output), ExecutorError),
        (PolicyDenied("no", output), PolicyDenied),
        (ToolStreamError("the tool x failed", output), ToolStreamError),
        (Custom("custom", output), NonZeroExit),
    ]
    for error, expected in cases:
        outcome = Outcome.of_error(error)
        again = outcome.error()
        assert type(again) is expected
        assert again.message == error.message
        assert again.output == output
        with pytest.raises(expected):
            outcome.replay()
    timed = Outcome.of_error(TimedOut(2.5, output)).error()
    assert isinstance(timed, TimedOut)
    assert timed.timeout == 2.5
    assert Outcome.of_output(output).replay() == output
    with pytest.raises(ValueError, match="success"):
        Outcome.of_output(output).error()


# --- the SQLite journal ---------------------------------------------------------------

pytestmark = pytest.mark.anyio


@pytest.fixture
def path(tmp_path: Path) -> Path:
    """Where a test's journal lives."""
    return tmp_path / "state" / "journal.sqlite3"


async def test_journal_file_uses_wal_and_the_chosen_sync(path: Path) -> None:
    """The file is created with its folder, in WAL mode; `synchronous` is applied per connection."""
    for name, level in (("normal", 1), ("full", 2)):
        journal = SqliteJournal(path, synchronous=name)  # type: ignore[arg-type]
        assert isinstance(journal, Journal)
        assert await journal.integrity_check() == ["ok"]
        assert journal._call(lambda conn: conn.execute("PRAGMA synchronous").fetchone()[0]) == (
            level
        )
        journal.close()
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.close()
    # It holds commands and their output: its owner alone may read it.
    assert path.stat().st_mode & 0o777 == 0o600
    assert path.parent.stat().st_mode & 0o777 == 0o700


async def test_the_wal_is_checkpointed_off_the_event_loop(path: Path) -> None:
    """Commits on the event loop never checkpoint there, yet the WAL stays near 4 MB."""
    async with SqliteJournal(path) as journal:
        output = Outcome.of_output(CommandOutput(chunks=(Stdout(b"x" * 20_000),), exit_code=0))
        for _ in range(500):  # 10 MB of outputs, each small enough to be written inline
            claim = await journal.claim(
                IdempotencyKey.new(), kind="command", name="x", fingerprint="f"
            )
            await journal.complete(claim, output)
        fast = journal._fast
        assert fast is not None
        assert fast.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 0
        wal = path.with_name(path.name + "-wal")
        assert wal.stat().st_size < 8_000_000  # without checkpoints: over 14 MB
        assert await journal.integrity_check() == ["ok"]


async def test_claim_complete_and_repeat(path: Path) -> None:
    """A new key is claimed to run; once completed, a claim is answered with its final."""
    async with SqliteJournal(path) as journal:
        key = IdempotencyKey.new()
        claim = await journal.claim(key, kind="command", name="git push", fingerprint="f1")
        assert claim.status == "run"
        assert claim.token is not None
        entry = await journal.get(key)
        assert entry is not None
        assert entry.state == "running"
        assert entry.owner == os.getpid()
        # Another start while it runs sees it running, in this process too.
        second = await journal.claim(key, kind="command", name="git push", fingerprint="f1")
        assert second.status == "running"
        output = CommandOutput(
            chunks=(Stdout(b"a\n"), Stderr(b"\xff"), Stdout(b"b")),
            exit_code=0,
            duration=0.25,
            truncated=True,
        )
        await journal.complete(claim, Outcome.of_output(output))
        again = await journal.claim(key, kind="command", name="git push", fingerprint="f1")
        assert again.status == "final"
        assert again.token is None
        assert again.entry.outcome is not None
        assert again.entry.outcome.replay() == output
        assert again.entry.finished is not None
        assert again.entry.owner is None
        with pytest.raises(JournalError, match="no longer held"):
            await journal.complete(claim, Outcome.of_output(output))


def _cut_output() -> CommandOutput:
    """An output cut in the middle, with its peak memory: what a replay must give back."""
    return CommandOutput(
        chunks=(Stdout(b"head\n"), Stderr(b"warn\n"), Stdout(b"tail\n")),
        exit_code=0,
        duration=0.5,
        truncated=True,
        elided=Elision(at=2, bytes=4096, lines=100, spill="/var/tmp/out.log"),
        memory_peak=12_345_678,
    )


async def test_a_cut_output_replays_with_its_marker_and_peak(path: Path) -> None:
    """Where an output was cut (and its peak memory) is kept: a replay shows the same marker."""
    output = _cut_output()
    async with SqliteJournal(path) as journal:
        key = IdempotencyKey.new()
        claim = await journal.claim(key, kind="command", name="make", fingerprint="f")
        await journal.complete(claim, Outcome.of_output(output))
    async with SqliteJournal(path) as journal:
        entry = await journal.get(key)
        assert entry is not None
        assert entry.outcome is not None
        replayed = entry.outcome.replay()
    assert isinstance(replayed, CommandOutput)
    assert replayed == output
    assert replayed.elided == output.elided
    assert replayed.memory_peak == 12_345_678
    assert "[... 100 lines (4096 bytes) elided; the whole output is in" in replayed.text()


async def test_a_format_1_journal_is_upgraded_in_place(path: Path) -> None:
    """A journal written before cuts were recorded opens, keeps its runs and records cuts."""
    plain = CommandOutput(chunks=(Stdout(b"old\n"),), exit_code=0, duration=0.1)
    async with SqliteJournal(path) as journal:
        old = IdempotencyKey.new()
        claim = await journal.claim(old, kind="command", name="ls", fingerprint="f")
        await journal.complete(claim, Outcome.of_output(plain))
    with sqlite3.connect(path) as conn:
        # The file as format 1 left it: no columns for the cut and the peak.
        conn.execute("ALTER TABLE runs DROP COLUMN elided")
        conn.execute("ALTER TABLE runs DROP COLUMN memory_peak")
        conn.execute("PRAGMA user_version = 1")
    conn.close()
    async with SqliteJournal(path) as journal:
        entry = await journal.get(old)
        assert entry is not None
        assert entry.outcome is not None
        assert entry.outcome.replay() == plain
        new = IdempotencyKey.new()
        claim = await journal.claim(new, kind="command", name="make", fingerprint="g")
        await journal.complete(claim, Outcome.of_output(_cut_output()))
        again = await journal.get(new)
        assert again is not None
        assert again.outcome is not None
        assert again.outcome.replay() == _cut_output()
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 2
    conn.close()


def test_a_damaged_cut_is_an_error() -> None:
    """A stored cut that is not what the journal writes is named, not guessed at."""
    assert decode_elision(encode_elision(_cut_output().elided)) == _cut_output().elided
    assert encode_elision(None) is None
    with pytest.raises(JournalError, match="cut is damaged"):
        decode_elision('{"at": 1}')


async def test_a_key_names_one_run(path: Path) -> None:
    """Claiming a used key for something else is refused, naming both."""
    async with SqliteJournal(path) as journal:
        key = IdempotencyKey.new()
        claim = await journal.claim(key, kind="command", name="git push", fingerprint="f1")
        with pytest.raises(JournalError, match=r"was used for another run.*'git push'.*'rm x'"):
            await journal.claim(key, kind="command", name="rm x", fingerprint="f2")
        await journal.abandon(claim, ran=True)


async def test_abandon_interrupts_or_forgets(path: Path) -> None:
    """An abandoned run that ran is interrupted and may be taken over; one that did not is gone."""
    async with SqliteJournal(path) as journal:
        ran = IdempotencyKey.new()
        claim = await journal.claim(ran, kind="command", name="x", fingerprint="f")
        await journal.abandon(claim, ran=True)
        entry = await journal.get(ran)
        assert entry is not None
        assert entry.state == "interrupted"
        assert entry.owner is None
        kept = await journal.claim(ran, kind="command", name="x", fingerprint="f")
        assert kept.status == "interrupted"
        taken = await journal.claim(
            ran, kind="command", name="x", fingerprint="f", rerun_interrupted=True
        )
        assert taken.status == "rerun"
        assert taken.entry.attempts == 2
        # A rerun that did not start leaves the run interrupted, not forgotten.
        await journal.abandon(taken, ran=False)
        entry = await journal.get(ran)
        assert entry is not None
        assert entry.state == "interrupted"

        never = IdempotencyKey.new()
        claim = await journal.claim(never, kind="command", name="x", fingerprint="f")
        await journal.abandon(claim, ran=False)
        assert await journal.get(never) is None


HOLDER = """
import anyio, sys
from executor import IdempotencyKey, SqliteJournal
async def main():
    journal = SqliteJournal(sys.argv[1])
    claim = await journal.claim(
        IdempotencyKey(sys.argv[2]), kind="command", name="held", fingerprint="f"
    )
    print(claim.status, flush=True)
    sys.stdin.readline()
anyio.run(main)
"""


async def test_a_run_is_interrupted_once_its_process_is_gone(path: Path) -> None:
    """A claim held by a live process is running; after that process is killed, interrupted."""
    SqliteJournal(path).close()
    key = IdempotencyKey.new()
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(path), str(key)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "run"
        async with SqliteJournal(path) as journal:
            entry = await journal.get(key)
            assert entry is not None
            assert entry.state == "running"
            assert entry.owner == holder.pid
            claim = await journal.claim(
                key, kind="command", name="held", fingerprint="f", rerun_interrupted=True
            )
            assert claim.status == "running"
            holder.kill()
            # Dead but not reaped yet (a zombie): gone already.
            with anyio.fail_after(LIMIT):
                while (stat := proc_stat(holder.pid)) is not None and stat.state != "Z":
                    await anyio.sleep(0.005)
            entry = await journal.get(key)
            assert entry is not None
            assert entry.state == "interrupted"
            holder.wait(LIMIT)
            assert await journal.entries(state="interrupted") == [entry]
            assert await journal.entries(state="running") == []
    finally:
        holder.kill()
        holder.wait(LIMIT)
        for stream in (holder.stdin, holder.stdout):
            if stream is not None:
                stream.close()


async def test_a_reused_pid_or_a_reboot_is_not_the_owner(path: Path) -> None:
    """An owner with our pid but another start time, or another boot id, counts as gone.

    A pid that is gone counts as gone too, unless it is of another pid
    namespace on this machine (a container), where it cannot be looked up.
    """
    async with SqliteJournal(path) as journal:
        keys = [IdempotencyKey.new() for _ in range(5)]
        claims = []
        for key in keys:
            claim = await journal.claim(key, kind="command", name="x", fingerprint="f")
            assert claim.status == "run"
            claims.append(claim)
        boot = journal._call(
            lambda conn: conn.execute(
                "SELECT owner_boot FROM runs WHERE key = ?", (str(keys[0]),)
            ).fetchone()[0]
        )
        assert boot.partition("/")[2].startswith("pid:[")
        no_such_pid = 2**22 + 1  # above the kernel's pid_max limit
        journal._call(
            lambda conn: conn.execute(
                "UPDATE runs SET owner_pid = ?, owner_boot = ? WHERE key = ?",
                (no_such_pid, boot.partition("/")[0] + "/pid:[1]", str(keys[3])),
            )
        )
        journal._call(
            lambda conn: conn.execute(
                "UPDATE runs SET owner_pid = ? WHERE key = ?", (no_such_pid, str(keys[4]))
            )
        )
        journal._call(
            lambda conn: conn.execute(
                "UPDATE runs SET owner_started = owner_started - 100 WHERE key = ?",
                (str(keys[0]),),
            )
        )
        journal._call(
            lambda conn: conn.execute(
                "UPDATE runs SET owner_boot = 'another-boot' WHERE key = ?", (str(keys[1]),)
            )
        )
        states = [entry.state for key in keys if (entry := await journal.get(key)) is not None]
        assert states == ["interrupted", "interrupted", "running", "running", "interrupted"]
        await journal.abandon(claims[2], ran=False)


async def test_claims_racing_on_one_key_let_exactly_one_run(path: Path) -> None:
    """Eight connections claiming one new key at once: one runs, the others see it running."""
    journals = [SqliteJournal(path) for _ in range(8)]
    key = IdempotencyKey.new()
    statuses: list[str] = []

    async def claim(journal: SqliteJournal) -> None:
        result = await journal.claim(key, kind="command", name="x", fingerprint="f")
        statuses.append(result.status)

    async with anyio.create_task_group() as group:
        for journal in journals:
            group.start_soon(claim, journal)
    assert sorted(statuses) == ["run"] + ["running"] * 7
    for journal in journals:
        journal.close()


def _open_at_once(path: Path, count: int) -> list[BaseException]:
    """Open `count` journals on one file from as many threads at once; what they raised."""
    journals = [SqliteJournal(path) for _ in range(count)]
    start = threading.Barrier(count)
    errors: list[BaseException] = []

    def open_(journal: SqliteJournal) -> None:
        start.wait()
        try:
            journal._call(lambda conn: conn.execute("SELECT count(*) FROM runs").fetchone())
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=open_, args=(journal,)) for journal in journals]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for journal in journals:
        journal.close()
    return errors


@pytest.mark.slow
def test_journals_opening_one_new_file_at_once_all_set_it_up(tmp_path: Path) -> None:
    """Journals racing to set up one new file each wait their turn; none raises.

    SQLite refuses some of the connections switching a new file to WAL at the same
    moment at once, without its busy wait, so the journal itself must try again.
    """
    for round_ in range(150):
        errors = _open_at_once(tmp_path / f"round-{round_}" / "journal.sqlite3", 8)
        assert errors == [], f"round {round_}: {errors[0]!r}"


def _refusing_wal(
    monkeypatch: pytest.MonkeyPatch, refusals: int, code: int = sqlite3.SQLITE_BUSY
) -> list[int]:
    """Make the next `refusals` WAL switches fail at once with `code`.

    SQLite does that to connections racing to switch a new file; the race itself
    is left to chance in the test above, this makes it certain. The list returned
    counts the refusals left.
    """
    left = [refusals]

    class Refusing(sqlite3.Connection):
        def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
            if sql.startswith("PRAGMA journal_mode") and left[0]:
                left[0] -= 1
                error = sqlite3.OperationalError("database is locked")
                error.sqlite_errorcode = code
                raise error
            return super().execute(sql, *args)

    connect = sqlite3.connect
    monkeypatch.setattr(
        sqlite3, "connect", lambda *args, **kwargs: connect(*args, factory=Refusing, **kwargs)
    )
    return left


def _count_runs(journal: SqliteJournal) -> int:
    return int(journal._call(lambda conn: conn.execute("SELECT count(*) FROM runs").fetchone()[0]))


def test_a_refused_wal_switch_is_tried_again(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Refusals at once (busy or locked) are tried again until the switch goes through."""
    left = _refusing_wal(monkeypatch, 5)
    journal = SqliteJournal(path)
    assert _count_runs(journal) == 0
    assert left == [0]
    journal.close()


def test_a_wal_switch_refused_past_busy_timeout_fails(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lock that never goes away fails once `busy_timeout` has passed, naming the file."""
    _refusing_wal(monkeypatch, 10**9, code=sqlite3.SQLITE_LOCKED)
    journal = SqliteJournal(path, busy_timeout=0.2)
    started = time.monotonic()
    with pytest.raises(JournalError, match=r"cannot use the journal at .*database is locked"):
        _count_runs(journal)
    assert 0.1 <= time.monotonic() - started < 10


def test_a_wal_switch_failing_otherwise_is_not_tried_again(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An error that is not a lock (here a damaged file) fails at the first try."""
    left = _refusing_wal(monkeypatch, 3, code=sqlite3.SQLITE_CORRUPT)
    with pytest.raises(JournalError, match="cannot use the journal"):
        _count_runs(SqliteJournal(path))
    assert left == [2]


async def test_a_claim_waits_for_a_lock_held_elsewhere(path: Path) -> None:
    """While another connection holds the write lock, a claim waits for it (off the loop)."""
    async with SqliteJournal(path) as journal:
        await journal.get(IdempotencyKey.new())  # opens and sets up the file
        other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        other.execute("BEGIN IMMEDIATE")
        claimed: list[str] = []
        ticks = 0

        async def claim() -> None:
            result = await journal.claim(
                IdempotencyKey.new(), kind="command", name="x", fingerprint="f"
            )
            claimed.append(result.status)

        async with anyio.create_task_group() as group:
            group.start_soon(claim)
            for _ in range(20):
                await anyio.sleep(0.01)
                ticks += 1  # the event loop runs on while the claim waits
            assert claimed == []
            other.execute("COMMIT")
        other.close()
        assert claimed == ["run"]
        assert ticks == 20


async def test_prune_by_age_and_by_count(path: Path) -> None:
    """Old finals and interrupted runs expire; the count keeps the newest finals; running stays."""
    async with SqliteJournal(path, max_age=None) as journal:

        async def final(age: float) -> IdempotencyKey:
            key = IdempotencyKey.new()
            claim = await journal.claim(key, kind="command", name="x", fingerprint="f")
            await journal.complete(claim, Outcome.of_output(CommandOutput(exit_code=0)))
            journal._call(
                lambda conn: conn.execute(
                    "UPDATE runs SET finished = finished - ?, started = started - ? WHERE key = ?",
                    (age, age, str(key)),
                )
            )
            return key

        old = [await final(3 * 86400) for _ in range(2)]
        new = [await final(60.0 * (5 - i)) for i in range(5)]
        running = IdempotencyKey.new()
        held = await journal.claim(running, kind="command", name="x", fingerprint="f")
        interrupted = IdempotencyKey.new()
        gone = await journal.claim(interrupted, kind="command", name="x", fingerprint="f")
        await journal.abandon(gone, ran=True)
        journal._call(
            lambda conn: conn.execute(
                "UPDATE runs SET started = started - 3 * 86400 WHERE key IN (?, ?)",
                (str(running), str(interrupted)),
            )
        )
        assert await journal.prune() == 0  # no retention configured, none asked for
        assert await journal.prune(max_age=datetime.timedelta(days=1)) == 3
        for key in old:
            assert await journal.get(key) is None
        assert await journal.get(interrupted) is None
        assert await journal.get(running) is not None
        assert await journal.prune(max_entries=2) == 3
        kept = [entry.key for entry in await journal.entries(state="final")]
        assert kept == new[3:][::-1]
        assert [entry.key for entry in await journal.entries(state="running")] == [running]
        await journal.abandon(held, ran=True)
        with pytest.raises(ValueError, match="max_age"):
            await journal.prune(max_age=-1)
        with pytest.raises(ValueError, match="max_entries"):
            await journal.prune(max_entries=0)


async def test_retention_applies_on_write(path: Path) -> None:
    """With `max_entries` set, completing runs trims the journal without a call to prune."""
    async with SqliteJournal(path, max_entries=1) as journal:
        for _ in range(3):
            key = IdempotencyKey.new()
            claim = await journal.claim(key, kind="command", name="x", fingerprint="f")
            await journal.complete(claim, Outcome.of_output(CommandOutput(exit_code=0)))
            journal._pruned = None  # as if a minute had passed since the last pruning
        assert [entry.key for entry in await journal.entries()] == [key]


async def test_unusable_files_are_refused(tmp_path: Path) -> None:
    """A missing file (create=False), a file that is no database, a newer format: JournalError."""
    with pytest.raises(JournalError, match="no journal at"):
        await SqliteJournal(tmp_path / "missing.sqlite3", create=False).get(IdempotencyKey.new())
    garbage = tmp_path / "garbage.sqlite3"
    garbage.write_bytes(b"this is not a database" * 100)
    with pytest.raises(JournalError, match=r"garbage\.sqlite3"):
        await SqliteJournal(garbage).get(IdempotencyKey.new())
    newer = tmp_path / "newer.sqlite3"
    with sqlite3.connect(newer) as conn:
        conn.execute("PRAGMA user_version = 99")
    conn.close()
    with pytest.raises(JournalError, match="format 99"):
        await SqliteJournal(newer).get(IdempotencyKey.new())
    # Paths that cannot hold the file: the OS's reason, not SQLite's "unable to open".
    with pytest.raises(JournalError, match=r"is a directory.*" + str(tmp_path.name)):
        await SqliteJournal(tmp_path).get(IdempotencyKey.new())
    with pytest.raises(JournalError, match=r"not a folder.*garbage\.sqlite3"):
        await SqliteJournal(garbage / "journal.sqlite3").get(IdempotencyKey.new())
    with pytest.raises(JournalError, match=r"Errno \d+\].*/proc/journal\.sqlite3"):
        await SqliteJournal("/proc/journal.sqlite3").get(IdempotencyKey.new())


def test_bad_settings_are_refused(tmp_path: Path) -> None:
    """Retention and sync settings are checked when the journal is made."""
    with pytest.raises(ValueError, match="max_age"):
        SqliteJournal(tmp_path / "j", max_age=0)
    with pytest.raises(ValueError, match="max_entries"):
        SqliteJournal(tmp_path / "j", max_entries=0)
    with pytest.raises(ValueError, match="synchronous"):
        SqliteJournal(tmp_path / "j", synchronous="off")  # type: ignore[arg-type]


def test_default_path_follows_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The default file is $EXECUTOR_JOURNAL, else under $XDG_STATE_HOME."""
    monkeypatch.delenv("EXECUTOR_JOURNAL", raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    assert SqliteJournal().path == tmp_path / "executor" / "journal.sqlite3"
    monkeypatch.setenv("EXECUTOR_JOURNAL", str(tmp_path / "mine.db"))
    assert SqliteJournal().path == tmp_path / "mine.db"


# --- the command line -----------------------------------------------------------------


def python_m(*args: str) -> subprocess.CompletedProcess[str]:
    """Run `python -m executor journal ARGS` in a new process."""
    return subprocess.run(
        [sys.executable, "-m", "executor", "journal", *args],
        capture_output=True,
        text=True,
        timeout=LIMIT,
        check=False,
    )


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    """Run the command line's `journal ARGS` in this process (an interpreter start saved).

    The same `main` as `python -m executor`, which `python_m` runs.
    """
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(["journal", *args])
        except SystemExit as stopped:  # argparse's usage errors
            code = stopped.code if isinstance(stopped.code, int) else 2
    return subprocess.CompletedProcess(["journal", *args], code, out.getvalue(), err.getvalue())


def test_cli_help_names_the_actions() -> None:
    """`journal --help` lists list, show and prune; no action is a usage error."""
    helped = python_m("--help")
    assert helped.returncode == 0, helped.stderr
    for action in ("list", "show", "prune", "--path", "EXECUTOR_JOURNAL"):
        assert action in helped.stdout
    bare = python_m()
    assert bare.returncode == 2
    assert "list" in bare.stderr


def test_cli_lists_shows_and_prunes(path: Path) -> None:
    """`journal list`, `show KEY` and `prune` read and trim the file the library wrote."""
    ok, failed, cut = (IdempotencyKey.new() for _ in range(3))
    anyio.run(fill, path, ok, failed, cut)
    check_cli(path, ok, failed, cut)


async def fill(path: Path, ok: IdempotencyKey, failed: IdempotencyKey, cut: IdempotencyKey) -> None:
    """A final, a failure and an interrupted run, for the command line to show."""
    async with SqliteJournal(path) as journal:
        claim = await journal.claim(ok, kind="command", name="git push", fingerprint="f")
        output = CommandOutput(chunks=(Stdout(b"pushed\n"), Stderr(b"warn\n")), exit_code=0)
        await journal.complete(claim, Outcome.of_output(output))
        claim = await journal.claim(failed, kind="command", name="make", fingerprint="f")
        await journal.complete(claim, Outcome.of_error(NonZeroExit("exit 2", output)))
        # A name with a byte that is not UTF-8 (a surrogate escape), as a command line may hold.
        claim = await journal.claim(cut, kind="command", name="deploy \udcff", fingerprint="f")
        await journal.abandon(claim, ran=True)


def check_cli(path: Path, ok: IdempotencyKey, failed: IdempotencyKey, cut: IdempotencyKey) -> None:
    """What the command line says about the journal `fill` wrote."""
    listed = python_m("--path", str(path), "list")
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert [line.split()[0] for line in lines] == [str(cut), str(failed), str(ok)]
    assert "interrupted" in lines[0]
    assert lines[0].endswith("deploy \\udcff")
    assert "NonZeroExit (exit 0)" in lines[1]
    assert lines[2].endswith("git push")

    as_json = cli("list", "--json", "--state", "final", "--path", str(path))
    rows = [json.loads(line) for line in as_json.stdout.splitlines()]
    assert [(row["key"], row["outcome"]) for row in rows] == [
        (str(failed), "NonZeroExit"),
        (str(ok), "ok"),
    ]

    shown = cli("--path", str(path), "show", str(ok))
    assert shown.returncode == 0, shown.stderr
    assert "state: final" in shown.stdout
    assert "--- stdout\npushed\n--- stderr\nwarn\n" in shown.stdout
    details = cli("--path", str(path), "show", str(ok), "--json")
    assert json.loads(details.stdout)["stdout"] == "pushed\n"

    missing = cli("--path", str(path), "show", str(IdempotencyKey.new()))
    assert missing.returncode == 2
    assert "no run under key" in missing.stderr
    bad = cli("--path", str(path), "show", "nonsense")
    assert bad.returncode == 2
    assert "must be a UUID" in bad.stderr
    absent = cli("--path", str(path) + ".nope", "list")
    assert absent.returncode == 2
    assert "no journal at" in absent.stderr
    wrong = cli("--path", str(path), "prune", "--max-age", "soon")
    assert wrong.returncode == 2
    assert "expected a duration" in wrong.stderr

    pruned = cli("--path", str(path), "prune", "--max-entries", "1")
    assert pruned.returncode == 0, pruned.stderr
    assert pruned.stdout.strip() == "deleted 1 entries"
    time.sleep(0.01)
    aged = cli("--path", str(path), "prune", "--max-age", "0.001")
    assert aged.stdout.strip() == "deleted 2 entries"
    left = cli("--path", str(path), "list")
    assert left.stdout == ""
