"""A full disk: what a spill and a file write say when there is no room, on each backend.

Each test mounts a tmpfs of 1 MiB of its own (as root; skipped otherwise, or
where the mount is refused), fills it, and unmounts it at the end. A spill
that cannot be written is given up (the cut's marker says why, the command's
output and exit code are kept, no partial file stays); a file write fails
with the OS's words and leaves the old file as it was.
"""

from __future__ import annotations

import contextlib
import errno
import os
import pwd
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from ssh_server import SshServer

from executor import Command, LocalExecutor, NonZeroExit, Stdout, for_model
from executor._core.output import OutputBuffer

pytestmark = pytest.mark.anyio

NO_SPACE = os.strerror(errno.ENOSPC)
OLD = b"the old content\n"


@pytest.fixture
def anyio_backend() -> str:
    """One backend is enough: the disk's answer does not depend on it."""
    return "asyncio"


@contextlib.contextmanager
def small_tmpfs(folder: Path, owner: str | None = None) -> Iterator[Path]:
    """A tmpfs of 1 MiB mounted on `folder` (made), owned by `owner`; unmounted after."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    folder.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m,mode=0755", "tmpfs", str(folder)],
        capture_output=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {mounted.stderr.decode().strip()}")
    try:
        if owner is not None:
            info = pwd.getpwnam(owner)
            os.chown(folder, info.pw_uid, info.pw_gid)
        yield folder
    finally:
        if subprocess.run(["umount", str(folder)], check=False).returncode != 0:
            subprocess.run(["umount", "-l", str(folder)], check=False)
        with contextlib.suppress(OSError):
            folder.rmdir()


def fill(folder: Path) -> None:
    """Write `folder`'s file system full (a file `filler` takes what is left)."""
    fd = os.open(folder / "filler", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        while True:
            try:
                os.write(fd, b"\0" * 4096)
            except OSError as error:
                if error.errno != errno.ENOSPC:
                    raise
                return
    finally:
        os.close(fd)


def remove_quietly(path: Path) -> None:
    """Remove `path` if it is there."""
    with contextlib.suppress(OSError):
        path.unlink()


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    """A small tmpfs for the Local and Docker tests."""
    with small_tmpfs(tmp_path / "disk") as folder:
        yield folder


# --- the spill ----------------------------------------------------------------------


def test_a_spill_that_cannot_be_written_is_given_up_in_the_buffer(disk: Path) -> None:
    """OutputBuffer: no exception; the head and tail kept; the marker says why; no file stays."""
    spill = disk / "spill"
    spill.mkdir()
    fill(disk)
    buffer = OutputBuffer(100, spill_dir=str(spill))
    for _ in range(1000):
        buffer.append(Stdout(b"x" * 99 + b"\n"))
    output = buffer.output(exit_code=0, duration=0.0)
    assert output.elided is not None
    assert output.elided.spill is None
    assert output.elided.spill_error == NO_SPACE
    assert len(output.stdout) == 100
    assert output.elided.bytes == 100_000 - 100
    assert f"the whole output could not be kept: {NO_SPACE}" in output.text()
    assert list(spill.iterdir()) == []


def test_a_spill_that_fails_part_way_removes_its_partial_file(disk: Path) -> None:
    """Room for the start of the spill, not for the rest: the partial file is removed."""
    spill = disk / "spill"
    spill.mkdir()
    fill(disk)
    (disk / "filler").unlink()
    # Leave about 64 KiB free: the spill starts, then meets the full disk.
    with open(disk / "filler", "wb") as filler:
        filler.write(b"\0" * ((1 << 20) - (64 << 10)))
    buffer = OutputBuffer(1000, spill_dir=str(spill))
    for _ in range(400):
        buffer.append(Stdout(b"y" * 1023 + b"\n"))
    output = buffer.output(exit_code=0, duration=0.0)
    assert output.elided is not None
    assert output.elided.spill is None
    assert output.elided.spill_error == NO_SPACE
    assert len(output.stdout) == 1000
    assert list(spill.iterdir()) == []


async def test_local_spill_on_a_full_disk_keeps_the_output_and_exit_code(disk: Path) -> None:
    """exec_cmd with `spill=` on a full disk: the cut marker says so, the exit code is kept."""
    spill = disk / "spill"
    spill.mkdir()
    (disk / "work").mkdir()
    fill(disk)
    script = "head -c 300000 /dev/zero | tr '\\0' 'z'; echo; echo last line; exit 3"
    async with LocalExecutor(disk / "work", output_limit=4096, spill=spill) as ex:
        with pytest.raises(NonZeroExit) as raised:
            await ex.exec_cmd(Command.shell(script))
    output = raised.value.output
    assert output.exit_code == 3
    assert output.elided is not None
    assert output.elided.spill is None
    assert output.elided.spill_error == NO_SPACE
    assert output.stdout.startswith(b"z" * 2048)
    assert output.stdout.endswith(b"last line\n")
    text = for_model(output)
    assert f"the whole output could not be kept: {NO_SPACE}" in text
    assert text.endswith("[exit code 3]")
    assert list(spill.iterdir()) == []


# --- write_file ---------------------------------------------------------------------


async def test_local_write_file_on_a_full_disk_keeps_the_old_file(disk: Path) -> None:
    """write_file bigger than the room left: "No space left on device", the old file intact."""
    (disk / "data.bin").write_bytes(OLD)
    fill(disk)
    async with LocalExecutor(disk) as ex:
        with pytest.raises(NonZeroExit) as raised:
            await ex.exec_cmd(Command.write_file("data.bin", b"n" * (256 << 10)))
    assert str(raised.value) == f"data.bin: {NO_SPACE}"
    assert raised.value.output.stderr == f"data.bin: {NO_SPACE}\n".encode()
    assert (disk / "data.bin").read_bytes() == OLD
    assert sorted(path.name for path in disk.iterdir()) == ["data.bin", "filler"]


@pytest.fixture
def docker_engine() -> None:
    """Skip without a Docker engine (fail under `EXECUTOR_REQUIRE_DOCKER=1`)."""
    from docker_engine import require_engine

    require_engine()


@pytest.mark.usefixtures("docker_engine")
async def test_docker_write_file_on_a_full_disk_keeps_the_old_file(disk: Path) -> None:
    """The same in a container whose workdir is the full tmpfs, bound from the host."""
    from docker_engine import BUSYBOX_IMAGE

    from executor._docker.executor import DockerExecutor

    (disk / "data.bin").write_bytes(OLD)
    fill(disk)
    try:
        async with DockerExecutor(BUSYBOX_IMAGE, mount=disk, kill_grace=0.2) as ex:
            with pytest.raises(NonZeroExit) as raised:
                await ex.exec_cmd(Command.write_file("data.bin", b"n" * (256 << 10)))
            # The engine's own words, after its tar error: "... no space left on device".
            assert str(raised.value).startswith("data.bin: ")
            assert NO_SPACE.lower() in str(raised.value).lower()
            assert (await ex.exec_cmd(Command.read_file("data.bin"))).stdout == OLD
    finally:
        remove_quietly(disk / "filler")
    assert (disk / "data.bin").read_bytes() == OLD
    assert sorted(path.name for path in disk.iterdir()) == ["data.bin"]


async def test_ssh_write_file_on_a_full_disk_keeps_the_old_file(ssh_server: SshServer) -> None:
    """Over SFTP, whose status for a full disk is a bare `Failure`: the disk's own words."""
    folder = ssh_server.root / "work" / f"disk-{uuid.uuid4().hex[:8]}"
    with small_tmpfs(folder, owner=ssh_server.user) as disk:
        (disk / "data.bin").write_bytes(OLD)
        fill(disk)
        async with ssh_server.executor(workdir=str(disk), kill_grace=0.2) as ex:
            with pytest.raises(NonZeroExit) as raised:
                await ex.exec_cmd(Command.write_file("data.bin", b"n" * (256 << 10)))
            assert str(raised.value) == f"data.bin: {NO_SPACE}"
            assert raised.value.output.stderr == f"data.bin: {NO_SPACE}\n".encode()
            # Room again: the same write goes through (the failure was the disk's).
            (disk / "filler").unlink()
            await ex.exec_cmd(Command.write_file("data.bin", b"n" * (256 << 10)))
            assert (disk / "data.bin").read_bytes() == b"n" * (256 << 10)
            (disk / "data.bin").write_bytes(OLD)
            fill(disk)
            with pytest.raises(NonZeroExit, match=NO_SPACE):
                await ex.exec_cmd(Command.write_file("data.bin", b"m" * (256 << 10)))
        assert (disk / "data.bin").read_bytes() == OLD
        assert sorted(path.name for path in disk.iterdir()) == ["data.bin", "filler"]


def test_a_journal_keeps_why_a_spill_failed() -> None:
    """The cut's spill error is stored with it, and an old record without one still reads."""
    from executor._core.output import Elision
    from executor._journal.codec import decode_elision, encode_elision

    failed = Elision(at=1, bytes=10, lines=2, spill_error=NO_SPACE)
    assert decode_elision(encode_elision(failed)) == failed
    assert decode_elision('{"at": 1, "bytes": 10, "lines": 2, "spill": null}') == Elision(
        at=1, bytes=10, lines=2
    )
