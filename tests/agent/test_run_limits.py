"""run(), limits, @agent names and as_solver."""

from __future__ import annotations

import asyncio
import copy

import pytest

from orchestrator.agent import (
    AgentState,
    agent,
    agent_meta,
    agent_name,
    agent_with,
    as_solver,
    react,
    rebuild_agent,
    run,
)
from orchestrator.model import ChatMessageUser, ModelOutput, usage_scope
from orchestrator.util import (
    LimitExceededError,
    apply_limits,
    message_limit,
    time_limit,
    token_limit,
    turn_limit,
    working_limit,
)
from tests.agent import agent_tools as at
from tests.agent.helpers import call, calls, roles, scripted, submit, text


def add_forever(tokens: int | None = None):
    """A model that adds forever (never submits)."""
    from orchestrator.model import get_model

    return get_model("scripted", policy=lambda m, t: calls(call("add", x=1, y=1), tokens=tokens))


async def test_run_without_limits_returns_the_state(bound) -> None:
    state = await run(react(model=scripted(submit("a"))), "q")
    assert isinstance(state, AgentState)


async def test_message_limit_breach_is_returned_not_raised(bound) -> None:
    state, error = await run(react(tools=[at.add()], model=add_forever()), "q", limits=[message_limit(6)])
    assert isinstance(error, LimitExceededError)
    assert (error.type, error.limit) == ("message", 6)
    # As in Inspect: the model is not called with 6 messages (its answer could only exceed the
    # limit), so the state stops at 6 (system, user, then assistant/tool pairs).
    assert len(state.messages) == 6
    assert roles(state.messages)[:2] == ["system", "user"]


async def test_limits_given_but_not_breached(bound) -> None:
    state, error = await run(react(model=scripted(submit("a"))), "q", limits=[message_limit(50)])
    assert error is None and state.output.completion == "a"


async def test_token_limit_counts_model_usage(bound) -> None:
    with usage_scope("sample"):
        state, error = await run(react(tools=[at.add()], model=add_forever(tokens=40)), "q",
                                 limits=[token_limit(100)])
    assert error is not None and error.type == "token"
    assert error.value == 120  # the third turn crossed the line
    # As in Inspect, the call that crossed it raises: its answer never joins the conversation.
    assert sum(1 for m in state.messages if m.role == "assistant") == 2


async def test_turn_limit(bound) -> None:
    model = add_forever()
    _state, error = await run(react(tools=[at.add()], model=model), "q", limits=[turn_limit(4)])
    assert error is not None and (error.type, error.limit) == ("turn", 4)
    # As in Inspect, a turn is counted when a generation completes: the fifth one raises.
    assert model.api.calls == 5


async def test_time_limit_interrupts_a_running_tool(bound) -> None:
    model = scripted(calls(call("nap", seconds=30)))
    state, error = await asyncio.wait_for(
        run(react(tools=[at.nap()], model=model), "q", limits=[time_limit(0.3)]), timeout=20)
    assert error is not None and error.type == "time"
    # The nap was cancelled, and recorded as such.
    assert roles(state.messages)[-1] == "assistant"


async def test_working_limit_is_checked_at_checkpoints(bound) -> None:
    model = scripted(calls(call("nap", seconds=0.3)), calls(call("nap", seconds=0.3)), submit("x"))
    _state, error = await run(react(tools=[at.nap()], model=model), "q", limits=[working_limit(0.2)])
    assert error is not None and error.type == "working"


async def test_enclosing_limit_breach_propagates(bound) -> None:
    # Token limits are checked outermost first (message limits only innermost, as in Inspect).
    outer = token_limit(100)
    with usage_scope("sample"), pytest.raises(LimitExceededError) as info, apply_limits([outer]):
        await run(react(tools=[at.add()], model=add_forever(tokens=40)), "q", limits=[token_limit(1000)])
    assert info.value.source is outer


async def test_apply_limits_catch_errors_scope() -> None:
    limit = message_limit(1)
    from orchestrator.util import check_message_limit

    with apply_limits([limit], catch_errors=True) as scope:
        check_message_limit(2)
        raise AssertionError("unreachable")
    assert scope.limit_error is not None and scope.limit_error.source is limit


def test_a_limit_is_copied_fresh_and_cannot_be_entered_twice() -> None:
    limit = turn_limit(3)
    with limit:
        with pytest.raises(RuntimeError, match="may only be used once"):
            limit.__enter__()
        clone = copy.deepcopy(limit)
        assert clone.limit == 3 and clone.turns == 0
        with clone:
            pass


def test_negative_limits_are_rejected() -> None:
    with pytest.raises(ValueError, match="must be a non-negative integer"):
        message_limit(-1)


# -- @agent names ----------------------------------------------------------------------------------

@agent
def greeter(greeting: str = "hello"):
    """Says hello."""

    async def execute(state: AgentState) -> AgentState:
        state.messages.append(ChatMessageUser(content=greeting))
        return state

    return execute


@agent(name="renamed_registry")
def other():
    async def execute(state: AgentState) -> AgentState:
        return state

    return execute


async def test_registry_name_and_display_name_are_separate() -> None:
    g = greeter(greeting="hi")
    meta = agent_meta(g)
    assert (meta.registry_name, meta.name, meta.description) == ("greeter", "greeter", "Says hello.")
    shown = agent_with(g, name="Front Desk", description="Greets visitors.")
    assert agent_name(shown) == "Front Desk"
    assert agent_meta(shown).registry_name == "greeter"
    # Rebuilt by registry name with the same arguments, it behaves the same.
    rebuilt = rebuild_agent(meta.registry_name, **meta.params)
    state = await run(rebuilt, "x")
    assert state.messages[-1].text == "hi"
    assert agent_meta(other()).registry_name == "renamed_registry"
    assert agent_name(react(name="researcher", model="scripted")) == "researcher"
    assert agent_meta(react(name="researcher", model="scripted")).registry_name == "react"


def test_state_output_is_synthesised_from_the_last_assistant_message() -> None:
    from orchestrator.model import ChatMessageAssistant

    state = AgentState(messages=[ChatMessageUser(content="q"), ChatMessageAssistant(content="a1"),
                                 ChatMessageUser(content="more")])
    assert state.output.completion == "a1" and state.output.stop_reason == "stop"
    assert AgentState(messages=[]).output.empty
    state.output = ModelOutput.from_content("m", "explicit")
    assert state.output.completion == "explicit"


# -- as_solver -------------------------------------------------------------------------------------

class FakeTaskState:
    """Only what as_solver relies on (the TaskStateLike protocol)."""

    def __init__(self, prompt: str) -> None:
        self.messages = [ChatMessageUser(content=prompt)]
        self.output = ModelOutput()


async def test_as_solver_copies_messages_and_output_back(bound) -> None:
    solver = as_solver(react(tools=[at.add()], model=scripted(calls(call("add", x=2, y=3)), submit("5"))))
    state = FakeTaskState("2+3?")
    result = await solver(state, None)
    assert result is state
    assert state.output.completion == "5"
    assert roles(state.messages) == ["system", "user", "assistant", "tool", "assistant"]


async def test_as_solver_copies_back_even_on_error(bound) -> None:
    from orchestrator._wire import ToolExecutionFatal

    solver = as_solver(react(tools=[at.add(), at.explode()],
                             model=scripted(calls(call("add", x=1, y=1)), calls(call("explode")))))
    state = FakeTaskState("go")
    with pytest.raises(ToolExecutionFatal):
        await solver(state)
    assert roles(state.messages) == ["system", "user", "assistant", "tool", "assistant"]
    assert state.output.message.tool_calls[0].function == "explode"


async def test_as_solver_limit_ends_the_sample_with_the_state_copied_back(bound) -> None:
    # As in Inspect: the breach propagates (the sample runner records the limit, then scores).
    solver = as_solver(react(tools=[at.add()], model=add_forever()), limits=[message_limit(5)])
    for _ in range(2):  # one solver, several samples: each gets fresh limits
        state = FakeTaskState("go")
        with pytest.raises(LimitExceededError):
            await solver(state)
        assert len(state.messages) == 5  # the 6th message (a tool result) is refused, as in Inspect


def test_as_solver_requires_agent_parameters() -> None:
    async def needs_topic(state: AgentState, topic: str) -> AgentState:
        return state

    with pytest.raises(ValueError, match="topic"):
        as_solver(needs_topic)
    as_solver(needs_topic, topic="x")


async def test_as_solver_on_a_plain_text_agent(bound) -> None:
    solver = as_solver(react(model=scripted(text("plain")), submit=False))
    state = FakeTaskState("hi")
    await solver(state)
    assert state.output.completion == "plain"


async def test_waiting_time_is_not_working_time(bound) -> None:
    from orchestrator.util import record_waiting_time

    async def waits(state: AgentState) -> AgentState:
        await asyncio.sleep(0.3)
        record_waiting_time(0.3)  # e.g. queued for a sandbox: not work
        from orchestrator.util import check_limits

        check_limits()
        return state

    _state, error = await run(waits, "q", limits=[working_limit(0.2)])
    assert error is None


async def test_time_limit_outer_cancellation_is_not_a_breach() -> None:
    # Cancelling the task for another reason stays a cancellation, even with a time limit active.
    async def body() -> None:
        with time_limit(30):
            await asyncio.sleep(30)

    task = asyncio.ensure_future(body())
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, timeout=10)


async def test_time_limit_breach_outside_an_agent() -> None:
    with pytest.raises(LimitExceededError) as info, time_limit(0.1):
        await asyncio.sleep(10)
    assert info.value.type == "time" and info.value.limit == 0.1
