"""Policy overhead: parse + rules per command, as a ratio to the bare LocalExecutor.

What is measured: the wall time of one whole command (`sh -c true`, spawn to
reaped exit, pipes read), run back to back (500 per side by default), on

- `bare`: `LocalExecutor.exec_cmd(Command.shell("true"))`;
- `DangerousCommands`: the same through `DangerousCommands(LocalExecutor)`;
- `CommandRules(allow)`: the same through
  `CommandRules(LocalExecutor, allow=["true", "ls", "git status", ...])`;
- `CheckedExecutor (no-op)`: a wrapper that checks nothing, for reference:
  what any policy costs before its own parse and rules.

All sides run in this one process, in one asyncio event loop, over one
`LocalExecutor`, taking turns command by command (the order rotating each
turn) so the machine's noise falls on every side alike. Target: each
policy's median per command <= 1.10x the bare executor's.

A second table times the policies' checks alone (no process), on `true` and
on a compound script that needs the full parser (`cd src && git status
--short | grep -v '^??' || echo "$(date)"`): plain words like `true` skip
bashlex, so the first table shows the common case and this one the cost a
script with quotes, pipes or substitutions adds.
"""

from __future__ import annotations

import sys
import tempfile
import time
from collections.abc import Callable

import _harness as h
import anyio

from executor import CheckedExecutor, Command, LocalExecutor, ToolExecutor
from executor._policies.rules import CommandRules, DangerousCommands

TARGET = 1.10
ALLOW = ["true", "ls", "git status", "cd", "grep", "echo", "date"]
COMPOUND = "cd src && git status --short | grep -v '^??' || echo \"$(date)\""

Wrap = Callable[[ToolExecutor], ToolExecutor]

SIDES: dict[str, Wrap] = {
    "bare": lambda local: local,
    "CheckedExecutor (no-op)": CheckedExecutor,
    "DangerousCommands": DangerousCommands,
    "CommandRules(allow)": lambda local: CommandRules(local, allow=ALLOW),
}
BASELINE = "bare"
# A wrapper that checks nothing: what any policy pays before its own work.
REFERENCE = "CheckedExecutor (no-op)"


def measure(count: int, warmup: int) -> dict[str, h.Stats]:
    """Time `count` commands per side, taking turns command by command in one event loop.

    The machine is shared and its noise comes in bursts; alternating single
    commands (the order rotating each turn) spreads every burst over all sides.
    """
    names = list(SIDES)
    samples: dict[str, list[float]] = {name: [] for name in names}
    command = Command.shell("true")

    async def main(workdir: str) -> None:
        async with LocalExecutor(workdir) as local:
            sides = {name: wrap(local) for name, wrap in SIDES.items()}
            for _ in range(warmup):
                for ex in sides.values():
                    await ex.exec_cmd(command)
            for turn in range(count):
                for name in h.rotated(names, turn):
                    started = time.perf_counter()
                    await sides[name].exec_cmd(command)
                    samples[name].append(time.perf_counter() - started)

    with tempfile.TemporaryDirectory(prefix="bench-policy-") as workdir:
        anyio.run(main, workdir, backend="asyncio")
    return {name: h.Stats(values) for name, values in samples.items()}


def check_only(count: int) -> list[list[object]]:
    """Microseconds per check (median of `count`), without running anything."""
    local = LocalExecutor(".")
    policies: dict[str, DangerousCommands | CommandRules] = {
        "DangerousCommands": DangerousCommands(local),
        "CommandRules(allow)": CommandRules(local, allow=ALLOW),
    }
    rows: list[list[object]] = []

    async def timed(policy: DangerousCommands | CommandRules, command: Command) -> list[float]:
        times = []
        for _ in range(count):
            started = time.perf_counter()
            await policy.check(command)
            times.append(time.perf_counter() - started)
        return times

    for label, script in (("true", "true"), ("compound", COMPOUND)):
        for name, policy in policies.items():
            stats = h.Stats(anyio.run(timed, policy, Command.shell(script), backend="asyncio"))
            rows.append([f"{name} on {label}", count, f"{stats.median * 1e6:.1f}"])
    return rows


def report(stats: dict[str, h.Stats], checks: list[list[object]]) -> bool:
    base = stats[BASELINE]
    rows = [
        h.sample_row(name, s, h.fmt_ratio(s.median, base.median), h.fmt_ratio(s.p99, base.p99))
        for name, s in stats.items()
    ]
    print("Policy overhead: `sh -c true` through each policy (ms per command)")
    h.print_table(["side", "n", "median", "p99", "med/bare", "p99/bare"], rows)
    met = True
    for name, s in stats.items():
        if name in (BASELINE, REFERENCE):
            continue
        ratio = s.median / base.median
        met = met and ratio <= TARGET
        print(
            f"target: {name} median <= {TARGET}x bare: {ratio:.2f}x -> {h.verdict(ratio <= TARGET)}"
        )
    print()
    print("The check alone, no process (microseconds per command, median)")
    h.print_table(["policy on script", "n", "us"], checks)
    return met


def main(argv: list[str] | None = None) -> int:
    scale = h.per_side(__doc__, argv, quick=24, full=500)
    h.preload()
    stats = measure(scale.count, scale.pick(2, 10))
    report(stats, check_only(scale.pick(50, 2000)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
