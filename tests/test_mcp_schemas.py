"""Every MCP tool's `outputSchema` holds for the `structuredContent` of every kind of result.

The SDK's own client, in process, calls each tool of the toolset with
arguments that succeed and with arguments that fail in each way the tool can
(a failed command, a refusal, a timeout, a command the OOM killer ended,
arguments the tool refuses), and each result's structured content is
validated against the schema the tool lists: by the SDK client itself (it
checks a result against the tool's `outputSchema`) and again here with
`jsonschema`, so a client that validates strictly never rejects one of our
results.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

mcp = pytest.importorskip("mcp", reason="the MCP tests need tool-executor[mcp]")

import jsonschema  # noqa: E402
import mcp_types  # noqa: E402
from mcp import Client  # noqa: E402

from executor import (  # noqa: E402
    TOOL_NAMES,
    CommandRules,
    LocalExecutor,
    McpServer,
    ToolOutputKind,
    Toolset,
)
from executor._local import cgroup  # noqa: E402

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    """The SDK's client and server in one process, on asyncio."""
    return "asyncio"


def calls(work: Path) -> list[tuple[str, dict[str, Any]]]:
    """Calls of every tool: each tool's success, and the failures it can have."""
    (work / "notes.txt").write_text("alpha\nbeta\n")
    (work / "app.log").write_text('{"level": "info", "msg": "up"}\n')
    return [
        ("run", {"command": "echo out; echo err >&2"}),
        ("run", {"command": "exit 3"}),
        ("run", {"command": "sleep 5", "timeout": 0.3}),
        ("run", {"command": "forbidden-word now"}),
        ("run", {"command": 7}),
        ("run", {}),
        ("shell", {"command": "cd /; export K=1; echo $K"}),
        ("shell", {"command": "false"}),
        ("job_start", {"command": "sleep 30"}),
        ("job_list", {}),
        ("job_read", {"job_id": "no-such-job"}),
        ("job_write", {"job_id": "no-such-job", "text": "x"}),
        ("job_signal", {"job_id": "no-such-job", "signal": "SIGTERM"}),
        ("job_stop", {"job_id": "no-such-job"}),
        ("read_file", {"path": "notes.txt"}),
        ("read_file", {"path": "missing.txt"}),
        ("read_file", {"path": "../../etc/passwd"}),
        ("write_file", {"path": "new.txt", "content": "x\n"}),
        ("write_file", {"path": "new.txt"}),
        ("edit_file", {"path": "notes.txt", "old_text": "beta", "new_text": "gamma"}),
        ("edit_file", {"path": "notes.txt", "old_text": "nowhere", "new_text": "x"}),
        ("undo_edit", {"path": "notes.txt"}),
        ("undo_edit", {"path": "never-edited.txt"}),
        ("list_files", {}),
        ("list_files", {"path": "missing"}),
        ("glob", {"pattern": "*.txt"}),
        ("glob", {"pattern": ""}),
        ("search", {"pattern": "alpha"}),
        ("search", {"pattern": "("}),
        ("terminal", {"command": "echo hi"}),
        ("terminal", {"command": "exit 4"}),
        ("log_tailer", {"path": "app.log"}),
        ("log_tailer", {"path": "missing.log"}),
        ("code_interpreter", {"language": "python", "code": "print(1 + 1)"}),
        ("code_interpreter", {"language": "python", "code": "raise SystemExit(2)"}),
        ("code_interpreter", {"language": "cobol", "code": "x"}),
    ]


async def test_every_result_matches_its_tools_output_schema(tmp_path: Path) -> None:
    """Every tool, every kind of result: structuredContent valid against outputSchema."""
    seen: dict[str, set[str]] = {}
    async with (
        LocalExecutor(tmp_path) as local,
        Toolset() as toolset,
    ):
        executor = CommandRules(local, deny=["forbidden-word"])
        server = McpServer(executor, toolset)
        async with Client(server.server, mode="auto") as client:
            listed = {t.name: t for t in (await client.list_tools()).tools}
            assert set(listed) == set(TOOL_NAMES)
            for name, tool in listed.items():
                assert tool.output_schema is not None, name
                assert tool.title, name
                jsonschema.Draft202012Validator.check_schema(tool.output_schema)
            for name, arguments in calls(tmp_path):
                result = await client.call_tool(name, arguments)
                assert isinstance(result, mcp_types.CallToolResult)
                content = result.structured_content
                assert content is not None, (name, arguments)
                schema = listed[name].output_schema
                assert schema is not None
                jsonschema.validate(content, schema, cls=jsonschema.Draft202012Validator)
                seen.setdefault(name, set()).add(content["kind"])
            await client.call_tool("job_stop", {"job_id": "1"})
        # An executor that fails itself: its workdir removed under it.
        gone = tmp_path / "gone"
        gone.mkdir()
        async with (
            LocalExecutor(gone) as broken,
            Client(McpServer(broken).server, mode="auto") as client,
        ):
            gone.rmdir()
            result = await client.call_tool("run", {"command": "true"})
            assert result.structured_content is not None
            schema = listed["run"].output_schema
            assert schema is not None
            jsonschema.validate(
                result.structured_content, schema, cls=jsonschema.Draft202012Validator
            )
            seen["run"].add(result.structured_content["kind"])
        # A command the OOM killer ended, where a cgroup can enforce memory=.
        expected = {kind.value for kind in ToolOutputKind}
        if "memory" in cgroup.probe().limits or os.environ.get("EXECUTOR_REQUIRE_CGROUPS") == "1":
            async with (
                LocalExecutor(tmp_path, memory=64 << 20) as limited,
                Client(McpServer(limited).server, mode="auto") as client,
            ):
                hog = f"{sys.executable} -c 'bytearray(1 << 30)'"
                result = await client.call_tool("run", {"command": hog})
                content = result.structured_content
                assert content is not None
                assert content["oom_killed"] is True
                schema = listed["run"].output_schema
                assert schema is not None
                jsonschema.validate(content, schema, cls=jsonschema.Draft202012Validator)
                seen["run"].add(content["kind"])
        else:
            expected.discard(ToolOutputKind.OUT_OF_MEMORY.value)
    assert set(seen) == set(TOOL_NAMES)
    kinds = set().union(*seen.values())
    assert kinds == expected


async def test_hints_and_titles(tmp_path: Path) -> None:
    """Reads say they only read and are idempotent; writes say they may destroy."""
    async with LocalExecutor(tmp_path) as local:
        server = McpServer(local)
        async with Client(server.server, mode="auto") as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
    for name in ("read_file", "list_files", "glob", "search", "job_list", "write_file"):
        annotations = tools[name].annotations
        assert annotations is not None
        assert annotations.idempotent_hint is True, name
    for name in ("run", "shell", "edit_file", "code_interpreter"):
        annotations = tools[name].annotations
        assert annotations is not None
        assert annotations.idempotent_hint is False, name
        assert annotations.destructive_hint is True, name
    assert tools["read_file"].title == "Read a file"
    assert all(tool.title for tool in tools.values())
