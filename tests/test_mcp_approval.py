"""Approvals on MCP 2026-07-28 cannot be forged: the request state is sealed, bound and spent.

On 2026-07-28 the question goes back to the client in an `InputRequiredResult`
and the answer comes with the client's retry, beside the server's
`request_state`. Every test here tries to run `touch marker` without a person
saying yes, and checks that the marker stays absent; the genuine round trip
runs the command exactly once. The in-process tests drive the SDK's own client
round by round (`allow_input_required=True`); the HTTP ones send the raw JSON a
hostile client would.
"""

from __future__ import annotations

import base64
import contextlib
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

mcp = pytest.importorskip("mcp", reason="the MCP tests need tool-executor[mcp]")

import httpx2  # noqa: E402
import mcp_types  # noqa: E402
from mcp import Client  # noqa: E402
from test_mcp import TOKEN, http_server  # noqa: E402

from executor import (  # noqa: E402
    Approval,
    Command,
    LocalExecutor,
    McpServer,
    Toolset,
    ToolsetContext,
    elicitation_approver,
    tool,
)

pytestmark = pytest.mark.anyio

TOUCH = {"command": "echo once >> ran; touch marker"}
INVALID_STATE = "Invalid or expired requestState"


@pytest.fixture
def anyio_backend() -> str:
    """The SDK's client and server in one process, on asyncio."""
    return "asyncio"


def accept(approve: bool = True) -> mcp_types.ElicitResult:
    return mcp_types.ElicitResult(action="accept", content={"approve": approve})


@contextlib.asynccontextmanager
async def serving(
    workdir: Path, *, approval_ttl: float = 600.0
) -> AsyncIterator[Callable[[], contextlib.AbstractAsyncContextManager[Client]]]:
    """A server asking approval for every command; yields a factory of modern clients."""
    async with LocalExecutor(workdir) as local:
        # Every command asks, reads too (`--approval all`).
        approval = Approval(local, elicitation_approver, ask=lambda command: True)
        server = McpServer(approval, approval_ttl=approval_ttl)

        async def never_called(context: Any, params: Any) -> mcp_types.ElicitResult:
            raise AssertionError("the rounds are driven by hand")

        def client() -> contextlib.AbstractAsyncContextManager[Client]:
            return Client(server.server, mode="auto", elicitation_callback=never_called)

        yield client


async def call(
    client: Client,
    arguments: dict[str, Any],
    *,
    responses: dict[str, Any] | None = None,
    state: str | None = None,
    name: str = "run",
) -> mcp_types.CallToolResult | mcp_types.InputRequiredResult:
    result = await client.session.call_tool(
        name,
        arguments,
        input_responses=responses,
        request_state=state,
        allow_input_required=True,
    )
    assert isinstance(result, mcp_types.CallToolResult | mcp_types.InputRequiredResult)
    return result


async def question(client: Client, arguments: dict[str, Any]) -> tuple[str, str]:
    """The first round: the key of the question asked, and the sealed state."""
    asked = await call(client, arguments)
    assert isinstance(asked, mcp_types.InputRequiredResult)
    assert asked.input_requests is not None
    assert asked.request_state is not None
    (key,) = asked.input_requests
    return key, asked.request_state


async def refused(client: Client, arguments: dict[str, Any], **kwargs: Any) -> str:
    """The call is a -32602 protocol error; its message."""
    with pytest.raises(mcp.MCPError) as error:
        await call(client, arguments, **kwargs)
    assert error.value.code == mcp_types.INVALID_PARAMS
    message: str = error.value.message
    return message


def untouched(workdir: Path) -> None:
    assert not (workdir / "marker").exists()
    assert not (workdir / "ran").exists()


async def test_the_genuine_round_trip_runs_once(tmp_path: Path) -> None:
    """Asked, answered yes, run: once; the same state sent again is refused."""
    async with serving(tmp_path) as client_of, client_of() as client:
        key, state = await question(client, TOUCH)
        untouched(tmp_path)
        answer = {key: accept()}
        done = await call(client, TOUCH, responses=answer, state=state)
        assert isinstance(done, mcp_types.CallToolResult)
        assert not done.is_error
        # A replay of the very round that ran it: the state was spent.
        assert "used already" in await refused(client, TOUCH, responses=answer, state=state)
        # A no is a no, and its state is spent as well.
        key2, state2 = await question(client, {"command": "touch no"})
        said_no = await call(
            client, {"command": "touch no"}, responses={key2: accept(False)}, state=state2
        )
        assert isinstance(said_no, mcp_types.CallToolResult)
        assert said_no.is_error
    assert (tmp_path / "ran").read_text() == "once\n"
    assert not (tmp_path / "no").exists()


async def test_a_forged_state_is_refused(tmp_path: Path) -> None:
    """The old plain-JSON state, with the key the server would use, runs nothing."""
    async with serving(tmp_path) as client_of, client_of() as client:
        key, _ = await question(client, TOUCH)
        forged = json.dumps({"approved": {key: True}})
        assert await refused(client, TOUCH, state=forged) == INVALID_STATE
        assert await refused(client, TOUCH, responses={key: accept()}, state=forged) == (
            INVALID_STATE
        )
    untouched(tmp_path)


async def test_a_tampered_state_is_refused(tmp_path: Path) -> None:
    """Any byte of the sealed state changed: refused, nothing run."""
    async with serving(tmp_path) as client_of, client_of() as client:
        key, state = await question(client, TOUCH)
        prefix, _, body = state.partition(".")
        raw = bytearray(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
        for index in (0, len(raw) // 2, len(raw) - 1):
            flipped = bytearray(raw)
            flipped[index] ^= 1
            tampered = prefix + "." + base64.urlsafe_b64encode(flipped).decode().rstrip("=")
            message = await refused(client, TOUCH, responses={key: accept()}, state=tampered)
            assert message == INVALID_STATE
        assert await refused(client, TOUCH, responses={key: accept()}, state=state[:-2]) == (
            INVALID_STATE
        )
    untouched(tmp_path)


async def test_a_state_for_another_command_is_refused(tmp_path: Path) -> None:
    """A yes given for `echo harmless` does not run `touch marker`, nor another tool."""
    async with serving(tmp_path) as client_of, client_of() as client:
        harmless = {"command": "echo harmless"}
        key, state = await question(client, harmless)
        answer = {key: accept()}
        assert await refused(client, TOUCH, responses=answer, state=state) == INVALID_STATE
        shell = {"command": TOUCH["command"]}
        assert await refused(client, shell, responses=answer, state=state, name="shell") == (
            INVALID_STATE
        )
    untouched(tmp_path)


async def test_a_state_from_another_server_is_refused(tmp_path: Path) -> None:
    """Each server process seals under a key of its own: another session's state fails."""
    async with serving(tmp_path) as first_of, first_of() as first:
        key, state = await question(first, TOUCH)
        async with serving(tmp_path) as second_of, second_of() as second:
            message = await refused(second, TOUCH, responses={key: accept()}, state=state)
            assert message == INVALID_STATE
    untouched(tmp_path)


async def test_an_expired_state_is_refused(tmp_path: Path) -> None:
    """The person's answer comes after the state's time: refused, nothing run."""
    async with serving(tmp_path, approval_ttl=0.5) as client_of, client_of() as client:
        key, state = await question(client, TOUCH)
        await anyio.sleep(0.7)
        message = await refused(client, TOUCH, responses={key: accept()}, state=state)
        assert message == INVALID_STATE
    untouched(tmp_path)


async def test_unsolicited_answers_are_not_taken(tmp_path: Path) -> None:
    """Answers to questions the call's last round did not ask are ignored: asked again, not run."""
    async with serving(tmp_path) as client_of, client_of() as client:
        key, _ = await question(client, TOUCH)
        # The right key, but no round asked it: the first and only call.
        again = await call(client, TOUCH, responses={key: accept()})
        assert isinstance(again, mcp_types.InputRequiredResult)
        assert again.input_requests is not None
        assert set(again.input_requests) == {key}
        # A genuine state for another question, with an answer to this one beside it: the
        # other command runs, this one does not.
        other, other_state = await question(client, {"command": "echo other > other.txt"})
        done = await call(
            client,
            {"command": "echo other > other.txt"},
            responses={other: accept(), key: accept()},
            state=other_state,
        )
        assert isinstance(done, mcp_types.CallToolResult)
        assert not done.is_error
    assert (tmp_path / "other.txt").read_text() == "other\n"
    untouched(tmp_path)


async def test_two_questions_in_one_call_are_each_answered(tmp_path: Path) -> None:
    """edit_file asks for its read, then its write: each answer is taken in its own round."""
    (tmp_path / "notes.txt").write_text("draft\n")
    edit = {"path": "notes.txt", "old_text": "draft", "new_text": "final"}
    async with serving(tmp_path) as client_of, client_of() as client:
        read_key, state = await question_for(client, edit, "edit_file")
        second = await call(
            client, edit, responses={read_key: accept()}, state=state, name="edit_file"
        )
        assert isinstance(second, mcp_types.InputRequiredResult)
        assert second.input_requests is not None
        assert second.request_state is not None
        (write_key,) = second.input_requests
        assert write_key != read_key
        # The write's round, answered with a no to the write and a yes to the read: the
        # read's answer is not this round's question, and the no holds.
        refused_write = await call(
            client,
            edit,
            responses={read_key: accept(), write_key: accept(False)},
            state=second.request_state,
            name="edit_file",
        )
        assert isinstance(refused_write, mcp_types.CallToolResult)
        assert refused_write.is_error
        assert (tmp_path / "notes.txt").read_text() == "draft\n"
        # That state was spent: sent again, refused.
        assert "used already" in await refused(
            client,
            edit,
            responses={write_key: accept()},
            state=second.request_state,
            name="edit_file",
        )
        # From the start, yes to both.
        read_key, state = await question_for(client, edit, "edit_file")
        second = await call(
            client, edit, responses={read_key: accept()}, state=state, name="edit_file"
        )
        assert isinstance(second, mcp_types.InputRequiredResult)
        assert second.request_state is not None
        done = await call(
            client,
            edit,
            responses={write_key: accept()},
            state=second.request_state,
            name="edit_file",
        )
        assert isinstance(done, mcp_types.CallToolResult)
        assert not done.is_error
    assert (tmp_path / "notes.txt").read_text() == "final\n"


async def question_for(client: Client, arguments: dict[str, Any], name: str) -> tuple[str, str]:
    asked = await call(client, arguments, name=name)
    assert isinstance(asked, mcp_types.InputRequiredResult)
    assert asked.input_requests is not None
    assert asked.request_state is not None
    (key,) = asked.input_requests
    return key, asked.request_state


# --- raw HTTP: what a hostile client sends on the wire -----------------------------------

MODERN = "2026-07-28"


def envelope(
    arguments: dict[str, Any],
    *,
    elicitation: bool = True,
    state: str | None = None,
    responses: dict[str, Any] | None = None,
) -> dict[str, Any]:
    params: dict[str, Any] = {
        "name": "run",
        "arguments": arguments,
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientCapabilities": (
                {"elicitation": {}} if elicitation else {}
            ),
            "io.modelcontextprotocol/clientInfo": {"name": "hostile", "version": "1"},
        },
    }
    if state is not None:
        params["requestState"] = state
    if responses is not None:
        params["inputResponses"] = responses
    return {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}


async def post(url: str, body: dict[str, Any], *, scheme: str = "Bearer") -> httpx2.Response:
    headers = {
        "Authorization": f"{scheme} {TOKEN}",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": "tools/call",
        "Mcp-Name": "run",
    }
    async with httpx2.AsyncClient(timeout=60) as http:
        return await http.post(url, json=body, headers=headers)


async def test_raw_http_forgeries_run_nothing(tmp_path: Path) -> None:
    """Forged, tampered and unsolicited approvals over the wire: 400 with -32602, no marker."""
    work = tmp_path / "work"
    work.mkdir()
    async with http_server("--workdir", str(work), "--approval", "commands") as (url, _):
        asked = await post(url, envelope(TOUCH), scheme="bearer")
        assert asked.status_code == 200, asked.text
        result = asked.json()["result"]
        assert result["resultType"] == "input_required"
        (key,) = result["inputRequests"]
        state = result["requestState"]
        assert "approve" not in state  # sealed: not even readable
        yes = {key: {"action": "accept", "content": {"approve": True}}}
        hostile = [
            envelope(TOUCH, state=json.dumps({"approved": {key: True}})),
            envelope(TOUCH, state=state[:-1] + ("A" if state[-1] != "A" else "B"), responses=yes),
            envelope({"command": "touch marker"}, state=state, responses=yes),
        ]
        for body in hostile:
            response = await post(url, body)
            assert response.status_code == 400, response.text
            assert response.json()["error"]["code"] == mcp_types.INVALID_PARAMS
        # An answer nobody asked for is not taken: the question comes back.
        unasked = await post(url, envelope(TOUCH, responses=yes))
        assert unasked.status_code == 200, unasked.text
        assert unasked.json()["result"]["resultType"] == "input_required"
        assert not (work / "marker").exists()
        # A client that cannot be asked: -32021 naming the capability it lacks.
        unable = await post(url, envelope(TOUCH, elicitation=False))
        assert unable.status_code == 400, unable.text
        error = unable.json()["error"]
        assert error["code"] == mcp_types.MISSING_REQUIRED_CLIENT_CAPABILITY
        assert error["data"] == {"requiredCapabilities": {"elicitation": {}}}
        assert not (work / "marker").exists()
        # The genuine answer, once, runs it once; the same request again is refused.
        ran = await post(url, envelope(TOUCH, state=state, responses=yes), scheme="BEARER")
        assert ran.status_code == 200, ran.text
        assert ran.json()["result"]["structuredContent"]["exit_code"] == 0
        again = await post(url, envelope(TOUCH, state=state, responses=yes))
        assert again.status_code == 400, again.text
    assert (work / "ran").read_text() == "once\n"


async def test_each_approved_command_runs_once_in_a_call_of_several(tmp_path: Path) -> None:
    """A tool that runs three commands, each asked: each runs once, in order, across the rounds."""

    @tool
    async def release(context: ToolsetContext) -> str:
        """Push, tag and announce."""
        for step in ("push", "tag", "announce"):
            await context.executor().exec_cmd(Command.shell(f"echo {step} >> log"))
        return "released"

    async with LocalExecutor(tmp_path) as local, Toolset(extra=[release]) as toolset:
        approval = Approval(local, elicitation_approver, ask=lambda command: True)
        server = McpServer(approval, toolset)

        async def by_hand(context: Any, params: Any) -> mcp_types.ElicitResult:
            raise AssertionError("the rounds are driven by hand")

        async with Client(server.server, mode="auto", elicitation_callback=by_hand) as client:
            asked = await call(client, {}, name="release")
            rounds = 0
            while isinstance(asked, mcp_types.InputRequiredResult):
                rounds += 1
                assert asked.input_requests is not None
                assert len(asked.input_requests) == 1
                (key,) = asked.input_requests
                asked = await call(
                    client,
                    {},
                    responses={key: accept()},
                    state=asked.request_state,
                    name="release",
                )
            assert not asked.is_error
    assert rounds == 3
    assert (tmp_path / "log").read_text() == "push\ntag\nannounce\n"


async def test_a_state_is_good_for_one_retry_even_mid_call(tmp_path: Path) -> None:
    """The state of a round that is being answered cannot be sent again beside it."""
    async with serving(tmp_path) as client_of, client_of() as client:
        key, state = await question(client, TOUCH)
        done = await call(client, TOUCH, responses={key: accept()}, state=state)
        assert isinstance(done, mcp_types.CallToolResult)
        message = await refused(client, TOUCH, responses={key: accept()}, state=state)
        assert "used already" in message
    assert (tmp_path / "ran").read_text() == "once\n"


async def test_reading_a_resource_asks_too(tmp_path: Path) -> None:
    """With reads asked about, a file resource waits for the client's yes, then is read."""
    (tmp_path / "notes.txt").write_text("secret plan\n")
    uri = "executor://files/notes.txt"
    async with serving(tmp_path) as client_of, client_of() as client:
        asked = await client.session.read_resource(uri, allow_input_required=True)
        assert isinstance(asked, mcp_types.InputRequiredResult)
        assert asked.input_requests is not None
        (key,) = asked.input_requests
        said_no = client.session.read_resource(
            uri,
            input_responses={key: accept(False)},
            request_state=asked.request_state,
            allow_input_required=True,
        )
        with pytest.raises(mcp.MCPError) as refusal:
            await said_no
        assert refusal.value.code == mcp_types.INVALID_PARAMS
        assert "said no" in refusal.value.message
        asked = await client.session.read_resource(uri, allow_input_required=True)
        assert isinstance(asked, mcp_types.InputRequiredResult)
        assert asked.input_requests is not None
        (key,) = asked.input_requests
        read = await client.session.read_resource(
            uri,
            input_responses={key: accept()},
            request_state=asked.request_state,
            allow_input_required=True,
        )
        assert isinstance(read, mcp_types.ReadResourceResult)
        (contents,) = read.contents
        assert isinstance(contents, mcp_types.TextResourceContents)
        assert contents.text == "secret plan\n"


def test_the_principal_is_the_token_and_the_session() -> None:
    """What a sealed state is bound to over HTTP: the bearer token (any scheme case) and session."""
    from types import SimpleNamespace

    from executor._mcp.server import _principal

    def ctx(**headers: str) -> Any:
        return SimpleNamespace(request=SimpleNamespace(headers=headers))

    def ctx_without_request() -> Any:
        return SimpleNamespace(request=None)

    mine = _principal(ctx(authorization="Bearer one"))
    assert mine == _principal(ctx(authorization="bearer one"))
    assert mine != _principal(ctx(authorization="Bearer two"))
    assert mine != _principal(ctx(authorization="Bearer one", **{"mcp-session-id": "s1"}))
    assert _principal(ctx(authorization="Bearer one", **{"mcp-session-id": "s1"})) != (
        _principal(ctx(authorization="Bearer one", **{"mcp-session-id": "s2"}))
    )
    assert _principal(ctx_without_request()) is None  # stdio: the process is the session
