r"""`FramedShell`, the package's `PersistentShell`: one long-lived shell whose state carries on.

```python
async with ex.shell() as sh:
    await sh.run("cd src && export MODE=test && source .venv/bin/activate")
    output = await sh.run("pytest -q", timeout=600)
    job = await sh.start_job("python -m http.server 8000")
```

The shell is a session of the executor (`ToolExecutor.start`), so it runs
wherever the executor runs processes: locally, in a sandbox, in a container,
over SSH. It is `bash` (non-interactive, no rc files, aliases expanded), or
`sh` where there is no bash.

How a command is framed. Each `run` writes one line to the shell's stdin:
the script as a single-quoted word, run at the top level of the shell
(bash sources it from a here-string; sh evals it in a function, sh having
no local variables) with stdin from `/dev/null` (or the given input),
followed by an end marker carrying a random token made for that command
alone. The marker goes to copies of the shell's own stdout and stderr,
made once on descriptors of their own (60 and 61; 7 and 8 under `sh`), and
stdout and stderr are put back from those copies after every command, so a
command that closes or redirects its output (`exec >&-`, `exec >log`)
cannot break the next one. The reader looks for the marker in the byte
stream, not in lines: output without a trailing newline, NULs or binary
data end exactly where the command's output ended, and a command that
prints something marker-like cannot end its own frame, since it cannot
know the token. Nothing scrapes a prompt. What a background process prints
between commands is read as the start of the next command's output.

How a command is interrupted (a timeout, or a cancelled `run`). The shell
shares its process group with the commands it runs, so SIGINT goes to the
group: the command's processes die of it as at a terminal; the shell traps
it and drops what is left of the command (bash: the trap sets a DEBUG trap
that returns from the sourced command at its next step; sh: the trap
returns from the function), so the shell is back within a moment with its
state. If the command is still running after the executor's kill grace,
SIGTERM follows; the shell's own TERM trap ignores a TERM that follows its
INT (a plain `kill $$` still kills it). Still running after another grace
(a child that ignores both, or left the group), every process below the
shell gets SIGKILL, the shell none (`ProcessSession.kill_descendants` with
the shell's `$$`): they are stopped first, and looked for until no new one
comes, so none forks past the kill. The backend finds them where it sees
the shell: locally from this process (in a sandbox, below the command's
init, by the shell's number in its PID namespace), in a container or over
SSH by a script run there (`executor._core.treekill.BELOW_SCRIPT`), on Ray
by the node's executor. What the shell put in the background (`cmd &`)
is below it too, and goes with the command. The shell, back from its wait,
skips the rest of the command and keeps its state: the run raises
`TimedOut` about two graces after the timeout. Only a shell that is still
not back a grace later is wedged itself (a loop of builtins, run in the
shell, that ignores INT and TERM), or a backend could not reach below it
(the Docker helper's processes, which no session uses): then the whole
session is killed, shell included, and the next `run` starts a fresh shell
and says its state was lost (`ShellOutput.state_lost`). A command that
ends the shell itself (`exit 3`, `kill $$`, `exec true`) raises
`ShellExited`; the next `run` starts a fresh shell the same way.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import math
import re
import secrets
import shlex
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Final, Literal, Self, TypeAlias

import anyio
import attrs
from anyio.abc import TaskGroup, TaskStatus

from executor._core.base import (
    DEFAULT_OUTPUT_LIMIT,
    LoadedFile,
    PersistentShell,
    ToolExecutor,
    WrappedExecutor,
    call_sink,
    failure_message,
)
from executor._core.cleanup import run_to_completion
from executor._core.commands import Command, Exec, Shell, StrPath, Timeout, timeout_seconds
from executor._core.errors import CommandError, ExecutorError, NonZeroExit, ShellExited, TimedOut
from executor._core.jobs import Job, JobStatus
from executor._core.output import (
    Chunk,
    CommandOutput,
    OutputBuffer,
    ShellOutput,
    Sink,
    Stderr,
    Stdout,
)
from executor._core.readonly import read_only_commands, running_read_only
from executor._core.session import READER_KEPT
from executor._core.stdin import Bytes, Signal, UnixSignal
from executor._shells.jobs import ShellJob

if TYPE_CHECKING:
    from executor._core.session import ProcessSession

Flavour: TypeAlias = Literal["bash", "sh"]

# Markers are \x1e (record separator), a letter, and a per-command random token.
_SEP: Final = b"\x1e"
# Seconds a fresh shell has to answer its setup before it counts as wedged.
_START_TIMEOUT: Final = 30.0
# An `export -p` line of a variable by which an executor finds a command's
# tree (EXECUTOR_PROCESS_TREE, EXECUTOR_DOCKER_TREE). A job that exported
# the shell's would lose its own: over SSH, where a kill finds the tree by
# its tag, the kill found nothing and waited for the job to end by itself.
_TREE_TAG: Final = re.compile(r"(?:declare -\S+|export) EXECUTOR_[A-Z]+_TREE(?:=|$)")
# Ended jobs a shell remembers once their output has all been read (see `jobs()`).
ENDED_JOBS_KEPT: Final = 200
# The timeout of the shell's own session, and of a job given none: ten years.
# `None` would leave them to the executor's `default_timeout`, which is meant
# for one command, not for a shell that runs many, nor for a server.
_NO_TIMEOUT: Final = 10 * 365 * 86400.0

_LAUNCH: Final = "if command -v bash >/dev/null 2>&1; then exec bash {bash}; fi; exec sh {sh}"

# What every shell defines once: the interrupt traps, and the function that
# prints the end markers. `__ex_i` is set while the rest of an interrupted
# command is skipped; `__ex_t` from an interrupt until the next command
# starts, so a TERM sent after the INT is ours and spares the shell; `__ex_z`
# while the markers are printed, when an INT (sent as the command ended) must
# not cut them off.
_TERM_TRAP: Final = "trap 'if [ -z \"$__ex_t\" ]; then trap - TERM; kill -TERM $$; fi' TERM\n"

# A command's line starts by forgetting the last interrupt, unless one came
# already (the INT for this command may land before the shell reads its line).
_BEGIN: Final = '__ex_b() { [ -n "$__ex_i" ] || __ex_t=; }\n'

# What a line starts with after an interrupt: an INT that landed after the
# interrupted command had ended is forgotten before the next command.
_RESET: Final[dict[Flavour, str]] = {
    "bash": "__ex_i= __ex_t=;trap - DEBUG;",
    "sh": "__ex_i= __ex_t= __ex_in=;",
}

_SETUP: Final[dict[Flavour, str]] = {
    # bash: `builtin`/`command`, so that a function a command defines (printf,
    # exec) cannot stand in for ours. The command is sourced from a here-string
    # (at the top level: in a function, `declare` would make its variables
    # local). An interrupt sets a DEBUG trap that, under extdebug, returns
    # from the sourced command at its next simple command (a loop of builtins
    # too); `__ex_e` removes it. Only then: a DEBUG trap costs every command.
    "bash": (
        "exec 60>&1 61>&2\n"
        "shopt -s expand_aliases extdebug\n"
        "__ex_i= __ex_t= __ex_z= __ex_s=0\n"
        'trap \'[ -n "$__ex_z" ] || { __ex_i=1 __ex_t=1; '
        "trap '\\''[[ -z $__ex_i || $BASH_COMMAND == __ex_* ]] || return 2'\\'' DEBUG; }' INT\n"
        + _TERM_TRAP
        + _BEGIN
        + '__ex_e() { __ex_z=1; [ -z "$__ex_t" ] || trap - DEBUG; command exec 1>&60 2>&61; '
        'builtin printf \'\\036E%s %s\\n\' "$1" "$__ex_s"; '
        "builtin printf '\\036E%s\\n' \"$1\" >&2; __ex_z=; }\n"
    ),
    # sh has no DEBUG trap, but neither has it local variables: the command
    # runs in a function (`__ex_r`), and the INT trap returns from it, which
    # ends what is left of the command (a loop of builtins too).
    "sh": (
        "exec 7>&1 8>&2\n"
        "__ex_i= __ex_t= __ex_z= __ex_s=0 __ex_in=\n"
        'trap \'[ -n "$__ex_z" ] || { __ex_i=1 __ex_t=1; '
        'if [ -n "$__ex_in" ]; then __ex_in=; return 130; fi; }\' INT\n'
        + _TERM_TRAP
        + _BEGIN
        + '__ex_r() { [ -z "$__ex_i" ] || return 130; eval "$__ex_c"; }\n'
        "__ex_e() { __ex_z=1; command exec 1>&7 2>&8; "
        'command printf \'\\036E%s %s\\n\' "$1" "$__ex_s"; '
        "command printf '\\036E%s\\n' \"$1\" >&2; __ex_z=; }\n"
    ),
}

# What a job carries over from the shell: the working directory, exported
# variables, functions and aliases (NUL-separated: none of them holds a NUL).
_CAPTURE: Final[dict[Flavour, str]] = {
    "bash": "builtin printf '%s\\000' \"$PWD\"; export -p; builtin printf '\\000'; "
    "declare -f; builtin printf '\\000'; alias -p",
    "sh": "printf '%s\\000' \"$PWD\"; export -p",
}


def _quote(text: str) -> str:
    """`text` as one single-quoted shell word (newlines and all)."""
    return "'" + text.replace("'", "'\\''") + "'"


def _escape_input(data: bytes) -> str:
    """`data` spelt for `printf '%b'`, inside single quotes: every byte comes back exactly."""
    parts: list[str] = []
    for byte in data:
        if 0x20 <= byte < 0x7F and byte not in (0x5C, 0x27):  # not \ nor '
            parts.append(chr(byte))
        else:
            parts.append(f"\\0{byte:03o}")
    return "".join(parts)


def _script_of(cmd: Command) -> str:
    """The text a shell runs for `cmd`, with a wrapper's own directory or variables applied."""
    match cmd:
        case Shell():
            script = cmd.script
        case Exec():
            script = shlex.join(cmd.argv)
        case _:
            raise ExecutorError(f"a shell runs scripts, not {type(cmd).__name__} commands")
    if cmd.current_dir is None and not cmd.env:
        return script
    # A directory or variables set on the command itself (by a wrapper) are
    # that command's alone: a subshell, so the shell's own state is untouched.
    steps = []
    if cmd.current_dir is not None:
        steps.append(f"cd -- {_quote(cmd.current_dir)} || exit")
    steps.extend(f"export {name}={_quote(value)}" for name, value in cmd.env.items())
    steps.append(f"eval {_quote(script)}")
    return "(\n" + "\n".join(steps) + "\n)"


class _Frame:
    """Finds the end of one command's output, on both streams, in the byte stream."""

    def __init__(self, token: str) -> None:
        self.end = _SEP + b"E" + token.encode()
        # Per stream: bytes held back (they may be the start of the marker),
        # and whether the end was seen.
        self._pending = {Stdout: b"", Stderr: b""}
        self._ended = {Stdout: False, Stderr: False}
        self.status: int | None = None

    @property
    def done(self) -> bool:
        """Whether both streams have reached the end marker."""
        return self._ended[Stdout] and self._ended[Stderr]

    def feed(self, chunk: Chunk) -> bytes:
        """Take a chunk of the shell's output; return the command's bytes in it that are sure."""
        kind = type(chunk)
        if self._ended[kind]:
            return b""
        data = self._pending[kind] + chunk.data if self._pending[kind] else chunk.data
        at = data.find(self.end)
        if at >= 0:
            rest = data[at + len(self.end) :]
            if kind is Stdout:
                line_end = rest.find(b"\n")
                if line_end < 0:
                    # The status has not all come yet: wait for the rest of the line.
                    self._pending[kind] = data[at:]
                    return data[:at]
                self.status = int(rest[:line_end].strip() or b"0")
            self._ended[kind] = True
            self._pending[kind] = b""
            return data[:at]
        keep = _marker_prefix(data, self.end)
        self._pending[kind] = data[len(data) - keep :] if keep else b""
        return data[: len(data) - keep] if keep else data


def _marker_prefix(data: bytes, marker: bytes) -> int:
    """How many bytes at the end of `data` could be the start of `marker` (to hold back)."""
    start = max(0, len(data) - len(marker) + 1)
    while True:
        at = data.find(marker[:1], start)
        if at < 0:
            return 0
        if marker.startswith(data[at:]):
            return len(data) - at
        start = at + 1


class _Process:
    """One shell process: its session, kept open by a task of the shell's task group."""

    def __init__(self, session: ProcessSession) -> None:
        self.session = session
        self.flavour: Flavour = "sh"
        self.pid: int | None = None
        self.dead = False
        self.exit: CommandOutput | None = None
        # Why the shell's run failed where the run itself failed (its
        # connection or engine lost), not the shell: what ShellExited names.
        self.failure: ExecutorError | None = None
        self.early: list[Chunk] = []
        # Whether an INT was sent for the last command (see `_RESET`).
        self.interrupted = False
        self._stop = anyio.Event()
        self._left = anyio.Event()

    async def keep(self, *, task_status: TaskStatus[None]) -> None:
        """Enter the session, hold it until told to stop, then leave it (killing what is left)."""
        try:
            async with self.session:
                task_status.started()
                await self._stop.wait()
        except Exception:
            # Leaving may report the shell's own failure (its exit code): the
            # run that saw it end has already read that from `finalize`.
            if not self.dead:
                raise
        finally:
            self.dead = True
            self._left.set()

    async def stop(self) -> None:
        """Kill the shell and everything it left, and wait until that is done."""
        self.dead = True
        self._stop.set()
        await self._left.wait()

    def alive(self) -> bool:
        """Whether the shell's output goes on, as far as can be seen without waiting.

        What it printed between commands (a background child's output) is
        kept for the next command, as a terminal would show it there.
        """
        # Not `next_chunk()` under a zero timeout: that costs a trip through
        # the event loop on every command, a fifth of a `true`'s time.
        receive = self.session._receive
        while True:
            try:
                item = receive.receive_nowait()
            except anyio.WouldBlock:
                return True
            except (anyio.EndOfStream, anyio.ClosedResourceError):
                self.dead = True
                return False
            self.early.append(item.chunk)

    async def write(self, text: str) -> None:
        await self.session.send_stdin(Bytes(text.encode()))

    async def signal(self, signal: UnixSignal) -> bool:
        self.interrupted = True
        if not self.dead:
            with contextlib.suppress(CommandError):
                await self.session.send_stdin(Signal(signal))
        return True

    async def kill_below(self) -> bool:
        """SIGKILL what runs below the shell (its command), sparing it; `False` where it cannot."""
        self.interrupted = True
        if self.dead or self.pid is None:
            return False
        try:
            await self.session.kill_descendants(self.pid)
        except CommandError:
            return False  # a backend that cannot: the shell goes with its command
        return True

    async def ended(self) -> CommandOutput:
        """The shell's own end, once its output has ended: exit code, signal."""
        if self.exit is None:
            self.dead = True
            try:
                self.exit = await self.session.finalize()
            except CommandError as error:
                self.exit = error.output
                if isinstance(error, ExecutorError):
                    self.failure = error
        return self.exit


class FramedShell(PersistentShell):
    """The package's persistent shell: `ex.shell()` builds one; `async with` it, then `run` in it.

    Entering starts the shell (raising as `exec_cmd` would if it cannot
    start); leaving, or `aclose()`, kills it and every job, and waits for
    them. A shell is entered and left in the same task.

    One command runs at a time: a second `run` (or `start_job`, which reads
    the shell's state) waits for the one running, first come first served;
    its timeout counts from when it starts. Jobs run beside the shell and
    each other. See the module docstring for how commands are framed and
    interrupted.
    """

    def __init__(
        self,
        executor: ToolExecutor,
        *,
        login: bool = False,
        cwd: StrPath | None = None,
        env: Mapping[str, str] | None = None,
        default_timeout: float | None = None,
        kill_grace: float = 1.0,
        output_buffer: Callable[[], OutputBuffer] | None = None,
        job_buffer: int | None = None,
    ) -> None:
        """Set up a shell on `executor`; nothing starts before it is entered.

        Args:
            executor: Where the shell runs: any executor with sessions.
            login: Run a login shell (`bash --login`, `sh -l`): `/etc/profile`
                and the profile files are read.
            cwd: Where the shell starts (relative: joined onto the executor's
                working directory).
            env: Variables set in the shell at its start.
            default_timeout: The timeout of a `run` that gives none.
            kill_grace: Seconds between SIGINT, SIGTERM and SIGKILL when a
                command is interrupted.
            output_buffer: Makes the buffer for one command's output (its cap).
            job_buffer: Bytes of unread output a job keeps (head and tail).

        """
        if not isinstance(login, bool):
            raise TypeError(f"login must be a bool, got {login!r}")
        self._executor = executor
        self._login = login
        start = Command.exec(["/bin/sh", "-c", self._launch()]).with_timeout(_NO_TIMEOUT)
        if cwd is not None:
            start = start.with_current_dir(cwd)
        if env:
            start = start.with_env(env)
        self._start_cmd: Command = start
        self.default_timeout = timeout_seconds(default_timeout)
        self.kill_grace = kill_grace
        self._output_buffer = output_buffer or (lambda: OutputBuffer(DEFAULT_OUTPUT_LIMIT))
        self._job_buffer = job_buffer if job_buffer is not None else 1 << 20
        # A shell made under `ReadOnly` starts every process read-only.
        self._read_only = running_read_only()
        self._route_run: Callable[[Command, Sink | None], Awaitable[CommandOutput]] = (
            self._run_command
        )
        self._route_job: Callable[[Command], Awaitable[ProcessSession]] = self._job_session
        # fast_acquire: a free lock costs no trip through the event loop.
        self._lock = anyio.Lock(fast_acquire=True)
        self._process: _Process | None = None
        self._starts = 0
        self._lost = False
        self._state_lost = False
        self._jobs: dict[str, ShellJob] = {}
        self._next_job = 1
        self._stack = contextlib.AsyncExitStack()
        self._tasks: TaskGroup | None = None
        self._entered = False
        self._closed = False

    def __repr__(self) -> str:
        return f"PersistentShell({self._executor!r}, login={self._login})"

    def _launch(self) -> str:
        if self._login:
            return _LAUNCH.format(bash="--login", sh="-l")
        return _LAUNCH.format(bash="--noprofile --norc", sh="")

    # Set up by the wrappers before the shell is entered.

    def wrap(self, wrapper: WrappedExecutor) -> None:
        """Route every `run` and `start_job` through `wrapper`'s own checks and records.

        A wrapper's `shell()` calls this on the shell of the executor it
        wraps: each command then goes through a copy of `wrapper` whose inner
        executor is this shell, by the wrapper's `exec_cmd_streaming` (a run)
        or `start` (a job), as a command of `exec_cmd` would.
        """
        if self._entered:
            raise ExecutorError("a shell is wrapped before it is entered")
        route = copy.copy(wrapper)
        route.inner = _ShellRoute(self._route_run, self._route_job, wrapper.inner)

        async def run(cmd: Command, sink: Sink | None) -> CommandOutput:
            if sink is None:
                return await route.exec_cmd(cmd)
            return await route.exec_cmd_streaming(cmd, sink)

        self._route_run = run
        self._route_job = route.start

    def change_start(self, change: Callable[[Command], Command]) -> None:
        """Change the command that starts the shell process (`Secrets` removes credentials)."""
        if self._entered:
            raise ExecutorError("a shell's start is changed before it is entered")
        self._start_cmd = change(self._start_cmd)

    # The lifecycle.

    async def __aenter__(self) -> Self:
        if self._entered:
            raise ExecutorError("a shell is entered once")
        self._entered = True
        self._tasks = await self._stack.enter_async_context(anyio.create_task_group())
        try:
            await self._open()
        except BaseException:
            await self.aclose()
            raise
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Kill every job and the shell, then wait till they are gone; a second call is harmless."""
        if self._closed:
            return
        self._closed = True

        async def shut_down() -> None:
            for job in list(self._jobs.values()):
                job.cancel()
            process, self._process = self._process, None
            if process is not None:
                await process.stop()
            for job in list(self._jobs.values()):
                await job.wait()

        try:
            await run_to_completion(shut_down)
        finally:
            # The task group is left in the task that entered it; its tasks have ended.
            await self._stack.aclose()

    @property
    def pid(self) -> int | None:
        """The pid of the running shell on its host (as `$$` says), if one runs."""
        process = self._process
        return None if process is None or process.dead else process.pid

    @property
    def state_lost(self) -> bool:
        """Whether the last `run` ran in a fresh shell that replaced a lost one."""
        return self._state_lost

    @property
    def restarts(self) -> int:
        """How many times a fresh shell replaced one that had ended."""
        return max(0, self._starts - 1)

    def _check_open(self) -> None:
        if not self._entered:
            raise ExecutorError("enter the shell first: async with ex.shell() as sh")
        if self._closed:
            raise ExecutorError("the shell is closed")

    async def _open(self) -> _Process:
        """Start a shell process and set it up; raises as `exec_cmd` would when it cannot."""
        assert self._tasks is not None
        start = self._start_cmd
        if self._read_only:
            with read_only_commands():
                session = await self._executor.start(start)
        else:
            session = await self._executor.start(start)
        # The shell's own output is its frames, read as they come: kept once, not twice.
        session.keep_output(READER_KEPT)
        process = _Process(session)
        await self._tasks.start(process.keep)
        self._process = process
        self._starts += 1
        token = secrets.token_hex(8)
        probe = (
            f"__ex_k={token}; "
            'if [ -n "$BASH_VERSION" ]; then __ex_f=bash; else __ex_f=sh; fi; '
            'printf \'\\036R%s %s %s\\036\\n\' "$__ex_k" "$__ex_f" "$$"\n'
        )
        try:
            with anyio.fail_after(_START_TIMEOUT):
                await process.write(probe)
                ready = _SEP + b"R" + token.encode() + b" "
                seen = b""
                while (at := seen.find(ready)) < 0 or seen.find(_SEP, at + len(ready)) < 0:
                    item = await session.next_chunk()
                    if item is None:
                        ended = await process.ended()
                        raise ExecutorError(
                            f"the shell ended as it started ({failure_message(ended)})", ended
                        )
                    if isinstance(item.chunk, Stdout):
                        seen = seen[-4096:] + item.chunk.data
                fields = seen[at + len(ready) : seen.find(_SEP, at + len(ready))].split()
                process.flavour = "bash" if fields[0] == b"bash" else "sh"
                process.pid = int(fields[1])
                await process.write(_SETUP[process.flavour])
                await self._frame(process, "true", None, None, None)
        except BaseException:
            await run_to_completion(process.stop)
            raise
        return process

    async def _ready(self) -> tuple[_Process, bool]:
        """The running shell, or a fresh one if it had ended (then `True`: state was lost)."""
        process = self._process
        if process is not None and not process.dead and process.alive():
            return process, False
        if process is not None:
            await run_to_completion(process.stop)
            self._process = None
        return await self._open(), True

    # Commands.

    async def run(
        self,
        command: str,
        *,
        timeout: Timeout = None,
        stdin: str | bytes | None = None,
        sink: Sink | None = None,
        idle_timeout: Timeout = None,
    ) -> ShellOutput:
        """Run `command` in the shell (see `PersistentShell.run`, and above for timeouts)."""
        self._check_open()
        cmd = (
            Command.shell(command)
            .with_timeout(timeout)
            .with_idle_timeout(idle_timeout)
            .with_stdin(stdin)
        )
        self._lost = False
        try:
            output = await self._route_run(cmd, sink)
        except CommandError as error:
            error.output = self._shell_output(error.output)
            raise
        return self._shell_output(output)

    def _shell_output(self, output: CommandOutput) -> ShellOutput:
        """`output` as a `ShellOutput` saying whether state was lost (a wrapper may rebuild it)."""
        if isinstance(output, ShellOutput) and output.state_lost == self._lost:
            return output
        if isinstance(output, ShellOutput):
            return attrs.evolve(output, state_lost=self._lost)
        return _shell_output(output, self._lost)

    async def _run_command(self, cmd: Command, sink: Sink | None) -> CommandOutput:
        """Run a checked command in the shell: the end of every wrapper's route."""
        self._check_open()
        script = _script_of(cmd)
        timeout = cmd.timeout if cmd.timeout is not None else self.default_timeout
        async with self._lock:
            process, lost = await self._ready()
            self._lost = self._state_lost = lost
            return await self._frame(
                process, script, cmd.stdin, timeout, sink, lost=lost, idle=cmd.idle_timeout
            )

    def _line(self, process: _Process, token: str, script: str, stdin: bytes | None) -> str:
        """The line that runs `script` framed by `token`'s markers."""
        word = _quote(script)
        reset = ""
        if process.interrupted:
            process.interrupted = False
            reset = _RESET[process.flavour]
        if process.flavour == "bash":
            source = (
                "</dev/null"
                if stdin is None
                else f"< <(builtin printf '%b' '{_escape_input(stdin)}')"
            )
            return (
                f"{reset}__ex_b;__ex_c={word};"
                f'builtin source /dev/fd/59 59<<<"$__ex_c" {source};'
                f"__ex_s=$? __ex_i=;__ex_e {token}\n"
            )
        if stdin is None:
            return (
                f"{reset}__ex_b;__ex_c={word};__ex_in=1;"
                f"__ex_r </dev/null;__ex_s=$? __ex_in= __ex_i=;__ex_e {token}\n"
            )
        # No process substitution in sh: the input goes through a file of the shell's own.
        path = '"${TMPDIR:-/tmp}/.executor-stdin.$$"'
        return (
            f"{reset}__ex_b;__ex_c={word};"
            f"command printf '%b' '{_escape_input(stdin)}' >{path};__ex_in=1;"
            f"__ex_r <{path};__ex_s=$? __ex_in= __ex_i=;rm -f {path};__ex_e {token}\n"
        )

    async def _frame(
        self,
        process: _Process,
        script: str,
        stdin: bytes | None,
        timeout: float | None,
        sink: Sink | None,
        *,
        lost: bool = False,
        idle: float | None = None,
    ) -> ShellOutput:
        """Run `script` framed by fresh markers; return its output or raise what its end means.

        With `idle`, a command that prints nothing for that long is
        interrupted as a timeout interrupts it.
        """
        token = secrets.token_hex(8)
        frame = _Frame(token)
        buffer = self._output_buffer()
        session = process.session
        started = anyio.current_time()
        timed_out = False
        # When output last came, and whether the idle timeout was what ended the wait.
        heard = [started]
        idled = False

        early, process.early = process.early, []

        async def read(deliver: Sink | None) -> bool:
            """Read until the frame is done (`True`) or the shell's output ends (`False`)."""
            while not frame.done:
                if early:
                    got: Chunk = early.pop(0)
                else:
                    item = await session.next_chunk()
                    if item is None:
                        return False
                    got = item.chunk
                data = frame.feed(got)
                if data:
                    chunk = type(got)(data)
                    buffer.append(chunk)
                    if deliver is not None:
                        await call_sink(deliver, chunk)
                    heard[0] = anyio.current_time()
            return True

        async def watch(scope: anyio.CancelScope) -> None:
            """Cancel `scope` once nothing has come for `idle` seconds."""
            nonlocal idled
            assert idle is not None
            while anyio.current_time() < heard[0] + idle:
                await anyio.sleep_until(heard[0] + idle)
            idled = True
            scope.cancel()

        async def read_watched(deliver: Sink | None, scope: anyio.CancelScope) -> bool:
            if idle is None:
                return await read(deliver)
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(watch, scope)
                done = await read(deliver)
                tasks.cancel_scope.cancel()
            return done

        def result(exit_code: int | None, signal: int | None = None) -> ShellOutput:
            output = buffer.output(
                exit_code=exit_code, signal=signal, duration=anyio.current_time() - started
            )
            return _shell_output(output, lost)

        finished = False
        try:
            await process.write(self._line(process, token, script, stdin))
            with anyio.move_on_after(math.inf if timeout is None else timeout) as scope:
                finished = await read_watched(sink, scope)
            if scope.cancelled_caught:
                timed_out = True
        except BaseException:
            # Cancelled, or the sink failed: interrupt the command, keep the shell.
            await run_to_completion(lambda: self._interrupt(process, frame, read))
            raise
        if timed_out:
            await run_to_completion(lambda: self._interrupt(process, frame, read))
            if idled:
                raise TimedOut(idle or 0.0, result(frame.status), idle=True)
            raise TimedOut(timeout or 0.0, result(frame.status))
        if not finished:
            ended = await process.ended()
            await run_to_completion(process.stop)
            output = result(ended.exit_code, ended.signal)
            why = process.failure
            raise ShellExited(
                f"the command ended the shell ({failure_message(ended)}); "
                "the next command runs in a new shell, without this one's state"
                if why is None
                else f"the shell was lost ({why.message}); "
                "the next command runs in a new shell, without this one's state",
                output,
            ) from why
        output = result(frame.status)
        if output.exit_code:
            raise NonZeroExit(failure_message(output), output)
        return output

    async def _interrupt(
        self,
        process: _Process,
        frame: _Frame,
        read: Callable[[Sink | None], Awaitable[bool]],
    ) -> None:
        """SIGINT, SIGTERM, SIGKILL below the shell, then kill it: each after the grace, until done.

        Each step waits the grace for the frame's end (the shell back), and
        the last is taken only for a shell that has not come back even once
        everything below it was killed.
        """
        steps: list[Callable[[], Awaitable[bool]]] = [
            functools.partial(process.signal, UnixSignal.SIGINT),
            functools.partial(process.signal, UnixSignal.SIGTERM),
            # The command's processes, below the shell, never the shell.
            process.kill_below,
        ]
        for step in steps:
            if process.dead:
                return
            if not await step():
                break
            with anyio.move_on_after(self.kill_grace):
                if not await read(None):
                    # The shell ended too.
                    await process.stop()
                return
            if frame.done:
                return
        # Wedged: the shell itself holds out (a loop of builtins that ignores
        # INT and TERM). The next run starts afresh.
        await process.stop()

    # Jobs.

    async def start_job(self, command: str, *, timeout: Timeout = None) -> Job:
        """Start `command` as a background job (see `PersistentShell.start_job`)."""
        self._check_open()
        assert self._tasks is not None
        cmd = Command.shell(command).with_timeout(timeout)
        session = await self._route_job(cmd)
        job_id = str(self._next_job)
        self._next_job += 1
        job = ShellJob(job_id, command, session, buffer=self._job_buffer)
        await self._tasks.start(job.serve)
        self._forget_ended_jobs()
        self._jobs[job_id] = job
        return job

    def _forget_ended_jobs(self) -> None:
        """Forget the oldest ended jobs past `ENDED_JOBS_KEPT`, once their output has been read.

        A shell that starts jobs for hours would otherwise hold every one it
        ever started. A job with output not yet read is kept: nothing is lost.
        """
        ended = [job for job in self._jobs.values() if job.done and not job.status().unread]
        for job in ended[: max(0, len(ended) - ENDED_JOBS_KEPT)]:
            del self._jobs[job.id]

    def jobs(self) -> list[JobStatus]:
        """Every job this shell started, in start order, ended ones too.

        Of the ended jobs whose output has all been read, only the newest
        `ENDED_JOBS_KEPT` (200) are kept; `job()` says when it forgot one.
        """
        return [job.status() for job in self._jobs.values()]

    def job(self, job_id: str) -> Job:
        """The job with this id.

        Raises:
            ExecutorError: No job of this shell has that id.

        """
        try:
            return self._jobs[str(job_id)]
        except KeyError:
            known = ", ".join(self._jobs) or "none"
            if str(job_id).isdigit() and 0 < int(job_id) < self._next_job:
                raise ExecutorError(
                    f"job {job_id} ended and was forgotten: a shell keeps the newest "
                    f"{ENDED_JOBS_KEPT} ended jobs whose output was read (jobs: {known})"
                ) from None
            raise ExecutorError(f"no job {job_id!r} in this shell (jobs: {known})") from None

    async def _job_session(self, cmd: Command) -> ProcessSession:
        """A session for a checked job command, in the shell's current state: the route's end."""
        self._check_open()
        script = _script_of(cmd)
        async with self._lock:
            process, lost = await self._ready()
            if lost:
                self._state_lost = True
            state = await self._frame(process, _CAPTURE[process.flavour], None, 30.0, None)
            flavour = process.flavour
        parts = state.stdout.split(b"\0")
        cwd = parts[0].decode("utf-8", "surrogateescape")
        prelude = [_exports(parts[1].decode("utf-8", "surrogateescape"))] if len(parts) > 1 else []
        if flavour == "bash":
            prelude.extend(part.decode("utf-8", "surrogateescape") for part in parts[2:])
            prelude.append("shopt -s expand_aliases")
        # The state first, on lines of its own, so aliases apply to the command.
        body = "\n".join([*prelude, script])
        job = (
            Command.exec(["bash" if flavour == "bash" else "sh", "-c", body])
            .with_current_dir(cwd)
            .with_env(cmd.env)
            .with_env_removed(*cmd.env_remove, keep=cmd.env_keep)
            .with_timeout(cmd.timeout if cmd.timeout is not None else _NO_TIMEOUT)
            .with_stdin(cmd.stdin)
        )
        if self._read_only:
            with read_only_commands():
                return await self._executor.start(job)
        return await self._executor.start(job)


def _exports(text: str) -> str:
    """`export -p`'s lines without the read-only variables, which cannot be set again.

    Nor the variables that tag a command's tree (`_TREE_TAG`): a job carries
    the tag its own start gave it, never the shell's.
    """
    lines = text.splitlines()
    kept = [
        line
        for line in lines
        if not (line.startswith("declare -") and "r" in line.split(" ", 2)[1])
        and not _TREE_TAG.match(line)
    ]
    return "\n".join(kept)


def _shell_output(output: CommandOutput, lost: bool) -> ShellOutput:
    return ShellOutput(
        chunks=output.chunks,
        exit_code=output.exit_code,
        signal=output.signal,
        duration=output.duration,
        truncated=output.truncated,
        elided=output.elided,
        state_lost=lost,
    )


class _ShellRoute(ToolExecutor):
    """The inner executor of a wrapper's copy: commands go on into the shell (or the next one)."""

    def __init__(
        self,
        run: Callable[[Command, Sink | None], Awaitable[CommandOutput]],
        job: Callable[[Command], Awaitable[ProcessSession]],
        below: ToolExecutor,
    ) -> None:
        self._run = run
        self._job = job
        self._below = below

    def __repr__(self) -> str:
        return f"ShellRoute({self._below!r})"

    async def exec_cmd(self, cmd: Command) -> CommandOutput:
        """Run `cmd` in the shell."""
        return await self._run(cmd, None)

    async def exec_cmd_streaming(self, cmd: Command, sink: Sink) -> CommandOutput:
        """Run `cmd` in the shell, streaming."""
        return await self._run(cmd, sink)

    async def start(self, cmd: Command, *, pty: bool = False) -> ProcessSession:
        """Start `cmd` as a job of the shell."""
        if pty:
            raise ExecutorError("a shell's jobs run without a terminal")
        return await self._job(cmd)

    def stream_files(
        self, path: StrPath, extensions: Iterable[str] | None = None
    ) -> AsyncIterator[LoadedFile]:
        """List files through the executor below."""
        return self._below.stream_files(path, extensions)

    @property
    def enforces_read_only(self) -> bool:
        """Whether the executor below keeps commands from writing."""
        return self._below.enforces_read_only

    async def aclose(self) -> None:
        """Nothing: the shell, not its route, owns the processes."""
