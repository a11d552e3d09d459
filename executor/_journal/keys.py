"""Idempotency keys: UUID v7 (RFC 9562) values that name one run, and the clock that makes them.

Keys made by one process sort in the order they were made, also within one
millisecond; a forked child starts its own sequence, so parent and child
never make the same key.
"""

from __future__ import annotations

import datetime
import os
import secrets
import threading
import time
import uuid
from uuid import UUID

import attrs

from executor._core.errors import InvalidArgument

_VERSION_7 = 7


class _Clock:
    """The state behind monotonic UUID v7 keys in this process.

    RFC 9562 method 2 ("monotonic random"): within one millisecond the 74
    random bits are the last key's plus a random increment, so keys made in
    one millisecond still sort in the order they were made; when they would
    overflow, the timestamp moves on by a millisecond.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        self.last_ms = -1
        self.last_random = 0

    def next(self) -> int:
        with self.lock:
            now_ms = time.time_ns() // 1_000_000
            if now_ms > self.last_ms:
                self.last_ms = now_ms
                self.last_random = int.from_bytes(secrets.token_bytes(10)) >> 6
            else:
                # The clock has not moved (or went back): count on from the last key.
                self.last_random += 1 + secrets.randbelow(1 << 31)
                if self.last_random >= 1 << 74:
                    self.last_ms += 1
                    self.last_random = int.from_bytes(secrets.token_bytes(10)) >> 7
            rand_a = self.last_random >> 62
            rand_b = self.last_random & ((1 << 62) - 1)
            return (
                (self.last_ms & ((1 << 48) - 1)) << 80
                | _VERSION_7 << 76
                | rand_a << 64
                | 0b10 << 62
                | rand_b
            )


_CLOCK = _Clock()


def _key_uuid(value: object) -> uuid.UUID:
    if isinstance(value, IdempotencyKey):
        return value.uuid
    if isinstance(value, uuid.UUID):
        parsed = value
    elif isinstance(value, str):
        try:
            parsed = uuid.UUID(value.strip())
        except ValueError:
            raise InvalidArgument(value, "an idempotency key must be a UUID") from None
    else:
        raise InvalidArgument(value, "an idempotency key must be a UUID string")
    if parsed.variant != uuid.RFC_4122:
        raise InvalidArgument(
            value, "an idempotency key must be a UUID version 7 (this UUID is not RFC 9562)"
        )
    if parsed.version != _VERSION_7:
        raise InvalidArgument(
            value, f"an idempotency key must be a UUID version 7 (got version {parsed.version})"
        )
    return parsed


@attrs.frozen(order=True)
class IdempotencyKey:
    """A UUID v7 (RFC 9562) naming one run: time-ordered, unique, safe to store and send.

    `IdempotencyKey.new()` makes one; keys made later sort later, also
    within one millisecond of one process. `IdempotencyKey(text)` parses
    one, and `str(key)` is its canonical text.

    Raises:
        InvalidArgument: The value is not a UUID, or not of version 7.
    """

    uuid: UUID = attrs.field(converter=_key_uuid)

    @classmethod
    def new(cls) -> IdempotencyKey:
        """A fresh key, later than every key this process made before."""
        return cls(uuid.UUID(int=_CLOCK.next()))

    @classmethod
    def parse(cls, value: str | UUID | IdempotencyKey) -> IdempotencyKey:
        """The key in `value`, which may be one already.

        Raises:
            InvalidArgument: `value` is not a UUID of version 7.
        """
        if isinstance(value, IdempotencyKey):
            return value
        return cls(value)

    @property
    def unix_ms(self) -> int:
        """Its 48-bit timestamp: milliseconds since 1970 (UTC)."""
        return self.uuid.int >> 80

    @property
    def created(self) -> datetime.datetime:
        """When the key was made (its timestamp), in UTC.

        Raises:
            ValueError: The timestamp lies after the year 9999, which a
                48-bit millisecond count can reach but `datetime` cannot.
        """
        try:
            return datetime.datetime.fromtimestamp(self.unix_ms / 1000, tz=datetime.UTC)
        except (ValueError, OverflowError):
            raise ValueError(f"the key {self} has a timestamp after the year 9999") from None

    def __str__(self) -> str:
        return str(self.uuid)


def optional_key(value: str | UUID | IdempotencyKey | None) -> IdempotencyKey | None:
    """The key in `value`, or `None` (a converter for optional key fields)."""
    return None if value is None else IdempotencyKey.parse(value)


if hasattr(os, "register_at_fork"):
    # A forked child must not count on from its parent's last key: both would
    # make the same keys in the same millisecond.
    os.register_at_fork(after_in_child=_CLOCK.reset)
