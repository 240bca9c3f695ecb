"""react driven by the scripted model, through the parametrised dispatcher."""

from __future__ import annotations

import pytest

from orchestrator.agent import (
    AgentAttempts,
    AgentState,
    AgentSubmit,
    Compaction,
    react,
    run,
)
from orchestrator.approval import Approval, ApprovalPolicy
from orchestrator.log import InfoEvent, ToolEvent
from orchestrator.model import ChatMessageAssistant, ChatMessageTool, ChatMessageUser
from orchestrator.review import Review, ReviewPolicy
from orchestrator.tool import ToolDef
from orchestrator.util import TerminateSampleError
from tests.agent import agent_tools as at
from tests.agent.helpers import call, calls, roles, scripted, submit, text, texts

CONTINUE = (
    "\nPlease proceed to the next step using your best judgement. If you believe you have completed the task, "
    "please call the `submit()` tool with your final answer.\n"
)
INCORRECT = "Your submission was incorrect. Please proceed and attempt to find the correct answer."


async def test_submit_on_turn_one(bound) -> None:
    model = scripted(submit("42", text="The answer is"))
    state = await run(react(tools=[at.add()], model=model), "What is 6 x 7?")
    assert state.output.completion == "The answer is\n\n42"
    # The submit call and its result are gone; the answer survives in the assistant text.
    assert roles(state.messages) == ["system", "user", "assistant"]
    assert state.messages[-1].tool_calls is None
    assert state.messages[-1].text == "The answer is\n\n42"
    assert model.api.calls == 1
    assert [e.function for e in bound.find(ToolEvent)] == ["submit"]


async def test_submit_is_never_truncated(bound) -> None:
    answer = "x" * 40_000  # well over the 16 KiB default
    state = await run(react(model=scripted(submit(answer))), "go")
    assert state.output.completion == answer
    [event] = bound.find(ToolEvent)
    assert event.truncated is None


async def test_several_turns_of_tool_calls(bound) -> None:
    model = scripted(
        calls(call("add", x=1, y=2), call("add", x=3, y=4)),
        calls(call("echo", text="hi")),
        submit("10"),
    )
    state = await run(react(tools=[at.add(), at.echo()], model=model), "sum things")
    tool_results = [m.text for m in state.messages if isinstance(m, ChatMessageTool)]
    assert tool_results == ["3", "7", "hi"]
    assert roles(state.messages) == ["system", "user", "assistant", "tool", "tool", "assistant", "tool", "assistant"]
    assert state.output.completion == "10"
    assert model.api.calls == 3


async def test_attempts_wrong_then_right(bound) -> None:
    async def scorer(state: AgentState) -> str:
        return "C" if state.output.completion == "right" else "I"

    model = scripted(submit("wrong"), submit("right"), submit("never reached"))
    agent = react(model=model, attempts=AgentAttempts(attempts=3, scorer=scorer))
    state = await run(agent, "guess")
    assert state.output.completion == "right"
    assert texts(state.messages, "user") == ["guess", INCORRECT]
    assert model.api.calls == 2


async def test_attempts_stop_at_the_limit_without_scoring_the_last(bound) -> None:
    scored: list[str] = []

    async def scorer(state: AgentState) -> bool:
        scored.append(state.output.completion)
        return False

    model = scripted(submit("a"), submit("b"), submit("c"))
    state = await run(react(model=model, attempts=AgentAttempts(attempts=2, scorer=scorer)), "guess")
    assert state.output.completion == "b"
    assert scored == ["a"]  # the last allowed submission is final, not scored here
    assert model.api.calls == 2


async def test_no_tool_calls_gets_the_exact_continue_prompt(bound) -> None:
    model = scripted(text("let me think"), submit("done"))
    state = await run(react(model=model), "task")
    assert texts(state.messages, "user") == ["task", CONTINUE]
    assert state.output.completion == "done"


async def test_continue_prompt_uses_the_submit_tool_name(bound) -> None:
    model = scripted(text("hmm"), calls(call("answer", answer="x")))
    state = await run(react(model=model, submit=AgentSubmit(name="answer")), "task")
    assert texts(state.messages, "user")[1] == CONTINUE.replace("submit()", "answer()")
    assert state.output.completion == "x"


async def test_on_continue_string_replaces_the_message(bound) -> None:
    model = scripted(text("hmm"), submit("ok"))
    state = await run(react(model=model, on_continue="Keep going and call {submit}()."), "task")
    assert texts(state.messages, "user") == ["task", "Keep going and call submit()."]


async def test_on_continue_is_called_every_turn_and_true_continues(bound) -> None:
    seen: list[int] = []

    async def on_continue(state: AgentState) -> bool:
        seen.append(len(state.messages))
        return True

    model = scripted(calls(call("add", x=1, y=1)), text("thinking"), submit("2"))
    state = await run(react(tools=[at.add()], model=model, on_continue=on_continue), "task")
    # Called after the tool turn and after the text turn (not after the final submit).
    assert len(seen) == 2
    # True with no tool calls still sends the default continue prompt.
    assert texts(state.messages, "user") == ["task", CONTINUE]
    assert state.output.completion == "2"


async def test_on_continue_false_stops(bound) -> None:
    async def on_continue(state: AgentState) -> bool:
        return False

    model = scripted(calls(call("add", x=1, y=1)), submit("never"))
    state = await run(react(tools=[at.add()], model=model, on_continue=on_continue), "task")
    assert model.api.calls == 1
    assert roles(state.messages) == ["system", "user", "assistant", "tool"]


async def test_on_continue_returning_a_string_is_sent(bound) -> None:
    async def on_continue(state: AgentState) -> str:
        return "custom nudge"

    model = scripted(calls(call("add", x=1, y=1)), submit("2"))
    state = await run(react(tools=[at.add()], model=model, on_continue=on_continue), "task")
    # Sent even after a turn with tool calls: the hook decides.
    assert texts(state.messages, "user") == ["task", "custom nudge"]


async def test_on_continue_returning_a_state_replaces_it(bound) -> None:
    async def on_continue(state: AgentState) -> AgentState:
        return AgentState(messages=[ChatMessageUser(content="replaced history")])

    seen: list[list[str]] = []

    def policy(messages, tools):
        seen.append([m.text for m in messages])
        return submit("x") if len(seen) > 1 else text("first")

    from orchestrator.model import get_model

    state = await run(react(model=get_model("scripted", policy=policy), on_continue=on_continue, prompt=None), "task")
    assert seen[1] == ["replaced history"]
    assert texts(state.messages, "user") == ["replaced history"]
    assert state.output.completion == "x"


async def test_submit_false_ends_on_a_turn_without_tool_calls(bound) -> None:
    model = scripted(calls(call("add", x=2, y=2)), text("It is 4."), text("unreached"))
    state = await run(react(tools=[at.add()], model=model, submit=False), "2+2?")
    assert model.api.calls == 2
    assert state.output.completion == "It is 4."
    assert roles(state.messages)[-1] == "assistant"


async def test_submit_false_has_no_submit_tool(bound) -> None:
    seen: list[list[str]] = []

    def policy(messages, tools):
        seen.append([t.name for t in tools])
        return text("done")

    from orchestrator.model import get_model

    await run(react(tools=[at.add()], model=get_model("scripted", policy=policy), submit=False), "x")
    assert seen == [["add"]]


async def test_model_length_recovered_by_truncation(bound) -> None:
    seen: list[int] = []
    outputs = iter([
        calls(call("add", x=1, y=1)), calls(call("add", x=2, y=2)), calls(call("add", x=3, y=3)),
        text("", stop_reason="model_length"),
        submit("done"),
    ])

    def policy(messages, tools):
        seen.append(len(messages))
        return next(outputs)

    from orchestrator.model import get_model

    state = await run(react(tools=[at.add()], model=get_model("scripted", policy=policy), truncation="auto"), "task")
    assert state.output.completion == "done"
    # The overflowing call saw the full history; the retry saw a trimmed one.
    assert seen[4] < seen[3]
    # The failed (empty, model_length) assistant message is not in the history.
    assert all(m.text != "" or m.tool_calls for m in state.messages if isinstance(m, ChatMessageAssistant))
    assert any(isinstance(e, InfoEvent) and isinstance(e.data, dict) and e.data.get("overflow") == "truncated"
               for e in bound.events)


async def test_model_length_ends_the_loop_without_a_strategy(bound) -> None:
    model = scripted(calls(call("add", x=1, y=1)), text("", stop_reason="model_length"), submit("never"))
    state = await run(react(tools=[at.add()], model=model), "task")
    assert model.api.calls == 2
    assert state.output.stop_reason == "model_length"
    assert roles(state.messages) == ["system", "user", "assistant", "tool"]
    assert "Agent terminated: model context window exceeded" in [e.data for e in bound.find(InfoEvent)]


async def test_model_length_tries_forced_compaction_first(bound) -> None:
    class KeepLast(Compaction):
        def __init__(self) -> None:
            self.calls: list[bool] = []

        async def compact(self, messages, force=False):
            self.calls.append(force)
            return [messages[0], messages[1]] if force else None

    compaction = KeepLast()
    model = scripted(calls(call("add", x=1, y=1)), text("", stop_reason="model_length"), submit("ok"))
    state = await run(react(tools=[at.add()], model=model, compaction=compaction, truncation="auto"), "task")
    assert state.output.completion == "ok"
    assert True in compaction.calls  # forced compaction ran...
    assert roles(state.messages) == ["system", "user", "assistant"]  # ...and trimming was not needed


async def test_three_content_filters_end_the_loop(bound) -> None:
    refusal = text("I can't help with that.", stop_reason="content_filter")
    model = scripted(refusal, refusal, refusal, submit("never"))
    state = await run(react(model=model), "task")
    assert model.api.calls == 3
    assert state.output.stop_reason == "content_filter"


async def test_content_filters_below_three_are_retried(bound) -> None:
    refusal = text("no", stop_reason="content_filter")
    model = scripted(refusal, refusal, submit("fine"))
    state = await run(react(model=model), "task")
    assert state.output.completion == "fine"
    # As in Inspect, refusals stay in the history (the model is nudged to continue after each).
    assert texts(state.messages, "assistant") == ["no", "no", "fine"]


async def test_model_may_be_an_agent(bound) -> None:
    seen: list[list[str]] = []

    async def generator(state: AgentState, tools) -> AgentState:
        seen.append(sorted(ToolDef(t).name for t in tools))
        output = submit("from agent")
        state.output = output
        state.messages.append(output.message)
        return state

    state = await run(react(tools=[at.add()], model=generator), "task")
    assert seen == [["add", "submit"]]
    assert state.output.completion == "from agent"


async def test_model_agent_must_take_tools() -> None:
    async def no_tools(state: AgentState) -> AgentState:
        return state

    with pytest.raises(ValueError, match="tools"):
        react(model=no_tools)


async def test_fatal_tool_error_propagates_with_state_kept(bound) -> None:
    from orchestrator._wire import ToolExecutionFatal

    model = scripted(calls(call("explode")))
    with pytest.raises(ToolExecutionFatal, match="kaboom"):
        await run(react(tools=[at.explode()], model=model), "task")


async def test_tool_errors_reach_the_model(bound) -> None:
    model = scripted(calls(call("refuse")), submit("gave up"))
    state = await run(react(tools=[at.refuse()], model=model), "task")
    [result] = [m for m in state.messages if isinstance(m, ChatMessageTool)]
    assert (result.error.type, result.error.message) == ("unknown", "not today")


async def test_approval_argument_replaces_the_active_policy(bound) -> None:
    async def reject(message, call, view, history):
        return Approval(decision="reject", explanation="no adding")

    model = scripted(calls(call("add", x=1, y=1)), submit("x"))
    agent = react(tools=[at.add()], model=model, approval=[
        ApprovalPolicy(reject, "add"), ApprovalPolicy(_approve_all, "*")])
    state = await run(agent, "task")
    [result] = [m for m in state.messages if isinstance(m, ChatMessageTool)]
    assert (result.error.type, result.error.message) == ("approval", "no adding")
    assert state.output.completion == "x"  # submit was approved by the catch-all


async def _approve_all(message, call, view, history):
    return Approval(decision="approve")


async def test_review_argument_can_terminate(bound) -> None:
    async def stop(message, call, result, output, view, history):
        return Review(decision="terminate", explanation="saw enough")

    model = scripted(calls(call("add", x=1, y=1)), submit("never"))
    agent = react(tools=[at.add()], model=model, review=[ReviewPolicy(stop, "add")])
    with pytest.raises(TerminateSampleError, match="saw enough"):
        await run(agent, "task")


async def test_run_copies_its_input(bound) -> None:
    messages = [ChatMessageUser(content="task")]
    state = await run(react(model=scripted(submit("a"))), messages)
    assert len(messages) == 1 and len(state.messages) == 3


async def test_continue_message_may_contain_braces(bound) -> None:
    model = scripted(text("hmm"), submit("ok"))
    state = await run(react(model=model, on_continue='Reply as {"answer": ...} via {submit}().'), "task")
    assert texts(state.messages, "user")[1] == 'Reply as {"answer": ...} via submit().'


async def test_incorrect_message_may_be_computed_from_the_score(bound) -> None:
    async def scorer(state: AgentState) -> float:
        return 0.5 if state.output.completion == "close" else 1.0

    async def hint(state: AgentState, score) -> str:
        return f"Score {score[0].value}; try again."  # a list of Scores, as Inspect passes

    model = scripted(submit("close"), submit("exact"))
    state = await run(react(model=model, attempts=AgentAttempts(attempts=3, scorer=scorer, incorrect_message=hint)),
                      "q")
    assert texts(state.messages, "user") == ["q", "Score 0.5; try again."]
    assert state.output.completion == "exact"
