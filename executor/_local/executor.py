"""`LocalExecutor`: commands as processes on this machine."""

from __future__ import annotations

import contextlib
import errno
import functools
import itertools
import math
import os
import posixpath
import stat
import tempfile
import uuid
import weakref
from collections.abc import AsyncIterator, Iterable

import anyio
import attrs

from executor._core.base import (
    CommandRunner,
    LoadedFile,
    call_sink,
    file_failure,
    report_failure,
)
from executor._core.cleanup import run_to_completion
from executor._core.commands import (
    Command,
    ReadFile,
    StrPath,
    WriteFile,
)
from executor._core.errors import ExecutorError, NonZeroExit, TimedOut
from executor._core.output import CommandOutput, Sink, Stderr, Stdout
from executor._core.proc import boot_clock
from executor._core.readonly import running_read_only
from executor._core.run import Run
from executor._core.session import ProcessSession
from executor._files.rules import normalise_extensions, wanted as wanted_name
from executor._files.walk import stream_text_files
from executor._local.confine import (
    check_spelling,
    open_beneath,
    open_dir_beneath,
    relative_to_workdir,
)
from executor._local.process import (
    LocalRun,
    Spawned,
    StartFailed,
    Supervisor,
    end_tree,
    kill_tree,
    spawn_served,
    wait_exit,
)
from executor._sandbox.landlock import LandlockRules
from executor._sandbox.sandbox import (
    LandlockLauncher,
    Sandbox,
    SandboxServer,
    find_program,
    signal_served,
)

# Errors that say the machine is out of something, not that the command is wrong.
_RESOURCE_ERRORS = frozenset({errno.EMFILE, errno.ENFILE, errno.EAGAIN, errno.ENOMEM})
# read_file reads this much per step.
_FILE_BLOCK = 1 << 20
# Exit codes for a program that could not be started, as POSIX shells report them.
_NOT_FOUND = 127
_NOT_EXECUTABLE = 126
# How many names a confined write tries for its temporary file before giving up.
_TEMPORARY_NAMES = 100


def _absolute(path: StrPath) -> str:
    return os.path.abspath(os.fspath(path))


def _positive(_: object, attribute: attrs.Attribute[int | None], value: int | None) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise ValueError(f"{attribute.name} must be a positive whole number or None, not {value!r}")


@attrs.define(eq=False)
class LocalExecutor(CommandRunner):
    """Runs commands as processes on this machine.

    Each command runs in its own session and process group, tagged so that
    everything it starts can be found again. On timeout, cancellation or a
    failing sink the whole tree gets SIGTERM, `kill_grace` seconds, then
    SIGKILL, and is reaped before the call returns. A background job that
    outlives its command (`nohup server >log 2>&1 &`) runs until `aclose()`.

    With `confine=True` the executor's own file operations (`read_file`,
    `write_file`, `stream_files`) and the folder each shell or argv command
    starts in never leave `workdir`: not through `..` in any spelling, an
    absolute path, a symlink that points out, nor a symlink swapped in between
    a check and the use. The workdir is opened once, at first use, and every
    path is resolved beneath that descriptor (`openat2` with
    `RESOLVE_BENEATH`, or an `O_NOFOLLOW` walk by the same rules where the
    kernel lacks it; see `executor._local.confine`). Symlinks are followed while
    they stay inside; an absolute symlink is refused even when it points
    inside, as the kernel does. A path that would leave, and spellings meant
    as something else (`~`, `$HOME`, Unicode look-alikes of `.` and `/`), are
    refused with `PolicyDenied` naming the path and the reason. An absolute
    path is accepted when it lies in the workdir. The workdir must exist at
    first use, and stays the directory opened then (a workdir renamed or
    replaced later is not followed). Confinement is by path, not inode: a hard
    link inside to a file outside is inside. It does NOT confine what a
    command does once running: `cat /etc/passwd` or `cd ..` in a script is
    the job of an OS sandbox.

    Args:
        workdir: Where commands start; made absolute when the executor is built.
        default_timeout: Seconds for commands without a timeout of their own.
        env_clear: Start from an empty environment instead of this process's.
        env_remove: Variables to drop (after `env_clear`).
        envs: Variables to set (after `env_remove`); a command's own `with_env`
            comes last.
        output_limit: Bytes of output kept in memory per command; past it the
            head and tail are kept, `truncated` is set, and `text()` marks the
            cut (`CommandOutput.elided`). Sinks still see every byte. The
            default, 32 MiB, guards against floods; `None` keeps everything.
            File reads are not cut: see `read_limit`.
        stream_output_limit: Bytes of output kept in memory per command when
            a sink sees every chunk (`exec_cmd_streaming`): the smaller of this
            and `output_limit` applies. The default, 4 MiB, keeps a flood
            streamed through a sink from growing the process by more than a
            few MiB (the sink has every byte; `spill=` keeps them too); `None`
            leaves it to `output_limit`. A file read keeps `output_limit`.
        read_limit: Bytes a `read_file` may return; a larger file fails with
            its size and the limit named, and nothing of it is returned.
            `None` (the default) reads any file whole.
        spill: Keep the whole output of a command whose output was cut in a
            file of its own (`CommandOutput.elided.spill`), in this folder, or
            with `True` in a folder of the system's temporary directory; the
            files are the caller's to remove. `False` (the default) keeps none.
        login: Run shell scripts in a login shell, `bash --login -c`, so
            `/etc/profile` and the profile files apply; where there is no
            bash, such a command fails with `ExecutorError`. A command's own
            `Command.shell(..., login=)` wins.
        kill_grace: Seconds between SIGTERM and SIGKILL when a tree is killed.
        drain_timeout: After a command exits, how long to go on reading while
            a background process still holds its output pipes.
        confine: Keep file operations and commands' starting folders inside
            `workdir`, as above.
        memory: Bytes of memory the whole tree of each unsandboxed command
            may use (its cgroup's `memory.max`, or `memory.limit_in_bytes` on
            a cgroup v1 host); past it the kernel's OOM killer ends a process
            of the tree. Needs a cgroup with the memory controller (delegated,
            or as root): refused with `ExecutorError` where there is none.
        pids: How many processes and threads each unsandboxed command's tree
            may have at once (`pids.max`): a fork bomb stops there. Needs the
            pids controller, as `memory` does.
        sandbox: Run every shell and argv command (sessions and PTYs too)
            under an OS sandbox (see `Sandbox`): read-only but for the
            writable paths, no home folder, no network, bounded resources.
            Checked when the executor is built: a guarantee the machine
            cannot give raises `ExecutorError`. The executor's own file
            operations are not sandboxed (`confine` keeps them in the workdir).

    Without a sandbox, every command is started by the executor's supervisor:
    a small process (a child subreaper, started with the executor) that
    forks a subreaper of its own for each command, so every process the
    command starts stays in a tree the supervisor knows, whatever it does to
    its environment, session or parent (`env -i`, `setsid`, a double fork,
    `nohup`, `disown`). A timeout, a cancel, a failing sink or `aclose()`
    ends every process of the tree; the supervisor dies with the thread that
    built the executor, and takes every tree with it. This process is never
    made a subreaper. Where it may make cgroups (cgroup v2 delegated, or
    root; see `Sandbox.probe()`), each command gets one: its tree is read
    from it and ended with `cgroup.kill`, `memory=` and `pids=` are enforced,
    `CommandOutput.memory_peak` says what it used, and a command the OOM
    killer ended (it, or a process of its tree) raises `OutOfMemory` (its
    output's `oom_killed` set), whose message says so.

    Raises:
        ExecutorError: The sandbox asked for cannot be given on this machine,
            or a limit (`memory=`, `pids=`) cannot be enforced here.
        ValueError: A limit is not a positive whole number, or is given with a sandbox.

    """

    workdir: str = attrs.field(default=".", converter=_absolute)
    confine: bool = attrs.field(default=False, kw_only=True)
    sandbox: Sandbox | None = attrs.field(default=None, kw_only=True)
    memory: int | None = attrs.field(default=None, kw_only=True, validator=_positive)
    pids: int | None = attrs.field(default=None, kw_only=True, validator=_positive)
    # The tag's owner pid lets tools tell whose processes they are, and whether the owner is gone.
    _id: str = attrs.field(
        init=False, factory=lambda: f"{os.getpid()}:{uuid.uuid4().hex}", repr=False
    )
    _serial: itertools.count[int] = attrs.field(init=False, factory=itertools.count, repr=False)
    # No process of ours started before the executor was built.
    _created: float = attrs.field(init=False, factory=boot_clock, repr=False)
    # Confined only: the workdir's O_PATH descriptor, and what closes it once
    # (at aclose, or when the executor is collected without one).
    _root: int | None = attrs.field(init=False, default=None, repr=False)
    _release: weakref.finalize[[int], LocalExecutor] | None = attrs.field(
        init=False, default=None, repr=False
    )
    _workdirs: tuple[str, ...] = attrs.field(init=False, default=(), repr=False)
    # Sandboxed only: the backend chosen when built, and what starts the
    # commands: (Landlock) a thread per rule set, restricted once; (bubblewrap)
    # a sandbox server for read-write commands and one for read-only ones.
    _backend: str | None = attrs.field(init=False, default=None, repr=False)
    _launchers: dict[LandlockRules, LandlockLauncher] = attrs.field(
        init=False, factory=dict, repr=False
    )
    _servers: dict[bool, SandboxServer] = attrs.field(init=False, factory=dict, repr=False)
    _retired: list[SandboxServer] = attrs.field(init=False, factory=list, repr=False)
    # Unsandboxed only: the subreaper that starts every command (see `Supervisor`).
    _supervisor: Supervisor | None = attrs.field(init=False, default=None, repr=False)
    # What `_layered` made, and what it was made from.
    _environment: tuple[tuple[object, object], dict[str, str]] | None = attrs.field(
        init=False, default=None, repr=False
    )

    def __attrs_post_init__(self) -> None:
        if self.sandbox is not None:
            if self.memory is not None or self.pids is not None:
                raise ValueError(
                    "memory= and pids= of LocalExecutor bound unsandboxed commands; "
                    "a sandbox has limits of its own (Sandbox(memory=..., pids=...))"
                )
            self._backend = self.sandbox.choose_backend()
        else:
            # Started now, not at the first command: the first command costs no
            # interpreter's start, and the executor's descriptors are all open
            # from the start. A limit no cgroup here can enforce is refused now.
            self._supervisor = Supervisor({"memory": self.memory, "pids": self.pids})
            self._supervisor.start()

    def __repr__(self) -> str:
        options = ", confine=True" if self.confine else ""
        if self.sandbox is not None:
            options += f", sandbox={self.sandbox!r}"
        return f"LocalExecutor({self.workdir!r}{options})"

    @property
    def enforces_read_only(self) -> bool:
        """Whether commands can be run with every path read-only: with a sandbox."""
        return self.sandbox is not None

    async def start(self, cmd: Command, *, pty: bool = False) -> ProcessSession:
        """Return a session for a shell or argv command: `async with await ex.start(cmd)`.

        The process is spawned when the session is entered, in the folder,
        environment and confinement `exec_cmd` would use, with the command's
        timeout (or `default_timeout`). A command's own `stdin` is written
        first and the input stays open. See `ProcessSession`.

        Raises:
            ExecutorError: The executor is closed, the command is a file
                operation, or a `#!` script (its body is the interpreter's stdin).

        """
        argv = self._session_argv(cmd)

        # A session starts later, outside the ReadOnly call that made it: take its request now.
        read_only = running_read_only()

        async def open_process() -> Run:
            self._check_open()
            spawned = await self._spawn(
                cmd, argv, stdin=True, sink=None, pty=pty, read_only=read_only
            )
            # The session ends what the command left when its block is left.
            return LocalRun(spawned, keep_tree=True, pty=pty)

        # The run's reader lets the loop in at least every millisecond of a
        # flood, and a full chunk buffer makes it wait: a trip per chunk
        # besides measured no faster (`bench_sessions.py`, 0.92-1.06x
        # `exec_cmd_streaming` either way).
        return self._run_session(open_process, cmd, pty=pty, offer_yields=False)

    async def stream_files(
        self, path: StrPath, extensions: Iterable[str] | None = None
    ) -> AsyncIterator[LoadedFile]:
        """Yield the text files below `path` (relative to `workdir`); see `ToolExecutor`."""
        self._check_open()
        raw = os.fspath(path)
        # Paths come back as the caller would write them: "src/a.py", not "./src/a.py".
        display = os.path.normpath(raw)  # noqa: ASYNC240 (string only)
        if display == ".":
            display = ""
        wanted = normalise_extensions(extensions)
        if not self.confine:
            # Closed at once when the caller stops early, so its threads end then.
            unconfined = stream_text_files(
                os.path.join(self.workdir, display or "."), display, extensions=wanted
            )
            async with contextlib.aclosing(unconfined) as files:
                async for loaded in files:
                    yield loaded
            return
        relative = self._beneath(raw, raw)
        root = self._root_fd()
        try:
            target, mode = await anyio.to_thread.run_sync(_open_listing_root, root, relative, raw)
        except BaseException:
            os.close(root)
            raise
        try:
            walked: str | int
            if stat.S_ISDIR(mode):
                # The walk gets the folder as the descriptor opened beneath the
                # workdir and follows no symlink below it, so it cannot leave.
                # In this mode it applies only ignore files inside the folder.
                walked = target
            elif stat.S_ISREG(mode):
                # A file named as the root is listed by itself, as unconfined.
                # The walk reads it through the magic link, which reaches the
                # very file opened beneath, not whatever its path names now;
                # the extension is judged on its name, which that link hides.
                if not wanted_name(posixpath.basename(display), wanted):
                    return
                walked, wanted = f"/proc/self/fd/{target}", None
            else:
                return  # A FIFO, socket or device is no file to list, as unconfined.
            # The ignore files of the workdir, above it, and between it and
            # the folder count too, read beneath the workdir's descriptor.
            base = (root, self.workdir) if isinstance(walked, int) else None
            # Closed before the descriptors it walks, even when the caller stops early.
            confined = stream_text_files(walked, display, extensions=wanted, base=base)
            async with contextlib.aclosing(confined) as files:
                async for loaded in files:
                    yield loaded
        finally:
            os.close(target)
            os.close(root)

    async def _shut_down(self) -> None:
        """Kill every process this executor started that still runs, then end its servers."""
        supervisor, self._supervisor = self._supervisor, None
        if supervisor is not None:
            # Every unsandboxed command's tree is below it: no search of the host.
            await supervisor.aclose(self.kill_grace)
        if self.sandbox is not None:
            await kill_tree(f"{self._id}/", prefix=True, grace=self.kill_grace, since=self._created)
        launchers, self._launchers = self._launchers, {}
        for launcher in launchers.values():
            await launcher.aclose()
        servers, self._servers = self._servers, {}
        retired, self._retired = self._retired, []
        for server in [*servers.values(), *retired]:
            await server.aclose()
        if self._release is not None:
            # Calls in flight hold duplicates of their own, so closing is safe now.
            self._release()

    def environment(self, cmd: Command | None = None) -> dict[str, str]:
        """The environment `cmd` runs with.

        Inherited, then cleared (`env_clear`), then `env_remove`, then `envs`;
        then the command's own `env_remove` (less its `env_keep`) and `env`.
        """
        env = self._layered()
        if cmd is not None:
            return cmd.environment_over(env)
        return dict(env)

    def _layered(self) -> dict[str, str]:
        """This executor's environment for every command (not to be changed: it is kept).

        `os.environ` decodes each of its entries at every read (about 20 µs
        a command for a few dozen variables): the result is kept, and made
        again only when this process's environment or the layers change.
        """
        # CPython's own bytes mapping behind `os.environ`: compared, not decoded.
        inherited = getattr(os.environ, "_data", None)
        key = (self.env_clear, self.env_remove, self.envs)
        cached = self._environment
        if cached is not None and inherited is not None and cached[0] == (inherited, key):
            return cached[1]
        env = {} if self.env_clear else dict(os.environ)
        for name in self.env_remove:
            env.pop(name, None)
        env.update(self.envs)
        if inherited is not None:
            self._environment = ((dict(inherited), key), env)
        return env

    def resolve(self, cmd: Command, path: StrPath | None = None) -> str:
        """The absolute directory `cmd` runs in, or `path` resolved against it.

        This is the text only. A confined executor does not open this path:
        it resolves the same text beneath its workdir's descriptor, or
        refuses it.
        """
        directory = self.workdir
        if cmd.current_dir is not None:
            directory = os.path.join(directory, cmd.current_dir)
        return directory if path is None else os.path.join(directory, path)

    def _root_fd(self) -> int:
        """A new descriptor of the workdir (confined), for one call to use and close.

        The workdir is opened once, at first use. Each call gets a duplicate,
        so `aclose()` can close the original while a worker thread is still
        resolving a path: the number it uses cannot be closed and reused under
        it for another directory.
        """
        return os.dup(self._open_root())

    def _open_root(self) -> int:
        """The workdir's own descriptor (confined), opened at the first call."""
        self._check_open()
        if self._root is None:
            try:
                root = os.open(self.workdir, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
            except OSError as error:
                raise ExecutorError(
                    f"cannot open the workdir {self.workdir}: {error.strerror}"
                ) from error
            self._root = root
            self._release = weakref.finalize(self, os.close, root)
            # Absolute paths may name the workdir as configured or as the OS
            # reports it (`pwd` in a command prints the real path). Either
            # spelling only decides what is relative to the descriptor.
            real = os.path.realpath(self.workdir)
            self._workdirs = tuple(dict.fromkeys((self.workdir, real)))
        return self._root

    def _shown(self, cmd: Command, path: StrPath | None = None) -> str:
        """How a refusal names what `cmd` asked for: its path joined onto its `current_dir`."""
        parts = [cmd.current_dir, None if path is None else os.fspath(path)]
        given = [part for part in parts if part is not None]
        return os.path.join(*given) if given else "."

    def _beneath(self, shown: str, *given: str | None) -> str:
        """The path made of `given` (current_dir, path), relative to the workdir, or refused.

        Raises:
            PathRefused: A spelling is refused, or the text alone leaves the workdir.

        """
        for raw in given:
            if raw is not None:
                check_spelling(raw, shown)
        self._open_root()
        joined = os.path.join(self.workdir, *(raw for raw in given if raw is not None))
        return relative_to_workdir(joined, self._workdirs, shown)

    async def _process(
        self, cmd: Command, argv: Iterable[str], stdin: bytes | None, sink: Sink | None
    ) -> CommandOutput:
        timeout = self._timeout(cmd)
        started = anyio.current_time()
        spawned = await self._spawn(
            cmd, argv, stdin=stdin is not None, sink=sink, timeout=timeout, wait=False
        )
        try:
            output = await self._drive(LocalRun(spawned), cmd, stdin, sink)
        except StartFailed as failed:
            # Reported by the shim once the run had begun (see `_spawn`'s `wait`).
            cwd = self.resolve(cmd) if failed.where == "cwd" else None
            raise await self._start_failed(failed.error, argv, cwd, started, sink) from None
        return self._checked(output)

    def _killed_by_close(self, output: CommandOutput) -> bool:
        # A local process killed by aclose() dies of a signal, which is reported.
        return output.signal is not None

    def _memory_limit(self) -> int | None:
        return self.memory

    async def _spawn(
        self,
        cmd: Command,
        argv: Iterable[str],
        *,
        stdin: bool,
        sink: Sink | None,
        pty: bool = False,
        read_only: bool | None = None,
        timeout: float | None = None,
        wait: bool = True,
    ) -> Spawned:
        """Start `cmd`'s process in its folder (opened beneath the workdir when confined).

        Sandboxed, the process starts under the sandbox, with nothing writable
        when `read_only` (by default: when `ReadOnly` asked, see `running_read_only`).
        `timeout` is the run's, for a supervisor's shim to keep as well. With
        `wait=False` an unsandboxed command's start is not waited for: its
        failure is `StartFailed` from the run (see `Supervisor.spawn`).
        """
        started = anyio.current_time()
        held: int | None = None
        if self.confine:
            try:
                held = self._open_current_dir(cmd)
            except OSError as error:
                if error.errno in _RESOURCE_ERRORS:
                    raise ExecutorError(f"cannot start a process: {error.strerror}") from error
                failure = _spawn_failure(error, argv, self.resolve(cmd), started)
                await report_failure(sink, failure)
                raise failure from error
            # The child's chdir follows this magic link to exactly the folder
            # opened beneath the workdir; no path is resolved again. CPython's
            # child does the chdir before it closes inherited descriptors
            # (_posixsubprocess.c, child_exec), and fork copies every
            # descriptor, so the close-on-exec one is there to chdir through
            # and is still closed before the program runs.
            cwd = f"/proc/self/fd/{held}"
        else:
            cwd = self.resolve(cmd)
        env = self.environment(cmd)
        launcher: LandlockLauncher | None = None
        tag = f"{self._id}/{next(self._serial)}"
        try:
            if self.sandbox is not None:
                read_only = running_read_only() if read_only is None else read_only
                argv, launcher, cwd, program = self._sandboxed(
                    argv, env=env, cwd=cwd, read_only=read_only
                )
                if self._backend == "bubblewrap":
                    return await self._serve(
                        argv,
                        cwd,
                        env,
                        tag,
                        stdin=stdin,
                        pty=pty,
                        read_only=read_only,
                        program=program,
                    )
            if launcher is None:
                # Unsandboxed: the supervisor starts it, below a subreaper of its own.
                return await self._supervised().spawn(
                    argv,
                    cwd=cwd,
                    env=env,
                    tag=tag,
                    stdin=stdin,
                    pty=pty,
                    cwd_fd=held,
                    kill_grace=self.kill_grace,
                    timeout=timeout,
                    wait=wait,
                )
            # Landlock: the launcher, a process of its own, starts it.
            spawned = await spawn_served(
                launcher, argv, cwd=cwd, env=env, tag=tag, stdin=stdin, pty=pty, program=program
            )
            spawned.signaller = functools.partial(signal_served, spawned)
            return spawned
        except OSError as error:
            cwd_failed = not os.path.isdir(cwd)  # noqa: ASYNC240 (one stat, failure path)
            raise await self._start_failed(
                error, argv, cwd if cwd_failed else None, started, sink
            ) from error
        finally:
            if held is not None:
                os.close(held)

    async def _start_failed(
        self,
        error: OSError,
        argv: Iterable[str],
        cwd: str | None,
        started: float,
        sink: Sink | None,
    ) -> Exception:
        """What a start that failed raises (`cwd`: the folder, when it was what failed).

        A command's failure (no such program, no such folder) is its exit, as
        a shell reports it, and goes to the sink too; the executor's own
        (its workdir gone, no descriptor or memory left) is `ExecutorError`.
        """
        if error.errno in _RESOURCE_ERRORS:
            return ExecutorError(f"cannot start a process: {error.strerror}")
        if cwd is not None and cwd == self.workdir:
            # The executor's own folder is missing: its fault, not the command's.
            return ExecutorError(f"cannot run in {cwd}: {error.strerror}")
        failure = _spawn_failure(error, argv, cwd, started)
        await report_failure(sink, failure)
        return failure

    async def _serve(
        self,
        argv: list[str],
        cwd: str,
        env: dict[str, str],
        tag: str,
        *,
        stdin: bool,
        pty: bool,
        read_only: bool,
        program: str | None,
    ) -> Spawned:
        """Start a command in this executor's bubblewrap sandbox (see `SandboxServer`).

        `program` is where `argv[0]` was found (else the sandbox searches PATH).

        Raises:
            ExecutorError: The sandbox cannot be built.

        """
        assert self.sandbox is not None
        server = self._servers.get(read_only)
        if server is not None and server.stale():
            # A bound path was deleted or made again since the sandbox was
            # built: a new one binds what is there now. Commands still running
            # in the old one go on; it ends when they have.
            del self._servers[read_only]
            server.retire()
            self._retired = [old for old in self._retired if not old.ended()]
            self._retired.append(server)
            server = None
        if server is None:
            if self._closed:
                raise ExecutorError("the executor is closed")
            config = self.sandbox.server_config(Sandbox.probe(), self.workdir, read_only=read_only)
            try:
                server = self._servers[read_only] = SandboxServer(config)
            except OSError as error:
                raise ExecutorError(f"a path the sandbox binds is gone: {error}") from error
        spawned = await spawn_served(
            server,
            argv,
            cwd=cwd,
            env=env,
            tag=tag,
            stdin=stdin,
            pty=pty,
            rlimits=self.sandbox.named_rlimits(),
            program=program,
        )
        spawned.signaller = functools.partial(signal_served, spawned)
        return spawned

    def _supervised(self) -> Supervisor:
        """The supervisor that starts this executor's unsandboxed commands."""
        if self._supervisor is None:
            self._supervisor = Supervisor({"memory": self.memory, "pids": self.pids})
        return self._supervisor

    async def _abandon(self, spawned: Spawned) -> None:
        """Kill a spawned tree that will not be run, and reap it."""
        try:
            await end_tree(spawned, grace=self.kill_grace)
            await wait_exit(spawned)
        finally:
            spawned.close()

    def _sandboxed(
        self, argv: Iterable[str], *, env: dict[str, str], cwd: str, read_only: bool
    ) -> tuple[list[str], LandlockLauncher | None, str, str | None]:
        """`argv` as the sandbox runs it, its Landlock launcher (or None), its cwd and program.

        The program is the path `argv[0]` was found at, when the folder is there to look from.

        Under `confine`, the cwd becomes the real path of the folder opened
        beneath the workdir: the command starts in a mount namespace of its
        own (bubblewrap) or from another process (Landlock), where a
        descriptor from here is no place to start in. A swap between this and
        the start could only move the starting folder, which the sandbox
        bounds anyway.

        Raises:
            OSError: The program is missing or not executable, as `exec` says it; or,
                under bubblewrap, the folder is missing.
            ExecutorError: The sandbox cannot be set up.

        """
        assert self.sandbox is not None
        argv = list(argv)
        real = os.path.realpath(cwd) if cwd.startswith("/proc/self/fd/") else cwd
        program = None
        if os.path.isdir(real):
            program = find_program(argv[0], env, real)
            if not os.path.isabs(program):
                program = None  # found through a relative PATH entry: the sandbox searches
        else:
            # The sandbox's init could only report it as the command's failure.
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), real)
        if self._backend == "bubblewrap":
            return argv, None, real, program
        support = Sandbox.probe()
        self.sandbox.check_paths(self.workdir, read_only=read_only)
        rules = self.sandbox.landlock_rules(self.workdir, read_only=read_only)
        launcher = self._launchers.get(rules)
        if launcher is None:
            launcher = self._launchers[rules] = LandlockLauncher(rules, support.landlock_abi)
        limits = self.sandbox.rlimit_argv(support)
        # Behind prlimit, the program to start is prlimit.
        return [*limits, *argv], launcher, real, limits[0] if limits else program

    def _open_current_dir(self, cmd: Command) -> int:
        """Open the folder `cmd` starts in beneath the workdir (confined).

        Done in the event loop's thread, like the spawn it precedes: both are
        a handful of system calls.

        Raises:
            PathRefused: `current_dir` leaves the workdir.
            OSError: It is missing or not a folder.

        """
        shown = self._shown(cmd)
        relative = self._beneath(shown, cmd.current_dir)
        root = self._root_fd()
        try:
            folder = open_dir_beneath(root, relative, shown=shown)
        finally:
            os.close(root)
        if not os.path.isdir(f"/proc/self/fd/{folder}"):
            # Without /proc the child could only be sent there by path; fail closed.
            os.close(folder)
            raise ExecutorError("a confined executor needs /proc to start commands")
        return folder

    async def _read_file(self, cmd: ReadFile, sink: Sink | None) -> CommandOutput:
        started = anyio.current_time()
        timeout = self._timeout(cmd)
        buffer = self.file_buffer(cmd.path, sink)
        try:
            if self.confine:
                shown = self._shown(cmd, cmd.path)
                relative = self._beneath(shown, cmd.current_dir, cmd.path)
                root = self._root_fd()
                try:
                    fd = await anyio.to_thread.run_sync(
                        _open_regular_file_beneath, root, relative, shown
                    )
                finally:
                    os.close(root)
            else:
                fd = await anyio.to_thread.run_sync(_open_regular_file, self.resolve(cmd, cmd.path))
        except OSError as error:
            raise await file_failure(cmd.path, error, started, sink) from error
        try:
            # Block by block, each in a worker thread: the sink sees every byte
            # as it is read, and the timeout is checked between blocks. A block
            # is never abandoned mid-read, so the fd is never closed under a
            # thread still reading it.
            buffer.check_size(os.fstat(fd).st_size)
            with anyio.move_on_after(math.inf if timeout is None else timeout) as deadline:
                while block := await anyio.to_thread.run_sync(os.read, fd, _FILE_BLOCK):
                    chunk = Stdout(block)
                    buffer.append(chunk)
                    if sink is not None:
                        await call_sink(sink, chunk)
        except OSError as error:
            raise await file_failure(cmd.path, error, started, sink) from error
        finally:
            os.close(fd)
        output = buffer.output(duration=anyio.current_time() - started)
        if deadline.cancelled_caught:
            assert timeout is not None
            raise TimedOut(timeout, output)
        return output

    async def _write_file(self, cmd: WriteFile, sink: Sink | None) -> CommandOutput:
        # Writes are not abandoned on timeout or cancellation: a write reported
        # as failed must not land later, and no temporary file may stay behind.
        # The thread is awaited to its end whatever cancels the caller (asyncio's
        # native cancel too); they are bounded by the content size.
        started = anyio.current_time()

        async def write() -> None:
            if self.confine:
                shown = self._shown(cmd, cmd.path)
                relative = self._beneath(shown, cmd.current_dir, cmd.path)
                root = self._root_fd()
                try:
                    await anyio.to_thread.run_sync(
                        write_beneath, root, relative, cmd.content, shown
                    )
                finally:
                    os.close(root)
            else:
                await anyio.to_thread.run_sync(
                    write_atomically, self.resolve(cmd, cmd.path), cmd.content
                )

        try:
            await run_to_completion(write)
        except OSError as error:
            raise await file_failure(cmd.path, error, started, sink) from error
        return CommandOutput(duration=anyio.current_time() - started)


def _open_regular_file(path: str) -> int:
    # O_NONBLOCK: opening a FIFO must not hang waiting for a writer.
    return _regular(os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC))


def _open_regular_file_beneath(root: int, path: str, shown: str) -> int:
    # The open itself is the check: the kernel (or the walk) refuses, as part
    # of resolving, any step out of the workdir, so nothing can be swapped in
    # between a check and the use.
    return _regular(open_beneath(root, path, os.O_RDONLY | os.O_NONBLOCK, shown=shown))


def _open_listing_root(root: int, path: str, shown: str) -> tuple[int, int]:
    # An O_PATH descriptor of what `path` names beneath `root`, and its type.
    try:
        fd = open_beneath(root, path, os.O_PATH, shown=shown)
    except (FileNotFoundError, NotADirectoryError) as error:
        # Named as the caller gave it, as the unconfined walk names a missing root.
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), shown) from error
    try:
        return fd, os.fstat(fd).st_mode
    except BaseException:
        os.close(fd)
        raise


def _regular(fd: int) -> int:
    # Refuse what a read would make no sense of, and make reads blocking again.
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR))
        if not stat.S_ISREG(info.st_mode):
            raise OSError(errno.EINVAL, "not a regular file")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _umask() -> int:
    # Read the umask without changing it, which os.umask would do for every thread.
    try:
        with open("/proc/self/status", "rb") as status:
            for line in status:
                if line.startswith(b"Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_atomically(path: str, content: bytes) -> None:
    """Replace `path` with `content` through a temporary file and a rename.

    Parents are created. An existing file keeps its permission bits; a new one
    gets 0o666 less the umask. A symlink at `path` is replaced, not followed.
    A crash at any point leaves the old content or the new, never half a file.
    """
    directory, name = os.path.split(path)
    if not name or name in (".", ".."):
        # Checked before any folder is made: a refused write changes nothing.
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR))
    existing: os.stat_result | None
    try:
        existing = os.lstat(path)
    except FileNotFoundError:
        os.makedirs(directory, exist_ok=True)
        existing = None
    else:
        if stat.S_ISDIR(existing.st_mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR))
    mode = _kept_mode(existing)
    # A short prefix: the temporary name must fit NAME_MAX when the target's does.
    fd, temporary = tempfile.mkstemp(dir=directory, prefix=f".{name[:32]}.", suffix=".tmp")
    try:
        _fill(fd, content, mode)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise


def write_beneath(root: int, path: str, content: bytes, shown: str) -> None:
    """`write_atomically`, for `path` beneath the directory descriptor `root`.

    The parent folder is opened beneath `root` (made one level at a time
    where missing); the temporary file is created in it by a plain name with
    `O_CREAT | O_EXCL` (which follows no symlink), and renamed over the target
    relative to the same descriptor. `rename` replaces a symlink at the
    target rather than following it, so one swapped in at any moment cannot
    redirect the write. A symlink found there beforehand is replaced too, as
    `write_atomically` does, unless it leads outside `root`: that is refused,
    so the model learns the path leads out instead of seeing the link vanish.

    Args:
        root: The workdir's descriptor.
        path: Relative to `root`, already checked by `relative_to_workdir`.
        content: The bytes to write.
        shown: How to name the path in a refusal.

    Raises:
        PathRefused: The parent, or a symlink at the target, leads outside.
        OSError: The write failed; nothing was replaced.

    """
    directory, name = posixpath.split(path)
    if not name or name in (".", ".."):
        # Checked before any folder is made: a refused write changes nothing.
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR))
    parent = open_dir_beneath(root, directory or ".", shown=shown, create=True)
    try:
        existing: os.stat_result | None
        try:
            existing = os.stat(name, dir_fd=parent, follow_symlinks=False)
        except FileNotFoundError:
            existing = None
        else:
            if stat.S_ISDIR(existing.st_mode):
                raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR))
            if stat.S_ISLNK(existing.st_mode):
                _refuse_if_outside(root, path, shown)
        mode = _kept_mode(existing)
        fd, temporary = _temporary_file(parent, name)
        try:
            _fill(fd, content, mode)
            os.replace(temporary, name, src_dir_fd=parent, dst_dir_fd=parent)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temporary, dir_fd=parent)
            raise
    finally:
        os.close(parent)


def _kept_mode(existing: os.stat_result | None) -> int:
    # A regular file keeps its mode; a new file, or one replacing a symlink or
    # a special file, gets what the umask gives.
    if existing is not None and stat.S_ISREG(existing.st_mode):
        return stat.S_IMODE(existing.st_mode)
    return 0o666 & ~_umask()


def _fill(fd: int, content: bytes, mode: int) -> None:
    # The new temporary file, written whole, given its mode and synced before
    # the rename makes it the target: a crash never leaves half a file there.
    with open(fd, "wb", closefd=True) as file:
        file.write(content)
        os.fchmod(file.fileno(), mode)
        file.flush()
        os.fsync(file.fileno())


def _refuse_if_outside(root: int, path: str, shown: str) -> None:
    # Resolve the symlink beneath the root without using what it finds: only
    # whether it leads out matters (a dangling one inside is fine to replace).
    with contextlib.suppress(OSError):
        os.close(open_beneath(root, path, os.O_PATH, shown=shown))


def _temporary_file(directory: int, name: str) -> tuple[int, str]:
    # As mkstemp, but relative to a descriptor: O_EXCL never follows a symlink
    # and never opens a file someone else made. A short prefix keeps the name
    # within NAME_MAX when the target's is.
    for _ in range(_TEMPORARY_NAMES):
        temporary = f".{name[:32]}.{uuid.uuid4().hex[:12]}.tmp"
        try:
            fd = os.open(
                temporary,
                os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                0o600,
                dir_fd=directory,
            )
        except FileExistsError:
            continue
        return fd, temporary
    raise FileExistsError(errno.EEXIST, "no unused temporary file name", name)


def _spawn_failure(
    error: OSError, argv: Iterable[str], cwd: str | None, started: float
) -> NonZeroExit:
    program = next(iter(argv))
    if cwd is not None:
        message = f"cannot run in {cwd}: {error.strerror}"
        code = 1
    elif isinstance(error, FileNotFoundError):
        message = f"{program}: command not found"
        code = _NOT_FOUND
    else:
        message = f"{program}: {error.strerror or error}"
        code = _NOT_EXECUTABLE
    output = CommandOutput(
        chunks=(Stderr(f"{message}\n".encode()),),
        exit_code=code,
        duration=anyio.current_time() - started,
    )
    return NonZeroExit(message, output)
