"""Import cost: `import executor` in a fresh interpreter, against the flat layout and the floor.

What is measured: the wall time of a whole fresh `python -c ...` process, run
back to back (30 per side by default, in rounds whose order rotates), so
interpreter start-up is in every figure; the `python -c pass` side is that
floor, and "net" subtracts its median.

Sides:

- `floor`: `python -c pass`;
- `import executor`: the package as it is now;
- `from executor import Command, LocalExecutor`: what a local program needs;
- `flat layout`: `import executor` of the tree at `--baseline` (a git revision:
  by default the last commit of the flat `executor/_*.py` layout, which loaded
  every backend and bashlex up front), unpacked with `git archive`.

Each side runs once before it is timed, so every tree has its bytecode cached.
Target: `import executor` median <= 150 ms.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import _harness as h

TARGET = 0.150
ROOT = Path(__file__).resolve().parent.parent
# The last commit before the package was split into layer folders.
FLAT_LAYOUT = "d86c3a9"


def _side(code: str, path: Path) -> h.Batch:
    # Bytecode caching on, whatever the caller set: each tree compiles once.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = str(path)
    argv = [sys.executable, "-c", code]

    def batch(_workdir: str, count: int) -> list[float]:
        times = []
        for _ in range(count):
            started = time.perf_counter()
            subprocess.run(argv, env=env, check=True, cwd=path)
            times.append(time.perf_counter() - started)
        return times

    return batch


def _unpack(revision: str, into: Path) -> bool:
    """The package at `revision`, unpacked below `into`; False where git cannot give it."""
    try:
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", revision, "executor"],
            capture_output=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError) as error:
        print(f"flat layout side skipped: git archive {revision} failed ({error})")
        return False
    archive_path = into / "tree.tar"
    archive_path.write_bytes(archive)
    with tarfile.open(archive_path) as tar:
        tar.extractall(into, filter="data")
    return True


def main() -> None:
    parser = h.command_line(__doc__, "5 processes per side, as a smoke check")
    parser.add_argument("--baseline", default=FLAT_LAYOUT, help="git revision to compare with")
    args = parser.parse_args()
    count = 5 if args.quick else 30
    with tempfile.TemporaryDirectory() as scratch:
        sides = {
            "floor (python -c pass)": _side("pass", ROOT),
            "import executor": _side("import executor", ROOT),
            "from executor import Command, LocalExecutor": _side(
                "from executor import Command, LocalExecutor", ROOT
            ),
        }
        if _unpack(args.baseline, Path(scratch)):
            sides[f"flat layout ({args.baseline}): import executor"] = _side(
                "import executor", Path(scratch)
            )
        stats = h.interleaved(sides, "bench-import-", count=count, rounds=5, warmup=1)
    floor = stats["floor (python -c pass)"].median
    ours = stats["import executor"].median
    rows = [
        h.sample_row(name, s, h.fmt_ms(s.median - floor, 1), h.fmt_ratio(s.median, ours))
        for name, s in stats.items()
    ]
    print(f"python {sys.version.split()[0]}; wall time of a fresh process, bytecode cached")
    h.print_table(["side", "n", "median ms", "p99 ms", "net ms", "vs import executor"], rows)
    print(f"target import executor <= {TARGET * 1000:.0f} ms: {h.verdict(ours <= TARGET)}")


if __name__ == "__main__":
    main()
