"""The log tailer: lines per second through a filter, and how soon a written line arrives.

What is measured, in one run:

- Throughput: a log of JSON lines and one of nginx combined lines, read to
  the end through a filter (JSON: level >= error and the regex `timeout`,
  as the seed's example; combined: level >= error, that is status 5xx, and
  the regex `checkout`), in lines of the file per second. Sides:
  - ours: `LogTailerTool` on a `LocalExecutor`, through a `StreamingToolSession`,
    each matching entry parsed into a `LogEntry`;
  - `tail | grep`: `tail -n +1 FILE | grep -E REGEX | wc -l`, which only finds
    the lines with the regex and parses nothing (the floor for any tool);
  - a plain Python loop: `for line in open(FILE)`, the regex searched, then
    the line parsed (`json.loads`, or the combined regex) and its level
    checked, as one would write it by hand.
- Follow latency: a writer process appends one JSON line every 5 ms, each
  holding `time.monotonic()` at its write; ours follows the file (inotify)
  and stamps each entry on arrival. CLOCK_MONOTONIC is one clock for the
  machine, so arrival minus stamp is the delay: median, p99 and maximum.

Targets: ours >= 200,000 lines/s for JSON; follow latency p99 <= 100 ms.
"""

from __future__ import annotations

import json
import os
import random
import re
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _harness as h
import anyio

from executor import DefaultContext, LocalExecutor, LogTailerTool, StreamingToolSession

TARGET_RATE = 200_000
TARGET_P99 = 0.100

LEVELS = ("debug", "info", "info", "info", "info", "warning", "error")
PATHS = ("/api/items", "/api/checkout", "/static/app.js", "/login", "/api/search")


def write_json(path: Path, lines: int) -> None:
    """A JSON log: mostly info, some errors, a timeout now and then."""
    rng = random.Random(7)
    with path.open("w") as log:
        for n in range(lines):
            level = rng.choice(LEVELS)
            message = "upstream timeout" if n % 40 == 0 else "request handled"
            record = {
                "ts": f"2024-05-01T10:{n // 60 % 60:02d}:{n % 60:02d}.{n % 1000:03d}Z",
                "level": level,
                "msg": message,
                "http": {"path": rng.choice(PATHS), "status": 200 if level != "error" else 502},
                "duration_ms": rng.randrange(1, 900),
            }
            log.write(json.dumps(record) + "\n")


def write_combined(path: Path, lines: int) -> None:
    """An nginx access log in the combined format; one request in ten fails."""
    rng = random.Random(11)
    with path.open("w") as log:
        for n in range(lines):
            status = rng.choice((200, 200, 200, 200, 304, 404, 200, 200, 500, 502))
            when = f"01/May/2024:10:{n // 60 % 60:02d}:{n % 60:02d} +0000"
            log.write(
                f"10.0.{n % 256}.{n % 200} - - [{when}] "
                f'"GET {rng.choice(PATHS)}?q={n} HTTP/1.1" {status} {rng.randrange(100, 9000)} '
                f'"https://example.com/" "Mozilla/5.0 (X11; Linux x86_64) Firefox/125.0"\n'
            )


FILTERS = {
    "json": {"level": "error", "pattern": "timeout"},
    "combined": {"level": "error", "pattern": "checkout"},
}
_COMBINED = re.compile(
    r'(\S+) (\S+) (\S+) \[([^\]]+)\] "([^"]*)" (\d{3}) (\d+|-) "([^"]*)" "([^"]*)"'
)


def ours(folder: Path, name: str, format: str) -> tuple[float, int]:
    """Seconds to read the file through the tool, and the entries it matched."""

    async def main() -> tuple[float, int]:
        async with LocalExecutor(folder) as ex:
            tool = LogTailerTool(DefaultContext.from_executor(ex))
            request = tool.parse_input({"path": name, "format": format, "filter": FILTERS[format]})
            started = time.perf_counter()
            count = 0
            async with StreamingToolSession(tool, request) as session:
                async for _ in session:
                    count += 1
                await session.finalize()
            return time.perf_counter() - started, count

    return anyio.run(main)


def tail_grep(folder: Path, name: str, format: str) -> tuple[float, int]:
    """`tail -n +1 | grep -E | wc -l`: finds the regex's lines, parses nothing."""
    pattern = FILTERS[format]["pattern"]
    script = f"tail -n +1 {shlex.quote(name)} | grep -E {shlex.quote(pattern)} | wc -l"
    started = time.perf_counter()
    output = subprocess.run(
        ["sh", "-c", script], cwd=folder, capture_output=True, check=True, text=True
    )
    return time.perf_counter() - started, int(output.stdout.strip())


def python_loop(folder: Path, name: str, format: str) -> tuple[float, int]:
    """A loop by hand: the regex, then the line parsed and its level checked."""
    pattern = re.compile(FILTERS[format]["pattern"])
    started = time.perf_counter()
    count = 0
    with open(folder / name, encoding="utf-8") as log:
        for line in log:
            if pattern.search(line) is None:
                continue
            if format == "json":
                if json.loads(line).get("level") in ("error", "critical", "fatal"):
                    count += 1
            else:
                found = _COMBINED.match(line)
                if found is not None and int(found.group(6)) >= 500:
                    count += 1
    return time.perf_counter() - started, count


WRITER = """\
import json, sys, time
path, count, interval = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
time.sleep(0.3)
for n in range(count):
    with open(path, "a") as log:
        log.write(json.dumps({"level": "info", "msg": "tick", "t": time.monotonic()}) + "\\n")
    time.sleep(interval)
"""


def follow_latency(folder: Path, count: int) -> list[float]:
    """Delays from a writer's line to its entry, following the file."""
    path = folder / "follow.log"
    path.write_text("")
    delays: list[float] = []

    async def main() -> None:
        async with LocalExecutor(folder) as ex:
            tool = LogTailerTool(DefaultContext.from_executor(ex))
            request = tool.parse_input(
                {"path": "follow.log", "follow": True, "format": "json", "max_entries": count}
            )
            async with StreamingToolSession(tool, request) as session:
                command = [sys.executable, "-c", WRITER, str(path), str(count), "0.005"]
                async with await anyio.open_process(command, stdout=None, stderr=None) as writer:
                    async for entry in session:
                        delays.append(time.monotonic() - float(entry.fields["t"]))
                    await session.finalize()
                    await writer.wait()

    anyio.run(main)
    return delays


def main(argv: list[str] | None = None) -> None:
    """Run both measurements and print their tables."""
    scale = h.per_side(__doc__, argv, quick=20_000, full=500_000)
    rounds = scale.pick(1, 3)
    with tempfile.TemporaryDirectory(prefix="bench-log-tailer-") as workdir:
        folder = Path(workdir)
        write_json(folder / "app.json", scale.count)
        write_combined(folder / "access.log", scale.count)
        sides = {"ours": ours, "tail | grep": tail_grep, "python loop": python_loop}
        rows = []
        rates: dict[tuple[str, str], float] = {}
        for format, name in (("json", "app.json"), ("combined", "access.log")):
            best: dict[str, float] = {}
            counts: dict[str, int] = {}
            for turn in range(rounds):
                for side in h.rotated(list(sides), turn):
                    seconds, matched = sides[side](folder, name, format)
                    best[side] = min(best.get(side, float("inf")), seconds)
                    counts[side] = matched
            for side in sides:
                rate = scale.count / best[side]
                rates[(format, side)] = rate
                rows.append(
                    [
                        f"{format}: {side}",
                        f"{rate:,.0f}",
                        counts[side],
                        h.fmt_ratio(rates[(format, "ours")], rate) if side != "ours" else "",
                    ]
                )
        print(
            f"Throughput: {scale.count:,} lines per file, best of {rounds}; "
            f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
        )
        print("(tail | grep matches the regex only, so it counts more lines than the level allows)")
        h.print_table(["side", "lines/s", "matched", "ours vs side"], rows)
        met = rates[("json", "ours")] >= TARGET_RATE
        print(f"Target: ours >= {TARGET_RATE:,} lines/s for JSON: {h.verdict(met)}")
        print()
        delays = follow_latency(folder, scale.pick(40, 400))
    stats = h.Stats(delays)
    print("Follow latency: a line appended every 5 ms by another process, to its entry")
    h.print_table(
        ["side", "lines", "median ms", "p99 ms", "max ms"],
        [h.sample_row("ours (inotify)", stats, h.fmt_ms(stats.maximum))],
    )
    print(f"Target: p99 <= {TARGET_P99 * 1000:.0f} ms: {h.verdict(stats.p99 <= TARGET_P99)}")


if __name__ == "__main__":
    main()
