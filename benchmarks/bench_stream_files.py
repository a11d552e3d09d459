"""Figure: `stream_files` over a tree of small files, against `rg --files`.

What is measured: the wall time to list a whole generated tree (50,000 small
text files by default, in nested folders, with a git repository's .gitignore
files, hidden entries and binary files) with a warm page cache:

- `ours (asyncio)` / `ours (trio)`: `stream_text_files`, the walker behind
  `LocalExecutor.stream_files`, consumed to the end: every kept file is
  listed, read, checked for NUL bytes and decoded (past its first 2048
  files, a share of them by its forked reader process, on the other core,
  when one is free);
- `ours, one process`: the same with `fork_after=None`, all in this process;
- `before (asyncio)`: the walker as it was before the forked reader (commit
  `BEFORE`, loaded from git as a module of its own; left out when git cannot
  show it), to compare in the same run;
- `forked, earlier (asyncio)`: likewise, the walker with the first forked
  reader (commit `EARLIER`, its reader loaded from git with it);
- `rg --files`: ripgrep listing the same tree (a subprocess whose output is
  only counted), which applies the same ignore rules but reads no file;
- `os.walk + read`: for reference, a plain walk reading every file, with no
  ignore rules at all;
- `rg -l '' (reads all)`: ripgrep reading every file it lists (a match on
  each), as `stream_files` must; it uses every core, where the Python walk
  runs in one thread;
- `read floor`: for reference, only the file reads `stream_files` makes
  (open relative to its folder's descriptor, one `pread`, close, then the
  NUL check and the decoding, of each kept file, from a list made
  beforehand): the part no Python walker that reads every file can avoid.

Wall time is the measure; the `cpu` column (user + system time of all
threads, and of the reaped child processes: rg's, and our forked reader)
tells a slow side from a crowded machine.

Each side runs once per round, in an order that rotates from round to round
so that the machine's noise (2 shared cores) falls on every side alike.

Target: ours (asyncio) median <= 2.5x `rg --files`.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from types import ModuleType

import _harness as h
import anyio

from executor._files.walk import iter_text_files, stream_text_files

TARGET = 2.5
# The last commit with the walker that read every file in this process.
BEFORE = "acbe0b8920e440ef6208863bd436245e34a1d688"
# The last commit with the first forked reader: runs of `LoadedFile`s made in
# the worker thread, and `send_fds`, whose flags Python 3.11 drops.
EARLIER = "b69a9a7dcc99e586027fd705b2a40db762678cc5"
FILES_PER_FOLDER = 40
FOLDERS_PER_FOLDER = 8


def build_tree(root: str, files: int) -> None:
    """Write `files` small files below `root`: a git repository with ignores, hidden and binaries.

    Folders of `FILES_PER_FOLDER` files, `FOLDERS_PER_FOLDER` subfolders each,
    breadth first: about 1,250 folders four levels deep for 50,000 files.
    """
    os.mkdir(os.path.join(root, ".git"))
    with open(os.path.join(root, ".gitignore"), "w") as f:
        f.write("*.log\nbuild/\n/tmp/\n")
    text = "".join(f"line {n}: some ordinary source text\n" for n in range(6)).encode()
    binary = b"\x00\x01binary" * 20
    needed = -(-files // FILES_PER_FOLDER)
    folders = [root]
    for parent in folders:
        if len(folders) >= needed:
            break
        for index in range(min(FOLDERS_PER_FOLDER, needed - len(folders))):
            child = os.path.join(parent, f"pkg{index}")
            os.mkdir(child)
            folders.append(child)
    written = 0
    for number, folder in enumerate(folders):
        if number % 10 == 5:
            with open(os.path.join(folder, ".gitignore"), "w") as f:
                f.write("*.tmp\n!keep.tmp\n")
        if number % 7 == 3:
            os.mkdir(os.path.join(folder, ".hidden"))
            with open(os.path.join(folder, ".hidden", "secret.txt"), "wb") as f:
                f.write(text)
        for index in range(min(FILES_PER_FOLDER, files - written)):
            if index % 25 == 0:
                name, data = f"blob{index}.bin", binary
            elif index % 20 == 1:
                name, data = f"run{index}.log", text
            elif index % 30 == 2:
                name, data = f".dot{index}", text
            elif index % 15 == 3:
                name, data = f"scratch{index}.tmp", text
            else:
                name, data = f"mod{index}.py", text
            with open(os.path.join(folder, name), "wb") as f:
                f.write(data)
            written += 1


# A side lists the tree at the path it is given, and returns how many files it
# found with the wall and CPU seconds that took.
Side = Callable[[str], tuple[int, float, float]]


def timed(count: Callable[[], int]) -> tuple[int, float, float]:
    cpu = cpu_seconds()
    started = time.perf_counter()
    found = count()
    return found, time.perf_counter() - started, cpu_seconds() - cpu


def ours(backend: str, *, fork: bool = True, module: ModuleType | None = None) -> Side:
    """`stream_text_files` (of `module`, by default this tree's) on `backend`."""

    def files(root: str) -> AsyncIterator[object]:
        if module is not None:
            walk: AsyncIterator[object] = module.stream_text_files(root, "", extensions=None)
            return walk
        if fork:
            return stream_text_files(root, "", extensions=None)
        return stream_text_files(root, "", extensions=None, fork_after=None)

    def run(root: str) -> tuple[int, float, float]:
        async def main() -> tuple[int, float, float]:
            # Timed inside the event loop: starting a loop is not stream_files' cost.
            cpu = cpu_seconds()
            started = time.perf_counter()
            count = 0
            async for _ in files(root):
                count += 1
            return count, time.perf_counter() - started, cpu_seconds() - cpu

        return anyio.run(main, backend=backend)

    return run


def walker_at(commit: str) -> ModuleType | None:
    """The walk module as of `commit`, with the reader of that commit; None when git cannot show it.

    The walk imports its reader by name: the old reader stands in for it in
    `sys.modules` while the old walk is loaded, so that each keeps the other.
    """
    here = os.path.dirname(os.path.abspath(__file__))

    def show(path: str) -> bytes:
        return subprocess.run(
            ["git", "-C", here, "show", f"{commit}:{path}"], capture_output=True, check=True
        ).stdout

    def load(source: bytes, name: str) -> ModuleType | None:
        with tempfile.NamedTemporaryFile(suffix=".py") as file:
            file.write(source)
            file.flush()
            spec = importlib.util.spec_from_file_location(name, file.name)
            assert spec is not None
            assert spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            try:
                spec.loader.exec_module(module)
            except Exception:  # Its imports from this tree may no longer exist.
                return None
        return module

    try:
        walk_source = show("executor/_files/walk.py")
    except (OSError, subprocess.CalledProcessError):
        return None
    try:
        reader_source: bytes | None = show("executor/_files/reader.py")
    except subprocess.CalledProcessError:
        reader_source = None  # Before the forked reader.
    ours_reader = sys.modules.get("executor._files.reader")
    try:
        if reader_source is not None:
            reader = load(reader_source, f"_reader_{commit[:7]}")
            if reader is None:
                return None
            sys.modules["executor._files.reader"] = reader
        return load(walk_source, f"_walk_{commit[:7]}")
    finally:
        if ours_reader is not None:
            sys.modules["executor._files.reader"] = ours_reader


RG = shutil.which("rg")
BASELINE = "rg --files"


def ripgrep(root: str) -> tuple[int, float, float]:
    rg = RG
    assert rg is not None

    def count() -> int:
        listed = subprocess.run(
            [rg, "--files", "--no-config", root], stdout=subprocess.PIPE, check=True
        ).stdout
        return listed.count(b"\n")

    return timed(count)


READING = "rg -l '' (reads all)"
BEFORE_SIDE = "before (asyncio)"
EARLIER_SIDE = "forked, earlier (asyncio)"


def ripgrep_reading(root: str) -> tuple[int, float, float]:
    """Run `rg -l`, which reads every file it lists, as stream_files must (each one matches)."""
    rg = RG
    assert rg is not None

    def count() -> int:
        listed = subprocess.run(
            [rg, "-l", "--no-config", "--no-mmap", "", root], stdout=subprocess.PIPE, check=True
        ).stdout
        return listed.count(b"\n")

    return timed(count)


def walk_and_read(root: str) -> tuple[int, float, float]:
    def count() -> int:
        found = 0
        for folder, _, names in os.walk(root):
            for name in names:
                with open(os.path.join(folder, name), "rb") as f:
                    f.read()
                found += 1
        return found

    return timed(count)


def read_floor(root: str) -> Side:
    """Only the file reads `stream_files` makes, of the files it keeps.

    Each folder is opened once, then each of its files is opened relative to
    it, read with one `pread` (all these files are shorter than the walk's
    first read), closed, checked for NUL and decoded. No listing, no ignore
    rules, no thread: what the syscalls alone cost from Python, the floor
    under any walker that reads every file.
    """
    by_folder: dict[str, list[str]] = {}
    for path, _ in iter_text_files(root, extensions=None):
        folder, _, name = path.rpartition("/")
        by_folder.setdefault(os.path.join(root, folder), []).append(name)
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    folder_flags = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC

    def count() -> int:
        found = 0
        for folder, names in by_folder.items():
            dir_fd = os.open(folder, folder_flags)
            try:
                for name in names:
                    fd = os.open(name, flags, dir_fd=dir_fd)
                    try:
                        data = os.pread(fd, 1 << 16, 0)
                    finally:
                        os.close(fd)
                    if 0 not in data:
                        data.decode("utf-8", "replace")
                        found += 1
            finally:
                os.close(dir_fd)
        return found

    return lambda _: timed(count)


def cpu_seconds() -> float:
    """CPU time (user + system) of this process's threads and its reaped children so far."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def measure(
    files: int, rounds: int
) -> tuple[dict[str, h.Stats], dict[str, h.Stats], dict[str, int]]:
    before = walker_at(BEFORE)
    earlier = walker_at(EARLIER)
    names = [
        "ours (asyncio)",
        "ours (trio)",
        "ours, one process",
        BEFORE_SIDE,
        EARLIER_SIDE,
        BASELINE,
        READING,
        "os.walk + read",
        "read floor",
    ]
    if before is None:
        names.remove(BEFORE_SIDE)
    if earlier is None:
        names.remove(EARLIER_SIDE)
    if RG is None:
        names.remove(BASELINE)
        names.remove(READING)
    walls: dict[str, list[float]] = {name: [] for name in names}
    cpus: dict[str, list[float]] = {name: [] for name in names}
    counts: dict[str, int] = {}
    with tempfile.TemporaryDirectory(prefix="bench-stream-files-") as root:
        build_tree(root, files)
        sides: dict[str, Side] = {
            "ours (asyncio)": ours("asyncio"),
            "ours (trio)": ours("trio"),
            "ours, one process": ours("asyncio", fork=False),
            BEFORE_SIDE: ours("asyncio", module=before),
            EARLIER_SIDE: ours("asyncio", module=earlier),
            BASELINE: ripgrep,
            READING: ripgrep_reading,
            "os.walk + read": walk_and_read,
            "read floor": read_floor(root),
        }
        for name in names:  # Warm the page cache and the code paths.
            counts[name] = sides[name](root)[0]
        for index in range(rounds):
            for name in h.rotated(names, index):
                _, wall, cpu = sides[name](root)
                walls[name].append(wall)
                cpus[name].append(cpu)
    return (
        {name: h.Stats(values) for name, values in walls.items()},
        {name: h.Stats(values) for name, values in cpus.items()},
        counts,
    )


def report(
    walls: dict[str, h.Stats], cpus: dict[str, h.Stats], counts: dict[str, int], files: int
) -> bool:
    rg = walls.get(BASELINE, h.Stats([]))
    rows = [
        [
            name,
            counts[name],
            h.fmt_ms(s.median, 1),
            h.fmt_ms(s.minimum, 1),
            h.fmt_ms(s.maximum, 1),
            h.fmt_ratio(s.median, rg.median),
            h.fmt_ms(cpus[name].median, 1),
        ]
        for name, s in walls.items()
    ]
    print(f"stream_files over {files} small files, warm cache (ms per whole tree)")
    h.print_table(["side", "files", "median", "min", "max", "med/rg", "cpu"], rows)
    if RG is None:
        print("target: not checked, rg is not installed (apt-get install ripgrep)")
        return False
    ratio = walls["ours (asyncio)"].median / rg.median
    met = ratio <= TARGET
    print(
        f"target: ours (asyncio) median <= {TARGET:g}x rg --files: {ratio:.2f}x -> {h.verdict(met)}"
    )
    return met


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--files", type=int, default=50_000, help="files in the tree (50000)")
    parser.add_argument("--rounds", type=int, default=7, help="timed runs per side (7)")
    parser.add_argument("--quick", action="store_true", help="2000 files, 3 rounds: a smoke check")
    args = parser.parse_args(argv)
    files = 2000 if args.quick else args.files
    rounds = 3 if args.quick else args.rounds
    walls, cpus, counts = measure(files, rounds)
    report(walls, cpus, counts, files)
    return 0


if __name__ == "__main__":
    sys.exit(main())
