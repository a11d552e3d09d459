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
the executor it was given (`ex.start(...)`; a sandboxed twin of it, see
Confinement), so cells run where that executor runs commands: locally, in
an OS sandbox, in a container, on an SSH host. The interpreter runs a
small driver (`pydriver.py`, `nodedriver.js`, `shdriver.sh`, `rdriver.R`,
sent as the program's text: nothing is installed) that reads cells from its
stdin and answers on its stdout with framed results, images and errors
between the cell's own output. That channel is the session's
own, so it reaches a container with no network and a remote host alike,
where a Jupyter kernel's ZeroMQ sockets could not be reached; the driver
gives what the tool needs of a kernel: the last expression's plain and HTML
forms, matplotlib figures as PNG, tracebacks, `display()`, and SIGINT as a
cell interrupt. Where a Jupyter kernel can be reached (a `LocalExecutor`
without a sandbox of its own, `ipykernel` installed for its Python,
`jupyter_client` here: `pip install 'tool-executor[interpreter]'`), Python runs
on a real `ipykernel` instead, spoken to over UNIX sockets in a folder of
the kernel's own, unless `jupyter=False`.

Confinement. The code check (`executor._builtins.codecheck`) is a first
line, not a boundary: it refuses `os.system(...)`, `subprocess`,
`child_process`, R's `system()` and the usual ways round them
(`__import__("os")`, `importlib`, `getattr`, `sys.modules`), but a check of
a program's text cannot be sound (code can build any name at run time).
The boundary is an OS sandbox (`Sandbox`). On a `LocalExecutor` without
one, every interpreter (Python, the Jupyter kernel too, JavaScript, bash,
R) runs by default in an OS sandbox of the tool's own where this machine
has one (`Sandbox.probe()`): a sandboxed twin of the executor (its workdir,
environment and options), shared by the tool's interpreters and closed
with the last of them, in which the workdir is writable and so is a folder
of each interpreter's own (its `TMPDIR`, Jupyter's sockets; removed when it
ends), the rest is read-only, the home folder is
hidden and there is no network (`Sandbox()`'s defaults, or the `Sandbox`
given as `sandbox=`; the interpreter's installation stays readable where
it lies in the home folder). The wrappers of a `LocalExecutor` (policies,
`scoped()`) keep their checks: the twin goes beneath copies of them. The
twin leaves out the executor's `memory=` and `pids=`, which only bound
unsandboxed commands (`Sandbox(address_space=...)` bounds a sandboxed
one's memory). Where the machine has no sandbox to give,
they run unconfined on this host as before (logged once, at INFO).
`sandbox=False` opts out: unconfined on this host, the code check the only
line. On a `LocalExecutor` with a sandbox they run in that sandbox; on a
container, an SSH host or a Ray node, where that executor runs commands.
The tool's `confinement`, and each `CodeResult`'s, say which. Installing
packages (`allow_packages=True`) is not confined: it runs as the executor
runs commands, with its network.

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
import contextlib
import copy
import dataclasses
import enum
import functools
import importlib.util
import logging
import os
import re
import shutil
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from types import TracebackType
from typing import Any, Literal, Self, TypeAlias

import anyio
import anyio.abc
import anyio.to_thread
import attrs
import sniffio

from executor._builtins.codecheck import javascript_findings, python_findings, r_findings
from executor._builtins.common import check_timeout_secs, executor_of
from executor._builtins.kernels import (
    CellOutcome,
    JupyterKernel,
    Kernel,
    KernelHost,
    Opener,
    StdioKernel,
)
from executor._core.base import ToolExecutor, WrappedExecutor
from executor._core.cleanup import run_to_completion
from executor._core.commands import Command
from executor._core.errors import (
    CommandError,
    ExecutorError,
    InvalidArgument,
    NonZeroExit,
    PolicyDenied,
)
from executor._local.executor import LocalExecutor
from executor._policies.rules import DangerousCommands
from executor._sandbox.sandbox import Sandbox
from executor._tools.args import WorkspacePath
from executor._tools.handle import StreamingToolHandle, TaskHandle, ToolChannel
from executor._tools.policies import Window
from executor._tools.tool import StreamingTool
from executor._tools.tools import AgentContext

Language: TypeAlias = Literal["python", "javascript", "bash", "r"]
"""The languages the interpreter takes."""

Confinement: TypeAlias = Literal["sandbox", "host", "executor"]
"""Where cells run: `"sandbox"`, in an OS sandbox on this machine (the tool's own,
or the executor's); `"host"`, on this machine unconfined; `"executor"`,
wherever the executor runs commands (a container, an SSH host, a Ray node),
confined as it is there."""

_logger = logging.getLogger("executor")

_LANGUAGES: tuple[str, ...] = ("python", "javascript", "bash", "r")
_SESSION_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$")
# A package as pip or npm names one, with an optional version: never an option.
# A package name as an index knows it, never a path (pip and npm install a folder
# named like `pkg/` or `./pkg` by running its setup or scripts on the host): an
# npm scope (`@scope/`) is the only slash, and a version follows as npm (`@1.2`)
# or pip (`>=1.2`) writes it.
_PACKAGE = re.compile(
    r"^(@[A-Za-z0-9_.\-]+/)?[A-Za-z0-9][A-Za-z0-9_.\-]*(\[[A-Za-z0-9_,.\-]+\])?"
    r"(@[A-Za-z0-9_.\-^~]+|([<>=!~]=?[A-Za-z0-9_.*+\-]+)*)$"
)
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
        confinement: Where it ran: `"sandbox"`, in an OS sandbox (only the
            workdir writable, no network); `"host"`, on this machine
            unconfined; `"executor"`, wherever the executor runs commands
            (a container, an SSH host). See `Confinement`.
    """

    success: bool
    execution_time_ms: int
    error: str | None = None
    timed_out: bool = False
    confinement: Confinement | None = None


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
    it runs. Where the machine has an OS sandbox, code runs in it: only the
    working directory is writable, and there is no network (the result's
    `confinement` says where the cell ran).
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
        sandbox: Sandbox | bool | None = None,
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
                (see `executor._builtins.codecheck`): a first line against
                accidents and the obvious, not a boundary (the sandbox is).
            interpreters: The program to run per language, instead of
                looking for `python3`, `node`, `bash` (then `sh`), `Rscript`.
            package_timeout: Seconds an installation may take.
            jupyter: Whether Python runs on an `ipykernel`: `None` where it
                fits (see the module's notes), `True` always (an
                `ExecutorError` says why it cannot), `False` never (the
                stdio driver everywhere).
            sandbox: Where the interpreters of a `LocalExecutor` without a
                sandbox run (see the module's notes): `None` in an OS
                sandbox of the tool's own where this machine has one, else
                unconfined on this host; `True` in one always (an
                `ExecutorError` here when the machine has none); a
                `Sandbox`, in that one (the tool adds the interpreter's
                folders to `readable` and a folder of its own to
                `writable`); `False` never: unconfined, as the executor runs
                commands. An executor with a sandbox of its own runs them
                there (`True` is that one; a `Sandbox` is refused); other
                executors take `None` or `False` only.

        Raises:
            TypeError: `context` is neither an agent context nor an executor,
                or `sandbox` is neither a `Sandbox` nor a bool nor `None`.
            ValueError: A timeout that is not positive, an unknown language,
                or a sandbox asked of an executor that cannot have one of
                the tool's.
            ExecutorError: A sandbox asked for (`True`, a `Sandbox`) that
                this machine cannot give.
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
        # The LocalExecutor beneath the wrappers, if that is what runs the commands.
        self._local, self._wrappers = _local_beneath(self.executor)
        self.sandbox: Sandbox | None = self._own_sandbox(sandbox)
        """The sandbox the tool runs its interpreters in, `None` when it makes none."""
        self._rules = DangerousCommands(self.executor)
        self._jupyter_problem: dict[str, str | None] = {}
        self._found: dict[str, str] = {}
        self._kernels: dict[tuple[str, str], Kernel] = {}
        self._group: anyio.abc.TaskGroup | None = None
        self._registry: anyio.Lock | None = None
        # Sandboxed twins of the LocalExecutor, by the folders they keep readable.
        self._twins: dict[tuple[str, ...], _Twin] = {}
        self._twin_lock: anyio.Lock | None = None
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

    # --- confinement --------------------------------------------------------------------

    @property
    def confinement(self) -> Confinement:
        """Where cells run: in an OS sandbox, unconfined on this host, or the executor's place."""
        if self.sandbox is not None:
            return "sandbox"
        if self._local is None:
            return "executor"
        return "sandbox" if self._local.sandbox is not None else "host"

    def _own_sandbox(self, asked: Sandbox | bool | None) -> Sandbox | None:
        """The sandbox of the tool's own that `sandbox=` asks for, or `None` for none."""
        if asked is not None and not isinstance(asked, Sandbox | bool):
            raise TypeError(f"sandbox must be a Sandbox, a bool or None, not {asked!r}")
        local = self._local
        if asked is None:
            if local is None or local.sandbox is not None:
                return None
            default = Sandbox()
            try:
                default.choose_backend()
            except ExecutorError as error:
                _warn_unconfined(str(error))
                return None
            return default
        if asked is False:
            return None
        if local is None:
            raise ValueError(
                f"an OS sandbox of the interpreter's own needs a LocalExecutor: {self.executor!r} "
                "runs commands elsewhere, confined as it is there (sandbox=None)"
            )
        if local.sandbox is not None:
            if isinstance(asked, Sandbox):
                raise ValueError(
                    f"{local!r} has a sandbox of its own, in which the interpreters run "
                    "(sandbox=True or None)"
                )
            return None
        wanted = Sandbox() if asked is True else asked
        wanted.choose_backend()
        return wanted

    def _host(self, program: str) -> Opener | None:
        """Where an interpreter of `program` runs: `None` for the executor as it is.

        With a sandbox of the tool's own, interpreters run in a sandboxed
        twin of the `LocalExecutor` (behind copies of its wrappers), shared
        by the tool's interpreters that need the same folders readable and
        closed when the last of them ends; each interpreter gets a folder of
        its own in the twin's folder (bound writable), and an anchor: a
        process of the original executor's whose end (that executor closed)
        ends the interpreter, as the executor's end would have ended it
        unconfined.
        """
        local, base = self._local, self.sandbox
        if local is None or base is None:
            return None
        readable = _interpreter_folders(program.removeprefix("sh:"), base)

        @contextlib.asynccontextmanager
        async def opened() -> AsyncIterator[KernelHost]:
            twin = await self._twin(local, base, readable)
            try:
                folder = await anyio.to_thread.run_sync(
                    functools.partial(tempfile.mkdtemp, prefix="k", dir=twin.folder)
                )
                try:
                    scratch = os.path.join(folder, "tmp")
                    await anyio.to_thread.run_sync(os.mkdir, scratch)
                    env = {"TMPDIR": scratch, "MPLCONFIGDIR": os.path.join(folder, "matplotlib")}
                    async with _anchored(local) as lost:
                        yield KernelHost(twin.routed, folder, env, lost)
                finally:
                    await run_to_completion(functools.partial(_remove, folder))
            finally:
                await run_to_completion(functools.partial(self._leave, twin))

        return opened

    async def _twin(self, local: LocalExecutor, base: Sandbox, readable: tuple[str, ...]) -> _Twin:
        """The twin for interpreters that need `readable`, made if there is none; one more user."""
        if self._twin_lock is None:
            self._twin_lock = anyio.Lock()
        async with self._twin_lock:
            twin = self._twins.get(readable)
            if twin is None:
                folder = await anyio.to_thread.run_sync(
                    functools.partial(tempfile.mkdtemp, prefix="executor-", dir=_short_temp())
                )
                writable = (local.workdir,) if base.writable is None else base.writable
                sandbox = attrs.evolve(
                    base, readable=(*base.readable, *readable), writable=(*writable, folder)
                )
                try:
                    executor = attrs.evolve(local, sandbox=sandbox, memory=None, pids=None)
                except BaseException:
                    shutil.rmtree(folder, ignore_errors=True)
                    raise
                twin = self._twins[readable] = _Twin(
                    executor, _rewrapped(self._wrappers, executor), folder, readable
                )
            twin.users += 1
            return twin

    async def _leave(self, twin: _Twin) -> None:
        """One user fewer; the last one out closes the twin and removes its folder."""
        assert self._twin_lock is not None
        async with self._twin_lock:
            twin.users -= 1
            if twin.users or self._twins.get(twin.key) is not twin:
                return
            del self._twins[twin.key]
        try:
            await twin.executor.aclose()
        finally:
            await _remove(twin.folder)

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
            confinement=self.confinement,
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

        It can when the executor is a `LocalExecutor` without a sandbox of
        its own (the kernel's sockets and connection file are in a folder of
        this host's; in the tool's sandbox, one bound writable there), the
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
        if self._local is None or self._wrappers:
            return f"only a LocalExecutor reaches a Jupyter kernel's sockets, not {self.executor!r}"
        if self._local.sandbox is not None:
            return (
                "the executor's own sandbox has no folder for a Jupyter kernel's sockets "
                "(the tool's own sandbox has one)"
            )
        if importlib.util.find_spec("jupyter_client") is None:
            return "jupyter_client is not installed (pip install 'tool-executor[interpreter]')"
        probe = Command.exec([program, "-c", "import ipykernel_launcher"]).with_timeout(60)
        try:
            await self.executor.exec_cmd(probe)
        except CommandError:
            return f"ipykernel is not installed for {program} (pip install ipykernel)"
        return None

    async def _kernel(self, language: str, program: str) -> Kernel:
        host = self._host(program)
        if language == "python" and self.jupyter is not False:
            problem = await self.jupyter_problem(program)
            if problem is None:
                return JupyterKernel(self.executor, python=program, make_chunk=_chunk, host=host)
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
                host=host,
            )
        if language == "javascript":
            return StdioKernel(
                self.executor,
                language=language,
                argv=[program, "-e"],
                driver="nodedriver.js",
                make_chunk=_chunk,
                env=env,
                host=host,
            )
        if language == "r":
            return StdioKernel(
                self.executor,
                language=language,
                argv=[program, "--vanilla", "-e"],
                driver="rdriver.R",
                make_chunk=_chunk,
                encode=_encode_hex,
                host=host,
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
            host=host,
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
                confinement=self.confinement,
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


# --- confinement ---------------------------------------------------------------------

_warned = False


def _warn_unconfined(why: str) -> None:
    """Log once per process that interpreters run unconfined for want of a sandbox.

    At INFO, as before there was a sandbox to want: the tool's
    `confinement` and each result's say it where it matters.
    """
    global _warned
    if not _warned:
        _warned = True
        _logger.info(
            "no OS sandbox on this machine: the code interpreter's cells run unconfined on "
            "this host, only the code check before them (%s)",
            why.replace("\n", " "),
        )


@dataclasses.dataclass(eq=False)
class _Twin:
    """A sandboxed twin of a `LocalExecutor`, and who uses it.

    Attributes:
        executor: The twin.
        routed: The twin behind copies of the original's wrappers.
        folder: Its folder of the interpreters' own, bound writable.
        key: The folders it keeps readable, by which the tool finds it.
        users: The interpreters running in it.
    """

    executor: LocalExecutor
    routed: ToolExecutor
    folder: str
    key: tuple[str, ...]
    users: int = 0


def _local_beneath(executor: ToolExecutor) -> tuple[LocalExecutor | None, list[WrappedExecutor]]:
    """The `LocalExecutor` running `executor`'s commands (or `None`), and the wrappers above."""
    wrappers = []
    while isinstance(executor, WrappedExecutor):
        wrappers.append(executor)
        executor = executor.inner
    return (executor if isinstance(executor, LocalExecutor) else None), wrappers


def _rewrapped(wrappers: list[WrappedExecutor], bottom: ToolExecutor) -> ToolExecutor:
    """`bottom` behind copies of `wrappers` (outermost first): their checks apply as before."""
    executor = bottom
    for wrapper in reversed(wrappers):
        route = copy.copy(wrapper)
        route.inner = executor
        executor = route
    return executor


def _interpreter_folders(program: str, sandbox: Sandbox) -> tuple[str, ...]:
    """What of `program`'s installation the sandbox would hide: its prefix, in a home or /tmp.

    Both the path found and the one it links to count (a virtualenv's
    `bin/python` links to the base Python's). A program directly in a
    hidden folder keeps only itself readable, never the whole folder.
    """
    if not os.path.isabs(program):
        return ()
    hidden = [os.path.realpath(folder) for folder in (*sandbox.hidden(), "/tmp")]
    found: list[str] = []
    for path in dict.fromkeys((program, os.path.realpath(program))):
        folder = os.path.dirname(path)
        prefix = os.path.dirname(folder)
        for top in hidden:
            if not (path + "/").startswith(top.rstrip("/") + "/"):
                continue
            keep = next(
                (
                    candidate
                    for candidate in (prefix, folder, path)
                    if candidate.startswith(top.rstrip("/") + "/")
                ),
                path,
            )
            if keep not in found and os.path.exists(keep):
                found.append(keep)
    return tuple(found)


@contextlib.asynccontextmanager
async def _anchored(local: LocalExecutor) -> AsyncIterator[Callable[[], Awaitable[None]]]:
    """A process of `local`'s own, and what returns when it ends: when `local` is closed."""
    anchor = await local.start(Command.exec([_cat()]))

    async def lost() -> None:
        with contextlib.suppress(Exception):
            while await anchor.next_chunk() is not None:
                pass

    async with anchor:
        yield lost


def _short_temp() -> str:
    """Where the twins' folders go: the temporary folder, or /tmp where its path is long.

    A UNIX socket's path has at most 107 bytes, and a Jupyter kernel's
    sockets lie three levels below (`executor-*/k*/kernel-N`, 37 more).
    """
    folder = tempfile.gettempdir()
    return folder if len(folder) <= 64 or not os.path.isdir("/tmp") else "/tmp"


async def _remove(folder: str) -> None:
    await anyio.to_thread.run_sync(functools.partial(shutil.rmtree, folder, ignore_errors=True))


@functools.cache
def _cat() -> str:
    return shutil.which("cat") or "/bin/cat"
