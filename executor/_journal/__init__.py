"""The idempotency journal: keys, claims, finals, and the SQLite store that keeps them.

Its modules, each one idea, lower ones first:

- `keys`: `IdempotencyKey`, a UUID v7 naming one run, and the clock behind it;
- `codec`: `Outcome`, how a run ended in stored form, and the chunk encoding;
- `protocol`: the `Journal` protocol, its `Claim` and `JournalEntry`, and the
  `acquire` and `settle` steps every run under a key takes;
- `liveness`: which process owns a run, and whether it is still alive;
- `sqlite`: `SqliteJournal`, the default store.
"""

from executor._core.errors import JournalError, RunInterrupted
from executor._journal.codec import Outcome
from executor._journal.keys import IdempotencyKey, optional_key
from executor._journal.protocol import (
    Claim,
    Journal,
    JournalEntry,
    OnInterrupted,
    acquire,
    settle,
)
from executor._journal.sqlite import DEFAULT_MAX_AGE, SqliteJournal, default_journal_path

__all__ = [
    "DEFAULT_MAX_AGE",
    "Claim",
    "IdempotencyKey",
    "Journal",
    "JournalEntry",
    "JournalError",
    "OnInterrupted",
    "Outcome",
    "RunInterrupted",
    "SqliteJournal",
    "acquire",
    "default_journal_path",
    "optional_key",
    "settle",
]
