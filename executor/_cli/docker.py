"""`python -m executor docker gc`: remove containers left by executors whose process is gone."""

from __future__ import annotations

import argparse
import functools
import sys
from typing import Any

import anyio

from executor._core.errors import ExecutorError

__all__ = ["add_docker_parser", "run_docker_command"]


def add_docker_parser(commands: Any) -> None:
    """Add the `docker` subcommand (with `gc`) to the command line's subparsers."""
    docker = commands.add_parser(
        "docker",
        help="manage the containers DockerExecutor made",
        description="Manage the containers DockerExecutor made (labelled io.executor.managed).",
        epilog="examples:\n  python -m executor docker gc\n  python -m executor docker gc --all\n",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = docker.add_subparsers(dest="docker_command", required=True)
    gc = actions.add_parser(
        "gc",
        help="remove containers whose owner process is gone",
        description=(
            "Remove the containers labelled as DockerExecutor's whose owner process (on\n"
            "this host) no longer runs, except those made with keep=True, and print\n"
            "their ids. The engine is the one DOCKER_HOST names (or --host)."
        ),
        epilog=(
            "examples:\n"
            "  python -m executor docker gc\n"
            "  python -m executor docker gc --host unix:///run/user/1000/docker.sock\n"
            "  python -m executor docker gc --all   # also kept containers, live owners\n"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    gc.add_argument("--host", help="the engine's address (default: DOCKER_HOST)")
    gc.add_argument(
        "--all",
        action="store_true",
        help="remove every labelled container: also kept ones, of live owners, of other hosts",
    )


def run_docker_command(args: argparse.Namespace) -> int:
    """Run `docker gc`; return the exit code (125 when the engine fails)."""
    from executor._docker.executor import collect_garbage

    try:
        removed = anyio.run(functools.partial(collect_garbage, args.host, everything=args.all))
    except ExecutorError as error:
        print(f"executor: {error}", file=sys.stderr)
        return 125
    for container in removed:
        print(container)
    return 0
