"""Agents behave as in Inspect AI 0.3.285 (react, handoff, as_tool, limits, ``Model.generate_loop``).

Each test states Inspect's behaviour, checked against a scripted model (no network).
"""

from __future__ import annotations

import copy

import pytest

from orchestrator.agent import (
    AgentAttempts,
    AgentPrompt,
    AgentState,
    AgentSubmit,
    agent,
    as_solver,
    as_tool,
    content_only,
    handoff,
    react,
    run,
)
from orchestrator.dataset import Sample
from orchestrator.eval import Task, eval_async
from orchestrator.model import ChatMessageTool, ChatMessageUser, ModelUsage, get_model
from orchestrator.scorer import Score
from orchestrator.tool import tool
from orchestrator.util import LimitExceededError, message_limit, time_limit, token_limit, turn_limit
from orchestrator.util._limits import sample_limits, suspend_turn_limit
from tests.agent import agent_tools as at
from tests.agent.helpers import call, calls, roles, scripted, submit, text, texts


@agent
def chatter():
    """Loops on get_model().generate() without any limit checks of its own."""

    async def execute(state: AgentState) -> AgentState:
        model = get_model()
        while True:
            output = await model.generate(state.messages)
            state.messages.append(output.message)
            state.messages.append(ChatMessageUser(content="more"))

    return execute


def chatty_model():
    return get_model("scripted", policy=lambda m, t: text("hi"))


# -- 1. limits hold wherever the model is called ----------------------------------------------------


async def test_custom_agent_loop_stops_at_the_message_limit(bound) -> None:
    with __import__("orchestrator.model", fromlist=["model_context"]).model_context(chatty_model()):
        state, error = await run(chatter(), "go", limits=[message_limit(10)])
    assert error is not None and error.message == "Message limit exceeded. count: 11; limit: 10"
    assert len(state.messages) == 10


async def test_custom_agent_as_solver_stops_at_the_message_limit(bound) -> None:
    from orchestrator.model import model_context

    solver = as_solver(chatter(), limits=[message_limit(10)])

    class St:
        def __init__(self) -> None:
            self.messages = [ChatMessageUser(content="go")]
            self.output = None

    state = St()
    with model_context(chatty_model()), pytest.raises(LimitExceededError):
        await solver(state)  # the breach ends the sample (Inspect records it as the sample's limit)
    assert len(state.messages) == 10


async def test_as_solver_limit_is_the_samples_limit(tmp_path) -> None:
    task = Task(dataset=[Sample(input="go")], solver=as_solver(chatter(), limits=[message_limit(10)]))
    [log] = await eval_async(task, chatty_model(), log_dir=tmp_path)
    [sample] = log.samples
    assert sample.error is None and sample.limit is not None
    assert (sample.limit.type, sample.limit.message) == ("message", "Message limit exceeded. count: 11; limit: 10")
    assert len(sample.messages) == 10


@pytest.mark.parametrize(("limit", "kept", "runs"), [(4, 4, 1), (5, 5, 2), (6, 6, 2), (7, 7, 3)])
async def test_react_message_limit_matches_inspect(bound, limit: int, kept: int, runs: int) -> None:
    # Inspect: the model is not called at the limit; the last assistant's call runs, but a result
    # that would exceed the limit is not appended.
    model = get_model("scripted", policy=lambda m, t: calls(call("add", x=1, y=1)))
    state, error = await run(react(tools=[at.add()], model=model), "go", limits=[message_limit(limit)])
    assert error is not None and error.type == "message"
    assert len(state.messages) == kept
    assert model.api.calls == runs


# -- 2. agents as solvers ---------------------------------------------------------------------------


async def test_task_solver_may_be_an_agent_or_a_list_with_one(tmp_path) -> None:
    for solver in (react(), [react()]):
        task = Task(dataset=[Sample(input="q", target="42")], solver=solver)
        [log] = await eval_async(task, get_model("scripted", outputs=[submit("42")]), log_dir=tmp_path)
        [sample] = log.samples
        assert sample.error is None
        assert sample.output.completion == "42"


# -- 3. AgentState.output on a fresh state ----------------------------------------------------------


def test_output_set_on_a_fresh_state_sticks() -> None:
    state = AgentState(messages=[])
    state.output.completion = "22"
    assert state.output.completion == "22"


# -- 5. handoff ------------------------------------------------------------------------------------


@agent
def helper():
    """Adds numbers."""
    return react(name="helper", tools=[at.add()], submit=False,
                 model=scripted(calls(call("add", x=5, y=5), text="tool call for tool add"), text("ten")))


async def test_handoff_keeps_sibling_calls_and_runs_later_ones(bound) -> None:
    parent = scripted(calls(call("add", x=1, y=1), call("transfer_to_helper"), call("add", x=2, y=2)), submit("done"))
    state = await run(react(tools=[at.add(), handoff(helper())], model=parent), "go")
    [_assistant] = [m for m in state.messages if m.role == "assistant" and m.tool_calls and len(m.tool_calls) == 3]
    tools = [m for m in state.messages if isinstance(m, ChatMessageTool)]
    assert [t.function for t in tools] == ["add", "transfer_to_helper", "add"]
    assert [t.text for t in tools] == ["2", "Successfully transferred to helper.", "4"]
    users = texts(state.messages, "user")
    # content_only turns the helper's tool call and result into text
    assert "[helper] tool call for tool add\nadd(x=5, y=5)" in texts(state.messages, "assistant")
    assert "10" in users and "The helper agent has completed its work." in users
    # the helper's output (no tool calls) is the turn's output, so the continue prompt follows
    assert state.messages[state.messages.index(tools[2]) + 1].text.startswith("\nPlease proceed")


async def test_content_only_converts_tool_calls_to_text() -> None:
    from orchestrator.model import ChatMessageAssistant, ChatMessageSystem

    t = call("add", x=5, y=5)
    out = await content_only([ChatMessageSystem(content="s"), ChatMessageAssistant(content="hi", tool_calls=[t]),
                              ChatMessageTool(content="10", tool_call_id=t.id, function="add")])
    assert roles(out) == ["assistant", "user"]
    assert out[0].text == "hi\nadd(x=5, y=5)" and out[0].tool_calls is None and out[1].text == "10"


async def test_handoff_input_filter_boundary_is_a_user_message(bound) -> None:
    seen: list[list[str]] = []

    @agent
    def peek():
        """Records its input."""

        async def execute(state: AgentState) -> AgentState:
            seen.append([f"{m.role}:{m.text}" for m in state.messages])
            return state

        return execute

    from orchestrator.agent import remove_tools

    parent = scripted(calls(call("transfer_to_peek")), submit("done"))
    await run(react(tools=[handoff(peek(), input_filter=remove_tools)], model=parent), "go")
    assert seen[0][-1] == "user:Successfully transferred to peek."


def test_handoff_and_as_tool_validate_kwargs_and_docs_at_build_time() -> None:
    @agent
    def sized():
        async def execute(state: AgentState, size: int = 1) -> AgentState:
            """Sized.

            Args:
              state: The state.
              size: How big.
            """
            return state

        return execute

    @agent
    def undocumented():
        async def execute(state: AgentState, size: int = 1) -> AgentState:
            return state

        return execute

    with pytest.raises(ValueError, match="does not have a 'colour' parameter"):
        handoff(sized(), colour="red")
    with pytest.raises(ValueError, match="does not have a 'colour' parameter"):
        as_tool(sized(), colour="red")
    with pytest.raises(ValueError, match="Description not provided for parameter"):
        handoff(undocumented(), description="d")
    @agent
    def nameless():
        async def execute(state: AgentState) -> AgentState:
            return state

        return execute

    with pytest.raises(ValueError, match="Description not provided for agent function"):
        as_tool(nameless())
    as_tool(react(description="d"), max_output=0)  # an as_tool option, as in Inspect
    from orchestrator.tool import ToolDef

    assert "size" in ToolDef(handoff(sized())).parameters.properties


# -- 6. react details -----------------------------------------------------------------------------


async def test_submit_none_is_the_default_submit_and_custom_tool(bound) -> None:
    state = await run(react(submit=None, model=scripted(submit("x"))), "q")
    assert state.output.completion == "x"

    @tool(runs_on="orchestrator")  # defined in a test: no worker can import it
    def answer():
        async def execute(answer: str) -> str:
            """Answer.

            Args:
              answer: The answer.
            """
            return answer.upper()

        return execute

    state = await run(react(submit=AgentSubmit(tool=answer()), model=scripted(calls(call("answer", answer="x")))), "q")
    assert state.output.completion == "X"


async def test_retry_refusals_generates_again(bound) -> None:
    model = scripted(text("no", stop_reason="content_filter"), submit("yes"))
    state = await run(react(model=model, retry_refusals=1), "q")
    assert state.output.completion == "yes" and "no" not in texts(state.messages, "assistant")


def test_submit_placeholder_in_prompts() -> None:
    from orchestrator.agent._react import _system_message

    with_submit = _system_message(AgentPrompt(instructions="i", assistant_prompt="call {submit}"), "finish", [])
    assert with_submit.text == "i\n\ncall finish"
    # Inspect leaves {submit} in the instructions, and names "submit" without a submit tool.
    without = _system_message(AgentPrompt(instructions="i {submit}", assistant_prompt="a {submit}"), None, [])
    assert without.text == "i {submit}\n\na submit"


async def test_on_continue_with_no_submit_and_none_stops(bound) -> None:
    seen = []

    async def keep_going(state: AgentState):
        seen.append(len(state.messages))
        return True if len(seen) < 2 else None

    model = scripted(text("a"), text("b"), text("c"))
    state = await run(react(submit=False, on_continue=keep_going, model=model), "q")
    assert len(seen) == 2 and model.api.calls == 2
    assert texts(state.messages, "user")[-1] == "\nPlease proceed to the next step using your best judgement.\n"
    with pytest.raises(ValueError, match="on_continue with no submit tool is not permitted"):
        react(submit=False, on_continue="go on")


async def test_incorrect_message_gets_a_list_of_scores(bound) -> None:
    got = []

    async def hint(state: AgentState, scores: list[Score]) -> str:
        got.append(scores)
        return f"no: {scores[0].value}"

    model = scripted(submit("1"), submit("42"))
    attempts = AgentAttempts(attempts=2, scorer=lambda s: Score(value="I"), incorrect_message=hint)
    state = await run(react(model=model, attempts=attempts), "q")
    assert isinstance(got[0], list) and got[0][0].value == "I"
    assert "no: I" in texts(state.messages, "user")


async def test_token_limit_leaves_no_unanswered_assistant_message(bound) -> None:
    from orchestrator.model import usage_scope

    out = calls(call("add", x=1, y=1), tokens=60)
    with usage_scope("s"):
        state, error = await run(react(tools=[at.add()],
                                       model=get_model("scripted", policy=lambda m, t: out.model_copy(deep=True))),
                                 "q", limits=[token_limit(100)])
    assert error is not None and error.message == "Token limit exceeded. value: 120; limit: 100"
    assert roles(state.messages)[-1] == "tool"


# -- 7. Limits API ---------------------------------------------------------------------------------


def test_limit_api() -> None:
    limit = turn_limit(3)
    assert limit.remaining == 3
    with limit:
        pass
    with pytest.raises(RuntimeError, match="may only be used once"), limit:
        pass
    assert copy.deepcopy(limit).limit == 3
    assert LimitExceededError("token", value=250000, limit=200000).limit_str == "200,000"
    assert LimitExceededError("token", value=1, limit=200000).message == "Exceeded token limit: 200,000"
    assert token_limit("500k").limit == 500_000
    out = token_limit("output:1m")
    assert (out.limit, out.metering) == (1_000_000, "output")
    assert token_limit(10, type="(input * 0.1) + output").metering == "(input * 0.1) + output"
    with pytest.raises(ValueError, match="token limit: expected"):
        token_limit("12x")


async def test_time_limit_usage_is_frozen_after_its_block() -> None:
    import asyncio
    import time

    limit = time_limit(10)
    with limit:
        await asyncio.sleep(0.01)
    frozen = limit.usage
    # The behaviour is that time passes after the block: wait until the clock has moved on by more than
    # the block lasted (a state of the clock, not a guess), then the usage must not have moved with it.
    ended = time.monotonic()
    while time.monotonic() - ended <= frozen:
        await asyncio.sleep(0.005)
    assert limit.usage == frozen


async def test_suspend_turn_limit_and_sample_limits(bound) -> None:
    model = scripted(text("a"), text("b"))
    limit = turn_limit(0)
    with limit:
        with suspend_turn_limit():
            await model.generate("x")
        assert limit.usage == 0
        assert sample_limits().turn is limit
        with pytest.raises(LimitExceededError):
            await model.generate("x")


async def test_output_token_limit_meters_output_tokens(bound) -> None:
    out = text("a")
    out.usage = ModelUsage(input_tokens=90, output_tokens=10, total_tokens=100)
    model = get_model("scripted", policy=lambda m, t: out.model_copy(deep=True))
    with token_limit("output:15") as limit:
        await model.generate("x")
        assert limit.usage == 10
        with pytest.raises(LimitExceededError, match="Output token limit exceeded"):
            await model.generate("x")


# -- Model.generate_loop ---------------------------------------------------------------------------


async def test_generate_loop_runs_tools_until_the_model_stops(bound) -> None:
    model = scripted(calls(call("add", x=1, y=2)), text("3"))
    messages, output = await model.generate_loop("q", tools=[at.add()])
    assert roles(messages) == ["assistant", "tool", "assistant"]
    assert output.completion == "3"


async def test_subtask_runs_in_its_own_span_and_logs_its_result(bound) -> None:
    from orchestrator.log import InfoEvent
    from orchestrator.util import subtask

    @subtask
    async def double(x: int) -> int:
        return x * 2

    assert await double(4) == 8
    [event] = [e for e in bound.find(InfoEvent) if e.source == "subtask"]
    assert event.data["input"] == {"x": 4} and event.data["result"] == 8


async def test_truncation_auto_trims_what_inspect_trims(bound) -> None:
    too_long = text("too long", stop_reason="model_length")
    model = scripted(*[calls(call("add", x=i, y=0)) for i in range(5)], too_long, submit("ok"))
    state = await run(react(tools=[at.add()], model=model, truncation="auto"), "go")
    # system + input kept; of the 10 conversation messages the newest 70% (7), minus the tool
    # result whose call was cut: the calls for x=2, 3 and 4 with their results.
    assert roles(state.messages) == ["system", "user"] + ["assistant", "tool"] * 3 + ["assistant"]
    assert [m.text for m in state.messages if m.role == "tool"] == ["2", "3", "4"]
    assert state.output.completion == "ok"


async def test_trim_messages_keeps_input_and_drops_a_trailing_assistant() -> None:
    from orchestrator.agent import trim_messages
    from orchestrator.model import ChatMessageAssistant, ChatMessageSystem

    history = [ChatMessageSystem(content="s"), ChatMessageUser(content="q", source="input")]
    history += [ChatMessageAssistant(content=f"a{i}") for i in range(4)]
    trimmed = await trim_messages(history)
    assert [m.text for m in trimmed] == ["s", "q", "a1", "a2"]  # newest 70% of 4 (a1..a3), trailing a3 dropped
    # without source="input", the input is everything up to the first user message
    history = [ChatMessageSystem(content="s"), ChatMessageUser(content="q"), ChatMessageUser(content="q2")]
    history += [ChatMessageAssistant(content=f"a{i}") for i in range(4)]
    assert [m.text for m in await trim_messages(history)] == ["s", "q", "a0", "a1", "a2"]


@agent
def searcher():
    async def execute(state: AgentState, max_searches: int = 5) -> AgentState:
        """Reports its search budget.

        Args:
          state: The conversation.
          max_searches: Maximum number of web searches to conduct.
        """
        state.messages.append(ChatMessageUser(content=f"The maximum searches is {max_searches}"))
        return state

    return execute


@pytest.mark.parametrize(("arguments", "curried", "expected"), [({}, {}, 5), ({"max_searches": 10}, {}, 10),
                                                               ({}, {"max_searches": 15}, 15)])
async def test_handoff_passes_tool_arguments_and_curried_ones(bound, arguments, curried, expected) -> None:
    parent = scripted(calls(call("transfer_to_searcher", **arguments)), text("reported"))
    transfer = handoff(searcher(), **curried)
    from orchestrator.tool import ToolDef

    assert ("max_searches" in ToolDef(transfer).parameters.properties) == (not curried)
    state = await run(react(tools=[transfer], model=parent, submit=False), "go")
    assert f"The maximum searches is {expected}" in texts(state.messages, "user")


async def test_handoff_to_an_agent_that_adds_nothing_says_it_completed(bound) -> None:
    @agent(description="Does nothing.")
    def idle():
        async def execute(state: AgentState) -> AgentState:
            return state

        return execute

    state = await run(react(tools=[handoff(idle())], model=scripted(calls(call("transfer_to_idle")), text("ok")),
                            submit=False), "go")
    assert roles(state.messages)[-3:] == ["tool", "user", "assistant"]
    assert state.messages[-2].text == "The idle agent has completed its work."


async def test_attempts_in_a_task_hand_the_scorers_score_to_incorrect_message(tmp_path) -> None:
    from orchestrator.scorer import accuracy, scorer

    @scorer(metrics=[accuracy()])
    def compare():
        async def score(state, target) -> Score:
            answer, wanted = float(state.output.completion), float(target.text)
            if answer == wanted:
                return Score(value=1.0)
            return Score(value=0.0, explanation="Answer is too high" if answer > wanted else "Answer is too low")

        return score

    async def incorrect(state: AgentState, scores: list[Score]) -> str:
        return f"Incorrect: {scores[0].explanation}"

    task = Task(dataset=[Sample(input="What is 1 + 1?", target="2")], scorer=compare(),
                solver=react(attempts=AgentAttempts(attempts=3, incorrect_message=incorrect)))
    [log] = await eval_async(task, scripted(submit("5"), submit("1"), submit("2")), log_dir=tmp_path)
    [sample] = log.samples
    assert texts(sample.messages, "user") == ["What is 1 + 1?", "Incorrect: Answer is too high",
                                              "Incorrect: Answer is too low"]


async def test_content_only_turns_server_tool_use_into_text_and_drops_reasoning() -> None:
    from orchestrator.model import ChatMessageAssistant
    from orchestrator.tool._content import ContentReasoning, ContentText, ContentToolUse

    use = ContentToolUse(tool_type="web_search", id="s1", name="web_search", arguments='{"query": "tides"}',
                         result="Found 3 results", error=None)
    content = [ContentReasoning(reasoning="hmm"), ContentText(text="a"), use]
    [out] = await content_only([ChatMessageAssistant(content=content)])
    assert [c.text for c in out.content] == ["a", 'web_search {"query": "tides"}\n\nFound 3 results']
