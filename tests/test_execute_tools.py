"""execute_tools end to end, run against every dispatcher."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator._wire import ToolExecutionFatal
from orchestrator.log import ToolEvent
from orchestrator.tool import GuardrailResult, ToolCall, ToolDef, ToolGuardrailTripwire, ToolParams
from tests.support import sample_tools as st
from tests.support.execution import calls, run_turn

ALL_TOOLS = [
    st.add(), st.noop(), st.noop_serial(), st.record(), ToolDef(st.record(), name="record_serial", parallel=False),
    st.text_of_size(), st.tiny_output(),
    st.fail(), st.sleeper(), st.slow_with_timeout(), st.slow_raising(), st.typed(),
]


def errors(result) -> list[tuple[str, str] | None]:
    return [(m.error.type, m.error.message) if m.error else None for m in result.messages]


@pytest.mark.parametrize(
    ("kind", "error"),
    [
        ("timeout", ("timeout", "Command timed out before completing.")),
        ("unicode", ("unicode_decode", "Error decoding bytes to utf-8: invalid start byte")),
        ("null_byte", ("parsing", "An argument to tool 'fail' contained an embedded null byte.")),
        ("permission", ("permission", "Permission denied. Filename '/root/secret'.")),
        ("not_found", ("file_not_found", "File '/nope.txt' was not found.")),
        ("is_dir", ("is_a_directory", "Is a directory. Filename '/tmp'.")),
        ("output_limit", ("limit", "The tool exceeded its output limit of 10 MiB.")),
        ("limit", ("limit", "The tool exceeded its token limit of 1,000.")),
        ("parsing", ("parsing", "bad input shape")),
        ("tool_error", ("unknown", "the tool could not do that")),
    ],
)
async def test_error_table_reaches_the_model(dispatcher, kind, error) -> None:
    result, transcript = await run_turn(dispatcher, calls(("fail", {"kind": kind})), ALL_TOOLS)
    assert errors(result) == [error]
    [event] = transcript.find(ToolEvent)
    assert (event.error.type, event.error.message) == error


async def test_results_are_spliced_in_declared_order(dispatcher) -> None:
    # The first-declared call finishes last.
    specs = [("sleeper", {"seconds": d}) for d in (0.3, 0.1, 0.0)] + [("add", {"x": 1, "y": 2})]
    result, transcript = await run_turn(dispatcher, calls(*specs), ALL_TOOLS)
    assert [m.tool_call_id for m in result.messages] == ["c0", "c1", "c2", "c3"]
    assert [m.text for m in result.messages] == ["done", "done", "done", "3"]
    events = {e.id: e for e in transcript.find(ToolEvent)}
    assert events["c0"].completed > events["c1"].completed > events["c2"].completed  # really out of order


async def test_parallel_runs_concurrently_and_serial_calls_are_barriers(dispatcher, tmp_path) -> None:
    log = str(tmp_path / "log")
    specs = [
        ("record", {"path": log, "label": "p1", "delay": 0.2}),
        ("record", {"path": log, "label": "p2", "delay": 0.2}),
        ("record_serial", {"path": log, "label": "s", "delay": 0.05}),
        ("record", {"path": log, "label": "p3", "delay": 0.0}),
    ]
    result, _ = await run_turn(dispatcher, calls(*specs), ALL_TOOLS)
    assert [m.text for m in result.messages] == ["p1", "p2", "s", "p3"]
    lines = [line.rsplit(" ", 1)[0] for line in Path(log).read_text().splitlines()]
    # p1 and p2 overlap (both start before either ends); s starts after both end; p3 after s ends.
    assert set(lines[:2]) == {"start p1", "start p2"}
    assert lines.index("start s") > max(lines.index("end p1"), lines.index("end p2"))
    assert lines.index("start p3") > lines.index("end s")


async def test_unknown_tool_is_a_parsing_error_and_a_barrier(dispatcher, tmp_path) -> None:
    log = str(tmp_path / "log")
    specs = [("record", {"path": log, "label": "a", "delay": 0.1}), ("nope", {}),
             ("record", {"path": log, "label": "b"})]
    result, _ = await run_turn(dispatcher, calls(*specs), ALL_TOOLS)
    assert errors(result) == [None, ("parsing", "Tool nope not found"), None]
    lines = [line.rsplit(" ", 1)[0] for line in Path(log).read_text().splitlines()]
    assert lines == ["start a", "end a", "start b", "end b"]


async def test_fatal_error_cancels_siblings_and_skips_later_stages(dispatcher, tmp_path) -> None:
    marker = tmp_path / "sibling-finished"
    later = tmp_path / "later-stage-ran"
    specs = [
        ("sleeper", {"seconds": 2.0, "marker": str(marker)}),
        ("fail", {"kind": "fatal", "delay": 0.1}),
        ("noop_serial", {}),
        ("sleeper", {"seconds": 0.0, "marker": str(later)}),
    ]
    with pytest.raises(ToolExecutionFatal) as err:
        await run_turn(dispatcher, calls(*specs), ALL_TOOLS)
    assert err.value.fatal.type == "RuntimeError" and err.value.fatal.message == "boom"
    assert not marker.exists() and not later.exists()


async def test_fatal_error_records_cancelled_events(dispatcher) -> None:
    from orchestrator.dispatch import reset_active_dispatcher, set_active_dispatcher
    from orchestrator.log import Transcript, bind_transcript
    from orchestrator.model import execute_tools
    from tests.support.execution import turn

    transcript = Transcript()
    token = set_active_dispatcher(dispatcher)
    try:
        with bind_transcript(transcript), pytest.raises(ToolExecutionFatal):
            await execute_tools(turn(calls(("sleeper", {"seconds": 5.0}), ("fail", {"kind": "fatal"}))), ALL_TOOLS)
    finally:
        reset_active_dispatcher(token)
    events = {e.id: e for e in transcript.find(ToolEvent)}
    assert events["c1"].failed is True
    assert events["c0"].error.type == "cancelled"


async def test_parse_error_and_validation_errors(dispatcher) -> None:
    tool_calls = [
        ToolCall(id="a", function="add", arguments={}, parse_error="Malformed JSON in arguments"),
        ToolCall(id="b", function="add", arguments={"x": "one", "y": 2, "z": 3}),
    ]
    result, _transcript = await run_turn(dispatcher, tool_calls, ALL_TOOLS)
    assert errors(result)[0] == ("parsing", "Malformed JSON in arguments")
    kind, message = errors(result)[1]
    assert kind == "parsing"
    assert message.startswith("Found 2 validation errors parsing tool input arguments:\n- ")
    assert "'one' is not of type 'integer'" in message and "'z' was unexpected" in message


async def test_deeply_nested_arguments_are_rejected(dispatcher) -> None:
    value: object = 1
    for _ in range(101):
        value = [value]
    result, _ = await run_turn(dispatcher, [ToolCall(id="a", function="add", arguments={"x": value, "y": 1})],
                               ALL_TOOLS)
    assert errors(result)[0] == ("parsing", ("Error parsing tool call arguments: arguments exceed the maximum "
                                             "supported nesting depth of 100"))


async def test_deserialisation_on_the_executing_side(dispatcher) -> None:
    args = {
        "count": 3, "ratio": 0.5, "flag": True, "name": "n", "when": "2024-01-02T03:04:05Z", "day": "2024-01-02",
        "at": "03:04:05", "color": "blue", "point": {"x": 1, "y": 2}, "box": {"width": 1.0, "height": 2.0},
        "person": {"name": "a", "age": 3}, "numbers": [1], "tags": ["t"], "pair": [1, "x"], "scores": {"a": 1.0},
        "points": [{"x": 0, "y": 1}],
    }
    result, _ = await run_turn(dispatcher, calls(("typed", args)), ALL_TOOLS)
    text = result.messages[0].text
    for fragment in ("when=datetime:datetime.datetime(2024, 1, 2, 3, 4, 5, tzinfo=",
                     "color=Color:<Color.BLUE: 'blue'>", "point=Point:Point(x=1, y=2)", "person=Person:",
                     "tags=set:{'t'}", "pair=tuple:(1, 'x')", "maybe=NoneType:None", "day=date:", "at=time:"):
        assert fragment in text


async def test_kwargs_tool_receives_all_arguments(dispatcher) -> None:
    params = ToolParams(properties={"a": {"type": "integer", "description": "a"},
                                    "b": {"type": "string", "description": "b"}})
    tool = ToolDef(st.passthrough(), parameters=params)
    result, _ = await run_turn(dispatcher, calls(("passthrough", {"a": 1, "b": "x"})), [tool])
    assert result.messages[0].text == "a=1,b='x'"


async def test_truncation_through_execute_tools(dispatcher) -> None:
    result, transcript = await run_turn(dispatcher, calls(("text_of_size", {"n": 100}), ("text_of_size", {"n": 20})),
                                        ALL_TOOLS, max_output=20)
    assert "<START_TOOL_OUTPUT>\n" + "x" * 20 + "\n<END_TOOL_OUTPUT>" in result.messages[0].text
    assert result.messages[1].text == "x" * 20  # exactly at the limit
    events = transcript.find(ToolEvent)
    assert events[0].truncated == (100, 20) and events[1].truncated is None


async def test_per_tool_max_output_wins_and_zero_disables(dispatcher) -> None:
    result, transcript = await run_turn(dispatcher, calls(("tiny_output", {"n": 11})), ALL_TOOLS, max_output=1000)
    assert transcript.find(ToolEvent)[0].truncated == (11, 10)
    result, transcript = await run_turn(dispatcher, calls(("text_of_size", {"n": 20000})), ALL_TOOLS, max_output=0)
    assert result.messages[0].text == "x" * 20000 and transcript.find(ToolEvent)[0].truncated is None


async def test_default_limit_is_16_kib(dispatcher) -> None:
    _result, transcript = await run_turn(dispatcher, calls(("text_of_size", {"n": 16 * 1024 + 1})), ALL_TOOLS)
    assert transcript.find(ToolEvent)[0].truncated == (16 * 1024 + 1, 16 * 1024)


async def test_config_max_tool_output(dispatcher) -> None:
    from orchestrator.model import GenerateConfig
    from orchestrator.model._generate_config import _active_config

    token = _active_config.set(GenerateConfig(max_tool_output=64))
    try:
        _, transcript = await run_turn(dispatcher, calls(("text_of_size", {"n": 65})), ALL_TOOLS)
    finally:
        _active_config.reset(token)
    assert transcript.find(ToolEvent)[0].truncated == (65, 64)


async def test_per_tool_timeout_error_as_result(dispatcher) -> None:
    result, _ = await run_turn(dispatcher, calls(("slow_with_timeout", {"seconds": 5})), ALL_TOOLS)
    assert errors(result) == [("timeout", "Tool 'slow_with_timeout' timed out after 0.3 seconds.")]


async def test_per_tool_timeout_raise(dispatcher) -> None:
    with pytest.raises(ToolExecutionFatal) as err:
        await run_turn(dispatcher, calls(("slow_raising", {"seconds": 5})), ALL_TOOLS)
    assert err.value.fatal.type == "ToolTimeoutError"
    assert err.value.fatal.message == "Tool 'slow_raising' timed out after 0.3 seconds."


async def test_disabled_tool_is_hidden_and_a_parsing_error(dispatcher) -> None:
    disabled = ToolDef(st.add(), is_enabled=lambda: False)
    result, _ = await run_turn(dispatcher, calls(("add", {"x": 1, "y": 1})), [disabled])
    assert errors(result) == [("parsing", "Tool add not found")]


async def test_guardrails(dispatcher) -> None:
    def no_big_numbers(call, tool):
        if call.arguments["x"] > 100:
            return GuardrailResult.reject("Numbers over 100 are not allowed.")
        return GuardrailResult.allow()

    def redact(call, output):
        return GuardrailResult.reject("[redacted]") if "3" in str(output) else GuardrailResult.allow()

    guarded = ToolDef(st.add(), input_guardrails=[no_big_numbers], output_guardrails=[redact])
    result, _transcript = await run_turn(
        dispatcher, calls(("add", {"x": 101, "y": 1}), ("add", {"x": 1, "y": 2}), ("add", {"x": 1, "y": 1})), [guarded])
    assert [m.text for m in result.messages] == ["Numbers over 100 are not allowed.", "[redacted]", "2"]
    assert [m.error for m in result.messages] == [None, None, None]

    tripwire = ToolDef(st.add(), input_guardrails=[lambda call, tool: GuardrailResult.raise_("stop everything")])
    with pytest.raises(ToolGuardrailTripwire, match="stop everything"):
        await run_turn(dispatcher, calls(("add", {"x": 1, "y": 1})), [tripwire])


async def test_tool_events_carry_timing_and_arguments(dispatcher) -> None:
    _, transcript = await run_turn(dispatcher, calls(("add", {"x": 2, "y": 5})), ALL_TOOLS)
    [event] = transcript.find(ToolEvent)
    recorded = (event.id, event.function, event.arguments, event.result, event.error)
    assert recorded == ("c0", "add", {"x": 2, "y": 5}, "7", None)
    assert event.started <= event.completed and event.working_time >= 0


async def test_only_the_last_assistant_message_is_executed(dispatcher) -> None:
    from orchestrator.model import ChatMessageAssistant, ChatMessageUser, execute_tools

    messages = [ChatMessageAssistant(content="", tool_calls=calls(("add", {"x": 1, "y": 1}))),
                ChatMessageUser(content="hi")]
    assert (await execute_tools(messages, ALL_TOOLS)).messages == []


async def test_results_over_the_payload_cap_are_a_limit_error_in_every_mode(dispatcher) -> None:
    result, _ = await run_turn(dispatcher, calls(("text_of_size", {"n": 17 * 1024 * 1024})), ALL_TOOLS)
    assert errors(result) == [("limit", "The tool exceeded its output limit of 16 MiB.")]
