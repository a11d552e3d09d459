"""`python -m executor docker gc` and `docker build`: clean up after executors, build images."""

from __future__ import annotations

import argparse
import functools
import sys
from typing import Any

import anyio

from executor._core.errors import ExecutorError
from executor._core.output import Chunk, Stdout


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
    build = actions.add_parser(
        "build",
        help="build an image from a Dockerfile and a context, as DockerExecutor(build=...) does",
        description=(
            "Build an image as DockerExecutor(build=DockerBuild(DIR, ...)) builds it:\n"
            "the context sent with .dockerignore honoured, the build log printed as it\n"
            "comes, the image labelled with the context's digest and reused while the\n"
            "context is unchanged. Prints the image id and tag last."
        ),
        epilog=(
            "examples:\n"
            "  python -m executor docker build .\n"
            "  python -m executor docker build app -f app/Dockerfile.dev --target test\n"
            "  python -m executor docker build . -t myapp:dev --build-arg VERSION=1.2\n"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    build.add_argument("context", metavar="DIR", help="the build context folder")
    build.add_argument("-f", "--file", help="the Dockerfile (default: DIR/Dockerfile)")
    build.add_argument("-t", "--tag", help="the image's name (default: executor-build:DIGEST)")
    build.add_argument(
        "--build-arg",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="an ARG value (repeatable)",
    )
    build.add_argument("--target", help="the stage of a multi-stage Dockerfile to build")
    build.add_argument(
        "--keep-git", action="store_true", help="send .git even where .dockerignore drops it"
    )
    build.add_argument(
        "--network", default="none", help="the network RUN steps get (default: none)"
    )
    build.add_argument(
        "--no-cache",
        action="store_true",
        help="build every step anew, and never reuse an image of the same digest",
    )
    build.add_argument("-q", "--quiet", action="store_true", help="print only the image id")
    build.add_argument("--host", help="the engine's address (default: DOCKER_HOST)")
    gc.add_argument(
        "--all",
        action="store_true",
        help="remove every labelled container: also kept ones, of live owners, of other hosts",
    )


def _build(args: argparse.Namespace) -> int:
    from executor._core.errors import BuildError
    from executor._docker.build import DockerBuild, build_image

    build_args = {}
    for pair in args.build_arg:
        name, equals, value = pair.partition("=")
        if not equals or not name:
            print(f"executor: --build-arg wants NAME=VALUE, got {pair!r}", file=sys.stderr)
            return 2
        build_args[name] = value

    def show(chunk: Chunk) -> None:
        stream = sys.stdout if isinstance(chunk, Stdout) else sys.stderr
        stream.write(chunk.data.decode("utf-8", "replace"))
        stream.flush()

    build = DockerBuild(
        args.context,
        dockerfile=args.file,
        build_args=build_args,
        target=args.target,
        tag=args.tag,
        keep_git=args.keep_git,
        network=args.network,
        cache=not args.no_cache,
        no_cache=args.no_cache,
    )
    try:
        built = anyio.run(
            functools.partial(
                build_image, build, docker_host=args.host, sink=None if args.quiet else show
            )
        )
    except BuildError as error:
        print(f"executor: {error.args[0]}", file=sys.stderr)
        return 1
    except ExecutorError as error:
        print(f"executor: {error}", file=sys.stderr)
        return 125
    if args.quiet:
        print(built.id)
    else:
        print(f"{built.id} {built.tag}{' (cached)' if built.cached else ''}")
    return 0


def run_docker_command(args: argparse.Namespace) -> int:
    """Run `docker gc` or `docker build`; return the exit code (125 when the engine fails)."""
    from executor._docker.container import collect_garbage

    if args.docker_command == "build":
        return _build(args)

    try:
        removed = anyio.run(functools.partial(collect_garbage, args.host, everything=args.all))
    except ExecutorError as error:
        print(f"executor: {error}", file=sys.stderr)
        return 125
    for container in removed:
        print(container)
    return 0
