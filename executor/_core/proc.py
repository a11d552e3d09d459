"""Processes on this host: the tag every command's tree inherits, and what `/proc` says of a pid.

The tag is how a backend finds a command's whole tree again (see
`executor._local.process`); `proc_stat` is how the sandbox, the Docker helper's
watcher and the journal's owner check tell a live process from a reused pid.
"""

from __future__ import annotations

import time
from typing import Final, NamedTuple

TREE_VARIABLE: Final = "EXECUTOR_PROCESS_TREE"
"""Every process a command starts inherits this variable.

Its value is `OWNER_PID:EXECUTOR_ID/COMMAND_NUMBER`: which process started the
command, through which executor, and which command it was.
"""


class ProcStat(NamedTuple):
    """The fields of `/proc/<pid>/stat` (proc(5)) this package reads."""

    state: str
    """One letter: `R` running, `S` sleeping, `T` stopped, `Z` a zombie, ..."""
    ppid: int
    pgid: int
    sid: int
    start: int
    """When the process started, in clock ticks since boot (see `boot_clock`)."""


def proc_stat(pid: int) -> ProcStat | None:
    """Process `pid`'s state, parent, group, session and start time; `None` if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    # The command name, in parentheses, may hold spaces: count from its end.
    fields = data[data.rfind(b")") + 2 :].split()
    return ProcStat(
        fields[0].decode(), int(fields[1]), int(fields[2]), int(fields[3]), int(fields[19])
    )


def boot_clock() -> float:
    """Seconds since boot, the clock of `/proc/<pid>/stat`'s start times."""
    return time.clock_gettime(time.CLOCK_BOOTTIME)
