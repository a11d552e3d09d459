"""`python -m executor mcp` over stdio, driven by the MCP SDK's own client.

The server offers the standard toolset. A failed command's exit code and
stderr come back in the result's structured content (not a bare "Error
executing tool"), output streams as progress notifications while the command
runs, and a policy's refusal is a tool error whose text says why. Here the
server denies `git push` and runs in a temporary folder; `--sandbox`,
`--docker IMAGE` or `--ssh HOST` would run the same tools elsewhere.
"""

import os
import sys
import tempfile

import anyio
from mcp import Client, StdioServerParameters
from mcp.types import TextContent


async def main() -> None:
    with tempfile.TemporaryDirectory() as workdir:
        server = StdioServerParameters(
            command=sys.executable,
            args=["-m", "executor", "mcp", "--workdir", workdir, "--deny", "git push"],
            env=dict(os.environ),
        )
        async with Client(server) as client:
            tools = await client.list_tools()
            print("tools:", len(tools.tools), "run" in {tool.name for tool in tools.tools})

            failed = await client.call_tool(
                "run", {"command": "echo built; echo 'no tests' >&2; exit 5"}
            )
            assert failed.structured_content is not None
            facts = failed.structured_content
            print(f"is_error={failed.is_error} exit_code={facts['exit_code']}", end=" ")
            print(f"stderr={facts['stderr']!r}")

            async def progress(progress: float, total: float | None, message: str | None) -> None:
                print("progress:", repr(message))

            await client.call_tool(
                "run",
                {"command": "echo step 1; sleep 0.2; echo step 2"},
                progress_callback=progress,
            )

            denied = await client.call_tool("run", {"command": "git push origin main"})
            block = denied.content[0]
            assert isinstance(block, TextContent)
            print("denied:", denied.is_error, block.text)


if __name__ == "__main__":
    anyio.run(main)
