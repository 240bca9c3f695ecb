"""Differences found by checking toolfleet against inspect-ai 0.3.285 itself (its own unit tests, run
with the imports renamed, and held-out scenarios run side by side on both). Each test states the
behaviour Inspect has, in our words."""

from __future__ import annotations

import pytest

from orchestrator.agent import AgentState, agent, as_tool
from orchestrator.eval import Task, eval
from orchestrator.model import ChatMessageAssistant, ModelOutput, execute_tools
from orchestrator.tool import ContentDocument, ContentText, ToolCall, ToolDef, ToolParam, ToolParams, tool
from orchestrator.util import LimitExceededError


def _turn(function: str, arguments: dict) -> list:
    return [ChatMessageAssistant(content="", tool_calls=[ToolCall(id="c1", function=function, arguments=arguments)])]


async def test_tooldef_with_explicit_params_needs_no_docstring_and_runs_as_declared() -> None:
    # Inspect: a ToolDef given its name, description and ToolParams is taken as written (no
    # docstring is required of the function) and the call runs with the declared names, even
    # into **kwargs.
    async def execute(x: int, **options: str) -> str:
        return f"{x}:{sorted(options.items())}"

    definition = ToolDef(
        execute,
        name="configure",
        description="Configure something.",
        parameters=ToolParams(properties={"x": ToolParam(type="integer"), "mode": ToolParam(type="string")},
                              required=["x", "mode"]),
    )
    messages, _ = await execute_tools(_turn("configure", {"x": 2, "mode": "fast"}), [definition])
    assert messages[0].error is None
    assert messages[0].text == "2:[('mode', 'fast')]"


async def test_a_docstringless_function_without_explicit_params_is_still_refused() -> None:
    async def execute(x: int) -> str:
        return str(x)

    with pytest.raises(ValueError, match="Description not provided for parameter 'x'"):
        ToolDef(execute, name="bare", description="A bare tool.")


def test_content_document_infers_its_file_name_and_type() -> None:
    # Inspect fills filename and mime_type from the document when they are not given.
    report = ContentDocument(document="/path/to/report.pdf")
    assert (report.filename, report.mime_type) == ("report.pdf", "application/pdf")
    csv = ContentDocument(document="data:text/csv;base64,YSxi")
    assert (csv.filename, csv.mime_type) == ("document.csv", "text/csv")
    unknown = ContentDocument(document="notes.zzz")
    assert unknown.mime_type == "application/octet-stream"
    named = ContentDocument(document="/x/a.bin", filename="given.pdf", mime_type="application/pdf")
    assert (named.filename, named.mime_type) == ("given.pdf", "application/pdf")


def test_deprecated_sample_limit_exceeded_error_name_still_resolves() -> None:
    from orchestrator.solver import SampleLimitExceededError  # type: ignore[attr-defined]

    assert SampleLimitExceededError is LimitExceededError


@agent
def echoer():
    async def execute(state: AgentState, times: int = 2) -> AgentState:
        """Echo the last message.

        Args:
            state: Input state.
            times: How many times to repeat it.
        """
        state.messages.append(ChatMessageAssistant(content=" ".join([state.messages[-1].text] * times)))
        return state

    return execute


def test_as_tool_describes_its_input_as_inspect_does() -> None:
    properties = ToolDef(as_tool(echoer())).parameters.properties
    assert properties["input"].description == "Input message."
    assert properties["times"].description == "How many times to repeat it."


def test_for_tool_call_has_inspects_default_text() -> None:
    # Inspect's mockllm-style outputs carry "tool call for tool <name>" beside the call, so a
    # transcript (and a react completion that appends the answer) reads the same in both.
    output = ModelOutput.for_tool_call("mockllm/model", "add", {"x": 1})
    assert output.message.text == "tool call for tool add"
    assert ModelOutput.for_tool_call("m", "add", {}, content="").message.text == ""


def test_eval_accepts_inspects_display_names() -> None:
    # Inspect's display values "plain", "full" and "conversation" are accepted (plain is line
    # output; full and conversation are the live view).
    log = eval(Task(), model="mockllm/model", display="plain")[0]
    assert log.status == "success"


async def test_structured_text_result_is_kept_as_parts() -> None:
    # Documented difference: a list result stays a list of parts (Inspect str()-coerces lists that
    # mix Content with plain strings).
    @tool
    def parts():
        async def execute() -> list:
            """Return parts."""
            return [ContentText(text="header"), "body"]

        return execute

    messages, _ = await execute_tools(_turn("parts", {}), [parts()])
    assert [p.text for p in messages[0].content] == ["header", "body"]


async def test_validation_does_not_write_defaults_into_the_models_call() -> None:
    # Inspect leaves the ToolCall as the model sent it; the tool still gets its defaults.
    @tool
    def greet():
        async def execute(name: str, greeting: str = "hello") -> str:
            """Greet someone.

            Args:
                name: Who.
                greeting: How.
            """
            return f"{greeting} {name}"

        return execute

    turn = _turn("greet", {"name": "ada"})
    messages, _ = await execute_tools(turn, [greet()])
    assert messages[0].text == "hello ada"
    assert turn[0].tool_calls[0].arguments == {"name": "ada"}


@pytest.mark.parametrize(("make", "text"), [
    ("message_limit", "Message limit value must be a non-negative integer or None: -1"),
    ("token_limit", "Token limit value must be a non-negative integer or None: -1"),
    ("time_limit", "Time limit value must be a non-negative float or None: -1"),
])
def test_negative_limits_are_refused_in_inspects_words(make: str, text: str) -> None:
    import orchestrator.util as util

    with pytest.raises(ValueError) as raised:  # noqa: PT011 - the exact message is asserted below
        getattr(util, make)(-1)
    assert str(raised.value) == text


def test_content_parts_carry_provider_internal_data_and_omit_it_when_absent() -> None:
    # Inspect's content parts have an ``internal`` field (provider data; content_only drops it).
    from orchestrator.tool import ContentImage

    part = ContentText(text="kept", internal={"provider": "x"})
    assert part.internal == {"provider": "x"}
    assert "internal" not in ContentImage(image="data:image/png;base64,AAAA").model_dump()
