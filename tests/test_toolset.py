"""The standard toolset: each tool over a real LocalExecutor, output for the model, policy kept."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from executor import (
    READ_ONLY_TOOLS,
    TOOL_NAMES,
    Chunk,
    CommandRules,
    DefaultContext,
    LocalExecutor,
    ReadOnly,
    Stderr,
    Stdout,
    Tool,
    ToolOutput,
    ToolOutputKind,
    Toolset,
    ToolsetContext,
    UnixSignal,
)

pytestmark = pytest.mark.anyio


@pytest.fixture
async def toolset() -> AsyncIterator[Toolset]:
    """A toolset, closed (its shells and jobs ended) after the test."""
    async with Toolset(timeout=20) as tools:
        yield tools


async def call(toolset: Toolset, ex: Any, name: str, **arguments: Any) -> ToolOutput:
    return await toolset.call(toolset.context(ex), name, arguments)


def has_shell(ex: LocalExecutor) -> bool:
    return callable(getattr(ex, "shell", None))


# --- the set --------------------------------------------------------------------------


def test_every_tool_is_an_ordinary_tool_with_a_spec() -> None:
    """Each tool is a `Tool` with an object schema, and the set lists every name in order."""
    toolset = Toolset()
    assert toolset.names == TOOL_NAMES
    for each in toolset:
        assert isinstance(each, Tool)
        spec = each.spec
        assert spec["name"] == each.name
        assert spec["description"]
        assert spec["parameters"]["type"] == "object"
        json.dumps(spec)  # plain JSON


def test_read_only_subset_and_choices() -> None:
    """`read_only=True` offers only the tools that never write; include/exclude pick tools."""
    assert set(Toolset(read_only=True).names) == READ_ONLY_TOOLS
    assert Toolset(include=["run", "read_file"]).names == ("run", "read_file")
    assert "run" not in Toolset(exclude=["run"])
    with pytest.raises(ValueError, match="no such tools"):
        Toolset(include=["rm"])
    with pytest.raises(KeyError, match="no tool 'run'"):
        Toolset(read_only=True)["run"]


async def test_extra_tools_beside_the_standard_ones(ex: LocalExecutor) -> None:
    """`extra=` offers tools of one's own after the standard ones; a name twice is refused."""
    from executor import Command, tool

    @tool
    async def word_count(context: ToolsetContext, path: str) -> str:
        """Count the words of a file.

        Args:
            path: The file, relative to the workspace.
        """
        output = await context.executor().exec_cmd(Command.exec(["wc", "-w", path]))
        return output.stdout.decode().split()[0]

    (Path(ex.workdir) / "words.txt").write_text("one two three\n")
    async with Toolset(read_only=True, extra=[word_count]) as tools:
        assert tools.names == (*sorted(READ_ONLY_TOOLS, key=TOOL_NAMES.index), "word_count")
        out = await call(tools, ex, "word_count", path="words.txt")
        assert (out.kind, out.text) == (ToolOutputKind.OK, "3")
    with pytest.raises(ValueError, match="two tools are named 'word_count'"):
        Toolset(extra=[word_count, word_count])
    with pytest.raises(TypeError, match="must be Tool objects"):
        Toolset(extra=[len])  # type: ignore[list-item]


async def test_unknown_tool_is_an_invalid_call(toolset: Toolset, ex: LocalExecutor) -> None:
    """Calling a tool that is not there is an invalid-arguments output naming the tools."""
    out = await call(toolset, ex, "format_disk")
    assert out.kind is ToolOutputKind.INVALID_ARGUMENTS
    assert "read_file" in out.text


# --- run ------------------------------------------------------------------------------


async def test_run_success_failure_and_the_recorded_output(
    toolset: Toolset, ex: LocalExecutor
) -> None:
    """`run` returns the output with its exit code; a failure keeps exit code and stderr."""
    ok = await call(toolset, ex, "run", command="echo hello")
    assert (ok.kind, ok.exit_code, ok.text) == (ToolOutputKind.OK, 0, "hello\n[exit code 0]")
    context = toolset.context(ex)
    failed = await toolset.call(context, "run", {"command": "echo out; echo bad >&2; exit 3"})
    assert failed.kind is ToolOutputKind.FAILED
    assert failed.exit_code == 3
    assert "bad" in failed.text
    assert "3" in failed.text
    assert context.last_output is not None
    assert (context.last_output.exit_code, context.last_output.stderr) == (3, b"bad\n")


async def test_run_timeout_kills_the_tree(toolset: Toolset, ex: LocalExecutor) -> None:
    """A command past its timeout is a TIMED_OUT output, and nothing of it is left running."""
    out = await call(toolset, ex, "run", command="sleep 30 & sleep 30; wait", timeout=0.3)
    assert out.kind is ToolOutputKind.TIMED_OUT
    assert "timed out" in out.text


async def test_run_arguments_are_validated(toolset: Toolset, ex: LocalExecutor) -> None:
    """A bad timeout, a cwd outside the workspace, a wrong type: invalid arguments, not run."""
    for arguments in (
        {"command": "true", "timeout": 0},
        {"command": "true", "timeout": 10**9},
        {"command": "true", "cwd": "../.."},
        {"command": 5},
        {"command": "true", "unknown": 1},
    ):
        out = await toolset.call(toolset.context(ex), "run", arguments)
        assert out.kind is ToolOutputKind.INVALID_ARGUMENTS, arguments


async def test_run_cwd_stdin_and_live_output(
    toolset: Toolset, ex: LocalExecutor, tmp_path: Path
) -> None:
    """`cwd` and `stdin` reach the command; `on_output` sees each chunk while it runs."""
    (tmp_path / "sub").mkdir()
    seen: list[Chunk] = []
    go = tmp_path / "go"

    def sink(chunk: Chunk) -> None:
        seen.append(chunk)
        go.touch()  # the command waits for this: the chunk came while it ran

    context = ToolsetContext(ex, on_output=sink)
    script = "pwd; cat; echo err >&2; while [ ! -e ../go ]; do sleep 0.02; done; echo end"
    out = await toolset.call(context, "run", {"command": script, "cwd": "sub", "stdin": "in\n"})
    assert out.kind is ToolOutputKind.OK, out.text
    assert context.last_output is not None
    # Two pipes: stdout's order is its own, not necessarily before stderr's.
    assert context.last_output.stdout == f"{tmp_path / 'sub'}\nin\nend\n".encode()
    assert Stderr(b"err\n") in seen
    assert b"".join(chunk.data for chunk in seen if isinstance(chunk, Stdout)).endswith(b"end\n")


async def test_plain_context_works(toolset: Toolset, ex: LocalExecutor) -> None:
    """The tools take any agent context: a DefaultContext streams and records nothing."""
    out = await toolset["run"].invoke(DefaultContext.from_executor(ex), {"command": "echo x"})
    assert out.text == "x\n[exit code 0]"


# --- files ----------------------------------------------------------------------------


async def test_write_then_read_with_line_numbers(toolset: Toolset, ex: LocalExecutor) -> None:
    """`write_file` makes folders; `read_file` numbers lines and says how much it showed."""
    out = await call(toolset, ex, "write_file", path="notes/a.txt", content="one\ntwo\nthree\n")
    assert out.text == "wrote 14 bytes (3 lines) to notes/a.txt"
    read = await call(toolset, ex, "read_file", path="notes/a.txt")
    assert read.text == "     1\tone\n     2\ttwo\n     3\tthree\n[lines 1-3 of 3]"


async def test_read_ranges(toolset: Toolset, ex: LocalExecutor, tmp_path: Path) -> None:
    """offset/limit and start_line/end_line pick lines; past the end is an invalid argument."""
    (tmp_path / "f.txt").write_text("".join(f"line {n}\n" for n in range(1, 11)))
    by_offset = await call(toolset, ex, "read_file", path="f.txt", offset=4, limit=2)
    assert by_offset.text == (
        "     4\tline 4\n     5\tline 5\n[lines 4-5 shown; more follow: continue with offset=6]"
    )
    by_range = await call(toolset, ex, "read_file", path="f.txt", start_line=9, end_line=20)
    assert by_range.text == "     9\tline 9\n    10\tline 10\n[lines 9-10 of 10]"
    past = await call(toolset, ex, "read_file", path="f.txt", offset=11)
    assert past.kind is ToolOutputKind.INVALID_ARGUMENTS
    assert "has 10 lines" in past.text
    both = await call(toolset, ex, "read_file", path="f.txt", offset=1, start_line=1)
    assert both.kind is ToolOutputKind.INVALID_ARGUMENTS


async def test_read_of_a_huge_file_stops_early(
    toolset: Toolset, ex: LocalExecutor, tmp_path: Path
) -> None:
    """Reading the head of a 64 MiB file returns those lines, and notes that more follow."""
    line = b"x" * 63 + b"\n"
    (tmp_path / "big.log").write_bytes(line * (1 << 20))
    out = await call(toolset, ex, "read_file", path="big.log", limit=3)
    assert out.text.count("\n") == 3
    assert "more follow: continue with offset=4" in out.text


async def test_read_edge_cases(toolset: Toolset, ex: LocalExecutor, tmp_path: Path) -> None:
    """Empty, binary, missing and long-lined files each get a clear answer."""
    (tmp_path / "empty").write_bytes(b"")
    (tmp_path / "bin").write_bytes(b"\x7fELF\0\0\1")
    (tmp_path / "long").write_text("y" * 5000 + "\nshort")
    assert (await call(toolset, ex, "read_file", path="empty")).text == "empty is empty"
    binary = await call(toolset, ex, "read_file", path="bin")
    assert binary.is_error
    assert "binary" in binary.text
    missing = await call(toolset, ex, "read_file", path="nope.txt")
    assert missing.kind is ToolOutputKind.FAILED
    assert "No such file" in missing.text
    long = await call(toolset, ex, "read_file", path="long")
    assert "[... 3000 more characters on this line]" in long.text
    assert long.text.endswith("     2\tshort\n[lines 1-2 of 2]")


async def test_read_stops_at_the_budget(ex: LocalExecutor, tmp_path: Path) -> None:
    """Lines past the toolset's character budget are left for the next read, which is named."""
    (tmp_path / "f").write_text("".join(f"{'z' * 90}\n" for _ in range(100)))
    async with Toolset(budget=1000) as toolset:
        out = await call(toolset, ex, "read_file", path="f")
    assert "the output budget is reached; continue with offset=" in out.text
    assert len(out.text) < 1200


async def test_edit_by_exact_replacement(
    toolset: Toolset, ex: LocalExecutor, tmp_path: Path
) -> None:
    """`edit_file` replaces one exact occurrence and shows the lines around it."""
    path = tmp_path / "m.py"
    path.write_text("def f():\n    return 1\n\ndef g():\n    return 2\n")
    out = await call(
        toolset, ex, "edit_file", path="m.py", old_text="return 2", new_text="return 3"
    )
    assert out.kind is ToolOutputKind.OK, out.text
    assert out.text.startswith("edited m.py: replaced 1 occurrence (line 5)")
    assert "     5\t    return 3" in out.text
    assert path.read_text() == "def f():\n    return 1\n\ndef g():\n    return 3\n"


async def test_edit_refusals_change_nothing(
    toolset: Toolset, ex: LocalExecutor, tmp_path: Path
) -> None:
    """Missing, repeated, empty and no-op old text are refused (for the model to retry)."""
    path = tmp_path / "m.txt"
    path.write_text("a = 1\nb = 1\n")
    cases = {
        "not found": {"old_text": "c = 1", "new_text": "c = 2"},
        "occurs 2 times (lines 1, 2)": {"old_text": "= 1", "new_text": "= 2"},
        "must not be empty": {"old_text": "", "new_text": "x"},
        "the same as old_text": {"old_text": "a = 1", "new_text": "a = 1"},
        "The closest lines (80% alike):\n     1\ta = 1": {"old_text": "a = 2", "new_text": "x"},
    }
    for words, arguments in cases.items():
        out = await call(toolset, ex, "edit_file", path="m.txt", **arguments)
        assert out.kind is ToolOutputKind.INVALID_ARGUMENTS, out.text
        assert words in out.text
    assert path.read_text() == "a = 1\nb = 1\n"
    every = await call(
        toolset, ex, "edit_file", path="m.txt", old_text="= 1", new_text="= 2", replace_all=True
    )
    assert "replaced 2 occurrences (line 1, 2)" in every.text
    assert path.read_text() == "a = 2\nb = 2\n"
    path.write_bytes(b"\xff\xfe")
    binary = await call(toolset, ex, "edit_file", path="m.txt", old_text="x", new_text="y")
    assert binary.is_error
    assert "not UTF-8" in binary.text


@pytest.mark.parametrize(
    ("before", "old_text", "new_text", "after", "how"),
    [
        pytest.param(
            b"a\r\n\tif x:\r\n\t\treturn 1\r\nend\r\n",
            "if x:\n\t\treturn 1",
            "if y:\n\t\treturn 2",
            b"a\r\n\tif y:\r\n\t\treturn 2\r\nend\r\n",
            "with the file's CRLF line endings",
            id="CRLF",
        ),
        pytest.param(
            b"keep  \ndef f():  \n    return 1\t\n\ntail \t\n",
            "def f():\n    return 1",
            "def f():\n    return 2",
            b"keep  \ndef f():\n    return 2\n\ntail \t\n",
            "ignoring trailing whitespace",
            id="trailing blanks",
        ),
        pytest.param(
            b"class A:\r\n\tdef f(self):\r\n\t\treturn 1\r\n# end",
            "def f(self):\n    return 1",
            "def f(self):\n    if x:\n        return 2",
            b"class A:\r\n\tdef f(self):\r\n\t\tif x:\r\n\t\t\treturn 2\r\n# end",
            "ignoring indentation",
            id="tabs for spaces, CRLF, no final newline",
        ),
        pytest.param(
            b"\tx = 1\r\n",
            "\tx = 1",
            "\tx = 2",
            b"\tx = 2\r\n",
            None,
            id="exact",
        ),
    ],
)
async def test_edits_survive_whitespace(
    toolset: Toolset,
    ex: LocalExecutor,
    tmp_path: Path,
    before: bytes,
    old_text: str,
    new_text: str,
    after: bytes,
    how: str | None,
) -> None:
    """CRLF, tabs and trailing blanks: the edit lands, and every byte outside it is kept."""
    path = tmp_path / "w.py"
    path.write_bytes(before)
    out = await call(toolset, ex, "edit_file", path="w.py", old_text=old_text, new_text=new_text)
    assert out.kind is ToolOutputKind.OK, out.text
    assert path.read_bytes() == after
    first = out.text.splitlines()[0]
    assert (f"matched {how}" in first) if how else ("matched" not in first), first


async def test_a_whitespace_match_must_be_unique_too(
    toolset: Toolset, ex: LocalExecutor, tmp_path: Path
) -> None:
    """Two places that match only ignoring indentation are refused like two exact ones."""
    path = tmp_path / "u.py"
    path.write_text("if a:\n\tx = 1\nif b:\n\tx = 1\n")
    out = await call(toolset, ex, "edit_file", path="u.py", old_text="  x = 1", new_text="x = 2")
    assert out.kind is ToolOutputKind.INVALID_ARGUMENTS
    assert "occurs 2 times (lines 2, 4)" in out.text
    assert path.read_text() == "if a:\n\tx = 1\nif b:\n\tx = 1\n"


async def test_list_glob_and_search(toolset: Toolset, ex: LocalExecutor, tmp_path: Path) -> None:
    """Listings and the search respect .ignore and skip hidden and binary files."""
    (tmp_path / "src" / "pkg").mkdir(parents=True)
    (tmp_path / "src" / "pkg" / "a.py").write_text("import os\nTODO = 1\n")
    (tmp_path / "src" / "b.md").write_text("# todo list\n")
    (tmp_path / ".hidden.py").write_text("TODO\n")
    (tmp_path / "build").mkdir()
    (tmp_path / "build" / "gen.py").write_text("TODO\n")
    (tmp_path / ".ignore").write_text("build/\n")
    (tmp_path / "blob.bin").write_bytes(b"TODO\0")
    listed = await call(toolset, ex, "list_files")
    assert listed.text.splitlines() == ["src/b.md", "src/pkg/a.py"]
    only_py = await call(toolset, ex, "list_files", path="src", extensions=["py"])
    assert only_py.text == "src/pkg/a.py"
    globbed = await call(toolset, ex, "glob", pattern="**/*.py", path="src")
    assert globbed.text == "src/pkg/a.py"
    none = await call(toolset, ex, "glob", pattern="*.rs")
    assert none.kind is ToolOutputKind.OK
    assert none.text.startswith("no text files")
    found = await call(toolset, ex, "search", pattern="TODO")
    assert found.text == "src/pkg/a.py:2:TODO = 1"
    folded = await call(toolset, ex, "search", pattern="todo", ignore_case=True, glob="*.md")
    assert folded.text == "src/b.md:1:# todo list"
    literal = await call(toolset, ex, "search", pattern="TODO = 1", literal=True, path="src")
    assert literal.text == "src/pkg/a.py:2:TODO = 1"
    bad = await call(toolset, ex, "search", pattern="(")
    assert bad.kind is ToolOutputKind.INVALID_ARGUMENTS
    assert "regular expression" in bad.text
    missing = await call(toolset, ex, "list_files", path="nowhere")
    assert missing.kind is ToolOutputKind.INVALID_ARGUMENTS
    assert "no such folder" in missing.text


async def test_search_stops_at_max_matches(
    toolset: Toolset, ex: LocalExecutor, tmp_path: Path
) -> None:
    """The search says when it stopped at `max_matches`."""
    (tmp_path / "many.txt").write_text("hit\n" * 50)
    out = await call(toolset, ex, "search", pattern="hit", max_matches=5)
    assert out.text.count("many.txt:") == 5
    assert "stopped after 5 matches" in out.text


# --- policy ---------------------------------------------------------------------------


async def test_the_executors_policies_decide(ex: LocalExecutor, tmp_path: Path) -> None:
    """The toolset adds no policy of its own: the executor's wrappers refuse, as DENIED."""
    (tmp_path / "r.txt").write_text("kept\n")
    async with Toolset() as toolset:
        read_only = ReadOnly(ex)
        wrote = await call(toolset, read_only, "write_file", path="r.txt", content="gone")
        ran = await call(toolset, read_only, "run", command="echo > r.txt")
        edited = await call(
            toolset, read_only, "edit_file", path="r.txt", old_text="k", new_text=""
        )
        assert {wrote.kind, ran.kind, edited.kind} == {ToolOutputKind.DENIED}
        ruled = await call(toolset, CommandRules(ex, deny=["git push"]), "run", command="git push")
        assert ruled.kind is ToolOutputKind.DENIED
        assert "git push" in ruled.text
    assert (tmp_path / "r.txt").read_text() == "kept\n"


async def test_read_only_tools_work_under_read_only(ex: LocalExecutor, tmp_path: Path) -> None:
    """Every tool of the read-only subset works through `ReadOnly`."""
    (tmp_path / "a.txt").write_text("alpha\n")
    async with Toolset(read_only=True) as toolset:
        read_only = ReadOnly(ex)
        outs = [
            await call(toolset, read_only, "read_file", path="a.txt"),
            await call(toolset, read_only, "list_files"),
            await call(toolset, read_only, "glob", pattern="*.txt"),
            await call(toolset, read_only, "search", pattern="alp"),
        ]
    assert [out.kind for out in outs] == [ToolOutputKind.OK] * 4
    assert outs[3].text == "a.txt:1:alpha"


async def test_symlink_out_of_a_confined_workspace_is_refused(tmp_path: Path) -> None:
    """Through a confined executor, reading a symlink that points out is refused."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_text("s3cret\n")
    work = tmp_path / "work"
    work.mkdir()
    os.symlink(outside / "secret", work / "link")
    async with LocalExecutor(work, confine=True) as confined, Toolset() as toolset:
        out = await call(toolset, confined, "read_file", path="link")
    assert out.is_error
    assert "s3cret" not in out.text


# --- the persistent shell and jobs ------------------------------------------------------


async def test_shell_keeps_state(toolset: Toolset, ex: LocalExecutor, tmp_path: Path) -> None:
    """Cd and variables carry across `shell` calls; `restart` drops them."""
    if not has_shell(ex):
        pytest.skip("this tree has no persistent shell (ToolExecutor.shell)")
    (tmp_path / "sub").mkdir()
    first = await call(toolset, ex, "shell", command="cd sub && export GREETING=hi")
    assert first.kind is ToolOutputKind.OK, first.text
    out = await call(toolset, ex, "shell", command='pwd; echo "$GREETING"')
    assert out.text == f"{tmp_path / 'sub'}\nhi\n[exit code 0]"
    failed = await call(toolset, ex, "shell", command="false")
    assert failed.kind is ToolOutputKind.FAILED
    assert failed.exit_code == 1
    fresh = await call(toolset, ex, "shell", command='echo "[$GREETING]"', restart=True)
    assert fresh.text.startswith("[]")


async def test_jobs_start_read_write_signal_stop(
    toolset: Toolset, ex: LocalExecutor, tmp_path: Path
) -> None:
    """A background job runs beside the shell; its output is read, stdin written, it is stopped."""
    if not has_shell(ex):
        pytest.skip("this tree has no persistent shell (ToolExecutor.shell)")
    started = await call(
        toolset, ex, "job_start", command="echo up; while read line; do echo got $line; done"
    )
    assert started.text.startswith("started job "), started.text
    job_id = started.text.split()[2].rstrip(":")
    wrote = await call(toolset, ex, "job_write", job_id=job_id, text="ping\n")
    assert wrote.kind is ToolOutputKind.OK
    text = ""
    with anyio.fail_after(10):
        while "got ping" not in text:
            text += (await call(toolset, ex, "job_read", job_id=job_id)).text
            await anyio.sleep(0.05)
    assert "up" in text
    listed = await call(toolset, ex, "job_list")
    assert f"job {job_id}" in listed.text
    assert "running" in listed.text.lower()
    looping = "trap 'echo caught; exit 7' INT; echo ready; while true; do sleep 0.05; done"
    sleeper = await call(toolset, ex, "job_start", command=looping)
    sleeper_id = sleeper.text.split()[2].rstrip(":")
    await _read_until(toolset, ex, sleeper_id, "ready")
    signalled = await call(toolset, ex, "job_signal", job_id=sleeper_id, signal="SIGINT")
    assert signalled.text == f"sent SIGINT to job {sleeper_id}"
    assert "caught" in await _read_until(toolset, ex, sleeper_id, "[exit code 7]")
    stopped = await call(toolset, ex, "job_stop", job_id=job_id)
    assert f"job {job_id}" in stopped.text
    unknown = await call(toolset, ex, "job_read", job_id="999")
    assert unknown.kind is ToolOutputKind.INVALID_ARGUMENTS
    assert "no such job" in unknown.text


async def _read_until(toolset: Toolset, ex: LocalExecutor, job_id: str, words: str) -> str:
    """What `job_read` gives of job `job_id` until `words` are in it (10 s at most)."""
    seen = ""
    with anyio.fail_after(10):
        while words not in seen:
            seen += (await call(toolset, ex, "job_read", job_id=job_id)).text
            await anyio.sleep(0.05)
    return seen


@pytest.mark.parametrize("signal", ["SIGUSR1", "usr1", str(int(UnixSignal.SIGUSR1))])
async def test_a_job_takes_any_signal_by_name_or_number(
    toolset: Toolset, ex: LocalExecutor, signal: str
) -> None:
    """`job_signal` with SIGUSR1 (a log reopen, a state dump) reaches the job's trap."""
    if not has_shell(ex):
        pytest.skip("this tree has no persistent shell (ToolExecutor.shell)")
    looping = "trap 'echo dumped' USR1; echo ready; while true; do sleep 0.05; done"
    started = await call(toolset, ex, "job_start", command=looping)
    job_id = started.text.split()[2].rstrip(":")
    await _read_until(toolset, ex, job_id, "ready")
    signalled = await call(toolset, ex, "job_signal", job_id=job_id, signal=signal)
    assert signalled.text == f"sent SIGUSR1 to job {job_id}"
    await _read_until(toolset, ex, job_id, "dumped")
    # The trap ran and the job goes on: a signal the job handles does not end it.
    assert "running" in (await call(toolset, ex, "job_list")).text.lower()
    refused = await call(toolset, ex, "job_signal", job_id=job_id, signal="SIGNOPE")
    assert refused.kind is ToolOutputKind.INVALID_ARGUMENTS
    assert "SIGUSR1" in refused.text
    await call(toolset, ex, "job_stop", job_id=job_id)


# --- the built-in streaming tools -------------------------------------------------------


async def test_builtin_streaming_tools(toolset: Toolset, ex: LocalExecutor, tmp_path: Path) -> None:
    """Terminal, log tailer and code interpreter are tools of the set, streaming live."""
    seen: list[bytes] = []
    context = ToolsetContext(ex, on_output=lambda chunk: seen.append(chunk.data))
    ran = await toolset.call(context, "terminal", {"command": "echo hi; exit 4", "pty": False})
    assert ran.kind is ToolOutputKind.FAILED
    assert ran.exit_code == 4
    assert ran.text.startswith("hi\n")
    (tmp_path / "app.log").write_text(
        "2024-01-01T00:00:00Z INFO started\n2024-01-01T00:00:01Z ERROR boom\n"
    )
    tailed = await toolset.call(
        context, "log_tailer", {"path": "app.log", "filter": {"level": "error"}}
    )
    assert tailed.kind is ToolOutputKind.OK, tailed.text
    assert "boom" in tailed.text
    assert "started" not in tailed.text
    first = await toolset.call(
        context, "code_interpreter", {"language": "python", "code": "x = 41", "session": "s"}
    )
    assert first.kind is ToolOutputKind.OK, first.text
    again = await toolset.call(
        context, "code_interpreter", {"language": "python", "code": "print(x + 1)", "session": "s"}
    )
    assert again.text.startswith("42\n"), again.text
    assert b"hi\n" in seen
    assert b"42\n" in seen
    bad = await toolset.call(context, "code_interpreter", {"language": "cobol", "code": "x"})
    assert bad.kind is ToolOutputKind.INVALID_ARGUMENTS
