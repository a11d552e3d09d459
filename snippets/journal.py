"""Recover a streaming tool's run from the idempotency journal, and look inside the journal.

A streaming tool that declares `idempotent = True` takes a journal and a key:
`StreamingToolSession(tool, input, journal=journal, key=key)` records the
key before the tool starts and its final value when it finishes. After a
crash the agent retries with the key it kept: a key with a final is answered
from the journal (`session.recovered`) without starting the tool again. A
run left before its final is *interrupted*: a retry raises `RunInterrupted`,
unless `on_interrupted="rerun"`. `SqliteJournal.entries()` lists the runs
(the newest first) and `prune()` deletes old finals and interrupted runs.
"""

import tempfile
from pathlib import Path

import anyio

from executor import (
    IdempotencyKey,
    RunInterrupted,
    SqliteJournal,
    StreamingTool,
    StreamingToolHandle,
    StreamingToolSession,
    TaskHandle,
    ToolChannel,
)


class Migrate(StreamingTool[str, str, int]):
    """Migrates a database, step by step; run it at most once per key."""

    name = "migrate"
    idempotent = True
    runs = 0

    async def start(self, input: str) -> StreamingToolHandle[str, int]:
        """Run the steps as a task."""

        async def run(channel: ToolChannel[str]) -> int:
            Migrate.runs += 1
            for step in ("schema", "data"):
                await channel.send(f"{input}: {step}")
            return 2

        return TaskHandle(run)


async def main() -> None:
    tool = Migrate()
    with tempfile.TemporaryDirectory() as root:
        async with SqliteJournal(Path(root, "journal.sqlite3")) as journal:
            key = IdempotencyKey.new()  # kept with the agent's checkpoint
            async with StreamingToolSession(tool, "orders", journal=journal, key=key) as session:
                first = await session.finalize()
            print(f"first run: final={first.final}, recovered={session.recovered}")

            # The agent crashed after the run, and retries with the key it kept.
            async with StreamingToolSession(tool, "orders", journal=journal, key=str(key)) as again:
                retried = await again.finalize()
            print(f"retry: final={retried.final}, recovered={again.recovered}, runs={tool.runs}")

            # A run left after its first chunk, before its final: interrupted.
            cut = IdempotencyKey.new()
            async with StreamingToolSession(tool, "users", journal=journal, key=cut) as session:
                print(f"cut off after: {await session.next_chunk()}")
            try:
                async with StreamingToolSession(tool, "users", journal=journal, key=cut):
                    pass
            except RunInterrupted as interrupted:
                print(f"RunInterrupted: {interrupted.entry.name} started and never finished")
            async with StreamingToolSession(
                tool, "users", journal=journal, key=cut, on_interrupted="rerun"
            ) as session:
                print(f"rerun: final={(await session.finalize()).final}, runs={tool.runs}")

            for entry in await journal.entries():
                print(f"journal: {entry.name} {entry.state}, {entry.attempts} attempt(s)")
            print(f"pruned: {await journal.prune(max_entries=1)} of the older finals")


if __name__ == "__main__":
    anyio.run(main)
