"""Conversion between toolfleet's messages/tools and the Anthropic Messages API wire format.

Pure functions over plain dicts (requests) and response objects (the SDK's ``Message``, or the same
shape as a dict, e.g. a Message Batches result), so they are testable without a server and shared by
the direct and the batch paths.

The Messages API differs from chat completions in ways that shape this module:
- system messages are a top-level ``system`` parameter, not turns;
- tool results are ``tool_result`` blocks inside a *user* turn, so consecutive tool messages (the
  results of several ``tool_use`` blocks of one assistant turn) become one user turn, in order, and a
  user message that follows them joins that turn after the results;
- extended thinking comes back as ``thinking`` / ``redacted_thinking`` blocks that must be sent back
  unchanged (with their signature) on the next turn; they are kept as ``ContentReasoning``;
- ``max_tokens`` is required.
"""

from __future__ import annotations

import json
from typing import Any

from orchestrator._errors import ToolfleetError
from orchestrator.tool._content import ContentImage, ContentReasoning, ContentText
from orchestrator.tool._tool_call import ToolCall, ToolChoice, ToolFunction
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
from .._tool_call_parse import parse_error_message, parse_tool_call

DEFAULT_MAX_TOKENS = 4096  # the API requires max_tokens; used when GenerateConfig.max_tokens is unset
NO_CONTENT = "(no content)"  # the API refuses empty text blocks and empty turns

class MalformedResponseError(ToolfleetError, ValueError):
    """A 200 whose body is not a Messages API message (a broken proxy or compatible server)."""


_STOP_REASONS: dict[str, StopReason] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "max_tokens": "max_tokens",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
    "model_context_window_exceeded": "model_length",
}


def stop_reason(value: str | None) -> StopReason:
    return _STOP_REASONS.get(value or "", "unknown")


# -- request ---------------------------------------------------------------------------------------


def _image_block(image: str) -> dict[str, Any]:
    if image.startswith("data:"):
        header, _, data = image.partition(",")
        media_type = header[5:].split(";", 1)[0] or "image/png"
        return {"type": "image", "source": {"type": "base64", "media_type": media_type, "data": data}}
    return {"type": "image", "source": {"type": "url", "url": image}}


def _content_blocks(content: Any) -> list[dict[str, Any]]:
    """Text and image blocks of a user message or a tool result (empty text left out)."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    blocks: list[dict[str, Any]] = []
    for part in content:
        if isinstance(part, ContentText) and part.text:
            blocks.append({"type": "text", "text": part.text})
        elif isinstance(part, ContentImage):
            blocks.append(_image_block(part.image))
    return blocks


def _reasoning_block(part: ContentReasoning) -> dict[str, Any] | None:
    if part.redacted:
        return {"type": "redacted_thinking", "data": part.reasoning}
    if part.signature is None:
        # Reasoning from another provider (or a summary) has no signature: the API would refuse it.
        return None
    return {"type": "thinking", "thinking": part.reasoning, "signature": part.signature}


def _assistant_blocks(message: ChatMessageAssistant) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if isinstance(message.content, str):
        if message.content:
            blocks.append({"type": "text", "text": message.content})
    else:
        for part in message.content:
            if isinstance(part, ContentReasoning):
                block = _reasoning_block(part)
                if block is not None:
                    blocks.append(block)
            elif isinstance(part, ContentText) and part.text:
                blocks.append({"type": "text", "text": part.text})
    for call in message.tool_calls or []:
        blocks.append({"type": "tool_use", "id": call.id, "name": call.function, "input": call.arguments})
    return blocks or [{"type": "text", "text": NO_CONTENT}]


def _tool_result_block(message: ChatMessageTool) -> dict[str, Any]:
    blocks = _content_blocks(message.content)
    if message.error is not None and not blocks:
        blocks = [{"type": "text", "text": f"Error: {message.error.message}"}]
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": message.tool_call_id or "",
                             "content": blocks or [{"type": "text", "text": NO_CONTENT}]}
    if message.error is not None:
        block["is_error"] = True
    return block


def messages_to_wire(messages: list[ChatMessage]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``(system blocks, turns)``: system messages lifted out, tool results folded into user turns."""
    system: list[dict[str, Any]] = []
    turns: list[dict[str, Any]] = []
    for message in messages:
        if isinstance(message, ChatMessageSystem):
            if message.text:
                system.append({"type": "text", "text": message.text})
            continue
        if isinstance(message, ChatMessageAssistant):
            role, blocks = "assistant", _assistant_blocks(message)
        elif isinstance(message, ChatMessageTool):
            role, blocks = "user", [_tool_result_block(message)]
        elif isinstance(message, ChatMessageUser):
            role, blocks = "user", _content_blocks(message.content) or [{"type": "text", "text": NO_CONTENT}]
        else:
            raise TypeError(f"Unsupported message type {type(message).__name__}")
        if turns and turns[-1]["role"] == role:
            # Roles must alternate: merge (tool results of one turn, then any user text after them).
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})
    return system, turns


def tool_to_wire(info: ToolInfo) -> dict[str, Any]:
    return {"name": info.name, "description": info.description, "input_schema": info.parameters.json_schema()}


def tool_choice_to_wire(choice: ToolChoice | str, parallel_tool_calls: bool | None = None) -> dict[str, Any]:
    if isinstance(choice, ToolFunction):
        wire: dict[str, Any] = {"type": "tool", "name": choice.name}
    else:
        wire = {"type": choice if choice in ("auto", "any", "none") else "auto"}
    if parallel_tool_calls is False and wire["type"] != "none":
        wire["disable_parallel_tool_use"] = True
    return wire


def build_request(model: str, messages: list[ChatMessage], tools: list[ToolInfo], tool_choice: ToolChoice | None,
                  config: GenerateConfig) -> dict[str, Any]:
    """Keyword arguments for ``client.messages.create`` (also a Message Batches request's ``params``)."""
    system, turns = messages_to_wire(messages)
    request: dict[str, Any] = {"model": model, "max_tokens": config.max_tokens or DEFAULT_MAX_TOKENS,
                               "messages": turns}
    if system:
        request["system"] = system
    if tools:
        request["tools"] = [tool_to_wire(t) for t in tools]
        request["tool_choice"] = tool_choice_to_wire(tool_choice or "auto", config.parallel_tool_calls)
    if config.reasoning_tokens:
        request["thinking"] = {"type": "enabled", "budget_tokens": config.reasoning_tokens}
    else:
        # Sampling settings are refused alongside extended thinking.
        for ours, theirs in (("temperature", "temperature"), ("top_p", "top_p")):
            value = getattr(config, ours)
            if value is not None:
                request[theirs] = value
    if config.stop_seqs:
        request["stop_sequences"] = config.stop_seqs
    cache = config.cache_prompt if config.cache_prompt is not None else "auto"
    if cache is True or (cache == "auto" and tools):
        mark_cache_breakpoints(request)
    return request


_CACHEABLE = {"text", "image", "tool_use", "tool_result"}


def mark_cache_breakpoints(request: dict[str, Any]) -> None:
    """Prompt caching (Inspect's ``cache_prompt``): a breakpoint after the system prompt, the tools and
    the conversation so far, so each turn of an agent loop re-reads its prefix from the cache (a
    tenth of the input price) instead of paying for it again. At most three of the API's four."""
    marker = {"type": "ephemeral"}
    if request.get("system"):
        request["system"][-1]["cache_control"] = marker
    if request.get("tools"):
        request["tools"][-1]["cache_control"] = marker
    turns = request.get("messages") or []
    if turns and turns[-1]["content"] and turns[-1]["content"][-1].get("type") in _CACHEABLE:
        turns[-1]["content"][-1]["cache_control"] = marker


# -- response --------------------------------------------------------------------------------------


def _get(obj: Any, name: str, default: Any = None) -> Any:
    """A field of an SDK object or of the same shape as a dict (batch results are read as JSON)."""
    if isinstance(obj, dict):
        return obj.get(name, default)
    return getattr(obj, name, default)


def parse_usage(usage: Any) -> ModelUsage | None:
    """Inspect's accounting: ``input_tokens`` is the uncached input; the total counts cache reads/writes."""
    if usage is None:
        return None
    input_tokens = _get(usage, "input_tokens") or 0
    output_tokens = _get(usage, "output_tokens") or 0
    cache_write = _get(usage, "cache_creation_input_tokens")
    cache_read = _get(usage, "cache_read_input_tokens")
    return ModelUsage(
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        total_tokens=input_tokens + output_tokens + (cache_write or 0) + (cache_read or 0),
        input_tokens_cache_write=cache_write,
        input_tokens_cache_read=cache_read,
    )


def _tool_call(block: Any, tools: list[ToolInfo] | None) -> ToolCall:
    call_id, name, arguments = _get(block, "id") or "", _get(block, "name") or "", _get(block, "input")
    if isinstance(arguments, dict):
        return ToolCall(id=call_id, function=name, arguments=arguments)
    if isinstance(arguments, str):  # not the API's shape, but some compatible servers send JSON text
        return parse_tool_call(call_id, name, arguments, tools)
    raw = json.dumps(arguments)
    return ToolCall(id=call_id, function=name, parse_error=parse_error_message(raw, "arguments must be an object"))


def parse_message(model: str, message: Any, tools: list[ToolInfo] | None = None) -> ModelOutput:
    """A ``ModelOutput`` from a ``Message`` (SDK object or dict).

    Thinking blocks are kept, in order, as ``ContentReasoning`` parts before the text, so they are
    in the history sent back next turn and in the log. Several ``tool_use`` blocks keep their order.
    """
    blocks = _get(message, "content") if isinstance(message, dict) or hasattr(message, "content") else None
    if not isinstance(blocks, list):
        raise MalformedResponseError(f"malformed Messages API response: expected a message with a list of content "
                                     f"blocks, got {type(blocks if blocks is not None else message).__name__}")
    parts: list[ContentReasoning | ContentText] = []
    calls: list[ToolCall] = []
    for block in blocks:
        kind = _get(block, "type")
        if kind == "text":
            parts.append(ContentText(text=_get(block, "text") or ""))
        elif kind == "thinking":
            parts.append(ContentReasoning(reasoning=_get(block, "thinking") or "", signature=_get(block, "signature")))
        elif kind == "redacted_thinking":
            parts.append(ContentReasoning(reasoning=_get(block, "data") or "", redacted=True))
        elif kind == "tool_use":
            calls.append(_tool_call(block, tools))
    content: str | list[Any]
    if any(isinstance(p, ContentReasoning) for p in parts):
        content = parts
    else:
        content = "\n".join(p.text for p in parts if isinstance(p, ContentText))
    reason = stop_reason(_get(message, "stop_reason"))
    if calls and reason in ("stop", "unknown"):
        reason = "tool_calls"
    name = _get(message, "model") or model
    assistant = ChatMessageAssistant(content=content, tool_calls=calls or None, model=name, source="generate")
    return ModelOutput(model=name, choices=[ChatCompletionChoice(message=assistant, stop_reason=reason)],
                       usage=parse_usage(_get(message, "usage")))


def is_context_length_error(message: str) -> bool:
    """Whether a 400 from the Messages API means the prompt overflowed the context window."""
    text = message.lower()
    return "prompt is too long" in text or "context window" in text or "context length" in text
