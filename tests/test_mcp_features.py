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

import anyio
import pytest

mcp = pytest.importorskip("mcp", reason="the MCP tests need tool-executor[mcp]")

import mcp_types  # noqa: E402
from mcp import Client  # noqa: E402
from mcp.shared.exceptions import MCPDeprecationWarning  # noqa: E402
from test_mcp import MODES, server  # noqa: E402

from executor import CommandRules, LocalExecutor, McpServer, Toolset  # noqa: E402

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


def roots_of(offered: list[Path]) -> Any:
    """A client's `roots/list` answer: the folders in `offered` as they are when it is asked."""

    async def list_roots(context: Any) -> mcp_types.ListRootsResult:
        return mcp_types.ListRootsResult(
            roots=[mcp_types.Root(uri=path.as_uri()) for path in offered]  # type: ignore[arg-type]
        )

    return list_roots


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

    list_roots = roots_of(offered)

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

    list_roots = roots_of(offered)

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


# --- resources ----------------------------------------------------------------------------


def contents_text(result: mcp_types.ReadResourceResult) -> str:
    (contents,) = result.contents
    assert isinstance(contents, mcp_types.TextResourceContents)
    return contents.text


@pytest.mark.parametrize("mode", MODES)
async def test_a_jobs_output_is_a_live_resource(tmp_path: Path, mode: str) -> None:
    """A job's output: the subscriber hears of each change while it runs, then of its end."""
    updates: list[str] = []
    heard = anyio.Event()

    async def on_message(message: Any) -> None:
        if isinstance(message, mcp_types.ResourceUpdatedNotification):
            updates.append(str(message.params.uri))
            heard.set()

    script = "echo first; while [ ! -e go ]; do sleep 0.02; done; echo second; exit 4"
    async with (
        LocalExecutor(tmp_path) as local,
        Toolset() as toolset,
        Client(McpServer(local, toolset).server, mode=mode, message_handler=on_message) as client,
    ):
        started = await client.call_tool("job_start", {"command": script})
        assert not started.is_error, text_of(started)
        assert started.structured_content is not None
        uri = started.structured_content["resource"]
        assert uri.startswith("executor://commands/")

        async def read() -> str:
            return contents_text(await client.read_resource(uri, cache_mode="bypass"))

        async def follow() -> None:
            if mode == "legacy":
                with deprecated_handshake_api():
                    await client.subscribe_resource(uri)
                await anyio.sleep_forever()
            async with client.listen(resource_subscriptions=[uri]) as subscription:
                async for event in subscription:
                    updates.append(getattr(event, "uri", ""))
                    heard.set()

        async with anyio.create_task_group() as group:
            group.start_soon(follow)
            with anyio.fail_after(20):
                while "first" not in await read():
                    await anyio.sleep(0.02)
            assert (await read()).endswith("[running]")
            heard = anyio.Event()
            (tmp_path / "go").touch()
            with anyio.fail_after(20):
                while not (await read()).endswith("[exit code 4]"):
                    await heard.wait()
                    heard = anyio.Event()
            group.cancel_scope.cancel()
        assert await read() == "first\nsecond\n[exit code 4]"
        assert updates
        assert set(updates) == {uri}
        listed = await client.list_resources(cache_mode="bypass")
        assert uri in {str(resource.uri) for resource in listed.resources}


async def test_a_spilled_output_is_served_whole_in_pages(tmp_path: Path) -> None:
    """The spill file a cut result names: its pages join to every byte the command wrote."""
    spill = tmp_path / "spill"
    script = (
        "python3 -c \"import sys; sys.stdout.write(''.join(f'{i} é\\n' for i in range(400000)))\""
    )
    expected = "".join(f"{i} é\n" for i in range(400000))
    async with (
        LocalExecutor(tmp_path, output_limit=1 << 16, spill=spill) as local,
        Client(McpServer(local).server, mode="auto") as client,
    ):
        result = await client.call_tool("run", {"command": script})
        assert result.structured_content is not None
        uri = result.structured_content["spill"]
        assert uri.startswith("executor://spill/output-")
        first = await client.read_resource(uri, cache_mode="bypass")
        (contents,) = first.contents
        assert contents.meta is not None
        pages = contents.meta["pages"]
        assert pages == -(-len(expected.encode()) // (1 << 20)) > 2
        joined = contents_text(first) + "".join(
            [
                contents_text(await client.read_resource(f"{uri}?page={n}", cache_mode="bypass"))
                for n in range(1, pages)
            ]
        )
        assert joined == expected
        with pytest.raises(mcp.MCPError) as past:
            await client.read_resource(f"{uri}?page={pages}", cache_mode="bypass")
        assert "past the end" in past.value.message


async def test_workspace_files_are_listed_in_pages_and_read(tmp_path: Path) -> None:
    """Files listed 200 to a page; read through the executor; a missing one is -32602 with uri."""
    for n in range(450):
        (tmp_path / f"f{n:03}.txt").write_text(f"file {n}\n")
    async with (
        LocalExecutor(tmp_path) as local,
        Client(McpServer(local).server, mode="auto") as client,
    ):
        seen: list[str] = []
        cursor: str | None = None
        pages = 0
        while True:
            page = await client.list_resources(cursor=cursor, cache_mode="bypass")
            pages += 1
            assert len(page.resources) <= 200
            seen += [str(resource.uri) for resource in page.resources]
            cursor = page.next_cursor
            if cursor is None:
                break
        assert pages == 3
        files = sorted(uri for uri in seen if uri.startswith("executor://files/"))
        assert files == [f"executor://files/f{n:03}.txt" for n in range(450)]
        read = await client.read_resource("executor://files/f007.txt", cache_mode="bypass")
        assert contents_text(read) == "file 7\n"
        with pytest.raises(mcp.MCPError) as missing:
            await client.read_resource("executor://files/nope.txt", cache_mode="bypass")
        assert missing.value.code == mcp_types.INVALID_PARAMS
        assert missing.value.data == {"uri": "executor://files/nope.txt"}
        templates = await client.list_resource_templates()
        assert "executor://files/{+path}" in {t.uri_template for t in templates.resource_templates}


@pytest.mark.parametrize("mode", MODES)
async def test_file_resources_stay_in_the_workspace(tmp_path: Path, mode: str) -> None:
    """`..`, an absolute path or a root's `..`: refused (-32602), nothing of the host read."""
    work = workspace(tmp_path)
    (tmp_path / "secret.txt").write_text("host secret\n")
    escapes = [
        "executor://files/..%2Fsecret.txt",
        "executor://files/../secret.txt",
        f"executor://files/{tmp_path / 'secret.txt'}",
        "executor://files/%2Fetc%2Fhostname",
        "executor://files/app/..%2F..%2Fsecret.txt",
    ]

    list_roots = roots_of([work])

    async with LocalExecutor(work) as local:
        for roots in (None, list_roots):
            async with Client(
                McpServer(local.read_only()).server, mode=mode, list_roots_callback=roots
            ) as client:
                for uri in escapes:
                    with pytest.raises(mcp.MCPError) as refused:
                        await client.read_resource(uri, cache_mode="bypass")
                    assert refused.value.code == mcp_types.INVALID_PARAMS, uri
                    assert "host secret" not in f"{refused.value.message} {refused.value.data}"
                inside = await client.read_resource(
                    "executor://files/app/a.txt", cache_mode="bypass"
                )
                assert contents_text(inside) == "in app\n"


async def test_a_held_back_update_is_sent_when_the_quiet_time_is_over(tmp_path: Path) -> None:
    """Output within 50 ms of the last update is announced after it, not at the command's end."""
    updates: list[float] = []

    async def on_message(message: Any) -> None:
        if isinstance(message, mcp_types.ResourceUpdatedNotification):
            updates.append(anyio.current_time())

    script = "while [ ! -e go ]; do sleep 0.01; done; echo first; sleep 0.01; echo second; sleep 30"
    async with (
        LocalExecutor(tmp_path) as local,
        Toolset() as toolset,
        Client(
            McpServer(local, toolset).server, mode="legacy", message_handler=on_message
        ) as client,
    ):
        started = await client.call_tool("job_start", {"command": script})
        assert started.structured_content is not None
        uri = started.structured_content["resource"]
        with deprecated_handshake_api():
            await client.subscribe_resource(uri)
        (tmp_path / "go").touch()
        # The first line's update at once, the second's held back, then sent: two, long
        # before the job's end.
        with anyio.fail_after(10):
            while len(updates) < 2:
                await anyio.sleep(0.01)
        assert "second" in contents_text(await client.read_resource(uri, cache_mode="bypass"))
        await client.call_tool("job_stop", {"job_id": "1"})


async def test_subscriptions_end_with_their_connection(tmp_path: Path) -> None:
    """A handshake-era client that subscribed and left is forgotten, with its level."""
    import gc

    async with LocalExecutor(tmp_path) as local:
        mcp_server = McpServer(local)
        for _ in range(5):
            async with Client(mcp_server.server, mode="legacy") as client:
                ran = await client.call_tool("run", {"command": "true"})
                assert ran.structured_content is not None
                with deprecated_handshake_api():
                    await client.set_logging_level("info")
                    await client.subscribe_resource(ran.structured_content["resource"])
        gc.collect()
        assert len(mcp_server._subscribers) == 0
        assert len(mcp_server._levels) == 0


async def test_roots_are_held_to_a_scoped_workspace(tmp_path: Path) -> None:
    """Under `ex.scoped("sub")`, a root naming sub is the whole workspace, not outside it."""
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "a.txt").write_text("a\n")

    list_roots = roots_of([sub])

    async with LocalExecutor(tmp_path) as local:
        server_ = McpServer(local.scoped("sub"))
        async with Client(server_.server, mode="legacy", list_roots_callback=list_roots) as client:
            read = await client.call_tool("read_file", {"path": "a.txt"})
            assert not read.is_error, text_of(read)
            where = await client.call_tool("run", {"command": "pwd"})
            assert text_of(where) == f"{sub}\n[exit code 0]"
