"""Image builds: `build_image` against `docker build` (the CLI) on the same context.

The context holds 10,000 small files (1 KiB each, in 100 folders), half of
them left out by a `.dockerignore` of four patterns (an exclusion, a `**`
rule, a re-inclusion); the Dockerfile copies the context into a busybox
image (`FROM executor-test/busybox`, `COPY . /ctx`). Both sides build with
the engine's layer cache off (`no_cache=True`, `--no-cache`) and our digest
cache off (`cache=False`), through the classic builder (`DOCKER_BUILDKIT=0`
for the CLI), in rounds that alternate which side goes first. The time is
the whole build, from reading the context to the tagged image.

Target: ours <= 1.2x the CLI's median. Without an engine or the image the
script says so and exits 0.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _harness as h

from executor import DockerBuild, build_image

IMAGE = os.environ.get("EXECUTOR_DOCKER_BUSYBOX", "executor-test/busybox")
TARGET = 1.2


def make_context(root: Path, files: int) -> None:
    """`files` files of 1 KiB in 100 folders; the odd-numbered half is ignored."""
    block = b"x" * 1024
    for index in range(files):
        folder = root / f"d{index % 100:02d}"
        folder.mkdir(exist_ok=True)
        suffix = "skip" if index % 2 else "keep"
        (folder / f"f{index}.{suffix}").write_bytes(block)
    (root / "Dockerfile").write_text(f"FROM {IMAGE}\nCOPY . /ctx\n")
    (root / ".dockerignore").write_text("*.log\n**/*.skip\n!d00/f1.skip\nbuild/\n")


def cli_build(context: Path, tag: str) -> float:
    started = time.perf_counter()
    subprocess.run(
        ["docker", "build", "-q", "--no-cache", "--network", "none", "-t", tag, str(context)],
        check=True,
        capture_output=True,
        env={**os.environ, "DOCKER_BUILDKIT": "0"},
    )
    return time.perf_counter() - started


def remove_image(tag: str) -> None:
    subprocess.run(["docker", "rmi", "-f", tag], capture_output=True, check=False)


async def our_build(context: Path, tag: str) -> float:
    started = time.perf_counter()
    await build_image(DockerBuild(str(context), tag=tag, cache=False, no_cache=True))
    return time.perf_counter() - started


async def main() -> int:
    parser = h.command_line(__doc__, "a 1,000-file context, two rounds")
    args = parser.parse_args()
    problem = await h.engine_ready(IMAGE)
    if problem is not None:
        print(f"skipped: {problem}")
        return 0
    if shutil.which("docker") is None:
        print("skipped: no docker CLI to compare with")
        return 0
    files, rounds = (1_000, 2) if args.quick else (10_000, 5)
    times: dict[str, list[float]] = {"ours": [], "docker build": []}
    with tempfile.TemporaryDirectory(prefix="bench-docker-build-") as scratch:
        context = Path(scratch)
        make_context(context, files)
        tag = f"executor-bench-build:{os.getpid()}"
        try:
            for turn in range(rounds + 1):
                for side in h.rotated(list(times), turn):
                    if side == "ours":
                        took = await our_build(context, tag)
                    else:
                        took = cli_build(context, tag)
                    if turn:  # the first round warms the engine and the page cache
                        times[side].append(took)
        finally:
            remove_image(tag)
    stats = {side: h.Stats(values) for side, values in times.items()}
    print(
        f"build of a {files}-file context, half of it ignored, no cache, {rounds} builds per side"
    )
    cli = stats["docker build"].median
    h.print_table(
        ["side", "median ms", "max ms", "vs CLI"],
        [
            [name, h.fmt_ms(s.median, 1), h.fmt_ms(s.maximum, 1), h.fmt_ratio(s.median, cli)]
            for name, s in stats.items()
        ],
    )
    ratio = stats["ours"].median / cli
    print(f"target: ours <= {TARGET}x docker build: {ratio:.2f}x {h.verdict(ratio <= TARGET)}")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
