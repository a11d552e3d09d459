"""DockerExecutor's `write_file` on a full disk: a clear error, and the old file whole.

The container's workdir is a small tmpfs of the host's (mounted here, bound
into the container with `mount=`): the archive endpoints that carry
`write_file` unpack on the engine's side, which sees a host folder bound
into the container but not a tmpfs mounted inside it. Needs root (to mount)
and an engine on this host; without them the tests skip, and fail under
EXECUTOR_REQUIRE_DOCKER=1.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from docker_engine import BUSYBOX_IMAGE, REQUIRED, require_engine

from executor import Command, DockerExecutor, NonZeroExit

pytestmark = pytest.mark.anyio

_SIZE = 1 << 20


@pytest.fixture
def small_disk() -> Iterator[Path]:
    """A 1 MiB tmpfs, mounted for the test and unmounted after it."""
    require_engine()
    problem = None
    if os.geteuid() != 0:
        problem = "mounting a tmpfs needs root"
    elif not (os.environ.get("DOCKER_HOST") or "unix://").startswith("unix://"):
        problem = "the engine is not on this host: it cannot bind a folder of it"
    if problem is not None:
        if REQUIRED:
            pytest.fail(f"EXECUTOR_REQUIRE_DOCKER=1 but {problem}")
        pytest.skip(problem)
    folder = Path(tempfile.mkdtemp(prefix="executor-full-"))
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={_SIZE},mode=0777", "tmpfs", str(folder)],
        check=True,
    )
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=False)
        folder.rmdir()


async def test_write_file_on_a_full_disk(small_disk: Path) -> None:
    async with DockerExecutor(BUSYBOX_IMAGE, mount=str(small_disk), helper=False) as ex:
        old = b"the old content\n" * 1000
        await ex.exec_cmd(Command.write_file("data.txt", old))
        # Fill the disk to its last block.
        with pytest.raises(NonZeroExit) as filling:
            await ex.exec_cmd(Command.shell("cat /dev/zero > filler"))
        assert "No space left on device" in filling.value.output.text()
        with pytest.raises(NonZeroExit) as caught:
            await ex.exec_cmd(Command.write_file("data.txt", b"new\n" * 50_000))
        message = str(caught.value)
        assert "data.txt" in message, message
        assert "No space left on device" in message, message
        # The old file is whole, and nothing of the new one is left beside it.
        assert (await ex.exec_cmd(Command.read_file("data.txt"))).stdout == old
        assert (small_disk / "data.txt").read_bytes() == old
        assert sorted(os.listdir(small_disk)) == ["data.txt", "filler"]
        # Once there is room, the write goes through.
        await ex.exec_cmd(Command.shell("rm filler"))
        await ex.exec_cmd(Command.write_file("data.txt", b"new\n" * 50_000))
        assert (small_disk / "data.txt").read_bytes() == b"new\n" * 50_000
