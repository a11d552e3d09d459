r"""The terminal: a command on a session of the agent's executor, streamed both ways.

```python
tool = TerminalTool(DefaultContext.from_executor(ex))
async with StreamingToolSession(tool, TerminalInput(command="python3 -i")) as session:
    await session.send_stdin(Text("print('hello')\n"))
    ...
    result = await session.finalize()  # TerminalResult(exit_code=0, ...)
```

The command is a shell script (`sh -c`), checked by `DangerousCommands`
before anything starts; a refusal is the tool's error (`PolicyDenied`, raised
as the session is entered). It runs through `ex.start(cmd, pty=...)` of the
executor the tool was given, so it runs wherever that executor runs commands:
locally, in an OS sandbox, in a container, on an SSH host. With a pty (the
default) the command has a terminal: prompts, `tty`, `stty size`, Ctrl-C as
`Text("\x03")` or `Signal(UnixSignal.SIGINT)`, and `Resize(cols, rows)`; all
its output then arrives as `stdout`.

Unattended: through the toolset (and the MCP server) nobody can type into
the terminal: the model gets the output when the command ends, and has no
keys to press meanwhile. The toolset's executor says so (`unattended`, see
`executor._toolset.environment`; `TerminalTool(..., unattended=True)` says
it by hand), and the terminal then does what such a person's absence calls
for, so that a command waiting for keys returns within seconds:

- Its input reads end of file. Without a pty the input is closed at the
  start. On a pty Ctrl-D is typed at the start, and typed again whenever the
  command printed a line it did not end (a prompt: `Password: `, `>>> `,
  `Continue? [y/N] `) and then printed nothing for `quiet_secs` (2 s): a
  `read`, an `input()`, a REPL, a password or host-key question read end of
  file, as under `run` and `shell`. A program that switched the terminal to
  raw mode may have read the first Ctrl-D as a key; the second reaches it at
  its prompt.
- A full-screen program (one that turned on the alternate screen or the
  keypad mode, as less, vi, man's pager and top do) that prints nothing for
  `quiet_secs` is waiting for keys that never come: the terminal hangs up on
  it (SIGHUP to the command's process group, as closing a terminal does),
  and kills its tree if it is still there `quiet_secs` later. The result's
  `note` says so. The agent-safe environment keeps most of them away (git's,
  man's and the other pagers are off; editors fail at once), so this is for
  `less FILE`, `vi FILE`, `top` and the like, asked for by name.

A command that prints nothing for a while without waiting on the terminal
(a build, `sleep`) is left alone: at most a Ctrl-D waits in its terminal's
input for whoever reads it. Standalone (`TerminalTool(ex)`), the terminal is
attended: its input stays open for `send_stdin` until `close_stdin` or
`finalize`, and its command runs in the executor's environment as it is;
build it on a toolset's context (`TerminalTool(toolset.context(ex))`) for
the toolset's environment and behaviour.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
from collections.abc import Iterable
from types import TracebackType
from typing import Final, Literal, Self

import anyio
import anyio.abc

from executor._builtins.common import (
    StreamDecoder,
    check_timeout_secs,
    executor_of,
    is_unattended,
)
from executor._core.base import ToolExecutor
from executor._core.commands import Command
from executor._core.errors import (
    ExecutorError,
    InvalidArgument,
    NonZeroExit,
    ShellParseError,
    TimedOut,
)
from executor._core.output import CommandOutput, Stderr
from executor._core.session import ProcessSession
from executor._core.stdin import Bytes, Signal, StdinEvent, UnixSignal
from executor._policies.rules import DangerousCommands
from executor._shell.parser import parse_script
from executor._tools.handle import StreamingToolHandle
from executor._tools.policies import Window
from executor._tools.tool import StreamingTool
from executor._tools.tools import AgentContext


@dataclasses.dataclass(frozen=True, kw_only=True)
class TerminalInput:
    """What to run in the terminal.

    Attributes:
        command: The shell script to run (`sh -c`), e.g. `"python3 -i"`.
        cwd: Where it starts: relative to the executor's workdir, or
            absolute; the workdir when `None`.
        env: Variables to set for it, on top of the executor's environment.
        timeout_secs: Seconds before the command's tree is killed; the
            executor's default when `None`.
        pty: Whether the command runs on a pseudo-terminal (the default).

    Raises:
        InvalidArgument: An empty command, a NUL byte, a variable name that
            cannot be one, or a timeout that is not a positive number.
    """

    command: str
    cwd: str | None = None
    env: dict[str, str] = dataclasses.field(default_factory=dict)
    timeout_secs: float | None = None
    pty: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.command, str) or not self.command.strip():
            raise InvalidArgument(self.command, "the command must be a non-empty string")
        if "\0" in self.command:
            raise InvalidArgument(self.command, "the command must not contain a NUL byte")
        if self.cwd is not None and (not self.cwd or "\0" in self.cwd):
            raise InvalidArgument(self.cwd, "cwd must be a non-empty path without NUL")
        for name, value in self.env.items():
            if not name or "=" in name or "\0" in name or "\0" in value:
                raise InvalidArgument(
                    name,
                    "an environment variable needs a name without '=' or NUL, and a value "
                    "without NUL",
                )
        check_timeout_secs(self.timeout_secs)


@dataclasses.dataclass(frozen=True, kw_only=True)
class TerminalChunk:
    """A piece of the command's output, as text.

    Attributes:
        stream: `"stdout"` or `"stderr"` (with a pty, everything is `"stdout"`).
        text: The text, decoded as UTF-8 (a character split across reads is
            kept whole; invalid bytes become U+FFFD).
    """

    stream: Literal["stdout", "stderr"]
    text: str


@dataclasses.dataclass(frozen=True, kw_only=True)
class TerminalResult:
    """How the command ended.

    Attributes:
        exit_code: Its exit code (128 + N when killed by signal N), or `None`
            when none is known.
        signal: The signal that killed it, if one did (after Ctrl-C, a
            cancel or a timeout).
        duration: Seconds from start to end.
        truncated: Whether the output the executor kept was cut (its output
            limit); the chunks themselves were all delivered.
        timed_out: Whether it ran past its timeout and was killed.
        note: What an unattended terminal did on its own, if anything: it
            hung up on a program that waited for keys nobody could press.
    """

    exit_code: int | None
    signal: int | None
    duration: float
    truncated: bool
    timed_out: bool = False
    note: str | None = None


# Words that start a line but are no program `exec` could run.
_NOT_PROGRAMS = frozenset(
    {
        "!", "{", "(", "if", "while", "until", "for", "case", "function", "select", "time",
        "exec", "cd", "export", "exit", "set", "unset", "source", ".", "eval", "trap", "read",
        "alias", "ulimit", "umask", "wait", "shift", "return", "local", "declare", "readonly",
        "jobs", "fg", "bg",
    }
)  # fmt: skip


def _single_program(script: str) -> bool:
    """Whether `script` is one simple command that runs a program, and nothing else."""
    try:
        commands = parse_script(script)
    except ShellParseError:
        return False
    if len(commands) != 1:
        return False
    (only,) = commands
    words = script.split()
    return (
        bool(words)
        and only.source.strip() == script.strip()
        and not only.nesting
        and only.pipeline is None
        and not only.background
        and not only.assignments
        and words[0] not in _NOT_PROGRAMS
        and "=" not in words[0]
    )


def _result(
    output: CommandOutput, *, timed_out: bool = False, note: str | None = None
) -> TerminalResult:
    return TerminalResult(
        exit_code=output.exit_code,
        signal=output.signal,
        duration=output.duration,
        truncated=output.truncated,
        timed_out=timed_out,
        note=note,
    )


QUIET_SECS: Final = 2.0
"""Seconds an unattended terminal's command may wait quietly before the terminal acts."""

# A terminal's end-of-file character (VEOF, Ctrl-D).
_EOF: Final = b"\x04"

# The escape sequences that turn a full-screen program's modes on (h, =) or
# off (l, >): the alternate screen (1049, 1047, 47), the cursor keys'
# application mode (1) and the keypad's (=, >), which less sends even with -X.
_SCREEN_MODES: Final = re.compile(r"\x1b\[\?(?:1049|1047|47|1)([hl])|\x1b([=>])")

_HUNG_UP: Final = (
    "nobody can type into this terminal, and the command waited for keys in a full-screen "
    "program (a pager, an editor): the terminal hung up on it. Run it without one: cat, head "
    "or sed -n to read a file, git --no-pager, sed -i or a script to edit one."
)


class TerminalHandle:
    """A terminal run: a process session whose output arrives as `TerminalChunk`s.

    The session is the executor's own (`ex.start(...)`), entered with the
    handle; stdin events go to it as they are. `finalize()` returns a
    `TerminalResult` for any way the command ended (a non-zero exit, a
    signal, a timeout) instead of raising: how it ended is the result.
    `unattended`: nobody types, so the command's input reads end of file and
    a full-screen program waiting for keys is hung up on (see the module).
    """

    def __init__(
        self, session: ProcessSession, *, unattended: bool = False, quiet: float = QUIET_SECS
    ) -> None:
        """Wrap `session`, not yet entered."""
        self.session = session
        self.unattended = unattended
        self._quiet = quiet
        self._decoders = {"stdout": StreamDecoder(), "stderr": StreamDecoder()}
        self._flushed = False
        # What an unattended terminal watches: since when the reader has waited
        # for output, the full-screen mode the output left on, the output's
        # last characters (a mode's sequence may be split across reads), and
        # whether its last line is open (a prompt) and not answered yet.
        self._waiting_since: float | None = None
        self._full_screen = False
        self._tail = ""
        self._prompt = False
        self._hung_up = False
        self._note: str | None = None
        self._attending: anyio.abc.TaskGroup | None = None
        self._stack = contextlib.AsyncExitStack()

    async def __aenter__(self) -> Self:
        await self.session.__aenter__()
        if not self.unattended:
            return self
        try:
            if self.session.pty:
                await self._type(Bytes(_EOF))
                self._attending = await self._stack.enter_async_context(anyio.create_task_group())
                self._attending.start_soon(self._attend)
            else:
                with contextlib.suppress(ExecutorError):
                    await self.session.close_stdin()
        except BaseException as error:
            await self.__aexit__(type(error), error, error.__traceback__)
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        if self._attending is not None:
            self._attending.cancel_scope.cancel()
            self._attending = None
        try:
            await self._stack.aclose()
        except BaseException:
            await self.session.__aexit__(exc_type, exc, tb)
            raise
        return await self.session.__aexit__(exc_type, exc, tb)

    async def _type(self, event: StdinEvent) -> None:
        """Send `event` to the command; nothing if its input is closed or it has ended."""
        with contextlib.suppress(ExecutorError):
            await self.session.send_stdin(event)

    def _saw(self, text: str) -> None:
        """Take in a piece of an unattended command's output."""
        seen = self._tail + text
        for mode in _SCREEN_MODES.finditer(seen):
            self._full_screen = mode.group(1) == "h" or mode.group(2) == "="
        self._tail = seen[-8:]
        self._prompt = not text.endswith("\n")

    async def _attend(self) -> None:
        """Stand in for the person who is not there, while the command runs.

        Each time the reader has waited `quiet` seconds for output: a
        full-screen program is hung up on (SIGHUP), the next time its tree is
        killed; else an open line (a prompt) gets Ctrl-D, once per prompt.
        """
        while True:
            since = self._waiting_since
            now = anyio.current_time()
            if since is None:
                await anyio.sleep(self._quiet / 8)
                continue
            if now - since < self._quiet:
                await anyio.sleep(since + self._quiet - now)
                continue
            # Quiet for long enough: the next step, if it comes to that, as long after.
            self._waiting_since = now
            if self._full_screen and not self._hung_up:
                self._hung_up = True
                self._note = _HUNG_UP
                await self._type(Signal(UnixSignal.SIGHUP))
            elif self._full_screen:
                self.session.cancel()
                return
            elif self._prompt:
                self._prompt = False
                await self._type(Bytes(_EOF))

    async def next_chunk(self) -> TerminalChunk | None:
        """The next piece of output as text; `None` once the output has ended."""
        while True:
            self._waiting_since = anyio.current_time()
            try:
                item = await self.session.next_chunk()
            finally:
                self._waiting_since = None
            if item is None:
                return self._flush()
            stream: Literal["stdout", "stderr"] = (
                "stderr" if isinstance(item.chunk, Stderr) else "stdout"
            )
            text = self._decoders[stream].decode(item.chunk.data)
            if text:
                if self.unattended:
                    self._saw(text)
                return TerminalChunk(stream=stream, text=text)

    def _flush(self) -> TerminalChunk | None:
        # A character cut short by the end of the output still shows, as U+FFFD.
        if self._flushed:
            return None
        for stream, decoder in self._decoders.items():
            if text := decoder.flush():
                return TerminalChunk(stream="stderr" if stream == "stderr" else "stdout", text=text)
        self._flushed = True
        return None

    async def send_stdin(self, event: StdinEvent, /) -> None:
        """Deliver `Text`, `Bytes`, `Signal` or `Resize` (pty only) to the command."""
        await self.session.send_stdin(event)

    async def close_stdin(self) -> None:
        """End the command's input (on a pty, Ctrl-D)."""
        await self.session.close_stdin()

    def cancel(self) -> None:
        """Kill the command's tree; `finalize()` then reports the signal."""
        self.session.cancel()

    async def finalize(self) -> TerminalResult:
        """End stdin, wait for the command and say how it ended."""
        try:
            output = await self.session.finalize()
        except TimedOut as error:
            return _result(error.output, timed_out=True, note=self._note)
        except NonZeroExit as error:
            return _result(error.output, note=self._note)
        return _result(output, note=self._note)


class TerminalTool(StreamingTool[TerminalInput, TerminalChunk, TerminalResult]):
    """Runs a shell command on a terminal and streams its output; takes stdin, signals, resizes.

    The command is checked for dangerous patterns (fork bombs, `rm -rf /`,
    pipes into a shell, ...) before it starts. Through the toolset nobody
    types into the terminal: its command reads end of file, and a full-screen
    program left waiting for keys is hung up on (see the module).
    """

    name = "terminal"
    policy = Window(max_chunks=200)
    required_capability = "process"

    def __init__(
        self,
        context: AgentContext | ToolExecutor,
        *,
        allow: Iterable[str] = (),
        allow_interpreters: bool = True,
        unattended: bool | None = None,
        quiet_secs: float = QUIET_SECS,
    ) -> None:
        """A terminal whose commands run through the context's executor.

        Args:
            context: The agent context (`DefaultContext.from_executor(ex)`,
                or a toolset's, `toolset.context(ex)`) or the executor itself.
            allow: `DangerousCommands` rules to leave out, e.g. `("kill-all",)`.
            allow_interpreters: Whether programs the rules cannot read
                (`python3 -c ...`, scripts) pass; see `DangerousCommands`.
            unattended: Whether nobody types into the terminal (see the
                module); `None`: as the executor says (a toolset's context's
                does).
            quiet_secs: Seconds an unattended command may wait quietly
                before the terminal acts.

        Raises:
            TypeError: `context` is neither an agent context nor an executor.
            ValueError: `allow` names a rule that does not exist, or `quiet_secs`
                is not positive.
        """
        if not quiet_secs > 0:
            raise ValueError(f"quiet_secs must be a positive number, got {quiet_secs!r}")
        self.executor = executor_of(context)
        self.unattended = is_unattended(self.executor) if unattended is None else unattended
        self.quiet_secs = float(quiet_secs)
        self._rules = DangerousCommands(
            self.executor, allow=allow, allow_interpreters=allow_interpreters
        )

    def __repr__(self) -> str:
        return f"TerminalTool({self.executor!r})"

    def command(self, input: TerminalInput) -> Command:
        """The command `input` stands for, before any check.

        A script of one simple command runs as `exec command`: the shell
        becomes the program, so Ctrl-C and the exit status are the program's
        own (a non-interactive `sh` waiting for a program would die of the
        same Ctrl-C the program handled, as dash does).
        """
        script = input.command
        if _single_program(script):
            script = f"exec {script.strip()}"
        cmd = Command.shell(script).with_current_dir(input.cwd)
        if input.env:
            cmd = cmd.with_env(input.env)
        if input.timeout_secs is not None:
            cmd = cmd.with_timeout(input.timeout_secs)
        return cmd

    async def start(
        self, input: TerminalInput
    ) -> StreamingToolHandle[TerminalChunk, TerminalResult]:
        """Check the command and return its run, to enter; the process starts on entry.

        Raises:
            PolicyDenied: The command is refused (by the rules here, or by a
                policy of the executor).
            ExecutorError: The executor cannot start sessions.
        """
        if not isinstance(input, TerminalInput):
            input = self.parse_input(input)
        await self._rules.check(Command.shell(input.command).with_current_dir(input.cwd))
        cmd = self.command(input)
        session = await self.executor.start(cmd, pty=input.pty)
        return TerminalHandle(session, unattended=self.unattended, quiet=self.quiet_secs)

    def render(self, value: object) -> str:
        """A chunk is its text; the result as JSON."""
        if isinstance(value, TerminalChunk):
            return value.text
        return super().render(value)
