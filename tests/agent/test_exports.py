"""The agent layer's and the limits' public names stay exported (Inspect users port by changing imports)."""

import orchestrator.agent as agent
import orchestrator.util as util

AGENT_NAMES = {
    "Agent", "AgentState", "AgentAttempts", "AgentContinue", "AgentPrompt", "AgentSubmit", "agent", "agent_with",
    "run", "react", "handoff", "as_tool", "as_solver", "remove_tools", "content_only", "last_message",
    "attempt_scorer", "max_agent_depth",
}
LIMIT_NAMES = {
    "LimitExceededError", "apply_limits", "message_limit", "token_limit", "time_limit", "working_limit",
    "turn_limit", "check_limits", "check_message_limit", "record_turn", "record_waiting_time",
    # names an Inspect port imports
    "Limit", "LimitScope", "SampleLimits", "sample_limits", "suspend_turn_limit", "suspend_token_limit",
    "TokenLimit", "subtask",
}


def test_agent_names_are_exported() -> None:
    assert set(agent.__all__) >= AGENT_NAMES
    for name in agent.__all__:
        assert getattr(agent, name) is not None


def test_limit_names_are_exported() -> None:
    assert set(util.__all__) >= LIMIT_NAMES
    for name in util.__all__:
        assert getattr(util, name) is not None
