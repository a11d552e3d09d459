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
turn) so the machine's noise falls on every side alike. Targets: the
median per command <= 1.05x the bare executor's for `DangerousCommands`,
<= 1.10x for `CommandRules(allow)`.

The parser keeps the readings of the last short scripts it read (agents
repeat commands), so the first table's repeated `true` is read once; the
other tables empty that cache, or pass it by, before every parse.

A second table times the policies' checks alone (no process), on `true` and
on a compound script that needs the full parser (`cd src && git status
--short | grep -v '^??' || echo "$(date)"`): plain words like `true` skip
the parser, so the first table shows the common case and this one the cost a
script with quotes, pipes or substitutions adds.

A third table times parse-and-judge (`DangerousCommands`' judgement, no
process) per script with the parser of today (tree-sitter-bash) and the one
before it (bashlex behind a lexer of its own: `executor/_shell/parser.py` at
`_baseline.BASHLEX_PARSER_COMMIT`, from `git archive`, loaded into this
process beside today's; run only where `bashlex` is installed and the commit
is in the clone): over the real-world corpus (every maintainer
script in /var/lib/dpkg/info and every sh/bash script in /usr/bin that
`bash -n` accepts; the quick mode takes 40 of them) and on a 20-line agent
script. The two sides take turns script by script. Each script's time is
its median over the rounds; the table gives the median and the mean over
scripts, the total, how many each parser refused for syntax, and the total
over the scripts both read (time to a refusal is no judgement). Target:
tree-sitter's total over the scripts both read no slower than bashlex's.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType

import _baseline
import _harness as h
import anyio

from executor import CheckedExecutor, Command, LocalExecutor, ShellParseError, ToolExecutor
from executor._policies.rules import CommandRules, DangerousCommands, _Judge
from executor._shell import parser as now, programs, walker

TARGET = 1.10
# DangerousCommands on `true` needs no parser at all: it must cost next to nothing.
TARGETS = {"DangerousCommands": 1.05}
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
            # Each check parses: the parser's cache of recent scripts is emptied first.
            now._parse_cached.cache_clear()
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
        target = TARGETS.get(name, TARGET)
        met = met and ratio <= target
        print(
            f"target: {name} median <= {target}x bare: {ratio:.2f}x -> {h.verdict(ratio <= target)}"
        )
    print()
    print("The check alone, no process (microseconds per command, median)")
    h.print_table(["policy on script", "n", "us"], checks)
    return met


# What an agent sends in one go: folders, git, a loop, tests, a here-document.
AGENT_SCRIPT = """\
set -e
cd "$HOME/project" || exit 1
git status --short | grep -v '^??' || true
git log --oneline -n 5
for f in src/*.py; do
    python3 -m py_compile "$f" && echo "ok $f"
done
if test -f requirements.txt; then
    pip install -q -r requirements.txt 2>/dev/null
fi
mkdir -p build/reports
cat > build/reports/notes.md <<'EOF'
# Notes
Run on $(date), by the agent.
EOF
python3 -m pytest -q tests/ -k "not slow" | tail -n 20
count=$(grep -rn "TODO" src | wc -l)
echo "TODO left: $count"
find . -name '*.pyc' -delete
rm -rf build/tmp
ls -la build/ && du -sh build
"""

_MAINTAINER = ("preinst", "postinst", "prerm", "postrm")


def corpus(limit: int | None) -> list[str]:
    """The machine's shell scripts that `bash -n` accepts (the first `limit`, sorted by path)."""
    paths: set[Path] = set()
    info = Path("/var/lib/dpkg/info")
    if info.is_dir():
        for suffix in _MAINTAINER:
            paths.update(info.glob(f"*.{suffix}"))
    usr_bin = Path("/usr/bin")
    for path in usr_bin.iterdir() if usr_bin.is_dir() else ():
        try:
            with path.open("rb") as file:
                head = file.readline(256)
        except OSError:
            continue
        words = head[2:].split() if head.startswith(b"#!") else []
        program = os.path.basename(words[0]) if words else b""
        if program == b"env" and len(words) > 1:
            program = words[1]
        if program in (b"sh", b"bash", b"dash"):
            paths.add(path)
    scripts: list[str] = []
    for path in sorted(paths):
        if limit is not None and len(scripts) >= limit:
            break
        checked = subprocess.run(["bash", "-n", str(path)], capture_output=True, check=False)
        if checked.returncode == 0:
            scripts.append(path.read_text(encoding="utf-8", errors="surrogateescape"))
    return scripts


Parse = Callable[[str], Sequence[object]]


def parse_uncached(script: str) -> Sequence[object]:
    """tree-sitter's reading of `script`, made anew: the cache of recent scripts passed by."""
    return tuple(walker.parse(script, walker.Ctx(), 0, programs.analyse))


def judged(parse: Parse, script: str) -> tuple[float, bool]:
    """Seconds to parse and judge `script` as DangerousCommands does; whether it was unreadable."""
    started = time.perf_counter()
    try:
        commands = parse(script)
    except ShellParseError:
        return time.perf_counter() - started, True
    _Judge(frozenset(), True, "/root", None).commands(commands)  # type: ignore[arg-type]
    return time.perf_counter() - started, False


def parser_before() -> ModuleType | None:
    """The bashlex parser of before, from its commit's archived tree; `None` (said why) without.

    Its imports of `executor` resolve to this tree's package (`Exec`, `Shell`
    and `ShellParseError`, all still there), so a refusal is the same
    `ShellParseError` today's parser raises.
    """
    if importlib.util.find_spec("bashlex") is None:
        print("bashlex is not installed: the parser of before is left out (pip install bashlex)")
        return None
    tree = _baseline.baseline_tree(_baseline.BASHLEX_PARSER_COMMIT)
    if tree is None:
        print("the parser of before is left out")
        return None
    return _baseline.load_module(tree, "executor/_shell/parser.py", "_bashlex_parser")


def parse_and_judge(
    scripts: Sequence[str], rounds: int, before: ModuleType | None
) -> tuple[list[list[object]], bool]:
    """Per-script parse-and-judge times of each parser, taking turns script by script.

    Besides every script, the rows `both read` sum only the scripts neither
    parser refused: bashlex gives up on most real scripts early, and time to
    a refusal is not time to a judgement.
    """
    sides: dict[str, Parse] = {"tree-sitter-bash (now)": parse_uncached}
    if before is not None:
        sides["bashlex (before)"] = before.parse_script
    rows: list[list[object]] = []
    met = True
    for label, batch in (("corpus", scripts), ("20-line agent script", [AGENT_SCRIPT])):
        repeat = rounds if label == "corpus" else rounds * 20
        per_script: dict[str, list[float]] = {name: [] for name in sides}
        unreadable: dict[str, list[bool]] = {name: [] for name in sides}
        for index, script in enumerate(batch):
            times: dict[str, list[float]] = {name: [] for name in sides}
            refused = dict.fromkeys(sides, False)
            for turn in range(repeat):
                for name in h.rotated(list(sides), index + turn):
                    seconds, failed = judged(sides[name], script)
                    times[name].append(seconds)
                    refused[name] = failed
            for name in sides:
                per_script[name].append(h.Stats(times[name]).median)
                unreadable[name].append(refused[name])
        both = [i for i in range(len(batch)) if not any(unreadable[n][i] for n in sides)]
        totals: dict[str, float] = {}
        for name, values in per_script.items():
            stats = h.Stats(values)
            total = sum(values)
            common = sum(values[i] for i in both)
            totals[name] = common
            rows.append(
                [
                    f"{label}: {name}",
                    len(values),
                    f"{stats.median * 1e3:.2f}",
                    f"{total / len(values) * 1e3:.2f}",
                    f"{total * 1e3:.0f}",
                    sum(unreadable[name]),
                    f"{len(both)}: {common * 1e3:.0f}",
                ]
            )
        old = totals.get("bashlex (before)")
        if old:
            ratio = totals["tree-sitter-bash (now)"] / old
            met = met and ratio <= 1.0
            verdict = h.verdict(ratio <= 1.0)
            print(
                f"target: {label}, scripts both read, tree-sitter total <= bashlex: "
                f"{ratio:.2f}x -> {verdict}"
            )
    return rows, met


def main(argv: list[str] | None = None) -> int:
    scale = h.per_side(__doc__, argv, quick=24, full=500)
    h.preload()
    stats = measure(scale.count, scale.pick(2, 10))
    report(stats, check_only(scale.pick(50, 2000)))
    print()
    before = parser_before()
    limit: int | None = 40 if scale.quick else None
    rows, _ = parse_and_judge(corpus(limit), scale.pick(1, 3), before)
    print("Parse and judge per script, no process (ms; refused = unreadable scripts)")
    headers = ["parser on", "scripts", "median", "mean", "total", "refused", "both read: total"]
    h.print_table(headers, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
