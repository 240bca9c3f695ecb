"""Building scripted turns for agent tests."""

from __future__ import annotations

import itertools
from typing import Any

from orchestrator.model import ChatMessage, ChatMessageUser, ModelOutput, ModelUsage, get_model
from orchestrator.tool import ToolCall

_ids = itertools.count()


def call(function: str, **arguments: Any) -> ToolCall:
    return ToolCall(id=f"call_{next(_ids)}", function=function, arguments=arguments)


def calls(*tool_calls: ToolCall, text: str = "", tokens: int | None = None) -> ModelOutput:
    out = ModelOutput.for_tool_calls("scripted", list(tool_calls), text)
    if tokens is not None:
        out.usage = ModelUsage(input_tokens=tokens // 2, output_tokens=tokens - tokens // 2, total_tokens=tokens)
    return out


def submit(answer: str, text: str = "", tokens: int | None = None) -> ModelOutput:
    return calls(call("submit", answer=answer), text=text, tokens=tokens)


def text(content: str, stop_reason: str = "stop", tokens: int | None = None) -> ModelOutput:
    out = ModelOutput.from_content("scripted", content, stop_reason=stop_reason)  # type: ignore[arg-type]
    if tokens is not None:
        out.usage = ModelUsage(input_tokens=tokens // 2, output_tokens=tokens - tokens // 2, total_tokens=tokens)
    return out


def scripted(*outputs: ModelOutput | str):
    return get_model("scripted", outputs=list(outputs))


def user(content: str) -> ChatMessage:
    return ChatMessageUser(content=content)


def roles(messages: list[ChatMessage]) -> list[str]:
    return [m.role for m in messages]


def texts(messages: list[ChatMessage], role: str) -> list[str]:
    return [m.text for m in messages if m.role == role]

