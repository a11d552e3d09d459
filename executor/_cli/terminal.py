"""The user's terminal for `run --pty`: raw mode for the run's duration, and its size."""

from __future__ import annotations

import contextlib
import os
import termios
import tty
from collections.abc import Iterator


def is_terminal(fd: int) -> bool:
    """Whether `fd` is open on a terminal."""
    try:
        return os.isatty(fd)
    except OSError:
        return False


@contextlib.contextmanager
def raw_mode(fd: int) -> Iterator[None]:
    """Put the terminal on `fd` in raw mode, and restore its settings however the block ends.

    Raw: every key reaches the command as it is typed, unechoed by us (the
    command's own terminal echoes), Ctrl-C and Ctrl-Z included; output is
    written as the command's terminal made it (with its own CR LF).
    """
    saved = termios.tcgetattr(fd)
    # TCSANOW: keys typed ahead stay for the command.
    tty.setraw(fd, termios.TCSANOW)
    try:
        yield
    finally:
        # The terminal may be gone (a hangup): nothing is left to restore then.
        with contextlib.suppress(termios.error, OSError):
            termios.tcsetattr(fd, termios.TCSADRAIN, saved)


def window_size() -> tuple[int, int] | None:
    """(columns, rows) of the terminal on stdin, stdout or stderr, the first that has one."""
    for fd in (0, 1, 2):
        try:
            size = os.get_terminal_size(fd)
        except OSError:
            continue
        if size.columns > 0 and size.lines > 0:
            return min(size.columns, 0xFFFF), min(size.lines, 0xFFFF)
    return None
