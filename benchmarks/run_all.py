"""Smoke-check every benchmark: run each `bench_*.py` here with `--quick`, fail if any crashes.

CI calls this (`python benchmarks/run_all.py`). With `--quick` each script
shrinks its sizes so the whole set finishes in seconds; the figures it prints
are then only a sign of life, not measurements (see README.md for those).
Timing targets are reported, never asserted: a script fails only by exiting
non-zero, crashing or running past its time limit.

Pass `--full` to run the real sizes instead (minutes), and script names to
run only those.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
QUICK_LIMIT = 50.0
FULL_LIMIT = 1800.0


def scripts(names: list[str]) -> list[Path]:
    found = sorted(HERE.glob("bench_*.py"))
    if names:
        wanted = {Path(name).stem for name in names}
        found = [path for path in found if path.stem in wanted]
        missing = wanted - {path.stem for path in found}
        if missing:
            raise SystemExit(f"no such benchmark: {', '.join(sorted(missing))}")
    return found


def run(script: Path, *, quick: bool) -> tuple[bool, float]:
    """Run one script, echoing its output; return (succeeded, seconds)."""
    command = [sys.executable, str(script), *(["--quick"] if quick else [])]
    print(f"=== {script.name} {'--quick' if quick else ''}".rstrip(), flush=True)
    started = time.monotonic()
    try:
        completed = subprocess.run(
            command,
            cwd=HERE.parent,
            timeout=QUICK_LIMIT if quick else FULL_LIMIT,
            check=False,
            stdin=subprocess.DEVNULL,
            env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
        )
    except subprocess.TimeoutExpired:
        # subprocess.run kills the script (and waits for it) before raising.
        print(f"!!! {script.name}: timed out", flush=True)
        return False, time.monotonic() - started
    elapsed = time.monotonic() - started
    if completed.returncode != 0:
        print(f"!!! {script.name}: exit code {completed.returncode}", flush=True)
        return False, elapsed
    return True, elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--full", action="store_true", help="real sizes instead of --quick")
    parser.add_argument("names", nargs="*", help="run only these (e.g. bench_spawn)")
    args = parser.parse_args(argv)
    results = [(path.name, *run(path, quick=not args.full)) for path in scripts(args.names)]
    print()
    for name, ok, elapsed in results:
        print(f"{'ok  ' if ok else 'FAIL'} {name:28} {elapsed:6.1f} s")
    failed = [name for name, ok, _ in results if not ok]
    total = sum(elapsed for _, _, elapsed in results)
    print(f"{len(results) - len(failed)} passed, {len(failed)} failed in {total:.1f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
