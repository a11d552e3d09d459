"""Sandbox: the contract under each backend, what the sandbox enforces, and what it refuses.

Each backend's tests skip where the machine cannot give it (bwrap missing,
no Landlock); with `EXECUTOR_REQUIRE_SANDBOX=1` (set by CI) they fail instead.
"""

from __future__ import annotations

import contextlib
import errno
import gc
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import attrs
import psutil
import pytest
from conftest import alive
from test_session_acceptance import drive_repl_on_a_pty, drive_repl_through_pipes, read_until

from executor import (
    Command,
    ExecutorError,
    LocalExecutor,
    NonZeroExit,
    PolicyDenied,
    ReadOnly,
    Sandbox,
    Signal,
    Stdout,
    ToolExecutor,
    UnixSignal,
)
from executor._core.readonly import read_only_commands
from executor._sandbox import programs
from executor._sandbox.sandbox import find_program, setuid_problem
from executor.testing import ExecutorContract, ReadOnlyContract, SessionContract

pytestmark = pytest.mark.anyio

REQUIRED = os.environ.get("EXECUTOR_REQUIRE_SANDBOX", "") not in ("", "0")
BACKENDS = ("bubblewrap", "landlock")
ROOT = os.geteuid() == 0
# The interpreter may live under the home folder (pyenv), which a sandbox hides.
PYTHON = tuple(
    dict.fromkeys([sys.prefix, sys.base_prefix, os.path.dirname(os.path.realpath(sys.executable))])
)
# The process limit as the kernel holds it (dash's `ulimit` calls it -p, bash's -u).
NPROC = "python3 -c 'import resource; print(resource.getrlimit(resource.RLIMIT_NPROC)[0])'"
# How a sandbox server's command line starts (its control socket's number follows).
SERVER = " ".join(programs.command("sandbox_server"))


def sandbox_for(backend: str, **options: Any) -> Sandbox:
    """A Sandbox on `backend` that can run this Python; skip (or fail in CI) where it cannot run."""
    readable: tuple[str, ...] = tuple(options.pop("readable", ()))
    sandbox = Sandbox(backend=backend, readable=(*PYTHON, *readable), **options)  # type: ignore[arg-type]
    try:
        sandbox.choose_backend()
    except ExecutorError as error:
        if REQUIRED:
            pytest.fail(f"EXECUTOR_REQUIRE_SANDBOX is set, but: {error}")
        pytest.skip(str(error))
    return sandbox


@contextlib.asynccontextmanager
async def sandboxed(
    workdir: Path, backend: str, *, confine: bool = False, **options: Any
) -> AsyncIterator[LocalExecutor]:
    """A sandboxed LocalExecutor in `workdir`, closed at the end."""
    sandbox = sandbox_for(backend, **options)
    async with LocalExecutor(workdir, sandbox=sandbox, kill_grace=0.2, confine=confine) as ex:
        yield ex


async def fails(ex: ToolExecutor, script: str) -> str:
    """Run `script`, which must fail; return its output."""
    with pytest.raises(NonZeroExit) as caught:
        await ex.exec_cmd(Command.shell(script))
    return caught.value.output.text()


async def output_of(ex: ToolExecutor, script: str) -> str:
    """Run `script`, which must succeed; return its stdout."""
    return (await ex.exec_cmd(Command.shell(script))).stdout.decode()


@contextlib.contextmanager
def listener() -> Iterator[socket.socket]:
    """A TCP socket listening on the host's 127.0.0.1, at a free port."""
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        server.setblocking(False)
        yield server
    finally:
        server.close()


def connect_script(port: int) -> str:
    """A shell command that connects to 127.0.0.1:`port` and says so."""
    return (
        "python3 -c 'import socket,sys; "
        f's = socket.create_connection(("127.0.0.1", {port}), timeout=2); print("connected")\''
    )


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """Each sandbox backend."""
    return str(request.param)


@pytest.fixture
def home_secret() -> Iterator[tuple[Path, str]]:
    """A secret file placed in the real home folder, removed afterwards."""
    home = Path(os.path.expanduser("~"))
    if not home.is_dir() or not os.access(home, os.W_OK):
        pytest.skip(f"cannot place a file in the home folder {home}")
    secret = uuid.uuid4().hex
    path = home / f".executor-sandbox-secret-{secret[:8]}"
    path.write_text(secret)
    try:
        yield path, secret
    finally:
        path.unlink(missing_ok=True)


# --- the contract, under each backend --------------------------------------------


class BubblewrapFixtures:
    """A LocalExecutor sandboxed by bubblewrap, in an empty folder."""

    @pytest.fixture
    async def executor(self, tmp_path: Path) -> AsyncIterator[ToolExecutor]:
        """The executor under test."""
        async with sandboxed(tmp_path, "bubblewrap") as ex:
            yield ex


class LandlockFixtures:
    """A LocalExecutor sandboxed by Landlock, in an empty folder."""

    @pytest.fixture
    async def executor(self, tmp_path: Path) -> AsyncIterator[ToolExecutor]:
        """The executor under test."""
        async with sandboxed(tmp_path, "landlock") as ex:
            yield ex


class TestBubblewrapContract(ExecutorContract, BubblewrapFixtures):
    """The shared contract, under bubblewrap."""


class TestLandlockContract(ExecutorContract, LandlockFixtures):
    """The shared contract, under Landlock."""


class TestBubblewrapSessions(SessionContract, BubblewrapFixtures):
    """The session contract, under bubblewrap: signals reach the command inside."""


class TestLandlockSessions(SessionContract, LandlockFixtures):
    """The session contract, under Landlock."""


class ReadOnlyFixtures:
    """`ReadOnly` over a sandboxed executor, and a bare writer on the same folder."""

    backend = "bubblewrap"

    @pytest.fixture
    async def executor(self, tmp_path: Path) -> AsyncIterator[ToolExecutor]:
        """The read-only executor under test."""
        async with sandboxed(tmp_path, self.backend) as ex:
            yield ReadOnly(ex)

    @pytest.fixture
    async def writer(self, tmp_path: Path) -> AsyncIterator[ToolExecutor]:
        """An unsandboxed executor on the same folder, to set files up."""
        async with LocalExecutor(tmp_path) as ex:
            yield ex


class TestBubblewrapReadOnlyContract(ReadOnlyContract, ReadOnlyFixtures):
    """The read-only contract, over bubblewrap: shell commands run and cannot write."""


class TestLandlockReadOnlyContract(ReadOnlyContract, ReadOnlyFixtures):
    """The read-only contract, over Landlock: shell commands run and cannot write."""

    backend = "landlock"


# --- probe and refusals ----------------------------------------------------------


def test_probe_reports_this_machine() -> None:
    """probe() finds bwrap where it is installed, the user, Landlock and prlimit as they are."""
    support = Sandbox.probe(refresh=True)
    assert support.bubblewrap == shutil.which("bwrap")
    assert support.prlimit == shutil.which("prlimit")
    assert support.root == ROOT
    try:
        lsms = Path("/sys/kernel/security/lsm").read_text().split(",")
    except OSError:
        lsms = None
    if lsms is not None:
        assert (support.landlock_abi > 0) == ("landlock" in lsms)
    report = str(support)
    for word in ("bubblewrap", "user namespaces", "landlock ABI", "cgroup v2", "prlimit"):
        assert word in report
    if support.bubblewrap is not None and not support.bubblewrap_error:
        assert support.bubblewrap_works


def test_refusal_names_what_is_missing_and_how_to_get_it() -> None:
    """A sandbox the machine cannot give is refused with every reason and its remedy."""
    support = attrs.evolve(Sandbox.probe(), bubblewrap=None, landlock_abi=0, prlimit=None)
    with pytest.raises(ExecutorError) as caught:
        Sandbox(address_space=1 << 30).choose_backend(support)
    message = str(caught.value)
    assert "apt-get install bubblewrap" in message
    assert "Landlock" in message
    assert "prlimit" in message
    assert "nothing runs" in message


def test_network_off_needs_landlock_abi_4() -> None:
    """Landlock below ABI 4 cannot turn TCP off, so a sandbox without network is refused."""
    old = attrs.evolve(Sandbox.probe(), landlock_abi=3)
    with pytest.raises(ExecutorError, match="ABI 4"):
        Sandbox(backend="landlock").choose_backend(old)
    assert Sandbox(backend="landlock", network=True).choose_backend(old) == "landlock"


def test_bubblewrap_failure_is_reported_with_its_cause() -> None:
    """When bwrap is there but cannot start a sandbox, its error and the sysctls are named."""
    broken = attrs.evolve(
        Sandbox.probe(),
        bubblewrap="/usr/bin/bwrap",
        bubblewrap_error="No permissions to creating new namespace",
        root=False,
        user_namespaces=False,
    )
    with pytest.raises(ExecutorError) as caught:
        Sandbox(backend="bubblewrap").choose_backend(broken)
    assert "No permissions to creating new namespace" in str(caught.value)
    assert "unprivileged_userns_clone" in str(caught.value)


@pytest.mark.skipif(not ROOT, reason="makes a setuid-root file")
def test_a_setuid_bwrap_is_refused_for_users(tmp_path: Path) -> None:
    """A setuid-root bwrap cannot serve a user's sandbox: the probe says so; root's is fine."""
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o4755)
    assert "setuid root" in setuid_problem(str(fake), 1000)
    assert setuid_problem(str(fake), 0) == ""
    fake.chmod(0o755)
    assert setuid_problem(str(fake), 1000) == ""


async def test_cgroup_limits_are_refused_not_ignored(tmp_path: Path) -> None:
    """memory= and pids= (cgroup v2) make the executor refuse to be built, never run unbounded."""
    for options in ({"memory": 1 << 30}, {"pids": 64}):
        with pytest.raises(ExecutorError, match="cgroup v2"):
            LocalExecutor(tmp_path, sandbox=Sandbox(**options))  # type: ignore[arg-type]


async def test_process_limit_as_root_is_refused(tmp_path: Path) -> None:
    """processes= (RLIMIT_NPROC) does not bind root, so root is refused it; others get it."""
    if ROOT:
        with pytest.raises(ExecutorError, match="does not bind root"):
            LocalExecutor(tmp_path, sandbox=Sandbox(processes=64))
    else:
        async with sandboxed(tmp_path, "auto", processes=64) as ex:
            assert (await output_of(ex, NPROC)).strip() == "64"


def test_bad_options_are_rejected() -> None:
    """Unknown backends, non-positive limits and blank paths are refused at construction."""
    with pytest.raises(ValueError, match="backend"):
        Sandbox(backend="docker")  # type: ignore[arg-type]
    for name in ("address_space", "cpu_seconds", "file_size", "open_files", "processes"):
        with pytest.raises(ValueError, match=name):
            Sandbox(**{name: 0})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="cpu_seconds"):
        Sandbox(cpu_seconds=True)
    with pytest.raises(ValueError, match="writable"):
        Sandbox(writable=("",))
    assert Sandbox(writable="out").writable == ("out",)


async def test_enforces_read_only_and_repr(tmp_path: Path, backend: str) -> None:
    """A sandboxed executor enforces read-only and shows its sandbox; a bare one does not."""
    assert not LocalExecutor(tmp_path).enforces_read_only
    async with sandboxed(tmp_path, backend) as ex:
        assert ex.enforces_read_only
        assert ReadOnly(ex.scoped(".")).enforces_read_only
        assert repr(ex) == f"LocalExecutor({str(tmp_path)!r}, sandbox={ex.sandbox!r})"
    assert repr(Sandbox()) == "Sandbox()"
    shown = repr(Sandbox(backend="landlock", writable=(), address_space=1 << 30))
    assert shown == "Sandbox(backend='landlock', writable=(), address_space=1073741824)"


# --- what the sandbox enforces --------------------------------------------------


async def test_workdir_writable_rest_read_only(tmp_path: Path, backend: str) -> None:
    """By default the workdir is writable and a folder beside it is not."""
    work, beside = tmp_path / "work", tmp_path / "beside"
    work.mkdir()
    beside.mkdir()
    async with sandboxed(work, backend, readable=(str(beside),)) as ex:
        assert await output_of(ex, "echo hi > note; cat note") == "hi\n"
        await fails(ex, f"echo hi > {beside}/note")
    assert (work / "note").read_text() == "hi\n"
    assert not (beside / "note").exists()


async def test_writable_paths_replace_the_workdir(tmp_path: Path, backend: str) -> None:
    """`writable` names what may be written (relative to the workdir); `()` means nothing."""
    (tmp_path / "out").mkdir()
    async with sandboxed(tmp_path, backend, writable=("out",)) as ex:
        await ex.exec_cmd(Command.shell("echo x > out/a"))
        await fails(ex, "echo x > b")
    async with sandboxed(tmp_path, backend, writable=()) as ex:
        await fails(ex, "echo x > out/c")
    assert sorted(os.listdir(tmp_path / "out")) == ["a"]
    assert not (tmp_path / "b").exists()


async def test_confined_and_sandboxed(tmp_path: Path, backend: str) -> None:
    """Confined and sandboxed, a command starts in its folder and still cannot write out."""
    (tmp_path / "work" / "sub").mkdir(parents=True)
    async with sandboxed(tmp_path / "work", backend, confine=True) as ex:
        here = await ex.exec_cmd(Command.shell("pwd; echo x > f").with_current_dir("sub"))
        assert here.stdout.decode() == f"{tmp_path}/work/sub\n"
        # Under bubblewrap this lands in the private /tmp; under Landlock it fails.
        with contextlib.suppress(NonZeroExit):
            await ex.exec_cmd(Command.shell(f"echo x > {tmp_path}/out"))
    assert (tmp_path / "work" / "sub" / "f").exists()
    assert not (tmp_path / "out").exists()


async def test_missing_paths_are_an_executor_error(tmp_path: Path, backend: str) -> None:
    """A missing writable or readable path is the executor's error, not the command's."""
    for option in ("writable", "readable"):
        options: dict[str, Any] = {option: ("missing",)}
        async with sandboxed(tmp_path, backend, **options) as ex:
            with pytest.raises(ExecutorError, match=f"{option} path .*missing"):
                await ex.exec_cmd(Command.shell("true"))


async def test_workdir_through_a_symlink(tmp_path: Path, backend: str) -> None:
    """A workdir named through a symlink is writable by that name and by its real one."""
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    async with sandboxed(tmp_path / "link", backend) as ex:
        await ex.exec_cmd(Command.shell(f"echo a > a; echo b > {tmp_path}/real/b"))
    async with sandboxed(tmp_path / "link", backend, confine=True) as ex:
        await ex.exec_cmd(Command.shell("echo c > c; pwd"))
    assert sorted(os.listdir(tmp_path / "real")) == ["a", "b", "c"]


async def test_home_is_hidden_unless_asked(
    tmp_path: Path, backend: str, home_secret: tuple[Path, str]
) -> None:
    """A file in the home folder cannot be read, unless `home=True`."""
    path, secret = home_secret
    async with sandboxed(tmp_path, backend) as ex:
        assert secret not in await fails(ex, f"cat {path}")
    async with sandboxed(tmp_path, backend, home=True) as ex:
        assert await output_of(ex, f"cat {path}") == secret


async def test_private_tmp_under_bubblewrap(tmp_path: Path) -> None:
    """Under bubblewrap /tmp is private: the host's files are not there, and nothing gets out."""
    name = f"/tmp/executor-sandbox-{uuid.uuid4().hex}"
    host_file = Path(f"/tmp/executor-host-{uuid.uuid4().hex}")
    host_file.write_text("host\n")
    try:
        async with sandboxed(tmp_path, "bubblewrap") as ex:
            listed = (await output_of(ex, f"echo x > {name}; ls /tmp")).split()
    finally:
        host_file.unlink()
    assert os.path.basename(name) in listed
    assert host_file.name not in listed
    assert not os.path.exists(name)


async def test_each_command_gets_fresh_private_folders(tmp_path: Path) -> None:
    """Under bubblewrap /tmp, /run, /dev/shm and the hidden home are new for every command.

    The sandbox is built once per executor; what one command leaves in its
    private folders must not reach the next. /dev itself is read-only.
    """
    places = ("/tmp/left", "/run/left", "/dev/shm/left", f"{Path.home()}/left")
    async with sandboxed(tmp_path, "bubblewrap") as ex:
        for place in places:
            await ex.exec_cmd(Command.shell(f"echo x > {place}"))
        script = "; ".join(f"test -e {place} && echo {place}" for place in places)
        assert await output_of(ex, f"{script}; true") == ""
        assert "Read-only file system" in await fails(ex, "touch /dev/left")
    for place in places:
        assert not os.path.exists(place)


async def test_the_sandboxs_init_is_out_of_reach(tmp_path: Path) -> None:
    """A command cannot reach its init's descriptors or memory (init is not dumpable)."""
    async with sandboxed(tmp_path, "bubblewrap") as ex:
        for script in ("readlink -v /proc/1/fd/2", "echo x > /proc/1/fd/2", "cat /proc/1/environ"):
            assert "Permission denied" in await fails(ex, script)


async def test_each_init_is_the_servers_child_in_a_pid_namespace_of_its_own(
    tmp_path: Path,
) -> None:
    """Nothing stands between the server and a command's init; the server's namespace stays.

    Each init is forked by the server straight into a new PID namespace,
    one per command, and the server's own children's namespace is still the
    server's (a fork made with CLONE_NEWPID, not after `unshare`).
    """
    marker = f"init-{uuid.uuid4().hex}"
    async with sandboxed(tmp_path, "bubblewrap") as ex, contextlib.AsyncExitStack() as stack:
        for _ in range(2):
            idle = Command.exec(["python3", "-c", "import time; time.sleep(30)", marker])
            await stack.enter_async_context(await ex.start(idle))
        commands: list[psutil.Process] = []
        deadline = time.monotonic() + 10
        while len(commands) < 2 and time.monotonic() < deadline:
            await anyio.sleep(0.05)
            commands = [
                process
                for process in psutil.process_iter(["cmdline"])
                if marker in (process.info["cmdline"] or ())
            ]
        assert len(commands) == 2
        namespaces = set()
        for command in commands:
            init = command.parent()
            assert init is not None
            server = init.parent()
            assert server is not None
            assert SERVER in " ".join(server.cmdline()), server.cmdline()
            assert server.ppid() == os.getpid(), "init's parent is not the server itself"
            # Read through the command, which shares init's namespace (init
            # is not dumpable: a user may not read its namespaces).
            own = os.readlink(f"/proc/{command.pid}/ns/pid")
            servers = os.readlink(f"/proc/{server.pid}/ns/pid")
            assert own != servers
            assert os.readlink(f"/proc/{server.pid}/ns/pid_for_children") == servers
            namespaces.add(own)
        assert len(namespaces) == 2, "two commands shared a PID namespace"


async def test_commands_inherit_only_their_stdio_and_their_ids(tmp_path: Path) -> None:
    """No descriptor of init's (its status pipe) reaches a command; its uid and gid are ours."""
    listing = "ls /proc/self/fd"
    async with sandboxed(tmp_path, "bubblewrap") as ex:
        for pty in (False, True):
            async with await ex.start(Command.shell(f"{listing}; id -u; id -g"), pty=pty) as s:
                output = await s.finalize()
            lines = output.stdout.decode().split()
            # 0-2, and the one `ls` opens to list the folder.
            assert lines[:-2] == ["0", "1", "2", "3"], lines
            assert lines[-2:] == [str(os.getuid()), str(os.getgid())]


async def test_a_bound_folder_made_again_is_bound_again(tmp_path: Path) -> None:
    """A writable folder deleted and made again on the host is the one commands write to."""
    out = tmp_path / "out"
    out.mkdir()
    async with sandboxed(tmp_path, "bubblewrap", writable=("out",)) as ex:
        await ex.exec_cmd(Command.shell("echo 1 > out/first"))
        shutil.rmtree(out)
        out.mkdir()
        await ex.exec_cmd(Command.shell("echo 2 > out/second"))
        assert (out / "second").read_text() == "2\n"
        shutil.rmtree(out)
        with pytest.raises(ExecutorError, match=r"writable path .*out does not exist"):
            await ex.exec_cmd(Command.shell("true"))
    assert not (out / "first").exists()


async def test_a_program_the_sandbox_hides_is_looked_for_inside(tmp_path: Path) -> None:
    """A PATH entry the sandbox hides does not stop the search: the next entry's program runs."""
    hidden = Path(f"/tmp/executor-hidden-{uuid.uuid4().hex[:12]}")
    (hidden / "bin").mkdir(parents=True)
    try:
        fake = hidden / "bin" / "whoami"
        fake.write_text("#!/bin/sh\necho the host's\n")
        fake.chmod(0o755)
        async with sandboxed(tmp_path, "bubblewrap") as ex:
            command = Command.shell("whoami").with_env({"PATH": f"{hidden}/bin:/usr/bin:/bin"})
            output = await ex.exec_cmd(command)
    finally:
        shutil.rmtree(hidden)
    assert output.stdout.strip() not in (b"", b"the host's")


async def test_a_burst_leaves_one_sandbox_made_ahead(tmp_path: Path) -> None:
    """Thirty commands at once do not leave thirty sandboxes waiting afterwards."""
    async with sandboxed(tmp_path, "bubblewrap") as ex:
        async with anyio.create_task_group() as tasks:
            for _ in range(30):
                tasks.start_soon(ex.exec_cmd, Command.shell("true"))
        (server,) = sandbox_servers()

        def launchers() -> list[psutil.Process]:
            return [p for p in psutil.Process(server).children() if p.name() != "bwrap"]

        with anyio.fail_after(10):
            # The launchers of the commands that ran end with them; what is
            # left is made ahead: the server's two, and one asked for.
            while len(launchers()) > 3:
                await anyio.sleep(0.05)


async def test_a_dead_server_is_replaced(tmp_path: Path) -> None:
    """When the server dies, a command fails with ExecutorError, and the next gets a new one."""
    async with sandboxed(tmp_path, "bubblewrap") as ex:
        await ex.exec_cmd(Command.shell("true"))
        (server,) = sandbox_servers()
        os.kill(server, signal.SIGKILL)  # started by this test's executor
        with anyio.fail_after(10):
            while alive(server):
                await anyio.sleep(0.01)
        outcomes = []
        for _ in range(3):
            try:
                outcomes.append((await ex.exec_cmd(Command.shell("echo up"))).stdout)
            except ExecutorError as error:
                outcomes.append(str(error).encode())
            except NonZeroExit as error:
                # A sandbox handed over just before the server died may still
                # take the command, and then die with it.
                outcomes.append(f"killed by {error.output.signal}".encode())
        assert outcomes[-1] == b"up\n", outcomes
        assert outcomes[0] != b"up\n", outcomes
        killed = f"killed by {int(signal.SIGKILL)}".encode()
        assert all(o in (b"up\n", killed) or b"server" in o for o in outcomes), outcomes


def sandbox_servers() -> list[int]:
    """Live sandbox servers started by this process."""
    found = []
    for child in psutil.Process().children():
        try:
            cmdline = " ".join(child.cmdline())
        except psutil.Error:
            continue  # gone, or a zombie: no server
        if SERVER in cmdline and alive(child.pid):
            found.append(child.pid)
    return found


async def test_sandbox_is_built_once_and_ends_with_the_executor(tmp_path: Path) -> None:
    """One server per executor (and mount set), started at the first command, gone at aclose."""
    before = set(sandbox_servers())
    async with sandboxed(tmp_path, "bubblewrap") as ex:
        assert set(sandbox_servers()) == before
        await ex.exec_cmd(Command.shell("true"))
        servers = set(sandbox_servers()) - before
        assert len(servers) == 1
        for _ in range(3):
            await ex.exec_cmd(Command.shell("true"))
        assert set(sandbox_servers()) - before == servers
        with read_only_commands():
            await ex.exec_cmd(Command.shell("true"))
        assert len(set(sandbox_servers()) - before) == 2
    assert set(sandbox_servers()) <= before


async def test_a_dropped_executor_ends_its_sandbox(tmp_path: Path) -> None:
    """An executor collected without aclose still ends its server, and all in it."""
    token = f"executor-dropped-{uuid.uuid4().hex[:12]}"
    before = set(sandbox_servers())
    ex = LocalExecutor(tmp_path, sandbox=sandbox_for("bubblewrap"))
    await ex.exec_cmd(Command.shell("true"))
    assert set(sandbox_servers()) - before
    del ex
    gc.collect()
    with anyio.fail_after(10):
        while set(sandbox_servers()) - before or processes_with(token):
            await anyio.sleep(0.05)


def test_the_sandbox_dies_with_the_executors_process(tmp_path: Path) -> None:
    """SIGKILL to the process that holds the executor ends its sandboxes and their commands."""
    sandbox_for("bubblewrap")  # skips where bubblewrap cannot run
    token = f"executor-orphan-{uuid.uuid4().hex[:12]}"
    script = f"""
import anyio, sys
from executor import Command, LocalExecutor, Sandbox
async def main():
    ex = LocalExecutor({str(tmp_path)!r}, sandbox=Sandbox(backend="bubblewrap"))
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(ex.exec_cmd, Command.shell("sleep 300 # {token}"))
        while True:
            await anyio.sleep(3600)
anyio.run(main)
"""
    holder = subprocess.Popen([sys.executable, "-c", script])
    try:
        deadline = time.monotonic() + 30
        while not processes_with(token):
            assert time.monotonic() < deadline, "the sandboxed command never started"
            assert holder.poll() is None, "the executor's process ended early"
            time.sleep(0.05)
    finally:
        holder.kill()
        holder.wait()
    deadline = time.monotonic() + 10
    while processes_with(token):
        assert time.monotonic() < deadline, "the sandboxed command outlived its executor"
        time.sleep(0.05)


async def test_a_request_larger_than_a_datagram(tmp_path: Path) -> None:
    """Arguments of 300 KB in all reach the command (the request goes through a memfd)."""
    parts = ["a" * 100_000, "b" * 100_000, "c" * 100_000]
    script = "echo $(( ${#1} + ${#2} + ${#3} ))"
    async with sandboxed(tmp_path, "bubblewrap") as ex:
        output = await ex.exec_cmd(Command.exec(["sh", "-c", script, "sh", *parts]))
    assert output.stdout == b"300000\n"


async def test_concurrent_commands_in_one_sandbox(tmp_path: Path) -> None:
    """Forty commands at once each get their own output, exit code and namespace."""
    results: dict[int, tuple[bytes, int | None]] = {}

    async def one(n: int) -> None:
        try:
            output = await ex.exec_cmd(Command.shell(f"echo {n} $$; exit {n % 3}"))
            results[n] = (output.stdout, output.exit_code)
        except NonZeroExit as error:
            results[n] = (error.output.stdout, error.output.exit_code)

    async with sandboxed(tmp_path, "bubblewrap") as ex, anyio.create_task_group() as tasks:
        for n in range(40):
            tasks.start_soon(one, n)
    for n in range(40):
        stdout, code = results[n]
        # The shell is its PID namespace's pid 2, under the namespace's init.
        assert stdout == f"{n} 2\n".encode()
        assert code == n % 3


async def test_network_off_unless_asked(tmp_path: Path, backend: str) -> None:
    """Without `network` a command cannot reach the host's 127.0.0.1; with it, it can."""
    with listener() as server:
        port = server.getsockname()[1]
        async with sandboxed(tmp_path, backend) as ex:
            assert "connected" not in await fails(ex, connect_script(port))
        async with sandboxed(tmp_path, backend, network=True) as ex:
            assert await output_of(ex, connect_script(port)) == "connected\n"


async def test_own_loopback_under_bubblewrap(tmp_path: Path) -> None:
    """Under bubblewrap a command's processes still talk to each other over their own loopback."""
    script = (
        'python3 -c \'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(); '
        'c = socket.create_connection(s.getsockname()); print("ok")\''
    )
    async with sandboxed(tmp_path, "bubblewrap") as ex:
        assert await output_of(ex, script) == "ok\n"


async def test_rlimits_are_in_force(tmp_path: Path, backend: str) -> None:
    """Address space, CPU seconds, file size and open files are set for every process."""
    async with sandboxed(
        tmp_path,
        backend,
        address_space=1 << 30,
        cpu_seconds=7,
        file_size=1 << 20,
        open_files=64,
    ) as ex:
        limits = await output_of(ex, "ulimit -v; ulimit -t; ulimit -f; ulimit -n")
    assert limits.split() == [str((1 << 30) // 1024), "7", str((1 << 20) // 512), "64"]


async def test_rlimits_bind_sessions_and_ptys(tmp_path: Path, backend: str) -> None:
    """The limits hold for a session and a PTY session as for `exec_cmd`."""
    async with sandboxed(tmp_path, backend, open_files=48, cpu_seconds=9) as ex:
        for pty in (False, True):
            with anyio.fail_after(10):
                async with await ex.start(Command.shell("ulimit -n; ulimit -t"), pty=pty) as s:
                    output = await s.finalize()
            assert output.stdout.split() == [b"48", b"9"]


async def test_a_limit_that_cannot_be_set_runs_nothing(tmp_path: Path) -> None:
    """Under bubblewrap a limit the kernel refuses is an ExecutorError, and nothing runs."""
    token = f"executor-unlimited-{uuid.uuid4().hex[:12]}"
    # Past fs.nr_open: no process may have that many files, root included.
    async with sandboxed(tmp_path, "bubblewrap", open_files=1 << 40) as ex:
        for _ in range(3):
            with pytest.raises(ExecutorError, match="open_files"):
                await ex.exec_cmd(Command.shell(f"touch ran; sleep 30 # {token}"))
        assert not processes_with(token)
    assert not (tmp_path / "ran").exists()


async def test_file_size_limit_stops_a_large_write(tmp_path: Path, backend: str) -> None:
    """A write past `file_size` fails, and the file stops at the limit."""
    async with sandboxed(tmp_path, backend, file_size=1 << 16) as ex:
        await fails(ex, "head -c 1000000 /dev/zero > big")
    assert (tmp_path / "big").stat().st_size <= 1 << 16


async def test_daemon_dies_with_the_command_under_bubblewrap(tmp_path: Path) -> None:
    """A double-forked setsid daemon that dropped every tag dies when its command ends."""
    token = f"executor-daemon-{uuid.uuid4().hex[:12]}"
    script = (
        "(setsid env -i sh -c 'while :; do sleep 0.05; done' "
        f"{token} >/dev/null 2>&1 &); sleep 0.3; echo started"
    )
    async with sandboxed(tmp_path, "bubblewrap") as ex:
        assert await output_of(ex, script) == "started\n"
        # The namespace's init is gone, so the kernel kills the rest: no kill of ours.
        assert await gone(token)


async def test_sessions_and_ptys_are_sandboxed(tmp_path: Path, backend: str) -> None:
    """A session and a PTY session start under the sandbox: no writing outside the workdir."""
    outside = tmp_path / "outside"
    work = tmp_path / "work"
    outside.mkdir()
    work.mkdir()
    async with sandboxed(work, backend, readable=(str(outside),)) as ex:
        for pty in (False, True):
            script = f"echo in > inside; echo out > {outside}/pwned; echo done $?"
            with anyio.fail_after(10):
                async with await ex.start(Command.shell(script), pty=pty) as session:
                    output = await session.finalize()
            assert b"done 1" in output.stdout or b"done 2" in output.stdout
        with anyio.fail_after(10):
            async with await ex.start(Command.shell("test -t 0 && echo terminal"), pty=True) as s:
                tty = await s.finalize()
        assert tty.stdout == b"terminal\r\n"
    assert (work / "inside").read_text() == "in\n"
    assert not (outside / "pwned").exists()


@pytest.mark.parametrize("pty", [False, True], ids=["pipes", "pty"])
async def test_session_signal_reaches_the_commands_trap(
    tmp_path: Path, backend: str, pty: bool
) -> None:
    """`Signal(SIGINT)` reaches the command's group: its trap runs, and it goes on running."""
    script = "trap 'echo got INT' INT; echo ready; while :; do sleep 0.1; done"
    async with sandboxed(tmp_path, backend) as ex:
        with anyio.fail_after(20):
            async with await ex.start(Command.shell(script), pty=pty) as session:
                seen = await read_until(session, b"ready")
                for _ in range(2):
                    start = len(seen)
                    await session.send_stdin(Signal(UnixSignal.SIGINT))
                    seen = await read_until(session, b"got INT", seen, start)
                # The second trap ran: the first SIGINT left the command running.
                await session.send_stdin(Signal(UnixSignal.SIGTERM))
                with pytest.raises(NonZeroExit) as caught:
                    await session.finalize()
    # bwrap reports its command's death by a signal as the shell does: 128 + n.
    output = caught.value.output
    assert output.signal == UnixSignal.SIGTERM or output.exit_code == 128 + UnixSignal.SIGTERM


async def test_python_repl_through_a_sandboxed_pty(tmp_path: Path, backend: str) -> None:
    """`python3 -i` on a sandboxed pty: Ctrl-C of a loop is a KeyboardInterrupt, and it goes on."""
    async with sandboxed(tmp_path, backend) as ex:
        await drive_repl_on_a_pty(ex)


async def test_python_repl_signalled_through_sandboxed_pipes(tmp_path: Path, backend: str) -> None:
    """`python3 -i -u` over pipes: `Signal(SIGINT)` interrupts a loop and the REPL goes on."""
    async with sandboxed(tmp_path, backend) as ex:
        await drive_repl_through_pipes(ex)


async def test_read_only_runs_shell_with_nothing_writable(tmp_path: Path, backend: str) -> None:
    """`echo hi > notes.md` under ReadOnly fails (read-only); the executor itself still writes."""
    async with sandboxed(tmp_path, backend) as ex:
        read_only = ReadOnly(ex)
        for cmd in (
            Command.shell("echo hi > notes.md"),
            Command.exec(["sh", "-c", "echo hi > notes.md"]),
        ):
            with pytest.raises(NonZeroExit) as caught:
                await read_only.exec_cmd(cmd)
            assert caught.value.output.exit_code != 0
            expected = "Read-only file system" if backend == "bubblewrap" else "Permission denied"
            assert expected in caught.value.output.text()
            with pytest.raises(NonZeroExit):
                await read_only.exec_cmd_streaming(cmd, lambda chunk: None)
        assert not (tmp_path / "notes.md").exists()
        assert await output_of(read_only, "echo reads work") == "reads work\n"
        with pytest.raises(PolicyDenied):
            await read_only.exec_cmd(Command.write_file("notes.md", "x"))
        # The request ends with the call: the executor itself writes again.
        await ex.exec_cmd(Command.shell("echo later > notes.md"))
    assert (tmp_path / "notes.md").read_text() == "later\n"


async def test_read_only_through_wrappers_and_sessions(tmp_path: Path, backend: str) -> None:
    """ReadOnly reaches the sandbox through scopes, and a session it started later."""
    (tmp_path / "sub").mkdir()
    async with sandboxed(tmp_path, backend) as ex:
        scoped = ReadOnly(ex.scoped("sub")).scoped(".")
        text = await fails(scoped, "echo hi > notes.md")
        assert "notes.md" in text
        session = await ReadOnly(ex).start(Command.shell("echo hi > notes.md; echo $?"))
        # Entered outside the ReadOnly call: the request was taken when it was made.
        with anyio.fail_after(10):
            async with session:
                output = await session.finalize()
        assert output.stdout.strip() in (b"1", b"2")
    assert list(tmp_path.rglob("notes.md")) == []


async def test_unknown_program_under_rlimits_is_127(tmp_path: Path, backend: str) -> None:
    """A missing program is 'command not found' (127) even behind prlimit, not a launcher error."""
    async with sandboxed(tmp_path, backend, open_files=64) as ex:
        with pytest.raises(NonZeroExit) as caught:
            await ex.exec_cmd(Command.exec(["no-such-program-xyz"]))
        assert caught.value.output.exit_code == 127
        with pytest.raises(NonZeroExit) as caught:
            await ex.exec_cmd(Command.exec(["./not-here"]))
        assert caught.value.output.exit_code == 127


async def test_streaming_under_the_sandbox(tmp_path: Path, backend: str) -> None:
    """Chunks stream from a sandboxed command as they are printed."""
    seen: list[bytes] = []
    async with sandboxed(tmp_path, backend) as ex:
        output = await ex.exec_cmd_streaming(
            Command.shell("echo a; sleep 0.1; echo b"),
            lambda chunk: seen.append(chunk.data) if isinstance(chunk, Stdout) else None,
        )
    assert b"".join(seen) == output.stdout == b"a\nb\n"


async def gone(token: str, within: float = 2) -> bool:
    """Whether every process holding `token` is gone, waiting up to `within` seconds.

    The kernel kills a PID namespace's processes as its init exits, a moment
    after `bwrap` has reported the command's exit.
    """
    with anyio.move_on_after(within):
        while processes_with(token):
            await anyio.sleep(0.005)
    return not processes_with(token)


def processes_with(token: str) -> list[int]:
    """Live processes whose command line holds `token`."""
    found = []
    needle = token.encode()
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                cmdline = f.read()
        except OSError:
            continue
        if needle in cmdline and alive(int(name)):
            found.append(int(name))
    return found


# --- the system call filter, the launcher, and what the probe reports -------------

# Each denied call, with arguments that do nothing even where it is allowed.
_DENIED_CALLS = {
    "keyctl": (0, -3, 0),
    "add_key": (0, 0, 0, 0, -3),
    "request_key": (0, 0, 0, 0),
    "bpf": (-1, 0, 0),
    "perf_event_open": (0, 0, -1, -1, 0),
    "userfaultfd": (0,),
    "kexec_load": (0, 0, 0, 0),
    "init_module": (0, 0, 0),
    "finit_module": (-1, 0, 0),
    "delete_module": (0, 0),
    "mount": (0, 0, 0, 0, 0),
    "umount2": (0, 0),
    "pivot_root": (0, 0),
    "fsopen": (0, 0),
    "open_by_handle_at": (-1, 0, 0),
    "unshare": (0x10000000,),  # CLONE_NEWUSER
}


async def test_the_filter_denies_with_eperm(tmp_path: Path, backend: str) -> None:
    """Each call the filter denies fails with EPERM; clone3 says ENOSYS; TIOCSTI is refused."""
    from executor._sandbox import seccomp

    if not seccomp.supported():
        pytest.skip("no seccomp filter on this machine")
    calls = {name: (seccomp.SYSCALLS[name], args) for name, args in _DENIED_CALLS.items()}
    calls["clone3"] = (seccomp.SYSCALLS["clone3"], (0, 0))
    (tmp_path / "calls.py").write_text(
        f"""
import ctypes, fcntl, os, termios
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
for name, (number, args) in {calls!r}.items():
    result = libc.syscall(*[ctypes.c_long(a) for a in (number, *args)])
    print(name, ctypes.get_errno() if result < 0 else "allowed")
master, slave = os.openpty()
try:
    fcntl.ioctl(slave, termios.TIOCSTI, b"x")
    print("TIOCSTI allowed")
except OSError as error:
    print("TIOCSTI", error.errno)
"""
    )
    async with sandboxed(tmp_path, backend) as ex:
        lines = (await output_of(ex, "python3 calls.py")).splitlines()
    found = dict(line.split(" ", 1) for line in lines)
    expected = {name: str(errno.EPERM) for name in _DENIED_CALLS}
    assert found == {**expected, "clone3": str(errno.ENOSYS), "TIOCSTI": str(errno.EPERM)}


async def test_sysv_ipc_is_denied_only_without_an_ipc_namespace(
    tmp_path: Path, backend: str
) -> None:
    """A command's own SysV segment works where it has an IPC namespace, and is EPERM where not."""
    async with sandboxed(tmp_path, backend) as ex:
        said = await output_of(
            ex,
            "python3 -c 'import ctypes; libc = ctypes.CDLL(None, use_errno=True); "
            "print(libc.shmget(0, 4096, 0o1600) >= 0, ctypes.get_errno())'",
        )
    namespace = backend == "bubblewrap" or ROOT
    assert said.split() == (["True", "0"] if namespace else ["False", str(errno.EPERM)])


async def test_without_the_filter_nothing_is_filtered(tmp_path: Path, backend: str) -> None:
    """syscall_filter=False installs no filter; by default one is in force."""
    status = "grep '^Seccomp:' /proc/self/status"
    async with sandboxed(tmp_path, backend) as ex:
        assert (await output_of(ex, status)).split() == ["Seccomp:", "2"]
    async with sandboxed(tmp_path, backend, syscall_filter=False) as ex:
        assert (await output_of(ex, status)).split() == ["Seccomp:", "0"]


async def test_landlock_commands_start_outside_the_executor(tmp_path: Path) -> None:
    """Under Landlock a command's parent is an init, below a launcher, below our zygote."""
    parent_of = "awk '/^PPid:/ {print $2}' /proc/$1/status"
    script = (
        f"up() {{ {parent_of}; }}; init=$PPID; launcher=$(up $init); zygote=$(up $launcher); "
        "echo $init $launcher $zygote $(up $zygote); "
        "cat /proc/$init/environ >/dev/null 2>&1 && echo readable || echo unreadable"
    )
    async with sandboxed(tmp_path, "landlock") as ex:
        init, launcher, zygote, executor, environ = (await output_of(ex, script)).split()
    assert os.getpid() not in (int(init), int(launcher), int(zygote))
    assert int(executor) == os.getpid()
    assert environ == "unreadable"  # init is not dumpable
    # The zygote holds nothing of this process: not its environment (which,
    # as it is not dumpable, only root may read).
    if ROOT:
        assert psutil.Process(int(zygote)).environ() == {}
    else:
        with pytest.raises(psutil.AccessDenied):
            psutil.Process(int(zygote)).environ()


def test_the_zygote_ends_with_the_process_without_a_warning(tmp_path: Path) -> None:
    """At exit the zygote's socket is closed and the zygote reaped: no `ResourceWarning`.

    Left to the interpreter's teardown, the socket was closed with an
    "unclosed socket" warning on every exit of a process that ran a
    Landlock command.
    """
    sandbox_for("landlock")
    script = (
        "import anyio, sys\n"
        "from executor import Command, LocalExecutor, Sandbox\n"
        "async def main():\n"
        f"    sandbox = Sandbox(backend='landlock', readable={PYTHON!r})\n"
        f"    async with LocalExecutor({str(tmp_path)!r}, sandbox=sandbox) as ex:\n"
        "        print((await ex.exec_cmd(Command.shell('echo ran'))).stdout.decode().strip())\n"
        "anyio.run(main)\n"
    )
    child = subprocess.run(
        [sys.executable, "-X", "dev", "-W", "always::ResourceWarning", "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (child.returncode, child.stdout) == (0, "ran\n"), child.stderr
    assert "ResourceWarning" not in child.stderr, child.stderr


async def test_concurrent_landlock_commands_do_not_share_a_domain(tmp_path: Path) -> None:
    """One command cannot ptrace another of the same executor: each has a Landlock domain."""
    async with sandboxed(tmp_path, "landlock") as ex, anyio.create_task_group() as tasks:
        tasks.start_soon(output_of, ex, "echo $$ > victim; sleep 2")
        with anyio.fail_after(10):
            while not (tmp_path / "victim").exists() or not (tmp_path / "victim").read_text():
                await anyio.sleep(0.02)
        victim = int((tmp_path / "victim").read_text())
        said = await output_of(
            ex,
            "python3 -c 'import ctypes; libc = ctypes.CDLL(None, use_errno=True); "
            f"print(libc.ptrace(16, {victim}, 0, 0), ctypes.get_errno())'",
        )
        assert said.split() == ["-1", str(errno.EPERM)]


async def test_a_landlock_init_runs_commands_in_turn_sharing_nothing_of_theirs(
    tmp_path: Path,
) -> None:
    """Commands one after another share inits, never a keyring, IPC namespace, filter or capability.

    An init runs its rule set's commands one at a time, each from a thread
    that confined itself anew: the first command's SysV segment is not the
    next one's, and filters do not pile up.
    """
    script = (
        "echo $PPID; grep -E '^(CapEff|Seccomp_filters):' "
        "/proc/self/status; python3 -c 'import ctypes; "
        "print(ctypes.CDLL(None).syscall(250, 0, -3, 0))'; cat /proc/sysvipc/shm | wc -l; "
        "python3 -c 'import ctypes; ctypes.CDLL(None).shmget(0, 4096, 0o1600)'"
    )
    async with sandboxed(tmp_path, "landlock", syscall_filter=False) as ex:
        runs = [(await output_of(ex, script)).split() for _ in range(8)]
    async with sandboxed(tmp_path, "landlock") as ex:
        filtered = [(await output_of(ex, script)).split() for _ in range(4)]
    inits = [run[0] for run in runs]
    assert len(set(inits)) < len(inits), "no init ran two commands"
    keyrings = [run[-2] for run in runs]
    assert len(set(keyrings)) == len(keyrings), keyrings
    for run in runs + filtered:
        assert run[run.index("CapEff:") + 1] == "0000000000000000"
        if "Seccomp_filters:" in run:
            assert run[run.index("Seccomp_filters:") + 1] == ("1" if run in filtered else "0")
    if ROOT:
        # An IPC namespace of each command's own (an inode number freed may come
        # back, so not told by its name): only the table's heading, never the
        # segment an earlier command made.
        assert all(run[-1] == "1" for run in runs), runs


async def test_a_landlock_burst_leaves_a_few_inits(tmp_path: Path) -> None:
    """Thirty commands at once do not leave thirty idle inits behind."""
    async with sandboxed(tmp_path, "landlock") as ex:
        async with anyio.create_task_group() as tasks:
            for _ in range(30):
                tasks.start_soon(ex.exec_cmd, Command.shell("sleep 0.2"))
        launcher = psutil.Process(int(await output_of(ex, "echo $PPID"))).ppid()
        with anyio.fail_after(10):
            # Two kept idle, two more at most, and the one the executor holds.
            while len(psutil.Process(launcher).children()) > 5:
                await anyio.sleep(0.05)


def test_the_program_is_found_where_shutil_which_finds_it(tmp_path: Path) -> None:
    """The sandbox's PATH search agrees with shutil.which, and fails as exec would."""
    folders = [tmp_path / name for name in ("plain", "dir", "exe", "later")]
    for folder in folders:
        folder.mkdir()
    (tmp_path / "plain" / "tool").write_text("not executable\n")
    (tmp_path / "dir" / "tool").mkdir()
    for name in ("exe", "later"):
        (tmp_path / name / "tool").write_text("#!/bin/sh\n")
        (tmp_path / name / "tool").chmod(0o755)
    every = os.pathsep.join(str(folder) for folder in folders)
    for search in (every, f"{tmp_path / 'missing'}{os.pathsep}{every}", str(folders[0]), ""):
        expected = shutil.which("tool", path=search)
        if expected is None:
            with pytest.raises(FileNotFoundError):
                find_program("tool", {"PATH": search}, str(tmp_path))
        else:
            assert find_program("tool", {"PATH": search}, str(tmp_path)) == expected
    assert find_program("tool", {"PATH": every}, str(tmp_path)) == str(folders[2] / "tool")
    with pytest.raises(FileNotFoundError):
        find_program("no-such-tool", {"PATH": every}, str(tmp_path))


def test_probe_reports_the_filter_and_each_protection() -> None:
    """probe() says whether the filter can be installed, and how each protection holds."""
    from executor._sandbox import seccomp

    support = Sandbox.probe(refresh=True)
    assert support.seccomp == seccomp.supported()
    assert support.keyrings == os.path.exists("/proc/keys")
    report = str(support)
    for word in ("system call filter", "keyrings", "TIOCSTI", "named unix sockets"):
        assert word in report
    for backend in ("bubblewrap", "bwrap", "landlock"):
        protections = support.protections(backend)
        assert set(protections) >= {
            "system call filter",
            "executor's memory and environment",
            "processes left behind",
            "host keyrings",
            "host SysV IPC",
            "host terminals (TIOCSTI, TIOCLINUX)",
            "named unix sockets",
        }
        if support.seccomp:
            assert not protections["host keyrings"].startswith("missing")
    off = support.protections("landlock", syscall_filter=False)
    assert off["system call filter"].startswith("missing")
    assert off["host terminals (TIOCSTI, TIOCLINUX)"].startswith("missing")
    with pytest.raises(ValueError, match="backend"):
        support.protections("docker")


def test_a_sandbox_the_filter_cannot_be_given_to_is_refused() -> None:
    """Without seccomp the sandbox is refused, naming the filter; turned off, it is accepted."""
    support = attrs.evolve(Sandbox.probe(), seccomp=False)
    for backend in ("bubblewrap", "landlock"):
        with pytest.raises(ExecutorError, match="system call filter") as caught:
            Sandbox(backend=backend).choose_backend(support)
        assert "syscall_filter=False" in str(caught.value)
    if Sandbox.probe().bubblewrap_works:
        assert Sandbox(syscall_filter=False).choose_backend(support) == "bubblewrap"


def test_bwrap_is_a_spelling_of_bubblewrap() -> None:
    """backend="bwrap" is kept as "bubblewrap"; other names are still refused."""
    assert Sandbox(backend="bwrap").backend == "bubblewrap"
    assert Sandbox(backend="bwrap") == Sandbox(backend="bubblewrap")
    assert repr(Sandbox(backend="bwrap")) == "Sandbox(backend='bubblewrap')"
    with pytest.raises(ValueError, match="bwrap"):
        Sandbox(backend="bwrap2")  # type: ignore[arg-type]
