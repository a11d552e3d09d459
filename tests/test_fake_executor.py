"""FakeExecutor: a handler for shell and argv commands, an in-memory tree for file commands."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from executor import (
    Command,
    CommandOutput,
    InvalidArgument,
    LocalExecutor,
    NonZeroExit,
    Stdout,
    ToolExecutor,
)
from executor.testing import FakeExecutor

pytestmark = pytest.mark.anyio

# A small repository, as files: ignore files, hidden and binary files, nested folders.
TREE: dict[str, str | bytes] = {
    ".git/HEAD": "ref: refs/heads/main\n",
    ".git/info/exclude": "excluded.txt\n",
    ".gitignore": "build/\n*.log\n",
    ".hidden.py": "hidden\n",
    "README.md": "# hi\n",
    "build/out.py": "built\n",
    "debug.log": "log\n",
    "docs/.ignore": "draft.md\n",
    "docs/draft.md": "draft\n",
    "docs/guide.md": "guide\n",
    "excluded.txt": "excluded\n",
    "src/a.py": "print(1)\n",
    "src/b.bin": b"\0\1",
    "src/pkg/c.py": "print(3)\n",
    "src/pkg/types.d.ts": "export {}\n",
    "src.txt": "sorted after src/ on disk\n",
}


async def listing(ex: ToolExecutor, path: str, extensions: list[str] | None = None) -> list[str]:
    """The paths `stream_files` yields for `path`."""
    return [loaded.path async for loaded in ex.stream_files(path, extensions)]


async def test_the_handler_answers_shell_and_argv_commands_and_files_answer_file_commands() -> None:
    """A handler that answers everything still never answers a read_file: the files do."""
    fake = FakeExecutor(lambda cmd: "3 files", files={"README.md": "# hi"})
    assert (await fake.exec_cmd(Command.shell("ls | wc -l"))).stdout == b"3 files"
    assert (await fake.exec_cmd(Command.exec(["ls"]))).stdout == b"3 files"
    assert (await fake.exec_cmd(Command.read_file("README.md"))).stdout == b"# hi"
    assert [f.path async for f in fake.stream_files(".")] == ["README.md"]


async def test_the_handler_never_sees_file_commands_but_calls_records_them() -> None:
    """File commands reach `calls` and not the handler, whatever the handler would answer."""
    seen: list[Command] = []

    def handler(cmd: Command) -> str:
        seen.append(cmd)
        return "from the handler"

    fake = FakeExecutor(handler)
    write = Command.write_file("notes.md", "hi")
    read = Command.read_file("notes.md")
    shell = Command.shell("cat notes.md")
    await fake.exec_cmd(write)
    await fake.exec_cmd(read)
    await fake.exec_cmd(shell)
    assert seen == [shell]
    assert fake.calls == [write, read, shell]


async def test_an_async_handler_is_awaited() -> None:
    """An async handler's answer is awaited, and bytes are stdout with exit code 0."""

    async def handler(cmd: Command) -> bytes:
        return b"\xffraw"

    output = await FakeExecutor(handler).exec_cmd(Command.shell("x"))
    assert (output.stdout, output.exit_code) == (b"\xffraw", 0)


async def test_no_answer_fails_with_exit_code_127() -> None:
    """Without a handler, or when it returns None, a shell command fails with exit code 127."""
    for fake in (FakeExecutor(), FakeExecutor(lambda cmd: None)):
        with pytest.raises(NonZeroExit) as caught:
            await fake.exec_cmd(Command.shell("make"))
        assert caught.value.output.exit_code == 127
        assert b"FakeExecutor has no answer" in caught.value.output.stderr


async def test_a_failing_output_from_the_handler_raises_non_zero_exit() -> None:
    """A CommandOutput with a non-zero exit code raises NonZeroExit carrying that output."""
    failed = CommandOutput(chunks=(Stdout(b"1 failed\n"),), exit_code=1)
    with pytest.raises(NonZeroExit) as caught:
        await FakeExecutor(lambda cmd: failed).exec_cmd(Command.shell("pytest"))
    assert caught.value.output is failed


async def test_writes_and_reads_join_onto_current_dir() -> None:
    """Paths join onto `current_dir`, writes make the folders above, and `files` holds the bytes."""
    fake = FakeExecutor(files={"docs/guide.md": "guide\n"})
    assert (await fake.exec_cmd(Command.read_file("guide.md").with_current_dir("docs"))).stdout == (
        b"guide\n"
    )
    await fake.exec_cmd(Command.write_file("new/deep/notes.md", "hi").with_current_dir("docs"))
    assert fake.files["docs/new/deep/notes.md"] == b"hi"
    assert (await fake.exec_cmd(Command.read_file("./docs/new/../new/deep/notes.md"))).stdout == (
        b"hi"
    )
    await fake.exec_cmd(Command.write_file("docs/guide.md", b"\0binary"))
    assert (await fake.exec_cmd(Command.read_file("docs/guide.md"))).stdout == b"\0binary"


@pytest.mark.parametrize(
    ("cmd", "reason"),
    [
        (Command.read_file("missing.txt"), "No such file or directory"),
        (Command.read_file("src"), "Is a directory"),
        (Command.read_file("."), "Is a directory"),
        (Command.read_file("src/a.py/x"), "Not a directory"),
        (Command.write_file("src", "x"), "Is a directory"),
        (Command.write_file("src/a.py/x", "x"), "Not a directory"),
    ],
)
async def test_file_errors_read_as_the_real_executors_give_them(
    cmd: Command, reason: str, tmp_path: Path
) -> None:
    """A file command that cannot work fails as LocalExecutor's does: the path, the OS's words."""
    fake = FakeExecutor(files={"src/a.py": "print(1)\n"})
    with pytest.raises(NonZeroExit) as faked:
        await fake.exec_cmd(cmd)
    async with LocalExecutor(tmp_path) as local:
        await local.exec_cmd(Command.write_file("src/a.py", "print(1)\n"))
        with pytest.raises(NonZeroExit) as real:
            await local.exec_cmd(cmd)
    assert faked.value.message == real.value.message == f"{getattr(cmd, 'path', '')}: {reason}"
    assert faked.value.output.stderr == real.value.output.stderr
    assert faked.value.output.exit_code is real.value.output.exit_code is None


@pytest.mark.parametrize(
    ("path", "extensions"),
    [
        (".", None),
        ("./src/", None),
        ("src", ["py"]),
        ("src", [".ts"]),
        ("src", ["d.ts", "md"]),
        ("docs", None),
        ("src/pkg/c.py", None),
        ("src/pkg/c.py", ["md"]),
        ("build", None),
    ],
)
async def test_stream_files_lists_as_the_local_executor_does(
    path: str, extensions: list[str] | None, tmp_path: Path
) -> None:
    """The same tree lists the same paths, in the same order, as on disk under LocalExecutor."""
    for name, content in TREE.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        data = content.encode() if isinstance(content, str) else content
        (tmp_path / name).write_bytes(data)
    async with LocalExecutor(tmp_path) as local:
        expected = await listing(local, path, extensions)
    assert await listing(FakeExecutor(files=TREE), path, extensions) == expected


async def test_stream_files_skips_what_the_rules_skip() -> None:
    """Ignored, hidden, excluded and binary files are left out; contents come back as text."""
    found = {f.path: f.content async for f in FakeExecutor(files=TREE).stream_files(".")}
    assert found == {
        "README.md": "# hi\n",
        "docs/guide.md": "guide\n",
        "src/a.py": "print(1)\n",
        "src/pkg/c.py": "print(3)\n",
        "src/pkg/types.d.ts": "export {}\n",
        "src.txt": "sorted after src/ on disk\n",
    }


async def test_a_missing_root_raises_as_the_local_executor_does(tmp_path: Path) -> None:
    """A folder that is not there raises FileNotFoundError (ENOENT) naming it, as on disk."""
    fake = FakeExecutor(files={"src/a.py": "x"})
    async with LocalExecutor(tmp_path) as local:
        await local.exec_cmd(Command.write_file("src/a.py", "x"))
        for missing in ("nope", "src/a.py/deeper", "./nope/"):
            with pytest.raises(FileNotFoundError) as real:
                await listing(local, missing)
            with pytest.raises(FileNotFoundError) as faked:
                await listing(fake, missing)
            assert faked.value.errno == real.value.errno == errno.ENOENT
            assert faked.value.filename == real.value.filename


async def test_an_empty_tree_lists_nothing() -> None:
    """The working directory always exists: listing it in an empty tree yields nothing."""
    assert await listing(FakeExecutor(), ".") == []


async def test_bad_extensions_are_refused_as_the_real_executors_refuse_them() -> None:
    """An extension that could never match raises InvalidArgument."""
    with pytest.raises(InvalidArgument):
        await listing(FakeExecutor(files={"a.py": "x"}), ".", ["a/b"])


async def test_a_scope_sees_the_tree_below_it() -> None:
    """Through `scoped()`, file commands and listings are relative to the scope."""
    fake = FakeExecutor(files=TREE)
    async with fake.scoped("src") as scoped:
        assert (await scoped.exec_cmd(Command.read_file("a.py"))).stdout == b"print(1)\n"
        assert await listing(scoped, "pkg", ["py"]) == ["pkg/c.py"]
        await scoped.exec_cmd(Command.write_file("new.py", "x"))
    assert fake.files["src/new.py"] == b"x"
    assert fake.closed


def test_a_path_cannot_be_a_file_and_a_folder() -> None:
    """`files` naming one path as a file and as a folder, or the workdir as a file, is refused."""
    with pytest.raises(ValueError, match="both a file and a folder"):
        FakeExecutor(files={"src": "x", "src/a.py": "y"})
    with pytest.raises(ValueError, match="working directory"):
        FakeExecutor(files={".": "x"})
