"""Figure: `true` in a persistent shell, against a fresh command and SWE-ReX's run_in_session.

What is measured: the wall time of one `true`, from the call to its output
back, run back to back, in rounds whose order rotates so the machine's noise
falls on every side alike:

- locally: `PersistentShell.run("true")` on a `LocalExecutor`; a fresh
  `LocalExecutor.exec_cmd(Command.shell("true"))` (a new `sh -c` each time);
  SWE-ReX's `LocalRuntime.run_in_session(BashAction("true"))` (pexpect on a
  bash, the baseline; fewer samples, each takes a tenth of a second);
- in Docker, through the in-container helper: the shell's `run` against a
  fresh `exec_cmd` (skipped without an engine);
- over SSH, on the tests' private sshd on 127.0.0.1: the shell's `run`
  against a fresh `exec_cmd` (skipped without sshd).

Targets: locally <= 1 ms per command, more than 100x faster than SWE-ReX
and faster than a fresh command; in Docker <= 3 ms; over SSH <= 1.5x a
fresh command.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import _harness as h
import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from executor import Command, DockerExecutor, LocalExecutor, ToolExecutor

LOCAL_TARGET = 0.001
SWEREX_TARGET = 100.0
DOCKER_TARGET = 0.003
SSH_TARGET = 1.5
TRUE = Command.shell("true")

Side = Callable[[int], Awaitable[list[float]]]


async def sample(sides: dict[str, Side], count: int, rounds: int) -> dict[str, h.Stats]:
    """Time `count` commands per side (after a warm-up), in rounds taking turns."""
    names = list(sides)
    samples: dict[str, list[float]] = {name: [] for name in names}
    for name in names:
        await sides[name](3)
    per_round = max(1, count // rounds)
    for index in range(rounds):
        for name in h.rotated(names, index):
            samples[name].extend(await sides[name](per_round))
    return {name: h.Stats(values) for name, values in samples.items()}


def swerex_side(runtime: Any, share: int) -> Side:
    from swerex.runtime.abstract import BashAction

    action = BashAction(command="true", check="raise")

    async def side(count: int) -> list[float]:
        return await h.timed(lambda: runtime.run_in_session(action), max(1, count // share))

    return side


async def local(count: int, rounds: int, workdir: str) -> dict[str, h.Stats]:
    try:
        from swerex.runtime.abstract import CloseBashSessionRequest, CreateBashSessionRequest
        from swerex.runtime.local import LocalRuntime
    except ImportError as error:
        raise SystemExit(
            f"the SWE-ReX baseline needs swe-rex: pip install 'tool-executor[test]' ({error})"
        ) from error

    runtime = LocalRuntime()
    await runtime.create_session(CreateBashSessionRequest(startup_timeout=10.0))
    try:
        async with LocalExecutor(workdir) as ex, ex.shell() as sh:
            return await sample(
                {
                    "local shell run": lambda n: h.timed(lambda: sh.run("true"), n),
                    "local fresh exec_cmd": lambda n: h.timed(lambda: ex.exec_cmd(TRUE), n),
                    # A tenth of a second each: a tenth of the samples.
                    "SWE-ReX run_in_session": swerex_side(runtime, 10),
                },
                count,
                rounds,
            )
    finally:
        await runtime.close_session(CloseBashSessionRequest())
        await runtime.close()


async def pair(ex: ToolExecutor, prefix: str, count: int, rounds: int) -> dict[str, h.Stats]:
    """The shell's run against a fresh exec_cmd on one executor."""
    async with ex, ex.shell() as sh:
        return await sample(
            {
                f"{prefix} shell run": lambda n: h.timed(lambda: sh.run("true"), n),
                f"{prefix} fresh exec_cmd": lambda n: h.timed(lambda: ex.exec_cmd(TRUE), n),
            },
            count,
            rounds,
        )


async def docker(count: int, rounds: int) -> dict[str, h.Stats] | None:
    from docker_engine import engine_problem

    problem = await anyio.to_thread.run_sync(engine_problem)
    if problem is not None:
        print(f"Docker skipped: {problem}")
        if os.environ.get("EXECUTOR_REQUIRE_DOCKER") == "1":
            raise SystemExit(1)
        return None
    image = os.environ.get("EXECUTOR_DOCKER_IMAGE", "executor-test/python")
    return await pair(DockerExecutor(image, workdir="/tmp"), "docker", count, rounds)


async def ssh(count: int, rounds: int) -> dict[str, h.Stats] | None:
    from ssh_server import start_server

    server = start_server()
    if server is None:
        print("SSH skipped: no /usr/sbin/sshd (install openssh-server)")
        if os.environ.get("EXECUTOR_REQUIRE_SSH") == "1":
            raise SystemExit(1)
        return None
    try:
        ex = server.executor()
        return await pair(ex, "ssh", count, rounds)
    finally:
        server.stop()


async def measure(count: int, rounds: int, workdir: str) -> None:
    stats = await local(count, rounds, workdir)
    shell = stats["local shell run"]
    fresh = stats["local fresh exec_cmd"]
    swerex = stats["SWE-ReX run_in_session"]
    rows = [h.sample_row(name, s, h.fmt_ratio(s.median, shell.median)) for name, s in stats.items()]
    docker_stats = await docker(count, rounds)
    ssh_stats = await ssh(count, rounds)
    for more, base in ((docker_stats, "docker"), (ssh_stats, "ssh")):
        if more is not None:
            ours = more[f"{base} shell run"]
            rows.extend(
                h.sample_row(name, s, h.fmt_ratio(s.median, ours.median))
                for name, s in more.items()
            )
    print("`true`, back to back (ms per command)")
    h.print_table(["side", "n", "median", "p99", "med/our shell"], rows)
    speedup = swerex.median / shell.median
    print(
        f"target: local shell <= {LOCAL_TARGET * 1000:g} ms: {shell.median * 1000:.3f} ms -> "
        f"{h.verdict(shell.median <= LOCAL_TARGET)}"
    )
    print(
        f"target: > {SWEREX_TARGET:g}x faster than SWE-ReX: {speedup:.0f}x -> "
        f"{h.verdict(speedup > SWEREX_TARGET)}"
    )
    print(
        f"target: faster than a fresh command: {h.fmt_ratio(shell.median, fresh.median)} -> "
        f"{h.verdict(shell.median < fresh.median)}"
    )
    if docker_stats is not None:
        median = docker_stats["docker shell run"].median
        print(
            f"target: docker shell <= {DOCKER_TARGET * 1000:g} ms: {median * 1000:.3f} ms -> "
            f"{h.verdict(median <= DOCKER_TARGET)}"
        )
    if ssh_stats is not None:
        ratio = ssh_stats["ssh shell run"].median / ssh_stats["ssh fresh exec_cmd"].median
        print(
            f"target: ssh shell <= {SSH_TARGET:g}x a fresh command: {ratio:.2f}x -> "
            f"{h.verdict(ratio <= SSH_TARGET)}"
        )


def main(argv: list[str] | None = None) -> int:
    scale = h.per_side(__doc__, argv, quick=10, full=1000)
    rounds = scale.pick(2, 10)
    h.preload()
    import tempfile

    with tempfile.TemporaryDirectory(prefix="bench-shell-") as workdir:
        anyio.run(measure, scale.count, rounds, workdir, backend="asyncio")
    return 0


if __name__ == "__main__":
    sys.exit(main())
