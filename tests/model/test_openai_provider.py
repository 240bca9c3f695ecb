"""openai/<model>: the real openai SDK against a chat-completions server on loopback."""

from __future__ import annotations

import pytest

from orchestrator.log import ModelEvent, SpanBeginEvent, Transcript, bind_transcript
from orchestrator.model import (
    ChatMessageAssistant,
    ChatMessageSystem,
    ChatMessageTool,
    ChatMessageUser,
    GenerateConfig,
    ModelError,
    RetryPolicy,
    get_model,
    usage_scope,
)
from orchestrator.tool import ToolCall, ToolCallError, ToolDef, ToolFunction, tool
from tests.support.openai_server import OpenAIServer, completion, error, tool_call

pytestmark = pytest.mark.timeout(60)


@tool(name="model_test_add")
def add():
    async def execute(x: int, y: int = 0) -> int:
        """Add two integers.

        Args:
            x: First addend.
            y: Second addend.
        """
        return x + y

    return execute


ADD_SCHEMA = {
    "type": "function",
    "function": {
        "name": "model_test_add",
        "description": "Add two integers.",
        "parameters": {
            "type": "object",
            "properties": {
                "x": {"type": "integer", "description": "First addend."},
                "y": {"type": "integer", "description": "Second addend.", "default": 0},
            },
            "required": ["x"],
            "additionalProperties": False,
        },
    },
}


def model_for(server: OpenAIServer, retry: RetryPolicy | None = None, **kwargs):
    return get_model("openai/test-model", base_url=server.base_url, api_key="test-key",
                     retry=retry, memoize=False, **kwargs)


async def test_plain_response(openai_server: OpenAIServer) -> None:
    openai_server.enqueue(completion("Hello there", usage=(12, 3)))
    model = model_for(openai_server)
    with usage_scope("sample") as usage:
        output = await model.generate("hi")
    assert output.completion == "Hello there"
    assert output.stop_reason == "stop"
    assert output.message.tool_calls is None
    assert (output.usage.input_tokens, output.usage.output_tokens, output.usage.total_tokens) == (12, 3, 15)
    assert usage.own.total_tokens == 15
    [request] = openai_server.requests
    assert request.path == "/v1/chat/completions"
    assert request.headers["authorization"] == "Bearer test-key"
    assert request.body["model"] == "test-model"
    assert request.body["messages"] == [{"role": "user", "content": "hi"}]
    assert "tools" not in request.body and "tool_choice" not in request.body
    await model.aclose()


async def test_tool_call_response_and_tool_schema_sent(openai_server: OpenAIServer) -> None:
    openai_server.enqueue(completion(tool_calls=[tool_call("model_test_add", {"x": 1, "y": 2}, id="call_1")]))
    output = await model_for(openai_server).generate("add 1 and 2", tools=[add()])
    assert output.stop_reason == "tool_calls"
    assert output.message.tool_calls == [ToolCall(id="call_1", function="model_test_add", arguments={"x": 1, "y": 2})]
    body = openai_server.bodies[0]
    assert body["tools"] == [ADD_SCHEMA]
    assert body["tool_choice"] == "auto"


@pytest.mark.parametrize(
    ("choice", "wire"),
    [
        ("auto", "auto"),
        ("any", "required"),
        ("none", "none"),
        (ToolFunction(name="model_test_add"), {"type": "function", "function": {"name": "model_test_add"}}),
    ],
)
async def test_tool_choice_in_provider_format(openai_server: OpenAIServer, choice, wire) -> None:
    openai_server.enqueue(completion("ok"))
    # A ToolDef and a ToolInfo are accepted as well as a Tool instance.
    tools = [ToolDef(add()).info] if choice == "none" else [ToolDef(add())]
    await model_for(openai_server).generate("x", tools=tools, tool_choice=choice,
                                            config=GenerateConfig(parallel_tool_calls=False))
    body = openai_server.bodies[0]
    assert body["tool_choice"] == wire
    assert body["tools"] == [ADD_SCHEMA]
    assert body["parallel_tool_calls"] is False


@pytest.mark.parametrize("raw", ['{"x": 1,', "{x: 1}", '{"x": 1}\''])
async def test_malformed_arguments_become_parse_error(openai_server: OpenAIServer, raw: str) -> None:
    openai_server.enqueue(completion(tool_calls=[tool_call("model_test_add", raw, id="call_bad"),
                                                 tool_call("model_test_add", {"x": 5}, id="call_ok")]))
    output = await model_for(openai_server).generate("x", tools=[add()])
    bad, ok = output.message.tool_calls
    assert bad.id == "call_bad" and bad.arguments == {} and raw in bad.parse_error
    assert ok.parse_error is None and ok.arguments == {"x": 5}


@pytest.mark.parametrize(("raw", "arguments"), [("[1, 2]", {"x": [1, 2]}),
                                                ("not json at all", {"x": "not json at all"}),
                                               ('{"x": 1}""', {"x": 1})])
async def test_non_object_arguments_are_recovered_as_inspect_does(openai_server: OpenAIServer, raw: str,
                                                                  arguments: dict) -> None:
    # Inspect reads non-object text as YAML bound to the first parameter, and drops stray quotes.
    openai_server.enqueue(completion(tool_calls=[tool_call("model_test_add", raw, id="c")]))
    output = await model_for(openai_server).generate("x", tools=[add()])
    assert output.message.tool_calls[0].arguments == arguments and output.message.tool_calls[0].parse_error is None


async def test_empty_arguments_mean_no_arguments(openai_server: OpenAIServer) -> None:
    openai_server.enqueue(completion(tool_calls=[tool_call("model_test_add", "", id="c")]))
    output = await model_for(openai_server).generate("x", tools=[add()])
    assert output.message.tool_calls[0].arguments == {} and output.message.tool_calls[0].parse_error is None


@pytest.mark.parametrize("status", [429, 500, 503])
async def test_transient_error_then_success_is_retried(openai_server: OpenAIServer, fast_retry: RetryPolicy,
                                                      status: int) -> None:
    openai_server.enqueue(error(status, "slow down", headers={"retry-after": "0"}), completion("after retry"))
    t = Transcript()
    with bind_transcript(t):
        output = await model_for(openai_server, fast_retry).generate("hi")
    assert output.completion == "after retry"
    assert len(openai_server.requests) == 2
    [event] = t.find(ModelEvent)
    assert event.retries == 1 and event.error is None


async def test_retries_are_bounded_in_count(openai_server: OpenAIServer, fast_retry: RetryPolicy) -> None:
    openai_server.enqueue(*[error(500, "boom") for _ in range(10)])
    t = Transcript()
    with bind_transcript(t), pytest.raises(ModelError) as info:
        await model_for(openai_server, fast_retry).generate("hi")
    assert info.value.retries == 3 and info.value.retryable
    assert len(openai_server.requests) == 4  # first try + max_retries
    [event] = t.find(ModelEvent)
    assert event.retries == 3 and "boom" in event.error


async def test_generate_config_max_retries_overrides_policy(openai_server: OpenAIServer,
                                                            fast_retry: RetryPolicy) -> None:
    openai_server.enqueue(*[error(429, "rate") for _ in range(5)])
    with pytest.raises(ModelError):
        await model_for(openai_server, fast_retry).generate("hi", config=GenerateConfig(max_retries=1))
    assert len(openai_server.requests) == 2


async def test_retry_after_beyond_time_budget_gives_up(openai_server: OpenAIServer) -> None:
    # The server asks for 30 s; the policy's total budget is 1 s, so honouring Retry-After means giving up now.
    openai_server.enqueue(error(429, "rate", headers={"retry-after": "30"}), completion("never"))
    policy = RetryPolicy(max_retries=5, initial_delay=0.01, max_elapsed=1)
    with pytest.raises(ModelError) as info:
        await model_for(openai_server, policy).generate("hi")
    assert info.value.retries == 0 and len(openai_server.requests) == 1


async def test_client_error_is_not_retried(openai_server: OpenAIServer, fast_retry: RetryPolicy) -> None:
    openai_server.enqueue(error(401, "bad key"), completion("never"))
    with pytest.raises(ModelError) as info:
        await model_for(openai_server, fast_retry).generate("hi")
    assert not info.value.retryable and info.value.retries == 0
    assert "bad key" in str(info.value)
    assert len(openai_server.requests) == 1


@pytest.mark.parametrize(
    ("message", "code"),
    [
        ("This model's maximum context length is 4096 tokens. However, you requested 5000 tokens.", None),
        ("Input too long", "context_length_exceeded"),
    ],
)
async def test_context_length_error_is_model_length_output(openai_server: OpenAIServer, message: str,
                                                           code: str | None) -> None:
    openai_server.enqueue(error(400, message, code=code))
    output = await model_for(openai_server).generate("a very long prompt")
    assert output.stop_reason == "model_length"
    assert len(openai_server.requests) == 1


async def test_other_bad_request_raises(openai_server: OpenAIServer) -> None:
    openai_server.enqueue(error(400, "temperature must be <= 2"))
    with pytest.raises(ModelError, match="temperature"):
        await model_for(openai_server).generate("hi")


@pytest.mark.parametrize(("finish", "stop"), [("length", "max_tokens"), ("content_filter", "content_filter"),
                                              ("stop", "stop"), ("weird", "unknown")])
async def test_finish_reason_mapping(openai_server: OpenAIServer, finish: str, stop: str) -> None:
    openai_server.enqueue(completion("text", finish_reason=finish))
    output = await model_for(openai_server).generate("hi")
    assert output.stop_reason == stop


async def test_message_history_and_config_sent_in_wire_format(openai_server: OpenAIServer) -> None:
    openai_server.enqueue(completion("done"))
    history = [
        ChatMessageSystem(content="You are terse."),
        ChatMessageUser(content="add 1 and 2"),
        ChatMessageAssistant(content="", tool_calls=[
            ToolCall(id="c1", function="model_test_add", arguments={"x": 1, "y": 2}),
            ToolCall(id="c2", function="model_test_add", arguments={"x": "?"}),
        ]),
        ChatMessageTool(content="3", tool_call_id="c1", function="model_test_add"),
        ChatMessageTool(content="", tool_call_id="c2", function="model_test_add",
                        error=ToolCallError(type="parsing", message="x: '?' is not of type 'integer'")),
    ]
    config = GenerateConfig(max_tokens=50, temperature=0.0, top_p=0.5, seed=7, stop_seqs=["END"])
    await model_for(openai_server).generate(history, tools=[add()], config=config)
    body = openai_server.bodies[0]
    assert body["messages"] == [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "add 1 and 2"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "model_test_add", "arguments": '{"x": 1, "y": 2}'}},
            {"id": "c2", "type": "function", "function": {"name": "model_test_add", "arguments": '{"x": "?"}'}},
        ]},
        {"role": "tool", "tool_call_id": "c1", "content": "3"},
        {"role": "tool", "tool_call_id": "c2", "content": "Error: x: '?' is not of type 'integer'"},
    ]
    sent = (body["max_tokens"], body["temperature"], body["top_p"], body["seed"], body["stop"])
    assert sent == (50, 0.0, 0.5, 7, ["END"])


async def test_base_url_and_key_from_environment(openai_server: OpenAIServer, monkeypatch) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", openai_server.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "env-key")
    openai_server.enqueue(completion("from env"))
    output = await get_model("openai/env-model", memoize=False).generate("hi")
    assert output.completion == "from env"
    assert openai_server.requests[0].headers["authorization"] == "Bearer env-key"
    assert openai_server.bodies[0]["model"] == "env-model"


def test_missing_key_and_base_url_is_a_clear_error(monkeypatch) -> None:
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(ValueError, match="OPENAI_API_KEY"):
        get_model("openai/x", memoize=False)


async def test_model_event_is_inside_a_model_span(openai_server: OpenAIServer) -> None:
    openai_server.enqueue(completion(tool_calls=[tool_call("model_test_add", {"x": 1})]))
    t = Transcript()
    with bind_transcript(t):
        await model_for(openai_server).generate("hi", tools=[add()])
    [begin] = t.find(SpanBeginEvent)
    [event] = t.find(ModelEvent)
    assert begin.type == "model" and begin.name == "openai/test-model"
    assert event.span_id == begin.id
    assert event.model == "openai/test-model"
    assert [t.name for t in event.tools] == ["model_test_add"] and event.tool_choice == "auto"
    assert event.usage.total_tokens == 15 and event.output.stop_reason == "tool_calls"


async def test_concurrent_requests_share_one_client(openai_server: OpenAIServer) -> None:
    import asyncio

    openai_server.enqueue(*[completion(f"answer {i}") for i in range(20)])
    model = model_for(openai_server, max_connections=4)
    outputs = await asyncio.gather(*(model.generate(f"q{i}") for i in range(20)))
    assert sorted(o.completion for o in outputs) == sorted(f"answer {i}" for i in range(20))
    assert len(openai_server.requests) == 20


def test_memoized_model_works_from_successive_event_loops(openai_server: OpenAIServer) -> None:
    import asyncio

    openai_server.enqueue(completion("loop 1"), completion("loop 2"))
    kwargs = {"base_url": openai_server.base_url, "api_key": "memo-key"}
    first = get_model("openai/memo-model", **kwargs)
    assert get_model("openai/memo-model", **kwargs) is first
    # Each asyncio.run() is a new loop; a client bound to the first loop must not be reused.
    assert asyncio.run(first.generate("a")).completion == "loop 1"
    assert asyncio.run(first.generate("b")).completion == "loop 2"


async def test_model_event_serialises_to_json(openai_server: OpenAIServer) -> None:
    import json

    openai_server.enqueue(completion(tool_calls=[tool_call("model_test_add", "{oops")]))
    t = Transcript()
    with bind_transcript(t):
        await model_for(openai_server).generate("hi", tools=[add()], tool_choice=ToolFunction(name="model_test_add"))
    data = json.loads(t.find(ModelEvent)[0].model_dump_json())
    assert data["tool_choice"] == {"name": "model_test_add"}
    assert "{oops" in data["output"]["choices"][0]["message"]["tool_calls"][0]["parse_error"]


async def test_tool_calls_reported_with_finish_reason_stop_are_tool_calls(openai_server: OpenAIServer) -> None:
    # Some OpenAI-compatible servers say "stop" even when the message carries tool calls.
    openai_server.enqueue(completion(tool_calls=[tool_call("model_test_add", {"x": 1})], finish_reason="stop"))
    output = await model_for(openai_server).generate("x", tools=[add()])
    assert output.stop_reason == "tool_calls"


async def test_client_args_are_honoured(openai_server: OpenAIServer, fast_retry: RetryPolicy) -> None:
    """-M max_retries / timeout were a TypeError (the SDK's own max_retries is pinned to 0): now they bound
    toolfleet's retries and each request; other client args (default_headers) reach the SDK client."""
    openai_server.enqueue(*[error(503, "busy") for _ in range(5)])
    model = model_for(openai_server, fast_retry, max_retries=1, timeout=5, default_headers={"x-team": "evals"})
    assert model.config.max_retries == 1 and model.config.timeout == 5
    with pytest.raises(ModelError) as info:
        await model.generate("x")
    assert info.value.retries == 1 and len(openai_server.requests) == 2
    assert openai_server.requests[0].headers["x-team"] == "evals"
