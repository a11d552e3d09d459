"""apply_patch: Codex's V4A patches, parsed and applied through executors, whole or not at all.

The 25 scenarios of Codex's own suite (`fixtures/apply_patch/`, see its
SOURCE.md) run on a LocalExecutor, and a handful of them on Docker and SSH
executors; besides, the parser's leniency and its errors, each matching
pass of the line search, line endings, confined paths, and atomicity: a
hunk that fails writes nothing, a change that fails midway is undone.
"""

from __future__ import annotations

import io
import os
import posixpath
import tarfile
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import anyio
import pytest
from docker_engine import PYTHON_IMAGE, labelled_container
from ssh_server import SshServer

from executor import (
    Command,
    CommandOutput,
    DockerExecutor,
    ExecutorError,
    LocalExecutor,
    PolicyDenied,
    SshExecutor,
    ToolExecutor,
    WrappedExecutor,
    WriteFile,
)
from executor._toolset.patch import (
    AddFile,
    DeleteFile,
    PatchError,
    PatchResult,
    UpdateChunk,
    UpdateFile,
    apply_chunks,
    apply_patch,
    parse_patch,
)

pytestmark = pytest.mark.anyio

FIXTURES = Path(__file__).parent / "fixtures" / "apply_patch"
SCENARIOS = sorted(path.name for path in FIXTURES.iterdir() if path.is_dir())

# The scenarios Codex expects to fail (`codex-rs/core/tests/suite/apply_patch_scenarios.rs`
# lists the failures; each of these leaves the tree as it was).
FAILING = {
    "005_rejects_empty_patch",
    "006_rejects_missing_context",
    "007_rejects_missing_file_delete",
    "008_rejects_empty_update_hunk",
    "009_requires_existing_file_for_update",
    "012_delete_directory_fails",
    "013_rejects_invalid_hunk_header",
    "015_failure_after_partial_success_leaves_changes",
}
# Codex applies the Add File before the failing update and leaves it; we apply
# nothing, so the tree after is the tree before, not the fixture's `expected/`.
ATOMIC_NOT_CODEX = "015_failure_after_partial_success_leaves_changes"

# What Docker and SSH run: an add, several operations, a move, a delete, CRLF
# and mixed endings, a hunk that fails, a folder that cannot be deleted, and
# the atomic failure.
REMOTE_SCENARIOS = [
    "001_add_file",
    "002_multiple_operations",
    "004_move_to_new_directory",
    "010_move_overwrites_existing_destination",
    "020_delete_file_success",
    "023_preserves_crlf_line_endings",
    "024_preserves_mixed_line_endings",
    "006_rejects_missing_context",
    "012_delete_directory_fails",
    ATOMIC_NOT_CODEX,
]

Tree = dict[str, bytes | None]
"""A folder's contents by relative path: a file's bytes, or `None` for a folder."""


def tree_of(root: Path) -> Tree:
    """Every file and folder below `root` (nothing when it does not exist)."""
    if not root.is_dir():
        return {}
    return {
        str(path.relative_to(root)): None if path.is_dir() else path.read_bytes()
        for path in sorted(root.rglob("*"))
    }


def scenario(name: str) -> tuple[Tree, str, Tree]:
    """A scenario's tree before, its patch, and the tree it must leave."""
    folder = FIXTURES / name
    before = tree_of(folder / "input")
    patch = (folder / "patch.txt").read_text(encoding="utf-8")
    expected = before if name in FAILING else tree_of(folder / "expected")
    return before, patch, expected


def test_the_fixtures_are_all_there() -> None:
    """25 scenarios; each failing one's `expected/` is its input, except Codex's partial one."""
    assert len(SCENARIOS) == 25
    assert set(SCENARIOS) >= FAILING
    for name in FAILING - {ATOMIC_NOT_CODEX}:
        folder = FIXTURES / name
        assert tree_of(folder / "expected") == tree_of(folder / "input"), name
    assert tree_of(FIXTURES / ATOMIC_NOT_CODEX / "expected") == {"created.txt": b"hello\n"}
    crlf = FIXTURES / "023_preserves_crlf_line_endings" / "input" / "lines.txt"
    assert crlf.read_bytes() == b"one\r\ntwo\r\nthree\r\n", "git must keep the CRLF bytes"


async def run_scenario(executor: ToolExecutor, name: str) -> PatchResult | PatchError:
    """Apply a scenario's patch through `executor`; its result, or the error it raised."""
    _, patch, _ = scenario(name)
    if name in FAILING:
        with pytest.raises(PatchError) as failure:
            await apply_patch(executor, patch)
        return failure.value
    result = await apply_patch(executor, patch)
    assert str(result).startswith("Success. Updated the following files:\n")
    return result


def write_tree(root: Path, tree: Tree) -> None:
    root.mkdir(parents=True, exist_ok=True)
    for relative, content in tree.items():
        path = root / relative
        if content is None:
            path.mkdir(parents=True, exist_ok=True)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content)


# --- the scenarios, locally ------------------------------------------------------


@pytest.mark.parametrize("name", SCENARIOS)
async def test_scenario_on_a_local_executor(name: str, tmp_path: Path) -> None:
    """Each scenario leaves the tree byte for byte as expected, folders included."""
    before, _, expected = scenario(name)
    work = tmp_path / "work"
    write_tree(work, before)
    async with LocalExecutor(work) as executor:
        await run_scenario(executor, name)
    assert tree_of(work) == expected


async def test_the_summaries_are_codex_s(tmp_path: Path) -> None:
    """A, M and D lines, per operation, a move under its new path."""
    before, patch, _ = scenario("002_multiple_operations")
    write_tree(tmp_path, before)
    async with LocalExecutor(tmp_path) as executor:
        result = await apply_patch(executor, patch)
    assert result == PatchResult(
        added=("nested/new.txt",), modified=("modify.txt",), deleted=("delete.txt",)
    )
    assert str(result) == (
        "Success. Updated the following files:\nA nested/new.txt\nM modify.txt\nD delete.txt"
    )
    before, patch, _ = scenario("004_move_to_new_directory")
    work = tmp_path / "move"
    write_tree(work, before)
    async with LocalExecutor(work) as executor:
        moved = await apply_patch(executor, patch)
    assert moved.modified == ("renamed/dir/name.txt",)
    assert moved.moved == (("old/name.txt", "renamed/dir/name.txt"),)
    assert moved.summary() == "Success. Updated the following files:\nM renamed/dir/name.txt"


async def test_failing_scenarios_say_why(tmp_path: Path) -> None:
    """The errors of the failing scenarios name the file, the line and the reason."""
    messages = {}
    for name in sorted(FAILING):
        before, _, _ = scenario(name)
        work = tmp_path / name
        write_tree(work, before)
        async with LocalExecutor(work) as executor:
            error = await run_scenario(executor, name)
        assert isinstance(error, PatchError)
        messages[name] = str(error)
    assert messages["005_rejects_empty_patch"].startswith("No files were modified")
    assert messages["006_rejects_missing_context"].startswith(
        "Failed to find expected lines in modify.txt (the hunk at line 3 of the patch):\nmissing"
    )
    assert messages["007_rejects_missing_file_delete"].startswith(
        "Failed to delete file missing.txt: No such file or directory (line 2 of the patch)"
    )
    assert messages["008_rejects_empty_update_hunk"] == (
        "Invalid patch hunk on line 2: Update file hunk for path 'foo.txt' is empty"
    )
    assert messages["009_requires_existing_file_for_update"].startswith(
        "Failed to read file to update missing.txt: No such file or directory"
    )
    assert messages["012_delete_directory_fails"].startswith(
        "Failed to delete file dir: Is a directory"
    )
    assert messages["013_rejects_invalid_hunk_header"].startswith(
        "Invalid patch hunk on line 2: '*** Frobnicate File: foo' is not a valid hunk header."
    )
    assert "no file was changed" in messages[ATOMIC_NOT_CODEX]


# --- the scenarios on Docker and over SSH -----------------------------------------


def tar_of(tree: Tree) -> bytes:
    """`tree` as a tar archive (folders before what they hold)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for relative, content in sorted(tree.items()):
            info = tarfile.TarInfo(relative)
            if content is None:
                info.type = tarfile.DIRTYPE
                info.mode = 0o755
                archive.addfile(info)
            else:
                info.size = len(content)
                info.mode = 0o644
                archive.addfile(info, io.BytesIO(content))
    return buffer.getvalue()


async def upload(executor: ToolExecutor, tree: Tree) -> None:
    """Put `tree` in the executor's workdir, through the executor (`tar -x`)."""
    if tree:
        await executor.exec_cmd(Command.exec(["tar", "-xf", "-"]).with_stdin(tar_of(tree)))


async def remote_tree(executor: ToolExecutor) -> Tree:
    """The executor's workdir, read through the executor (`tar -c`)."""
    output = await executor.exec_cmd(Command.exec(["tar", "-cf", "-", "."]))
    found: Tree = {}
    with tarfile.open(fileobj=io.BytesIO(output.stdout)) as archive:
        for member in archive.getmembers():
            name = posixpath.normpath(member.name)
            if name == ".":
                continue
            if member.isdir():
                found[name] = None
            else:
                data = archive.extractfile(member)
                assert data is not None, member.name
                found[name] = data.read()
    return dict(sorted(found.items()))


async def check_remote_scenario(executor: ToolExecutor, name: str) -> None:
    before, _, expected = scenario(name)
    await upload(executor, before)
    assert await remote_tree(executor) == before
    await run_scenario(executor, name)
    assert await remote_tree(executor) == expected


@pytest.fixture(scope="module")
def container() -> Iterator[str]:
    """One idle container of the Python image for the Docker scenarios (skips without an engine)."""
    with labelled_container(PYTHON_IMAGE) as container_id:
        yield container_id


@pytest.fixture
async def docker(container: str) -> AsyncIterator[DockerExecutor]:
    """A DockerExecutor in a new empty folder of the shared container."""
    async with DockerExecutor(
        container=container, workdir=f"/workspace/{uuid.uuid4().hex}", kill_grace=0.2
    ) as executor:
        yield executor


@pytest.mark.parametrize("name", REMOTE_SCENARIOS)
async def test_scenario_on_docker(docker: DockerExecutor, name: str) -> None:
    """The scenarios inside a container, the trees read back through the container."""
    await check_remote_scenario(docker, name)


async def test_a_failed_write_is_undone_on_docker(docker: DockerExecutor) -> None:
    """In a container too, the first change is undone when the second cannot be made."""
    before: Tree = {"a.txt": b"one\ntwo\n", "blocker": b"a file\n"}
    await upload(docker, before)
    with pytest.raises(PatchError, match=r"Failed to write file blocker/x\.txt"):
        await apply_patch(docker, UPDATE_A + "*** Add File: blocker/x.txt\n+x\n*** End Patch\n")
    assert await remote_tree(docker) == before


def ssh_executor(server: SshServer) -> SshExecutor:
    return server.executor(kill_grace=0.2)


class TestOverSsh:
    """The scenarios on an SshExecutor (asyncssh runs on asyncio only)."""

    @pytest.fixture
    def anyio_backend(self) -> str:
        return "asyncio"

    @pytest.fixture
    async def ssh(self, ssh_server: SshServer) -> AsyncIterator[SshExecutor]:
        """An SshExecutor in a new empty folder of the tests' sshd (not root there)."""
        async with ssh_executor(ssh_server) as executor:
            yield executor

    @pytest.mark.parametrize("name", REMOTE_SCENARIOS)
    async def test_scenario(self, ssh: SshExecutor, name: str) -> None:
        """The scenarios over SSH, the trees read back through the connection."""
        await check_remote_scenario(ssh, name)

    async def test_a_write_refused_by_a_read_only_folder_is_undone(self, ssh: SshExecutor) -> None:
        """The login user may not write in a 0555 folder: the change made before is undone."""
        before: Tree = {"a.txt": b"one\ntwo\n", "locked": None, "locked/b.txt": b"b\n"}
        await upload(ssh, before)
        locked = Path(ssh.workdir or "") / "locked"
        locked.chmod(0o555)
        try:
            patch = UPDATE_A + "*** Add File: locked/new.txt\n+new\n*** End Patch\n"
            with pytest.raises(PatchError) as failure:
                await apply_patch(ssh, patch)
            assert await remote_tree(ssh) == before
        finally:
            locked.chmod(0o755)
        assert "Failed to write file locked/new.txt: Permission denied" in str(failure.value)
        assert "the 1 change(s) made before were undone" in str(failure.value)


# --- parsing ------------------------------------------------------------------------


FULL_PATCH = """*** Begin Patch
*** Add File: path/add.py
+abc
+def
*** Delete File: path/delete.py
*** Update File: path/update.py
*** Move to: path/update2.py
@@ def f():
-    pass
+    return 123
*** End Patch"""

FULL_OPS = [
    AddFile("path/add.py", "abc\ndef\n", 2),
    DeleteFile("path/delete.py", 5),
    UpdateFile(
        "path/update.py",
        "path/update2.py",
        (UpdateChunk("def f():", ("    pass",), ("    return 123",), (), False, 8),),
        6,
    ),
]


def test_parse_a_patch_of_every_operation() -> None:
    """Add, delete, update with a move and an anchor: as Codex's parser reads them."""
    assert parse_patch(FULL_PATCH) == FULL_OPS
    assert parse_patch("*** Begin Patch\n*** End Patch") == []


def test_parse_context_lines_and_their_indices() -> None:
    """Context lines go to both sides and are marked; a bare empty line is an empty context line."""
    ops = parse_patch(
        "*** Begin Patch\n*** Update File: f\n import foo\n\n-old\n+new\n keep\n*** End Patch\n"
    )
    assert ops == [
        UpdateFile(
            "f",
            None,
            (
                UpdateChunk(
                    None,
                    ("import foo", "", "old", "keep"),
                    ("import foo", "", "new", "keep"),
                    ((0, 0), (1, 1), (3, 3)),
                    False,
                    3,
                ),
            ),
            2,
        )
    ]


def test_parse_an_indented_header_inside_an_update_is_context() -> None:
    """Inside an update, only a header at the start of its line starts another section."""
    ops = parse_patch(
        "*** Begin Patch\n*** Update File: a.txt\n@@\n-old a\n+new a\n *** Update File: b.txt\n"
        "@@\n-old b\n+new b\n*** End Patch\n"
    )
    assert len(ops) == 1
    assert isinstance(ops[0], UpdateFile)
    first, second = ops[0].chunks
    assert first.old_lines == ("old a", "*** Update File: b.txt")
    assert first.context == ((1, 1),)
    assert second.old_lines == ("old b",)


def test_parse_end_of_file_and_blank_lines_after_it() -> None:
    """`*** End of File` marks the section; blank lines after it are ignored."""
    (op,) = parse_patch(
        "*** Begin Patch\n*** Update File: f\n@@\n+quux\n*** End of File\n\n*** End Patch"
    )
    assert isinstance(op, UpdateFile)
    assert op.chunks == (UpdateChunk(None, (), ("quux",), (), True, 3),)


def test_parse_whitespace_around_markers_and_crlf_patches() -> None:
    """Padded markers, blank lines around the patch and CRLF line ends are all accepted."""
    padded = "\n\n  *** Begin Patch  \r\n  *** Add File: a.txt  \r\n+x\r\n *** End Patch \r\n\n"
    assert parse_patch(padded) == [AddFile("a.txt", "x\n", 4)]


@pytest.mark.parametrize("opener", ["<<EOF", "<<'EOF'", '<<"EOF"'])
def test_parse_a_patch_in_a_heredoc(opener: str) -> None:
    """The heredoc a model writes for a shell is unwrapped; lines are counted from the top."""
    wrapped = f"{opener}\n{FULL_PATCH}\nEOF\n"
    shifted = [
        AddFile("path/add.py", "abc\ndef\n", 3),
        DeleteFile("path/delete.py", 6),
        UpdateFile(
            "path/update.py",
            "path/update2.py",
            (UpdateChunk("def f():", ("    pass",), ("    return 123",), (), False, 9),),
            7,
        ),
    ]
    assert parse_patch(wrapped) == shifted
    with pytest.raises(PatchError, match="line 3: Update file hunk for path 'f' is empty"):
        parse_patch(f"{opener}\n*** Begin Patch\n*** Update File: f\n*** End Patch\nEOF")


def test_parse_a_heredoc_must_be_one_codex_knows() -> None:
    """Mismatched quotes, or an unterminated patch inside, are refused as Codex refuses them."""
    with pytest.raises(PatchError, match=r"first line of the patch must be '\*\*\* Begin Patch'"):
        parse_patch("<<\"EOF'\n*** Begin Patch\n*** Add File: a\n+x\n*** End Patch\nEOF\n")
    with pytest.raises(PatchError, match=r"last line of the patch must be '\*\*\* End Patch'"):
        parse_patch("<<EOF\n*** Begin Patch\n*** Update File: file2.py\nEOF\n")


@pytest.mark.parametrize(
    ("patch", "message", "line"),
    [
        ("", "the first line of the patch must be '*** Begin Patch' (the patch is empty)", None),
        ("bad", "the first line of the patch must be '*** Begin Patch' (line 1 is 'bad')", 1),
        (
            "*** Begin Patch\nbad",
            "the last line of the patch must be '*** End Patch' (line 2 is 'bad')",
            2,
        ),
        (
            "\n\n*** Begin Patch\n*** Frobnicate File: foo\n*** End Patch",
            "Invalid patch hunk on line 4: '*** Frobnicate File: foo' is not a valid hunk header",
            4,
        ),
        (
            "*** Begin Patch\n*** Add File: a\nno plus\n*** End Patch",
            "Invalid patch hunk on line 3: 'no plus' is not a valid hunk header",
            3,
        ),
        (
            "*** Begin Patch\n*** Update File: a\n@@\n@@\n-x\n*** End Patch",
            "Invalid patch hunk on line 4: Unexpected line found in update hunk: '@@'. "
            "Every line should start with ' ' (context line), '+' (added line), or '-'",
            4,
        ),
        (
            "*** Begin Patch\n*** Update File: a\n@@\n-x\nbogus\n*** End Patch",
            "Invalid patch hunk on line 5: Expected update hunk to start with a @@ context "
            "marker, got: 'bogus'",
            5,
        ),
        (
            "*** Begin Patch\n*** Update File: a\n@@\n*** End Patch",
            "Invalid patch hunk on line 4: Update hunk does not contain any lines",
            4,
        ),
        (
            "*** Begin Patch\n*** Update File: a\n@@\n*** End of File\n*** End Patch",
            "Invalid patch hunk on line 4: Update hunk does not contain any lines",
            4,
        ),
        (
            "*** Begin Patch\n*** Update File: a\n@@\n+x\n*** End of File\n+y\n*** End Patch",
            "Invalid patch hunk on line 6: Expected update hunk to start with a @@ context "
            "marker, got: '+y'",
            6,
        ),
        (
            "*** Begin Patch\n*** Add File: a\n+x\n*** End Patch\n*** Add File: b\n*** End Patch",
            "the last line of the patch must be '*** End Patch' (line 5 follows it: "
            "'*** Add File: b')",
            5,
        ),
    ],
)
def test_parse_errors_name_the_line_and_the_fault(
    patch: str, message: str, line: int | None
) -> None:
    """Each malformed patch is refused with Codex's words and the line, counted in the text."""
    with pytest.raises(PatchError) as failure:
        parse_patch(patch)
    assert message in str(failure.value)
    assert failure.value.line == line


def test_parse_refuses_a_lone_surrogate() -> None:
    """JSON can carry a lone surrogate; no file could hold it."""
    with pytest.raises(PatchError, match="lone surrogate"):
        parse_patch("*** Begin Patch\n*** Add File: a\n+\ud800\n*** End Patch")


def test_parse_the_environment_id_is_read_and_checked() -> None:
    """Codex's `*** Environment ID:` line is accepted (one environment here), empty refused."""
    patch = "*** Begin Patch\n*** Environment ID: remote\n*** Add File: a\n+x\n*** End Patch"
    assert parse_patch(patch) == [AddFile("a", "x\n", 3)]
    with pytest.raises(PatchError, match="must not be empty"):
        parse_patch("*** Begin Patch\n*** Environment ID:  \n*** Add File: a\n+x\n*** End Patch")


@pytest.mark.parametrize(
    ("header", "rule"),
    [
        ("*** Add File: /etc/passwd", "a path must be relative to the workspace root"),
        ("*** Delete File: ../outside.txt", "a path must not contain '..'"),
        ("*** Update File: a/../../b\n@@\n-x\n+y", "a path must not contain '..'"),
        ("*** Update File: a\n*** Move to: /tmp/b\n@@\n-x\n+y", "must be relative"),
        ("*** Update File: a\n*** Move to: ../b\n@@\n-x\n+y", "must not contain '..'"),
    ],
)
async def test_paths_out_of_the_workspace_are_refused(
    header: str, rule: str, tmp_path: Path
) -> None:
    """Absolute paths and `..` are refused at their line, before anything is read or written."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "a").write_text("x\n")
    with pytest.raises(PatchError, match="refused") as failure:
        async with LocalExecutor(work) as executor:
            await apply_patch(executor, f"*** Begin Patch\n{header}\n*** End Patch")
    assert rule in str(failure.value)
    assert failure.value.line is not None
    assert tree_of(work) == {"a": b"x\n"}
    assert not (tmp_path / "outside.txt").exists()


def test_paths_are_normalised() -> None:
    """`./a//b` is `a/b`; surrounding whitespace goes."""
    assert parse_patch("*** Begin Patch\n*** Delete File: ./a//b \n*** End Patch") == [
        DeleteFile("a/b", 2)
    ]


async def test_a_symlink_out_of_a_confined_workspace_is_refused(tmp_path: Path) -> None:
    """A confined executor refuses the read of a file reached through a link that leads out."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("secret\n")
    work = tmp_path / "work"
    work.mkdir()
    (work / "link").symlink_to(outside)
    async with LocalExecutor(work, confine=True) as executor:
        for patch in (
            "*** Begin Patch\n*** Update File: link/secret.txt\n@@\n-secret\n+owned\n*** End Patch",
            "*** Begin Patch\n*** Delete File: link/secret.txt\n*** End Patch",
        ):
            with pytest.raises(PolicyDenied):
                await apply_patch(executor, patch)
    assert (outside / "secret.txt").read_text() == "secret\n"


# --- finding the lines: each pass of Codex's seek_sequence -------------------------


def chunk(old: list[str], new: list[str], **fields: object) -> UpdateChunk:
    return UpdateChunk(
        anchor=fields.get("anchor"),  # type: ignore[arg-type]
        old_lines=tuple(old),
        new_lines=tuple(new),
        context=fields.get("context", ()),  # type: ignore[arg-type]
        end_of_file=bool(fields.get("end_of_file", False)),
    )


def test_an_exact_match() -> None:
    assert apply_chunks("a\nb\nc\n", [chunk(["b"], ["B"])]) == "a\nB\nc\n"


def test_a_match_ignoring_trailing_whitespace() -> None:
    assert apply_chunks("a\nb  \t\nc\n", [chunk(["b"], ["B"])]) == "a\nB\nc\n"


def test_a_match_ignoring_whitespace_at_both_ends() -> None:
    assert apply_chunks("a\n    b\nc\n", [chunk(["  b  "], ["B"])]) == "a\nB\nc\n"


def test_a_match_with_typographic_punctuation_read_as_ascii() -> None:
    """Dashes, curly quotes and odd spaces in the file match ASCII in the patch."""
    text = "x = \u201chello\u201d \u2013 it\u2019s\u00a0here\n"
    assert apply_chunks(text, [chunk(['x = "hello" - it\'s here'], ["y"])]) == "y\n"
    # Codex's own case: an EN DASH and a NON-BREAKING HYPHEN.
    line = "import asyncio  # local import \u2013 avoids top\u2011level dep\n"
    patched = apply_chunks(
        line, [chunk(["import asyncio  # local import - avoids top-level dep"], ["# HELLO"])]
    )
    assert patched == "# HELLO\n"


def test_a_stricter_match_wins_over_an_earlier_looser_one() -> None:
    """Each pass runs over the whole file before the next, looser one is tried."""
    text = "foo  \nbar\nfoo\n"
    assert apply_chunks(text, [chunk(["foo"], ["X"])]) == "foo  \nbar\nX\n"


def test_context_lines_keep_their_bytes_in_the_file() -> None:
    """A context line matched loosely stays as the file has it; only changed lines are replaced."""
    text = "def f():  \n    return 1\n"
    patched = apply_chunks(
        text, [chunk(["def f():", "    return 1"], ["def f():", "    return 2"], context=((0, 0),))]
    )
    assert patched == "def f():  \n    return 2\n"


def test_no_match_names_the_file_and_the_lines() -> None:
    with pytest.raises(PatchError) as failure:
        apply_chunks("a\n", [chunk(["nope", "never"], ["x"])], "src/app.py")
    assert str(failure.value) == "Failed to find expected lines in src/app.py:\nnope\nnever"


def test_an_anchor_narrows_the_search() -> None:
    """`@@ anchor` finds the anchor first: the same lines below another header are left alone."""
    text = "class A:\n    x = 1\nclass B:\n    x = 1\n"
    patched = apply_chunks(text, [chunk(["    x = 1"], ["    x = 2"], anchor="class B:")])
    assert patched == "class A:\n    x = 1\nclass B:\n    x = 2\n"
    with pytest.raises(PatchError, match="Failed to find context 'class C:' in the file"):
        apply_chunks(text, [chunk(["    x = 1"], ["    x = 2"], anchor="class C:")])


def test_end_of_file_matches_the_last_lines() -> None:
    """With `*** End of File` the old lines are sought where they would end the file."""
    text = "x\ny\nx\n"
    assert apply_chunks(text, [chunk(["x"], ["z"], end_of_file=True)]) == "x\ny\nz\n"
    with pytest.raises(PatchError):
        apply_chunks(text, [chunk(["y"], ["z"], end_of_file=True)])


def test_chunks_apply_down_the_file() -> None:
    """Codex's interleaved case: each section is sought below the one before."""
    text = "a\nb\nc\nd\ne\nf\n"
    (op,) = parse_patch(
        "*** Begin Patch\n*** Update File: f\n@@\n a\n-b\n+B\n@@\n c\n d\n-e\n+E\n@@\n f\n+g\n"
        "*** End of File\n*** End Patch"
    )
    assert isinstance(op, UpdateFile)
    assert apply_chunks(text, op.chunks) == "a\nB\nc\nd\nE\nf\ng\n"


def test_a_pure_addition_appends_at_the_end() -> None:
    """Codex's case: a section with no old lines adds at the end, wherever it stands."""
    (op,) = parse_patch(
        "*** Begin Patch\n*** Update File: f\n@@\n+after-context\n+second-line\n@@\n line1\n"
        "-line2\n-line3\n+line2-replacement\n*** End Patch"
    )
    assert isinstance(op, UpdateFile)
    patched = apply_chunks("line1\nline2\nline3\n", op.chunks)
    assert patched == "line1\nline2-replacement\nafter-context\nsecond-line\n"


def test_a_trailing_empty_old_line_stands_for_the_final_newline() -> None:
    """A last empty context line that matches no line is dropped, as Codex drops it."""
    patched = apply_chunks("a\nb\n", [chunk(["b", ""], ["c", ""], context=((1, 1),))])
    assert patched == "a\nc\n"


# --- line endings ---------------------------------------------------------------------


def test_crlf_stays_crlf_and_new_lines_take_it() -> None:
    text = "one\r\ntwo\r\nthree\r\n"
    assert apply_chunks(text, [chunk(["two"], ["TWO", "2.5"])]) == "one\r\nTWO\r\n2.5\r\nthree\r\n"


def test_mixed_endings_keep_their_own_and_new_lines_take_the_first() -> None:
    text = "one\r\ntwo\rthree\nfour"
    patched = apply_chunks(text, [chunk(["three"], ["THREE", "more"])])
    assert patched == "one\r\ntwo\rTHREE\r\nmore\r\nfour\r\n"


def test_a_missing_final_newline_is_added_as_codex_adds_it() -> None:
    assert apply_chunks("a\nb", [chunk(["a"], ["A"])]) == "A\nb\n"
    assert apply_chunks("", [chunk([], ["x"])]) == "x\n"


def test_other_line_breaks_are_not_line_ends() -> None:
    """Only CR and LF end lines: a form feed or U+2028 stays inside its line."""
    text = "a\fb\nc\u2028d\n"
    assert apply_chunks(text, [chunk(["c\u2028d"], ["e"])]) == "a\fb\ne\n"


async def test_bytes_that_are_not_utf8_pass_through(tmp_path: Path) -> None:
    """A Latin-1 file can be patched: its other bytes come back as they were."""
    (tmp_path / "latin.txt").write_bytes(b"caf\xe9\nold\n\xff\xfe end\n")
    async with LocalExecutor(tmp_path) as executor:
        await apply_patch(
            executor, "*** Begin Patch\n*** Update File: latin.txt\n@@\n-old\n+new\n*** End Patch"
        )
    assert (tmp_path / "latin.txt").read_bytes() == b"caf\xe9\nnew\n\xff\xfe end\n"


# --- several operations on one path, in order --------------------------------------------


async def test_operations_see_the_ones_before_them(tmp_path: Path) -> None:
    """An added file can be updated, a moved one updated at its new place, as Codex runs them."""
    (tmp_path / "old.txt").write_text("a\n")
    patch = (
        "*** Begin Patch\n*** Add File: new.txt\n+one\n*** Update File: new.txt\n@@\n-one\n+two\n"
        "*** Update File: old.txt\n*** Move to: moved/old.txt\n@@\n-a\n+b\n"
        "*** Update File: moved/old.txt\n@@\n-b\n+c\n*** End Patch"
    )
    async with LocalExecutor(tmp_path) as executor:
        result = await apply_patch(executor, patch)
    assert tree_of(tmp_path) == {"moved": None, "moved/old.txt": b"c\n", "new.txt": b"two\n"}
    assert result.added == ("new.txt",)
    assert result.modified == ("new.txt", "moved/old.txt", "moved/old.txt")


async def test_a_move_onto_itself_is_an_update(tmp_path: Path) -> None:
    """Codex would write the file, then remove it as the move's source; here it stays."""
    (tmp_path / "a.txt").write_text("x\n")
    async with LocalExecutor(tmp_path) as executor:
        result = await apply_patch(
            executor,
            "*** Begin Patch\n*** Update File: a.txt\n*** Move to: ./a.txt\n@@\n-x\n+y\n"
            "*** End Patch",
        )
    assert tree_of(tmp_path) == {"a.txt": b"y\n"}
    assert result.moved == ()


async def test_a_file_deleted_then_a_folder_of_its_name_made(tmp_path: Path) -> None:
    """The changes are made in the patch's order: the file goes before the folder comes."""
    (tmp_path / "thing").write_text("file\n")
    async with LocalExecutor(tmp_path) as executor:
        await apply_patch(
            executor,
            "*** Begin Patch\n*** Delete File: thing\n*** Add File: thing/inside.txt\n+x\n"
            "*** End Patch",
        )
    assert tree_of(tmp_path) == {"thing": None, "thing/inside.txt": b"x\n"}


# --- atomicity ---------------------------------------------------------------------------

UPDATE_A = "*** Begin Patch\n*** Update File: a.txt\n@@\n one\n-two\n+TWO\n"


async def test_a_failing_hunk_writes_nothing(tmp_path: Path) -> None:
    """The first file's update is fine, the second's hunk is not: neither file is written."""
    before: Tree = {"a.txt": b"one\ntwo\n", "b.txt": b"three\n"}
    write_tree(tmp_path, before)
    patch = UPDATE_A + "*** Update File: b.txt\n@@\n-four\n+FOUR\n*** End Patch"
    async with LocalExecutor(tmp_path) as executor:
        with pytest.raises(PatchError) as failure:
            await apply_patch(executor, patch)
    assert tree_of(tmp_path) == before
    assert str(failure.value).startswith(
        "Failed to find expected lines in b.txt (the hunk at line 8 of the patch):\nfour"
    )
    assert failure.value.line == 8


async def test_a_failed_write_restores_the_file_written_before(tmp_path: Path) -> None:
    """The second write fails (its folder is a file): the first file gets its bytes back."""
    before: Tree = {"a.txt": b"one\ntwo\n", "blocker": b"a file\n"}
    write_tree(tmp_path, before)
    patch = UPDATE_A + "*** Add File: blocker/x.txt\n+x\n*** End Patch"
    async with LocalExecutor(tmp_path) as executor:
        with pytest.raises(PatchError) as failure:
            await apply_patch(executor, patch)
    assert tree_of(tmp_path) == before
    assert str(failure.value) == (
        "Failed to write file blocker/x.txt: Not a directory; the patch was not applied: "
        "no file was changed (the 1 change(s) made before were undone)"
    )


async def test_a_failed_write_brings_back_a_deleted_file_and_removes_added_ones(
    tmp_path: Path,
) -> None:
    """Deleted files come back, added files and the folders made for them go, moves are undone."""
    before: Tree = {
        "a.txt": b"one\ntwo\n",
        "gone.txt": b"keep me\r\n",
        "src": None,
        "src/old.py": b"x = 1\n",
        "blocker": b"a file\n",
    }
    write_tree(tmp_path, before)
    patch = (
        UPDATE_A + "*** Delete File: gone.txt\n"
        "*** Add File: deep/new/folders/n.txt\n+n\n"
        "*** Update File: src/old.py\n*** Move to: lib/new.py\n@@\n-x = 1\n+x = 2\n"
        "*** Add File: blocker/x.txt\n+x\n*** End Patch"
    )
    async with LocalExecutor(tmp_path) as executor:
        with pytest.raises(PatchError, match=r"the 5 change\(s\) made before were undone"):
            await apply_patch(executor, patch)
    assert tree_of(tmp_path) == before


async def test_an_existing_empty_folder_is_not_removed_by_the_undo(tmp_path: Path) -> None:
    """Only the folders the patch made go: an empty one that was there stays."""
    before: Tree = {"empty": None, "blocker": b"a file\n"}
    write_tree(tmp_path, before)
    patch = (
        "*** Begin Patch\n*** Add File: empty/sub/a.txt\n+a\n*** Add File: blocker/x\n+x\n"
        "*** End Patch"
    )
    async with LocalExecutor(tmp_path) as executor:
        with pytest.raises(PatchError, match="Not a directory"):
            await apply_patch(executor, patch)
    assert tree_of(tmp_path) == before


class FailingWrites(WrappedExecutor):
    """Fails the `fail_at`-th write (1-based) with an executor error, not a refused write."""

    def __init__(self, inner: ToolExecutor, fail_at: int) -> None:
        super().__init__(inner)
        self.fail_at = fail_at
        self.writes = 0

    async def exec_cmd(self, cmd: Command) -> CommandOutput:
        if isinstance(cmd, WriteFile):
            self.writes += 1
            if self.writes == self.fail_at:
                raise ExecutorError("the connection was lost")
        return await super().exec_cmd(cmd)


async def test_an_executor_failure_is_raised_as_it_is_after_the_undo(tmp_path: Path) -> None:
    """A lost connection or a refused policy is not a patch error: it goes on, once undone."""
    before: Tree = {"a.txt": b"one\ntwo\n", "b.txt": b"b\n"}
    write_tree(tmp_path, before)
    patch = UPDATE_A + "*** Update File: b.txt\n@@\n-b\n+B\n*** End Patch"
    async with LocalExecutor(tmp_path) as local:
        failing = FailingWrites(local, fail_at=2)
        with pytest.raises(ExecutorError, match="the connection was lost"):
            await apply_patch(failing, patch)
        # The second write failed, but a lost write may have landed: the undo
        # writes both files back, b.txt then a.txt.
        assert failing.writes == 4
    assert tree_of(tmp_path) == before


class StallingWrites(WrappedExecutor):
    """Holds the `stall_at`-th write (1-based) until the caller gives up; the others run."""

    def __init__(self, inner: ToolExecutor, stall_at: int) -> None:
        super().__init__(inner)
        self.stall_at = stall_at
        self.writes = 0

    async def exec_cmd(self, cmd: Command) -> CommandOutput:
        if isinstance(cmd, WriteFile):
            self.writes += 1
            if self.writes == self.stall_at:
                await anyio.sleep_forever()
        return await super().exec_cmd(cmd)


async def test_a_cancelled_patch_is_undone(tmp_path: Path) -> None:
    """Cancelled between two writes, the patch still does not stay half-applied."""
    before: Tree = {"a.txt": b"one\ntwo\n", "b.txt": b"b\n"}
    write_tree(tmp_path, before)
    patch = UPDATE_A + "*** Update File: b.txt\n@@\n-b\n+B\n*** End Patch"
    async with LocalExecutor(tmp_path) as local:
        stalling = StallingWrites(local, stall_at=2)
        with anyio.move_on_after(0.5) as scope:
            await apply_patch(stalling, patch)
        assert scope.cancelled_caught
    assert tree_of(tmp_path) == before


async def test_a_lone_added_file_is_written_without_reading(tmp_path: Path) -> None:
    """One Add File: one write, nothing read (there is nothing to put back)."""
    seen: list[Command] = []

    class Recording(WrappedExecutor):
        async def exec_cmd(self, cmd: Command) -> CommandOutput:
            seen.append(cmd)
            return await super().exec_cmd(cmd)

    async with LocalExecutor(tmp_path) as local:
        await apply_patch(
            Recording(local), "*** Begin Patch\n*** Add File: a/b.txt\n+x\n*** End Patch"
        )
    assert [type(cmd).__name__ for cmd in seen] == ["WriteFile"]
    assert (tmp_path / "a" / "b.txt").read_bytes() == b"x\n"
    assert os.listdir(tmp_path) == ["a"]
