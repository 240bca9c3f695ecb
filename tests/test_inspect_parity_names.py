"""The names a port of Inspect AI code imports exist and behave as Inspect's do."""

from __future__ import annotations

import pytest

from orchestrator.dispatch import InProcessDispatcher
from orchestrator.eval import Task
from orchestrator.eval._log_file import EvalSample
from orchestrator.log import ModelEvent, ToolEvent, Transcript, bind_transcript
from orchestrator.model import (
    ChatMessageAssistant,
    ContentDocument,
    ContentReasoning,
    ContentToolUse,
    GenerateConfig,
    GenerateConfigArgs,
    ModelError,
    ModelName,
    ModelOutput,
    get_model,
)
from orchestrator.util import (
    OutputLimitExceededError,
    SandboxEnvironment,
    SandboxEnvironmentLimits,
    override_max_read_file_size,
)
from tests.support import sample_tools as st
from tests.support.execution import calls, run_turn


@pytest.mark.parametrize(
    ("spec", "matches"),
    # What Inspect's ModelName("openai/gpt-4o") == spec returned for each spec.
    [("gpt", True), ("openai/gpt-4o", True), ("anthropic/gpt", True), ("openai/claude", False), ("claude", False),
     ("gpt-4o-mini", False)],
)
def test_model_name_matching(spec: str, matches: bool) -> None:
    assert (ModelName("openai/gpt-4o") == spec) is matches


def test_model_name_of_a_model_and_without_an_api() -> None:
    name = ModelName(get_model("mockllm/model"))
    assert str(name) == "mockllm/model" and name == "mockllm/model"
    with pytest.raises(ValueError, match="API not specified for model name"):
        ModelName("gpt-4")


def test_generate_config_args_are_the_config_fields() -> None:
    assert set(GenerateConfigArgs.__annotations__) == set(GenerateConfig.model_fields)
    args: GenerateConfigArgs = {"temperature": 0.0, "max_tokens": 5}
    assert GenerateConfig(**args).max_tokens == 5


def test_content_types_travel_in_messages() -> None:
    message = ChatMessageAssistant(content=[
        ContentReasoning(reasoning="think"),
        ContentDocument(document="data:application/pdf;base64,AA==", filename="a.pdf", mime_type="application/pdf"),
        ContentToolUse(tool_type="web_search", id="w", name="search", arguments="{}", result="r"),
    ])
    again = ChatMessageAssistant.model_validate_json(message.model_dump_json())
    assert [part.type for part in again.content] == ["reasoning", "document", "tool_use"]


def test_eval_sample_transcript_is_its_events() -> None:
    event = ToolEvent(id="c", function="add")
    sample = EvalSample(id=1, input="x", events=[event])
    assert sample.transcript.events == [event]


async def test_tool_event_names_its_message_and_is_not_pending() -> None:
    result, transcript = await run_turn(InProcessDispatcher(), calls(("add", {"x": 1, "y": 2}), ("nope", {})),
                                        [st.add()])
    events = transcript.find(ToolEvent)
    assert [e.message_id for e in events] == [m.id for m in result.messages]
    assert [e.pending for e in events] == [None, None]


async def test_model_event_tools_are_full_tool_infos() -> None:
    transcript = Transcript()
    with bind_transcript(transcript):
        await get_model("scripted", outputs=["ok"]).generate("x", tools=[st.add()])
    [event] = transcript.find(ModelEvent)
    assert event.tools[0].name == "add" and event.tools[0].description
    assert set(event.tools[0].parameters.properties) == {"x", "y"}


def test_sandbox_limits_and_read_override() -> None:
    assert SandboxEnvironmentLimits.MAX_READ_FILE_SIZE == 100 * 1024**2
    assert SandboxEnvironmentLimits.MAX_READ_FILE_SIZE_STR == "100 MiB"
    with override_max_read_file_size(2048):
        assert (SandboxEnvironmentLimits.MAX_READ_FILE_SIZE, SandboxEnvironmentLimits.MAX_READ_FILE_SIZE_STR) == (
            2048, "2 KiB")
    assert SandboxEnvironmentLimits.MAX_READ_FILE_SIZE == 100 * 1024**2


@pytest.fixture
async def local_sandbox():
    from workers.sandbox.local import LocalSandboxDriver

    driver = LocalSandboxDriver()
    env = await driver.create()
    try:
        yield env
    finally:
        await driver.aclose()


@pytest.mark.slow  # opens a local sandbox (a child process)
async def test_read_file_size_override_applies_to_a_real_sandbox(local_sandbox) -> None:
    await local_sandbox.write_file("big.txt", "x" * 4096)
    with override_max_read_file_size(1024), pytest.raises(OutputLimitExceededError) as err:
        await local_sandbox.read_file("big.txt")
    assert err.value.limit_str == "1 KiB"
    assert await local_sandbox.read_file("big.txt") == "x" * 4096  # default limit again


@pytest.mark.slow  # opens a local sandbox (a child process)
async def test_non_executable_file_in_the_local_sandbox_raises_permission_error(local_sandbox) -> None:
    await local_sandbox.write_file("s.sh", "#!/bin/sh\necho hi\n")
    with pytest.raises(PermissionError) as err:
        await local_sandbox.exec(["./s.sh"])
    assert (err.value.errno, err.value.filename) == (13, "./s.sh")
    assert (await local_sandbox.exec(["sh", "s.sh"])).stdout == "hi\n"
    assert (await local_sandbox.exec(["sh", "-c", "exit 126"])).returncode == 126  # a 126 exit stays a result


async def test_sandbox_lifecycle_hooks_exist() -> None:
    assert await SandboxEnvironment.task_init("task", None) is None
    assert await SandboxEnvironment.task_cleanup("task", None, True) is None
    with pytest.raises(NotImplementedError, match="drivers"):
        await SandboxEnvironment.sample_init("task", None, {})


def test_task_without_a_dataset_has_inspects_default_sample() -> None:
    samples = list(Task().dataset)
    assert [(s.input, s.target) for s in samples] == [("prompt", "")]


async def test_mockllm_custom_outputs_run_out_with_an_error() -> None:
    model = get_model("mockllm/model", custom_outputs=[ModelOutput.from_content("mockllm", "first")])
    assert (await model.generate("x")).completion == "first"
    with pytest.raises(ModelError, match="custom_outputs ran out of values"):
        await model.generate("x")


async def test_mockllm_custom_outputs_callable_sees_the_request() -> None:
    def answer(input, tools, tool_choice, config):
        return ModelOutput.from_content("mockllm", f"{len(input)} message(s), {len(tools)} tool(s)")

    model = get_model("mockllm/model", custom_outputs=answer)
    assert (await model.generate("x", tools=[st.add()])).completion == "1 message(s), 1 tool(s)"


async def test_mockllm_without_custom_outputs_answers_the_default() -> None:
    assert (await get_model("mockllm/model").generate("x")).completion == "Default output from mockllm/model"
