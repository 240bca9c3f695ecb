"""Review decisions and the reviewer protocol."""

from __future__ import annotations

from typing import Any, Literal, Protocol

from pydantic import BaseModel

from orchestrator._policy_chain import NamedFactories
from orchestrator.model._chat_message import ChatMessage, ChatMessageTool
from orchestrator.tool._tool_call import ToolCall, ToolCallView

ReviewDecision = Literal["continue", "terminate", "escalate"]


class Review(BaseModel):
    decision: ReviewDecision
    explanation: str | None = None


class Reviewer(Protocol):
    async def __call__(
        self,
        message: str,
        call: ToolCall,
        result: ChatMessageTool,
        output: Any,
        view: ToolCallView,
        history: list[ChatMessage],
    ) -> Review: ...


_REVIEWERS: NamedFactories[Reviewer] = NamedFactories("reviewer")

reviewer = _REVIEWERS.register
reviewer_factory = _REVIEWERS.factory
reviewer_name = _REVIEWERS.name_of

