"""`python -m executor mcp`: the standard toolset as an MCP server, over stdio or streamable HTTP.

The configuration comes from a TOML file (`--config`, see
`executor._mcp.config`) with the flags over it. stdout is the MCP wire on
stdio, so everything for the person running the server goes to stderr.
"""

from __future__ import annotations

import argparse
import os
import secrets
import signal
import sys
from typing import Any

import anyio

from executor._cli.backends import SshTarget, add_backend_flags, check_backend_flags
from executor._core.errors import CommandError
from executor._mcp.config import APPROVAL_MODES, BACKENDS, McpConfig, load_mcp_config

TOKEN_VARIABLE = "EXECUTOR_MCP_TOKEN"
"""The environment variable the HTTP server's bearer token can come from."""

_EXIT_USAGE = 2
_EXIT_FAILED = 125

_DESCRIPTION = """\
Serve the standard toolset (run, shell, jobs, read_file, write_file, edit_file,
list_files, glob, search, terminal, log_tailer, code_interpreter) over MCP.
Every command runs through the executor the flags (or the --config TOML file)
choose, under its policies: read-only, allow and deny lists, dangerous-command
checks (on unless --allow-dangerous), secrets kept out (unless --no-secrets),
approval asked of the client through MCP elicitation, an audit log. Every
command gets the agent-safe environment (pagers off, editors that fail,
prompts that fail or read end of file) unless --no-agent-env.

Over stdio (the default) the server speaks MCP on stdin and stdout. With
--http it serves streamable HTTP at http://HOST:PORT/mcp, bound to 127.0.0.1,
and every request must carry `Authorization: Bearer TOKEN`: the token comes
from --token-file, $EXECUTOR_MCP_TOKEN, --token or the config file, or is made
up and printed on stderr. Flags override the config file. SIGTERM, SIGINT and
SIGHUP stop the server, ending what it runs.
"""

_EXAMPLES = """\
examples:
  python -m executor mcp --workdir ~/src/app
  python -m executor mcp --sandbox --workdir ~/src/app --approval commands
  python -m executor mcp --docker python:3.12-slim --read-only
  python -m executor mcp --ssh deploy@build.example --deny 'git push' --audit-log audit.jsonl
  EXECUTOR_MCP_TOKEN=s3cret python -m executor mcp --http --port 8765
  python -m executor mcp --config executor-mcp.toml
"""


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}")
    return value


def _port(text: str) -> int:
    if not text.isdigit() or not 0 <= int(text) < 65536:
        raise argparse.ArgumentTypeError(f"expected a port from 0 to 65535, got {text!r}")
    return int(text)


def add_mcp_parser(commands: Any) -> None:
    """Add the `mcp` subcommand to the CLI's subparsers."""
    parser: argparse.ArgumentParser = commands.add_parser(
        "mcp",
        help="serve the standard toolset over MCP (stdio or streamable HTTP)",
        description=_DESCRIPTION,
        epilog=_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--config", metavar="FILE", help="a TOML file with the configuration")
    parser.add_argument("--workdir", metavar="DIR", help="folder commands start in")
    parser.add_argument(
        "--timeout",
        type=_positive,
        metavar="SECONDS",
        help="how long a command may run when the model gives no timeout (default 120)",
    )
    parser.add_argument(
        "--native",
        action="append",
        metavar="FAMILY",
        help="offer the tools models were trained on instead of the standard set: anthropic "
        "(bash, str_replace_based_edit_tool), openai (shell, local_shell, apply_patch) or "
        "swe-agent (str_replace_editor); repeat for several",
    )
    parser.add_argument(
        "--yield-after",
        type=_positive,
        metavar="SECONDS",
        help="hand back a command still running after this long as a job (job_read, job_stop)",
    )
    parser.add_argument(
        "--idle-timeout",
        type=_positive,
        metavar="SECONDS",
        help="kill a command that prints nothing for this long",
    )
    parser.add_argument(
        "--spill",
        metavar="DIR",
        help="keep the whole of an output too long to keep in DIR (on this machine), "
        "served as a resource",
    )
    parser.add_argument(
        "--backend",
        choices=BACKENDS,
        help="where commands run; --sandbox, --docker and --ssh choose it too",
    )
    parser.add_argument(
        "--no-agent-env",
        action="store_false",
        dest="agent_env",
        default=None,
        help="run commands in the executor's environment as it is, without the agent-safe "
        "variables (PAGER=cat, GIT_EDITOR=false, GIT_TERMINAL_PROMPT=0, ...)",
    )
    add_backend_flags(parser, sandbox=True)
    policy = parser.add_argument_group("policies")
    policy.add_argument(
        "--read-only",
        action="store_true",
        default=None,
        help="offer only the read-only tools (read_file, list_files, glob, search)",
    )
    policy.add_argument(
        "--allow",
        action="append",
        metavar="COMMAND",
        help="allow only commands starting with these words (repeatable)",
    )
    policy.add_argument(
        "--deny",
        action="append",
        metavar="COMMAND",
        help="refuse commands starting with these words (repeatable)",
    )
    policy.add_argument(
        "--allow-dangerous",
        action="store_false",
        dest="dangerous",
        default=None,
        help="turn the dangerous-command checks off",
    )
    policy.add_argument(
        "--dangerous-allow",
        action="append",
        metavar="RULE",
        help="turn one dangerous-command rule off, by name (repeatable)",
    )
    policy.add_argument(
        "--no-secrets",
        action="store_false",
        dest="secrets",
        default=None,
        help="pass credential variables to commands, and do not redact them",
    )
    policy.add_argument(
        "--secrets-keep",
        action="append",
        metavar="NAME",
        help="a credential variable to pass on anyway (repeatable)",
    )
    policy.add_argument(
        "--approval",
        choices=APPROVAL_MODES,
        help="which commands a person must approve, asked through MCP elicitation (default never)",
    )
    policy.add_argument(
        "--approval-timeout",
        type=_positive,
        metavar="SECONDS",
        help="how long to wait for an approval before refusing (default 300)",
    )
    policy.add_argument("--audit-log", metavar="FILE", help="append audit records (JSON lines)")
    http = parser.add_argument_group("streamable HTTP")
    http.add_argument(
        "--http",
        action="store_const",
        const="http",
        dest="transport",
        help="serve streamable HTTP instead of stdio",
    )
    http.add_argument("--host", metavar="ADDR", help="address to bind (default 127.0.0.1)")
    http.add_argument(
        "--port", type=_port, metavar="PORT", help="port to bind; 0 picks one (default 8765)"
    )
    http.add_argument(
        "--token-file", metavar="FILE", help="a file whose first line is the bearer token"
    )
    http.add_argument(
        "--token",
        metavar="TOKEN",
        help=f"the bearer token (other users can read it in ps: prefer ${TOKEN_VARIABLE})",
    )
    http.add_argument(
        "--no-auth",
        action="store_false",
        dest="auth",
        default=None,
        help="serve without a token (anyone who can reach the port can run commands); "
        "loopback only",
    )
    http.add_argument(
        "--allowed-origin",
        action="append",
        metavar="ORIGIN",
        dest="allowed_origins",
        help="a browser origin to accept besides loopback's, as https://app.example or "
        "http://host:* (repeatable); a request from another Origin gets 403",
    )
    parser.set_defaults(usage=parser)


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    backend = args.backend
    if args.sandbox is not None:
        backend = "sandbox"
    elif args.docker is not None:
        backend = "docker"
    elif args.ssh is not None:
        backend = "ssh"
    found: dict[str, Any] = {
        "backend": backend,
        "workdir": args.workdir,
        "timeout": args.timeout,
        "agent_env": args.agent_env,
        "native": args.native,
        "yield_after": args.yield_after,
        "idle_timeout": args.idle_timeout,
        "sandbox": args.sandbox,
        "image": args.docker,
        "ssh_keys": args.ssh_key or None,
        "known_hosts": args.known_hosts,
        "read_only": args.read_only,
        "allow": args.allow,
        "deny": args.deny,
        "dangerous": args.dangerous,
        "dangerous_allow": args.dangerous_allow,
        "secrets": args.secrets,
        "secrets_keep": args.secrets_keep,
        "approval": args.approval,
        "approval_timeout": args.approval_timeout,
        "audit_log": args.audit_log,
        "spill": args.spill,
        "transport": args.transport,
        "host": args.host,
        "port": args.port,
        "token": args.token,
        "token_file": args.token_file,
        "allowed_origins": args.allowed_origins,
        "auth": args.auth,
    }
    if args.ssh is not None:
        target: SshTarget = args.ssh
        found.update(ssh_host=target.host, ssh_user=target.user, ssh_port=target.port)
    return found


def http_token(config: McpConfig) -> tuple[str | None, bool]:
    """The bearer token HTTP requires, and whether it was made up here (then it is shown).

    In order: `token_file` (from the flag or the config), `$EXECUTOR_MCP_TOKEN`,
    `token` in the config or the flag, else a new random one. `None` when
    `auth` is off.

    Raises:
        OSError: The token file cannot be read.
        ValueError: The token file is empty.
    """
    if not config.auth:
        return None, False
    if config.token_file is not None:
        path = os.path.expanduser(config.token_file)
        with open(path, encoding="utf-8") as file:
            token = file.readline().strip()
        if not token:
            raise ValueError(f"the token file {config.token_file} is empty")
        return token, False
    from_env = os.environ.get(TOKEN_VARIABLE, "").strip()
    if from_env:
        return from_env, False
    if config.token:
        return config.token, False
    return secrets.token_urlsafe(32), True


def run_mcp_command(args: argparse.Namespace) -> int:
    """Serve until the client goes away (stdio) or the server is stopped (HTTP)."""
    parser: argparse.ArgumentParser = args.usage
    problem = check_backend_flags(args)
    if problem is not None:
        parser.error(problem)
    try:
        config = load_mcp_config(args.config, **_overrides(args))
    except (ValueError, OSError) as error:
        say(str(error))
        return _EXIT_USAGE
    try:
        return anyio.run(_serve, config)
    except KeyboardInterrupt:
        return 0


def say(text: str) -> None:
    """A line for the person running the server, on stderr (stdout is the MCP wire)."""
    print(f"executor mcp: {text}", file=sys.stderr, flush=True)


async def _stop_on_signal(scope: anyio.CancelScope) -> None:
    """Stop serving on SIGTERM, SIGINT or SIGHUP: the executor then ends what still runs."""
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
        async for _ in signals:
            scope.cancel()
            return


async def _serve(config: McpConfig) -> int:
    # Imported here: the other subcommands need neither the toolset nor the server.
    from executor._mcp.calls import elicitation_approver
    from executor._mcp.config import AuditLog, build_executor
    from executor._mcp.server import McpServer
    from executor._toolset.toolset import Toolset

    token: str | None = None
    if config.transport == "http":
        try:
            token, made_up = http_token(config)
        except (OSError, ValueError) as error:
            say(str(error))
            return _EXIT_USAGE
        if token is None:
            say("serving without a bearer token (--no-auth): anyone who reaches the port runs")
        elif made_up:
            say(f"bearer token: {token}")
    audit = AuditLog(config.audit_log) if config.audit_log else None
    try:
        executor = build_executor(config, approver=elicitation_approver, recorder=audit)
        toolset = Toolset(
            read_only=config.read_only,
            native=config.native,
            timeout=config.timeout,
            yield_after=config.yield_after,
            idle_timeout=config.idle_timeout,
            environment=config.agent_env,
        )
        server = McpServer(executor, toolset)
    except (CommandError, ImportError, ValueError) as error:
        say(str(error))
        if audit is not None:
            audit.close()
        return _EXIT_FAILED
    try:
        async with executor, toolset, anyio.create_task_group() as group:
            group.start_soon(_stop_on_signal, group.cancel_scope)
            if config.transport == "stdio":
                await server.run_stdio()
            else:
                await server.run_http(
                    token=token,
                    host=config.host,
                    port=config.port,
                    allowed_origins=config.allowed_origins,
                    ready=lambda url: say(f"serving on {url}"),
                )
            group.cancel_scope.cancel()
    except (CommandError, ImportError, OSError) as error:
        say(str(error))
        return _EXIT_FAILED
    finally:
        if audit is not None:
            audit.close()
    return 0
