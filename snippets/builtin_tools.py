"""The built-in streaming tools, each running its processes through the executor it is given.

Terminal: the seed's example, translated. `python3 -i` runs on a pty
through `ex.start(...)`; `print('hello')` goes in as stdin and comes back as
`TerminalChunk`s; `finalize()` gives a `TerminalResult` with the exit code.
`rm -rf /` is refused by `DangerousCommands` before anything starts.

Code interpreter: `x = 41` then `x + 1` in one named session gives 42;
`while True: pass` with a 1 s timeout is interrupted and `x` survives; the
seed's matplotlib cell sends its figure as an `image/png` chunk;
`os.system('rm -rf /')` is refused before it runs; bash keeps its shell.

Log tailer: a JSON log and an nginx access log read through a level and
regex filter; a followed glob picks up lines appended and a new file, and
a Java stack trace written to it stays one entry with its first line.
"""

import sys
import tempfile
from typing import Any

import anyio

from executor import (
    CodeInterpreterInput,
    CodeInterpreterTool,
    CodeStream,
    DefaultContext,
    LocalExecutor,
    LogFilter,
    LogFormat,
    LogLevel,
    LogTailerInput,
    LogTailerTool,
    PolicyDenied,
    StreamingToolSession,
    TerminalInput,
    TerminalTool,
    Text,
)


async def terminal(ex: LocalExecutor) -> None:
    """The seed's `python3 -i` example, and a refusal."""
    tool = TerminalTool(DefaultContext.from_executor(ex))
    given = TerminalInput(command="python3 -i", env={"PYTHONPATH": "/lib"}, timeout_secs=120)
    async with StreamingToolSession(tool, given) as session:
        await session.send_stdin(Text("print('hello')\n"))
        await session.send_stdin(Text("exit()\n"))
        output = ""
        while (chunk := await session.next_chunk()) is not None:
            output += chunk.text
        result = await session.finalize()
    print(f"terminal: hello came back: {'hello' in output.replace('print(', '')}")
    print(f"terminal: exit code {result.final.exit_code}")
    try:
        async with StreamingToolSession(tool, TerminalInput(command="rm -rf /")):
            pass
    except PolicyDenied as refused:
        print(f"terminal: {str(refused).split(' (')[0]}")


async def cell(tool: CodeInterpreterTool, **given: Any) -> str:
    """Run one cell; a line saying what came of it."""
    shown = []
    async with StreamingToolSession(tool, CodeInterpreterInput(**given)) as session:
        async for chunk in session:
            if chunk.stream is CodeStream.IMAGE and chunk.data is not None:
                shown.append(f"{chunk.mime_type} ({chunk.data[:4]!r}...)")
            elif chunk.stream is CodeStream.ERROR:
                shown.append(chunk.content.strip().splitlines()[-1])
            else:
                shown.append(f"{chunk.stream.value}: {chunk.content.strip()}")
        result = await session.finalize()
    outcome = "ok" if result.final.success else f"failed ({result.final.error})"
    return f"{'; '.join(shown) or 'nothing shown'} -> {outcome}"


async def interpreter(ex: LocalExecutor) -> None:
    """Sessions, a timeout, a plot, a refusal and bash."""
    context = DefaultContext.from_executor(ex)
    async with CodeInterpreterTool(context, interpreters={"python": sys.executable}) as tool:
        print("python:", await cell(tool, language="python", code="x = 41", session="s"))
        print("python:", await cell(tool, language="python", code="x + 1", session="s"))
        print("python:", await cell(tool, language="python", code="x + 1", session="other"))
        loop = {"code": "while True: pass", "timeout_secs": 1}
        print("python:", await cell(tool, language="python", session="s", **loop))
        print("python:", await cell(tool, language="python", code="x", session="s"))
        plot = (
            "import matplotlib.pyplot as plt\n"
            "plt.plot([1, 2, 3, 4], [1, 4, 9, 16])\n"
            "plt.savefig('plot.png')\n"
            "print('Plot saved!')\n"
        )
        print("python:", await cell(tool, language="python", code=plot, timeout_secs=60))
        try:
            await cell(tool, language="python", code="import os\nos.system('rm -rf /')")
        except PolicyDenied as refused:
            print(f"python: {str(refused).split('. ')[0]}")
        print("bash:", await cell(tool, language="bash", code="cd /tmp; n=3", session="s"))
        print("bash:", await cell(tool, language="bash", code='echo "$n in $PWD"', session="s"))


async def log_tailer(ex: LocalExecutor) -> None:
    """Filtered reads of two formats, then a followed glob."""
    tool = LogTailerTool(DefaultContext.from_executor(ex))
    await anyio.Path(ex.workdir, "logs").mkdir()
    await anyio.Path(ex.workdir, "logs", "app.log").write_text(
        '{"level": "info", "msg": "started"}\n'
        '{"level": "error", "msg": "upstream timeout", "http": {"status": 504}}\n'
    )
    await anyio.Path(ex.workdir, "access.log").write_text(
        '203.0.113.9 - - [10/Oct/2023:13:55:36 -0700] "POST /checkout HTTP/1.1" 502 17 '
        '"-" "curl/8.5"\n'
    )
    reads = [
        LogTailerInput(
            path="logs/*.log", filter=LogFilter(level=LogLevel.ERROR, pattern="timeout")
        ),
        LogTailerInput(path="access.log", format=LogFormat.COMBINED),
    ]
    for given in reads:
        async with StreamingToolSession(tool, given) as session:
            async for entry in session:
                level = entry.level.value if entry.level is not None else "-"
                print(f"log tailer: [{level}] {entry.message} line {entry.line}")
            result = await session.finalize()
        print(f"log tailer: read {result.final.lines_read}, matched {result.final.lines_matched}")
    trace = (
        "2024-05-01 10:00:00,123 ERROR [main] c.e.App - Order 42 failed\n"
        "java.lang.IllegalStateException: inventory unavailable\n"
        "\tat com.example.App.place(App.java:88)\n"
    )
    follow = LogTailerInput(path="logs/*.log", follow=True, format=LogFormat.RAW)
    async with StreamingToolSession(tool, follow) as session:
        await anyio.Path(ex.workdir, "logs", "worker.log").write_text(trace)
        traced = await session.next_chunk()
        assert traced is not None
        print(f"log tailer: new file, {len(traced.raw.splitlines())} lines in one entry")
        session.cancel()


async def main() -> None:
    """Both tools on a LocalExecutor in a folder of their own (the plot is saved there)."""
    with tempfile.TemporaryDirectory() as workdir:
        async with LocalExecutor(workdir) as ex:
            await terminal(ex)
            await interpreter(ex)
            await log_tailer(ex)


if __name__ == "__main__":
    anyio.run(main)
