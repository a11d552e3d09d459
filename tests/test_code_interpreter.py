"""The code interpreter: sessions, timeouts, refusals, plots and languages, on every backend.

`InterpreterContract` runs on a `LocalExecutor` (Python on a Jupyter kernel
and on the stdio driver), in an OS sandbox, in a container of the Python
test image (busybox: `sh` stands in for bash, no node) and over SSH.
Plots, HTML results and JavaScript are checked locally, where matplotlib
and node are installed (CI installs node: `EXECUTOR_REQUIRE_NODE=1`).

On a `LocalExecutor` the interpreters run in an OS sandbox of the tool's
own where the machine has one (the local contract runs there too); the
confinement tests get code past the code check and show the sandbox stops
it. They skip where the machine has no sandbox, and fail instead under
`EXECUTOR_REQUIRE_SANDBOX=1` (CI).
"""

from __future__ import annotations

import io
import os
import shutil
import socket
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from conftest import require_sandbox
from docker_engine import PYTHON_IMAGE, labelled_container
from ssh_server import SshServer

from executor import (
    CodeChunk,
    CodeInterpreterInput,
    CodeInterpreterTool,
    CodeResult,
    CodeStream,
    DefaultContext,
    DockerExecutor,
    ExecutorError,
    InvalidArgument,
    LocalExecutor,
    PolicyDenied,
    Sandbox,
    StreamingToolSession,
    ToolStreamError,
    Window,
)
from executor._builtins.codecheck import javascript_findings, python_findings
from executor._sandbox.sandbox import Backend as SandboxBackend
from executor.testing import FakeExecutor

pytestmark = pytest.mark.anyio

PYTHON_DIRS = tuple(
    dict.fromkeys([sys.prefix, sys.base_prefix, os.path.dirname(os.path.realpath(sys.executable))])
)
NODE_REQUIRED = os.environ.get("EXECUTOR_REQUIRE_NODE") == "1"


async def run(tool: CodeInterpreterTool, **given: Any) -> tuple[list[CodeChunk], CodeResult]:
    """Run one cell through a StreamingToolSession; its chunks and result."""
    chunks: list[CodeChunk] = []
    async with StreamingToolSession(tool, CodeInterpreterInput(**given)) as session:
        with anyio.fail_after(60):
            while (chunk := await session.next_chunk()) is not None:
                chunks.append(chunk)
            result = await session.finalize()
    return chunks, result.final


def text(chunks: list[CodeChunk], stream: CodeStream) -> str:
    """The joined content of the chunks of one stream."""
    return "".join(chunk.content for chunk in chunks if chunk.stream is stream)


class InterpreterContract:
    """What the interpreter does on any backend; a subclass supplies `tool`."""

    async def test_state_lives_in_its_session_only(self, tool: CodeInterpreterTool) -> None:
        """`x = 41` then `x + 1` gives 42 in one session, and a NameError in another."""
        _, first = await run(tool, language="python", code="x = 41", session="one")
        assert first.success
        chunks, again = await run(tool, language="python", code="x + 1", session="one")
        assert text(chunks, CodeStream.RESULT) == "42"
        assert again.success
        assert again.error is None
        chunks, other = await run(tool, language="python", code="x + 1", session="two")
        assert not other.success
        assert other.error is not None
        assert "NameError" in other.error
        assert "NameError" in text(chunks, CodeStream.ERROR)

    async def test_a_timeout_interrupts_the_cell_and_keeps_state(
        self, tool: CodeInterpreterTool
    ) -> None:
        """`while True: pass` with a 1 s timeout is interrupted; `x` is still 41 afterwards."""
        await run(tool, language="python", code="x = 41", session="s")
        chunks, stuck = await run(
            tool, language="python", code="while True: pass", session="s", timeout_secs=1
        )
        assert stuck.timed_out
        assert not stuck.success
        assert stuck.error is not None
        assert "interrupted" in stuck.error
        assert "KeyboardInterrupt" in text(chunks, CodeStream.ERROR)
        chunks, after = await run(tool, language="python", code="x", session="s")
        assert after.success
        assert text(chunks, CodeStream.RESULT) == "41"

    async def test_dangerous_python_is_refused_before_it_runs(
        self, tool: CodeInterpreterTool
    ) -> None:
        """`os.system('rm -rf /')` is refused with PolicyDenied; the session never sees it."""
        with pytest.raises(PolicyDenied, match=r"os\.system"):
            await run(tool, language="python", code="import os\nos.system('rm -rf /')", session="s")
        with pytest.raises(PolicyDenied, match="subprocess"):
            await run(tool, language="python", code="import subprocess as sp\nsp.run(['ls'])")

    async def test_output_streams_and_errors(self, tool: CodeInterpreterTool) -> None:
        """Prints arrive as stdout, writes to stderr as stderr, and a raise as a traceback."""
        code = "import sys\nprint('out')\nprint('err', file=sys.stderr)\nraise ValueError('bad')"
        chunks, result = await run(tool, language="python", code=code)
        assert text(chunks, CodeStream.STDOUT) == "out\n"
        assert "err" in text(chunks, CodeStream.STDERR)
        assert "ValueError" in text(chunks, CodeStream.ERROR)
        assert result.error is not None
        assert result.error.startswith("ValueError: bad")
        assert result.execution_time_ms >= 0

    async def test_bash_keeps_its_shell(self, tool: CodeInterpreterTool) -> None:
        """Bash cells share one shell: variables and the directory persist; status is success."""
        _, made = await run(
            tool, language="bash", code="mkdir -p sub && cd sub && n=5", session="b"
        )
        assert made.success
        chunks, _ = await run(
            tool, language="bash", code='echo "$n $(basename "$PWD")"', session="b"
        )
        assert text(chunks, CodeStream.STDOUT) == "5 sub\n"
        chunks, failed = await run(tool, language="bash", code="echo oops >&2; false", session="b")
        assert not failed.success
        assert failed.error == "exit status 1"
        assert text(chunks, CodeStream.STDERR) == "oops\n"
        with pytest.raises(PolicyDenied, match="rm-root"):
            await run(tool, language="bash", code="rm -rf /", session="b")

    async def test_a_bash_timeout_keeps_the_shell(self, tool: CodeInterpreterTool) -> None:
        """A busy shell loop past its timeout is interrupted; the shell's variables live on."""
        await run(tool, language="bash", code="kept=yes", session="b")
        _, stuck = await run(
            tool, language="bash", code="while :; do :; done", session="b", timeout_secs=1
        )
        assert stuck.timed_out
        chunks, _ = await run(tool, language="bash", code="echo $kept", session="b")
        assert text(chunks, CodeStream.STDOUT) == "yes\n"

    async def test_files_are_written_first(self, tool: CodeInterpreterTool) -> None:
        """`files` land in the workdir, where the cell runs."""
        chunks, result = await run(
            tool,
            language="python",
            code="open('data/in.txt').read().upper()",
            files={"data/in.txt": "hello"},
        )
        assert result.success
        assert text(chunks, CodeStream.RESULT) == "'HELLO'"


class TestLocalJupyter:
    """Locally, Python on a real ipykernel (asyncio: jupyter_client's zmq.asyncio)."""

    @pytest.fixture
    def anyio_backend(self) -> str:
        """jupyter_client runs on asyncio."""
        return "asyncio"

    @pytest.fixture
    async def tool(self, tmp_path: Path) -> AsyncIterator[CodeInterpreterTool]:
        """An interpreter on a LocalExecutor whose Python has ipykernel."""
        pytest.importorskip("jupyter_client")
        pytest.importorskip("ipykernel")
        async with LocalExecutor(tmp_path, kill_grace=0.2) as executor:
            tool = CodeInterpreterTool(
                DefaultContext.from_executor(executor),
                interpreters={"python": sys.executable},
                jupyter=True,
            )
            async with tool as entered:
                yield entered

    async def test_sessions_results_and_errors(self, tool: CodeInterpreterTool) -> None:
        """On the kernel: state by session, HTML results, stdout, stderr and tracebacks."""
        chunks, _ = await run(
            tool, language="python", code="x = 41\ntype(get_ipython()).__name__", session="one"
        )
        assert "ZMQInteractiveShell" in text(chunks, CodeStream.RESULT)
        chunks, again = await run(tool, language="python", code="x + 1", session="one")
        assert text(chunks, CodeStream.RESULT) == "42"
        assert again.success
        _, other = await run(tool, language="python", code="x + 1", session="two")
        assert other.error is not None
        assert other.error.startswith("NameError")
        code = (
            "import sys\nprint('out')\nprint('err', file=sys.stderr)\n"
            "class Bold:\n    def _repr_html_(self):\n        return '<b>hi</b>'\nBold()"
        )
        chunks, _ = await run(tool, language="python", code=code, session="one")
        assert text(chunks, CodeStream.STDOUT) == "out\n"
        assert text(chunks, CodeStream.STDERR) == "err\n"
        (result,) = [chunk for chunk in chunks if chunk.stream is CodeStream.RESULT]
        assert result.html == "<b>hi</b>"
        chunks, failed = await run(tool, language="python", code="1 / 0", session="one")
        assert failed.error == "ZeroDivisionError: division by zero"
        assert "ZeroDivisionError" in text(chunks, CodeStream.ERROR)
        assert "\x1b[" not in text(chunks, CodeStream.ERROR)

    async def test_a_timeout_interrupts_the_kernel_and_keeps_state(
        self, tool: CodeInterpreterTool
    ) -> None:
        """`while True: pass` past 1 s is interrupted through SIGINT; `x` is still 41."""
        await InterpreterContract().test_a_timeout_interrupts_the_cell_and_keeps_state(tool)

    async def test_a_plot_arrives_as_png(self, tool: CodeInterpreterTool) -> None:
        """A matplotlib figure comes as an `image/png` chunk that decodes to an image."""
        await check_plot(tool)


async def check_plot(tool: CodeInterpreterTool) -> None:
    """The seed's matplotlib cell gives its print and one valid PNG image."""
    image = pytest.importorskip("matplotlib.image")
    code = (
        "import matplotlib.pyplot as plt\n"
        "plt.plot([1, 2, 3, 4], [1, 4, 9, 16])\n"
        "plt.savefig('plot.png')\n"
        "print('Plot saved!')\n"
    )
    chunks, result = await run(tool, language="python", code=code, timeout_secs=60)
    assert result.success, result.error
    assert text(chunks, CodeStream.STDOUT) == "Plot saved!\n"
    images = [chunk for chunk in chunks if chunk.stream is CodeStream.IMAGE]
    assert len(images) == 1
    assert images[0].mime_type == "image/png"
    assert images[0].data is not None
    assert images[0].data.startswith(b"\x89PNG\r\n\x1a\n")
    pixels = image.imread(io.BytesIO(images[0].data), format="png")
    assert pixels.shape[0] > 50
    assert pixels.shape[1] > 50
    assert tool.render(images[0]).startswith("[image/png image, ")


class TestLocalStdio(InterpreterContract):
    """Locally, Python on the stdio driver (`jupyter=False`)."""

    @pytest.fixture
    def anyio_backend(self) -> str:
        """One loop for the contract; `test_on_trio` covers trio."""
        return "asyncio"

    @pytest.fixture
    async def tool(self, tmp_path: Path) -> AsyncIterator[CodeInterpreterTool]:
        """An interpreter on a LocalExecutor, Python on the stdio driver."""
        async with LocalExecutor(tmp_path, kill_grace=0.2) as executor:
            tool = CodeInterpreterTool(
                executor, interpreters={"python": sys.executable}, jupyter=False
            )
            async with tool as entered:
                yield entered

    async def test_a_plot_arrives_as_png(self, tool: CodeInterpreterTool) -> None:
        """The driver too sends a figure left open as a valid PNG."""
        await check_plot(tool)

    async def test_a_value_brings_its_html(self, tool: CodeInterpreterTool) -> None:
        """The last expression's `_repr_html_` comes with its plain form."""
        code = "class Bold:\n    def _repr_html_(self):\n        return '<b>hi</b>'\nBold()"
        chunks, _ = await run(tool, language="python", code=code)
        (result,) = [chunk for chunk in chunks if chunk.stream is CodeStream.RESULT]
        assert result.html == "<b>hi</b>"
        assert "Bold" in result.content

    async def test_display_shows_values(self, tool: CodeInterpreterTool) -> None:
        """The driver is plain Python (no IPython), with a `display()` of its own."""
        chunks, _ = await run(
            tool, language="python", code="display(1, 'two')\n'get_ipython' in dir()"
        )
        assert [chunk.content for chunk in chunks] == ["1", "'two'", "False"]

    async def test_a_dead_interpreter_loses_its_state_and_comes_back(
        self, tool: CodeInterpreterTool
    ) -> None:
        """An interpreter that exits mid-session reports it; the next call starts a fresh one."""
        await run(tool, language="python", code="x = 1", session="s")
        _, died = await run(tool, language="python", code="import os\nos._exit(3)", session="s")
        assert not died.success
        assert died.error is not None
        assert "state is lost" in died.error
        _, fresh = await run(tool, language="python", code="x", session="s")
        assert fresh.error is not None
        assert "NameError" in fresh.error

    async def test_a_cancelled_cell_leaves_the_session_usable(
        self, tool: CodeInterpreterTool
    ) -> None:
        """Cancelling the tool session mid-cell interrupts the cell; the session's state stays."""
        await run(tool, language="python", code="x = 7", session="s")
        given = CodeInterpreterInput(
            language="python",
            code="import time\nprint('go', flush=True)\ntime.sleep(60)",
            session="s",
        )
        async with StreamingToolSession(tool, given) as session:
            # The cell runs unbuffered (`-u`): `print` may arrive as `go`, then `\n`.
            seen = ""
            while "\n" not in seen:
                chunk = await session.next_chunk()
                assert chunk is not None, f"the stream ended after {seen!r}"
                seen += chunk.content
            assert seen == "go\n"
            session.cancel()
        chunks, _ = await run(tool, language="python", code="x", session="s")
        assert text(chunks, CodeStream.RESULT) == "7"

    async def test_javascript_runs_as_a_repl(self, tool: CodeInterpreterTool) -> None:
        """Node keeps `let` bindings across cells, awaits promises, is interrupted on timeout."""
        if shutil.which("node") is None:
            if NODE_REQUIRED:
                pytest.fail("EXECUTOR_REQUIRE_NODE=1 but node is not installed")
            pytest.skip("node is not installed")
        chunks, _ = await run(
            tool, language="javascript", code="let z = 41; console.log('js')", session="j"
        )
        assert text(chunks, CodeStream.STDOUT) == "js\n"
        chunks, _ = await run(tool, language="javascript", code="z + 1", session="j")
        assert text(chunks, CodeStream.RESULT) == "42"
        chunks, _ = await run(
            tool,
            language="javascript",
            code="await new Promise((done) => setTimeout(() => done(z), 50))",
            session="j",
        )
        assert text(chunks, CodeStream.RESULT) == "41"
        _, stuck = await run(
            tool, language="javascript", code="while (true) {}", session="j", timeout_secs=1
        )
        assert stuck.timed_out
        _, failed = await run(tool, language="javascript", code="z; nope()", session="j")
        assert failed.error is not None
        assert failed.error.startswith("ReferenceError")
        with pytest.raises(PolicyDenied, match="child_process"):
            await run(tool, language="javascript", code="require('child_process').execSync('ls')")


class TestSandboxed(InterpreterContract):
    """In an OS sandbox: the stdio driver (a kernel's sockets are out of reach)."""

    @pytest.fixture
    def anyio_backend(self) -> str:
        """One loop: trio is covered locally."""
        return "asyncio"

    @pytest.fixture(params=["bubblewrap", "landlock"])
    async def tool(
        self, tmp_path: Path, request: pytest.FixtureRequest
    ) -> AsyncIterator[CodeInterpreterTool]:
        """An interpreter on a sandboxed LocalExecutor."""
        sandbox = require_sandbox(Sandbox(backend=request.param, readable=PYTHON_DIRS))
        async with LocalExecutor(tmp_path, sandbox=sandbox, kill_grace=0.2) as executor:
            tool = CodeInterpreterTool(executor, interpreters={"python": sys.executable})
            assert await tool.jupyter_problem(sys.executable) is not None
            async with tool as entered:
                yield entered


@pytest.fixture(scope="module")
def container() -> Iterator[str]:
    """One idle container of the Python image for the Docker tests, labelled as ours."""
    with labelled_container(PYTHON_IMAGE) as found:
        yield found


class TestDocker(InterpreterContract):
    """In a container with no network: the stdio driver over the exec's stdin and stdout."""

    @pytest.fixture
    def anyio_backend(self) -> str:
        """The Docker client runs on asyncio."""
        return "asyncio"

    @pytest.fixture
    async def tool(self, container: str) -> AsyncIterator[CodeInterpreterTool]:
        """An interpreter in a new folder of the module's container."""
        async with (
            DockerExecutor(
                container=container, workdir=f"/workspace/{uuid.uuid4().hex}", kill_grace=0.2
            ) as executor,
            CodeInterpreterTool(executor) as entered,
        ):
            yield entered

    async def test_a_missing_interpreter_is_refused_naming_it(
        self, tool: CodeInterpreterTool
    ) -> None:
        """The image has no node: a JavaScript cell is refused, and the message says node."""
        with pytest.raises(ExecutorError, match="javascript interpreter is not available: node"):
            await run(tool, language="javascript", code="1 + 1")


class TestSsh(InterpreterContract):
    """On an SSH host: the stdio driver over the channel's stdin and stdout."""

    @pytest.fixture
    def anyio_backend(self) -> str:
        """Only asyncio: asyncssh has no trio support."""
        return "asyncio"

    @pytest.fixture
    async def tool(self, ssh_server: SshServer) -> AsyncIterator[CodeInterpreterTool]:
        """An interpreter on an SshExecutor in a new remote folder."""
        async with (
            ssh_server.executor(kill_grace=0.2) as executor,
            CodeInterpreterTool(executor) as entered,
        ):
            yield entered


# --- without a backend of its own ----------------------------------------------------


@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_on_trio(tmp_path: Path, anyio_backend: str) -> None:
    """Under trio (no Jupyter: zmq.asyncio), Python runs on the driver; state and timeouts hold."""
    executor = LocalExecutor(tmp_path, kill_grace=0.2)
    tool = CodeInterpreterTool(executor, interpreters={"python": sys.executable})
    async with executor, tool:
        assert await tool.jupyter_problem(sys.executable) is not None
        await InterpreterContract().test_a_timeout_interrupts_the_cell_and_keeps_state(tool)


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_r_is_refused_naming_it_where_absent(tmp_path: Path, anyio_backend: str) -> None:
    """Without R installed, an R cell is refused and the message names Rscript."""
    if shutil.which("Rscript") is not None:
        pytest.skip("R is installed here; the refusal needs a machine without it")
    async with LocalExecutor(tmp_path) as executor:
        tool = CodeInterpreterTool(executor)
        with pytest.raises(ExecutorError, match="Rscript is not installed"):
            await run(tool, language="r", code="1 + 1")


async def test_a_missing_program_is_named(tmp_path: Path) -> None:
    """An interpreter program that is not there is refused before anything starts, by name."""
    async with LocalExecutor(tmp_path) as executor:
        tool = CodeInterpreterTool(executor, interpreters={"python": "no-such-python"})
        with pytest.raises(ExecutorError, match="no-such-python is not installed"):
            await run(tool, language="python", code="1")


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_r_runs_as_a_repl(tmp_path: Path, anyio_backend: str) -> None:
    """R keeps its global environment, prints its last value, plots to PNG, is interrupted."""
    if shutil.which("Rscript") is None:
        pytest.skip("R is not installed (Rscript): the R cells cannot run here")
    async with (
        LocalExecutor(tmp_path, kill_grace=0.2) as executor,
        CodeInterpreterTool(executor) as tool,
    ):
        _, first = await run(tool, language="r", code="x <- 41", session="r")
        assert first.success
        chunks, _ = await run(tool, language="r", code="x + 1", session="r")
        assert text(chunks, CodeStream.RESULT) == "[1] 42"
        chunks, _ = await run(tool, language="r", code="plot(1:10)", session="r")
        (image,) = [chunk for chunk in chunks if chunk.stream is CodeStream.IMAGE]
        assert image.data is not None
        assert image.data.startswith(b"\x89PNG\r\n\x1a\n")
        _, stuck = await run(
            tool, language="r", code="while (TRUE) {}", session="r", timeout_secs=1
        )
        assert stuck.timed_out
        chunks, missing = await run(tool, language="r", code="x; nope", session="r")
        assert missing.error == "Error: object 'nope' not found"
        with pytest.raises(PolicyDenied, match="running a program"):
            await run(tool, language="r", code="system('rm -rf /')", session="r")


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_packages_need_the_policys_leave(tmp_path: Path, anyio_backend: str) -> None:
    """Packages are refused unless `allow_packages=True`; one already there installs quietly."""
    async with LocalExecutor(tmp_path) as executor:
        refusing = CodeInterpreterTool(executor, interpreters={"python": sys.executable})
        with pytest.raises(PolicyDenied, match="allow_packages"):
            await run(refusing, language="python", code="1", packages=["attrs"])
        allowing = CodeInterpreterTool(
            executor, interpreters={"python": sys.executable}, allow_packages=True, jupyter=False
        )
        chunks, result = await run(
            allowing, language="python", code="import attrs; attrs.__name__", packages=["attrs"]
        )
        assert result.success, chunks
        assert text(chunks, CodeStream.RESULT) == "'attrs'"


async def test_a_tool_not_entered_keeps_its_sessions(tmp_path: Path) -> None:
    """Without `async with`, sessions persist until `aclose()`, or until the executor ends."""
    async with LocalExecutor(tmp_path, kill_grace=0.2) as executor:
        tool = CodeInterpreterTool(executor)
        await run(tool, language="bash", code="kept=1", session="s")
        chunks, _ = await run(tool, language="bash", code="echo $kept", session="s")
        assert text(chunks, CodeStream.STDOUT) == "1\n"
        assert tool.sessions() == [("s", "bash")]
        await tool.aclose()
        assert tool.sessions() == []
        with pytest.raises(ToolStreamError, match="closed"):
            await run(tool, language="bash", code="echo", session="s")
        # Never closed: the executor's own end takes the interpreter with it.
        forgotten = CodeInterpreterTool(executor)
        await run(forgotten, language="bash", code="echo", session="s")


def test_the_spec_and_the_input_checks(tmp_path: Path) -> None:
    """The spec has the seed's fields; bad languages, sessions, paths and packages are refused."""
    tool = CodeInterpreterTool(LocalExecutor(tmp_path))
    spec = tool.spec
    assert spec["name"] == "code_interpreter"
    assert set(spec["parameters"]["properties"]) == {
        "language", "code", "timeout_secs", "session", "files", "packages",
    }  # fmt: skip
    assert set(spec["final_schema"]["properties"]) >= {"success", "execution_time_ms", "error"}
    assert tool.policy == Window(max_chunks=100)
    assert tool.parse_input('{"language": "bash", "code": "ls"}').language == "bash"
    for fine in ("attrs", "attrs>=23", "pkg[extra]==1.0", "@scope/name", "left-pad@1.3.0"):
        CodeInterpreterInput(language="python", code="1", packages=[fine])
    for bad in (
        {"language": "cobol", "code": "x"},
        {"language": "python", "code": "x", "session": "a b"},
        {"language": "python", "code": "x", "files": {"../up": ""}},
        {"language": "python", "code": "x", "packages": ["--index-url=http://evil"]},
        # A folder is no package: pip and npm would run its setup on the host.
        {"language": "python", "code": "x", "packages": ["pkg/"]},
        {"language": "python", "code": "x", "packages": ["./pkg"]},
        {"language": "javascript", "code": "x", "packages": ["a/b"]},
        {"language": "python", "code": "x", "timeout_secs": -1},
    ):
        with pytest.raises(InvalidArgument):
            CodeInterpreterInput(**bad)


@pytest.mark.parametrize(
    "code",
    [
        "import os\nos.system('ls')",
        "import os as o\no.popen('ls')",
        "from os import system\nsystem('x')",
        "import subprocess",
        "from subprocess import run",
        "import ctypes",
        "from ctypes import CDLL",
        "__import__('subprocess')",
        "import importlib\nimportlib.import_module('ctypes')",
        "import os\ngetattr(os, 'system')('x')",
        "import os\nos.execv('/bin/sh', ['sh'])",
        "import shutil\nshutil.rmtree('/')",
        "import shutil\nshutil.rmtree('/etc/')",
        "from shutil import rmtree\nrmtree('~')",
        "import shutil, pathlib\nshutil.rmtree(pathlib.Path('/usr/lib'))",
        "exec('import subprocess')",
        # The os module however it is reached, its functions however they are named.
        "__import__('os').system('touch /marker')",
        "import importlib\nimportlib.import_module('os').popen('ls')",
        "import builtins\nbuiltins.__import__('os').system('x')",
        "import sys\nsys.modules['os'].system('x')",
        "import os\no = os\no.system('x')",
        "o = __import__('os')\no.execv('/bin/sh', ['sh'])",
        "getattr(__import__('os'), 'system')('x')",
        "import os\nos.__dict__['system']('x')",
        "import os\nvars(os)['posix_spawn']('/bin/sh', ['sh'], {})",
        "import builtins\nbuiltins.__import__('subprocess')",
        # os as another module's attribute.
        "import pathlib\npathlib.os.system('x')",
        "import posixpath\ngetattr(posixpath.os, 'popen')('x')",
    ],
)
def test_python_analysis_refuses(code: str) -> None:
    """Each of these is found by the AST checks."""
    assert python_findings(code)


@pytest.mark.parametrize(
    "code",
    [
        "import os\nos.getcwd()",
        "import shutil\nshutil.rmtree('build')",
        "import shutil\nshutil.rmtree('/tmp/work/build')",
        "print('subprocess is a word')",
        "json = __import__('json')\njson.dumps({'system': 1})",
        "import os\nos.__dict__['getcwd']()",
        "import sys\nsys.modules['json'].dumps(1)",
        "def f(:",  # a syntax error is the cell's to report
    ],
)
def test_python_analysis_lets_through(code: str) -> None:
    """Ordinary code, and code that does not parse, passes the checks."""
    assert python_findings(code) == []


def test_javascript_analysis() -> None:
    """child_process is found in any spelling of its import; other modules pass."""
    assert javascript_findings("const cp = require('node:child_process')")
    assert javascript_findings('import { exec } from "child_process"')
    assert javascript_findings("process.binding('spawn_sync')")
    assert javascript_findings("const fs = require('fs'); fs.readFileSync('x')") == []


# --- confinement: the sandbox is the boundary, not the code check --------------------------

# Code the check lets through, that runs a program all the same: names built at run time.
PAST_THE_CHECK = "m = __import__('o' + 's')\ngetattr(m, 'sys' + 'tem')({command!r})"


class Markers:
    """Paths outside the workdir that no confined cell may create, and a listener on 127.0.0.1.

    `/`, `/etc`, the home folder and a folder of the test's own; each name
    is this run's, and whatever was made is removed at the end.
    """

    def __init__(self, outside: Path, server: socket.socket) -> None:
        name = f"executor-marker-{uuid.uuid4().hex}"
        self.root = Path("/") / name
        self.etc = Path("/etc") / name
        self.home = Path(os.path.expanduser("~")) / name
        self.outside = outside / name
        self.built = outside / f"{name}-built"
        self.server = server
        self.port: int = server.getsockname()[1]

    def all(self) -> list[Path]:
        """Every marker path."""
        return [self.root, self.etc, self.home, self.outside, self.built]

    def made(self) -> list[Path]:
        """The markers that exist on the host."""
        return [path for path in self.all() if os.path.lexists(path)]

    def connections(self) -> int:
        """How many connections reached the listener (each is taken and closed)."""
        count = 0
        while True:
            try:
                accepted, _ = self.server.accept()
            except BlockingIOError:
                return count
            accepted.close()
            count += 1


@pytest.fixture
def markers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Markers]:
    """Marker paths outside the workdir, and a socket listening on the host's 127.0.0.1."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        server.setblocking(False)
        found = Markers(tmp_path_factory.mktemp("outside"), server)
        try:
            yield found
        finally:
            for path in found.made():
                path.unlink()


def connect_code(language: str, port: int) -> str:
    """A cell that connects to 127.0.0.1:`port`, saying how it went, and never fails."""
    if language == "python":
        return (
            "try:\n"
            f"    __import__('socket').create_connection(('127.0.0.1', {port}), 2)\n"
            "    print('connected')\n"
            "except OSError as error:\n"
            "    print(type(error).__name__)"
        )
    if language == "javascript":
        return (
            "await new Promise((done) => { const s = require('net').connect("
            f"{port}, '127.0.0.1'); s.on('connect', () => done('connected')); "
            "s.on('error', (e) => done(e.code)) })"
        )
    return f"echo > /dev/tcp/127.0.0.1/{port} && echo connected"


def attempts(language: str, markers: Markers) -> list[str]:
    """Cells that try to write each marker and to connect to the listener, each on its own.

    A cell whose attempt fails says so and goes on (the session lives on);
    what counts is the host's state afterwards.
    """
    root, etc, home, outside, built = (str(path) for path in markers.all())
    connect = connect_code(language, markers.port)
    if language == "python":
        guard = "try:\n    {}\nexcept Exception as error:\n    print(type(error).__name__)"
        return [
            f"__import__('os').system('touch {root}')",
            guard.format(f"open({etc!r}, 'w').write('x')"),
            guard.format(f"__import__('subprocess').run(['touch', {outside!r}])"),
            guard.format(f"open(__import__('os').path.expanduser('~/{markers.home.name}'), 'w')"),
            connect,
            PAST_THE_CHECK.format(command=f"touch {built} {home}"),
        ]
    if language == "javascript":
        guard = "try {{ {} }} catch (error) {{ console.log(error.code || error.name) }}"
        home_file = f"require('os').homedir() + '/{markers.home.name}'"
        return [
            guard.format(f"require('child_process').execSync('touch {root} {outside}')"),
            guard.format(f"require('fs').writeFileSync({etc!r}, 'x')"),
            guard.format(f"require('fs').writeFileSync({home_file}, 'x')"),
            connect,
            guard.format(f"require('child_' + 'process').execSync('touch {built}')"),
        ]
    return [
        f"touch {root} {etc} {outside} ~/{markers.home.name}",
        connect,
        f"sh -c 'touch {built}'",
    ]


# In the workdir: a write that must work, then a read that shows state kept across cells.
KEEPS = {
    "python": ("kept = 41\nopen('inside.txt', 'w').write('in')", "kept + 1", "42"),
    "javascript": (
        "let kept = 41; require('fs').writeFileSync('inside.txt', 'in')",
        "kept + 1",
        "42",
    ),
    "bash": ("kept=42; echo in > inside.txt", "echo $kept", "42\n"),
}


async def confined_cells(
    tool: CodeInterpreterTool, language: str, markers: Markers, workdir: Path
) -> list[CodeResult]:
    """Run the attempts in one session between a workdir write and a read of kept state.

    Each attempt ran to its end (Python's and JavaScript's catch their
    failures), and none connected.
    """
    need(language)
    write, read, expected = KEEPS[language]
    _, first = await run(tool, language=language, code=write, session="c")
    assert first.success, first.error
    results = []
    for code in attempts(language, markers):
        chunks, result = await run(tool, language=language, code=code, session="c")
        said = "".join(chunk.content for chunk in chunks)
        assert "connected" not in said
        if language != "bash":
            assert result.success, (code, said, result.error)
        results.append(result)
    chunks, last = await run(tool, language=language, code=read, session="c")
    assert last.success, last.error
    stream = CodeStream.STDOUT if language == "bash" else CodeStream.RESULT
    assert text(chunks, stream) == expected
    assert (workdir / "inside.txt").read_text().strip() == "in"
    return results


LANGUAGES = ["python", "javascript", "bash"]


def need(language: str) -> None:
    """Skip where the language's interpreter is missing (fail for node under CI's require)."""
    if language == "javascript" and shutil.which("node") is None:
        if NODE_REQUIRED:
            pytest.fail("EXECUTOR_REQUIRE_NODE=1 but node is not installed")
        pytest.skip("node is not installed")


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("backend", ["bubblewrap", "landlock"])
@pytest.mark.parametrize("language", LANGUAGES)
async def test_confined_code_touches_nothing_outside_the_workdir(
    tmp_path: Path, markers: Markers, anyio_backend: str, backend: SandboxBackend, language: str
) -> None:
    """Past the code check, `os.system('touch /marker')` and its cousins change nothing outside.

    The check is off (and one attempt gets past it anyway); the writes to
    `/`, `/etc`, the home folder and a folder outside, through the language
    itself, a program it runs and a program run by one, leave no file on the
    host; the connection to the host's listener never arrives; the workdir
    is written and the session's state is kept.
    """
    sandbox = require_sandbox(Sandbox(backend=backend))
    async with LocalExecutor(tmp_path, kill_grace=0.2) as executor:
        tool = CodeInterpreterTool(
            executor,
            interpreters={"python": sys.executable},
            check_code=False,
            jupyter=False,
            sandbox=sandbox,
        )
        async with tool:
            assert tool.confinement == "sandbox"
            results = await confined_cells(tool, language, markers, tmp_path)
    assert markers.made() == []
    assert {result.confinement for result in results} == {"sandbox"}
    assert markers.connections() == 0


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("backend", ["bubblewrap", "landlock"])
async def test_the_jupyter_kernel_is_confined(
    tmp_path: Path, markers: Markers, anyio_backend: str, backend: SandboxBackend
) -> None:
    """The Jupyter kernel runs in the sandbox too, spoken to over sockets in its own folder."""
    pytest.importorskip("jupyter_client")
    pytest.importorskip("ipykernel")
    sandbox = require_sandbox(Sandbox(backend=backend))
    async with LocalExecutor(tmp_path, kill_grace=0.2) as executor:
        tool = CodeInterpreterTool(
            executor,
            interpreters={"python": sys.executable},
            check_code=False,
            jupyter=True,
            sandbox=sandbox,
        )
        async with tool:
            chunks, _ = await run(
                tool, language="python", code="type(get_ipython()).__name__", session="c"
            )
            assert "ZMQInteractiveShell" in text(chunks, CodeStream.RESULT)
            results = await confined_cells(tool, "python", markers, tmp_path)
            # Interrupts reach the kernel in the sandbox: the state survives a timeout.
            await InterpreterContract().test_a_timeout_interrupts_the_cell_and_keeps_state(tool)
    assert markers.made() == []
    assert {result.confinement for result in results} == {"sandbox"}
    assert markers.connections() == 0


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_the_sandbox_is_the_default_where_there_is_one(
    tmp_path: Path, markers: Markers, anyio_backend: str
) -> None:
    """A tool made with no word on it sandboxes a plain LocalExecutor's interpreters."""
    require_sandbox()
    async with LocalExecutor(tmp_path, kill_grace=0.2) as executor:
        tool = CodeInterpreterTool(executor, interpreters={"python": sys.executable})
        assert tool.sandbox is not None
        assert tool.confinement == "sandbox"
        async with tool:
            code = PAST_THE_CHECK.format(command=f"touch {markers.root}")
            _, result = await run(tool, language="python", code=code)
            assert result.confinement == "sandbox"
            # The home is hidden: what is in it is not there to read.
            markers.home.write_text("secret")
            try:
                chunks, _ = await run(
                    tool, language="python", code=f"open({str(markers.home)!r}).read()"
                )
            finally:
                markers.home.unlink()
            assert "secret" not in text(chunks, CodeStream.RESULT)
            assert "Error" in text(chunks, CodeStream.ERROR)
    assert markers.made() == []


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("language", LANGUAGES)
async def test_sandbox_false_runs_as_before(
    tmp_path: Path, markers: Markers, anyio_backend: str, language: str
) -> None:
    """`sandbox=False` runs the interpreters unconfined: a folder outside written, the host reached.

    Only the markers of the test's own folder and the listener are looked
    at (nothing is written to `/`, `/etc` or the home here).
    """
    async with LocalExecutor(tmp_path, kill_grace=0.2) as executor:
        tool = CodeInterpreterTool(
            executor, interpreters={"python": sys.executable}, check_code=False, sandbox=False
        )
        assert tool.sandbox is None
        assert tool.confinement == "host"
        write = {
            "python": f"open({str(markers.outside)!r}, 'w').write('x')",
            "javascript": f"require('fs').writeFileSync({str(markers.outside)!r}, 'x')",
            "bash": f"touch {markers.outside}",
        }[language]
        need(language)
        async with tool:
            _, wrote = await run(tool, language=language, code=write, session="u")
            chunks, _ = await run(
                tool, language=language, code=connect_code(language, markers.port), session="u"
            )
    assert wrote.success, wrote.error
    assert "connected" in text(chunks, CodeStream.STDOUT) + text(chunks, CodeStream.RESULT)
    assert wrote.confinement == "host"
    assert markers.outside.exists()
    assert markers.connections() == 1


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_sandbox_is_asked_only_where_one_can_be(tmp_path: Path, anyio_backend: str) -> None:
    """`sandbox=True` or a `Sandbox` needs a LocalExecutor without one; else it is refused."""
    fake = FakeExecutor()
    assert CodeInterpreterTool(fake).confinement == "executor"
    assert CodeInterpreterTool(fake, sandbox=False).sandbox is None
    with pytest.raises(ValueError, match="needs a LocalExecutor"):
        CodeInterpreterTool(fake, sandbox=True)
    with pytest.raises(TypeError, match="sandbox must be"):
        CodeInterpreterTool(fake, sandbox="yes")  # type: ignore[arg-type]
    sandbox = require_sandbox()
    async with LocalExecutor(tmp_path, sandbox=sandbox) as own:
        assert CodeInterpreterTool(own).confinement == "sandbox"
        assert CodeInterpreterTool(own, sandbox=True).sandbox is None
        with pytest.raises(ValueError, match="sandbox of its own"):
            CodeInterpreterTool(own, sandbox=Sandbox())


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_wrapped_executor_is_sandboxed_beneath_its_wrappers(
    tmp_path: Path, markers: Markers, anyio_backend: str
) -> None:
    """Under `scoped()` the interpreter starts in the scope, in the sandbox, past the check."""
    require_sandbox()
    (tmp_path / "sub").mkdir()
    async with LocalExecutor(tmp_path, kill_grace=0.2) as executor:
        scoped = executor.scoped("sub")
        async with CodeInterpreterTool(scoped, interpreters={"python": sys.executable}) as tool:
            assert tool.confinement == "sandbox"
            code = PAST_THE_CHECK.format(command=f"touch {markers.root}") + "\nos_cwd = m.getcwd()"
            _, result = await run(tool, language="python", code=code, session="w")
            assert result.success, result.error
            chunks, _ = await run(tool, language="python", code="os_cwd", session="w")
    assert text(chunks, CodeStream.RESULT) == repr(str(tmp_path / "sub"))
    assert markers.made() == []
