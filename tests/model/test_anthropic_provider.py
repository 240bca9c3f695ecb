"""anthropic/<model>: the real anthropic SDK against a Messages-API server on loopback."""

from __future__ import annotations

import base64

import pytest

from orchestrator.log import InfoEvent, ModelEvent, Transcript, bind_transcript
from orchestrator.model import (
    ChatMessageAssistant,
    ChatMessageSystem,
    ChatMessageTool,
    ChatMessageUser,
    ContentImage,
    ContentReasoning,
    ContentText,
    GenerateConfig,
    ModelError,
    RetryPolicy,
    get_model,
    usage_scope,
)
from orchestrator.tool import ToolCall, ToolCallError, ToolFunction, tool
from tests.support.anthropic_server import (
    AnthropicServer,
    Reply,
    error,
    message,
    overloaded,
    rate_limited,
    thinking,
    tool_use,
)

pytestmark = pytest.mark.timeout(60)


@tool(name="anthropic_test_add")
def add():
    async def execute(x: int, y: int = 0) -> int:
        """Add two integers.

        Args:
            x: First addend.
            y: Second addend.
        """
        return x + y

    return execute


NO_CACHE = GenerateConfig(cache_prompt=False)  # exact request bodies, without cache breakpoints


def _sent_key(request) -> str | None:
    # SDK versions send the key as x-api-key or as a bearer token.
    bearer = request.headers.get("authorization", "").removeprefix("Bearer ")
    return request.headers.get("x-api-key") or bearer or None


def model_for(server: AnthropicServer, retry: RetryPolicy | None = None, **kwargs):
    return get_model("anthropic/claude-test", base_url=server.base_url, api_key="test-key",
                     retry=retry, memoize=False, **kwargs)


async def test_plain_response_and_request_shape(anthropic_server: AnthropicServer) -> None:
    anthropic_server.enqueue(message("Hello there", usage={"input_tokens": 12, "output_tokens": 3}))
    model = model_for(anthropic_server)
    with usage_scope("sample") as usage:
        output = await model.generate([ChatMessageSystem(content="Be brief."), ChatMessageUser(content="hi")])
    assert output.completion == "Hello there" and output.stop_reason == "stop"
    assert output.message.tool_calls is None
    assert (output.usage.input_tokens, output.usage.output_tokens, output.usage.total_tokens) == (12, 3, 15)
    assert usage.own.total_tokens == 15
    [request] = anthropic_server.requests
    assert request.path == "/v1/messages"
    assert _sent_key(request) == "test-key" and "anthropic-version" in request.headers
    assert request.body == {"model": "claude-test", "max_tokens": 4096,
                            "system": [{"type": "text", "text": "Be brief."}],
                            "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]}
    await model.aclose()


async def test_parallel_tool_use_blocks_keep_their_order(anthropic_server: AnthropicServer) -> None:
    anthropic_server.enqueue(message("Adding both.", tool_use("anthropic_test_add", {"x": 1, "y": 2}, id="toolu_a"),
                                     tool_use("anthropic_test_add", {"x": 5}, id="toolu_b")))
    output = await model_for(anthropic_server).generate("add", tools=[add()], config=NO_CACHE)
    assert output.stop_reason == "tool_calls" and output.completion == "Adding both."
    assert output.message.tool_calls == [
        ToolCall(id="toolu_a", function="anthropic_test_add", arguments={"x": 1, "y": 2}),
        ToolCall(id="toolu_b", function="anthropic_test_add", arguments={"x": 5}),
    ]
    body = anthropic_server.bodies[0]
    assert body["tools"] == [{"name": "anthropic_test_add", "description": "Add two integers.", "input_schema": {
        "type": "object",
        "properties": {
            "x": {"type": "integer", "description": "First addend."},
            "y": {"type": "integer", "description": "Second addend.", "default": 0},
        },
        "required": ["x"],
        "additionalProperties": False,
    }}]
    assert body["tool_choice"] == {"type": "auto"}


async def test_tool_results_go_back_as_one_user_turn_in_order(anthropic_server: AnthropicServer) -> None:
    anthropic_server.enqueue(message("3 and 5"))
    history = [
        ChatMessageUser(content="add"),
        ChatMessageAssistant(content="", tool_calls=[
            ToolCall(id="toolu_a", function="anthropic_test_add", arguments={"x": 1, "y": 2}),
            ToolCall(id="toolu_b", function="anthropic_test_add", arguments={"x": 5})]),
        ChatMessageTool(content="3", tool_call_id="toolu_a", function="anthropic_test_add"),
        ChatMessageTool(content="", tool_call_id="toolu_b", function="anthropic_test_add",
                        error=ToolCallError(type="parsing", message="y is missing")),
    ]
    await model_for(anthropic_server).generate(history, tools=[add()], config=NO_CACHE)
    turns = anthropic_server.bodies[0]["messages"]
    assert [t["role"] for t in turns] == ["user", "assistant", "user"]
    assert turns[1]["content"] == [
        {"type": "tool_use", "id": "toolu_a", "name": "anthropic_test_add", "input": {"x": 1, "y": 2}},
        {"type": "tool_use", "id": "toolu_b", "name": "anthropic_test_add", "input": {"x": 5}}]
    assert turns[2]["content"] == [
        {"type": "tool_result", "tool_use_id": "toolu_a", "content": [{"type": "text", "text": "3"}]},
        {"type": "tool_result", "tool_use_id": "toolu_b", "is_error": True,
         "content": [{"type": "text", "text": "Error: y is missing"}]}]


@pytest.mark.parametrize(
    ("choice", "parallel", "wire"),
    [
        ("auto", None, {"type": "auto"}),
        ("any", None, {"type": "any"}),
        ("none", None, {"type": "none"}),
        (ToolFunction(name="anthropic_test_add"), None, {"type": "tool", "name": "anthropic_test_add"}),
        ("auto", False, {"type": "auto", "disable_parallel_tool_use": True}),
    ],
)
async def test_tool_choice_in_provider_format(anthropic_server: AnthropicServer, choice, parallel, wire) -> None:
    anthropic_server.enqueue(message("ok"))
    await model_for(anthropic_server).generate("x", tools=[add()], tool_choice=choice,
                                               config=GenerateConfig(parallel_tool_calls=parallel))
    assert anthropic_server.bodies[0]["tool_choice"] == wire


async def test_images_are_sent_as_image_blocks(anthropic_server: AnthropicServer) -> None:
    anthropic_server.enqueue(message("a red dot"))
    data = base64.b64encode(b"\x89PNG fake").decode()
    user = ChatMessageUser(content=[ContentText(text="What is this?"),
                                    ContentImage(image=f"data:image/png;base64,{data}"),
                                    ContentImage(image="https://example.com/a.jpg")])
    await model_for(anthropic_server).generate([user])
    assert anthropic_server.bodies[0]["messages"][0]["content"] == [
        {"type": "text", "text": "What is this?"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}},
        {"type": "image", "source": {"type": "url", "url": "https://example.com/a.jpg"}}]


async def test_thinking_is_kept_in_history_and_log_and_sent_back(anthropic_server: AnthropicServer) -> None:
    anthropic_server.enqueue(message(thinking("Let me add.", "sig-xyz"),
                                     {"type": "redacted_thinking", "data": "opaque"},
                                     "I will add.", tool_use("anthropic_test_add", {"x": 1}, id="toolu_1")),
                             message("1"))
    model = model_for(anthropic_server)
    t = Transcript()
    with bind_transcript(t):
        output = await model.generate("add", tools=[add()], config=GenerateConfig(reasoning_tokens=2048))
    assert output.message.content == [ContentReasoning(reasoning="Let me add.", signature="sig-xyz"),
                                      ContentReasoning(reasoning="opaque", redacted=True),
                                      ContentText(text="I will add.")]
    assert output.completion == "I will add."
    logged = t.find(ModelEvent)[0].model_dump(mode="json")["output"]["choices"][0]["message"]["content"]
    assert logged[0]["type"] == "reasoning" and logged[0]["signature"] == "sig-xyz"
    first = anthropic_server.bodies[0]
    assert first["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    history = [ChatMessageUser(content="add"), output.message,
               ChatMessageTool(content="1", tool_call_id="toolu_1", function="anthropic_test_add")]
    await model.generate(history, tools=[add()])
    assert anthropic_server.bodies[1]["messages"][1]["content"] == [
        {"type": "thinking", "thinking": "Let me add.", "signature": "sig-xyz"},
        {"type": "redacted_thinking", "data": "opaque"},
        {"type": "text", "text": "I will add."},
        {"type": "tool_use", "id": "toolu_1", "name": "anthropic_test_add", "input": {"x": 1}}]


@pytest.mark.parametrize(
    ("wire", "ours"),
    [("end_turn", "stop"), ("stop_sequence", "stop"), ("max_tokens", "max_tokens"), ("refusal", "content_filter"),
     ("model_context_window_exceeded", "model_length"), ("pause_turn", "stop"), ("something_new", "unknown")],
)
async def test_stop_reason_mapping(anthropic_server: AnthropicServer, wire: str, ours: str) -> None:
    anthropic_server.enqueue(message("x", stop_reason=wire))
    assert (await model_for(anthropic_server).generate("x")).stop_reason == ours


async def test_usage_counts_cache_reads_and_writes(anthropic_server: AnthropicServer) -> None:
    anthropic_server.enqueue(message("x", usage={"input_tokens": 7, "output_tokens": 3,
                                                 "cache_creation_input_tokens": 100, "cache_read_input_tokens": 900}))
    usage = (await model_for(anthropic_server).generate("x")).usage
    assert (usage.input_tokens, usage.input_tokens_cache_write, usage.input_tokens_cache_read,
            usage.output_tokens, usage.total_tokens) == (7, 100, 900, 3, 1010)


async def test_config_in_wire_format(anthropic_server: AnthropicServer) -> None:
    anthropic_server.enqueue(message("x"))
    await model_for(anthropic_server).generate("x", config=GenerateConfig(max_tokens=99, temperature=0.2, top_p=0.9,
                                                                            stop_seqs=["STOP"]))
    body = anthropic_server.bodies[0]
    assert (body["max_tokens"], body["temperature"], body["top_p"], body["stop_sequences"]) == (99, 0.2, 0.9, ["STOP"])


@pytest.mark.parametrize("reply", [rate_limited("0"), overloaded("0"), error(500, "boom", "api_error"),
                                   error(503, "unavailable", "api_error")])
async def test_transient_errors_are_retried_and_reported(anthropic_server: AnthropicServer, fast_retry: RetryPolicy,
                                                         reply: Reply) -> None:
    anthropic_server.enqueue(reply, message("after retry"))
    t = Transcript()
    with bind_transcript(t):
        output = await model_for(anthropic_server, fast_retry).generate("hi")
    assert output.completion == "after retry" and len(anthropic_server.requests) == 2
    [event] = t.find(ModelEvent)
    assert event.retries == 1 and event.error is None


async def test_retry_after_is_honoured_within_the_time_budget(anthropic_server: AnthropicServer) -> None:
    # 30 s asked, 1 s budget: honouring retry-after means giving up now, not retrying early.
    anthropic_server.enqueue(rate_limited("30"), message("never"))
    policy = RetryPolicy(max_retries=5, initial_delay=0.01, max_elapsed=1)
    with pytest.raises(ModelError) as info:
        await model_for(anthropic_server, policy).generate("hi")
    assert info.value.retries == 0 and info.value.retryable and len(anthropic_server.requests) == 1
    assert "rate limit" in str(info.value)


async def test_connection_errors_are_retried(fast_retry: RetryPolicy) -> None:
    with AnthropicServer() as server:
        base_url = server.base_url
    model = get_model("anthropic/claude-test", base_url=base_url, api_key="k", retry=fast_retry, memoize=False)
    with pytest.raises(ModelError) as info:
        await model.generate("hi")
    assert info.value.retries == 3 and info.value.retryable and "Connection" in str(info.value)


async def test_client_errors_are_not_retried(anthropic_server: AnthropicServer, fast_retry: RetryPolicy) -> None:
    anthropic_server.enqueue(error(401, "invalid x-api-key", "authentication_error"), message("never"))
    with pytest.raises(ModelError) as info:
        await model_for(anthropic_server, fast_retry).generate("hi")
    assert not info.value.retryable and "invalid x-api-key" in str(info.value)
    assert len(anthropic_server.requests) == 1


async def test_prompt_too_long_is_a_model_length_output(anthropic_server: AnthropicServer) -> None:
    anthropic_server.enqueue(error(400, "prompt is too long: 210000 tokens > 200000 maximum"))
    output = await model_for(anthropic_server).generate("long")
    assert output.stop_reason == "model_length" and len(anthropic_server.requests) == 1


@pytest.mark.parametrize("bad_input", ["{broken", ["a", "list"], 7])
async def test_malformed_tool_input_becomes_a_parse_error(anthropic_server: AnthropicServer, bad_input) -> None:
    anthropic_server.enqueue(message(tool_use("anthropic_test_add", bad_input, id="toolu_m")))
    [call] = (await model_for(anthropic_server).generate("x", tools=[add()])).message.tool_calls
    assert call.id == "toolu_m" and call.arguments == {} and call.parse_error


@pytest.mark.parametrize(("body", "says"), [("{not json", "JSONDecodeError"),
                                            ('{"type": "message"}', "malformed Messages API response"),
                                            ("[]", "malformed Messages API response"),
                                            ('{"content": "text"}', "malformed Messages API response")])
async def test_malformed_response_bodies_fail_in_one_clear_line(anthropic_server: AnthropicServer,
                                                                fast_retry: RetryPolicy, body: str, says: str) -> None:
    anthropic_server.enqueue(Reply(body=body))
    with pytest.raises(ModelError) as info:
        await model_for(anthropic_server, fast_retry).generate("x")
    assert says in str(info.value) and "\n" not in str(info.value) and not info.value.retryable
    assert len(anthropic_server.requests) == 1


async def test_environment_gives_base_url_and_key(anthropic_server: AnthropicServer, monkeypatch) -> None:
    monkeypatch.setenv("ANTHROPIC_BASE_URL", anthropic_server.base_url)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "env-key")
    anthropic_server.enqueue(message("ok"))
    assert (await get_model("anthropic/claude-anything-9", memoize=False).generate("x")).completion == "ok"
    assert _sent_key(anthropic_server.requests[0]) == "env-key"
    assert anthropic_server.bodies[0]["model"] == "claude-anything-9"


def test_missing_key_is_a_clear_error(monkeypatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)
    with pytest.raises(ValueError, match="ANTHROPIC_API_KEY"):
        get_model("anthropic/claude-test", memoize=False)


async def test_client_args_are_honoured(anthropic_server: AnthropicServer, fast_retry: RetryPolicy) -> None:
    """-M max_retries bounds toolfleet's retries (the SDK's stay off); other client args reach the SDK."""
    anthropic_server.enqueue(*[overloaded("0") for _ in range(5)])
    model = model_for(anthropic_server, fast_retry, max_retries=1, timeout=5,
                      default_headers={"x-team": "evals"})
    assert model.config.max_retries == 1 and model.config.timeout == 5
    with pytest.raises(ModelError) as info:
        await model.generate("x")
    assert info.value.retries == 1 and len(anthropic_server.requests) == 2
    assert anthropic_server.requests[0].headers["x-team"] == "evals"


async def test_retryable_failures_are_recorded_as_they_happen(anthropic_server: AnthropicServer,
                                                              fast_retry: RetryPolicy) -> None:
    from orchestrator.eval._retry_events import reporting_retries

    anthropic_server.enqueue(rate_limited("0"), overloaded("0"), message("ok"))
    t = Transcript()
    with bind_transcript(t):
        await reporting_retries(model_for(anthropic_server, fast_retry)).generate("x")
    statuses = [e.data["status"] for e in t.find(InfoEvent) if e.source == "model_retry"]
    assert statuses == [429, 529]


async def test_a_changed_environment_is_a_different_model(monkeypatch) -> None:
    """Memoized models key on the endpoint variables: a new ANTHROPIC_BASE_URL is never served the old client."""
    with AnthropicServer() as first, AnthropicServer() as second:
        monkeypatch.setenv("ANTHROPIC_API_KEY", "k")
        monkeypatch.setenv("ANTHROPIC_BASE_URL", first.base_url)
        first.enqueue(message("one"))
        assert (await get_model("anthropic/claude-memo").generate("x")).completion == "one"
        monkeypatch.setenv("ANTHROPIC_BASE_URL", second.base_url)
        second.enqueue(message("two"))
        assert (await get_model("anthropic/claude-memo").generate("x")).completion == "two"
        assert len(first.requests) == len(second.requests) == 1


@pytest.mark.parametrize(("cache_prompt", "with_tools", "marked"), [
    (None, True, True),  # "auto" (the default): cache when tools are given (agent loops)
    ("auto", False, False),
    (True, False, True),
    (False, True, False),
])
async def test_prompt_caching_breakpoints(anthropic_server: AnthropicServer, cache_prompt, with_tools: bool,
                                          marked: bool) -> None:
    anthropic_server.enqueue(message("ok"))
    await model_for(anthropic_server).generate([ChatMessageSystem(content="sys"), ChatMessageUser(content="hi")],
                                               tools=[add()] if with_tools else [],
                                               config=GenerateConfig(cache_prompt=cache_prompt))
    body = anthropic_server.bodies[0]
    marks = [body["system"][-1].get("cache_control"), body["messages"][-1]["content"][-1].get("cache_control")]
    if with_tools:
        marks.append(body["tools"][-1].get("cache_control"))
    assert marks == ([{"type": "ephemeral"}] * len(marks) if marked else [None] * len(marks))
