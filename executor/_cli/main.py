"""The command line: `python -m executor run -- SCRIPT`, `files`, `journal` and `docker gc`.

`run` behaves like running the script in a shell (see `executor._cli.run`):
output streamed live, stdin piped through, `--pty` for interactive programs,
Ctrl-C passed on, and the command's exit code (124 when it timed out, as
`timeout(1)` says, 125 when the executor itself failed). Every subcommand
whose output pipe closes (`| head`) ends quietly with 141, as a program
killed by SIGPIPE would.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import math
import os
import shlex
import signal
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import anyio

from executor._cli.backends import add_backend_flags, check_backend_flags, make_executor
from executor._cli.docker import add_docker_parser, run_docker_command
from executor._cli.journal import add_journal_parser, run_journal_command
from executor._cli.mcp import add_mcp_parser, run_mcp_command
from executor._cli.run import BROKEN_PIPE, EXECUTOR_FAILED, run_session, say
from executor._core.commands import Command, Shell
from executor._core.errors import CommandError, InvalidArgument

if TYPE_CHECKING:
    from _typeshed import SupportsWrite

_INTERRUPTED = 128 + signal.SIGINT
# The executors' own default kill grace.
_KILL_GRACE = 1.0

_MAIN_EXAMPLES = """\
examples:
  python -m executor run -- 'git status --short'
  python -m executor files src --ext py | head
  python -m executor journal list --state interrupted
  python -m executor docker gc
  python -m executor mcp --workdir ~/src/app

Each subcommand has --help with examples of its own.
"""

_RUN_DESCRIPTION = """\
Run SCRIPT with `sh -c` (or the interpreter its #! line names) as a shell runs
it: output streamed live, what is piped in passed on to it as it comes, and
the command's exit code as the CLI's (124 when it timed out, 125 when the
executor failed, 141 when the output pipe closed). One word after -- is the
script; several are quoted and joined.

A terminal on stdin is not read (the command reads end-of-file) unless --pty
gives the command a terminal of its own: then the keys go to it as typed,
Ctrl-C included, and the window size follows the user's. Ctrl-C (SIGINT) on
the CLI without --pty sends SIGINT to the command and keeps what it prints as
it stops; if it has not stopped after --kill-grace seconds (or on a second
Ctrl-C), SIGTERM, then SIGKILL; the CLI exits 130 (SIGTERM: 143, SIGHUP: 129).
"""

_RUN_EXAMPLES = """\
examples:
  python -m executor run -- 'ls -l | wc -l'
  python -m executor run --timeout 60 --workdir src -- make test
  echo hello | python -m executor run -- tr a-z A-Z
  python -m executor run --pty -- python3 -i
  python -m executor run --sandbox -- 'touch /etc/x'        # refused: read-only
  python -m executor run --docker python:3.12 -- python3 -V  # an image the engine has
  python -m executor run --ssh deploy@build.example:2222 --ssh-key ~/.ssh/ci -- uptime
"""

_FILES_EXAMPLES = """\
examples:
  python -m executor files
  python -m executor files src --ext py --ext pyi | head
  python -m executor files --ssh me@devbox /srv/app --ext go
"""


def _variable(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    return name, value


def _seconds(*, zero: bool) -> Callable[[str], float]:
    kind = "a number of seconds >= 0" if zero else "a positive number of seconds"

    def seconds(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not (value >= 0 if zero else value > 0) or math.isinf(value):
            raise argparse.ArgumentTypeError(f"expected {kind}, got {text!r}")
        return value

    return seconds


class _Parser(argparse.ArgumentParser):
    """argparse's parser, but --help into a closed pipe raises, as other output does.

    argparse drops the error of writing its help, so `--help | head -1` would
    end 0 rather than 141. The subcommands' parsers are of this class too.
    """

    def print_help(self, file: SupportsWrite[str] | None = None) -> None:
        """Write the help to `file` (stdout); a closed pipe raises `BrokenPipeError`."""
        if file is not None:
            file.write(self.format_help())
        elif sys.stdout is not None:  # None: the CLI has no stdout at all
            sys.stdout.write(self.format_help())
            sys.stdout.flush()


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="python -m executor",
        description="Run agent tool commands the way an executor runs them.",
        epilog=_MAIN_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = commands.add_parser(
        "run",
        help="run a shell script as a shell would, streaming its output",
        description=_RUN_DESCRIPTION,
        epilog=_RUN_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    run.add_argument(
        "--workdir",
        metavar="DIR",
        help="folder the command starts in (default: the current one; /workspace in a "
        "container; the user's home over SSH)",
    )
    run.add_argument(
        "--timeout",
        type=_seconds(zero=False),
        metavar="SECONDS",
        help="seconds before the command is killed (exit 124)",
    )
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
    run.add_argument(
        "--pty",
        action="store_true",
        help="run the command on a terminal of its own, for interactive programs",
    )
    run.add_argument(
        "--kill-grace",
        type=_seconds(zero=True),
        default=_KILL_GRACE,
        metavar="SECONDS",
        help=f"wait between SIGINT, SIGTERM and SIGKILL when the command is stopped "
        f"(default {_KILL_GRACE:g})",
    )
    add_backend_flags(run, sandbox=True)
    run.add_argument("script", nargs=argparse.REMAINDER, help="-- SCRIPT")
    # A usage error is reported with the subcommand's own usage line.
    run.set_defaults(usage=run)

    files = commands.add_parser(
        "files",
        help="list the text files stream_files yields",
        description=(
            "List the files below DIR as stream_files yields them: text files, not\n"
            "hidden, not ignored by .gitignore (in a git checkout) or .ignore."
        ),
        epilog=_FILES_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    files.add_argument(
        "dir", nargs="?", default=".", metavar="DIR", help="folder to list (default: .)"
    )
    files.add_argument(
        "--ext",
        action="append",
        default=[],
        metavar="EXT",
        help="keep only this extension, 'py' or '.py' (repeatable)",
    )
    add_backend_flags(files, sandbox=False)
    files.set_defaults(usage=files)
    add_journal_parser(commands)
    add_docker_parser(commands)
    add_mcp_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line and return the exit code."""
    try:
        # --help meets a closed pipe too (`--help | head`).
        args = _parser().parse_args(argv)
        code = _dispatch(args)
        # Buffered output meets a closed pipe here at the latest, not at exit.
        _flush()
    except BrokenPipeError:
        _drop_stdout()
        return BROKEN_PIPE
    except SystemExit:
        # argparse's exit after --help or a usage error: its text may meet a closed pipe.
        try:
            _flush()
        except BrokenPipeError:
            _drop_stdout()
            return BROKEN_PIPE
        raise
    except KeyboardInterrupt:
        # Ctrl-C outside `run`'s own handling (`files`, `journal`, or while starting).
        return _INTERRUPTED
    return code


def _flush() -> None:
    # None when the CLI started with no stdout at all.
    if sys.stdout is not None:
        sys.stdout.flush()


def _drop_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's last flush finds no closed pipe."""
    with contextlib.suppress(OSError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.close(devnull)


def _dispatch(args: argparse.Namespace) -> int:
    if args.command == "journal":
        return run_journal_command(args)
    if args.command == "docker":
        return run_docker_command(args)
    if args.command == "mcp":
        return run_mcp_command(args)
    parser: argparse.ArgumentParser = args.usage
    problem = check_backend_flags(args)
    if problem is not None:
        parser.error(problem)
    if args.command == "run":
        command = _script(parser, args)
        return anyio.run(functools.partial(_run, args, command))
    return anyio.run(functools.partial(_files, args))


def _script(parser: argparse.ArgumentParser, args: argparse.Namespace) -> Shell:
    words = list(args.script)
    if words[:1] == ["--"]:
        words = words[1:]
    if not words:
        parser.error("give a script after --")
    script = words[0] if len(words) == 1 else shlex.join(words)
    try:
        command = Command.shell(script)
    except InvalidArgument as error:
        parser.error(str(error))
    if args.pty and command.shebang() is not None:
        parser.error("--pty cannot run a #! script: its body is the interpreter's stdin")
    return command


async def _run(args: argparse.Namespace, command: Shell) -> int:
    try:
        executor = make_executor(
            args,
            workdir=args.workdir,
            default_timeout=args.timeout,
            env_clear=args.env_clear,
            env_remove=args.env_remove,
            envs=dict(args.env),
            output_limit=0,  # the output goes to the terminal; keep none of it in memory
            kill_grace=args.kill_grace,
        )
    except (CommandError, ImportError, ValueError) as error:
        say(str(error))
        return EXECUTOR_FAILED
    return await run_session(executor, command, pty=args.pty, grace=args.kill_grace)


async def _files(args: argparse.Namespace) -> int:
    try:
        executor = make_executor(args)
    except (CommandError, ImportError, ValueError) as error:
        say(str(error))
        return EXECUTOR_FAILED
    try:
        async with executor:
            async for loaded in executor.stream_files(args.dir, args.ext or None):
                print(loaded.path)
    except BrokenPipeError:
        raise
    except OSError as error:
        # A folder that is missing or not a folder, or not readable.
        say(str(error))
        return 2
    except CommandError as error:
        say(error.message)
        return EXECUTOR_FAILED
    except ImportError as error:
        say(str(error))
        return EXECUTOR_FAILED
    return 0
