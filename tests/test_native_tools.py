"""The native tools against their references' behaviour, on Local, Docker and SSH.

Anthropic's text editor (`str_replace_based_edit_tool`, and SWE-agent's
`str_replace_editor` with `undo_edit`): every command and every error case of
the reference (`computer_use_demo/tools/edit.py`), with absolute paths mapped
onto the workspace. `bash`: state that persists, and `restart`. OpenAI's
`shell`: one outcome per command, the output cap, the timeout; `local_shell`:
env, timeout and working directory. Also: edits of CRLF and tab files that
leave every byte outside the edit as it was, and undo that restores a file
exactly; `spec_for`'s native declarations; yield windows and idle timeouts
through the toolset; the OpenAI Agents SDK's own shell and apply-patch tools
backed by an executor, driven by a scripted model of the SDK.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from docker_engine import PYTHON_IMAGE, labelled_container
from ssh_server import SshServer

from executor import (
    Command,
    DockerExecutor,
    LocalExecutor,
    ToolExecutor,
    ToolOutput,
    ToolOutputKind,
    Toolset,
)
from executor._toolset.native import NATIVE_TOOLS

pytestmark = pytest.mark.anyio

FAMILIES = list(NATIVE_TOOLS)


@pytest.fixture
def anyio_backend() -> str:
    # asyncssh runs on asyncio only; the tools do not depend on the loop.
    return "asyncio"


@pytest.fixture(scope="module")
def container() -> Iterator[str]:
    """One idle container for the Docker cases (skips without an engine)."""
    with labelled_container(PYTHON_IMAGE) as container_id:
        yield container_id


@pytest.fixture(params=["local", "docker", "ssh"])
def make_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], ToolExecutor]:
    """Makes an executor in an empty workspace: local, in a container, or over SSH."""
    if request.param == "local":
        return lambda: LocalExecutor(tmp_path, kill_grace=0.2)
    if request.param == "docker":
        container_id = request.getfixturevalue("container")
        workdir = f"/workspace/{uuid.uuid4().hex}"
        return lambda: DockerExecutor(container=container_id, workdir=workdir, kill_grace=0.2)
    server: SshServer = request.getfixturevalue("ssh_server")
    return lambda: server.executor(kill_grace=0.2)


@pytest.fixture
async def backend(make_backend: Callable[[], ToolExecutor]) -> AsyncIterator[ToolExecutor]:
    async with make_backend() as executor:
        yield executor


class Calls:
    """A toolset of every native family (and the standard file tools) over one executor."""

    def __init__(self, toolset: Toolset, executor: ToolExecutor, root: str) -> None:
        self.toolset = toolset
        self.context = toolset.context(executor)
        self.executor = executor
        self.root = root

    async def __call__(self, name: str, **arguments: Any) -> ToolOutput:
        return await self.toolset.call(self.context, name, arguments)

    def path(self, relative: str = "") -> str:
        return f"{self.root}/{relative}" if relative else self.root

    async def put(self, relative: str, data: bytes) -> None:
        await self.executor.exec_cmd(Command.write_file(relative, data))

    async def get(self, relative: str) -> bytes:
        return (await self.executor.exec_cmd(Command.read_file(relative))).stdout


@pytest.fixture
async def calls(backend: ToolExecutor) -> AsyncIterator[Calls]:
    toolset = Toolset(native=FAMILIES, include=[*sum(NATIVE_TOOLS.values(), ()), "edit_file"])
    async with toolset:
        pwd = await backend.exec_cmd(Command.exec(["pwd"]))
        yield Calls(toolset, backend, pwd.stdout.decode().strip())


# --- the text editors ------------------------------------------------------------------


async def test_view_a_file_whole_and_by_range(calls: Calls) -> None:
    await calls.put("a.py", b"one\n\ttwo\nthree\n")
    out = await calls("str_replace_based_edit_tool", command="view", path=calls.path("a.py"))
    assert not out.is_error, out.text
    assert out.text == (
        f"Here's the result of running `cat -n` on {calls.path('a.py')}:\n"
        "     1\tone\n     2\t\ttwo\n     3\tthree\n     4\t\n"
    )
    out = await calls(
        "str_replace_based_edit_tool", command="view", path=calls.path("a.py"), view_range=[2, -1]
    )
    assert out.text.splitlines()[1:] == ["     2\t\ttwo", "     3\tthree", "     4\t"]
    out = await calls(
        "str_replace_based_edit_tool", command="view", path=calls.path("a.py"), view_range=[2, 2]
    )
    assert out.text.splitlines()[1:] == ["     2\t\ttwo"]


@pytest.mark.parametrize(
    ("view_range", "words"),
    [
        ([0, 2], "Its first element `0` should be within the range of lines of the file: [1, 4]"),
        ([3, 9], "Its second element `9` should be smaller than the number of lines"),
        ([3, 2], "Its second element `2` should be larger or equal than its first `3`"),
        ([1], "It should be a list of two integers"),
    ],
)
async def test_view_range_errors_are_the_references(
    calls: Calls, view_range: list[int], words: str
) -> None:
    await calls.put("a.py", b"one\ntwo\nthree\n")
    out = await calls(
        "str_replace_based_edit_tool",
        command="view",
        path=calls.path("a.py"),
        view_range=view_range,
    )
    assert out.is_error
    assert words in out.text


async def test_view_a_directory_lists_two_levels_without_hidden_files(calls: Calls) -> None:
    for name in ("top.txt", "sub/mid.txt", "sub/deep/low.txt", "sub/deep/deeper/no.txt"):
        await calls.put(name, b"x")
    await calls.put(".hidden/file", b"x")
    await calls.put("sub/.secret", b"x")
    out = await calls("str_replace_based_edit_tool", command="view", path=calls.path())
    head, *listing = out.text.strip().splitlines()
    assert head == (
        f"Here's the files and directories up to 2 levels deep in {calls.root}, "
        "excluding hidden items:"
    )
    shown = {line.removeprefix(calls.root) for line in listing}
    assert shown == {"", "/top.txt", "/sub", "/sub/mid.txt", "/sub/deep"}
    out = await calls(
        "str_replace_based_edit_tool", command="view", path=calls.path("sub"), view_range=[1, 2]
    )
    assert out.text == (
        "The `view_range` parameter is not allowed when `path` points to a directory."
    )


async def test_paths_are_absolute_and_inside_the_workspace(calls: Calls) -> None:
    out = await calls("str_replace_based_edit_tool", command="view", path="a.py")
    assert out.is_error
    assert out.text == (
        "The path a.py is not an absolute path, it should start with `/`. "
        f"Maybe you meant {calls.path('a.py')}?"
    )
    out = await calls("str_replace_based_edit_tool", command="view", path="/etc/passwd")
    assert out.is_error
    assert "outside the workspace" in out.text
    out = await calls(
        "str_replace_based_edit_tool", command="view", path=calls.path("../../etc/passwd")
    )
    assert out.is_error
    out = await calls("str_replace_based_edit_tool", command="view", path=calls.path("nope"))
    assert out.text == f"The path {calls.path('nope')} does not exist. Please provide a valid path."


async def test_create_and_its_errors(calls: Calls) -> None:
    path = calls.path("new/made.py")
    out = await calls("str_replace_based_edit_tool", command="create", path=path)
    assert out.text == "Parameter `file_text` is required for command: create"
    out = await calls("str_replace_based_edit_tool", command="create", path=path, file_text="x\n")
    assert out.text == f"File created successfully at: {path}"
    assert await calls.get("new/made.py") == b"x\n"
    out = await calls("str_replace_based_edit_tool", command="create", path=path, file_text="y")
    assert out.text == (
        f"File already exists at: {path}. Cannot overwrite files using command `create`."
    )
    assert await calls.get("new/made.py") == b"x\n"
    out = await calls(
        "str_replace_based_edit_tool", command="str_replace", path=calls.path("new"), old_str="x"
    )
    assert out.text == (
        f"The path {calls.path('new')} is a directory and only the `view` command can be used "
        "on directories"
    )


async def test_str_replace_and_its_errors(calls: Calls) -> None:
    await calls.put("a.py", b"def f():\n    return 1\n\ndef g():\n    return 1\n")
    path = calls.path("a.py")
    out = await calls("str_replace_based_edit_tool", command="str_replace", path=path)
    assert out.text == "Parameter `old_str` is required for command: str_replace"
    out = await calls(
        "str_replace_based_edit_tool",
        command="str_replace",
        path=path,
        old_str="return 1",
        new_str="return 2",
    )
    assert out.text == (
        "No replacement was performed. Multiple occurrences of old_str `return 1` in lines "
        "[2, 5]. Please ensure it is unique"
    )
    out = await calls(
        "str_replace_based_edit_tool",
        command="str_replace",
        path=path,
        old_str="return 9",
        new_str="x",
    )
    assert out.text.startswith(
        f"No replacement was performed, old_str `return 9` did not appear verbatim in {path}."
    )
    assert await calls.get("a.py") == b"def f():\n    return 1\n\ndef g():\n    return 1\n"
    out = await calls(
        "str_replace_based_edit_tool",
        command="str_replace",
        path=path,
        old_str="def g():\n    return 1",
        new_str="def g():\n    return 2",
    )
    assert not out.is_error, out.text
    assert out.text.startswith(f"The file {path} has been edited.")
    assert "     5\t    return 2" in out.text
    assert out.text.endswith(
        "Review the changes and make sure they are as expected. Edit the file again if necessary."
    )
    assert await calls.get("a.py") == b"def f():\n    return 1\n\ndef g():\n    return 2\n"


async def test_insert_and_its_errors(calls: Calls) -> None:
    await calls.put("a.txt", b"one\ntwo\n")
    path = calls.path("a.txt")
    out = await calls("str_replace_based_edit_tool", command="insert", path=path, insert_text="x")
    assert out.text == "Parameter `insert_line` is required for command: insert"
    out = await calls(
        "str_replace_based_edit_tool", command="insert", path=path, insert_line=5, insert_text="x"
    )
    assert out.text == (
        "Invalid `insert_line` parameter: 5. It should be within the range of lines of the "
        "file: [0, 2]"
    )
    for line, text in ((0, "zero"), (3, "end"), (1, "after one")):
        out = await calls(
            "str_replace_based_edit_tool",
            command="insert",
            path=path,
            insert_line=line,
            insert_text=text,
        )
        assert not out.is_error, out.text
    assert await calls.get("a.txt") == b"zero\nafter one\none\ntwo\nend\n"
    out = await calls(
        "str_replace_editor", command="insert", path=path, insert_line=0, new_str="top"
    )
    assert not out.is_error, out.text
    assert (await calls.get("a.txt")).startswith(b"top\nzero\n")


async def test_an_unknown_command_names_the_allowed_ones(calls: Calls) -> None:
    await calls.put("a.txt", b"a\n")
    out = await calls("str_replace_based_edit_tool", command="undo_edit", path=calls.path("a.txt"))
    assert out.kind is ToolOutputKind.INVALID_ARGUMENTS
    assert "expected one of ['view', 'create', 'str_replace', 'insert']" in out.text


async def test_crlf_and_tabs_survive_an_edit_and_undo_restores_every_byte(calls: Calls) -> None:
    original = b"first\r\n\tindented  \r\nthird line\r\n\r\nno newline at the end"
    await calls.put("w.txt", original)
    path = calls.path("w.txt")
    out = await calls(
        "str_replace_editor",
        command="str_replace",
        path=path,
        old_str="\tindented  \r\nthird",
        new_str="\tchanged\r\nthird",
    )
    assert not out.is_error, out.text
    edited = await calls.get("w.txt")
    assert edited == original.replace(b"\tindented  \r\nthird", b"\tchanged\r\nthird")
    # The model wrote bare newlines and no trailing blanks: the fallback matches, CRLF kept.
    out = await calls(
        "str_replace_editor",
        command="str_replace",
        path=path,
        old_str="\tchanged\nthird line",
        new_str="\tagain\nthird line",
    )
    assert not out.is_error, out.text
    assert "matched" in out.text
    assert await calls.get("w.txt") == original.replace(b"\tindented  ", b"\tagain")
    for expected in (edited, original):
        out = await calls("str_replace_editor", command="undo_edit", path=path)
        assert out.text.startswith(f"Last edit to {path} undone successfully."), out.text
        assert await calls.get("w.txt") == expected
    out = await calls("str_replace_editor", command="undo_edit", path=path)
    assert out.text == f"No edit history found for {path}."


async def test_edit_file_and_undo_edit_keep_bytes(calls: Calls, backend: ToolExecutor) -> None:
    original = b"a\tb\r\n  c  \r\n"
    await calls.put("t.txt", original)
    toolset = Toolset()
    async with toolset:
        context = toolset.context(backend)
        out = await toolset.call(
            context, "edit_file", {"path": "t.txt", "old_text": "a\tb", "new_text": "a\tB"}
        )
        assert not out.is_error, out.text
        assert await calls.get("t.txt") == b"a\tB\r\n  c  \r\n"
        out = await toolset.call(context, "undo_edit", {"path": "t.txt"})
        assert not out.is_error, out.text
        assert await calls.get("t.txt") == original
        out = await toolset.call(context, "undo_edit", {"path": "t.txt"})
        assert out.is_error
        assert "no edit of t.txt to undo" in out.text


# --- bash ----------------------------------------------------------------------------


async def test_bash_keeps_its_state_and_restart_drops_it(calls: Calls) -> None:
    out = await calls("bash", command="export K=3; mkdir -p sub; cd sub; f() { echo f$1; }")
    assert not out.is_error, out.text
    out = await calls("bash", command="echo $K; pwd; f 1")
    assert out.text.splitlines()[:3] == ["3", calls.path("sub"), "f1"]
    assert (await calls("bash", restart=True)).text == "tool has been restarted."
    out = await calls("bash", command="echo K=$K; pwd")
    assert out.text.splitlines()[:2] == ["K=", calls.root]
    out = await calls("bash")
    assert out.is_error
    assert out.text == "no command provided."


# --- OpenAI's shell and local_shell ----------------------------------------------------


async def test_shell_gives_each_command_its_outcome(calls: Calls) -> None:
    out = await calls(
        "shell",
        commands=["echo out; echo err >&2", "exit 3", "echo 0123456789abcdefghij", "sleep 20"],
        timeout_ms=1000,
        max_output_length=10,
    )
    assert not out.is_error, out.text
    answer = json.loads(out.text)
    first, failed, long, slow = answer["output"]
    assert answer["max_output_length"] == 10
    assert (first["stdout"], first["stderr"]) == ("out\n", "err\n")
    assert first["outcome"] == {"type": "exit", "exit_code": 0}
    assert failed["outcome"] == {"type": "exit", "exit_code": 3}
    assert long["stdout"].startswith("01234")
    assert "cut" in long["stdout"]
    assert long["stdout"].endswith("ghij\n")
    assert slow["outcome"] == {"type": "timeout"}


async def test_local_shell_env_timeout_and_working_directory(calls: Calls) -> None:
    await calls.put("sub/x", b"")
    out = await calls(
        "local_shell",
        command=["sh", "-c", 'echo "$FOO"; pwd'],
        env={"FOO": "bar"},
        working_directory=calls.path("sub"),
    )
    assert out.text.splitlines()[:2] == ["bar", calls.path("sub")]
    out = await calls("local_shell", command=["pwd"], working_directory="sub")
    assert out.text.splitlines()[0] == calls.path("sub")
    started = anyio.current_time()
    out = await calls("local_shell", command=["sleep", "20"], timeout_ms=500)
    assert out.kind is ToolOutputKind.TIMED_OUT
    assert anyio.current_time() - started < 10
    out = await calls("local_shell", command=["pwd"], working_directory="/etc")
    assert out.kind is ToolOutputKind.INVALID_ARGUMENTS


async def test_apply_patch_through_the_tool(calls: Calls) -> None:
    await calls.put("a.txt", b"one\ntwo\n")
    patch = (
        "*** Begin Patch\n*** Update File: a.txt\n@@\n one\n-two\n+TWO\n"
        "*** Add File: b.txt\n+bee\n*** End Patch\n"
    )
    out = await calls("apply_patch", input=patch)
    assert not out.is_error, out.text
    assert await calls.get("a.txt") == b"one\nTWO\n"
    assert await calls.get("b.txt") == b"bee\n"
    out = await calls("apply_patch", input=patch.replace("-two", "-missing"))
    assert out.is_error
    assert await calls.get("a.txt") == b"one\nTWO\n"


# --- yield and idle timeouts -----------------------------------------------------------


async def _until_ended(toolset: Toolset, context: Any, job: str) -> str:
    """Everything job `job` prints from now to its end, read through `job_read`."""
    text = ""
    with anyio.fail_after(20):
        while "exit code" not in text:
            text += (await toolset.call(context, "job_read", {"job_id": job})).text
            await anyio.sleep(0.1)
    return text


async def _still_running(executor: ToolExecutor, pid: str) -> bool:
    output = await executor.exec_cmd(
        Command.exec(["sh", "-c", 'kill -0 "$1" 2>/dev/null && echo yes || echo no', "sh", pid])
    )
    return output.stdout.strip() == b"yes"


async def test_a_command_past_its_yield_window_comes_back_with_a_handle(
    backend: ToolExecutor,
) -> None:
    toolset = Toolset(yield_after=1)
    async with toolset:
        context = toolset.context(backend)
        started = anyio.current_time()
        out = await toolset.call(context, "run", {"command": "echo begun; sleep 3; echo done"})
        assert anyio.current_time() - started < 2.5
        assert out.text.startswith("begun\n"), out.text
        assert "as job r" in out.text
        job = out.text.split("as job ")[1].split(":")[0]
        read = await _until_ended(toolset, context, job)
        assert "done" in read
        assert "exit code 0" in read
        out = await toolset.call(context, "run", {"command": "read x; echo got $x"})
        job = out.text.split("as job ")[1].split(":")[0]
        await toolset.call(context, "job_write", {"job_id": job, "text": "hello\n"})
        assert "got hello" in await _until_ended(toolset, context, job)
        # A quick command is answered as without a window.
        out = await toolset.call(context, "run", {"command": "echo quick; exit 4"})
        assert out.kind is ToolOutputKind.FAILED
        assert out.exit_code == 4
        # Stopped through its handle, nothing of it runs on.
        out = await toolset.call(context, "run", {"command": "echo $$; exec sleep 30"})
        pid = out.text.split("\n")[0]
        job = out.text.split("as job ")[1].split(":")[0]
        assert await _still_running(backend, pid)
        await toolset.call(context, "job_stop", {"job_id": job})
        assert not await _still_running(backend, pid)


async def test_a_shell_command_yields_and_the_shell_keeps_its_state(
    backend: ToolExecutor,
) -> None:
    toolset = Toolset()
    async with toolset:
        context = toolset.context(backend)
        out = await toolset.call(
            context, "shell", {"command": "export K=3; sleep 2; echo slept", "yield_after": 0.5}
        )
        job = out.text.split("as job ")[1].split(":")[0]
        busy = await toolset.call(context, "shell", {"command": "echo hi"})
        assert busy.is_error
        assert f"still running job {job}" in busy.text
        assert "slept" in await _until_ended(toolset, context, job)
        out = await toolset.call(context, "shell", {"command": "sleep 30", "yield_after": 0.5})
        job = out.text.split("as job ")[1].split(":")[0]
        await toolset.call(context, "job_stop", {"job_id": job})
        out = await toolset.call(context, "shell", {"command": "echo K=$K"})
        assert out.text.startswith("K=3\n"), out.text


async def test_an_idle_command_ends_and_a_talkative_one_does_not(backend: ToolExecutor) -> None:
    toolset = Toolset(idle_timeout=1)
    async with toolset:
        context = toolset.context(backend)
        started = anyio.current_time()
        out = await toolset.call(context, "run", {"command": "sleep 30"})
        assert out.kind is ToolOutputKind.TIMED_OUT
        assert "idle timeout" in out.text
        assert anyio.current_time() - started < 8
        out = await toolset.call(
            context, "run", {"command": "for i in 1 2 3 4; do echo $i; sleep 0.6; done"}
        )
        assert not out.is_error, out.text
        assert out.text.startswith("1\n2\n3\n4\n")
        # In the persistent shell, the quiet command is interrupted and the shell stays.
        await toolset.call(context, "shell", {"command": "export K=7"})
        started = anyio.current_time()
        out = await toolset.call(context, "shell", {"command": "echo quiet; sleep 30"})
        assert out.kind is ToolOutputKind.TIMED_OUT
        assert "idle timeout" in out.text
        assert anyio.current_time() - started < 8
        out = await toolset.call(
            context, "shell", {"command": "for i in 1 2 3; do echo $i; sleep 0.6; done; echo $K"}
        )
        assert out.text.startswith("1\n2\n3\n7\n"), out.text


# --- declarations and the OpenAI Agents SDK ---------------------------------------------


def test_spec_for_declares_the_native_types() -> None:
    toolset = Toolset(native=FAMILIES, max_characters=5000)
    assert toolset["bash"].spec_for("anthropic") == {"type": "bash_20250124", "name": "bash"}
    assert toolset["str_replace_based_edit_tool"].spec_for("anthropic") == {
        "type": "text_editor_20250728",
        "name": "str_replace_based_edit_tool",
        "max_characters": 5000,
    }
    assert toolset["str_replace_editor"].spec_for("anthropic") == {
        "type": "text_editor_20250124",
        "name": "str_replace_editor",
    }
    assert toolset["shell"].spec_for("openai-responses") == {
        "type": "shell",
        "environment": {"type": "local"},
    }
    assert toolset["local_shell"].spec_for("openai-responses") == {"type": "local_shell"}
    assert toolset["apply_patch"].spec_for("openai-responses") == {"type": "apply_patch"}
    # Elsewhere, and asked not to, they are functions.
    assert toolset["bash"].spec_for("mcp")["inputSchema"]["properties"].keys() == {
        "command",
        "restart",
    }
    assert toolset["bash"].spec_for("anthropic", native=False)["name"] == "bash"
    assert Toolset(native="openai").names == ("shell", "local_shell", "apply_patch")
    with pytest.raises(ValueError, match="no native tools"):
        Toolset(native="cobol")


async def test_the_agents_sdk_runs_its_shell_and_apply_patch_tools_on_an_executor(
    tmp_path: Path,
) -> None:
    """A scripted model of the SDK calls its native tools; an executor does the work."""
    from agents import Agent, ApplyPatchTool, LocalShellTool, RunConfig, Runner, ShellTool
    from agents.items import ModelResponse
    from agents.models.interface import Model
    from agents.usage import Usage
    from openai.types.responses import (
        ResponseOutputMessage,
        ResponseOutputText,
    )

    from executor import openai_agents_tools

    (tmp_path / "a.txt").write_text("one\ntwo\n")
    toolset = Toolset(native="openai")
    turns: list[Any] = [
        {
            "type": "shell_call",
            "id": "sh_1",
            "call_id": "c1",
            "status": "completed",
            "action": {"commands": ["echo hi", "exit 5"], "timeout_ms": 5000},
        },
        {
            "type": "apply_patch_call",
            "id": "ap_1",
            "call_id": "c2",
            "status": "completed",
            "operation": {"type": "update_file", "path": "a.txt", "diff": "@@\n one\n-two\n+TWO\n"},
        },
        {
            "type": "apply_patch_call",
            "id": "ap_2",
            "call_id": "c3",
            "status": "completed",
            "operation": {"type": "create_file", "path": "b.txt", "diff": "+bee\n"},
        },
        ResponseOutputMessage(
            id="msg_1",
            type="message",
            role="assistant",
            status="completed",
            content=[ResponseOutputText(type="output_text", text="done", annotations=[])],
        ),
    ]

    class Scripted(Model):
        def __init__(self) -> None:
            self.inputs: list[Any] = []

        async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
            self.inputs.append(kwargs["input"])
            turn = turns.pop(0)
            if isinstance(turn, dict):
                from openai.types.responses.response_output_item import ResponseOutputItem
                from pydantic import TypeAdapter

                turn = TypeAdapter(ResponseOutputItem).validate_python(turn)
            return ModelResponse(output=[turn], usage=Usage(), response_id=None)

        def stream_response(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError

    async with LocalExecutor(tmp_path) as executor, toolset:
        tools = openai_agents_tools(toolset.tools, toolset.context(executor))
        assert [type(t) for t in tools] == [ShellTool, LocalShellTool, ApplyPatchTool]
        model = Scripted()
        agent = Agent(name="dev", model=model, tools=tools)
        result = await Runner.run(agent, "go", run_config=RunConfig(tracing_disabled=True))
    assert result.final_output == "done"
    assert (tmp_path / "a.txt").read_text() == "one\nTWO\n"
    assert (tmp_path / "b.txt").read_text() == "bee\n"
    sent = {
        item["call_id"]: item
        for item in model.inputs[-1]
        if isinstance(item, dict) and str(item.get("type", "")).endswith("_output")
    }
    shell = sent["c1"]["output"]
    assert [each["stdout"] for each in shell] == ["hi\n", ""]
    assert [each["outcome"] for each in shell] == [
        {"type": "exit", "exit_code": 0},
        {"type": "exit", "exit_code": 5},
    ]
    assert sent["c2"]["status"] == "completed"
