"""The file walker behind `stream_files`: ripgrep's listing rules, reading, and failures."""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import AsyncGenerator, Generator, Mapping
from pathlib import Path
from typing import Any

import anyio
import attrs
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from executor._core.base import LoadedFile
from executor._core.errors import InvalidArgument
from executor._files import walk as walk_module
from executor._files.rules import normalise_extensions
from executor._files.walk import _BATCH_FILES_FIRST, _FIRST_READ, iter_text_files, stream_text_files

pytestmark = pytest.mark.anyio

RG = shutil.which("rg")
needs_rg = pytest.mark.skipif(RG is None, reason="ripgrep (rg) is not installed")

# A tree is written from a mapping: a path with "/" separators to its content.
Tree = Mapping[str, str | bytes]


def make_tree(root: Path, tree: Tree) -> Path:
    """Write `tree` below `root` and return `root`."""
    for relative, content in tree.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
    return root


def make_repo(root: Path, tree: Tree) -> Path:
    """Write `tree` below `root` and mark `root` as the top of a git repository."""
    (root / ".git" / "info").mkdir(parents=True)
    return make_tree(root, tree)


def walk(root: Path, extensions: frozenset[str] | None = None) -> list[str]:
    """The relative paths `iter_text_files` yields for `root`, in order."""
    return [path for path, _ in iter_text_files(str(root), extensions=extensions)]


def walk_fd(fd: int, extensions: frozenset[str] | None = None) -> list[str]:
    """The relative paths `iter_text_files` yields for the root open as `fd`, in order."""
    return [path for path, _ in iter_text_files(fd, extensions=extensions)]


@contextlib.contextmanager
def open_folder(path: Path, flags: int = os.O_RDONLY) -> Generator[int, None, None]:
    """The folder at `path`, open as a descriptor (with `flags`) while in the block."""
    fd = os.open(path, flags | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        yield fd
    finally:
        os.close(fd)


def rg_files(root: Path) -> set[str]:
    """The files `rg --files` lists in `root`, relative to it, without any user config."""
    assert RG is not None
    env = {key: value for key, value in os.environ.items() if key != "RIPGREP_CONFIG_PATH"}
    listed = subprocess.run(
        [RG, "--files", "--no-config"], cwd=root, env=env, capture_output=True, check=False
    )
    # 1 means "nothing listed"; anything else is a failure of rg itself.
    assert listed.returncode in (0, 1), listed.stderr
    return set(os.fsdecode(listed.stdout).splitlines())


def test_nested_gitignore_with_negation(tmp_path: Path) -> None:
    """A nested .gitignore re-includes with `!` what a shallower one ignores, below itself."""
    make_repo(
        tmp_path,
        {
            ".gitignore": "*.log\n",
            "a.log": "",
            "keep.log": "",
            "sub/.gitignore": "!keep.log\n",
            "sub/keep.log": "",
            "sub/other.log": "",
            "sub/deep/keep.log": "",
        },
    )
    assert walk(tmp_path) == ["sub/deep/keep.log", "sub/keep.log"]


def test_last_matching_pattern_in_a_file_wins(tmp_path: Path) -> None:
    """Within one ignore file the last matching pattern decides, ignoring or re-including."""
    make_repo(tmp_path, {".gitignore": "*.txt\n!*.txt\nb.txt\n", "a.txt": "", "b.txt": ""})
    assert walk(tmp_path) == ["a.txt"]


def test_directory_patterns(tmp_path: Path) -> None:
    """A pattern ending in `/` ignores folders of that name at any depth, never files."""
    make_repo(
        tmp_path,
        {
            ".gitignore": "build/\n",
            "build/a.txt": "",
            "src/build/b.txt": "",
            "src/build.txt": "",
            "other/build": "a file called build",
        },
    )
    assert walk(tmp_path) == ["other/build", "src/build.txt"]


def test_anchored_patterns(tmp_path: Path) -> None:
    """A pattern with a slash matches from its ignore file's folder only, not at any depth."""
    make_repo(
        tmp_path,
        {
            ".gitignore": "/top.txt\ndocs/old.md\n",
            "top.txt": "",
            "sub/top.txt": "",
            "docs/old.md": "",
            "sub/docs/old.md": "",
            "sub/.gitignore": "/here.txt\n",
            "sub/here.txt": "",
            "here.txt": "",
        },
    )
    assert walk(tmp_path) == ["here.txt", "sub/docs/old.md", "sub/top.txt"]


def test_double_star_patterns(tmp_path: Path) -> None:
    """`**` spans folders, and `dir/**` ignores a folder's contents so `!dir/x` can re-include."""
    make_repo(
        tmp_path,
        {
            ".gitignore": "**/gen/*.py\nlogs/**\n!logs/README\na/**/z.txt\nout/**/\n",
            "gen/x.py": "",
            "src/gen/y.py": "",
            "src/gen/y.txt": "",
            "logs/1.txt": "",
            "logs/README": "",
            "a/z.txt": "",
            "a/b/c/z.txt": "",
            "b/a/z.txt": "",
            "out/top.txt": "",
            "out/deeper/x.txt": "",
        },
    )
    assert walk(tmp_path) == ["b/a/z.txt", "logs/README", "out/top.txt", "src/gen/y.txt"]


def test_ignored_folder_is_never_entered(tmp_path: Path) -> None:
    """Nothing below an ignored folder comes back, not even through a deeper `!` pattern."""
    make_repo(
        tmp_path,
        {".gitignore": "vendor\n!vendor/keep.txt\n", "vendor/keep.txt": "", "vendor/x.txt": ""},
    )
    assert walk(tmp_path) == []


def test_ignore_file_counts_without_git(tmp_path: Path) -> None:
    """`.ignore` files apply even when no git repository is around."""
    make_tree(tmp_path, {".ignore": "*.tmp\n", "a.tmp": "", "a.txt": "", "sub/b.tmp": ""})
    assert walk(tmp_path) == ["a.txt"]


def test_gitignore_outside_a_repository_is_not_read(tmp_path: Path) -> None:
    """Without a `.git` in the root or above, `.gitignore` files change nothing, as in ripgrep."""
    make_tree(
        tmp_path, {".gitignore": "*.txt\n", "a.txt": "", "sub/.gitignore": "*\n", "sub/b": ""}
    )
    assert walk(tmp_path) == ["a.txt", "sub/b"]


def test_git_info_exclude(tmp_path: Path) -> None:
    """The repository's `.git/info/exclude` ignores like a top-level .gitignore."""
    make_repo(tmp_path, {".git/info/exclude": "secret.txt\n", "secret.txt": "", "a/secret.txt": ""})
    make_tree(tmp_path, {"plain.txt": ""})
    assert walk(tmp_path) == ["plain.txt"]


def test_ancestors_ignore_files(tmp_path: Path) -> None:
    """Ignore files above the root count: .gitignore up to the repository's top, .ignore always."""
    make_tree(tmp_path, {".ignore": "*.tmp\n", ".gitignore": "*.md\n"})
    repo = make_repo(
        tmp_path / "repo",
        {
            ".gitignore": "*.log\n/sub/anchored.txt\n",
            ".git/info/exclude": "excluded.txt\n",
            "sub/a.log": "",
            "sub/a.tmp": "",
            "sub/a.md": "",
            "sub/anchored.txt": "",
            "sub/excluded.txt": "",
            "sub/deep/anchored.txt": "",
            "sub/kept.txt": "",
        },
    )
    assert walk(repo / "sub") == ["a.md", "deep/anchored.txt", "kept.txt"]


def test_ignore_beats_gitignore(tmp_path: Path) -> None:
    """A `.ignore` match wins over any `.gitignore` one, which wins over `.git/info/exclude`."""
    make_repo(
        tmp_path,
        {
            ".ignore": "!keep.log\n!build/\n",
            ".git/info/exclude": "*.txt\n",
            "sub/.gitignore": "*.log\n!*.txt\nbuild/\n",
            "sub/keep.log": "",
            "sub/other.log": "",
            "sub/build/out.txt": "",
            "sub/note.txt": "",
            "note.txt": "",
        },
    )
    assert walk(tmp_path) == ["sub/build/out.txt", "sub/keep.log", "sub/note.txt"]


def test_nested_repository_stops_outer_gitignore(tmp_path: Path) -> None:
    """Inside a nested repository the outer repository's .gitignore files no longer apply."""
    make_repo(tmp_path, {".gitignore": "*.txt\n", "a.txt": ""})
    make_repo(tmp_path / "inner", {"b.txt": ""})
    assert walk(tmp_path) == ["inner/b.txt"]


def test_invalid_pattern_is_reported_and_the_rest_kept(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A bad line in an ignore file is logged as a warning; the file's other lines still apply."""
    make_tree(tmp_path, {".ignore": "a.txt\nb[z-a]c\nb.txt\n", "a.txt": "", "b.txt": "", "c": ""})
    with caplog.at_level(logging.WARNING, logger="executor"):
        assert walk(tmp_path) == ["c"]
    assert any("b[z-a]c" in record.getMessage() for record in caplog.records)


def test_hidden_entries_are_skipped(tmp_path: Path) -> None:
    """Hidden files and folders, `.git` included, are never listed, but a hidden root is walked."""
    make_repo(
        tmp_path,
        {".env": "", ".cache/x.txt": "", ".git/config": "", "sub/.hidden": "", "sub/shown": ""},
    )
    make_tree(tmp_path / ".root", {"a.txt": ""})
    assert walk(tmp_path) == ["sub/shown"]
    assert walk(tmp_path / ".root") == ["a.txt"]


def test_bang_pattern_reincludes_hidden_entries_but_never_git(tmp_path: Path) -> None:
    """As in ripgrep, a `!` pattern re-includes a hidden entry; `.git` stays out regardless."""
    make_repo(
        tmp_path,
        {
            ".ignore": "!.github/\n!.env\n!.git/\n!.git\n",
            ".github/ci.yml": "",
            ".env": "",
            ".other": "",
            ".git/config": "",
        },
    )
    assert walk(tmp_path) == [".env", ".github/ci.yml"]


def test_worktree_git_file_exclude(tmp_path: Path) -> None:
    """In a worktree, whose `.git` is a file, the main repository's info/exclude applies."""
    make_repo(tmp_path / "main", {".git/info/exclude": "*.secret\n", ".git/worktrees/w/x": ""})
    (tmp_path / "main" / ".git" / "worktrees" / "w" / "commondir").write_text("../..\n")
    worktree = make_tree(tmp_path / "w", {"a.secret": "", "a.txt": ""})
    (worktree / ".git").write_text(f"gitdir: {tmp_path}/main/.git/worktrees/w\n")
    assert walk(worktree) == ["a.txt"]


def test_symlinks_are_not_followed(tmp_path: Path) -> None:
    """Symlinked files and folders are skipped, including ones that point outside the root."""
    outside = make_tree(tmp_path / "outside", {"secret.txt": "secret"})
    root = make_tree(tmp_path / "root", {"real/a.txt": "a"})
    (root / "file-link.txt").symlink_to(root / "real" / "a.txt")
    (root / "dir-link").symlink_to(root / "real", target_is_directory=True)
    (root / "outside-link").symlink_to(outside, target_is_directory=True)
    (root / "secret-link.txt").symlink_to(outside / "secret.txt")
    (root / "dangling").symlink_to(tmp_path / "nowhere")
    assert walk(root) == ["real/a.txt"]


def test_symlinked_root_is_followed(tmp_path: Path) -> None:
    """A root that is a symlink to a folder is walked, as rg walks a path it is given."""
    make_tree(tmp_path / "real", {"a.txt": "a"})
    (tmp_path / "link").symlink_to(tmp_path / "real", target_is_directory=True)
    assert walk(tmp_path / "link") == ["a.txt"]


def test_binary_files_are_skipped(tmp_path: Path) -> None:
    """A file with a NUL byte anywhere is binary and skipped; an empty file is text."""
    make_tree(
        tmp_path,
        {"a.bin": b"\x00\x01", "late.bin": b"x" * 10000 + b"\x00", "empty": b"", "t.txt": "t"},
    )
    assert dict(iter_text_files(str(tmp_path), extensions=None)) == {"empty": "", "t.txt": "t"}


def test_files_longer_than_the_first_read_are_read_whole(tmp_path: Path) -> None:
    """A file is read whole whatever its size around the first read's; a late NUL still counts."""
    sizes = [0, 1, _FIRST_READ - 1, _FIRST_READ, _FIRST_READ + 1, 3 * _FIRST_READ + 7]
    tree: dict[str, str | bytes] = {
        f"f{size:07}.txt": ("0123456789" * (size // 10 + 1))[:size] for size in sizes
    }
    make_tree(tmp_path, {**tree, "late.bin": b"x" * (_FIRST_READ + 10) + b"\0"})
    assert dict(iter_text_files(str(tmp_path), extensions=None)) == tree


def test_non_utf8_text_is_kept_with_replacement(tmp_path: Path) -> None:
    """A latin-1 file is text: its invalid UTF-8 bytes become U+FFFD, the rest is kept."""
    make_tree(tmp_path, {"latin.txt": "café\n".encode("latin-1"), "bom.txt": b"\xef\xbb\xbfhi"})
    assert dict(iter_text_files(str(tmp_path), extensions=None)) == {
        "bom.txt": "\ufeffhi",
        "latin.txt": "caf\ufffd\n",
    }


@pytest.mark.parametrize(
    ("extensions", "expected"),
    [
        (["py"], ["a.py", "sub/c.py"]),
        ([".py"], ["a.py", "sub/c.py"]),
        ("py", ["a.py", "sub/c.py"]),
        (["py", ".md"], ["a.py", "b.md", "sub/c.py"]),
        (["d.ts"], ["x.d.ts"]),
        (None, ["Makefile", "a.py", "b.md", "py", "sub/c.py", "x.d.ts", "y.ts"]),
        ([], ["Makefile", "a.py", "b.md", "py", "sub/c.py", "x.d.ts", "y.ts"]),
    ],
)
def test_extensions_filter(
    tmp_path: Path, extensions: list[str] | str | None, expected: list[str]
) -> None:
    """Extensions keep matching files, with or without their dot; None or empty keeps all."""
    make_tree(
        tmp_path,
        {n: "" for n in ["a.py", "b.md", "py", "Makefile", "sub/c.py", "x.d.ts", "y.ts"]},
    )
    assert walk(tmp_path, normalise_extensions(extensions)) == expected


def test_normalise_extensions() -> None:
    """`py` and `.py` are one extension; None and empty mean all files."""
    assert normalise_extensions(["py", ".py", ".md"]) == frozenset({"py", "md"})
    assert normalise_extensions(".py") == frozenset({"py"})
    assert normalise_extensions(None) is None
    assert normalise_extensions([]) is None
    assert normalise_extensions(iter(())) is None


@pytest.mark.parametrize("bad", ["", ".", " ", "a/b", "..py", "py.", "p\0y"])
def test_normalise_extensions_rejects_what_never_matches(bad: str) -> None:
    """An empty, blank or impossible extension is an InvalidArgument naming it."""
    with pytest.raises(InvalidArgument) as raised:
        normalise_extensions(["py", bad])
    assert raised.value.value == bad


def test_missing_root_raises(tmp_path: Path) -> None:
    """A root that does not exist, or runs through a file, raises FileNotFoundError naming it."""
    (tmp_path / "file").write_text("")
    for missing in (tmp_path / "nope", tmp_path / "file" / "below"):
        with pytest.raises(FileNotFoundError) as raised:
            walk(missing)
        assert raised.value.filename == str(missing)


async def test_stream_missing_root_raises_before_yielding(tmp_path: Path) -> None:
    """stream_text_files raises FileNotFoundError naming the displayed root, yielding nothing."""
    stream = stream_text_files(str(tmp_path / "nope"), "src/nope", extensions=None)
    with pytest.raises(FileNotFoundError, match="src/nope"):
        await anext(stream)


async def test_root_that_is_a_file(tmp_path: Path) -> None:
    """A root that is a regular file yields just that file: its name, or the displayed root."""
    make_tree(tmp_path, {"src/a.py": "print(1)\n"})
    root = str(tmp_path / "src" / "a.py")
    assert list(iter_text_files(root, extensions=None)) == [("a.py", "print(1)\n")]
    assert list(iter_text_files(root, extensions=frozenset({"md"}))) == []
    streamed = [f async for f in stream_text_files(root, "src/a.py", extensions=None)]
    assert streamed == [LoadedFile(path="src/a.py", content="print(1)\n")]


@pytest.mark.timeout(30)
def test_fifos_and_sockets_are_skipped_without_opening(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """FIFOs and sockets are skipped without being opened, so the walk never hangs on one."""
    make_tree(tmp_path, {"a.txt": "a", "z.txt": "z"})
    os.mkfifo(tmp_path / "fifo")
    # Bound by a relative name: a socket path must fit in 108 bytes.
    monkeypatch.chdir(tmp_path)
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind("sock")
        assert walk(tmp_path) == ["a.txt", "z.txt"]
        # Given as the root, a FIFO is not read either.
        assert walk(tmp_path / "fifo") == []


class SwappedEntry:
    """A listed entry that says it is a regular file, whatever took its place since."""

    def __init__(self, name: str) -> None:
        self.name = name

    def is_file(self, *, follow_symlinks: bool = True) -> bool:
        return True

    def is_dir(self, *, follow_symlinks: bool = True) -> bool:
        return False


@pytest.mark.timeout(30)
def test_what_replaced_a_listed_file_is_not_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A FIFO, folder or device found where the listing saw a file is skipped: no hang, no read.

    The listing is made to call every entry a regular file, as it did just
    before each was swapped in. A FIFO (with a writer and data waiting, or
    none) is neither blocked on nor read from; a device, made only when the
    tests run as root, is at most read once, boundedly, and never yielded.
    """
    make_tree(tmp_path, {"a.txt": "a", "folder/x.txt": "x", "z.txt": "z"})
    os.mkfifo(tmp_path / "fifo")
    os.mkfifo(tmp_path / "fifo-with-data")
    for name, device in (("null", os.makedev(1, 3)), ("zero", os.makedev(1, 5))):
        with contextlib.suppress(PermissionError):
            os.mknod(tmp_path / name, stat.S_IFCHR | 0o666, device)
    scandir = os.scandir

    def listing_all_files(path: Any = ".") -> Any:
        if not isinstance(path, int):
            return scandir(path)
        with scandir(path) as entries:
            return contextlib.nullcontext([SwappedEntry(entry.name) for entry in entries])

    # Both ends, so that opening it never waits, and what is written stays to be read back.
    fifo = os.open(tmp_path / "fifo-with-data", os.O_RDWR | os.O_NONBLOCK)
    try:
        os.write(fifo, b"fifo data\n")
        monkeypatch.setattr(os, "scandir", listing_all_files)
        with caplog.at_level(logging.WARNING, logger="executor"):
            assert list(iter_text_files(str(tmp_path), extensions=None)) == [
                ("a.txt", "a"),
                ("z.txt", "z"),
            ]
        monkeypatch.undo()
        assert os.read(fifo, 100) == b"fifo data\n"
    finally:
        os.close(fifo)
    # Skipped as quietly as when the listing shows them for what they are.
    assert not caplog.records


UNREADABLE_SCRIPT = textwrap.dedent(
    """
    import json, logging, os, sys
    from executor._files.walk import iter_text_files

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
    if os.geteuid() == 0:
        # Root reads anything: become nobody, after every import is done.
        try:
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
        except OSError as exc:
            print(json.dumps({"skip": str(exc)}))
            sys.exit(0)
    paths = [path for path, _ in iter_text_files(sys.argv[1], extensions=None)]
    print(json.dumps({"paths": paths}))
    """
)


def test_unreadable_entries_are_logged_and_skipped() -> None:
    """An unreadable file or folder is logged as a warning naming it and the error, then skipped."""
    # Not tmp_path: the user the walk runs as (nobody, when tests run as root)
    # must be able to reach the tree.
    with tempfile.TemporaryDirectory(prefix="walk-unreadable-") as directory:
        root = make_tree(
            Path(directory),
            {"a.txt": "a", "locked.txt": "no", "closed/x.txt": "x", "z/z.txt": "z"},
        )
        root.chmod(0o755)
        for folder in (root / "closed", root / "z"):
            folder.chmod(0o755)
        for path in (root / "a.txt", root / "z" / "z.txt"):
            path.chmod(0o644)
        (root / "locked.txt").chmod(0)
        (root / "closed").chmod(0)
        try:
            env = {**os.environ, "PYTHONPATH": os.getcwd(), "PYTHONDONTWRITEBYTECODE": "1"}
            done = subprocess.run(
                [sys.executable, "-c", UNREADABLE_SCRIPT, str(root)],
                capture_output=True,
                text=True,
                env=env,
                timeout=60,
                check=True,
            )
        finally:
            (root / "closed").chmod(0o755)
    result = json.loads(done.stdout)
    if "skip" in result:
        pytest.skip(f"cannot drop root privileges to make a file unreadable: {result['skip']}")
    assert result["paths"] == ["a.txt", "z/z.txt"]
    warnings = [line for line in done.stderr.splitlines() if line.startswith("WARNING")]
    assert len(warnings) == 2, done.stderr
    assert "closed" in warnings[0]
    assert "locked.txt" in warnings[1]
    assert all("Permission denied" in warning for warning in warnings)


def test_order_is_sorted_depth_first(tmp_path: Path) -> None:
    """Each folder's entries come in sorted name order, a subfolder's files right where it sorts."""
    make_tree(tmp_path, {n: "" for n in ["b/2", "b/1", "a", "c", "B", "b0", "b/a/x"]})
    assert walk(tmp_path) == ["B", "a", "b/1", "b/2", "b/a/x", "b0", "c"]


async def test_stream_yields_loaded_files_in_walk_order(tmp_path: Path) -> None:
    """stream_text_files yields the walk's files, across batches, under the displayed root."""
    # Three batches (each twice as long as the one before), the last one short.
    count = 3 * _BATCH_FILES_FIRST + 3
    make_tree(tmp_path, {f"d{i % 7}/f{i:04}.txt": f"{i}\n" for i in range(count)})
    expected = [
        LoadedFile(path=f"shown/{path}", content=content)
        for path, content in iter_text_files(str(tmp_path), extensions=None)
    ]
    streamed = [f async for f in stream_text_files(str(tmp_path), "shown", extensions=None)]
    assert len(streamed) == count
    assert streamed == expected
    unprefixed = [f.path async for f in stream_text_files(str(tmp_path), "", extensions=None)]
    assert unprefixed == [path for path, _ in iter_text_files(str(tmp_path), extensions=None)]


async def test_stream_closed_early(tmp_path: Path) -> None:
    """A consumer may stop after the first file; closing the stream ends the walk cleanly."""
    make_tree(tmp_path, {f"f{i:04}.txt": "x" for i in range(_BATCH_FILES_FIRST + 1)})
    stream = stream_text_files(str(tmp_path), "", extensions=None)
    assert isinstance(stream, AsyncGenerator)
    async with contextlib.aclosing(stream):
        async for loaded in stream:
            assert loaded.path == "f0000.txt"
            break


def open_descriptors() -> set[str]:
    """The file descriptors this process has open."""
    return set(os.listdir("/proc/self/fd"))


def test_no_descriptor_left_open(tmp_path: Path) -> None:
    """The walk closes every folder and file it opens, whether it ends, stops early or fails."""
    make_tree(tmp_path, {"a/b/c/d.txt": "d", "a/b/e.txt": "e", "a/f.txt": "f", "g.txt": "g"})
    before = open_descriptors()
    assert len(walk(tmp_path)) == 4
    partial = iter_text_files(str(tmp_path), extensions=None)
    assert isinstance(partial, Generator)
    assert next(partial)[0] == "a/b/c/d.txt"
    assert open_descriptors() - before  # Folders a, a/b and a/b/c are open here.
    partial.close()
    with pytest.raises(FileNotFoundError):
        walk(tmp_path / "missing")
    assert open_descriptors() == before


# A tree rich in the cases above, to check against ripgrep in one go.
RICH_TREE: dict[str, str | bytes] = {
    ".gitignore": "*.log\n!keep.log\nbuild/\n/top.txt\nlogs/**\n!logs/README\na/**/z.txt\n",
    ".ignore": "*.tmp\n!dist/\n",
    ".git/info/exclude": "excluded.txt\n",
    "top.txt": "",
    "sub/top.txt": "",
    "keep.log": "",
    "x.log": "",
    "build/b.txt": "",
    "dist/.gitignore": "*\n",
    "dist/d.txt": "",
    "logs/README": "",
    "logs/1.txt": "",
    "a/z.txt": "",
    "a/b/z.txt": "",
    "excluded.txt": "",
    "y.tmp": "",
    "sub/.gitignore": "!*.log\n/anchored\nsub2/\n",
    "sub/s.log": "",
    "sub/anchored": "",
    "sub/x/anchored": "",
    "sub/sub2/in.txt": "",
    "sub/.ignore": "!y.tmp\n",
    "sub/y.tmp": "",
    ".hidden/h.txt": "",
    "nested/.git/info/exclude": "",
    "nested/x.log": "",
    "nested/.gitignore": "n.txt\n",
    "nested/n.txt": "",
    "src/main.py": "",
    "src/util/helpers.py": "",
    "docs/index.md": "",
}


@needs_rg
def test_matches_ripgrep_on_a_rich_tree(tmp_path: Path) -> None:
    """On a tree exercising every ignore rule, the walk lists exactly what `rg --files` lists."""
    make_tree(tmp_path, RICH_TREE)
    (tmp_path / "link.txt").symlink_to(tmp_path / "top.txt")
    (tmp_path / "linkdir").symlink_to(tmp_path / "src", target_is_directory=True)
    ours = walk(tmp_path)
    assert set(ours) == rg_files(tmp_path)
    assert "nested/x.log" in ours  # The inner repository does not read the outer .gitignore.
    for below in ("sub", "src", "nested"):
        assert set(walk(tmp_path / below)) == rg_files(tmp_path / below)


@pytest.mark.parametrize("flags", [os.O_RDONLY, os.O_PATH], ids=["O_RDONLY", "O_PATH"])
async def test_descriptor_root_walks_like_its_path(tmp_path: Path, flags: int) -> None:
    """A root given as an open folder descriptor yields what its path yields, nothing above it."""
    root = make_tree(tmp_path / "root", RICH_TREE)
    (root / "link.txt").symlink_to(root / "top.txt")
    by_path = list(iter_text_files(str(root), extensions=None))
    assert len(by_path) > 5
    python = frozenset({"py"})
    with open_folder(root, flags) as fd:
        assert list(iter_text_files(fd, extensions=None)) == by_path
        assert walk_fd(fd, python) == walk(root, python) == ["src/main.py", "src/util/helpers.py"]
        streamed = [f async for f in stream_text_files(fd, "shown", extensions=None)]
    assert streamed == [LoadedFile(f"shown/{path}", content) for path, content in by_path]


def test_descriptor_root_stays_the_callers(tmp_path: Path) -> None:
    """The walk never closes nor moves the caller's descriptor, and leaves none of its own open."""
    make_tree(tmp_path, {"a/b/c.txt": "c", "a/d.txt": "d", "e.txt": "e"})
    before = open_descriptors()
    with open_folder(tmp_path) as fd:
        assert walk_fd(fd) == ["a/b/c.txt", "a/d.txt", "e.txt"]
        partial = iter_text_files(fd, extensions=None)
        assert isinstance(partial, Generator)
        assert next(partial)[0] == "a/b/c.txt"
        partial.close()
        # Still open, and still at its first entry: the walk read through its own.
        assert stat.S_ISDIR(os.fstat(fd).st_mode)
        assert os.lseek(fd, 0, os.SEEK_CUR) == 0
        assert sorted(os.listdir(fd)) == ["a", "e.txt"]
        assert walk_fd(fd) == ["a/b/c.txt", "a/d.txt", "e.txt"]
    assert open_descriptors() == before


def test_descriptor_root_renamed_still_walks_its_tree(tmp_path: Path) -> None:
    """A descriptor names its folder, not a path: renamed, another in its old place, it still is."""
    make_tree(tmp_path / "root", {"mine.txt": "mine", "sub/deep.txt": "deep"})
    with open_folder(tmp_path / "root") as fd:
        (tmp_path / "root").rename(tmp_path / "moved")
        make_tree(tmp_path / "root", {"other.txt": "other", ".ignore": "*.txt\n"})
        assert list(iter_text_files(fd, extensions=None)) == [
            ("mine.txt", "mine"),
            ("sub/deep.txt", "deep"),
        ]


def test_descriptor_root_reads_ignore_files_inside_only(tmp_path: Path) -> None:
    """From a descriptor, no ignore file above the root counts, and .gitignore files only in a repo.

    The root is in a repository (for .gitignore files) only if it holds a `.git`.
    """
    make_repo(
        tmp_path, {".ignore": "*.tmp\n", ".gitignore": "*.md\n", ".git/info/exclude": "*.log\n"}
    )
    sub = make_tree(
        tmp_path / "sub",
        {".gitignore": "*.txt\n", "a.tmp": "", "a.md": "", "a.log": "", "a.txt": "", "a.py": ""},
    )
    assert walk(sub) == ["a.py"]
    with open_folder(sub) as fd:
        assert walk_fd(fd) == ["a.log", "a.md", "a.py", "a.tmp", "a.txt"]
    (sub / ".git").write_text(f"gitdir: {tmp_path}/.git\n")  # Only its own exclude file is read.
    with open_folder(sub) as fd:
        assert walk_fd(fd) == ["a.log", "a.md", "a.py", "a.tmp"]


def test_descriptor_root_reads_no_ignore_file_through_a_symlink(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """From a descriptor, a symlinked ignore file or `.git` is not read; from a path it is."""
    outside = make_tree(tmp_path / "outside", {"ignore": "*.txt\n", "git/info/exclude": "*.md\n"})
    root = make_tree(tmp_path / "root", {"a.txt": "", "a.md": "", "a.py": ""})
    (root / ".ignore").symlink_to(outside / "ignore")
    (root / ".git").symlink_to(outside / "git", target_is_directory=True)
    assert walk(root) == ["a.py"]
    with open_folder(root) as fd, caplog.at_level(logging.WARNING, logger="executor"):
        assert walk_fd(fd) == ["a.md", "a.py", "a.txt"]
    assert [record.getMessage() for record in caplog.records] == [
        "stream_files could not read ignore file .ignore: Too many levels of symbolic links (ELOOP)"
    ]


async def test_descriptor_root_that_is_no_folder(tmp_path: Path) -> None:
    """A descriptor of a file raises NotADirectoryError; a negative one, EBADF (not the cwd)."""
    (tmp_path / "f.txt").write_text("f")
    fd = os.open(tmp_path / "f.txt", os.O_RDONLY | os.O_CLOEXEC)
    try:
        with pytest.raises(NotADirectoryError):
            walk_fd(fd)
        stream = stream_text_files(fd, "shown", extensions=None)
        with pytest.raises(NotADirectoryError, match="shown"):
            await anext(stream)
    finally:
        os.close(fd)
    for bad in (-1, -100):  # -100 is AT_FDCWD.
        with pytest.raises(OSError, match="Bad file descriptor") as raised:
            walk_fd(bad)
        assert raised.value.errno == errno.EBADF


NAMES = ["a", "b", "c.py", "d.txt", "e.log", ".h", "a.b"]
PATTERNS = [
    "*.log",
    "!e.log",
    "a",
    "a/",
    "/b",
    "b/c.py",
    "**/a/d.txt",
    "a/**",
    "a/**/",
    "!a/d.txt",
    "*.py",
    "!c.py",
    "d.txt",
    "/a/b",
    "b/",
    "!b/",
    "*",
    "*/",
    "!*/",
    "**/",
    "/*",
    "*/d.txt",
    "a/*",
    "!a/*",
    "**/b/**",
    "[ab]",
    "[!a]",
    "?",
    "a.*",
    ".h",
    "!.h",
    "!.*",
    "a ",
    "a\\ ",
    "\\!x",
    "# comment",
]
IGNORE_FILES = [".gitignore", ".ignore", ".git/info/exclude"]


@st.composite
def trees(draw: st.DrawFn) -> tuple[dict[str, str], list[str]]:
    """A random tree of small text files and ignore files, and the folders holding a `.git`."""
    files: dict[str, str] = {}
    folders = [""]
    for _ in range(draw(st.integers(1, 24))):
        parent = draw(st.sampled_from(folders))
        name = draw(st.sampled_from(NAMES))
        path = parent + name
        if path in files or path + "/" in folders:
            continue
        if parent.count("/") < 3 and draw(st.booleans()):
            folders.append(path + "/")
        else:
            files[path] = name
    for folder in draw(st.lists(st.sampled_from(folders), max_size=4)):
        kind = draw(st.sampled_from(IGNORE_FILES))
        lines = draw(st.lists(st.sampled_from(PATTERNS), min_size=1, max_size=5))
        files[folder + kind] = "".join(line + "\n" for line in lines)
    return files, draw(st.lists(st.sampled_from(folders), max_size=2))


def _write_random_tree(root: Path, case: tuple[dict[str, str], list[str]]) -> None:
    files, repositories = case
    make_tree(root, files)
    for folder in repositories:
        (root / folder / ".git").mkdir(parents=True, exist_ok=True)


def _folders(case: tuple[dict[str, str], list[str]]) -> list[str]:
    """Every folder of a random tree that holds files, but those inside a `.git`."""
    found = {path.rsplit("/", 1)[0] for path in case[0] if "/" in path}
    return sorted(folder for folder in found if ".git" not in folder.split("/"))


@pytest.mark.slow
@settings(max_examples=60, deadline=None, database=None)
@given(trees())
def test_every_listed_file_is_visible_text(case: tuple[dict[str, str], list[str]]) -> None:
    """Each yielded file is regular, below the root, hidden only if re-included, read as written."""
    # Only a `!` pattern can bring a hidden entry back; `.git` never comes back.
    reincludes = any(
        "\n!" in "\n" + text for path, text in case[0].items() if path.endswith(tuple(IGNORE_FILES))
    )
    with tempfile.TemporaryDirectory(prefix="walk-prop-") as directory:
        root = Path(directory)
        _write_random_tree(root, case)
        listed = list(iter_text_files(directory, extensions=None))
        with open_folder(root) as fd:
            # Nothing above a temporary folder counts: from a descriptor, the same.
            assert list(iter_text_files(fd, extensions=None)) == listed
        paths = [path for path, _ in listed]
        assert len(set(paths)) == len(paths)
        for path, content in listed:
            parts = path.split("/")
            assert ".git" not in parts
            assert reincludes or not any(part.startswith(".") for part in parts)
            status = os.lstat(root / path)
            assert stat.S_ISREG(status.st_mode)
            assert (root / path).read_text() == content


@pytest.mark.slow
@needs_rg
@settings(
    max_examples=80,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(trees())
def test_random_trees_match_ripgrep(case: tuple[dict[str, str], list[str]]) -> None:
    """On random trees and ignore files, from the top or a folder, the walk lists what rg lists."""
    with tempfile.TemporaryDirectory(prefix="walk-rg-") as directory:
        root = Path(directory)
        _write_random_tree(root, case)
        for folder in ["", *_folders(case)]:
            # rg lists a `.git` folder's files when a `!` pattern re-includes
            # it; this walk never does.
            listed = {path for path in rg_files(root / folder) if ".git" not in path.split("/")}
            assert set(walk(root / folder)) == listed, folder


# The forked reader (`executor._files.reader`): past `fork_after` files, a
# child process reads a share of them. `fork_after=0` forks at the first run
# of files, so that a small tree takes every path through it; `forking` makes
# the walk fork even when every core is busy (as on a loaded CI machine).


@pytest.fixture
def forking(monkeypatch: pytest.MonkeyPatch) -> None:
    """Walks fork their reader whatever the machine's load."""
    monkeypatch.setattr(walk_module, "_spare_core", lambda: True)


def child_processes() -> set[int]:
    """The processes this one started and has not reaped (zombies included)."""
    children: set[int] = set()
    for task in os.listdir("/proc/self/task"):
        with contextlib.suppress(FileNotFoundError):
            children.update(
                int(pid) for pid in Path(f"/proc/self/task/{task}/children").read_text().split()
            )
    return children


def forked_tree(root: Path) -> Path:
    """A repository of some 1,500 files in nested folders, runs long and short, every kind of entry.

    Ignored files and folders, re-included ones, hidden files and folders,
    binaries, empty files, a file longer than the first read, non-UTF-8 text,
    and symlinks, in folders of up to 300 files (runs cut in several
    requests) beside their subfolders (runs cut by them).
    """
    tree: dict[str, str | bytes] = {
        ".gitignore": "*.log\nbuild/\n!keep.log\n",
        "big.txt": "0123456789" * (_FIRST_READ // 10 + 5),
        "latin.txt": "café\n".encode("latin-1"),
    }
    for top in range(6):
        for sub in range(4):
            folder = f"t{top}/s{sub}"
            count = 300 if (top, sub) == (2, 1) else 40
            for index in range(count):
                tree[f"{folder}/f{index:03}.py"] = f"{folder} {index}\n"
            tree[f"{folder}/blob.bin"] = b"\0binary"
            tree[f"{folder}/empty.txt"] = ""
            tree[f"{folder}/x.log"] = "ignored"
            tree[f"{folder}/keep.log"] = "kept"
            tree[f"{folder}/.hidden.txt"] = "hidden"
            tree[f"{folder}/build/out.txt"] = "ignored"
            tree[f"{folder}/m{sub}/deep.md"] = f"deep {top} {sub}"
        tree[f"t{top}/.ignore"] = "*.md\n!m1/\n" if top % 2 else "f01*.py\n"
        tree[f"t{top}/.secret/s.txt"] = "hidden"
        tree[f"t{top}/zz.txt"] = f"after the subfolders of t{top}"
    make_repo(root, tree)
    (root / "t0" / "link.txt").symlink_to(root / "big.txt")
    (root / "t1" / "linkdir").symlink_to(root / "t2", target_is_directory=True)
    return root


@pytest.mark.parametrize("extensions", [None, frozenset({"py"}), frozenset({"md", "txt"})])
@pytest.mark.usefixtures("forking")
def test_forked_reader_gives_what_one_process_gives(
    tmp_path: Path, extensions: frozenset[str] | None
) -> None:
    """With a forked reader, the walk yields the same files, contents and order as without one."""
    root = forked_tree(tmp_path)
    alone = list(iter_text_files(str(root), extensions=extensions, fork_after=None))
    assert len(alone) > (40 if extensions else 1000)
    before = child_processes()
    for fork_after in (0, 7, 500):
        forked = iter_text_files(str(root), extensions=extensions, fork_after=fork_after)
        assert list(forked) == alone
    with open_folder(root) as fd:
        assert list(iter_text_files(fd, extensions=extensions, fork_after=0)) == list(
            iter_text_files(fd, extensions=extensions, fork_after=None)
        )
    assert child_processes() == before


@pytest.mark.usefixtures("forking")
async def test_stream_with_a_forked_reader_gives_what_one_process_gives(tmp_path: Path) -> None:
    """`stream_text_files` with a forked reader, by path and confined below a base, as without."""
    root = forked_tree(tmp_path / "root")
    alone = [f async for f in stream_text_files(str(root), "r", extensions=None, fork_after=None)]
    assert len(alone) > 1000
    assert [f async for f in stream_text_files(str(root), "r", extensions=None, fork_after=0)] == (
        alone
    )
    with open_folder(tmp_path) as base, open_folder(root / "t2") as fd:
        confined = [
            f
            async for f in stream_text_files(
                fd, "r/t2", extensions=None, base=(base, str(tmp_path)), fork_after=0
            )
        ]
    assert confined == [f for f in alone if f.path.startswith("r/t2/")]


@pytest.mark.usefixtures("forking")
def test_forked_reader_ends_with_the_walk(tmp_path: Path) -> None:
    """Closing the walk early kills and reaps its child and closes every descriptor, at once."""
    root = forked_tree(tmp_path)
    before, descriptors = child_processes(), open_descriptors()
    partial = iter_text_files(str(root), extensions=None, fork_after=0)
    assert isinstance(partial, Generator)
    first = [next(partial) for _ in range(200)]
    assert first == list(iter_text_files(str(root), extensions=None, fork_after=None))[:200]
    assert child_processes() - before  # The reader runs.
    partial.close()
    assert child_processes() == before
    assert open_descriptors() == descriptors
    # Consumed to its end, the walk ends its child as well.
    assert len(list(iter_text_files(str(root), extensions=None, fork_after=0))) > 1000
    assert child_processes() == before
    assert open_descriptors() == descriptors


@pytest.mark.usefixtures("forking")
async def test_stream_closed_early_ends_its_forked_reader(tmp_path: Path) -> None:
    """`aclose` of the stream after its first file leaves no child and no descriptor behind."""
    root = forked_tree(tmp_path)
    before, descriptors = child_processes(), open_descriptors()
    stream = stream_text_files(str(root), "", extensions=None, fork_after=0)
    async with contextlib.aclosing(stream):
        async for loaded in stream:
            assert loaded.path == "big.txt"
            assert child_processes() - before
            break
    assert child_processes() == before
    assert open_descriptors() == descriptors


@pytest.mark.usefixtures("forking")
async def test_stream_cancelled_ends_its_forked_reader(tmp_path: Path) -> None:
    """A stream cancelled midway, by its task's scope, ends its walk and child before it raises.

    The cancellation reaches the stream where it waits for its next batch,
    inside the generator: its own cleanup ends the walk, with no `aclose`.
    """
    root = forked_tree(tmp_path)
    before, descriptors = child_processes(), open_descriptors()
    seen = 0
    with anyio.CancelScope() as scope:
        async for _ in stream_text_files(str(root), "", extensions=None, fork_after=0):
            seen += 1
            if seen == 300:
                assert child_processes() - before  # The reader runs.
                scope.cancel()
    assert scope.cancelled_caught
    assert 300 <= seen < 1000
    assert child_processes() == before
    assert open_descriptors() == descriptors


async def test_streamed_files_are_loaded_files(tmp_path: Path) -> None:
    """The stream yields `LoadedFile`s in all respects, though made without their `__init__`."""
    make_tree(tmp_path, {"a.txt": "a", "b/c.txt": "c"})
    streamed = [f async for f in stream_text_files(str(tmp_path), "r", extensions=None)]
    made = [LoadedFile("r/a.txt", "a"), LoadedFile("r/b/c.txt", "c")]
    assert streamed == made
    assert [type(f) for f in streamed] == [LoadedFile, LoadedFile]
    assert [hash(f) for f in streamed] == [hash(f) for f in made]
    assert [repr(f) for f in streamed] == [repr(f) for f in made]
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        streamed[0].path = "elsewhere"  # type: ignore[misc]


def test_loaded_files_of_another_shape_are_made_by_their_class() -> None:
    """A class with a validator (or any other shape) is called itself, so nothing is skipped."""

    @attrs.frozen
    class Checked:
        path: str = attrs.field(validator=attrs.validators.min_len(1))
        content: str

    make: Any = walk_module._maker_of(Checked)  # type: ignore[arg-type]
    assert make is Checked
    plain: Any = walk_module._maker_of(LoadedFile)
    assert plain is not LoadedFile
    assert plain("p", "c") == LoadedFile("p", "c")


@pytest.mark.usefixtures("forking")
def test_walk_goes_on_when_its_forked_reader_is_killed(tmp_path: Path) -> None:
    """A reader killed midway: the walk reads what it had asked of it, and the rest, itself."""
    root = forked_tree(tmp_path)
    alone = list(iter_text_files(str(root), extensions=None, fork_after=None))
    before, descriptors = child_processes(), open_descriptors()
    walk = iter_text_files(str(root), extensions=None, fork_after=0)
    first = [next(walk) for _ in range(100)]
    (reader,) = child_processes() - before
    os.kill(reader, 9)
    assert first + list(walk) == alone
    assert child_processes() == before
    assert open_descriptors() == descriptors


@pytest.mark.usefixtures("forking")
def test_forked_reader_warns_as_one_process_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A listed file gone, or no file after all, by the time the reader opens it: the same warnings.

    The listing is made to show names that are missing (ENOENT), or are a
    folder or FIFO (read by neither, and without a word), in long runs.
    """
    make_tree(tmp_path, {f"f{index:03}.txt": f"{index}" for index in range(0, 600, 2)})
    (tmp_path / "folder").mkdir()
    os.mkfifo(tmp_path / "fifo")
    scandir = os.scandir

    def listing_odd_names(path: Any = ".") -> Any:
        if not isinstance(path, int):
            return scandir(path)
        with scandir(path) as entries:
            names = [entry.name for entry in entries]
        names += [f"f{index:03}.txt" for index in range(1, 600, 2)]
        return contextlib.nullcontext([SwappedEntry(name) for name in names])

    monkeypatch.setattr(os, "scandir", listing_odd_names)
    outcomes = []
    for fork_after in (None, 0):
        with caplog.at_level(logging.WARNING, logger="executor"):
            listed = list(iter_text_files(str(tmp_path), extensions=None, fork_after=fork_after))
        outcomes.append((listed, [record.getMessage() for record in caplog.records]))
        caplog.clear()
    assert outcomes[0] == outcomes[1]
    listed, warnings = outcomes[0]
    assert listed == [(f"f{index:03}.txt", f"{index}") for index in range(0, 600, 2)]
    assert warnings == [
        f"stream_files skipped {tmp_path}/f{index:03}.txt: No such file or directory (ENOENT)"
        for index in range(1, 600, 2)
    ]


@pytest.mark.usefixtures("forking")
def test_forked_reader_in_a_tree_that_changes(tmp_path: Path) -> None:
    """Files and folders removed and added while a forked reader reads: no error, no file twice.

    What was there throughout is listed, with its content. The walk may have
    read ahead of what it yielded (waiting for the reader's first answers),
    so the removed folder may still be listed, in part or whole.
    """
    root = forked_tree(tmp_path)
    walk = iter_text_files(str(root), extensions=None, fork_after=0)
    listed = [next(walk)]
    shutil.rmtree(root / "t3")
    for index in range(40):
        (root / "t0" / "s3" / f"f{index:03}.py").unlink()
    make_tree(root, {"t4/new.py": "new", "t5/s2/new/n.txt": "n"})
    listed += walk
    paths = [path for path, _ in listed]
    assert len(set(paths)) == len(paths)
    for path, content in listed:
        if not path.startswith(("t0/s3/", "t3/", "t4/", "t5/")):
            assert (root / path).read_text(errors="replace") == content
    assert {"t2/s1/f299.py", "t5/s1/f000.py", "t5/zz.txt"} <= set(paths)


SINGLE_CPU_SCRIPT = textwrap.dedent(
    """
    import json, os, sys
    from executor._files.reader import spare_core
    from executor._files.walk import iter_text_files

    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    walk = iter_text_files(sys.argv[1], extensions=None, fork_after=0)
    next(walk)
    children = open(f"/proc/self/task/{os.getpid()}/children").read().split()
    print(json.dumps({"spare": spare_core(), "children": children, "rest": len(list(walk))}))
    """
)


LONG_NAMES_SCRIPT = textwrap.dedent(
    """
    import json, sys
    from executor._files import walk

    walk._spare_core = lambda: True
    forked = list(walk.iter_text_files(sys.argv[1], extensions=None, fork_after=0))
    alone = list(walk.iter_text_files(sys.argv[1], extensions=None, fork_after=None))
    print(json.dumps({"files": len(forked), "same": forked == alone}))
    """
)


def test_forked_reader_with_long_names_and_texts_never_waits_forever(tmp_path: Path) -> None:
    """Requests that fill the child's socket while its answers fill the pipe: no deadlock.

    Names near the longest make the window's requests more than a socket
    holds, and texts of a few KiB make its answers more than the pipe holds:
    a send that waited for room (`socket.send_fds` drops `MSG_DONTWAIT`
    before Python 3.12) would wait for a child itself waiting for the walk.
    Run in a process of its own, so that a regression fails here, not hangs.
    """
    text = "some text of a line\n" * 200
    make_tree(
        tmp_path,
        {f"d{d}/{index:04}_{'x' * 245}": text for d in range(6) for index in range(500)},
    )
    result = subprocess.run(
        [sys.executable, "-c", LONG_NAMES_SCRIPT, str(tmp_path)],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    assert json.loads(result.stdout) == {"files": 3000, "same": True}


def test_no_fork_without_a_spare_core(tmp_path: Path) -> None:
    """A process that may run on one CPU only walks alone: a child would only take turns."""
    root = forked_tree(tmp_path)
    total = len(list(iter_text_files(str(root), extensions=None, fork_after=None)))
    result = subprocess.run(
        [sys.executable, "-c", SINGLE_CPU_SCRIPT, str(root)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(result.stdout) == {"spare": False, "children": [], "rest": total - 1}


@pytest.mark.usefixtures("forking")
@pytest.mark.parametrize("window", [1, 64, None], ids=["window-1", "window-64", "window"])
def test_forked_reader_with_long_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, window: int | None
) -> None:
    """Long files, read by the walk itself behind the reader's answers: as in one process.

    A narrow window for the reader leaves the walk most files to read
    itself, and to hold behind the reader's next answer, past the bytes it
    may hold (then it waits for that answer).
    """
    if window is not None:
        monkeypatch.setattr(walk_module, "_CHILD_WINDOW", window)
        monkeypatch.setattr(walk_module, "_HELD_BYTES", 1 << 18)
    tree = {f"a/f{index:04}.txt": f"{index}\n" for index in range(300)}
    tree |= {f"b{index % 3}/f{index:03}.txt": f"{index:03}\n" * 75_000 for index in range(45)}
    make_tree(tmp_path, {**tree, "b1/late.bin": b"x" * (_FIRST_READ + 1) + b"\0"})
    alone = list(iter_text_files(str(tmp_path), extensions=None, fork_after=None))
    assert alone == sorted(tree.items())
    assert list(iter_text_files(str(tmp_path), extensions=None, fork_after=0)) == alone
