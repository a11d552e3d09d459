"""`Idempotent` commands and idempotent streaming tools: run once, repeats answered."""

from __future__ import annotations

import enum
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import attrs
import pydantic
import pytest

from executor import (
    Command,
    CommandOutput,
    ExecutorError,
    IdempotencyKey,
    Idempotent,
    InvalidArgument,
    JournalError,
    KeyedExecutor,
    LocalExecutor,
    NonZeroExit,
    Outcome,
    PolicyDenied,
    ReadOnly,
    RunInterrupted,
    Sink,
    SqliteJournal,
    StreamingTool,
    StreamingToolHandle,
    StreamingToolSession,
    TaskHandle,
    TimedOut,
    ToolChannel,
    ToolExecutor,
    ToolStreamError,
    Window,
    WrappedExecutor,
)
from executor.testing import ExecutorContract

pytestmark = pytest.mark.anyio


@pytest.fixture
async def journal(tmp_path: Path) -> AsyncIterator[SqliteJournal]:
    """A journal in the test's folder."""
    async with SqliteJournal(tmp_path / "journal.sqlite3") as opened:
        yield opened


@pytest.fixture
def idem(ex: LocalExecutor, journal: SqliteJournal) -> Idempotent:
    """An Idempotent executor over the test's LocalExecutor."""
    return Idempotent(ex, journal)


def marks(ex: LocalExecutor) -> int:
    """How many times a command that appends to `marker` ran."""
    marker = Path(ex.workdir) / "marker"
    return len(marker.read_text().splitlines()) if marker.exists() else 0


PUSH = Command.shell("echo x >> marker; echo pushed; printf 'warn\\n' >&2; printf '\\377'")


# --- commands -------------------------------------------------------------------------


async def test_a_command_runs_once_and_repeats_are_answered(
    idem: Idempotent, ex: LocalExecutor
) -> None:
    """The second run under a key returns an equal output without running the command."""
    key = IdempotencyKey.new()
    first = idem.keyed(key)
    output = await first.exec_cmd(PUSH)
    assert first.replayed is False
    assert output.stdout == b"pushed\n\xff"
    # A fresh view, as after a restart, with the key as text.
    again = idem.keyed(str(key))
    assert again.replayed is None
    repeat = await again.exec_cmd(PUSH)
    assert again.replayed is True
    assert repeat == output
    assert repeat.chunks == output.chunks
    assert marks(ex) == 1


async def test_a_repeat_streams_the_recorded_chunks(idem: Idempotent, ex: LocalExecutor) -> None:
    """A sink given to a repeat sees the recorded chunks, in order."""
    key = IdempotencyKey.new()
    seen: list[Any] = []
    output = await idem.keyed(key).exec_cmd_streaming(PUSH, seen.append)
    replayed: list[Any] = []

    async def async_sink(chunk: Any) -> None:
        replayed.append(chunk)

    repeat = await idem.keyed(key).exec_cmd_streaming(PUSH, async_sink)
    assert repeat == output
    assert replayed == list(output.chunks)
    assert b"".join(c.data for c in seen) == b"".join(c.data for c in replayed)
    assert marks(ex) == 1


async def test_failures_are_answered_with_the_same_error(
    idem: Idempotent, ex: LocalExecutor
) -> None:
    """A NonZeroExit or TimedOut is recorded and raised again, output and all, without a rerun."""
    failing = Command.shell("echo x >> marker; echo boom >&2; exit 3")
    key = IdempotencyKey.new()
    with pytest.raises(NonZeroExit) as first:
        await idem.keyed(key).exec_cmd(failing)
    with pytest.raises(NonZeroExit) as second:
        await idem.keyed(key).exec_cmd(failing)
    assert second.value.output == first.value.output
    assert second.value.output.exit_code == 3
    assert second.value.message == first.value.message

    slow = Command.shell("echo x >> marker; echo started; sleep 5").with_timeout(0.3)
    key = IdempotencyKey.new()
    with pytest.raises(TimedOut) as timed:
        await idem.keyed(key).exec_cmd(slow)
    with pytest.raises(TimedOut) as again:
        await idem.keyed(key).exec_cmd(slow)
    assert again.value.timeout == timed.value.timeout == 0.3
    assert again.value.output == timed.value.output
    assert again.value.output.stdout == b"started\n"
    assert marks(ex) == 2


async def test_a_large_output_is_kept_whole(idem: Idempotent, journal: SqliteJournal) -> None:
    """Output larger than what the event loop handles inline is recorded and answered exactly."""
    big = Command.shell("head -c 700000 /dev/urandom; echo; head -c 300000 /dev/urandom >&2")
    key = IdempotencyKey.new()
    output = await idem.keyed(key).exec_cmd(big)
    assert len(output) == 1_000_001
    repeat = await idem.keyed(key).exec_cmd(big)
    assert repeat == output
    entry = await journal.get(key)
    assert entry is not None
    assert entry.outcome is not None
    assert entry.outcome.output == output


async def test_text_that_is_not_utf8_is_kept_exactly(
    idem: Idempotent, ex: LocalExecutor, journal: SqliteJournal
) -> None:
    """A command line with a byte that is not UTF-8 is journaled, and answered, as it was."""
    odd = Command.shell("echo x >> marker; : \udcff; printf '\\376'")
    key = IdempotencyKey.new()
    output = await idem.keyed(key).exec_cmd(odd)
    again = idem.keyed(key)
    assert await again.exec_cmd(odd) == output
    assert again.replayed
    assert output.stdout == b"\xfe"
    entry = await journal.get(key)
    assert entry is not None
    assert entry.name.endswith(": \udcff; printf '\\376'")
    error = NonZeroExit("failed on \udcfe", CommandOutput(exit_code=1))
    claim = await journal.claim(IdempotencyKey.new(), kind="command", name="x", fingerprint="f")
    await journal.complete(claim, Outcome.of_error(error))
    stored = await journal.get(claim.entry.key)
    assert stored is not None
    assert stored.outcome is not None
    assert stored.outcome.message == "failed on \udcfe"
    assert marks(ex) == 1


async def test_file_commands_are_journaled_too(idem: Idempotent, ex: LocalExecutor) -> None:
    """A write runs once; a failed read is answered with its recorded error."""
    key = IdempotencyKey.new()
    write = Command.write_file("notes.md", "first")
    await idem.keyed(key).exec_cmd(write)
    (Path(ex.workdir) / "notes.md").write_text("changed since")
    await idem.keyed(key).exec_cmd(write)
    assert (Path(ex.workdir) / "notes.md").read_text() == "changed since"
    missing = Command.read_file("missing.txt")
    key = IdempotencyKey.new()
    with pytest.raises(NonZeroExit) as first:
        await idem.keyed(key).exec_cmd(missing)
    (Path(ex.workdir) / "missing.txt").write_text("there now")
    with pytest.raises(NonZeroExit) as second:
        await idem.keyed(key).exec_cmd(missing)
    assert second.value.output == first.value.output
    assert first.value.output.exit_code is None


async def test_a_key_names_one_command(idem: Idempotent) -> None:
    """The same key with a different command (or the same script elsewhere) is refused."""
    key = IdempotencyKey.new()
    await idem.keyed(key).exec_cmd(Command.shell("echo one"))
    with pytest.raises(JournalError, match="was used for another run"):
        await idem.keyed(key).exec_cmd(Command.shell("echo two"))
    with pytest.raises(JournalError, match="was used for another run"):
        await idem.keyed(key).exec_cmd(Command.shell("echo one").with_current_dir("/"))


async def test_a_refused_command_leaves_no_trace(ex: LocalExecutor, journal: SqliteJournal) -> None:
    """PolicyDenied from a wrapper inside means nothing ran: the key stays free."""
    key = IdempotencyKey.new()
    refusing = Idempotent(ReadOnly(ex), journal)
    with pytest.raises(PolicyDenied):
        await refusing.keyed(key).exec_cmd(Command.shell("echo hi"))
    assert await journal.get(key) is None
    output = await Idempotent(ex, journal).keyed(key).exec_cmd(Command.shell("echo hi"))
    assert output.stdout == b"hi\n"


async def test_a_cancelled_run_is_interrupted(
    idem: Idempotent, ex: LocalExecutor, journal: SqliteJournal
) -> None:
    """A run cancelled mid-way is interrupted: 'fail' raises RunInterrupted, 'rerun' reruns it."""
    script = Command.shell("echo x >> marker; sleep 5")
    key = IdempotencyKey.new()
    with anyio.move_on_after(0.5):
        await idem.keyed(key).exec_cmd(script)
    assert marks(ex) == 1
    entry = await journal.get(key)
    assert entry is not None
    assert entry.state == "interrupted"
    with pytest.raises(RunInterrupted) as caught:
        await idem.keyed(key).exec_cmd(script)
    assert caught.value.key == key
    assert str(key) in str(caught.value)
    assert "on_interrupted='rerun'" in str(caught.value)
    assert marks(ex) == 1
    quick = Command.shell("echo x >> marker")
    other = IdempotencyKey.new()
    with anyio.move_on_after(0.5):
        await idem.keyed(other).exec_cmd(script)
    rerun = Idempotent(ex, journal, on_interrupted="rerun")
    with anyio.move_on_after(0.5):
        await rerun.keyed(key).exec_cmd(script)
    assert marks(ex) == 3
    with pytest.raises(JournalError):
        await rerun.keyed(other).exec_cmd(quick)
    entry = await journal.get(key)
    assert entry is not None
    assert entry.attempts == 2


async def test_a_failing_sink_leaves_the_run_interrupted(
    idem: Idempotent, journal: SqliteJournal
) -> None:
    """A sink that raises stops the command part-way, so the key is interrupted, not final."""

    def sink(chunk: Any) -> None:
        raise RuntimeError("sink broke")

    key = IdempotencyKey.new()
    with pytest.raises(RuntimeError, match="sink broke"):
        await idem.keyed(key).exec_cmd_streaming(Command.shell("echo a; sleep 5"), sink)
    entry = await journal.get(key)
    assert entry is not None
    assert entry.state == "interrupted"


async def test_tasks_racing_on_one_key_run_it_once(idem: Idempotent, ex: LocalExecutor) -> None:
    """Five tasks start one key at once: it runs once and all get the same output."""
    key = IdempotencyKey.new()
    command = Command.shell("echo x >> marker; sleep 0.2; echo $$")
    outputs: list[CommandOutput] = []
    views = [idem.keyed(key) for _ in range(5)]

    async def run(view: KeyedExecutor) -> None:
        outputs.append(await view.exec_cmd(command))

    async with anyio.create_task_group() as group:
        for view in views:
            group.start_soon(run, view)
    assert len({output.stdout for output in outputs}) == 1
    answers = [view.replayed for view in views]
    assert (answers.count(False), answers.count(True)) == (1, 4)
    assert marks(ex) == 1


async def test_without_a_key_commands_and_sessions_are_refused(
    idem: Idempotent, ex: LocalExecutor, tmp_path: Path
) -> None:
    """The bare wrapper refuses commands and sessions; listings pass; repr shows the chain."""
    with pytest.raises(ExecutorError, match=r"keyed\(key\)"):
        await idem.exec_cmd(Command.shell("true"))
    with pytest.raises(ExecutorError, match=r"keyed\(key\)"):
        await idem.exec_cmd_streaming(Command.shell("true"), print)
    with pytest.raises(ExecutorError, match="sessions"):
        await idem.start(Command.shell("true"))
    key = IdempotencyKey.new()
    with pytest.raises(ExecutorError, match="sessions"):
        await idem.keyed(key).start(Command.shell("true"))
    (tmp_path / "a.txt").write_text("hi")
    listed = [loaded.path async for loaded in idem.keyed(key).stream_files(".")]
    assert "a.txt" in listed
    assert repr(idem.keyed(key)) == (
        f"KeyedExecutor(Idempotent({ex!r}, {idem.journal!r}), '{key}')"
    )
    with pytest.raises(InvalidArgument):
        idem.keyed("not-a-key")
    with pytest.raises(ValueError, match="on_interrupted"):
        Idempotent(ex, idem.journal, on_interrupted="retry")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="Journal"):
        Idempotent(ex, object())  # type: ignore[arg-type]


async def test_closing_a_keyed_view_leaves_the_executor_open(idem: Idempotent) -> None:
    """`async with idem.keyed(key)` does not close the executor it came from."""
    async with idem.keyed(IdempotencyKey.new()) as keyed:
        await keyed.exec_cmd(Command.shell("true"))
    output = await idem.keyed(IdempotencyKey.new()).exec_cmd(Command.shell("echo still open"))
    assert output.stdout == b"still open\n"


class FreshKeys(WrappedExecutor):
    """Runs each command under a key of its own: the journaled path, for the contract."""

    def __init__(self, idempotent: Idempotent) -> None:
        super().__init__(idempotent)
        self.idempotent = idempotent

    async def exec_cmd(self, cmd: Command) -> CommandOutput:
        """Run `cmd` under a new key."""
        return await self.idempotent.keyed(IdempotencyKey.new()).exec_cmd(cmd)

    async def exec_cmd_streaming(self, cmd: Command, sink: Sink) -> CommandOutput:
        """Run `cmd` under a new key, streaming."""
        return await self.idempotent.keyed(IdempotencyKey.new()).exec_cmd_streaming(cmd, sink)


class TestContractThroughTheJournal(ExecutorContract):
    """Every command of the contract runs under a fresh key: journaling changes no behaviour."""

    @pytest.fixture
    async def executor(self, tmp_path: Path) -> AsyncIterator[ToolExecutor]:
        """A LocalExecutor behind Idempotent, each command under a new key."""
        workdir = tmp_path / "work"
        workdir.mkdir()
        async with (
            LocalExecutor(workdir, kill_grace=0.2) as local,
            SqliteJournal(tmp_path / "journal.sqlite3") as journal,
        ):
            yield FreshKeys(Idempotent(local, journal))


# --- streaming tools ------------------------------------------------------------------


class Level(enum.Enum):
    """A severity, to see enums survive the journal."""

    LOW = "low"
    HIGH = "high"


class Report(pydantic.BaseModel):
    """A pydantic final value."""

    lines: int
    level: Level
    names: list[str]


@attrs.frozen
class Tally:
    """An attrs final value."""

    count: int
    label: str


class Scan(StreamingTool[int, str, Report]):
    """Streams `input` lines and reports on them; counts its starts."""

    name = "scan"
    idempotent = True
    starts = 0

    async def start(self, input: int) -> StreamingToolHandle[str, Report]:
        """Start the scan."""
        type(self).starts += 1

        async def run(channel: ToolChannel[str]) -> Report:
            for index in range(input):
                await channel.send(f"line {index}")
            if input < 0:
                raise NonZeroExit("the scan failed")
            if input == 99:
                await anyio.sleep(30)
            return Report(lines=input, level=Level.HIGH, names=["a", "b"])

        return TaskHandle(run)


class Count(StreamingTool[str, str, Tally]):
    """An idempotent tool with an attrs final value."""

    name = "count"
    idempotent = True

    async def start(self, input: str) -> StreamingToolHandle[str, Tally]:
        """Start counting."""

        async def run(channel: ToolChannel[str]) -> Tally:
            await channel.send(input)
            return Tally(count=len(input), label=input)

        return TaskHandle(run)


@attrs.frozen
class Release:
    """A nested attrs final value: structured values inside containers and optionals."""

    level: Level
    tallies: tuple[Tally, ...]
    best: Tally | None
    by_name: dict[str, list[Tally]]


class Publish(StreamingTool[str, str, Release]):
    """An idempotent tool with a nested final value."""

    name = "publish"
    idempotent = True

    async def start(self, input: str) -> StreamingToolHandle[str, Release]:
        """Start publishing."""

        async def run(channel: ToolChannel[str]) -> Release:
            tally = Tally(count=len(input), label=input)
            return Release(
                level=Level.HIGH, tallies=(tally, tally), best=tally, by_name={input: [tally]}
            )

        return TaskHandle(run)


class Plain(StreamingTool[str, str, str]):
    """Not idempotent."""

    name = "plain"

    async def start(self, input: str) -> StreamingToolHandle[str, str]:
        """Start."""

        async def run(channel: ToolChannel[str]) -> str:
            return input

        return TaskHandle(run)


@pytest.fixture
def scan() -> Scan:
    """A Scan whose start count begins at zero."""
    Scan.starts = 0
    return Scan()


async def test_an_idempotent_tool_is_answered_from_its_final(
    scan: Scan, journal: SqliteJournal
) -> None:
    """A second session with the key returns the stored final without starting the tool."""
    async with StreamingToolSession(scan, 3, journal=journal) as session:
        assert session.key is not None
        chunks = [chunk async for chunk in session]
        result = await session.finalize()
        assert not session.recovered
    assert chunks == ["line 0", "line 1", "line 2"]
    assert result.final == Report(lines=3, level=Level.HIGH, names=["a", "b"])
    key = session.key
    entry = await journal.get(key)
    assert entry is not None
    assert (entry.kind, entry.name, entry.state) == ("tool", "scan", "final")

    async with StreamingToolSession(
        scan, 3, journal=journal, key=str(key), policy=Window(max_chunks=2)
    ) as again:
        assert await again.next_chunk() is None
        replayed = await again.finalize()
        assert again.recovered
    assert replayed.final == result.final
    assert replayed.chunks == ()
    assert Scan.starts == 1
    events = []
    async with StreamingToolSession(scan, 3, journal=journal, key=key) as third:
        events = [event async for event in third.events()]
    assert [event.kind.name for event in events] == ["COMPLETE"]
    assert Scan.starts == 1


async def test_an_attrs_final_survives_the_journal(journal: SqliteJournal) -> None:
    """An attrs final value comes back as the same value."""
    key = IdempotencyKey.new()
    for _ in range(2):
        async with StreamingToolSession(Count(), "hello", journal=journal, key=key) as session:
            result = await session.finalize()
        assert result.final == Tally(count=5, label="hello")


async def test_a_nested_final_comes_back_equal(journal: SqliteJournal) -> None:
    """Values of attrs classes inside tuples, optionals and dicts (enums too) are rebuilt."""
    key = IdempotencyKey.new()
    finals = []
    for _ in range(2):
        async with StreamingToolSession(Publish(), "v1", journal=journal, key=key) as session:
            finals.append((await session.finalize()).final)
    assert session.recovered
    assert finals[1] == finals[0]
    assert isinstance(finals[1].by_name["v1"][0], Tally)
    assert finals[1].level is Level.HIGH


async def test_a_tool_left_unfinished_is_interrupted(scan: Scan, journal: SqliteJournal) -> None:
    """A session left before its final is interrupted; 'rerun' starts the tool again."""
    key = IdempotencyKey.new()
    async with StreamingToolSession(scan, 99, journal=journal, key=key) as session:
        assert await session.next_chunk() == "line 0"
    with pytest.raises(RunInterrupted, match=str(key)):
        async with StreamingToolSession(scan, 99, journal=journal, key=key):
            pass
    assert Scan.starts == 1
    async with StreamingToolSession(
        scan, 99, journal=journal, key=key, on_interrupted="rerun"
    ) as session:
        assert await session.next_chunk() == "line 0"
        session.cancel()
    assert Scan.starts == 2
    entry = await journal.get(key)
    assert entry is not None
    assert entry.state == "interrupted"
    assert entry.attempts == 2


async def test_a_tool_error_is_recorded_and_raised_again(
    scan: Scan, journal: SqliteJournal
) -> None:
    """A tool that fails with an executor error fails the same way on a repeat, without running."""
    key = IdempotencyKey.new()
    async with StreamingToolSession(scan, -1, journal=journal, key=key) as session:
        with pytest.raises(NonZeroExit, match="the scan failed"):
            await session.finalize()
    async with StreamingToolSession(scan, -1, journal=journal, key=key) as session:
        with pytest.raises(NonZeroExit, match="the scan failed"):
            await session.finalize()
    assert Scan.starts == 1
    with pytest.raises(JournalError, match="another run"):
        async with StreamingToolSession(scan, 2, journal=journal, key=key):
            pass


async def test_a_replayed_tool_takes_no_stdin(scan: Scan, journal: SqliteJournal) -> None:
    """Sending stdin to a tool answered from the journal says it is not running."""
    from executor import Text

    key = IdempotencyKey.new()
    async with StreamingToolSession(scan, 1, journal=journal, key=key) as session:
        await session.finalize()
    async with StreamingToolSession(scan, 1, journal=journal, key=key) as session:
        with pytest.raises(ToolStreamError, match="answered from the journal"):
            await session.send_stdin(Text("hi"))


async def test_only_idempotent_tools_take_a_journal(journal: SqliteJournal) -> None:
    """A journal for a tool that is not idempotent is refused when the session is made."""
    with pytest.raises(ValueError, match="not idempotent"):
        StreamingToolSession(Plain(), "x", journal=journal)
    with pytest.raises(ValueError, match="on_interrupted"):
        StreamingToolSession(Count(), "x", journal=journal, on_interrupted="maybe")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument):
        StreamingToolSession(Count(), "x", journal=journal, key="nope")
    # Without a journal, nothing is recorded and no key is made.
    async with StreamingToolSession(Count(), "x") as session:
        assert session.key is None
        await session.finalize()
        assert not session.recovered


class SlowStart(StreamingTool[str, str, str]):
    """An idempotent tool whose start() works before handing back its handle, or fails."""

    name = "slow-start"
    idempotent = True

    async def start(self, input: str) -> StreamingToolHandle[str, str]:
        """Fail at once for "fail"; otherwise take a while, as a spawn would."""
        if input == "fail":
            raise ValueError("no such target")
        await anyio.sleep(30)

        async def run(channel: ToolChannel[str]) -> str:
            return input

        return TaskHandle(run)


async def test_a_start_that_fails_is_forgotten_and_a_cancelled_one_interrupted(
    journal: SqliteJournal,
) -> None:
    """start() raising ran nothing, so the key stays free; cancelled mid-start, it may have run."""
    failed = IdempotencyKey.new()
    with pytest.raises(ToolStreamError, match="no such target"):
        async with StreamingToolSession(SlowStart(), "fail", journal=journal, key=failed):
            pass
    assert await journal.get(failed) is None

    cut = IdempotencyKey.new()
    with anyio.move_on_after(0.2):
        async with StreamingToolSession(SlowStart(), "deploy", journal=journal, key=cut):
            pass
    entry = await journal.get(cut)
    assert entry is not None
    assert entry.state == "interrupted"


FINGERPRINT = """
from executor._tools.replay import tool_fingerprint
tags = {"alpha", "beta", "gamma", "delta", "epsilon"}
print(list(tags), tool_fingerprint("t", {"tags": tags}))
"""


def test_a_set_in_a_tool_input_has_one_fingerprint_in_every_process() -> None:
    """Set order follows salted str hashes; the fingerprint must not, or recovery would fail."""
    runs = [
        subprocess.run(
            [sys.executable, "-c", FINGERPRINT],
            env={**os.environ, "PYTHONHASHSEED": str(seed)},
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout.rsplit(" ", 1)
        for seed in (1, 2)  # fixed seeds, known to order this set apart
    ]
    assert runs[0][0] != runs[1][0]  # the processes did order the set apart
    assert len({digest for _, digest in runs}) == 1
