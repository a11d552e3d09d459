"""Build the container's image from a Dockerfile and a context.

`DockerBuild` sends the context as `docker build` does (`.dockerignore`
honoured with Docker's rules), builds through the engine's build endpoint,
and labels the image with the context's digest, so a second executor with
the same context takes the image without building (`cache=False` builds
anew). A failing step raises `BuildError` naming the step.

From the environment:

- `DOCKER_HOST`: the engine (default `unix:///var/run/docker.sock`);
- `EXECUTOR_DOCKER_IMAGE`: the base image, with Python 3 (default
  `python:3.12-slim`), already pulled.
"""

import os
import tempfile
from pathlib import Path

import anyio

from executor import (
    BuildError,
    Chunk,
    Command,
    DockerBuild,
    DockerExecutor,
    build_image,
)

IMAGE = os.environ.get("EXECUTOR_DOCKER_IMAGE", "python:3.12-slim")


async def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        context = Path(folder)
        (context / "app.py").write_text("print('app ran')\n")
        (context / "notes.log").write_text("not for the image\n")
        (context / ".dockerignore").write_text("*.log\n")
        (context / "Dockerfile").write_text(
            f"FROM {IMAGE}\nARG MODE=dev\nRUN echo $MODE > /mode\nCOPY . /app\n"
        )
        build = DockerBuild(str(context), build_args={"MODE": "release"})
        first = DockerBuild(str(context), build_args={"MODE": "release"}, cache=False)
        steps: list[str] = []

        def log(chunk: Chunk) -> None:
            text = chunk.data.decode()
            steps.extend(line for line in text.splitlines() if line.startswith("Step "))

        async with DockerExecutor(build=first, build_log=log, workdir="/app") as ex:
            assert ex.built_image is not None
            print(f"built in {len(steps)} steps, cached: {ex.built_image.cached}")
            output = await ex.exec_cmd(Command.shell("cat /mode; ls; python3 app.py"))
            print(f"in the container: {output.text().split()}")

        async with DockerExecutor(build=build) as ex:
            assert ex.built_image is not None
            print(f"second executor, cached: {ex.built_image.cached}")

        (context / "Dockerfile").write_text(f"FROM {IMAGE}\nRUN echo broken; exit 3\n")
        try:
            await build_image(DockerBuild(str(context)))
        except BuildError as error:
            print(f"BuildError at {error.step!r}: {error.step_output.strip()!r}")


if __name__ == "__main__":
    anyio.run(main)
