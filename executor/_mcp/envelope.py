"""What makes a JSON value one JSON-RPC 2.0 message of MCP, for the transports to check."""

from __future__ import annotations

from typing import Any

INVALID_REQUEST = -32600
PARSE_ERROR = -32700


def envelope_problem(message: object) -> str | None:
    """What makes `message` not one JSON-RPC 2.0 message, or None.

    MCP sends one message a POST (batches were removed in 2025-06-18): a
    request (`method`, an `id` that is a string or a number), a notification
    (`method`, no `id`) or a response (`id` with `result` or `error`).
    """
    if isinstance(message, list):
        return "a JSON-RPC batch is not accepted: send one message per request"
    if not isinstance(message, dict):
        return "the body must be a JSON-RPC message object"
    if message.get("jsonrpc") != "2.0":
        return 'the message must have "jsonrpc": "2.0"'
    has_id = "id" in message
    ident = message.get("id")
    # A null id only on an error answering a request whose id could not be read.
    null_error = ident is None and "error" in message and "method" not in message
    if has_id and not null_error and (isinstance(ident, bool) or not isinstance(ident, str | int)):
        return "the message's id must be a string or an integer"
    if "method" in message:
        if not isinstance(message["method"], str):
            return "the message's method must be a string"
        if "params" in message and not isinstance(message["params"], dict):
            return "the message's params must be an object"
        return None
    if has_id and ("result" in message) != ("error" in message):
        return None
    return "the message is neither a request, a notification nor a response"


def invalid_request(
    problem: str, code: int = INVALID_REQUEST, ident: str | int | None = None
) -> dict[str, Any]:
    """The JSON-RPC error answering a message that is not one: with its id where it was read."""
    label = "Parse error" if code == PARSE_ERROR else "Invalid Request"
    return {
        "jsonrpc": "2.0",
        "id": ident,
        "error": {"code": code, "message": f"{label}: {problem}"},
    }


def readable_id(message: object) -> str | int | None:
    """The id of a JSON-RPC 2.0 request that is not valid otherwise, if it can be read (or None).

    JSON-RPC answers an invalid request with its id whenever the id could
    be read: a client waits for that id, and an answer under id null leaves
    it waiting.
    """
    if not isinstance(message, dict) or "method" not in message:
        return None
    if message.get("jsonrpc") != "2.0":
        return None  # not a JSON-RPC 2.0 request: its "id" may mean anything
    ident = message.get("id")
    if isinstance(ident, bool) or not isinstance(ident, str | int):
        return None
    return ident
