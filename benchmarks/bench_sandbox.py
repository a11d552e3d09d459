"""Sandbox overhead: what each backend adds to one command, against the bare LocalExecutor.

What is measured: the wall time of one whole `exec_cmd(Command.exec(["true"]))`,
start to reaped exit with both pipes read, back to back (300 per side by
default), on asyncio. The difference between a sandboxed side's median and the
bare side's is what the sandbox costs every tool call.

Sides, all in this one process, in rounds whose order rotates so that the
machine's noise (2 shared cores) falls on every side alike:

- `bare`: `LocalExecutor(workdir)`;
- `bubblewrap`: `LocalExecutor(workdir, sandbox=Sandbox(backend="bubblewrap"))`:
  `bwrap` builds the sandbox (user, mount, UTS, cgroup and network
  namespaces) once per executor, and its server starts each command in a
  PID, mount and IPC namespace of its own (a fork, namespaces made ahead);
  each executor's first command, which builds it, is timed apart;
- `bubblewrap + rlimits`: the same with four rlimits, set by the command's
  init before the exec;
- `landlock`: `Sandbox(backend="landlock")`: the spawn is handed to a thread
  restricted once, so a command costs one thread hand-off more;
- `landlock + rlimits`: the same with four rlimits (one `prlimit` exec more).

A backend this machine cannot give is reported as such and left out.

Targets: bubblewrap adds <= 5 ms at the median; Landlock adds <= 1 ms.

`--breakdown` shows what one `bwrap` per command would cost: the one-shot
command line of the same sandbox (`Sandbox.bubblewrap_argv`) for `true`, run
bare by `subprocess.run` (no executor), against
`true` alone, `bwrap --ro-bind / / true`, that command line with each option
group left out in turn, and with `prlimit` in front; in rotating rounds, medians.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence

import _harness as h
import anyio

from executor import Command, ExecutorError, LocalExecutor, Sandbox
from executor._local.sandbox import Backend

TARGETS = {"bubblewrap": 0.005, "landlock": 0.001}
Batch = h.Batch


def _limited(backend: Backend) -> Sandbox:
    return Sandbox(
        backend=backend,
        address_space=4 << 30,
        cpu_seconds=600,
        file_size=1 << 30,
        open_files=1024,
    )


SIDES: dict[str, Sandbox | None] = {
    "bare": None,
    "bubblewrap": Sandbox(backend="bubblewrap"),
    "bubblewrap + rlimits": _limited("bubblewrap"),
    "landlock": Sandbox(backend="landlock"),
    "landlock + rlimits": _limited("landlock"),
}


# Per side, each executor's first command: bubblewrap builds its sandbox then.
FIRST: dict[str, list[float]] = {}


def _side(name: str, sandbox: Sandbox | None) -> Batch:
    def batch(workdir: str, count: int) -> list[float]:
        async def main() -> list[float]:
            times = []
            command = Command.exec(["true"])
            async with LocalExecutor(workdir, sandbox=sandbox) as ex:
                started = time.perf_counter()
                await ex.exec_cmd(command)
                FIRST.setdefault(name, []).append(time.perf_counter() - started)
                for _ in range(count):
                    started = time.perf_counter()
                    await ex.exec_cmd(command)
                    times.append(time.perf_counter() - started)
            return times

        return anyio.run(main)

    return batch


def available() -> dict[str, Batch]:
    """The sides this machine can run; the others are named and skipped."""
    sides = {}
    for name, sandbox in SIDES.items():
        if sandbox is not None:
            try:
                sandbox.choose_backend()
            except ExecutorError as error:
                first = str(error).splitlines()[1] if "\n" in str(error) else str(error)
                print(f"{name}: not available here ({first.lstrip('- ')})")
                continue
        sides[name] = _side(name, sandbox)
    return sides


def measure(sides: dict[str, Batch], count: int, rounds: int, warmup: int) -> dict[str, h.Stats]:
    return h.interleaved(sides, "bench-sandbox-", count, rounds, warmup)


def report(stats: dict[str, h.Stats]) -> None:
    bare = stats["bare"]
    rows = []
    for name, s in stats.items():
        rows.append(
            h.sample_row(
                name, s, h.fmt_ms(s.median - bare.median), h.fmt_ratio(s.median, bare.median)
            )
        )
    print("Sandbox overhead: sequential `true` through exec_cmd (ms per command, asyncio)")
    h.print_table(["side", "n", "median", "p99", "added (median)", "med/bare"], rows)
    firsts = ", ".join(
        f"{name} {statistics.median(times) * 1000:.1f} ms" for name, times in FIRST.items()
    )
    print(
        f"each executor's first command (not in the table; bubblewrap builds its sandbox): {firsts}"
    )
    for backend, target in TARGETS.items():
        if backend not in stats:
            continue
        added = stats[backend].median - bare.median
        print(
            f"target: {backend} adds <= {target * 1000:.0f} ms at the median: "
            f"{added * 1000:.2f} ms -> {h.verdict(added <= target)}"
        )


# Option groups of the bubblewrap command line, each left out in turn by
# --breakdown: each option with how many arguments follow it.
GROUPS: dict[str, tuple[tuple[str, int], ...]] = {
    "--dev /dev": (("--dev", 1),),
    "--proc /proc": (("--proc", 1),),
    "--tmpfs /tmp, /run, home": (("--tmpfs", 1),),
    # Without the workdir there is no starting there either.
    "--bind workdir": (("--bind", 2), ("--chdir", 1)),
    "--unshare-user --cap-drop ALL": (("--unshare-user", 0), ("--cap-drop", 1)),
    "--unshare-pid": (("--unshare-pid", 0),),
    "--unshare-ipc, -uts, -cgroup-try": (
        ("--unshare-ipc", 0),
        ("--unshare-uts", 0),
        ("--unshare-cgroup-try", 0),
    ),
    "--unshare-net": (("--unshare-net", 0),),
    "--die-with-parent --new-session": (("--die-with-parent", 0), ("--new-session", 0)),
}


def _leave_out(argv: Sequence[str], options: tuple[tuple[str, int], ...]) -> list[str]:
    """`argv` without each of `options` (and its arguments) before `--`."""
    skip = dict(options)
    end = list(argv).index("--")
    out: list[str] = []
    index = 0
    while index < end:
        if argv[index] in skip:
            index += 1 + skip[argv[index]]
        else:
            out.append(argv[index])
            index += 1
    return out + list(argv[end:])


def breakdown(count: int) -> None:
    """Time the bubblewrap command line piece by piece, without the executor."""
    sandbox = Sandbox(backend="bubblewrap")
    try:
        sandbox.choose_backend()
    except ExecutorError as error:
        print(f"bubblewrap: not available here ({error})")
        return
    support = Sandbox.probe()
    with tempfile.TemporaryDirectory(prefix="bench-sandbox-") as workdir:
        full = sandbox.bubblewrap_argv(
            ["true"], support=support, cwd=workdir, workdir=workdir, read_only=False, pty=False
        )
        assert support.bubblewrap is not None
        variants = {
            "true": ["true"],
            "bwrap --ro-bind / / true": [support.bubblewrap, "--ro-bind", "/", "/", "--", "true"],
            "the one-shot bwrap line": full,
            **{f"  without {name}": _leave_out(full, group) for name, group in GROUPS.items()},
        }
        if support.prlimit is not None:
            variants["prlimit (4 limits) + the line"] = [
                *_limited("bubblewrap").rlimit_argv(support),
                *full,
            ]
        samples: dict[str, list[float]] = {name: [] for name in variants}
        names = list(variants)
        failed = 0
        print("the one-shot line:", " ".join(full))
        for index in range(count):
            for name in h.rotated(names, index):
                started = time.perf_counter()
                run = subprocess.run(variants[name], stdin=subprocess.DEVNULL, check=False)
                if run.returncode:
                    # bwrap fails when a mount under / vanishes while it
                    # remounts them all read-only (a container stopping).
                    failed += 1
                    continue
                samples[name].append(time.perf_counter() - started)
    medians = {name: statistics.median(values) for name, values in samples.items()}
    line = medians["the one-shot bwrap line"]
    rows = [
        [
            name,
            h.fmt_ms(median),
            h.fmt_ms(median - medians["true"]),
            h.fmt_ms(median - line),
        ]
        for name, median in medians.items()
    ]
    if failed:
        print(f"{failed} runs failed and were left out")
    print(f"Where bubblewrap's time goes: subprocess.run, medians of {count} (ms)")
    h.print_table(["command", "median", "vs true", "vs the line"], rows)


def main(argv: list[str] | None = None) -> int:
    parser = h.command_line(__doc__, "a few commands, as a smoke check")
    parser.add_argument("--count", type=int, help="commands per side (default 300)")
    parser.add_argument(
        "--breakdown", action="store_true", help="time bubblewrap's options one by one, and stop"
    )
    args = parser.parse_args(argv)
    if args.breakdown:
        breakdown(args.count or (10 if args.quick else 100))
        return 0
    count = args.count or (20 if args.quick else 300)
    rounds = 4 if args.quick else 10
    warmup = 2 if args.quick else 10
    h.preload()
    report(measure(available(), count, rounds, warmup))
    return 0


if __name__ == "__main__":
    sys.exit(main())
