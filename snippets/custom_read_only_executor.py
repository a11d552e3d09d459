"""A custom executor: wrap any executor and refuse to write files.

Mirrors "Custom executor" in swiftide's tool-executor guide. A `ToolExecutor`
must implement `exec_cmd` and `stream_files`. This one forwards
`exec_cmd_streaming` as well; without it, the default would run `exec_cmd` and
report the output only at the end. Closing is forwarded too, so the inner
executor's processes end with the wrapper. (Subclassing
`executor.WrappedExecutor` instead forwards everything for you, so you override
only what you change.)

It refuses with `PolicyDenied`, an `ExecutorError`: the executor refused, the
command never ran. Treat the set of command kinds as open: match the ones you
know and let the rest through (or refuse them), never crash on a new one.

It only blocks `WriteFile`: a shell script such as `echo hi > notes.md` still
writes. The shipped `executor.ReadOnly` refuses shell and argv commands too,
unless the inner executor is a sandbox that enforces read-only itself.
"""

import os
import tempfile
from collections.abc import AsyncIterator, Iterable

import anyio

from executor import (
    Command,
    CommandOutput,
    LoadedFile,
    LocalExecutor,
    PolicyDenied,
    ReadOnly,
    Sink,
    ToolExecutor,
    WriteFile,
)


class NoWrites(ToolExecutor):
    """Runs commands through another executor, but refuses to write files."""

    def __init__(self, inner: ToolExecutor) -> None:
        self.inner = inner

    def __repr__(self) -> str:
        return f"NoWrites({self.inner!r})"

    @staticmethod
    def check(cmd: Command) -> None:
        """Raise `PolicyDenied` for a file write."""
        if isinstance(cmd, WriteFile):
            raise PolicyDenied("this executor is read-only")

    async def exec_cmd(self, cmd: Command) -> CommandOutput:
        """Run `cmd` on the inner executor unless it writes a file."""
        self.check(cmd)
        return await self.inner.exec_cmd(cmd)

    async def exec_cmd_streaming(self, cmd: Command, sink: Sink) -> CommandOutput:
        """Stream `cmd` from the inner executor unless it writes a file."""
        self.check(cmd)
        return await self.inner.exec_cmd_streaming(cmd, sink)

    def stream_files(
        self, path: str | os.PathLike[str], extensions: Iterable[str] | None = None
    ) -> AsyncIterator[LoadedFile]:
        """List files through the inner executor."""
        return self.inner.stream_files(path, extensions)

    async def aclose(self) -> None:
        """Close the inner executor."""
        await self.inner.aclose()


async def main() -> None:
    with tempfile.TemporaryDirectory() as checkout:
        async with NoWrites(LocalExecutor(checkout)) as executor:
            try:
                await executor.exec_cmd(Command.write_file("notes.md", "hi\n"))
            except PolicyDenied as error:
                print(f"write_file refused: {error}")

            # The gap: a shell command writes anyway.
            await executor.exec_cmd(Command.shell("echo hi > notes.md"))
            notes = await executor.exec_cmd(Command.read_file("notes.md"))
            print(f"the shell wrote notes.md anyway: {notes.text().strip()}")

            async for loaded in executor.stream_files(".", ["md"]):
                print(f"stream_files: {loaded.path}")

        # The shipped wrapper closes that gap by refusing shell commands as well.
        async with ReadOnly(LocalExecutor(checkout)) as strict:
            try:
                await strict.exec_cmd(Command.shell("echo hi > notes.md"))
            except PolicyDenied as error:
                print(f"{strict!r} refused the shell: {error}")


if __name__ == "__main__":
    anyio.run(main)
