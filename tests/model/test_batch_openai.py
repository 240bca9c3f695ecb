"""Batch mode with ``openai/<model>``: the real openai SDK against a Batch-API server on loopback.

Many concurrent turns' requests go out as one batch (files upload + batches create), are polled and
handed back each to its own turn; failed, expired, malformed and refused batches resolve their turns
with an error that the model's retry loop retries like any other.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from orchestrator.log import ModelEvent, Transcript, bind_transcript
from orchestrator.model import BatchConfig, ChatMessageUser, GenerateConfig, ModelError, RetryPolicy, get_model
from tests.support.openai_server import OpenAIServer, Reply, completion, error

pytestmark = pytest.mark.timeout(60)

FAST = BatchConfig(size=3, send_delay=0.3, tick=0.05)


def echo_last(body: dict[str, Any]) -> Reply:
    """Answer each request with its own last user message, upper-cased: a result that cannot go astray."""
    return completion(f"ECHO {body['messages'][-1]['content'].upper()}")


def model_for(server: OpenAIServer, max_retries: int = 3) -> Any:
    return get_model("openai/test-model", base_url=server.base_url, api_key="test-key", memoize=False,
                     retry=RetryPolicy(max_retries=max_retries, initial_delay=0.01, max_delay=0.05),
                     config=GenerateConfig(batch=FAST))


async def _ask(model: Any, prompts: list[str]) -> list[Any]:
    return await asyncio.gather(*(model.generate(p) for p in prompts), return_exceptions=True)


def test_concurrent_requests_go_out_as_one_batch_and_come_back_to_their_turns() -> None:
    with OpenAIServer(responder=echo_last) as server:
        model = model_for(server)
        outputs = asyncio.run(_ask(model, ["one", "two", "three"]))

    assert [o.completion for o in outputs] == ["ECHO ONE", "ECHO TWO", "ECHO THREE"]
    assert server.direct_completions == 0
    [batch_id] = server.batch_inputs
    lines = server.batch_inputs[batch_id]
    assert [line["body"]["messages"][-1]["content"] for line in lines] == ["one", "two", "three"]
    assert {line["url"] for line in lines} == {"/v1/chat/completions"}
    assert len({line["custom_id"] for line in lines}) == 3
    created = [r.body for r in server.requests if r.method == "POST" and r.path.endswith("/batches")]
    assert created[0]["endpoint"] == "/v1/chat/completions" and created[0]["completion_window"] == "24h"


def test_a_partial_batch_is_sent_after_send_delay() -> None:
    with OpenAIServer(responder=echo_last) as server:
        [output] = asyncio.run(_ask(model_for(server), ["alone"]))
    assert output.completion == "ECHO ALONE"
    assert [len(v) for v in server.batch_inputs.values()] == [1]


def test_batch_size_caps_each_batch() -> None:
    with OpenAIServer(responder=echo_last) as server:
        model = get_model("openai/test-model", base_url=server.base_url, api_key="k", memoize=False,
                          config=GenerateConfig(batch=BatchConfig(size=2, max_size=2, send_delay=0.3, tick=0.05)))
        outputs = asyncio.run(_ask(model, [f"p{i}" for i in range(5)]))
    assert sorted(o.completion for o in outputs) == sorted(f"ECHO P{i}" for i in range(5))
    assert sorted(len(v) for v in server.batch_inputs.values()) == [1, 2, 2]


@pytest.mark.parametrize(("plan", "says"), [
    ("fail", "failed: the input file is not valid"),
    ("expire", "batch_expired"),
    ("malformed", "malformed result for request"),
    ("refuse", "the batch service is down"),
])
def test_a_failed_expired_malformed_or_refused_batch_is_retried(plan: str, says: str) -> None:
    with OpenAIServer(responder=echo_last) as server:
        server.plan_batches(plan)
        [given_up] = asyncio.run(_ask(model_for(server, max_retries=0), ["z"]))
        assert isinstance(given_up, ModelError) and says in str(given_up)

        server.plan_batches(plan)
        server.requests.clear()
        transcript = Transcript()

        async def run() -> list[Any]:
            with bind_transcript(transcript):
                return await _ask(model_for(server), ["a", "b", "c"])

        outputs = asyncio.run(run())
    assert [o.completion for o in outputs] == ["ECHO A", "ECHO B", "ECHO C"]
    assert server.direct_completions == 0
    events = [e for e in transcript.events if isinstance(e, ModelEvent)]
    assert [e.retries for e in events] == [1, 1, 1]
    created = [r for r in server.requests if r.method == "POST" and r.path.endswith("/batches")]
    assert len(created) == 2  # the bad one, then the retry


def test_malformed_results_name_what_was_wrong() -> None:
    with OpenAIServer(responder=echo_last) as server:
        server.plan_batches("malformed")
        outputs = asyncio.run(_ask(model_for(server, max_retries=0), ["a", "b"]))
    messages = sorted(str(o) for o in outputs)
    assert all(isinstance(o, ModelError) for o in outputs)
    assert "malformed result for request" in messages[1] and "ValidationError" in messages[1]
    assert "completed without a result for request" in messages[0]


def test_a_request_the_provider_rejects_fails_its_turn_only() -> None:
    def responder(body: dict[str, Any]) -> Reply:
        if body["messages"][-1]["content"] == "bad":
            return error(400, "unsupported parameter")
        return echo_last(body)

    with OpenAIServer(responder=responder) as server:
        good, bad, other = asyncio.run(_ask(model_for(server), ["good", "bad", "other"]))
    assert (good.completion, other.completion) == ("ECHO GOOD", "ECHO OTHER")
    assert isinstance(bad, ModelError) and "unsupported parameter" in str(bad) and bad.retries == 0
    assert len(server.batch_inputs) == 1  # a 400 is not retried


def test_retries_are_bounded() -> None:
    with OpenAIServer(responder=echo_last) as server:
        server.plan_batches("fail", "fail", "fail")
        [out] = asyncio.run(_ask(model_for(server, max_retries=2), ["x"]))
    assert isinstance(out, ModelError) and out.retries == 2 and "failed" in str(out)
    assert len(server.batch_inputs) == 3


def test_a_batch_nobody_waits_for_is_cancelled() -> None:
    with OpenAIServer(responder=echo_last) as server:
        server.hold_batches.set()

        async def run() -> None:
            model = model_for(server)
            waiting = asyncio.ensure_future(_ask(model, ["a", "b", "c"]))
            while not server.batch_inputs:
                await asyncio.sleep(0.02)
            waiting.cancel()
            for _ in range(200):
                if any(b["status"] == "cancelled" for b in server.batches.values()):
                    return
                await asyncio.sleep(0.02)

        asyncio.run(run())
    [batch] = server.batches.values()
    assert batch["status"] == "cancelled"
    assert any(p.endswith("/cancel") for p in server.paths())


def test_without_batch_requests_go_direct() -> None:
    with OpenAIServer(responder=echo_last) as server:
        model = get_model("openai/test-model", base_url=server.base_url, api_key="k", memoize=False,
                          config=GenerateConfig(batch=False))
        [out] = asyncio.run(_ask(model, ["direct"]))
    assert out.completion == "ECHO DIRECT"
    assert server.direct_completions == 1 and not server.batch_inputs


def _resume_from(server: OpenAIServer, batch_id: str, submitted_at: float) -> Any:
    """``generate("again")`` in sample s1, as a resumed run whose log recorded that request in ``batch_id``."""
    from orchestrator.model._batch import BatchScope, ResumeTable, batch_scope, request_key
    from orchestrator.solver._task_state import TaskState, bind_sample_state  # the sample a resumed request is of

    model = model_for(server)
    body = model.api.batch_backend().request([ChatMessageUser(content="again")], [], None, GenerateConfig())
    records = [{"event": "submit", "model": "openai/test-model", "batch_id": batch_id, "at": submitted_at,
                "requests": [{"custom_id": "c1", "sample_id": "s1", "epoch": 1, "turn": 1, "key": request_key(body)}]}]
    scope = BatchScope(resume=ResumeTable.from_records(records))

    async def run() -> Any:
        state = TaskState(model="openai/test-model", sample_id="s1", epoch=1, input="again", messages=[])
        with batch_scope(scope), bind_sample_state(state):
            return await model.generate("again")

    return asyncio.run(run())


def test_a_recorded_batch_the_provider_does_not_know_fails_at_once_and_is_submitted_anew() -> None:
    with OpenAIServer(responder=echo_last) as server:
        output = _resume_from(server, "batch_gone", time.time())
    assert output.completion == "ECHO AGAIN"
    assert "/v1/batches/batch_gone" in server.paths("GET")  # tried the recorded batch first
    assert len(server.batch_inputs) == 1  # then submitted it anew (a retry)


def test_a_recorded_batch_running_past_the_bound_is_cancelled_and_its_requests_sent_anew() -> None:
    with OpenAIServer(responder=echo_last) as server:
        server.batches["batch_old"] = {  # still finalizing, 26 hours after the killed run submitted it
            "id": "batch_old", "object": "batch", "endpoint": "/v1/chat/completions", "errors": None,
            "input_file_id": "file-x", "completion_window": "24h", "status": "finalizing", "created_at": 0,
            "output_file_id": None, "error_file_id": None, "_plan": "complete"}
        output = _resume_from(server, "batch_old", time.time() - 26 * 3600)
    assert output.completion == "ECHO AGAIN"
    assert "/v1/batches/batch_old/cancel" in server.paths("POST")
    assert len(server.batch_inputs) == 1  # the request went out again, in a new batch


def test_a_resumed_run_takes_recorded_results_even_for_turns_that_come_late() -> None:
    from orchestrator.model._batch import BatchScope, ResumeTable, batch_scope
    from orchestrator.solver._task_state import TaskState, bind_sample_state

    def in_sample(sample_id: str, prompt: str) -> Any:
        return bind_sample_state(TaskState(model="openai/test-model", sample_id=sample_id, epoch=1, input=prompt,
                                           messages=[]))

    records: list[dict[str, Any]] = []

    async def journal(record: dict[str, Any]) -> None:
        records.append(record)

    async def ask(model: Any, sample_id: str, prompt: str) -> Any:
        with in_sample(sample_id, prompt):
            return await model.generate(prompt)

    with OpenAIServer(responder=echo_last) as server:
        async def first_run() -> None:  # submits one batch for s1 and s2 (then "dies": results never read)
            with batch_scope(BatchScope(journal=journal)):
                model = get_model("openai/test-model", base_url=server.base_url, api_key="k", memoize=False,
                                  config=GenerateConfig(batch=BatchConfig(size=2, tick=60)))
                pending = [asyncio.ensure_future(ask(model, s, p)) for s, p in (("s1", "one"), ("s2", "two"))]
                while not any(r["event"] == "submit" for r in records):  # (its intent comes first)
                    await asyncio.sleep(0.02)
                for task in pending:
                    task.cancel()

        asyncio.run(first_run())
        [batch_id] = server.batch_inputs

        async def resumed_run() -> list[str]:  # a new process: s1 first, s2 only once s1 is done
            with batch_scope(BatchScope(resume=ResumeTable.from_records(records))):
                model = model_for(server)
                first = await ask(model, "s1", "one")
                second = await ask(model, "s2", "two")
                return [first.completion, second.completion]

        assert asyncio.run(resumed_run()) == ["ECHO ONE", "ECHO TWO"]
    assert list(server.batch_inputs) == [batch_id]  # nothing submitted again
    assert server.paths("GET").count(f"/v1/batches/{batch_id}") == 1  # fetched once, for both turns
