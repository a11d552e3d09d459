"""The standard toolset over a LocalExecutor: run, read, write, edit, search, the shell.

`Toolset()` holds the tools every coding agent needs, each an ordinary
`Tool`, so the framework adapters and `tool.spec` apply to them unchanged.
`toolset.call(context, name, arguments)` invokes one on a model's
arguments; `toolset.context(ex)` gives the context they run in. The toolset
adds no policy: the executor's wrappers decide (here `ReadOnly` refuses a
write, as `DENIED`). `async with toolset` holds the persistent shell open
between calls and closes it, with its jobs, at the end.
"""

import tempfile

import anyio

from executor import LocalExecutor, ReadOnly, Toolset


async def main() -> None:
    with tempfile.TemporaryDirectory() as workdir:
        async with LocalExecutor(workdir) as ex, Toolset(timeout=30) as toolset:
            context = toolset.context(ex)
            print("tools:", ", ".join(toolset.names))

            await toolset.call(
                context, "write_file", {"path": "app.py", "content": "x = 1\ny = 1\n"}
            )
            edit = {"path": "app.py", "old_text": "= 1", "new_text": "= 2"}
            refused = await toolset.call(context, "edit_file", edit)
            print("edit refused:", refused.kind.value, refused.text.split("; ")[0])
            edit["old_text"], edit["new_text"] = "y = 1", "y = 2"
            print((await toolset.call(context, "edit_file", edit)).text.splitlines()[0])
            print((await toolset.call(context, "read_file", {"path": "app.py", "offset": 2})).text)

            failed = await toolset.call(context, "run", {"command": "echo oops >&2; exit 3"})
            print(f"run: kind={failed.kind.value} exit_code={failed.exit_code}")
            assert context.last_output is not None
            print("stderr:", context.last_output.stderr)

            found = await toolset.call(context, "search", {"pattern": r"y = \d"})
            print("search:", found.text)

            await toolset.call(context, "shell", {"command": "cd /tmp && export STAGE=test"})
            state = await toolset.call(context, "shell", {"command": 'echo "$PWD $STAGE"'})
            print("shell:", state.text.splitlines()[0])

            read_only = toolset.context(ReadOnly(ex))
            denied = await toolset.call(read_only, "write_file", {"path": "x", "content": ""})
            print("through ReadOnly:", denied.kind.value)
            print("read-only subset:", ", ".join(Toolset(read_only=True).names))


if __name__ == "__main__":
    anyio.run(main)
