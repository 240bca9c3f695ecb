"""Tool input/output guardrails: allow, reject with a replacement message, or raise.

An input guardrail is ``(call: ToolCall, tool: ToolDef) -> GuardrailResult`` (sync or async) run
after validation and before execution; an output guardrail is ``(call, output) -> GuardrailResult``
run on the untruncated result. ``reject`` replaces the call's output with ``message`` (the model
sees it as the result); ``raise`` ends the sample with ``ToolGuardrailTripwire``.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

from orchestrator._errors import ToolfleetError


class GuardrailResult(BaseModel):
    behavior: Literal["allow", "reject", "raise"] = "allow"
    message: str | None = None

    @classmethod
    def allow(cls) -> GuardrailResult:
        return cls()

    @classmethod
    def reject(cls, message: str) -> GuardrailResult:
        return cls(behavior="reject", message=message)

    @classmethod
    def raise_(cls, message: str) -> GuardrailResult:
        return cls(behavior="raise", message=message)


class ToolGuardrailTripwire(ToolfleetError):
    """A guardrail asked to stop the sample."""

    def __init__(self, guardrail: str, message: str | None) -> None:
        super().__init__(f"Tool guardrail '{guardrail}' tripped: {message or 'no reason given'}")
        self.guardrail = guardrail
        self.message = message
