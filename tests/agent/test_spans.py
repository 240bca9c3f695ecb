"""Agent, tool, handoff and model spans form one tree; every event carries its span id."""

from __future__ import annotations

from typing import Any

from orchestrator.agent import as_tool, handoff, react, run
from orchestrator.log import ModelEvent, SpanBeginEvent, SpanEndEvent, ToolEvent
from tests.agent import agent_tools as at
from tests.agent.helpers import call, calls, scripted, submit


def span_tree(events: list[Any]) -> list[Any]:
    """Spans as nested ``[("type:name", [children...]), ...]`` in begin order (model spans shown as ``model``)."""
    begins = [e for e in events if isinstance(e, SpanBeginEvent)]
    children: dict[str | None, list[SpanBeginEvent]] = {}
    for b in begins:
        children.setdefault(b.parent_id, []).append(b)

    def render(parent: str | None) -> list[Any]:
        return [
            ("model" if b.type == "model" else f"{b.type}:{b.name}", render(b.id)) for b in children.get(parent, [])]

    return render(None)


async def test_span_tree_shape(bound) -> None:
    child = react(name="child", model=scripted(submit("c")))
    helper = react(name="helper", model=scripted(submit("h")))
    boss = react(name="boss", tools=[at.add(), as_tool(child), handoff(helper)], model=scripted(
        calls(call("add", x=1, y=2), call("add", x=3, y=4)),
        calls(call("child", input="q")),
        calls(call("transfer_to_helper")),
        submit("done"),
    ))
    await run(boss, "task")

    assert span_tree(bound.events) == [
        ("agent:boss", [
            ("model", []),
            ("tool:add", []),
            ("tool:add", []),
            ("model", []),
            ("tool:child", [
                ("agent:child", [("model", []), ("tool:submit", [])]),
            ]),
            ("model", []),
            ("tool:transfer_to_helper", [
                ("handoff:helper", [
                    ("agent:helper", [("model", []), ("tool:submit", [])]),
                ]),
            ]),
            ("model", []),
            ("tool:submit", []),
        ]),
    ]


async def test_every_event_carries_its_span(bound) -> None:
    child = react(name="child", model=scripted(submit("c")))
    boss = react(name="boss", tools=[as_tool(child)], model=scripted(calls(call("child", input="q")), submit("x")))
    await run(boss, "task")

    begins = {e.id: e for e in bound.events if isinstance(e, SpanBeginEvent)}
    ends = {e.id for e in bound.events if isinstance(e, SpanEndEvent)}
    assert set(begins) == ends  # every span closed
    for event in bound.events:
        if isinstance(event, SpanBeginEvent):
            assert event.span_id == event.parent_id
            continue
        if isinstance(event, SpanEndEvent):
            assert event.span_id == begins[event.id].parent_id
            continue
        assert event.span_id in begins, event
    for event in bound.find(ModelEvent):
        assert begins[event.span_id].type == "model"
    for event in bound.find(ToolEvent):
        span = begins[event.span_id]
        assert (span.type, span.name) == ("tool", event.function)
    # The child's model call sits under the child's agent span, under the parent's tool span.
    child_model = list(bound.find(ModelEvent))[1]
    agent_span = begins[begins[child_model.span_id].parent_id]
    assert (agent_span.type, agent_span.name) == ("agent", "child")
    assert (begins[agent_span.parent_id].type, begins[agent_span.parent_id].name) == ("tool", "child")
