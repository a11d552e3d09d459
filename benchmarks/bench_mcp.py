"""MCP server: `run` against exec_cmd, file tools against the npm filesystem server, cold start.

Every figure uses the SDK's own `Client` (`from mcp import Client`) in this
process, on asyncio, talking to servers that are subprocesses of it. The
sides take turns round by round, the order rotating each round, so the
machine's noise falls on each alike. The load average is printed with each
figure.

1. `run` of `true` (`count` calls per side, 300 by default, in batches of
   10, one batch per side a round):

   - `direct exec_cmd`: `LocalExecutor.exec_cmd(Command.shell("true"))` in
     this process: spawn, pipes read, exit reaped;
   - `MCP run, no policies`: the `run` tool of `python -m executor mcp
     --allow-dangerous --no-secrets` over stdio, so that it runs the same
     bare LocalExecutor: JSON-RPC over the server's stdin and stdout, the
     SDK's dispatch on both ends, argument validation, the tool, the
     result's text and structured content;
   - `MCP run, default policies`: the same server with its defaults, which
     add `DangerousCommands` and `Secrets` to every command;
   - `MCP round trip, no command`: a call of a tool that does not exist,
     which runs nothing (the server answers error -32602): what the protocol
     and the SDK cost by themselves;
   - `MCP run, SDK's stdio`: the no-policies server on the SDK's own
     `stdio_server` (which reads and writes in worker threads) instead of
     ours (non-blocking pipes from the event loop): the transport's share.

   Beside the wall time, CPU per call, from user + system time read before
   and after each side's batch: this process (the client, and for `direct`
   the executor), this process's helpers (the direct side's supervisor and
   its shims), the server process alone, and the server with its helpers
   (its supervisor and shims; reaped children counted). The kernel gives
   other processes' CPU in 10 ms ticks, so a per-call figure is the sum over
   all batches divided by the calls: good to about 0.1 ms at 300 calls,
   coarse under `--quick` and for figure 2's cheap calls. Target: the
   no-policies side's median <= direct + 1 ms.

2. File tools against `@modelcontextprotocol/server-filesystem` (pinned to
   `NPM_VERSION`, run by `node`, over stdio, rooted at the same folder), on a
   1 MiB text file, a folder of `--files` files (10,000) and a tree of as
   many files (100 folders of 100); one call per side a round:

   - ours `read_file` of the 1 MiB file, which gives the first page (the
     first lines up to the toolset's 16,000-character budget), against the
     npm `read_text_file` of the whole file and of the same lines (`head`);
   - ours `list_files` and `glob "*"` of the flat folder against the npm
     `list_directory`;
   - ours `list_files` of the tree against the npm `directory_tree`.

   Median and p99 wall per call, the reply's size, the server's CPU per
   call (with its helpers), and ours / npm. The npm server is installed once
   with `npm install --ignore-scripts` into `$EXECUTOR_BENCH_NPM_DIR` (by
   default `~/.cache/executor-bench`), outside the repository; without node,
   npm or the network that side is skipped, and said so.

3. Cold start, to the first answered `tools/list` (`--starts` rounds, 10):
   ours over stdio (spawn, connect, list), ours over HTTP (`--http --port 0
   --token T`: spawn, wait for the URL it prints on stderr, connect with
   `Authorization: Bearer T`, list), and for reference the npm filesystem
   server over stdio. The `Client` negotiates as a user's would (`auto`: it
   tries 2026-07-28 and falls back to the initialize handshake, which the
   npm server needs); each side's protocol version is printed.

`--quick` is a smoke check: one server for figure 1, 500 files, a few rounds.
Every process started here is ended here (the SDK's client ends the stdio
servers; the HTTP servers and a timed-out npm install by their pid), and the
script checks that none is left.
"""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import _harness as h
import anyio
import attrs
import psutil

from executor import Command, LocalExecutor

if TYPE_CHECKING:
    from mcp import Client

TARGET_MS = 1.0
DIRECT = "direct exec_cmd"
BARE = "MCP run, no policies"
DEFAULTS = "MCP run, default policies"
ROUND_TRIP = "MCP round trip, no command"
SDK_STDIO = "MCP run, SDK's stdio"

NPM_PACKAGE = "@modelcontextprotocol/server-filesystem"
NPM_VERSION = "2026.8.31"  # the `latest` dist-tag on 2026-12-06
TOKEN = "bench-mcp-token"
BIG_FILE_BYTES = 1 << 20
# The most paths one list_files or glob call returns (the toolset's cap).
LIST_LIMIT = 10_000

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


# --- CPU time ------------------------------------------------------------------------------


def _cpu_of(process: psutil.Process, *, reaped: bool) -> float:
    """User + system CPU seconds of one process (and of its reaped children, if `reaped`)."""
    try:
        times = process.cpu_times()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return 0.0
    used = times.user + times.system
    if reaped:
        used += times.children_user + times.children_system
    return float(used)


def tree_cpu(pid: int) -> float:
    """CPU seconds of process `pid` and every descendant, the reaped ones included.

    A process that ends between two readings is then counted in its parent's
    children's times, so the difference of two readings stays right.
    """
    try:
        root = psutil.Process(pid)
        tree = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0.0
    return sum(_cpu_of(process, reaped=True) for process in tree)


def own_cpu(pid: int) -> float:
    """CPU seconds of process `pid` alone (its threads; no children)."""
    try:
        return _cpu_of(psutil.Process(pid), reaped=False)
    except psutil.NoSuchProcess:
        return 0.0


@attrs.frozen
class CpuReading:
    """The CPU seconds, so far, of everything one side's calls may run on."""

    client: float  # this process
    helpers: float  # this process's children but the servers (the direct side's supervisor)
    server: float  # the side's server process alone
    server_tree: float  # the side's server and its descendants

    def __sub__(self, other: CpuReading) -> CpuReading:
        return CpuReading(
            self.client - other.client,
            self.helpers - other.helpers,
            self.server - other.server,
            self.server_tree - other.server_tree,
        )

    def __add__(self, other: CpuReading) -> CpuReading:
        return CpuReading(
            self.client + other.client,
            self.helpers + other.helpers,
            self.server + other.server,
            self.server_tree + other.server_tree,
        )


NO_CPU = CpuReading(0.0, 0.0, 0.0, 0.0)


def read_cpu(server: int | None, servers: set[int], *, before: bool) -> CpuReading:
    """CPU so far of this process, its helpers (all children but `servers`) and `server`.

    Reading the others' times walks /proc, which costs this process CPU: it
    reads its own time last `before` a batch and first after it, so that the
    walk is never counted in the client's share.
    """
    client = h.cpu_seconds()
    helpers = sum(
        tree_cpu(child.pid) for child in psutil.Process().children() if child.pid not in servers
    )
    server_alone = 0.0 if server is None else own_cpu(server)
    server_tree = 0.0 if server is None else tree_cpu(server)
    if before:
        client = h.cpu_seconds()
    return CpuReading(client, helpers, server_alone, server_tree)


# --- sides taking turns --------------------------------------------------------------------


@attrs.frozen
class Side:
    """One side of a figure: a call to time, and the pid of the server it calls (if any)."""

    name: str
    call: Callable[[], Awaitable[Any]]
    server: int | None = None


@attrs.frozen
class Outcome:
    """What one side gave: the wall time of each call, its CPU in all, and its last reply."""

    stats: h.Stats
    cpu: CpuReading
    last: Any

    def cpu_per_call(self, field: str) -> float:
        """CPU seconds of `field` (`client`, `helpers`, `server`, `server_tree`) per call."""
        count = len(self.stats.values)
        return float(getattr(self.cpu, field)) / count if count else math.nan


async def take_turns(
    sides: Sequence[Side], rounds: int, batch: int, warmup: int, servers: set[int]
) -> dict[str, Outcome]:
    """Run each side `batch` calls a round for `rounds` rounds, the order rotating each round.

    Each side first runs `warmup` calls unmeasured. The CPU is read before and
    after each side's batch, outside the timed calls.
    """
    by_name = {side.name: side for side in sides}
    names = list(by_name)
    samples: dict[str, list[float]] = {name: [] for name in names}
    cpu = dict.fromkeys(names, NO_CPU)
    last: dict[str, Any] = dict.fromkeys(names)
    for side in sides:
        for _ in range(warmup):
            last[side.name] = await side.call()
    for index in range(rounds):
        for name in h.rotated(names, index):
            side = by_name[name]
            before = read_cpu(side.server, servers, before=True)
            for _ in range(batch):
                started = time.perf_counter()
                last[name] = await side.call()
                samples[name].append(time.perf_counter() - started)
            cpu[name] = cpu[name] + (read_cpu(side.server, servers, before=False) - before)
    return {name: Outcome(h.Stats(samples[name]), cpu[name], last[name]) for name in names}


# --- servers -------------------------------------------------------------------------------


def npm_server(install_timeout: float) -> tuple[list[str] | None, str]:
    """The npm filesystem server's command line (less its folder), and where it is from.

    It is installed once, pinned to `NPM_VERSION`, into a cache folder outside
    the repository. Returns `None` and the reason when it cannot be had.
    """
    node = shutil.which("node")
    if node is None:
        return None, "node is not on PATH"
    cache = os.environ.get("EXECUTOR_BENCH_NPM_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "executor-bench"
    )
    prefix = Path(cache) / f"server-filesystem-{NPM_VERSION}"
    entry = prefix / "node_modules" / NPM_PACKAGE / "dist" / "index.js"
    if not entry.is_file():
        problem = npm_install(prefix, install_timeout)
        if problem is not None:
            return None, problem
    return [node, str(entry)], f"{NPM_PACKAGE}@{NPM_VERSION} from {prefix}, on node"


def npm_install(prefix: Path, timeout: float) -> str | None:
    """Install the pinned package into `prefix` (whole or not at all); why not, or None."""
    npm = shutil.which("npm")
    if npm is None:
        return "npm is not on PATH"
    try:
        prefix.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f"{prefix.name}.", dir=prefix.parent))
    except OSError as error:
        return f"no cache folder for it ({error}; set EXECUTOR_BENCH_NPM_DIR)"
    command = [
        npm,
        "install",
        "--prefix",
        str(staging),
        "--no-save",
        "--no-audit",
        "--no-fund",
        "--ignore-scripts",
        "--fetch-retries=0",
        f"{NPM_PACKAGE}@{NPM_VERSION}",
    ]
    print(f"installing {NPM_PACKAGE}@{NPM_VERSION} into {prefix} ...", flush=True)
    try:
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            output, _ = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            # npm and whatever it started: the session it leads, by its id.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
            return f"npm install ran past {timeout:g} s (no network?)"
        if process.returncode != 0:
            said = output.decode(errors="replace").strip().splitlines()
            first = [line for line in said if "error" in line][:2] or said[-2:]
            return f"npm install failed ({process.returncode}): {' / '.join(first)}"
        with contextlib.suppress(OSError):  # another run installed it first: keep that one
            staging.rename(prefix)
        return None
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def ours(root: str, *flags: str) -> list[str]:
    """The command line of our server on `root`."""
    return [sys.executable, "-m", "executor", "mcp", "--workdir", root, *flags]


@contextlib.asynccontextmanager
async def stdio_client(command: Sequence[str], log: TextIO) -> AsyncIterator[tuple[Client, int]]:
    """The SDK's `Client` on a server it spawns over stdio; yields it and the server's pid.

    The server's stderr goes to `log`. The pid is the child of this process
    that was not there before.
    """
    from mcp import Client, StdioServerParameters
    from mcp.client.stdio import stdio_client as sdk_stdio_client

    me = psutil.Process()
    before = {child.pid for child in me.children()}
    params = StdioServerParameters(command=command[0], args=list(command[1:]))
    async with Client(sdk_stdio_client(params, errlog=log)) as client:
        new = [child.pid for child in me.children() if child.pid not in before]
        if len(new) != 1:
            raise RuntimeError(f"expected one new child for {command[:4]}, found {new}")
        yield client, new[0]


def text_of(result: Any) -> str:
    """The text of a tool's result; raises if the call failed."""
    if result.is_error:
        raise RuntimeError(f"the call failed: {result.content}")
    return "".join(getattr(part, "text", "") for part in result.content)


# --- the data ------------------------------------------------------------------------------


def make_files(root: Path, files: int) -> None:
    """A 1 MiB text file, a flat folder of `files` files and a tree of as many, under `root`."""
    with open(root / "big.txt", "w") as out:
        number = 0
        while out.tell() < BIG_FILE_BYTES:
            out.write(
                f"    result_{number} = compute(value_{number}, scale={number % 97})  # note\n"
            )
            number += 1
        out.truncate(BIG_FILE_BYTES)
    body = "".join(f"def function_{n}(x):\n    return x * {n}\n" for n in range(3))
    flat = root / "flat"
    flat.mkdir()
    for number in range(files):
        (flat / f"f{number:05d}.py").write_text(body)
    folders = max(1, math.isqrt(files))
    tree = root / "tree"
    for number in range(files):
        folder = tree / f"d{number % folders:03d}"
        if number < folders:
            folder.mkdir(parents=True)
        (folder / f"f{number:05d}.py").write_text(body)


def shown_lines(text: str) -> int:
    """How many lines our read_file showed, from its closing note `[lines 1-N ...]`."""
    note = text.rsplit("[lines 1-", 1)[1]
    return int(note.split(" ", 1)[0].rstrip("]"))


def count_paths(text: str) -> int:
    """Paths in a listing of ours (one a line; a closing `[...]` note is not one)."""
    return sum(1 for line in text.splitlines() if line and not line.startswith("["))


def count_tree(text: str) -> int:
    """Files in the npm server's `directory_tree` (JSON)."""
    return text.count('"type": "file"')


# --- figure 1: run of true -----------------------------------------------------------------


async def run_figure(
    root: str, log: TextIO, count: int, warmup: int, *, quick: bool
) -> dict[str, Outcome]:
    """Figure 1 (`quick`: one server only)."""
    from mcp.shared.exceptions import MCPError
    from mcp_types import INVALID_PARAMS

    async with contextlib.AsyncExitStack() as stack:
        local = await stack.enter_async_context(LocalExecutor(root))
        bare, bare_pid = await stack.enter_async_context(
            stdio_client(ours(root, "--allow-dangerous", "--no-secrets"), log)
        )
        command = Command.shell("true")
        arguments = {"command": "true"}

        async def direct() -> None:
            await local.exec_cmd(command)

        def through(client: Client) -> Callable[[], Awaitable[Any]]:
            async def call() -> Any:
                result = await client.call_tool("run", arguments)
                assert not result.is_error, result
                return None

            return call

        async def round_trip() -> None:
            # An unknown tool is error -32602 (the SDK raises it), as the spec lists it.
            try:
                await bare.call_tool("no_such_tool", {})
            except MCPError as error:
                if error.error.code != INVALID_PARAMS:
                    raise
            else:
                raise AssertionError("no_such_tool answered")

        sides = [
            Side(DIRECT, direct),
            Side(BARE, through(bare), bare_pid),
            Side(ROUND_TRIP, round_trip, bare_pid),
        ]
        servers = {bare_pid}
        if not quick:
            defaults, defaults_pid = await stack.enter_async_context(stdio_client(ours(root), log))
            sdk, sdk_pid = await stack.enter_async_context(
                stdio_client([sys.executable, "-c", SDK_SERVER, root], log)
            )
            sides[2:2] = [Side(DEFAULTS, through(defaults), defaults_pid)]
            sides.append(Side(SDK_STDIO, through(sdk), sdk_pid))
            servers |= {defaults_pid, sdk_pid}
        batch = 4 if quick else 10
        return await take_turns(sides, max(1, math.ceil(count / batch)), batch, warmup, servers)


def report_run(outcomes: dict[str, Outcome], load: str) -> bool:
    base = outcomes[DIRECT].stats
    rows = []
    for name, outcome in outcomes.items():
        s = outcome.stats
        server = name != DIRECT
        helpers = outcome.cpu_per_call("server_tree" if server else "helpers")
        total = outcome.cpu_per_call("client") + outcome.cpu_per_call("helpers")
        if server:
            total += outcome.cpu_per_call("server_tree")
        rows.append(
            h.sample_row(
                name,
                s,
                f"{(s.median - base.median) * 1e3:+.2f}",
                h.fmt_ratio(s.median, base.median),
                h.fmt_ms(outcome.cpu_per_call("client"), 2),
                h.fmt_ms(outcome.cpu_per_call("server"), 2) if server else "-",
                h.fmt_ms(helpers, 2),
                h.fmt_ms(total, 2),
            )
        )
    print(f"1. MCP over stdio: `run` of `true` against a direct exec_cmd (ms per call; {load})")
    h.print_table(
        [
            "side",
            "n",
            "median",
            "p99",
            "median - direct",
            "med/direct",
            "cpu client",
            "cpu server",
            "cpu server+helpers",
            "cpu total",
        ],
        rows,
    )
    print(
        "cpu client: this process (for direct, the executor too); cpu server: the server "
        "process alone; cpu server+helpers: with its supervisor and shims (for direct: this "
        "process's supervisor and shims); cpu total: all of them"
    )
    added = (outcomes[BARE].stats.median - base.median) * 1e3
    met = added <= TARGET_MS
    print(
        f"target: {BARE} median <= direct + {TARGET_MS:g} ms: {added:+.3f} ms -> {h.verdict(met)}"
    )
    if DEFAULTS in outcomes:
        with_policies = (outcomes[DEFAULTS].stats.median - base.median) * 1e3
        print(f"with the default policies: {with_policies:+.2f} ms (not a target)")
    return met


# --- figure 2: file tools against the npm server -------------------------------------------


@attrs.frozen
class Pair:
    """One of ours against the npm call it is compared with."""

    ours: str
    npm: str


async def files_figure(
    root: str, files: int, npm: list[str] | None, log: TextIO, rounds: int, warmup: int
) -> tuple[dict[str, Outcome], list[Pair], dict[str, str]]:
    """Figure 2: our file tools against the npm server's, one call per side a round."""
    limit = min(files, LIST_LIMIT)
    big = os.path.join(root, "big.txt")
    async with contextlib.AsyncExitStack() as stack:
        client, pid = await stack.enter_async_context(
            stdio_client(ours(root, "--allow-dangerous", "--no-secrets"), log)
        )
        servers = {pid}

        def call(target: Client, tool: str, arguments: dict[str, Any]) -> Any:
            async def once() -> str:
                return text_of(await target.call_tool(tool, arguments))

            return once

        first_page = await call(client, "read_file", {"path": "big.txt"})()
        head = shown_lines(first_page)
        read = f"ours read_file (first page: {head} lines)"
        listed = f"ours list_files flat/ ({files} files)"
        globbed = f"ours glob '*' flat/ ({files} files)"
        walked = f"ours list_files tree/ ({files} files)"
        sides = [
            Side(read, call(client, "read_file", {"path": "big.txt"}), pid),
            Side(listed, call(client, "list_files", {"path": "flat", "limit": limit}), pid),
            Side(
                globbed,
                call(client, "glob", {"pattern": "*", "path": "flat", "limit": limit}),
                pid,
            ),
            Side(walked, call(client, "list_files", {"path": "tree", "limit": limit}), pid),
        ]
        whole = f"npm read_text_file (whole: {BIG_FILE_BYTES >> 20} MiB)"
        same = f"npm read_text_file (head={head})"
        directory = "npm list_directory flat/"
        tree = "npm directory_tree tree/"
        pairs = [Pair(read, whole), Pair(read, same), Pair(listed, directory)]
        pairs += [Pair(globbed, directory), Pair(walked, tree)]
        notes: dict[str, str] = {}
        if npm is not None:
            other, other_pid = await stack.enter_async_context(stdio_client([*npm, root], log))
            servers.add(other_pid)
            tools = {tool.name for tool in (await other.list_tools()).tools}
            reader = "read_text_file" if "read_text_file" in tools else "read_file"
            missing = {reader, "list_directory", "directory_tree"} - tools
            if missing:
                raise RuntimeError(f"the npm server has no {sorted(missing)}; it has {tools}")
            info = other.server_info
            named = f"{info.name} {info.version}" if info is not None else "no server info"
            notes["npm server"] = f"{named}, protocol {other.protocol_version}"
            sides += [
                Side(whole, call(other, reader, {"path": big}), other_pid),
                Side(same, call(other, reader, {"path": big, "head": head}), other_pid),
                Side(
                    directory,
                    call(other, "list_directory", {"path": os.path.join(root, "flat")}),
                    other_pid,
                ),
                Side(
                    tree,
                    call(other, "directory_tree", {"path": os.path.join(root, "tree")}),
                    other_pid,
                ),
            ]
        outcomes = await take_turns(sides, rounds, 1, warmup, servers)
    # Each side listed and read what the other did.
    for name in (listed, globbed, walked):
        found = count_paths(outcomes[name].last)
        if found != limit:
            notes[name] = f"listed {found} paths, not {limit}"
    if npm is not None:
        if len(outcomes[whole].last.encode()) != BIG_FILE_BYTES:
            notes[whole] = f"gave {len(outcomes[whole].last)} characters"
        if count_tree(outcomes[tree].last) != files:
            notes[tree] = f"listed {count_tree(outcomes[tree].last)} files, not {files}"
    return outcomes, pairs, notes


def report_files(
    outcomes: dict[str, Outcome], pairs: list[Pair], notes: dict[str, str], load: str
) -> None:
    rows = [
        h.sample_row(
            name,
            outcome.stats,
            f"{len(outcome.last or '') / 1e3:.1f}",
            h.fmt_ms(outcome.cpu_per_call("client"), 2),
            h.fmt_ms(outcome.cpu_per_call("server_tree"), 2),
        )
        for name, outcome in outcomes.items()
    ]
    print(f"2. file tools over stdio, ours against {NPM_PACKAGE} (ms per call; {load})")
    h.print_table(["side", "n", "median", "p99", "reply kchars", "cpu client", "cpu server"], rows)
    print(
        "cpu client: this process (the SDK decoding the reply); cpu server: the server with "
        "its helpers; our read_file gives a page (the toolset's budget), npm's the whole "
        "file unless given head"
    )
    compared = [pair for pair in pairs if pair.ours in outcomes and pair.npm in outcomes]
    if compared:
        h.print_table(
            ["ours", "npm", "median ours / npm", "p99 ours / npm", "cpu server ours / npm"],
            [
                [
                    pair.ours,
                    pair.npm,
                    h.fmt_ratio(outcomes[pair.ours].stats.median, outcomes[pair.npm].stats.median),
                    h.fmt_ratio(outcomes[pair.ours].stats.p99, outcomes[pair.npm].stats.p99),
                    h.fmt_ratio(
                        outcomes[pair.ours].cpu_per_call("server_tree"),
                        outcomes[pair.npm].cpu_per_call("server_tree"),
                    ),
                ]
                for pair in compared
            ],
        )
    for name, note in notes.items():
        print(f"note: {name}: {note}")


# --- figure 3: cold start ------------------------------------------------------------------


async def start_stdio(command: Sequence[str], log: TextIO) -> tuple[float, str]:
    """Spawn a stdio server, connect, list its tools: seconds to the answer, and the protocol."""
    started = time.perf_counter()
    async with stdio_client(command, log) as (client, _):
        listed = await client.list_tools()
        elapsed = time.perf_counter() - started
        assert listed.tools
        return elapsed, client.protocol_version


async def start_http(root: str, log: TextIO) -> tuple[float, str]:
    """Spawn our HTTP server, wait for its URL, list its tools with the token."""
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    started = time.perf_counter()
    process = await anyio.open_process(
        ours(root, "--http", "--port", "0", "--token", TOKEN),
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.PIPE,
    )
    try:
        assert process.stderr is not None
        said = b""
        with anyio.fail_after(60):
            while b"serving on " not in said or not said.endswith(b"\n"):
                said += await process.stderr.receive()
        url = said.decode().split("serving on ", 1)[1].split()[0]
        headers = {"Authorization": f"Bearer {TOKEN}"}
        async with (
            httpx2.AsyncClient(headers=headers, timeout=60) as http,
            Client(streamable_http_client(url, http_client=http)) as client,
        ):
            listed = await client.list_tools()
            elapsed = time.perf_counter() - started
            assert listed.tools
            version = client.protocol_version
        return elapsed, version
    finally:
        # Ours, by its pid: it stops on SIGTERM, ending what it ran.
        with contextlib.suppress(ProcessLookupError):
            process.terminate()
        with anyio.move_on_after(15, shield=True) as waited:
            await process.wait()
        if waited.cancelled_caught:
            process.kill()
            with anyio.CancelScope(shield=True):
                await process.wait()
        await process.aclose()


async def cold_start(
    root: str, npm: list[str] | None, log: TextIO, rounds: int
) -> tuple[dict[str, h.Stats], dict[str, str]]:
    """Figure 3: `rounds` cold starts per side, the order rotating each round."""
    starts: dict[str, Callable[[], Awaitable[tuple[float, str]]]] = {
        "ours, stdio": lambda: start_stdio(ours(root), log),
        "ours, HTTP": lambda: start_http(root, log),
    }
    if npm is not None:
        starts["npm filesystem, stdio"] = lambda: start_stdio([*npm, root], log)
    samples: dict[str, list[float]] = {name: [] for name in starts}
    versions: dict[str, str] = {}
    for index in range(rounds):
        for name in h.rotated(list(starts), index):
            elapsed, versions[name] = await starts[name]()
            samples[name].append(elapsed)
    return {name: h.Stats(values) for name, values in samples.items()}, versions


def report_cold(stats: dict[str, h.Stats], versions: dict[str, str], load: str) -> None:
    print(f"3. cold start: spawn to the first answered tools/list (ms; {load})")
    rows = [
        [
            name,
            len(s.values),
            h.fmt_ms(s.median, 1),
            h.fmt_ms(s.minimum, 1),
            h.fmt_ms(s.maximum, 1),
            versions[name],
        ]
        for name, s in stats.items()
    ]
    h.print_table(["side", "n", "median", "min", "max", "protocol"], rows)


# --- main ----------------------------------------------------------------------------------


def load_now() -> str:
    one, five, _ = os.getloadavg()
    return f"load {one:.2f} / {five:.2f} (1 / 5 min) on {os.cpu_count()} cores"


def leftovers(known: set[int]) -> list[psutil.Process]:
    """Descendants of this process not in `known` (the ones that were there at the start)."""
    return [p for p in psutil.Process().children(recursive=True) if p.pid not in known]


def main(argv: list[str] | None = None) -> int:
    parser = h.command_line(__doc__, "small sizes and few rounds, as a smoke check")
    parser.add_argument("--count", type=int, help="figure 1: calls per side (default 300)")
    parser.add_argument("--files", type=int, help="figure 2: files in the folder and the tree")
    parser.add_argument("--rounds", type=int, help="figure 2: calls per side (default 30)")
    parser.add_argument("--starts", type=int, help="figure 3: cold starts per side (default 10)")
    parser.add_argument("--no-npm", action="store_true", help="leave the npm server out")
    args = parser.parse_args(argv)
    scale = h.Scale(args.quick, 0)
    try:
        import mcp  # noqa: F401
    except ImportError:
        print("bench_mcp: the mcp SDK is missing (pip install 'tool-executor[mcp]'); skipped")
        return 0
    count = args.count or scale.pick(12, 300)
    files = args.files or scale.pick(500, 10_000)
    rounds = args.rounds or scale.pick(3, 30)
    starts = args.starts or scale.pick(2, 10)
    there = {p.pid for p in psutil.Process().children(recursive=True)}

    npm: list[str] | None = None
    if args.no_npm:
        print("npm filesystem server: left out (--no-npm); its sides are skipped")
    else:
        npm, said = npm_server(scale.pick(20.0, 180.0))
        print(f"npm filesystem server: {said}" if npm else f"{said}: the npm sides are skipped")
    print(f"python {sys.version.split()[0]}, {load_now()}")

    with (
        tempfile.TemporaryDirectory(prefix="bench-mcp-") as folder,
        open(os.path.join(folder, "servers.log"), "w+") as log,
    ):
        # The servers' workdir and root; realpath: the npm server compares resolved paths.
        root = os.path.realpath(os.path.join(folder, "files"))
        os.mkdir(root)
        make_files(Path(root), files)

        async def everything() -> None:
            load = load_now()
            outcomes = await run_figure(root, log, count, scale.pick(3, 20), quick=scale.quick)
            report_run(outcomes, f"{load} at the start")
            print()
            load = load_now()
            found, pairs, notes = await files_figure(
                root, files, npm, log, rounds, scale.pick(1, 2)
            )
            report_files(found, pairs, notes, f"{load} at the start")
            print()
            load = load_now()
            cold, versions = await cold_start(root, npm, log, starts)
            report_cold(cold, versions, f"{load} at the start")

        try:
            anyio.run(everything, backend="asyncio")
        except BaseException:
            log.seek(0)
            print(f"the servers' stderr:\n{log.read()[-4000:]}", file=sys.stderr)
            raise
    print(f"\n{load_now()} at the end")
    left = leftovers(there)
    for process in left:  # ours: started by this run, ended by pid
        print(f"!!! left running: {process.pid} {process.cmdline()[:4]}; killing it")
        with contextlib.suppress(psutil.NoSuchProcess):
            process.kill()
    return 1 if left else 0


if __name__ == "__main__":
    sys.exit(main())
