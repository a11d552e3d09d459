"""The code interpreter: Python, JavaScript, bash and R cells on the agent's executor, by session.

```python
async with CodeInterpreterTool(DefaultContext.from_executor(ex)) as tool:
    first = CodeInterpreterInput(language="python", code="x = 41", session="s")
    async with StreamingToolSession(tool, first) as session:
        await session.finalize()
    again = CodeInterpreterInput(language="python", code="x + 1", session="s")
    async with StreamingToolSession(tool, again) as session:
        chunk = await session.next_chunk()  # CodeChunk(stream=CodeStream.RESULT, content='42')
```

How it runs code. Every interpreter is a process the tool starts through
the executor it was given (`ex.start(...)`), so cells run where that
executor runs commands: locally, in an OS sandbox, in a container, on an SSH
host. The interpreter runs a small driver (`pydriver.py`, `nodedriver.js`,
`shdriver.sh`, `rdriver.R`, sent as the program's text: nothing is installed) that reads
cells from its stdin and answers on its stdout with framed results, images
and errors between the cell's own output. That channel is the session's
own, so it reaches a container with no network and a remote host alike,
where a Jupyter kernel's ZeroMQ sockets could not be reached; the driver
gives what the tool needs of a kernel: the last expression's plain and HTML
forms, matplotlib figures as PNG, tracebacks, `display()`, and SIGINT as a
cell interrupt. Where a Jupyter kernel can be reached (a `LocalExecutor`
without a sandbox, `ipykernel` installed for its Python, `jupyter_client`
here: `pip install 'executor[interpreter]'`), Python runs on a real
`ipykernel` instead, spoken to over loopback TCP, unless `jupyter=False`.

Sessions. A call with a `session` name runs in that session's interpreter,
started on first use and kept until the tool is closed (`async with` the
tool, or `await tool.aclose()`), so variables, imports and the working
directory persist; each language has its own interpreter per name. A tool
used without `async with` keeps its sessions' interpreters in tasks of the
event loop's own, until `aclose()`, the executor's end or the loop's. A call
without a name runs in a fresh interpreter that ends with the call.
"""

from __future__ import annotations

import base64
import dataclasses
import enum
import importlib.util
import logging
import re
import sys
import time
from collections.abc import Mapping
from types import TracebackType
from typing import Any, Literal, Self, TypeAlias

import anyio
import anyio.abc
import sniffio

from executor._builtins.codecheck import javascript_findings, python_findings, r_findings
from executor._builtins.common import check_timeout_secs, executor_of
from executor._builtins.kernels import CellOutcome, JupyterKernel, Kernel, StdioKernel
from executor._core.base import ToolExecutor
from executor._core.commands import Command
from executor._core.errors import (
    CommandError,
    ExecutorError,
    InvalidArgument,
    NonZeroExit,
    PolicyDenied,
)
from executor._policies.rules import DangerousCommands
from executor._tools.args import WorkspacePath
from executor._tools.handle import StreamingToolHandle, TaskHandle, ToolChannel
from executor._tools.policies import Window
from executor._tools.tool import StreamingTool
from executor._tools.tools import AgentContext

Language: TypeAlias = Literal["python", "javascript", "bash", "r"]
"""The languages the interpreter takes."""

_logger = logging.getLogger("executor")

_LANGUAGES: tuple[str, ...] = ("python", "javascript", "bash", "r")
_SESSION_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$")
# A package as pip or npm names one, with an optional version: never an option.
_PACKAGE = re.compile(r"^[A-Za-z0-9@][A-Za-z0-9_.\-/@\[\],]*([<>=!~]=?[A-Za-z0-9_.*+\-]+)*$")
_R_PACKAGE = re.compile(r"^[A-Za-z][A-Za-z0-9.]*$")
_MAX_CODE = 1 << 20


class CodeStream(enum.Enum):
    """What a `CodeChunk` carries."""

    STDOUT = "stdout"
    """Text the cell printed on its standard output."""
    STDERR = "stderr"
    """Text on its standard error (warnings, logging)."""
    IMAGE = "image"
    """An image: `mime_type` and `data` (a matplotlib figure as `image/png`)."""
    RESULT = "result"
    """The last expression's value (or a `display()`): `content` plain, `html` if it has one."""
    ERROR = "error"
    """The error that ended the cell: `content` is the traceback."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class CodeChunk:
    """A piece of a cell's output.

    Attributes:
        stream: What it is (`CodeStream`).
        content: The text: output, the plain form of a result, a traceback;
            empty for an image.
        mime_type: `text/plain` for text, the image's type for an image.
        data: The image's bytes; `None` for text.
        html: The HTML form of a result, when the value has one.
    """

    stream: CodeStream
    content: str = ""
    mime_type: str = "text/plain"
    data: bytes | None = None
    html: str | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class CodeResult:
    """How the cell ended.

    Attributes:
        success: Whether it ran to its end without an error (for bash: with
            status 0).
        execution_time_ms: How long the cell ran, in milliseconds (files and
            packages not counted).
        error: Its error in one line (`NameError: name 'x' is not defined`),
            or `None`.
        timed_out: Whether it ran past its timeout and was interrupted.
    """

    success: bool
    execution_time_ms: int
    error: str | None = None
    timed_out: bool = False


@dataclasses.dataclass(frozen=True, kw_only=True)
class CodeInterpreterInput:
    """A cell to run.

    Attributes:
        language: `python`, `javascript`, `bash` or `r`.
        code: The code.
        timeout_secs: Seconds before the cell is interrupted (its session
            and state live on); the tool's `default_timeout` when `None`.
        session: A name whose interpreter keeps its state across calls;
            `None` runs the cell in a fresh interpreter of its own.
        files: Files to write first, by path relative to the executor's
            workdir (where the interpreter starts), as text.
        packages: Packages to install first (pip for Python, npm for
            JavaScript, `install.packages` from CRAN for R), when the tool
            allows it.

    Raises:
        InvalidArgument: An unknown language, code too long or with NUL, a
            bad session name, a path that leaves the workdir, a package
            name that could be an option.
    """

    language: Language
    code: str
    timeout_secs: float | None = None
    session: str | None = None
    files: dict[str, str] = dataclasses.field(default_factory=dict)
    packages: list[str] = dataclasses.field(default_factory=list)

    def __post_init__(self) -> None:
        if self.language not in _LANGUAGES:
            raise InvalidArgument(self.language, f"language must be one of {', '.join(_LANGUAGES)}")
        if not isinstance(self.code, str) or "\0" in self.code:
            raise InvalidArgument(self.code, "code must be text without NUL")
        if len(self.code) > _MAX_CODE:
            raise InvalidArgument(self.code, f"code must be at most {_MAX_CODE} characters")
        check_timeout_secs(self.timeout_secs)
        if self.session is not None and not _SESSION_NAME.match(self.session):
            raise InvalidArgument(
                self.session, "a session name is 1 to 64 letters, digits, '_', '.' or '-'"
            )
        for path in self.files:
            WorkspacePath(path)
        for package in self.packages:
            if not isinstance(package, str) or not _PACKAGE.match(package):
                raise InvalidArgument(
                    package, "a package is a name with an optional version, like 'numpy>=1.26'"
                )


def _chunk(
    stream: str,
    content: str,
    *,
    html: str | None = None,
    mime_type: str | None = None,
    data: bytes | None = None,
) -> CodeChunk:
    return CodeChunk(
        stream=CodeStream(stream),
        content=content,
        mime_type=mime_type or "text/plain",
        data=data,
        html=html,
    )


# What each language runs as: the programs to look for, in order, and how the
# driver is handed to the one found.
_PROGRAMS: dict[str, tuple[str, ...]] = {
    "python": ("python3",),
    "javascript": ("node",),
    "bash": ("bash", "sh"),
    "r": ("Rscript",),
}


def _encode_hex(code: str) -> str:
    return code.encode("utf-8").hex()


def _encode_base64(code: str) -> str:
    return base64.b64encode(code.encode("utf-8")).decode("ascii")


class CodeInterpreterTool(StreamingTool[CodeInterpreterInput, CodeChunk, CodeResult]):
    """Runs code (Python, JavaScript, bash, R) and streams its output, results, images and errors.

    Give a `session` name to keep state (variables, imports) across calls.
    Code that would run programs or delete system folders is refused before
    it runs.
    """

    name = "code_interpreter"
    policy = Window(max_chunks=100)
    required_capability = "process"

    def __init__(
        self,
        context: AgentContext | ToolExecutor,
        *,
        default_timeout: float = 60.0,
        allow_packages: bool = False,
        check_code: bool = True,
        interpreters: Mapping[str, str] | None = None,
        package_timeout: float = 600.0,
        jupyter: bool | None = None,
    ) -> None:
        """An interpreter whose processes run through the context's executor.

        Args:
            context: The agent context (`DefaultContext.from_executor(ex)`)
                or the executor itself.
            default_timeout: Seconds a cell may run when its input says none.
            allow_packages: Whether `packages` may be installed (refused
                with `PolicyDenied` otherwise: installing runs code from a
                registry).
            check_code: Whether the static checks refuse dangerous code
                (see `executor._builtins.codecheck`).
            interpreters: The program to run per language, instead of
                looking for `python3`, `node`, `bash` (then `sh`), `Rscript`.
            package_timeout: Seconds an installation may take.
            jupyter: Whether Python runs on an `ipykernel`: `None` where it
                fits (see the module's notes), `True` always (an
                `ExecutorError` says why it cannot), `False` never (the
                stdio driver everywhere).

        Raises:
            TypeError: `context` is neither an agent context nor an executor.
            ValueError: A timeout that is not positive, or an unknown language.
        """
        self.executor = executor_of(context)
        for value in (default_timeout, package_timeout):
            if not value > 0:
                raise ValueError(f"timeouts must be positive, got {value!r}")
        self.default_timeout = default_timeout
        self.package_timeout = package_timeout
        self.allow_packages = allow_packages
        self.check_code = check_code
        self.interpreters = dict(interpreters or {})
        unknown = set(self.interpreters) - set(_LANGUAGES)
        if unknown:
            raise ValueError(f"no such language: {', '.join(sorted(unknown))}")
        self.jupyter = jupyter
        self._rules = DangerousCommands(self.executor)
        self._jupyter_problem: dict[str, str | None] = {}
        self._found: dict[str, str] = {}
        self._kernels: dict[tuple[str, str], Kernel] = {}
        self._group: anyio.abc.TaskGroup | None = None
        self._registry: anyio.Lock | None = None
        # Kernels of a tool not entered run in tasks of the event loop's own.
        self._detached: list[anyio.Event] = []
        self._tasks: set[Any] = set()
        self._closed = False

    def __repr__(self) -> str:
        return f"CodeInterpreterTool({self.executor!r})"

    # --- lifetime -------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        if self._group is not None or self._closed:
            raise RuntimeError("a CodeInterpreterTool is entered once")
        group = anyio.create_task_group()
        await group.__aenter__()
        self._group = group
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        await self.aclose()
        return None

    async def aclose(self) -> None:
        """End every session's interpreter and wait until they have stopped."""
        self._closed = True
        for kernel in self._kernels.values():
            kernel.close()
        self._kernels.clear()
        group, self._group = self._group, None
        if group is not None:
            await group.__aexit__(None, None, None)
        detached, self._detached = self._detached, []
        for ended in detached:
            await ended.wait()

    def sessions(self) -> list[tuple[str, str]]:
        """The live sessions, as (name, language)."""
        return [key for key, kernel in self._kernels.items() if kernel.alive]

    # --- checks -----------------------------------------------------------------------

    async def check(self, input: CodeInterpreterInput) -> None:
        """Refuse `input` if its code is dangerous or its packages are not allowed.

        Raises:
            PolicyDenied: The message names what was refused.
        """
        if input.packages and not self.allow_packages:
            raise PolicyDenied(
                "refused: installing packages is not allowed for this interpreter "
                "(CodeInterpreterTool(..., allow_packages=True) allows it)"
            )
        if input.packages and input.language == "bash":
            raise InvalidArgument(input.packages, "bash has no packages to install")
        for package in input.packages if input.language == "r" else ():
            if not _R_PACKAGE.match(package):
                raise InvalidArgument(package, "an R package is a name of letters, digits and dots")
        if not self.check_code:
            return
        if input.language == "python":
            findings = python_findings(input.code)
        elif input.language == "javascript":
            findings = javascript_findings(input.code)
        elif input.language == "bash":
            await self._rules.check(Command.shell(input.code))
            findings = []
        else:
            findings = r_findings(input.code)
        if findings:
            raise PolicyDenied(
                f"refused {input.language} code: {'; '.join(findings)}. It would run programs "
                "or destroy the system; do it another way, or not at all"
            )

    async def _program(self, language: str) -> str:
        """The interpreter program for `language` where the executor runs commands.

        Raises:
            ExecutorError: None is installed there; the message names it.
        """
        if language in self._found:
            return self._found[language]
        wanted = (
            (self.interpreters[language],) if language in self.interpreters else _PROGRAMS[language]
        )
        probe = " || ".join(f"command -v {_quote(program)}" for program in wanted)
        try:
            output = await self.executor.exec_cmd(Command.shell(probe).with_timeout(60))
        except NonZeroExit:
            output = None
        found = output.stdout.decode("utf-8", "replace").strip().splitlines() if output else []
        if not found:
            names = " or ".join(wanted)
            raise ExecutorError(
                f"the {language} interpreter is not available: {names} is not installed "
                f"where {self.executor!r} runs commands"
            )
        program = found[0].strip()
        if language == "bash" and program.rsplit("/", 1)[-1] != "bash":
            program = f"sh:{program}"
        self._found[language] = program
        return program

    # --- running ----------------------------------------------------------------------

    async def start(
        self, input: CodeInterpreterInput
    ) -> StreamingToolHandle[CodeChunk, CodeResult]:
        """Check the cell and return its run, to enter; the cell runs on entry.

        Raises:
            PolicyDenied: The code is refused, or packages are not allowed.
            ExecutorError: The language's interpreter is not installed.
            RuntimeError: The tool is closed.
        """
        if not isinstance(input, CodeInterpreterInput):
            input = self.parse_input(input)
        if self._closed:
            raise RuntimeError("this CodeInterpreterTool is closed")
        await self.check(input)
        program = await self._program(input.language)

        async def run(channel: ToolChannel[CodeChunk]) -> CodeResult:
            return await self._run(input, program, channel)

        return TaskHandle(run)

    async def _run(
        self, input: CodeInterpreterInput, program: str, channel: ToolChannel[CodeChunk]
    ) -> CodeResult:
        for path, content in input.files.items():
            await self.executor.exec_cmd(Command.write_file(str(WorkspacePath(path)), content))
        if input.packages:
            failure = await self._install(input, program, channel)
            if failure is not None:
                return failure
        timeout = input.timeout_secs if input.timeout_secs is not None else self.default_timeout
        if input.session is not None:
            kernel = await self._session_kernel(input.session, input.language, program)
            return await self._cell(kernel, input.code, timeout, channel)
        # A cell of its own: its interpreter lives in this task, and ends with it.
        kernel = await self._kernel(input.language, program)
        async with anyio.create_task_group() as group:
            await group.start(kernel.serve)
            try:
                result = await self._cell(kernel, input.code, timeout, channel)
            finally:
                kernel.close()
        return result

    async def _cell(
        self, kernel: Kernel, code: str, timeout: float, channel: ToolChannel[CodeChunk]
    ) -> CodeResult:
        started = time.monotonic()
        outcome: CellOutcome = await kernel.run_cell(code, timeout, channel.send)
        elapsed = round((time.monotonic() - started) * 1000)
        return CodeResult(
            success=outcome.ok,
            execution_time_ms=elapsed,
            error=outcome.error,
            timed_out=outcome.timed_out,
        )

    async def _session_kernel(self, name: str, language: str, program: str) -> Kernel:
        if self._registry is None:
            self._registry = anyio.Lock()
        async with self._registry:
            key = (name, language)
            kernel = self._kernels.get(key)
            if kernel is not None and kernel.alive:
                return kernel
            if self._closed:
                raise RuntimeError("this CodeInterpreterTool is closed")
            kernel = await self._kernel(language, program)
            if self._group is not None:
                await self._group.start(_serve_quietly, kernel)
            else:
                await self._serve_detached(kernel)
            self._kernels[key] = kernel
            return kernel

    async def _serve_detached(self, kernel: Kernel) -> None:
        """Serve `kernel` in a task of the event loop's own: the tool was not entered.

        The kernel then lives until `aclose()`, or until its executor is
        closed (which kills the interpreter), or the event loop ends.
        """
        ready, ended = anyio.Event(), anyio.Event()
        status = _Started(ready)
        failure: list[Exception] = []

        async def serve() -> None:
            try:
                await _serve_quietly(kernel, task_status=status)
            except Exception as error:
                # Before it was ready: the caller raises it.
                failure.append(error)
            finally:
                ready.set()
                ended.set()

        library = sniffio.current_async_library()
        if library == "trio":
            import trio

            trio.lowlevel.spawn_system_task(serve)
        else:
            import asyncio

            task = asyncio.get_running_loop().create_task(serve())
            # The loop keeps only weak references to its tasks.
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        self._detached.append(ended)
        await ready.wait()
        if failure:
            raise failure[0]

    async def jupyter_problem(self, program: str = "python3") -> str | None:
        """Why Python cannot run on a Jupyter kernel here, or `None` when it can.

        It can when the executor is a `LocalExecutor` without a sandbox (the
        kernel's loopback ports and connection file are this host's), the
        event loop is asyncio (`zmq.asyncio`), `jupyter_client` is installed
        here and `ipykernel` for `program`.
        """
        if program in self._jupyter_problem:
            problem = self._jupyter_problem[program]
        else:
            problem = await self._find_jupyter_problem(program)
            self._jupyter_problem[program] = problem
        if problem is None and sniffio.current_async_library() != "asyncio":
            return "jupyter_client runs on asyncio only"
        return problem

    async def _find_jupyter_problem(self, program: str) -> str | None:
        local = sys.modules.get("executor._local.executor")
        if local is None or type(self.executor) is not local.LocalExecutor:
            return f"only a LocalExecutor reaches a Jupyter kernel's sockets, not {self.executor!r}"
        if getattr(self.executor, "sandbox", None) is not None:
            return "a sandboxed executor's kernel could not be reached on its ports"
        if importlib.util.find_spec("jupyter_client") is None:
            return "jupyter_client is not installed (pip install 'executor[interpreter]')"
        probe = Command.exec([program, "-c", "import ipykernel_launcher"]).with_timeout(60)
        try:
            await self.executor.exec_cmd(probe)
        except CommandError:
            return f"ipykernel is not installed for {program} (pip install ipykernel)"
        return None

    async def _kernel(self, language: str, program: str) -> Kernel:
        if language == "python" and self.jupyter is not False:
            problem = await self.jupyter_problem(program)
            if problem is None:
                return JupyterKernel(self.executor, python=program, make_chunk=_chunk)
            if self.jupyter:
                raise ExecutorError(f"cannot run Python on a Jupyter kernel: {problem}")
        env = {"PYTHONUNBUFFERED": "1", "MPLBACKEND": "Agg", "NO_COLOR": "1"}
        if language == "python":
            return StdioKernel(
                self.executor,
                language=language,
                argv=[program, "-u", "-c"],
                driver="pydriver.py",
                make_chunk=_chunk,
                env=env,
            )
        if language == "javascript":
            return StdioKernel(
                self.executor,
                language=language,
                argv=[program, "-e"],
                driver="nodedriver.js",
                make_chunk=_chunk,
                env=env,
            )
        if language == "r":
            return StdioKernel(
                self.executor,
                language=language,
                argv=[program, "--vanilla", "-e"],
                driver="rdriver.R",
                make_chunk=_chunk,
                encode=_encode_hex,
            )
        shell = program.removeprefix("sh:")
        argv = [shell, "--norc", "--noprofile", "-c"] if shell == program else [shell, "-c"]
        return StdioKernel(
            self.executor,
            language=language,
            argv=argv,
            driver="shdriver.sh",
            make_chunk=_chunk,
            name_argument=True,
            encode=_encode_base64,
        )

    async def _install(
        self, input: CodeInterpreterInput, program: str, channel: ToolChannel[CodeChunk]
    ) -> CodeResult | None:
        started = time.monotonic()
        if input.language == "python":
            argv = [program, "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
            argv += input.packages
        elif input.language == "r":
            names = ", ".join(f'"{package}"' for package in input.packages)
            repos = '"https://cloud.r-project.org"'
            argv = [program, "--vanilla", "-e", f"install.packages(c({names}), repos = {repos})"]
        else:
            argv = ["npm", "install", "--no-save", "--no-audit", "--no-fund", "--silent"]
            argv += input.packages
        cmd = Command.exec(argv).with_timeout(self.package_timeout)
        try:
            await self.executor.exec_cmd(cmd)
        except CommandError as error:
            message = f"installing {', '.join(input.packages)} failed: {error.message}"
            text = error.output.text().strip()
            await channel.send(_chunk("error", f"{message}\n{text[-4000:]}" if text else message))
            return CodeResult(
                success=False,
                execution_time_ms=round((time.monotonic() - started) * 1000),
                error=message,
            )
        return None

    def render(self, value: object) -> str:
        """A chunk as its text (an image as its type and size); the result as JSON."""
        if isinstance(value, CodeChunk):
            if value.stream is CodeStream.IMAGE:
                size = len(value.data) if value.data is not None else 0
                return f"[{value.mime_type} image, {size} bytes]"
            return value.content
        return super().render(value)


class _Started:
    """A task status that remembers whether it was reported (and may set an event)."""

    def __init__(self, status: anyio.abc.TaskStatus[None] | anyio.Event) -> None:
        self.status = status
        self.reported = False

    def started(self, value: None = None) -> None:
        self.reported = True
        if isinstance(self.status, anyio.Event):
            self.status.set()
        else:
            self.status.started(value)


async def _serve_quietly(
    kernel: Kernel, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
) -> None:
    """Serve a session's kernel in the tool's task group without ever failing the group.

    A failure to start is the caller's (it reaches `group.start`); one after
    that (an interpreter whose end could not be cleaned up) would cancel the
    tool and its caller with it, so it is logged, and the session is gone.
    """
    status = _Started(task_status)
    try:
        await kernel.serve(task_status=status)
    except Exception:
        if not status.reported:
            raise
        _logger.warning(
            "the %s session's interpreter ended with an error", kernel.language, exc_info=True
        )


def _quote(word: str) -> str:
    return "'" + word.replace("'", "'\\''") + "'"
