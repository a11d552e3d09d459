"""Hostile output: whatever bytes a command prints, nothing crashes and nothing is lost unmarked.

Property-based (hypothesis): a command prints random bytes (invalid UTF-8,
NULs, the persistent shell's own frame byte, long runs without a newline) on
both streams, through a `LocalExecutor` and through a persistent shell.
Every byte comes back as printed, or, past the output cap, the cut says how
many bytes and lines it left out (so kept + cut = printed); the text a model
reads is decoded with U+FFFD for what is not UTF-8, as
`CommandOutput.text()` documents. One explicit test prints 100 MB without a
newline and checks that the memory it takes stays bounded by the cap.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from executor import (
    Command,
    CommandOutput,
    LocalExecutor,
    PersistentShell,
    for_model,
)

pytestmark = pytest.mark.anyio

# A few examples each, fixed by `derandomize`: the same ones in every CI run.
EXAMPLES = 25
CAP = 4096
REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def anyio_backend() -> str:
    """The output's path does not depend on the event loop: asyncio only, to save time."""
    return "asyncio"


# Pieces that are hostile to a decoder or a framer: invalid UTF-8, a character
# cut in two, NULs, the persistent shell's frame byte with and without the
# letter after it, a carriage return, and long runs without a newline.
HOSTILE = st.sampled_from(
    [
        b"\xff",
        b"\xc3",
        b"\xe2\x82",
        b"\xed\xa0\x80",
        b"\0",
        b"\0" * 300,
        b"\x1e",
        b"\x1eE",
        b"\x1eR",
        b"\r",
        b"\n",
        "é€😀".encode(),
        b"x" * 5000,
    ]
)
PIECES = st.lists(st.one_of(HOSTILE, st.binary(max_size=2000)), max_size=12).map(b"".join)


def newlines(data: bytes) -> int:
    """How many newlines `data` holds."""
    return data.count(b"\n")


def check_kept_or_marked(output: CommandOutput, out: bytes, err: bytes) -> None:
    """Each stream came back whole, or its cut is marked and adds up to what was printed."""
    elided = output.elided
    if elided is None:
        assert not output.truncated
        assert output.stdout == out
        assert output.stderr == err
        return
    assert output.truncated
    assert len(output) <= CAP
    assert len(output) + elided.bytes == len(out) + len(err)
    kept_lines = newlines(output.stdout) + newlines(output.stderr)
    assert kept_lines + elided.lines == newlines(out) + newlines(err)
    # Each stream's kept bytes are its own: a head of it, then a tail of it.
    for kept, printed in ((output.stdout, out), (output.stderr, err)):
        head = b"".join(chunk.data for chunk in output.chunks[: elided.at] if chunk.data in kept)
        assert printed.startswith(kept[: len(head)]) or not head
    assert elided.marker() in output.text()


def check_text(output: CommandOutput) -> None:
    """The text decodes (U+FFFD for what is not UTF-8) and the model's view of it renders."""
    text = output.text()
    if output.elided is None and not output.stderr:
        assert text == output.stdout.decode("utf-8", "replace")
    rendered = for_model(output, budget=1000)
    # The budget, plus the cut's marker line and the status line.
    assert len(rendered) <= 1000 + 200
    if output.elided is not None:
        # Cut again for the model: one marker still, counting at least the executor's cut.
        cuts = re.findall(r"\[\.\.\. (\d+) lines \((\d+) bytes\) elided ...\]", rendered)
        assert len(cuts) == 1, rendered
        lines, cut = (int(number) for number in cuts[0])
        assert lines >= output.elided.lines
        assert cut >= output.elided.bytes


async def print_both(ex: LocalExecutor, folder: Path, out: bytes, err: bytes) -> CommandOutput:
    """Run a command that prints `out` on stdout, then `err` on stderr (files `cat`ed)."""
    (folder / "out.bin").write_bytes(out)
    (folder / "err.bin").write_bytes(err)
    script = f"cat '{folder}/out.bin'; cat '{folder}/err.bin' >&2"
    return await ex.exec_cmd(Command.shell(script))


@pytest.fixture
async def capped(tmp_path: Path) -> AsyncIterator[LocalExecutor]:
    """A LocalExecutor that keeps at most `CAP` bytes of each command's output."""
    async with LocalExecutor(tmp_path, output_limit=CAP, kill_grace=0.2) as ex:
        yield ex


@pytest.fixture
async def uncapped(tmp_path: Path) -> AsyncIterator[LocalExecutor]:
    """A LocalExecutor that keeps all of each command's output."""
    async with LocalExecutor(tmp_path, output_limit=None, kill_grace=0.2) as ex:
        yield ex


@pytest.fixture
async def shell(tmp_path: Path) -> AsyncIterator[PersistentShell]:
    """A persistent shell of a LocalExecutor that keeps all of each command's output."""
    async with (
        LocalExecutor(tmp_path, output_limit=None, kill_grace=0.2) as ex,
        ex.shell() as sh,
    ):
        yield sh


SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)


@SETTINGS
@given(out=PIECES, err=PIECES)
async def test_every_byte_comes_back(
    uncapped: LocalExecutor, tmp_path: Path, out: bytes, err: bytes
) -> None:
    """Without a cap, each stream comes back byte for byte; the text decodes."""
    output = await print_both(uncapped, tmp_path, out, err)
    check_kept_or_marked(output, out, err)
    assert output.elided is None
    check_text(output)


@SETTINGS
@given(out=PIECES, err=PIECES)
async def test_past_the_cap_the_cut_is_marked(
    capped: LocalExecutor, tmp_path: Path, out: bytes, err: bytes
) -> None:
    """With a cap, what is kept plus what the marker counts is what was printed."""
    output = await print_both(capped, tmp_path, out, err)
    check_kept_or_marked(output, out, err)
    assert (output.elided is not None) == (len(out) + len(err) > CAP)
    check_text(output)


@SETTINGS
@given(out=PIECES, err=PIECES)
async def test_a_persistent_shell_frames_any_bytes(
    shell: PersistentShell, tmp_path: Path, out: bytes, err: bytes
) -> None:
    """The shell's framing finds each command's end whatever it printed, and keeps the shell."""
    (tmp_path / "out.bin").write_bytes(out)
    (tmp_path / "err.bin").write_bytes(err)
    pid = shell.pid
    output = await shell.run(f"cat '{tmp_path}/out.bin'; cat '{tmp_path}/err.bin' >&2")
    assert output.stdout == out
    assert output.stderr == err
    assert output.exit_code == 0
    assert not output.state_lost
    assert pid is None or shell.pid == pid
    check_text(output)


# --- 100 MB without a newline ------------------------------------------------------

# Run in a process of its own, so that its peak RSS is this command's alone.
FLOOD = r"""
import json, re, resource, sys
import anyio
from executor import Command, LocalExecutor, for_model

async def main():
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    script = "head -c 100000000 /dev/zero | tr '\\0' x"
    async with LocalExecutor(sys.argv[1], output_limit=int(sys.argv[2])) as ex:
        if sys.argv[3] == "shell":
            async with ex.shell() as sh:
                output = await sh.run(script)
        else:
            output = await ex.exec_cmd(Command.shell(script))
    text = for_model(output)
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    elided = output.elided
    print(json.dumps({
        "grown": (after - before) * 1024,
        "kept": len(output.stdout),
        "only_x": set(output.stdout) == {ord("x")},
        "elided_bytes": elided and elided.bytes,
        "elided_lines": elided and elided.lines,
        "marked": elided is not None and elided.marker() in output.text(),
        "rendered_x": sum(len(run) for run in re.findall("x{20,}", text)),
        "rendered_cut": re.findall(r"\[\.\.\. (\d+) lines \((\d+) bytes\) elided", text),
        "exit_code": output.exit_code,
        "rendered": len(text),
    }))

anyio.run(main)
"""


@pytest.mark.parametrize("how", ["command", "shell"])
def test_100_mb_without_a_newline_keeps_memory_bounded(tmp_path: Path, how: str) -> None:
    """100 MB in one line: the cap's head and tail kept, the cut marked, memory bounded.

    The peak RSS of the process grows by less than 64 MiB with a cap of
    1 MiB (without the cap it would hold the whole 100 MB, at least).
    """
    cap = 1 << 20
    result = subprocess.run(
        [sys.executable, "-c", FLOOD, str(tmp_path), str(cap), how],
        capture_output=True,
        cwd=REPO,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
        timeout=110,
        check=False,
    )
    assert result.returncode == 0, result.stderr.decode(errors="replace")
    seen = json.loads(result.stdout)
    assert seen["exit_code"] == 0
    assert seen["kept"] == cap
    assert seen["only_x"]
    assert seen["elided_bytes"] == 100_000_000 - cap
    assert seen["elided_lines"] == 0
    assert seen["marked"]
    # The model's view: one cut, which counts all that it does not show.
    [(lines, cut)] = seen["rendered_cut"]
    assert int(lines) == 0
    assert seen["rendered_x"] + int(cut) == 100_000_000
    assert seen["rendered"] < 16_000 + 200
    assert seen["grown"] < 64 << 20, f"the flood grew the process by {seen['grown']} bytes"
