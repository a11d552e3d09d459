"""Figure: SshExecutor's per-command latency on one connection, against the ssh CLI and local.

What is measured: the wall time of one whole `true` command, start to exit
with its output read, run back to back on a private sshd on 127.0.0.1 (the
same one the tests start, see `tests/ssh_server.py`: its own port, keys and
config, a user whose login shell is `/bin/sh`). Sides, in rounds whose order
rotates so the machine's noise falls on every side alike:

- `ssh CLI, new connection`: `ssh host true`, a TCP connection, key exchange
  and login per command (fewer samples: each takes a fifth of a second);
- `ssh CLI, ControlMaster`: the same through one multiplexed master connection;
- `asyncssh run`: bare `conn.run("true")` on one connection, the floor;
- `ours exec`: `SshExecutor.exec_cmd(Command.exec(["true"]))`;
- `ours shell`: `SshExecutor.exec_cmd(Command.shell("true"))`, one `sh` more;
- `local`: `LocalExecutor.exec_cmd(Command.shell("true"))`.

Then 100 commands at once on one connection (the server allows 128
channels per connection here; OpenSSH's default is 10): ours against bare
asyncssh, wall time for the batch.

sshd runs each command through the user's login shell; with bash that
sources `~/.bashrc` (85 ms to 0.8 s for root on the machine this was written
on), which would swamp every figure here: the test user's shell is `/bin/sh`.

Target: ours exec median <= 0.5x the ControlMaster CLI's.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import _harness as h
import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from ssh_server import SshServer, start_server

from executor import Command, LocalExecutor, SshExecutor

TARGET = 0.5
CONCURRENT = 100


def cli_base(server: SshServer) -> list[str]:
    """The ssh command line to the test server, using nothing of the user's own config."""
    return [
        "ssh",
        "-F",
        "/dev/null",
        "-i",
        server.client_key,
        "-o",
        "IdentitiesOnly=yes",
        "-o",
        f"UserKnownHostsFile={server.known_hosts}",
        "-o",
        "StrictHostKeyChecking=yes",
        "-o",
        "BatchMode=yes",
        "-p",
        str(server.port),
        f"{server.user}@{server.host}",
    ]


def cli_times(argv: list[str], count: int) -> list[float]:
    times = []
    for _ in range(count):
        started = time.perf_counter()
        subprocess.run(argv, check=True, stdin=subprocess.DEVNULL)
        times.append(time.perf_counter() - started)
    return times


def start_master(server: SshServer, control: Path) -> list[str]:
    """Start a ControlMaster connection; return the ssh command line that uses it."""
    base = cli_base(server)
    master = [*base[:1], "-o", f"ControlPath={control}", *base[1:]]
    subprocess.run(
        [*master[:1], "-M", "-N", "-f", "-o", "ControlPersist=yes", *master[1:]],
        check=True,
        stdin=subprocess.DEVNULL,
    )
    return master


async def measure(
    server: SshServer, master: list[str], count: int, rounds: int, new_connections: int
) -> None:
    import asyncssh

    base = cli_base(server)
    workdir = server.workdir()
    ours = server.executor(workdir=workdir, max_sessions=128)
    connection = await asyncssh.connect(
        server.host,
        port=server.port,
        username=server.user,
        client_keys=[server.client_key],
        known_hosts=server.known_hosts,
    )
    samples: dict[str, list[float]] = {}
    try:
        async with ours, LocalExecutor(workdir) as local:
            exec_true, shell_true = Command.exec(["true"]), Command.shell("true")
            sides: dict[str, Callable[[int], Awaitable[list[float]]]] = {
                "ssh CLI, new connection": lambda n: anyio.to_thread.run_sync(
                    cli_times, [*base, "true"], max(1, n * new_connections // count)
                ),
                "ssh CLI, ControlMaster": lambda n: anyio.to_thread.run_sync(
                    cli_times, [*master, "true"], n
                ),
                "asyncssh run": lambda n: h.timed(lambda: connection.run("true", check=True), n),
                "ours exec": lambda n: h.timed(lambda: ours.exec_cmd(exec_true), n),
                "ours shell": lambda n: h.timed(lambda: ours.exec_cmd(shell_true), n),
                "local": lambda n: h.timed(lambda: local.exec_cmd(shell_true), n),
            }
            names = list(sides)
            for name in names:
                await sides[name](2)  # warm up: connections, caches
                samples[name] = []
            per_round = max(1, count // rounds)
            for index in range(rounds):
                for name in h.rotated(names, index):
                    samples[name].extend(await sides[name](per_round))
            report(samples)
            await concurrent(ours, connection)
    finally:
        connection.close()
        await connection.wait_closed()


def report(samples: dict[str, list[float]]) -> None:
    stats = {name: h.Stats(values) for name, values in samples.items()}
    control = stats["ssh CLI, ControlMaster"]
    floor = stats["asyncssh run"]
    rows = [
        h.sample_row(
            name, s, h.fmt_ratio(s.median, control.median), h.fmt_ratio(s.median, floor.median)
        )
        for name, s in stats.items()
    ]
    print("Sequential `true` over SSH on 127.0.0.1 (ms per command)")
    h.print_table(["side", "n", "median", "p99", "med/ControlMaster", "med/asyncssh"], rows)
    ratio = stats["ours exec"].median / control.median
    print(
        f"target: ours exec median <= {TARGET}x the ControlMaster CLI: "
        f"{ratio:.2f}x -> {h.verdict(ratio <= TARGET)}"
    )


async def concurrent(ours: SshExecutor, connection: object) -> None:
    import asyncssh

    assert isinstance(connection, asyncssh.SSHClientConnection)
    command = Command.exec(["true"])

    async def batch_ours() -> None:
        async with anyio.create_task_group() as tasks:
            for _ in range(CONCURRENT):
                tasks.start_soon(ours.exec_cmd, command)

    async def batch_asyncssh() -> None:
        await asyncio.gather(*(connection.run("true", check=True) for _ in range(CONCURRENT)))

    rows = []
    figures = {}
    for name, batch in (("asyncssh run", batch_asyncssh), ("ours exec", batch_ours)):
        await batch()  # warm up
        times = await h.timed(batch, 3)
        figures[name] = min(times)
        rows.append([name, h.fmt_ms(min(times), 1), h.fmt_ms(min(times) / CONCURRENT)])
    print(f"\n{CONCURRENT} concurrent `true` on one connection (best of 3)")
    h.print_table(["side", "batch ms", "ms per command"], rows)
    print("ours / asyncssh: " + h.fmt_ratio(figures["ours exec"], figures["asyncssh run"]))


def main(argv: list[str] | None = None) -> int:
    scale = h.per_side(__doc__, argv, quick=12, full=200)
    count = scale.count
    rounds = scale.pick(3, 10)
    # A new connection costs a fifth of a second: 20 of them tell its figure.
    new_connections = scale.pick(3, 20)
    server = start_server(max_sessions=128)
    if server is None:
        print("skipped: no /usr/sbin/sshd (install openssh-server)")
        return 0 if os.environ.get("EXECUTOR_REQUIRE_SSH") != "1" else 1
    master: list[str] | None = None
    control = Path(tempfile.mkdtemp(prefix="bench-ssh-"))
    try:
        h.preload()
        master = start_master(server, control / "control")
        anyio.run(measure, server, master, count, rounds, new_connections, backend="asyncio")
    finally:
        if master is not None:
            subprocess.run([*master, "-O", "exit"], check=False, capture_output=True)
        shutil.rmtree(control, ignore_errors=True)
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
