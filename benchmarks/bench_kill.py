"""Figure 5: kill latency of a command that ignores SIGTERM, and what each side leaves running.

What is measured: how late a timed-out command returns, past its deadline,
when it will not die politely. The child is `sh -c "trap '' TERM; sleep 30 &
wait"`: the shell ignores SIGTERM, and so does its grandchild `sleep` (an
ignored signal stays ignored across fork and exec). The timeout is 0.5 s;
ours sends SIGTERM to the whole tree, waits `kill_grace` (0.5 s), then sends
SIGKILL, so it should return at most grace + 100 ms after the deadline
(deadline = the moment the call was made + the timeout).

Baselines, as a typical user writes them:
- `asyncio raw`: `asyncio.wait_for(proc.communicate(), 0.5)`, then
  `proc.kill()` and `await proc.wait()`;
- `anyio.run_process`: under `anyio.move_on_after(0.5)`; anyio kills the
  process when cancelled (asyncio backend).
Both only SIGKILL the shell and orphan the grandchild `sleep`. anyio then
returns at once; raw asyncio on Python 3.11 does not: `proc.wait()` only
returns once the pipes close too, which the orphan holds open.

Every side's processes carry a unique variable in their environment. A
watchdog thread counts the survivors by it shortly after the latest moment any
side should be back; a side still blocked 3 s (1 s with `--quick`) after the
call is marked `hung` and released by killing its orphan. After each run the
bench kills whatever carries the variable (only that, by pid), so it leaves
nothing behind.

Target: ours (asyncio) return - deadline <= kill_grace + 100 ms.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from typing import NamedTuple

import _harness as h
import anyio

from executor import Command, LocalExecutor, TimedOut
from executor._core.proc import proc_stat

COOKIE = "EXECUTOR_BENCH_KILL"
SCRIPT = "trap '' TERM; sleep 30 & wait"
SLACK = 0.1
BASELINE = "asyncio raw"
ANYIO = "anyio.run_process (asyncio)"
OURS = "ours (asyncio)"

# A side runs the script once with this environment, timeout and grace, and
# returns (time of the call, time it returned), on time.monotonic().
Side = Callable[[str, dict[str, str], float, float], tuple[float, float]]


class Run(NamedTuple):
    """One run: how late it returned, what it left running, whether it hung."""

    late: float
    survivors: int
    hung: bool


def _asyncio_raw(
    workdir: str, env: dict[str, str], timeout: float, _: float
) -> tuple[float, float]:
    async def main() -> tuple[float, float]:
        called = time.monotonic()
        process = await asyncio.create_subprocess_shell(
            SCRIPT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=workdir, env=env
        )
        try:
            await asyncio.wait_for(process.communicate(), timeout)
        except TimeoutError:
            process.kill()
            await process.wait()
        return called, time.monotonic()

    return asyncio.run(main())


def _anyio_run_process(
    workdir: str, env: dict[str, str], timeout: float, _: float
) -> tuple[float, float]:
    async def main() -> tuple[float, float]:
        called = time.monotonic()
        with anyio.move_on_after(timeout):
            await anyio.run_process(SCRIPT, cwd=workdir, env=env)
        return called, time.monotonic()

    return anyio.run(main, backend="asyncio")


def _ours(backend: str) -> Side:
    def run(workdir: str, env: dict[str, str], timeout: float, grace: float) -> tuple[float, float]:
        async def main() -> tuple[float, float]:
            command = Command.shell(SCRIPT).with_env(env).with_timeout(timeout)
            async with LocalExecutor(workdir, kill_grace=grace) as ex:
                called = time.monotonic()
                with contextlib.suppress(TimedOut):
                    await ex.exec_cmd(command)
                return called, time.monotonic()

        return anyio.run(main, backend=backend)

    return run


SIDES: dict[str, Side] = {
    "asyncio raw": _asyncio_raw,
    "anyio.run_process (asyncio)": _anyio_run_process,
    "ours (asyncio)": _ours("asyncio"),
    "ours (trio)": _ours("trio"),
}


def _tagged(value: str) -> list[int]:
    """Live (not zombie) processes whose environment holds COOKIE=value."""
    needle = f"{COOKIE}={value}".encode()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                environ = f.read().split(b"\0")
        except OSError:
            continue
        stat = proc_stat(int(name))
        if needle in environ and stat is not None and stat.state != "Z":
            found.append(int(name))
    return found


def _clean_up(value: str) -> None:
    """Kill, by pid, the survivors carrying our cookie, and reap any that are our children."""
    for _ in range(200):
        pids = _tagged(value)
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
        time.sleep(0.01)
    raise RuntimeError(f"could not clean up processes tagged {value}")


def run_once(side: str, workdir: str, timeout: float, grace: float, cap: float) -> Run:
    """One run of `side`, watched by a thread that counts survivors and ends a hang."""
    value = uuid.uuid4().hex
    env = {**os.environ, COOKIE: value}
    done = threading.Event()
    watched: dict[str, int | bool] = {"survivors": 0, "hung": False}
    started = time.monotonic()

    def watchdog() -> None:
        # Count what is left shortly after the latest moment any side should be back.
        done.wait(max(0.0, started + timeout + grace + 0.25 - time.monotonic()))
        time.sleep(0.05)  # let a dying process finish dying
        watched["survivors"] = len(_tagged(value))
        if not done.wait(max(0.0, started + cap - time.monotonic())):
            # Still blocked (on pipes an orphan holds): kill the orphan to release it.
            watched["hung"] = True
            _clean_up(value)

    thread = threading.Thread(target=watchdog)
    thread.start()
    try:
        called, returned = SIDES[side](workdir, env, timeout, grace)
    finally:
        done.set()
        thread.join()
        _clean_up(value)
    return Run(returned - (called + timeout), int(watched["survivors"]), bool(watched["hung"]))


def measure(reps: int, timeout: float, grace: float, cap: float) -> dict[str, list[Run]]:
    names = list(SIDES)
    runs: dict[str, list[Run]] = {name: [] for name in names}
    with tempfile.TemporaryDirectory(prefix="bench-kill-") as workdir:
        for rep in range(reps):
            for name in h.rotated(names, rep):
                runs[name].append(run_once(name, workdir, timeout, grace, cap))
    return runs


def report(runs: dict[str, list[Run]], timeout: float, grace: float, cap: float) -> bool:
    median = {name: statistics.median(r.late for r in rs) for name, rs in runs.items()}
    rows = []
    for name, rs in runs.items():
        hung = sum(r.hung for r in rs)
        rows.append(
            [
                name,
                len(rs),
                (">=" if hung else "") + h.fmt_ms(median[name], 1),
                h.fmt_ms(max(r.late for r in rs), 1),
                h.fmt_ms(median[name] - grace, 1) if name.startswith("ours") else "-",
                h.fmt_ratio(median[name], median[BASELINE]),
                h.fmt_ratio(median[name], median[ANYIO]),
                f"{sum(r.survivors > 0 for r in rs)}/{len(rs)}",
                f"{hung}/{len(rs)}",
            ]
        )
    print(
        f"Figure 5: return - deadline for `{SCRIPT}` (timeout {timeout:g} s, "
        f"kill_grace {grace:g} s; ms)"
    )
    h.print_table(
        ["side", "reps", "median", "max", "past grace", "/raw", "/anyio", "orphaned", "hung"],
        rows,
    )
    print(
        "orphaned: runs after which the grandchild `sleep` was still running; hung: runs that"
        f" had not returned {cap:g} s after the call, until the bench killed the orphan"
    )
    ours = runs[OURS]
    worst = max(r.late for r in ours)
    left = sum(r.survivors for r in ours)
    met = worst <= grace + SLACK and left == 0 and not any(r.hung for r in ours)
    print(
        f"target: ours (asyncio) return - deadline <= grace + {SLACK * 1000:.0f} ms "
        f"({(grace + SLACK) * 1000:.0f} ms), nothing left running: worst {worst * 1000:.1f} ms, "
        f"{left} left -> {h.verdict(met)}"
    )
    return met


def main(argv: list[str] | None = None) -> int:
    parser = h.command_line(__doc__, "one short run per side")
    parser.add_argument("--reps", type=int, help="runs per side (default 5)")
    args = parser.parse_args(argv)
    reps = args.reps or (1 if args.quick else 5)
    timeout, grace, cap = (0.2, 0.2, 1.0) if args.quick else (0.5, 0.5, 3.0)
    h.preload()
    report(measure(reps, timeout, grace, cap), timeout, grace, cap)
    return 0


if __name__ == "__main__":
    sys.exit(main())
