"""The kill of a tagged tree on a remote host: one `sh` script for every remote backend.

A command's processes carry its tag in their environment
(`EXECUTOR_PROCESS_TREE`, see `executor._core.proc`). Where the executor
cannot see the processes itself (over SSH, in a container run by engine
execs), it runs `KILL_SCRIPT` there, through whatever runs a program on that
host, and `TreeKiller` keeps the grace in wall time across the round trips.
`BELOW_SCRIPT` kills what runs below one process of such a tree, sparing
that process: a persistent shell's stuck command, the shell kept.
"""

from __future__ import annotations

import contextlib
import math
from typing import Final

import anyio

from executor._core.proc import TREE_VARIABLE

# The process table both scripts read: the /proc entries of the processes
# whose environment has an entry matching $1 (nothing at all when none has),
# a line `--`, then `PID PPID PGID` of every live process. Only builtins run
# per process; grep runs once.
_PROCESSES: Final = r"""
processes() {
  tagged=$(grep -lz -e "$1" /proc/[0-9]*/environ 2>/dev/null)
  [ -n "$tagged" ] || return 0
  echo "$tagged"
  echo --
  for f in /proc/[0-9]*/stat; do
    { read -r s < "$f"; } 2>/dev/null || continue
    p=${f#/proc/}; p=${p%/stat}
    set -- ${s##*) }
    [ "$1" = Z ] || echo "$p $2 $3"
  done
}
"""

# Run as `sh -c KILL_SCRIPT sh PATTERN GRACE SETTLE` (GRACE and SETTLE in
# hundredths of a second): end every process whose environment has an entry
# matching PATTERN (a basic regex), every descendant of those (also one that
# dropped the variable and left the group and the session), and every
# process group one of them leads. TERM (and CONT, so stopped ones act on
# it), then, once GRACE has passed since the script started, KILL until none
# is left. GRACE is wall time, read from /proc/uptime however long each look
# takes (were it unreadable, each look would count as 20 ms). Zombies are
# dead already. Only builtins run per process; grep and awk run once per
# look (GNU's or BusyBox's: `grep -z` is all it asks). With nothing found, it
# looks again for up to SETTLE first: a command that has just started
# carries the tag only once its first process has exec'd. It prints how long
# it ran (hundredths), for the caller to tell its own time from the round
# trips'.
KILL_SCRIPT: Final = (
    _PROCESSES
    + r"""
clock() {
  if { read -r u _ < /proc/uptime; } 2>/dev/null; then
    c=$(( ${u%.*} * 100 + 1${u#*.} - 100 ))
  else
    c=$(( ${c:-0} + 2 ))
  fi
}
find_tree() {
  processes "$1" | awk '
    !sep && $0 == "--" { sep = 1; next }
    !sep { sub("^/proc/", ""); sub("/environ$", ""); tag[$0] = 1; next }
    { parent[$1] = $2; group[$1] = $3 }
    END {
      for (p in tag) if (p in parent) found[p] = 1
      do {
        added = 0
        for (p in parent) if (!(p in found) && (parent[p] in found)) { found[p] = 1; added = 1 }
      } while (added)
      for (p in found) { print p; if (group[p] == p) print "-" p }
    }'
}
clock
start=$c
trap 'clock; echo $((c - start))' EXIT
t=$(find_tree "$1")
while [ -z "$t" ]; do
  clock
  [ "$c" -lt $((start + $3)) ] || exit 0
  sleep 0.02
  t=$(find_tree "$1")
done
kill -s TERM -- $t 2>/dev/null
kill -s CONT -- $t 2>/dev/null
while clock && [ "$c" -lt $((start + $2)) ]; do
  sleep 0.02
  t=$(find_tree "$1")
  [ -n "$t" ] || exit 0
done
i=0
while [ "$i" -lt 100 ]; do
  kill -s KILL -- $t 2>/dev/null
  sleep 0.01
  t=$(find_tree "$1")
  [ -n "$t" ] || exit 0
  i=$((i + 1))
done
echo "processes survived SIGKILL: $t" >&2
exit 1
"""
)

# Run as `sh -c BELOW_SCRIPT sh PATTERN PID`: SIGKILL every descendant of
# process PID, not PID itself, where PID belongs to the tree `KILL_SCRIPT`
# finds by PATTERN (it carries the tag, or descends from a process that
# does): a persistent shell's command, the shell spared. The descendants
# are stopped first (SIGSTOP), and looked for again until no new one
# appears, so none can fork a child the kill would miss; then all of them
# are killed at once. With PID outside the tree (gone, its number taken
# again) nothing is sent. It prints how many processes it killed.
BELOW_SCRIPT: Final = (
    _PROCESSES
    + r"""
below() {
  processes "$1" | awk -v top="$2" '
    !sep && $0 == "--" { sep = 1; next }
    !sep { sub("^/proc/", ""); sub("/environ$", ""); tag[$0] = 1; next }
    { parent[$1] = $2 }
    END {
      p = top; n = 0
      while ((p in parent) && !(p in tag) && n < 100000) { p = parent[p]; n++ }
      if (!(p in tag)) exit
      found[top] = 1
      do {
        added = 0
        for (p in parent) if (!(p in found) && (parent[p] in found)) {
          found[p] = 1; added = 1; print p
        }
      } while (added)
    }'
}
stopped=" "
i=0
while [ "$i" -lt 100 ]; do
  new=
  for p in $(below "$1" "$2"); do
    case $stopped in *" $p "*) ;; *) new="$new $p" ;; esac
  done
  [ -n "$new" ] || break
  kill -s STOP $new 2>/dev/null
  stopped="$stopped${new# } "
  i=$((i + 1))
done
set -- $stopped
[ "$#" -eq 0 ] || kill -s KILL "$@" 2>/dev/null
echo "$#"
"""
)

SETTLE: Final = 0.5
"""How long a kill looks again for a command that has only just started (see `KILL_SCRIPT`)."""

# The most of a kill's grace period the round trips of the kill may be taken for.
_OVERHEAD_CAP: Final = 1.0


def tree_pattern(tag: str, *, prefix: bool = False, variable: str = TREE_VARIABLE) -> str:
    """The pattern `KILL_SCRIPT` finds a tree by: the tag exactly, or every tag below `tag/`.

    `variable` is the one the backend tags with. The tag holds only hex
    digits, `:`, `/` and `.`, which is escaped: nothing else a basic regex
    treats specially.
    """
    escaped = tag.replace(".", r"\.")
    return f"^{variable}={escaped}" + ("/" if prefix else "$")


def below_argv(pattern: str, pid: int) -> list[str]:
    """The argv that kills what runs below `pid` in the tree `pattern` finds (`BELOW_SCRIPT`)."""
    return ["sh", "-c", BELOW_SCRIPT, "sh", pattern, str(pid)]


def kill_arguments(pattern: str, grace: float, settle: float = 0.0) -> list[str]:
    """`KILL_SCRIPT`'s arguments: PATTERN, then GRACE and SETTLE in hundredths of a second."""
    return [pattern, str(math.floor(grace * 100)), str(math.ceil(settle * 100))]


class TreeKiller:
    """Runs `KILL_SCRIPT` for one executor, keeping the grace in wall time.

    The script keeps the grace by its own clock; it is given what is left of
    the caller's deadline less the round trips the last kill took beyond
    the script's own time, so SIGKILL comes, and the kill returns, near the
    deadline however slow the way to the host is.
    """

    def __init__(self) -> None:
        self._overhead = 0.0

    def argv(self, pattern: str, *, deadline: float, settle: bool = False) -> list[str]:
        """The argv of a kill whose SIGKILL is due at `deadline` (on `anyio.current_time`)."""
        grace = max(0.0, deadline - anyio.current_time() - self._overhead)
        settle_for = SETTLE if settle else 0.0
        return ["sh", "-c", KILL_SCRIPT, "sh", *kill_arguments(pattern, grace, settle_for)]

    def ran(self, begun: float, stdout: bytes | str) -> None:
        """Learn the round trips' cost from a kill begun at `begun` that printed `stdout`."""
        took = anyio.current_time() - begun
        text = stdout.decode() if isinstance(stdout, bytes) else stdout
        with contextlib.suppress(ValueError, IndexError):
            spent = int(text.split()[-1]) / 100
            self._overhead = min(max(took - spent, 0.0), _OVERHEAD_CAP)
