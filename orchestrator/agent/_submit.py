"""react's ``submit`` tool: how an answer is handed in, found, and removed from the history on exit."""

from __future__ import annotations

from typing import Any

from orchestrator.model._chat_message import ChatMessage, ChatMessageAssistant, ChatMessageTool
from orchestrator.tool._tool import tool
from orchestrator.tool._tool_def import ToolDef

from ._types import AgentSubmit


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


def submit_tool(config: AgentSubmit) -> Any:
    """A fresh submit tool named/described per ``config``; never truncated, runs in the orchestrator."""
    return ToolDef(submit(), name=config.name, description=config.description, max_output=0,
                   runs_on="orchestrator", parallel=False).as_tool()


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
        if isinstance(message, ChatMessageAssistant) and message.tool_calls and any(c.function == name for c in message.tool_calls):
            calls = [c for c in message.tool_calls if c.function != name]
            message = message.model_copy(update={"tool_calls": calls or None})
        out.append(message)
    return out
