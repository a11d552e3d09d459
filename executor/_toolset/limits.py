"""What a toolset allows its tools: the default and the longest timeout, and the output budget.

The tools that need them are handed the toolset's `Limits` when the toolset
builds them (never the toolset itself); the toolset's `timeout`,
`max_timeout` and `budget` read and write that same object.
"""

from __future__ import annotations

import attrs

from executor._core.errors import InvalidArgument


@attrs.define(eq=False)
class Limits:
    """A toolset's limits, shared by the tools it built.

    Attributes:
        timeout: Seconds a command may run when the model gives no timeout.
        max_timeout: The longest timeout a model may ask for.
        budget: Characters of output a tool hands the model (`for_model`).
        yield_after: Seconds after which a command still running comes back
            with a job id instead of being waited for (`None`: waited for,
            to its timeout).
        idle_timeout: Seconds a command may print nothing before it is
            killed (`None`: no idle timeout).
    """

    timeout: float
    max_timeout: float
    budget: int
    yield_after: float | None = None
    idle_timeout: float | None = None

    def yield_for(self, value: float | None) -> float | None:
        """The yield window a command gets: the model's `value`, once checked, else the default.

        Raises:
            InvalidArgument: `value` is not more than 0, or past `max_timeout`.
        """
        return self.yield_after if value is None else self._seconds(value, "yield_after")

    def idle_for(self, value: float | None) -> float | None:
        """The idle timeout a command gets: the model's `value`, once checked, else the default.

        Raises:
            InvalidArgument: `value` is not more than 0, or past `max_timeout`.
        """
        return self.idle_timeout if value is None else self._seconds(value, "idle_timeout")

    def timeout_for(self, value: float | None) -> float:
        """The timeout a command gets: the model's `value`, once checked, else the default.

        Raises:
            InvalidArgument: `value` is not more than 0, or past `max_timeout`.
        """
        return self.timeout if value is None else self._seconds(value, "timeout")

    def _seconds(self, value: float, name: str) -> float:
        """`value`, seconds a model gave for `name`, once checked to be in (0, max_timeout]."""
        if not value > 0 or value > self.max_timeout:
            raise InvalidArgument(
                value, f"{name} must be more than 0 and at most {self.max_timeout:g} seconds"
            )
        return float(value)


def check_count(value: int | None, name: str, maximum: int) -> None:
    """Refuse a count argument (`name`) outside 1..`maximum`; `None` (not given) passes.

    Raises:
        InvalidArgument: `value` is out of range.
    """
    if value is not None and not 1 <= value <= maximum:
        raise InvalidArgument(value, f"{name} must be from 1 to {maximum}")
