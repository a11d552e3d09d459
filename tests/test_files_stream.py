"""`LocalExecutor.stream_files` stopped early leaves nothing: no warning, no open descriptor."""

from __future__ import annotations

import contextlib
import gc
import os
import time
import warnings
from collections.abc import AsyncGenerator, AsyncIterator, Iterator
from pathlib import Path

import anyio
import anyio.lowlevel
import pytest

from executor import LocalExecutor
from executor._core.base import LoadedFile

pytestmark = pytest.mark.anyio


def open_descriptors() -> set[str]:
    """The file descriptors this process has open."""
    return set(os.listdir("/proc/self/fd"))


def settled(before: set[str], timeout: float = 10.0) -> bool:
    """Whether, within `timeout`, only the descriptors `before` are open."""
    deadline = time.monotonic() + timeout
    while open_descriptors() != before:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


@pytest.fixture(scope="module")
def wide_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A git tree of folders with files before and after their subfolders, and a wide one.

    Ignored, hidden and binary files are skipped on the way; `many` holds more
    files than one batch of the walk.
    """
    root = tmp_path_factory.mktemp("wide")
    (root / ".git").mkdir()
    (root / ".gitignore").write_text("*.log\n")
    for top in range(4):
        for sub in range(3):
            folder = root / f"m{top}" / f"m{sub}"
            folder.mkdir(parents=True)
            for index in range(5):
                (folder / f"a{index}.txt").write_text(f"{top} {sub} a{index}\n")
                (folder / f"z{index}.txt").write_text(f"{top} {sub} z{index}\n")
            (folder / "skipped.log").write_text("ignored\n")
            (folder / ".hidden").write_text("hidden\n")
            (folder / "blob.bin").write_bytes(b"\0binary")
        for index in range(3):
            (root / f"m{top}" / f"a{index}.md").write_text(f"{top} a{index}\n")
            (root / f"m{top}" / f"z{index}.md").write_text(f"{top} z{index}\n")
    many = root / "many"
    many.mkdir()
    for index in range(5000):
        (many / f"f{index:04}.txt").write_text(f"{index}\n")
    (root / "top.txt").write_text("top\n")
    return root


def generator(files: AsyncIterator[LoadedFile]) -> AsyncGenerator[LoadedFile, None]:
    """`files` as the async generator every executor's `stream_files` gives."""
    assert isinstance(files, AsyncGenerator)
    return files


@contextlib.contextmanager
def no_resource_warning() -> Iterator[None]:
    """Fail if a ResourceWarning (an unclosed async generator's, say) is issued in the block."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
        gc.collect()
    assert not [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)]


@pytest.mark.parametrize("confine", [False, True], ids=["unconfined", "confined"])
async def test_local_stream_files_stopped_early_leaves_nothing(
    wide_tree: Path, confine: bool
) -> None:
    """LocalExecutor.stream_files stopped early: no warning (trio's), thread or descriptor left."""
    before = open_descriptors()
    with no_resource_warning():
        async with LocalExecutor(workdir=wide_tree, confine=confine) as executor:
            # Confined, the workdir is opened at the first use, and kept.
            assert len([loaded async for loaded in executor.stream_files("m0")]) == 36
            listed = open_descriptors()
            async with contextlib.aclosing(generator(executor.stream_files("m1"))) as files:
                async for loaded in files:
                    assert loaded.path == "m1/a0.md"
                    break
            assert open_descriptors() == listed
            # Cancelled mid-walk, by the consumer's own scope.
            with anyio.CancelScope() as scope:
                async with contextlib.aclosing(generator(executor.stream_files("."))) as files:
                    async for _ in files:
                        scope.cancel()
                        await anyio.lowlevel.checkpoint()
            assert open_descriptors() == listed
    assert settled(before)
