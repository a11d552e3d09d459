"""Sandbox overhead: what each backend adds to one command, against the bare LocalExecutor.

What is measured: the wall time of one whole `exec_cmd(Command.exec(["true"]))`,
start to reaped exit with both pipes read, back to back (300 per side by
default), on asyncio. The difference between a sandboxed side's median and the
bare side's is what the sandbox costs every tool call.

Each batch of a side runs in a fresh interpreter (a worker) that imports the
package from a given source tree: this checkout, or, for the `@base` sides,
the code before the system call filter and the Landlock launcher (commit
`BASELINE`, from `git archive`, unpacked in a temporary folder), so what they
cost is measured in the same run as the code before them. Without git, or
where the commit is not in the clone (a shallow one), the `@base` sides are
left out.

Sides, in rounds whose order rotates so that the machine's noise (2 shared
cores) falls on every side alike:

- `bare`: `LocalExecutor(workdir)`;
- `bubblewrap`: `LocalExecutor(workdir, sandbox=Sandbox(backend="bubblewrap"))`:
  `bwrap` builds the sandbox (user, mount, UTS, cgroup and network
  namespaces) once per executor, and its server starts each command in a
  PID, mount and IPC namespace of its own (a fork, namespaces made ahead);
  each executor's first command, which builds it, is timed apart;
- `bubblewrap + rlimits`: the same with four rlimits, set by the command's
  init before the exec;
- `landlock`: `Sandbox(backend="landlock")`: the command goes straight to
  an idle init of the Landlock launcher (a process of its own per rule
  set), whose thread made ahead for it (in a Landlock domain of its own,
  under the system call filter, with a fresh keyring and, run by root, an
  IPC namespace) spawns it; inits run one command after another;
- `landlock + rlimits`: the same with four rlimits (one `prlimit` exec more);
- `bare@base`, `bubblewrap@base`, `landlock@base`: the same sides with the
  code of `BASELINE` (Landlock commands started from a thread of the
  executor's process, no filter).

Every sandboxed side but `@base` runs with the system call filter (the
default). A backend this machine cannot give is reported as such and left out.

Targets: bubblewrap adds <= 2.5 ms at the median over bare; Landlock adds <= 1 ms.
"Over bare" compares a sandboxed side's median with `bare`'s: both are
`exec_cmd` of this tree's `LocalExecutor`, in the same run, one with the
sandbox and one without (an unsandboxed command starts below the
executor's supervisor, as every unsandboxed command does). The `@base`
lines put the same difference at `BASELINE` beside it, and each backend
against `bare@base` (a plain spawn from the executor's process).

The `cpu` column is the CPU time every process of a side used per timed
command: the worker, its supervisor or sandbox server, launcher and inits,
and the commands, with what each has reaped (clock ticks, summed over all
batches: about +-0.2 ms per command over a full run, much more in a
smoke run). Unlike the wall times it moves little with the machine's
load, which on 2 shared cores decides most of a median: each process a
command passes through waits for a core. Kernel work done outside these
processes (a namespace freed later by a kernel worker) is not in it. The
load average at the start and end of the run is printed with the table.

`--breakdown` shows what one `bwrap` per command would cost: the one-shot
command line of the same sandbox (`Sandbox.bubblewrap_argv`) for `true`, run
bare by `subprocess.run` (no executor), against
`true` alone, `bwrap --ro-bind / / true`, that command line with each option
group left out in turn, and with `prlimit` in front; in rotating rounds, medians.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import _harness as h

from executor import ExecutorError, Sandbox
from executor._sandbox.sandbox import Backend

TARGETS = {"bubblewrap": 0.0025, "landlock": 0.001}
ROOT = Path(__file__).resolve().parent.parent
# The code before the system call filter and the out-of-process Landlock launcher.
BASELINE = "541d7319b1b30216de0418d99bfeac94586ce135"
Batch = h.Batch


def _limited(backend: Backend) -> Sandbox:
    return Sandbox(
        backend=backend,
        address_space=4 << 30,
        cpu_seconds=600,
        file_size=1 << 30,
        open_files=1024,
    )


# Each side: the backend (None: bare), whether with the four rlimits, and whether
# it runs the code of BASELINE.
SIDES: dict[str, tuple[Backend | None, bool, bool]] = {
    "bare": (None, False, False),
    "bubblewrap": ("bubblewrap", False, False),
    "bubblewrap + rlimits": ("bubblewrap", True, False),
    "landlock": ("landlock", False, False),
    "landlock + rlimits": ("landlock", True, False),
    "bare@base": (None, False, True),
    "bubblewrap@base": ("bubblewrap", False, True),
    "landlock@base": ("landlock", False, True),
}

# Per side, each batch's first command (each executor's first: a sandbox is built then).
FIRST: dict[str, list[float]] = {}
# Per side, the CPU seconds every process of the batch used while timed, and how many commands.
CPU: dict[str, tuple[float, int]] = {}
# The machine's load average as the run started.
LOAD: list[str] = []

# Run by each batch in a fresh interpreter: argv is the source tree, backend
# ("" for bare), rlimits ("1" or "0"), workdir and count.
WORKER = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
import anyio, psutil
import executor
from executor import Command, LocalExecutor, Sandbox
assert executor.__file__.startswith(sys.argv[1]), executor.__file__
backend, limited, workdir, count = sys.argv[2], sys.argv[3] == "1", sys.argv[4], int(sys.argv[5])
limits = dict(address_space=4 << 30, cpu_seconds=600, file_size=1 << 30, open_files=1024)
sandbox = Sandbox(backend=backend, **(limits if limited else {})) if backend else None
def cpu():
    # CPU seconds of this process and every process below it, with what each
    # has reaped (an init's commands, a launcher's inits): clock ticks.
    me = psutil.Process()
    total = sum(me.cpu_times()[:4])
    for child in me.children(recursive=True):
        try:
            total += sum(child.cpu_times()[:4])
        except psutil.Error:
            pass
    return total
async def main():
    times = []
    command = Command.exec(["true"])
    async with LocalExecutor(workdir, sandbox=sandbox) as ex:
        started = time.perf_counter()
        await ex.exec_cmd(command)
        first = time.perf_counter() - started
        before = cpu()
        for _ in range(count):
            started = time.perf_counter()
            await ex.exec_cmd(command)
            times.append(time.perf_counter() - started)
        used = cpu() - before
    return first, times, used
first, times, used = anyio.run(main)
print("RESULT " + json.dumps({"first": first, "times": times, "cpu": used}))
"""


def _side(name: str, tree: Path, backend: Backend | None, limited: bool) -> Batch:
    def batch(workdir: str, count: int) -> list[float]:
        argv = [str(tree), backend or "", "1" if limited else "0", workdir, str(count)]
        completed = subprocess.run(
            [sys.executable, "-c", WORKER, *argv],
            capture_output=True,
            timeout=600,
            check=False,
            env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
        )
        lines = [
            line for line in completed.stdout.decode().splitlines() if line.startswith("RESULT ")
        ]
        if completed.returncode or not lines:
            raise RuntimeError(f"side {name} failed:\n{completed.stderr.decode(errors='replace')}")
        result = json.loads(lines[-1][len("RESULT ") :])
        FIRST.setdefault(name, []).append(result["first"])
        seconds, commands = CPU.get(name, (0.0, 0))
        CPU[name] = (seconds + result["cpu"], commands + len(result["times"]))
        return list(result["times"])

    return batch


@contextmanager
def base_tree() -> Iterator[Path | None]:
    """`BASELINE`'s source tree in a temporary folder, or None without git or the commit."""
    git = shutil.which("git")
    if git is None or not (ROOT / ".git").exists():
        print("@base sides: left out (no git, or not a checkout)")
        yield None
        return
    with tempfile.TemporaryDirectory(prefix="bench-sandbox-base-") as folder:
        archive = subprocess.run(
            [git, "-C", str(ROOT), "archive", BASELINE, "executor"],
            capture_output=True,
            check=False,
        )
        unpacked = (
            archive.returncode == 0
            and (
                subprocess.run(["tar", "-x", "-C", folder], input=archive.stdout, check=False)
            ).returncode
            == 0
        )
        if not unpacked:
            print(f"@base sides: left out (git archive failed: {archive.stderr.decode().strip()})")
            yield None
            return
        yield Path(folder)


# The sides of a smoke run (--quick): one interpreter start each.
QUICK = ("bare", "bubblewrap", "landlock", "bare@base", "landlock@base")


def available(base: Path | None, *, quick: bool = False) -> dict[str, Batch]:
    """The sides this machine can run; the others are named and skipped."""
    sides = {}
    for name, (backend, limited, at_base) in SIDES.items():
        if (at_base and base is None) or (quick and name not in QUICK):
            continue
        if backend is not None:
            try:
                Sandbox(backend=backend).choose_backend()
            except ExecutorError as error:
                first = str(error).splitlines()[1] if "\n" in str(error) else str(error)
                print(f"{name}: not available here ({first.lstrip('- ')})")
                continue
        tree = base if at_base and base is not None else ROOT
        sides[name] = _side(name, tree, backend, limited)
    return sides


def measure(sides: dict[str, Batch], count: int, rounds: int, warmup: int) -> dict[str, h.Stats]:
    return h.interleaved(sides, "bench-sandbox-", count, rounds, warmup)


def report(stats: dict[str, h.Stats]) -> None:
    bare = stats["bare"]
    rows = []
    for name, s in stats.items():
        rows.append(
            h.sample_row(
                name,
                s,
                h.fmt_ms(s.median - bare.median),
                h.fmt_ratio(s.median, bare.median),
                h.fmt_ms(cpu_per_command(name)),
                h.fmt_ms(cpu_per_command(name) - cpu_per_command("bare")),
            )
        )
    after = os.getloadavg()[0]
    print(f"load average before: {LOAD[0]}, after: {after:.2f} (on {os.cpu_count()} cores)")
    print("Sandbox overhead: sequential `true` through exec_cmd (ms per command, asyncio)")
    h.print_table(
        ["side", "n", "median", "p99", "added (median)", "med/bare", "cpu", "added cpu"], rows
    )
    firsts = ", ".join(
        f"{name} {statistics.median(times) * 1000:.1f} ms" for name, times in FIRST.items()
    )
    print(f"each executor's first command (not in the table; the sandbox is built): {firsts}")
    for backend in ("bubblewrap", "landlock"):
        if backend in stats and f"{backend}@base" in stats and "bare@base" in stats:
            now = stats[backend].median - bare.median
            then = stats[f"{backend}@base"].median - stats["bare@base"].median
            print(
                f"{backend}: added over bare {now * 1000:.2f} ms now, {then * 1000:.2f} ms at "
                f"base: this tree's change costs {(now - then) * 1000:+.2f} ms per command "
                f"({backend} now vs bare@base: "
                f"{(stats[backend].median - stats['bare@base'].median) * 1000:+.2f} ms)"
            )
    for backend, target in TARGETS.items():
        if backend not in stats:
            continue
        added = stats[backend].median - bare.median
        print(
            f"target: {backend} adds <= {target * 1000:.1f} ms at the median over bare: "
            f"{added * 1000:.2f} ms -> {h.verdict(added <= target)} "
            f"(CPU: {(cpu_per_command(backend) - cpu_per_command('bare')) * 1000:+.2f} ms)"
        )


def cpu_per_command(name: str) -> float:
    """The CPU seconds a side's processes used per timed command (nan when not measured)."""
    seconds, commands = CPU.get(name, (0.0, 0))
    return seconds / commands if commands else math.nan


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
    count = args.count or (10 if args.quick else 300)
    rounds = 1 if args.quick else 10
    warmup = 0 if args.quick else 10
    LOAD.append(f"{os.getloadavg()[0]:.2f}")
    with base_tree() as base:
        report(measure(available(base, quick=args.quick), count, rounds, warmup))
    return 0


if __name__ == "__main__":
    sys.exit(main())
