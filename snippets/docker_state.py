"""A container's state: running or exited with its code, and whether the OOM killer struck.

The engine reports an OOM kill only when the container ends; while it runs,
`state()` reads the count from the container's memory cgroup, so a command
killed for the container's memory limit shows at once.

From the environment:

- `DOCKER_HOST`: the engine (default `unix:///var/run/docker.sock`);
- `EXECUTOR_DOCKER_IMAGE`: an image with Python 3 (default
  `python:3.12-slim`), already pulled.
"""

import contextlib
import os

import anyio

from executor import Command, DockerExecutor, ExecutorError, NonZeroExit

IMAGE = os.environ.get("EXECUTOR_DOCKER_IMAGE", "python:3.12-slim")


async def main() -> None:
    async with DockerExecutor(IMAGE, memory="64m") as ex:
        state = await ex.state()
        print(f"at the start: {state.status}, oom_killed={state.oom_killed}")
        try:
            await ex.exec_cmd(Command.exec(["python3", "-c", "b = bytearray(1 << 30)"]))
        except NonZeroExit as error:
            print(f"the hog: {error}")
        state = await ex.state()
        print(f"after the hog: running={state.running}, oom_killed={state.oom_killed}")
        # The container's main process ends (its init passes the TERM on).
        with contextlib.suppress(ExecutorError, NonZeroExit):
            await ex.exec_cmd(Command.shell("kill -TERM 1; sleep 5"))
        for _ in range(50):
            state = await ex.state()
            if not state.running:
                break
            await anyio.sleep(0.1)
        print(f"after kill 1: {state.status}, exit code {state.exit_code}")


if __name__ == "__main__":
    anyio.run(main)
