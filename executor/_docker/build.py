"""Images built from a Dockerfile and a context, through the Engine API's build endpoint."""

from __future__ import annotations

import codecs
import hashlib
import json
import os
from collections.abc import Mapping
from typing import Any

import anyio
import attrs

from executor._core.base import call_sink
from executor._core.errors import BuildError, EngineError, ExecutorError
from executor._core.output import Sink, Stderr, Stdout
from executor._docker.api import EngineClient
from executor._docker.dockerignore import ContextArchive, DockerIgnore, pack_context

LABEL_BUILD_DIGEST = "io.executor.build.digest"
"""The label an image built here carries: the digest of its context, Dockerfile and options."""

_DEFAULT_REPOSITORY = "executor-build"
# What is kept of a build's log for the error that reports it.
_KEEP = 64 * 1024
# The builder's own lines between a step's output, left out of `step_output`.
_HOUSEKEEPING = (" ---> ", "Removing intermediate container ")


def _mapping(value: Mapping[str, str] | None) -> dict[str, str]:
    return dict(value or {})


@attrs.frozen
class DockerBuild:
    """What to build an image from: a context folder and a Dockerfile in it, or its text.

    The context is sent as Docker's own client sends it: `.dockerignore`
    honoured (exclusions, `!` re-inclusions, `**`), the Dockerfile and
    `.dockerignore` always sent. `.git` is left out only if `.dockerignore`
    says so, and kept even then with `keep_git=True`.

    Args:
        context: The build context folder.
        dockerfile: The Dockerfile's path, relative to `context` (or absolute).
        dockerfile_text: The Dockerfile's text, instead of a file.
        build_args: `ARG` values.
        target: The stage of a multi-stage Dockerfile to build.
        tag: The image's name; by default `executor-build:<digest>`.
        labels: More labels for the image.
        keep_git: Send `.git` even when `.dockerignore` leaves it out.
        network: The network `RUN` steps get (`none` unless told otherwise).
        cache: Use an image built before from the same digest rather than build
            again (the digest covers the sent files, the Dockerfile and these
            options; `False` builds anew).
        no_cache: Build every step anew, not from the engine's layer cache.

    """

    context: str = attrs.field(default=".", converter=os.fspath)
    dockerfile: str | None = attrs.field(default=None, kw_only=True)
    dockerfile_text: str | None = attrs.field(default=None, kw_only=True)
    build_args: Mapping[str, str] = attrs.field(factory=dict, kw_only=True, converter=_mapping)
    target: str | None = attrs.field(default=None, kw_only=True)
    tag: str | None = attrs.field(default=None, kw_only=True)
    labels: Mapping[str, str] = attrs.field(factory=dict, kw_only=True, converter=_mapping)
    keep_git: bool = attrs.field(default=False, kw_only=True)
    network: str = attrs.field(default="none", kw_only=True)
    cache: bool = attrs.field(default=True, kw_only=True)
    no_cache: bool = attrs.field(default=False, kw_only=True)

    def __attrs_post_init__(self) -> None:
        if self.dockerfile is not None and self.dockerfile_text is not None:
            raise ValueError("give dockerfile (a path) or dockerfile_text, not both")


@attrs.frozen
class BuiltImage:
    """An image `build_image` made or found: its id, the tag it has, its digest."""

    id: str
    tag: str
    digest: str
    cached: bool
    """Whether an image built before from the same digest was used, with no build."""


@attrs.define
class _Context:
    archive: ContextArchive
    dockerfile: str
    digest: str


def _prepare(build: DockerBuild) -> _Context:
    """Pack the context (in a worker thread: it reads every file) and name the build."""
    root = os.path.abspath(build.context)
    if not os.path.isdir(root):
        raise ExecutorError(f"build context {build.context} is not a folder")
    ignore = DockerIgnore.of_folder(root)
    extra: dict[str, bytes] = {}
    name = ""
    if build.dockerfile_text is not None:
        text = build.dockerfile_text.encode()
    else:
        given = build.dockerfile or "Dockerfile"
        path = given if os.path.isabs(given) else os.path.join(root, given)
        try:
            with open(path, "rb") as file:
                text = file.read()
        except OSError as error:
            raise ExecutorError(f"cannot read the Dockerfile {given}: {error.strerror}") from None
        relative = os.path.relpath(os.path.realpath(path), os.path.realpath(root))
        if not relative.startswith(".."):
            relative = relative.replace(os.sep, "/")
            if ignore.excludes(relative):
                ignore = ignore.plus("!" + relative)
            name = relative
    if not name:
        # A Dockerfile from outside the context travels inside it under a name of
        # its own, listed in the sent `.dockerignore` so the engine drops it again
        # before any COPY sees it (as Docker's client does for `-f -`).
        name = ".dockerfile." + hashlib.sha256(text).hexdigest()[:20]
        extra[name] = text
        try:
            with open(os.path.join(root, ".dockerignore"), "rb") as file:
                listed = file.read()
        except FileNotFoundError:
            # Made up here, so it goes too.
            listed = b".dockerignore"
        extra[".dockerignore"] = listed + f"\n{name}\n".encode()
    if ignore.excludes(".dockerignore"):
        ignore = ignore.plus("!.dockerignore")
    if build.keep_git:
        ignore = ignore.plus("!.git")
    archive = pack_context(root, ignore, extra=extra)
    options = json.dumps(
        {
            "context": archive.digest,
            "dockerfile": hashlib.sha256(text).hexdigest(),
            "name": name,
            "args": build.build_args,
            "target": build.target,
            "labels": build.labels,
            "network": build.network,
        },
        sort_keys=True,
    )
    return _Context(archive, name, hashlib.sha256(options.encode()).hexdigest())


async def _cached(api: EngineClient, digest: str) -> str | None:
    """The id of an image built before from `digest`, if the engine still has one."""
    found = await api.request_json(
        "GET",
        "/images/json",
        query={"filters": json.dumps({"label": [f"{LABEL_BUILD_DIGEST}={digest}"]})},
    )
    return str(found[0]["Id"]) if found else None


def _split_tag(tag: str) -> tuple[str, str]:
    repository, colon, name = tag.rpartition(":")
    if not colon or "/" in name:
        return tag, "latest"
    return repository, name


class _Log:
    """The build's messages as they come: text to the sink, the failing step remembered."""

    def __init__(self, sink: Sink | None) -> None:
        self._sink = sink
        self.tail = ""
        self.step: str | None = None
        self.step_output = ""
        self.image_id: str | None = None
        self.error: str | None = None

    async def take(self, message: dict[str, Any]) -> None:
        if "error" in message:
            self.error = str(message.get("errorDetail", {}).get("message") or message["error"])
            await self._emit(Stderr((self.error + "\n").encode()))
            return
        aux = message.get("aux")
        if isinstance(aux, dict) and "ID" in aux:
            self.image_id = str(aux["ID"])
        text = message.get("stream")
        if not isinstance(text, str):
            return
        if text.startswith("Step "):
            self.step, self.step_output = text.strip(), ""
        elif not text.startswith(_HOUSEKEEPING):
            self.step_output = (self.step_output + text)[-_KEEP:]
        self.tail = (self.tail + text)[-_KEEP:]
        await self._emit(Stdout(text.encode()))

    async def _emit(self, chunk: Stdout | Stderr) -> None:
        if self._sink is not None:
            await call_sink(self._sink, chunk)


async def build_image(
    build: DockerBuild, *, docker_host: str | None = None, sink: Sink | None = None
) -> BuiltImage:
    """Build `build`'s image on the engine (`DOCKER_HOST` or `docker_host`), or find it built.

    The build log goes to `sink` as it comes (`Stdout` chunks; the error as
    `Stderr`). The image carries `LABEL_BUILD_DIGEST`; with `cache=True` (the
    default) an image the engine holds with the same digest is used as it
    is, tagged with `tag` if one is given.

    Raises:
        BuildError: A step failed, or the Dockerfile is wrong; the error names the
            step and holds its output.
        ExecutorError: The context or Dockerfile cannot be read, or the engine failed.

    """
    context = await anyio.to_thread.run_sync(_prepare, build)
    tag = build.tag or f"{_DEFAULT_REPOSITORY}:{context.digest[:16]}"
    api = EngineClient(docker_host)
    try:
        if build.cache:
            found = await _cached(api, context.digest)
            if found is not None:
                repository, name = _split_tag(tag)
                await api.request(
                    "POST", f"/images/{found}/tag", query={"repo": repository, "tag": name}
                )
                return BuiltImage(found, tag, context.digest, cached=True)
        query = {
            "t": tag,
            "dockerfile": context.dockerfile,
            "buildargs": json.dumps(dict(build.build_args)),
            "labels": json.dumps({**build.labels, LABEL_BUILD_DIGEST: context.digest}),
            "target": build.target,
            "networkmode": build.network,
            "nocache": build.no_cache,
            "rm": True,
            "forcerm": True,
            # The classic builder: BuildKit needs a session protocol of its own.
            "version": "1",
        }
        log = _Log(sink)
        decoder = json.JSONDecoder()
        async with api.stream(
            "POST",
            "/build",
            query=query,
            body=context.archive.data,
            content_type="application/x-tar",
        ) as response:
            pending = ""
            # One decoder across reads: a character split between two reads
            # is decoded whole, not as two U+FFFD.
            text = codecs.getincrementaldecoder("utf-8")(errors="replace")
            async for piece in response.iter_bytes():
                pending += text.decode(piece)
                while pending := pending.lstrip():
                    try:
                        message, end = decoder.raw_decode(pending)
                    except ValueError:
                        break
                    pending = pending[end:]
                    if isinstance(message, dict):
                        await log.take(message)
    except EngineError as error:
        raise BuildError(
            f"docker build of {build.context}: {error}", step=None, step_output="", log=""
        ) from None
    finally:
        await api.aclose()
    if log.error is not None:
        where = f" at {log.step}" if log.step else ""
        output = log.step_output.strip()
        raise BuildError(
            f"docker build of {build.context} failed{where}: {log.error}"
            + (f"\n{output}" if output else ""),
            step=log.step,
            step_output=log.step_output,
            log=log.tail,
        )
    if log.image_id is None:
        raise BuildError(
            f"docker build of {build.context} ended without an image",
            step=log.step,
            step_output=log.step_output,
            log=log.tail,
        )
    return BuiltImage(log.image_id, tag, context.digest, cached=False)
