"""Conversion between toolfleet's messages/tools and the chat-completions wire format.

Pure functions over plain dicts (requests) and the SDK's response objects, so they are testable
without a server and reusable by any OpenAI-compatible backend (vLLM, SGLang, Ollama, ...).
"""

from __future__ import annotations

import json
from typing import Any

from orchestrator.tool._content import ContentImage, ContentText
from orchestrator.tool._tool_call import ToolChoice, ToolFunction
from orchestrator.tool._tool_info import ToolInfo

from .._chat_message import (
    ChatMessage,
    ChatMessageAssistant,
    ChatMessageSystem,
    ChatMessageTool,
    ChatMessageUser,
)
from .._generate_config import GenerateConfig
from .._model_output import ChatCompletionChoice, ModelOutput, ModelUsage, StopReason
from .._tool_call_parse import parse_tool_call

_FINISH_REASONS: dict[str, StopReason] = {
    "stop": "stop",
    "length": "max_tokens",
    "tool_calls": "tool_calls",
    "function_call": "tool_calls",
    "content_filter": "content_filter",
}


def _content_parts(message: ChatMessage) -> str | list[dict[str, Any]]:
    if isinstance(message.content, str):
        return message.content
    parts: list[dict[str, Any]] = []
    for part in message.content:
        if isinstance(part, ContentText):
            parts.append({"type": "text", "text": part.text})
        elif isinstance(part, ContentImage):
            parts.append({"type": "image_url", "image_url": {"url": part.image, "detail": part.detail}})
    return parts


def message_to_wire(message: ChatMessage) -> dict[str, Any]:
    if isinstance(message, ChatMessageSystem):
        return {"role": "system", "content": message.text}
    if isinstance(message, ChatMessageUser):
        return {"role": "user", "content": _content_parts(message)}
    if isinstance(message, ChatMessageAssistant):
        wire: dict[str, Any] = {"role": "assistant", "content": message.text or None}
        if message.tool_calls:
            wire["tool_calls"] = [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.function, "arguments": json.dumps(call.arguments)},
                }
                for call in message.tool_calls
            ]
        return wire
    if isinstance(message, ChatMessageTool):
        text = message.text
        if message.error is not None and not text:
            text = f"Error: {message.error.message}"
        return {"role": "tool", "tool_call_id": message.tool_call_id or "", "content": text}
    raise TypeError(f"Unsupported message type {type(message).__name__}")


def tool_to_wire(info: ToolInfo) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {"name": info.name, "description": info.description, "parameters": info.parameters.json_schema()},
    }


def tool_choice_to_wire(choice: ToolChoice | str) -> Any:
    if isinstance(choice, ToolFunction):
        return {"type": "function", "function": {"name": choice.name}}
    # Inspect's "any" is the chat-completions "required".
    return {"any": "required"}.get(choice, choice)


def build_request(model: str, messages: list[ChatMessage], tools: list[ToolInfo], tool_choice: ToolChoice | None,
                  config: GenerateConfig) -> dict[str, Any]:
    """Keyword arguments for ``client.chat.completions.create``."""
    request: dict[str, Any] = {"model": model, "messages": [message_to_wire(m) for m in messages]}
    if tools:
        request["tools"] = [tool_to_wire(t) for t in tools]
        request["tool_choice"] = tool_choice_to_wire(tool_choice or "auto")
        if config.parallel_tool_calls is not None:
            request["parallel_tool_calls"] = config.parallel_tool_calls
    for ours, theirs in (("max_tokens", "max_tokens"), ("temperature", "temperature"), ("top_p", "top_p"),
                         ("seed", "seed"), ("stop_seqs", "stop")):
        value = getattr(config, ours)
        if value is not None:
            request[theirs] = value
    return request


def parse_usage(usage: Any) -> ModelUsage | None:
    if usage is None:
        return None
    prompt_details = getattr(usage, "prompt_tokens_details", None)
    completion_details = getattr(usage, "completion_tokens_details", None)
    input_tokens = getattr(usage, "prompt_tokens", 0) or 0
    output_tokens = getattr(usage, "completion_tokens", 0) or 0
    return ModelUsage(
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        total_tokens=getattr(usage, "total_tokens", None) or input_tokens + output_tokens,
        input_tokens_cache_read=getattr(prompt_details, "cached_tokens", None),
        reasoning_tokens=getattr(completion_details, "reasoning_tokens", None),
    )


def parse_completion(model: str, completion: Any, tools: list[ToolInfo] | None = None) -> ModelOutput:
    """A ``ModelOutput`` from a ``ChatCompletion`` (tolerant of fields OpenAI-compatible servers omit).

    ``tools`` lets non-JSON arguments be recovered for a one-parameter tool (as Inspect does).
    """
    choices: list[ChatCompletionChoice] = []
    for index, choice in enumerate(completion.choices or []):
        message = choice.message
        calls = [
            parse_tool_call(call.id or f"call_{index}_{n}", call.function.name, call.function.arguments, tools)
            for n, call in enumerate(getattr(message, "tool_calls", None) or [])
        ]
        stop_reason = _FINISH_REASONS.get(choice.finish_reason or "", "unknown")
        if calls and stop_reason in ("stop", "unknown"):
            # Some servers report "stop" alongside tool calls; the calls are what the loop acts on.
            stop_reason = "tool_calls"
        choices.append(ChatCompletionChoice(
            message=ChatMessageAssistant(content=message.content or "", tool_calls=calls or None,
                                         model=completion.model or model, source="generate"),
            stop_reason=stop_reason,
        ))
    return ModelOutput(model=completion.model or model, choices=choices, usage=parse_usage(completion.usage))


_CONTEXT_LENGTH_MARKERS = (
    "context_length_exceeded",
    "maximum context length",
    "context length",
    "context window",
    "prompt is too long",
    "too many tokens",
    "input is too long",
)


def is_context_length_error(code: str | None, message: str) -> bool:
    """Whether a 400 from an OpenAI-compatible server means the prompt overflowed the context."""
    text = f"{code or ''} {message}".lower()
    return any(marker in text for marker in _CONTEXT_LENGTH_MARKERS)
