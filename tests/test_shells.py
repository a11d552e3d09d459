"""Persistent shells and background jobs: the contract on every backend, and the rest locally.

`ShellContract` runs on a bare LocalExecutor, both sandboxes, Docker through
its helper and by engine exec (busybox images: the shell there is `sh`), and
SSH (bash). The Docker and SSH classes skip without their services, and fail
instead under `EXECUTOR_REQUIRE_DOCKER=1` / `EXECUTOR_REQUIRE_SSH=1`.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest
from conftest import alive, interpreter_sandbox, tagged_processes
from docker_engine import (
    BUSYBOX_IMAGE,
    labelled_container,
)
from ssh_server import SshServer

from executor import (
    Approval,
    ApprovalRequest,
    Audit,
    AuditEvent,
    AuditRecord,
    Chunk,
    Command,
    CommandEvent,
    CommandFinished,
    CommandRules,
    CommandStarted,
    DangerousCommands,
    DockerExecutor,
    ExecutorError,
    JobState,
    LocalExecutor,
    NonZeroExit,
    Observed,
    PersistentShell,
    PolicyDenied,
    ReadOnly,
    Secrets,
    ShellOutput,
    TimedOut,
    ToolExecutor,
)
from executor.testing import LocalFixtures, ShellContract

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    """Asyncio for this module: the contract on a LocalExecutor runs on trio too."""
    return "asyncio"


class TestLocalShell(ShellContract, LocalFixtures):
    """A bare LocalExecutor, on asyncio and trio."""

    @pytest.fixture(params=["asyncio", "trio"])
    def anyio_backend(self, request: pytest.FixtureRequest) -> str:
        """Both async backends."""
        return str(request.param)


class _AsyncioOnly:
    """The other backends run the contract on asyncio alone: trio's turn is the local one."""


class TestBubblewrapShell(_AsyncioOnly, ShellContract):
    """A LocalExecutor sandboxed by bubblewrap."""

    @pytest.fixture
    async def executor(self, tmp_path: Path) -> AsyncIterator[ToolExecutor]:
        """A sandboxed LocalExecutor in an empty folder."""
        async with LocalExecutor(
            tmp_path, kill_grace=0.2, sandbox=interpreter_sandbox("bubblewrap")
        ) as ex:
            yield ex


class TestLandlockShell(_AsyncioOnly, ShellContract):
    """A LocalExecutor sandboxed by Landlock."""

    @pytest.fixture
    async def executor(self, tmp_path: Path) -> AsyncIterator[ToolExecutor]:
        """A sandboxed LocalExecutor in an empty folder."""
        async with LocalExecutor(
            tmp_path, kill_grace=0.2, sandbox=interpreter_sandbox("landlock")
        ) as ex:
            yield ex


class TestDockerHelperShell(_AsyncioOnly, ShellContract):
    """A DockerExecutor whose sessions run through its in-container helper."""

    @pytest.fixture
    async def executor(self, python_container: str) -> AsyncIterator[ToolExecutor]:
        """A DockerExecutor on the shared container, in a new folder."""
        workdir = f"/workspace/{uuid.uuid4().hex}"
        async with DockerExecutor(
            container=python_container, workdir=workdir, kill_grace=0.2
        ) as ex:
            yield ex


class TestDockerExecShell(_AsyncioOnly, ShellContract):
    """A DockerExecutor whose sessions are engine execs."""

    @pytest.fixture
    async def executor(self, busybox_container: str) -> AsyncIterator[ToolExecutor]:
        """A DockerExecutor on the shared busybox container, in a new folder."""
        workdir = f"/workspace/{uuid.uuid4().hex}"
        async with DockerExecutor(
            container=busybox_container, workdir=workdir, kill_grace=0.2
        ) as ex:
            yield ex


class TestSshShell(_AsyncioOnly, ShellContract):
    """An SshExecutor against a real sshd (asyncssh has no trio support)."""

    @pytest.fixture
    async def executor(self, ssh_server: SshServer) -> AsyncIterator[ToolExecutor]:
        """An SshExecutor in a new remote folder."""
        async with ssh_server.executor(kill_grace=0.2) as ex:
            yield ex


# --- login shells -----------------------------------------------------------------------


async def test_login_shell_reads_etc_profile_in_a_container() -> None:
    """`login=True` in a container sees a variable /etc/profile exports; a plain shell does not."""
    with labelled_container(BUSYBOX_IMAGE) as container, anyio.fail_after(60):
        async with DockerExecutor(container=container, workdir="/tmp") as ex:
            await ex.exec_cmd(
                Command.shell("echo 'export FROM_PROFILE=etc-profile' >> /etc/profile")
            )
            async with ex.shell(login=True) as login, ex.shell() as plain:
                seen = await login.run('echo "[$FROM_PROFILE]"')
                unseen = await plain.run('echo "[$FROM_PROFILE]"')
    assert seen.stdout == b"[etc-profile]\n"
    assert unseen.stdout == b"[]\n"


async def test_login_shell_reads_the_profile_over_ssh(ssh_server: SshServer) -> None:
    """Over SSH, `login=True` reads the user's profile (bash --login), a plain shell does not.

    The SSH host is this machine, whose /etc/profile is not ours to change:
    the test user's profile file stands in for it.
    """
    async with ssh_server.executor(kill_grace=0.2) as ex:
        home = (await ex.exec_cmd(Command.shell('printf %s "$HOME"'))).stdout.decode()
        profile = f"{home}/.bash_profile"
        await ex.exec_cmd(Command.shell(f"echo 'export FROM_PROFILE=user-profile' > {profile}"))
        try:
            with anyio.fail_after(30):
                async with ex.shell(login=True) as login, ex.shell() as plain:
                    seen = await login.run('echo "[$FROM_PROFILE]"')
                    unseen = await plain.run('echo "[$FROM_PROFILE]"')
        finally:
            await ex.exec_cmd(Command.shell(f"rm -f {profile}"))
    assert seen.stdout == b"[user-profile]\n"
    assert unseen.stdout == b"[]\n"


async def test_login_shell_locally_is_a_login_bash(ex: LocalExecutor) -> None:
    """Locally `login=True` runs `bash --login` (shopt login_shell), the default does not."""
    async with ex.shell(login=True) as login, ex.shell() as plain:
        assert (await login.run("shopt -q login_shell && echo login")).stdout == b"login\n"
        with pytest.raises(NonZeroExit):
            await plain.run("shopt -q login_shell")


# --- local behaviours -------------------------------------------------------------------


async def test_nothing_runs_before_entering_and_nothing_after_closing(tmp_path: Path) -> None:
    """A shell not entered refuses to run; a closed one too; a second close is harmless."""
    async with LocalExecutor(tmp_path) as ex:
        sh = ex.shell()
        with pytest.raises(ExecutorError, match="enter the shell first"):
            await sh.run("true")
        async with sh:
            pid = sh.pid
            assert pid is not None
            assert alive(pid)
        await sh.aclose()
        with pytest.raises(ExecutorError, match="closed"):
            await sh.run("true")
        assert not alive(pid)


async def test_cwd_and_env_at_start(tmp_path: Path) -> None:
    """`cwd` (relative to the workdir) and `env` set where and with what the shell starts."""
    (tmp_path / "start").mkdir()
    async with (
        LocalExecutor(tmp_path) as ex,
        ex.shell(cwd="start", env={"STARTVAR": "s"}) as sh,
    ):
        output = await sh.run('pwd; echo "$STARTVAR"')
    assert output.stdout == f"{tmp_path / 'start'}\n s\n".replace("\n ", "\n").encode()


async def test_the_class_builds_the_shell_as_ex_shell_does(tmp_path: Path) -> None:
    """`PersistentShell(ex, ...)` is the shell `ex.shell(...)` gives, options and all."""
    (tmp_path / "start").mkdir()
    async with (
        LocalExecutor(tmp_path) as ex,
        PersistentShell(ex, cwd="start", env={"STARTVAR": "s"}) as sh,
    ):
        assert isinstance(sh, PersistentShell)
        assert type(sh) is type(ex.shell())
        output = await sh.run('pwd; echo "$STARTVAR"')
    assert output.stdout == f"{tmp_path / 'start'}\ns\n".encode()


async def test_the_executor_output_cap_applies_to_each_run(tmp_path: Path) -> None:
    """A run's output past `output_limit` is cut in the middle and marked."""
    async with LocalExecutor(tmp_path, output_limit=1000) as ex, ex.shell() as sh:
        output = await sh.run("seq 1 10000")
        small = await sh.run("echo small")
    assert output.truncated
    assert output.elided is not None
    assert len(output.stdout) == 1000
    assert output.elided.marker() in output.text()
    assert small.stdout == b"small\n"
    assert not small.truncated


async def test_default_timeout_applies_to_runs(tmp_path: Path) -> None:
    """The executor's `default_timeout` bounds a run that gives none."""
    async with LocalExecutor(tmp_path, default_timeout=0.3, kill_grace=0.2) as ex, ex.shell() as sh:
        with pytest.raises(TimedOut):
            await sh.run("sleep 5")
        assert (await sh.run("echo ok")).stdout == b"ok\n"


async def test_a_wedged_shell_is_replaced(tmp_path: Path) -> None:
    """A command that holds out against INT and TERM costs the shell; the next run is fresh."""
    async with LocalExecutor(tmp_path, kill_grace=0.2) as ex, ex.shell() as sh:
        await sh.run("export GONE=1")
        first = sh.pid
        with anyio.fail_after(10), pytest.raises(TimedOut):
            await sh.run("trap '' INT TERM; while :; do :; done", timeout=0.3)
        output = await sh.run('echo "[$GONE]"')
        assert (output.stdout, output.state_lost) == (b"[]\n", True)
        assert first is not None
        assert not alive(first)
        assert sh.pid != first


async def test_an_interrupted_loop_does_not_go_on(ex: LocalExecutor, tmp_path: Path) -> None:
    """An interrupt stops the rest of the command (the loop), not just the program running."""
    async with ex.shell() as sh:
        with pytest.raises(TimedOut):
            await sh.run("for i in 1 2 3 4 5; do sleep 1; echo $i >> count; done", timeout=0.3)
        await anyio.sleep(1.5)
        assert not (tmp_path / "count").exists()
        assert not (await sh.run("echo x")).state_lost


async def test_a_failing_sink_interrupts_and_propagates(ex: LocalExecutor) -> None:
    """An exception in the sink interrupts the command and reaches the caller; the shell stays."""

    class Stop(Exception):
        pass

    def sink(chunk: Chunk) -> None:
        raise Stop

    async with ex.shell() as sh:
        await sh.run("export STAYS=1")
        with anyio.fail_after(10), pytest.raises(Stop):
            await sh.run("echo first; sleep 10", sink=sink)
        assert (await sh.run("echo $STAYS")).stdout == b"1\n"


async def test_nothing_outlives_the_executor(tmp_path: Path) -> None:
    """Closing the executor (not the shell) ends the shell and its jobs too."""
    before = tagged_processes()
    ex = LocalExecutor(tmp_path)
    sh = ex.shell()
    await sh.__aenter__()
    try:
        await sh.run("sleep 100 &")
        job = await sh.start_job("sleep 100")
        # The shell, its background sleep and the job's: the job's process
        # may start a moment after `start_job` returns.
        with anyio.fail_after(10):
            while len(tagged_processes() - before) < 3:
                await anyio.sleep(0.02)
        await ex.aclose()
        with anyio.fail_after(10):
            await job.wait()
        assert job.done
        with pytest.raises(ExecutorError):
            await sh.run("true")
    finally:
        await sh.aclose()
    assert not tagged_processes() - before


async def test_a_job_starts_with_the_shells_functions_and_aliases(ex: LocalExecutor) -> None:
    """Under bash a job sees the shell's functions and aliases, and its own stdin input."""
    async with ex.shell() as sh:
        await sh.run("hello() { echo \"hello $1\"; }; alias shout='echo LOUD'")
        job = await sh.start_job("hello job; shout; cat")
        await job.write("typed\n")
        await job.close_stdin()
        status = await job.wait(timeout=10)
        output = await job.read()
    assert status.state is JobState.EXITED
    assert output.stdout == b"hello job\nLOUD\ntyped\n"


async def test_a_job_past_its_timeout_is_timed_out(ex: LocalExecutor) -> None:
    """A job's own timeout kills it: TIMED_OUT."""
    async with ex.shell() as sh:
        job = await sh.start_job("sleep 10", timeout=0.3)
        status = await job.wait(timeout=10)
    assert status.state is JobState.TIMED_OUT


async def test_job_output_overflow_is_cut_and_marked(tmp_path: Path) -> None:
    """Unread output past the job buffer is cut from the middle; the next read marks it."""
    async with LocalExecutor(tmp_path, output_limit=4096) as ex, ex.shell() as sh:
        job = await sh.start_job("seq 1 100000")
        await job.wait(timeout=20)
        output = await job.read()
    assert output.truncated
    assert len(output.stdout) == 4096
    assert output.stdout.endswith(b"100000\n")


# --- policies ---------------------------------------------------------------------------


async def test_dangerous_commands_are_refused_in_runs_and_jobs(ex: LocalExecutor) -> None:
    """DangerousCommands checks each run and each job; a refusal runs nothing, the shell stays."""
    async with DangerousCommands(ex).shell() as sh:
        with pytest.raises(PolicyDenied):
            await sh.run("rm -rf /")
        with pytest.raises(PolicyDenied):
            await sh.start_job(":(){ :|:& };:")
        assert (await sh.run("echo fine")).stdout == b"fine\n"
        assert sh.jobs() == []


async def test_command_rules_judge_each_run(ex: LocalExecutor) -> None:
    """CommandRules' deny list applies to a run as to exec_cmd."""
    async with CommandRules(ex, deny=["git push"]).shell() as sh:
        with pytest.raises(PolicyDenied):
            await sh.run("git push origin main")
        assert (await sh.run("echo allowed")).stdout == b"allowed\n"


async def test_approval_is_asked_for_each_run(ex: LocalExecutor) -> None:
    """The approver sees each command; a refused one never runs."""
    asked: list[str] = []

    async def approve(request: ApprovalRequest) -> bool:
        asked.append(request.description)
        return "forbidden" not in request.description

    async with Approval(ex, approve).shell() as sh:
        await sh.run("echo one")
        with pytest.raises(PolicyDenied):
            await sh.run("echo forbidden")
    assert asked == ["echo one", "echo forbidden"]


async def test_secrets_are_kept_out_of_the_shell_and_its_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Secrets starts the shell without credentials and redacts each run's output and sinks."""
    monkeypatch.setenv("SERVICE_TOKEN", "token-value-123")
    seen: list[bytes] = []
    async with LocalExecutor(tmp_path) as ex, Secrets(ex, redact=["hunter2secret"]).shell() as sh:
        inherited = await sh.run('echo "[$SERVICE_TOKEN]"')
        redacted = await sh.run(
            "echo my password is hunter2secret", sink=lambda chunk: seen.append(chunk.data)
        )
        job = await sh.start_job('echo "job hunter2secret [$SERVICE_TOKEN]"')
        await job.wait(timeout=10)
        job_output = await job.read()
    assert inherited.stdout == b"[]\n"
    assert redacted.stdout == b"my password is [REDACTED]\n"
    assert b"".join(seen) == b"my password is [REDACTED]\n"
    assert isinstance(redacted, ShellOutput)
    assert job_output.stdout == b"job [REDACTED] []\n"


async def test_audit_and_observed_record_each_run_and_job(ex: LocalExecutor) -> None:
    """Audit records START and END per run and per job; Observed emits its events per run."""
    records: list[AuditRecord] = []
    events: list[CommandEvent] = []
    watched = Observed(Audit(ex, records.append), events.append, tracing=False)
    async with watched.shell() as sh:
        await sh.run("echo audited")
        with pytest.raises(NonZeroExit):
            await sh.run("exit_code_7() { return 7; }; exit_code_7")
        job = await sh.start_job("echo from-job")
        await job.wait(timeout=10)
    described = [(record.event, record.description) for record in records]
    assert described[:2] == [(AuditEvent.START, "echo audited"), (AuditEvent.END, "echo audited")]
    assert (AuditEvent.START, "echo from-job") in described
    assert (AuditEvent.END, "echo from-job") in described
    ends = [record for record in records if record.event is AuditEvent.END]
    assert [record.exit_code for record in ends[:2]] == [0, 7]
    started = [event for event in events if isinstance(event, CommandStarted)]
    assert len(started) == 3
    assert any(isinstance(event, CommandFinished) for event in events)


async def test_read_only_refuses_runs_where_it_cannot_enforce(ex: LocalExecutor) -> None:
    """ReadOnly over a bare executor refuses every run and job."""
    async with ReadOnly(ex).shell() as sh:
        with pytest.raises(PolicyDenied):
            await sh.run("echo x")
        with pytest.raises(PolicyDenied):
            await sh.start_job("echo x")


async def test_read_only_shell_in_a_sandbox_cannot_write(tmp_path: Path) -> None:
    """ReadOnly over a sandbox runs commands in a shell that can write nothing."""
    sandbox = interpreter_sandbox("bubblewrap")
    async with LocalExecutor(tmp_path, sandbox=sandbox) as ex, ReadOnly(ex).shell() as sh:
        with pytest.raises(NonZeroExit):
            await sh.run("echo x > file")
        assert (await sh.run("echo readable")).stdout == b"readable\n"
    assert not (tmp_path / "file").exists()


async def test_a_scope_is_where_the_shell_starts(tmp_path: Path) -> None:
    """A scoped executor's shell starts in the scope; a cd carries on from there."""
    (tmp_path / "scope" / "inner").mkdir(parents=True)
    async with LocalExecutor(tmp_path) as ex, ex.scoped("scope").shell() as sh:
        assert (await sh.run("pwd")).stdout == f"{tmp_path / 'scope'}\n".encode()
        await sh.run("cd inner")
        assert (await sh.run("pwd")).stdout == f"{tmp_path / 'scope' / 'inner'}\n".encode()


async def test_a_shell_is_a_persistent_shell(ex: LocalExecutor) -> None:
    """`ex.shell()` returns a PersistentShell that holds nothing until entered."""
    shell = ex.shell()
    assert isinstance(shell, PersistentShell)
    assert shell.pid is None
    assert "login=False" in repr(shell)


async def test_jobs_outlast_the_default_timeout(tmp_path: Path) -> None:
    """The executor's `default_timeout` bounds runs, not the shell nor a job given no timeout."""
    async with LocalExecutor(tmp_path, default_timeout=0.5) as ex, ex.shell() as sh:
        job = await sh.start_job("sleep 1; echo done")
        await anyio.sleep(0.6)
        assert (await sh.run("echo alive")).stdout == b"alive\n"
        status = await job.wait(timeout=10)
    assert (status.state, status.exit_code) == (JobState.EXITED, 0)
