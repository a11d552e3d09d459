"""`python -m executor mcp` with the SDK's own client: stdio and streamable HTTP, every backend.

Each test starts a real server process. The client runs on asyncio only: the
server is another process, so the client's event loop changes nothing here.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

mcp = pytest.importorskip("mcp", reason="the MCP tests need tool-executor[mcp]")

import httpx2  # noqa: E402
import mcp_types  # noqa: E402
from conftest import alive, require_sandbox  # noqa: E402
from docker_engine import BUSYBOX_IMAGE, require_engine  # noqa: E402
from mcp import Client, StdioServerParameters  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402
from ssh_server import SshServer  # noqa: E402

from executor import READ_ONLY_TOOLS, TOOL_NAMES  # noqa: E402

pytestmark = pytest.mark.anyio

# The protocol's two eras: "auto" negotiates 2026-07-28 (no handshake, input
# asked for in results), "legacy" the initialize handshake of 2025-11-25.
MODES = ["auto", "legacy"]
TOKEN = "test-token-3f9a"


@pytest.fixture
def anyio_backend() -> str:
    """The client on asyncio only (the server is a process of its own)."""
    return "asyncio"


def server(*flags: str) -> StdioServerParameters:
    """The stdio server with `flags`, with this process's environment (DOCKER_HOST...)."""
    return StdioServerParameters(
        command=sys.executable, args=["-m", "executor", "mcp", *flags], env=dict(os.environ)
    )


def text_of(result: mcp_types.CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, mcp_types.TextContent)
    return block.text


async def wait_dead(pids: list[int]) -> list[int]:
    """The pids still alive after up to 10 s."""
    with anyio.move_on_after(10):
        while any(alive(pid) for pid in pids):
            await anyio.sleep(0.05)
    return [pid for pid in pids if alive(pid)]


async def check_failure_progress_cancel(client: Client, workdir: Path) -> None:
    """What every transport must show: exit code and stderr, live progress, a clean cancel."""
    failed = await client.call_tool("run", {"command": "echo out; echo oops >&2; exit 3"})
    assert failed.is_error
    assert failed.structured_content is not None
    assert failed.structured_content["kind"] == "failed"
    assert failed.structured_content["exit_code"] == 3
    assert failed.structured_content["stderr"] == "oops\n"
    assert failed.structured_content["stdout"] == "out\n"
    assert "oops" in text_of(failed)

    # The command waits for a file the progress callback makes: it can only end
    # if its first line reached the client while it ran.
    go = workdir / "go"
    messages: list[str] = []

    async def progress(progress: float, total: float | None, message: str | None) -> None:
        messages.append(message or "")
        if "ready" in "".join(messages):
            go.touch()

    script = "echo ready; while [ ! -e go ]; do sleep 0.02; done; echo finished"
    result = await client.call_tool(
        "run", {"command": script, "timeout": 60}, progress_callback=progress
    )
    assert not result.is_error, text_of(result)
    assert "".join(messages) == "ready\nfinished\n"
    go.unlink()

    started = anyio.Event()

    async def on_start(progress: float, total: float | None, message: str | None) -> None:
        started.set()

    pids = workdir / "pids"
    script = "echo $$ > pids; sleep 300 & echo $! >> pids; echo started; wait"
    async with anyio.create_task_group() as group:
        group.start_soon(
            lambda: client.call_tool("run", {"command": script}, progress_callback=on_start)
        )
        with anyio.fail_after(30):
            await started.wait()
        group.cancel_scope.cancel()
    tree = [int(line) for line in pids.read_text().split()]
    assert len(tree) == 2
    assert await wait_dead(tree) == []
    after = await client.call_tool("run", {"command": "echo still serving"})
    assert text_of(after) == "still serving\n[exit code 0]"


@pytest.mark.parametrize("mode", MODES)
async def test_stdio(tmp_path: Path, mode: str) -> None:
    """Over stdio: the tools listed, a failure's exit code and stderr, progress, a clean cancel."""
    params = server("--workdir", str(tmp_path), "--deny", "git push")
    async with Client(params, mode=mode) as client:
        assert client.protocol_version == ("2025-11-25" if mode == "legacy" else "2026-07-28")
        listed = await client.list_tools()
        assert [t.name for t in listed.tools] == list(TOOL_NAMES)
        run = next(t for t in listed.tools if t.name == "run")
        assert run.input_schema["required"] == ["command"]
        await check_failure_progress_cancel(client, tmp_path)
        denied = await client.call_tool("run", {"command": "git push origin main"})
        assert denied.is_error
        assert denied.structured_content is not None
        assert denied.structured_content["kind"] == "denied"
        assert "git push" in text_of(denied)
        dangerous = await client.call_tool("run", {"command": "rm -rf /"})
        assert dangerous.is_error
        assert "rm-root" in text_of(dangerous)
        invalid = await client.call_tool("read_file", {"path": "../etc/passwd"})
        assert invalid.is_error
        assert invalid.structured_content is not None
        assert invalid.structured_content["kind"] == "invalid_arguments"


# --- streamable HTTP ---------------------------------------------------------------------


@contextlib.asynccontextmanager
async def http_server(*flags: str, token: str | None = TOKEN) -> AsyncIterator[tuple[str, str]]:
    """A server on 127.0.0.1 with a free port; yields its URL and what it said, stops it."""
    env = dict(os.environ)
    env.pop("EXECUTOR_MCP_TOKEN", None)
    if token is not None:
        env["EXECUTOR_MCP_TOKEN"] = token
    process = subprocess.Popen(
        [sys.executable, "-m", "executor", "mcp", "--http", "--port", "0", *flags],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stderr is not None
    try:
        lines: list[str] = []
        with anyio.fail_after(60):
            while not any("serving on " in line for line in lines):
                line = await anyio.to_thread.run_sync(process.stderr.readline)
                assert line, f"the server ended: {''.join(lines)}"
                lines.append(line)
        url = lines[-1].split("serving on ")[1].strip()
        assert url.startswith("http://127.0.0.1:")
        yield url, "".join(lines)
    finally:
        process.terminate()
        # It stops on SIGTERM by itself, ending what it ran: exit code 0.
        assert await anyio.to_thread.run_sync(lambda: process.wait(30)) == 0
        process.stderr.close()


@contextlib.asynccontextmanager
async def http_client(url: str, token: str | None, mode: str = "auto") -> AsyncIterator[Client]:
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=60) as http,
        Client(streamable_http_client(url, http_client=http), mode=mode) as client,
    ):
        yield client


async def test_http_with_a_bearer_token(tmp_path: Path) -> None:
    """Over HTTP on 127.0.0.1: the token serves both eras; a missing or wrong one is refused."""
    async with http_server("--workdir", str(tmp_path)) as (url, _):
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}):
            async with httpx2.AsyncClient(headers=headers) as raw:
                response = await raw.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
            assert response.status_code == 401
            assert response.headers["www-authenticate"].startswith("Bearer")
        for bad in (None, "wrong"):
            with pytest.raises(Exception) as refused:  # noqa: PT011 - the SDK wraps it in groups
                async with http_client(url, bad) as client:
                    await client.list_tools()
            assert "401" in repr(refused.value) or "error response" in repr(refused.value)
        for mode in MODES:
            async with http_client(url, TOKEN, mode) as client:
                listed = await client.list_tools()
                assert len(listed.tools) == len(TOOL_NAMES)
                await check_failure_progress_cancel(client, tmp_path)


@pytest.mark.parametrize("era", [None, "2025-11-25", "2026-07-28"])
async def test_http_envelopes_that_are_not_one_message(tmp_path: Path, era: str | None) -> None:
    """A batch, a wrong version, a request without a method: -32600, in every era."""
    headers = {
        "Authorization": f"bearer {TOKEN}",  # the scheme's name in any case (RFC 7235)
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
    }
    if era is not None:
        headers["MCP-Protocol-Version"] = era
    invalid: list[Any] = [
        [],
        [{"jsonrpc": "2.0", "id": 1, "method": "ping"}],
        {"jsonrpc": "1.0", "id": 1, "method": "ping"},
        {"id": 1, "method": "ping"},
        {"jsonrpc": "2.0", "id": True, "method": "ping"},
        {"jsonrpc": "2.0", "id": None, "method": "ping"},
        {"jsonrpc": "2.0", "id": 1, "method": 7},
        {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": [1]},
        {"jsonrpc": "2.0", "id": 1},
        "ping",
    ]
    async with (
        http_server("--workdir", str(tmp_path)) as (url, _),
        httpx2.AsyncClient(headers=headers, timeout=60) as raw,
    ):
        for body in invalid:
            response = await raw.post(url, content=json.dumps(body))
            assert response.status_code == 400, (body, response.text)
            error = response.json()
            assert error["id"] is None
            assert error["error"]["code"] == -32600, (body, error)
            assert "Validation error" not in error["error"]["message"]
        deep = await raw.post(url, content=b"[" * 100_000 + b"]" * 100_000)
        assert deep.status_code == 400
        assert deep.json()["error"]["code"] == -32600
        broken = await raw.post(url, content=b'{"jsonrpc": "2.0", "id": 1,')
        assert broken.status_code == 400
        assert broken.json()["error"]["code"] == -32700
        huge = await raw.post(url, content=b" " * (5 << 20) + b"{}")
        assert huge.status_code == 413
        # The server still answers a well-formed message after all that.
        async with http_client(url, TOKEN) as client:
            listed = await client.list_tools()
            assert {t.name for t in listed.tools} == set(TOOL_NAMES)


def test_stdio_lines_that_are_not_one_message(tmp_path: Path) -> None:
    """Over stdio too: a batch, a wrong version, a line that is not JSON each get an answer."""
    lines = [
        "[]",
        '{"jsonrpc": "1.0", "id": 1, "method": "ping"}',
        "not json {",
        "[" * 100_000 + "]" * 100_000,
        '{"jsonrpc": "2.0", "id": 7, "method": "initialize", "params": {"protocolVersion":'
        ' "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}',
    ]
    result = subprocess.run(
        [sys.executable, "-m", "executor", "mcp", "--workdir", str(tmp_path)],
        input="".join(line + "\n" for line in lines),
        capture_output=True,
        text=True,
        timeout=60,
    )
    answers = [json.loads(line) for line in result.stdout.splitlines()]
    codes = [a.get("error", {}).get("code") for a in answers]
    assert codes == [-32600, -32600, -32700, -32600, None]
    assert [a["id"] for a in answers] == [None, None, None, None, 7]
    assert "batch" in answers[0]["error"]["message"]
    assert answers[4]["result"]["serverInfo"]["name"] == "executor"


@pytest.mark.parametrize(
    ("host", "origins", "expected"),
    [
        # Loopback: loopback's Host names and origins, and those allowed besides.
        ("127.0.0.1", (), [200, 403, 403, 421]),
        ("127.0.0.1", ("https://app.example",), [200, 200, 403, 421]),
        ("127.0.0.2", (), [200, 403, 403, 421]),
        # A bind to one address off loopback: that address as Host, the allowed origins.
        ("192.0.2.10", ("https://app.example",), [200, 200, 403, 421]),
        ("192.0.2.10", (), [200, 403, 403, 421]),
        # Every address: the names it is reached by are not known, the Origin still is checked.
        ("0.0.0.0", ("https://app.example:*",), [200, 200, 403, 200]),
    ],
)
async def test_http_host_and_origin_checks(
    tmp_path: Path, host: str, origins: tuple[str, ...], expected: list[int]
) -> None:
    """Against DNS rebinding on and off loopback: Host and Origin checked, --allowed-origin kept.

    The app is served in process (nothing binds an address off loopback): a
    request with no Origin, one from the allowed origin, one from another,
    and one with a foreign Host.
    """
    from executor import LocalExecutor, McpServer

    base = f"http://{host}:8765"
    requests: list[dict[str, str]] = [
        {},
        {
            "Origin": "https://app.example"
            + (":8443" if origins[:1] == ("https://app.example:*",) else "")
        },
        {"Origin": "http://evil.example"},
        {"Host": "evil.example:8765"},
    ]
    meta = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
    }
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": meta}}
    statuses = []
    async with LocalExecutor(tmp_path) as local:
        server = McpServer(local)
        app = server.http_app(TOKEN, host=host, allowed_origins=origins)
        manager = server.server._session_manager  # the app's lifespan, run here
        assert manager is not None
        async with (
            manager.run(),
            httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app), base_url=base) as http,
        ):
            for extra in requests:
                headers = {
                    "Authorization": f"Bearer {TOKEN}",
                    "Accept": "application/json, text/event-stream",
                    "MCP-Protocol-Version": "2026-07-28",
                    "Mcp-Method": "tools/list",
                    **extra,
                }
                response = await http.post("/mcp", json=body, headers=headers)
                statuses.append(response.status_code)
    assert statuses == expected


def test_http_off_loopback_needs_a_token_and_origins_are_checked(tmp_path: Path) -> None:
    """--no-auth off loopback, or an --allowed-origin that is no origin: refused by name."""
    for args, words in (
        (["--host", "0.0.0.0", "--no-auth"], "off loopback, needs a bearer token"),
        (["--allowed-origin", "app.example"], "not an origin: 'app.example'"),
        (["--allowed-origin", "https://app.example/path"], "not an origin"),
    ):
        refused_by_name(["--http", "--workdir", str(tmp_path), *args], words)


async def test_http_token_from_a_file_and_made_up(tmp_path: Path) -> None:
    """--token-file gives the token; without any, one is made up and shown on stderr."""
    token_file = tmp_path / "token"
    token_file.write_text("from-the-file\n")
    async with (
        http_server("--workdir", str(tmp_path), "--token-file", str(token_file)) as (url, _),
        http_client(url, "from-the-file") as client,
    ):
        result = await client.call_tool("run", {"command": "echo ok"})
        assert text_of(result) == "ok\n[exit code 0]"
    async with http_server("--workdir", str(tmp_path), token=None) as (url, said):
        made_up = said.split("bearer token: ")[1].split()[0]
        assert len(made_up) >= 32
        async with http_client(url, made_up) as client:
            result = await client.call_tool("run", {"command": "echo made up"})
            assert text_of(result) == "made up\n[exit code 0]"


# --- every backend -------------------------------------------------------------------------


@pytest.fixture(params=["local", "sandbox", "docker", "ssh"])
def backend_flags(request: pytest.FixtureRequest, tmp_path: Path) -> list[str]:
    """The flags of one backend (skipping, or failing under CI, when it is absent)."""
    backend: str = request.param
    if backend == "local":
        return ["--backend", "local", "--workdir", str(tmp_path)]
    if backend == "sandbox":
        require_sandbox()
        return ["--sandbox", "--workdir", str(tmp_path)]
    if backend == "docker":
        require_engine()
        return ["--docker", BUSYBOX_IMAGE]
    ssh: SshServer = request.getfixturevalue("ssh_server")
    return [
        "--ssh",
        f"{ssh.user}@{ssh.host}:{ssh.port}",
        "--ssh-key",
        ssh.client_key,
        "--known-hosts",
        ssh.known_hosts,
        "--workdir",
        ssh.workdir(),
    ]


async def test_each_backend(backend_flags: list[str]) -> None:
    """Each backend flag serves the toolset: exit code and stderr, files written and read back."""
    async with Client(server(*backend_flags)) as client:
        listed = await client.list_tools()
        assert len(listed.tools) == len(TOOL_NAMES)
        failed = await client.call_tool("run", {"command": "echo out; echo err >&2; exit 5"})
        assert failed.structured_content is not None
        assert (failed.structured_content["exit_code"], failed.structured_content["stderr"]) == (
            5,
            "err\n",
        )
        wrote = await client.call_tool("write_file", {"path": "d/n.txt", "content": "a\nb\n"})
        assert not wrote.is_error, text_of(wrote)
        read = await client.call_tool("read_file", {"path": "d/n.txt", "offset": 2})
        assert text_of(read) == "     2\tb\n[lines 2-2 of 2]"
        found = await client.call_tool("search", {"pattern": "^b$", "path": "d"})
        assert text_of(found) == "d/n.txt:2:b"
        # Resources: the backend's own file, and the failed command's output and end.
        served = await client.read_resource("executor://files/d/n.txt", cache_mode="bypass")
        assert [
            c.text for c in served.contents if isinstance(c, mcp_types.TextResourceContents)
        ] == ["a\nb\n"]
        ran = await client.read_resource(failed.structured_content["resource"], cache_mode="bypass")
        (output,) = [c.text for c in ran.contents if isinstance(c, mcp_types.TextResourceContents)]
        # The two pipes' order is the reader's, not the command's.
        assert sorted(output.splitlines()) == ["[exit code 5]", "err", "out"]
        assert output.endswith("[exit code 5]")
        workspace = text_of(await client.call_tool("run", {"command": "pwd"})).splitlines()[0]

    # The client's roots, as paths of the backend's world: they narrow what the tools reach.
    async def list_roots(context: Any) -> mcp_types.ListRootsResult:
        root = mcp_types.Root(uri=f"file://{workspace}/d")  # type: ignore[arg-type]
        return mcp_types.ListRootsResult(roots=[root])

    async with Client(server(*backend_flags), list_roots_callback=list_roots) as client:
        # Written again: a new Docker server is a new container.
        inside = await client.call_tool("write_file", {"path": "d/n.txt", "content": "a\nb\n"})
        assert not inside.is_error, text_of(inside)
        outside = await client.call_tool("write_file", {"path": "e.txt", "content": "x"})
        assert outside.is_error
        assert "outside every root" in text_of(outside)
        where = await client.call_tool("run", {"command": "pwd; ls"})
        assert text_of(where) == f"{workspace}/d\nn.txt\n[exit code 0]"


# --- configuration and policies ------------------------------------------------------------


async def test_toml_config_policies_and_audit_log(tmp_path: Path) -> None:
    """A TOML file sets the workdir, the deny list and the audit log; flags add to it."""
    audit = tmp_path / "audit.jsonl"
    work = tmp_path / "work"
    work.mkdir()
    config = tmp_path / "mcp.toml"
    config.write_text(f'workdir = "{work}"\n\n[policy]\ndeny = ["curl"]\naudit_log = "{audit}"\n')
    async with Client(server("--config", str(config), "--timeout", "30")) as client:
        ran = await client.call_tool("run", {"command": "pwd"})
        assert text_of(ran) == f"{work}\n[exit code 0]"
        denied = await client.call_tool("run", {"command": "curl http://example.invalid"})
        assert denied.is_error
        assert "curl" in text_of(denied)
    records = [json.loads(line) for line in audit.read_text().splitlines()]
    assert [(r["event"], r["command"]) for r in records] == [
        ("start", "pwd"),
        ("end", "pwd"),
        ("start", "curl http://example.invalid"),
        ("denied", "curl http://example.invalid"),
    ]


async def test_spill_keeps_the_whole_output_as_a_resource(tmp_path: Path) -> None:
    """--spill: an output past the executor's limit (32 MiB) is kept whole and served in pages."""
    spill = tmp_path / "spill"
    async with Client(server("--workdir", str(tmp_path), "--spill", str(spill))) as client:
        result = await client.call_tool("run", {"command": "yes abc | head -c 40000000"})
        assert result.structured_content is not None
        assert result.structured_content["truncated"] is True
        uri = result.structured_content["spill"]
        last = await client.read_resource(f"{uri}?page=38", cache_mode="bypass")
    (contents,) = last.contents
    assert isinstance(contents, mcp_types.TextResourceContents)
    assert contents.meta == {"page": 38, "pages": 39, "size": 40000000}
    assert contents.text == ("abc\n" * 10_000_000)[38 << 20 :]
    (kept,) = spill.iterdir()
    assert kept.stat().st_size == 40000000


async def test_read_only_serves_the_read_only_tools(tmp_path: Path) -> None:
    """--read-only lists only the read-only tools, and they work."""
    (tmp_path / "a.txt").write_text("alpha\n")
    async with Client(server("--workdir", str(tmp_path), "--read-only")) as client:
        listed = await client.list_tools()
        assert {t.name for t in listed.tools} == READ_ONLY_TOOLS
        for listed_tool in listed.tools:
            assert listed_tool.annotations is not None
            assert listed_tool.annotations.read_only_hint
        read = await client.call_tool("read_file", {"path": "a.txt"})
        assert text_of(read) == "     1\talpha\n[lines 1-1 of 1]"
        # A tool not offered is a protocol error (-32602), as the spec lists it.
        with pytest.raises(mcp.MCPError) as refused:
            await client.call_tool("write_file", {"path": "a.txt", "content": "x"})
        assert refused.value.code == mcp_types.INVALID_PARAMS
        assert "Unknown tool: 'write_file'" in refused.value.message
    assert (tmp_path / "a.txt").read_text() == "alpha\n"


async def test_native_tools_with_a_yield_window(tmp_path: Path) -> None:
    """--native serves the native tools; --yield-after hands a long command back as a job."""
    (tmp_path / "a.txt").write_text("alpha\n")
    flags = ["--workdir", str(tmp_path), "--native", "anthropic", "--native", "openai"]
    async with Client(server(*flags, "--yield-after", "1", "--idle-timeout", "30")) as client:
        listed = {t.name for t in (await client.list_tools()).tools}
        assert listed == {
            "bash",
            "str_replace_based_edit_tool",
            "shell",
            "local_shell",
            "apply_patch",
            "job_read",
            "job_write",
            "job_signal",
            "job_stop",
            "job_list",
        }
        path = str(tmp_path / "a.txt")
        view = await client.call_tool(
            "str_replace_based_edit_tool", {"command": "view", "path": path}
        )
        assert (
            text_of(view)
            == f"Here's the result of running `cat -n` on {path}:\n     1\talpha\n     2\t\n"
        )
        ran = await client.call_tool("bash", {"command": "echo begun; sleep 2; echo ended"})
        assert text_of(ran).startswith("begun\n[still running after 1 s, as job s")
        job = text_of(ran).split("as job ")[1].split(":")[0]
        seen = ""
        with anyio.fail_after(20):
            while "exit code" not in seen:
                seen += text_of(await client.call_tool("job_read", {"job_id": job}))
                await anyio.sleep(0.2)
        assert "ended" in seen
        patch = "*** Begin Patch\n*** Update File: a.txt\n@@\n-alpha\n+beta\n*** End Patch\n"
        patched = await client.call_tool("apply_patch", {"input": patch})
        assert not patched.is_error, text_of(patched)
    assert (tmp_path / "a.txt").read_text() == "beta\n"
    refused_by_name(["--native", "cobol"], "native: no family 'cobol'")


@pytest.mark.parametrize("mode", MODES)
async def test_approval_through_elicitation(tmp_path: Path, mode: str) -> None:
    """--approval asks the client by elicitation; no, or a client that cannot answer, refuses."""
    asked: list[str] = []

    async def answer(context: Any, params: mcp_types.ElicitRequestParams) -> mcp_types.ElicitResult:
        assert isinstance(params, mcp_types.ElicitRequestFormParams)
        asked.append(params.message)
        approve = "echo no" not in params.message
        return mcp_types.ElicitResult(action="accept", content={"approve": approve})

    (tmp_path / "notes.txt").write_text("draft\n")
    params = server("--workdir", str(tmp_path), "--approval", "all")
    async with Client(params, mode=mode, elicitation_callback=answer) as client:
        approved = await client.call_tool("run", {"command": "echo yes"})
        assert text_of(approved) == "yes\n[exit code 0]"
        refused = await client.call_tool("run", {"command": "echo no > no.txt"})
        assert refused.is_error
        assert refused.structured_content is not None
        assert refused.structured_content["kind"] == "denied"
        assert "said no" in text_of(refused)
        # Two questions in one call (the read, then the write), each asked once.
        edit = {"path": "notes.txt", "old_text": "draft", "new_text": "yes, final"}
        edited = await client.call_tool("edit_file", edit)
        assert not edited.is_error, text_of(edited)
    assert [message.split("\n\n")[1] for message in asked] == [
        "echo yes",
        "echo no > no.txt",
        "read_file notes.txt",
        "write_file notes.txt (11 bytes)",
    ]
    assert not (tmp_path / "no.txt").exists()
    assert (tmp_path / "notes.txt").read_text() == "yes, final\n"
    async with Client(params, mode=mode) as client:
        if mode == "auto":
            # 2026-07-28: a protocol error naming the capability the client lacks.
            with pytest.raises(mcp.MCPError) as unable:
                await client.call_tool("run", {"command": "echo yes > unasked.txt"})
            assert unable.value.code == mcp_types.MISSING_REQUIRED_CLIENT_CAPABILITY
            assert unable.value.data == {"requiredCapabilities": {"elicitation": {}}}
        else:
            unasked = await client.call_tool("run", {"command": "echo yes > unasked.txt"})
            assert unasked.is_error
            assert "does not support elicitation" in text_of(unasked)
    assert not (tmp_path / "unasked.txt").exists()


def test_bad_configuration_is_named(tmp_path: Path) -> None:
    """An unknown key in the TOML file, or a docker backend without image, is refused by name."""
    config = tmp_path / "bad.toml"
    config.write_text("[policy]\nread_onyl = true\n")
    for args, words in (
        (["--config", str(config)], "unknown key 'read_onyl' in [policy]"),
        (["--backend", "docker"], "backend docker needs an image"),
    ):
        refused_by_name(args, words)


def refused_by_name(args: list[str], words: str) -> None:
    """`python -m executor mcp ARGS` exits 2 at once, saying `words` on stderr."""
    result = subprocess.run(
        [sys.executable, "-m", "executor", "mcp", *args],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 2, result.stderr
    assert words in result.stderr
