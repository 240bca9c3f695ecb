"""Run ``execute_tools`` the way a sample does: a dispatcher, a transcript, declared calls."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from orchestrator.dispatch import Dispatcher, reset_active_dispatcher, set_active_dispatcher
from orchestrator.log import Transcript, bind_transcript
from orchestrator.model import ChatMessageAssistant, ChatMessageUser, ExecuteToolsResult, execute_tools
from orchestrator.tool import ToolCall


def calls(*specs: tuple[str, dict[str, Any]]) -> list[ToolCall]:
    return [ToolCall(id=f"c{i}", function=fn, arguments=args) for i, (fn, args) in enumerate(specs)]


def turn(tool_calls: Sequence[ToolCall], text: str = "") -> list[Any]:
    return [ChatMessageUser(content="do it"), ChatMessageAssistant(content=text, tool_calls=list(tool_calls))]


async def run_turn(
    dispatcher: Dispatcher, tool_calls: Sequence[ToolCall], tools: Sequence[Any], **kwargs: Any
) -> tuple[ExecuteToolsResult, Transcript]:
    transcript = Transcript()
    token = set_active_dispatcher(dispatcher)
    try:
        with bind_transcript(transcript):
            result = await execute_tools(turn(tool_calls), tools, **kwargs)
    finally:
        reset_active_dispatcher(token)
    return result, transcript
