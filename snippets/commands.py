"""Build commands: shell scripts, argv commands, file reads and writes, and their options.

Mirrors "Commands" in swiftide's tool-executor guide. A `Command` is an
immutable value that says what to run, not where; each `with_*` method returns
a changed copy.

- `Command.shell(script)` runs with `sh -c`; `Command.exec(argv)` runs a
  program with no shell at all, so arguments need no quoting.
- `Command.read_file` and `Command.write_file` never pass through a shell, so a
  path never needs quoting. `write_file` creates missing parents and replaces
  the file atomically.
- `with_current_dir` joins a relative directory onto the executor's workdir
  (an absolute one is used as is); file paths resolve against the result.
- `with_timeout` wins over the executor's `default_timeout`, also when longer.
- `with_env` adds variables; `with_stdin` feeds standard input, which is
  otherwise empty, so nothing ever waits on a terminal.
"""

import tempfile
from datetime import timedelta

import anyio

from executor import Command, LocalExecutor


async def main() -> None:
    with tempfile.TemporaryDirectory() as workdir:
        async with LocalExecutor(workdir, default_timeout=5) as executor:
            await executor.exec_cmd(Command.write_file("docs/notes.md", "first\nsecond\n"))

            notes = await executor.exec_cmd(Command.read_file("notes.md").with_current_dir("docs"))
            print(f"read_file: {notes.stdout!r}")

            # No shell: the file name with a space and a `;` is one argument.
            await executor.exec_cmd(Command.write_file("docs/a b;c.txt", "x"))
            listing = await executor.exec_cmd(Command.exec(["ls", "docs"]))
            print(f"exec: {listing.text().splitlines()}")

            lines = await executor.exec_cmd(
                Command.shell("wc -l < notes.md").with_current_dir("docs").with_timeout(60)
            )
            print(f"shell: {lines.text().strip()} lines")

            greeting = await executor.exec_cmd(
                Command.shell('echo "hello, $NAME"').with_env({"NAME": "agent"})
            )
            print(f"with_env: {greeting.text().strip()}")

            upper = await executor.exec_cmd(
                Command.exec(["tr", "a-z", "A-Z"])
                .with_stdin("piped in\n")
                .with_timeout(timedelta(seconds=2))
            )
            print(f"with_stdin: {upper.text().strip()}")


if __name__ == "__main__":
    anyio.run(main)
