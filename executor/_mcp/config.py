"""The MCP server's configuration: a TOML file, then command-line flags over it.

```toml
backend = "docker"            # local (the default), sandbox, docker or ssh
workdir = "/workspace"        # where commands start (the backend's default if omitted)
timeout = 120                 # seconds a command may run when the model gives no timeout
agent_env = true              # the agent-safe environment (pagers off, editors fail...); false: off
native = []                   # native tools instead: anthropic, openai, swe-agent
yield_after = 30              # seconds before a running command comes back as a job
idle_timeout = 300            # seconds a command may print nothing

[docker]
image = "python:3.12-slim"

[ssh]
host = "build.example"
user = "deploy"
port = 22
keys = ["~/.ssh/ci"]
known_hosts = "~/.ssh/known_hosts"

[sandbox]
backend = "auto"              # bubblewrap, landlock or auto

[policy]
read_only = false             # offer the read-only tools only, through ReadOnly
allow = ["git", "pytest"]     # CommandRules: only these commands (argv prefixes)
deny = ["git push"]           # CommandRules: never these
dangerous = true              # DangerousCommands (on by default)
dangerous_allow = []          # its rules to turn off, by name
secrets = true                # Secrets: credential variables kept from commands, redacted
secrets_keep = []             # variables Secrets leaves alone
approval = "never"            # never, commands, writes or all: asked through MCP elicitation
approval_timeout = 300
audit_log = "audit.jsonl"     # Audit records, one JSON object a line

[http]
host = "127.0.0.1"
port = 8765
token_file = "~/.config/executor/mcp-token"
```

`agent_env` may be a table instead, which keeps the agent-safe environment
(`executor._toolset.environment`) and changes it per variable: a string is
the variable's value, `false` leaves the variable to the executor's
environment.

```toml
[agent_env]
PAGER = "less"                # a value of your own
GIT_ASKPASS = false           # not set: the executor's own askpass answers
```

An unknown key is an error naming it, so a typo never silently leaves a
policy off.
"""

from __future__ import annotations

import json
import os
import tomllib
from collections.abc import Callable, Mapping
from typing import IO, TYPE_CHECKING, Any, Literal, cast, get_args

import attrs

from executor._core.base import ToolExecutor
from executor._core.commands import Command, ReadFile, WriteFile
from executor._toolset.environment import EnvironmentSetting, check_environment

if TYPE_CHECKING:
    from executor._policies.policies import Approver, AuditRecord

Backend = Literal["local", "sandbox", "docker", "ssh"]
ApprovalMode = Literal["never", "commands", "writes", "all"]
Transport = Literal["stdio", "http"]
BACKENDS: tuple[str, ...] = get_args(Backend)
APPROVAL_MODES: tuple[str, ...] = get_args(ApprovalMode)


def _choice(options: tuple[str, ...]) -> Callable[[object, attrs.Attribute[Any], object], None]:
    def check(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
        if value not in options:
            raise ValueError(f"{attribute.name} must be one of {list(options)}, got {value!r}")

    return check


def _strings(value: object) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,)
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"expected a list of strings, got {value!r}")
    return tuple(value)


def _optional_strings(value: object) -> tuple[str, ...] | None:
    return None if value is None else _strings(value)


def _agent_env(value: object) -> EnvironmentSetting:
    """`agent_env` as `Toolset(environment=...)` takes it: a bool, or a TOML table of changes.

    In the table a string is a variable's value and `false` leaves the
    variable alone (`None` in the mapping).
    """
    if isinstance(value, Mapping):
        changes: dict[object, object] = {}
        for name, given in value.items():
            if given is True:
                raise ValueError(
                    f"agent_env: {name} = true means nothing; give the variable a string, "
                    "or false to leave it to the executor's environment"
                )
            changes[name] = None if given is False else given
        value = changes
    try:
        return check_environment(value)
    except TypeError as error:
        raise ValueError(
            "agent_env must be true, false, or a table of variables (a string each, or false "
            f"to leave one alone): {error}"
        ) from None


def _port(_: object, attribute: attrs.Attribute[int], value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 65536:
        raise ValueError(f"{attribute.name} must be a port from 0 to 65535, got {value!r}")


def _positive(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ValueError(f"{attribute.name} must be a positive number, got {value!r}")


@attrs.frozen(kw_only=True)
class McpConfig:
    """What `python -m executor mcp` serves, and how.

    Attributes:
        backend: `local`, `sandbox`, `docker` or `ssh`.
        workdir: Where commands start; the backend's default when `None`.
        timeout: Seconds a command may run when the model gives no timeout.
        agent_env: The agent-safe environment every command gets (pagers
            off, editors that fail, prompts that fail or read end of file):
            `True`, `False`, or its variables changed (`None`: left alone),
            as `Toolset(environment=...)` takes it.
        native: The native tool families to offer instead of the standard
            set (`anthropic`, `openai`, `swe-agent`; `Toolset(native=...)`).
        yield_after: Seconds after which a command still running comes back
            with a job id (`Toolset(yield_after=...)`); `None`: waited for.
        idle_timeout: Seconds a command may print nothing before it is
            killed (`Toolset(idle_timeout=...)`); `None`: no idle timeout.
        sandbox: The sandbox backend for `sandbox`: `auto`, `bubblewrap`, `landlock`.
        image: The image for `docker`.
        ssh_host: The host for `ssh`; `ssh_user`, `ssh_port`, `ssh_keys`,
            `known_hosts` the rest of the login.
        read_only: Offer only the read-only tools, and wrap the executor in `ReadOnly`.
        allow: `CommandRules` allow list (argv prefixes); `None` allows all.
        deny: `CommandRules` deny list.
        dangerous: Refuse dangerous commands (`DangerousCommands`).
        dangerous_allow: `DangerousCommands` rules to turn off.
        secrets: Keep credential variables from commands and redact them (`Secrets`).
        secrets_keep: Variables `Secrets` leaves alone.
        approval: Which commands need a person's approval, asked through MCP
            elicitation: `never`, `commands` (shell and argv), `writes`
            (commands and file writes) or `all` (reads too).
        approval_timeout: Seconds to wait for an answer before refusing.
        audit_log: A file the `Audit` records are appended to, as JSON lines.
        spill: A folder on this machine where the whole of an output too long
            to keep is written (the executor's `spill=`), served as the
            resource the result names.
        transport: `stdio` or `http` (streamable HTTP).
        host: The address HTTP binds (127.0.0.1 by default).
        port: The HTTP port; 0 picks a free one (the URL is printed).
        token: The bearer token HTTP clients must send.
        token_file: A file holding the token (first line).
        auth: Whether HTTP requires the token (`False` only on request; refused
            for a bind off loopback).
        allowed_origins: Browser origins HTTP accepts besides loopback's (a
            request with another `Origin` gets 403), each `scheme://host` or
            `scheme://host:port`, `:*` for any port.
    """

    backend: Backend = attrs.field(default="local", validator=_choice(BACKENDS))
    workdir: str | None = None
    timeout: float = attrs.field(default=120.0, validator=_positive)
    agent_env: EnvironmentSetting = attrs.field(default=True, converter=_agent_env)
    native: tuple[str, ...] = attrs.field(default=(), converter=_strings)
    yield_after: float | None = attrs.field(default=None, validator=_positive)
    idle_timeout: float | None = attrs.field(default=None, validator=_positive)
    sandbox: str = attrs.field(
        default="auto", validator=_choice(("auto", "bubblewrap", "landlock"))
    )
    image: str | None = None
    ssh_host: str | None = None
    ssh_user: str | None = None
    ssh_port: int = attrs.field(default=22, validator=_port)
    ssh_keys: tuple[str, ...] = attrs.field(default=(), converter=_strings)
    known_hosts: str | None = None
    read_only: bool = False
    allow: tuple[str, ...] | None = attrs.field(default=None, converter=_optional_strings)
    deny: tuple[str, ...] = attrs.field(default=(), converter=_strings)
    dangerous: bool = True
    dangerous_allow: tuple[str, ...] = attrs.field(default=(), converter=_strings)
    secrets: bool = True
    secrets_keep: tuple[str, ...] = attrs.field(default=(), converter=_strings)
    approval: ApprovalMode = attrs.field(default="never", validator=_choice(APPROVAL_MODES))
    approval_timeout: float | None = attrs.field(default=300.0, validator=_positive)
    audit_log: str | None = None
    spill: str | None = None
    transport: Transport = attrs.field(default="stdio", validator=_choice(("stdio", "http")))
    host: str = "127.0.0.1"
    port: int = attrs.field(default=8765, validator=_port)
    token: str | None = None
    token_file: str | None = None
    auth: bool = True
    allowed_origins: tuple[str, ...] = attrs.field(default=(), converter=_strings)

    def __attrs_post_init__(self) -> None:
        from executor._toolset.native import NATIVE_TOOLS

        for family in self.native:
            if family not in NATIVE_TOOLS:
                raise ValueError(
                    f"native: no family {family!r}; the families are {', '.join(NATIVE_TOOLS)}"
                )
        for origin in self.allowed_origins:
            check_origin(origin)
        if self.transport == "http" and not self.auth and not is_loopback(self.host):
            raise ValueError(
                f"serving on {self.host}, off loopback, needs a bearer token: --no-auth is "
                "only for 127.0.0.1, localhost and ::1"
            )
        if self.backend == "docker" and not self.image:
            raise ValueError("backend docker needs an image ([docker] image, or --docker IMAGE)")
        if self.backend == "ssh" and not self.ssh_host:
            raise ValueError("backend ssh needs a host ([ssh] host, or --ssh HOST)")


def is_loopback(host: str) -> bool:
    """Whether binding `host` serves this machine alone (127.0.0.0/8, ::1, localhost)."""
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_origin(origin: str) -> str:
    """`origin` if it is a browser origin, `scheme://host[:port]` (`:*`: any port)."""
    from urllib.parse import urlsplit

    base = origin[:-2] if origin.endswith(":*") else origin
    try:
        parts = urlsplit(base)
        parts.port  # noqa: B018 (a port that is no number raises here)
    except ValueError:
        parts = None
    if (
        parts is None
        or parts.scheme not in ("http", "https")
        or not parts.hostname
        or parts.path
        or parts.query
        or parts.fragment
        or parts.username is not None
        or (origin.endswith(":*") and parts.port is not None)
    ):
        raise ValueError(
            f"not an origin: {origin!r} (expected scheme://host or scheme://host:port, "
            "with :* for any port, as in https://app.example or http://10.0.0.5:*)"
        )
    return origin


# Where each TOML key goes: table -> key -> McpConfig field.
_TOML: dict[str, dict[str, str]] = {
    "": {
        "backend": "backend",
        "workdir": "workdir",
        "timeout": "timeout",
        "spill": "spill",
        "agent_env": "agent_env",
        "native": "native",
        "yield_after": "yield_after",
        "idle_timeout": "idle_timeout",
    },
    "docker": {"image": "image"},
    "ssh": {
        "host": "ssh_host",
        "user": "ssh_user",
        "port": "ssh_port",
        "keys": "ssh_keys",
        "known_hosts": "known_hosts",
    },
    "sandbox": {"backend": "sandbox"},
    "policy": {
        name: name
        for name in (
            "read_only",
            "allow",
            "deny",
            "dangerous",
            "dangerous_allow",
            "secrets",
            "secrets_keep",
            "approval",
            "approval_timeout",
            "audit_log",
        )
    },
    "http": {
        "host": "host",
        "port": "port",
        "token": "token",
        "token_file": "token_file",
        "auth": "auth",
        "allowed_origins": "allowed_origins",
    },
}
_BOOLEANS = {"read_only", "dangerous", "secrets", "auth"}


def _fields_of(document: Mapping[str, Any], source: str) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    for key, value in document.items():
        if key == "agent_env":
            # A bool, or a table of variables: checked as a field, not as a table of keys.
            fields["agent_env"] = value
        elif isinstance(value, dict):
            table = _TOML.get(key)
            if table is None or not key:
                raise ValueError(
                    f"{source}: unknown table [{key}]; the tables are {list(_TOML)[1:]}"
                )
            for inner, inner_value in value.items():
                if inner not in table:
                    raise ValueError(
                        f"{source}: unknown key {inner!r} in [{key}]; it takes {list(table)}"
                    )
                fields[table[inner]] = inner_value
        elif key in _TOML[""]:
            fields[_TOML[""][key]] = value
        else:
            raise ValueError(
                f"{source}: unknown key {key!r}; top-level keys are {list(_TOML[''])}, "
                f"and the tables {list(_TOML)[1:]}"
            )
    for name in _BOOLEANS & set(fields):
        if not isinstance(fields[name], bool):
            raise ValueError(f"{source}: {name} must be true or false, got {fields[name]!r}")
    return fields


def load_mcp_config(path: str | os.PathLike[str] | None = None, **overrides: Any) -> McpConfig:
    """The configuration in the TOML file at `path` (if any), with `overrides` on top.

    `overrides` are `McpConfig` fields; those that are `None` are left out,
    so unset command-line flags keep the file's values.

    Raises:
        ValueError: The file is not TOML, holds an unknown key or a bad
            value; the message names the file and the key.
        OSError: The file cannot be read.
    """
    fields: dict[str, Any] = {}
    if path is not None:
        source = os.fspath(path)
        with open(os.path.expanduser(source), "rb") as file:
            try:
                document = tomllib.load(file)
            except tomllib.TOMLDecodeError as error:
                raise ValueError(f"{source}: not valid TOML: {error}") from None
        fields = _fields_of(document, source)
    fields.update({key: value for key, value in overrides.items() if value is not None})
    try:
        return McpConfig(**fields)
    except TypeError as error:
        raise ValueError(str(error)) from None


class AuditLog:
    """An `Audit` recorder appending each record to a file as one JSON line, flushed."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.path.expanduser(os.fspath(path))
        self._file: IO[str] | None = open(self.path, "a", encoding="utf-8")  # noqa: SIM115

    def __call__(self, record: AuditRecord) -> None:
        """Append `record`."""
        if self._file is None:
            return
        self._file.write(json.dumps(record.as_dict(), ensure_ascii=False) + "\n")
        self._file.flush()

    def close(self) -> None:
        """Close the file; later records are dropped."""
        if self._file is not None:
            self._file.close()
            self._file = None


def approval_asks(mode: str) -> Callable[[Command], bool] | None:
    """Which commands `mode` asks about (`Approval`'s `ask`); `None` for `never`."""
    if mode == "never":
        return None
    if mode == "commands":
        return lambda cmd: not isinstance(cmd, ReadFile | WriteFile)
    if mode == "writes":
        return lambda cmd: not isinstance(cmd, ReadFile)
    return lambda cmd: True


def backend_executor(config: McpConfig) -> ToolExecutor:
    """The bare backend `config` names, before any policy.

    Raises:
        ExecutorError: The sandbox cannot be given here.
        ImportError: The backend's extra is missing.
    """
    options: dict[str, Any] = {}
    if config.workdir is not None:
        options["workdir"] = config.workdir
    if config.spill is not None:
        options["spill"] = os.path.expanduser(config.spill)
    if config.backend == "docker":
        from executor._docker.executor import DockerExecutor

        assert config.image is not None
        return DockerExecutor(config.image, **options)
    if config.backend == "ssh":
        from executor._ssh.executor import SshExecutor

        assert config.ssh_host is not None
        ssh: dict[str, Any] = {"port": config.ssh_port, "user": config.ssh_user}
        if config.ssh_keys:
            ssh["client_keys"] = [os.path.expanduser(key) for key in config.ssh_keys]
        if config.known_hosts is not None:
            ssh["known_hosts"] = os.path.expanduser(config.known_hosts)
        return SshExecutor(config.ssh_host, **ssh, **options)
    from executor._local.executor import LocalExecutor

    if config.backend == "sandbox":
        from executor._sandbox.sandbox import Backend as SandboxBackend, Sandbox

        options["sandbox"] = Sandbox(backend=cast(SandboxBackend, config.sandbox))
    return LocalExecutor(**options)


def build_executor(
    config: McpConfig,
    *,
    approver: Approver | None = None,
    recorder: Callable[[AuditRecord], Any] | None = None,
    inner: ToolExecutor | None = None,
) -> ToolExecutor:
    """The backend with the policies `config` asks for, in the order they must compose.

    From the inside out: the backend, `Secrets`, `Approval` (asked only about
    what the rules let through), `ReadOnly`, `DangerousCommands`,
    `CommandRules`, and `Audit` outermost so it records every refusal.

    Args:
        config: The configuration.
        approver: Who answers approvals (the MCP server's elicitation); needed
            unless `config.approval` is `never`.
        recorder: Where `Audit` records go (`config.audit_log` is the server's).
        inner: The backend to wrap instead of the one `config` names.

    Raises:
        ValueError: Approval is asked for without an approver.
    """
    # The policies are imported here: the shell parser behind the rules is not light.
    from executor._policies.policies import Approval, Audit, Secrets
    from executor._policies.rules import CommandRules, DangerousCommands

    executor = inner if inner is not None else backend_executor(config)
    if config.secrets:
        executor = Secrets(executor, keep=config.secrets_keep)
    ask = approval_asks(config.approval)
    if ask is not None:
        if approver is None:
            raise ValueError(f"approval {config.approval!r} needs an approver")
        executor = Approval(executor, approver, timeout=config.approval_timeout, ask=ask)
    if config.read_only:
        executor = executor.read_only()
    if config.dangerous:
        executor = DangerousCommands(executor, allow=config.dangerous_allow)
    if config.allow is not None or config.deny:
        executor = CommandRules(executor, allow=config.allow, deny=config.deny)
    if recorder is not None:
        executor = Audit(executor, recorder)
    return executor
