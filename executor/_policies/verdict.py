"""`Verdict`: an approver's answer, shared by command and output approvals."""

from __future__ import annotations

import attrs


@attrs.frozen
class Verdict:
    """An approver's answer: approved or not, and why (the reason reaches the model)."""

    approved: bool
    reason: str | None = None
