"""The code before the supervisor, as a baseline: a copy of the package at a pinned commit.

The kill, spawn, streaming and line-latency benchmarks compare the current
code with the package as it was before commands got a supervisor
(`BASELINE_COMMIT`), in the same run: `git archive` writes that commit's
`executor/` into a temporary folder, and a worker interpreter imports it from
there (`PYTHONPATH`). Where the repository or the commit is not at hand (a
shallow clone, an unpacked release), the baseline is left out and said so.
"""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import _harness as h

__all__ = ["BASELINE_COMMIT", "baseline_tree", "run_worker_in"]

BASELINE_COMMIT = "541d7319b1b30216de0418d99bfeac94586ce135"
ROOT = Path(__file__).resolve().parent.parent


@functools.cache
def baseline_tree() -> str | None:
    """A folder holding the baseline's `executor` package, or `None` when it cannot be had."""
    folder = tempfile.mkdtemp(prefix="executor-baseline-")
    atexit.register(shutil.rmtree, folder, True)
    try:
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", BASELINE_COMMIT, "executor"],
            capture_output=True,
            check=True,
        )
        subprocess.run(["tar", "-x", "-C", folder], input=archive.stdout, check=True)
    except (OSError, subprocess.CalledProcessError):
        print(f"(no baseline: commit {BASELINE_COMMIT[:12]} is not in this clone)")
        return None
    return folder


def run_worker_in(
    tree: str | None, script: str, args: Sequence[str], *, timeout: float = 300
) -> dict[str, Any]:
    """`_harness.run_worker`, with `executor` imported from `tree` (the current code if `None`)."""
    if tree is None:
        return h.run_worker(script, args, timeout=timeout)
    saved = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = tree + (os.pathsep + saved if saved else "")
    try:
        return h.run_worker(script, args, timeout=timeout)
    finally:
        if saved is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = saved


def imported_from() -> str:
    """Where this interpreter's `executor` comes from (a worker's check of its side)."""
    import executor

    return os.path.dirname(os.path.dirname(os.path.abspath(executor.__file__ or "")))


assert sys.version_info >= (3, 11)
