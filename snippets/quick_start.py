"""Quick start: run a command, catch a failing one, write a file and read it back.

The README's first program, in a temporary folder instead of a checkout.
`LocalExecutor` starts every command in its workdir, under a default
timeout. A command that fails raises `NonZeroExit`, which carries its
output, so the agent can hand the reason back to the model. `write_file`
and `read_file` move exact bytes, with no shell in between.
"""

import tempfile

import anyio

from executor import Command, LocalExecutor, NonZeroExit


async def main() -> None:
    with tempfile.TemporaryDirectory() as checkout:
        async with LocalExecutor(checkout, default_timeout=30) as ex:
            output = await ex.exec_cmd(Command.shell("echo hello; echo from the shell >&2"))
            print(f"stdout={output.stdout!r} stderr={output.stderr!r}")

            try:
                await ex.exec_cmd(Command.shell("pytest -q").with_current_dir("crates/core"))
            except NonZeroExit as failed:
                reason = failed.output.text().strip().replace(checkout, "<checkout>")
                print(f"failed with exit code {failed.output.exit_code}: {reason}")

            await ex.exec_cmd(Command.write_file("notes/plan.md", "1. read\n2. write\n"))
            plan = await ex.exec_cmd(Command.read_file("notes/plan.md"))
            print(f"read back: {plan.stdout!r}")


if __name__ == "__main__":
    anyio.run(main)
