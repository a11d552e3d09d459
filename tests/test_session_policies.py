"""Policies over sessions: Secrets redacts their chunks, Audit and Observed record them."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from conftest import alive

from executor import (
    Audit,
    AuditEvent,
    AuditRecord,
    Command,
    DangerousCommands,
    LocalExecutor,
    NonZeroExit,
    PolicyDenied,
    Secrets,
    Text,
    TimedOut,
)
from executor._core.output import Stderr, Stdout
from executor._policies.observed import CommandCancelled, CommandEvent, CommandFinished, Observed

pytestmark = pytest.mark.anyio

SECRET = "s3cr3t-value"


@pytest.fixture
def local(tmp_path: Path) -> LocalExecutor:
    return LocalExecutor(tmp_path, kill_grace=0.2)


def redacting(local: LocalExecutor) -> Secrets:
    return Secrets(local, redact=[SECRET], redact_environment=False)


async def test_secrets_redact_a_session_split_across_reads(local: LocalExecutor) -> None:
    """A secret written in two pieces, on both streams, never reaches the reader whole."""
    script = (
        "printf 'a s3cr'; sleep 0.2; printf '3t-value b\\n'; "
        "printf 's3cr3t' >&2; sleep 0.2; printf -- '-value\\n' >&2"
    )
    async with await redacting(local).start(Command.shell(script)) as session:
        read = [item.chunk async for item in session]
        output = await session.finalize()
    stdout = b"".join(c.data for c in read if isinstance(c, Stdout))
    stderr = b"".join(c.data for c in read if isinstance(c, Stderr))
    assert stdout == output.stdout == b"a [REDACTED] b\n"
    assert stderr == output.stderr == b"[REDACTED]\n"
    assert all(SECRET.encode() not in c.data for c in read)


async def test_secrets_redact_what_a_session_echoes(local: LocalExecutor) -> None:
    """Text sent to an interactive command comes back redacted, on pipes and on a pty."""
    for pty in (False, True):
        async with await redacting(local).start(Command.shell("cat"), pty=pty) as session:
            await session.send_stdin(Text(f"token {SECRET}\n"))
            await session.close_stdin()
            seen = b"".join([item.chunk.data async for item in session])
            await session.finalize()
        assert SECRET.encode() not in seen
        assert b"token [REDACTED]" in seen


async def test_secrets_redact_a_failed_session(local: LocalExecutor) -> None:
    """NonZeroExit and TimedOut raised by a session carry redacted output."""
    guarded = redacting(local)
    async with await guarded.start(Command.shell(f"echo {SECRET}; exit 3")) as session:
        with pytest.raises(NonZeroExit) as failed:
            await session.finalize()
    assert failed.value.output.stdout == b"[REDACTED]\n"
    command = Command.shell(f"echo {SECRET}; sleep 30").with_timeout(0.3)
    async with await guarded.start(command) as session:
        first = await session.next_chunk()
        with pytest.raises(TimedOut) as timed_out:
            await session.finalize()
    assert first is not None
    assert first.chunk == Stdout(b"[REDACTED]\n")
    assert timed_out.value.output.stdout == b"[REDACTED]\n"


async def test_secrets_keep_session_chunks_numbered(local: LocalExecutor) -> None:
    """Redacted chunks are numbered from 1 without gaps, as the reader gets them."""
    script = "for i in 1 2 3; do echo line$i; sleep 0.05; done"
    async with await redacting(local).start(Command.shell(script)) as session:
        sequences = [item.sequence async for item in session]
    assert sequences == list(range(1, len(sequences) + 1))
    assert sequences


async def test_audit_records_a_session_end(local: LocalExecutor) -> None:
    """A session gets START when started and END with its outcome when it ends."""
    records: list[AuditRecord] = []
    audited = Audit(local, records.append)
    async with await audited.start(Command.shell("cat")) as session:
        assert [r.event for r in records] == [AuditEvent.START]
        await session.send_stdin(Text("hi\n"))
        assert (await session.finalize()).stdout == b"hi\n"
    async with await audited.start(Command.shell("exit 3")) as session:
        with pytest.raises(NonZeroExit):
            await session.finalize()
    assert [(r.event, r.outcome, r.exit_code) for r in records] == [
        (AuditEvent.START, None, None),
        (AuditEvent.END, "ok", 0),
        (AuditEvent.START, None, None),
        (AuditEvent.END, "nonzero", 3),
    ]
    assert all(r.description in ("cat", "exit 3") for r in records)


async def test_audit_records_a_cancelled_and_an_abandoned_session(
    local: LocalExecutor, tmp_path: Path
) -> None:
    """cancel(), or leaving the block while the command runs, ends as "cancelled"; it dies."""
    records: list[AuditRecord] = []
    audited = Audit(local, records.append)
    async with await audited.start(Command.shell("echo $$ > a.pid; sleep 60")) as session:
        await anyio.sleep(0.2)
        session.cancel()
        with pytest.raises(NonZeroExit):
            await session.finalize()
    async with await audited.start(Command.shell("echo $$ > b.pid; sleep 60")):
        await anyio.sleep(0.2)
    ends = [r for r in records if r.event is AuditEvent.END]
    assert [r.outcome for r in ends] == ["cancelled", "cancelled"]
    for name in ("a.pid", "b.pid"):
        assert not alive(int((tmp_path / name).read_text()))


async def test_audit_records_a_refused_session(local: LocalExecutor) -> None:
    """A session a policy below refuses is recorded as DENIED, and nothing runs."""
    records: list[AuditRecord] = []
    audited = Audit(DangerousCommands(local), records.append)
    with pytest.raises(PolicyDenied):
        await audited.start(Command.shell("rm -rf /"))
    assert [(r.event, r.outcome) for r in records] == [
        (AuditEvent.START, None),
        (AuditEvent.DENIED, "denied"),
    ]


async def test_observed_session_cancelled_with_partial_output(local: LocalExecutor) -> None:
    """A cancelled session reports CommandCancelled with the output seen so far."""
    events: list[CommandEvent] = []
    observed = Observed(local, events.append, tracing=False)
    async with await observed.start(Command.shell("echo partial; sleep 60")) as session:
        first = await session.next_chunk()
        assert first is not None
        session.cancel()
        with pytest.raises(NonZeroExit):
            await session.finalize()
    cancelled = events[-1]
    assert isinstance(cancelled, CommandCancelled)
    assert cancelled.partial_output.stdout == b"partial\n"
    assert cancelled.pending == "echo partial; sleep 60"
    assert not any(isinstance(event, CommandFinished) for event in events)


async def test_observer_failure_stops_the_session(local: LocalExecutor, tmp_path: Path) -> None:
    """An observer that raises on a chunk kills the command; finalize raises its error."""

    def observer(event: CommandEvent) -> None:
        if type(event).__name__ == "CommandChunk":
            raise RuntimeError("observer broke")

    observed = Observed(local, observer, tracing=False)
    command = Command.shell("echo $$ > pid; echo hi; sleep 60")
    async with await observed.start(command) as session:
        assert await session.next_chunk() is None
        with pytest.raises(RuntimeError, match="observer broke"):
            await session.finalize()
        pid = int((tmp_path / "pid").read_text())
    assert not alive(pid)


async def test_policies_stack_over_a_session(local: LocalExecutor) -> None:
    """Audit over Observed over Secrets: one session, redacted, observed and audited."""
    records: list[AuditRecord] = []
    events: list[CommandEvent] = []
    stacked = Audit(Observed(redacting(local), events.append, tracing=False), records.append)
    async with await stacked.start(Command.shell(f"echo {SECRET}")) as session:
        chunks = [item.chunk async for item in session]
        output = await session.finalize()
    assert chunks == [Stdout(b"[REDACTED]\n")]
    assert output.stdout == b"[REDACTED]\n"
    assert [r.outcome for r in records if r.event is AuditEvent.END] == ["ok"]
    assert isinstance(events[-1], CommandFinished)
    # The command itself names the secret; what it printed never does.
    assert all(SECRET not in repr(event) for event in events[1:])
