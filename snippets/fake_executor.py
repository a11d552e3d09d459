"""Test an agent's tool without processes: `FakeExecutor` from `executor.testing`.

`FakeExecutor(handler, files=...)` answers shell and argv commands with
`handler(cmd)` (text or bytes as stdout, a `CommandOutput`, or `None` for
"no answer": exit code 127), and file commands from `files`, an in-memory
tree: `read_file`, `write_file` and `stream_files` work on it as the real
executors work on a folder, whatever the handler does. `calls` records every
command, so a test can check what the tool ran. (The contracts in the same
module, such as `ExecutorContract`, are pytest tests for your own backend.)
"""

import anyio

from executor import AgentContext, Command, DefaultContext, describe, tool
from executor.testing import FakeExecutor


@tool
async def summarise_repo(context: AgentContext) -> str:
    """Summarises the repository: its Python files and its last commit's author."""
    executor = context.executor()
    sources = [loaded.path async for loaded in executor.stream_files(".", ["py"])]
    author = await executor.exec_cmd(Command.shell("git log -1 --format=%an"))
    await executor.exec_cmd(Command.write_file("SUMMARY.md", f"{len(sources)} files\n"))
    return f"{', '.join(sources)}; last commit by {author.text().strip()}"


def git(cmd: Command) -> str | None:
    """Answer `git log`, as a repository would; nothing else."""
    return "Ada\n" if describe(cmd).startswith("git log") else None


async def main() -> None:
    fake = FakeExecutor(
        git,
        files={"app.py": "print(1)\n", "lib/util.py": "x = 1\n", "README.md": "# demo\n"},
    )
    result = await summarise_repo.invoke(DefaultContext.from_executor(fake), {})
    print(f"tool: {result.text}")
    print(f"it wrote: {fake.files['SUMMARY.md']!r}")
    print(f"it ran: {[describe(cmd) for cmd in fake.calls]}")

    unanswered = await summarise_repo.invoke(DefaultContext.from_executor(FakeExecutor()), {})
    print(f"without a handler: is_error={unanswered.is_error}")


if __name__ == "__main__":
    anyio.run(main)
