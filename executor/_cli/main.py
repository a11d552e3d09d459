"""The command line: `python -m executor run -- SCRIPT`, `files` and `journal`.

`run` streams the command's output live and exits with its exit code: 124 when
it timed out (as `timeout(1)` does), 125 when the executor itself failed.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import math
import os
import shlex
import signal
from collections.abc import Sequence

import anyio
import anyio.abc

from executor._cli.docker import add_docker_parser, run_docker_command
from executor._cli.journal import add_journal_parser, run_journal_command
from executor._core.commands import Command
from executor._core.errors import CommandError, InvalidArgument, NonZeroExit, TimedOut
from executor._core.output import Chunk, Stdout
from executor._local.executor import LocalExecutor

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
    run.add_argument("--timeout", type=_positive, help="seconds before the command is killed")
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
    add_journal_parser(commands)
    add_docker_parser(commands)
    return parser


def _positive(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not seconds > 0 or math.isinf(seconds):
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}")
    return seconds


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
        try:
            command = Command.shell(script)
        except InvalidArgument as error:
            parser.error(f"run: {error}")
        return anyio.run(functools.partial(_run, args, command))
    if args.command == "journal":
        return run_journal_command(args)
    if args.command == "docker":
        return run_docker_command(args)
    return anyio.run(functools.partial(_files, args))


class _OutputClosed(Exception):
    """Our own stdout or stderr is gone (a closed pipe, as in `| head -1`)."""


def _write(chunk: Chunk) -> None:
    fd = 1 if isinstance(chunk, Stdout) else 2
    data = memoryview(chunk.data)
    try:
        while data:
            data = data[os.write(fd, data) :]
    except (BrokenPipeError, OSError) as error:
        raise _OutputClosed from error


async def _run(args: argparse.Namespace, command: Command) -> int:
    executor = LocalExecutor(
        args.workdir,
        default_timeout=args.timeout,
        env_clear=args.env_clear,
        env_remove=args.env_remove,
        envs=dict(args.env),
        output_limit=0,  # the output goes to the terminal; keep none of it in memory
    )
    received: list[int] = []
    async with executor, anyio.create_task_group() as tasks:
        # SIGINT, SIGTERM and SIGHUP end the command's whole tree before we exit
        # with 128 + N, as a shell would; dying by the signal would orphan it.
        await tasks.start(_watch_signals, tasks.cancel_scope, received)
        code = await _run_command(executor, command)
        tasks.cancel_scope.cancel()
    if received:
        return 128 + received[0]
    return code


async def _watch_signals(
    scope: anyio.CancelScope,
    received: list[int],
    *,
    task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM, signal.SIGHUP) as signals:
        task_status.started()
        async for number in signals:
            received.append(number)
            scope.cancel()
            return


async def _run_command(executor: LocalExecutor, command: Command) -> int:
    try:
        output = await executor.exec_cmd_streaming(command, _write)
    except TimedOut as error:
        _say(error.message)
        return _TIMED_OUT
    except NonZeroExit as error:
        return error.output.exit_code or 1
    except _OutputClosed:
        return 128 + signal.SIGPIPE
    except CommandError as error:
        _say(error.message)
        return _EXECUTOR_FAILED
    return output.exit_code or 0


def _say(message: str) -> None:
    with contextlib.suppress(OSError):
        os.write(2, f"executor: {message}\n".encode())


async def _files(args: argparse.Namespace) -> int:
    executor = LocalExecutor(os.getcwd())
    async with executor:
        try:
            async for loaded in executor.stream_files(args.dir, args.ext or None):
                print(loaded.path)
        except FileNotFoundError as error:
            _say(str(error))
            return 2
    return 0
