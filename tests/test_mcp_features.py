"""The MCP server's logging, roots and resources, with the SDK's own client.

Most tests run the server in process (`Client(server.server)`), where the
protocol is the same and a test takes milliseconds; the stdio ones start the
real server process.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

mcp = pytest.importorskip("mcp", reason="the MCP tests need executor[mcp]")

import mcp_types  # noqa: E402
from mcp import Client  # noqa: E402
from mcp.shared.exceptions import MCPDeprecationWarning  # noqa: E402
from test_mcp import MODES, server  # noqa: E402

from executor import CommandRules, LocalExecutor, McpServer  # noqa: E402

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    """The SDK's client and server in one process, on asyncio."""
    return "asyncio"


@contextmanager
def deprecated_handshake_api() -> Iterator[None]:
    """The handshake era's logging and roots calls, which the SDK marks deprecated (SEP-2577)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MCPDeprecationWarning)
        yield


# --- logging ------------------------------------------------------------------------------


async def logged_events(
    client_of: Any, mode: str, level: mcp_types.LoggingLevel | None
) -> list[tuple[str, dict[str, Any]]]:
    got: list[tuple[str, dict[str, Any]]] = []

    async def on_log(params: mcp_types.LoggingMessageNotificationParams) -> None:
        assert params.logger == "executor"
        got.append((params.level, params.data))

    modern_level = level if mode == "auto" else None
    async with client_of(on_log, modern_level) as client:
        if mode == "legacy" and level is not None:
            with deprecated_handshake_api():
                await client.set_logging_level(level)
        await client.call_tool("run", {"command": "echo hi"})
        await client.call_tool("run", {"command": "curl http://example.invalid"})
        await client.call_tool("run", {"command": "sleep 5", "timeout": 0.3})
        await client.call_tool("run", {"command": "exit 2"})
    return got


@pytest.mark.parametrize("mode", MODES)
async def test_the_servers_events_at_the_clients_level(tmp_path: Path, mode: str) -> None:
    """Started, refused, killed, finished: as notifications/message, at the level asked for."""
    async with LocalExecutor(tmp_path) as local:
        mcp_server = McpServer(CommandRules(local, deny=["curl"]))

        def client_of(on_log: Any, level: Any) -> Client:
            return Client(mcp_server.server, mode=mode, logging_callback=on_log, log_level=level)

        everything = await logged_events(client_of, mode, "debug")
        warnings_only = await logged_events(client_of, mode, "warning")
        unasked = await logged_events(client_of, mode, None)
    events = [(level, data["event"], data.get("command")) for level, data in everything]
    assert events == [
        ("info", "started", "echo hi"),
        ("debug", "finished", None),
        ("info", "started", "curl http://example.invalid"),
        ("warning", "refused", None),
        ("info", "started", "sleep 5"),
        ("warning", "killed", None),
        ("info", "started", "exit 2"),
        ("notice", "finished", None),
    ]
    refused = everything[3][1]
    assert "deny" in refused["reason"]
    assert refused["tool"] == "run"
    assert everything[5][1]["reason"] == "command timed out after 0.3 s"
    assert everything[7][1]["exit_code"] == 2
    assert [(level, data["event"]) for level, data in warnings_only] == [
        ("warning", "refused"),
        ("warning", "killed"),
    ]
    assert unasked == []


async def test_logging_over_stdio(tmp_path: Path) -> None:
    """The real server process, 2026-07-28: a refusal reaches the client as a warning."""
    got: list[tuple[str, Any]] = []

    async def on_log(params: mcp_types.LoggingMessageNotificationParams) -> None:
        got.append((params.level, params.data))

    flags = server("--workdir", str(tmp_path), "--deny", "curl")
    async with Client(flags, logging_callback=on_log, log_level="warning") as client:
        refused = await client.call_tool("run", {"command": "curl http://example.invalid"})
        assert refused.is_error
    assert [(level, data["event"]) for level, data in got] == [("warning", "refused")]


# --- roots --------------------------------------------------------------------------------


def workspace(tmp_path: Path) -> Path:
    work = tmp_path / "ws"
    for name, text in (("app/a.txt", "in app\n"), ("lib/b.txt", "in lib\n"), ("top.txt", "top\n")):
        (work / name).parent.mkdir(parents=True, exist_ok=True)
        (work / name).write_text(text)
    return work


def text_of(result: mcp_types.CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, mcp_types.TextContent)
    return block.text


@pytest.mark.parametrize("mode", MODES)
async def test_roots_narrow_what_the_tools_reach(tmp_path: Path, mode: str) -> None:
    """A root inside the workspace: files there only, commands start there; it follows changes."""
    work = workspace(tmp_path)
    offered = [work / "app", tmp_path / "elsewhere"]

    async def list_roots(context: Any) -> mcp_types.ListRootsResult:
        return mcp_types.ListRootsResult(
            roots=[mcp_types.Root(uri=path.as_uri()) for path in offered]  # type: ignore[arg-type]
        )

    async with LocalExecutor(work) as local:
        mcp_server = McpServer(local)
        async with Client(mcp_server.server, mode=mode, list_roots_callback=list_roots) as client:
            inside = await client.call_tool("read_file", {"path": "app/a.txt"})
            assert not inside.is_error, text_of(inside)
            assert "in app" in text_of(inside)
            for name, arguments in (
                ("read_file", {"path": "top.txt"}),
                ("read_file", {"path": "lib/b.txt"}),
                ("write_file", {"path": "lib/new.txt", "content": "x"}),
                ("run", {"command": "cat b.txt", "cwd": "lib"}),
            ):
                outside = await client.call_tool(name, arguments)
                assert outside.is_error, (name, text_of(outside))
                assert outside.structured_content is not None
                assert outside.structured_content["kind"] == "denied"
                assert "outside every root" in text_of(outside), text_of(outside)
            listed = await client.call_tool("list_files", {})
            assert "app/a.txt" in text_of(listed)
            assert "top.txt" not in text_of(listed)
            assert "lib/b.txt" not in text_of(listed)
            where = await client.call_tool("run", {"command": "pwd"})
            assert text_of(where).splitlines()[0] == str(work / "app")
            # The client's roots change: the next call follows them.
            offered[:] = [work / "lib"]
            if mode == "legacy":
                with deprecated_handshake_api():
                    await client.send_roots_list_changed()
            moved = await client.call_tool("read_file", {"path": "lib/b.txt"})
            assert not moved.is_error, text_of(moved)
            left = await client.call_tool("read_file", {"path": "app/a.txt"})
            assert left.is_error
    assert not (work / "lib" / "new.txt").exists()


@pytest.mark.parametrize("mode", MODES)
async def test_roots_can_only_narrow(tmp_path: Path, mode: str) -> None:
    """A root holding the workspace leaves it whole; roots all elsewhere leave nothing."""
    work = workspace(tmp_path)
    offered = [Path("/")]

    async def list_roots(context: Any) -> mcp_types.ListRootsResult:
        return mcp_types.ListRootsResult(
            roots=[mcp_types.Root(uri=path.as_uri()) for path in offered]  # type: ignore[arg-type]
        )

    async with LocalExecutor(work) as local:
        mcp_server = McpServer(local)
        async with Client(mcp_server.server, mode=mode, list_roots_callback=list_roots) as client:
            whole = await client.call_tool("read_file", {"path": "top.txt"})
            assert not whole.is_error, text_of(whole)
            # The parent's parent is no way out: paths stay relative to the workspace.
            escape = await client.call_tool("read_file", {"path": "../ws/top.txt"})
            assert escape.is_error
            offered[:] = [tmp_path / "elsewhere"]
            if mode == "legacy":
                with deprecated_handshake_api():
                    await client.send_roots_list_changed()
            for name, arguments in (
                ("read_file", {"path": "top.txt"}),
                ("run", {"command": "touch ran"}),
                ("list_files", {}),
            ):
                refused = await client.call_tool(name, arguments)
                assert refused.is_error, name
                assert "none of the client's roots" in text_of(refused), text_of(refused)
    assert not (work / "ran").exists()


async def test_no_roots_offered_leaves_the_workspace_whole(tmp_path: Path) -> None:
    """A client without the roots capability: the workspace as the server was given it."""
    work = workspace(tmp_path)
    async with (
        LocalExecutor(work) as local,
        Client(McpServer(local).server, mode="auto") as client,
    ):
        read = await client.call_tool("read_file", {"path": "top.txt"})
        assert not read.is_error, text_of(read)
