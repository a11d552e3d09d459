"""The journal protocol: what a store of runs under idempotency keys answers, and how a run uses it.

The life of a key in the journal:

- **claimed**: a run under the key is recorded, with the process that owns
  it, *before* any work begins;
- **final**: the run ended and its outcome is recorded (the output, or the
  error it raised); every later start with the key returns that outcome
  without running anything;
- **running**: claimed by a process that is still alive; a second start
  with the key waits for its final instead of running it again;
- **interrupted**: claimed, no final, and its owner is gone (killed, crashed,
  or cancelled mid-run). Whether the work took effect is unknown, so the
  caller chooses: `on_interrupted="fail"` raises `RunInterrupted`,
  `"rerun"` runs it again under the same key. The claim and the final are
  two commits with the work between them, so a crash in either gap also
  leaves the key interrupted: after the claim but before the command
  started (nothing ran), or after the command ended but before its final
  was recorded (it ran to the end). The journal cannot tell these apart
  from a crash mid-command; it never takes any of them for "not run".

`acquire` takes a claim (waiting while another process runs the key) and
`settle` records how the run ended; both hold on through a cancellation, so
no claim is left behind by one.
"""

from __future__ import annotations

import datetime
import functools
from typing import Literal, Protocol, TypeAlias, runtime_checkable

import anyio
import anyio.lowlevel
import attrs

from executor._core.cleanup import run_to_completion
from executor._core.errors import JournalError, RunInterrupted
from executor._journal.codec import Outcome
from executor._journal.keys import IdempotencyKey

OnInterrupted: TypeAlias = Literal["fail", "rerun"]
"""What to do with a key whose run started and never finished."""

EntryState: TypeAlias = Literal["running", "interrupted", "final"]
"""Where a key's run stands: its owner still alive, gone without a final, or ended."""

ClaimStatus: TypeAlias = Literal["run", "rerun", "final", "running", "interrupted"]
"""The journal's answer to a start; see `Claim.status`."""


@attrs.frozen(kw_only=True)
class JournalEntry:
    """What the journal holds about one key.

    Attributes:
        key: The key.
        kind: `"command"` or `"tool"`.
        name: What ran: the command line, or the tool's name.
        fingerprint: A digest of exactly what ran; a key cannot be reused for
            anything else.
        state: `"running"` (its owner is alive), `"interrupted"` (started, no
            final, owner gone) or `"final"`.
        started: When the run first started (UTC).
        finished: When its final was recorded, or `None`.
        attempts: How many times it was started (more than one after reruns).
        owner: The pid of the process that holds the run now, or `None`.
        outcome: The final outcome, or `None` without a final.
    """

    key: IdempotencyKey
    kind: str
    name: str
    fingerprint: str
    state: EntryState
    started: datetime.datetime
    finished: datetime.datetime | None = None
    attempts: int = 1
    owner: int | None = None
    outcome: Outcome | None = None


@attrs.frozen(kw_only=True)
class Claim:
    """The journal's answer to a start.

    Attributes:
        status: `"run"` (recorded as started: run it now), `"rerun"` (an
            interrupted run taken over: run it again), `"final"` (answer from
            `entry.outcome`), `"running"` (another live process or task runs
            it) or `"interrupted"` (started, no final, not taken over).
        entry: The journal's entry for the key.
        token: Identifies this claim to `complete` and `abandon` (with
            `"run"` and `"rerun"`).
    """

    status: ClaimStatus
    entry: JournalEntry
    token: str | None = None


@runtime_checkable
class Journal(Protocol):
    """Where runs under idempotency keys are recorded; `SqliteJournal` is the default.

    Implementations must make `claim` atomic across every process that
    shares the journal: of two claims racing on one new key, exactly one
    gets `"run"`.
    """

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
            JournalError: `key` was used for a run with another fingerprint.
        """
        ...

    async def complete(self, claim: Claim, outcome: Outcome) -> None:
        """Record the final outcome of the run `claim` started."""
        ...

    async def abandon(self, claim: Claim, *, ran: bool) -> None:
        """Give up a claim without a final: interrupted if it `ran`, forgotten if not."""
        ...

    async def get(self, key: IdempotencyKey) -> JournalEntry | None:
        """The entry for `key`, or `None`."""
        ...


# How long a start waits between looks at a run another process holds.
_WAIT_FIRST = 0.005
_WAIT_MAX = 0.25


async def acquire(
    journal: Journal,
    key: IdempotencyKey,
    *,
    kind: str,
    name: str,
    fingerprint: str,
    on_interrupted: OnInterrupted,
) -> Claim:
    """Claim `key`, waiting while another process or task runs it.

    Returns a claim with status `"run"`, `"rerun"` or `"final"`. A claim
    taken is never lost to a cancellation: if the caller is cancelled
    while the journal records it, it is given back before the cancellation
    goes on.

    Raises:
        RunInterrupted: The key's run was interrupted and `on_interrupted` is `"fail"`.
        JournalError: The key names another run, or the journal failed.
    """
    if on_interrupted not in ("fail", "rerun"):
        raise ValueError(f"on_interrupted must be 'fail' or 'rerun', got {on_interrupted!r}")
    delay = _WAIT_FIRST
    while True:
        claim = await run_to_completion(
            functools.partial(
                journal.claim,
                key,
                kind=kind,
                name=name,
                fingerprint=fingerprint,
                rerun_interrupted=on_interrupted == "rerun",
            )
        )
        if claim.status in ("run", "rerun"):
            try:
                await anyio.lowlevel.checkpoint_if_cancelled()
            except BaseException:
                await run_to_completion(functools.partial(journal.abandon, claim, ran=False))
                raise
            return claim
        if claim.status == "final":
            return claim
        if claim.status == "interrupted":
            raise RunInterrupted(claim.entry)
        # Someone else runs it: its final will answer us too. Looked for with
        # reads, which take no lock from the run's own final.
        while True:
            await anyio.sleep(delay)
            delay = min(delay * 2, _WAIT_MAX)
            entry = await journal.get(key)
            if entry is None or entry.state != "running":
                break


async def settle(journal: Journal, claim: Claim, outcome: Outcome | None, *, ran: bool) -> None:
    """Record `outcome` for `claim`, or abandon it when there is none; never cut short.

    Raises:
        JournalError: The final could not be recorded (a full disk, say): the
            run took place, so the error says how it ended and carries its
            output, which would otherwise be lost; the key reads as
            interrupted from then on, and is never run again unasked.
    """
    if outcome is None:
        await run_to_completion(functools.partial(journal.abandon, claim, ran=ran))
        return
    try:
        await run_to_completion(functools.partial(journal.complete, claim, outcome))
    except JournalError as error:
        entry = claim.entry
        ended = "succeeded" if outcome.ok else f"ended with {outcome.kind}"
        if outcome.message:
            ended += f" ({outcome.message})"
        raise JournalError(
            f"the run under key {entry.key} ({entry.name}) {ended}, but the journal could not "
            f"record it: {error.message}. Its output is this error's; the key reads as "
            "interrupted from now on",
            outcome.output,
        ) from error
