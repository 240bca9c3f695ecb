"""The model-facing parameters of an agent used as a tool (``as_tool``) or a handoff.

As in Inspect: every agent parameter after the state that was not curried is a tool parameter and
must have a docstring description; curried keyword arguments must name real parameters
(``ValueError`` at build time, not at the first call).
"""

from __future__ import annotations

import inspect
from typing import Any, get_type_hints

import docstring_parser

from ._agent import Agent, agent_description, agent_name


def agent_parameters(agent: Agent, curried: dict[str, Any],
                     skip: tuple[str, ...] = ()) -> tuple[list[inspect.Parameter], dict[str, str]]:
    """(keyword-only parameters, descriptions) for the agent's un-curried parameters after the state."""
    try:
        signature = inspect.signature(agent)
    except (TypeError, ValueError):
        signature = None
    target = inspect.unwrap(agent)
    names = list(signature.parameters)[1:] if signature is not None else []
    accepts_any = signature is not None and any(
        p.kind is inspect.Parameter.VAR_KEYWORD for p in signature.parameters.values())
    for key in curried:
        if key not in names and not accepts_any:
            raise ValueError(f"Agent {agent_name(agent)} does not have a '{key}' parameter.")
    if signature is None:
        return [], {}
    try:
        hints = get_type_hints(target)
    except Exception:  # noqa: BLE001 - unresolvable forward references: fall back to raw annotations
        hints = dict(getattr(target, "__annotations__", {}))
    docs = {p.arg_name: p.description for p in docstring_parser.parse(inspect.getdoc(target) or "").params}
    params: list[inspect.Parameter] = []
    descriptions: dict[str, str] = {}
    for pname, param in list(signature.parameters.items())[1:]:
        if pname in curried or pname in skip or param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        if not docs.get(pname):
            raise ValueError(f"Description not provided for parameter '{pname}' of function '{agent_name(agent)}'.")
        params.append(inspect.Parameter(pname, inspect.Parameter.KEYWORD_ONLY, default=param.default,
                                        annotation=hints.get(pname, Any)))
        descriptions[pname] = docs[pname] or ""
    return params, descriptions


def require_description(agent: Agent, description: str | None) -> str:
    """The tool description: the argument, else the agent's (``@agent(description=...)``,
    ``react(description=...)``, a docstring); Inspect refuses to build the tool without one."""
    resolved = description or agent_description(agent)
    if not resolved:
        raise ValueError(
            f"Description not provided for agent function '{agent_name(agent)}'. Provide a description either "
            "via @agent(description='<description>'), the description argument to as_tool() or handoff(), or "
            "via a doc comment on the agent's execute function.")
    return resolved
