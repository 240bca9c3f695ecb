"""Agents (mirrors ``inspect_ai.agent``): ``Agent``/``AgentState``, ``@agent``, ``run``, ``react``,
``handoff``, ``as_tool``, ``as_solver`` and message filters.

Nested runs (handoff, as_tool) inherit the model, generation settings, transcript and context, but
get fresh usage counters (rolled up into the parent as child figures), a fresh approval store and a
bounded depth (``max_agent_depth``, default 3).
"""

from ._agent import (
    Agent,
    AgentMeta,
    AgentState,
    agent,
    agent_description,
    agent_meta,
    agent_name,
    agent_with,
    is_agent,
    rebuild_agent,
    registered_agent_names,
)
from ._as_solver import TaskStateLike, as_solver
from ._as_tool import as_tool
from ._filter import content_only, last_message, prefix_assistant, remove_tools, trim_messages
from ._handoff import handoff
from ._nested import DEFAULT_MAX_DEPTH, AgentDepthError, agent_depth, max_agent_depth
from ._react import attempt_scorer, react, score_to_float
from ._run import run
from ._types import (
    DEFAULT_CONTINUE_PROMPT,
    DEFAULT_INCORRECT_MESSAGE,
    AgentAttempts,
    AgentContinue,
    AgentPrompt,
    AgentSubmit,
    Compaction,
    MessageFilter,
)

__all__ = [
    "DEFAULT_CONTINUE_PROMPT",
    "DEFAULT_INCORRECT_MESSAGE",
    "DEFAULT_MAX_DEPTH",
    "Agent",
    "AgentAttempts",
    "AgentContinue",
    "AgentDepthError",
    "AgentMeta",
    "AgentPrompt",
    "AgentState",
    "AgentSubmit",
    "Compaction",
    "MessageFilter",
    "TaskStateLike",
    "agent",
    "agent_depth",
    "agent_description",
    "agent_meta",
    "agent_name",
    "agent_with",
    "as_solver",
    "as_tool",
    "attempt_scorer",
    "content_only",
    "handoff",
    "is_agent",
    "last_message",
    "max_agent_depth",
    "prefix_assistant",
    "react",
    "rebuild_agent",
    "registered_agent_names",
    "remove_tools",
    "run",
    "score_to_float",
    "trim_messages",
]
