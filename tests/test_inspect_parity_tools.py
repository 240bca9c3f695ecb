"""Tool execution (results, truncation, schemas, errors, argument parsing) behaves as Inspect AI 0.3.285's does.

Each expectation below is what Inspect itself produced for the same call (checked by running
inspect-ai 0.3.285 side by side); the tests state it without importing Inspect.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Optional, TypedDict

import pytest
from pydantic import BaseModel

from orchestrator._wire import ToolExecutionFatal
from orchestrator.dispatch import InProcessDispatcher
from orchestrator.log import ModelEvent, ToolEvent, Transcript, bind_transcript
from orchestrator.model import (
    ChatCompletionChoice,
    ChatMessageAssistant,
    ChatMessageUser,
    ModelOutput,
    execute_tools,
    get_model,
    parse_tool_call,
)
from orchestrator.tool import ToolCall, ToolDef, ToolInfo, ToolParam, ToolParams, tool
from orchestrator.util import SandboxTimeoutError
from tests.support import sample_tools as st
from tests.support.execution import calls, run_turn


class Plain:
    """A class pydantic cannot describe: Inspect passes the JSON value through."""


@tool
def parity_probe():
    async def execute(kind: str, when: Optional[datetime] = None, obj: Optional[Plain] = None) -> str:  # noqa: UP045 - tool authors write typing.Optional: its schema is under test
        """Probe a behaviour.

        Args:
            kind: What to do.
            when: A time.
            obj: Anything.
        """
        if kind == "big":
            return "x" * 100
        if kind == "perm":
            raise PermissionError("policy denied")
        if kind == "kaboom":
            raise RuntimeError("kaboom")
        if kind == "sandbox_timeout":
            raise SandboxTimeoutError("timed out", truncated_output="partial out")
        if kind == "when":
            return f"{when.isoformat()} {when.tzinfo}"  # type: ignore[union-attr]
        if kind == "obj":
            return f"{type(obj).__name__} {obj!r}"
        return "ok"

    return execute


async def probe(arguments: dict, **kwargs):
    return await run_turn(InProcessDispatcher(), [ToolCall(id="c1", function="parity_probe", arguments=arguments)],
                          [parity_probe()], **kwargs)


# -- item 4: execute_tools returns a NamedTuple ------------------------------------------------

async def test_execute_tools_result_unpacks_and_keeps_attributes() -> None:
    history = [ChatMessageUser(content="hi"),
               ChatMessageAssistant(content="",
                                    tool_calls=[ToolCall(id="a", function="add", arguments={"x": 1, "y": 2})])]
    messages, output = await execute_tools(history, [st.add()])
    assert [m.text for m in messages] == ["3"] and output is None
    result = await execute_tools(history, [st.add()])
    assert result.messages[0].text == "3" and result.output is None and tuple(result) == (result.messages, None)
    assert await execute_tools([ChatMessageUser(content="no calls")], [st.add()]) == ([], None)


# -- item 8: truncation joins head and tail directly -------------------------------------------

async def test_truncated_output_joins_head_and_tail_without_a_marker() -> None:
    result, transcript = await probe({"kind": "big"}, max_output=20)
    assert result.messages[0].text == (
        "\nThe output of your call to parity_probe was too long to be displayed.\n"
        "Here is a truncated version:\n<START_TOOL_OUTPUT>\n" + "x" * 20 + "\n<END_TOOL_OUTPUT>\n"
    )
    assert transcript.find(ToolEvent)[0].truncated == (100, 20)


# -- item 10: schemas and argument types ---------------------------------------------------------

class Point(BaseModel):
    x: int
    y: int


@dataclass
class Box:
    w: int
    h: Optional[int] = None  # noqa: UP045 - tool authors write typing.Optional: its schema is under test


class Shape(TypedDict):
    a: str


@tool
def structured():
    async def execute(p: Point, b: Box, d: Shape, when: datetime, pts: list[Point]) -> str:
        """Structured arguments.

        Args:
            p: point
            b: box
            d: td
            when: time
            pts: points
        """
        return "ok"

    return execute


def test_nested_objects_are_closed_and_inlined_as_inspect_sends_them() -> None:
    # Inspect's ToolParams for the same signature, dumped with exclude_none.
    inspect_schema = {
        "additionalProperties": False,
        "properties": {
            "b": {"additionalProperties": False, "description": "box",
                  "properties": {"h": {"anyOf": [{"type": "integer"}, {"type": "null"}]}, "w": {"type": "integer"}},
                  "required": ["w"], "type": "object"},
            "d": {"additionalProperties": False, "description": "td", "properties": {"a": {"type": "string"}},
                  "required": ["a"], "type": "object"},
            "p": {"additionalProperties": False, "description": "point",
                  "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}}, "required": ["x", "y"],
                  "type": "object"},
            "pts": {"description": "points", "type": "array",
                    "items": {"additionalProperties": False,
                              "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}},
                              "required": ["x", "y"], "type": "object"}},
            "when": {"description": "time", "format": "date-time", "type": "string"},
        },
        "required": ["p", "b", "d", "when", "pts"],
        "type": "object",
    }
    params = ToolDef(structured()).parameters
    assert json.loads(json.dumps(params.json_schema())) == inspect_schema
    # nested fields are typed, as Inspect's ToolParam is
    assert params.properties["pts"].items.type == "object"  # type: ignore[union-attr]
    assert params.properties["p"].properties["x"].type == "integer"  # type: ignore[index]


class Node(BaseModel):
    value: int
    children: list[Node] = []


def test_recursive_models_keep_a_resolvable_reference() -> None:
    @tool
    def tree():
        async def execute(root: Node) -> str:
            """A tree.

            Args:
                root: The root.
            """
            return "ok"

        return execute

    schema = ToolDef(tree()).parameters.json_schema()
    assert schema["properties"]["root"]["properties"]["children"]["items"] == {"$ref": "#/$defs/Node"}
    assert schema["$defs"]["Node"]["additionalProperties"] is False
    assert ToolDef(tree()).validation_errors({"root": {"value": 1, "children": [{"value": 2, "extra": 1}]}})


async def test_plain_class_parameter_is_accepted_and_passed_through() -> None:
    assert ToolDef(parity_probe()).parameters.json_schema()["properties"]["obj"]["description"] == "Anything."
    result, _ = await probe({"kind": "obj", "obj": {"a": 1}})
    assert result.messages[0].text == "dict {'a': 1}"


async def test_naive_datetime_argument_becomes_utc() -> None:
    result, _ = await probe({"kind": "when", "when": "2024-05-01T12:00:00"})
    assert result.messages[0].text == "2024-05-01T12:00:00+00:00 UTC"


def test_tool_prompt_is_appended_to_the_description() -> None:
    with pytest.warns(DeprecationWarning, match=r"@tool\(prompt=\.\.\.\) is deprecated"):
        @tool(prompt="Use it   wisely.")
        def prompted():
            async def execute() -> str:
                """Does a thing."""
                return "ok"

            return execute

    assert ToolDef(prompted()).description == "Does a thing.. Use it wisely."  # Inspect's ". " join


# -- item 11: errors ----------------------------------------------------------------------------

async def test_permission_error_without_a_filename_reads_as_inspect_words_it() -> None:
    result, _ = await probe({"kind": "perm"})
    assert (result.messages[0].error.type, result.messages[0].error.message) == ("permission", "policy denied.")


async def test_uncaught_exception_keeps_its_type() -> None:
    with pytest.raises(RuntimeError) as err:
        await probe({"kind": "kaboom"})
    assert repr(err.value) == "RuntimeError('kaboom')"
    assert isinstance(err.value, ToolExecutionFatal) and err.value.fatal.type == "RuntimeError"


async def test_uncaught_builtin_exception_keeps_its_type_on_every_dispatcher(dispatcher) -> None:
    with pytest.raises(RuntimeError, match=r"^boom$"):
        await run_turn(dispatcher, calls(("fail", {"kind": "fatal"})), [st.fail()])


async def test_sandbox_timeout_partial_output_reaches_the_model() -> None:
    result, _ = await probe({"kind": "sandbox_timeout"})
    message = result.messages[0]
    assert message.text == "partial out"
    assert (message.error.type, message.error.message) == ("timeout", "Command timed out before completing.")


async def test_nesting_depth_error_uses_inspects_text() -> None:
    value: object = 1
    for _ in range(101):
        value = [value]
    result, _ = await probe({"kind": value})
    assert (result.messages[0].error.type, result.messages[0].error.message) == (
        "parsing", "Error parsing tool call arguments: arguments exceed the maximum supported nesting depth of 100")


# -- item 12: malformed arguments are recovered as Inspect's parser does -------------------------

ONE = ToolInfo(name="f", description="d", parameters=ToolParams(
    properties={"x": ToolParam(type="integer", description="x")}, required=["x"]))
NONE = ToolInfo(name="h", description="d")


@pytest.mark.parametrize(
    ("function", "raw", "arguments"),
    [
        ("f", "[1, 2]", {"x": [1, 2]}),
        ("f", "not json at all", {"x": "not json at all"}),
        ("f", "ls -la", {"x": "ls -la"}),
        ("f", "42", {"x": 42}),
        ("f", "true", {"x": True}),
        ("f", "null", {"x": None}),
        ("f", '"quoted"', {"x": "quoted"}),
        ("f", "a: 1\nb: 2", {"x": {"a": 1, "b": 2}}),
        ("f", "- a\n- b", {"x": ["a", "b"]}),
        ("f", '{"x": 1}""', {"x": 1}),  # stray trailing quotes
        ("h", '{}""', {}),
        ("h", "ls -la", {}),  # no parameter to bind to
        ("nope", "ls", {}),  # unknown tool: nothing to bind to
    ],
)
def test_recovered_arguments(function: str, raw: str, arguments: dict) -> None:
    call = parse_tool_call("id", function, raw, [ONE, NONE])
    assert call.parse_error is None and call.arguments == arguments


@pytest.mark.parametrize(
    ("raw", "detail"),
    [
        ('{"x": 1}\'', "Extra data: line 1 column 9 (char 8)"),
        ('{"x": 1', "Expecting ',' delimiter: line 1 column 8 (char 7)"),
        ("{x: 1}", "Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"),
    ],
)
def test_unrecoverable_arguments_are_inspects_parsing_error(raw: str, detail: str) -> None:
    call = parse_tool_call("id", "f", raw, [ONE])
    assert call.arguments == {}
    assert call.parse_error == f"Error parsing the following tool call arguments:\n\n{raw}\n\nError details: {detail}"


@pytest.mark.parametrize(
    "raw",
    [
        '{"x": ' + "[" * 150 + "]" * 150 + "}",  # deeper than the bound
        '{"x": ' + "[" * 100_000 + "]" * 100_000 + "}",  # deeper than the JSON decoder's stack
        "[" * 150 + "]" * 150,  # YAML
        "[" * 100_000 + "]" * 100_000,  # deeper than the YAML parser's stack
    ],
)
def test_deep_arguments_are_a_parsing_error_not_a_crash(raw: str) -> None:
    call = parse_tool_call("id", "f", raw, [ONE])
    assert call.arguments == {}
    assert call.parse_error.endswith("Error details: arguments exceed the maximum supported nesting depth of 100")


def test_yaml_aliases_cannot_explode_the_depth_check() -> None:
    # Each level aliases the previous one nine times: 9**40 paths, 40 levels. Measured without
    # re-walking shared nodes, this finishes at once and is within the bound.
    lines = ["a0: &a0 [x]"] + [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 40)]
    call = parse_tool_call("id", "f", "\n".join(lines), [ONE])
    assert call.parse_error is None and "a39" in call.arguments["x"]


def test_huge_raw_arguments_are_middle_truncated_in_the_error() -> None:
    raw = '{"x": "' + "y" * 40_000
    call = parse_tool_call("id", "f", raw, [ONE])
    assert f"(arguments middle-truncated from {len(raw)} bytes)" in call.parse_error
    assert len(call.parse_error) < 17_000


async def test_deep_arguments_from_a_model_reach_it_as_a_parsing_error() -> None:
    """End to end: a model hands over already-parsed arguments deeper than the interpreter's stack."""
    deep: object = 1
    for _ in range(5000):
        deep = {"k": deep}
    call = ToolCall(id="c", function="add", arguments={"x": deep, "y": 1})
    output = ModelOutput(model="scripted", choices=[ChatCompletionChoice(
        message=ChatMessageAssistant(content="", tool_calls=[call]), stop_reason="tool_calls")])
    transcript = Transcript()
    with bind_transcript(transcript):
        generated = await get_model("scripted", outputs=[output]).generate("go", tools=[st.add()])
        messages, _ = await execute_tools([ChatMessageUser(content="go"), generated.message], [st.add()])
    assert messages[0].error.message == (
        "Error parsing tool call arguments: arguments exceed the maximum supported nesting depth of 100")
    assert transcript.find(ToolEvent)[0].error.type == "parsing"


def test_a_tool_call_never_holds_over_deep_arguments() -> None:
    deep: object = 1
    for _ in range(101):
        deep = [deep]
    call = ToolCall(id="c", function="f", arguments={"x": deep})
    assert call.arguments == {} and call.parse_error == (
        "Error parsing tool call arguments: arguments exceed the maximum supported nesting depth of 100")
    flat = ToolCall(id="c", function="f", arguments={"x": [[1]], "y": 2})
    assert flat.arguments == {"x": [[1]], "y": 2} and flat.parse_error is None


def test_model_event_records_full_tool_infos() -> None:
    event = ModelEvent(model="m", tools=[ToolDef(st.add()).info])
    assert event.tools[0].name == "add" and event.tools[0].parameters.properties["x"].type == "integer"


def test_naive_datetime_helper_is_utc() -> None:
    from orchestrator.tool._tool_def import deserialize_arguments

    parsed = ToolDef(parity_probe()).parsed
    assert deserialize_arguments(parsed, {"kind": "k", "when": "2024-01-01T00:00:00"})["when"].tzinfo == UTC
