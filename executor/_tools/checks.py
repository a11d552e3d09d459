"""Checks of numbers for streaming tools: attrs validators the policies and handles share."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs


def at_least(minimum: int) -> Callable[[object, attrs.Attribute[int], int], None]:
    """A validator that takes integers of `minimum` or more (not booleans).

    The validator raises `ValueError` for anything else.
    """

    def check(instance: object, attribute: attrs.Attribute[int], value: int) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise ValueError(f"{attribute.name} must be an integer >= {minimum}, got {value!r}")

    return check


def positive_or_none(instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    """Validate a number of seconds: above zero, or `None` for no limit.

    Raises:
        ValueError: The value is no number, a boolean, or not above zero.
    """
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ValueError(f"{attribute.name} must be a positive number of seconds or None")
