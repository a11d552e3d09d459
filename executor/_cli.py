"""The command line: `python -m executor run -- SCRIPT` and `python -m executor files`.

`run` streams the command's output live and exits with its exit code: 124 when
it timed out (as `timeout(1)` does), 125 when the executor itself failed.
"""

from __future__ import annotations

import argparse
import functools
import os
import shlex
import sys
from collections.abc import Sequence

import anyio

from executor._commands import Command
from executor._errors import CommandError, ExecutorError, NonZeroExit, TimedOut
from executor._local import LocalExecutor
from executor._output import Chunk, Stdout

__all__ = ["main"]

_TIMED_OUT = 124
_EXECUTOR_FAILED = 125


def _variable(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    return name, value


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m executor",
        description="Run agent tool commands the way an executor runs them.",
    )
    commands = parser.add_subparsers(dest="command", required=True)

    run = commands.add_parser(
        "run",
        help="run a shell script, streaming its output",
        description=(
            "Run SCRIPT with `sh -c` (or its #! interpreter) in a LocalExecutor, stream "
            "its output, and exit with its exit code (124 on timeout). Several words "
            "after -- are quoted and joined into one script."
        ),
    )
    run.add_argument("--workdir", default=".", help="directory the command starts in")
    run.add_argument("--timeout", type=float, help="seconds before the command is killed")
    run.add_argument(
        "--env",
        type=_variable,
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="set a variable (repeatable)",
    )
    run.add_argument(
        "--env-remove",
        action="append",
        default=[],
        metavar="NAME",
        help="remove a variable (repeatable)",
    )
    run.add_argument("--env-clear", action="store_true", help="start from an empty environment")
    run.add_argument("script", nargs=argparse.REMAINDER, help="-- SCRIPT")

    files = commands.add_parser(
        "files",
        help="list the text files stream_files yields",
        description="List the files below DIR as stream_files yields them.",
    )
    files.add_argument("dir", nargs="?", default=".", help="folder to list (default: .)")
    files.add_argument(
        "--ext",
        action="append",
        default=[],
        metavar="EXT",
        help="keep only this extension, 'py' or '.py' (repeatable)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line and return the exit code."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command == "run":
        words = list(args.script)
        if words[:1] == ["--"]:
            words = words[1:]
        if not words:
            parser.error("run: give a script after --")
        script = words[0] if len(words) == 1 else shlex.join(words)
        return anyio.run(functools.partial(_run, args, script))
    return anyio.run(functools.partial(_files, args))


def _write(chunk: Chunk) -> None:
    stream = sys.stdout if isinstance(chunk, Stdout) else sys.stderr
    stream.buffer.write(chunk.data)
    stream.buffer.flush()


async def _run(args: argparse.Namespace, script: str) -> int:
    executor = LocalExecutor(
        args.workdir,
        default_timeout=args.timeout,
        env_clear=args.env_clear,
        env_remove=args.env_remove,
        envs=dict(args.env),
        output_limit=0,  # the output goes to the terminal; keep none of it in memory
    )
    async with executor:
        try:
            output = await executor.exec_cmd_streaming(Command.shell(script), _write)
        except TimedOut as error:
            print(f"executor: {error.message}", file=sys.stderr)
            return _TIMED_OUT
        except NonZeroExit as error:
            return error.output.exit_code or 1
        except (ExecutorError, CommandError) as error:
            print(f"executor: {error.message}", file=sys.stderr)
            return _EXECUTOR_FAILED
    return output.exit_code or 0


async def _files(args: argparse.Namespace) -> int:
    executor = LocalExecutor(os.getcwd())
    async with executor:
        try:
            async for loaded in executor.stream_files(args.dir, args.ext or None):
                print(loaded.path)
        except FileNotFoundError as error:
            print(f"executor: {error}", file=sys.stderr)
            return 2
    return 0
