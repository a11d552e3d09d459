"""`python -m executor journal list|show|prune`: the journal from the command line."""

from __future__ import annotations

import argparse
import json
import re
import sys
from typing import TYPE_CHECKING, Any

import anyio

from executor._core.errors import InvalidArgument, JournalError

if TYPE_CHECKING:
    from executor._journal.protocol import JournalEntry
    from executor._journal.sqlite import SqliteJournal

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}

_JOURNAL_EXAMPLES = """\
examples:
  python -m executor journal list --state interrupted
  python -m executor journal --path run.sqlite3 show 0190a5e2-7c4d-7b61-9f3a-2d5c8e1b4a70
  python -m executor journal prune --max-age 7d
"""


def _example(*uses: str) -> str:
    """An epilog: `python -m executor journal USE` for each use."""
    lines = "".join(f"  python -m executor journal {use}\n" for use in uses)
    return f"examples:\n{lines}"


def _duration(text: str) -> float:
    match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([smhdw]?)\s*", text)
    if not match or not float(match[1]) > 0:
        raise argparse.ArgumentTypeError(
            f"expected a duration such as 3600, 90m, 12h or 30d, got {text!r}"
        )
    return float(match[1]) * _UNITS[match[2] or "s"]


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return value


def add_journal_parser(commands: argparse._SubParsersAction[Any]) -> None:
    """Add `journal list|show|prune` to the command line's subcommands."""
    journal = commands.add_parser(
        "journal",
        help="list, inspect and prune the idempotency journal",
        description=(
            "Inspect the journal of runs under idempotency keys. The journal is --path,\n"
            "else $EXECUTOR_JOURNAL, else ~/.local/state/executor/journal.sqlite3.\n"
            "Exit code 2 when the journal or the key is missing."
        ),
        epilog=_JOURNAL_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    journal.add_argument("--path", help="the journal file")
    actions = journal.add_subparsers(dest="journal_command", required=True)
    listing = actions.add_parser(
        "list",
        help="list runs, newest first",
        description="List the runs in the journal, newest first: key, state, start, outcome, name.",
        epilog=_example("list --state interrupted --limit 20", "list --json | head -3"),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    listing.add_argument("--state", choices=("running", "interrupted", "final"))
    listing.add_argument("--limit", type=_positive_int, default=100, help="at most N (100)")
    listing.add_argument("--json", action="store_true", help="one JSON object per line")
    show = actions.add_parser(
        "show",
        help="show one run and its recorded output",
        description="Show one run: its state, outcome, and the output recorded with it.",
        epilog=_example("show 0190a5e2-7c4d-7b61-9f3a-2d5c8e1b4a70", "show KEY --json"),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    show.add_argument("key", help="the idempotency key (a UUID v7)")
    show.add_argument("--json", action="store_true", help="as one JSON object")
    prune = actions.add_parser(
        "prune",
        help="delete expired finals and interrupted runs",
        description=(
            "Delete the finished and interrupted runs older than --max-age (30 days when\n"
            "neither option is given), and all but the newest --max-entries finished ones."
        ),
        epilog=_example("prune --max-age 12h", "prune --max-entries 1000"),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    prune.add_argument(
        "--max-age", type=_duration, help="older than this (3600, 90m, 12h, 30d; default 30d)"
    )
    prune.add_argument("--max-entries", type=_positive_int, help="keep only the newest N finals")
    for action in (listing, show, prune):
        # Taken after the action too; SUPPRESS leaves a --path given before it alone.
        action.add_argument("--path", default=argparse.SUPPRESS, help="the journal file")


def _shown(text: str) -> str:
    """`text` fit for any terminal: bytes that were not UTF-8 shown as Python escapes."""
    return text.encode("utf-8", "backslashreplace").decode()


def _summary(entry: JournalEntry) -> dict[str, Any]:
    outcome = entry.outcome
    data: dict[str, Any] = {
        "key": str(entry.key),
        "state": entry.state,
        "kind": entry.kind,
        "name": entry.name,
        "started": entry.started.isoformat(timespec="milliseconds"),
        "finished": entry.finished.isoformat(timespec="milliseconds") if entry.finished else None,
        "attempts": entry.attempts,
        "owner": entry.owner,
        "outcome": outcome.kind if outcome is not None else None,
    }
    if outcome is not None and outcome.output is not None:
        data["exit_code"] = outcome.output.exit_code
    return data


def _details(entry: JournalEntry) -> dict[str, Any]:
    data = _summary(entry)
    outcome = entry.outcome
    if outcome is None:
        return data
    data["message"] = outcome.message
    if outcome.timeout is not None:
        data["timeout"] = outcome.timeout
    if outcome.value is not None:
        data["value"] = json.loads(outcome.value)
    if outcome.output is not None:
        output = outcome.output
        data.update(
            signal=output.signal,
            duration=output.duration,
            truncated=output.truncated,
            stdout=output.stdout.decode("utf-8", "replace"),
            stderr=output.stderr.decode("utf-8", "replace"),
        )
    return data


def run_journal_command(args: argparse.Namespace) -> int:
    """Run `journal list|show|prune` and return the exit code (2 for a missing journal or key)."""
    # Imported here: `run` and `files` need none of the journal (sqlite3 and more).
    from executor._journal.sqlite import SqliteJournal

    journal = SqliteJournal(args.path, create=False, max_age=None)
    try:
        return anyio.run(_journal_command, journal, args)
    except (JournalError, InvalidArgument) as error:
        sys.stderr.write(f"executor: {error}\n")
        return 2
    finally:
        journal.close()


async def _journal_command(journal: SqliteJournal, args: argparse.Namespace) -> int:
    from executor._journal.keys import IdempotencyKey
    from executor._journal.sqlite import DEFAULT_MAX_AGE

    if args.journal_command == "list":
        entries = await journal.entries(state=args.state, limit=args.limit)
        if args.json:
            for entry in entries:
                print(json.dumps(_summary(entry)))
            return 0
        for entry in entries:
            outcome = entry.outcome
            ended = outcome.kind if outcome is not None else "-"
            if outcome is not None and outcome.output is not None:
                ended += f" (exit {outcome.output.exit_code})"
            started = entry.started.isoformat(sep=" ", timespec="seconds")
            print(f"{entry.key}  {entry.state:<11}  {started}  {ended:<22}  {_shown(entry.name)}")
        return 0
    if args.journal_command == "show":
        key = IdempotencyKey.parse(args.key)
        found = await journal.get(key)
        if found is None:
            sys.stderr.write(f"executor: no run under key {key} in {journal.path}\n")
            return 2
        details = _details(found)
        if args.json:
            print(json.dumps(details))
            return 0
        for name, value in details.items():
            if name in ("stdout", "stderr"):
                continue
            print(f"{name}: {_shown(str(value))}")
        for name in ("stdout", "stderr"):
            if details.get(name):
                print(f"--- {name}")
                sys.stdout.write(details[name])
                if not details[name].endswith("\n"):
                    print()
        return 0
    max_age = args.max_age
    if max_age is None and args.max_entries is None:
        max_age = DEFAULT_MAX_AGE.total_seconds()
    deleted = await journal.prune(max_age=max_age, max_entries=args.max_entries)
    print(f"deleted {deleted} entries")
    return 0
