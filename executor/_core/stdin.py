"""The events an agent sends a running command or tool: text, bytes, signals, resizes."""

from __future__ import annotations

import enum
import signal
from typing import Any, TypeAlias

import attrs

from executor._core.errors import InvalidArgument


class UnixSignal(enum.IntEnum):
    """A signal the agent may send a running tool; the values are the OS's numbers.

    The first four, in their order, are the ones of earlier versions.
    `UnixSignal.parse` takes a name (`SIGUSR1`, `usr1`) or a number.
    """

    SIGINT = int(signal.SIGINT)
    """Interrupt, as Ctrl+C."""
    SIGTERM = int(signal.SIGTERM)
    """Ask to terminate."""
    SIGKILL = int(signal.SIGKILL)
    """Kill, no cleanup."""
    SIGHUP = int(signal.SIGHUP)
    """The terminal hung up (a daemon's "reload")."""
    SIGQUIT = int(signal.SIGQUIT)
    """Quit, as Ctrl+\\ (a core dump, a JVM's thread dump)."""
    SIGUSR1 = int(signal.SIGUSR1)
    """The program's own (a log reopen, a state dump)."""
    SIGUSR2 = int(signal.SIGUSR2)
    """The program's own."""
    SIGPIPE = int(signal.SIGPIPE)
    """The reader of its output went away."""
    SIGALRM = int(signal.SIGALRM)
    """A timer ran out."""
    SIGCONT = int(signal.SIGCONT)
    """Continue after a stop."""
    SIGSTOP = int(signal.SIGSTOP)
    """Stop (pause), which cannot be caught."""
    SIGTSTP = int(signal.SIGTSTP)
    """Stop, as Ctrl+Z."""
    SIGWINCH = int(signal.SIGWINCH)
    """The terminal's size changed."""

    @classmethod
    def parse(cls, value: str | int) -> UnixSignal:
        """The signal `value` names: `SIGUSR1`, `USR1` (any case), or its number (`10`, `"10"`).

        Raises:
            InvalidArgument: No such signal, or one this enum does not offer.

        """
        if isinstance(value, bool):
            raise _refused(value)
        if isinstance(value, str):
            text = value.strip()
            if text.isdigit():
                return _signal(int(text))
            name = text.upper()
            name = name if name.startswith("SIG") else f"SIG{name}"
            try:
                return cls[name]
            except KeyError:
                return _signal(value)
        return _signal(value)


def _text(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"Text takes a str, got {type(value).__name__}; use Bytes for bytes")
    try:
        # What reaches a process is UTF-8; refuse what cannot become UTF-8 now, not there.
        value.encode()
    except UnicodeEncodeError:
        raise InvalidArgument(value, "text must be valid Unicode (a lone surrogate)") from None
    return value


def _bytes(value: object) -> bytes:
    if not isinstance(value, bytes | bytearray | memoryview):
        raise TypeError(f"Bytes takes bytes, got {type(value).__name__}; use Text for str")
    return bytes(value)


def _signal(value: Any) -> UnixSignal:
    if isinstance(value, bool):
        raise _refused(value)
    try:
        return UnixSignal(value)
    except ValueError:
        raise _refused(value) from None


def _refused(value: object) -> InvalidArgument:
    names = ", ".join(member.name for member in UnixSignal)
    return InvalidArgument(value, f"expected one of the signals {names} (or its number)")


def _terminal_size(instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 0xFFFF:
        raise InvalidArgument(value, f"{attribute.name} must be an integer from 1 to 65535")


# The events wrap one value each (two for Resize) and are written as
# `Text("ls\n")`, `Signal(UnixSignal.SIGINT)`, `Resize(80, 24)`, so unlike other
# values here they take positional arguments, as Stdout and Stderr do.


@attrs.frozen
class Text:
    """Text for the tool's standard input, sent as UTF-8."""

    text: str = attrs.field(converter=_text)


@attrs.frozen
class Bytes:
    """Raw bytes for the tool's standard input."""

    data: bytes = attrs.field(converter=_bytes)


@attrs.frozen
class Signal:
    """A signal for the tool; a process gets it in its whole process group, as from a terminal."""

    signal: UnixSignal = attrs.field(converter=_signal)


@attrs.frozen
class Resize:
    """The terminal's new size, in character cells (meaningful for a pty only)."""

    cols: int = attrs.field(validator=_terminal_size)
    rows: int = attrs.field(validator=_terminal_size)


StdinEvent: TypeAlias = Text | Bytes | Signal | Resize
"""What an agent can send a running tool."""
