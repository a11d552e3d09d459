"""`Idempotent`: run a command under an idempotency key at most once, and answer repeats.

```python
idem = Idempotent(LocalExecutor(repo), SqliteJournal("runs.sqlite3"))
push = idem.keyed(key)  # a ToolExecutor bound to one key
output = await push.exec_cmd(Command.shell("git push"))
```

Why a keyed view: `exec_cmd(cmd)` is the contract every wrapper and tool
relies on, so the key cannot be an extra argument; and a key is not a
property of the command (the same command under two keys is two runs).
`idem.keyed(key)` is an executor like any other, so a tool that takes an
executor runs idempotently without knowing it, and the agent, which owns
the key, decides where one run ends and the next begins.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncIterator, Iterable, Mapping
from typing import TYPE_CHECKING, Any

import attrs

from executor._core.base import LoadedFile, ToolExecutor, WrappedExecutor, report
from executor._core.commands import Command, StrPath
from executor._core.errors import (
    CommandError,
    ExecutorError,
    PolicyDenied,
)
from executor._core.output import CommandOutput, Sink
from executor._journal.codec import Outcome
from executor._journal.keys import IdempotencyKey
from executor._journal.protocol import Claim, Journal, OnInterrupted, acquire, settle
from executor._policies.policies import describe

if TYPE_CHECKING:
    from executor._core.session import ProcessSession

# --- what a run is ---------------------------------------------------------------------


def _canonical(value: Any) -> Any:
    if isinstance(value, bytes):
        return {"bytes": value.hex()}
    if isinstance(value, Mapping):
        return sorted((str(k), _canonical(v)) for k, v in value.items())
    if isinstance(value, list | tuple):
        return [_canonical(item) for item in value]
    return value


def fingerprint(cmd: Command) -> str:
    """A digest of everything about `cmd` that decides what runs (its type and every field)."""
    fields = {field.name: _canonical(getattr(cmd, field.name)) for field in attrs.fields(type(cmd))}
    text = json.dumps([type(cmd).__qualname__, fields], sort_keys=True, default=repr)
    return hashlib.sha256(text.encode()).hexdigest()


# --- the wrapper ------------------------------------------------------------------------


class Idempotent(WrappedExecutor):
    """Runs commands under idempotency keys: each key at most once, repeats answered from a journal.

    `idem.keyed(key)` gives an executor bound to one key. Its first command
    is recorded as started before it runs, and its outcome (the output, exit
    code and chunks exactly, or the error: `NonZeroExit`, `TimedOut`,
    `ExecutorError`) is recorded when it ends. Any later start under the key,
    in this process or another one after a crash, returns that output or
    raises that error again without running anything. While another live
    process or task runs the key, a start waits for its outcome (as long as
    that takes: put the call under `anyio.fail_after` to bound the wait).

    A run that started but has no outcome (its process was killed, or it was
    cancelled) is interrupted: `on_interrupted="fail"` raises
    `RunInterrupted`, `"rerun"` runs it again. A command a policy inside
    refuses (`PolicyDenied`) never ran, so it leaves no trace. A key names
    one run: the same key with a different command raises `JournalError`.

    Commands without a key are refused: a key cannot be made up here, since
    only the caller knows which call a retry repeats. `stream_files`
    passes through; sessions are refused (an interactive run cannot be
    answered from a record).

    Args:
        inner: The executor that runs the commands.
        journal: Where runs are recorded (`SqliteJournal`).
        on_interrupted: `"fail"` (the default) or `"rerun"`.
    """

    def __init__(
        self, inner: ToolExecutor, journal: Journal, *, on_interrupted: OnInterrupted = "fail"
    ) -> None:
        super().__init__(inner)
        if on_interrupted not in ("fail", "rerun"):
            raise ValueError(f"on_interrupted must be 'fail' or 'rerun', got {on_interrupted!r}")
        if not isinstance(journal, Journal):
            raise TypeError(f"journal must be a Journal (SqliteJournal), got {journal!r}")
        self.journal = journal
        self.on_interrupted: OnInterrupted = on_interrupted

    def __repr__(self) -> str:
        return f"Idempotent({self.inner!r}, {self.journal!r})"

    def keyed(
        self, key: IdempotencyKey | str, *, on_interrupted: OnInterrupted | None = None
    ) -> KeyedExecutor:
        """An executor that runs commands under `key` (an `IdempotencyKey` or its text).

        Raises:
            InvalidArgument: `key` is not a UUID v7.
        """
        return KeyedExecutor(
            self,
            IdempotencyKey.parse(key),
            on_interrupted=on_interrupted if on_interrupted is not None else self.on_interrupted,
        )

    def _refuse(self) -> ExecutorError:
        return ExecutorError(
            "Idempotent runs commands only under a key: use idem.keyed(key).exec_cmd(cmd)"
        )

    async def exec_cmd(self, cmd: Command) -> CommandOutput:
        """Refused: run commands through `keyed(key)`."""
        raise self._refuse()

    async def exec_cmd_streaming(self, cmd: Command, sink: Sink) -> CommandOutput:
        """Refused: run commands through `keyed(key)`."""
        raise self._refuse()

    async def start(self, cmd: Command, *, pty: bool = False) -> ProcessSession:
        """Refused: a session cannot be answered from a record."""
        raise ExecutorError("an idempotent executor does not start sessions")


class KeyedExecutor(WrappedExecutor):
    """An `Idempotent` executor bound to one key; made by `Idempotent.keyed(key)`.

    `exec_cmd` and `exec_cmd_streaming` run the command once under the key
    and answer every repeat from the journal (a sink is then handed the
    recorded chunks). `replayed` says how the last call was answered.
    Closing it leaves the executor it came from open.

    Attributes:
        key: The key.
        replayed: `True` when the last call was answered from the journal,
            `False` when it ran the command, `None` before any call.
    """

    def __init__(
        self, idempotent: Idempotent, key: IdempotencyKey, *, on_interrupted: OnInterrupted
    ) -> None:
        super().__init__(idempotent)
        self.idempotent = idempotent
        self.key = key
        self.on_interrupted: OnInterrupted = on_interrupted
        self.replayed: bool | None = None

    def __repr__(self) -> str:
        return f"KeyedExecutor({self.idempotent!r}, {str(self.key)!r})"

    async def exec_cmd(self, cmd: Command) -> CommandOutput:
        """Run `cmd` under the key once; answer a repeat from the journal.

        Raises:
            NonZeroExit: The command failed (now, or when it first ran).
            TimedOut: It timed out (now, or when it first ran).
            RunInterrupted: An earlier run under the key was interrupted and
                `on_interrupted` is `"fail"`.
            JournalError: The key names a different command, or the journal failed.
        """
        return await self.exec_cmd_streaming(cmd, None)

    async def exec_cmd_streaming(self, cmd: Command, sink: Sink | None) -> CommandOutput:
        """As `exec_cmd`, handing each chunk to `sink` (the recorded ones on a repeat)."""
        journal = self.idempotent.journal
        claim = await acquire(
            journal,
            self.key,
            kind="command",
            name=describe(cmd),
            fingerprint=fingerprint(cmd),
            on_interrupted=self.on_interrupted,
        )
        if claim.status == "final":
            self.replayed = True
            outcome = claim.entry.outcome
            assert outcome is not None
            if outcome.output is not None:
                await report(sink, outcome.output)
            return outcome.replay()
        self.replayed = False
        return await self._run(journal, claim, cmd, sink)

    async def _run(
        self, journal: Journal, claim: Claim, cmd: Command, sink: Sink | None
    ) -> CommandOutput:
        inner = self.idempotent.inner
        try:
            if sink is None:
                output = await inner.exec_cmd(cmd)
            else:
                output = await inner.exec_cmd_streaming(cmd, sink)
        except PolicyDenied:
            # Refused before it started: nothing ran, so nothing is remembered.
            await settle(journal, claim, None, ran=False)
            raise
        except CommandError as error:
            await settle(journal, claim, Outcome.of_error(error), ran=True)
            raise
        except BaseException:
            # Cancelled, or a sink failed mid-run: it may have done part of its work.
            await settle(journal, claim, None, ran=True)
            raise
        await settle(journal, claim, Outcome.of_output(output), ran=True)
        return output

    async def start(self, cmd: Command, *, pty: bool = False) -> ProcessSession:
        """Refused: a session cannot be answered from a record."""
        raise ExecutorError("an idempotent executor does not start sessions")

    def stream_files(
        self, path: StrPath, extensions: Iterable[str] | None = None
    ) -> AsyncIterator[LoadedFile]:
        """List files through the executor (a listing is not journaled)."""
        return self.idempotent.stream_files(path, extensions)

    async def aclose(self) -> None:
        """Nothing to close: the executor it came from stays open."""
