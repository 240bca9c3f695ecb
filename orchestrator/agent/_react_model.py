"""How react gets a turn out of its "model", and how it recovers from a context-window overflow.

``model`` may be a model name, a ``Model``, or an Agent taking ``(state, tools)`` — all become one
``async generate(state, tools) -> state`` that appends the assistant message and sets the output.
"""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Literal

from orchestrator.log import transcript
from orchestrator.model._model import Model, get_model

from ._agent import AgentState
from ._filter import apply_filter, trim_messages
from ._types import OVERFLOW_STOP_MESSAGE, Compaction, MessageFilter

Generate = Callable[[AgentState, list[Any]], Awaitable[AgentState]]


def resolve_generate(model: str | Model | Any | None, compaction: Compaction | None,
                     retry_refusals: int | None = None) -> tuple[Generate, Model | None, bool]:
    """Wrap ``model`` as a generate step; also return the named ``Model`` (if any) and whether it is an agent."""
    if model is not None and not isinstance(model, (str, Model)):
        if not callable(model):
            raise TypeError(f"react model must be a model name, a Model or an Agent, not {type(model).__name__}.")
        params = inspect.signature(model).parameters
        if "tools" not in params and not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
            raise ValueError("An agent used as react's model must accept a 'tools' parameter: (state, tools).")
        if compaction is not None:
            # A custom generate agent owns its context handling; ours would fight it.
            warnings.warn("react: compaction is ignored when the model is an Agent.", stacklevel=3)

        async def agent_generate(state: AgentState, tools: list[Any]) -> AgentState:
            result = await model(state, tools=tools)
            return result if result is not None else state

        return agent_generate, None, True

    # None: whatever model is active when the agent runs (a nested agent inherits its caller's).
    resolved = get_model(model) if model is not None else None

    async def model_generate(state: AgentState, tools: list[Any]) -> AgentState:
        active = resolved or get_model()
        if compaction is not None:
            compacted = await compaction.compact(state.messages, force=False)
            if compacted is not None:
                state.messages = compacted
        refused = 0
        while True:
            output = await active.generate(state.messages, tools)
            if output.empty or output.stop_reason != "content_filter":
                break
            if retry_refusals is None or refused >= retry_refusals:
                break
            refused += 1
        if compaction is not None:
            compaction.record_output(output)
        state.output = output
        if not output.empty:
            state.messages.append(output.message)
        return state

    return model_generate, resolved, False


def overflow_filter(truncation: Literal["auto", "disabled"] | MessageFilter) -> MessageFilter | None:
    if truncation == "disabled":
        return None
    if truncation == "auto":
        return trim_messages
    if callable(truncation):
        return truncation
    raise ValueError(f"truncation must be 'auto', 'disabled' or a message filter, not {truncation!r}.")


async def handle_overflow(state: AgentState, compaction: Compaction | None, truncate: MessageFilter | None,
                          is_agent_model: bool) -> bool:
    """After a ``model_length`` stop: True to go on with a smaller history, False to stop.

    Order matters: forced compaction keeps intent, so it goes first; trimming only deletes, so
    it is the last resort; with neither, the loop stops.
    """
    if state.messages and state.messages[-1] is state.output.message:
        state.messages.pop()  # the failed answer is useless and would overflow again
    elif state.messages and getattr(state.messages[-1], "role", None) == "assistant":
        state.messages.pop()
    before = len(state.messages)
    if compaction is not None and not is_agent_model:
        compacted = await compaction.compact(state.messages, force=True)
        if compacted is not None and len(compacted) < before:
            transcript().info({"overflow": "compacted", "messages": [before, len(compacted)]}, source="react")
            state.messages = compacted
            return True
    if truncate is not None:
        trimmed = await apply_filter(truncate, state.messages)
        if len(trimmed) < before:
            transcript().info({"overflow": "truncated", "messages": [before, len(trimmed)]}, source="react")
            state.messages = trimmed
            return True
    transcript().info(f"Agent terminated: {OVERFLOW_STOP_MESSAGE}", source="react")
    return False


def visible_tools(tools: Sequence[Any]) -> list[Any]:
    """Tools the model may see this turn (``is_enabled`` is re-checked every turn)."""
    from orchestrator.tool._tool_def import tool_def

    return [t for t in tools if tool_def(t).is_enabled_now()]
