"""A child process for the crash tests: runs one idempotent command through a journal.

`python tests/journal_child.py run SPEC` runs the command the JSON `SPEC`
describes and prints JSON lines as it goes: `ready` once imported (it waits
for a line on stdin first when `wait_go` is set), `claimed` when the journal
has recorded the start, `completed` when it has recorded the final, then
`result`. With `linger` it stays alive that many seconds after the result,
so a test can kill it right after the final is recorded.

`python tests/journal_child.py zygote` imports everything once, then for
each SPEC line on stdin forks a child that runs it (a real process, killed
by a real SIGKILL), reporting `forked` and, once it has reaped it,
`exited`. Forking saves the interpreter start-up of every one of the many
runs of the random-kill test.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import anyio

from executor import (
    Claim,
    Command,
    CommandError,
    IdempotencyKey,
    Idempotent,
    LocalExecutor,
    Outcome,
    SqliteJournal,
    StreamingTool,
    StreamingToolHandle,
    StreamingToolSession,
    TaskHandle,
    ToolChannel,
)


def say(event: str, **fields: Any) -> None:
    """One JSON line on stdout, written at once (the parent acts on it)."""
    line = json.dumps({"event": event, "pid": os.getpid(), **fields}) + "\n"
    os.write(1, line.encode())


class AnnouncingJournal(SqliteJournal):
    """A SqliteJournal that says when a claim and a final are on disk.

    With `stop_after_claim`, the process stops itself (SIGSTOP) once its claim
    is recorded, before the command starts, for the test to kill it there.
    """

    stop_after_claim = False

    async def claim(self, key: IdempotencyKey, **kwargs: Any) -> Claim:
        """Claim, then say so."""
        claim = await super().claim(key, **kwargs)
        say("claimed", status=claim.status)
        if self.stop_after_claim:
            os.kill(os.getpid(), signal.SIGSTOP)
        return claim

    async def complete(self, claim: Claim, outcome: Outcome) -> None:
        """Record the final, then say so."""
        await super().complete(claim, outcome)
        say("completed")


class Deploy(StreamingTool[str, str, dict[str, int]]):
    """An idempotent tool that appends to the marker file in `input` and streams two lines."""

    name = "deploy"
    idempotent = True

    async def start(self, input: str) -> StreamingToolHandle[str, dict[str, int]]:
        """Start deploying."""

        async def run(channel: ToolChannel[str]) -> dict[str, int]:
            async with await anyio.open_file(input, "a") as marker:
                await marker.write("x\n")
            await channel.send("step 1")
            await channel.send("step 2")
            return {"steps": 2, "pid": os.getpid()}

        return TaskHandle(run)


async def run_tool(spec: dict[str, Any]) -> dict[str, Any]:
    """Run the Deploy tool under the spec's key and describe how it was answered."""
    journal = AnnouncingJournal(spec["journal"])
    marker = str(Path(spec["workdir"]) / "marker")
    try:
        async with StreamingToolSession(
            Deploy(), marker, journal=journal, key=spec["key"]
        ) as session:
            chunks = [chunk async for chunk in session]
            result = await session.finalize()
            return {
                "error": None,
                "replayed": session.recovered,
                "chunks": chunks,
                "final": result.final,
            }
    finally:
        journal.close()


async def run(spec: dict[str, Any]) -> dict[str, Any]:
    """Run the spec's command under its key and describe how it was answered."""
    if spec.get("tool"):
        return await run_tool(spec)
    journal = AnnouncingJournal(spec["journal"])
    journal.stop_after_claim = bool(spec.get("stop_after_claim"))
    workdir = Path(spec["workdir"])
    try:
        async with LocalExecutor(workdir, kill_grace=0.2) as local:
            idem = Idempotent(local, journal, on_interrupted=spec.get("on_interrupted", "fail"))
            keyed = idem.keyed(spec["key"])
            try:
                output = await keyed.exec_cmd(Command.shell(spec["script"]))
            except CommandError as error:
                return {"error": type(error).__name__, "message": error.message}
            return {
                "error": None,
                "replayed": keyed.replayed,
                "stdout": output.stdout.decode(),
                "exit_code": output.exit_code,
                "duration": output.duration,
            }
    finally:
        journal.close()


def main_run(spec: dict[str, Any]) -> None:
    """Run one spec in this process."""
    say("ready")
    if spec.get("wait_go"):
        sys.stdin.readline()
    result = anyio.run(run, spec, backend=spec.get("backend", "asyncio"))
    say("result", **result)
    if spec.get("linger"):
        import time

        time.sleep(spec["linger"])


def zygote() -> None:
    """Fork a child per spec line on stdin, report its pid, reap it, report its status."""
    say("ready")
    for line in sys.stdin:
        spec = json.loads(line)
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                main_run(spec)
            except BaseException as error:
                say("crashed", error=repr(error))
                code = 1
            os._exit(code)
        say("forked", child=pid)
        _, status = os.waitpid(pid, 0)
        say("exited", child=pid, status=status)


if __name__ == "__main__":
    if sys.argv[1] == "zygote":
        zygote()
    else:
        main_run(json.loads(sys.argv[2]))
