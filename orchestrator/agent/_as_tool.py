"""``as_tool``: an agent the model calls like a tool — a black box that answers one question.

The sub-agent starts from a fresh state holding only ``input`` (it never sees the caller's
conversation) and only its final text — or the extractor's result — comes back. It runs nested
(fresh usage and approval store, bounded depth) under copies of ``limits`` plus ``max_turns``; a
breach of those becomes a ``limit`` tool error the model can react to.
"""

from __future__ import annotations

import copy
import inspect
import itertools
import types
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from orchestrator.tool._tool_def import ToolDef
from orchestrator.util._limits import Limit, turn_limit

from ._agent import Agent, AgentState, agent_name
from ._agent_params import agent_parameters, require_description
from ._nested import nested_run
from ._run import run

OutputExtractor = Callable[[AgentState], str | Awaitable[str]]

INPUT_DESCRIPTION = "Input message."  # what Inspect tells the model


def as_tool(
    agent: Agent,
    description: str | None = None,
    limits: Sequence[Limit] = (),
    max_turns: int | None = None,
    output_extractor: OutputExtractor | None = None,
    name: str | None = None,
    max_output: int | None = 0,
    **agent_kwargs: Any,
) -> Any:
    """A tool (``input: str`` plus the agent's un-curried parameters) that runs ``agent`` nested.

    ``max_output``: bytes of the answer kept (0, the default: all of it; None: the active
    ``max_tool_output``). Unknown ``agent_kwargs`` raise ``ValueError`` here, as in Inspect.
    """
    display = agent_name(agent)
    tool_name = name or display
    limits = list(limits)

    async def execute(input: str, **kwargs: Any) -> str:
        own = copy.deepcopy(limits)
        if max_turns is not None:
            own.append(turn_limit(max_turns))
        with nested_run(display):
            state, limit_error = await run(agent, input, own, **agent_kwargs, **kwargs)
        if limit_error is not None:
            raise limit_error  # → a ``limit`` error for the model (executor classification)
        if output_extractor is not None:
            result = output_extractor(state)
            return await result if inspect.isawaitable(result) else result
        return state.output.completion

    signature, descriptions = _signature(agent, agent_kwargs)
    return ToolDef(
        _with_signature(execute, signature, tool_name),
        name=tool_name,
        description=require_description(agent, description),
        parameters=descriptions,
        runs_on="orchestrator",
        max_output=max_output,
    ).as_tool()


_unique = itertools.count()


def _with_signature(execute: Callable[..., Any], signature: inspect.Signature, name: str) -> Callable[..., Any]:
    """A copy of ``execute`` that shows the model-facing signature (``input`` + un-curried parameters).

    The copy gets its own code object: schema extraction is cached per code object, and every
    ``as_tool`` closure would otherwise share the first one's schema.
    """
    code = execute.__code__.replace(co_name=f"as_tool_{next(_unique)}")
    fn = types.FunctionType(code, execute.__globals__, name, execute.__defaults__, execute.__closure__)
    fn.__signature__ = signature  # type: ignore[attr-defined]  # inspect reads it
    fn.__annotations__ = {p.name: p.annotation for p in signature.parameters.values()}
    fn.__doc__ = None
    return fn


def _signature(agent: Agent, curried: dict[str, Any]) -> tuple[inspect.Signature, dict[str, str]]:
    """``input: str`` plus every agent parameter after the state that was not curried, with descriptions."""
    params = [inspect.Parameter("input", inspect.Parameter.KEYWORD_ONLY, annotation=str)]
    extra, descriptions = agent_parameters(agent, curried, skip=("input",))
    return inspect.Signature(params + extra), {"input": INPUT_DESCRIPTION, **descriptions}
