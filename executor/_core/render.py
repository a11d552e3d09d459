"""One rendering of a command's output for a model: its text, cuts marked, within a budget.

Tools, the toolset and servers hand models `for_model(output)`: the text of
both streams in the order read, with the executor's own cut marked (see
`Elision`), cut again by lines to a character budget (head and tail kept, a
marker saying how many lines and characters are missing), and a closing line
saying how the command ended. A model can tell a short output from a cut one,
and a failure from a success, without guessing.
"""

from __future__ import annotations

import signal

import attrs

from executor._core.output import Chunk, CommandOutput, Elision, count_newlines

DEFAULT_BUDGET = 16_000
"""Characters of output a model is given by default: enough to act on, too few to flood it."""


def signal_name(number: int) -> str:
    """A signal's name (`SIGKILL`), or `signal N` for one Python does not know."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def memory_size(size: int) -> str:
    """Bytes in binary units, as a person writes them: `256 MiB`, `1.5 GiB`, `512 bytes`."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale:
            return f"{size / scale:.1f}".removesuffix(".0") + f" {unit}"
    return f"{size} bytes"


def out_of_memory(limit: int | None = None, peak: int | None = None) -> str:
    """`out of memory`, with the limit and the peak where known: what an OOM kill says."""
    known = [
        *([f"the limit is {memory_size(limit)}"] if limit is not None else []),
        *([f"peak {memory_size(peak)}"] if peak is not None else []),
    ]
    return "out of memory" + (f" ({'; '.join(known)})" if known else "")


def status_line(output: CommandOutput) -> str | None:
    """How a command ended, in words: `None` for a file command (no exit code)."""
    if output.exit_code is None:
        return None
    if output.signal is not None:
        cause = ": out of memory" if output.oom_killed else ""
        return f"[killed by {signal_name(output.signal)}{cause}, exit code {output.exit_code}]"
    if output.oom_killed:
        return f"[exit code {output.exit_code}; a process of it was killed: out of memory]"
    return f"[exit code {output.exit_code}]"


def for_model(output: CommandOutput, *, budget: int = DEFAULT_BUDGET, status: bool = True) -> str:
    """`output` as a model reads it: at most about `budget` characters, cuts marked.

    Args:
        output: The command's output.
        budget: Characters of output to keep; past it whole lines are kept
            from the head and the tail (half each), and a marker line says
            how many lines and characters were left out. A line longer than
            half the budget is itself cut, marked the same way.
        status: Whether to close with how the command ended (`status_line`).

    """
    if budget < 1:
        raise ValueError(f"budget must be >= 1, got {budget}")
    text = output.text()
    if len(text) > budget:
        elided = output.elided
        if elided is not None and 0 <= elided.at <= len(output.chunks):
            text = _cut_again(output, elided, budget)
        else:
            text = _cut(text, budget)
    line = status_line(output) if status else None
    if line is None:
        return text
    opening = "" if not text or text.endswith("\n") else "\n"
    return f"{text}{opening}{line}"


def _cut(text: str, budget: int) -> str:
    lines = text.splitlines(keepends=True)
    half = budget // 2
    head: list[str] = []
    used = 0
    for line in lines:
        if used + len(line) > half:
            break
        head.append(line)
        used += len(line)
    tail: list[str] = []
    used = 0
    for line in reversed(lines[len(head) :]):
        if used + len(line) > budget - half:
            break
        tail.append(line)
        used += len(line)
    tail.reverse()
    missing = lines[len(head) : len(lines) - len(tail)]
    if not head and not tail:
        # One line longer than the budget: keep its two ends.
        end = text[len(text) - (budget - half) :]
        return f"{text[:half]}\n[... {len(text) - budget} characters elided ...]\n{end}"
    characters = sum(len(line) for line in missing)
    marker = f"[... {len(missing)} lines ({characters} characters) elided ...]\n"
    return "".join(head) + marker + "".join(tail)


def _cut_again(output: CommandOutput, elided: Elision, budget: int) -> str:
    """The text of an output the executor cut already, cut again around that cut.

    Cutting the text by lines would hide the executor's marker among the
    lines left out, with its count (a flood of 100 MB would read as a cut of
    a megabyte) and where the whole output was kept. Instead the head is cut
    from its end and the tail from its start, and one marker counts both.
    """
    half = budget // 2
    head, head_cut = _keep(output.chunks[: elided.at], half, from_start=True)
    tail, tail_cut = _keep(output.chunks[elided.at :], budget - half, from_start=False)
    cut = attrs.evolve(
        elided,
        at=len(head),
        bytes=elided.bytes + len(head_cut) + len(tail_cut),
        lines=elided.lines + count_newlines(head_cut) + count_newlines(tail_cut),
    )
    return attrs.evolve(output, chunks=head + tail, elided=cut).text()


def _keep(
    chunks: tuple[Chunk, ...], room: int, *, from_start: bool
) -> tuple[tuple[Chunk, ...], bytes]:
    """At most `room` bytes of `chunks`, from their start or their end, and the bytes left out.

    The cut falls after the last newline kept (before the first, from the
    end) where there is one, else between two characters.
    """
    total = sum(len(chunk.data) for chunk in chunks)
    if total <= room:
        return chunks, b""
    data = b"".join(chunk.data for chunk in chunks)
    if from_start:
        end = room
        newline = data.rfind(b"\n", 0, end)
        if newline >= 0:
            end = newline + 1
        else:
            # Not inside a character: back off over UTF-8 continuation bytes.
            while end > 0 and data[end] & 0xC0 == 0x80 and room - end < 3:
                end -= 1
        start = 0
    else:
        start = total - room
        newline = data.find(b"\n", start - 1, total)
        if 0 <= newline < total - 1:
            start = newline + 1
        else:
            while start < total and data[start] & 0xC0 == 0x80 and start - (total - room) < 3:
                start += 1
        end = total
    kept: list[Chunk] = []
    offset = 0
    for chunk in chunks:
        low, high = max(start, offset), min(end, offset + len(chunk.data))
        if low < high:
            kept.append(type(chunk)(chunk.data[low - offset : high - offset]))
        offset += len(chunk.data)
    return tuple(kept), data[:start] + data[end:]
