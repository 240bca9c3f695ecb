"""Message filters for handoffs and overflow: ``remove_tools``, ``content_only``, ``last_message``, ``trim_messages``.

Filters return new lists and never edit the messages they are given (they are shared with the
caller's history).
"""

from __future__ import annotations

import inspect
from typing import Any

from orchestrator.model._chat_message import (
    ChatMessage,
    ChatMessageAssistant,
    ChatMessageSystem,
    ChatMessageTool,
    ChatMessageUser,
)
from orchestrator.tool._content import ContentText


async def remove_tools(messages: list[ChatMessage]) -> list[ChatMessage]:
    """Drop tool results and the tool calls on assistant messages (text is kept)."""
    filtered: list[ChatMessage] = []
    for message in messages:
        if isinstance(message, ChatMessageTool):
            continue
        if isinstance(message, ChatMessageAssistant) and message.tool_calls:
            message = message.model_copy(update={"tool_calls": None})
        filtered.append(message)
    return filtered


async def content_only(messages: list[ChatMessage]) -> list[ChatMessage]:
    """Only what another model can safely read: text of user/assistant messages.

    Tool calls and results go; system messages go; assistant messages keep their text and
    non-reasoning content (so they read as plain statements).
    """
    filtered: list[ChatMessage] = []
    for message in await remove_tools(messages):
        if isinstance(message, ChatMessageSystem):
            continue
        if isinstance(message, ChatMessageAssistant) and not isinstance(message.content, str):
            message = message.model_copy(update={"content": [p for p in message.content if getattr(p, "type", None) in ("text", "image")]})
        filtered.append(message)
    return filtered


async def last_message(messages: list[ChatMessage]) -> list[ChatMessage]:
    """Only the last message."""
    return messages[-1:]


def prefix_assistant(messages: list[ChatMessage], name: str) -> list[ChatMessage]:
    """Prefix every assistant message's text with ``[{name}] `` (copies; originals untouched)."""
    prefix = f"[{name}] "
    out: list[ChatMessage] = []
    for message in messages:
        if isinstance(message, ChatMessageAssistant):
            if isinstance(message.content, str):
                message = message.model_copy(update={"content": prefix + message.content})
            else:
                parts = list(message.content)
                index = next((i for i, p in enumerate(parts) if isinstance(p, ContentText)), None)
                if index is None:
                    parts.insert(0, ContentText(text=prefix.rstrip()))
                else:
                    parts[index] = ContentText(text=prefix + parts[index].text)  # type: ignore[union-attr]
                message = message.model_copy(update={"content": parts})
        out.append(message)
    return out


def trim_messages(messages: list[ChatMessage], preserve: float = 0.7) -> list[ChatMessage]:
    """Shrink a conversation that overflowed: keep system messages, the task input and the newest
    ``preserve`` share of the rest, cut at an assistant turn so no tool result loses its call.
    """
    if not 0 < preserve <= 1:
        raise ValueError("preserve must be in (0, 1]")
    system = [m for m in messages if isinstance(m, ChatMessageSystem)]
    rest = [m for m in messages if not isinstance(m, ChatMessageSystem)]
    # The input: leading user messages before the first assistant turn.
    n_input = next((i for i, m in enumerate(rest) if not isinstance(m, ChatMessageUser)), len(rest))
    head, conversation = rest[:n_input], rest[n_input:]
    keep = int(len(conversation) * preserve)
    start = len(conversation) - keep
    # Never start on a tool result: walk forward to the next assistant or user message.
    while start < len(conversation) and isinstance(conversation[start], ChatMessageTool):
        start += 1
    return system + head + conversation[start:]


async def apply_filter(fn: Any, messages: list[ChatMessage]) -> list[ChatMessage]:
    """Call a message filter that may be sync or async."""
    result = fn(messages)
    if inspect.isawaitable(result):
        result = await result
    return list(result)
