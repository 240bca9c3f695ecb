"""Nested agent runs (handoff, as_tool): what they inherit and what they must not.

Inherited, because they live in context variables the child's task copies: the active model and
generation settings, the transcript (tracer) and span, the dispatcher and sandbox route, and the
approval/review *policies*. Not inherited: the usage counters (the child opens its own
scope; its usage rolls up into the parent as a child figure) and the approval *store* (an "always
approve" given in the parent must not approve anything in the child). Depth is bounded so agents
calling agents cannot recurse without end.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar

from orchestrator.approval._policy import fresh_approval_store
from orchestrator.model._usage import usage_scope
from orchestrator.tool._errors import ToolError

DEFAULT_MAX_DEPTH = 3

_depth: ContextVar[int] = ContextVar("toolfleet_agent_depth", default=0)
_max_depth: ContextVar[int] = ContextVar("toolfleet_agent_max_depth", default=DEFAULT_MAX_DEPTH)


class AgentDepthError(ToolError):
    """A nested run was asked for beyond the depth bound (the model sees the message)."""


def agent_depth() -> int:
    """How many nested agent runs enclose the current code (0 in a sample's own agent)."""
    return _depth.get()


@contextlib.contextmanager
def max_agent_depth(depth: int) -> Iterator[None]:
    """Change the nesting bound for the block (default 3)."""
    if depth < 0:
        raise ValueError("max_agent_depth must be >= 0")
    token = _max_depth.set(depth)
    try:
        yield
    finally:
        _max_depth.reset(token)


def depth_error(agent_name: str) -> AgentDepthError | None:
    """The error to report if running ``agent_name`` nested here would exceed the bound."""
    limit = _max_depth.get()
    if _depth.get() + 1 > limit:
        return AgentDepthError(
            f"Cannot run agent '{agent_name}': agents may be nested at most {limit} levels deep, "
            f"and this call is already at depth {_depth.get()}. Continue without delegating."
        )
    return None


@contextlib.contextmanager
def nested_run(agent_name: str) -> Iterator[None]:
    """Isolate a nested run: one level deeper, fresh usage counters, fresh approval store.

    Raises ``AgentDepthError`` (a ``ToolError``) when the bound would be exceeded.
    """
    error = depth_error(agent_name)
    if error is not None:
        raise error
    token = _depth.set(_depth.get() + 1)
    try:
        with usage_scope(name=agent_name), fresh_approval_store():
            yield
    finally:
        _depth.reset(token)
