"""The scripted model, get_model resolution, the provider registry, the active model and Model's loop."""

from __future__ import annotations

import asyncio

import pytest

from orchestrator.log import ModelEvent, SpanBeginEvent, Transcript, bind_transcript
from orchestrator.model import (
    ChatMessageUser,
    GenerateConfig,
    Model,
    ModelAPI,
    ModelError,
    ModelOutput,
    ModelUsage,
    RetryPolicy,
    active_model,
    get_model,
    model_context,
    model_providers,
    modelapi,
    usage_scope,
)
from orchestrator.model._generate_config import _active_config
from orchestrator.model._providers.scripted import DEFAULT_OUTPUT
from orchestrator.tool import ToolDef, tool

pytestmark = pytest.mark.timeout(30)


@tool(name="model_test_echo")
def echo():
    async def execute(text: str) -> str:
        """Echo text back.

        Args:
            text: What to echo.
        """
        return text

    return execute


async def test_replays_outputs_in_order_then_default() -> None:
    call = ModelOutput.for_tool_call("scripted", "model_test_echo", {"text": "hi"}, tool_call_id="c1")
    model = get_model("scripted", outputs=["first", call])
    assert (await model.generate("a")).completion == "first"
    second = await model.generate("b")
    assert second.stop_reason == "tool_calls" and second.message.tool_calls[0].id == "c1"
    third = await model.generate("c")
    assert third.completion == DEFAULT_OUTPUT and third.stop_reason == "stop"


@pytest.mark.parametrize("name", ["scripted", "mockllm/model"])
async def test_default_output_when_given_nothing(name: str) -> None:
    model = get_model(name)
    assert str(model) == (name if "/" in name else "scripted/scripted")
    output = await model.generate("anything")
    assert output.completion == "Default output from mockllm/model"
    assert output.message.source == "generate"


async def test_single_output_and_generator_outputs() -> None:
    assert (await get_model("scripted", outputs="only").generate("x")).completion == "only"
    endless = get_model("scripted", outputs=(f"turn {i}" for i in range(10**9)))
    assert [(await endless.generate("x")).completion for _ in range(3)] == ["turn 0", "turn 1", "turn 2"]


async def test_sync_policy_sees_messages_and_tool_infos() -> None:
    seen = []

    def policy(messages, tools):
        seen.append(([m.text for m in messages], [t.name for t in tools]))
        return f"{len(messages)} messages"

    model = get_model("scripted", policy=policy)
    output = await model.generate([ChatMessageUser(content="one"), ChatMessageUser(content="two")],
                                  tools=[echo(), ToolDef(echo(), name="echo2"), ToolDef(echo(), name="echo3").info])
    assert output.completion == "2 messages"
    assert seen == [(["one", "two"], ["model_test_echo", "echo2", "echo3"])]


async def test_async_policy_returning_model_output() -> None:
    async def policy(messages, tools):
        await asyncio.sleep(0)
        return ModelOutput.for_tool_call("p", tools[0].name, {"text": messages[-1].text})

    output = await get_model("scripted", policy=policy).generate("ping", tools=[echo()])
    assert output.message.tool_calls[0].arguments == {"text": "ping"}


async def test_policy_returning_none_gives_default_output() -> None:
    output = await get_model("scripted", policy=lambda m, t: None).generate("x")
    assert output.completion == DEFAULT_OUTPUT


async def test_returned_outputs_are_copies() -> None:
    shared = ModelOutput.from_content("scripted", "original")
    model = get_model("scripted", policy=lambda m, t: shared)
    first = await model.generate("x")
    first.completion = "mutated by the caller"
    assert (await model.generate("x")).completion == "original"
    assert shared.completion == "original"


async def test_each_get_model_gets_its_own_replay_queue() -> None:
    a = get_model("scripted", outputs=["one", "two"])
    b = get_model("scripted", outputs=["one", "two"])
    assert a is not b
    await a.generate("x")
    assert (await b.generate("x")).completion == "one"


def test_outputs_and_policy_together_are_rejected() -> None:
    with pytest.raises(ValueError, match="either outputs or a policy"):
        get_model("scripted", outputs=["a"], policy=lambda m, t: "b")


async def test_bad_policy_result_is_a_model_error() -> None:
    with pytest.raises(ModelError, match="TypeError"):
        await get_model("scripted", policy=lambda m, t: 42).generate("x")


def test_unknown_provider() -> None:
    with pytest.raises(ValueError, match="Unknown model provider 'nope'"):
        get_model("nope/model")


async def test_model_event_span_and_usage() -> None:
    usage = ModelUsage(input_tokens=7, output_tokens=3, total_tokens=10)
    model = get_model("scripted", outputs=[ModelOutput(choices=ModelOutput.from_content("s", "hi").choices,
                                                       usage=usage)])
    t = Transcript()
    with bind_transcript(t), usage_scope("sample") as counter:
        output = await model.generate("hello", tools=[echo()])
    assert output.model == "scripted" and output.time is not None
    [begin] = t.find(SpanBeginEvent)
    [event] = t.find(ModelEvent)
    assert (begin.type, begin.name) == ("model", "scripted/scripted")
    assert event.span_id == begin.id and event.input_messages == 1 and event.retries == 0
    assert [t.name for t in event.tools] == ["model_test_echo"]
    assert event.tools[0].description and event.tool_choice == "auto"
    assert event.output.completion == "hi"
    # Priced as the price table says (the scripted model costs nothing).
    assert counter.own.total_tokens == 10
    assert counter.by_model == {"scripted/scripted": usage.model_copy(update={"total_cost": 0.0})}


# -- the active model ----------------------------------------------------------------------------


async def test_get_model_without_name_returns_the_active_model_in_nested_tasks() -> None:
    model = get_model("scripted", outputs=["from the active model"])
    assert active_model() is None
    with model_context(model):
        # A nested run started as a task inherits the context, hence the model.
        nested = await asyncio.create_task(_resolve_in_task())
        assert nested is model
    assert active_model() is None


async def _resolve_in_task() -> Model:
    return get_model()


def test_get_model_without_name_falls_back_to_environment(monkeypatch) -> None:
    monkeypatch.delenv("TOOLFLEET_MODEL", raising=False)
    with pytest.raises(ValueError, match="No model given"):
        get_model()
    monkeypatch.setenv("TOOLFLEET_MODEL", "mockllm/model")
    assert str(get_model()) == "mockllm/model"


def test_get_model_of_a_model_returns_it_or_a_reconfigured_copy() -> None:
    model = get_model("scripted")
    assert get_model(model) is model
    hot = get_model(model, config=GenerateConfig(temperature=0.9))
    assert hot is not model and hot.api is model.api and hot.config.temperature == 0.9


# -- Model's loop with a provider registered by a test --------------------------------------------


@modelapi("model-test-probe")
class ProbeAPI(ModelAPI):
    """Records the merged config; fails the first ``fail`` calls with a retryable error."""

    def __init__(self, model_name, base_url=None, api_key=None, config=None, fail: int = 0, hang: int = 0):
        super().__init__(model_name, base_url, api_key, config)
        self.fail, self.hang, self.configs = fail, hang, []

    async def generate(self, input, tools, tool_choice, config):
        self.configs.append(config)
        if self.hang:
            self.hang -= 1
            await asyncio.Event().wait()  # never set: only the per-attempt timeout ends this
        if self.fail:
            self.fail -= 1
            raise ConnectionError("transient")
        return ModelOutput.from_content(self.model_name, "ok")

    def should_retry(self, ex):
        return isinstance(ex, ConnectionError)


FAST = RetryPolicy(max_retries=2, initial_delay=0.001, max_delay=0.01, max_elapsed=5)


def test_registered_provider_is_listed_and_memoized() -> None:
    assert {"openai", "scripted", "mockllm", "model-test-probe"} <= set(model_providers())
    assert get_model("model-test-probe/a") is get_model("model-test-probe/a")
    assert get_model("model-test-probe/a") is not get_model("model-test-probe/b")
    assert get_model("model-test-probe/a", memoize=False) is not get_model("model-test-probe/a")


async def test_config_precedence_ambient_then_model_then_call() -> None:
    model = get_model("model-test-probe/cfg", memoize=False, config=GenerateConfig(temperature=0.1, top_p=0.2))
    token = _active_config.set(GenerateConfig(temperature=0.5, seed=3, max_tokens=9))
    try:
        await model.generate("x", config=GenerateConfig(max_tokens=100))
    finally:
        _active_config.reset(token)
    config = model.api.configs[0]
    assert (config.temperature, config.top_p, config.seed, config.max_tokens) == (0.1, 0.2, 3, 100)


async def test_provider_judged_transient_errors_are_retried() -> None:
    model = get_model("model-test-probe/r", memoize=False, retry=FAST, fail=2)
    t = Transcript()
    with bind_transcript(t):
        assert (await model.generate("x")).completion == "ok"
    assert t.find(ModelEvent)[0].retries == 2


async def test_retries_exhausted_raise_model_error_chained() -> None:
    model = get_model("model-test-probe/r", memoize=False, retry=FAST, fail=5)
    with pytest.raises(ModelError) as info:
        await model.generate("x")
    assert isinstance(info.value.__cause__, ConnectionError) and info.value.retries == 2


async def test_a_hung_attempt_is_bounded_by_the_timeout_and_retried() -> None:
    model = get_model("model-test-probe/h", memoize=False, retry=FAST, hang=1)
    output = await model.generate("x", config=GenerateConfig(timeout=0.05))
    assert output.completion == "ok" and len(model.api.configs) == 2


async def test_connection_limit_bounds_requests_in_flight() -> None:
    in_flight, peak = 0, 0

    @modelapi("model-test-limited")
    class Limited(ModelAPI):
        async def generate(self, input, tools, tool_choice, config):
            nonlocal in_flight, peak
            in_flight += 1
            peak = max(peak, in_flight)
            await asyncio.sleep(0.001)
            in_flight -= 1
            return ModelOutput.from_content(self.model_name, "ok")

        def connection_limit(self):
            return 2

    model = get_model("model-test-limited/x", memoize=False)
    await asyncio.gather(*(model.generate("x") for _ in range(10)))
    assert peak == 2


async def test_replayed_outputs_get_fresh_message_ids() -> None:
    shared = ModelOutput.from_content("scripted", "same")
    model = get_model("scripted", outputs=[shared, shared])
    first, second = await model.generate("x"), await model.generate("x")
    assert len({shared.message.id, first.message.id, second.message.id}) == 3


async def test_model_event_keeps_what_the_model_said_when_the_caller_edits_the_output() -> None:
    t = Transcript()
    with bind_transcript(t):
        output = await get_model("scripted", outputs=["the answer"]).generate("x")
    output.completion = "the answer\n\n[edited by the agent loop]"
    assert t.find(ModelEvent)[0].output.completion == "the answer"
    assert t.find(ModelEvent)[0].output.message.id == output.message.id


async def test_model_event_keeps_the_output_when_the_caller_edits_its_lists_and_content_parts() -> None:
    from orchestrator.tool import ToolCall
    from orchestrator.tool._content import ContentText

    said = ModelOutput.for_tool_calls("scripted", [ToolCall(id="c1", function="f", arguments={"x": 1})], "calling f")
    said.message.content = [ContentText(text="calling f")]
    said.message.metadata = {"k": "v"}
    said.usage = ModelUsage(input_tokens=3, output_tokens=2, total_tokens=5)
    t = Transcript()
    with bind_transcript(t):
        output = await get_model("scripted", outputs=[said]).generate("x")
    output.message.tool_calls.append(ToolCall(id="c2", function="g", arguments={}))
    output.message.content.append(ContentText(text="appended"))
    output.message.metadata["k"] = "edited"
    output.choices.append(output.choices[0])
    output.completion = "replaced"
    [event] = t.find(ModelEvent)
    assert [c.id for c in event.output.message.tool_calls] == ["c1"]
    assert event.output.completion == "calling f" and len(event.output.message.content) == 1
    assert event.output.message.metadata == {"k": "v"} and len(event.output.choices) == 1
    assert event.output.usage is event.usage and event.usage.total_tokens == 5  # one usage object per call, not two


async def test_model_span_is_a_child_of_the_enclosing_span() -> None:
    from orchestrator.log import span

    t = Transcript()
    with bind_transcript(t), span("researcher", type="agent") as agent_span:
        await get_model("scripted").generate("x")
    model_begin = next(e for e in t.find(SpanBeginEvent) if e.type == "model")
    assert model_begin.parent_id == agent_span
    assert t.find(ModelEvent)[0].span_id == model_begin.id
