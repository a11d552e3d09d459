"""Keep an executor's own file operations inside its workdir: `confine=True`.

A confined `LocalExecutor` resolves every path of `read_file`, `write_file`,
`stream_files` and `current_dir` beneath its workdir, opened once: `..`,
absolute paths outside, symlinks that lead out and spellings such as `~`
are refused with `PolicyDenied`, naming the path and why. What a command
does once it runs is not confined: that is the OS sandbox's job.
"""

import tempfile
from pathlib import Path

import anyio

from executor import Command, LocalExecutor, PolicyDenied


async def main() -> None:
    with tempfile.TemporaryDirectory() as root:
        outside = Path(root, "outside.txt")
        await anyio.Path(outside).write_text("not for the agent\n")
        await anyio.Path(root, "work").mkdir()
        async with LocalExecutor(Path(root, "work"), confine=True) as ex:
            await ex.exec_cmd(Command.write_file("notes/plan.md", "inside\n"))
            plan = await ex.exec_cmd(Command.read_file("notes/../notes/plan.md"))
            print(f"inside: {plan.text().strip()}")

            # A symlink made by a command, pointing out of the workdir.
            await ex.exec_cmd(Command.exec(["ln", "-s", "..", "up"]))
            for path in ("../outside.txt", str(outside), "up/outside.txt", "~/.ssh/id_ed25519"):
                try:
                    await ex.exec_cmd(Command.read_file(path))
                except PolicyDenied as refused:
                    print(f"refused: {refused}")

            # A running command is not confined: a sandbox would stop this.
            escaped = await ex.exec_cmd(Command.shell("cat ../outside.txt"))
            print(f"the shell still reads ../outside.txt: {escaped.text().strip()}")


if __name__ == "__main__":
    anyio.run(main)
