"""`ReadOnly`: refuses every command that could write, or runs it where nothing is writable."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from executor._core.base import CheckedExecutor, PersistentShell
from executor._core.commands import Command, Exec, ReadFile, Shell, StrPath, WriteFile
from executor._core.errors import PolicyDenied
from executor._core.output import CommandOutput, Sink
from executor._core.readonly import read_only_commands

if TYPE_CHECKING:
    from executor._core.session import ProcessSession


class ReadOnly(CheckedExecutor):
    """Refuses every command that could write, with `PolicyDenied`.

    `ReadFile` runs. `WriteFile` is refused. Shell and argv commands are
    refused too, unless the inner executor enforces read-only at the OS level
    (a sandbox), where they run with every path read-only: the request
    reaches the sandbox through a context variable, past any wrapper in
    between (see `read_only_commands`). A command of a kind
    it does not know is refused: it fails closed.
    """

    async def exec_cmd(self, cmd: Command) -> CommandOutput:
        """Check `cmd`, then run it on the inner executor with nothing writable."""
        checked = await self.check(cmd)
        with read_only_commands():
            return await self.inner.exec_cmd(checked)

    async def exec_cmd_streaming(self, cmd: Command, sink: Sink) -> CommandOutput:
        """Check `cmd`, then run it on the inner executor with nothing writable, streaming."""
        checked = await self.check(cmd)
        with read_only_commands():
            return await self.inner.exec_cmd_streaming(checked, sink)

    async def start(self, cmd: Command, *, pty: bool = False) -> ProcessSession:
        """Check `cmd`, then start a session for it with nothing writable."""
        checked = await self.check(cmd)
        with read_only_commands():
            return await self.inner.start(checked, pty=pty)

    def shell(
        self,
        *,
        login: bool | None = None,
        cwd: StrPath | None = None,
        env: Mapping[str, str] | None = None,
    ) -> PersistentShell:
        """The inner executor's shell, started with nothing writable, each command checked.

        On an executor that cannot enforce read-only, every `run` and job is refused.
        """
        with read_only_commands():
            shell = self.inner.shell(login=login, cwd=cwd, env=env)
        shell.wrap(self)
        return shell

    async def check(self, cmd: Command) -> Command:
        """Return `cmd` if it cannot write; raise `PolicyDenied` if it could."""
        if isinstance(cmd, ReadFile):
            return cmd
        if isinstance(cmd, WriteFile):
            raise PolicyDenied(f"this executor is read-only: it does not write files ({cmd.path})")
        if isinstance(cmd, Shell | Exec):
            if self.inner.enforces_read_only:
                return cmd
            raise PolicyDenied(
                "this executor is read-only and cannot stop a shell or program from "
                "writing, so it runs none; read files with read_file instead"
            )
        raise PolicyDenied(f"this executor is read-only and does not run {type(cmd).__name__}")
