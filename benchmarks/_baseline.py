"""The code before, as baselines: files of the package at pinned commits.

The kill, spawn, streaming and line-latency benchmarks compare the current
code with the package as it was before commands got a supervisor
(`BASELINE_COMMIT`), in the same run: `git archive` writes that commit's
`executor/` into a temporary folder, and a worker interpreter imports it from
there (`PYTHONPATH`). The policy benchmark times the shell parser of before
(`BASHLEX_PARSER_COMMIT`) beside today's, script by script in one process:
`load_module` loads that one file from the archived tree into the running
interpreter. Where the repository or the commit is not at hand (a shallow
clone, an unpacked release), the baseline is left out and said so.
"""

from __future__ import annotations

import atexit
import functools
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import _harness as h

__all__ = [
    "BASELINE_COMMIT",
    "BASHLEX_PARSER_COMMIT",
    "RUN_PATHS_BASE_COMMIT",
    "baseline_tree",
    "load_module",
    "run_worker_in",
]

# The code before the supervisor: the last commit before dc6fe87 brought it in.
BASELINE_COMMIT = "541d7319b1b30216de0418d99bfeac94586ce135"
# The shell parser before tree-sitter-bash: the last commit whose
# `executor/_shell/parser.py` is bashlex behind a lexer of its own (dc6fe87,
# its child, moved the policies to tree-sitter-bash; that file is the one
# 2f96c22 last changed). The same commit as `BASELINE_COMMIT` today, pinned on
# its own so that moving one baseline leaves the other where it is.
BASHLEX_PARSER_COMMIT = "541d7319b1b30216de0418d99bfeac94586ce135"
# The code before the run interface (one command's start, output, drain, kill
# and wait behind a single run interface every backend implements): the
# commit `bench_run_paths.py` compares the working tree with.
RUN_PATHS_BASE_COMMIT = "8a180271dfaef7cad097adc32468c9de455e3e7d"
ROOT = Path(__file__).resolve().parent.parent


@functools.cache
def baseline_tree(commit: str = BASELINE_COMMIT) -> str | None:
    """A folder holding `commit`'s `executor` package, or `None` when it cannot be had."""
    folder = tempfile.mkdtemp(prefix="executor-baseline-")
    atexit.register(shutil.rmtree, folder, True)
    try:
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", commit, "executor"],
            capture_output=True,
            check=True,
        )
        subprocess.run(["tar", "-x", "-C", folder], input=archive.stdout, check=True)
    except (OSError, subprocess.CalledProcessError):
        print(f"(no baseline: commit {commit[:12]} is not in this clone)")
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


def load_module(tree: str, path: str, name: str) -> ModuleType:
    """The file `path` of the archived `tree`, loaded into this interpreter as the module `name`.

    Its own imports resolve here: `executor` is the current package, not the
    archived one.
    """
    spec = importlib.util.spec_from_file_location(name, os.path.join(tree, path))
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def imported_from() -> str:
    """Where this interpreter's `executor` comes from (a worker's check of its side)."""
    import executor

    return os.path.dirname(os.path.dirname(os.path.abspath(executor.__file__ or "")))


assert sys.version_info >= (3, 11)
