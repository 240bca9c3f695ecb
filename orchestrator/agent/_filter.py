"""Message filters for handoffs and overflow: ``remove_tools``, ``content_only``, ``last_message``, ``trim_messages``.

Filters return new lists and never edit the messages they are given (they are shared with the
caller's history).
"""

from __future__ import annotations

import inspect
import pprint
import textwrap
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
    """Pure content another model can read (the default handoff output filter, as in Inspect).

    System messages go; tool results become user messages; an assistant message's tool calls
    become text (``add(x=5, y=5)``) after its content; reasoning goes; server-side tool use
    becomes text (``name arguments\n\nresult``).
    """
    filtered: list[ChatMessage] = []
    for message in messages:
        if isinstance(message, ChatMessageSystem):
            continue
        if isinstance(message, ChatMessageUser):
            filtered.append(message)
        elif isinstance(message, ChatMessageTool):
            filtered.append(ChatMessageUser(id=message.id, content=message.content))
        elif isinstance(message, ChatMessageAssistant):
            content = [ContentText(text=message.content)] if isinstance(message.content, str) else list(message.content)
            calls = "\n".join(format_function_call(c.function, c.arguments) for c in (message.tool_calls or []))
            if calls:
                content.append(ContentText(text=calls))
            content = [_plain(c) for c in content if getattr(c, "type", None) != "reasoning"]
            filtered.append(message.model_copy(update={"content": content, "tool_calls": None}))
        else:
            filtered.append(message)
    return filtered


def _plain(content: Any) -> Any:
    """Server-side tool use becomes text; provider-internal data goes."""
    if getattr(content, "type", None) == "tool_use":
        return ContentText(text=f"{content.name} {content.arguments}\n\n{content.result}")
    if getattr(content, "internal", None) is not None:
        return content.model_copy(update={"internal": None})
    return content


def format_function_call(function: str, arguments: dict[str, Any], width: int = 80) -> str:
    """``name(a=1, b='x')`` on one line, or one argument per indented line when too wide."""
    args = [f"{key}={_format_value(value, width)}" for key, value in arguments.items()]
    joined = ", ".join(args)
    if len(joined) <= width - 1 - len(function) - 2:
        return f"{function}({joined})"
    return function + "(\n" + textwrap.indent(",\n".join(args), "    ") + "\n)"


def _format_value(value: Any, width: int) -> str:
    if isinstance(value, str):
        return f"'{value}'"
    if isinstance(value, (list, tuple, dict)):
        return pprint.pformat(value, width=width)
    return str(value)


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
                    parts[index] = ContentText(text=prefix + parts[index].text)  # type: ignore[union-attr]  # index found a ContentText
                message = message.model_copy(update={"content": parts})
        out.append(message)
    return out


async def trim_messages(messages: list[ChatMessage], preserve: float = 0.7) -> list[ChatMessage]:
    """Shrink a conversation that overflowed, trimming what Inspect's ``trim_messages`` trims.

    Keeps the system messages and the input (messages with ``source="input"``, else everything up
    to the first user message), then the newest ``preserve`` share of the rest, minus tool results
    whose call was cut, calls whose result was cut, and a trailing assistant message.
    """
    if not 0 <= preserve <= 1:
        raise ValueError(f"preserve must be in range [0,1], got {preserve}")
    system, head, conversation = _partition(messages)
    kept: list[ChatMessage] = []
    open_calls: set[str] = set()
    for message in conversation[int(len(conversation) * (1 - preserve)):]:
        if isinstance(message, ChatMessageAssistant):
            open_calls = {c.id for c in message.tool_calls or []}
            kept.append(message)
        elif isinstance(message, ChatMessageTool) and message.tool_call_id in open_calls:
            kept.append(message)
        elif isinstance(message, ChatMessageUser):
            open_calls = set()
            kept.append(message)
    answered = {m.tool_call_id for m in kept if isinstance(m, ChatMessageTool)}
    for i, message in enumerate(kept):
        if isinstance(message, ChatMessageAssistant) and message.tool_calls:
            calls = [c for c in message.tool_calls if c.id in answered]
            if len(calls) != len(message.tool_calls):
                kept[i] = message.model_copy(update={"tool_calls": calls or None})
    if kept and isinstance(kept[-1], ChatMessageAssistant):
        kept.pop()
    return system + head + kept


def _partition(messages: list[ChatMessage]) -> tuple[list[ChatMessage], list[ChatMessage], list[ChatMessage]]:
    """(system, input, conversation) as Inspect partitions a history (summaries stay in the conversation)."""
    system: list[ChatMessage] = []
    head: list[ChatMessage] = []
    conversation: list[ChatMessage] = []
    for message in messages:
        summary = "summary" in (message.metadata or {})
        if isinstance(message, ChatMessageSystem):
            system.append(message)
        elif not summary and message.source == "input":
            head.append(message)
        else:
            conversation.append(message)
    if not head:
        while conversation and "summary" not in (conversation[0].metadata or {}):
            message = conversation.pop(0)
            head.append(message)
            if isinstance(message, ChatMessageUser):
                break
    return system, head, conversation


async def apply_filter(fn: Any, messages: list[ChatMessage]) -> list[ChatMessage]:
    """Call a message filter that may be sync or async."""
    result = fn(messages)
    if inspect.isawaitable(result):
        result = await result
    return list(result)
