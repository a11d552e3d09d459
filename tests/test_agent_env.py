"""The agent-safe environment: no pager, editor or prompt keeps a toolset command waiting.

A developer's usual environment is forced on the executor (`PAGER=less`,
`EDITOR=vi`, an askpass that waits for a person, a terminal type), as an
executor started from a developer's shell inherits it. Through the toolset's
`run`, `shell` and `terminal` (on a pty), `git log` in a repository of 300
commits, `git commit` without `-m`, `git rebase -i`, `less` on a long file,
a `read` prompt and `git clone` of an unreachable URL or of one that asks
for a password each return within seconds, with nothing left running (`man
ls` too, where its page is installed). The opt-out gives the old
environment, a variable can be changed alone, and the MCP server's commands
get it too.
"""

from __future__ import annotations

import http.server
import re
import shlex
import shutil
import subprocess
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from conftest import tagged_processes

from executor import (
    LocalExecutor,
    TerminalTool,
    ToolExecutor,
    ToolOutput,
    ToolOutputKind,
    Toolset,
)
from executor._toolset.environment import AGENT_ENVIRONMENT, AgentEnvironment, agent_executor

pytestmark = pytest.mark.anyio

# What returning "within seconds" means here: far below the timeouts given (60 s),
# with room for a loaded machine. The terminal hangs up on a pager after 2 s.
PROMPT_LIMIT = 12.0
TIMEOUT = 60

COMMITS = 300
LONG_LINES = 2000


def need(*programs: str) -> None:
    """Skip unless every program is installed (`.ci/run` installs them in CI)."""
    missing = [program for program in programs if shutil.which(program) is None]
    if missing:
        pytest.skip(f"needs {', '.join(missing)} (apt-get install git less vim-tiny)")


def has_man_page(name: str) -> bool:
    """Whether `man` is installed with a page for `name`."""
    if shutil.which("man") is None:
        return False
    return subprocess.run(["man", "-w", name], capture_output=True, check=False).returncode == 0


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A git repository of 300 commits with a long file, and a waiting askpass beside it."""
    need("git", "less", "vi")
    root = tmp_path_factory.mktemp("agent-env")
    path = root / "repo"
    path.mkdir()
    git = ["git", "-C", str(path), "-c", "init.defaultBranch=main"]
    subprocess.run([*git, "init", "-q"], check=True)
    for key, value in (("user.name", "Agent"), ("user.email", "agent@example.invalid")):
        subprocess.run(["git", "-C", str(path), "config", key, value], check=True)
    stream = "".join(
        f"commit refs/heads/main\ncommitter Agent <agent@example.invalid> {1700000000 + n} +0000\n"
        f"data {len(f'commit number {n}')}\ncommit number {n}\n\n"
        for n in range(1, COMMITS + 1)
    )
    subprocess.run(
        ["git", "-C", str(path), "fast-import", "--quiet"], input=stream.encode(), check=True
    )
    subprocess.run(["git", "-C", str(path), "checkout", "-q", "main"], check=True)
    (path / "long.txt").write_text("".join(f"line {n}\n" for n in range(1, LONG_LINES + 1)))
    # An IDE's askpass: it waits for a person (here, for a minute) to type a password.
    askpass = root / "askpass.sh"
    askpass.write_text("#!/bin/sh\nsleep 60\necho secret\n")
    askpass.chmod(0o755)
    return path


def developer_env(repo: Path) -> dict[str, str]:
    """A developer's usual environment, as a shell started from a desktop has it."""
    return {
        "PAGER": "less",
        "EDITOR": "vi",
        "VISUAL": "vi",
        "GIT_ASKPASS": str(repo.parent / "askpass.sh"),
        "TERM": "xterm-256color",
        "LESS": "",
    }


class _AsksForPassword(http.server.BaseHTTPRequestHandler):
    """A git remote that wants a password for everything: 401 and a Basic challenge."""

    def do_GET(self) -> None:
        self.send_response(401)
        self.send_header("WWW-Authenticate", 'Basic realm="git"')
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet."""


@pytest.fixture(scope="module")
def asks_for_password() -> Iterator[str]:
    """The URL of a repository on 127.0.0.1 (port 0: a free one) that answers 401."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _AsksForPassword)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/project.git"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.fixture
async def developer(repo: Path) -> AsyncIterator[LocalExecutor]:
    """A LocalExecutor in the repository, with the developer's environment."""
    async with LocalExecutor(repo, envs=developer_env(repo), kill_grace=0.2) as executor:
        yield executor


async def call(toolset: Toolset, ex: ToolExecutor, tool: str, command: str) -> ToolOutput:
    """Call `tool` with `command`, and a timeout far past what the cases may take."""
    if tool == "terminal":
        arguments: dict[str, Any] = {"command": command, "timeout_secs": TIMEOUT}
    else:
        arguments = {"command": command, "timeout": TIMEOUT}
    return await toolset.call(toolset.context(ex), tool, arguments)


async def none_left(before: set[int]) -> list[int]:
    """The processes this test started since `before` that still run, after up to 5 s."""
    with anyio.move_on_after(5):
        while tagged_processes() - before:
            await anyio.sleep(0.05)
    return sorted(tagged_processes() - before)


# Each case: the command, then what the output of each tool holds.
CASES: dict[str, tuple[str, dict[str, tuple[ToolOutputKind, str]]]] = {
    "git-log": (
        "git log",
        {
            "run": (ToolOutputKind.OK, "commit number 1\n"),
            "shell": (ToolOutputKind.OK, "commit number 1\n"),
            "terminal": (ToolOutputKind.OK, "commit number 1\r\n"),
        },
    ),
    "git-commit-without-m": (
        "git commit --allow-empty",
        dict.fromkeys(
            ("run", "shell", "terminal"),
            (ToolOutputKind.FAILED, "Please supply the message using either -m or -F"),
        ),
    ),
    "git-rebase-i": (
        "git rebase -i HEAD~3",
        dict.fromkeys(
            ("run", "shell", "terminal"),
            (ToolOutputKind.FAILED, "There was a problem with the editor"),
        ),
    ),
    "less": (
        "less long.txt",
        {
            # Without a terminal less prints the file, as cat would.
            "run": (ToolOutputKind.OK, f"line {LONG_LINES}\n"),
            "shell": (ToolOutputKind.OK, f"line {LONG_LINES}\n"),
            # On one it pages, and waits for keys: the terminal hangs up on it.
            "terminal": (ToolOutputKind.FAILED, "the terminal hung up on it"),
        },
    ),
    "man": (
        "man ls",
        {
            "run": (ToolOutputKind.OK, "ls - list directory contents"),
            "shell": (ToolOutputKind.OK, "ls - list directory contents"),
            "terminal": (ToolOutputKind.OK, "list directory contents"),
        },
    ),
    "read-prompt": (
        'printf "Your name: "; read name; echo "read exited $?"',
        dict.fromkeys(("run", "shell", "terminal"), (ToolOutputKind.OK, "read exited 1")),
    ),
    "git-clone-unreachable": (
        "git clone https://127.0.0.1:1/x.git unreachable",
        dict.fromkeys(("run", "shell", "terminal"), (ToolOutputKind.FAILED, "127.0.0.1")),
    ),
}


@pytest.mark.parametrize("tool", ["run", "shell", "terminal"])
@pytest.mark.parametrize("case", list(CASES))
async def test_each_case_returns_within_seconds(
    developer: LocalExecutor, tool: str, case: str
) -> None:
    """Pagers, editors and prompts: each command returns in seconds, and nothing is left."""
    command, expected = CASES[case]
    kind, words = expected[tool]
    if case == "man" and not has_man_page("ls"):
        pytest.skip("no man, or no page for ls (a slim image strips them)")
    async with Toolset(timeout=TIMEOUT) as toolset:
        await call(toolset, developer, "shell", "true")  # the persistent shell, opened
        before = tagged_processes()
        started = time.monotonic()
        out = await call(toolset, developer, tool, command)
        took = time.monotonic() - started
        assert took < PROMPT_LIMIT, (took, out.text[-2000:])
        assert out.kind is kind, out.text[-2000:]
        assert words in out.text, out.text[-2000:]
        assert await none_left(before) == []


@pytest.mark.parametrize("tool", ["run", "shell", "terminal"])
async def test_a_remote_that_asks_for_a_password(
    developer: LocalExecutor, asks_for_password: str, tool: str
) -> None:
    """`git clone` of a URL that answers 401 fails at once: no username asked, no askpass run."""
    async with Toolset(timeout=TIMEOUT) as toolset:
        await call(toolset, developer, "shell", "true")  # the persistent shell, opened
        before = tagged_processes()
        started = time.monotonic()
        out = await call(toolset, developer, tool, f"git clone {asks_for_password} cloned")
        assert time.monotonic() - started < PROMPT_LIMIT, out.text
        assert out.kind is ToolOutputKind.FAILED, out.text
        assert "terminal prompts disabled" in out.text, out.text
        assert await none_left(before) == []


async def test_a_prompt_that_drops_early_input_still_reads_end_of_file(
    developer: LocalExecutor,
) -> None:
    """A program that flushes its terminal's input, then prompts, gets Ctrl-D once it waits."""
    script = (
        "import sys, termios; termios.tcflush(0, termios.TCIFLUSH); "
        "print('Password: ', end='', flush=True); print(repr(sys.stdin.readline()))"
    )
    async with Toolset(timeout=TIMEOUT) as toolset:
        started = time.monotonic()
        out = await call(toolset, developer, "terminal", f"python3 -c {shlex.quote(script)}")
        assert time.monotonic() - started < PROMPT_LIMIT, out.text
        assert out.kind is ToolOutputKind.OK, out.text
        # The chunks are joined by lines: the prompt, then what readline returned.
        assert re.search(r"Password: \s*''", out.text), out.text


async def test_what_commands_see(developer: LocalExecutor) -> None:
    """The variables over the developer's; TERM=dumb without a terminal only."""
    show = 'echo "$PAGER|$EDITOR|$GIT_EDITOR|$GIT_TERMINAL_PROMPT|[$GIT_ASKPASS]|$TERM"'
    async with Toolset(timeout=TIMEOUT) as toolset:
        for tool in ("run", "shell"):
            out = await call(toolset, developer, tool, show)
            assert "cat|false|false|0|[]|dumb\n" in out.text, (tool, out.text)
        out = await call(toolset, developer, "terminal", show)
        assert "cat|false|false|0|[]|xterm-256color\r\n" in out.text, out.text


async def test_the_commands_own_variables_win(developer: LocalExecutor) -> None:
    """A variable the command sets wins; an export in the persistent shell holds there."""
    async with Toolset(timeout=TIMEOUT) as toolset:
        context = toolset.context(developer)
        out = await toolset.call(
            context, "terminal", {"command": "echo $PAGER", "env": {"PAGER": "mine"}}
        )
        assert out.text.startswith("mine\r\n"), out.text
        await call(toolset, developer, "shell", "export PAGER=less")
        out = await call(toolset, developer, "shell", "echo $PAGER")
        assert out.text.startswith("less\n"), out.text
        out = await call(toolset, developer, "run", "echo $PAGER")
        assert out.text.startswith("cat\n"), out.text


async def test_the_opt_out_gives_the_old_environment(developer: LocalExecutor) -> None:
    """`environment=False`: the executor's environment as it is, and a prompt waits again."""
    async with Toolset(timeout=TIMEOUT, environment=False) as toolset:
        context = toolset.context(developer)
        assert context.executor() is developer
        out = await call(toolset, developer, "run", 'echo "$PAGER|$EDITOR|$TERM"')
        assert out.text.startswith("less|vi|xterm-256color\n"), out.text
        # The terminal is attended again: a prompt waits, here until a short timeout.
        waited = await toolset.call(
            context, "terminal", {"command": "read name", "timeout_secs": 1}
        )
        assert waited.kind is ToolOutputKind.TIMED_OUT, waited.text


async def test_one_variable_changed_or_left_alone(developer: LocalExecutor) -> None:
    """A mapping changes the defaults per variable: a value of one's own, `None` leaves one."""
    setting = {"PAGER": "more", "EDITOR": None, "NO_COLOR": "1"}
    async with Toolset(timeout=TIMEOUT, environment=setting) as toolset:
        show = 'echo "$PAGER|$EDITOR|$NO_COLOR|$GIT_PAGER|$VISUAL"'
        for tool in ("run", "shell"):
            out = await call(toolset, developer, tool, show)
            assert out.text.startswith("more|vi|1|cat|false\n"), (tool, out.text)
    with pytest.raises(TypeError, match="environment"):
        Toolset(environment="yes")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="strings or None"):
        Toolset(environment={"PAGER": 1})  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="variable name"):
        Toolset(environment={"A=B": "1"})


async def test_one_wrapper_per_executor(developer: LocalExecutor) -> None:
    """Every context of one executor hands out the same wrapper (the shell is kept by it)."""
    toolset = Toolset()
    first = toolset.context(developer).executor()
    assert isinstance(first, AgentEnvironment)
    assert toolset.context(developer).executor() is first
    assert agent_executor(first) is first
    assert Toolset(environment={"PAGER": "more"}).context(developer).executor() is not first
    # Standalone, the terminal is attended and the environment is the executor's own.
    assert not TerminalTool(developer).unattended
    assert TerminalTool(toolset.context(developer)).unattended
    assert set(first.variables) == {*AGENT_ENVIRONMENT, "TERM"}


# --- the MCP server ---------------------------------------------------------------------


@pytest.fixture
def mcp_client() -> Any:
    mcp = pytest.importorskip("mcp", reason="the MCP tests need tool-executor[mcp]")
    return mcp.Client


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_the_mcp_servers_commands_get_it(developer: LocalExecutor, mcp_client: Any) -> None:
    """Through the MCP server too: the variables, and a pager that returns in seconds."""
    from executor import McpServer

    async with Toolset(timeout=TIMEOUT) as toolset:
        server = McpServer(developer, toolset)
        async with mcp_client(server.server, mode="auto") as client:
            shown = await client.call_tool("run", {"command": 'echo "$PAGER|$EDITOR|$TERM"'})
            assert shown.structured_content["stdout"] == "cat|false|dumb\n"
            started = time.monotonic()
            paged = await client.call_tool(
                "terminal", {"command": "less long.txt", "timeout_secs": TIMEOUT}
            )
            assert time.monotonic() - started < PROMPT_LIMIT
            assert paged.is_error
            started = time.monotonic()
            logged = await client.call_tool("shell", {"command": "git log", "timeout": TIMEOUT})
            assert time.monotonic() - started < PROMPT_LIMIT
            assert not logged.is_error
            again = await client.call_tool("shell", {"command": "export PAGER=more"})
            assert not again.is_error
            kept = await client.call_tool("shell", {"command": "echo $PAGER"})
            # One persistent shell across the server's calls: the export held.
            assert kept.structured_content["stdout"] == "more\n"
    async with Toolset(timeout=TIMEOUT, environment=False) as toolset:
        server = McpServer(developer, toolset)
        async with mcp_client(server.server, mode="auto") as client:
            shown = await client.call_tool("run", {"command": 'echo "$PAGER|$EDITOR"'})
            assert shown.structured_content["stdout"] == "less|vi\n"


def test_the_mcp_configuration_and_flag(tmp_path: Path) -> None:
    """`agent_env` in the TOML file (off, or a table of changes) and `--no-agent-env`."""
    from executor._cli.main import _parser
    from executor._cli.mcp import _overrides
    from executor._mcp.config import load_mcp_config

    assert load_mcp_config().agent_env is True
    off = tmp_path / "off.toml"
    off.write_text("agent_env = false\n")
    assert load_mcp_config(off).agent_env is False
    changed = tmp_path / "changed.toml"
    changed.write_text('[agent_env]\nPAGER = "less"\nGIT_ASKPASS = false\n')
    assert load_mcp_config(changed).agent_env == {"PAGER": "less", "GIT_ASKPASS": None}
    bad = tmp_path / "bad.toml"
    bad.write_text("[agent_env]\nPAGER = true\n")
    with pytest.raises(ValueError, match="agent_env"):
        load_mcp_config(bad)
    args = _parser().parse_args(["mcp", "--no-agent-env"])
    assert load_mcp_config(changed, **_overrides(args)).agent_env is False
    args = _parser().parse_args(["mcp"])
    assert load_mcp_config(changed, **_overrides(args)).agent_env == {
        "PAGER": "less",
        "GIT_ASKPASS": None,
    }


# --- Docker and SSH: run and shell ------------------------------------------------------


async def _run_and_shell(ex: ToolExecutor, *, git: bool) -> None:
    """The developer's editor fails, a prompt reads end of file; with git, its cases too."""
    commands = [
        ('echo "$PAGER|$EDITOR|$TERM"', ToolOutputKind.OK, "cat|false|dumb\n"),
        ('"$EDITOR" notes.txt; echo "editor exited $?"', ToolOutputKind.OK, "editor exited 1"),
        ('printf "Name: "; read name; echo "read exited $?"', ToolOutputKind.OK, "read exited 1"),
    ]
    if git:
        commands += [
            ("git log", ToolOutputKind.OK, "commit number 1\n"),
            ("git commit --allow-empty", ToolOutputKind.FAILED, "-m or -F"),
            ("less long.txt", ToolOutputKind.OK, f"line {LONG_LINES}\n"),
            ("git clone https://127.0.0.1:1/x.git gone", ToolOutputKind.FAILED, "127.0.0.1"),
        ]
    async with Toolset(timeout=TIMEOUT) as toolset:
        for tool in ("run", "shell"):
            for command, kind, words in commands:
                started = time.monotonic()
                out = await call(toolset, ex, tool, command)
                assert time.monotonic() - started < PROMPT_LIMIT, (tool, command, out.text)
                assert out.kind is kind, (tool, command, out.text)
                assert words in out.text, (tool, command, out.text)


@pytest.fixture(scope="module")
def container() -> Iterator[str]:
    """One idle container of the Python image (busybox, no git), labelled as ours."""
    from docker_engine import PYTHON_IMAGE, labelled_container

    with labelled_container(PYTHON_IMAGE) as found:
        yield found


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_on_docker(repo: Path, container: str) -> None:
    """In a container: the variables, a failing editor, a prompt; nothing left in it."""
    from docker_engine import container_processes

    from executor import DockerExecutor

    before = container_processes(container)
    async with DockerExecutor(
        container=container,
        workdir=f"/workspace/{uuid.uuid4().hex}",
        envs=developer_env(repo),
        kill_grace=0.2,
    ) as ex:
        await _run_and_shell(ex, git=False)
    with anyio.move_on_after(5):
        while container_processes(container) != before:
            await anyio.sleep(0.1)
    assert container_processes(container) == before


@pytest.fixture
def ssh_workdir(repo: Path, ssh_server: Any) -> str:
    """A copy of the repository in a new folder of the SSH login user."""
    workdir = ssh_server.workdir()
    subprocess.run(["cp", "-a", f"{repo}/.", workdir], check=True)
    subprocess.run(["chown", "-R", f"{ssh_server.user}:", workdir], check=True)
    return str(workdir)


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_on_ssh(repo: Path, ssh_server: Any, ssh_workdir: str) -> None:
    """On an SSH host (the private sshd): the variables and every git case, none left."""
    workdir = ssh_workdir
    before = tagged_processes()
    async with ssh_server.executor(workdir=workdir, envs=developer_env(repo), kill_grace=0.2) as ex:
        await _run_and_shell(ex, git=True)
    assert await none_left(before) == []
