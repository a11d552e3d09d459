"""The command line (`python -m executor run`, `files`...), tested through processes and ptys."""

from __future__ import annotations

import fcntl
import hashlib
import os
import select
import selectors
import signal
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import psutil
import pytest
from docker_engine import BUSYBOX_IMAGE, docker, require_engine
from ssh_server import SshServer

from executor import (
    CommandOutput,
    ExecutorError,
    IdempotencyKey,
    Outcome,
    Sandbox,
    SqliteJournal,
)
from executor._cli.backends import SshTarget, ssh_target
from executor._core.proc import TREE_VARIABLE
from executor._docker.container import LABEL_MANAGED, LABEL_OWNER

# Every child gets at most this long: a hanging CLI fails the test instead of the run.
LIMIT = 30.0


def cli(
    *args: str,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    input: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run `python -m executor ARGS` to the end and capture its output; stdin is `input`."""
    return subprocess.run(
        [sys.executable, "-m", "executor", *args],
        input=input,
        stdin=subprocess.DEVNULL if input is None else None,
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
        stdin=subprocess.DEVNULL,
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
        pytest.param(signal.SIGQUIT, id="SIGQUIT"),
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
        stdin=subprocess.DEVNULL,
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
        stdin=subprocess.DEVNULL,
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


# Helpers for what follows: a CLI on a terminal, and what a CLI left running.


def left_behind(pid: int) -> set[int]:
    """Live processes the executor of the CLI with `pid` started (tagged with its pid)."""
    needle = f"{TREE_VARIABLE}={pid}:".encode()
    found = set()
    for name in os.listdir("/proc"):
        if not name.isdigit() or gone(int(name)):
            continue
        try:
            environ = Path(f"/proc/{name}/environ").read_bytes()
        except OSError:
            continue
        if any(entry.startswith(needle) for entry in environ.split(b"\0")):
            found.add(int(name))
    return found


# Makes the terminal on its stdin the controlling one of its new session, then
# becomes the CLI (same pid): the CLI runs as a shell would run it in a terminal.
_ON_TERMINAL = (
    "import fcntl, os, sys, termios; fcntl.ioctl(0, termios.TIOCSCTTY, 0); "
    "os.execv(sys.executable, [sys.executable, '-m', 'executor', *sys.argv[1:]])"
)


class Terminal:
    """`python -m executor ARGS` on a pseudo-terminal, which the test types into and reads.

    The test holds the master side, as a terminal emulator does; the CLI's
    stdin, stdout and stderr are the slave, its controlling terminal, so
    Ctrl-C typed while the terminal is in its normal mode signals the CLI.
    """

    def __init__(self, *args: str, cols: int = 100, rows: int = 30) -> None:
        self.master, self.slave = os.openpty()
        self.resize(cols, rows)
        self.settings = termios.tcgetattr(self.slave)
        self.output = b""
        self.process = subprocess.Popen(
            [sys.executable, "-c", _ON_TERMINAL, *args],
            stdin=self.slave,
            stdout=self.slave,
            stderr=self.slave,
            start_new_session=True,
        )

    def __enter__(self) -> Terminal:
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=LIMIT)
        os.close(self.master)
        os.close(self.slave)

    def resize(self, cols: int, rows: int) -> None:
        """Set the terminal's size, as a window resized (the kernel sends SIGWINCH)."""
        fcntl.ioctl(self.master, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))

    def type(self, keys: bytes) -> None:
        """Type `keys`, as a user at the terminal."""
        os.write(self.master, keys)

    def _read(self, timeout: float) -> bool:
        ready, _, _ = select.select([self.master], [], [], timeout)
        if not ready:
            return False
        try:
            self.output += os.read(self.master, 4096)
        except OSError:
            return False
        return True

    def read_for(self, seconds: float) -> None:
        """Take what the terminal shows within `seconds`."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            self._read(left)

    def expect(self, text: bytes) -> None:
        """Wait (bounded) until the terminal has shown `text`."""
        deadline = time.monotonic() + LIMIT
        while text not in self.output:
            if time.monotonic() > deadline:
                pytest.fail(f"never saw {text!r}; the terminal showed {self.output!r}")
            if not self._read(0.05) and self.process.poll() is not None:
                pytest.fail(f"the CLI ended before {text!r}; it showed {self.output!r}")

    def raw(self) -> bool:
        """Whether the terminal is out of its own mode (the CLI put it in raw mode)."""
        return bool(termios.tcgetattr(self.slave) != self.settings)

    def wait_raw(self) -> None:
        """Wait (bounded) until the CLI has put the terminal in raw mode."""
        deadline = time.monotonic() + LIMIT
        while not self.raw():
            if time.monotonic() > deadline or self.process.poll() is not None:
                pytest.fail(f"the terminal never went raw; it showed {self.output!r}")
            time.sleep(0.02)

    def wait(self) -> int:
        """Wait for the CLI's end, take the rest of its output, return its exit code."""
        code = self.process.wait(timeout=LIMIT)
        while self._read(0.05):
            pass
        return code


# run: stdin


def test_run_passes_piped_stdin_on() -> None:
    """`echo foo | run -- cat` prints foo: what is piped in reaches the command."""
    result = cli("run", "--", "cat", input="foo\nbar\n")
    assert (result.returncode, result.stdout, result.stderr) == (0, "foo\nbar\n", "")


def test_run_streams_stdin_as_it_comes() -> None:
    """A line piped in reaches the command at once, while the pipe is still open."""
    process = subprocess.Popen(
        [sys.executable, "-m", "executor", "run", "--", "read a; echo got $a; cat"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert process.stdin is not None
        assert process.stdout is not None
        process.stdin.write(b"one\n")
        process.stdin.flush()
        # The answer comes before stdin ends: nothing waited for the whole input.
        assert process.stdout.readline() == b"got one\n"
        rest, stderr = process.communicate(b"two\n", timeout=LIMIT)
        assert (process.returncode, rest, stderr) == (0, b"two\n", b"")
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=LIMIT)


def test_run_reads_stdin_from_a_file(tmp_path: Path) -> None:
    """Stdin redirected from a file (which poll cannot wait for) reaches the command whole."""
    data = tmp_path / "data.bin"
    data.write_bytes(bytes(range(256)) * 1024)
    with data.open("rb") as stdin:
        result = subprocess.run(
            [sys.executable, "-m", "executor", "run", "--", "wc -c"],
            stdin=stdin,
            capture_output=True,
            timeout=LIMIT,
            check=False,
        )
    assert (result.returncode, result.stdout.strip(), result.stderr) == (0, b"262144", b"")


def test_run_large_stdin_with_backpressure() -> None:
    """Megabytes piped through a command that reads slowly arrive complete and in order."""
    payload = "".join(f"{n:07d}\n" for n in range(300_000))
    result = cli("run", "--", "sleep 0.3; sha256sum", input=payload)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split()[0] == hashlib.sha256(payload.encode()).hexdigest()


def test_run_on_a_terminal_without_pty_reads_end_of_file() -> None:
    """With a terminal on stdin and no --pty, the command reads EOF; the terminal is left alone."""
    with Terminal("run", "--", "cat; echo done") as terminal:
        assert terminal.wait() == 0
        assert b"done" in terminal.output
        assert not terminal.raw()


# run --pty


def test_run_pty_answers_a_read_prompt() -> None:
    """`run --pty -- sh -c 'read n; echo got $n'` takes a typed line and echoes it back."""
    with Terminal("run", "--pty", "--", "sh", "-c", "echo ready; read n; echo got $n") as terminal:
        terminal.expect(b"ready")
        terminal.wait_raw()
        terminal.type(b"hello\r")
        terminal.expect(b"got hello")
        assert terminal.wait() == 0
        # The command's terminal echoed the keys once (ours, raw, did not).
        assert terminal.output.count(b"hello") == 2
        assert not terminal.raw(), "the terminal was not restored"


def test_run_pty_gives_a_terminal_of_the_window_size() -> None:
    """The command's stdin and stdout are a terminal of the user's size, resized on SIGWINCH."""
    script = "test -t 0 && test -t 1 && echo on-a-tty; while read line; do stty size; done"
    with Terminal("run", "--pty", "--", script, cols=100, rows=30) as terminal:
        terminal.expect(b"on-a-tty")
        terminal.type(b"x\r")
        terminal.expect(b"30 100")
        terminal.resize(120, 40)
        # SIGWINCH reaches the CLI in its own time: ask for the size until it is the new one.
        deadline = time.monotonic() + LIMIT
        while b"40 120" not in terminal.output and time.monotonic() < deadline:
            terminal.type(b"y\r")
            terminal.read_for(0.2)
        assert b"40 120" in terminal.output
        terminal.type(b"\x04")
        assert terminal.wait() == 0


def test_run_pty_runs_an_interactive_python() -> None:
    """`python3 -i` on --pty evaluates typed lines and ends on Ctrl-D, exiting 0."""
    with Terminal("run", "--pty", "--", sys.executable, "-i", "-q") as terminal:
        terminal.expect(b">>> ")
        terminal.type(b"6 * 7\r")
        # The next prompt first: readline takes Ctrl-D only while it reads a line.
        terminal.expect(b"42\r\n>>> ")
        terminal.type(b"\x04")
        assert terminal.wait() == 0
        assert not terminal.raw()


def test_run_pty_ctrl_c_is_a_keystroke() -> None:
    """On --pty, Ctrl-C is a key for the command's terminal, which signals it; its exit stands."""
    script = "trap 'echo caught; exit 3' INT; echo ready; while :; do sleep 0.1; done"
    with Terminal("run", "--pty", "--", script) as terminal:
        terminal.expect(b"ready")
        terminal.wait_raw()
        terminal.type(b"\x03")
        terminal.expect(b"caught")
        assert terminal.wait() == 3
        assert left_behind(terminal.process.pid) == set()


def test_run_pty_exit_code_is_the_commands() -> None:
    """`run --pty` exits with the command's exit code."""
    with Terminal("run", "--pty", "--", "exit 9") as terminal:
        assert terminal.wait() == 9
        assert not terminal.raw()


def test_run_pty_terminated_cli_restores_the_terminal() -> None:
    """SIGTERM to a `run --pty` CLI ends the command, restores the terminal and exits 143."""
    with Terminal("run", "--pty", "--", "echo ready; exec sleep 60") as terminal:
        terminal.expect(b"ready")
        terminal.wait_raw()
        terminal.process.send_signal(signal.SIGTERM)
        assert terminal.wait() == 128 + signal.SIGTERM
        assert not terminal.raw(), "the terminal was left in raw mode"
        assert b"Traceback" not in terminal.output
        assert left_behind(terminal.process.pid) == set()


def test_run_pty_refuses_a_shebang_script() -> None:
    """--pty with a #! script (whose body is the interpreter's stdin) is a usage error saying so."""
    result = cli("run", "--pty", "--", "#!/bin/sh\necho hi")
    assert result.returncode == 2
    assert "--pty cannot run a #! script" in result.stderr


# run: Ctrl-C

TRAP = "trap 'echo bye; exit 1' TERM INT; echo ready; sleep 30"


def interrupt(*args: str, signals: int = 1, pause: float = 0.3) -> tuple[int, bytes, bytes, int]:
    """Start `run ARGS`, send the CLI SIGINT `signals` times once it printed `ready`.

    Returns the exit code, stdout, stderr, and the CLI's pid.
    """
    process = subprocess.Popen(
        [sys.executable, "-m", "executor", "run", *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert process.stdout is not None
        first = process.stdout.readline()
        assert first == b"ready\n", first
        for _ in range(signals):
            process.send_signal(signal.SIGINT)
            time.sleep(pause)
        rest, stderr = process.communicate(timeout=LIMIT)
        return process.returncode, first + rest, stderr, process.pid
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=LIMIT)


def test_run_ctrl_c_keeps_what_the_command_prints_as_it_stops() -> None:
    """SIGINT to the CLI: the command's trap runs, its `bye` is printed, the CLI exits 130."""
    code, stdout, stderr, pid = interrupt("--", TRAP)
    assert (code, stdout) == (130, b"ready\nbye\n")
    assert b"Traceback" not in stderr
    assert left_behind(pid) == set()


def test_run_ctrl_c_sends_the_command_sigint_first() -> None:
    """The command gets SIGINT itself, as a shell's foreground job does, not SIGTERM."""
    script = "trap 'echo INT; exit 1' INT; trap 'echo TERM; exit 1' TERM; echo ready; sleep 30"
    code, stdout, _, _ = interrupt("--", script)
    assert (code, stdout) == (130, b"ready\nINT\n")


@pytest.mark.slow
def test_run_ctrl_c_goes_on_to_sigterm_then_sigkill() -> None:
    """A command ignoring SIGINT gets SIGTERM after the grace; one ignoring both, SIGKILL."""
    script = "trap '' INT; trap 'echo TERM; exit 1' TERM; echo ready; while :; do sleep 0.1; done"
    code, stdout, _, pid = interrupt("--kill-grace", "0.3", "--", script)
    assert (code, stdout) == (130, b"ready\nTERM\n")
    stubborn = "trap '' INT TERM; echo ready; while :; do sleep 0.1; done"
    begun = time.monotonic()
    code, stdout, _, pid = interrupt("--kill-grace", "0.3", "--", stubborn)
    assert code == 130
    assert time.monotonic() - begun < 10
    assert left_behind(pid) == set()


@pytest.mark.slow
def test_run_second_ctrl_c_hurries_the_stop() -> None:
    """A second SIGINT goes on to SIGTERM at once, without waiting out the grace."""
    script = (
        "trap 'echo INT' INT; trap 'echo TERM; exit 1' TERM; echo ready; "
        "while :; do sleep 0.1; done"
    )
    begun = time.monotonic()
    code, stdout, _, _ = interrupt("--kill-grace", "30", "--", script, signals=2, pause=0.5)
    assert code == 130
    assert b"INT\n" in stdout
    assert stdout.endswith(b"TERM\n")
    assert time.monotonic() - begun < 15


def test_run_ctrl_c_typed_at_the_terminal() -> None:
    """Ctrl-C typed at the terminal `run` (no --pty) runs on: the trap's output shows, exit 130."""
    with Terminal("run", "--", TRAP) as terminal:
        terminal.expect(b"ready")
        terminal.type(b"\x03")
        terminal.expect(b"bye")
        assert terminal.wait() == 130
        assert left_behind(terminal.process.pid) == set()


# A closed output pipe

CLOSED_PIPE = 128 + signal.SIGPIPE


def into_closed_pipe(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run `python -m executor ARGS` with stdout a pipe whose reader is already gone."""
    reader, writer = os.pipe()
    os.close(reader)
    try:
        return subprocess.run(
            [sys.executable, "-m", "executor", *args],
            stdin=subprocess.DEVNULL,
            stdout=writer,
            stderr=subprocess.PIPE,
            text=True,
            cwd=cwd,
            timeout=LIMIT,
            check=False,
        )
    finally:
        os.close(writer)


def test_files_into_head_is_quiet(tmp_path: Path) -> None:
    """`files | head -5` ends quietly: 141 (or 0 if all was written first), no traceback."""
    for n in range(2000):
        (tmp_path / f"a-rather-long-file-name-to-fill-the-pipe-{n:05d}.py").write_text("x\n")
    result = subprocess.run(
        f"{sys.executable} -m executor files --ext py | head -5; echo status=${{PIPESTATUS[0]}}",
        shell=True,
        executable="/bin/bash",
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=LIMIT,
        check=False,
    )
    lines = result.stdout.splitlines()
    assert len(lines) == 6
    assert lines[-1] in ("status=141", "status=0")
    assert result.stderr == ""


@pytest.mark.slow
def test_every_subcommand_into_a_closed_pipe_exits_141(project: Path, tmp_path: Path) -> None:
    """`run`, `files`, `journal list` and --help into a closed pipe exit 141 and say nothing."""
    journal = tmp_path / "journal.sqlite3"
    anyio.run(_one_journal_entry, journal)
    for args in (
        ("run", "--", "echo hi"),
        ("files", str(project)),
        ("journal", "--path", str(journal), "list"),
        ("run", "--help"),
        ("journal", "prune", "--help"),
    ):
        result = into_closed_pipe(*args)
        assert (result.returncode, result.stderr) == (CLOSED_PIPE, ""), args


async def _one_journal_entry(path: Path) -> None:
    """Write a journal with one finished run in it."""
    async with SqliteJournal(path) as journal:
        claim = await journal.claim(IdempotencyKey.new(), kind="command", name="x", fingerprint="f")
        await journal.complete(claim, Outcome.of_output(CommandOutput(chunks=(), exit_code=0)))


# --help


@pytest.mark.parametrize(
    "words",
    [
        [],
        ["run"],
        ["files"],
        ["journal"],
        ["journal", "list"],
        ["journal", "show"],
        ["journal", "prune"],
        ["docker"],
        ["docker", "gc"],
    ],
    ids=lambda words: " ".join(words) or "main",
)
def test_every_subcommand_has_help_with_an_example(words: list[str]) -> None:
    """`--help` of each subcommand exits 0 and shows an example of it."""
    result = cli(*words, "--help")
    assert result.returncode == 0, result.stderr
    examples = result.stdout.partition("examples:\n")[2]
    assert f"python -m executor {' '.join(words)}".strip() in examples


# Backend flags


def test_ssh_key_that_does_not_exist_is_named() -> None:
    """A missing --ssh-key file is a usage error naming the option and the file, not a connect."""
    missing = "/nonexistent/executor-test/id_ed25519"
    result = cli("run", "--ssh", "agent@host.invalid", "--ssh-key", missing, "--", "true")
    assert result.returncode == 2
    assert f"--ssh-key {missing}: No such file or directory" in result.stderr
    assert "Traceback" not in result.stderr


def test_known_hosts_that_does_not_exist_is_named() -> None:
    """A missing --known-hosts file is a usage error naming the option and the file."""
    result = cli("files", "--ssh", "host.invalid", "--known-hosts", "/nonexistent/kh")
    assert result.returncode == 2
    assert "--known-hosts /nonexistent/kh: No such file or directory" in result.stderr


def test_ssh_options_need_ssh() -> None:
    """--ssh-key without --ssh is a usage error saying what it needs."""
    result = cli("run", "--ssh-key", "/nonexistent/key", "--", "true")
    assert result.returncode == 2
    assert "--ssh-key needs --ssh" in result.stderr


@pytest.mark.parametrize(
    "target", ["@host", "user@", "host:", "host:0", "host:70000", "host:ssh", "[::1", "[::1]x"]
)
def test_bad_ssh_targets_are_usage_errors(target: str) -> None:
    """A malformed --ssh [USER@]HOST[:PORT] is a usage error that quotes it."""
    result = cli("run", "--ssh", target, "--", "true")
    assert result.returncode == 2
    assert "argument --ssh" in result.stderr
    assert repr(target) in result.stderr


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("host", SshTarget("host")),
        ("me@host", SshTarget("host", "me")),
        ("me@host:2222", SshTarget("host", "me", 2222)),
        ("10.0.0.1:22", SshTarget("10.0.0.1", None, 22)),
        ("[::1]:2200", SshTarget("::1", None, 2200)),
        ("::1", SshTarget("::1")),
        ("a@b@host", SshTarget("host", "a@b")),
    ],
)
def test_ssh_target_parses(text: str, expected: SshTarget) -> None:
    """`[USER@]HOST[:PORT]` gives user, host and port; IPv6 with a port takes brackets."""
    assert ssh_target(text) == expected


def test_backend_flags_exclude_each_other() -> None:
    """--sandbox and --docker together are a usage error."""
    result = cli("run", "--sandbox", "--docker", "img", "--", "true")
    assert result.returncode == 2
    assert "not allowed with" in result.stderr


def _sandbox_or_skip(backend: str) -> None:
    """Skip (fail under EXECUTOR_REQUIRE_SANDBOX) where `backend` cannot run here."""
    try:
        Sandbox(backend=backend).choose_backend()  # type: ignore[arg-type]
    except ExecutorError as error:
        if os.environ.get("EXECUTOR_REQUIRE_SANDBOX", "") not in ("", "0"):
            pytest.fail(f"EXECUTOR_REQUIRE_SANDBOX is set, but: {error}")
        pytest.skip(str(error))


@pytest.mark.parametrize("backend", ["bubblewrap", "landlock"])
def test_run_sandbox_writes_only_in_the_workdir(backend: str, tmp_path: Path) -> None:
    """`run --sandbox BACKEND` writes in the workdir but not beside it, and still takes stdin."""
    _sandbox_or_skip(backend)
    work = tmp_path / "work"
    work.mkdir()
    script = "cat; echo in > inside.txt; echo out > ../outside.txt 2>/dev/null; echo done"
    result = cli("run", "--sandbox", backend, "--workdir", str(work), "--", script, input="piped\n")
    assert (result.returncode, result.stdout) == (0, "piped\ndone\n"), result.stderr
    assert (work / "inside.txt").read_text() == "in\n"
    assert not (tmp_path / "outside.txt").exists()


def test_run_sandbox_defaults_to_auto(tmp_path: Path) -> None:
    """A bare --sandbox picks a backend itself and keeps the host read-only."""
    _sandbox_or_skip("auto")
    result = cli("run", "--workdir", str(tmp_path), "--sandbox", "--", "touch /etc/executor-cli-x")
    assert result.returncode != 0
    assert not Path("/etc/executor-cli-x").exists()


def test_run_pty_in_a_sandbox() -> None:
    """--pty works under --sandbox too: a typed line reaches the sandboxed command."""
    _sandbox_or_skip("auto")
    with Terminal("run", "--sandbox", "--pty", "--", "echo ready; read n; echo got $n") as terminal:
        terminal.expect(b"ready")
        terminal.wait_raw()
        terminal.type(b"boxed\r")
        terminal.expect(b"got boxed")
        assert terminal.wait() == 0


# --docker: the engine DOCKER_HOST names, with the test images (see docker_engine.py).


def docker_left_by(pid: int) -> list[str]:
    """Containers labelled as made by the CLI process `pid` that still exist."""
    listing = docker(
        "ps",
        "-a",
        "--filter",
        f"label={LABEL_MANAGED}",
        "--format",
        f'{{{{.Label "{LABEL_OWNER}"}}}}',
    )
    return [label for label in listing.split() if label.split(":")[1:2] == [str(pid)]]


def test_run_docker_streams_stdin_and_exit_code() -> None:
    """`run --docker IMAGE` runs in a new container: stdin in, output out, its exit code."""
    require_engine()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "executor",
            "run",
            "--docker",
            BUSYBOX_IMAGE,
            "--",
            "cat; pwd; exit 3",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        stdout, stderr = process.communicate(b"piped\n", timeout=LIMIT)
        assert (process.returncode, stdout) == (3, b"piped\n/workspace\n"), stderr
        assert docker_left_by(process.pid) == []
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=LIMIT)


def test_run_docker_has_no_network() -> None:
    """A --docker container has network none, as DockerExecutor's default."""
    require_engine()
    result = cli("run", "--docker", BUSYBOX_IMAGE, "--", "ls /sys/class/net")
    assert (result.returncode, result.stdout.split()) == (0, ["lo"]), result.stderr


def test_run_docker_pty_and_ctrl_c() -> None:
    """--pty in a container takes typed lines; Ctrl-C on the CLI keeps the trap's output."""
    require_engine()
    with Terminal(
        "run", "--docker", BUSYBOX_IMAGE, "--pty", "--", "echo ready; read n; echo got $n"
    ) as terminal:
        terminal.expect(b"ready")
        terminal.wait_raw()
        terminal.type(b"contained\r")
        terminal.expect(b"got contained")
        assert terminal.wait() == 0
    code, stdout, _, pid = interrupt("--docker", BUSYBOX_IMAGE, "--", TRAP)
    assert (code, stdout) == (130, b"ready\nbye\n")
    assert docker_left_by(pid) == []


def test_run_docker_missing_image_is_named() -> None:
    """An image the engine does not have fails with 125 and a message naming it."""
    require_engine()
    result = cli("run", "--docker", "executor-test/no-such-image:1", "--", "true")
    assert result.returncode == 125
    assert "executor-test/no-such-image:1" in result.stderr


def test_run_docker_unreachable_engine_is_named() -> None:
    """An engine that does not answer fails with 125 and a message naming its address."""
    env = {**os.environ, "DOCKER_HOST": "unix:///nonexistent/docker.sock"}
    result = cli("run", "--docker", "img", "--", "true", env=env)
    assert result.returncode == 125
    assert "unix:///nonexistent/docker.sock" in result.stderr
    assert "Traceback" not in result.stderr


def test_files_in_docker() -> None:
    """`files --docker IMAGE DIR` lists the text files in a new container of IMAGE."""
    require_engine()
    result = cli("files", "--docker", BUSYBOX_IMAGE, "/etc")
    assert result.returncode == 0, result.stderr
    assert "/etc/passwd" in result.stdout.splitlines()


# --ssh: a private sshd on 127.0.0.1 (see ssh_server.py).


def ssh_flags(server: SshServer) -> list[str]:
    """The flags that reach the test server."""
    return [
        "--ssh",
        f"{server.user}@{server.host}:{server.port}",
        "--ssh-key",
        server.client_key,
        "--known-hosts",
        server.known_hosts,
    ]


def test_run_ssh_streams_stdin_and_exit_code(ssh_server: SshServer) -> None:
    """`run --ssh` runs on the remote host: stdin in, output out, the exit code."""
    result = cli("run", *ssh_flags(ssh_server), "--", "cat; whoami; exit 4", input="piped\n")
    assert (result.returncode, result.stdout) == (4, f"piped\n{ssh_server.user}\n"), result.stderr


def test_run_ssh_pty_and_ctrl_c(ssh_server: SshServer) -> None:
    """--pty over SSH takes typed lines; Ctrl-C on the CLI keeps the remote trap's output."""
    with Terminal(
        "run", *ssh_flags(ssh_server), "--pty", "--", "echo ready; read n; echo got $n"
    ) as terminal:
        terminal.expect(b"ready")
        terminal.wait_raw()
        terminal.type(b"remote\r")
        terminal.expect(b"got remote")
        assert terminal.wait() == 0
    code, stdout, _, _ = interrupt(*ssh_flags(ssh_server), "--", TRAP)
    assert (code, stdout) == (130, b"ready\nbye\n")


def test_run_ssh_unknown_host_key_is_refused(ssh_server: SshServer, tmp_path: Path) -> None:
    """A known_hosts without the server's key refuses the login: 125, naming its fingerprint."""
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    flags = ssh_flags(ssh_server)
    flags[-1] = str(empty)
    result = cli("run", *flags, "--", "true")
    assert result.returncode == 125
    assert "SHA256:" in result.stderr
    assert "Traceback" not in result.stderr


def test_files_over_ssh(ssh_server: SshServer) -> None:
    """`files --ssh ... DIR --ext py` lists the remote folder's Python files."""
    folder = Path(ssh_server.workdir())
    (folder / "app.py").write_text("print(1)\n")
    (folder / "notes.md").write_text("# notes\n")
    result = cli("files", *ssh_flags(ssh_server), str(folder), "--ext", "py")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [str(folder / "app.py")]
