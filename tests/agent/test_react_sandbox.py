"""The react tests again, with the sandbox tools, in the sample's sandbox (local driver).

The sandbox is opened through the dispatcher under test, as the eval runner does: in embedded
mode it lives in this process; through Celery it lives on the worker that runs the calls.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from orchestrator._wire import SandboxSpec
from orchestrator.agent import AgentAttempts, AgentState, as_tool, handoff, react, run
from orchestrator.dispatch import SampleRoute
from orchestrator.dispatch._context import reset_route, set_route
from orchestrator.log import ToolEvent
from orchestrator.model import ChatMessageTool
from orchestrator.tool import bash, bash_session, python, text_editor
from orchestrator.util import time_limit
from tests.agent.helpers import call, calls, scripted, submit, text, texts

# slow: every test opens a local sandbox, whose exec agent is a child process
pytestmark = pytest.mark.slow

CONTINUE = (
    "\nPlease proceed to the next step using your best judgement. If you believe you have completed the task, "
    "please call the `submit()` tool with your final answer.\n"
)


@pytest.fixture
async def sandboxed(bound, dispatcher) -> AsyncIterator[SampleRoute]:
    route = await dispatcher.open_sandbox(SandboxSpec(sample_id="agent-test", config={"type": "local"}))
    token = set_route(route)
    try:
        yield route
    finally:
        reset_route(token)
        await dispatcher.close_sandbox(route)


def results(state: AgentState) -> list[ChatMessageTool]:
    return [m for m in state.messages if isinstance(m, ChatMessageTool)]


async def test_turns_of_sandbox_tool_calls_then_submit(sandboxed, bound) -> None:
    model = scripted(
        calls(call("bash", cmd="echo hello > note.txt && cat note.txt"), call("python", code="print(6 * 7)")),
        calls(call("text_editor", command="view", path="note.txt")),
        calls(call("bash", cmd="cat note.txt | tr a-z A-Z")),
        submit("HELLO"),
    )
    state = await run(react(tools=[bash(), python(), text_editor()], model=model), "shout the note")
    out = [m.text for m in results(state)]
    assert out[0].strip() == "hello" and out[1].strip() == "42"
    # text_editor takes absolute paths only (as Inspect's): the model sees why and the loop goes on.
    editor = results(state)[2]
    assert editor.error is not None and "note.txt is not an absolute path" in editor.error.message
    assert out[3].strip() == "HELLO"
    assert state.output.completion == "HELLO"
    assert {e.function for e in bound.find(ToolEvent)} == {"bash", "python", "text_editor", "submit"}


async def test_no_tool_call_turn_and_attempts_with_the_sandbox(sandboxed) -> None:
    async def scorer(state: AgentState) -> bool:
        return state.output.completion == "3"

    model = scripted(
        text("Let me look."),
        calls(call("bash", cmd="ls | wc -l")),
        submit("2"),
        calls(call("bash", cmd="touch a b c && ls | wc -l")),
        submit("3"),
    )
    agent = react(tools=[bash()], model=model, attempts=AgentAttempts(attempts=3, scorer=scorer))
    state = await run(agent, "how many files?")
    assert texts(state.messages, "user")[:2] == ["how many files?", CONTINUE]
    assert "Your submission was incorrect. Please proceed and attempt to find the correct answer." in texts(
        state.messages, "user")
    assert state.output.completion == "3"


async def test_bash_session_keeps_state_across_turns(sandboxed) -> None:
    model = scripted(
        calls(call("bash_session", action="type_submit", input="export ANSWER=7; cd /tmp")),
        calls(call("bash_session", action="type_submit", input="echo $ANSWER $(pwd)")),
        submit("7"),
    )
    state = await run(react(tools=[bash_session()], model=model), "remember")
    assert "7 /tmp" in results(state)[1].text


async def test_sandbox_errors_reach_the_model(sandboxed) -> None:
    model = scripted(
        calls(call("text_editor", command="view", path="/definitely/missing.txt")),
        calls(call("bash", cmd="exit 3")),
        submit("done"),
    )
    state = await run(react(tools=[bash(), text_editor()], model=model), "try")
    first, second = results(state)[:2]
    assert first.error is not None
    assert second.error is None  # a non-zero exit is not an error


async def test_time_limit_stops_a_long_command(sandboxed) -> None:
    model = scripted(calls(call("bash", cmd="sleep 60")))
    _state, error = await run(react(tools=[bash()], model=model), "wait", limits=[time_limit(1.0)])
    assert error is not None and error.type == "time"


async def test_nested_agents_use_the_samples_sandbox(sandboxed, bound) -> None:
    writer = react(name="writer", tools=[bash()], model=scripted(
        calls(call("bash", cmd="echo from-writer > shared.txt")), submit("written")))
    reader = react(name="reader", tools=[bash()], model=scripted(
        calls(call("bash", cmd="cat shared.txt")), submit("read")))
    boss = react(tools=[as_tool(writer), handoff(reader)], model=scripted(
        calls(call("writer", input="write it")),
        calls(call("transfer_to_reader")),
        submit("ok"),
    ))
    state = await run(boss, "collaborate")
    assert results(state)[0].text == "written"
    # The reader (a handoff) read what the writer (an agent tool) wrote: one sandbox per sample.
    reads = [e.result for e in bound.find(ToolEvent) if e.function == "bash" and e.arguments["cmd"] == "cat shared.txt"]
    assert [r.strip() for r in reads] == ["from-writer"]
    assert state.output.completion == "ok"
