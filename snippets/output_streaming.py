"""Stream a command's output while it runs.

Mirrors "Output streaming" in swiftide's tool-executor guide.
`exec_cmd_streaming` hands each chunk to a sink as it is read and returns the
same `CommandOutput` as `exec_cmd`. The sink runs inside the executor's read
loop, so it hands each chunk off (here into an anyio memory object stream) and
a separate task does the work. A sink may be a plain function or an async one;
this one awaits `send`, so a slow printer slows the command down instead of
letting unread output pile up in memory.
"""

import codecs
import sys
import tempfile

import anyio
from anyio.abc import ObjectReceiveStream

from executor import Chunk, Command, LocalExecutor, Stderr, Stdout

SCRIPT = """
for step in 1 2 3; do echo "step $step"; sleep 0.2; done
echo "warning: nothing to do" >&2
"""


async def printer(received: ObjectReceiveStream[Chunk]) -> None:
    started = anyio.current_time()
    # One decoder per stream, so a character split across two chunks survives.
    decoders = {kind: codecs.getincrementaldecoder("utf-8")("replace") for kind in (Stdout, Stderr)}
    async with received:
        async for chunk in received:
            elapsed = anyio.current_time() - started
            text = decoders[type(chunk)].decode(chunk.data)
            match chunk:
                case Stdout():
                    print(f"[{elapsed:.1f}s] {text}", end="", flush=True)
                case Stderr():
                    print(f"[{elapsed:.1f}s] {text}", end="", file=sys.stderr, flush=True)


async def main() -> None:
    with tempfile.TemporaryDirectory() as workdir:
        async with LocalExecutor(workdir) as executor:
            send, received = anyio.create_memory_object_stream[Chunk](max_buffer_size=16)
            cmd = Command.shell(SCRIPT).with_timeout(600)
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(printer, received)
                # Closing `send` when the command ends lets the printer finish.
                async with send:
                    output = await executor.exec_cmd_streaming(cmd, send.send)
            print(f"{len(output)} bytes of output, exit code {output.exit_code}")


if __name__ == "__main__":
    anyio.run(main)
