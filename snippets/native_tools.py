"""Native tools, a yield window and an idle timeout, over a LocalExecutor.

`Toolset(native=...)` offers the tools models were trained on: Anthropic's
`bash` and text editor, OpenAI's `shell`, `local_shell` and `apply_patch`.
`spec_for` declares each natively where its API has the type. With
`yield_after`, a command still running when the window passes comes back
with its output so far and a job id for the job tools; with `idle_timeout`,
a command that prints nothing that long is killed.
"""

import os
import tempfile

import anyio

from executor import LocalExecutor, Toolset


async def main() -> None:
    with tempfile.TemporaryDirectory() as workdir:
        root = str(await anyio.Path(workdir).resolve())
        native = Toolset(native=["anthropic", "openai"])
        print("native:", ", ".join(native.names))
        print("declared:", native["bash"].spec_for("anthropic"))
        async with LocalExecutor(workdir) as ex, native:
            context = native.context(ex)
            await native.call(context, "bash", {"command": "cd /tmp && export STAGE=test"})
            state = await native.call(context, "bash", {"command": 'echo "$PWD $STAGE"'})
            print("bash:", state.text.splitlines()[0])
            path = os.path.join(root, "app.py")
            create = {"command": "create", "path": path, "file_text": "x = 1\r\n\ty = 1\r\n"}
            print((await native.call(context, "str_replace_based_edit_tool", create)).text)
            patch = "*** Begin Patch\n*** Update File: app.py\n@@\n x = 1\n-\ty = 1\n+\ty = 2\n"
            patched = await native.call(context, "apply_patch", {"input": patch + "*** End Patch"})
            print(patched.text)
            shown = await native.call(context, "local_shell", {"command": ["od", "-c", "app.py"]})
            print("bytes:", " ".join(shown.text.split()[1:12]))

        toolset = Toolset(yield_after=0.5)
        async with LocalExecutor(workdir) as ex, toolset:
            context = toolset.context(ex)
            out = await toolset.call(context, "run", {"command": "echo begun; sleep 1; echo done"})
            print("yielded:", out.text.splitlines()[-1].split(":")[0])
            await anyio.sleep(1.5)
            read = await toolset.call(context, "job_read", {"job_id": "r1"})
            print("job_read:", read.text.splitlines())
            quiet = {"command": "sleep 30", "yield_after": 30, "idle_timeout": 1}
            out = await toolset.call(context, "run", quiet)
            print("idle:", out.kind.value, out.text.splitlines()[0])


if __name__ == "__main__":
    anyio.run(main)
