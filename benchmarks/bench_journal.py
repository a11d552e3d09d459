"""Journal overhead: an idempotent command against the same command without the journal.

What is measured: the wall time of one whole command (`sh -c true`, spawn to
reaped exit, pipes read), run back to back (500 per side by default), on

- `bare`: `LocalExecutor.exec_cmd(Command.shell("true"))`;
- `Idempotent, synchronous=normal`: the same through
  `Idempotent(local, SqliteJournal(...)).keyed(new_key)`, a new key per
  command, so each one is claimed before it runs and its final recorded
  after (two SQLite transactions, made on the event loop: neither waits for
  a lock nor fsyncs);
- `Idempotent, synchronous=full`: the same with an fsync per commit (the
  final also survives a power loss), so both transactions go to a worker
  thread;
- `repeat (answered)`: a key that has a final, answered from the journal
  without running anything.

All sides run in this one process and event loop, over one `LocalExecutor`,
taking turns command by command (the order rotating each turn), so the
machine's noise falls on every side alike. Target: the journal adds <= 1 ms
per command at the median (`synchronous=normal`, the default).

A second table times the journal alone, no process: one claim plus one
complete, on asyncio and on trio.
"""

from __future__ import annotations

import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import _harness as h
import anyio

from executor import (
    Command,
    CommandOutput,
    IdempotencyKey,
    Idempotent,
    LocalExecutor,
    Outcome,
    SqliteJournal,
)

TARGET_MS = 1.0
BASELINE = "bare"
NORMAL = "Idempotent, synchronous=normal"
FULL = "Idempotent, synchronous=full"
REPEAT = "repeat (answered)"


def measure(count: int, warmup: int, folder: Path) -> dict[str, h.Stats]:
    """Time `count` commands per side, taking turns command by command in one event loop."""
    command = Command.shell("true")
    samples: dict[str, list[float]] = {name: [] for name in (BASELINE, NORMAL, FULL, REPEAT)}

    async def main() -> None:
        async with (
            LocalExecutor(folder) as local,
            SqliteJournal(folder / "normal.sqlite3") as normal,
            SqliteJournal(folder / "full.sqlite3", synchronous="full") as full,
        ):
            fast = Idempotent(local, normal)
            durable = Idempotent(local, full)
            answered = fast.keyed(IdempotencyKey.new())
            await answered.exec_cmd(command)
            sides: dict[str, Callable[[], Awaitable[CommandOutput]]] = {
                BASELINE: lambda: local.exec_cmd(command),
                NORMAL: lambda: fast.keyed(IdempotencyKey.new()).exec_cmd(command),
                FULL: lambda: durable.keyed(IdempotencyKey.new()).exec_cmd(command),
                REPEAT: lambda: answered.exec_cmd(command),
            }
            names = list(sides)
            for _ in range(warmup):
                for run in sides.values():
                    await run()
            for turn in range(count):
                for name in h.rotated(names, turn):
                    started = time.perf_counter()
                    await sides[name]()
                    samples[name].append(time.perf_counter() - started)

    anyio.run(main, backend="asyncio")
    return {name: h.Stats(values) for name, values in samples.items()}


def journal_only(count: int, folder: Path) -> list[list[object]]:
    """Milliseconds for one claim plus one complete (median, p99), per backend and sync mode."""
    rows: list[list[object]] = []
    output = Outcome.of_output(CommandOutput(exit_code=0))

    async def timed(journal: SqliteJournal) -> list[float]:
        times = []
        for _ in range(count):
            key = IdempotencyKey.new()
            started = time.perf_counter()
            claim = await journal.claim(key, kind="command", name="true", fingerprint="f")
            await journal.complete(claim, output)
            times.append(time.perf_counter() - started)
        return times

    for backend in ("asyncio", "trio"):
        for sync in ("normal", "full"):
            journal = SqliteJournal(folder / f"only-{sync}.sqlite3", synchronous=sync)
            try:
                stats = h.Stats(anyio.run(timed, journal, backend=backend))
            finally:
                journal.close()
            rows.append(
                [
                    f"{backend}, synchronous={sync}",
                    count,
                    h.fmt_ms(stats.median),
                    h.fmt_ms(stats.p99),
                ]
            )
    return rows


def report(stats: dict[str, h.Stats], alone: list[list[object]]) -> bool:
    """Print both tables and the target; return whether it was met."""
    base = stats[BASELINE]
    rows = [
        h.sample_row(
            name, s, f"{(s.median - base.median) * 1000:+.3f}", h.fmt_ratio(s.median, base.median)
        )
        for name, s in stats.items()
    ]
    print("Journal overhead: `sh -c true` with and without the journal (ms per command)")
    h.print_table(["side", "n", "median", "p99", "added", "med/bare"], rows)
    added = (stats[NORMAL].median - base.median) * 1000
    met = added <= TARGET_MS
    print(
        f"target: {NORMAL} adds <= {TARGET_MS:g} ms at the median: "
        f"{added:+.3f} ms ({h.fmt_ratio(stats[NORMAL].median, base.median)}) -> {h.verdict(met)}"
    )
    print()
    print("The journal alone, no process: one claim and one complete (ms)")
    h.print_table(["backend, sync", "n", "median", "p99"], alone)
    return met


def main(argv: list[str] | None = None) -> int:
    scale = h.per_side(__doc__, argv, quick=24, full=500)
    h.preload()
    with tempfile.TemporaryDirectory(prefix="bench-journal-") as folder:
        stats = measure(scale.count, scale.pick(2, 10), Path(folder))
        alone = journal_only(scale.pick(50, 1000), Path(folder))
    report(stats, alone)
    return 0


if __name__ == "__main__":
    sys.exit(main())
