"""Scope an executor to a folder of its working directory.

Mirrors "Scoped executors" in swiftide's tool-executor guide.
`executor.scoped(path)` (or `ScopedExecutor(inner, path)`) returns an executor
whose commands run in that folder:

- A command without a working directory runs in the scope.
- A relative `current_dir` joins onto the scope (and then onto the workdir).
- An absolute `current_dir` is left alone, and so is an absolute file path:
  a scope chooses where commands start, it does not keep a tool inside it.
- Scopes nest, and `stream_files` joins a relative path onto the scope. Unlike
  swiftide's, the local executor lists relative to its `workdir`, not the
  process's current directory, and hands back paths relative to the scope.
"""

import tempfile

import anyio

from executor import Command, LocalExecutor


async def main() -> None:
    with tempfile.TemporaryDirectory() as root:
        async with LocalExecutor(root) as checkout:
            await checkout.exec_cmd(Command.write_file("docs/guide.md", "# Guide\n"))
            await checkout.exec_cmd(Command.write_file("crates/core/src/lib.rs", "fn f() {}\n"))

            docs = checkout.scoped("docs")
            listing = await docs.exec_cmd(Command.shell("ls"))
            print(f"ls in {docs!r}: {listing.text().strip()}")

            core = checkout.scoped("crates").scoped("core")
            sources = await core.exec_cmd(Command.shell("ls").with_current_dir("src"))
            print(f"ls in crates/core/src through a nested scope: {sources.text().strip()}")

            elsewhere = await core.exec_cmd(Command.shell("pwd").with_current_dir("/"))
            print(f"absolute current_dir is left alone: {elsewhere.text().strip()}")

            async for loaded in core.stream_files("src", ["rs"]):
                print(f"stream_files: {loaded.path}")


if __name__ == "__main__":
    anyio.run(main)
