"""Crash recovery with real processes: a run is SIGKILLed, and a fresh process recovers it.

The command appends a line to a marker file itself, so the marker counts how
often it really ran. After every kill the journal must pass SQLite's
`integrity_check`, and no recovery may run a command a second time.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import random
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from conftest import tagged_processes

from executor import (
    Command,
    IdempotencyKey,
    Idempotent,
    LocalExecutor,
    RunInterrupted,
    SqliteJournal,
)
from executor._core.proc import proc_stat

CHILD = Path(__file__).resolve().parent / "journal_child.py"
# Every wait on a child is bounded: a hung child fails the test instead of the run.
LIMIT = 30.0
RANDOM_RUNS = 50

pytestmark = pytest.mark.slow


class Child:
    """A child process whose stdout is read as JSON event lines."""

    def __init__(self, *args: str) -> None:
        env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
        self.process = subprocess.Popen(
            [sys.executable, str(CHILD), *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
        )
        assert self.process.stdout is not None
        self._fd = self.process.stdout.fileno()
        os.set_blocking(self._fd, False)
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._fd, selectors.EVENT_READ)
        self._buffer = b""
        self.events: list[dict[str, Any]] = []

    @property
    def pid(self) -> int:
        """The child's pid."""
        return self.process.pid

    def send(self, line: str) -> None:
        """Write a line to the child's stdin."""
        assert self.process.stdin is not None
        self.process.stdin.write(line.encode() + b"\n")
        self.process.stdin.flush()

    def next_event(self, timeout: float = LIMIT) -> dict[str, Any] | None:
        """The next event line, or `None` at end of output."""
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no event from child {self.pid} in {timeout} s")
            if not self._selector.select(left):
                continue
            data = os.read(self._fd, 65536)
            if not data:
                return None
            self._buffer += data
        line, _, self._buffer = self._buffer.partition(b"\n")
        event: dict[str, Any] = json.loads(line)
        self.events.append(event)
        return event

    def wait_for(self, name: str, timeout: float = LIMIT) -> dict[str, Any]:
        """Read events until one named `name`.

        Raises:
            AssertionError: Output ended first.
        """
        while True:
            event = self.next_event(timeout)
            assert event is not None, f"child ended before {name!r}: {self.events}"
            if event["event"] == name:
                return event

    def close(self) -> None:
        """Kill the child if it still runs, and reap it."""
        if self.process.poll() is None:
            os.kill(self.pid, signal.SIGKILL)
        self.process.wait(LIMIT)
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                stream.close()
        self._selector.close()


@pytest.fixture
def children() -> Iterator[list[Child]]:
    """Children a test starts; each is killed and reaped afterwards."""
    started: list[Child] = []
    yield started
    for child in started:
        child.close()
        end_orphans(child.pid)


def end_orphans(pid: int, *, patience: float = 0.0) -> None:
    """Let the commands a killed process left behind finish for `patience` s, then kill them."""
    deadline = time.monotonic() + patience
    while tagged_processes(pid) and time.monotonic() < deadline:
        time.sleep(0.01)
    for left in tagged_processes(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(left, signal.SIGKILL)
    deadline = time.monotonic() + LIMIT
    while tagged_processes(pid):
        assert time.monotonic() < deadline, f"processes of {pid} would not die"
        time.sleep(0.01)


def marks(marker: Path) -> int:
    """How many times the command ran: lines in its marker file."""
    return len(marker.read_text().splitlines()) if marker.exists() else 0


def integrity(path: Path) -> list[str]:
    """SQLite's integrity check of the journal file, from a fresh connection."""
    journal = SqliteJournal(path, create=False)
    try:
        return anyio.run(journal.integrity_check)
    finally:
        journal.close()


def spec(journal: Path, key: IdempotencyKey, workdir: Path, script: str, **extra: Any) -> str:
    """The JSON spec of one run, for the child."""
    return json.dumps(
        {"journal": str(journal), "key": str(key), "workdir": str(workdir), "script": script}
        | extra
    )


def test_killed_before_the_command_finishes(tmp_path: Path, children: list[Child]) -> None:
    """Killed mid-command, the key is reported interrupted; `rerun` runs it again, once."""
    journal = tmp_path / "journal.sqlite3"
    marker = tmp_path / "marker"
    key = IdempotencyKey.new()
    script = "echo x >> marker; sleep 5; echo done"
    first = Child("run", spec(journal, key, tmp_path, script))
    children.append(first)
    first.wait_for("claimed")
    deadline = time.monotonic() + LIMIT
    while marks(marker) == 0:
        assert time.monotonic() < deadline
        time.sleep(0.005)
    os.kill(first.pid, signal.SIGKILL)
    first.process.wait(LIMIT)
    end_orphans(first.pid)
    assert marks(marker) == 1
    assert integrity(journal) == ["ok"]

    failing = Child("run", spec(journal, key, tmp_path, script, on_interrupted="fail"))
    children.append(failing)
    result = failing.wait_for("result")
    assert result["error"] == "RunInterrupted"
    assert str(key) in result["message"]
    assert "started at" in result["message"]
    assert marks(marker) == 1

    rerun = Child(
        "run", spec(journal, key, tmp_path, script, on_interrupted="rerun", backend="trio")
    )
    children.append(rerun)
    # It runs again: let it start, then end its sleep early by killing only the sleep.
    rerun.wait_for("claimed")
    deadline = time.monotonic() + LIMIT
    while marks(marker) < 2:
        assert time.monotonic() < deadline
        time.sleep(0.005)
    for pid in tagged_processes(rerun.pid):
        # A process of the tree (the supervisor's shim, a shell) may end meanwhile.
        with (
            contextlib.suppress(FileNotFoundError, ProcessLookupError),
            open(f"/proc/{pid}/cmdline", "rb") as f,
        ):
            if f.read().split(b"\0")[0] == b"sleep":
                os.kill(pid, signal.SIGKILL)
    result = rerun.wait_for("result")
    assert result["error"] is None
    assert result["replayed"] is False
    assert result["stdout"] == "done\n"
    assert marks(marker) == 2

    again = Child("run", spec(journal, key, tmp_path, script))
    children.append(again)
    result = again.wait_for("result")
    assert result["replayed"] is True
    assert result["stdout"] == "done\n"
    assert marks(marker) == 2
    assert integrity(journal) == ["ok"]


def test_killed_after_the_claim_before_the_command_starts(
    tmp_path: Path, children: list[Child]
) -> None:
    """Killed between its claim and the command's start: interrupted, though nothing ran.

    The journal cannot tell this gap from a crash mid-command, so it never
    takes it for "not run": `fail` raises, `rerun` runs it (once).
    """
    journal = tmp_path / "journal.sqlite3"
    marker = tmp_path / "marker"
    key = IdempotencyKey.new()
    script = "echo x >> marker; echo done"
    first = Child("run", spec(journal, key, tmp_path, script, stop_after_claim=True))
    children.append(first)
    assert first.wait_for("claimed")["status"] == "run"
    deadline = time.monotonic() + LIMIT
    while (stat := proc_stat(first.pid)) is None or stat.state != "T":  # stopped
        assert time.monotonic() < deadline, "the child did not stop after its claim"
        time.sleep(0.005)
    os.kill(first.pid, signal.SIGKILL)
    first.process.wait(LIMIT)
    assert marks(marker) == 0
    assert integrity(journal) == ["ok"]

    failing = Child("run", spec(journal, key, tmp_path, script, backend="trio"))
    children.append(failing)
    assert failing.wait_for("result")["error"] == "RunInterrupted"
    rerun = Child("run", spec(journal, key, tmp_path, script, on_interrupted="rerun"))
    children.append(rerun)
    result = rerun.wait_for("result")
    assert (result["error"], result["replayed"], result["stdout"]) == (None, False, "done\n")
    assert marks(marker) == 1


def test_killed_right_after_the_final_is_recorded(tmp_path: Path, children: list[Child]) -> None:
    """Killed just after its final is on disk, a fresh process gets the stored final; ran once."""
    journal = tmp_path / "journal.sqlite3"
    marker = tmp_path / "marker"
    key = IdempotencyKey.new()
    script = "echo x >> marker; echo pushed; echo warning >&2"
    first = Child("run", spec(journal, key, tmp_path, script, linger=60))
    children.append(first)
    first.wait_for("completed")
    os.kill(first.pid, signal.SIGKILL)
    first.process.wait(LIMIT)
    assert marks(marker) == 1
    assert integrity(journal) == ["ok"]

    for backend in ("asyncio", "trio"):
        fresh = Child("run", spec(journal, key, tmp_path, script, backend=backend))
        children.append(fresh)
        result = fresh.wait_for("result")
        assert result["error"] is None
        assert result["replayed"] is True
        assert result["stdout"] == "pushed\n"
        assert result["exit_code"] == 0
    assert marks(marker) == 1
    assert integrity(journal) == ["ok"]


def test_an_idempotent_tool_killed_after_its_final_is_not_run_again(
    tmp_path: Path, children: list[Child]
) -> None:
    """A streaming tool's process killed after its final is recorded: a fresh one gets the final."""
    journal = tmp_path / "journal.sqlite3"
    marker = tmp_path / "marker"
    key = IdempotencyKey.new()
    first = Child("run", spec(journal, key, tmp_path, "", tool=True, linger=60))
    children.append(first)
    first.wait_for("completed")
    os.kill(first.pid, signal.SIGKILL)
    first.process.wait(LIMIT)
    assert marks(marker) == 1
    fresh = Child("run", spec(journal, key, tmp_path, "", tool=True, backend="trio"))
    children.append(fresh)
    result = fresh.wait_for("result")
    assert result["error"] is None
    assert result["replayed"] is True
    assert result["chunks"] == []
    assert result["final"] == {"steps": 2, "pid": first.pid}
    assert marks(marker) == 1
    assert integrity(journal) == ["ok"]


def test_two_processes_racing_on_one_key_run_it_once(tmp_path: Path, children: list[Child]) -> None:
    """Two processes started together on one key: one runs the command, the other gets its final."""
    journal = tmp_path / "journal.sqlite3"
    for round_, backend in enumerate(("asyncio", "trio", "asyncio")):
        workdir = tmp_path / f"round{round_}"
        workdir.mkdir()
        key = IdempotencyKey.new()
        script = "echo x >> marker; sleep 0.3; echo $$"
        racers = [
            Child("run", spec(journal, key, workdir, script, wait_go=True, backend=backend))
            for _ in range(2)
        ]
        children.extend(racers)
        for racer in racers:
            racer.wait_for("ready")
        for racer in racers:
            racer.send("go")
        results = [racer.wait_for("result") for racer in racers]
        assert [r["error"] for r in results] == [None, None]
        assert sorted(r["replayed"] for r in results) == [False, True]
        assert results[0]["stdout"] == results[1]["stdout"]
        assert marks(workdir / "marker") == 1
    assert integrity(journal) == ["ok"]


async def recover(journal: Path, key: IdempotencyKey, workdir: Path, script: str) -> str:
    """Start the key again in this process; say how it was answered."""
    async with LocalExecutor(workdir) as local, SqliteJournal(journal) as opened:
        keyed = Idempotent(local, opened).keyed(key)
        try:
            await keyed.exec_cmd(Command.shell(script))
        except RunInterrupted:
            return "interrupted"
        return "replayed" if keyed.replayed else "ran"


def test_random_kill_points_never_run_a_command_twice(
    tmp_path: Path, children: list[Child]
) -> None:
    """SIGKILL at random instants of 50 runs: no command runs twice, the journal stays sound."""
    journal = tmp_path / "journal.sqlite3"
    # Made first, so that every check after a kill has a file to check.
    made = SqliteJournal(journal)
    assert anyio.run(made.integrity_check) == ["ok"]
    made.close()
    zygote = Child("zygote")
    children.append(zygote)
    zygote.wait_for("ready")
    rng = random.Random()
    seed = rng.randrange(1 << 32)
    rng.seed(seed)
    script = "echo x >> marker; sleep 0.02; echo done"
    # One run left alone measures a child's life and when, in it, the claim and
    # the final are recorded (the forked child's events come through the zygote).
    calibration = tmp_path / "calibration"
    calibration.mkdir()
    zygote.send(spec(journal, IdempotencyKey.new(), calibration, script, linger=0.03))
    zygote.wait_for("forked")
    started = time.monotonic()
    at: dict[str, float] = {}
    while "exited" not in at:
        event = zygote.next_event()
        assert event is not None, f"the zygote ended: {zygote.events}"
        at.setdefault(event["event"], time.monotonic() - started)
    life, claimed, completed = at["exited"], at["claimed"], at["completed"]
    seen: collections.Counter[str] = collections.Counter()
    for run in range(RANDOM_RUNS):
        workdir = tmp_path / f"run{run}"
        workdir.mkdir()
        marker = workdir / "marker"
        key = IdempotencyKey.new()
        backend = ("asyncio", "trio")[run % 2]
        zygote.send(spec(journal, key, workdir, script, backend=backend, linger=0.03))
        pid = zygote.wait_for("forked")["child"]
        # A third of the kills fall anywhere in the child's life; the rest
        # once its claim is recorded, up to a little after its final: the span
        # in which a command runs with no outcome recorded.
        if run % 3 == 0:
            time.sleep(rng.uniform(0, life))
        else:
            zygote.wait_for("claimed")
            time.sleep(rng.uniform(0, completed - claimed + 0.01))
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        status = zygote.wait_for("exited")["status"]
        # A command the child had started finishes on its own, as it would after a real crash.
        end_orphans(pid, patience=2.0)
        assert integrity(journal) == ["ok"], f"run {run} (seed {seed})"
        before = marks(marker)
        assert before <= 1
        answer = anyio.run(recover, journal, key, workdir, script, backend=backend)
        seen[answer] += 1
        if answer == "interrupted" and before == 0:
            # Killed after the claim, before the command wrote its mark.
            seen["of which not started"] += 1
        after = marks(marker)
        context = f"run {run} (seed {seed}): {answer}, marks {before} -> {after}, {status=}"
        if answer == "replayed":
            assert before == after == 1, context
        elif answer == "ran":
            assert (before, after) == (0, 1), context
        else:
            assert after == before, context
        # Asked once more, the key answers the same way and runs nothing.
        again = anyio.run(recover, journal, key, workdir, script, backend=backend)
        assert again == ("replayed" if answer != "interrupted" else "interrupted"), context
        assert marks(marker) == after, context
    assert integrity(journal) == ["ok"]
    # Kills fell at different stages: more than one kind of answer came back,
    # and some fell while a claimed run had no outcome (a kill in the first
    # 20 ms after the claim always does: the command sleeps that long).
    assert len(seen.keys() & {"ran", "replayed", "interrupted"}) >= 2, f"{seen} (seed {seed})"
    assert seen["interrupted"] >= 1, f"{seen} (seed {seed})"
    print(
        f"random kill points (seed {seed}, life {life:.3f} s, claimed at {claimed:.3f} s, "
        f"final at {completed:.3f} s): {dict(seen)}"
    )
