"""Native edits: our V4A `apply_patch` engine against the OpenAI Agents SDK's `apply_diff`.

What is measured, in one run, every side in this one process and event loop,
the sides taking turns call by call (the order rotating each round), wall
time and CPU time (`time.process_time`, all threads of the process) of each
call:

- (a) a 50-hunk update (each hunk: three context lines, one line out, one
  in, three context lines) of a 10,000-line file:
  - `ours, in memory`: `parse_patch` of the whole patch, then `apply_chunks`
    on the file's text (`executor._toolset.patch`);
  - `ours, via LocalExecutor`: `apply_patch(executor, patch)`: the file
    read through the executor, the patch applied, the file written (the
    file is put back, untimed, after each call);
  - `apply_diff, in memory`: `agents.apply_diff.apply_diff(text, diff)` of
    the OpenAI Agents SDK (openai-agents), whose input is one file's update
    hunks, the same hunks without the `*** Begin Patch` / `*** Update File`
    envelope;
  - `apply_diff + read/write via LocalExecutor`: the same, between a read
    and a write of the file through the same executor, as a tool built on
    it would do.
- (b) one change in a 5 MB file (one line replaced, as a `str_replace`
  editor is asked for it):
  - `ours str_replace`: `executor._toolset.text.replace` (what `edit_file`
    does: the old text must occur once);
  - `ours, in memory`: the same change as a one-hunk patch (`parse_patch` and
    `apply_chunks`);
  - `apply_diff, in memory`: the same hunk through `apply_diff`.
- (c) what our patch tool adds per call over the bare command, on a 200-line
  file through a `LocalExecutor`:
  - `write_file`: `exec_cmd(Command.write_file(path, bytes))` of the bytes
    the patch produces (the bare command a tool ends with);
  - `apply_patch, one-hunk update`: reads, applies, writes (forth and back
    patches taking turns, so the file keeps changing);
  - `apply_patch, Add File`: a patch that only adds that file (one write,
    nothing read).

- (d) what each native tool adds per call over the command it runs, through
  a `Toolset` on a `LocalExecutor` (the tool's argument checks, its
  agent-safe environment, its rendering for the model):
  - `bash` (`true`) against `run("true")` of a persistent shell;
  - OpenAI's `shell` (`["true"]`) and `local_shell` (`["true"]`) against
    `exec_cmd` of `sh -c true` and of the argv `true`;
  - `str_replace_based_edit_tool`'s `str_replace` of one line of the
    200-line file (forth and back) against the bare read and write of the
    file through the executor.

Every side's output is checked equal to the others' before anything is
timed. Ratios are ours / theirs: of the medians, and the median of the
round-by-round ratios (each round's pair ran back to back). The load average
is printed at the start and the end. Nothing is asserted; there is no target.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path

import _harness as h
import anyio

from executor import Command, LocalExecutor, Toolset
from executor._toolset.patch import UpdateFile, apply_chunks, apply_patch, parse_patch
from executor._toolset.text import replace

Step = Callable[[], Awaitable[object]]


def big_text(lines: int, width: int = 0) -> str:
    """A file of distinct lines, each padded to about `width` characters."""
    rows = []
    for number in range(lines):
        row = f"    value_{number} = compute({number % 97}, {number * 7 % 1000})  # line {number}"
        rows.append(row.ljust(width, "-") if width else row)
    return "\n".join(rows) + "\n"


def hunks(text: str, count: int) -> tuple[str, str]:
    """`count` evenly spread hunks on `text`: the V4A hunks, and the text they make."""
    lines = text.splitlines()
    step = len(lines) // (count + 1)
    body = []
    changed = list(lines)
    for index in range(1, count + 1):
        at = index * step
        body.append("@@")
        body += [f" {line}" for line in lines[at - 3 : at]]
        body.append(f"-{lines[at]}")
        body.append(f"+{lines[at]}  # changed")
        body += [f" {line}" for line in lines[at + 1 : at + 4]]
        changed[at] = f"{lines[at]}  # changed"
    return "\n".join(body) + "\n", "\n".join(changed) + "\n"


def envelope(path: str, diff: str) -> str:
    """The hunks as a whole V4A patch updating `path`."""
    return f"*** Begin Patch\n*** Update File: {path}\n{diff}*** End Patch\n"


def ours_in_memory(patch: str, text: str) -> str:
    (op,) = parse_patch(patch)
    assert isinstance(op, UpdateFile)
    return apply_chunks(text, op.chunks)


def apply_diff(text: str, diff: str) -> str:
    """The Agents SDK's `apply_diff`, imported on first use (the SDK takes a second to import)."""
    from agents.apply_diff import apply_diff as theirs

    return theirs(text, diff)


class Samples:
    """Wall and CPU seconds of each call of one side, round by round."""

    def __init__(self) -> None:
        self.wall: list[float] = []
        self.cpu: list[float] = []


async def paired(
    sides: dict[str, Step],
    rounds: int,
    warmup: int,
    before: Callable[[], None] | None = None,
) -> dict[str, Samples]:
    """Run each side once per round, the order rotating; `before` runs untimed before each call."""
    names = list(sides)
    for _ in range(warmup):
        for name in names:
            if before is not None:
                before()
            await sides[name]()
    samples = {name: Samples() for name in names}
    for turn in range(rounds):
        for name in h.rotated(names, turn):
            if before is not None:
                before()
            wall, cpu = time.perf_counter(), time.process_time()
            await sides[name]()
            samples[name].cpu.append(time.process_time() - cpu)
            samples[name].wall.append(time.perf_counter() - wall)
    return samples


def paired_ratio(ours: list[float], theirs: list[float]) -> str:
    """The median of the round-by-round ratios ours / theirs."""
    ratios = [a / b for a, b in zip(ours, theirs, strict=True) if b > 0]
    return f"{statistics.median(ratios):.2f}x" if ratios else "-"


def table(title: str, samples: dict[str, Samples], baseline: str, digits: int = 3) -> None:
    """One figure: each side's wall and CPU per call, and its ratios to `baseline`."""
    base = samples[baseline]
    base_wall, base_cpu = h.Stats(base.wall), h.Stats(base.cpu)
    rows = []
    for name, side in samples.items():
        wall, cpu = h.Stats(side.wall), h.Stats(side.cpu)
        rows.append(
            [
                name,
                len(side.wall),
                h.fmt_ms(wall.median, digits),
                h.fmt_ms(wall.p99, digits),
                h.fmt_ms(cpu.median, digits),
                h.fmt_ratio(wall.median, base_wall.median),
                paired_ratio(side.wall, base.wall),
                h.fmt_ratio(cpu.median, base_cpu.median),
            ]
        )
    print(title)
    h.print_table(
        ["side", "n", "wall med", "wall p99", "cpu med", "wall/base", "paired", "cpu/base"], rows
    )
    print(f"(ms per call; base: {baseline}; paired: median of the per-round ratios)")
    print()


def added(samples: dict[str, Samples], name: str, baseline: str) -> str:
    """What `name` adds per call over `baseline`, at the median, wall and CPU."""
    wall = h.Stats(samples[name].wall).median - h.Stats(samples[baseline].wall).median
    cpu = h.Stats(samples[name].cpu).median - h.Stats(samples[baseline].cpu).median
    return f"{name}: {wall * 1000:+.3f} ms wall, {cpu * 1000:+.3f} ms CPU per call"


async def figure_a(folder: Path, rounds: int, warmup: int) -> dict[str, Samples]:
    text = big_text(10_000)
    diff, expected = hunks(text, 50)
    patch = envelope("big.txt", diff)
    path = folder / "big.txt"
    original = text.encode()
    assert ours_in_memory(patch, text) == expected
    assert apply_diff(text, diff) == expected

    def put_back() -> None:
        path.write_bytes(original)

    async with LocalExecutor(folder) as executor:

        async def ours_via_executor() -> None:
            await apply_patch(executor, patch)

        async def theirs_via_executor() -> None:
            read = await executor.exec_cmd(Command.read_file("big.txt"))
            new = apply_diff(read.stdout.decode(), diff)
            await executor.exec_cmd(Command.write_file("big.txt", new))

        put_back()
        await ours_via_executor()
        assert path.read_bytes() == expected.encode()
        put_back()
        await theirs_via_executor()
        assert path.read_bytes() == expected.encode()

        async def ours_pure() -> None:
            ours_in_memory(patch, text)

        async def theirs_pure() -> None:
            apply_diff(text, diff)

        return await paired(
            {
                "ours, in memory": ours_pure,
                "apply_diff, in memory": theirs_pure,
                "ours, via LocalExecutor": ours_via_executor,
                "apply_diff + read/write via LocalExecutor": theirs_via_executor,
            },
            rounds,
            warmup,
            put_back,
        )


async def figure_b(rounds: int, warmup: int) -> dict[str, Samples]:
    text = big_text(5 * h.MIB // 100, width=99)
    assert abs(len(text) - 5 * h.MIB) < h.MIB // 10
    lines = text.splitlines()
    at = len(lines) * 2 // 3
    old, new = lines[at], f"{lines[at]}  # changed"
    diff = "@@\n" + "".join(f" {line}\n" for line in lines[at - 3 : at])
    diff += f"-{old}\n+{new}\n" + "".join(f" {line}\n" for line in lines[at + 1 : at + 4])
    patch = envelope("big.txt", diff)
    expected = text.replace(f"{old}\n", f"{new}\n")
    assert replace(text, f"{old}\n", f"{new}\n", replace_all=False)[0] == expected
    assert ours_in_memory(patch, text) == expected
    assert apply_diff(text, diff) == expected

    async def ours_replace() -> None:
        replace(text, f"{old}\n", f"{new}\n", replace_all=False)

    async def ours_patch() -> None:
        ours_in_memory(patch, text)

    async def theirs() -> None:
        apply_diff(text, diff)

    return await paired(
        {
            "ours str_replace (text.replace)": ours_replace,
            "ours, one-hunk patch in memory": ours_patch,
            "apply_diff, in memory": theirs,
        },
        rounds,
        warmup,
    )


async def figure_c(folder: Path, rounds: int, warmup: int) -> dict[str, Samples]:
    text = big_text(200)
    lines = text.splitlines()
    changed = text.replace(f"{lines[100]}\n", f"{lines[100]}  # changed\n")
    forth = envelope("small.txt", f"@@\n {lines[99]}\n-{lines[100]}\n+{lines[100]}  # changed\n")
    back = envelope("small.txt", f"@@\n {lines[99]}\n-{lines[100]}  # changed\n+{lines[100]}\n")
    add = "*** Begin Patch\n*** Add File: added.txt\n" + "".join(
        f"+{line}\n" for line in changed.splitlines()
    )
    add += "*** End Patch\n"
    (folder / "small.txt").write_text(text)
    patches = [forth, back]
    contents = [changed.encode(), text.encode()]
    calls = {"patch": 0, "write": 0}

    async with LocalExecutor(folder) as executor:

        async def write() -> None:
            content = contents[calls["write"] % 2]
            calls["write"] += 1
            await executor.exec_cmd(Command.write_file("written.txt", content))

        async def update() -> None:
            patch = patches[calls["patch"] % 2]
            calls["patch"] += 1
            await apply_patch(executor, patch)

        async def add_file() -> None:
            await apply_patch(executor, add)

        await update()
        assert (folder / "small.txt").read_bytes() == changed.encode()
        await update()
        assert (folder / "small.txt").read_bytes() == text.encode()
        await add_file()
        assert (folder / "added.txt").read_bytes() == changed.encode()
        return await paired(
            {
                "write_file (bare command)": write,
                "apply_patch, one-hunk update": update,
                "apply_patch, Add File": add_file,
            },
            rounds,
            warmup,
        )


async def figure_d(folder: Path, rounds: int, warmup: int) -> dict[str, Samples]:
    text = big_text(200)
    line = text.splitlines()[100]
    (folder / "edited.txt").write_text(text)
    path = str(folder / "edited.txt")
    toolset = Toolset(native=["anthropic", "openai"])
    turns = {"tool": 0, "bare": 0}

    async with LocalExecutor(folder) as executor, toolset, executor.shell() as shell:
        context = toolset.context(executor)

        async def call(name: str, arguments: Mapping[str, object]) -> None:
            output = await toolset.call(context, name, arguments)
            assert not output.is_error, output.text

        async def edit() -> None:
            old, new = (line, f"{line}  # x") if turns["tool"] % 2 == 0 else (f"{line}  # x", line)
            turns["tool"] += 1
            arguments = {"command": "str_replace", "path": path, "old_str": old, "new_str": new}
            await call("str_replace_based_edit_tool", arguments)

        async def bare_edit() -> None:
            data = (await executor.exec_cmd(Command.read_file("edited.txt"))).stdout
            turns["bare"] += 1
            await executor.exec_cmd(Command.write_file("edited.txt", data))

        async def bash() -> None:
            await call("bash", {"command": "true"})

        async def shell_run() -> None:
            await shell.run("true")

        async def openai_shell() -> None:
            await call("shell", {"commands": ["true"]})

        async def local_shell() -> None:
            await call("local_shell", {"command": ["true"]})

        async def sh_c() -> None:
            await executor.exec_cmd(Command.shell("true"))

        async def argv() -> None:
            await executor.exec_cmd(Command.exec(["true"]))

        return await paired(
            {
                "bash tool": bash,
                "persistent shell run": shell_run,
                "openai shell tool": openai_shell,
                "exec_cmd sh -c true": sh_c,
                "local_shell tool": local_shell,
                "exec_cmd argv true": argv,
                "text editor str_replace": edit,
                "bare read + write": bare_edit,
            },
            rounds,
            warmup,
        )


def main(argv: list[str] | None = None) -> int:
    parser = h.command_line(__doc__, "a few rounds, as a smoke check")
    parser.add_argument("--rounds", type=int, help="calls per side (default 40; 500 for (c))")
    args = parser.parse_args(argv)
    quick = bool(args.quick)
    rounds = args.rounds or (3 if quick else 40)
    overhead_rounds = args.rounds or (20 if quick else 500)
    warmup = 1 if quick else 3
    h.preload()
    apply_diff("a\n", "@@\n-a\n+b\n")  # the SDK's import, out of every figure
    print(f"load average at the start {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    print()
    with tempfile.TemporaryDirectory(prefix="bench-native-edits-") as folder:
        a = anyio.run(figure_a, Path(folder), rounds, warmup)
        b = anyio.run(figure_b, rounds, warmup)
        c = anyio.run(figure_c, Path(folder), overhead_rounds, warmup * 10)
        d = anyio.run(figure_d, Path(folder), overhead_rounds // 2, warmup * 5)
    table("(a) a 50-hunk patch on a 10,000-line file", a, "apply_diff, in memory")
    print(
        "    via the executor: ours / apply_diff + read/write "
        + h.fmt_ratio(
            h.Stats(a["ours, via LocalExecutor"].wall).median,
            h.Stats(a["apply_diff + read/write via LocalExecutor"].wall).median,
        )
        + " wall, paired "
        + paired_ratio(
            a["ours, via LocalExecutor"].wall, a["apply_diff + read/write via LocalExecutor"].wall
        )
    )
    print()
    table("(b) one line replaced in a 5 MB file", b, "apply_diff, in memory")
    table("(c) per call, a 200-line file through a LocalExecutor", c, "write_file (bare command)")
    for name in ("apply_patch, one-hunk update", "apply_patch, Add File"):
        print("    " + added(c, name, "write_file (bare command)"))
    print()
    table("(d) the native tools over the commands they run", d, "persistent shell run")
    for name, base in (
        ("bash tool", "persistent shell run"),
        ("openai shell tool", "exec_cmd sh -c true"),
        ("local_shell tool", "exec_cmd argv true"),
        ("text editor str_replace", "bare read + write"),
    ):
        print("    " + added(d, name, base))
    print()
    print(f"load average at the end {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
