"""Commands, outputs, errors, validated paths and wrappers as plain values."""

from __future__ import annotations

import datetime
import itertools
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from hypothesis import given, strategies as st

import executor
from executor import (
    Command,
    CommandError,
    CommandOutput,
    Exec,
    ExecutorError,
    InvalidArgument,
    LocalExecutor,
    NonZeroExit,
    PolicyDenied,
    ReadFile,
    ReadOnly,
    ScopedExecutor,
    Shell,
    Stderr,
    Stdout,
    TimedOut,
    WorkspacePath,
    WriteFile,
)
from executor._core.output import Chunk, OutputBuffer


@pytest.mark.slow
def test_public_names() -> None:
    """`executor.__all__` is exactly the public names, each importable."""
    public = {name for name in dir(executor) if not name.startswith("_")}
    modules = {"testing"}
    assert set(executor.__all__) == public - modules
    for name in executor.__all__:
        assert getattr(executor, name) is not None


# --- commands -------------------------------------------------------------------------


def test_builders_make_the_variants() -> None:
    """The static constructors build the four variants."""
    assert isinstance(Command.shell("ls"), Shell)
    assert isinstance(Command.exec(["ls", "-l"]), Exec)
    assert isinstance(Command.read_file("a"), ReadFile)
    assert isinstance(Command.write_file("a", "x"), WriteFile)
    assert Command.write_file("a", "é").content == "é".encode()
    assert Command.exec(["ls", "-l"]).argv == ("ls", "-l")


def test_with_methods_return_new_commands() -> None:
    """Each with_* returns a changed copy and leaves the original alone."""
    base = Command.shell("ls")
    changed = (
        base.with_current_dir("src")
        .with_timeout(datetime.timedelta(seconds=2))
        .with_env({"A": "1"})
        .with_env({"B": "2"})
        .with_stdin("in")
    )
    assert base.current_dir is None
    assert base.timeout is None
    assert dict(base.env) == {}
    assert changed.current_dir == "src"
    assert changed.timeout == 2.0
    assert dict(changed.env) == {"A": "1", "B": "2"}
    assert changed.stdin == b"in"
    assert isinstance(changed, Shell)
    assert changed.script == "ls"
    assert hash(changed) == hash(
        Command.shell("ls")
        .with_current_dir("src")
        .with_timeout(2)
        .with_env({"A": "1", "B": "2"})
        .with_stdin(b"in")
    )


def test_with_current_dir_takes_path_like() -> None:
    """with_current_dir and the file builders take os.PathLike values such as WorkspacePath."""
    assert Command.shell("ls").with_current_dir(Path("a/b")).current_dir == "a/b"
    assert Command.read_file(WorkspacePath("x/y.txt")).path == "x/y.txt"


@pytest.mark.parametrize("timeout", [0, -1, float("nan"), datetime.timedelta(0)])
def test_bad_timeouts(timeout: float | datetime.timedelta) -> None:
    """A timeout must be a positive number of seconds."""
    with pytest.raises(InvalidArgument, match="positive"):
        Command.shell("ls").with_timeout(timeout)


def test_bad_commands() -> None:
    """Empty argv, NUL bytes, a one-string argv and a bare #! are refused when built."""
    with pytest.raises(InvalidArgument):
        Command.exec([])
    with pytest.raises(InvalidArgument):
        Command.exec([""])
    with pytest.raises(TypeError, match=r"Command\.shell"):
        Command.exec("ls -l")
    with pytest.raises(InvalidArgument, match="NUL"):
        Command.shell("echo \0")
    with pytest.raises(InvalidArgument, match="NUL"):
        Command.exec(["echo", "a\0b"])
    with pytest.raises(InvalidArgument, match="NUL"):
        Command.read_file("a\0b")
    with pytest.raises(InvalidArgument, match="empty"):
        Command.read_file("")
    with pytest.raises(InvalidArgument, match="interpreter"):
        Command.shell("#!   \necho")
    with pytest.raises(InvalidArgument):
        Command.shell("ls").with_env({"A=B": "x"})


def test_shebang_parsing() -> None:
    """The #! line gives the program, one trimmed argument, and the body."""
    parsed = Command.shell("#!/usr/bin/env  python3 -u  \nprint(1)\n").shebang()
    assert parsed is not None
    assert parsed.argv == ("/usr/bin/env", "python3 -u")
    assert parsed.body == b"print(1)\n"
    bare = Command.shell("#!/bin/sh").shebang()
    assert bare is not None
    assert bare.argv == ("/bin/sh",)
    assert bare.body == b""
    assert Command.shell("echo '#!'").shebang() is None


# --- output ---------------------------------------------------------------------------


def test_output_views() -> None:
    """stdout, stderr and text() join chunks; empty chunks are dropped."""
    output = CommandOutput(
        chunks=(Stdout(b"a"), Stderr(b""), Stderr(b"b"), Stdout(b"c")), exit_code=0
    )
    assert output.chunks == (Stdout(b"a"), Stderr(b"b"), Stdout(b"c"))
    assert output.stdout == b"ac"
    assert output.stderr == b"b"
    assert output.text() == str(output) == "abc"
    assert len(output) == 3


utf8_text = st.text(alphabet=st.characters(blacklist_categories=["Cs"]), max_size=200)


@given(text=utf8_text, cuts=st.lists(st.integers(min_value=0, max_value=800), max_size=10))
def test_text_survives_any_split(text: str, cuts: list[int]) -> None:
    """However UTF-8 output is split into chunks, text() decodes it whole."""
    data = text.encode()
    points = sorted({0, len(data), *(c for c in cuts if c <= len(data))})
    chunks = tuple(Stdout(data[a:b]) for a, b in itertools.pairwise(points))
    assert CommandOutput(chunks=chunks).text() == text


chunk_lists = st.lists(
    st.tuples(st.booleans(), st.binary(max_size=300)).map(
        lambda t: Stdout(t[1]) if t[0] else Stderr(t[1])
    ),
    max_size=30,
)


@given(chunks=chunk_lists, limit=st.one_of(st.none(), st.integers(min_value=0, max_value=2000)))
def test_output_buffer_keeps_head_and_tail(chunks: list[Chunk], limit: int | None) -> None:
    """The buffer keeps everything under its limit, else exactly the first and last bytes."""
    buffer = OutputBuffer(limit)
    for chunk in chunks:
        buffer.append(chunk)
    stream = [(type(c), byte) for c in chunks for byte in c.data]
    kept = [(type(c), byte) for c in buffer.chunks() for byte in c.data]
    if limit is None or len(stream) <= limit:
        assert kept == stream
        assert not buffer.truncated
    else:
        head = limit - limit // 2
        tail = limit // 2
        assert kept == stream[:head] + (stream[len(stream) - tail :] if tail else [])
        assert buffer.truncated
        assert buffer.dropped == len(stream) - limit
    assert all(c.data for c in buffer.chunks())


# --- errors ---------------------------------------------------------------------------


def test_error_tree() -> None:
    """The error classes form the documented tree, with stdlib mix-ins."""
    assert issubclass(NonZeroExit, CommandError)
    assert issubclass(TimedOut, CommandError)
    assert issubclass(TimedOut, TimeoutError)
    assert issubclass(ExecutorError, CommandError)
    assert issubclass(PolicyDenied, ExecutorError)
    assert issubclass(InvalidArgument, ValueError)
    assert not issubclass(InvalidArgument, CommandError)


def test_error_message_is_bounded() -> None:
    """An error's message repeats the tail of a long output, not all of it."""
    output = CommandOutput(chunks=(Stdout(b"x" * 100_000 + b"END"),), exit_code=1)
    message = str(NonZeroExit("command exited with code 1", output))
    assert message.startswith("command exited with code 1\n")
    assert message.endswith("END")
    assert len(message) < 5000


# --- validated paths ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "rule"),
    [
        ("", "empty"),
        ("   ", "blank"),
        ("/etc/passwd", "relative"),
        ("../secret", "'..'"),
        ("a/../../b", "'..'"),
        ("a/..", "'..'"),
        ("a\0b", "NUL"),
    ],
)
def test_workspace_path_refuses(raw: str, rule: str) -> None:
    """WorkspacePath refuses a bad value, naming the value and the rule."""
    with pytest.raises(InvalidArgument) as caught:
        WorkspacePath(raw)
    assert rule in str(caught.value)
    assert repr(raw) in str(caught.value)


def test_workspace_path_accepts() -> None:
    """WorkspacePath accepts relative paths, normalised, and works as a path."""
    path = WorkspacePath(" src/./pkg//mod.py ")
    assert str(path) == os.fspath(path) == "src/pkg/mod.py"
    assert path.parts == ("src", "pkg", "mod.py")
    assert path.raw == " src/./pkg//mod.py "
    assert WorkspacePath("a..b/c").parts == ("a..b", "c")
    assert Path("/w") / path == Path("/w/src/pkg/mod.py")
    assert WorkspacePath("a/b") == WorkspacePath("a//b")


@given(st.text(max_size=40))
def test_workspace_path_never_escapes(raw: str) -> None:
    """Whatever WorkspacePath accepts stays below the workspace when joined onto it."""
    try:
        path = WorkspacePath(raw)
    except InvalidArgument:
        return
    joined = os.path.normpath(os.path.join("/workspace", path))
    assert joined == "/workspace" or joined.startswith("/workspace/")


# --- wrappers -------------------------------------------------------------------------


@pytest.fixture
async def local(tmp_path: Path) -> AsyncIterator[LocalExecutor]:
    """A LocalExecutor in an empty folder."""
    async with LocalExecutor(tmp_path) as executor:
        yield executor


def test_wrapper_repr_shows_the_chain() -> None:
    """A wrapper's repr shows the whole chain."""
    wrapped = LocalExecutor("/repo").scoped("docs").read_only()
    assert repr(wrapped) == "ReadOnly(ScopedExecutor(LocalExecutor('/repo'), 'docs'))"
    assert isinstance(wrapped.inner, ScopedExecutor)


@pytest.mark.anyio
async def test_read_only_refuses_writes(local: LocalExecutor, tmp_path: Path) -> None:
    """ReadOnly refuses write_file and, without a sandbox, shell and argv commands."""
    read_only = ReadOnly(local)
    (tmp_path / "notes.md").write_text("hello")
    assert (await read_only.exec_cmd(Command.read_file("notes.md"))).stdout == b"hello"
    for cmd in (
        Command.write_file("notes.md", "x"),
        Command.shell("echo hi > notes.md"),
        Command.exec(["touch", "new"]),
    ):
        with pytest.raises(PolicyDenied, match="read-only"):
            await read_only.exec_cmd(cmd)
        with pytest.raises(PolicyDenied):
            await read_only.exec_cmd_streaming(cmd, lambda chunk: None)
    assert (tmp_path / "notes.md").read_text() == "hello"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.md"]
    assert [f.path async for f in read_only.stream_files(".")] == ["notes.md"]


@pytest.mark.anyio
async def test_read_only_fails_closed_on_unknown_commands(local: LocalExecutor) -> None:
    """A command variant ReadOnly does not know is refused, not passed on."""

    class Custom(Command):
        pass

    with pytest.raises(PolicyDenied, match="Custom"):
        await ReadOnly(local).exec_cmd(Custom())


@pytest.mark.anyio
async def test_unknown_command_is_an_executor_error(local: LocalExecutor) -> None:
    """A backend refuses a command variant it does not know, with ExecutorError."""

    class Custom(Command):
        pass

    with pytest.raises(ExecutorError, match="Custom"):
        await local.exec_cmd(Custom())


@pytest.mark.anyio
async def test_scoped_absolute_paths_are_left_alone(local: LocalExecutor, tmp_path: Path) -> None:
    """An absolute current_dir or file path is not joined onto the scope."""
    (tmp_path / "top.txt").write_text("top")
    scoped = local.scoped("sub")
    read = await scoped.exec_cmd(Command.read_file(str(tmp_path / "top.txt")))
    assert read.stdout == b"top"
    pwd = await scoped.exec_cmd(Command.shell("pwd").with_current_dir(str(tmp_path)))
    assert pwd.stdout == f"{tmp_path}\n".encode()


@pytest.mark.anyio
async def test_wrappers_close_what_they_wrap(tmp_path: Path) -> None:
    """Closing a wrapper closes the executor inside it."""
    local = LocalExecutor(tmp_path)
    async with local.scoped("x").read_only():
        pass
    with pytest.raises(ExecutorError, match="closed"):
        await local.exec_cmd(Command.shell("true"))


# --- cut output: the marker, the spill file, the rendering for models -------------------


@given(
    pieces=st.lists(st.binary(max_size=300).map(lambda b: b.replace(b"\r", b"\n")), max_size=40),
    limit=st.integers(min_value=0, max_value=400),
)
def test_the_elision_counts_what_the_buffer_left_out(
    pieces: list[bytes], limit: int, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Kept plus elided bytes and newlines are all of the output; the spill file holds it all."""
    folder = tmp_path_factory.mktemp("spill")
    buffer = OutputBuffer(limit, spill_dir=str(folder))
    for piece in pieces:
        buffer.append(Stdout(piece))
    output = buffer.output(exit_code=0, duration=0.0)
    whole = b"".join(pieces)
    if output.elided is None:
        assert output.stdout == whole
        assert not list(folder.iterdir())
        return
    elided = output.elided
    assert len(output.stdout) + elided.bytes == len(whole)
    assert output.stdout.count(b"\n") + elided.lines == whole.count(b"\n")
    kept = output.chunks
    assert (
        b"".join(c.data for c in kept[: elided.at])
        == whole[: len(b"".join(c.data for c in kept[: elided.at]))]
    )
    assert elided.spill is not None
    assert Path(elided.spill).read_bytes() == whole
    assert elided.marker() in output.text()


def test_the_marker_stands_at_the_cut_on_a_line_of_its_own() -> None:
    """`text()` puts the marker between the head and the tail, each line whole around it."""
    buffer = OutputBuffer(20)
    for n in range(100):
        buffer.append(Stdout(f"{n}\n".encode()))
    text = buffer.output(exit_code=0, duration=0.0).text()
    head, marker, tail = text.partition("[... ")
    assert head.startswith("0\n1\n")
    assert marker
    assert tail.split("\n", 1)[1].endswith("98\n99\n")


def test_for_model_keeps_whole_lines_within_the_budget_and_says_how_it_ended() -> None:
    """Past the budget whole head and tail lines stay, a marker counts the rest, a status closes."""
    from executor._core.render import for_model

    lines = [f"line {n}\n" for n in range(1000)]
    output = CommandOutput(chunks=(Stdout("".join(lines).encode()),), exit_code=3)
    text = for_model(output, budget=200)
    assert text.startswith("line 0\n")
    assert text.endswith("line 999\n[exit code 3]")
    kept = [line for line in text.splitlines(keepends=True) if line.startswith("line ")]
    missing = int(text.split("[... ")[1].split(" lines")[0])
    assert len(kept) + missing == 1000
    assert sum(map(len, kept)) <= 200
    killed = CommandOutput(chunks=(Stdout(b"x"),), exit_code=137, signal=9)
    assert for_model(killed).endswith("x\n[killed by SIGKILL, exit code 137]")
    assert for_model(CommandOutput(chunks=(Stdout(b"file"),))) == "file"


def test_the_package_reads_its_names_as_python_does() -> None:
    """`executor.__all__` and the names' homes are exactly what its TYPE_CHECKING imports say."""
    import ast

    tree = ast.parse(Path(executor.__file__).read_text())
    imports = {
        alias.name: node.module
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("executor.")
        for alias in node.names
    }
    assert imports == executor._HOME_OF
    assert sorted(imports) == sorted(executor.__all__)
    assert len(set(executor.__all__)) == len(executor.__all__)


def test_public_names_show_as_the_packages() -> None:
    """A public error's repr, a traceback and pickle name it `executor.X`, not its private home."""
    import pickle
    import subprocess
    import sys

    error = executor.NonZeroExit("failed", CommandOutput(chunks=(Stdout(b"x"),), exit_code=3))
    assert type(error).__module__ == "executor"
    assert executor.for_model.__module__ == "executor"
    assert "executor._" not in repr(executor.PolicyDenied)
    # A value class keeps its home, where its string annotations are resolved.
    import typing

    assert typing.get_type_hints(executor.CommandOutput)["exit_code"] == int | None
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is executor.NonZeroExit
    assert pickle.loads(pickle.dumps(executor.Command.shell("true"))) == executor.Command.shell(
        "true"
    )
    # In a fresh interpreter: the class of an error raised inside, once a public name is used.
    code = (
        "import executor, anyio\n"
        "async def main():\n"
        "    async with executor.LocalExecutor('.') as ex:\n"
        "        await ex.exec_cmd(executor.Command.shell('exit 3'))\n"
        "anyio.run(main)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
    )
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("executor.NonZeroExit: "), last
