"""Figure 3: streaming 1 GiB out of a child through a byte-counting sink: MB/s and peak RSS.

What is measured: a tool that floods its output (a build log, `cat` of a huge
file). The child writes SIZE zero bytes; the consumer only counts bytes, so
the figure is the cost of moving output from the pipe into Python chunks.

The child is `dd if=/dev/zero bs=1M` by default. `head -c SIZE /dev/zero`
(`--producer head`) writes 8 KiB per system call: a reader that wakes as
soon as data is there (raw asyncio) takes a few writes per wakeup, and the
wakeups, not the pipe, set its pace. Ours goes on reading, with no trip
through the event loop, until the pipe is empty or 256 KiB have come, so
each chunk (and each wakeup) carries a quarter MiB whatever the producer's
write size; a pipe holding more (`dd`'s 1 MiB writes) is read whole.
Ours keeps at most 1 MiB of stored output (`output_limit`), so memory must
stay flat however much flows. Throughput is bytes / wall time from spawn to
return, in MB/s (10^6 bytes); memory is the peak RSS (`ru_maxrss`) above the
RSS just before the run.

Each repetition of each side runs in a fresh interpreter (so the peak is its
own), importing the same modules; sides alternate repetition by repetition.
Ours times the streaming command alone: its executor is built, and has run
one `true`, before (the supervisor's start is paid once per executor).

Sides:
- `asyncio raw`: `create_subprocess_shell` with pipes and a
  `await proc.stdout.read(65536)` loop, as a typical streaming user writes it;
- `anyio.open_process`: `async for chunk in proc.stdout` (asyncio backend);
- ours: `LocalExecutor(output_limit=1 MiB).exec_cmd_streaming(cmd, sink)`, on
  asyncio and trio; run as root (as here and in CI) the executor enlarges its
  pipes to 1 MiB at the start, so `ours (asyncio, 64K pipe)` also shows it
  as a non-root user runs it: the pipes start at the default 64 KiB, and the
  executor enlarges one once it floods (a read found it full), as the user's
  pipe budget allows; `ours (asyncio, 64K fixed)` keeps 64 KiB throughout
  (a user whose budget is spent);
- `thread readv (ref)`: a reference ceiling for Python, a plain thread doing
  blocking `os.readv` into one reused 1 MiB bytearray (default pipe size).

More sides: `baseline (asyncio)` is the reader before this change (the code
at `_baseline.BASELINE_COMMIT`: FIONREAD-sized `os.read` calls, the pipe
added to and removed from epoll at every wait); `ours (asyncio, defaults)` is
`LocalExecutor()` with nothing set (a streamed command keeps
`stream_output_limit`, 4 MiB, of stored output); `producer |
cat (ref)` is the pipe's own limit: the producer into `cat >/dev/null`;
`head | cat (ref)` is the measure of that limit the targets name: `head -c`
into `cat`, whatever the producer (with `dd`, `cat` reads 1 MiB writes and
may go faster than any reader that must copy into new `bytes`).

Targets: ours (asyncio), with 1 MiB pipes and from 64 KiB ones, >= 1.5x raw
asyncio and >= 0.75x `head | cat`; RSS growth at the default settings <= 8 MiB.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

import _baseline
import _harness as h
import anyio

import executor._local.process
from executor import Chunk, Command, LocalExecutor

TARGET = 1.5
PIPE_TARGET = 0.75
SIDES = [
    "asyncio raw",
    "anyio.open_process (asyncio)",
    "baseline (asyncio)",
    "ours (asyncio)",
    "ours (asyncio, 64K pipe)",
    "ours (asyncio, 64K fixed)",
    "ours (asyncio, defaults)",
    "ours (trio)",
    "thread readv (ref)",
    "producer | cat (ref)",
    "head | cat (ref)",
]
BEFORE = "baseline (asyncio)"
PIPE = "producer | cat (ref)"
# The measure of the pipe's limit: `head -c` into `cat`, whatever the producer.
HEAD_PIPE = "head | cat (ref)"
BASELINE = "asyncio raw"
ANYIO = "anyio.open_process (asyncio)"
OURS = "ours (asyncio)"
REFERENCE = "thread readv (ref)"
OUTPUT_LIMIT = h.MIB
READ_SIZE = 1 << 16
PRODUCERS = {
    "dd": "dd if=/dev/zero bs=1M count={size} iflag=count_bytes status=none",
    "head": "head -c {size} /dev/zero",
}


def _asyncio_raw(workdir: str, script: str) -> int:
    async def main() -> int:
        process = await asyncio.create_subprocess_shell(
            script, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=workdir
        )
        assert process.stdout is not None
        total = 0
        while chunk := await process.stdout.read(READ_SIZE):
            total += len(chunk)
        await process.wait()
        return total

    return asyncio.run(main())


def _anyio_open_process(workdir: str, script: str) -> int:
    async def main() -> int:
        total = 0
        async with await anyio.open_process(script, cwd=workdir) as process:
            assert process.stdout is not None
            async for chunk in process.stdout:
                total += len(chunk)
        return total

    return anyio.run(main, backend="asyncio")


# What a side timed itself (the streaming command alone), if it did.
TIMED: dict[str, float] = {}


def _ours(
    backend: str,
    *,
    small_pipe: bool = False,
    fixed_pipe: bool = False,
    limit: int | None = OUTPUT_LIMIT,
) -> Callable[[str, str], int]:
    def run(workdir: str, script: str) -> int:
        total = 0
        if small_pipe:
            # As a non-root user runs it: only root's pipes are enlarged at the
            # start; a user's are enlarged once they flood (within the user's
            # pipe budget), and with `fixed_pipe` not at all (the budget spent).
            for flag, value in (("_enlarge_pipes", False), ("_grow_pipes", not fixed_pipe)):
                if not hasattr(executor._local.process, flag):
                    raise RuntimeError(f"executor._local.process.{flag} is gone: update this side")
                setattr(executor._local.process, flag, value)

        def sink(chunk: Chunk) -> None:
            nonlocal total
            total += len(chunk.data)

        async def main() -> None:
            options = {} if limit is None else {"output_limit": limit}
            async with LocalExecutor(workdir, **options) as ex:  # type: ignore[arg-type]
                # The executor's start (its supervisor, an interpreter of its
                # own) is paid once per executor, not per command: not timed.
                await ex.exec_cmd(Command.exec(["true"]))
                TIMED["wall"], TIMED["cpu"] = time.perf_counter(), h.cpu_seconds()
                output = await ex.exec_cmd_streaming(Command.shell(script), sink)
                TIMED["wall"] = time.perf_counter() - TIMED["wall"]
                TIMED["cpu"] = h.cpu_seconds() - TIMED["cpu"]
            assert output.truncated or limit is None or total <= limit

        anyio.run(main, backend=backend)
        return total

    return run


def _thread_readv(workdir: str, script: str) -> int:
    process = subprocess.Popen(script, shell=True, stdout=subprocess.PIPE, cwd=workdir)
    assert process.stdout is not None
    fd = process.stdout.fileno()
    total = 0

    def reader() -> None:
        nonlocal total
        buffer = bytearray(h.MIB)
        while size := os.readv(fd, (buffer,)):
            total += size

    thread = threading.Thread(target=reader)
    thread.start()
    thread.join()
    process.stdout.close()
    process.wait()
    return total


def _pipe_to_cat(workdir: str, script: str) -> int:
    # The pipe's own limit: the producer into `cat`, which writes to /dev/null.
    subprocess.run(f"{script} | cat >/dev/null", shell=True, cwd=workdir, check=True)
    return -1


RUNNERS: dict[str, Callable[[str, str], int]] = {
    "asyncio raw": _asyncio_raw,
    "anyio.open_process (asyncio)": _anyio_open_process,
    "baseline (asyncio)": _ours("asyncio"),
    "ours (asyncio)": _ours("asyncio"),
    "ours (asyncio, defaults)": _ours("asyncio", limit=None),
    "producer | cat (ref)": _pipe_to_cat,
    "head | cat (ref)": _pipe_to_cat,  # given `head`'s script whatever the producer
    "ours (asyncio, 64K pipe)": _ours("asyncio", small_pipe=True),
    "ours (asyncio, 64K fixed)": _ours("asyncio", small_pipe=True, fixed_pipe=True),
    "ours (trio)": _ours("trio"),
    "thread readv (ref)": _thread_readv,
}


def worker(side: str, size: int, producer: str) -> None:
    h.preload()
    script = PRODUCERS["head" if side == HEAD_PIPE else producer].format(size=size)
    with tempfile.TemporaryDirectory(prefix="bench-streaming-") as workdir:
        before = h.current_rss()
        cpu = h.cpu_seconds()
        started = time.perf_counter()
        total = RUNNERS[side](workdir, script)
        wall = TIMED.get("wall", time.perf_counter() - started)
        cpu = TIMED.get("cpu", h.cpu_seconds() - cpu)
        peak = h.peak_rss()
    if total not in (size, -1):
        raise RuntimeError(f"{side}: counted {total} bytes, expected {size}")
    h.worker_result({"wall": wall, "cpu": cpu, "peak": peak, "before": before})


def measure(size: int, reps: int, producer: str) -> dict[str, list[dict[str, Any]]]:
    tree = _baseline.baseline_tree()
    sides = [side for side in SIDES if side != BEFORE or tree is not None]
    if producer == "head":
        sides.remove(HEAD_PIPE)  # the same as `producer | cat`
    results: dict[str, list[dict[str, Any]]] = {side: [] for side in sides}
    for rep in range(reps):
        for side in h.rotated(sides, rep):
            results[side].append(
                _baseline.run_worker_in(
                    tree if side == BEFORE else None, __file__, [side, str(size), producer]
                )
            )
    return results


def report(results: dict[str, list[dict[str, Any]]], size: int, producer: str) -> bool:
    def median(side: str, value: Callable[[dict[str, Any]], float]) -> float:
        return statistics.median(value(r) for r in results[side])

    sides = list(results)
    speed = {side: median(side, lambda r: size / r["wall"] / 1e6) for side in sides}
    per_cpu = {side: median(side, lambda r: size / max(r["cpu"], 1e-9) / 1e6) for side in sides}
    growth = {side: median(side, lambda r: r["peak"] - r["before"]) for side in sides}
    head_pipe = speed.get(HEAD_PIPE, speed[PIPE])
    rows = []
    for side in sides:
        rows.append(
            [
                side,
                len(results[side]),
                f"{speed[side]:.0f}",
                f"{max(size / r['wall'] / 1e6 for r in results[side]):.0f}",
                f"{per_cpu[side]:.0f}",
                f"{growth[side] / h.MIB:.1f}",
                h.fmt_ratio(speed[side], speed[BASELINE]),
                h.fmt_ratio(speed[side], speed[ANYIO]),
                h.fmt_ratio(speed[side], speed[REFERENCE]),
                h.fmt_ratio(speed[side], speed[PIPE]),
                h.fmt_ratio(speed[side], head_pipe),
                h.fmt_ratio(per_cpu[side], per_cpu[BASELINE]),
            ]
        )
    print(
        f"Figure 3: {size / h.MIB:.0f} MiB from `{PRODUCERS[producer].format(size=size)}`"
        f" into a counting sink (output_limit={OUTPUT_LIMIT // h.MIB} MiB but `defaults`;"
        f" pipes 1 MiB as root, but `64K pipe`; load {os.getloadavg()[0]:.2f};"
        " medians over fresh processes)"
    )
    h.print_table(
        [
            "side",
            "reps",
            "MB/s",
            "best MB/s",
            "MB/CPU-s",
            "RSS growth MiB",
            "/raw",
            "/anyio",
            "/ref",
            "/cat",
            "/head|cat",
            "CPU-eff/raw",
        ],
        rows,
    )
    print(
        "MB/s: bytes / wall time; MB/CPU-s: bytes / CPU time of the reading process"
        " (less sensitive to other load); CPU-eff/raw: that, relative to raw asyncio"
    )
    met = True
    for side in (OURS, "ours (asyncio, 64K pipe)"):
        ratio, of_pipe = speed[side] / speed[BASELINE], speed[side] / head_pipe
        ok = ratio >= TARGET and of_pipe >= PIPE_TARGET
        met = met and ok
        print(
            f"target: {side} >= {TARGET}x raw asyncio and >= {PIPE_TARGET}x `head | cat`: "
            f"{ratio:.2f}x, {of_pipe:.2f}x -> {h.verdict(ok)}"
            f" (`producer | cat`: {speed[side] / speed[PIPE]:.2f}x)"
        )
    defaults = growth["ours (asyncio, defaults)"] / h.MIB
    ok = defaults <= 8
    print(f"target: RSS growth at the default settings <= 8 MiB: {defaults:.1f} -> {h.verdict(ok)}")
    return met and ok


def main(argv: list[str] | None = None) -> int:
    parser = h.command_line(__doc__, "32 MiB once, as a smoke check")
    parser.add_argument("--size", type=int, help="bytes to stream (default 1 GiB)")
    parser.add_argument("--reps", type=int, help="fresh-process repetitions per side (default 5)")
    parser.add_argument(
        "--producer",
        choices=[*sorted(PRODUCERS), "both"],
        default="both",
        help="the child (default: both, one after the other)",
    )
    parser.add_argument("--worker", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        side, size, producer = args.worker
        worker(side, int(size), producer)
        return 0
    size = args.size or (32 * h.MIB if args.quick else 1 << 30)
    reps = args.reps or (1 if args.quick else 5)
    both = ["dd"] if args.quick else sorted(PRODUCERS)
    for producer in both if args.producer == "both" else [args.producer]:
        report(measure(size, reps, producer), size, producer)
    return 0


if __name__ == "__main__":
    sys.exit(main())
