"""The idempotency journal: keys, claims, finals, and the SQLite store that keeps them."""

from executor._journal.journal import (
    DEFAULT_MAX_AGE,
    Claim,
    IdempotencyKey,
    Journal,
    JournalEntry,
    JournalError,
    OnInterrupted,
    Outcome,
    RunInterrupted,
    SqliteJournal,
    acquire,
    default_journal_path,
    optional_key,
    settle,
)

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
