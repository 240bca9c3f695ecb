"""Chat messages (mirrors ``inspect_ai.model``'s ``ChatMessage*``)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

from orchestrator._ids import new_id
from orchestrator.tool._content import Content, ContentText
from orchestrator.tool._tool_call import ToolCall, ToolCallError


class ChatMessageBase(BaseModel):
    id: str = Field(default_factory=new_id)
    content: str | list[Content] = ""
    source: Literal["input", "generate"] | None = None
    metadata: dict[str, Any] | None = None

    @property
    def text(self) -> str:
        """The text content (text parts joined with newlines)."""
        if isinstance(self.content, str):
            return self.content
        return "\n".join(part.text for part in self.content if isinstance(part, ContentText))

    @text.setter
    def text(self, value: str) -> None:
        if isinstance(self.content, str):
            self.content = value
            return
        others = [part for part in self.content if not isinstance(part, ContentText)]
        self.content = [ContentText(text=value), *others]


class ChatMessageSystem(ChatMessageBase):
    role: Literal["system"] = "system"


class ChatMessageUser(ChatMessageBase):
    role: Literal["user"] = "user"
    tool_call_id: list[str] | None = None


class ChatMessageAssistant(ChatMessageBase):
    role: Literal["assistant"] = "assistant"
    tool_calls: list[ToolCall] | None = None
    model: str | None = None


class ChatMessageTool(ChatMessageBase):
    role: Literal["tool"] = "tool"
    tool_call_id: str | None = None
    function: str | None = None
    error: ToolCallError | None = None


ChatMessage = Annotated[
    ChatMessageSystem | ChatMessageUser | ChatMessageAssistant | ChatMessageTool,
    Field(discriminator="role"),
]
