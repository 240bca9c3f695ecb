"""Review rules about agents: handoff review, react(review=), carrying the policy into a sub-agent.

Runs real ``react`` agents driven by scripted models over every dispatcher.
"""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.agent import handoff, react, run
from orchestrator.log import ReviewEvent, ToolEvent, Transcript
from orchestrator.model import ModelOutput, get_model
from orchestrator.review import ReviewPolicy, active_review_policy, review_policy_scope
from orchestrator.tool import ToolCall
from orchestrator.util import TerminateSampleError
from tests.review import review_tools as rt
from tests.support import sample_tools as st

pytestmark = pytest.mark.timeout(60)




def tool_turn(function: str, call_id: str, **arguments: Any) -> ModelOutput:
    return ModelOutput.for_tool_calls("scripted", [ToolCall(id=call_id, function=function, arguments=arguments)])


def scripted(*outputs: ModelOutput | str) -> Any:
    return get_model("scripted", outputs=list(outputs))


def helper_agent(**kwargs: Any) -> Any:
    """A sub-agent that calls add once, then finishes."""
    return react(name="helper", description="Adds numbers.", tools=[st.add(), rt.curl()], submit=False,
                 model=scripted(tool_turn("add", "h1", x=1, y=2), "helper finished"), **kwargs)


def parent_agent(helper: Any, **kwargs: Any) -> Any:
    return react(name="parent", tools=[handoff(helper), rt.curl(), st.add()], submit=False,
                 model=scripted(tool_turn("transfer_to_helper", "p1"), "parent done"), **kwargs)


def decisions(transcript: Transcript) -> list[tuple[str, str, str]]:
    return [(e.call.id, e.call.function, e.decision) for e in transcript.find(ReviewEvent)]


async def test_s13a_a_handoff_is_reviewed_after_the_sub_agent_returns_by_its_tool_name(bound) -> None:
    """"A handoff() ... is reviewed like any other tool after the sub-agent returns: the reviewer sees the
    handoff call (matched by its tool name, e.g. transfer_to_helper) and the transfer result the parent
    model receives."""
    seen: list = []
    review = [ReviewPolicy(rt.scripted_review(seen=seen), tools="transfer_to_helper")]
    state = await run(parent_agent(helper_agent()), "please add")  # without review: the baseline
    # As in Inspect, a no-submit parent stops after the handoff turn: the helper's answer is the output.
    assert state.output.completion == "helper finished"
    with review_policy_scope(review):
        await run(parent_agent(helper_agent()), "please add")
    [handoff_review] = seen
    assert handoff_review["call"].function == "transfer_to_helper"
    assert handoff_review["result"].text == "Successfully transferred to helper."
    assert handoff_review["output"] == "Successfully transferred to helper."
    events = bound.events
    review_index = next(i for i, e in enumerate(events) if isinstance(e, ReviewEvent) and e.call.id == "p1")
    # The sub-agent had already run (its add call) and the handoff's ToolEvent precedes its review.
    sub_call = max(i for i, e in enumerate(events) if isinstance(e, ToolEvent) and e.id == "h1")
    handoff_event = max(i for i, e in enumerate(events) if isinstance(e, ToolEvent) and e.id == "p1")
    assert sub_call < handoff_event < review_index


async def test_s13b_the_sub_agents_own_calls_are_reviewed_as_they_run(bound) -> None:
    """"... the sub-agent's own tool calls are reviewed as they run."""
    with review_policy_scope([ReviewPolicy(rt.scripted_review(), tools="*")]):
        await run(parent_agent(helper_agent()), "please add")
    assert decisions(bound) == [("h1", "add", "continue"), ("p1", "transfer_to_helper", "continue")]


async def test_s13c_terminating_a_handoff_ends_the_sample(bound) -> None:
    """A ``terminate`` on the handoff (after the sub-agent returned) ends the sample as an operator limit."""
    with (review_policy_scope([ReviewPolicy(rt.scripted_review("terminate", explanation="no delegation"),
                                            tools="transfer_to_*")]),
          pytest.raises(TerminateSampleError, match="no delegation")):
        await run(parent_agent(helper_agent()), "please add")
    assert decisions(bound) == [("p1", "transfer_to_helper", "terminate")]
    assert any(isinstance(e, ToolEvent) and e.id == "h1" for e in bound.events)  # the sub-agent did run


async def test_s35_s36_react_review_replaces_the_policy_while_it_runs_and_restores_it(bound) -> None:
    """"execute_tools() and the react() agent also accept a review argument ..." / "These policies replace
    eval- and task-level reviewers during execution and restore the previous policy when it ends. The
    replacement is total: tools the agent's own policy does not cover are not reviewed, even if the
    eval-level policy covers them."""
    outer = [ReviewPolicy(rt.scripted_review("terminate"), tools="*")]
    agent = react(name="solo", tools=[st.add(), rt.curl()], submit=False,
                  model=scripted(tool_turn("add", "a1", x=1, y=1), tool_turn("curl", "a2", url="http://x"), "done"),
                  review=[ReviewPolicy(rt.scripted_review("continue"), tools="add")])
    with review_policy_scope(outer):
        state = await run(agent, "go")
        assert active_review_policy() is outer
    assert state.output.completion == "done"
    assert decisions(bound) == [("a1", "add", "continue")]  # curl: covered by the outer policy only → unreviewed


async def test_s37_a_react_agent_that_hands_off_carries_its_policy_into_the_sub_agent(bound) -> None:
    """"A react agent that hands work off to another agent carries its own policy into the sub-agent's
    tool calls."""
    seen: list = []
    parent = parent_agent(helper_agent(), review=[ReviewPolicy(rt.scripted_review(seen=seen), tools="add")])
    # An eval-level policy that would terminate on add is replaced by the parent's, in the sub-agent too.
    with review_policy_scope([ReviewPolicy(rt.scripted_review("terminate"), tools="*")]):
        await run(parent, "please add")
    assert [s["call"].id for s in seen] == ["h1"]
    assert decisions(bound) == [("h1", "add", "continue")]


async def test_s37b_a_sub_agents_own_review_replaces_the_carried_policy(bound) -> None:
    """A sub-agent with its own ``review=`` uses it (replacement is total at every agent level)."""
    helper = helper_agent(review=[ReviewPolicy(rt.scripted_review("escalate"), tools="add")])
    parent = parent_agent(helper, review=[ReviewPolicy(rt.scripted_review("terminate"), tools="add")])
    await run(parent, "please add")
    assert decisions(bound) == [("h1", "add", "escalate"), ("h1", "add", "continue")]
