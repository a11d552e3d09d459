"""The agent-safe environment: what the toolset's commands get so that none waits for a person.

A model cannot press `q` in a pager, write in an editor or answer a prompt:
a command that waits for one of them waits until its timeout. A developer's
usual environment (`PAGER=less`, `EDITOR=vi`, a credential helper's dialog)
is full of them, and an executor passes it on. So every command of the
toolset, and of the MCP server, runs with `AGENT_ENVIRONMENT` (below, each
variable with why): pagers off, editors that fail at once, prompts that
fail or read end of file, package managers that ask nothing. Commands run
without a terminal (`run`, `shell`, the jobs, the code interpreter's
kernels) also get `TERM=dumb` (`NO_TERMINAL`); the terminal tool's keep the
terminal type their backend gives them.

`Toolset(environment=...)` chooses: `True` (the default) these variables,
`False` none (commands get the executor's environment as it is), or a
mapping that changes them per variable: a value replaces the default (or
adds a variable of your own), `None` leaves the variable to the executor's
environment. The MCP server's `--no-agent-env` flag and `agent_env` key do
the same (see `executor._mcp.config`).

How it applies: `ToolsetContext.executor()` gives the tools the executor
wrapped in `AgentEnvironment`, which sets the variables on every command it
runs (`exec_cmd`), every session it starts (`start`: the terminal, the
kernels, yielded commands) and on the persistent shell when it starts
(`shell()`). A variable the command sets itself (`Command.with_env`, the
terminal's `env`) wins over the default, and the default wins over the
executor's own environment (what it inherits and its `envs`): that is where
a developer's `PAGER=less` comes from, so a value of your own goes in the
mapping. In the persistent shell the variables are set once, at its start:
an `export PAGER=less` typed into it holds for the commands after it (a
login shell's profile may set some again, as it would by hand).

The terminal tool has one more thing to do, which no variable can: through
the toolset nobody types into its terminal. `AgentEnvironment.unattended`
says so, and the terminal then gives its command end of file and hangs up on
a full-screen program left waiting for keys (see `executor._builtins.terminal`).

Left alone on purpose:

- `CI`: it changes far more than prompts (`create-react-app` builds fail on
  warnings, yarn refuses to touch its lockfile, test runners retry or
  forbid `.only`); an agent should see what a developer sees.
- `GIT_SSH_COMMAND` (`ssh -o BatchMode=yes`): it would replace the
  developer's own; ssh without a terminal cannot ask anyway, and in the
  terminal it reads end of file.
- `NO_COLOR`, `TQDM_DISABLE`, progress bars: they change how much output
  there is, not whether a command waits.
"""

from __future__ import annotations

import weakref
from collections.abc import Hashable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, TypeAlias

from executor._core.base import PersistentShell, ToolExecutor, WrappedExecutor
from executor._core.commands import Command, Env, Exec, Shell, StrPath
from executor._core.errors import ExecutorError
from executor._core.output import CommandOutput, Sink

if TYPE_CHECKING:
    from executor._core.session import ProcessSession

EnvironmentSetting: TypeAlias = Mapping[str, str | None] | bool
"""What `Toolset(environment=...)` takes: on, off, or the defaults changed per variable."""

AGENT_ENVIRONMENT: Mapping[str, str] = MappingProxyType(
    {
        # --- Pagers: output goes straight to the command's output. ---------------------
        # The pager of most programs that page (man's fallback, psql, mysql,
        # pydoc's help(), journalctl's and gh's fallback). `cat` passes the
        # text through.
        "PAGER": "cat",
        # git's own, which outranks core.pager and PAGER (so a pager set in a
        # gitconfig is off too); `cat` is git's word for no pager at all.
        # Without it `git log`, `git diff`, `git show` on a terminal wait in less.
        "GIT_PAGER": "cat",
        # man's, which outranks PAGER: `man ls` prints the page.
        "MANPAGER": "cat",
        # systemctl's and journalctl's, which outrank PAGER.
        "SYSTEMD_PAGER": "cat",
        # The GitHub CLI's, which outranks its `pager` setting and PAGER.
        "GH_PAGER": "cat",
        # The AWS CLI's (v2 pages through less by default); empty is its "none".
        "AWS_PAGER": "",
        # For less run by name (`less file`, or by a program that calls it
        # whatever PAGER says): -F quits at once when the text fits one
        # screen, -R passes colours through, -X leaves the text where it was
        # printed (no alternate screen). A longer file still pages: the
        # terminal tool hangs up on it when it waits for keys.
        "LESS": "-FRX",
        # --- Editors fail at once, rather than wait or succeed unseen. -----------------
        # `false` exits 1 without reading anything: a command that wanted an
        # editor fails with its own words. git says "There was a problem with
        # the editor 'false'. Please supply the message using either -m or -F
        # option." for `git commit` without -m, and stops `git rebase -i`
        # before it changes anything. An editor that succeeds (`:`, `true`, as
        # some tools set) would commit a template, or rebase as if nothing had
        # been asked, without a word.
        "EDITOR": "false",
        "VISUAL": "false",
        # git's, which outrank core.editor, VISUAL and EDITOR.
        "GIT_EDITOR": "false",
        # The todo list of `git rebase -i` (outranks sequence.editor).
        "GIT_SEQUENCE_EDITOR": "false",
        # `git merge` and `git pull` on a terminal open the editor for the
        # merge message; `no` takes git's own message, as `--no-edit` does
        # (and as they already do without a terminal). A message of your own
        # is `-m`.
        "GIT_MERGE_AUTOEDIT": "no",
        # --- Prompts fail, rather than wait for a person. ------------------------------
        # git fails at once ("could not read Username for 'https://...':
        # terminal prompts disabled") instead of asking on the terminal.
        "GIT_TERMINAL_PROMPT": "0",
        # No askpass program: empty is git's word for none, and it keeps git
        # from falling back to core.askPass or SSH_ASKPASS. A developer's is
        # often an IDE's or a desktop's dialog, which waits for a person
        # elsewhere. Credential helpers (credential.helper) still answer.
        "GIT_ASKPASS": "",
        # ssh likewise: no graphical askpass (empty, and `never`, OpenSSH 8.4
        # on). Without a terminal ssh cannot ask, so it fails; on the
        # terminal tool's terminal its question reads end of file.
        "SSH_ASKPASS": "",
        "SSH_ASKPASS_REQUIRE": "never",
        # Git Credential Manager: never a window or a prompt; it fails instead.
        "GCM_INTERACTIVE": "never",
        # --- Package managers ask nothing. ---------------------------------------------
        # apt and dpkg (debconf): each question takes its default answer.
        "DEBIAN_FRONTEND": "noninteractive",
        # pip: a question (a confirmation, an index's password) is an error
        # naming it, not a wait.
        "PIP_NO_INPUT": "1",
        # npm: `npx` installs what it runs and `npm init` takes its defaults,
        # as both already do without a terminal.
        "npm_config_yes": "true",
        # --- Output as it is written. ---------------------------------------------------
        # Python keeps what it prints in a block buffer when its output is
        # not a terminal: a command killed at its timeout loses it, and the
        # live output (`on_output`, MCP progress) sees nothing until the end.
        "PYTHONUNBUFFERED": "1",
    }
)
"""The variables every command of the toolset gets, unless `Toolset(environment=...)` says not."""

NO_TERMINAL: Mapping[str, str] = MappingProxyType(
    {
        # A command without a terminal should not act as if it had one: a
        # developer's `TERM=xterm-256color` makes some programs draw (cursor
        # moves, colours, `clear`) into a pipe. `dumb` says: plain text.
        "TERM": "dumb",
    }
)
"""What commands without a terminal get besides `AGENT_ENVIRONMENT` (not the terminal tool's)."""


def check_environment(setting: object) -> EnvironmentSetting:
    """`setting` if it is one `Toolset(environment=...)` takes: a bool, or names to values.

    Raises:
        TypeError: It is neither a bool nor a mapping of names to strings or `None`.
        InvalidArgument: A name cannot be a variable's, or a value holds a NUL.
    """
    if isinstance(setting, bool):
        return setting
    if not isinstance(setting, Mapping):
        raise TypeError(
            "environment must be True, False or a mapping of variable names to values "
            f"(None to leave one alone), got {type(setting).__name__}"
        )
    values: dict[str, str | None] = {}
    for name, value in setting.items():
        if not isinstance(name, str) or (value is not None and not isinstance(value, str)):
            raise TypeError(
                f"environment maps variable names to strings or None, got {name!r}: {value!r}"
            )
        values[name] = value
    # Env checks each name and value as a command's own variables are checked.
    Env({name: value for name, value in values.items() if value is not None})
    Env({name: "" for name in values})
    return MappingProxyType(values)


def agent_variables(setting: EnvironmentSetting, *, terminal: bool) -> dict[str, str]:
    """The variables `setting` gives a command, with a terminal (`terminal`) or without.

    Off (`False`) gives none. A variable the setting names itself applies with
    and without a terminal, `TERM` too.
    """
    if setting is False:
        return {}
    variables = dict(AGENT_ENVIRONMENT)
    if not terminal:
        variables.update(NO_TERMINAL)
    if setting is not True:
        for name, value in setting.items():
            if value is None:
                variables.pop(name, None)
            else:
                variables[name] = value
    return variables


class AgentEnvironment(WrappedExecutor):
    """The inner executor, each of its commands given the agent-safe variables.

    Every command `exec_cmd` runs and every session `start` starts gets the
    variables it does not set itself (a command that removes one with
    `env_remove` keeps it removed); commands without a terminal also get
    `NO_TERMINAL`. `shell()` starts the persistent shell with them, and
    leaves its commands alone: what is exported in the shell holds.

    Args:
        inner: The executor to run commands on.
        setting: As `Toolset(environment=...)`: `True` for `AGENT_ENVIRONMENT`,
            or a mapping that changes it per variable.
        hold: Hold `inner`; `False` wraps it only while something else
            holds it (what `agent_executor` makes).
    """

    unattended: bool = True
    """Nobody types into its commands' terminals: the terminal tool acts on it (see there)."""

    def __init__(
        self, inner: ToolExecutor, setting: EnvironmentSetting = True, *, hold: bool = True
    ) -> None:
        """Wrap `inner` (see the class).

        `agent_executor` keeps the wrappers it makes without holding their
        executors (a wrapper of a context's executor lives as long as that
        executor), so the same executor gets the same wrapper.
        """
        self._held: ToolExecutor | None = inner if hold else None
        self._ref: weakref.ref[ToolExecutor] | None = None if hold else weakref.ref(inner)
        checked = check_environment(setting)
        self.setting: EnvironmentSetting = checked
        self.variables: Mapping[str, str] = MappingProxyType(
            agent_variables(checked, terminal=False)
        )
        self.terminal_variables: Mapping[str, str] = MappingProxyType(
            agent_variables(checked, terminal=True)
        )

    @property
    def inner(self) -> ToolExecutor:
        """The executor it wraps.

        Raises:
            ExecutorError: The executor, held by nothing else, is gone.
        """
        inner = self._held if self._ref is None else self._ref()
        if inner is None:
            raise ExecutorError("the executor under this AgentEnvironment is gone")
        return inner

    @inner.setter
    def inner(self, value: ToolExecutor) -> None:
        self._held = value
        self._ref = None

    def command(self, cmd: Command, *, pty: bool = False) -> Command:
        """`cmd` with the variables it neither sets nor removes itself; a file command as it is."""
        if not isinstance(cmd, Shell | Exec):
            return cmd
        defaults = self.terminal_variables if pty else self.variables
        missing = {name: value for name, value in defaults.items() if name not in cmd.env}
        if cmd.env_remove and missing:
            # What the command removes stays removed: a probe of each name tells.
            kept = cmd.environment_over(dict.fromkeys(missing, ""))
            missing = {name: value for name, value in missing.items() if name in kept}
        return cmd.with_env(missing) if missing else cmd

    async def exec_cmd(self, cmd: Command) -> CommandOutput:
        """Run `cmd`, with the variables, on the inner executor."""
        return await self.inner.exec_cmd(self.command(cmd))

    async def exec_cmd_streaming(self, cmd: Command, sink: Sink) -> CommandOutput:
        """Run `cmd`, with the variables, on the inner executor, streaming to `sink`."""
        return await self.inner.exec_cmd_streaming(self.command(cmd), sink)

    async def start(self, cmd: Command, *, pty: bool = False) -> ProcessSession:
        """Start a session of `cmd` with the variables (a pty keeps its backend's `TERM`)."""
        return await self.inner.start(self.command(cmd, pty=pty), pty=pty)

    def shell(
        self,
        *,
        login: bool | None = None,
        cwd: StrPath | None = None,
        env: Mapping[str, str] | None = None,
    ) -> PersistentShell:
        """The inner executor's shell, started with the variables (`env` over them).

        Its commands are not changed one by one: the shell's own state, an
        `export` typed into it, holds for the commands after it.
        """
        return self.inner.shell(login=login, cwd=cwd, env={**self.variables, **(env or {})})


# The wrappers `agent_executor` made, by executor (its id, while it lives) and
# setting. The toolset keeps its persistent shells and yielded commands by
# executor object, so every context of one executor must hand out the same
# wrapper; the wrappers here do not hold their executors, so an executor no
# longer used anywhere goes, and its entry with it.
_made: dict[int, dict[Hashable, AgentEnvironment]] = {}


def _key(setting: EnvironmentSetting) -> Hashable:
    if isinstance(setting, bool):
        return setting
    return tuple(sorted(setting.items(), key=lambda item: item[0]))


def agent_executor(executor: ToolExecutor, setting: EnvironmentSetting = True) -> ToolExecutor:
    """`executor` as the tools get it under `setting`: wrapped in `AgentEnvironment`, or not.

    Off (`False`) gives `executor` itself; an `AgentEnvironment` is not
    wrapped again. The same executor and setting give the same wrapper for as
    long as the executor lives.
    """
    if setting is False or isinstance(executor, AgentEnvironment):
        return executor
    key = _key(setting)
    made = _made.get(id(executor))
    if made is not None:
        found = made.get(key)
        if found is not None and found._ref is not None and found._ref() is executor:
            return found
    try:
        wrapper = AgentEnvironment(executor, setting, hold=False)
        if made is None:
            made = _made[id(executor)] = {}
            weakref.finalize(executor, _made.pop, id(executor), None)
    except TypeError:
        # An executor that takes no weak reference: a wrapper of its own each time.
        return AgentEnvironment(executor, setting)
    made[key] = wrapper
    return wrapper
