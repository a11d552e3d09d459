"""The log tailer: formats, filters, follow, globs, rotation, crash recovery, remote backends."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from conftest import require_sandbox
from docker_engine import BUSYBOX_IMAGE, require_engine
from ssh_server import SshServer

from executor import (
    Audit,
    Command,
    DefaultContext,
    DockerExecutor,
    ExecutorError,
    InvalidArgument,
    LocalExecutor,
    ReadOnly,
    Sandbox,
    Secrets,
    SqliteJournal,
    StreamingToolSession,
    ToolStreamError,
)
from executor._builtins.logformats import (
    LogFormat,
    LogLevel,
    detect_format,
    is_continuation,
    line_format,
    logfmt,
)
from executor._builtins.logtail import (
    LogEntry,
    LogFilter,
    LogResult,
    LogTailerInput,
    LogTailerTool,
    StartAt,
)
from executor._builtins.logtail_sources import ShellFiles
from executor._core.stdin import Text

pytestmark = pytest.mark.anyio

NGINX = (
    '203.0.113.9 - alice [10/Oct/2023:13:55:36 -0700] "GET /api/items?id=7 HTTP/1.1" 502 1534 '
    '"https://example.com/start" "Mozilla/5.0 (X11; Linux x86_64) Firefox/118.0"'
)
CLF = '127.0.0.1 - frank [10/Oct/2000:13:55:36 -0700] "GET /apache_pb.gif HTTP/1.0" 200 2326'
RFC5424 = (
    "<165>1 2003-10-11T22:14:15.003Z mymachine.example.com evntslog - ID47 "
    '[exampleSDID@32473 iut="3" eventSource="Application" eventID="1011"]'
    '[examplePriority@32473 class="high" note="a \\"quoted\\" \\] bracket"] An application event'
)
RFC3164 = "<34>Oct 11 22:14:15 mymachine su[230]: 'su root' failed for lonvick on /dev/pts/8"
NESTED_JSON = json.dumps(
    {
        "@timestamp": "2024-05-01T10:00:00.123Z",
        "log": {"level": "error"},
        "message": "upstream timeout",
        "http": {"request": {"method": "POST"}, "response": {"status_code": 504}},
        "tags": ["edge", "eu"],
    }
)
LOGFMT = 'ts=2024-05-01T10:00:00Z level=warn msg="disk almost full" path=/var used_pct=93 retry'
JAVA = """\
2024-05-01 10:00:00,123 ERROR [http-nio-8080-exec-1] c.e.OrderService - Order 42 failed
java.lang.IllegalStateException: inventory unavailable
\tat com.example.OrderService.place(OrderService.java:88)
\tat com.example.OrderController.post(OrderController.java:31)
Caused by: java.net.SocketTimeoutException: Read timed out
\tat java.base/java.net.SocketInputStream.read(SocketInputStream.java:183)
\t... 12 more
2024-05-01 10:00:01,002 INFO  [main] c.e.App - still serving
"""


def parse(format: LogFormat, line: str) -> Any:
    """The parsed fields of one line in `format`."""
    reader = line_format(format)
    token = reader.start(line)
    assert token, f"{format} does not take {line!r}"
    return reader.parse(line, token)


# --- formats ----------------------------------------------------------------------------


def test_nginx_combined_fields() -> None:
    """An nginx combined line gives the request's parts, status, size, referer, agent and time."""
    parsed = parse(LogFormat.COMBINED, NGINX)
    assert parsed.timestamp == "2023-10-10T13:55:36-07:00"
    assert parsed.level is LogLevel.ERROR  # a 502
    assert parsed.message == "GET /api/items?id=7 HTTP/1.1"
    assert parsed.fields == {
        "remote_host": "203.0.113.9",
        "ident": None,
        "user": "alice",
        "request": "GET /api/items?id=7 HTTP/1.1",
        "method": "GET",
        "path": "/api/items?id=7",
        "protocol": "HTTP/1.1",
        "status": 502,
        "bytes": 1534,
        "referer": "https://example.com/start",
        "user_agent": "Mozilla/5.0 (X11; Linux x86_64) Firefox/118.0",
    }
    assert not line_format(LogFormat.COMBINED).start(CLF)  # no referer and agent
    clf = parse(LogFormat.CLF, CLF)
    assert (clf.fields["status"], clf.level, clf.fields["user"]) == (200, LogLevel.INFO, "frank")


def test_rfc5424_structured_data() -> None:
    """RFC 5424: header fields, severity as level, every SD element and escaped parameter."""
    parsed = parse(LogFormat.SYSLOG, RFC5424)
    assert parsed.timestamp == "2003-10-11T22:14:15.003Z"
    assert parsed.level is LogLevel.NOTICE  # 165 = local4.notice
    assert parsed.message == "An application event"
    assert parsed.fields["hostname"] == "mymachine.example.com"
    assert parsed.fields["appname"] == "evntslog"
    assert parsed.fields["procid"] is None
    assert parsed.fields["msgid"] == "ID47"
    assert parsed.fields["facility"] == "local4"
    assert parsed.fields["structured_data"] == {
        "exampleSDID@32473": {"iut": "3", "eventSource": "Application", "eventID": "1011"},
        "examplePriority@32473": {"class": "high", "note": 'a "quoted" ] bracket'},
    }


def test_rfc3164_line() -> None:
    """RFC 3164: priority, a date without a year, host, tag and pid."""
    parsed = parse(LogFormat.SYSLOG, RFC3164)
    assert parsed.level is LogLevel.CRITICAL  # 34 = auth.crit
    assert parsed.timestamp is not None
    assert parsed.timestamp.endswith("-10-11T22:14:15")
    assert parsed.fields["hostname"] == "mymachine"
    assert (parsed.fields["appname"], parsed.fields["procid"]) == ("su", "230")
    assert parsed.message == "'su root' failed for lonvick on /dev/pts/8"
    bare = parse(LogFormat.SYSLOG, "Dec  1 13:44:15 web1 sshd[99]: error: maximum tries")
    assert (bare.fields["appname"], bare.level) == ("sshd", LogLevel.ERROR)


def test_nested_json_and_logfmt() -> None:
    """Nested JSON keeps its objects as fields (ECS level found); logfmt gives its pairs."""
    parsed = parse(LogFormat.JSON, NESTED_JSON)
    assert parsed.timestamp == "2024-05-01T10:00:00.123Z"
    assert parsed.level is LogLevel.ERROR
    assert parsed.message == "upstream timeout"
    assert parsed.fields["http"]["response"]["status_code"] == 504
    assert parsed.fields["tags"] == ["edge", "eu"]
    pino = parse(LogFormat.JSON, '{"level":50,"time":1714557600000,"msg":"boom"}')
    assert (pino.level, pino.timestamp) == (LogLevel.ERROR, "2024-05-01T10:00:00Z")
    parsed = parse(LogFormat.STRUCTURED, LOGFMT)
    assert parsed.level is LogLevel.WARNING
    assert parsed.message == "disk almost full"
    assert parsed.timestamp == "2024-05-01T10:00:00Z"
    assert parsed.fields["used_pct"] == "93"
    assert parsed.fields["retry"] is True


def test_logfmt_values_read_as_logfmt_writes_them() -> None:
    """A quoted value's escapes (newline, tab, quote, backslash, code point) read as written."""
    line = (
        r'msg="line1\nline2" tab="a\tb" said="say \"hi\"" path="C:\\dir" '
        r'cafe="caf\u00e9" face="\ud83d\ude00" odd="\q" bare'
    )
    assert logfmt(line) == {
        "msg": "line1\nline2",
        "tab": "a\tb",
        "said": 'say "hi"',
        "path": "C:\\dir",
        "cafe": "café",
        "face": "\U0001f600",
        "odd": "q",
        "bare": True,
    }


def test_auto_detection_and_continuations() -> None:
    """Auto picks each format from a file's first lines; stack-trace lines are continuations."""
    assert detect_format([NGINX, NGINX]) is LogFormat.COMBINED
    assert detect_format([CLF]) is LogFormat.CLF
    assert detect_format([RFC5424, RFC3164]) is LogFormat.SYSLOG
    assert detect_format([NESTED_JSON]) is LogFormat.JSON
    assert detect_format([LOGFMT, LOGFMT]) is LogFormat.STRUCTURED
    assert detect_format(JAVA.splitlines()) is LogFormat.RAW
    assert detect_format([]) is None
    assert is_continuation("\tat com.example.App.main(App.java:3)", False)
    assert is_continuation("java.lang.IllegalStateException: boom", False)
    assert is_continuation("Caused by: java.io.IOException", False)
    assert is_continuation("ValueError: bad", True)
    assert not is_continuation("ValueError: bad", False)
    assert not is_continuation("2024-05-01 INFO started", False)
    assert LogFormat("logfmt") is LogFormat.STRUCTURED
    assert LogLevel("WARN") is LogLevel.WARNING


# --- reading through the tool -----------------------------------------------------------


@pytest.fixture
async def local(tmp_path: Path) -> AsyncIterator[tuple[LogTailerTool, Path]]:
    """A log tailer on a LocalExecutor in a fresh folder."""
    async with LocalExecutor(tmp_path) as ex:
        yield LogTailerTool(DefaultContext.from_executor(ex), rotation_linger=0.3), tmp_path


async def tail(tool: LogTailerTool, **arguments: Any) -> tuple[list[LogEntry], LogResult]:
    """Run the tool to its end on `arguments` (as a model gives them) and collect what it sent."""
    async with StreamingToolSession(tool, tool.parse_input(arguments)) as session:
        entries = [entry async for entry in session]
        result = await session.finalize()
    return entries, result.final


async def test_every_format_through_the_tool(local: tuple[LogTailerTool, Path]) -> None:
    """Auto detects each file's format; the Java stack trace stays one entry with its first line."""
    tool, folder = local
    (folder / "access.log").write_text(f"{NGINX}\n{NGINX.replace(' 502 ', ' 200 ')}\n")
    (folder / "syslog.log").write_text(f"{RFC5424}\n")
    (folder / "app.json").write_text(f"{NESTED_JSON}\n")
    (folder / "worker.logfmt").write_text(f"{LOGFMT}\n")
    (folder / "java.log").write_text(JAVA)
    entries, result = await tail(tool, path="*")
    by_file: dict[str, list[LogEntry]] = {}
    for entry in entries:
        by_file.setdefault(Path(entry.source).name, []).append(entry)
    assert [e.fields["status"] for e in by_file["access.log"]] == [502, 200]
    assert by_file["syslog.log"][0].fields["structured_data"]["exampleSDID@32473"]["iut"] == "3"
    assert by_file["app.json"][0].level is LogLevel.ERROR
    assert by_file["worker.logfmt"][0].fields["path"] == "/var"
    java = by_file["java.log"]
    assert [e.line for e in java] == [1, 8]
    assert java[0].level is LogLevel.ERROR
    assert java[0].timestamp == "2024-05-01T10:00:00.123"
    assert java[0].raw == "\n".join(JAVA.splitlines()[:7])
    assert "... 12 more" in java[0].message
    assert java[1].level is LogLevel.INFO
    assert result.lines_read == 2 + 1 + 1 + 1 + 8
    assert result.lines_matched == len(entries) == 7
    assert sorted(Path(p).name for p in result.files) == sorted(by_file)


async def test_filters(local: tuple[LogTailerTool, Path]) -> None:
    """Minimum level, regex and field matches each narrow the entries; together they all hold."""
    tool, folder = local
    lines = [
        {"level": "debug", "msg": "cache miss", "service": "api"},
        {"level": "error", "msg": "upstream timeout", "service": "api", "http": {"status": 504}},
        {"level": "critical", "msg": "disk timeout", "service": "db"},
        {"level": "warning", "msg": "slow timeout", "service": "api"},
        {"msg": "no level timeout"},
    ]
    (folder / "app.log").write_text("".join(json.dumps(line) + "\n" for line in lines))
    entries, _ = await tail(tool, path="app.log", format="json", filter={"level": "error"})
    assert [e.message for e in entries] == ["upstream timeout", "disk timeout"]
    entries, result = await tail(
        tool, path="app.log", filter={"pattern": "TIME", "ignore_case": True}
    )
    assert len(entries) == 4
    assert result.lines_read == 5
    entries, _ = await tail(
        tool,
        path="app.log",
        filter={"level": "warning", "pattern": "timeout", "fields": {"service": "api"}},
    )
    assert [e.message for e in entries] == ["upstream timeout", "slow timeout"]
    entries, _ = await tail(tool, path="app.log", filter={"fields": {"http.status": "504"}})
    assert [e.line for e in entries] == [2]
    with pytest.raises(InvalidArgument, match="regular expression"):
        tool.parse_input({"path": "app.log", "filter": {"pattern": "("}})
    with pytest.raises(InvalidArgument):
        tool.parse_input({"path": "app.log", "format": "xml"})


async def test_filters_agree_line_by_line_on_a_large_log(local: tuple[LogTailerTool, Path]) -> None:
    """Over many blocks, a level and regex filter picks the lines a line-by-line check does."""
    tool, folder = local
    rng = __import__("random").Random(3)
    lines = []
    for n in range(20000):
        record: dict[str, Any] = {"level": rng.choice(["debug", "info", "warn", "error", 50])}
        if n % 7 == 0:
            record["ctx"] = {"level": rng.choice(["debug", "error"])}  # nested, never the level
        record["msg"] = rng.choice(["ok", "db timeout", "timeout on é", "fine"])
        lines.append(json.dumps(record, ensure_ascii=n % 3 == 0))
    lines[5000:5000] = [
        "Traceback (most recent call last):",
        '  File "x.py", line 1',
        "TimeoutError: timeout",
    ]
    (folder / "big.log").write_text("\n".join(lines) + "\n")
    wanted = {"level": "error", "pattern": "timeout"}
    entries, result = await tail(tool, path="big.log", format="json", filter=wanted)
    expected = []
    for number, line in enumerate(lines, start=1):
        if not line.startswith("{"):
            continue
        record = json.loads(line)
        following = lines[number : number + 3] if number == 5000 else []
        raw = "\n".join([line, *following])
        if record["level"] in ("error", 50) and "timeout" in raw:
            expected.append((number, raw))
    assert [(e.line, e.raw) for e in entries] == expected
    assert result.lines_read == len(lines)


async def test_start_positions(local: tuple[LogTailerTool, Path]) -> None:
    """A tail starts at the start, at the end, or at the last N lines, numbering lines from 1."""
    tool, folder = local
    (folder / "app.log").write_text("".join(f"line {n}\n" for n in range(1, 21)))
    entries, _ = await tail(tool, path="app.log", format="raw", start="last", last_lines=3)
    assert [(e.line, e.raw) for e in entries] == [(18, "line 18"), (19, "line 19"), (20, "line 20")]
    entries, _ = await tail(tool, path="app.log", format="raw", start="end")
    assert entries == []
    entries, result = await tail(tool, path="app.log", format="raw")
    assert len(entries) == 20
    assert result.lines_read == 20


async def test_follow_new_lines_and_new_files(local: tuple[LogTailerTool, Path]) -> None:
    """Following a glob hands over lines as they are appended, and picks up a file made later."""
    tool, folder = local
    logs = folder / "logs"
    logs.mkdir()
    (logs / "a.log").write_text("old line\n")
    request = tool.parse_input({"path": "logs/*.log", "follow": True, "format": "raw"})
    async with StreamingToolSession(tool, request) as session:
        with (logs / "a.log").open("a") as log:
            log.write("first\n")
        with anyio.fail_after(10):
            first = await session.next_chunk()
        assert first is not None
        assert (first.raw, first.line) == ("first", 2)
        (logs / "b.log").write_text("from b\n")
        with anyio.fail_after(10):
            second = await session.next_chunk()
        assert second is not None
        assert second.raw == "from b"
        assert Path(second.source).name == "b.log"
        session.cancel()


async def test_follow_keeps_a_stack_trace_written_in_pieces(
    local: tuple[LogTailerTool, Path],
) -> None:
    """While following, a trace whose lines come in separate writes stays one entry."""
    tool, folder = local
    path = folder / "app.log"
    path.write_text("")
    request = tool.parse_input({"path": "app.log", "follow": True, "format": "raw"})
    async with StreamingToolSession(tool, request) as session:
        with path.open("a") as log:
            for line in JAVA.splitlines(keepends=True)[:7]:
                log.write(line)
                log.flush()
        with anyio.fail_after(10):
            entry = await session.next_chunk()
        assert entry is not None
        assert entry.raw == "\n".join(JAVA.splitlines()[:7])
        session.cancel()


async def test_read_only_and_refused(local: tuple[LogTailerTool, Path], tmp_path: Path) -> None:
    """The tool takes no stdin; a path outside a confined executor is refused, naming it."""
    tool, folder = local
    (folder / "app.log").write_text("x\n")
    request = tool.parse_input({"path": "app.log", "follow": True})
    async with StreamingToolSession(tool, request) as session:
        with pytest.raises(ToolStreamError, match="read-only"):
            await session.send_stdin(Text("hello"))
        session.cancel()
    outside = tmp_path.parent / f"{tmp_path.name}-outside.log"
    outside.write_text("secret\n")
    try:
        async with LocalExecutor(folder, confine=True) as confined:
            guarded = LogTailerTool(DefaultContext.from_executor(ReadOnly(confined)))
            with pytest.raises(Exception, match="outside the workdir"):
                await tail(guarded, path=str(outside))
    finally:
        outside.unlink()


async def test_a_missing_file_is_named(local: tuple[LogTailerTool, Path]) -> None:
    """Reading a file that is not there fails naming it; following waits for it to appear."""
    tool, folder = local
    with pytest.raises(ExecutorError, match=r"no file matches 'missing\.log'"):
        await tail(tool, path="missing.log")
    request = tool.parse_input({"path": "later.log", "follow": True, "format": "raw"})
    async with StreamingToolSession(tool, request) as session:
        (folder / "later.log").write_text("here now\n")
        with anyio.fail_after(10):
            entry = await session.next_chunk()
        assert entry is not None
        assert entry.raw == "here now"
        session.cancel()


@pytest.mark.parametrize("through", ["direct", "shell"])
async def test_in_the_sandbox(tmp_path: Path, through: str) -> None:
    """A sandboxed executor's files are tailed, read directly or by the sh loop in the sandbox."""
    require_sandbox()
    records: list[Any] = []
    async with LocalExecutor(tmp_path, sandbox=Sandbox(), kill_grace=0.2) as sandboxed:
        # Audit rewrites nothing but is no mere check: the tail goes through a session.
        ex = sandboxed if through == "direct" else Audit(sandboxed, records.append)
        await ex.exec_cmd(Command.write_file("app.log", "level=info msg=one\n"))
        tool = LogTailerTool(DefaultContext.from_executor(ex), poll_interval=0.02)
        request = tool.parse_input({"path": "app.log", "follow": True, "start": "start"})
        async with StreamingToolSession(tool, request) as session:
            with anyio.fail_after(15):
                first = await session.next_chunk()
            with (tmp_path / "app.log").open("a") as log:
                log.write("level=error msg=two\n")
            with anyio.fail_after(15):
                second = await session.next_chunk()
            session.cancel()
    assert first is not None
    assert second is not None
    assert (first.message, second.message, second.level) == ("one", "two", LogLevel.ERROR)
    assert bool(records) == (through == "shell")


async def test_secrets_are_redacted_and_offsets_stay_right(tmp_path: Path) -> None:
    """Under `Secrets` the sh loop reads the log; a secret is redacted and no line repeats."""
    async with LocalExecutor(tmp_path, kill_grace=0.2) as local:
        ex = Secrets(local, redact=["hunter2-very-secret"])
        log = tmp_path / "app.log"
        log.write_text("login ok password=hunter2-very-secret\nnext\n")
        tool = LogTailerTool(DefaultContext.from_executor(ex), poll_interval=0.02)
        request = tool.parse_input(
            {"path": "app.log", "follow": True, "start": "start", "format": "raw"}
        )
        async with StreamingToolSession(tool, request) as session:
            seen = []
            with anyio.fail_after(15):
                seen += [await session.next_chunk(), await session.next_chunk()]
            with log.open("a") as out:
                out.write("after\n")
            with anyio.fail_after(15):
                seen.append(await session.next_chunk())
            session.cancel()
    raws = [entry.raw for entry in seen if entry is not None]
    assert "hunter2-very-secret" not in raws[0]
    assert raws[1:] == ["next", "after"]


# --- rotation -----------------------------------------------------------------------------


class Writer:
    """Appends numbered lines to a log, reopening it for each line as a logger after a HUP would."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.count = 0

    def write(self, lines: int) -> None:
        for _ in range(lines):
            self.count += 1
            with self.path.open("a") as log:
                log.write(f"line {self.count}\n")


async def follow_all(
    tool: LogTailerTool, path: str, expected: int, rotate: Any, writer: Writer
) -> tuple[list[str], LogResult]:
    """Follow `path` while `writer` writes and `rotate()` rotates, until `expected` entries came."""
    request = tool.parse_input({"path": path, "follow": True, "format": "raw"})
    seen: list[str] = []
    async with StreamingToolSession(tool, request) as session:
        writer.write(50)
        for _ in range(3):
            while len(seen) < writer.count:
                with anyio.fail_after(10):
                    entry = await session.next_chunk()
                assert entry is not None
                seen.append(entry.raw)
            writer.write(30)
            await anyio.to_thread.run_sync(rotate)
            writer.write(30)
        while len(seen) < expected:
            with anyio.fail_after(10):
                entry = await session.next_chunk()
            assert entry is not None
            seen.append(entry.raw)
        session.cancel()
        # Cancelled: no final; the counts are the tool's, read through a fresh run below.
    return seen, LogResult(lines_read=0, lines_matched=len(seen), files=[], rotations=0)


def numbered(count: int) -> list[str]:
    return [f"line {n}" for n in range(1, count + 1)]


@pytest.mark.parametrize("how", ["rename", "copytruncate", "delete"])
async def test_rotation_loses_no_line(local: tuple[LogTailerTool, Path], how: str) -> None:
    """Rename-and-create, copytruncate and delete-and-recreate each lose and repeat no line."""
    tool, folder = local
    path = folder / "app.log"
    path.write_text("")
    writer = Writer(path)
    generation = 0

    def rotate() -> None:
        nonlocal generation
        generation += 1
        if how == "rename":
            os.rename(path, folder / f"app.log.{generation}")
            path.write_text("")
        elif how == "copytruncate":
            shutil.copyfile(path, folder / f"app.log.{generation}")
            with path.open("r+") as log:
                log.truncate(0)
        else:
            path.unlink()
            path.write_text("")

    seen, _ = await follow_all(tool, "app.log", 50 + 3 * 60, rotate, writer)
    assert seen == numbered(writer.count)


def logrotate_or_skip() -> str:
    """The logrotate program, or skip (fail under EXECUTOR_REQUIRE_LOGROTATE=1)."""
    found = shutil.which("logrotate") or (
        "/usr/sbin/logrotate" if os.path.exists("/usr/sbin/logrotate") else None
    )
    if found is None:
        if os.environ.get("EXECUTOR_REQUIRE_LOGROTATE") == "1":
            pytest.fail("EXECUTOR_REQUIRE_LOGROTATE=1, but logrotate is not installed")
        pytest.skip("logrotate is not installed (apt-get install logrotate)")
    return found


@pytest.mark.parametrize("mode", ["create", "copytruncate"])
async def test_real_logrotate(local: tuple[LogTailerTool, Path], mode: str) -> None:
    """The real logrotate, in create and in copytruncate mode, loses and repeats no line."""
    program = logrotate_or_skip()
    tool, folder = local
    path = folder / "app.log"
    path.write_text("")
    config = folder / "logrotate.conf"
    config.write_text(f"{path} {{\n  rotate 5\n  size 1\n  missingok\n  nocompress\n  {mode}\n}}\n")
    state = folder / "logrotate.state"
    writer = Writer(path)

    def rotate() -> None:
        subprocess.run(
            [program, "--force", "--state", str(state), str(config)],
            check=True,
            capture_output=True,
            timeout=30,
        )

    seen, _ = await follow_all(tool, "app.log", 50 + 3 * 60, rotate, writer)
    assert seen == numbered(writer.count)
    assert (folder / "app.log.1").exists()


async def test_rotations_are_counted(local: tuple[LogTailerTool, Path]) -> None:
    """The final result counts the rotations and lists every file read."""
    tool, folder = local
    path = folder / "app.log"
    path.write_text("a\n")
    request = tool.parse_input(
        {"path": "app.log", "follow": True, "start": "start", "timeout_secs": 1.5}
    )
    async with StreamingToolSession(tool, request) as session:
        assert (await session.next_chunk()) is not None
        os.rename(path, folder / "app.log.1")
        path.write_text("b\n")
        with anyio.fail_after(10):
            entry = await session.next_chunk()
        assert entry is not None
        assert entry.raw == "b"
        result = (await session.finalize()).final
    assert result.rotations == 1
    assert result.lines_read == result.lines_matched == 2


# --- crash recovery -----------------------------------------------------------------------

CONSUMER = textwrap.dedent(
    """
    import sys, time, anyio
    from executor import DefaultContext, LocalExecutor, SqliteJournal, StreamingToolSession
    from executor._builtins.logtail import LogTailerTool

    async def main(folder, journal_path, key):
        async with LocalExecutor(folder) as ex, SqliteJournal(journal_path) as journal:
            tool = LogTailerTool(DefaultContext.from_executor(ex))
            request = tool.parse_input({"path": "*.log", "follow": True, "format": "raw"})
            async with StreamingToolSession(tool, request, journal=journal, key=key) as session:
                print("ready", flush=True)  # the positions to start from are taken
                async for entry in session:
                    sys.stdout.write(entry.raw + "\\n")
                    sys.stdout.flush()
                    time.sleep(0.001)

    anyio.run(main, *sys.argv[1:])
    """
)


def consume(folder: Path, journal: Path, key: str) -> subprocess.Popen[str]:
    """Start a consumer process that tails the folder's logs under the journal and key."""
    return subprocess.Popen(
        [sys.executable, "-c", CONSUMER, str(folder), str(journal), key],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )


def read_lines(process: subprocess.Popen[str], count: int) -> list[str]:
    """Read `count` lines from the consumer's output."""
    assert process.stdout is not None
    lines: list[str] = []
    while len(lines) < count:
        line = process.stdout.readline()
        assert line, "the consumer ended early"
        lines.append(line.rstrip("\n"))
    return lines


async def read_within(process: subprocess.Popen[str], count: int) -> list[str]:
    """`count` lines of the consumer's output, failing after 60 s (the process is killed then)."""
    with anyio.fail_after(60):
        return await anyio.to_thread.run_sync(read_lines, process, count, abandon_on_cancel=True)


def kill(process: subprocess.Popen[str]) -> list[str]:
    """SIGKILL the consumer; what it had written before it died."""
    process.send_signal(signal.SIGKILL)
    assert process.stdout is not None
    rest = process.stdout.read().splitlines()
    process.stdout.close()
    process.wait()
    return rest


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_killed_consumer_resumes_without_loss_or_repeat(tmp_path: Path) -> None:
    """A consumer SIGKILLed mid-tail, resumed with its key, sees every line exactly once."""
    from executor import IdempotencyKey

    folder = tmp_path / "logs"
    folder.mkdir()
    journal = tmp_path / "journal.sqlite3"
    key = str(IdempotencyKey.new())
    log = folder / "app.log"
    with log.open("w") as out:
        out.writelines(f"line {n}\n" for n in range(1, 3001))
    first = consume(folder, journal, key)
    got: list[str] = []
    try:
        # The consumer follows from the end: nothing to read until lines come,
        # and then (at 1 ms an entry) it takes seconds to get through them.
        assert await read_within(first, 1) == ["ready"]
        with log.open("a") as out:
            out.writelines(f"new {n}\n" for n in range(1, 3001))
        got = await read_within(first, 300)
    finally:
        got += kill(first)
    assert 300 <= len(got) < 3000, "the consumer was not killed mid-tail"
    # While no one reads: more lines, a rotation, and a new file.
    with log.open("a") as out:
        out.writelines(f"new {n}\n" for n in range(3001, 3501))
    os.rename(log, folder / "app.log.1")
    with log.open("w") as out:
        out.writelines(f"new {n}\n" for n in range(3501, 3601))
    (folder / "other.log").write_text("other 1\n")
    expected = [f"new {n}" for n in range(1, 3601)] + ["other 1"]
    second = consume(folder, journal, key)
    rest: list[str] = []
    try:
        assert await read_within(second, 1) == ["ready"]
        rest = await read_within(second, len(expected) - len(got))
        await anyio.sleep(0.5)  # time for a line handed over twice to show
    finally:
        rest += kill(second)
    everything = got + rest
    assert sorted(everything) == sorted(expected)
    assert len(set(everything)) == len(everything)


async def test_a_finished_tail_is_answered_from_the_journal(
    local: tuple[LogTailerTool, Path], tmp_path: Path
) -> None:
    """A tail that finished under a key is answered from the journal the next time."""
    tool, folder = local
    (folder / "app.log").write_text("a\nb\n")
    request = tool.parse_input({"path": "app.log", "format": "raw"})
    async with SqliteJournal(tmp_path / "j.sqlite3") as journal:
        async with StreamingToolSession(tool, request, journal=journal) as session:
            assert len([e async for e in session]) == 2
            result = await session.finalize()
            key = session.key
        async with StreamingToolSession(tool, request, journal=journal, key=key) as again:
            assert [e async for e in again] == []
            assert (await again.finalize()).final == result.final
            assert again.recovered


# --- remote backends ------------------------------------------------------------------------


async def remote_tail(ex: Any) -> None:
    """Read, follow, filter and follow a rotation of a log through `ex`'s shell."""
    await ex.exec_cmd(Command.write_file("logs/app.log", f"{NGINX}\n{CLF}\n"))
    tool = LogTailerTool(DefaultContext.from_executor(ex), poll_interval=0.02)
    entries, _ = await tail(tool, path="logs/*.log", format="clf")
    assert [e.fields["status"] for e in entries] == [502, 200]
    assert entries[0].source.endswith("logs/app.log")
    assert entries[1].line == 2
    request = tool.parse_input(
        {"path": "logs/*.log", "follow": True, "format": "raw", "filter": {"pattern": "^keep"}}
    )
    async with StreamingToolSession(tool, request) as session:
        await ex.exec_cmd(Command.shell("printf 'keep 1\\ndrop\\nkeep 2\\n' >> logs/app.log"))
        with anyio.fail_after(15):
            got = [await session.next_chunk(), await session.next_chunk()]
        assert [e.raw for e in got if e is not None] == ["keep 1", "keep 2"]
        await ex.exec_cmd(
            Command.shell(
                "echo 'keep 3' >> logs/app.log; mv logs/app.log logs/app.log.1; "
                "echo 'keep 4' > logs/app.log; echo 'keep 5' > logs/new.log"
            )
        )
        with anyio.fail_after(15):
            got = [await session.next_chunk() for _ in range(3)]
        assert sorted(e.raw for e in got if e is not None) == ["keep 3", "keep 4", "keep 5"]
        session.cancel()


@pytest.fixture
def engine() -> None:
    """Skip without a Docker engine (fail under EXECUTOR_REQUIRE_DOCKER=1)."""
    require_engine()


@pytest.mark.usefixtures("engine")
async def test_through_docker() -> None:
    """The same tail works through a Docker container with only busybox."""
    async with DockerExecutor(BUSYBOX_IMAGE, kill_grace=0.2) as ex:
        await remote_tail(ex)


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_through_ssh(ssh_server: SshServer) -> None:
    """The same tail works over SSH."""
    async with ssh_server.executor(kill_grace=0.2) as ex:
        await remote_tail(ex)


class RotatedWhileRead(ShellFiles):
    """Files through a shell, renamed away and made anew just as a head is read.

    The order a busy far side can give: the rotation lands between the look at
    a file's first bytes and the stat that names the file they came from.
    """

    def __init__(self, executor: Any, rotate: Any) -> None:
        super().__init__(executor, poll_interval=0.02)
        self.rotate = rotate

    async def head(self, handle: object, info: Any, length: int) -> bytes | None:
        rotate, self.rotate = self.rotate, None
        if rotate is not None:
            rotate()
        return await super().head(handle, info, length)


class RacedTailer(LogTailerTool):
    """A tailer that reads through `RotatedWhileRead`."""

    def __init__(self, executor: Any, files: RotatedWhileRead) -> None:
        super().__init__(DefaultContext.from_executor(executor), poll_interval=0.02)
        self.files = files

    async def _source(self, pattern: str) -> tuple[Any, str]:
        return self.files, pattern


async def test_a_rename_between_head_and_stat_is_no_truncation(tmp_path: Path) -> None:
    """A file renamed away while its head is read is followed, not read again from 0."""
    logs = tmp_path / "logs"
    logs.mkdir()
    path = logs / "app.log"
    path.write_text("keep 1\n")

    def rotate() -> None:
        os.rename(path, logs / "app.log.1")
        path.write_text("keep 3\n")

    async with LocalExecutor(tmp_path, kill_grace=0.2) as ex:
        files = RotatedWhileRead(ex, None)
        tool = RacedTailer(ex, files)
        request = tool.parse_input(
            {"path": "logs/*.log", "follow": True, "format": "raw", "start": "start"}
        )
        async with StreamingToolSession(tool, request) as session:
            with anyio.fail_after(15):
                first = await session.next_chunk()
            with path.open("a") as log:
                log.write("keep 2\n")
            files.rotate = rotate  # armed once the growth is what it will look at
            with anyio.fail_after(15):
                got = [await session.next_chunk() for _ in range(2)]
            with anyio.move_on_after(0.5):
                extra = await session.next_chunk()
                got.append(extra)
            session.cancel()
    assert first is not None
    assert first.raw == "keep 1"
    assert [e.raw for e in got if e is not None] == ["keep 2", "keep 3"]
    assert files.rotate is None, "the rotation was never made: the test proved nothing"


async def test_start_at_is_an_enum() -> None:
    """The start position is typed: strings from a model become `StartAt`."""
    request = LogTailerInput(
        path="a.log", start=StartAt.LAST, filter=LogFilter(level=LogLevel.ERROR)
    )
    assert request.start is StartAt.LAST
    with pytest.raises(InvalidArgument, match="last_lines"):
        LogTailerInput(path="a.log", last_lines=-1)
