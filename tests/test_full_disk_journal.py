"""The idempotency journal on a full disk: it refuses to start a run, and loses no record.

The journal lives on a tmpfs of 1 MiB of its own (see `test_full_disk`:
root only, skipped elsewhere); the commands run in a folder off it, so
their marker file counts how often they really ran.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from test_full_disk import fill, small_tmpfs

from executor import (
    Command,
    IdempotencyKey,
    Idempotent,
    JournalError,
    LocalExecutor,
    RunInterrupted,
    SqliteJournal,
)

pytestmark = pytest.mark.anyio

# SQLite's words for ENOSPC.
FULL = "database or disk is full"


@pytest.fixture
def anyio_backend() -> str:
    """One backend is enough: the disk's answer does not depend on it."""
    return "asyncio"


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    """A small tmpfs for the journal."""
    with small_tmpfs(tmp_path / "disk") as folder:
        yield folder


@pytest.fixture
def work(tmp_path: Path) -> Path:
    """The commands' folder, off the full disk."""
    folder = tmp_path / "work"
    folder.mkdir()
    return folder


def marks(work: Path) -> int:
    """How many times a command ran: lines in its marker file."""
    marker = work / "marker"
    return len(marker.read_text().splitlines()) if marker.exists() else 0


async def test_a_full_journal_refuses_to_start_a_run(disk: Path, work: Path) -> None:
    """No room for the claim: JournalError before the command starts; earlier records stay."""
    journal = SqliteJournal(disk / "journal.sqlite3")
    try:
        async with LocalExecutor(work) as ex:
            idempotent = Idempotent(ex, journal)
            earlier = IdempotencyKey.new()
            await idempotent.keyed(earlier).exec_cmd(Command.shell("echo earlier"))
            fill(disk)
            script = "echo x >> marker; echo ran"
            for _ in range(3):
                with pytest.raises(JournalError, match=FULL) as raised:
                    await idempotent.keyed(IdempotencyKey.new()).exec_cmd(Command.shell(script))
                assert not isinstance(raised.value, RunInterrupted)
                assert str(disk / "journal.sqlite3") in str(raised.value)
            assert marks(work) == 0
            # The earlier run is still answered from its record, disk full or not.
            keyed = idempotent.keyed(earlier)
            assert (await keyed.exec_cmd(Command.shell("echo earlier"))).stdout == b"earlier\n"
            assert keyed.replayed is True
            # Room again: the journal is sound and takes runs.
            (disk / "filler").unlink()
            assert await journal.integrity_check() == ["ok"]
            keyed = idempotent.keyed(IdempotencyKey.new())
            assert (await keyed.exec_cmd(Command.shell(script))).stdout == b"ran\n"
            assert keyed.replayed is False
            assert marks(work) == 1
    finally:
        journal.close()


async def test_a_disk_that_fills_during_the_run_keeps_its_output(disk: Path, work: Path) -> None:
    """The command fills the disk, so its final cannot be recorded: nothing of it is lost.

    The JournalError says how it ended and carries its output; the key reads
    as interrupted and is not run again.
    """
    journal = SqliteJournal(disk / "journal.sqlite3")
    key = IdempotencyKey.new()
    # 300 KB of output (the final needs room for it), after filling the disk.
    script = (
        f"echo x >> marker; head -c 2000000 /dev/zero > {disk}/filler; "
        "head -c 300000 /dev/zero | tr '\\0' 'o'; echo; echo last; exit 4"
    )
    try:
        async with LocalExecutor(work) as ex:
            idempotent = Idempotent(ex, journal)
            with pytest.raises(JournalError, match=FULL) as raised:
                await idempotent.keyed(key).exec_cmd(Command.shell(script))
            error = raised.value
            assert f"the run under key {key}" in error.message
            assert "ended with NonZeroExit (command exited with code 4)" in error.message
            assert "the key reads as interrupted" in error.message
            assert error.output.exit_code == 4
            assert error.output.stdout == b"o" * 300_000 + b"\nlast\n"
            assert marks(work) == 1
            entry = await journal.get(key)
            assert entry is not None
            assert entry.state == "interrupted"
            # Even with room again, the key is never run a second time unasked.
            (disk / "filler").unlink()
            with pytest.raises(RunInterrupted):
                await idempotent.keyed(key).exec_cmd(Command.shell(script))
            assert marks(work) == 1
            assert await journal.integrity_check() == ["ok"]
    finally:
        journal.close()
