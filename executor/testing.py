"""The executor contract as reusable tests, for backends, wrappers and your own executors.

A backend supplies fixtures and inherits the tests::

    from executor.testing import ExecutorContract, LocalFixtures

    class TestLocal(ExecutorContract, LocalFixtures):
        pass

`ExecutorContract` needs two fixtures: `executor`, a `ToolExecutor` whose
working directory starts empty, and `anyio_backend`. It talks to the executor
only through its own interface, so it runs unchanged against a container or a
remote host. `SessionContract` states the same of `start()` sessions, and
`ReadOnlyContract` of read-only executors, and `LifecycleContract` how a
backend ends what it started (cancelled twice, closed twice, by the clock),
`OutputContract` what it hands back (files whole, cut output marked),
`RunContract` the rules of one command's run (last words read, the drain
period bounded and what comes past it kept, the kill grace in wall time, no
process of a tree left, a blocked sink's backpressure, the cap's cut marked),
`ShellContract` what a persistent shell and its jobs promise (`ex.shell()`).
Requires pytest and anyio's pytest plugin (`tool-executor[test]`).
"""

from __future__ import annotations

import contextlib
import errno
import inspect
import itertools
import os
import posixpath
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, ClassVar, TypeAlias

import anyio
import pytest
import sniffio

from executor._core.base import LoadedFile, PersistentShell, ToolExecutor, file_failure
from executor._core.commands import Command, ReadFile, StrPath, WriteFile
from executor._core.errors import (
    CommandError,
    ExecutorError,
    NonZeroExit,
    PolicyDenied,
    ShellExited,
    TimedOut,
)
from executor._core.jobs import Job, JobState
from executor._core.output import Chunk, CommandOutput, ShellOutput, Stderr, Stdout
from executor._core.session import ProcessSession
from executor._core.stdin import Bytes, Resize, Signal, Text, UnixSignal
from executor._files.rules import (
    Compiled,
    IgnoreFileName,
    Rules,
    as_text,
    compile_ignore_text,
    normalise_extensions,
    rules_above,
    wanted,
)
from executor._local.executor import LocalExecutor
from executor._policies.observed import CommandCancelled, CommandEvent, CommandFinished, Observed
from executor._policies.policies import Audit, AuditEvent, AuditRecord

__all__ = [
    "ExecutorContract",
    "ExecutorFactory",
    "FakeExecutor",
    "LifecycleContract",
    "LocalFixtures",
    "OutputContract",
    "ReadOnlyContract",
    "RunContract",
    "SessionContract",
    "ShellContract",
    "TreeWitness",
    "read_until",
]

pytestmark = pytest.mark.anyio

Handler: TypeAlias = Callable[
    [Command], "Awaitable[CommandOutput | str | bytes | None] | CommandOutput | str | bytes | None"
]


class FakeExecutor(ToolExecutor):
    """An executor without processes, for testing agents and tools.

    `handler(cmd)` (plain or async) answers each shell or argv command (and
    any other kind of command but a file read or write): a `CommandOutput`,
    or `str`/`bytes` taken as stdout with exit code 0; it may raise a
    `CommandError` to fail the command. `None`, or no handler, means "not
    handled": the command fails with exit code 127.

    File commands never reach the handler, so one written for shell
    commands (`lambda cmd: "3 files"`) cannot answer a `read_file` by
    mistake. `files` (path to text or bytes, relative to the working
    directory) is an in-memory tree, and `read_file`, `write_file` and
    `stream_files` work on it whatever the handler does, as the real
    executors work on their folder: paths join onto `current_dir`,
    `write_file` makes the folders above a file, a missing file fails with
    `NonZeroExit` and the OS's words on stderr, and `stream_files` lists a
    folder's text files by the local walker's rules (`.ignore`, `.gitignore`
    in a repository, hidden and binary files skipped, `extensions`), with
    paths as the caller wrote the folder, and raises `FileNotFoundError` for
    a folder that is not there.
    Every command received, file commands included, is appended to `calls`.

    ```python
    ex = FakeExecutor(lambda cmd: "3 files", files={"README.md": "# hi"})
    # exec_cmd(Command.shell("ls | wc -l")) gives b"3 files";
    # exec_cmd(Command.read_file("README.md")) gives b"# hi".
    ```

    Raises:
        ValueError: `files` names a path as a file and as a folder at once.
    """

    def __init__(
        self,
        handler: Handler | None = None,
        *,
        files: Mapping[str, str | bytes] | None = None,
    ) -> None:
        self.handler = handler
        self.files: dict[str, bytes] = {}
        for path, content in (files or {}).items():
            key = _key(path)
            if not key:
                raise ValueError(f"{path!r} names the working directory, not a file")
            self.files[key] = content.encode() if isinstance(content, str) else bytes(content)
        clash = next((key for key in self.files if _is_folder(self.files, key)), None)
        if clash is not None:
            raise ValueError(f"{clash!r} is both a file and a folder in files")
        self.calls: list[Command] = []
        self.closed = False

    def __repr__(self) -> str:
        return "FakeExecutor()"

    async def exec_cmd(self, cmd: Command) -> CommandOutput:
        """Answer a file command from `files`, any other command from the handler."""
        self.calls.append(cmd)
        if isinstance(cmd, ReadFile | WriteFile):
            return await self._file_command(cmd)
        if self.handler is not None:
            answer = self.handler(cmd)
            if inspect.isawaitable(answer):
                answer = await answer
            if answer is not None:
                output = _as_output(answer)
                if output.exit_code:
                    raise NonZeroExit(f"command exited with code {output.exit_code}", output)
                return output
        message = f"FakeExecutor has no answer for {cmd!r}"
        raise NonZeroExit(message, CommandOutput(chunks=(Stderr(message.encode()),), exit_code=127))

    async def _file_command(self, cmd: ReadFile | WriteFile) -> CommandOutput:
        started = anyio.current_time()
        path = _key(posixpath.join(cmd.current_dir or "", cmd.path))
        # A file on the way to the path, as the OS finds it, makes it unreachable.
        if any(above in self.files for above in _parents(path)):
            raise await file_failure(cmd.path, os.strerror(errno.ENOTDIR), started, None)
        if _is_folder(self.files, path) or not path:
            raise await file_failure(cmd.path, os.strerror(errno.EISDIR), started, None)
        if isinstance(cmd, WriteFile):
            self.files[path] = cmd.content
            return CommandOutput(duration=anyio.current_time() - started)
        if path not in self.files:
            raise await file_failure(cmd.path, os.strerror(errno.ENOENT), started, None)
        return CommandOutput(
            chunks=(Stdout(self.files[path]),), duration=anyio.current_time() - started
        )

    async def stream_files(
        self, path: StrPath, extensions: Iterable[str] | None = None
    ) -> AsyncIterator[LoadedFile]:
        """Yield the text files of `files` below `path`, as the local walker would list them."""
        raw = os.fspath(path)
        wanted_extensions = normalise_extensions(extensions)
        # Paths come back as the caller would write them: "src/a.py", not "./src/a.py".
        root = _key(raw)
        if root in self.files:
            # A file named as the root is listed by itself.
            text = as_text(self.files[root])
            if wanted(posixpath.basename(root), wanted_extensions) and text is not None:
                yield LoadedFile(root, text)
            return
        if root and not _is_folder(self.files, root):
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), root)
        tree = _MemoryTree(self.files)
        rules = await rules_above(root, tree)
        for loaded in await tree.walk(root, rules, wanted_extensions):
            yield loaded

    async def aclose(self) -> None:
        """Mark the executor closed."""
        self.closed = True


def _key(path: str) -> str:
    """`path` as a key of `FakeExecutor.files`: normalised, `""` for the working directory."""
    normal = posixpath.normpath(path)
    return "" if normal == "." else normal


def _as_output(answer: CommandOutput | str | bytes) -> CommandOutput:
    if isinstance(answer, CommandOutput):
        return answer
    data = answer.encode() if isinstance(answer, str) else answer
    return CommandOutput(chunks=(Stdout(data),), exit_code=0)


def _parents(path: str) -> Iterator[str]:
    """The folders above `path`, nearest first, without the working directory itself."""
    while (path := posixpath.dirname(path)) not in ("", "/"):
        yield path


def _is_folder(files: Mapping[str, bytes], path: str) -> bool:
    """Whether some file of `files` lies below `path`."""
    prefix = path.rstrip("/") + "/"
    return any(key.startswith(prefix) for key in files)


class _MemoryTree:
    """`FakeExecutor.files` as the walker's rules read it (`IgnoreFiles`), and its walk."""

    def __init__(self, files: Mapping[str, bytes]) -> None:
        self.files = files

    async def read(self, folder: str, name: IgnoreFileName) -> Compiled | None:
        """Compile `folder`'s ignore file `name`, if `files` holds one."""
        path = posixpath.join(folder, name)
        data = self.files.get(path)
        return None if data is None else compile_ignore_text(data, path)

    async def has_git(self, folder: str) -> bool:
        """Whether `folder` holds a `.git` file or folder."""
        path = posixpath.join(folder, ".git")
        return path in self.files or _is_folder(self.files, path)

    def entries(self, folder: str) -> dict[str, bool]:
        """The names in `folder`, each with whether it is a folder."""
        prefix = f"{folder.rstrip('/')}/" if folder else ""
        found: dict[str, bool] = {}
        for key in self.files:
            if key.startswith(prefix):
                name, slash, _ = key[len(prefix) :].partition("/")
                found[name] = found.get(name, False) or bool(slash)
        return found

    async def walk(
        self, root: str, rules: Rules, extensions: frozenset[str] | None
    ) -> list[LoadedFile]:
        """The text files below the folder `root`, depth first, names in sorted order."""
        found: list[LoadedFile] = []

        async def visit(folder: str, rules: Rules) -> None:
            entries = self.entries(folder)
            rules = await rules.add_folder(self, folder, {n for n in entries if n[0] == "."})
            # Never listed, as on disk: git's internals are no one's text files.
            entries.pop(".git", None)
            for name, is_dir in sorted(entries.items()):
                if not rules.keeps(name, is_dir, extensions):
                    continue
                path = posixpath.join(folder, name)
                if is_dir:
                    await visit(path, rules.descend(name))
                elif (text := as_text(self.files[path])) is not None:
                    found.append(LoadedFile(path, text))

        await visit(root, rules)
        return found


class LocalFixtures:
    """Fixtures for running the contract against a `LocalExecutor` in a temporary folder."""

    @pytest.fixture
    async def executor(self, tmp_path: Path) -> AsyncIterator[ToolExecutor]:
        """A LocalExecutor in an empty temporary folder, closed after the test."""
        async with LocalExecutor(tmp_path, kill_grace=0.2) as executor:
            yield executor


async def _text(executor: ToolExecutor, script: str) -> str:
    return (await executor.exec_cmd(Command.shell(script))).text()


@pytest.mark.anyio
class ExecutorContract:
    """The behaviour DESIGN.md promises of every executor."""

    # --- commands and output -------------------------------------------------

    async def test_shell_output_is_exact(self, executor: ToolExecutor) -> None:
        """Shell output comes back byte for byte: CRLF, blank lines and the final newline kept."""
        output = await executor.exec_cmd(Command.shell(r"printf 'a\r\n\n\nb\n'"))
        assert output.stdout == b"a\r\n\n\nb\n"
        assert output.exit_code == 0

    async def test_non_utf8_output_is_kept(self, executor: ToolExecutor) -> None:
        """Bytes that are not UTF-8 reach `stdout` unchanged and decode with replacement."""
        output = await executor.exec_cmd(Command.shell(r"printf '\377\376ok'"))
        assert output.stdout == b"\xff\xfeok"
        assert output.text() == "\ufffd\ufffdok"

    async def test_streams_are_separate(self, executor: ToolExecutor) -> None:
        """Stdout and stderr are kept apart."""
        output = await executor.exec_cmd(Command.shell("echo out; echo err >&2"))
        assert output.stdout == b"out\n"
        assert output.stderr == b"err\n"

    async def test_chunks_keep_the_order_read(self, executor: ToolExecutor) -> None:
        """Chunks of both streams come in the order they were written."""
        # Gaps of 0.2 s: two pipes have no shared order, so the order read is the
        # order written only while the reader keeps up (a loaded machine or a
        # remote backend can stall it for tens of milliseconds, and now and then
        # for longer: such a run is tried again).
        script = "echo 1; sleep 0.2; echo 2 >&2; sleep 0.2; echo 3; sleep 0.2; echo 4 >&2"
        written = [(Stdout, b"1\n"), (Stderr, b"2\n"), (Stdout, b"3\n"), (Stderr, b"4\n")]
        for _ in range(3):
            output = await executor.exec_cmd(Command.shell(script))
            assert output.stdout == b"1\n3\n"
            assert output.stderr == b"2\n4\n"
            read = [(type(c), c.data) for c in output.chunks]
            if read == written:
                return
        pytest.fail(f"3 runs read the chunks out of the order written, the last {read!r}")

    async def test_split_character_decodes_whole(self, executor: ToolExecutor) -> None:
        """A UTF-8 character written in two pieces decodes as one character.

        The pieces come 0.2 s apart, which makes two chunks unless the reader was
        held up that long (a loaded machine): such a run proves nothing, so it is
        tried again, and only a character that never came in two pieces fails.
        """
        for _ in range(3):
            output = await executor.exec_cmd(
                Command.shell(r"printf '\303'; sleep 0.2; printf '\251'")
            )
            assert output.text() == "é"
            if len(output.chunks) == 2:
                return
        pytest.fail(f"the two pieces arrived as one chunk in 3 runs: {output.chunks!r}")

    async def test_non_zero_exit_carries_the_output(self, executor: ToolExecutor) -> None:
        """A failing command raises NonZeroExit with its exit code and stderr."""
        with pytest.raises(NonZeroExit) as caught:
            await executor.exec_cmd(Command.shell("printf boom >&2; exit 3"))
        assert caught.value.output.exit_code == 3
        assert caught.value.output.stderr == b"boom"
        assert "boom" in str(caught.value)

    async def test_exec_runs_without_a_shell(self, executor: ToolExecutor) -> None:
        """An argv command passes its arguments untouched by any shell."""
        output = await executor.exec_cmd(Command.exec(["printf", "%s|", "a b", "$HOME", ";x"]))
        assert output.stdout == b"a b|$HOME|;x|"

    async def test_unknown_program_is_exit_127(self, executor: ToolExecutor) -> None:
        """An argv command naming no program fails like a shell's 'command not found'."""
        with pytest.raises(NonZeroExit) as caught:
            await executor.exec_cmd(Command.exec(["no-such-program-xyz"]))
        assert caught.value.output.exit_code == 127
        assert "no-such-program-xyz" in str(caught.value)

    async def test_stdin_is_empty_by_default(self, executor: ToolExecutor) -> None:
        """`cat` with no stdin returns at once with nothing, instead of waiting on a terminal."""
        with anyio.fail_after(5):
            output = await executor.exec_cmd(Command.shell("cat"))
        assert output.stdout == b""

    async def test_stdin_is_given(self, executor: ToolExecutor) -> None:
        """A command's stdin reaches the process exactly."""
        data = bytes(range(256)) * 1000
        output = await executor.exec_cmd(Command.shell("cat").with_stdin(data))
        assert output.stdout == data

    async def test_stdin_not_read_is_no_error(self, executor: ToolExecutor) -> None:
        """A command that ignores a large stdin still finishes normally."""
        output = await executor.exec_cmd(Command.shell("echo ok").with_stdin(b"x" * (1 << 22)))
        assert output.stdout == b"ok\n"

    async def test_shebang_script(self, executor: ToolExecutor) -> None:
        """A #! script runs its interpreter with the rest of the line as one argument."""
        script = '#!/bin/sh -eu\necho "$0" "$-"\necho body'
        output = await executor.exec_cmd(Command.shell(script))
        lines = output.stdout.decode().splitlines()
        assert lines[1] == "body"
        assert "e" in lines[0].split()[-1]
        assert "u" in lines[0].split()[-1]

    async def test_shebang_python(self, executor: ToolExecutor) -> None:
        """A #!/usr/bin/env python3 script runs under Python."""
        script = "#!/usr/bin/env python3\nimport sys\nprint(sys.version_info.major)"
        output = await executor.exec_cmd(Command.shell(script))
        assert output.stdout == b"3\n"

    # --- where and how -------------------------------------------------------

    async def test_current_dir_relative_and_absolute(self, executor: ToolExecutor) -> None:
        """A relative current_dir joins onto the working directory; an absolute one is kept."""
        await executor.exec_cmd(Command.write_file("sub/marker", "here"))
        workdir = (await _text(executor, "pwd")).strip()
        relative = await executor.exec_cmd(Command.shell("cat marker").with_current_dir("sub"))
        assert relative.stdout == b"here"
        # Inside the workdir, so that confined executors run it too.
        absolute = await executor.exec_cmd(Command.shell("pwd").with_current_dir(f"{workdir}/sub"))
        assert absolute.stdout == f"{workdir}/sub\n".encode()
        read = await executor.exec_cmd(Command.read_file("marker").with_current_dir("sub"))
        assert read.stdout == b"here"
        read = await executor.exec_cmd(Command.read_file(f"{workdir}/sub/marker"))
        assert read.stdout == b"here"

    async def test_command_env(self, executor: ToolExecutor) -> None:
        """A command's own variables reach it."""
        output = await executor.exec_cmd(
            Command.shell('printf %s "$GREETING"').with_env({"GREETING": "hé llo"})
        )
        assert output.stdout == "hé llo".encode()

    async def test_timeout_returns_partial_output(self, executor: ToolExecutor) -> None:
        """A command past its timeout raises TimedOut holding what it printed."""
        started = time.monotonic()
        # A second: a confined or remote command's start can take a few tenths
        # under load, and the line must be out before the timeout.
        with pytest.raises(TimedOut) as caught:
            await executor.exec_cmd(Command.shell("echo before; sleep 30").with_timeout(1))
        assert time.monotonic() - started < 8
        assert isinstance(caught.value, TimeoutError)
        assert caught.value.timeout == 1
        assert caught.value.output.stdout == b"before\n"

    async def test_background_child_does_not_block(self, executor: ToolExecutor) -> None:
        """`sleep 30 & echo done` returns at once although the sleep holds the pipe."""
        started = time.monotonic()
        output = await executor.exec_cmd(Command.shell("sleep 30 & echo done"))
        assert output.stdout == b"done\n"
        assert time.monotonic() - started < 1.0

    # --- files ---------------------------------------------------------------

    async def test_write_then_read_exact_bytes(self, executor: ToolExecutor) -> None:
        """write_file and read_file keep every byte, with parents created."""
        content = b"line\r\n\n\x00\xff\xfe tail without newline"
        written = await executor.exec_cmd(Command.write_file("a/b/c.bin", content))
        assert written.exit_code is None
        read = await executor.exec_cmd(Command.read_file("a/b/c.bin"))
        assert read.stdout == content
        assert read.exit_code is None

    async def test_write_replaces(self, executor: ToolExecutor) -> None:
        """Writing again replaces the whole content, shorter or longer."""
        await executor.exec_cmd(Command.write_file("f.txt", "a long first version\n"))
        await executor.exec_cmd(Command.write_file("f.txt", "short"))
        assert (await executor.exec_cmd(Command.read_file("f.txt"))).stdout == b"short"

    async def test_read_missing_file(self, executor: ToolExecutor) -> None:
        """Reading a missing file raises NonZeroExit with the OS message as output."""
        with pytest.raises(NonZeroExit) as caught:
            await executor.exec_cmd(Command.read_file("missing.txt"))
        assert caught.value.output.exit_code is None
        assert "missing.txt" in caught.value.output.text()
        assert "No such file" in caught.value.output.text()

    async def test_read_directory_fails(self, executor: ToolExecutor) -> None:
        """Reading a directory raises NonZeroExit instead of returning nothing."""
        await executor.exec_cmd(Command.write_file("d/x", ""))
        with pytest.raises(NonZeroExit):
            await executor.exec_cmd(Command.read_file("d"))

    async def test_write_file_then_shell_sees_it(self, executor: ToolExecutor) -> None:
        """A file written by write_file is what a shell command then reads."""
        await executor.exec_cmd(Command.write_file("notes.md", "hi\n"))
        assert await _text(executor, "cat notes.md") == "hi\n"

    # --- streaming -----------------------------------------------------------

    async def test_sink_sees_chunks_while_running(self, executor: ToolExecutor) -> None:
        """The sink gets the first chunk before the command ends."""
        seen: list[tuple[float, Chunk]] = []
        output = await executor.exec_cmd_streaming(
            Command.shell("echo first; sleep 0.5; echo second"),
            lambda chunk: seen.append((time.monotonic(), chunk)),
        )
        assert [c.data for _, c in seen] == [b"first\n", b"second\n"]
        assert seen[1][0] - seen[0][0] > 0.3
        assert output.stdout == b"first\nsecond\n"

    async def test_async_sink(self, executor: ToolExecutor) -> None:
        """An async sink is awaited for every chunk, in order."""
        seen: list[bytes] = []

        async def sink(chunk: Chunk) -> None:
            await anyio.sleep(0.001)
            seen.append(chunk.data)

        script = "for i in 1 2 3 4 5; do echo $i; echo e$i >&2; sleep 0.02; done"
        output = await executor.exec_cmd_streaming(Command.shell(script), sink)
        assert seen == [c.data for c in output.chunks]
        assert b"".join(seen).count(b"\n") == 10

    async def test_streaming_returns_like_exec_cmd(self, executor: ToolExecutor) -> None:
        """exec_cmd_streaming raises the same errors as exec_cmd, after reporting the chunks."""
        seen: list[Chunk] = []
        with pytest.raises(NonZeroExit) as caught:
            await executor.exec_cmd_streaming(Command.shell("echo x; exit 4"), seen.append)
        assert caught.value.output.exit_code == 4
        assert [c.data for c in seen] == [b"x\n"]

    async def test_sink_error_propagates(self, executor: ToolExecutor) -> None:
        """An exception in the sink stops the command and propagates as it is."""

        class Stop(Exception):
            pass

        def sink(chunk: Chunk) -> None:
            raise Stop

        started = time.monotonic()
        with pytest.raises(Stop):
            await executor.exec_cmd_streaming(Command.shell("echo x; sleep 30"), sink)
        assert time.monotonic() - started < 5

    async def test_file_commands_stream(self, executor: ToolExecutor) -> None:
        """A read_file reports its content to the sink."""
        await executor.exec_cmd(Command.write_file("f", b"abc"))
        seen: list[Chunk] = []
        await executor.exec_cmd_streaming(Command.read_file("f"), seen.append)
        assert b"".join(c.data for c in seen) == b"abc"

    # --- listing -------------------------------------------------------------

    async def test_stream_files(self, executor: ToolExecutor) -> None:
        """stream_files lists text files relative to the workdir, filtered by extension."""
        for name, content in {
            "src/a.py": "print(1)\n",
            "src/b.txt": "text\n",
            "src/.hidden.py": "x\n",
            "src/bin.py": "\x00\x01",
        }.items():
            await executor.exec_cmd(Command.write_file(name, content))
        every = {f.path: f.content async for f in executor.stream_files("src")}
        assert every == {"src/a.py": "print(1)\n", "src/b.txt": "text\n"}
        for extensions in (["py"], [".py"]):
            found = [f.path async for f in executor.stream_files("src", extensions)]
            assert found == ["src/a.py"]
        listed = [f async for f in executor.stream_files("src")]
        for loaded in listed:
            again = await executor.exec_cmd(Command.read_file(loaded.path))
            assert again.stdout.decode() == loaded.content

    async def test_stream_files_missing_root(self, executor: ToolExecutor) -> None:
        """Listing a folder that does not exist raises."""
        with pytest.raises(FileNotFoundError):
            async for _ in executor.stream_files("no-such-folder"):
                pass

    # --- scopes --------------------------------------------------------------

    async def test_scoped(self, executor: ToolExecutor) -> None:
        """A scoped executor runs commands in its folder; scopes nest and lists are relative."""
        await executor.exec_cmd(Command.write_file("docs/api/x.md", "x\n"))
        docs = executor.scoped("docs")
        assert (await docs.exec_cmd(Command.shell("ls"))).stdout == b"api\n"
        api = docs.scoped("api")
        assert (await api.exec_cmd(Command.read_file("x.md"))).stdout == b"x\n"
        relative = await docs.exec_cmd(Command.shell("ls").with_current_dir("api"))
        assert relative.stdout == b"x.md\n"
        assert [f.path async for f in docs.stream_files("api")] == ["api/x.md"]
        assert [f.path async for f in api.stream_files(".")] == ["x.md"]


@pytest.mark.anyio
class ReadOnlyContract:
    """What every read-only executor promises: reads work, nothing can write.

    Needs two fixtures: `executor`, the read-only executor, and `writer`, an
    executor on the same working directory that may write, to set up files.
    An executor whose `enforces_read_only` is true (a sandbox) must also run
    shell commands, and they must not write; one without must refuse them.
    """

    async def test_reads_work(self, executor: ToolExecutor, writer: ToolExecutor) -> None:
        """read_file and stream_files work through a read-only executor."""
        await writer.exec_cmd(Command.write_file("docs/a.md", "# a\n"))
        assert (await executor.exec_cmd(Command.read_file("docs/a.md"))).stdout == b"# a\n"
        assert [f.path async for f in executor.stream_files("docs")] == ["docs/a.md"]

    async def test_write_file_is_refused(
        self, executor: ToolExecutor, writer: ToolExecutor
    ) -> None:
        """write_file is refused with PolicyDenied, and the file is untouched."""
        await writer.exec_cmd(Command.write_file("notes.md", "original"))
        for run in (executor.exec_cmd, lambda cmd: executor.exec_cmd_streaming(cmd, print)):
            with pytest.raises(PolicyDenied):
                await run(Command.write_file("notes.md", "changed"))
        assert (await writer.exec_cmd(Command.read_file("notes.md"))).stdout == b"original"

    async def test_shell_cannot_write(self, executor: ToolExecutor, writer: ToolExecutor) -> None:
        """`echo hi > notes.md` is refused, or fails where a sandbox runs it; nothing is written."""
        for cmd in (
            Command.shell("echo hi > notes.md"),
            Command.exec(["sh", "-c", "echo hi > notes.md"]),
        ):
            with pytest.raises(PolicyDenied if not executor.enforces_read_only else NonZeroExit):
                await executor.exec_cmd(cmd)
        with pytest.raises(NonZeroExit):
            await writer.exec_cmd(Command.read_file("notes.md"))


async def read_until(session: ProcessSession, needle: bytes) -> bytes:
    """Read a session's chunks until their stdout holds `needle`; return the stdout read."""
    seen = b""
    while needle not in seen:
        item = await session.next_chunk()
        assert item is not None, f"output ended before {needle!r}: {seen!r}"
        if isinstance(item.chunk, Stdout):
            seen += item.chunk.data
    return seen


@pytest.mark.anyio
class SessionContract:
    """What DESIGN.md promises of `start()` sessions, on every backend that has them.

    Needs the fixture `executor`, an executor whose `start()` runs sessions.
    Checks behaviour through the session alone; whether a backend leaves no
    process behind is for its own tests, which can see its processes.
    """

    async def test_session_echo_through_cat(self, executor: ToolExecutor) -> None:
        """The command's own stdin comes first, then Text and Bytes, each echoed while it runs."""
        with anyio.fail_after(20):
            cmd = Command.shell("cat; echo done").with_stdin(b"first\n")
            async with await executor.start(cmd) as session:
                await read_until(session, b"first\n")
                await session.send_stdin(Text("hello\n"))
                await read_until(session, b"hello\n")
                await session.send_stdin(Bytes(b"\xffagain\n"))
                await read_until(session, b"again\n")
                await session.close_stdin()
                await session.close_stdin()
                output = await session.finalize()
            with pytest.raises(ExecutorError, match="stdin is closed"):
                await session.send_stdin(Text("late"))
        assert output.exit_code == 0
        assert output.stdout == b"first\nhello\n\xffagain\ndone\n"

    async def test_session_chunks_are_numbered_and_timed(self, executor: ToolExecutor) -> None:
        """Chunks come numbered from 1 without gaps, their times never go back, no byte lost."""
        script = "for i in 1 2 3 4 5; do echo $i; echo e$i >&2; sleep 0.05; done"
        items = []
        before = time.monotonic()
        with anyio.fail_after(20):
            async with await executor.start(Command.shell(script)) as session:
                items = [item async for item in session]
                output = await session.finalize()
        after = time.monotonic()
        assert [item.sequence for item in items] == list(range(1, len(items) + 1))
        assert all(before <= a.time <= b.time <= after for a, b in itertools.pairwise(items))
        stdout = b"".join(i.chunk.data for i in items if isinstance(i.chunk, Stdout))
        stderr = b"".join(i.chunk.data for i in items if isinstance(i.chunk, Stderr))
        assert stdout == output.stdout == b"1\n2\n3\n4\n5\n"
        assert stderr == output.stderr == b"e1\ne2\ne3\ne4\ne5\n"

    async def test_session_large_stdin(self, executor: ToolExecutor) -> None:
        """Megabytes of stdin reach the command whole, past any pipe or window size."""
        data = bytes(range(256)) * 16384
        with anyio.fail_after(60):
            async with await executor.start(Command.shell("wc -c")) as session:
                await session.send_stdin(Bytes(data))
                output = await session.finalize()
        assert output.stdout.strip() == str(len(data)).encode()

    async def test_session_exit_code(self, executor: ToolExecutor) -> None:
        """A failing exit raises NonZeroExit from finalize, with the output."""
        cmd = Command.shell("read line; echo got $line; exit 5").with_stdin("first\n")
        with anyio.fail_after(20):
            async with await executor.start(cmd) as session:
                with pytest.raises(NonZeroExit) as caught:
                    await session.finalize()
        assert caught.value.output.exit_code == 5
        assert caught.value.output.stdout == b"got first\n"

    async def test_session_signal_reaches_trap(self, executor: ToolExecutor) -> None:
        """Signal(SIGINT) reaches the command's process group: a shell's trap runs."""
        script = "trap 'echo got-int; exit 3' INT; echo ready; while :; do sleep 0.05; done"
        with anyio.fail_after(20):
            async with await executor.start(Command.shell(script)) as session:
                await read_until(session, b"ready")
                await session.send_stdin(Signal(UnixSignal.SIGINT))
                await read_until(session, b"got-int")
                with pytest.raises(NonZeroExit) as caught:
                    await session.finalize()
        assert caught.value.output.exit_code == 3

    async def test_session_cancel_then_finalize_raises(self, executor: ToolExecutor) -> None:
        """After cancel() the output ends and finalize raises NonZeroExit."""
        with anyio.fail_after(20):
            async with await executor.start(Command.shell("echo up; sleep 30")) as session:
                await read_until(session, b"up")
                session.cancel()
                assert await session.next_chunk() is None
                with pytest.raises(NonZeroExit):
                    await session.finalize()

    async def test_session_timeout_carries_partial_output(self, executor: ToolExecutor) -> None:
        """A session past its timeout raises TimedOut with what it printed."""
        cmd = Command.shell("echo partial; sleep 30").with_timeout(0.5)
        with anyio.fail_after(20):
            async with await executor.start(cmd) as session:
                with pytest.raises(TimedOut) as caught:
                    await session.finalize()
        assert caught.value.output.stdout == b"partial\n"

    async def test_session_keep_output_caps_what_finalize_keeps(
        self, executor: ToolExecutor
    ) -> None:
        """keep_output(n): the reader gets every byte, finalize keeps n of them, marked cut."""
        script = "head -c 200000 /dev/zero | tr '\\0' x; echo; echo done"
        with anyio.fail_after(60):
            session = await executor.start(Command.shell(script))
            session.keep_output(1000)
            async with session:
                seen = b"".join(
                    [item.chunk.data async for item in session if isinstance(item.chunk, Stdout)]
                )
                output = await session.finalize()
                with pytest.raises(ExecutorError, match="before the session is entered"):
                    session.keep_output(10)
        assert seen == b"x" * 200000 + b"\ndone\n"
        assert output.exit_code == 0
        assert output.truncated
        assert len(output.stdout) == 1000
        assert output.stdout.endswith(b"done\n")
        assert output.elided is not None
        assert output.elided.bytes == len(seen) - 1000
        assert output.elided.spill is None

    async def test_session_refusals(self, executor: ToolExecutor) -> None:
        """File commands and #! scripts cannot be sessions; Resize needs a pty."""
        with pytest.raises(ExecutorError, match="cannot start ReadFile"):
            await executor.start(Command.read_file("x"))
        with pytest.raises(ExecutorError, match="#!"):
            await executor.start(Command.shell("#!/bin/sh\necho"))
        with anyio.fail_after(20):
            async with await executor.start(Command.shell("cat")) as session:
                with pytest.raises(ExecutorError, match="pty"):
                    await session.send_stdin(Resize(80, 24))
                await session.finalize()

    async def test_session_pty_tty_and_resize(self, executor: ToolExecutor) -> None:
        """On a pty `tty` names a terminal; Resize sets its size and sends SIGWINCH."""
        script = "trap 'echo winch; stty size' WINCH; echo ready; while :; do sleep 0.05; done"
        with anyio.fail_after(20):
            cmd = Command.shell("tty && test -t 1 && echo out-is-a-tty")
            async with await executor.start(cmd, pty=True) as session:
                output = await session.finalize()
            # A sandbox with a /dev of its own may name its terminal /dev/console.
            assert re.fullmatch(rb"/dev/(pts/\d+|console)\r?\nout-is-a-tty\r?\n", output.stdout)
            async with await executor.start(Command.shell(script), pty=True) as session:
                await read_until(session, b"ready")
                await session.send_stdin(Resize(100, 40))
                assert b"winch" in await read_until(session, b"40 100")
                session.cancel()

    async def test_session_pty_ctrl_c(self, executor: ToolExecutor) -> None:
        """Ctrl-C typed on the pty interrupts the command, through the line discipline."""
        with anyio.fail_after(20):
            cmd = Command.shell("echo ready; exec sleep 30")
            async with await executor.start(cmd, pty=True) as session:
                await read_until(session, b"ready")
                await anyio.sleep(0.1)
                await session.send_stdin(Text("\x03"))
                with pytest.raises(NonZeroExit) as caught:
                    await session.finalize()
        output = caught.value.output
        # Killed by SIGINT: a local backend sees the signal; one that learns
        # only the exit status through a shell sees 128 + 2.
        assert output.signal == int(UnixSignal.SIGINT) or output.exit_code == 130


ExecutorFactory: TypeAlias = Callable[..., ToolExecutor]
"""Makes a new, unentered executor of the backend under test, in an empty folder.

Takes the backend's keyword options; the lifecycle contract passes `kill_grace`,
the output contract `read_limit`, `output_limit`, `stream_output_limit` and
`spill`, the run contract `kill_grace`, `drain_timeout` and `output_limit`.
"""

# A tree that ignores SIGTERM, so that killing it takes the whole grace period,
# and keeps a heartbeat: two processes (the shell and a background child) each
# append to `beat` every 50 ms. A file that stops growing proves both are gone,
# seen through the executor alone, on any backend.
_HEARTBEAT = (
    "trap '' TERM; "
    "(while :; do echo b >> beat; sleep 0.05; done) & "
    "while :; do echo a >> beat; sleep 0.05; done"
)


async def _size(executor: ToolExecutor, path: str) -> int:
    try:
        return len((await executor.exec_cmd(Command.read_file(path))).stdout)
    except NonZeroExit:
        return 0


async def _assert_still(executor: ToolExecutor, path: str, *, settle: float = 0.5) -> None:
    """`path` stops growing: nothing the command started still writes to it."""
    before = await _size(executor, path)
    await anyio.sleep(settle)
    after = await _size(executor, path)
    assert after == before, f"{path} grew from {before} to {after} bytes: a process survived"


async def _cut_off(
    run: Callable[[], Awaitable[object]],
    ready: Callable[[], Awaitable[object]],
    *,
    again: float | None,
) -> None:
    """Run `run`; once `ready()` returns, cancel it, and every `again` s until it ends.

    On asyncio the task is cancelled natively, as `asyncio.wait_for` and
    `TaskGroup` do, which a bare anyio shield does not hold off: the cancels
    that keep coming land in whatever cleanup is under way (the kill, the
    records). Elsewhere an inner cancel scope is cancelled, then an outer one.
    `again=None` cancels once.
    """
    if sniffio.current_async_library() == "asyncio":
        import asyncio

        task = asyncio.ensure_future(run())
        with anyio.fail_after(20):
            await ready()
        with anyio.fail_after(30):
            task.cancel()
            while again is not None and not task.done():
                await anyio.sleep(again)
                task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        return
    outer, inner = anyio.CancelScope(), anyio.CancelScope()

    async def victim() -> None:
        with outer, inner:
            await run()

    with anyio.fail_after(30):
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(victim)
            await ready()
            inner.cancel()
            if again is not None:
                await anyio.sleep(again)
                outer.cancel()


async def _shell_text(shell: PersistentShell, script: str, **options: Any) -> str:
    return (await shell.run(script, **options)).stdout.decode()


async def _read_job_until(job: Job, needle: bytes, *, within: float = 10.0) -> bytes:
    """Read a job's new output until it holds `needle`; return all read."""
    seen = b""
    with anyio.fail_after(within):
        while needle not in seen:
            seen += (await job.read(wait=0.2)).stdout
    return seen


@pytest.mark.anyio
class ShellContract:
    """What a persistent shell promises (`ex.shell()`), on every backend with sessions.

    Needs the fixture `executor`, an executor whose `start()` runs sessions
    and whose working directory is writable. Each test sees the backend only
    through the shell and the executor's own interface.
    """

    async def test_state_carries_from_command_to_command(self, executor: ToolExecutor) -> None:
        """Directory, exported and plain variables, functions, aliases and options all persist."""
        with anyio.fail_after(30):
            async with executor.shell() as sh:
                await sh.run("mkdir -p sub/deeper && cd sub")
                await sh.run("export EXPORTED=e1; PLAIN=p1")
                await sh.run('greet() { echo "hi $1"; }')
                await sh.run("alias say='echo said'")
                await sh.run("set -f")
                await sh.run("cd deeper")
                assert (await _shell_text(sh, "pwd")).rstrip().endswith("/sub/deeper")
                assert await _shell_text(sh, 'echo "$EXPORTED $PLAIN"') == "e1 p1\n"
                assert await _shell_text(sh, "sh -c 'echo $EXPORTED'") == "e1\n"
                assert await _shell_text(sh, "greet you") == "hi you\n"
                assert await _shell_text(sh, "say it") == "said it\n"
                assert await _shell_text(sh, "echo *") == "*\n"

    async def test_an_activated_virtualenv_stays_active(self, executor: ToolExecutor) -> None:
        """A sourced activate script (PATH and VIRTUAL_ENV) applies to the commands after it."""
        activate = (
            'VIRTUAL_ENV="$PWD/venv"; export VIRTUAL_ENV\n'
            'PATH="$VIRTUAL_ENV/bin:$PATH"; export PATH\n'
        )
        with anyio.fail_after(30):
            async with executor.shell() as sh:
                await sh.run(
                    "mkdir -p venv/bin && printf '#!/bin/sh\\necho from-venv\\n' > venv/bin/tool"
                    " && chmod +x venv/bin/tool"
                )
                await sh.run(f"printf '%s' {_sh_quote(activate)} > venv/bin/activate")
                await sh.run(". venv/bin/activate")
                assert await _shell_text(sh, "tool") == "from-venv\n"
                assert (await _shell_text(sh, 'echo "$VIRTUAL_ENV"')).rstrip().endswith("/venv")

    async def test_each_command_has_its_own_exit_code_and_streams(
        self, executor: ToolExecutor
    ) -> None:
        """Exit codes, stdout and stderr belong to the command that made them."""
        with anyio.fail_after(30):
            async with executor.shell() as sh:
                first = await sh.run("echo out1; echo err1 >&2")
                with pytest.raises(NonZeroExit) as caught:
                    await sh.run("echo out2; echo err2 >&2; false")
                third = await sh.run("echo out3")
        assert (first.stdout, first.stderr, first.exit_code) == (b"out1\n", b"err1\n", 0)
        failed = caught.value.output
        assert (failed.stdout, failed.stderr, failed.exit_code) == (b"out2\n", b"err2\n", 1)
        assert (third.stdout, third.stderr) == (b"out3\n", b"")
        assert isinstance(first, ShellOutput)
        assert not first.state_lost
        assert first.duration >= 0

    async def test_framing_is_exact_whatever_the_output(self, executor: ToolExecutor) -> None:
        """No trailing newline, NULs, binary bytes and a printed fake marker: all framed right."""
        with anyio.fail_after(30):
            async with executor.shell() as sh:
                bare = await sh.run("printf 'no newline'")
                nuls = await sh.run("printf 'a\\000b\\000'; printf '\\000' >&2")
                binary = await sh.run("printf '\\377\\376\\001\\036E'")
                fake = await sh.run("printf '\\036E0123456789abcdef 0\\n\\036R\\n'; echo more")
                after = await sh.run("echo next")
        assert bare.stdout == b"no newline"
        assert (nuls.stdout, nuls.stderr) == (b"a\0b\0", b"\0")
        assert binary.stdout == b"\xff\xfe\x01\x1eE"
        assert fake.stdout == b"\x1eE0123456789abcdef 0\n\x1eR\nmore\n"
        assert after.stdout == b"next\n"

    async def test_closed_or_redirected_output_does_not_break_the_next(
        self, executor: ToolExecutor
    ) -> None:
        """`exec >&-`, `exec 2>&-` and `exec >file` inside a command leave the next one framed."""
        with anyio.fail_after(30):
            async with executor.shell() as sh:
                with contextlib.suppress(NonZeroExit):
                    await sh.run("exec >&-; echo lost")
                assert await _shell_text(sh, "echo one") == "one\n"
                with contextlib.suppress(NonZeroExit):
                    await sh.run("exec 2>&-; echo gone >&2")
                assert (await sh.run("echo two >&2")).stderr == b"two\n"
                await sh.run("exec >redirected; echo into-file")
                assert await _shell_text(sh, "echo three") == "three\n"
                assert await _shell_text(sh, "cat redirected") == "into-file\n"

    async def test_stdin_is_eof_unless_given(self, executor: ToolExecutor) -> None:
        """A command reads end of file at once; given input, it reads exactly that, then EOF."""
        data = b"line one\n\x00\xff'\"\\ $HOME `x`\nlast"
        with anyio.fail_after(30):
            async with executor.shell() as sh:
                assert (await sh.run("cat")).stdout == b""
                assert (await sh.run("cat", stdin=data)).stdout == data
                assert (await sh.run('read -r a; echo "[$a]"', stdin="typed\n")).stdout == (
                    b"[typed]\n"
                )
                assert await _shell_text(sh, "echo still") == "still\n"

    async def test_timeout_interrupts_the_command_and_keeps_the_shell(
        self, executor: ToolExecutor
    ) -> None:
        """`export A=1; sleep 10` past a 0.5 s timeout is interrupted; `echo $A` then prints 1."""
        with anyio.fail_after(30):
            async with executor.shell() as sh:
                pid = sh.pid
                started = time.monotonic()
                with pytest.raises(TimedOut) as caught:
                    await sh.run("export A=1; echo started; sleep 10; echo never", timeout=0.5)
                assert time.monotonic() - started < 8
                assert caught.value.output.stdout == b"started\n"
                output = await sh.run("echo $A")
                assert output.stdout == b"1\n"
                assert not output.state_lost
                assert sh.pid == pid

    async def test_an_idle_timeout_interrupts_a_quiet_command_and_keeps_the_shell(
        self, executor: ToolExecutor
    ) -> None:
        """Quiet past `idle_timeout=1`, `sleep 10` is interrupted; a talkative command runs on."""
        with anyio.fail_after(40):
            async with executor.shell() as sh:
                started = time.monotonic()
                with pytest.raises(TimedOut) as caught:
                    await sh.run("export A=2; echo started; sleep 10", idle_timeout=1)
                assert caught.value.idle
                assert time.monotonic() - started < 8
                assert caught.value.output.stdout == b"started\n"
                talk = "for i in 1 2 3 4; do echo $i; sleep 0.6; done; echo $A"
                output = await sh.run(talk, idle_timeout=1)
                assert output.stdout == b"1\n2\n3\n4\n2\n"
                assert not output.state_lost

    async def test_cancelling_a_run_interrupts_it_and_keeps_the_shell(
        self, executor: ToolExecutor
    ) -> None:
        """A cancelled `run` interrupts its command; the shell and its state stay."""
        with anyio.fail_after(30):
            async with executor.shell() as sh:
                await sh.run("export KEPT=yes")
                with anyio.move_on_after(0.5):
                    await sh.run("sleep 10")
                output = await sh.run("echo $KEPT")
        assert output.stdout == b"yes\n"
        assert not output.state_lost

    async def test_a_command_that_ends_the_shell_is_reported(self, executor: ToolExecutor) -> None:
        """`exit 3`, `kill $$`, `exec true` raise ShellExited; the next run says state was lost."""
        with anyio.fail_after(60):
            async with executor.shell() as sh:
                await sh.run("export LOST=1")
                with pytest.raises(ShellExited) as caught:
                    await sh.run("echo bye; exit 3")
                assert caught.value.output.exit_code == 3
                assert caught.value.output.stdout == b"bye\n"
                fresh = await sh.run('echo "[$LOST]"')
                assert fresh.stdout == b"[]\n"
                assert fresh.state_lost
                assert sh.state_lost
                assert not (await sh.run("true")).state_lost
                with pytest.raises(ShellExited) as killed:
                    await sh.run("kill $$")
                assert killed.value.output.exit_code == 128 + 15
                assert (await sh.run("echo again")).state_lost
                with pytest.raises(ShellExited):
                    await sh.run("exec true")
                after = await sh.run("echo alive")
                assert (after.stdout, after.state_lost) == (b"alive\n", True)
                assert sh.restarts == 3

    async def test_a_second_caller_waits_its_turn(self, executor: ToolExecutor) -> None:
        """Two runs at once on one shell both run, one after the other, in order."""
        results: list[bytes] = []

        async def run(sh: PersistentShell, script: str) -> None:
            results.append((await sh.run(script)).stdout)

        with anyio.fail_after(30):
            async with executor.shell() as sh, anyio.create_task_group() as tasks:
                tasks.start_soon(run, sh, "sleep 0.3; echo first")
                await anyio.sleep(0.1)
                tasks.start_soon(run, sh, "echo second")
        assert results == [b"first\n", b"second\n"]

    async def test_shells_are_isolated(self, executor: ToolExecutor) -> None:
        """Two shells of one executor run at once, each with its own state."""
        with anyio.fail_after(30):
            async with executor.shell() as one, executor.shell() as two:
                await one.run("export WHO=one; cd /")
                await two.run("export WHO=two")
                assert await _shell_text(one, "echo $WHO; pwd") == "one\n/\n"
                assert (await _shell_text(two, "echo $WHO")) == "two\n"

    async def test_a_sink_sees_output_while_the_command_runs(self, executor: ToolExecutor) -> None:
        """The streaming form hands chunks over before the command ends; the output matches."""
        seen: list[Chunk] = []
        first = anyio.Event()

        def sink(chunk: Chunk) -> None:
            seen.append(chunk)
            first.set()

        with anyio.fail_after(30):
            async with executor.shell() as sh, anyio.create_task_group() as tasks:
                outputs: list[CommandOutput] = []

                async def run() -> None:
                    outputs.append(await sh.run("echo early; sleep 1; echo late", sink=sink))

                tasks.start_soon(run)
                await first.wait()
                assert not outputs
        assert b"".join(chunk.data for chunk in seen) == b"early\nlate\n"
        assert outputs[0].stdout == b"early\nlate\n"

    async def test_background_job_is_listed_read_written_signalled_and_killed(
        self, executor: ToolExecutor
    ) -> None:
        """A job runs in the shell's directory with its variables; every handle works."""
        script = (
            'trap \'echo got-int\' INT; echo "ready $JOBVAR $(basename "$PWD")"; '
            'while :; do if read -r line; then echo "echo:$line"; fi; sleep 0.05; done'
        )
        with anyio.fail_after(60):
            async with executor.shell() as sh:
                await sh.run("mkdir -p jobdir && cd jobdir && export JOBVAR=v1")
                job = await sh.start_job(script)
                assert await _read_job_until(job, b"ready v1 jobdir\n")
                [listed] = sh.jobs()
                assert (listed.id, listed.state) == (job.id, JobState.RUNNING)
                assert listed.exit_code is None
                assert sh.job(job.id) is job
                await job.write("hello\n")
                assert b"echo:hello\n" in await _read_job_until(job, b"echo:hello\n")
                await job.signal(UnixSignal.SIGINT)
                await _read_job_until(job, b"got-int\n")
                assert (await job.wait(timeout=0.2)).state is JobState.RUNNING
                status = await job.kill()
                assert status.state is JobState.KILLED
                assert status.exit_code
                assert sh.jobs()[0].state is JobState.KILLED
                with pytest.raises(ExecutorError):
                    await job.write("late\n")
                with pytest.raises(ExecutorError, match="no job"):
                    sh.job("999")
                assert await _shell_text(sh, "echo shell-fine") == "shell-fine\n"

    async def test_a_job_that_ends_reports_its_exit_code(self, executor: ToolExecutor) -> None:
        """A job that exits is EXITED with its code; its last output is still read."""
        with anyio.fail_after(30):
            async with executor.shell() as sh:
                job = await sh.start_job("echo out; echo err >&2; exit 7")
                status = await job.wait(timeout=20)
                output = await job.read()
        assert (status.state, status.exit_code) == (JobState.EXITED, 7)
        assert (output.stdout, output.stderr, output.exit_code) == (b"out\n", b"err\n", 7)

    async def test_a_job_read_is_bounded_and_marks_its_cut(self, executor: ToolExecutor) -> None:
        """`read(max_bytes=)` keeps head and tail and marks what it cut."""
        with anyio.fail_after(30):
            async with executor.shell() as sh:
                job = await sh.start_job("seq 1 20000")
                await job.wait(timeout=20)
                output = await job.read(max_bytes=1000)
                assert (await job.read()).stdout == b""
        elided = output.elided
        assert output.truncated
        assert elided is not None
        assert len(output.stdout) == 1000
        whole = "".join(f"{n}\n" for n in range(1, 20001)).encode()
        assert elided.bytes == len(whole) - 1000
        assert output.stdout.startswith(b"1\n2\n")
        assert output.stdout.endswith(b"19999\n20000\n")
        assert elided.marker() in output.text()

    async def test_aclose_leaves_no_process_behind(self, executor: ToolExecutor) -> None:
        """Closing the shell ends the shell, its background children and every job."""
        beat = "i=0; while :; do i=$((i+1)); echo $i >> {0}; sleep 0.05; done"
        with anyio.fail_after(60):
            async with executor.shell() as sh:
                await sh.run(f"({beat.format('shell-beat')}) >/dev/null 2>&1 &")
                await sh.start_job(beat.format("job-beat"))
                for beat_file in ("shell-beat", "job-beat"):
                    while not await _size(executor, beat_file):
                        await anyio.sleep(0.05)
            with pytest.raises(ExecutorError):
                await sh.run("true")
            await _assert_still(executor, "shell-beat")
            await _assert_still(executor, "job-beat")


def _sh_quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


@pytest.mark.anyio
class LifecycleContract:
    """How every backend ends what it started: under cancellation, on close, by the clock.

    Needs the fixture `executor_factory` (see `ExecutorFactory`): each test
    makes and closes its own executors, with the `kill_grace` it needs. Like
    `ExecutorContract` it sees the backend only through the executor's own
    interface, so it runs against a container, a sandbox or a remote host.
    """

    async def test_a_second_cancel_during_the_kill_leaves_nothing_and_records_the_end(
        self, executor_factory: ExecutorFactory
    ) -> None:
        """Cancelled twice while its tree is killed: no survivor, Audit's END and Observed's end."""
        records: list[AuditRecord] = []
        events: list[CommandEvent] = []

        # Slow to record an end, so that a cancel lands while they do.
        async def record(record: AuditRecord) -> None:
            if record.event is AuditEvent.END:
                await anyio.sleep(0.3)
            records.append(record)

        async def observe(event: CommandEvent) -> None:
            if isinstance(event, CommandCancelled | CommandFinished):
                await anyio.sleep(0.3)
            events.append(event)

        async with executor_factory(kill_grace=1.0) as executor:
            watched = Observed(Audit(executor, record), observe, tracing=False)

            async def run() -> None:
                await watched.exec_cmd(Command.shell(_HEARTBEAT))

            async def beating() -> None:
                while not await _size(executor, "beat"):
                    await anyio.sleep(0.05)

            # Cancels land inside the kill's grace period (1 s) and in the records.
            await _cut_off(run, beating, again=0.1)
            await _assert_still(executor, "beat")
        ends = [record for record in records if record.event is AuditEvent.END]
        assert [record.outcome for record in ends] == ["cancelled"], records
        assert [type(event) for event in events][-1] in (CommandCancelled, CommandFinished)

    async def test_aclose_twice_is_harmless(self, executor_factory: ExecutorFactory) -> None:
        """`aclose()` inside the block, then on leaving it, and twice at once: no error."""
        async with executor_factory(kill_grace=0.2) as executor:
            await executor.exec_cmd(Command.shell("true"))
            await executor.aclose()
        await executor.aclose()
        async with executor_factory(kill_grace=0.2) as executor:
            await executor.exec_cmd(Command.shell("true"))
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(executor.aclose)
                tasks.start_soon(executor.aclose)

    async def test_kill_grace_is_wall_time(self, executor_factory: ExecutorFactory) -> None:
        """A TERM-ignoring command returns within kill_grace + 0.3 s of its timeout.

        (Plus what a `true` takes to run on the executor just before: the cost of
        a start and an end, which a loaded machine stretches, is not the grace's.)
        """
        grace = 1.0
        async with executor_factory(kill_grace=grace) as executor:
            # What starting and ending a command costs here, however loaded the
            # machine is, is no part of the grace: it is measured and allowed for.
            await executor.exec_cmd(Command.shell("true"))
            started = time.monotonic()
            await executor.exec_cmd(Command.shell("true"))
            spawn = time.monotonic() - started
            cmd = Command.shell("trap '' TERM; sleep 30").with_timeout(0.5)
            started = time.monotonic()
            with pytest.raises(TimedOut):
                await executor.exec_cmd(cmd)
            past_timeout = time.monotonic() - started - 0.5
        assert past_timeout <= grace + 0.3 + spawn, (
            f"returned {past_timeout:.2f} s after the timeout (a `true` took {spawn:.2f} s)"
        )

    async def test_a_signal_death_reports_the_signal(
        self, executor_factory: ExecutorFactory
    ) -> None:
        """A command killed by SIGKILL says so: `.signal` 9 and exit code 137, as a shell says."""
        async with executor_factory(kill_grace=0.2) as executor:
            with pytest.raises(NonZeroExit) as caught:
                await executor.exec_cmd(Command.shell("echo before; kill -9 $$"))
        output = caught.value.output
        assert (output.signal, output.exit_code, output.stdout) == (9, 137, b"before\n")
        assert "SIGKILL" in caught.value.message

    @pytest.mark.parametrize("how", ["cancel", "timeout"])
    async def test_a_cut_off_write_leaves_no_temporary_file(
        self, executor_factory: ExecutorFactory, how: str
    ) -> None:
        """A write_file cut off by a cancel or a timeout leaves the old or the whole new file."""
        new = os.urandom(32 << 20)
        async with executor_factory(kill_grace=0.2) as executor:
            await executor.exec_cmd(Command.write_file("target.bin", b"old"))
            write = Command.write_file("target.bin", new)
            if how == "cancel":

                async def run() -> None:
                    await executor.exec_cmd(write)

                await _cut_off(run, lambda: anyio.sleep(0.02), again=None)
            else:
                with contextlib.suppress(TimedOut):
                    await executor.exec_cmd(write.with_timeout(0.02))
            # As the call returns, and later: what it left does not change after it.
            seen = []
            for _ in range(2):
                listing = await executor.exec_cmd(Command.shell("ls -A"))
                content = (await executor.exec_cmd(Command.read_file("target.bin"))).stdout
                seen.append((listing.stdout, len(content)))
                await anyio.sleep(0.5)
        assert seen[0][0] == b"target.bin\n", seen
        assert content in (b"old", new), f"target holds {len(content)} bytes"
        assert seen[0] == seen[1], f"the write went on after the call returned: {seen}"


@pytest.mark.anyio
class OutputContract:
    """What a backend hands back: files whole or a clear failure, cut output marked and kept.

    Needs the fixture `executor_factory` (see `ExecutorFactory`); each test
    makes its executor with the options it needs (`read_limit`,
    `output_limit`, `spill`).
    """

    async def test_a_large_file_comes_back_byte_identical(
        self, executor_factory: ExecutorFactory
    ) -> None:
        """100 MB of random bytes, written and read back, are the same bytes: never spliced."""
        content = os.urandom(100 << 20)
        async with executor_factory() as executor:
            await executor.exec_cmd(Command.write_file("random.bin", content))
            output = await executor.exec_cmd(Command.read_file("random.bin"))
            assert not output.truncated
            assert output.stdout == content
            await executor.exec_cmd(Command.write_file("copy.bin", output.stdout))
            copy = await executor.exec_cmd(Command.read_file("copy.bin"))
        assert copy.stdout == content

    async def test_a_file_past_the_read_limit_fails_naming_it(
        self, executor_factory: ExecutorFactory
    ) -> None:
        """A file past `read_limit` is refused with its size and the limit; nothing is returned."""
        async with executor_factory(read_limit=1000) as executor:
            await executor.exec_cmd(Command.write_file("small.txt", b"x" * 1000))
            assert len((await executor.exec_cmd(Command.read_file("small.txt"))).stdout) == 1000
            await executor.exec_cmd(Command.write_file("big.txt", b"x" * 1001))
            with pytest.raises(NonZeroExit) as caught:
                await executor.exec_cmd(Command.read_file("big.txt"))
        assert "1001 bytes" in caught.value.message
        assert "read limit of 1000 bytes" in caught.value.message
        assert caught.value.output.stdout == b""

    async def test_a_file_streamed_to_a_sink_is_whole_there(
        self, executor_factory: ExecutorFactory
    ) -> None:
        """Past `output_limit` a streamed file reaches the sink whole; the output keeps none."""
        content = os.urandom(3 << 20)
        seen: list[bytes] = []
        async with executor_factory(output_limit=1 << 20) as executor:
            await executor.exec_cmd(Command.write_file("f.bin", content))

            def sink(chunk: Chunk) -> None:
                seen.append(chunk.data)

            output = await executor.exec_cmd_streaming(Command.read_file("f.bin"), sink)
        assert b"".join(seen) == content
        assert output.stdout == b""
        assert output.truncated
        assert output.elided is not None
        assert output.elided.bytes == len(content)

    async def test_cut_output_is_marked_with_what_is_missing(
        self, executor_factory: ExecutorFactory
    ) -> None:
        """Past `output_limit`, `text()` marks the cut with the missing lines and bytes."""
        async with executor_factory(output_limit=2000) as executor:
            output = await executor.exec_cmd(Command.shell("seq 1 100000"))
        whole = "".join(f"{n}\n" for n in range(1, 100001))
        elided = output.elided
        assert output.truncated
        assert elided is not None
        kept = output.stdout.decode()
        assert elided.bytes == len(whole) - len(kept)
        assert elided.lines == whole.count("\n") - kept.count("\n")
        marker = f"[... {elided.lines} lines ({elided.bytes} bytes) elided ...]"
        text = output.text()
        assert marker in text
        head, tail = text.split(marker)
        assert whole.startswith(head.rstrip("\n"))
        assert whole.endswith(tail.lstrip("\n"))
        assert str(NonZeroExit("x", output)).count(marker) <= 1

    async def test_a_streamed_flood_keeps_little_and_the_sink_every_byte(
        self, executor_factory: ExecutorFactory
    ) -> None:
        """With a sink the output keeps `stream_output_limit` (head and tail); without, it all."""
        script = "head -c 3000000 /dev/zero | tr '\\0' 'x'"
        async with executor_factory(stream_output_limit=1 << 20) as executor:
            seen: list[bytes] = []

            def sink(chunk: Chunk) -> None:
                seen.append(chunk.data)

            streamed = await executor.exec_cmd_streaming(Command.shell(script), sink)
            whole = await executor.exec_cmd(Command.shell(script))
        assert b"".join(seen) == b"x" * 3_000_000
        assert streamed.truncated
        assert len(streamed.stdout) == 1 << 20
        assert streamed.elided is not None
        assert streamed.elided.bytes == 3_000_000 - (1 << 20)
        assert not whole.truncated
        assert whole.stdout == b"x" * 3_000_000

    async def test_spilled_output_holds_every_byte(
        self, executor_factory: ExecutorFactory, tmp_path: Path
    ) -> None:
        """With `spill=`, cut output is kept whole in a file whose path the marker gives."""
        script = "head -c 20000000 /dev/urandom | od -An -tx1 -v"
        async with executor_factory(output_limit=1 << 16, spill=tmp_path) as executor:
            seen: list[bytes] = []

            def sink(chunk: Chunk) -> None:
                seen.append(chunk.data)

            output = await executor.exec_cmd_streaming(Command.shell(script), sink)
        elided = output.elided
        assert elided is not None
        assert elided.spill is not None
        assert os.path.dirname(elided.spill) == str(tmp_path)
        with open(elided.spill, "rb") as spilled:  # noqa: ASYNC230 (a test's own check)
            assert spilled.read() == b"".join(seen)
        assert elided.spill in output.text()

    async def test_a_persistent_shell_and_its_jobs_spill_nothing_of_their_own(
        self, executor_factory: ExecutorFactory, tmp_path: Path
    ) -> None:
        """A shell's frames and a job's output are read as they come: none is kept aside.

        Each command's output is under the limit; the shell's own session
        carries all of it, past the limit, and once spilled it to a file nobody read.
        """
        print_100k = "head -c 100000 /dev/zero | tr '\\0' x; echo"
        async with (
            executor_factory(stream_output_limit=1 << 16, spill=tmp_path) as executor,
            executor.shell() as shell,
        ):
            for _ in range(4):
                output = await shell.run(print_100k)
                assert output.stdout == b"x" * 100000 + b"\n"
            job = await shell.start_job(print_100k)
            status = await job.wait(30)
            assert status.state is JobState.EXITED
            assert (await job.read()).stdout == b"x" * 100000 + b"\n"
            assert os.listdir(tmp_path) == []
        assert os.listdir(tmp_path) == []


TreeWitness: TypeAlias = Callable[[list[int], str], Awaitable[list[str]]]
"""Which processes of a command's tree still run, for `RunContract`.

Called with the pids the tree's processes wrote (as they see them) and the
`NAME=value` entry every process of the tree has in its environment; returns
a description of each survivor, nothing when the tree is gone.
"""

# The variable that marks the processes of `RunContract`'s trees.
_TREE_MARK = "EXECUTOR_RUN_CONTRACT_TREE"

# Which of the pids given as arguments still run, said from inside the
# backend: `kill -0`, where "No such process" (ESRCH) is dead and any other
# refusal (EPERM: a process of another sandbox domain) alive; a zombie is dead.
_STILL_RUNNING = """
for pid in "$@"; do
    if kill -0 "$pid" 2>/dev/null; then
        state=
        read -r stat < "/proc/$pid/stat" 2>/dev/null && state=${stat##*) } && state=${state%% *}
        [ "$state" = Z ] || echo "$pid"
    else
        case $(kill -0 "$pid" 2>&1) in
            *"No such process"*) ;;
            *) echo "$pid" ;;
        esac
    fi
done
"""

# Kill every process whose environment holds the entry given as argument.
_KILL_MARKED = """
for environ in /proc/[0-9]*/environ; do
    if tr '\\0' '\\n' < "$environ" 2>/dev/null | grep -qxF "$1"; then
        pid=${environ#/proc/}
        kill -9 "${pid%/environ}" 2>/dev/null
    fi
done
true
"""


def _tree(*, stays: bool) -> str:
    """A command whose tree writes its pids, one a line, to `tree.pids`: four in all.

    The command's shell, a background `sleep`, one that ignores SIGTERM and one
    in a session of its own (`setsid`), the three with their output elsewhere.
    With `stays` the shell ignores SIGTERM too and waits for them; otherwise it
    exits, and they run on as the command's background jobs.
    """
    children = (
        "sleep 30 >/dev/null 2>&1 & echo $! >> tree.pids; "
        "(trap '' TERM; exec sleep 30) >/dev/null 2>&1 & echo $! >> tree.pids; "
        "setsid sleep 30 >/dev/null 2>&1 & echo $! >> tree.pids; "
    )
    if stays:
        return f"trap '' TERM; echo $$ >> tree.pids; {children}wait"
    return f"echo $$ >> tree.pids; {children}echo started"


async def _pids(executor: ToolExecutor, path: str) -> list[int]:
    try:
        text = (await executor.exec_cmd(Command.read_file(path))).stdout.decode()
    except NonZeroExit:
        return []
    # A line still being written is not a pid yet.
    return [int(line) for line in text.split("\n")[:-1] if line.strip().isdigit()]


async def _start_and_end_cost(executor: ToolExecutor) -> float:
    """What a `true` takes on `executor`: a start and an end, however loaded the machine is."""
    await executor.exec_cmd(Command.shell("true"))
    started = time.monotonic()
    await executor.exec_cmd(Command.shell("true"))
    return time.monotonic() - started


async def _kill_pids_in(executor: ToolExecutor, path: str) -> None:
    """Kill the processes whose pids `path` holds (a test's background children), if any."""
    script = f"kill -9 $(cat {path}) 2>/dev/null; rm -f {path}; true"
    with contextlib.suppress(CommandError):
        await executor.exec_cmd(Command.shell(script))


def _stall(seconds: float) -> None:
    """Hold the event loop: nothing else runs for `seconds`."""
    time.sleep(seconds)


@pytest.mark.anyio
class RunContract:
    """The rules of one command's run, which every backend keeps the same way.

    A command's last words are read however late the event loop gets to
    them; a background child that holds the pipes costs the drain period at
    most, and what it writes past it is passed on, kept or marked as cut, never
    silently dropped; the kill grace is wall time; after a timeout, a cancel
    and `aclose()` no process of the command's tree runs; a blocked sink holds
    the command back instead of the executor buffering ahead of it; the output
    cap marks its cut.

    Needs the fixture `executor_factory` (see `ExecutorFactory`; the tests pass
    `kill_grace`, `drain_timeout` and `output_limit`), whose executors share
    one working directory. Which processes of a tree survive is asked through
    the fixture `tree_witness` (see `TreeWitness`): by default another
    executor of the factory's, not the one that ran the tree, runs `kill -0`
    on the pids the tree wrote, which needs the backend's commands to share
    one PID namespace; a backend whose commands each have their own
    (bubblewrap's) supplies a witness that looks from outside.

    `known_failures` names the tests a backend is known to fail, each with
    why: they run as strict xfails there, so that a fix shows (as XPASS, which
    fails the run until the entry goes). A key is a test's name, or a name
    and some of its parameters' ids, as in `"test_x[trio]"`.
    """

    known_failures: ClassVar[Mapping[str, str]] = {}

    @pytest.fixture(autouse=True)
    def _known_failure(self, request: pytest.FixtureRequest) -> None:
        """Mark this test a strict xfail where `known_failures` names it."""
        node = request.node
        ids = set(node.callspec.id.split("-")) if hasattr(node, "callspec") else set()
        for key, reason in self.known_failures.items():
            name, _, params = key.partition("[")
            wanted = set(params.rstrip("]").split("-")) if params else set()
            if name == getattr(node, "originalname", node.name) and wanted <= ids:
                request.applymarker(pytest.mark.xfail(strict=True, reason=reason))
                return

    @pytest.fixture
    async def tree_witness(self, executor_factory: ExecutorFactory) -> AsyncIterator[TreeWitness]:
        """An executor of the backend of its own runs `kill -0` on the pids (see `TreeWitness`).

        Made before the test, so that its start (a container's, an actor's)
        is no part of what the test times.
        """
        async with executor_factory() as witness:

            async def survivors(pids: list[int], mark: str) -> list[str]:
                argv = ["sh", "-c", _STILL_RUNNING, "sh", *map(str, pids)]
                output = await witness.exec_cmd(Command.exec(argv))
                return output.stdout.decode().split()

            yield survivors

    # --- the last words ------------------------------------------------------

    @pytest.mark.parametrize("size", [0, 500_000], ids=["a line", "half a MB"])
    async def test_what_a_command_wrote_is_read_however_late_the_loop_gets_to_it(
        self, executor_factory: ExecutorFactory, size: int
    ) -> None:
        """A drain period that ends before a busy loop reads a command's output cuts none of it.

        With many commands at once the loop may see a command's exit before its
        output, and the drain period may end before its readers' turn (a drain
        of 0 makes that the rule, a stalled machine the exception): what the
        command wrote before it exited is all read, its last words too.
        """
        script = f"head -c {size} /dev/zero; " if size else ""
        results: dict[int, tuple[int, bytes, bytes]] = {}

        async def one(executor: ToolExecutor, i: int) -> None:
            output = await executor.exec_cmd(Command.shell(f"{script}echo {i}; echo e{i} >&2"))
            results[i] = len(output.stdout), output.stdout[-8:], output.stderr

        async with executor_factory(drain_timeout=0) as executor:
            # Three rounds, or as many as fit in 3 s where each command is an
            # engine's round trips: one at least.
            began = time.monotonic()
            for round_ in range(3):
                if round_ and time.monotonic() - began > 3:
                    break
                results.clear()
                async with anyio.create_task_group() as tasks:
                    for i in range(60):
                        tasks.start_soon(one, executor, i)
                assert results == {
                    i: (
                        size + len(f"{i}\n"),
                        (b"\0" * size + f"{i}\n".encode())[-8:],
                        f"e{i}\n".encode(),
                    )
                    for i in range(60)
                }

    @pytest.mark.parametrize("size", [0, 500_000], ids=["a line", "half a MB"])
    async def test_last_words_written_while_the_loop_stalls_are_read(
        self, executor_factory: ExecutorFactory, size: int
    ) -> None:
        """Output and exit that both come while the event loop is held are read whole.

        Once the command's first line is in, another task holds the loop for
        0.8 s, within which the command writes the rest and exits: the
        executor learns of the exit and of the last words at the same turn,
        with a drain period of 0.
        """
        script = f"echo start; sleep 0.3; head -c {size} /dev/zero; echo last; echo err >&2"
        async with executor_factory(drain_timeout=0) as executor:
            for _ in range(2):
                begun = anyio.Event()

                async def hold(begun: anyio.Event = begun) -> None:
                    await begun.wait()
                    _stall(0.8)

                def sink(chunk: Chunk, begun: anyio.Event = begun) -> None:
                    begun.set()

                async with anyio.create_task_group() as tasks:
                    tasks.start_soon(hold)
                    output = await executor.exec_cmd_streaming(Command.shell(script), sink)
                assert (len(output.stdout), output.stdout[-5:], output.stderr) == (
                    len("start\n") + size + len("last\n"),
                    b"last\n",
                    b"err\n",
                )

    # --- the drain period ----------------------------------------------------

    async def test_a_background_child_holding_the_pipe_costs_at_most_the_drain_period(
        self, executor_factory: ExecutorFactory
    ) -> None:
        """`sleep 30 & echo done` returns `done` within `drain_timeout` (1 s) and 0.5 s more.

        (Plus what a `true` takes there: a start and an end are not the drain's.)
        """
        drain = 1.0
        async with executor_factory(drain_timeout=drain, kill_grace=0.2) as executor:
            spawn = await _start_and_end_cost(executor)
            started = time.monotonic()
            output = await executor.exec_cmd(
                Command.shell("sleep 30 & echo $! > held.pid; echo done")
            )
            took = time.monotonic() - started
            await _kill_pids_in(executor, "held.pid")
        assert output.stdout == b"done\n"
        assert took <= drain + 0.5 + spawn, (
            f"returned {took:.2f} s after the start, drain period {drain} s "
            f"(a `true` took {spawn:.2f} s)"
        )

    @pytest.mark.parametrize("writer", ["lines", "yes"])
    async def test_a_chunk_past_the_drain_period_is_passed_on_not_dropped(
        self, executor_factory: ExecutorFactory, writer: str
    ) -> None:
        """A background child writing on: the call ends, and what was read is kept or marked.

        The child writes for as long as it lives: numbered lines (a shell
        loop), or a flood that never lets the pipe run dry (`yes`). The call
        returns within two drain periods (the drain, then one more for what
        the child writes on) and a second. The sink sees every line from the
        first, none missing (only the last may be cut short): numbers from 1
        on, or `y`s; and the output holds what the sink saw, or, past the
        cap, its head and tail with the cut marked and counted: nothing read
        is dropped unsaid.
        """
        drain, limit = 0.3, 1 << 16
        child = "(i=0; while :; do i=$((i+1)); echo $i; done)" if writer == "lines" else "yes"
        script = f"{child} & echo $! > writer.pid; echo started"
        # A flood brings hundreds of MB in a drain period: the sink keeps the
        # head and the tail, counts, and keeps whole only the numbered lines;
        # of the flood it keeps what is not a `y` or a newline.
        head, tail, whole, residue = bytearray(), bytearray(), bytearray(), bytearray()
        size = 0

        def sink(chunk: Chunk) -> None:
            nonlocal size
            data = chunk.data
            size += len(data)
            head.extend(data[: max(limit - len(head), 0)])
            tail.extend(data)
            del tail[:-limit]
            if writer == "lines":
                whole.extend(data)
            else:
                residue.extend(data.translate(None, b"y\n"))

        async with executor_factory(
            drain_timeout=drain, kill_grace=0.2, output_limit=limit
        ) as executor:
            spawn = await _start_and_end_cost(executor)
            started = time.monotonic()
            output = await executor.exec_cmd_streaming(Command.shell(script), sink)
            took = time.monotonic() - started
            await _kill_pids_in(executor, "writer.pid")
        assert took <= 2 * drain + 1.0 + spawn, (
            f"returned {took:.2f} s after the start (a `true` took {spawn:.2f} s)"
        )
        assert output.stderr == b""
        if writer == "lines":
            lines = bytes(whole).split(b"\n")[:-1]
            assert lines.count(b"started") == 1, bytes(whole[:200])
            numbers = [int(line) for line in lines if line != b"started"]
            assert numbers == list(range(1, len(numbers) + 1)), "numbered lines went missing"
        else:
            assert residue == b"started", f"the flood came with {bytes(residue[:200])!r}"
        if not output.truncated:
            assert (output.stdout, len(output.stdout)) == (bytes(head), size)
            return
        elided = output.elided
        assert elided is not None
        assert len(output.stdout) + elided.bytes == size
        assert output.stdout == head[: limit - limit // 2] + tail[-(limit // 2) :]
        assert elided.marker() in output.text()

    # --- the kill ------------------------------------------------------------

    # The rule and its test are the lifecycle contract's: a class that runs
    # both runs it once.
    test_kill_grace_is_wall_time = LifecycleContract.test_kill_grace_is_wall_time

    @pytest.mark.parametrize("how", ["timeout", "idle", "cancel", "aclose"])
    async def test_the_tree_is_gone(
        self, executor_factory: ExecutorFactory, tree_witness: TreeWitness, how: str
    ) -> None:
        """No process of the command's tree runs once a timeout, idle timeout or cancel returns.

        Nor after `aclose()`.

        The tree: the command's shell, a background `sleep`, one that ignores
        SIGTERM and one that left for a session of its own (`setsid`).
        """
        mark = f"{_TREE_MARK}={os.urandom(8).hex()}"
        name, _, value = mark.partition("=")
        executor = executor_factory(kill_grace=0.2)
        pids: list[int] = []
        try:
            async with executor:

                async def started() -> None:
                    while len(written := await _pids(executor, "tree.pids")) < 4:
                        await anyio.sleep(0.05)
                    # The witness must see the tree that runs, or its "gone" proves nothing.
                    assert await tree_witness(written, mark), f"the witness sees none of {written}"

                if how == "timeout":
                    cmd = Command.shell(_tree(stays=True)).with_env({name: value})
                    with anyio.fail_after(30), pytest.raises(TimedOut):
                        await executor.exec_cmd(cmd.with_timeout(2))
                elif how == "idle":
                    cmd = Command.shell(_tree(stays=True)).with_env({name: value})
                    with anyio.fail_after(30), pytest.raises(TimedOut) as caught:
                        await executor.exec_cmd(cmd.with_idle_timeout(2))
                    assert caught.value.idle
                elif how == "cancel":
                    cmd = Command.shell(_tree(stays=True)).with_env({name: value})

                    async def run() -> None:
                        await executor.exec_cmd(cmd)

                    await _cut_off(run, started, again=None)
                else:
                    cmd = Command.shell(_tree(stays=False)).with_env({name: value})
                    assert (await executor.exec_cmd(cmd)).stdout == b"started\n"
                pids = await _pids(executor, "tree.pids")
                assert len(pids) == 4, f"the tree wrote {pids} before the {how}"
                if how != "aclose":
                    await _assert_gone(tree_witness, pids, mark, f"after the {how}")
            if how == "aclose":
                await _assert_gone(tree_witness, pids, mark, "after aclose()")
        except BaseException:
            # A survivor is not left to the next test: what carries the mark is killed.
            with anyio.CancelScope(shield=True), anyio.move_on_after(30):
                async with executor_factory() as cleaner:
                    await cleaner.exec_cmd(Command.exec(["sh", "-c", _KILL_MARKED, "sh", mark]))
            raise

    # --- the idle timeout ----------------------------------------------------

    @pytest.mark.parametrize("via", ["exec_cmd", "session"])
    async def test_a_quiet_command_meets_its_idle_timeout_and_a_talkative_one_does_not(
        self, executor_factory: ExecutorFactory, via: str
    ) -> None:
        """`sleep 30` with an idle timeout of 1 s ends at about 1 s, its output kept.

        A command that prints every 0.6 s runs, past the idle timeout, to its end.
        """
        quiet = Command.shell("echo begun; sleep 30").with_idle_timeout(1)
        talkative = Command.shell("for i in 1 2 3 4; do echo $i; sleep 0.6; done")

        async def run(executor: ToolExecutor, cmd: Command) -> CommandOutput:
            if via == "exec_cmd":
                return await executor.exec_cmd(cmd)
            async with await executor.start(cmd) as session:
                return await session.finalize()

        async with executor_factory() as executor:
            started = anyio.current_time()
            with anyio.fail_after(20), pytest.raises(TimedOut) as caught:
                await run(executor, quiet)
            took = anyio.current_time() - started
            assert caught.value.idle, caught.value
            assert "idle timeout" in caught.value.message
            assert caught.value.output.stdout == b"begun\n"
            assert took < 8, f"an idle timeout of 1 s took {took:.1f} s"
            output = await run(executor, talkative.with_idle_timeout(1))
            assert output.stdout == b"1\n2\n3\n4\n"

    # --- the sink ------------------------------------------------------------

    async def test_a_blocked_sink_holds_the_command_back(
        self, executor_factory: ExecutorFactory
    ) -> None:
        """A sink that takes nothing stops a 50 MiB writer after a few MiB; released, it has all.

        The writer counts the blocks it wrote in a file, which a second
        executor reads until the count stops growing: the command is blocked
        on its output. Past that, the bytes are held by the executor between
        the pipe and the sink, and they must be bounded (here, under 24 MiB).
        """
        block, blocks = 256 << 10, 200
        script = (
            f"echo 0 > progress; i=0; while [ $i -lt {blocks} ]; do "
            f"head -c {block} /dev/zero; i=$((i+1)); echo $i > progress; done"
        )
        release = anyio.Event()
        received = 0

        async def sink(chunk: Chunk) -> None:
            nonlocal received
            await release.wait()
            received += len(chunk.data)

        async def progress(witness: ToolExecutor) -> int | None:
            try:
                text = (await witness.exec_cmd(Command.read_file("progress"))).stdout
            except NonZeroExit:
                return None
            # Rewritten as it is read: an empty file is no count yet.
            return int(text) if text.strip().isdigit() else None

        outputs: list[CommandOutput] = []
        with anyio.fail_after(60):
            async with (
                executor_factory(kill_grace=0.2) as executor,
                executor_factory() as witness,
                anyio.create_task_group() as tasks,
            ):

                async def run() -> None:
                    outputs.append(await executor.exec_cmd_streaming(Command.shell(script), sink))

                tasks.start_soon(run)
                try:
                    while (count := await progress(witness)) is None:
                        await anyio.sleep(0.05)
                    before, now = -1, count
                    while now != before:
                        await anyio.sleep(0.5)
                        count = await progress(witness)
                        before, now = now, now if count is None else count
                finally:
                    release.set()
        assert now * block < 24 << 20, (
            f"{now} blocks of {block} bytes written ahead of a sink that took none"
        )
        assert received == blocks * block
        assert outputs[0].exit_code == 0

    # --- the cap -------------------------------------------------------------

    # The rule for `exec_cmd` is the output contract's: a class that runs both
    # runs it once.
    test_cut_output_is_marked_with_what_is_missing = (
        OutputContract.test_cut_output_is_marked_with_what_is_missing
    )

    async def test_output_limit_keeps_head_and_tail(
        self, executor_factory: ExecutorFactory
    ) -> None:
        """With a cap and a sink: the sink sees every byte, the output its head and tail, marked."""
        expected = "".join(f"{i}\n" for i in range(1, 100001)).encode()
        seen = bytearray()
        async with executor_factory(output_limit=1000) as executor:
            output = await executor.exec_cmd_streaming(
                Command.shell("seq 1 100000"), lambda chunk: seen.extend(chunk.data)
            )
        assert bytes(seen) == expected
        assert output.truncated
        assert output.stdout == expected[:500] + expected[-500:]
        elided = output.elided
        assert elided is not None
        missing_lines = expected.count(b"\n") - output.stdout.count(b"\n")
        assert (elided.bytes, elided.lines) == (len(expected) - 1000, missing_lines)
        assert elided.marker() in output.text()

    async def test_output_under_the_limit_is_whole(self, executor_factory: ExecutorFactory) -> None:
        """Output under the cap is kept whole, not marked truncated, with no marker."""
        async with executor_factory(output_limit=1000) as executor:
            output = await executor.exec_cmd(Command.shell("seq 1 10"))
        assert not output.truncated
        assert output.elided is None
        assert output.stdout == b"1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n"
        assert "elided" not in output.text()


async def _assert_gone(witness: TreeWitness, pids: list[int], mark: str, when: str) -> None:
    """Fail naming the processes of the tree that `witness` finds running, and for how long."""
    survivors = await witness(pids, mark)
    if not survivors:
        return
    started = time.monotonic()
    later = "still running 3 s later"
    while time.monotonic() - started < 3:
        await anyio.sleep(0.2)
        if not await witness(pids, mark):
            later = f"gone {time.monotonic() - started:.1f} s later"
            break
    pytest.fail(f"{when}, of the tree {pids}, {survivors} still ran ({later})")
