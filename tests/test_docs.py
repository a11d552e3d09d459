"""Every ```python block of README.md and of the manual (docs/**/*.md) runs, as a reader would.

How a block is written:

- A complete program, which calls `anyio.run(main)` itself (Quick start), or
  a fragment written as at the prompt of `python -m asyncio` or in a
  notebook: `await`, `async with` and `async for` at the top level. The
  test compiles a block with `ast.PyCF_ALLOW_TOP_LEVEL_AWAIT` and runs one
  that awaits at the top level in `anyio.run` (asyncio, the default, which
  SshExecutor needs). Either way a block imports and defines every name it
  uses, so it runs copied alone.
- A value the reader must supply (a folder, a host, an image) is a
  placeholder from `PLACEHOLDERS`, documented in the block: the line that
  holds it carries a comment, or a comment names it. The test puts a real
  one in its place: `/srv/checkout` becomes a small git checkout in a
  temporary folder (with a Makefile whose `test` target passes, and an
  upstream to push to), or a folder on the private sshd in an SSH block;
  the SSH host, port, login, key and `known_hosts` become those of
  `ssh_server.start_server()` on 127.0.0.1; the Docker image becomes
  `executor-test/python` (`EXECUTOR_DOCKER_IMAGE`), on the engine
  `DOCKER_HOST` names.
- A block that makes a `DockerExecutor`, an `SshExecutor` or a `Sandbox`
  skips without that service, and fails instead with
  `EXECUTOR_REQUIRE_DOCKER=1`, `EXECUTOR_REQUIRE_SSH=1` or
  `EXECUTOR_REQUIRE_SANDBOX=1`, as tests/test_docker.py, test_ssh.py and
  test_sandbox.py do.
- A ```python block that is not a program (a signature, say) is marked by
  the line `<!-- not run: the reason -->` right above it, and skipped with
  that reason. Use it sparingly: shell commands are ```sh blocks, not python.
- A block may be indented (inside a list item or an admonition of the
  manual): its fence's indentation is taken off every line. Its fence is
  exactly ```python: a fence such as ```py or ```python title="x" would
  not run, so it fails the test that reads the pages.

Each block runs as `__main__` in a subprocess of its own, in a fresh empty
folder (with `TMPDIR` inside the test's temporary folder), with a timeout.
Its tracebacks name its page and the page's own line numbers. It must exit 0
with nothing on stderr and leave no process, nor container, running. A
test's id is the page, the heading the block is under and its line:
`README.md:Quick start:31`, `docs/local.md:Streaming:40`.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import attrs
import pytest
from conftest import require_sandbox, tagged_processes
from docker_engine import PYTHON_IMAGE, containers_of, docker, require_engine
from ssh_server import SshServer

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
TIMEOUT = 90


def pages() -> list[Path]:
    """README.md, then every page of the manual, in order of their paths."""
    return [README, *sorted(DOCS.rglob("*.md"))]


NOT_RUN = re.compile(r"<!-- not run: (?P<reason>.+?) -->")
FENCE = re.compile(r"(?P<indent> *)(?P<fence>```+|~~~+)(?P<info>.*)")

# Runs one block as the module `__main__`: its source at its page's own line
# numbers, awaited when it awaits at the top level.
RUNNER = """\
import ast, inspect, sys, types
import anyio
path, page, first = sys.argv[1], sys.argv[2], int(sys.argv[3])
with open(path, encoding="utf-8") as block:
    source = "\\n" * (first - 1) + block.read()
code = compile(source, page, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
# A module of its own, so that the block sees none of these names.
sys.modules["__main__"] = main = types.ModuleType("__main__")
namespace = main.__dict__
if code.co_flags & inspect.CO_COROUTINE:
    anyio.run(eval, code, namespace)
else:
    exec(code, namespace)
"""

CHECKOUT = "/srv/checkout"
SSH_HOST = '"build.example.com"'
DOCKER_IMAGE = '"python:3.12-slim"'

# Each placeholder a block may hold, by its exact text in the block, with the
# words a comment may name it by.
PLACEHOLDERS: dict[str, str] = {
    CHECKOUT: CHECKOUT,
    SSH_HOST: "build.example.com",
    "port=22": "port",
    'user="agent"': "agent",
    '"~/.ssh/agent_ed25519"': "key",
    'known_hosts="~/.ssh/known_hosts"': "known_hosts",
    DOCKER_IMAGE: "python:3.12-slim",
}

SERVICES = {"DockerExecutor(": "docker", "SshExecutor(": "ssh", "Sandbox(": "sandbox"}


@attrs.frozen
class Block:
    """One ```python block of a page."""

    page: Path
    line: int
    """The page's line of the block's first line of code."""
    code: str
    section: str
    """The heading it is under."""
    not_run: str | None
    """The reason of its `<!-- not run: ... -->` marker, if it has one."""

    @property
    def name(self) -> str:
        """The page, relative to the checkout: `README.md`, `docs/local.md`."""
        return self.page.relative_to(ROOT).as_posix()

    @property
    def where(self) -> str:
        """The page and line, as an error names them: `docs/local.md:40`."""
        return f"{self.name}:{self.line}"

    @property
    def services(self) -> list[str]:
        """The services it needs: "docker", "ssh", "sandbox"."""
        return [service for marker, service in SERVICES.items() if marker in self.code]


def page_blocks(page: Path) -> list[Block]:
    """The ```python blocks of `page`, in order.

    Raises:
        ValueError: A fence is never closed.
    """
    blocks = []
    lines = page.read_text(encoding="utf-8").splitlines()
    section = ""
    index = 0
    while index < len(lines):
        line = lines[index]
        if line.startswith("#"):
            section = line.lstrip("#").strip()
        opening = FENCE.fullmatch(line)
        if opening:
            indent, fence = opening["indent"], opening["fence"]
            end = next(
                (
                    number
                    for number in range(index + 1, len(lines))
                    if lines[number].strip() == fence and lines[number].startswith(indent)
                ),
                None,
            )
            if end is None:
                raise ValueError(f"{page.name}:{index + 1}: the fence {fence} is never closed")
            if opening["info"] == "python":
                above = lines[index - 1].strip() if index else ""
                marker = NOT_RUN.fullmatch(above)
                body = [text.removeprefix(indent) for text in lines[index + 1 : end]]
                code = "\n".join(body) + "\n"
                reason = marker["reason"] if marker else None
                blocks.append(Block(page, index + 2, code, section, reason))
            index = end
        index += 1
    return blocks


BLOCKS = [block for page in pages() for block in page_blocks(page)]


def block_id(block: Block) -> str:
    """A test id: the page, the section and the line, e.g. `README.md:Quick start:31`."""
    return f"{block.name}:{block.section}:{block.line}"


def comments(code: str) -> list[tuple[str, str]]:
    """Each line of `code` with its comment (what follows `#`, or "")."""
    found = []
    for line in code.splitlines():
        # A `#` inside a string is rare enough in these blocks to ignore.
        _, hash_, comment = line.partition("#")
        found.append((line, comment if hash_ else ""))
    return found


def test_the_pages_have_python_blocks_and_markers_only_before_them() -> None:
    """The pages hold python blocks to run; a marker stands before one; no python block hides."""
    assert pages()[0] == README
    assert len(pages()) > 1, "the manual has no page"
    assert any(block.page == README for block in BLOCKS), "README.md has no python block"
    assert len(BLOCKS) >= 10
    for page in pages():
        name = page.relative_to(ROOT).as_posix()
        lines = page.read_text(encoding="utf-8").splitlines()
        for number, line in enumerate(lines):
            if NOT_RUN.search(line):
                assert NOT_RUN.fullmatch(line.strip()), f"{name}:{number + 1}: malformed marker"
                following = lines[number + 1].strip() if number + 1 < len(lines) else ""
                assert following == "```python", f"{name}:{number + 1}: no block after it"
            fence = FENCE.fullmatch(line)
            info = fence["info"].strip() if fence else ""
            # A python block under another name would be shown, never run.
            assert not fence or info == "python" or not info.startswith("py"), (
                f"{name}:{number + 1}: a fence {fence and fence['fence']}{info}: "
                "write ```python (run as a test) or mark it not run"
            )


def test_an_indented_block_is_read_and_an_unclosed_fence_named(tmp_path: Path) -> None:
    """A block inside a list item loses its indentation; a fence never closed is an error."""
    page = tmp_path / "page.md"
    page.write_text(
        "# Title\n\n## Part\n\n1. A step:\n\n    ```python\n    print(1)\n    ```\n"
        "\n<!-- not run: a signature -->\n```python\ndef f(x: int) -> int: ...\n```\n"
    )
    blocks = page_blocks(page)
    assert [(b.line, b.code, b.section, b.not_run) for b in blocks] == [
        (8, "print(1)\n", "Part", None),
        (13, "def f(x: int) -> int: ...\n", "Part", "a signature"),
    ]
    page.write_text("# Title\n\n```python\nprint(1)\n")
    with pytest.raises(ValueError, match=r"page.md:3: the fence ``` is never closed"):
        page_blocks(page)


def test_the_readme_stays_a_front_door() -> None:
    """README.md stays short (the manual holds the rest) and links into the manual."""
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 200, f"README.md has {len(lines)} lines: move the detail into docs/"
    assert "](docs/index.md)" in "\n".join(lines)


LINK = re.compile(r"\]\((?P<target>[^)\s]+)\)")


def github_anchor(heading: str) -> str:
    """The anchor GitHub (and the manual's site, for plain words) gives a heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_the_readme_links_to_pages_and_headings_that_exist() -> None:
    """Each relative link of README.md names a file of the checkout, and a heading in it.

    The manual's own links are checked by `mkdocs build --strict`; the README
    is not part of the site, so its links into docs/ are checked here.
    """
    targets = [link["target"] for link in LINK.finditer(README.read_text(encoding="utf-8"))]
    relative = [target for target in targets if "://" not in target]
    assert any(target.startswith("docs/") for target in relative)
    for target in relative:
        path, _, anchor = target.partition("#")
        page = ROOT / path
        assert page.exists(), f"README.md links {target}, but there is no {path}"
        if anchor:
            headings = [
                github_anchor(line.lstrip("#"))
                for line in page.read_text(encoding="utf-8").splitlines()
                if line.startswith("#")
            ]
            assert anchor in headings, f"README.md links {target}, but {path} has no such heading"


@pytest.mark.parametrize("block", BLOCKS, ids=block_id)
def test_placeholders_are_documented_in_the_block(block: Block) -> None:
    """A placeholder's line carries a comment, or a comment of the block names it."""
    lines = comments(block.code)
    every_comment = " ".join(comment for _, comment in lines)
    for placeholder, words in PLACEHOLDERS.items():
        for line, comment in lines:
            if placeholder in line.partition("#")[0]:
                assert comment.strip() or words in every_comment, (
                    f"{block.where}: {placeholder} is not explained by a comment"
                )


def git(*args: str | Path) -> None:
    """Run git quietly, with an identity of its own."""
    identity = {
        "GIT_AUTHOR_NAME": "agent",
        "GIT_AUTHOR_EMAIL": "agent@example.com",
        "GIT_COMMITTER_NAME": "agent",
        "GIT_COMMITTER_EMAIL": "agent@example.com",
    }
    subprocess.run(
        ["git", *map(str, args)],
        check=True,
        capture_output=True,
        env={**os.environ, **identity},
        timeout=30,
    )


MAKEFILE = "test:\n\t@echo '3 passed'\n"


def make_checkout(root: Path) -> Path:
    """What `/srv/checkout` stands for: a git checkout with an upstream and a Makefile."""
    upstream, checkout = root / "upstream.git", root / "checkout"
    git("init", "-q", "--bare", "-b", "main", upstream)
    git("init", "-q", "-b", "main", checkout)
    (checkout / "Makefile").write_text(MAKEFILE)
    (checkout / "service").mkdir()
    (checkout / "service" / "app.py").write_text("print('hi')\n")
    (checkout / "crates" / "core").mkdir(parents=True)
    git("-C", checkout, "add", "-A")
    git("-C", checkout, "commit", "-q", "-m", "start")
    git("-C", checkout, "remote", "add", "origin", upstream)
    git("-C", checkout, "push", "-q", "-u", "origin", "main")
    return checkout


def ssh_folder(server: SshServer) -> str:
    """A folder on the SSH server holding the checkout's Makefile, owned by the login."""
    workdir = server.workdir()
    makefile = Path(workdir) / "Makefile"
    makefile.write_text(MAKEFILE)
    stat = Path(workdir).stat()
    os.chown(makefile, stat.st_uid, stat.st_gid)
    return workdir


def substitutions(block: Block, tmp_path: Path, request: pytest.FixtureRequest) -> dict[str, str]:
    """What the test puts in place of each placeholder the block holds."""
    real: dict[str, str] = {}
    if "ssh" in block.services:
        server: SshServer = request.getfixturevalue("ssh_server")
        real |= {
            SSH_HOST: f'"{server.host}"',
            "port=22": f"port={server.port}",
            'user="agent"': f'user="{server.user}"',
            '"~/.ssh/agent_ed25519"': f'"{server.client_key}"',
            'known_hosts="~/.ssh/known_hosts"': f'known_hosts="{server.known_hosts}"',
            CHECKOUT: ssh_folder(server),
        }
    elif CHECKOUT in block.code:
        (tmp_path / "srv").mkdir()
        real[CHECKOUT] = str(make_checkout(tmp_path / "srv"))
    real[DOCKER_IMAGE] = f'"{PYTHON_IMAGE}"'
    return real


def wait_until(done: Callable[[], bool], seconds: float) -> bool:
    """Whether `done()` came true within `seconds`."""
    deadline = time.monotonic() + seconds
    while not done():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@pytest.mark.slow
@pytest.mark.parametrize("block", BLOCKS, ids=block_id)
def test_block_runs(block: Block, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """The block exits 0, prints nothing on stderr, and leaves nothing running."""
    if block.not_run is not None:
        pytest.skip(f"marked not run: {block.not_run}")
    if "docker" in block.services:
        require_engine()
    if "sandbox" in block.services:
        require_sandbox()
    code = block.code
    for placeholder, value in substitutions(block, tmp_path, request).items():
        code = code.replace(placeholder, value)
    source = tmp_path / "block.py"
    source.write_text(code, encoding="utf-8")
    cwd, temporary = tmp_path / "cwd", tmp_path / "tmp"
    cwd.mkdir()
    temporary.mkdir()
    process = subprocess.Popen(
        [sys.executable, "-c", RUNNER, str(source), str(block.page), str(block.line)],
        cwd=cwd,
        env={**os.environ, "TMPDIR": str(temporary)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = process.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        stdout, stderr = process.communicate()
        pytest.fail(f"{block.where} ran past {TIMEOUT} s:\n{stdout}\n{stderr}")
    finally:
        left = "docker" in block.services and containers_of(process.pid)
        for container in left or ():
            docker("rm", "-f", container, check=False)
    assert process.returncode == 0, f"{block.where} failed:\n{stdout}\n{stderr}"
    assert stderr == "", f"{block.where} wrote on stderr:\n{stderr}"
    assert not left, f"{block.where} left containers behind: {left}"
    assert wait_until(lambda: not tagged_processes(process.pid), 5), (
        f"{block.where} left processes running: {sorted(tagged_processes(process.pid))}"
    )
    assert not any(temporary.iterdir()), f"{block.where} left {list(temporary.iterdir())}"
