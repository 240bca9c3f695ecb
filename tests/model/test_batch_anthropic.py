"""Batch mode with ``anthropic/<model>``: the real anthropic SDK against a Message-Batches server on loopback.

The same pool as the OpenAI backend (see ``test_batch_openai``); here what is Anthropic's own: the
``{"custom_id", "params"}`` requests, ``processing_status``, results read from ``results_url`` with
``succeeded`` / ``errored`` / ``expired`` / ``canceled`` per request, and broken result lines.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from orchestrator.log import ModelEvent, Transcript, bind_transcript
from orchestrator.model import BatchConfig, BatchError, GenerateConfig, ModelError, RetryPolicy, get_model
from orchestrator.model._providers._anthropic_batch import parse_results_file
from tests.support.anthropic_server import AnthropicServer, Reply, error, message, tool_use

pytestmark = pytest.mark.timeout(60)


def _text(content: Any) -> str:
    return content if isinstance(content, str) else " ".join(b.get("text", "") for b in content)


def echo_last(params: dict[str, Any]) -> Reply:
    return message(f"ECHO {_text(params['messages'][-1]['content']).upper()}")


def model_for(server: AnthropicServer, max_retries: int = 3) -> Any:
    return get_model("anthropic/claude-test", base_url=server.base_url, api_key="test-key", memoize=False,
                     retry=RetryPolicy(max_retries=max_retries, initial_delay=0.01, max_delay=0.05),
                     config=GenerateConfig(batch=BatchConfig(size=3, send_delay=0.3, tick=0.05)))


async def _ask(model: Any, prompts: list[str]) -> list[Any]:
    return await asyncio.gather(*(model.generate(p) for p in prompts), return_exceptions=True)


def test_concurrent_requests_go_out_as_one_message_batch() -> None:
    with AnthropicServer(responder=echo_last) as server:
        outputs = asyncio.run(_ask(model_for(server), ["one", "two", "three"]))
    assert [o.completion for o in outputs] == ["ECHO ONE", "ECHO TWO", "ECHO THREE"]
    assert server.direct_completions == 0
    [requests] = server.batch_inputs.values()
    assert [r["params"]["model"] for r in requests] == ["claude-test"] * 3
    assert [_text(r["params"]["messages"][-1]["content"]) for r in requests] == ["one", "two", "three"]
    assert all(r["params"]["max_tokens"] > 0 for r in requests)
    assert any(p.endswith("/results") for p in server.paths("GET"))


def test_tool_use_comes_back_through_a_batch() -> None:
    def responder(params: dict[str, Any]) -> Reply:
        return message(tool_use("lookup", {"key": "a"}), tool_use("lookup", {"key": "b"}))

    with AnthropicServer(responder=responder) as server:
        from orchestrator.tool import ToolInfo, ToolParams

        info = ToolInfo(name="lookup", description="Look up.", parameters=ToolParams())
        output = asyncio.run(model_for(server).generate("go", tools=[info]))
    assert [c.arguments for c in output.message.tool_calls] == [{"key": "a"}, {"key": "b"}]
    assert output.stop_reason == "tool_calls"


@pytest.mark.parametrize(("plan", "says"), [
    ("fail", "api_error: internal error"),
    ("expire", "request expired"),
    ("malformed", "malformed result for request"),
    ("refuse", "the batch service is down"),
])
def test_a_failed_expired_malformed_or_refused_batch_is_retried(plan: str, says: str) -> None:
    with AnthropicServer(responder=echo_last) as server:
        server.plan_batches(plan)
        [given_up] = asyncio.run(_ask(model_for(server, max_retries=0), ["z"]))
        assert isinstance(given_up, ModelError) and says in str(given_up)

        server.plan_batches(plan)
        transcript = Transcript()

        async def run() -> list[Any]:
            with bind_transcript(transcript):
                return await _ask(model_for(server), ["a", "b", "c"])

        outputs = asyncio.run(run())
    assert [o.completion for o in outputs] == ["ECHO A", "ECHO B", "ECHO C"]
    assert [e.retries for e in transcript.events if isinstance(e, ModelEvent)] == [1, 1, 1]
    assert server.direct_completions == 0


def test_an_invalid_request_fails_its_turn_only() -> None:
    def responder(params: dict[str, Any]) -> Reply:
        if _text(params["messages"][-1]["content"]) == "bad":
            return error(400, "max_tokens: too large")
        return echo_last(params)

    with AnthropicServer(responder=responder) as server:
        good, bad, other = asyncio.run(_ask(model_for(server), ["good", "bad", "other"]))
    assert (good.completion, other.completion) == ("ECHO GOOD", "ECHO OTHER")
    assert isinstance(bad, ModelError) and "invalid_request_error: max_tokens: too large" in str(bad)
    assert bad.retries == 0 and len(server.batch_inputs) == 1


def test_a_message_batch_nobody_waits_for_is_cancelled() -> None:
    with AnthropicServer(responder=echo_last) as server:
        server.hold_batches.set()

        async def run() -> None:
            waiting = asyncio.ensure_future(_ask(model_for(server), ["a", "b", "c"]))
            while not server.batch_inputs:
                await asyncio.sleep(0.02)
            waiting.cancel()
            for _ in range(200):
                if any(p.endswith("/cancel") for p in server.paths()):
                    return
                await asyncio.sleep(0.02)

        asyncio.run(run())
    assert any(p.endswith("/cancel") for p in server.paths())


def test_parse_results_file() -> None:
    lines = [
        {"custom_id": "ok", "result": {"type": "succeeded", "message": {"content": []}}},
        {"custom_id": "bad", "result": {"type": "errored", "error": {"type": "error", "error": {
            "type": "invalid_request_error", "message": "nope"}}}},
        {"custom_id": "busy", "result": {"type": "errored", "error": {"type": "error", "error": {
            "type": "overloaded_error", "message": "busy"}}}},
        {"custom_id": "late", "result": {"type": "expired"}},
        {"custom_id": "stopped", "result": {"type": "canceled"}},
        {"custom_id": "odd", "result": {"type": "mystery"}},
        {"custom_id": "no-message", "result": {"type": "succeeded"}},
    ]
    text = "\n".join([*(json.dumps(line) for line in lines), "{torn", json.dumps({"result": {}}), ""])
    outcomes = parse_results_file(text)
    assert outcomes["ok"] == {"content": []}
    assert {k: (str(v), v.retryable) for k, v in outcomes.items() if isinstance(v, BatchError)} == {
        "bad": ("invalid_request_error: nope", False),
        "busy": ("overloaded_error: busy", True),
        "late": ("request expired before the batch processed it", True),
        "stopped": ("request canceled before the batch processed it", True),
        "odd": ("result of unknown type 'mystery'", True),
        "no-message": ("result of unknown type 'succeeded'", True),
    }


def test_a_batched_call_names_its_batch_and_costs_the_batch_price() -> None:
    with AnthropicServer(responder=echo_last) as server:
        def model(batch: bool) -> Any:
            return get_model("anthropic/claude-sonnet-4-5", base_url=server.base_url, api_key="k", memoize=False,
                             config=GenerateConfig(batch=BatchConfig(size=1, tick=0.05) if batch else None))

        direct = asyncio.run(model(False).generate("x"))
        batched = asyncio.run(model(True).generate("x"))
    [batch_id] = server.batch_inputs
    assert batched.metadata == {"batch": batch_id} and not (direct.metadata or {}).get("batch")
    assert direct.usage.total_cost and batched.usage.total_cost == pytest.approx(direct.usage.total_cost / 2)
