"""DockerExecutor's images built from a Dockerfile, its container's state and logs, login shells.

The builds run on the real engine (see `docker_engine`), from the locally
imported test images, never a registry; `.dockerignore` is checked against
what the docker CLI's own build of the same context puts in the image.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from docker_engine import BUSYBOX_IMAGE, PYTHON_IMAGE, docker, our_containers, require_engine
from ssh_server import SshServer

from executor import (
    BuildError,
    Chunk,
    Command,
    DockerBuild,
    DockerExecutor,
    DockerIgnore,
    ExecutorError,
    LocalExecutor,
    NonZeroExit,
    Stderr,
    Stdout,
    build_image,
)
from executor._docker.build import LABEL_BUILD_DIGEST

pytestmark = pytest.mark.anyio

# Dockerfile of a context whose files the image lists, one a line, in /listing.
LISTING = f"FROM {BUSYBOX_IMAGE}\nCOPY . /ctx\nRUN cd /ctx && find . | sort > /listing\n"


@pytest.fixture(autouse=True)
def _engine_and_nothing_left() -> Iterator[None]:
    """Skip without an engine; remove the images a test built; fail on a container left."""
    require_engine()
    before_images = set(_built_images())
    before = set(our_containers())
    yield
    for image in set(_built_images()) - before_images:
        docker("rmi", "-f", image, check=False)
    left = set(our_containers()) - before
    for container in left:
        docker("rm", "-f", container, check=False)
    assert not left, f"containers left behind: {sorted(left)}"


def _built_images() -> list[str]:
    return docker("images", "-q", "--no-trunc", "--filter", f"label={LABEL_BUILD_DIGEST}").split()


def _write(root: Path, files: dict[str, str]) -> Path:
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
    return root


async def _listing(image: str) -> list[str]:
    async with DockerExecutor(image) as ex:
        out = await ex.exec_cmd(Command.shell("cat /listing"))
    return out.text().split()


def _cli_listing(context: Path) -> list[str]:
    """What `docker build` (the CLI, classic builder) puts in the image, as `/listing`."""
    tag = f"executor-test-cli-build:{uuid.uuid4().hex[:12]}"
    env = {**os.environ, "DOCKER_BUILDKIT": "0"}
    subprocess.run(
        ["docker", "build", "-q", "--network", "none", "-t", tag, str(context)],
        check=True,
        capture_output=True,
        env=env,
        timeout=120,
    )
    try:
        return docker("run", "--rm", "--network", "none", tag, "cat", "/listing").split()
    finally:
        docker("rmi", "-f", tag, check=False)


# A context that exercises every rule of .dockerignore.
CONTEXT = {
    "Dockerfile": LISTING,
    ".dockerignore": (
        "# comments and blank lines are skipped\n"
        "\n"
        "**/*.log\n"
        "!keep/important.log\n"
        "build\n"
        "!build/artifacts/keep.bin\n"
        "/secret.txt\n"
        "docs/**/draft-?.md\n"
        "[ab].cfg\n"
        "  spaced.txt  \n"
        "*.tmp\n"
        "nested/**\n"
        "!nested/kept/**\n"
        "./dotted/../dot.txt\n"
        "Dockerfile\n"
        ".git\n"
    ),
    "app.py": "print('app')\n",
    "debug.log": "x\n",
    "deep/a/b/trace.log": "x\n",
    "keep/important.log": "kept\n",
    "keep/other.log": "x\n",
    "build/out.o": "x\n",
    "build/artifacts/keep.bin": "kept\n",
    "build/artifacts/drop.bin": "x\n",
    "secret.txt": "x\n",
    "sub/secret.txt": "kept: only the root one is listed\n",
    "docs/guide.md": "kept\n",
    "docs/x/y/draft-1.md": "x\n",
    "docs/x/draft-12.md": "kept: ? is one character\n",
    "a.cfg": "x\n",
    "c.cfg": "kept\n",
    "spaced.txt": "x\n",
    "top.tmp": "x\n",
    "sub/inner.tmp": "kept: * stays within one folder\n",
    "nested/gone/file": "x\n",
    "nested/kept/file": "kept\n",
    "dot.txt": "x\n",
    ".git/HEAD": "ref: refs/heads/main\n",
}


async def test_dockerignore_matches_the_docker_cli(tmp_path: Path) -> None:
    """The files in the image are those the docker CLI's own build of the context puts there."""
    context = _write(tmp_path / "ctx", CONTEXT)
    built = await build_image(DockerBuild(str(context), cache=False))
    ours = await _listing(built.id)
    theirs = _cli_listing(context)
    assert ours == theirs
    # And the rules did what they say, not just the same as the CLI.
    assert "./keep/important.log" in ours
    assert "./keep/other.log" not in ours
    assert "./build/artifacts/keep.bin" in ours
    assert "./build/out.o" not in ours
    assert "./sub/secret.txt" in ours
    assert "./secret.txt" not in ours
    assert "./docs/x/draft-12.md" in ours
    assert "./docs/x/y/draft-1.md" not in ours
    assert "./c.cfg" in ours
    assert "./a.cfg" not in ours
    assert "./sub/inner.tmp" in ours
    assert "./top.tmp" not in ours
    assert "./nested/kept/file" in ours
    assert "./nested/gone/file" not in ours
    assert "./.git" not in ours
    assert "./dot.txt" not in ours
    assert "./spaced.txt" not in ours


async def test_keep_git_sends_git_though_ignored(tmp_path: Path) -> None:
    context = _write(tmp_path / "ctx", CONTEXT)
    built = await build_image(DockerBuild(str(context), keep_git=True, cache=False))
    assert "./.git/HEAD" in await _listing(built.id)


def test_dockerignore_rules_without_an_engine() -> None:
    """The matcher on its own: last match wins, parents count, `**` spans folders."""
    ignore = DockerIgnore.parse("*.md\n!README.md\nvendor/\n**/cache\n/abs\n")
    assert ignore.patterns == ("*.md", "!README.md", "vendor", "**/cache", "abs")
    assert ignore.excludes("notes.md")
    assert not ignore.excludes("README.md")
    assert not ignore.excludes("docs/notes.md")  # `*` does not cross a folder
    assert ignore.excludes("vendor/lib/x.go")  # a parent folder matches
    assert ignore.excludes("cache")
    assert ignore.excludes("a/b/cache/item")
    assert ignore.excludes("abs")
    assert not ignore.excludes("sub/abs")
    with pytest.raises(ExecutorError, match="exclusion"):
        DockerIgnore.parse("!\n").excludes("x")


async def test_multi_stage_build_with_argument_and_target(tmp_path: Path) -> None:
    """`target` stops at its stage (a later failing stage is not built); `build_args` reach ARG."""
    dockerfile = (
        f"FROM {BUSYBOX_IMAGE} AS base\n"
        "ARG GREETING=hello\n"
        'RUN echo "$GREETING" > /greeting\n'
        "FROM base AS app\n"
        "RUN cat /greeting > /app-greeting\n"
        "FROM app AS broken\n"
        "RUN exit 7\n"
    )
    context = _write(tmp_path / "ctx", {"Dockerfile": dockerfile})
    log: list[Chunk] = []
    build = DockerBuild(str(context), build_args={"GREETING": "hi there"}, target="app")
    async with DockerExecutor(build=build, build_log=log.append) as ex:
        out = await ex.exec_cmd(Command.shell("cat /app-greeting"))
        assert out.text() == "hi there\n"
        assert ex.built_image is not None
        assert not ex.built_image.cached
    text = b"".join(chunk.data for chunk in log).decode()
    assert "RUN cat /greeting" in text
    assert "exit 7" not in text
    with pytest.raises(BuildError):
        await build_image(DockerBuild(str(context), target="broken"))


async def test_failing_step_raises_with_the_step_and_its_output(tmp_path: Path) -> None:
    dockerfile = (
        f"FROM {BUSYBOX_IMAGE}\nRUN echo fine\nRUN echo boom-output; echo to-stderr >&2; exit 3\n"
    )
    context = _write(tmp_path / "ctx", {"Dockerfile": dockerfile})
    log: list[Chunk] = []
    with pytest.raises(BuildError) as caught:
        await build_image(DockerBuild(str(context)), sink=log.append)
    error = caught.value
    assert error.step is not None
    assert "RUN echo boom-output" in error.step
    assert "boom-output" in error.step_output
    assert "to-stderr" in error.step_output
    assert "fine" not in error.step_output
    assert "non-zero code: 3" in str(error)
    assert "boom-output" in str(error)
    assert any(isinstance(chunk, Stderr) for chunk in log)
    # Broken Dockerfiles and contexts are errors that say what is wrong.
    _write(context, {"Dockerfile": "NOT_AN_INSTRUCTION x\n"})
    with pytest.raises(BuildError, match=r"(?i)unknown instruction"):
        await build_image(DockerBuild(str(context)))
    with pytest.raises(ExecutorError, match="not a folder"):
        await build_image(DockerBuild(str(tmp_path / "missing")))
    with pytest.raises(ExecutorError, match="Dockerfile"):
        await build_image(DockerBuild(str(context), dockerfile="Nope"))


async def test_second_executor_with_the_same_context_does_not_rebuild(tmp_path: Path) -> None:
    context = _write(tmp_path / "ctx", {"Dockerfile": LISTING, "a.txt": "one\n"})
    async with DockerExecutor(build=DockerBuild(str(context))) as first:
        assert first.built_image is not None
        assert not first.built_image.cached
    log: list[Chunk] = []
    async with DockerExecutor(build=DockerBuild(str(context)), build_log=log.append) as second:
        assert second.built_image is not None
        assert second.built_image.cached
        assert second.built_image.id == first.built_image.id
        assert (await second.exec_cmd(Command.shell("cat /ctx/a.txt"))).text() == "one\n"
    assert log == []  # no build ran
    (context / "a.txt").write_text("two\n")
    changed = await build_image(DockerBuild(str(context)))
    assert not changed.cached
    assert changed.digest != first.built_image.digest


async def test_dockerfile_text_and_a_tag(tmp_path: Path) -> None:
    """A Dockerfile given as text builds, and is not among the files COPY sees."""
    context = _write(tmp_path / "ctx", {"a.txt": "a\n"})
    tag = f"executor-test-tagged:{uuid.uuid4().hex[:8]}"
    built = await build_image(DockerBuild(str(context), dockerfile_text=LISTING, tag=tag))
    assert built.tag == tag
    try:
        assert await _listing(tag) == [".", "./a.txt"]
    finally:
        docker("rmi", "-f", tag, check=False)


async def test_copy_in_honours_dockerignore(tmp_path: Path) -> None:
    folder = _write(
        tmp_path / "src",
        {".dockerignore": "*.secret\nbuild/\n", "a.py": "x\n", "k.secret": "x\n", "build/o": "x"},
    )
    async with DockerExecutor(BUSYBOX_IMAGE, copy_in=str(folder)) as ex:
        out = await ex.exec_cmd(Command.shell("find . -type f | sort"))
    assert out.text().split() == ["./.dockerignore", "./a.py"]


async def test_state_after_an_oom_kill_and_after_exit() -> None:
    async with DockerExecutor(PYTHON_IMAGE, memory="32m") as ex:
        assert (await ex.state()).oom_killed is False
        with pytest.raises(NonZeroExit, match="SIGKILL"):
            await ex.exec_cmd(Command.shell("python3 -c 'b = bytearray(256 << 20)'"))
        state = await ex.state()
        assert state.running
        assert state.exit_code is None
        assert state.oom_killed
        assert state.oom_kills
    name = f"executor-test-exited-{uuid.uuid4().hex[:8]}"
    docker("run", "-d", "--network", "none", "--name", name, BUSYBOX_IMAGE, "sh", "-c", "exit 3")
    try:
        docker("wait", name)
        ex = DockerExecutor(container=name)
        state = await ex.state()
        assert (state.status, state.running, state.exit_code) == ("exited", False, 3)
        await ex.aclose()
    finally:
        docker("rm", "-f", name, check=False)


async def test_logs_all_and_followed() -> None:
    """`logs()` keeps stdout and stderr apart; `follow=True` yields lines as they are printed."""
    name = f"executor-test-logs-{uuid.uuid4().hex[:8]}"
    script = "echo first; echo oops >&2; for i in 1 2 3; do sleep 0.3; echo line$i; done"
    docker("run", "-d", "--network", "none", "--name", name, BUSYBOX_IMAGE, "sh", "-c", script)
    ex = DockerExecutor(container=name)
    try:
        seen: list[tuple[str, bool]] = []
        async for chunk in ex.logs(follow=True):
            running = (await ex.state()).running
            seen += [(line, running) for line in chunk.data.decode().split()]
        lines = [line for line, _ in seen]
        # stdout and stderr are two pipes: their first lines may come either way round.
        assert sorted(lines[:2]) == ["first", "oops"]
        assert lines[2:] == ["line1", "line2", "line3"]
        assert seen[0][1], "the first line arrived only after the container ended"
        everything = [chunk async for chunk in ex.logs()]
        stdout = b"".join(c.data for c in everything if isinstance(c, Stdout))
        assert stdout.split() == [b"first", b"line1", b"line2", b"line3"]
        assert b"".join(c.data for c in everything if isinstance(c, Stderr)) == b"oops\n"
        tail = [chunk async for chunk in ex.logs(tail=1)]
        assert b"".join(c.data for c in tail) == b"line3\n"
    finally:
        await ex.aclose()
        docker("rm", "-f", name, check=False)


async def test_workdir_none_takes_the_images_workdir(tmp_path: Path) -> None:
    context = _write(tmp_path / "ctx", {"Dockerfile": f"FROM {BUSYBOX_IMAGE}\nWORKDIR /srv/app\n"})
    built = await build_image(DockerBuild(str(context)))
    async with DockerExecutor(built.id, workdir=None) as ex:
        assert ex.effective_workdir == "/srv/app"
        assert (await ex.exec_cmd(Command.shell("pwd"))).text() == "/srv/app\n"
        await ex.exec_cmd(Command.write_file("note.txt", "x"))
        assert (await ex.exec_cmd(Command.shell("ls /srv/app"))).text() == "note.txt\n"
    # An image whose WORKDIR does not exist in its files: made at the start.
    made = docker("create", "--network", "none", BUSYBOX_IMAGE, "true").strip()
    tag = f"executor-test-workdir:{uuid.uuid4().hex[:8]}"
    try:
        docker("commit", "-c", "WORKDIR /not/there/yet", made, tag)
        async with DockerExecutor(tag, workdir=None) as ex:
            assert (await ex.exec_cmd(Command.shell("pwd"))).text() == "/not/there/yet\n"
        async with DockerExecutor(tag) as ex:  # the default is as before
            assert (await ex.exec_cmd(Command.shell("pwd"))).text() == "/workspace\n"
    finally:
        docker("rm", "-f", made, check=False)
        docker("rmi", "-f", tag, check=False)


def _bash_context(root: Path) -> Path:
    """A context for an image with this machine's bash and an /etc/profile that exports."""
    bash = shutil.which("bash")
    assert bash is not None
    files = root / "rootfs"
    libs = subprocess.run(["ldd", bash], capture_output=True, text=True, check=True).stdout
    for path in [bash, *[word for word in libs.split() if word.startswith("/")]]:
        target = files / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(os.path.realpath(path), target)
    (files / "etc").mkdir(exist_ok=True)
    (files / "etc/profile").write_text("export FROM_PROFILE=profile-ran\n")
    (root / "Dockerfile").write_text(f"FROM {BUSYBOX_IMAGE}\nCOPY rootfs/ /\n")
    return root


async def test_login_shell_sees_etc_profile_in_a_container(tmp_path: Path) -> None:
    build = DockerBuild(str(_bash_context(tmp_path / "ctx")))
    script = "echo ${FROM_PROFILE:-none}"
    async with DockerExecutor(build=build) as ex:
        assert (await ex.exec_cmd(Command.shell(script))).text() == "none\n"
        out = await ex.exec_cmd(Command.shell(script, login=True))
        assert out.text() == "profile-ran\n"
    async with DockerExecutor(build=build, login=True) as ex:
        assert (await ex.exec_cmd(Command.shell(script))).text() == "profile-ran\n"
        assert (await ex.exec_cmd(Command.shell(script, login=False))).text() == "none\n"
    async with DockerExecutor(BUSYBOX_IMAGE) as ex:
        with pytest.raises(ExecutorError, match="no bash"):
            await ex.exec_cmd(Command.shell(script, login=True))


async def test_login_shell_locally(tmp_path: Path) -> None:
    async with LocalExecutor(tmp_path, login=True) as ex:
        out = await ex.exec_cmd(Command.shell("shopt -q login_shell && echo login"))
        assert out.text() == "login\n"
    async with LocalExecutor(tmp_path) as ex:
        out = await ex.exec_cmd(Command.shell("echo $0"))
        assert out.text() == "/bin/sh\n"
    with pytest.raises(ValueError, match="own interpreter"):
        Command.shell("#!/usr/bin/env python3\nprint(1)", login=True)


def test_command_line_build(tmp_path: Path) -> None:
    context = _write(tmp_path / "ctx", {"Dockerfile": LISTING, "a.txt": "a\n"})
    run = subprocess.run(
        [sys.executable, "-m", "executor", "docker", "build", str(context), "--no-cache"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    assert "COPY . /ctx" in run.stdout
    assert "executor-build:" in run.stdout.splitlines()[-1]
    (context / "Dockerfile").write_text(f"FROM {BUSYBOX_IMAGE}\nRUN echo nope; exit 4\n")
    run = subprocess.run(
        [sys.executable, "-m", "executor", "docker", "build", str(context), "-q"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 1
    assert "RUN echo nope" in run.stderr
    assert "nope" in run.stderr


async def test_build_needs_exactly_one_source() -> None:
    with pytest.raises(ValueError, match="either image"):
        DockerExecutor(BUSYBOX_IMAGE, build=DockerBuild("."))
    with pytest.raises(ValueError, match="not both"):
        DockerBuild(".", dockerfile="Dockerfile", dockerfile_text="FROM x")
    unstarted = DockerExecutor(BUSYBOX_IMAGE)
    with pytest.raises(ExecutorError, match="not made yet"):
        await unstarted.state()
    await unstarted.aclose()


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_login_shell_over_ssh(ssh_server: SshServer) -> None:
    """`login=True` over SSH runs scripts in the host's `bash --login`."""
    async with ssh_server.executor(login=True) as ex:
        out = await ex.exec_cmd(Command.shell("shopt -q login_shell && echo login"))
        assert out.text() == "login\n"
        out = await ex.exec_cmd(Command.shell("echo $0", login=False))
        assert "bash" not in out.text()
