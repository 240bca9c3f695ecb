"""``handoff``: a ``transfer_to_<name>`` tool that hands the conversation to another agent (SPEC §6.3).

The tool is a sentinel: ``execute_tools`` finds the ``HANDOFF_ATTR`` handler on it and awaits
``handler(call, assistant_message, history)`` instead of calling the tool. The handler:

1. strips the other tool calls of that assistant message (the conversation stays valid);
2. answers the call with ``Successfully transferred to {agent_name}.`` — also the boundary that
   tells the agent's new messages from the history it was given;
3. applies ``input_filter`` and drops system messages (the agent brings its own instructions);
4. runs the agent nested (fresh usage and approval store, bounded depth) under a deep copy of
   ``limits`` (a handoff taken twice must not share limit state);
5. keeps only the new messages, prefixes assistant text with ``[{agent_name}] ``, applies
   ``output_filter``, and closes with a user message saying the agent is done (or over a limit).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from orchestrator.log import ToolEvent, span, transcript
from orchestrator.model._call_prepare import HANDOFF_ATTR
from orchestrator.model._chat_message import (
    ChatMessage,
    ChatMessageAssistant,
    ChatMessageSystem,
    ChatMessageTool,
    ChatMessageUser,
)
from orchestrator.model._model_output import ModelOutput
from orchestrator.tool._tool_call import ToolCall, ToolCallError
from orchestrator.tool._tool_def import ToolDef
from orchestrator.util._limits import Limit

from ._agent import Agent, agent_description, agent_name
from ._filter import apply_filter, content_only, prefix_assistant
from ._nested import AgentDepthError, nested_run
from ._run import run
from ._types import MessageFilter

TRANSFERRED = "Successfully transferred to {agent_name}."
COMPLETED = "The {agent_name} agent has completed its work."
LIMIT_EXCEEDED = "The {agent_name} exceeded its {type} limit of {limit}."


def handoff(
    agent: Agent,
    description: str | None = None,
    input_filter: MessageFilter | None = None,
    output_filter: MessageFilter | None = content_only,
    tool_name: str | None = None,
    limits: Sequence[Limit] = (),
    **agent_kwargs: Any,
) -> Any:
    """A tool (``transfer_to_<agent name>``, serial, run in the orchestrator) that hands off to ``agent``."""
    name = agent_name(agent)
    limits = list(limits)

    async def execute() -> str:
        raise RuntimeError("A handoff tool is executed by execute_tools, never called directly.")

    async def handler(call: ToolCall, message: ChatMessageAssistant,
                      history: list[ChatMessage]) -> tuple[ChatMessageTool, list[ChatMessage], ModelOutput | None]:
        # 1. only this call survives in the assistant message (execute_tools splices by it)
        message.tool_calls = [c for c in (message.tool_calls or []) if c.id == call.id]
        # 2. the tool result, and the boundary marker
        boundary = ChatMessageTool(content=TRANSFERRED.format(agent_name=name), tool_call_id=call.id,
                                   function=call.function)
        conversation = [*_with_stripped(history, message), boundary]
        # 3. input filter, then no system messages
        if input_filter is not None:
            conversation = await apply_filter(input_filter, conversation)
        conversation = [m for m in conversation if not isinstance(m, ChatMessageSystem)]
        # 4. run nested, under fresh copies of the limits
        try:
            with nested_run(name), span(name=name, type="handoff"):
                state, limit_error = await run(agent, conversation, copy.deepcopy(limits), **agent_kwargs)
        except AgentDepthError as exc:
            error = ToolCallError(type="unknown", message=exc.message)
            transcript().record(ToolEvent(id=call.id, function=call.function, arguments=call.arguments,
                                          result="", error=error, agent=name))
            return boundary.model_copy(update={"content": "", "error": error}), [], None
        # 5. only the new messages, named, filtered, closed
        new_messages = prefix_assistant(_new_messages(state.messages, conversation), name)
        if output_filter is not None:
            new_messages = await apply_filter(output_filter, new_messages)
        if limit_error is not None:
            new_messages.append(ChatMessageUser(content=LIMIT_EXCEEDED.format(
                agent_name=name, type=limit_error.type, limit=limit_error.limit_str)))
        elif state.messages and isinstance(state.messages[-1], ChatMessageAssistant):
            new_messages.append(ChatMessageUser(content=COMPLETED.format(agent_name=name)))
        transcript().record(ToolEvent(id=call.id, function=call.function, arguments=call.arguments,
                                      result=boundary.text, agent=name))
        return boundary, new_messages, state.output if not state.output.empty else None

    tool = ToolDef(
        execute,
        name=tool_name or f"transfer_to_{name}",
        description=description or agent_description(agent) or f"Hand the conversation to the {name} agent.",
        parallel=False,
        runs_on="orchestrator",
        max_output=0,
    ).as_tool()
    setattr(tool, HANDOFF_ATTR, handler)
    return tool


def _new_messages(messages: list[ChatMessage], given: list[ChatMessage]) -> list[ChatMessage]:
    """What the agent added: everything after the last message it was given (its system message excluded).

    Found by id rather than position: the agent inserts its own system message, and a filter or a
    compaction may have rewritten the history it was given.
    """
    given_ids = {m.id for m in given}
    last = max((i for i, m in enumerate(messages) if m.id in given_ids), default=-1)
    return [m for m in messages[last + 1:] if not isinstance(m, ChatMessageSystem)]


def _with_stripped(history: list[ChatMessage], message: ChatMessageAssistant) -> list[ChatMessage]:
    """The history the agent sees: ends with the (now stripped) assistant message."""
    if history and history[-1] is message:
        return list(history)
    if history and history[-1].id == message.id:
        return [*history[:-1], message]
    return [*history, message]
