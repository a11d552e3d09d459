"""The snippets in `snippets/` run as documented and print what their docs promise."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

SNIPPETS = Path(__file__).resolve().parent.parent / "snippets"
FILES = sorted(path.name for path in SNIPPETS.glob("*.py"))

# Lines (or parts of lines) each snippet must print on stdout.
EXPECTED: dict[str, list[str]] = {
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
}


def run_snippet(name: str, tmp: Path) -> subprocess.CompletedProcess[str]:
    """Run one snippet with its own TMPDIR, so what it leaves behind can be seen."""
    env = {**os.environ, "TMPDIR": str(tmp)}
    return subprocess.run(
        [sys.executable, str(SNIPPETS / name)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp,
        timeout=60,
        check=False,
    )


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
def test_snippet_runs(name: str, tmp_path: Path) -> None:
    """A snippet exits 0, prints its expected lines, and leaves its temporary directory clean."""
    result = run_snippet(name, tmp_path)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    for line in EXPECTED[name]:
        assert line in result.stdout, (
            f"{line!r} missing from the output of {name}:\n{result.stdout}"
        )
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_output_streaming_prints_chunks_as_they_arrive(tmp_path: Path) -> None:
    """The streaming snippet prints step 3 well after step 1, and its warning on stderr."""
    result = run_snippet("output_streaming.py", tmp_path)
    assert result.returncode == 0, result.stderr
    times = {
        step: float(seconds)
        for seconds, step in re.findall(r"\[(\d+\.\d)s\] step (\d)", result.stdout)
    }
    assert set(times) == {"1", "2", "3"}
    # The script sleeps 0.2 s between steps: printed at the end, all would share one time.
    assert times["3"] - times["1"] >= 0.2
    assert "warning: nothing to do" in result.stderr
