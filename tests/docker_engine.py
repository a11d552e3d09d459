"""The Docker engine the DockerExecutor tests use: found, or the tests skip (fail under CI).

The engine is the one `DOCKER_HOST` names (the local socket by default). The
images are built by `.ci/services/docker.sh` without any registry:
`executor-test/busybox` (busybox applets only) and `executor-test/python`
(busybox plus Python 3). `EXECUTOR_DOCKER_IMAGE` and
`EXECUTOR_DOCKER_BUSYBOX` name others. With `EXECUTOR_REQUIRE_DOCKER=1` a
missing engine or image fails the tests instead of skipping them.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import socket
import subprocess
from collections.abc import Iterator

import anyio
import pytest

from executor._core.errors import EngineError
from executor._docker.api import EngineClient
from executor._docker.container import LABEL_MANAGED, LABEL_OWNER, owner_label

PYTHON_IMAGE = os.environ.get("EXECUTOR_DOCKER_IMAGE", "executor-test/python")
BUSYBOX_IMAGE = os.environ.get("EXECUTOR_DOCKER_BUSYBOX", "executor-test/busybox")
REQUIRED = os.environ.get("EXECUTOR_REQUIRE_DOCKER") == "1"
# What a skip tells to run: as root, it installs docker.io, starts a dockerd of
# its own, builds the two images and exports DOCKER_HOST (sourced, so the
# variable reaches the shell that runs pytest next).
START = ". .ci/services/docker.sh"


async def _probe() -> str | None:
    api = EngineClient()
    try:
        await api.request("GET", "/_ping")
        for image in (PYTHON_IMAGE, BUSYBOX_IMAGE):
            _, body = await api.request("GET", f"/images/{image}/json", ok=(200, 404))
            if b'"Id"' not in body:
                return f"image {image} is missing: build it with `{START}`"
    except EngineError as error:
        return f"no Docker engine ({error}): start one with `{START}` or set DOCKER_HOST"
    finally:
        await api.aclose()
    return None


@functools.cache
def engine_problem() -> str | None:
    """Why the Docker tests cannot run here, or `None` when they can."""
    return anyio.run(_probe)


def require_engine() -> None:
    """Skip the calling test without an engine and images; fail instead under CI."""
    problem = engine_problem()
    if problem is None:
        return
    if REQUIRED:
        pytest.fail(f"EXECUTOR_REQUIRE_DOCKER=1 but {problem}")
    pytest.skip(problem)


def docker(*args: str, check: bool = True) -> str:
    """Run the docker CLI (a test's independent witness) and return its stdout."""
    completed = subprocess.run(
        ["docker", *args], capture_output=True, text=True, check=False, timeout=60
    )
    if check and completed.returncode:
        raise AssertionError(f"docker {' '.join(args)} failed: {completed.stderr}")
    return completed.stdout


def our_containers(owner: str | None = None) -> list[str]:
    """Ids of containers labelled as ours, made by `owner` (this process by default)."""
    owner = owner_label() if owner is None else owner
    found = docker(
        "ps",
        "-aq",
        "--no-trunc",
        "--filter",
        f"label={LABEL_MANAGED}",
        "--filter",
        f"label={LABEL_OWNER}={owner}",
    )
    return found.split()


def containers_of(pid: int) -> list[str]:
    """Containers labelled as made by the process `pid` of this host, whether it runs or not."""
    listing = docker(
        "ps", "-a", "--filter", f"label={LABEL_MANAGED}", "--format",
        f'{{{{.ID}}}} {{{{.Label "{LABEL_OWNER}"}}}}',
    )  # fmt: skip
    owner = f"{socket.gethostname()}:{pid}:"
    return [line.split()[0] for line in listing.splitlines() if owner in line]


def container_processes(container_id: str) -> list[str]:
    """The command lines `docker top` shows for a container."""
    listing = docker("top", container_id, "-eo", "pid,args")
    return [line.strip() for line in listing.splitlines()[1:] if line.strip()]


def inspect(container_id: str) -> dict[str, object]:
    """`docker inspect` of one container."""
    data: list[dict[str, object]] = json.loads(docker("inspect", container_id))
    return data[0]


def start_labelled_container(image: str) -> str:
    """A container of `image` that idles, with network none, labelled as ours; its id.

    The caller removes it (`docker("rm", "-f", id)`).
    """
    from executor._docker.container import LABEL_MANAGED, LABEL_OWNER, owner_label

    return docker(
        "run",
        "-d",
        "--init",
        "--network",
        "none",
        "--label",
        f"{LABEL_MANAGED}=1",
        "--label",
        f"{LABEL_OWNER}={owner_label()}",
        "--entrypoint",
        "/bin/sh",
        image,
        "-c",
        "while :; do sleep 3600; done",
    ).strip()


@contextlib.contextmanager
def labelled_container(image: str) -> Iterator[str]:
    """An idle container of `image` (see `start_labelled_container`) for the block; its id.

    Skips (or fails, under EXECUTOR_REQUIRE_DOCKER) without an engine, and removes
    the container after the block: the body of a module-scoped fixture.
    """
    require_engine()
    container = start_labelled_container(image)
    try:
        yield container
    finally:
        docker("rm", "-f", container, check=False)
