"""A model's answer: choices with a stop reason, and token usage."""

from __future__ import annotations

import uuid
from typing import Any, Literal

from pydantic import BaseModel, Field

from orchestrator.tool._tool_call import ToolCall

from ._chat_message import ChatMessageAssistant

StopReason = Literal["stop", "max_tokens", "model_length", "tool_calls", "content_filter", "unknown"]


class ModelUsage(BaseModel):
    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0
    input_tokens_cache_write: int | None = None
    input_tokens_cache_read: int | None = None
    reasoning_tokens: int | None = None
    total_cost: float | None = None  # USD, from the price table (None: no price known for the model)

    def __add__(self, other: ModelUsage) -> ModelUsage:
        def add(a: int | None, b: int | None) -> int | None:
            return None if a is None and b is None else (a or 0) + (b or 0)

        return ModelUsage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            total_tokens=self.total_tokens + other.total_tokens,
            input_tokens_cache_write=add(self.input_tokens_cache_write, other.input_tokens_cache_write),
            input_tokens_cache_read=add(self.input_tokens_cache_read, other.input_tokens_cache_read),
            reasoning_tokens=add(self.reasoning_tokens, other.reasoning_tokens),
            total_cost=None if self.total_cost is None and other.total_cost is None
            else (self.total_cost or 0.0) + (other.total_cost or 0.0),
        )


class ChatCompletionChoice(BaseModel):
    message: ChatMessageAssistant
    stop_reason: StopReason = "unknown"


class ModelOutput(BaseModel):
    model: str = ""
    choices: list[ChatCompletionChoice] = Field(default_factory=list)
    usage: ModelUsage | None = None
    time: float | None = None
    error: str | None = None
    metadata: dict[str, Any] | None = None

    @property
    def empty(self) -> bool:
        return len(self.choices) == 0

    @property
    def message(self) -> ChatMessageAssistant:
        return self.choices[0].message

    @property
    def stop_reason(self) -> StopReason:
        return self.choices[0].stop_reason if self.choices else "unknown"

    @property
    def completion(self) -> str:
        return self.choices[0].message.text if self.choices else ""

    @completion.setter
    def completion(self, value: str) -> None:
        if self.choices:
            self.choices[0].message.text = value
        else:
            self.choices.append(ChatCompletionChoice(message=ChatMessageAssistant(content=value, model=self.model),
                                                     stop_reason="stop"))

    @staticmethod
    def from_content(model: str, content: str, stop_reason: StopReason = "stop") -> ModelOutput:
        return ModelOutput(
            model=model,
            choices=[ChatCompletionChoice(message=ChatMessageAssistant(content=content, model=model, source="generate"),
                                          stop_reason=stop_reason)],
        )

    @staticmethod
    def for_tool_call(
        model: str,
        tool_name: str,
        tool_arguments: dict[str, Any],
        tool_call_id: str | None = None,
        content: str | None = None,
    ) -> ModelOutput:
        if content is None:  # Inspect's default text beside the call (mockllm outputs read the same)
            content = f"tool call for tool {tool_name}"
        call = ToolCall(id=tool_call_id or f"call_{uuid.uuid4().hex[:12]}", function=tool_name,
                        arguments=tool_arguments)
        return ModelOutput.for_tool_calls(model, [call], content)

    @staticmethod
    def for_tool_calls(model: str, calls: list[ToolCall], content: str = "") -> ModelOutput:
        message = ChatMessageAssistant(content=content, tool_calls=calls, model=model, source="generate")
        return ModelOutput(model=model, choices=[ChatCompletionChoice(message=message, stop_reason="tool_calls")])
