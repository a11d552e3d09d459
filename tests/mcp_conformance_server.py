"""The MCP server tests/test_mcp_conformance.py holds to the official conformance suite.

`python tests/mcp_conformance_server.py --port 0 --workdir DIR` serves
streamable HTTP at http://127.0.0.1:PORT/mcp, without a bearer token, and
says `serving on URL` on stderr once the socket is bound, as `python -m
executor mcp --http --no-auth` does. SIGTERM, SIGINT and SIGHUP stop it.

It is `McpServer` over `Approval(LocalExecutor(DIR), elicitation_approver,
ask=asks)` (every command asks a person first, as `--approval all` has it,
but `UNASKED_COMMAND`) with the standard toolset and, beside it
(`Toolset(extra=...)`), the few fixture tools of the suite's scenarios that
test what the server's own machinery does. Each fixture tool runs one real
command through the executor of its call, nothing more: whatever the suite
gets back (an `InputRequiredResult` with the server's question and a sealed
`requestState`, -32602 for a tampered state, -32021 for a client without
elicitation, the result of the call once answered, the log messages of the
command or none) is the server's own answer, not one written here. The
suite's other fixtures (test_simple_text, test_sampling, prompts,
resources...) are left out; tests/mcp_conformance_excluded.toml says why,
scenario by scenario.

The suite's client declares roots in most 2026-07-28 calls (all but those of
server-stateless and input-required-result-capability-check), and the server
asks such a client for its roots before anything runs: the first round of a
fixture's call is then the roots/list question, and the approval's
elicitation would come in a round after it.

The fixture tools, and the scenarios that call them (2026-07-28):

- test_input_required_result_tampered_state: input-required-result-tampered-state
  (the round trip's state, altered, is refused).
- test_input_required_result_request_state: input-required-result-request-state
  (the state comes back with the first round's question; its completion check
  is not held, as tests/mcp_conformance_excluded.toml says).
- test_input_required_result_elicitation: input-required-result-result-type,
  -validate-input, -missing-input-response (and -basic-elicitation and
  -ignore-extra-params, which tests/mcp_conformance_excluded.toml skips).
- test_input_required_result_list_roots: input-required-result-basic-list-roots
  (the roots/list round; the suite's answer, roots outside the workspace,
  leaves the command nowhere to run: a complete result, refused, naming them).
- test_missing_capability: server-stateless, called without elicitation
  (error -32021 naming it, HTTP 400).
- test_streaming_elicitation: server-stateless, called with elicitation (the
  question comes back in the result, never as a request on the stream).
- test_logging_tool: server-stateless, called without a log level in its
  `_meta` (no notifications/message, though the command runs and is logged
  to a request that asks for a level). It runs `UNASKED_COMMAND`, the one
  command the approval lets through unasked: the suite's call declares no
  client capability at all, and an asked command would end it at -32021
  before anything ran or was logged.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys

import anyio

from executor import (
    Approval,
    Command,
    LocalExecutor,
    McpServer,
    Shell,
    Tool,
    ToolOutput,
    Toolset,
    ToolsetContext,
    elicitation_approver,
    for_model,
    tool,
)

COMMAND = "true"
"""What the approval fixtures run, once a person (the suite, here) approved it."""

UNASKED_COMMAND = "echo logged"
"""What the logging fixture runs: the one command the approval does not ask about."""

FIXTURES: dict[str, tuple[str, str]] = {
    "test_input_required_result_tampered_state": (
        COMMAND,
        "Runs `true` once approved: the rounds (the client's roots, the approval) whose "
        "requestState the conformance suite tampers with (SEP-2322).",
    ),
    "test_input_required_result_request_state": (
        COMMAND,
        "Runs `true` once approved: the rounds (the client's roots, the approval) whose "
        "requestState the conformance suite echoes back with its answer (SEP-2322).",
    ),
    "test_input_required_result_elicitation": (
        COMMAND,
        "Runs `true` once approved: an approval asked through an elicitation input "
        "request (SEP-2322).",
    ),
    "test_input_required_result_list_roots": (
        COMMAND,
        "Runs `true` in the client's roots, once approved: the server asks a client that "
        "declares roots for them in a roots/list input request of its own (SEP-2322).",
    ),
    "test_missing_capability": (
        COMMAND,
        "Runs `true` once approved: the approval needs the elicitation capability, "
        "which a client that does not declare it is told (SEP-2575).",
    ),
    "test_streaming_elicitation": (
        COMMAND,
        "Runs `true` once approved: the approval is asked in the result, not in a "
        "request on the response stream (SEP-2575).",
    ),
    "test_logging_tool": (
        UNASKED_COMMAND,
        "Runs `echo logged`, which is not asked about: the server logs the command "
        "(started, finished) at the level the request asks for, and not at all to a "
        "request that asks for none (SEP-2575).",
    ),
}
"""The fixture tools the suite calls by name: the script each runs, what each says of itself."""


def asks(command: Command) -> bool:
    """Whether the approval asks before `command`: always, but for `UNASKED_COMMAND`."""
    return not (isinstance(command, Shell) and command.script == UNASKED_COMMAND)


def fixture_tool(name: str, script: str, description: str) -> Tool:
    """A tool called `name` that runs `script` through its call's executor (approval first)."""

    async def run(context: ToolsetContext) -> ToolOutput:
        # Through the server's executor: the client's roots (asked first, when it
        # declares them) narrow where the command may run, and the Approval asks the
        # client before it runs (but `UNASKED_COMMAND`); either refuses it
        # (PolicyDenied, a `denied` result) when the answer does not let it run.
        output = await context.executor().exec_cmd(Command.shell(script))
        context.last_output = output
        return ToolOutput(for_model(output), exit_code=output.exit_code)

    return tool(name=name, description=description)(run)


def fixture_tools() -> list[Tool]:
    """Every fixture tool of `FIXTURES`."""
    return [
        fixture_tool(name, script, description) for name, (script, description) in FIXTURES.items()
    ]


def say(text: str) -> None:
    """A line for the person (or test) running the server, on stderr."""
    print(f"mcp_conformance_server: {text}", file=sys.stderr, flush=True)


async def stop_on_signal(scope: anyio.CancelScope) -> None:
    """Cancel `scope` on SIGTERM, SIGINT or SIGHUP: the executor then ends what still runs."""
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
        async for _ in signals:
            scope.cancel()
            return


async def serve(workdir: str, host: str, port: int) -> None:
    """Serve until a signal comes."""
    local = LocalExecutor(workdir)
    approval = Approval(local, elicitation_approver, ask=asks)
    toolset = Toolset(extra=fixture_tools())
    server = McpServer(approval, toolset)
    say("serving without a bearer token: anyone who reaches the port runs commands")
    async with approval, toolset, anyio.create_task_group() as group:
        group.start_soon(stop_on_signal, group.cancel_scope)
        await server.run_http(
            token=None, host=host, port=port, ready=lambda url: say(f"serving on {url}")
        )
        group.cancel_scope.cancel()


def main(argv: list[str] | None = None) -> int:
    """Parse the flags and serve."""
    parser = argparse.ArgumentParser(
        description="Serve the fixture server of tests/test_mcp_conformance.py over HTTP."
    )
    parser.add_argument("--workdir", required=True, help="the folder commands run in")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (127.0.0.1)")
    parser.add_argument("--port", type=int, default=0, help="port to bind; 0 picks one (0)")
    args = parser.parse_args(argv)
    # A SIGINT before the signal receiver is up is a KeyboardInterrupt: stopped all the same.
    with contextlib.suppress(KeyboardInterrupt):
        anyio.run(serve, args.workdir, args.host, args.port)
    return 0


if __name__ == "__main__":
    sys.exit(main())
