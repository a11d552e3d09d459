"""The snippets in `snippets/` run as documented and print what their docs promise.

At least one snippet per section of the manual (`docs/`) that shows code (see
`SECTIONS`), so each page's topic is also shown as a whole program. A snippet
that needs a service gets its address through the environment variables its
docstring names: the Docker snippet the engine `DOCKER_HOST` names and the
test image (`EXECUTOR_DOCKER_IMAGE`), the SSH snippet the private sshd of
`ssh_server.start_server()` (`EXECUTOR_SSH_*`). Without the service it
skips, and with `EXECUTOR_REQUIRE_DOCKER=1`, `EXECUTOR_REQUIRE_SSH=1` or
`EXECUTOR_REQUIRE_SANDBOX=1` it fails instead, as the backends' tests do.
"""

from __future__ import annotations

import ast
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import require_sandbox, tagged_processes
from docker_engine import PYTHON_IMAGE, containers_of, docker, require_engine
from ray_cluster import LOOPBACK_ENV, RayCluster
from ssh_server import SshServer

SNIPPETS = Path(__file__).resolve().parent.parent / "snippets"
DOCS = SNIPPETS.parent / "docs"
FILES = sorted(path.name for path in SNIPPETS.glob("*.py"))

# The manual's sections that show code (`##` and `###` headings of the pages
# in docs/, the API reference left out), as "page: heading", each with the
# snippets that show it at work.
SECTIONS: dict[str, list[str]] = {
    "index.md: A first program": ["quick_start.py", "command_output.py"],
    "getting-started.md: Quick start: the library in your code": ["quick_start.py"],
    "getting-started.md: Quick start: a toolset for an agent": ["toolset.py"],
    "getting-started.md: Quick start: an MCP server for a client": ["mcp_server.py"],
    "commands.md: Commands": ["commands.py", "shebang_scripts.py"],
    "commands.md: Output": ["command_output.py"],
    "local.md: Where commands run and what they see": ["local_executor.py"],
    "local.md: Streaming": ["output_streaming.py"],
    "local.md: Listing files": ["listing_files.py"],
    "local.md: Confinement": ["confinement.py"],
    "local.md: OS sandbox": ["os_sandbox.py"],
    "ssh.md: Connecting": ["ssh_executor.py"],
    "docker.md: Running commands in a container": ["docker_executor.py"],
    "docker.md: Building images": ["docker_build.py"],
    "docker.md: Container state and logs": ["docker_state.py"],
    "ray.md: Placing an executor on a node": ["ray_executor.py"],
    "policies.md: Stacking wrappers": ["policies.py"],
    "policies.md: Scoped and read-only executors": ["scoped_executors.py"],
    "policies.md: Command rules": ["policies.py"],
    "policies.md: Your own policy": ["custom_read_only_executor.py"],
    "policies.md: Validated arguments": ["argument_validation.py"],
    "shells.md: Process sessions": ["process_sessions.py"],
    "shells.md: Persistent shells and jobs": ["persistent_shells.py"],
    "tools.md: Writing a tool": ["tools.py"],
    "tools.md: Streaming tools and events": ["streaming_tools.py"],
    "tools.md: Terminal": ["builtin_tools.py"],
    "tools.md: Code interpreter": ["builtin_tools.py"],
    "tools.md: Log tailer": ["builtin_tools.py"],
    "tools.md: Idempotent runs and crash recovery": ["idempotent.py", "journal.py"],
    "toolset.md: Toolset": ["toolset.py"],
    "toolset.md: Yield windows and idle timeouts": ["native_tools.py"],
    "toolset.md: Native tools": ["native_tools.py"],
    "toolset.md: Framework adapters": ["adapters.py"],
    "toolset.md: Agent stream events": ["agent_events.py"],
    "mcp.md: Connecting a client": ["mcp_server.py"],
    "testing.md: Running the contract": ["executor_contract.py"],
    "testing.md: Testing an agent's tools without processes": ["fake_executor.py"],
}

# Seconds a snippet may run; it runs a test suite of its own.
TIMEOUTS = {"executor_contract.py": 240}

# What each service's snippet needs; the others need nothing but this machine.
SERVICES = {
    "os_sandbox.py": "sandbox",
    "ssh_executor.py": "ssh",
    "docker_executor.py": "docker",
    "docker_build.py": "docker",
    "docker_state.py": "docker",
    "ray_executor.py": "ray",
}

# Lines (or parts of lines) each snippet must print on stdout.
EXPECTED: dict[str, list[str]] = {
    "persistent_shells.py": [
        "state: ['app', 'test', 'hi', 'agent']",
        "exit 4: stdout=b'out\\n' stderr=b'err\\n'",
        "timed out; the shell kept LAST=1",
        "the shell exited with 3",
        "next run: [] state_lost=True",
        "job 1: request: GET /",
        "job 1: reloading",
        "jobs: [('1', 'running')]",
        "killed: killed",
    ],
    "builtin_tools.py": [
        "terminal: hello came back: True",
        "terminal: exit code 0",
        'terminal: refused by rule "rm-root"',
        "python: result: 42 -> ok",
        "python: NameError: name 'x' is not defined -> failed",
        "the cell ran past 1 s and was interrupted; the session's state is kept",
        "python: result: 41 -> ok",
        "python: stdout: Plot saved!; image/png (b'\\x89PNG'...) -> ok",
        "python: refused python code: os.system (line 2)",
        "bash: stdout: 3 in /tmp -> ok",
        "log tailer: [error] upstream timeout line 2",
        "log tailer: read 2, matched 1",
        "log tailer: [error] POST /checkout HTTP/1.1 line 1",
        "log tailer: read 1, matched 1",
        "log tailer: new file, 3 lines in one entry",
    ],
    "native_tools.py": [
        "native: bash, str_replace_based_edit_tool, shell, local_shell, apply_patch",
        "declared: {'type': 'bash_20250124', 'name': 'bash'}",
        "bash: /tmp test",
        "File created successfully at: ",
        "Success. Updated the following files:\nM app.py",
        "bytes: x = 1 \\r \\n \\t y = 2 \\r \\n",
        "yielded: [still running after 0.5 s, as job r1",
        "job_read: ['done', '[exit code 0]']",
        "idle: timed_out command printed nothing for 1 s (its idle timeout) and was killed",
    ],
    "toolset.py": [
        "edit refused: invalid_arguments invalid argument '= 1': old_text occurs 2 times",
        "edited app.py: replaced 1 occurrence (line 2)",
        "     2\ty = 2",
        "run: kind=failed exit_code=3",
        "stderr: b'oops\\n'",
        "search: app.py:2:y = 2",
        "shell: /tmp test",
        "through ReadOnly: denied",
        "read-only subset: read_file, list_files, glob, search",
    ],
    "mcp_server.py": [
        "tools: 18 True",
        "is_error=True exit_code=5 stderr='no tests\\n'",
        "progress: 'step 1\\n'",
        "progress: 'step 2\\n'",
        'denied: True refused by rule deny "git push": git push origin main',
    ],
    "local_executor.py": [
        "workdir: True",
        "color=never key=unset",
        "env_clear: HOME=unset PATH=/usr/bin:/bin",
    ],
    "custom_read_only_executor.py": [
        "write_file refused: this executor is read-only",
        "the shell wrote notes.md anyway: hi",
        "stream_files: notes.md",
        "refused the shell: this executor is read-only and cannot stop a shell",
    ],
    "output_streaming.py": [
        "] step 1",
        "] step 2",
        "] step 3",
        "44 bytes of output, exit code 0",
    ],
    "commands.py": [
        r"read_file: b'first\nsecond\n'",
        "exec: ['a b;c.txt', 'notes.md']",
        "shell: 2 lines",
        "with_env: hello, agent",
        "with_stdin: PIPED IN",
    ],
    "command_output.py": [
        r"exit_code=0 stdout=b'out\n' stderr=b'err\n'",
        "NonZeroExit: exit_code=1 stderr='test_parse FAILED'",
        "NonZeroExit: exit_code=None stderr='missing.txt: No such file or directory'",
        r"TimedOut after 0.5s, read so far: 'started\n'",
    ],
    "shebang_scripts.py": [
        "python 3",
        """no quoting needed: 'single', "double", $HOME stays literal""",
        "sh -eu stopped: 'step 1', command exited with code 1",
    ],
    "scoped_executors.py": [
        "ls in ScopedExecutor(LocalExecutor(",
        "'docs'): guide.md",
        "ls in crates/core/src through a nested scope: lib.rs",
        "absolute current_dir is left alone: /",
        "stream_files: src/lib.rs",
    ],
    "tools.py": [
        '"description": "File path relative to the workspace root."',
        '{"path": "src/app.py"} -> ok: 3',
        '{"path": "../../etc/passwd"} -> error: count_lines was not run: invalid argument '
        "'../../etc/passwd': argument 'path': a path must not contain '..'",
        '{"path": "src/missing.py"} -> error: src/missing.py: No such file or directory',
        '{"file": "src/app.py"} -> error: count_lines was not run: invalid argument \'file\': '
        "unknown argument; count_lines takes: path",
    ],
    "idempotent.py": [
        "first run: 'main -> main', replayed=False",
        "retry: same output True, replayed=True",
        "the push ran 1 time(s)",
        "RunInterrupted: 'echo started >> deploy.log; sleep 5' started and never finished",
        "journal: interrupted: echo started >> deploy.log; sleep 5",
        "journal: final: echo pushed >> remote.log; echo 'main -> main'",
    ],
    "argument_validation.py": [
        "count_lines('src/app.py') = 3",
        "rejected: invalid argument '../../etc/passwd': a path must not contain '..'",
        "rejected: invalid argument '/etc/passwd': a path must be relative to the workspace root",
        "rejected: invalid argument '   ': a path must not be empty or blank",
    ],
    "quick_start.py": [
        "stdout=b'hello\\n' stderr=b'from the shell\\n'",
        "failed with exit code 1: cannot run in <checkout>/crates/core: No such file or directory",
        "read back: b'1. read\\n2. write\\n'",
    ],
    "listing_files.py": [
        "listed: docs/guide.md, src/app.py, src/util.py",
        "left out: .env, .gitignore, build/generated.py, debug.log, src/logo.png",
        "src, .py only: src/app.py \"print('app')\\n\"",
        "src, .py only: src/util.py",
    ],
    "confinement.py": [
        "inside: inside",
        "refused: '../outside.txt' is outside the workdir: its '..' climbs above the workdir",
        "it is an absolute path that does not lie in the workdir",
        "refused: 'up/outside.txt' is outside the workdir: the symlink 'up' leads out",
        "refused: '~/.ssh/id_ed25519' is refused: '~' is not expanded here",
        "the shell still reads ../outside.txt: not for the agent",
    ],
    "os_sandbox.py": [
        "backend: ",
        "the workdir: built",
        "/var/tmp: refused by the kernel",
        "entries in the home folder: 0",
        "open files: 256",
        "ReadOnly: even the workdir is read-only",
    ],
    "ssh_executor.py": [
        "stream_files over SFTP: ['src/app.py']",
        "concurrent: ['channel 1', 'channel 2', 'channel 3']",
        "TimedOut after 1.0s: 'started\\n'",
    ],
    "docker_build.py": [
        "built in 5 steps, cached: False",
        "in the container: ['release', 'Dockerfile', 'app.py', 'app', 'ran']",
        "second executor, cached: True",
        "BuildError at 'Step 2/3 : RUN echo broken; exit 3': 'broken'",
    ],
    "ray_executor.py": [
        "placed where asked: True",
        "first chunk before the end: True",
        "read back: on the node",
        "TimedOut: command timed out after 0.5 s",
        "pool of 2 spread over 2 nodes",
    ],
    "docker_state.py": [
        "at the start: running, oom_killed=False",
        "the hog: command was killed by SIGKILL",
        "after the hog: running=True, oom_killed=True",
        "after kill 1: exited, exit code 0",
    ],
    "docker_executor.py": [
        "python in the container: 3",
        "workdir: /workspace, network interfaces: ['lo']",
        "stream_files: ['main.py']",
        "TimedOut after 1.0s: 'started\\n'",
    ],
    "policies.py": [
        "the stack: Audit(Approval(Secrets(DangerousCommands(CommandRules(LocalExecutor(",
        "ran: token: [REDACTED]",
        'refused: refused by rule "rm-root"',
        'refused: refused by rule "pipe-to-shell"',
        "refused: the command was not approved: pushing needs a person",
        "refused: refused by the allow rules: no allow rule matches",
        "audit: start end start denied start denied start denied start denied",
        "check_script finds: dynamic-code",
    ],
    "process_sessions.py": [
        "stdin: ['got one', 'got two']",
        "chunk 1: b'ready\\n'",
        "signal: exit code 3, b'ready\\ninterrupted\\n'",
        "pty: [b'agent', b'40 120', b'hello agent']",
    ],
    "streaming_tools.py": [
        "spec: countdown takes {'count': {",
        "chunk: 4...",
        "chunk: 1...",
        "final: Done(sent=4), the context holds ['2...', '1...']",
        "read 4, dropped 2",
        "bus: tool.stream.partial, tool.stream.partial, tool.result",
    ],
    "journal.py": [
        "first run: final=2, recovered=False",
        "retry: final=2, recovered=True, runs=1",
        "cut off after: users: schema",
        "RunInterrupted: migrate started and never finished",
        "rerun: final=2, runs=3",
        "journal: migrate final, 2 attempt(s)",
        "pruned: 1 of the older finals",
    ],
    "adapters.py": [
        "openai strict=True required=['command', 'timeout']",
        'openai timeout: {"type": ["number", "null"], "description": "Seconds before it is '
        'stopped. (null for the default, 60)"}',
        "anthropic: ['description', 'input_schema', 'name']",
        "mcp: ['description', 'inputSchema', 'name']",
        'gemini timeout: {"type": "number", "description": "Seconds before it is stopped. '
        '(default: 60)"}',
        "pydantic-ai retried: run was not run: invalid argument 'a minute': argument 'timeout': "
        "expected a number",
        "pydantic-ai: the tool said: from pydantic-ai",
        "openai-agents retry: run was not run: invalid argument 'soon'",
        "openai-agents: from agents",
        "langchain error: run was not run: invalid argument 'x': argument 'timeout'",
        "langchain error: run was not run: invalid argument {}: missing required argument",
        "langchain success: from langchain",
    ],
    "agent_events.py": [
        "event: ToolCallStart(tool_name='run', tool_call_id='call_1')",
        """event: ToolCallDelta(delta='{"command": "echo hello"}', tool_call_id='call_1')""",
        "event: ToolExecuted(tool_name='run', tool_call_id='call_1', success=True, error=None",
        "event: ToolExecuted(tool_name='run', tool_call_id='call_2', success=False, "
        "error='command exited with code 3\\nno\\n'",
        "event: ToolCallComplete(tool_name='run', tool_call_id='call_3')",
        "event: Cancelled(partial_text=None, partial_thinking=None, pending_tools=['run'], "
        "pending_tool_call_ids=['call_3'])",
        "call_3 raised ToolCancelled: run (call_3) was cancelled",
        "bus call_1: PROGRESS PROGRESS PROGRESS PARTIAL COMPLETE",
        "bus call_2: PROGRESS PROGRESS PROGRESS PARTIAL ERROR",
        "bus call_3: PROGRESS PROGRESS PROGRESS PARTIAL ERROR",
    ],
    "executor_contract.py": [
        "exit code 0",
        "contract: 30 passed",
    ],
    "fake_executor.py": [
        "tool: app.py, lib/util.py; last commit by Ada",
        "it wrote: b'2 files\\n'",
        "it ran: ['git log -1 --format=%an', 'write_file SUMMARY.md (8 bytes)']",
        "without a handler: is_error=True",
    ],
}


def service_environment(name: str, request: pytest.FixtureRequest) -> dict[str, str]:
    """The variables that give snippet `name` its service; skip (or fail) without it."""
    service = SERVICES.get(name)
    if service == "docker":
        require_engine()
        return {"EXECUTOR_DOCKER_IMAGE": PYTHON_IMAGE}
    if service == "sandbox":
        require_sandbox()
    if service == "ray":
        cluster: RayCluster = request.getfixturevalue("ray_cluster")
        return {**LOOPBACK_ENV, "EXECUTOR_RAY_ADDRESS": cluster.address}
    if service == "ssh":
        server: SshServer = request.getfixturevalue("ssh_server")
        return {
            "EXECUTOR_SSH_HOST": server.host,
            "EXECUTOR_SSH_PORT": str(server.port),
            "EXECUTOR_SSH_USER": server.user,
            "EXECUTOR_SSH_KEY": server.client_key,
            "EXECUTOR_SSH_KNOWN_HOSTS": server.known_hosts,
        }
    return {}


def run_snippet(
    name: str, tmp: Path, env: dict[str, str] | None = None
) -> tuple[subprocess.CompletedProcess[str], int]:
    """Run one snippet with its own TMPDIR, so what it leaves behind can be seen; and its pid."""
    process = subprocess.Popen(
        [sys.executable, str(SNIPPETS / name)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "TMPDIR": str(tmp), **(env or {})},
        cwd=tmp,
        start_new_session=True,
    )
    try:
        stdout, stderr = process.communicate(timeout=TIMEOUTS.get(name, 60))
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        stdout, stderr = process.communicate()
        pytest.fail(f"{name} ran past {TIMEOUTS.get(name, 60)} s:\n{stdout}\n{stderr}")
    completed = subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)
    return completed, process.pid


def left_running(pid: int) -> set[int]:
    """The processes the executors of process `pid` started that still run, after a moment."""
    deadline = time.monotonic() + 5
    while (left := tagged_processes(pid)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def manual_sections() -> tuple[list[str], set[str]]:
    """The manual's `##` and `###` headings as "page: heading", and those with python under them."""
    headings, with_python = [], set()
    for page in sorted(DOCS.rglob("*.md")):
        if "reference" in page.relative_to(DOCS).parts:
            continue
        name = page.relative_to(DOCS).as_posix()
        fenced, section = False, f"{name}: (above its first section)"
        for line in page.read_text(encoding="utf-8").splitlines():
            stripped = line.strip()
            if stripped.startswith("```"):
                # A `#` line inside a fence is code (a comment), not a heading.
                if not fenced and stripped == "```python":
                    with_python.add(section)
                fenced = not fenced
            elif not fenced and (match := re.fullmatch(r"#{2,3} (.+)", line)):
                section = f"{name}: {match[1]}"
                headings.append(section)
    return headings, with_python


def test_every_manual_section_with_code_has_a_snippet() -> None:
    """Each manual section that shows code maps to snippets, and each snippet to a section."""
    headings, with_python = manual_sections()
    assert set(SECTIONS) <= set(headings), set(SECTIONS) - set(headings)
    assert with_python <= set(SECTIONS), with_python - set(SECTIONS)
    assert all(SECTIONS.values()), [section for section, names in SECTIONS.items() if not names]
    # A snippet may show several sections (the built-in tools share one).
    mapped = {name for names in SECTIONS.values() for name in names}
    assert sorted(mapped) == FILES


def test_every_snippet_has_expectations() -> None:
    """Each file in snippets/ is listed in EXPECTED, and each entry names a file that exists."""
    assert set(FILES) == set(EXPECTED)


@pytest.mark.parametrize("name", FILES)
def test_snippet_shape(name: str) -> None:
    """A snippet has a module docstring, `async def main() -> None` and an anyio.run guard."""
    source = (SNIPPETS / name).read_text()
    tree = ast.parse(source)
    assert ast.get_docstring(tree), f"{name} has no module docstring"
    mains = [
        node for node in tree.body if isinstance(node, ast.AsyncFunctionDef) and node.name == "main"
    ]
    assert len(mains) == 1, f"{name} has no `async def main()`"
    assert ast.unparse(mains[0].returns or ast.Constant(None)) == "None"
    assert source.rstrip().endswith('if __name__ == "__main__":\n    anyio.run(main)')


@pytest.mark.slow
@pytest.mark.parametrize("name", FILES)
def test_snippet_runs(name: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """A snippet exits 0, prints its expected lines, and leaves nothing behind or running."""
    result, pid = run_snippet(name, tmp_path, service_environment(name, request))
    left = containers_of(pid) if SERVICES.get(name) == "docker" else []
    for container in left:
        docker("rm", "-f", container, check=False)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    for line in EXPECTED[name]:
        assert line in result.stdout, (
            f"{line!r} missing from the output of {name}:\n{result.stdout}"
        )
    assert list(tmp_path.iterdir()) == []
    assert not left, f"{name} left containers behind: {left}"
    assert not left_running(pid), f"{name} left processes running"


@pytest.mark.slow
def test_output_streaming_prints_chunks_as_they_arrive(tmp_path: Path) -> None:
    """The streaming snippet prints step 3 well after step 1, and its warning on stderr."""
    result, _ = run_snippet("output_streaming.py", tmp_path)
    assert result.returncode == 0, result.stderr
    times = {
        step: float(seconds)
        for seconds, step in re.findall(r"\[(\d+\.\d)s\] step (\d)", result.stdout)
    }
    assert set(times) == {"1", "2", "3"}
    # The script sleeps 0.2 s between steps: printed at the end, all would share one time.
    assert times["3"] - times["1"] >= 0.2
    assert "warning: nothing to do" in result.stderr
