"""Approval, secrets and audit policies, alone, composed, and against the contract."""

from __future__ import annotations

import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from executor import Command, LocalExecutor, NonZeroExit, PolicyDenied, TimedOut, ToolExecutor
from executor._core.output import Chunk, Stdout
from executor._policies.policies import (
    Approval,
    ApprovalRequest,
    Audit,
    AuditEvent,
    AuditRecord,
    Secrets,
    describe,
)
from executor._policies.verdict import Verdict
from executor.testing import ExecutorContract, FakeExecutor, ReadOnlyContract

pytestmark = pytest.mark.anyio


async def approve(request: ApprovalRequest) -> bool:
    """An approver that says yes to everything."""
    return True


class TestApprovalContract(ExecutorContract):
    """Approval that always approves keeps the whole contract."""

    @pytest.fixture
    async def executor(self, tmp_path: Path) -> AsyncIterator[ToolExecutor]:
        """An approving Approval over a LocalExecutor."""
        async with Approval(LocalExecutor(tmp_path, kill_grace=0.2), approve) as executor:
            yield executor


class TestSecretsContract(ExecutorContract):
    """Secrets keeps the whole contract."""

    @pytest.fixture
    async def executor(self, tmp_path: Path) -> AsyncIterator[ToolExecutor]:
        """A Secrets over a LocalExecutor, with a value to redact."""
        inner = LocalExecutor(tmp_path, kill_grace=0.2)
        async with Secrets(inner, redact=["not-in-any-output-0123"]) as executor:
            yield executor


class TestAuditContract(ExecutorContract):
    """Audit keeps the whole contract."""

    @pytest.fixture
    async def executor(self, tmp_path: Path) -> AsyncIterator[ToolExecutor]:
        """An Audit over a LocalExecutor, recording into a list."""
        records: list[AuditRecord] = []
        async with Audit(LocalExecutor(tmp_path, kill_grace=0.2), records.append) as executor:
            yield executor


class TestScopedContract(ExecutorContract):
    """A ScopedExecutor keeps the whole contract inside its scope."""

    @pytest.fixture
    async def executor(self, tmp_path: Path) -> AsyncIterator[ToolExecutor]:
        """A LocalExecutor scoped to a subfolder."""
        (tmp_path / "scope").mkdir()
        async with LocalExecutor(tmp_path, kill_grace=0.2).scoped("scope") as executor:
            yield executor


class TestStackContract(ExecutorContract):
    """The policies stacked together keep the whole contract."""

    @pytest.fixture
    async def executor(self, tmp_path: Path) -> AsyncIterator[ToolExecutor]:
        """Audit(Approval(Secrets(Scoped(LocalExecutor))))."""
        (tmp_path / "s").mkdir()
        records: list[AuditRecord] = []
        stack = (
            LocalExecutor(tmp_path, kill_grace=0.2)
            .scoped("s")
            .with_policy(Secrets)
            .with_policy(Approval, approve)
            .with_policy(Audit, records.append)
        )
        async with stack as executor:
            yield executor


# --- approval -------------------------------------------------------------------------


@pytest.fixture
async def local(tmp_path: Path) -> AsyncIterator[LocalExecutor]:
    """A LocalExecutor in an empty folder."""
    async with LocalExecutor(tmp_path, kill_grace=0.2) as executor:
        yield executor


async def test_approval_sees_the_command_and_can_deny(local: LocalExecutor, tmp_path: Path) -> None:
    """A denial raises PolicyDenied with the approver's reason, and the command does not run."""
    asked: list[ApprovalRequest] = []

    async def approver(request: ApprovalRequest) -> Verdict:
        asked.append(request)
        return Verdict(False, "pushing is not allowed today")

    guarded = Approval(local, approver)
    with pytest.raises(PolicyDenied, match="pushing is not allowed today") as caught:
        await guarded.exec_cmd(Command.shell("touch pushed"))
    assert "touch pushed" in str(caught.value)
    assert asked[0].description == "touch pushed"
    assert not (tmp_path / "pushed").exists()


async def test_approval_applies_to_streaming(local: LocalExecutor, tmp_path: Path) -> None:
    """Streaming goes through the approver too."""

    async def deny(request: ApprovalRequest) -> bool:
        return False

    with pytest.raises(PolicyDenied):
        await Approval(local, deny).exec_cmd_streaming(Command.shell("touch x"), lambda c: None)
    assert not (tmp_path / "x").exists()


async def test_approval_timeout_denies_by_default(local: LocalExecutor) -> None:
    """An approver that does not answer in time denies, by default."""

    async def slow(request: ApprovalRequest) -> bool:
        await anyio.sleep(10)
        return True

    started = time.monotonic()
    with pytest.raises(PolicyDenied, match=r"no approval came within 0\.2 s"):
        await Approval(local, slow, timeout=0.2).exec_cmd(Command.shell("echo hi"))
    assert time.monotonic() - started < 5


async def test_approval_timeout_can_approve(local: LocalExecutor) -> None:
    """With on_timeout='approve', an approver that does not answer lets the command run."""

    async def slow(request: ApprovalRequest) -> bool:
        await anyio.sleep(10)
        return False

    guarded = Approval(local, slow, timeout=0.1, on_timeout="approve")
    assert (await guarded.exec_cmd(Command.shell("echo hi"))).stdout == b"hi\n"


async def test_approval_skips_reads_by_default(local: LocalExecutor, tmp_path: Path) -> None:
    """read_file needs no approval by default; `ask` chooses which commands do."""
    (tmp_path / "f").write_text("content")

    async def deny(request: ApprovalRequest) -> bool:
        return False

    assert (await Approval(local, deny).exec_cmd(Command.read_file("f"))).stdout == b"content"
    only_rm = Approval(local, deny, ask=lambda cmd: "rm" in describe(cmd))
    assert (await only_rm.exec_cmd(Command.shell("echo ok"))).stdout == b"ok\n"
    with pytest.raises(PolicyDenied):
        await only_rm.exec_cmd(Command.shell("rm f"))


async def test_approval_without_an_answer_denies(local: LocalExecutor) -> None:
    """An approver that returns nothing denies, saying so."""

    async def silent(request: ApprovalRequest) -> bool:
        return None  # type: ignore[return-value]

    with pytest.raises(PolicyDenied, match="gave no answer"):
        await Approval(local, silent).exec_cmd(Command.shell("echo hi"))


def test_approval_rejects_bad_settings() -> None:
    """on_timeout and timeout are checked when the policy is built."""
    with pytest.raises(ValueError, match="on_timeout"):
        Approval(FakeExecutor(), approve, on_timeout="maybe")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="timeout"):
        Approval(FakeExecutor(), approve, timeout=0)


# --- secrets --------------------------------------------------------------------------


async def test_secrets_drop_credential_variables(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Variables that look like credentials are dropped, unless kept or set by the command."""
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_example_token_value")
    monkeypatch.setenv("openai_api_key", "sk-example-key-value")
    monkeypatch.setenv("DB_PASSWORD", "hunter2-password")
    monkeypatch.setenv("HARMLESS", "visible")
    async with LocalExecutor(tmp_path) as local:
        guarded = Secrets(local, keep=["DB_PASSWORD"])
        cmd = Command.exec(["env"]).with_env({"MY_SECRET": "given-by-the-tool"})
        output = await guarded.exec_cmd(cmd)
    names = {line.split("=", 1)[0] for line in output.stdout.decode().splitlines()}
    assert "GITHUB_TOKEN" not in names
    assert "openai_api_key" not in names
    assert {"DB_PASSWORD", "HARMLESS", "MY_SECRET"} <= names


async def test_secrets_redact_output(local: LocalExecutor) -> None:
    """Known secret values are redacted from output, errors and what the sink sees."""
    guarded = Secrets(local, redact=["s3cr3t-value"], redact_environment=False)
    seen: list[Chunk] = []
    script = "printf 's3cr3t'; sleep 0.05; printf -- '-value and more'; echo s3cr3t-value >&2"
    output = await guarded.exec_cmd_streaming(Command.shell(script), seen.append)
    assert output.stdout == b"[REDACTED] and more"
    assert output.stderr == b"[REDACTED]\n"
    assert b"".join(c.data for c in seen if isinstance(c, Stdout)) == b"[REDACTED] and more"
    with pytest.raises(NonZeroExit) as caught:
        await guarded.exec_cmd(Command.shell("echo s3cr3t-value; exit 2"))
    assert caught.value.output.stdout == b"[REDACTED]\n"
    assert "s3cr3t" not in str(caught.value)


async def test_secrets_redact_environment_values(
    local: LocalExecutor, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The values of this process's credential variables are redacted by default."""
    monkeypatch.setenv("SERVICE_TOKEN", "tok-abcdef-123456")
    guarded = Secrets(local)
    output = await guarded.exec_cmd(Command.shell("echo tok-abcdef-123456"))
    assert output.stdout == b"[REDACTED]\n"


async def test_secrets_partial_prefix_is_released(local: LocalExecutor) -> None:
    """Output that only looks like the start of a secret comes through whole at the end."""
    guarded = Secrets(local, redact=["abcdefgh"], redact_environment=False)
    output = await guarded.exec_cmd(Command.shell("printf 'xx abcd'"))
    assert output.stdout == b"xx abcd"


# --- audit ----------------------------------------------------------------------------


async def test_audit_records_start_and_end(local: LocalExecutor) -> None:
    """Each command gives a START and an END record with exit code and duration."""
    records: list[AuditRecord] = []
    audited = Audit(local, records.append)
    await audited.exec_cmd(Command.shell("echo hi"))
    with pytest.raises(NonZeroExit):
        await audited.exec_cmd(Command.shell("exit 3"))
    with pytest.raises(TimedOut):
        await audited.exec_cmd(Command.shell("sleep 5").with_timeout(0.1))
    assert [(r.event, r.outcome, r.exit_code) for r in records] == [
        (AuditEvent.START, None, None),
        (AuditEvent.END, "ok", 0),
        (AuditEvent.START, None, None),
        (AuditEvent.END, "nonzero", 3),
        (AuditEvent.START, None, None),
        (AuditEvent.END, "timeout", 128 + signal.SIGTERM),
    ]
    ends = [r for r in records if r.event is AuditEvent.END]
    assert all(r.duration is not None and r.duration >= 0 for r in ends)
    assert records[-1].as_dict()["command"] == "sleep 5"


async def test_audit_records_denials_below_it(local: LocalExecutor) -> None:
    """A refusal by a policy inside the audit is recorded as DENIED with its reason."""
    records: list[AuditRecord] = []

    async def awaited(record: AuditRecord) -> None:
        records.append(record)

    audited = Audit(local.read_only(), awaited)
    with pytest.raises(PolicyDenied):
        await audited.exec_cmd(Command.write_file("x", "y"))
    assert [r.event for r in records] == [AuditEvent.START, AuditEvent.DENIED]
    assert records[1].message is not None
    assert "read-only" in records[1].message


async def test_audit_records_cancellation(local: LocalExecutor) -> None:
    """A cancelled command still gets its END record."""
    records: list[AuditRecord] = []
    with anyio.move_on_after(0.2):
        await Audit(local, records.append).exec_cmd(Command.shell("sleep 5"))
    assert [(r.event, r.outcome) for r in records] == [
        (AuditEvent.START, None),
        (AuditEvent.END, "cancelled"),
    ]


async def test_failing_recorder_stops_the_command(local: LocalExecutor, tmp_path: Path) -> None:
    """An audit that cannot record its START refuses to run the command."""

    def broken(record: AuditRecord) -> None:
        raise OSError("audit log unavailable")

    with pytest.raises(OSError, match="audit log unavailable"):
        await Audit(local, broken).exec_cmd(Command.shell("touch ran"))
    assert not (tmp_path / "ran").exists()


# --- composition ----------------------------------------------------------------------


async def test_policies_compose_in_any_order(local: LocalExecutor, tmp_path: Path) -> None:
    """Stacked either way, every policy still applies, and repr shows the chain."""
    (tmp_path / "docs").mkdir()
    records: list[AuditRecord] = []
    asked: list[str] = []

    async def approver(request: ApprovalRequest) -> bool:
        asked.append(request.description)
        return "forbidden" not in request.description

    one = Audit(
        Approval(Secrets(local.scoped("docs"), redact=["hidden-value"]), approver), records.append
    )
    two = Secrets(
        Approval(Audit(local.scoped("docs"), records.append), approver), redact=["hidden-value"]
    )
    for stack in (one, two):
        output = await stack.exec_cmd(Command.shell("pwd; echo hidden-value"))
        assert output.stdout == f"{tmp_path / 'docs'}\n[REDACTED]\n".encode()
        with pytest.raises(PolicyDenied):
            await stack.exec_cmd(Command.shell("echo forbidden"))
    assert (
        repr(one)
        == f"Audit(Approval(Secrets(ScopedExecutor(LocalExecutor({str(tmp_path)!r}), 'docs'))))"
    )
    assert len(asked) == 4
    assert sum(r.event is AuditEvent.END for r in records) == 2


async def test_with_policy_chains(local: LocalExecutor) -> None:
    """with_policy wraps left to right, passing the arguments on."""
    records: list[AuditRecord] = []
    stack = local.with_policy(Secrets, redact=["zzz-secret"]).with_policy(Audit, records.append)
    assert isinstance(stack, Audit)
    assert isinstance(stack.inner, Secrets)
    assert (await stack.exec_cmd(Command.shell("echo zzz-secret"))).stdout == b"[REDACTED]\n"
    assert len(records) == 2


# --- the fake executor ----------------------------------------------------------------


async def test_fake_executor() -> None:
    """FakeExecutor answers from its handler and its in-memory files, and records calls."""

    def handler(cmd: Command) -> str | None:
        return "3\n" if describe(cmd).startswith("wc") else None

    fake = FakeExecutor(handler, files={"src/a.py": "print(1)\n", "src/b.bin": b"\0"})
    assert (await fake.exec_cmd(Command.shell("wc -l a"))).stdout == b"3\n"
    with pytest.raises(NonZeroExit) as caught:
        await fake.exec_cmd(Command.shell("ls"))
    assert caught.value.output.exit_code == 127
    await fake.exec_cmd(Command.write_file("notes.md", "hi"))
    assert (await fake.exec_cmd(Command.read_file("notes.md"))).stdout == b"hi"
    with pytest.raises(NonZeroExit):
        await fake.exec_cmd(Command.read_file("missing"))
    assert [f.path async for f in fake.stream_files("src")] == ["src/a.py"]
    assert len(fake.calls) == 5
    async with fake.scoped("src") as scoped:
        assert (await scoped.exec_cmd(Command.read_file("a.py"))).stdout == b"print(1)\n"
    assert fake.closed


class TestReadOnlyContract(ReadOnlyContract):
    """ReadOnly over a LocalExecutor keeps the read-only contract."""

    @pytest.fixture
    async def writer(self, tmp_path: Path) -> AsyncIterator[ToolExecutor]:
        """A LocalExecutor that may write, to set up files."""
        async with LocalExecutor(tmp_path) as executor:
            yield executor

    @pytest.fixture
    async def executor(self, tmp_path: Path) -> AsyncIterator[ToolExecutor]:
        """ReadOnly over a LocalExecutor on the same folder."""
        async with LocalExecutor(tmp_path).read_only() as executor:
            yield executor


@pytest.mark.parametrize("policy", ["secrets", "observed"])
async def test_a_watching_policy_keeps_what_its_caller_would(tmp_path: Path, policy: str) -> None:
    """A policy that watches output on its way (redacts, observes) keeps the caller's amount.

    `exec_cmd` through it keeps `output_limit` whole, as the bare executor
    does, though the policy streams from the executor it wraps; only a
    caller's own stream keeps `stream_output_limit`.
    """
    from executor import Observed

    script = "head -c 3000000 /dev/zero | tr '\\0' 'x'"
    inner = LocalExecutor(tmp_path, stream_output_limit=1 << 20)
    wrapped: ToolExecutor = (
        Secrets(inner, redact=["a-secret-value"]) if policy == "secrets" else Observed(inner, print)
    )
    seen: list[bytes] = []
    async with wrapped:
        whole = await wrapped.exec_cmd(Command.shell(script))
        streamed = await wrapped.exec_cmd_streaming(
            Command.shell(script), lambda chunk: seen.append(chunk.data)
        )
    assert not whole.truncated
    assert whole.stdout == b"x" * 3_000_000
    assert b"".join(seen) == b"x" * 3_000_000
    assert streamed.truncated
    assert len(streamed.stdout) == 1 << 20
