"""A tool an agent can call: `count_lines` from the guide, end to end.

`@tool` turns an async function into a `Tool`: its signature and docstring
become the JSON-schema spec a model sees, and `invoke` parses the model's JSON
arguments into the declared types (here a `WorkspacePath`) before the body
runs. A bad argument, or a command that fails, comes back to the model as an
error message it can act on, not as an exception through the agent. The
agent's context hands the tool its executor: `DefaultContext.from_executor`.

Each result's `kind` says which failure it was, for a framework to act on:
`INVALID_ARGUMENTS` is the model's to fix and call again (pydantic-ai's
`ModelRetry`), `FAILED` a command that ran and failed (`exit_code` is `None`
here: a file read has no exit code), `OUT_OF_MEMORY` one the kernel's OOM
killer ended, and `DENIED`, `TIMED_OUT` and `EXECUTOR_ERROR` the others.
"""

import json
import tempfile

import anyio

from executor import AgentContext, Command, DefaultContext, LocalExecutor, WorkspacePath, tool


@tool
async def count_lines(context: AgentContext, path: WorkspacePath) -> str:
    """Counts the lines of a file in the workspace.

    Args:
        path: File path relative to the workspace root.
    """
    content = await context.executor().exec_cmd(Command.read_file(path))
    return str(len(content.text().splitlines()))


async def main() -> None:
    print(json.dumps(count_lines.spec, indent=2))
    with tempfile.TemporaryDirectory() as workdir:
        async with LocalExecutor(workdir).scoped(".") as executor:
            await executor.exec_cmd(Command.write_file("src/app.py", "import os\n\nprint(1)\n"))
            context = DefaultContext.from_executor(executor)
            # What a model sends, as it sends it: a JSON string of arguments.
            for arguments in (
                '{"path": "src/app.py"}',
                '{"path": "../../etc/passwd"}',
                '{"path": "src/missing.py"}',
                '{"file": "src/app.py"}',
            ):
                result = await count_lines.invoke(context, arguments)
                label = "error" if result.is_error else "ok"
                print(f"{arguments} -> {label}: {result.text}")
                print(f"    kind={result.kind.name} exit_code={result.exit_code}")


if __name__ == "__main__":
    anyio.run(main)
