"""Approval decisions and the approver protocol."""

from __future__ import annotations

from typing import Literal, Protocol

from pydantic import BaseModel

from orchestrator._policy_chain import NamedFactories
from orchestrator.model._chat_message import ChatMessage
from orchestrator.tool._tool_call import ToolCall, ToolCallView

ApprovalDecision = Literal["approve", "modify", "reject", "terminate", "escalate"]


class Approval(BaseModel):
    decision: ApprovalDecision
    modified: ToolCall | None = None
    explanation: str | None = None
    # Remember an approve/reject for this function for the rest of this run (never for nested runs).
    always: bool = False


class Approver(Protocol):
    async def __call__(
        self, message: str, call: ToolCall, view: ToolCallView, history: list[ChatMessage]
    ) -> Approval: ...


_APPROVERS: NamedFactories[Approver] = NamedFactories("approver")

approver = _APPROVERS.register
approver_factory = _APPROVERS.factory
approver_name = _APPROVERS.name_of
