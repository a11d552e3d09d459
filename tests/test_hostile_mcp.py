"""Hostile input to the MCP server: random JSON-RPC and random tool arguments.

`python -m executor mcp` is started as a real process. Property-based
(hypothesis):

- raw lines on its stdin (text that is not JSON, JSON that is no message,
  requests with ids of every type, real and made-up methods with random
  params, notifications, stray responses, tool calls with arguments inside
  and outside each tool's schema): the server never crashes nor hangs, every
  request with an id it can read is answered, every refusal is a JSON-RPC
  error whose message says what was wrong or a tool result that says it, and
  after each hostile line the server answers the next valid request;
- the same tool arguments through the MCP SDK's own client.

What could run something stays harmless (see `test_hostile_toolset`): a
command is one of a few fixed scripts or an `echo` of random text.
"""

from __future__ import annotations

import itertools
import json
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from test_hostile_toolset import JSON, SPECS, TOOLS, from_schema, outside

mcp = pytest.importorskip("mcp", reason="the MCP tests need tool-executor[mcp]")

import mcp_types  # noqa: E402
from mcp import Client, StdioServerParameters  # noqa: E402

pytestmark = pytest.mark.anyio

# Every wait is bounded: a hang fails the test instead of the run.
LIMIT = 60.0
SETTINGS = settings(
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
# The requests a client may send, and a few that no server serves.
METHODS = [
    "initialize",
    "ping",
    "tools/list",
    "tools/call",
    "resources/list",
    "resources/read",
    "resources/templates/list",
    "resources/subscribe",
    "resources/unsubscribe",
    "logging/setLevel",
    "prompts/list",
    "prompts/get",
    "completion/complete",
    "notifications/cancelled",
    "notifications/initialized",
    "notifications/roots/list_changed",
    "sampling/createMessage",
    "",
    "rpc.discover",
]
# Replies that say nothing a client could act on.
EMPTY = {"", "Error executing tool", "Invalid request parameters", "Internal error", "None"}


@pytest.fixture
def anyio_backend() -> str:
    """The client on asyncio only (the server is a process of its own)."""
    return "asyncio"


# --- raw JSON-RPC lines on stdio ----------------------------------------------------------


class RawServer:
    """The stdio server, spoken to in JSON lines; its stdout read by a thread into a queue."""

    def __init__(self, workdir: Path) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "executor", "mcp", "--workdir", str(workdir), "--timeout", "5"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=dict(os.environ),
        )
        self.lines: queue.Queue[bytes] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.ids = itertools.count()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line)
        self.lines.put(b"")

    def send(self, line: bytes) -> None:
        """Write one line (a newline is added)."""
        assert self.process.stdin is not None
        self.process.stdin.write(line + b"\n")
        self.process.stdin.flush()

    def replies_until(self, wanted: set[Any]) -> list[dict[str, Any]]:
        """Every message the server sends until it has answered each id in `wanted`."""
        seen: list[dict[str, Any]] = []
        waiting = set(wanted)
        deadline = time.monotonic() + LIMIT
        while waiting:
            left = deadline - time.monotonic()
            assert left > 0, f"no answer to {sorted(map(str, waiting))} in {LIMIT} s: {seen}"
            try:
                line = self.lines.get(timeout=left)
            except queue.Empty:
                continue
            assert line, f"the server ended (exit {self.process.wait(LIMIT)}); it sent {seen}"
            message = json.loads(line)
            assert isinstance(message, dict), message
            seen.append(message)
            if "method" not in message:
                waiting.discard(_key(message.get("id")))
        return seen

    def initialize(self) -> None:
        """The handshake of the 2025-11-25 era."""
        request = {
            "jsonrpc": "2.0",
            "id": "init",
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "hostile", "version": "1"},
            },
        }
        self.send(json.dumps(request).encode())
        [reply] = [m for m in self.replies_until({_key("init")}) if m.get("id") == "init"]
        assert "result" in reply, reply
        self.send(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}')

    def close(self) -> None:
        """End the server: its stdin closed, then killed if it does not end by itself."""
        assert self.process.stdin is not None
        self.process.stdin.close()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        assert self.process.stdout is not None
        self.process.stdout.close()


def _key(ident: Any) -> Any:
    """An id as a set member (JSON's 1 and 1.0 differ as ids; a list cannot be hashed)."""
    return json.dumps(ident)


@pytest.fixture
def raw(tmp_path: Path) -> Iterator[RawServer]:
    """A stdio server past its handshake, in a folder with a file to read."""
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "app.py").write_text("print('hello')\n")
    server = RawServer(tmp_path)
    try:
        server.initialize()
        yield server
    finally:
        server.close()


TOOL_CALLS = st.sampled_from(TOOLS).flatmap(
    lambda name: st.tuples(
        st.just(name),
        st.one_of(from_schema(SPECS[name]), outside(name).map(lambda drawn: drawn[0])),
    )
)
BAD_IDS = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False).filter(lambda x: x != int(x)),
    st.booleans(),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)


@st.composite
def hostile_line(draw: st.DrawFn) -> tuple[bytes, str]:
    """One hostile line, and what must answer it.

    `"answer"`: a request whose id can be read, answered under that id;
    `"refuse"`: no message, refused under id null; `"any"`: a notification
    or a response, which need no answer.
    """
    kind = draw(
        st.sampled_from(
            ["text", "value", "request", "tool", "bad id", "notification", "response", "envelope"]
        )
    )
    if kind == "text":
        text = draw(st.text(max_size=60).filter(lambda text: "\n" not in text))
        data = text.encode("utf-8", "surrogatepass")
        return data, "refuse" if data.strip() else "any"
    if kind == "value":
        value = draw(JSON.filter(lambda value: not isinstance(value, dict)))
        return json.dumps(value).encode(), "refuse"
    method = draw(st.sampled_from(METHODS) | st.text(max_size=20))
    fields = st.sampled_from(["name", "uri", "arguments", "level", "_meta", "cursor"])
    params = draw(st.none() | JSON | st.dictionaries(fields, JSON, max_size=3))
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if params is not None or draw(st.booleans()):
        message["params"] = params
    if kind == "tool":
        name, arguments = draw(TOOL_CALLS)
        message = {
            "jsonrpc": "2.0",
            "method": "tools/call",
            "params": {"name": name, "arguments": arguments},
        }
    if kind in ("request", "tool"):
        message["id"] = draw(st.integers(min_value=10**6) | st.text(min_size=1, max_size=10))
        return json.dumps(message).encode(), "answer"
    if kind == "bad id":
        message["id"] = draw(BAD_IDS)
        return json.dumps(message).encode(), "refuse"
    if kind == "notification":
        bad = message.get("params") is not None and not isinstance(message["params"], dict)
        return json.dumps(message).encode(), "refuse" if bad else "any"
    if kind == "response":
        result = draw(JSON)
        message = {"jsonrpc": "2.0", "id": draw(st.integers() | st.text()), "result": result}
        return json.dumps(message).encode(), "any" if isinstance(result, dict) else "refuse"
    # A frame that is wrong: no jsonrpc or another version, fields of any type.
    keys = draw(st.sets(st.sampled_from(["jsonrpc", "id", "method", "params", "result", "error"])))
    message = {key: draw(JSON) for key in keys}
    if message.get("jsonrpc") == "2.0":
        message["jsonrpc"] = "1.0"
    return json.dumps(message).encode(), "refuse"


def check_reply(message: dict[str, Any]) -> None:
    """A reply is a JSON-RPC response whose error, or whose tool error, says what went wrong."""
    if "method" in message:
        return  # a notification of the server's own (progress, a log line)
    assert message.get("jsonrpc") == "2.0", message
    assert ("result" in message) != ("error" in message), message
    if "error" in message:
        error = message["error"]
        assert isinstance(error["code"], int), message
        assert isinstance(error["message"], str), message
        assert error["message"].strip() not in EMPTY, message
        return
    result = message["result"]
    if isinstance(result, dict) and result.get("isError"):
        texts = [block.get("text", "") for block in result.get("content", [])]
        said = " ".join(texts).strip()
        assert said not in EMPTY, message
        assert len(said) >= 10, message


@settings(SETTINGS, max_examples=120)
@given(line=hostile_line())
def test_random_json_rpc_lines(raw: RawServer, line: tuple[bytes, str]) -> None:
    """Each hostile line is answered or refused as JSON-RPC says; the next request is served."""
    data, expected = line
    raw.send(data)
    probe = f"probe-{next(raw.ids)}"
    request = {
        "jsonrpc": "2.0",
        "id": probe,
        "method": "tools/call",
        "params": {"name": "run", "arguments": {"command": f"echo {probe}"}},
    }
    raw.send(json.dumps(request).encode())
    wanted = {_key(probe)}
    if expected == "answer":
        wanted.add(_key(json.loads(data)["id"]))
    replies = raw.replies_until(wanted)
    for reply in replies:
        check_reply(reply)
    refusals = [reply for reply in replies if "error" in reply and reply["id"] is None]
    if expected == "refuse":
        # Lines are answered in order: the refusal comes before the probe's answer.
        assert len(refusals) == 1, replies
    else:
        assert refusals == [], replies
    [served] = [reply for reply in replies if reply.get("id") == probe]
    assert served["result"]["content"][0]["text"] == f"{probe}\n[exit code 0]", served


def test_ids_the_sdk_cannot_take_are_refused(raw: RawServer) -> None:
    """A request whose id is no string nor integer is refused (id null), never left unanswered.

    The SDK read `{"id": 1.5, "method": "ping"}` as a notification and
    answered nothing: a client waits for ever.
    """
    for ident in (1.5, True, {"a": 1}, [1], None):
        raw.send(json.dumps({"jsonrpc": "2.0", "id": ident, "method": "ping"}).encode())
        raw.send(b'{"jsonrpc": "2.0", "id": "after", "method": "ping"}')
        replies = [m for m in raw.replies_until({_key("after")}) if "method" not in m]
        assert replies[0] == {
            "jsonrpc": "2.0",
            "id": None,
            "error": {
                "code": -32600,
                "message": "Invalid Request: the message's id must be a string or an integer",
            },
        }, (ident, replies)
        assert replies[1] == {"jsonrpc": "2.0", "id": "after", "result": {}}


def test_an_invalid_request_is_refused_under_its_own_id(raw: RawServer) -> None:
    """A request whose id can be read is refused under that id, which its client waits for.

    It was refused under id null, and the client that sent it waited for ever.
    """
    cases = [
        ({"id": 5, "method": "ping", "params": 3}, "the message's params must be an object"),
        ({"id": "s", "method": 7}, "the message's method must be a string"),
        (
            {"id": 6, "method": "tools/call", "params": [1]},
            "the message's params must be an object",
        ),
    ]
    for message, said in cases:
        raw.send(json.dumps({"jsonrpc": "2.0", **message}).encode())
        ident = message["id"]
        [reply] = [m for m in raw.replies_until({_key(ident)}) if m.get("id") == ident]
        assert reply["error"] == {"code": -32600, "message": f"Invalid Request: {said}"}


def test_a_malformed_response_says_what_is_wrong_in_a_few_words(raw: RawServer) -> None:
    """A stray response of the wrong shape: the fields at fault, not the SDK's dump of the value."""
    raw.send(b'{"jsonrpc": "2.0", "id": 9, "error": {}}')
    raw.send(b'{"jsonrpc": "2.0", "id": "after", "method": "ping"}')
    replies = [m for m in raw.replies_until({_key("after")}) if "method" not in m]
    assert replies[0]["error"]["message"] == (
        "Invalid Request: the message is not one MCP knows: "
        "error.code: Field required; error.message: Field required"
    )


def test_invalid_params_say_which(raw: RawServer) -> None:
    """A request whose params fail validation names the field and what it should be."""
    cases = [
        ({"name": "run", "arguments": 3}, "arguments: Input should be a valid dictionary"),
        ({"arguments": {}}, "name: Field required"),
        ({"name": ["run"]}, "name: Input should be a valid string"),
    ]
    for number, (params, said) in enumerate(cases):
        request = {"jsonrpc": "2.0", "id": number, "method": "tools/call", "params": params}
        raw.send(json.dumps(request).encode())
        [reply] = [m for m in raw.replies_until({_key(number)}) if m.get("id") == number]
        error = reply["error"]
        assert error["code"] == -32602, reply
        assert error["message"].startswith("Invalid request parameters for tools/call: "), reply
        assert said in error["message"], reply


def test_a_huge_line_is_refused_and_the_server_goes_on(raw: RawServer) -> None:
    """A line of 8 MB that is not JSON, and a tool call of 8 MB: refused, then served again."""
    raw.send(b"x" * (8 << 20))
    big = {
        "jsonrpc": "2.0",
        "id": "big",
        "method": "tools/call",
        "params": {
            "name": "write_file",
            "arguments": {"path": "big.txt", "content": "y" * (8 << 20)},
        },
    }
    raw.send(json.dumps(big).encode())
    raw.send(b'{"jsonrpc": "2.0", "id": "after", "method": "ping"}')
    replies = raw.replies_until({_key("big"), _key("after")})
    for reply in replies:
        check_reply(reply)
    assert replies[0]["error"]["code"] == -32700
    [answer] = [reply for reply in replies if reply.get("id") == "big"]
    result = answer.get("result", {})
    # Refused as too big, or written: either way said, never lost in silence.
    assert result.get("isError") or "wrote" in result["content"][0]["text"], answer


# --- the SDK's own client -------------------------------------------------------------------


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[Client]:
    """The SDK's client on a stdio server in a folder with a file to read."""
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "app.py").write_text("print('hello')\n")
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "executor", "mcp", "--workdir", str(tmp_path), "--timeout", "5"],
        env=dict(os.environ),
    )
    async with Client(params) as connected:
        yield connected


def text_of(result: mcp_types.CallToolResult) -> str:
    """The result's text blocks, joined."""
    return " ".join(b.text for b in result.content if isinstance(b, mcp_types.TextContent))


# The client's own API takes a mapping (it refuses anything else before sending).
@settings(SETTINGS, max_examples=60)
@given(drawn=TOOL_CALLS.filter(lambda drawn: isinstance(drawn[1], dict)))
async def test_random_tool_arguments_through_the_sdk_client(
    client: Client, drawn: tuple[str, Any]
) -> None:
    """Any arguments: a result, or an error that says why; the next call is served."""
    name, arguments = drawn
    refusal: str | None = None
    with anyio.fail_after(LIMIT):
        try:
            result = await client.call_tool(name, arguments)
        except mcp.MCPError as error:
            # A JSON-RPC error (arguments that are no object): it says what was wrong.
            refusal = error.error.message.strip()
        else:
            if result.is_error:
                refusal = text_of(result).strip()
        after = await client.call_tool("run", {"command": "echo still serving"})
    if refusal is not None:
        assert refusal not in EMPTY, drawn
        assert len(refusal) >= 10, (drawn, refusal)
    assert text_of(after) == "still serving\n[exit code 0]"
