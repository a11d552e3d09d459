"""Run a command at most once under an idempotency key, and recover after a crash.

An agent that retries a step after its own crash must not run `git push`
twice. `Idempotent(executor, journal).keyed(key)` records the key in the
journal before the command starts and its outcome when it ends; a retry
with the same key, in this process or a new one, is answered from the
journal without running anything. Keep the key with the agent's own
checkpoint (`str(key)` is its text).

A run whose process died (or was cancelled) before its outcome was
recorded is *interrupted*: nobody knows whether it took effect, so by
default a retry raises `RunInterrupted`; `on_interrupted="rerun"` runs it
again instead.
"""

import tempfile
from pathlib import Path

import anyio

from executor import (
    Command,
    IdempotencyKey,
    Idempotent,
    LocalExecutor,
    RunInterrupted,
    SqliteJournal,
)


async def main() -> None:
    with tempfile.TemporaryDirectory() as root:
        folder = Path(root)
        async with (
            LocalExecutor(folder) as local,
            SqliteJournal(folder / "journal.sqlite3") as journal,
        ):
            idem = Idempotent(local, journal)
            key = IdempotencyKey.new()  # stored with the agent's checkpoint
            push = Command.shell("echo pushed >> remote.log; echo 'main -> main'")

            first = idem.keyed(key)
            output = await first.exec_cmd(push)
            print(f"first run: {output.text().strip()!r}, replayed={first.replayed}")

            # The agent crashed and retries the step with the key it stored.
            retry = idem.keyed(str(key))
            again = await retry.exec_cmd(push)
            print(f"retry: same output {again == output}, replayed={retry.replayed}")
            pushes = (folder / "remote.log").read_text().count("pushed")
            print(f"the push ran {pushes} time(s)")

            # A run cut off before its outcome was recorded.
            deploy = Command.shell("echo started >> deploy.log; sleep 5")
            cut = IdempotencyKey.new()
            with anyio.move_on_after(0.3):
                await idem.keyed(cut).exec_cmd(deploy)
            try:
                await idem.keyed(cut).exec_cmd(deploy)
            except RunInterrupted as error:
                print(f"RunInterrupted: {error.entry.name!r} started and never finished")

            for entry in await journal.entries():
                print(f"journal: {entry.state}: {entry.name}")


if __name__ == "__main__":
    anyio.run(main)
