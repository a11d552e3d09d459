"""Landlock, a sandbox that needs no helper program: the rules of one, and the kernel's ABI.

Landlock (Linux 5.13+) lets an unprivileged process give up access rights for
itself and every process it starts afterwards. The Landlock launcher
(`executor._sandbox.landlock_launcher`, a process of its own per rule set,
which applies them through the system calls) builds the rule set once; for
each command a thread of one of its inits restricts itself with it and
spawns the command, which inherits the domain. Each restriction makes a
domain of its own, so no two commands share one, and neither the launcher,
an init's main thread nor the executor's process is in any: Landlock lets a
process in a domain trace, read the memory of, or (ABI 6) signal only
processes in the same domain or one nested in it.

What one rule set grants (see `LandlockRules`):

- read and execute on everything but the hidden folders (the home folder),
  and on the paths named readable even inside those;
- every filesystem right on the writable paths; writing elsewhere fails with
  `EACCES` (device files that programs write as a matter of course,
  `/dev/null`, `/dev/tty` and the like, stay writable);
- with ABI 4 and no network, no TCP `bind` or `connect` at all; run by
  root, also a network namespace of its own (no interface up), so UDP and
  abstract unix sockets reach nothing either;
- with ABI 6, no signals to processes outside the domain and no connecting to
  abstract unix sockets made outside it;
- run by root, no capability: uid 0 gains none by `exec` (securebits), so
  `mount`, `sethostname` and the like fail as for any user; and an empty
  `/run`, so the host's service sockets (docker.sock) are out of reach
  (done by the launcher).
"""

from __future__ import annotations

import ctypes
from typing import Any, Final

import attrs

from executor._sandbox import linux

_CREATE_RULESET: Final = 444
_CREATE_RULESET_VERSION: Final = 1


def abi_version() -> int:
    """The Landlock ABI this kernel offers: 0 when it has none, or has it turned off."""
    result = linux.libc.syscall(_CREATE_RULESET, None, ctypes.c_size_t(0), _CREATE_RULESET_VERSION)
    return max(int(result), 0)


@attrs.frozen(kw_only=True)
class LandlockRules:
    """What the commands of one Landlock launcher may touch.

    Attributes:
        writable: Absolute paths (folders or files) where everything is allowed.
        readable: Absolute paths readable even inside a hidden folder.
        hidden: Absolute folders that can be neither read nor written.
        network: Allow TCP; without it `bind` and `connect` fail (ABI 4).
        syscall_filter: Install the system call filter (`executor._sandbox.seccomp`).

    """

    writable: tuple[str, ...]
    readable: tuple[str, ...]
    hidden: tuple[str, ...]
    network: bool
    syscall_filter: bool = True

    def as_json(self) -> dict[str, Any]:
        """The rules as the launcher reads them (JSON-ready)."""
        return {
            "writable": list(self.writable),
            "readable": list(self.readable),
            "hidden": list(self.hidden),
            "network": self.network,
            "syscall_filter": self.syscall_filter,
        }
