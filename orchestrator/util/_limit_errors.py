"""Limit errors shared by tools, agents and the eval runner."""

from __future__ import annotations

from typing import Literal

from orchestrator._errors import ControlFlowSignal

LimitType = Literal["message", "token", "turn", "time", "working", "cost", "operator", "custom", "output"]


class LimitExceededError(ControlFlowSignal):
    """A limit was reached (or exceeded). Inside a tool it becomes a ``limit`` error the model sees.

    ``value_str``/``limit_str`` are formatted as Inspect formats them: integers with thousands
    separators (``200,000``), other numbers with two decimals.
    """

    def __init__(self, type: LimitType, value: float | int | None = None, limit: float | int | None = None,
                 message: str | None = None, source: object | None = None) -> None:
        self.type = type
        self.value = value
        self.value_str = _fmt(value)
        self.limit = limit
        self.limit_str = _fmt(limit)
        self.message = message or (
            f"Exceeded {type} limit: {limit:,}" if limit is not None else f"Exceeded {type} limit")
        self.source = source
        super().__init__(self.message)


class TerminateSampleError(ControlFlowSignal, RuntimeError):  # a RuntimeError as Inspect's
    """An operator decision (approval or review ``terminate``) ends the sample as an operator limit."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _fmt(value: float | int | None) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool | int):
        return f"{int(value):,}"
    return f"{value:,.2f}"
