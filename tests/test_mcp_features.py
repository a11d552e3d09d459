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
