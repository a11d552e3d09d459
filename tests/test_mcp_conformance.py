"""The official MCP conformance suite against the executor's MCP server, in both eras.

The suite is the npm package @modelcontextprotocol/conformance, at the version
.ci/services/mcp_conformance.sh installs; $EXECUTOR_MCP_CONFORMANCE is the
command that runs it. Without it these tests skip, or fail under
EXECUTOR_REQUIRE_MCP_CONFORMANCE=1 (CI).

The server is tests/mcp_conformance_server.py: `McpServer` with the standard
toolset over `Approval(LocalExecutor, elicitation_approver)` asking before
every command (but the one the logging fixture runs), plus the fixture tools
of the suite's scenarios that test the server's own machinery (its approval
rounds, test_input_required_result_tampered_state, test_missing_capability...;
its roots round; its logging, test_logging_tool), each running a real command
through that executor, so that what the suite checks is the server's own
answer. For each
protocol era (2025-11-25, the initialize handshake; 2026-07-28, stateless
requests) one server process is started on 127.0.0.1 with a free port, and the
suite runs all its server scenarios of that era against it in one run
(`conformance server --suite all --spec-version ERA`), saving each scenario's
checks; each scenario is then a test of its own, which fails on a check the
suite counts as failed (a WARNING does not fail, as in the suite).

The suite cannot send a header (its `server` command takes a URL and nothing to
authenticate with), so the server runs without a bearer token, on 127.0.0.1,
for the few seconds of a run; tests/test_mcp.py covers the bearer token.

What the server is not held to (scenarios and checks that test the fixtures of
the suite's "everything server", and expected failures) is in
tests/mcp_conformance_excluded.toml, each with its reason.

One check the suite passes on silence, no notifications/message to a
2026-07-28 request without a log level, means something only if the same
call logs when a level is asked for: test_logging_fixture_logs_at_the_level_asked
holds the fixture to that, with or without the suite.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
import tomllib
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ERAS = ["2025-11-25", "2026-07-28"]
EXCLUDED_FILE = Path(__file__).with_name("mcp_conformance_excluded.toml")
SERVER_FILE = Path(__file__).with_name("mcp_conformance_server.py")
REQUIRE = "EXECUTOR_REQUIRE_MCP_CONFORMANCE"
# Per scenario; the suite's own default is 30 s. A whole era takes about 5 s.
SCENARIO_TIMEOUT_MS = 15_000
RUN_TIMEOUT = 100
# The folder the suite saves a scenario's checks.json in: server-NAME-TIMESTAMP.
RESULT_DIR = re.compile(r"server-(?P<name>.+)-\d{4}-\d\d-\d\dT\d\d-\d\d-\d\d-\d{3}Z")
# A line of `conformance list --server`: "  - NAME [VERSION,VERSION]".
LISTED = re.compile(r"\s+- (?P<name>\S+) \[(?P<versions>[^\]]*)\]")


def suite_command() -> list[str] | None:
    """The command that runs the suite ($EXECUTOR_MCP_CONFORMANCE), if there is one."""
    command = shlex.split(os.environ.get("EXECUTOR_MCP_CONFORMANCE", ""))
    return command or None


def require_suite() -> list[str]:
    """The suite's command: skips without it, fails instead under EXECUTOR_REQUIRE_*."""
    command = suite_command()
    if command is None:
        message = "EXECUTOR_MCP_CONFORMANCE is not set (.ci/services/mcp_conformance.sh sets it)"
        if os.environ.get(REQUIRE, "") not in ("", "0"):
            pytest.fail(f"{REQUIRE} is set, but {message}")
        pytest.skip(message)
    return command


def list_scenarios() -> tuple[dict[str, list[str]], str]:
    """The suite's server scenarios of each era, and what went wrong if it could not say."""
    command = suite_command()
    if command is None:
        return {}, ""
    try:
        listed = subprocess.run(
            [*command, "list", "--server"], capture_output=True, text=True, timeout=60
        )
    except OSError as error:
        return {}, f"{shlex.join(command)}: {error}"
    if listed.returncode != 0:
        return {}, f"`{shlex.join(command)} list --server` said:\n{listed.stdout}{listed.stderr}"
    eras: dict[str, list[str]] = {era: [] for era in ERAS}
    for line in listed.stdout.splitlines():
        match = LISTED.fullmatch(line)
        if match is None:
            continue
        versions = match["versions"].split(",")
        for era in ERAS:
            if era in versions:
                eras[era].append(match["name"])
    if not all(eras.values()):
        return {}, f"no scenarios for an era in:\n{listed.stdout}"
    return eras, ""


@dataclass(frozen=True)
class Exclusions:
    """tests/mcp_conformance_excluded.toml: scenarios and checks not held, expected failures."""

    scenarios: dict[str, str]
    checks: dict[tuple[str, str], str]
    xfail: dict[str, tuple[str, list[str]]]

    @classmethod
    def load(cls) -> Exclusions:
        data = tomllib.loads(EXCLUDED_FILE.read_text())
        checks: dict[tuple[str, str], str] = {}
        for key, reason in data.get("checks", {}).items():
            scenario, _, check = key.partition("/")
            checks[scenario, check] = reason
        xfail: dict[str, tuple[str, list[str]]] = {}
        for scenario, value in data.get("xfail", {}).items():
            if isinstance(value, str):
                xfail[scenario] = (value, list(ERAS))
            else:
                xfail[scenario] = (value["reason"], list(value.get("eras", ERAS)))
        return cls(dict(data.get("scenarios", {})), checks, xfail)


EXCLUSIONS = Exclusions.load()
SCENARIOS, LIST_ERROR = list_scenarios()


def scenario_params() -> list[Any]:
    """(era, scenario) for each server scenario of each era, with the marks the file gives."""
    params: list[Any] = []
    for era in ERAS:
        if not SCENARIOS:
            # One test per era that skips (or fails) saying why there are none.
            params.append(pytest.param(era, "", id=f"{era}-suite"))
            continue
        for scenario in SCENARIOS[era]:
            marks: list[pytest.MarkDecorator] = []
            if scenario in EXCLUSIONS.scenarios:
                reason = EXCLUSIONS.scenarios[scenario]
                marks.append(pytest.mark.skip(reason=f"excluded: {reason}"))
            elif scenario in EXCLUSIONS.xfail and era in EXCLUSIONS.xfail[scenario][1]:
                marks.append(pytest.mark.xfail(strict=True, reason=EXCLUSIONS.xfail[scenario][0]))
            params.append(pytest.param(era, scenario, id=f"{era}-{scenario}", marks=marks))
    return params


@dataclass
class EraRun:
    """One run of the suite against one server: each scenario's checks, and the logs."""

    era: str
    checks: dict[str, list[dict[str, Any]]]
    output: str
    returncode: int
    server_log: str
    server_alive: bool
    server_exit: int | None

    def scenario_output(self, scenario: str) -> str:
        """What the suite printed while it ran `scenario`."""
        marker = f"=== Running scenario: {scenario} ==="
        if marker not in self.output:
            return self.output[-4000:]
        return self.output.split(marker, 1)[1].split("=== Running scenario:", 1)[0]


def start_server(workdir: Path, log: Path) -> tuple[subprocess.Popen[bytes], str]:
    """tests/mcp_conformance_server.py on 127.0.0.1 with a free port, and its URL."""
    env = dict(os.environ)
    env.pop("EXECUTOR_MCP_TOKEN", None)
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, str(SERVER_FILE), "--port", "0", "--workdir", str(workdir)],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
        )
    deadline = time.monotonic() + 60
    while True:
        said = log.read_text(errors="replace")
        found = re.search(r"serving on (http://127\.0\.0\.1:\d+/\S*)", said)
        if found:
            return process, found[1]
        if process.poll() is not None or time.monotonic() > deadline:
            stop_server(process)
            pytest.fail(f"the server did not start (exit code {process.returncode}):\n{said}")
        time.sleep(0.05)


def stop_server(process: subprocess.Popen[bytes]) -> int:
    """Its exit code after SIGTERM (it stops by itself), or after SIGKILL at 30 s."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    try:
        return process.wait(30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        return -signal.SIGKILL


def run_era(command: list[str], era: str, folder: Path) -> EraRun:
    """Every server scenario of `era` against a server started for the purpose."""
    workdir, results = folder / "workdir", folder / "results"
    workdir.mkdir()
    process, url = start_server(workdir, folder / "server.log")
    try:
        suite = subprocess.run(
            [
                *command,
                *("server", "--url", url, "--suite", "all", "--spec-version", era),
                *("--output-dir", str(results), "--timeout", str(SCENARIO_TIMEOUT_MS)),
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            timeout=RUN_TIMEOUT,
        )
        output, returncode = suite.stdout.decode(errors="replace"), suite.returncode
    except subprocess.TimeoutExpired as timeout:
        # Killed (the command execs node): the scenarios it finished saved their checks.
        output = (timeout.stdout or b"").decode(errors="replace")
        output += f"\n[the suite was killed after {RUN_TIMEOUT} s]"
        returncode = -signal.SIGKILL
    finally:
        alive = process.poll() is None
        exit_code = stop_server(process)
    checks: dict[str, list[dict[str, Any]]] = {}
    for saved in sorted(results.glob("*/checks.json")):
        match = RESULT_DIR.fullmatch(saved.parent.name)
        assert match is not None, saved
        checks[match["name"]] = json.loads(saved.read_text())
    return EraRun(
        era=era,
        checks=checks,
        output=output,
        returncode=returncode,
        server_log=(folder / "server.log").read_text(errors="replace"),
        server_alive=alive,
        server_exit=exit_code,
    )


class Runs:
    """The suite's run of each era, made when a test first asks for it."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.runs: dict[str, EraRun] = {}
        self.broken: dict[str, str] = {}

    def of(self, era: str) -> EraRun:
        command = require_suite()
        if LIST_ERROR:
            pytest.fail(f"the suite did not list its scenarios: {LIST_ERROR}")
        if era in self.broken:
            pytest.fail(f"the run of {era} failed: {self.broken[era]}")
        if era not in self.runs:
            folder = self.folder / era
            folder.mkdir()
            try:
                self.runs[era] = run_era(command, era, folder)
            except (Exception, pytest.fail.Exception) as error:
                self.broken[era] = str(error)
                raise
        return self.runs[era]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    return Runs(tmp_path_factory.mktemp("mcp-conformance"))


def describe(check: dict[str, Any]) -> str:
    """A check as the suite prints a failed one, with its id."""
    said = f"  - {check.get('name')}: {check.get('description')} [{check.get('id')}]"
    if check.get("errorMessage"):
        said += f"\n    Error: {check['errorMessage']}"
    return said


@pytest.mark.parametrize(("era", "scenario"), scenario_params())
def test_scenario(runs: Runs, era: str, scenario: str) -> None:
    """One server scenario of the suite, in one era: no check of it fails."""
    run = runs.of(era)
    checks = run.checks.get(scenario)
    if checks is None:
        pytest.fail(
            f"the suite saved no checks for {scenario} (exit code {run.returncode}); it said:\n"
            + run.scenario_output(scenario)
        )
    failed = [
        check
        for check in checks
        if check.get("status") == "FAILURE" and (scenario, check.get("id")) not in EXCLUSIONS.checks
    ]
    if failed:
        warnings = [check for check in checks if check.get("status") == "WARNING"]
        pytest.fail(
            f"{scenario} at {era}: {len(failed)} of {len(checks)} checks failed:\n"
            + "\n".join(map(describe, failed))
            + ("\nwarnings:\n" + "\n".join(map(describe, warnings)) if warnings else "")
        )


@pytest.mark.parametrize("era", ERAS)
def test_server_serves_the_whole_run(runs: Runs, era: str) -> None:
    """The server was still up when the suite ended, and stopped cleanly on SIGTERM."""
    run = runs.of(era)
    assert run.server_alive, f"the server ended during the run:\n{run.server_log}"
    assert run.server_exit == 0, run.server_log
    # Every scenario the suite listed was run (those that threw left no checks).
    assert sorted(run.checks) == sorted(SCENARIOS[era]), run.output[-4000:]


def test_exclusions_name_scenarios_of_the_suite() -> None:
    """Each name in tests/mcp_conformance_excluded.toml is a server scenario of the suite."""
    require_suite()
    if LIST_ERROR:
        pytest.fail(f"the suite did not list its scenarios: {LIST_ERROR}")
    known = {scenario for era in ERAS for scenario in SCENARIOS[era]}
    named = {
        *EXCLUSIONS.scenarios,
        *EXCLUSIONS.xfail,
        *(scenario for scenario, _ in EXCLUSIONS.checks),
    }
    assert sorted(named - known) == []
    reasons = [
        *EXCLUSIONS.scenarios.values(),
        *EXCLUSIONS.checks.values(),
        *(reason for reason, _ in EXCLUSIONS.xfail.values()),
    ]
    assert all(reason.strip() and "\n" not in reason for reason in reasons)
    assert not set(EXCLUSIONS.scenarios) & set(EXCLUSIONS.xfail)
    for _, eras in EXCLUSIONS.xfail.values():
        assert set(eras) <= set(ERAS)


def call_logging_fixture(url: str, level: str | None) -> list[dict[str, Any]]:
    """The messages of a 2026-07-28 call of test_logging_tool, its `_meta` asking for `level`."""
    era = "2026-07-28"
    meta: dict[str, Any] = {
        "io.modelcontextprotocol/protocolVersion": era,
        "io.modelcontextprotocol/clientInfo": {"name": "test_mcp_conformance", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    if level is not None:
        meta["io.modelcontextprotocol/logLevel"] = level
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "test_logging_tool", "arguments": {}, "_meta": meta},
    }
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        headers={
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": era,
            "Mcp-Method": "tools/call",
            "Mcp-Name": "test_logging_tool",
        },
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        text = response.read().decode()
        if "text/event-stream" not in response.headers.get("content-type", ""):
            return [json.loads(text)]
    return [json.loads(line[5:]) for line in text.splitlines() if line.startswith("data:")]


def test_logging_fixture_logs_at_the_level_asked(tmp_path: Path) -> None:
    """test_logging_tool's command runs, and is logged at the level asked and above only.

    The suite's sep-2575-server-no-log-without-loglevel calls it without a
    level and wants no notifications/message: this is the same call asking for
    one, which must get the command's log messages (started at info, finished
    at debug), so that the silence the suite sees is the server's filter.
    """
    workdir = tmp_path / "workdir"
    workdir.mkdir()
    process, url = start_server(workdir, tmp_path / "server.log")
    try:
        said = {
            level: call_logging_fixture(url, level) for level in (None, "debug", "info", "notice")
        }
    finally:
        assert stop_server(process) == 0, (tmp_path / "server.log").read_text()
    for level, messages in said.items():
        *notes, last = messages
        assert last["result"]["structuredContent"]["exit_code"] == 0, (level, messages)
        logged = [
            (note["params"]["level"], note["params"]["logger"], note["params"]["data"]["event"])
            for note in notes
            if note.get("method") == "notifications/message"
        ]
        expected = {
            None: [],
            "debug": [("info", "executor", "started"), ("debug", "executor", "finished")],
            "info": [("info", "executor", "started")],
            "notice": [],
        }[level]
        assert logged == expected, (level, messages)
