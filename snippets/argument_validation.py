"""Validate a model's arguments before they reach an executor.

Mirrors "Argument validation" in swiftide's tool-executor guide. A working
directory is not a sandbox: it only chooses where a command starts. An
absolute path or a `..` still reaches the rest of the machine. So parse each
argument into a type that cannot hold a bad value first: `WorkspacePath`
accepts only a relative, non-blank path with no `..`, no root and no NUL, and
raises `InvalidArgument` (a `ValueError`) whose message names the value and
the rule it broke, ready to go back to the model.

Prefer `Command.read_file` and `Command.write_file` over `cat` or `>` in a
shell string: no shell ever sees the path. Symlinks inside the workdir can
still point elsewhere; validated paths do not change that, a sandbox does.
"""

import tempfile

import anyio

from executor import Command, InvalidArgument, LocalExecutor, ToolExecutor, WorkspacePath


async def count_lines(executor: ToolExecutor, path: str) -> str:
    """Count the lines of a file in the workspace.

    Args:
        executor: Where the file is read.
        path: File path relative to the workspace root.

    Returns:
        The number of lines, as text for the model.

    Raises:
        InvalidArgument: `path` could leave the workspace.
        NonZeroExit: The file could not be read.

    """
    checked = WorkspacePath(path)
    content = await executor.exec_cmd(Command.read_file(checked))
    return str(len(content.text().splitlines()))


async def main() -> None:
    with tempfile.TemporaryDirectory() as workdir:
        async with LocalExecutor(workdir) as executor:
            await executor.exec_cmd(Command.write_file("src/app.py", "import os\n\nprint(1)\n"))
            print(f"count_lines('src/app.py') = {await count_lines(executor, 'src/app.py')}")

            for raw in ("../../etc/passwd", "/etc/passwd", "   "):
                try:
                    await count_lines(executor, raw)
                except InvalidArgument as error:
                    print(f"rejected: {error}")


if __name__ == "__main__":
    anyio.run(main)
