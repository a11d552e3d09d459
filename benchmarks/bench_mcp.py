"""MCP overhead: a `run` of `true` through `python -m executor mcp` over stdio, against exec_cmd.

What is measured: the wall time of one whole call, run back to back (300
per side by default), the sides taking turns call by call (the order
rotating each turn) so the machine's noise falls on each alike:

- `direct exec_cmd`: `LocalExecutor.exec_cmd(Command.shell("true"))` in
  this process: spawn, pipes read, exit reaped;
- `MCP run, no policies`: the SDK's own `Client` calling the `run` tool of
  a server started with `--allow-dangerous --no-secrets`, so that it runs
  the same bare LocalExecutor: JSON-RPC over the server's stdin and stdout,
  the SDK's dispatch on both ends, argument validation, the tool, the
  result's text and structured content;
- `MCP run, default policies`: the same server with its defaults, which
  add `DangerousCommands` and `Secrets` to every command;
- `MCP round trip, no command`: a call of a tool that does not exist, which
  runs nothing: what the protocol and the SDK cost by themselves;
- `MCP run, SDK's stdio`: the no-policies server, but on the SDK's own
  `stdio_server` (which reads and writes in worker threads) instead of
  ours (non-blocking pipes from the event loop): the transport's share.

Target: the no-policies side's median <= direct + 3 ms. The client runs in
this process on asyncio; the servers are subprocesses of it, started once
(their start-up is not timed). `--quick` starts one server only (direct,
no policies and the round trip).
"""

from __future__ import annotations

import contextlib
import sys
import tempfile
import time

import _harness as h
import anyio

from executor import Command, LocalExecutor

TARGET_MS = 3.0
DIRECT = "direct exec_cmd"
BARE = "MCP run, no policies"
DEFAULTS = "MCP run, default policies"
ROUND_TRIP = "MCP round trip, no command"
SDK_STDIO = "MCP run, SDK's stdio"

# The same server as `--allow-dangerous --no-secrets`, on the SDK's threaded transport.
SDK_SERVER = """
import sys, anyio
from mcp.server.stdio import stdio_server
from executor import LocalExecutor, McpServer, Toolset

async def main():
    async with LocalExecutor(sys.argv[1]) as ex, Toolset() as toolset:
        server = McpServer(ex, toolset).server
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

anyio.run(main)
"""


def measure(count: int, warmup: int, *, quick: bool) -> dict[str, h.Stats]:
    """Time `count` calls per side, taking turns call by call (`quick`: one server only)."""
    from mcp import Client, StdioServerParameters

    names = [DIRECT, BARE, ROUND_TRIP] if quick else [DIRECT, BARE, DEFAULTS, ROUND_TRIP, SDK_STDIO]
    samples: dict[str, list[float]] = {name: [] for name in names}

    def params(workdir: str, *flags: str) -> StdioServerParameters:
        return StdioServerParameters(
            command=sys.executable,
            args=["-m", "executor", "mcp", "--workdir", workdir, *flags],
        )

    async def main(workdir: str) -> None:
        async with contextlib.AsyncExitStack() as stack:
            local = await stack.enter_async_context(LocalExecutor(workdir))
            bare = await stack.enter_async_context(
                Client(params(workdir, "--allow-dangerous", "--no-secrets"))
            )
            defaults = await stack.enter_async_context(Client(params(workdir)))
            sdk = await stack.enter_async_context(
                Client(
                    StdioServerParameters(command=sys.executable, args=["-c", SDK_SERVER, workdir])
                )
            )
            command = Command.shell("true")
            arguments = {"command": "true"}

            async def direct() -> None:
                await local.exec_cmd(command)

            async def through_bare() -> None:
                result = await bare.call_tool("run", arguments)
                assert not result.is_error, result

            async def through_defaults() -> None:
                result = await defaults.call_tool("run", arguments)
                assert not result.is_error, result

            async def through_sdk() -> None:
                result = await sdk.call_tool("run", arguments)
                assert not result.is_error, result

            async def round_trip() -> None:
                result = await bare.call_tool("no_such_tool", {})
                assert result.is_error

            every = {
                DIRECT: direct,
                BARE: through_bare,
                DEFAULTS: through_defaults,
                ROUND_TRIP: round_trip,
                SDK_STDIO: through_sdk,
            }
            calls = {name: every[name] for name in names}
            for _ in range(warmup):
                for call in calls.values():
                    await call()
            for turn in range(count):
                for name in h.rotated(names, turn):
                    started = time.perf_counter()
                    await calls[name]()
                    samples[name].append(time.perf_counter() - started)

    with tempfile.TemporaryDirectory(prefix="bench-mcp-") as workdir:
        anyio.run(main, workdir, backend="asyncio")
    return {name: h.Stats(values) for name, values in samples.items()}


def report(stats: dict[str, h.Stats]) -> bool:
    base = stats[DIRECT]
    rows = [
        h.sample_row(
            name,
            s,
            f"{(s.median - base.median) * 1e3:+.2f}",
            h.fmt_ratio(s.median, base.median),
        )
        for name, s in stats.items()
    ]
    print("MCP over stdio: `run` of `true` against a direct exec_cmd (ms per call)")
    h.print_table(["side", "n", "median", "p99", "median - direct (ms)", "med/direct"], rows)
    added = (stats[BARE].median - base.median) * 1e3
    met = added <= TARGET_MS
    print(
        f"target: {BARE} median <= direct + {TARGET_MS:g} ms: {added:+.2f} ms -> {h.verdict(met)}"
    )
    if DEFAULTS in stats:
        with_policies = (stats[DEFAULTS].median - base.median) * 1e3
        print(f"with the default policies: {with_policies:+.2f} ms (not a target)")
    return met


def main(argv: list[str] | None = None) -> int:
    scale = h.per_side(__doc__, argv, quick=12, full=300)
    try:
        import mcp  # noqa: F401
    except ImportError:
        print("bench_mcp: the mcp SDK is missing (pip install 'executor[mcp]'); skipped")
        return 0
    stats = measure(scale.count, scale.pick(3, 20), quick=scale.quick)
    report(stats)
    return 0


if __name__ == "__main__":
    sys.exit(main())
