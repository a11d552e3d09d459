"""A LocalExecutor: where commands start, how long they may run, what they see.

Mirrors "Local executor" in swiftide's tool-executor guide. The keyword
arguments set where and how commands run:

- `workdir`: the directory commands start in (default `.`).
- `default_timeout`: seconds for commands without a timeout of their own.
- `env_remove`: variables to drop, here secrets the model's commands do not need.
- `envs`: variables to set; they apply after `env_clear` and `env_remove`.
- `env_clear=True`: start from an empty environment. That drops `PATH` and
  `HOME` too, so pass back through `envs` the ones your commands need.
"""

import os
import tempfile

import anyio

from executor import Command, LocalExecutor


async def main() -> None:
    os.environ["OPENAI_API_KEY"] = "sk-not-for-the-model"
    with tempfile.TemporaryDirectory() as checkout:
        executor = LocalExecutor(
            checkout,
            default_timeout=30,
            env_remove=["OPENAI_API_KEY", "GITHUB_TOKEN"],
            envs={"CARGO_TERM_COLOR": "never"},
        )
        async with executor:
            output = await executor.exec_cmd(
                Command.shell('pwd; echo "color=$CARGO_TERM_COLOR key=${OPENAI_API_KEY:-unset}"')
            )
            where, settings = output.text().splitlines()
            print(f"workdir: {await anyio.Path(where).samefile(checkout)}")
            print(settings)

        # An empty environment: give back only what the commands need.
        bare = LocalExecutor(checkout, env_clear=True, envs={"PATH": "/usr/bin:/bin"})
        async with bare:
            output = await bare.exec_cmd(Command.shell('echo "HOME=${HOME:-unset} PATH=$PATH"'))
            print(f"env_clear: {output.text().strip()}")


if __name__ == "__main__":
    anyio.run(main)
