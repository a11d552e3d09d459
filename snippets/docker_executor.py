"""Run commands in a container: `DockerExecutor`, speaking the Docker Engine API itself.

The container starts at `async with` from an image, under an init that
reaps orphans, with no network unless asked and the memory, CPU and
process limits given; `aclose()` (the end of the block) removes it. Files
go through the engine's archive endpoints, never a shell. A timeout kills
the command's tree inside the container.

From the environment:

- `DOCKER_HOST`: the engine (default `unix:///var/run/docker.sock`), read
  by the executor itself, as the docker CLI does;
- `EXECUTOR_DOCKER_IMAGE`: an image with Python 3 (default
  `python:3.12-slim`), already pulled.
"""

import os

import anyio

from executor import Command, DockerExecutor, TimedOut

IMAGE = os.environ.get("EXECUTOR_DOCKER_IMAGE", "python:3.12-slim")


async def main() -> None:
    async with DockerExecutor(IMAGE, memory="256m", cpus=1, pids_limit=64) as ex:
        await ex.exec_cmd(Command.write_file("main.py", "import sys\nprint(sys.version_info[0])\n"))
        output = await ex.exec_cmd(Command.exec(["python3", "main.py"]))
        print(f"python in the container: {output.text().strip()}")

        where = await ex.exec_cmd(Command.shell("pwd; ls /sys/class/net"))
        workdir, *interfaces = where.text().split()
        print(f"workdir: {workdir}, network interfaces: {interfaces}")

        listing = [loaded.path async for loaded in ex.stream_files(".")]
        print(f"stream_files: {listing}")

        try:
            await ex.exec_cmd(Command.shell("echo started; sleep 30").with_timeout(1))
        except TimedOut as error:
            print(f"TimedOut after {error.timeout}s: {error.output.text()!r}")


if __name__ == "__main__":
    anyio.run(main)
