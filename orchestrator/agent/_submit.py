"""react's ``submit`` tool: how an answer is handed in, found, and removed from the history on exit."""

from __future__ import annotations

from typing import Any

from orchestrator.model._chat_message import ChatMessage, ChatMessageAssistant, ChatMessageTool
from orchestrator.tool._tool import tool
from orchestrator.tool._tool_def import ToolDef

from ._types import DEFAULT_SUBMIT_DESCRIPTION, DEFAULT_SUBMIT_NAME, AgentSubmit


@tool(runs_on="orchestrator", max_output=0)
def submit() -> Any:
    """Submit an answer for evaluation."""

    async def execute(answer: str) -> str:
        """Submit an answer for evaluation.

        Args:
          answer: Submitted answer
        """
        return answer

    return execute


def submit_tool(config: AgentSubmit) -> ToolDef:
    """The submit tool per ``config`` (a fresh copy; a caller's ``ToolDef`` is left alone).

    The answer becomes the completion, so it is not truncated unless the caller's tool says so.
    """
    if config.tool is None:
        return ToolDef(submit(), name=config.name or DEFAULT_SUBMIT_NAME,
                       description=config.description or DEFAULT_SUBMIT_DESCRIPTION, max_output=0,
                       runs_on="orchestrator", parallel=False)
    base = config.tool if isinstance(config.tool, ToolDef) else ToolDef(config.tool)
    return ToolDef(base, name=config.name or base.name, description=config.description or base.description,
                   max_output=0 if base.max_output is None else base.max_output)


def submission(messages: list[ChatMessage], name: str) -> str | None:
    """The answer of a successful submit call among a turn's tool results, if any."""
    for message in messages:
        if isinstance(message, ChatMessageTool) and message.function == name and message.error is None:
            return message.text
    return None


def remove_submit(messages: list[ChatMessage], name: str) -> list[ChatMessage]:
    """The history without submit calls and their results (so a parent agent never sees them)."""
    out: list[ChatMessage] = []
    for message in messages:
        if isinstance(message, ChatMessageTool) and message.function == name:
            continue
        if isinstance(message, ChatMessageAssistant) and message.tool_calls \
                and any(c.function == name for c in message.tool_calls):
            calls = [c for c in message.tool_calls if c.function != name]
            message = message.model_copy(update={"tool_calls": calls or None})
        out.append(message)
    return out
