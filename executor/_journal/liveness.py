"""Owner liveness: which process holds a run, and whether it is still alive.

A process is named by its pid, its start time, its pid namespace and the
machine's boot id, so a reused pid or a reboot is not mistaken for the owner.
Within this process, a run is alive while one of its tasks still holds the
claim (a cancelled task leaves it interrupted, though the process lives on).
"""

from __future__ import annotations

import os

import attrs

from executor._core.proc import proc_stat


def _boot_id() -> str:
    """Which boot of which machine, and which pid namespace: `BOOT/NAMESPACE`.

    A pid means something only within its namespace (a container has its own).
    """
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
    except OSError:
        # Not a boot time: it moves when the clock is set. Without a boot id a
        # reboot goes unseen here, and the start time (below) tells owners apart.
        boot = "boot-unknown"
    try:
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        namespace = "pid:[?]"
    return f"{boot}/{namespace}"


@attrs.frozen
class Owner:
    """A process that holds a run, as the journal records it.

    Attributes:
        boot: Which boot of which machine, and which pid namespace: `BOOT/NAMESPACE`.
        pid: Its pid, within that namespace.
        started: When it started, in clock ticks since boot (not a wall-clock
            time, which moves when the clock is set).
    """

    boot: str
    pid: int
    started: float


def _started(pid: int) -> float | None:
    """When process `pid` started, in clock ticks since boot; `None` if it is gone or a zombie.

    Ticks since boot, not a wall-clock time (as `psutil` gives): that is
    computed from a boot time that moves when the clock is set, so two
    processes reading it on either side of a clock step would disagree on
    one start time, and a live owner would be taken for a reused pid.
    """
    stat = proc_stat(pid)
    if stat is None or stat.state == "Z":
        return None
    return float(stat.start)


class ThisProcess:
    """This process as an owner, and the claims its tasks hold right now (by token).

    One instance, `THIS_PROCESS`, serves every journal of the process; a
    forked child starts with none of its parent's claims.
    """

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """Forget who this process is and every claim it holds (in a forked child)."""
        self._me: Owner | None = None
        self._held: set[str] = set()

    def me(self) -> Owner:
        """This process as an owner (found again after a fork)."""
        if self._me is None or self._me.pid != os.getpid():
            started = _started(os.getpid())
            assert started is not None  # this process is running
            self._me = Owner(_boot_id(), os.getpid(), started)
        return self._me

    def hold(self, token: str) -> None:
        """Count the claim `token` as held by a task of this process."""
        self._held.add(token)

    def release(self, token: str) -> None:
        """Count the claim `token` as no longer held here (whether it was or not)."""
        self._held.discard(token)

    def alive(self, owner: Owner, token: str | None) -> bool:
        """Whether the run `owner` holds under the claim `token` is still going."""
        me = self.me()
        if owner.boot != me.boot:
            # Another boot: the machine rebooted since, and every process of
            # then is gone. The same boot but another pid namespace (a
            # container): its pid says nothing here. Taken for gone, its run
            # could be run twice; taken for alive, a start waits for it
            # (bounded by the caller's timeout) and a process in its namespace
            # still sees it interrupted.
            return owner.boot.partition("/")[0] == me.boot.partition("/")[0]
        if owner.pid == me.pid and owner.started == me.started:
            # Ours: alive while one of our tasks still holds the claim.
            return token in self._held
        # Another start time under the pid: the owner is gone, and the pid reused.
        return _started(owner.pid) == owner.started


THIS_PROCESS = ThisProcess()
"""This process as an owner; every journal in it records and checks its claims here."""

if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=THIS_PROCESS.reset)
