"""Talk to a running command: `start()` gives a `ProcessSession`.

`await ex.start(cmd, pty=False)` checks the command through every wrapper;
the process starts when its `async with` block is entered, and whatever of
its tree still runs is killed when the block is left. Input goes in as
events: `Text` and `Bytes` on stdin, `close_stdin()` for end-of-file,
`Signal` to the command's process group, `Resize` to its terminal (with
`pty=True`). Output comes out as numbered `SessionChunk`s, through a bounded
buffer, and `finalize()` returns the whole `CommandOutput` (or raises as
`exec_cmd` would).
"""

import tempfile

import anyio

from executor import Command, LocalExecutor, NonZeroExit, Resize, Signal, Text, UnixSignal

ECHO = 'while read line; do echo "got $line"; done'
TRAPPED = "trap 'echo interrupted; exit 3' INT; echo ready; while :; do sleep 0.05; done"


async def main() -> None:
    with tempfile.TemporaryDirectory() as workdir:
        async with LocalExecutor(workdir) as ex:
            async with await ex.start(Command.shell(ECHO)) as session:
                await session.send_stdin(Text("one\n"))
                await session.send_stdin(Text("two\n"))
                await session.close_stdin()  # the loop's `read` sees end-of-file
                output = await session.finalize()
            print(f"stdin: {output.text().splitlines()}")

            async with await ex.start(Command.shell(TRAPPED)) as session:
                first = await session.next_chunk()
                assert first is not None
                print(f"chunk {first.sequence}: {first.chunk.data!r}")
                await session.send_stdin(Signal(UnixSignal.SIGINT))  # the trap runs
                try:
                    await session.finalize()
                except NonZeroExit as ended:
                    print(f"signal: exit code {ended.output.exit_code}, {ended.output.stdout!r}")

            script = "read name; stty size; echo hello $name"
            async with await ex.start(Command.shell(script), pty=True) as session:
                await session.send_stdin(Resize(cols=120, rows=40))
                await session.send_stdin(Text("agent\n"))
                lines = [item.chunk.data async for item in session]
                await session.finalize()
            print(f"pty: {b''.join(lines).splitlines()}")


if __name__ == "__main__":
    anyio.run(main)
