"""Streaming policies: what a session keeps of a tool's output for the model's context.

- `Buffer()`: every chunk. Memory grows with the stream: for short tools.
- `Window(max_chunks=N)`: the last N chunks; older ones are dropped, so the
  session's memory stays bounded however long the stream runs.
- `Summarise(chunk_threshold=K, max_summary_length=L, summarizer=f)`: after
  every K chunks, the summary so far and those chunks are replaced by one
  summary of at most L characters, made by `f` (any async text-to-text
  callable, such as an LLM client). When `f` fails, times out or is absent,
  the text is truncated instead, keeping its head and its tail. `finalize()`
  makes one more pass when what is held is longer than L.
- `Manual(approvers=[...], preview_length=P, timeout=T, timeout_action=...)`:
  as the seed says, every chunk `next_chunk()` would return is first shown
  to the approvers (its first P characters); it is returned only when all
  of them approve. A denial raises `PolicyDenied` and drops that chunk; no
  answer within T seconds denies or allows per `timeout_action`. The final
  value is approved the same way in `finalize()`. Chunks that `finalize()`
  reads without returning them are never shown, so they stay out of the
  context.

The policies are plain values; `StreamingToolSession` puts them to work.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Iterable
from typing import Literal, Protocol, TypeAlias

import attrs

from executor._policies.verdict import Verdict
from executor._tools.checks import at_least, positive_or_none


@attrs.frozen(kw_only=True)
class Buffer:
    """Keep every chunk for the context: the whole output, injected as one.

    The session's memory grows with the stream, so this suits tools whose
    output is short; use `Window` or `Summarise` for long or endless streams.
    """


@attrs.frozen(kw_only=True)
class Window:
    """Keep only the last `max_chunks` chunks for the context.

    Older chunks are dropped as new ones arrive, so the session holds at most
    `max_chunks` chunks however long the stream runs; `finalize()` returns the
    final value with the window.

    Args:
        max_chunks: How many of the latest chunks to keep (at least 1).
    """

    max_chunks: int = attrs.field(validator=at_least(1))


class Summarizer(Protocol):
    """Condenses text: an async callable from text to shorter text (an LLM client, say)."""

    def __call__(self, text: str, /) -> Awaitable[str]:
        """Return a summary of `text`."""
        ...


@attrs.frozen(kw_only=True)
class Summarise:
    """Replace the held output by a summary every `chunk_threshold` chunks.

    After every `chunk_threshold` chunks, the text held so far (the previous
    summary, then the new chunks) goes to `summarizer`, and its answer, cut
    to `max_summary_length` characters if longer, replaces it. When the
    summarizer raises, runs past `timeout`, returns something other than a
    string, or is `None`, the text is truncated instead: its head and its
    tail are kept, with a note of how much was left out between them.
    `finalize()` makes a last pass when what is held is longer than
    `max_summary_length`.

    Args:
        chunk_threshold: How many chunks to gather before summarising (at least 1).
        max_summary_length: The longest summary kept, in characters (at least 1).
        summarizer: The async text-to-text callable; `None` always truncates.
        timeout: Seconds to wait for the summarizer; `None` waits as long as it takes.
    """

    chunk_threshold: int = attrs.field(validator=at_least(1))
    max_summary_length: int = attrs.field(validator=at_least(1))
    summarizer: Summarizer | None = None
    timeout: float | None = attrs.field(default=60.0, validator=positive_or_none)


class TimeoutAction(enum.Enum):
    """What `Manual` does when no approval comes in time."""

    DENY = "deny"
    """Withhold the output and raise `PolicyDenied` (the safe default)."""
    ALLOW = "allow"
    """Let the output through."""


@attrs.frozen(kw_only=True)
class OutputApprovalRequest:
    """What a `Manual` approver is asked: may this output enter the model's context?

    Attributes:
        tool: The tool's name.
        call_id: The tool call's id, when the session was given one.
        kind: `"chunk"` for a chunk `next_chunk()` would return, `"final"` for
            the final value in `finalize()`.
        number: The chunk's place in the stream (1 for the first chunk the
            tool sent); `None` for the final value.
        preview: The first `preview_length` characters of its text.
        length: The length of its whole text, in characters.
    """

    tool: str
    call_id: str | None
    kind: Literal["chunk", "final"]
    number: int | None
    preview: str
    length: int

    @property
    def truncated(self) -> bool:
        """Whether the preview leaves part of the text out."""
        return self.length > len(self.preview)


class OutputApprover(Protocol):
    """Decides whether output may enter the context: True/False, or a `Verdict` with a reason."""

    def __call__(self, request: OutputApprovalRequest, /) -> Awaitable[bool | Verdict]:
        """Answer the request."""
        ...


def _approvers(value: Iterable[OutputApprover]) -> tuple[OutputApprover, ...]:
    approvers = tuple(value)
    if not approvers:
        # No approver could ever say yes; refuse the policy now, not every chunk later.
        raise ValueError("Manual needs at least one approver")
    for approver in approvers:
        if not callable(approver):
            raise TypeError(f"an approver must be an async callable, got {approver!r}")
    return approvers


@attrs.frozen(kw_only=True)
class Manual:
    """Release output only when every approver agrees, after seeing a preview.

    Each chunk `next_chunk()` would return, and the final value in
    `finalize()`, is shown to all approvers at once as an
    `OutputApprovalRequest`. It is released when all of them approve. The
    first denial raises `PolicyDenied` (with the approver's reason) and the
    chunk is dropped; the session goes on, so the agent may read the next one
    or cancel. An approver's own exception propagates.

    Args:
        approvers: Async callables asked about each release (at least one).
        preview_length: How many characters of the text the request shows.
        timeout: Seconds to wait for all answers; `None` waits as long as it takes.
        timeout_action: `TimeoutAction.DENY` (raise `PolicyDenied`, the
            default) or `TimeoutAction.ALLOW` when answers are missing in time.
    """

    approvers: tuple[OutputApprover, ...] = attrs.field(converter=_approvers)
    preview_length: int = attrs.field(default=500, validator=at_least(0))
    timeout: float | None = attrs.field(default=300.0, validator=positive_or_none)
    timeout_action: TimeoutAction = attrs.field(default=TimeoutAction.DENY, converter=TimeoutAction)


StreamingPolicy: TypeAlias = Buffer | Window | Summarise | Manual
"""How a session keeps a tool's output for the model's context."""

_POLICIES = (Buffer, Window, Summarise, Manual)


def check_policy(value: object, what: str = "policy") -> StreamingPolicy:
    """`value` itself, if it is a streaming policy.

    Args:
        value: What was given as a policy.
        what: How the error names it (`"policy"`, `"Tail.policy"`).

    Raises:
        TypeError: `value` is not a `Buffer`, `Window`, `Summarise` or `Manual`.
    """
    if not isinstance(value, _POLICIES):
        raise TypeError(f"{what} must be a streaming policy, got {value!r}")
    return value
