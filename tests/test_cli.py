"""The command line (`python -m executor run` and `files`), tested through real processes."""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

# Every child gets at most this long: a hanging CLI fails the test instead of the run.
LIMIT = 30.0


def cli(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run `python -m executor ARGS` to the end and capture its output."""
    return subprocess.run(
        [sys.executable, "-m", "executor", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=LIMIT,
        check=False,
    )


def gone(pid: int) -> bool:
    """Whether `pid` has ended (a zombie waiting for its reaper counts as ended)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.fixture
def started() -> Iterator[list[Path]]:
    """Pid files the test's commands write; a `sleep` of theirs still alive afterwards is killed."""
    files: list[Path] = []
    since = time.time() - 1
    yield files
    for file in files:
        if not file.exists():
            continue
        # Only a survivor of this test, recognised by its name and age, is killed.
        try:
            process = psutil.Process(int(file.read_text()))
            if process.name() == "sleep" and process.create_time() >= since:
                process.kill()
        except (psutil.NoSuchProcess, ValueError):
            pass


def read_pid(path: Path) -> int:
    """Return the pid a command wrote to `path`."""
    return int(path.read_text().strip())


# run: output and exit codes


def test_run_prints_output() -> None:
    """`run -- echo hi` prints hi and exits 0."""
    result = cli("run", "--", "echo hi")
    assert (result.returncode, result.stdout, result.stderr) == (0, "hi\n", "")


def test_run_joins_several_words_into_one_quoted_script() -> None:
    """Several words after -- are quoted, so a word with spaces or `;` stays one argument."""
    result = cli("run", "--", "printf", "[%s]\n", "a b", "c;d")
    assert (result.returncode, result.stdout) == (0, "[a b]\n[c;d]\n")


def test_run_propagates_the_exit_code() -> None:
    """The CLI exits with the command's own exit code."""
    result = cli("run", "--", "echo before; exit 7")
    assert (result.returncode, result.stdout) == (7, "before\n")


def test_run_reports_a_signal_as_128_plus_n() -> None:
    """A command killed by SIGTERM makes the CLI exit 143, as a shell reports it."""
    result = cli("run", "--", "kill -TERM $$")
    assert result.returncode == 143


def test_run_keeps_stderr_apart() -> None:
    """What the command writes to stderr goes to the CLI's stderr, not its stdout."""
    result = cli("run", "--", "echo out; echo oops >&2")
    assert (result.returncode, result.stdout, result.stderr) == (0, "out\n", "oops\n")


def test_run_unknown_program_exits_127() -> None:
    """An unknown program exits 127 with a 'not found' message on stderr."""
    result = cli("run", "--", "no-such-program-d41d8cd9")
    assert result.returncode == 127
    assert "no-such-program-d41d8cd9" in result.stderr
    assert "not found" in result.stderr
    assert result.stdout == ""


def test_run_missing_interpreter_exits_127() -> None:
    """A #! script naming a missing interpreter exits 127 and names it on stderr."""
    result = cli("run", "--", "#!/no/such/interpreter\necho hi")
    assert result.returncode == 127
    assert "/no/such/interpreter: command not found" in result.stderr


def test_run_without_a_script_is_a_usage_error() -> None:
    """`run` with nothing after -- exits 2 with a usage message."""
    result = cli("run", "--")
    assert result.returncode == 2
    assert "give a script after --" in result.stderr


# run: timeouts and leftovers


@pytest.mark.slow
def test_run_timeout_kills_the_tree_and_exits_124(tmp_path: Path, started: list[Path]) -> None:
    """--timeout kills the command and its children promptly and exits 124."""
    shell, child = tmp_path / "shell.pid", tmp_path / "child.pid"
    started += [shell, child]
    script = f"sleep 60 & echo $! > {child}; echo $$ > {shell}; echo waiting; wait"
    begun = time.monotonic()
    result = cli("run", "--timeout", "0.5", "--", script)
    elapsed = time.monotonic() - begun
    assert result.returncode == 124
    assert result.stdout == "waiting\n"
    assert "timed out after 0.5 s" in result.stderr
    assert elapsed < 10
    assert gone(read_pid(shell))
    assert gone(read_pid(child))


@pytest.mark.slow
def test_run_timeout_kills_a_daemon_that_left_the_tree(tmp_path: Path, started: list[Path]) -> None:
    """A double-forked daemon in a new session dies with the command on timeout."""
    daemon = tmp_path / "daemon.pid"
    started.append(daemon)
    script = f"(setsid sh -c 'echo $$ > {daemon}; exec sleep 60' >/dev/null 2>&1 &); sleep 60"
    result = cli("run", "--timeout", "1", "--", script)
    assert result.returncode == 124
    assert gone(read_pid(daemon))


@pytest.mark.slow
def test_run_returns_promptly_and_ends_background_jobs(tmp_path: Path, started: list[Path]) -> None:
    """A background job holding the output pipe neither keeps the CLI waiting nor outlives it."""
    job = tmp_path / "job.pid"
    started.append(job)
    begun = time.monotonic()
    result = cli("run", "--", f"sleep 60 & echo $! > {job}; echo started")
    assert (result.returncode, result.stdout) == (0, "started\n")
    assert time.monotonic() - begun < 10
    assert gone(read_pid(job))


def start_cli(*args: str) -> subprocess.Popen[bytes]:
    """Start `python -m executor ARGS` without waiting for it."""
    return subprocess.Popen(
        [sys.executable, "-m", "executor", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def wait_for_pid(path: Path, process: subprocess.Popen[bytes]) -> int:
    """Wait (bounded) until the command behind `process` has written its pid to `path`."""
    deadline = time.monotonic() + LIMIT
    while not path.exists() or not path.read_text().endswith("\n"):
        if process.poll() is not None or time.monotonic() > deadline:
            pytest.fail("the command never wrote its pid")
        time.sleep(0.02)
    return read_pid(path)


@pytest.mark.slow
@pytest.mark.parametrize(
    "sig",
    [
        pytest.param(signal.SIGINT, id="SIGINT"),
        pytest.param(signal.SIGTERM, id="SIGTERM"),
        pytest.param(signal.SIGHUP, id="SIGHUP"),
    ],
)
def test_run_signalled_cli_leaves_no_process(
    sig: signal.Signals, tmp_path: Path, started: list[Path]
) -> None:
    """Interrupting or terminating the CLI ends the command it runs, too."""
    pid_file = tmp_path / "command.pid"
    started.append(pid_file)
    process = start_cli("run", "--", f"echo $$ > {pid_file}; exec sleep 60")
    try:
        pid = wait_for_pid(pid_file, process)
        process.send_signal(sig)
        _, stderr = process.communicate(timeout=LIMIT)
        assert process.returncode == 128 + sig
        assert b"Traceback" not in stderr
        assert gone(pid)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate(timeout=LIMIT)


# run: environment and working directory


def test_run_env_sets_variables() -> None:
    """--env NAME=VALUE sets a variable; the value may contain '='."""
    result = cli(
        "run", "--env", "GREETING=a=b", "--env", "NAME=agent", "--", 'echo "$GREETING $NAME"'
    )
    assert (result.returncode, result.stdout) == (0, "a=b agent\n")


def test_run_env_rejects_a_malformed_variable() -> None:
    """--env without '=' is a usage error that names the bad value."""
    result = cli("run", "--env", "NOEQUALS", "--", "true")
    assert result.returncode == 2
    assert "NOEQUALS" in result.stderr


def test_run_env_remove_drops_inherited_variables() -> None:
    """--env-remove drops a variable the CLI inherited, and leaves the others."""
    env = {**os.environ, "SECRET_TOKEN": "s3cret", "KEPT": "yes"}
    result = cli(
        "run", "--env-remove", "SECRET_TOKEN", "--", 'echo "${SECRET_TOKEN:-unset} $KEPT"', env=env
    )
    assert (result.returncode, result.stdout) == (0, "unset yes\n")


def test_run_env_clear_starts_empty_and_env_applies_after() -> None:
    """--env-clear drops inherited variables (HOME, PATH), and --env adds to the empty set."""
    env = {**os.environ, "INHERITED": "yes"}
    script = 'echo "${INHERITED:-unset} ${HOME:-unset} ${ONLY:-unset}"'
    result = cli("run", "--env-clear", "--env", "ONLY=1", "--", script, env=env)
    assert (result.returncode, result.stdout) == (0, "unset unset 1\n")


def test_run_workdir_sets_where_the_command_starts(tmp_path: Path) -> None:
    """--workdir runs the command in that directory."""
    (tmp_path / "marker.txt").write_text("x")
    result = cli("run", "--workdir", str(tmp_path), "--", "pwd; ls")
    assert result.returncode == 0
    where, listing = result.stdout.splitlines()
    assert os.path.samefile(where, tmp_path)
    assert listing == "marker.txt"


def test_run_relative_workdir_joins_the_current_directory(tmp_path: Path) -> None:
    """A relative --workdir is taken from the CLI's current directory."""
    (tmp_path / "sub").mkdir()
    result = cli("run", "--workdir", "sub", "--", "pwd", cwd=tmp_path)
    assert result.returncode == 0
    assert os.path.samefile(result.stdout.strip(), tmp_path / "sub")


def test_run_missing_workdir_fails_with_a_message(tmp_path: Path) -> None:
    """A --workdir that does not exist exits non-zero and names the directory."""
    missing = tmp_path / "missing"
    result = cli("run", "--workdir", str(missing), "--", "true")
    assert result.returncode != 0
    assert str(missing) in result.stderr
    assert "Traceback" not in result.stderr


# run: live streaming


@pytest.mark.slow
def test_run_streams_output_live() -> None:
    """The first line reaches the CLI's stdout while the command is still running."""
    process = subprocess.Popen(
        [sys.executable, "-m", "executor", "run", "--", "echo first; sleep 3; echo second"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert process.stdout is not None
        received = b""
        deadline = time.monotonic() + 2.5
        with selectors.DefaultSelector() as selector:
            selector.register(process.stdout, selectors.EVENT_READ)
            while b"\n" not in received and time.monotonic() < deadline:
                if selector.select(timeout=max(0.0, deadline - time.monotonic())):
                    data = os.read(process.stdout.fileno(), 4096)
                    if not data:
                        break
                    received += data
        assert received == b"first\n"
        assert process.poll() is None, "the command ended before its first line was seen"
        rest, _ = process.communicate(timeout=LIMIT)
        assert rest == b"second\n"
        assert process.returncode == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=LIMIT)


# files


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """Build a git checkout: text files, a hidden one, ignored ones and a binary one."""
    root = tmp_path / "project"
    (root / "pkg").mkdir(parents=True)
    # ripgrep applies .gitignore inside a git repository only; .ignore applies anywhere.
    subprocess.run(["git", "init", "-q", str(root)], check=True, timeout=LIMIT)
    (root / "app.py").write_text("print(1)\n")
    (root / "README.md").write_text("# hi\n")
    (root / "pkg" / "mod.py").write_text("x = 1\n")
    (root / ".hidden.py").write_text("secret = 1\n")
    (root / ".gitignore").write_text("ignored.py\n")
    (root / "ignored.py").write_text("y = 2\n")
    (root / ".ignore").write_text("scratch.md\n")
    (root / "scratch.md").write_text("draft\n")
    (root / "blob.py").write_bytes(b"\x00\x01\x02binary")
    return root


def listed(stdout: str) -> set[str]:
    """Return the paths `files` printed, normalised so `./a` and `a` compare equal."""
    return {os.path.normpath(line) for line in stdout.splitlines()}


def test_files_lists_text_files(project: Path) -> None:
    """`files DIR` lists the text files below DIR, skipping hidden, ignored and binary files."""
    result = cli("files", "project", cwd=project.parent)
    assert result.returncode == 0, result.stderr
    assert listed(result.stdout) == {"project/app.py", "project/README.md", "project/pkg/mod.py"}


def test_files_defaults_to_the_current_directory(project: Path) -> None:
    """`files` without DIR lists the current directory."""
    result = cli("files", cwd=project)
    assert result.returncode == 0, result.stderr
    assert listed(result.stdout) == {"app.py", "README.md", "pkg/mod.py"}


@pytest.mark.parametrize("ext", ["py", ".py"])
def test_files_filters_by_extension(project: Path, ext: str) -> None:
    """`--ext py` and `--ext .py` keep only Python files."""
    result = cli("files", "project", "--ext", ext, cwd=project.parent)
    assert result.returncode == 0, result.stderr
    assert listed(result.stdout) == {"project/app.py", "project/pkg/mod.py"}


def test_files_missing_directory_fails_clearly(tmp_path: Path) -> None:
    """`files` on a missing directory exits non-zero with a one-line message naming it."""
    result = cli("files", "no-such-dir", cwd=tmp_path)
    assert result.returncode != 0
    assert result.stdout == ""
    assert "no-such-dir" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("timeout", ["0", "-1", "nan", "inf", "soon"])
def test_run_rejects_a_bad_timeout(timeout: str) -> None:
    """--timeout must be a positive number: anything else is a usage error, not a traceback."""
    result = cli("run", "--timeout", timeout, "--", "true")
    assert result.returncode == 2
    assert "positive number of seconds" in result.stderr
    assert "Traceback" not in result.stderr


def test_run_rejects_a_bare_shebang() -> None:
    """A script whose #! line names no interpreter is a usage error naming the rule."""
    result = cli("run", "--", "#!")
    assert result.returncode == 2
    assert "interpreter" in result.stderr
    assert "Traceback" not in result.stderr


def test_run_into_a_closed_pipe_is_quiet() -> None:
    """`run -- yes | head -1` ends quietly: the reader went away, the command is killed."""
    result = subprocess.run(
        f"{sys.executable} -m executor run -- yes | head -1; echo status=${{PIPESTATUS[0]}}",
        shell=True,
        executable="/bin/bash",
        capture_output=True,
        text=True,
        timeout=LIMIT,
        check=False,
    )
    assert result.stdout == f"y\nstatus={128 + signal.SIGPIPE}\n"
    assert result.stderr == ""


def test_run_missing_workdir_is_an_executor_failure(tmp_path: Path) -> None:
    """A --workdir that does not exist is the executor's failure: exit 125 and a message."""
    result = cli("run", "--workdir", str(tmp_path / "missing"), "--", "true")
    assert result.returncode == 125
    assert result.stderr.endswith("No such file or directory\n")
