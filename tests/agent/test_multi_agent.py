"""handoff, as_tool and nested-run inheritance."""

from __future__ import annotations

from typing import Any

from orchestrator.agent import (
    AgentState,
    as_tool,
    handoff,
    max_agent_depth,
    react,
    remove_tools,
    run,
)
from orchestrator.approval import Approval, ApprovalPolicy
from orchestrator.log import ApprovalEvent, ToolEvent
from orchestrator.model import (
    ChatMessageAssistant,
    ChatMessageTool,
    ChatMessageUser,
    get_model,
    model_context,
    usage_scope,
)
from orchestrator.util import message_limit
from tests.agent import agent_tools as at
from tests.agent.helpers import call, calls, roles, scripted, submit, text


class Recorder:
    """A scripted policy that records what each turn saw, then replays the given outputs."""

    def __init__(self, *outputs: Any) -> None:
        self.outputs = list(outputs)
        self.seen: list[list[Any]] = []
        self.tools: list[list[str]] = []

    def __call__(self, messages, tools):
        self.seen.append(list(messages))
        self.tools.append([t.name for t in tools])
        return self.outputs.pop(0) if self.outputs else submit("out of script")

    def model(self):
        return get_model("scripted", policy=self)


# -- handoff ---------------------------------------------------------------------------------------

async def test_handoff_strips_siblings_filters_prefixes_and_closes(bound) -> None:
    child = Recorder(calls(call("echo", text="working")), submit("child answer", text="Done:"))
    helper = react(name="helper", description="Helps.", tools=[at.echo()], model=child.model())
    parent = Recorder(
        calls(call("add", x=1, y=1), call("transfer_to_helper"), call("add", x=2, y=2), text="Handing off."),
        submit("final"),
    )
    agent = react(tools=[at.add(), handoff(helper, input_filter=remove_tools)], model=parent.model())
    state = await run(agent, "task")

    # As in Inspect: the parent's assistant message keeps every call and each one runs; the
    # helper's messages follow the transfer result.
    first = next(m for m in state.messages if isinstance(m, ChatMessageAssistant))
    assert [c.function for c in first.tool_calls] == ["add", "transfer_to_helper", "add"]
    tool_messages = [m for m in state.messages if isinstance(m, ChatMessageTool)]
    assert [m.text for m in tool_messages] == ["2", "Successfully transferred to helper.", "4"]
    # input_filter=remove_tools: the helper saw no tool calls or results, and not the parent's system message.
    seen = child.seen[0]
    # (and, as in Inspect, a user message stands in for the removed transfer result)
    assert roles(seen) == ["system", "user", "assistant", "user"]
    assert seen[3].text == "Successfully transferred to helper."
    assert seen[0].text != state.messages[0].text
    assert seen[2].text == "Handing off." and not seen[2].tool_calls
    # Only the helper's new messages came back: prefixed, content only (default output filter), closed.
    after = state.messages[state.messages.index(tool_messages[1]) + 1:]
    # content_only (as Inspect's): tool calls become text, tool results user messages.
    assert [(m.role, m.text) for m in after[:5]] == [
        ("assistant", "[helper] \necho(text='working')"),
        ("user", "working"),
        ("assistant", "[helper] Done:\n\nchild answer"),
        ("user", "The helper agent has completed its work."),
        ("tool", "4"),
    ]
    assert all(not getattr(m, "tool_calls", None) for m in after)
    # The parent went on after the handoff and submitted.
    assert state.output.completion == "final"
    assert parent.seen[1][-1].text == "4"
    handoff_events = [e for e in bound.find(ToolEvent) if e.function == "transfer_to_helper"]
    assert [e.agent for e in handoff_events] == ["helper"]


async def test_handoff_custom_tool_name_and_output_filter(bound) -> None:
    async def last_only(messages):
        return messages[-1:]

    helper = react(name="helper", model=scripted(text("a"), submit("b")))
    agent = react(tools=[handoff(helper, tool_name="ask_helper", output_filter=last_only)],
                  model=scripted(calls(call("ask_helper")), submit("x")))
    state = await run(agent, "task")
    i = next(i for i, m in enumerate(state.messages) if isinstance(m, ChatMessageTool))
    assert state.messages[i].text == "Successfully transferred to helper."
    assert [(m.role, m.text) for m in state.messages[i + 1:i + 3]] == [
        ("assistant", "[helper] b"), ("user", "The helper agent has completed its work.")]


async def test_limit_breach_inside_a_handoff(bound) -> None:
    looping = get_model("scripted", policy=lambda m, t: calls(call("add", x=1, y=1)))
    helper = react(name="helper", tools=[at.add()], model=looping)
    agent = react(tools=[handoff(helper, limits=[message_limit(8)])],
                  model=scripted(calls(call("transfer_to_helper")), calls(call("transfer_to_helper")), submit("x")))
    state = await run(agent, "task")
    closing = [m.text for m in state.messages if isinstance(m, ChatMessageUser)]
    # Taken twice: each handoff gets its own copy of the limit, so both breach the same way.
    assert closing.count("The helper exceeded its message limit of 8.") == 2
    assert state.output.completion == "x"


async def test_handoff_carries_the_review_policy_into_the_sub_agent(bound) -> None:
    from orchestrator.review import Review, ReviewPolicy

    reviewed: list[str] = []

    async def note(message, call, result, output, view, history):
        reviewed.append(call.function)
        return Review(decision="continue")

    helper = react(name="helper", tools=[at.echo()], model=scripted(calls(call("echo", text="x")), submit("y")))
    agent = react(tools=[handoff(helper)], model=scripted(calls(call("transfer_to_helper")), submit("z")),
                  review=[ReviewPolicy(note, "*")])
    await run(agent, "task")
    # The sub-agent's own calls are reviewed as they run; the handoff after the sub-agent returns.
    assert reviewed == ["echo", "submit", "transfer_to_helper", "submit"]


# -- as_tool ---------------------------------------------------------------------------------------

async def test_as_tool_isolation(bound) -> None:
    child = Recorder(calls(call("echo", text="searching")), submit("X is 42", text="Found it."))
    researcher = react(name="researcher", description="Researches a question.", tools=[at.echo()],
                       model=child.model(), prompt=None)
    parent = Recorder(calls(call("researcher", input="find X")), submit("42"))
    state = await run(react(tools=[as_tool(researcher)], model=parent.model()), "What is X?")

    # The child saw only its input.
    assert [(m.role, m.text) for m in child.seen[0]] == [("user", "find X")]
    # The parent saw only the child's final text, as the tool result.
    [result] = [m for m in state.messages if isinstance(m, ChatMessageTool)]
    assert result.text == "Found it.\n\nX is 42"
    assert "searching" not in [m.text for m in state.messages]
    assert parent.tools[0] == ["researcher", "submit"]


async def test_as_tool_schema_has_input_and_uncurried_parameters() -> None:
    from orchestrator.tool import ToolDef

    async def expert(state: AgentState, topic: str, depth: int = 1) -> AgentState:
        """An expert.

        Args:
          state: The state.
          topic: What to focus on.
          depth: How deep to go.
        """
        return state

    info = ToolDef(as_tool(expert, description="Ask the expert.")).info
    assert list(info.parameters.properties) == ["input", "topic", "depth"]
    assert info.parameters.required == ["input", "topic"]
    curried = ToolDef(as_tool(expert, description="Ask.", topic="cats")).info
    assert list(curried.parameters.properties) == ["input", "depth"]


async def test_as_tool_output_extractor_and_max_turns(bound) -> None:
    looping = get_model("scripted", policy=lambda m, t: calls(call("add", x=1, y=1)))
    stuck = react(name="stuck", tools=[at.add()], model=looping)
    quick = react(name="quick", model=scripted(submit("long report")))
    parent = Recorder(calls(call("stuck", input="go")), calls(call("quick", input="go")), submit("done"))
    tools = [as_tool(stuck, max_turns=2), as_tool(quick, output_extractor=lambda s: s.output.completion.upper())]
    state = await run(react(tools=tools, model=parent.model()), "task")
    results = [m for m in state.messages if isinstance(m, ChatMessageTool)]
    assert (results[0].error.type, results[0].error.message) == ("limit", "The tool exceeded its turn limit of 2.")
    assert results[1].text == "LONG REPORT"


def _chain(levels: int) -> Any:
    """Agents nested ``levels`` deep; each asks the next via as_tool and submits what it got."""

    def policy(messages, tools):
        last = messages[-1]
        if isinstance(last, ChatMessageTool):
            return submit(last.error.message if last.error else last.text)
        if "deeper" in [t.name for t in tools]:
            return calls(call("deeper", input="go on"))
        return submit("bottom")

    model = get_model("scripted", policy=policy)
    agent = react(name="level", model=model, prompt=None)
    for _ in range(levels):
        agent = react(name="level", tools=[as_tool(agent, name="deeper", description="Go deeper.")],
                      model=model, prompt=None)
    return agent


async def test_nesting_depth_is_bounded(bound) -> None:
    state = await run(_chain(5), "start")
    assert "agents may be nested at most 3 levels deep" in state.output.completion
    depth_errors = [e for e in bound.find(ToolEvent) if e.error is not None]
    assert len(depth_errors) == 1 and depth_errors[0].error.type == "unknown"


async def test_nesting_within_the_bound_reaches_the_bottom(bound) -> None:
    state = await run(_chain(3), "start")
    assert state.output.completion == "bottom"
    with max_agent_depth(2):
        state = await run(_chain(3), "start")
    assert "nested at most 2 levels" in state.output.completion


# -- nested-run inheritance ------------------------------------------------------------------------

async def test_always_approve_in_the_parent_does_not_apply_inside_a_nested_run(bound) -> None:
    asked: list[str] = []

    async def first_add_always(message, call, view, history):
        asked.append(call.function)
        if call.function != "add":
            return Approval(decision="approve")
        if asked.count("add") == 1:
            return Approval(decision="approve", always=True, explanation="always add")
        return Approval(decision="reject", explanation="asked again")

    child = react(name="child", tools=[at.add()], model=scripted(calls(call("add", x=5, y=5)), submit("child")))
    parent_model = scripted(calls(call("add", x=1, y=1)), calls(call("add", x=2, y=2)),
                            calls(call("child", input="add")), submit("parent"))
    agent = react(tools=[at.add(), as_tool(child)], model=parent_model,
                  approval=[ApprovalPolicy(first_add_always, "*")])
    state = await run(agent, "task")

    parent_results = [m for m in state.messages if isinstance(m, ChatMessageTool)]
    assert [m.text for m in parent_results[:2]] == ["2", "4"]  # second add: approved from the store
    assert [e.approver for e in bound.find(ApprovalEvent) if e.call.function == "add"][:2] == [
        "first_add_always", "store"]
    # Inside the child the store was fresh: the approver was asked again and rejected.
    child_add = [e for e in bound.find(ToolEvent) if e.function == "add" and e.arguments == {"x": 5, "y": 5}]
    assert child_add[0].error.type == "approval" and child_add[0].error.message == "asked again"


async def test_nested_usage_is_separate_and_rolled_up(bound) -> None:
    child = react(name="child", model=scripted(submit("c", tokens=100)))
    parent_model = scripted(calls(call("child", input="q"), tokens=10), submit("p", tokens=10))
    with usage_scope("sample") as usage:
        await run(react(tools=[as_tool(child)], model=parent_model), "task")
    assert usage.own.total_tokens == 20
    assert usage.children["child"].total_tokens == 100
    assert usage.total_tokens == 120


async def test_nested_runs_inherit_the_active_model(bound) -> None:
    # Neither agent names a model: both use the one active for the sample.
    shared = Recorder(calls(call("child", input="q")), submit("from child"), submit("from parent"))
    child = react(name="child", prompt=None)
    with model_context(shared.model()):
        state = await run(react(tools=[as_tool(child)], prompt=None), "task")
    assert state.output.completion == "from parent"
    assert [(m.role, m.text) for m in shared.seen[1]] == [("user", "q")]


async def test_as_tool_time_limit_becomes_a_limit_tool_error(bound) -> None:
    from orchestrator.util import time_limit

    sleepy = react(name="sleepy", tools=[at.nap()], model=scripted(calls(call("nap", seconds=30))))
    parent = Recorder(calls(call("sleepy", input="nap")), submit("woke"))
    state = await run(react(tools=[as_tool(sleepy, limits=[time_limit(0.3)])], model=parent.model()), "task")
    [result] = [m for m in state.messages if isinstance(m, ChatMessageTool)]
    # Inspect formats floats with two decimals
    assert (result.error.type, result.error.message) == ("limit", "The tool exceeded its time limit of 0.30.")
    assert state.output.completion == "woke"


async def test_handoff_beyond_the_depth_bound_is_an_error_to_the_model(bound) -> None:
    helper = react(name="helper", model=scripted(submit("never")))
    parent = Recorder(calls(call("transfer_to_helper")), submit("alone"))
    with max_agent_depth(0):
        state = await run(react(tools=[handoff(helper)], model=parent.model()), "task")
    [result] = [m for m in state.messages if isinstance(m, ChatMessageTool)]
    assert result.error is not None and "nested at most 0 levels" in result.error.message
    assert state.output.completion == "alone"


async def test_handoff_without_input_filter_passes_the_history_but_not_system_messages(bound) -> None:
    child = Recorder(submit("ok"))
    helper = react(name="helper", model=child.model(), prompt=None)
    parent = Recorder(calls(call("add", x=1, y=1)), calls(call("transfer_to_helper")), submit("done"))
    await run(react(tools=[at.add(), handoff(helper)], model=parent.model()), "task")
    seen = child.seen[0]
    assert roles(seen) == ["user", "assistant", "tool", "assistant", "tool"]
    assert seen[-1].text == "Successfully transferred to helper."


async def test_a_parent_turn_limit_counts_nested_turns(bound) -> None:
    from orchestrator.util import turn_limit

    child = react(name="child", tools=[at.add()], model=scripted(
        calls(call("add", x=1, y=1)), calls(call("add", x=1, y=1)), submit("c")))
    parent = scripted(calls(call("child", input="q")), submit("p"))
    state, error = await run(react(tools=[as_tool(child)], model=parent), "task", limits=[turn_limit(3)])
    # Parent turn 1, then the child's turns 2-3; the child's 4th turn breaches the parent's limit,
    # which reaches the parent as a limit error of the tool, and stops the parent at its next turn.
    assert error is not None and (error.type, error.limit) == ("turn", 3)
    [result] = [m for m in state.messages if isinstance(m, ChatMessageTool)]
    assert result.error is not None and result.error.type == "limit"
