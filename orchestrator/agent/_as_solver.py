"""``as_solver``: run an agent as a task's solver, copying messages and output back even on error."""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from orchestrator.model._chat_message import ChatMessage
from orchestrator.model._model_output import ModelOutput
from orchestrator.util._limits import Limit, apply_limits

from ._agent import Agent, AgentState, agent_name
from ._run import run_in_span


@runtime_checkable
class TaskStateLike(Protocol):
    """What ``as_solver`` needs of the eval's task state (kept minimal so agents do not import evals)."""

    messages: list[ChatMessage]
    output: ModelOutput


def as_solver(agent: Agent, limits: Sequence[Limit] = (), **agent_kwargs: Any) -> Any:
    """A solver ``async (state, generate=None) -> state`` that runs ``agent`` on the task's messages.

    ``limits`` apply to the agent: as in Inspect, a breach ends the sample (the runner records the
    limit and goes on to scoring). The agent's messages and output are copied back to the task
    state whatever happens, so the log and the scorers see how far it got.
    """
    _check_required(agent, agent_kwargs)
    name = agent_name(agent)

    async def solve(state: TaskStateLike, generate: Any = None) -> TaskStateLike:
        agent_state = AgentState(messages=state.messages)
        try:
            # Fresh limit objects per sample: one solver instance serves every sample.
            own = [_fresh(limit) for limit in limits]
            with apply_limits(own):
                agent_state = await run_in_span(agent, agent_state, name, **agent_kwargs)
        finally:
            state.messages = agent_state.messages
            state.output = agent_state.output
        return state

    solve.__name__ = f"as_solver({name})"
    return solve


def _fresh(limit: Limit) -> Limit:
    import copy

    return copy.deepcopy(limit)


def _check_required(agent: Agent, agent_kwargs: dict[str, Any]) -> None:
    """Every required agent parameter besides the state must be given up front."""
    try:
        params = list(inspect.signature(agent).parameters.values())
    except (TypeError, ValueError):
        return
    missing = [
        p.name for p in params[1:]
        if p.default is inspect.Parameter.empty
        and p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        and p.name not in agent_kwargs
    ]
    if missing:
        raise ValueError(
            f"To use the {agent_name(agent)} agent as a solver you must pass a value for the agent's required "
            f"'{missing[0]}' parameter to the as_solver() function."
        )
