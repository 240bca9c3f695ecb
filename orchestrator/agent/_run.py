"""``run()``: run an agent on a copy of its input, under limits, in an agent span."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any, overload

from orchestrator.log import span
from orchestrator.model._chat_message import ChatMessage, ChatMessageUser
from orchestrator.util._limit_errors import LimitExceededError
from orchestrator.util._limits import Limit, apply_limits

from ._agent import Agent, AgentState, agent_name


def input_state(input: str | Sequence[ChatMessage] | AgentState) -> AgentState:
    """A fresh state from a string, a message list or a state (always a copy)."""
    if isinstance(input, str):
        return AgentState(messages=[ChatMessageUser(content=input, source="input")])
    # As in Inspect, the messages given are the input (``source="input"``; trimming keeps them).
    messages = input.messages if isinstance(input, AgentState) else list(input)
    state = AgentState(messages=[m.model_copy(deep=True, update={"source": "input"}) for m in messages])
    if isinstance(input, AgentState) and input.has_output:
        state.output = copy.deepcopy(input.output)
    return state


@overload
async def run(agent: Agent, input: str | Sequence[ChatMessage] | AgentState, limits: None = None,
              *, name: str | None = None, **agent_kwargs: Any) -> AgentState: ...
@overload
async def run(agent: Agent, input: str | Sequence[ChatMessage] | AgentState, limits: Sequence[Limit],
              *, name: str | None = None, **agent_kwargs: Any) -> tuple[AgentState, LimitExceededError | None]: ...


async def run(
    agent: Agent,
    input: str | Sequence[ChatMessage] | AgentState,
    limits: Sequence[Limit] | None = None,
    *,
    name: str | None = None,
    **agent_kwargs: Any,
) -> AgentState | tuple[AgentState, LimitExceededError | None]:
    """Run ``agent`` on a copy of ``input``; the caller's messages are never edited.

    Without ``limits`` the final state is returned. With ``limits`` a ``(state, error)`` pair is
    returned: a breach of one of these limits stops the agent and comes back as ``error`` (with
    the state as it was at the breach); a breach of an enclosing limit still propagates.
    """
    state = input_state(input)
    if limits is None:
        return await run_in_span(agent, state, name, **agent_kwargs)
    with apply_limits(list(limits), catch_errors=True) as scope:
        state = await run_in_span(agent, state, name, **agent_kwargs)
    return state, scope.limit_error


async def run_in_span(agent: Agent, state: AgentState, name: str | None = None, **agent_kwargs: Any) -> AgentState:
    """Call the agent inside an ``agent`` span, keeping the state it extended even if it raises."""
    with span(name=name or agent_name(agent), type="agent"):
        result = await agent(state, **agent_kwargs)
    return result if result is not None else state
