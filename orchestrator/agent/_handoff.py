"""``handoff``: a ``transfer_to_<name>`` tool that hands the conversation to another agent.

The tool is a sentinel: ``execute_tools`` finds the ``HANDOFF_ATTR`` handler on it and awaits
``handler(call, assistant_message, history)`` instead of calling the tool. The handler:

1. gives the agent a copy of that assistant message with only this call (the parent's history
   keeps every call; ``execute_tools`` runs the siblings, and splices the agent's messages after
   this call's result);
2. answers the call with ``Successfully transferred to {agent_name}.`` — also the boundary that
   tells the agent's new messages from the history it was given (a user message with that text
   when ``input_filter`` removed the tool result);
3. applies ``input_filter`` and drops system messages (the agent brings its own instructions);
4. runs the agent nested (fresh usage and approval store, bounded depth) under a deep copy of
   ``limits`` (a handoff taken twice must not share limit state);
5. keeps only the new messages, prefixes assistant text with ``[{agent_name}] ``, applies
   ``output_filter``, and closes with a user message saying the agent is done (or over a limit).
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Sequence
from typing import Any

from orchestrator.execute._prepare import HANDOFF_ATTR
from orchestrator.log import ToolEvent, span, transcript
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

from ._agent import Agent, agent_name
from ._agent_params import agent_parameters, require_description
from ._as_tool import _with_signature
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
    """A tool (``transfer_to_<agent name>``, serial, run in the orchestrator) that hands off to ``agent``.

    The agent's parameters after the state (not curried in ``agent_kwargs``) are the tool's
    parameters and need docstring descriptions; unknown ``agent_kwargs`` raise ``ValueError``.
    """
    name = agent_name(agent)
    limits = list(limits)
    extra, descriptions = agent_parameters(agent, agent_kwargs)

    async def execute(**kwargs: Any) -> str:
        raise RuntimeError("A handoff tool is executed by execute_tools, never called directly.")

    async def handler(call: ToolCall, message: ChatMessageAssistant,
                      history: list[ChatMessage]) -> tuple[ChatMessageTool, list[ChatMessage], ModelOutput | None]:
        transferred = TRANSFERRED.format(agent_name=name)
        # 1. the agent sees only this call on the assistant message (the parent's history keeps all)
        stripped = message.model_copy(update={"tool_calls": [c for c in (message.tool_calls or []) if c.id == call.id]})
        boundary = ChatMessageTool(content=transferred, tool_call_id=call.id, function=call.function)
        conversation = [*_with_stripped(history, stripped), boundary]
        # 2. input filter; a filter that removed the tool result gets a user message as the boundary
        if input_filter is not None:
            conversation = await apply_filter(input_filter, conversation)
        if not _is_boundary_tool(conversation[-1] if conversation else None, call.id):
            conversation.append(ChatMessageUser(content=transferred))
        conversation = [m for m in conversation if not isinstance(m, ChatMessageSystem)]
        # 3. run nested, under fresh copies of the limits
        try:
            with nested_run(name), span(name=name, type="handoff"):
                state, limit_error = await run(agent, conversation, copy.deepcopy(limits),
                                               **{**call.arguments, **agent_kwargs})
        except AgentDepthError as exc:
            error = ToolCallError(type="unknown", message=exc.message)
            transcript().record(ToolEvent(id=call.id, function=call.function, arguments=call.arguments,
                                          result="", error=error, agent=name))
            return boundary.model_copy(update={"content": "", "error": error}), [], None
        # 4. only the new messages, named, filtered, closed
        new_messages = prefix_assistant(_new_messages(state.messages, conversation, call.id, transferred), name)
        if output_filter is not None:
            new_messages = await apply_filter(output_filter, new_messages)
        if limit_error is not None:
            new_messages.append(ChatMessageUser(content=LIMIT_EXCEEDED.format(
                agent_name=name, type=limit_error.type, limit=limit_error.limit_str)))
        elif not new_messages or isinstance(new_messages[-1], ChatMessageAssistant):
            new_messages.append(ChatMessageUser(content=COMPLETED.format(agent_name=name)))
        transcript().record(ToolEvent(id=call.id, function=call.function, arguments=call.arguments,
                                      result=boundary.text, agent=name))
        return boundary, new_messages, state.output

    tool = ToolDef(
        _with_signature(execute, inspect.Signature(extra), "handoff"),
        name=tool_name or f"transfer_to_{name}",
        description=require_description(agent, description),
        parameters=descriptions or None,
        parallel=False,
        runs_on="orchestrator",
        max_output=0,
    ).as_tool()
    setattr(tool, HANDOFF_ATTR, handler)
    return tool


def _is_boundary_tool(message: ChatMessage | None, call_id: str) -> bool:
    return isinstance(message, ChatMessageTool) and message.tool_call_id == call_id


def _new_messages(messages: list[ChatMessage], given: list[ChatMessage], call_id: str,
                  transferred: str) -> list[ChatMessage]:
    """What the agent added: after the last boundary (the transfer result, or the user message
    standing in for it), minus messages it was given and system messages."""
    last = max((i for i, m in enumerate(messages)
                if _is_boundary_tool(m, call_id) or (isinstance(m, ChatMessageUser) and m.text == transferred)),
               default=-1)
    given_ids = {m.id for m in given}
    return [m for m in messages[last + 1:] if m.id not in given_ids and not isinstance(m, ChatMessageSystem)]


def _with_stripped(history: list[ChatMessage], message: ChatMessageAssistant) -> list[ChatMessage]:
    """The history the agent sees: ends with the (now stripped) assistant message."""
    if history and history[-1] is message:
        return list(history)
    if history and history[-1].id == message.id:
        return [*history[:-1], message]
    return [*history, message]
