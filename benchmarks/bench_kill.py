"""Figure 5: how late a timed-out command that ignores SIGTERM returns, quiet host and busy.

What is measured: return - (call + timeout) for `sh -c "trap '' TERM; sleep 30
& wait"` (the shell and its `sleep` ignore SIGTERM), timeout 0.2 s, once with
no other process of ours on the host and once with `--idle` (2,000) idle
`sleep` processes running beside it. Ours and the baseline send SIGTERM to
the tree, wait `kill_grace` (0.1 s), then SIGKILL, so their figure is shown
past the grace; raw asyncio sends SIGKILL to the process group at once
(`os.killpg`, the cheapest kill there is) and is shown past the deadline.

Sides, each in a fresh interpreter:
- `ours`: the current code: the supervisor's shim ends the tree it knows (its
  cgroup, or the children lists of the tree's tasks), keeping the grace
  itself, and the wait is on the command's `gone` pipe;
- `baseline`: the code before the supervisor (`_baseline.BASELINE_COMMIT`),
  which scans all of `/proc` for the tree, signals through psutil and polls
  every 10 ms;
- `asyncio raw`: `asyncio.wait_for(proc.communicate(), 0.2)`, then
  `os.killpg(pid, SIGKILL)` and `await proc.wait()`.

Targets: ours within 2 ms of itself between the quiet and the busy host
(medians), and at most 5 ms past the deadline plus the grace (median, busy host).
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
import time

import _baseline
import _harness as h

SCRIPT = "trap '' TERM; sleep 30 & wait"
TIMEOUT = 0.2
GRACE = 0.1
SIDES = ("ours", "baseline", "asyncio raw")


def _worker(side: str, reps: int) -> None:
    h.preload()
    lates: list[float] = []
    with tempfile.TemporaryDirectory(prefix="bench-kill-") as workdir:
        if side == "asyncio raw":

            async def raw() -> None:
                for _ in range(reps + 1):
                    called = time.monotonic()
                    process = await asyncio.create_subprocess_shell(
                        SCRIPT,
                        stdout=subprocess.PIPE,
                        stderr=subprocess.PIPE,
                        cwd=workdir,
                        start_new_session=True,
                    )
                    try:
                        await asyncio.wait_for(process.communicate(), TIMEOUT)
                    except TimeoutError:
                        os.killpg(process.pid, signal.SIGKILL)
                        await process.wait()
                    lates.append(time.monotonic() - called - TIMEOUT)

            asyncio.run(raw())
        else:
            import anyio

            from executor import Command, LocalExecutor, TimedOut

            async def ours() -> None:
                async with LocalExecutor(workdir, kill_grace=GRACE) as ex:
                    await ex.exec_cmd(Command.exec(["true"]))
                    for _ in range(reps + 1):
                        called = time.monotonic()
                        with contextlib.suppress(TimedOut):
                            await ex.exec_cmd(Command.shell(SCRIPT).with_timeout(TIMEOUT))
                        lates.append(time.monotonic() - called - TIMEOUT - GRACE)

            anyio.run(ours, backend="asyncio")
    # The first run warms up (imports, the supervisor's first shim).
    h.worker_result({"lates": lates[1:], "from": _baseline.imported_from()})


def _idle(count: int) -> list[subprocess.Popen[bytes]]:
    """`count` idle processes on the host, beside the measured ones."""
    return [
        subprocess.Popen(["sleep", "600"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        for _ in range(count)
    ]


def _stop(idle: list[subprocess.Popen[bytes]]) -> None:
    for process in idle:
        process.kill()
    for process in idle:
        process.wait()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--worker"]:
        _worker(argv[1], int(argv[2]))
        return 0
    parser = h.command_line(__doc__, "200 idle processes, two runs per side")
    parser.add_argument("--reps", type=int, help="runs per side and host (default 15)")
    parser.add_argument("--idle", type=int, help="idle processes on the busy host (2000)")
    args = parser.parse_args(argv)
    reps = args.reps or (2 if args.quick else 15)
    idle_count = args.idle or (200 if args.quick else 2000)
    tree = _baseline.baseline_tree()
    sides = [side for side in SIDES if side != "baseline" or tree is not None]
    lates: dict[tuple[str, int], list[float]] = {}
    for load in (0, idle_count):
        idle = _idle(load)
        try:
            processes = len([name for name in os.listdir("/proc") if name.isdigit()])
            turns = 1 if args.quick else 3
            for turn in range(turns):
                for side in h.rotated(sides, turn):
                    result = _baseline.run_worker_in(
                        tree if side == "baseline" else None,
                        __file__,
                        [side, str(max(1, reps // turns))],
                    )
                    lates.setdefault((side, load), []).extend(result["lates"])
        finally:
            _stop(idle)
        print(f"host with {load} idle processes of ours: {processes} processes in /proc")
    rows = []
    for side in sides:
        quiet = statistics.median(lates[side, 0])
        busy = statistics.median(lates[side, idle_count])
        rows.append(
            [
                side,
                len(lates[side, 0]),
                h.fmt_ms(quiet, 2),
                h.fmt_ms(busy, 2),
                h.fmt_ms(max(lates[side, idle_count]), 2),
                h.fmt_ms(busy - quiet, 2),
            ]
        )
    print(
        f"Figure 5: return - deadline - grace (ms) for `{SCRIPT}`, timeout "
        f"{TIMEOUT:g} s, kill_grace {GRACE:g} s (raw asyncio: no grace, SIGKILL at once); "
        f"load {os.getloadavg()[0]:.2f}"
    )
    h.print_table(
        ["side", "reps", "quiet host", f"+{idle_count} idle", "max (busy)", "busy - quiet"], rows
    )
    quiet = statistics.median(lates["ours", 0])
    busy = statistics.median(lates["ours", idle_count])
    met = abs(busy - quiet) <= 0.002 and busy <= 0.005
    print(
        f"target: ours within 2 ms between hosts ({(busy - quiet) * 1e3:+.2f} ms) and <= 5 ms "
        f"past deadline + grace ({busy * 1e3:.2f} ms) -> {h.verdict(met)}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
