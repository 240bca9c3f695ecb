"""``toolfleet eval --batch``: a react eval whose model requests all go through the provider's batch API.

The real CLI in a subprocess, the real openai / anthropic SDK, a batch server on loopback (OpenAI Batch,
Anthropic Message Batches) whose responder plays the agent (two parallel ``bash`` calls in the sample's sandbox, then
submit), embedded and with the sandboxes on a Celery worker. Asserted on the server's request log: several samples'
requests per batch and not one direct chat completion. Then an orchestrator SIGKILLed after submitting a
batch: ``eval-retry`` collects that batch's results instead of submitting (paying for) them again.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from orchestrator.eval import read_eval_log
from tests.support import anthropic_server
from tests.support.anthropic_server import AnthropicServer
from tests.support.openai_server import OpenAIServer, Reply, completion, tool_call

from .task_files import BATCH_REACT

# slow: every test runs the CLI or a local sandbox in a child process
pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

N = 6


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return " ".join(_text(b.get("content", "")) if b.get("type") == "tool_result" else b.get("text", "")
                    for b in content)


def play_openai(body: dict[str, Any]) -> Reply:
    """The agent's side: look both keys up in parallel, then submit what the lookups returned."""
    messages = body["messages"]
    question = next(m["content"] for m in messages if m["role"] == "user")
    results = [_text(m["content"]).strip() for m in messages if m["role"] == "tool"]
    if not results:
        return completion(tool_calls=[tool_call("bash", {"cmd": f"echo value-of-{k}"})
                                      for k in re.findall(r"k\d+[ab]", question)])
    return completion(tool_calls=[tool_call("submit", {"answer": " ".join(results)})])


def play_anthropic(params: dict[str, Any]) -> Reply:
    """The same agent on the Messages API: tool results come back as ``tool_result`` blocks of a user turn."""
    messages = params["messages"]
    question = _text(messages[0]["content"])
    results = [_text(b.get("content", "")).strip() for m in messages if isinstance(m["content"], list)
               for b in m["content"] if b.get("type") == "tool_result"]
    if not results:
        return anthropic_server.message(*(anthropic_server.tool_use("bash", {"cmd": f"echo value-of-{k}"})
                                          for k in re.findall(r"k\d+[ab]", question)))
    return anthropic_server.message(anthropic_server.tool_use("submit", {"answer": " ".join(results)}))


PROVIDERS = {
    "openai": (lambda: OpenAIServer(responder=play_openai), "openai/test-model", "OPENAI"),
    "anthropic": (lambda: AnthropicServer(responder=play_anthropic), "anthropic/claude-test", "ANTHROPIC"),
}


def _toolfleet(*args: str) -> list[str]:
    return [sys.executable, "-m", "orchestrator.cli", *args]


def _env(server: OpenAIServer, provider: str) -> dict[str, str]:
    prefix = PROVIDERS[provider][2]
    return {**os.environ, f"{prefix}_BASE_URL": server.base_url, f"{prefix}_API_KEY": "test-key"}


def _batch_options(tmp_path: Path, **options: Any) -> str:
    path = tmp_path / "batch.json"
    path.write_text(json.dumps({"size": N, "send_delay": 2, "tick": 0.1, **options}))
    return str(path)


def _eval_cmd(tmp_path: Path, batch: str, provider: str, *more: str) -> list[str]:
    return _toolfleet("eval", f"{BATCH_REACT}@batch_react", "--model", PROVIDERS[provider][1], "-T", f"n={N}",
                      "--batch", batch, "--log-dir", str(tmp_path / "logs"), "--display", "log", *more)


def _messages(line: dict[str, Any]) -> list[dict[str, Any]]:
    return (line.get("body") or line["params"])["messages"]  # an OpenAI batch line, or an Anthropic request


def _turn(line: dict[str, Any]) -> int:
    return 1 + sum(m["role"] == "assistant" for m in _messages(line))


def _question(line: dict[str, Any]) -> str:
    return _text(next(m["content"] for m in _messages(line) if m["role"] == "user"))


@pytest.mark.parametrize("provider", list(PROVIDERS))
def test_react_eval_with_batch_pools_every_request(tmp_path: Path, provider: str) -> None:
    _eval_pools_every_request(tmp_path, provider)


@pytest.mark.celery
@pytest.mark.parametrize("provider", list(PROVIDERS))
def test_react_eval_with_batch_pools_every_request_through_workers(tmp_path: Path, provider: str, fleet) -> None:
    worker = fleet.worker(concurrency=8, slots=8)
    log = _eval_pools_every_request(tmp_path, provider, "--broker", fleet.redis.url)
    hosts = {e.host for s in log.samples for e in s.events if e.event == "tool" and e.function == "bash"}
    assert hosts == {worker.host}


def _eval_pools_every_request(tmp_path: Path, provider: str, *more: str) -> Any:
    with PROVIDERS[provider][0]() as server:
        done = subprocess.run(_eval_cmd(tmp_path, _batch_options(tmp_path), provider, *more),
                              env=_env(server, provider),
                              capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert f"samples: {N}/{N} completed, 0 errored" in done.stdout

    assert server.direct_completions == 0
    batches = list(server.batch_inputs.values())
    assert sum(len(b) for b in batches) == 2 * N  # two turns per sample, each request in a batch once
    assert all(len({_question(line) for line in b}) >= 2 for b in batches)  # several samples in each batch
    assert Counter(_turn(line) for b in batches for line in b) == {1: N, 2: N}

    [log_path] = (tmp_path / "logs").glob("*.jsonl")
    log = read_eval_log(log_path)
    assert all(s.scores["includes"].value == "C" for s in log.samples)
    submitted = [r for r in log.batches if r["event"] == "submit"]
    assert sorted(r["batch_id"] for r in submitted) == sorted(server.batch_inputs)
    requests = [q for r in submitted for q in r["requests"]]
    assert Counter((q["sample_id"], q["turn"]) for q in requests) == {(f"s{i}", t): 1 for i in range(N) for t in (1, 2)}
    assert {r["state"] for r in log.batches if r["event"] == "end"} == {"completed"}
    progress = [json.loads(line) for line in done.stderr.splitlines() if line.startswith("{")]
    assert progress[-1]["batches_done"] == len(batches) and progress[-1]["batches_pending"] == 0
    assert any(p.get("event") == "batches" and p["batches_pending"] >= 1 for p in progress)
    return log


def _resume_to_success(server: OpenAIServer, provider: str, log_path: Path) -> tuple[Any, list[dict[str, Any]]]:
    """``eval-retry`` the killed run's log: it must finish every sample correct. Returns the log and every
    request line the provider was sent, by either run."""
    resumed = subprocess.run(_toolfleet("eval-retry", str(log_path), "--display", "none"), env=_env(server, provider),
                             capture_output=True, text=True, timeout=120)
    assert resumed.returncode == 0, resumed.stderr
    after = read_eval_log(log_path)
    assert after.status == "success" and len(after.samples) == N
    assert all(s.scores["includes"].value == "C" for s in after.samples)
    return after, [line for b in server.batch_inputs.values() for line in b]


@pytest.mark.parametrize("provider", list(PROVIDERS))
def test_sigkilled_mid_batch_resumes_and_collects_without_paying_twice(tmp_path: Path, provider: str) -> None:
    with PROVIDERS[provider][0]() as server:
        server.hold_batches.set()  # the first batch stays in progress until the orchestrator is dead
        proc = subprocess.Popen(_eval_cmd(tmp_path, _batch_options(tmp_path), provider), env=_env(server, provider),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                logs = list((tmp_path / "logs").glob("*.jsonl"))
                if logs and server.batch_inputs and any(r["event"] == "submit" for r in read_eval_log(logs[0]).batches):
                    break
                assert proc.poll() is None, "the eval ended before its batch could be held"
                time.sleep(0.05)
            else:
                raise AssertionError("no batch was submitted and recorded in time")
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=10)
        finally:
            if proc.poll() is None:
                proc.kill()
        [log_path] = logs
        before = read_eval_log(log_path)
        assert before.status == "started" and not before.samples
        [first] = server.batch_inputs  # the one batch the killed run paid for: every sample's first turn
        assert len(server.batch_inputs[first]) == N
        assert [(r["event"], r.get("batch_id")) for r in before.batches] == [("intent", None), ("submit", first)]

        server.hold_batches.clear()  # the provider finishes the batch while nobody is watching
        after, lines = _resume_to_success(server, provider, log_path)
    assert server.direct_completions == 0
    assert Counter(_turn(line) for line in lines) == {1: N, 2: N}  # no first turn was submitted twice
    assert any(p.endswith(f"/batches/{first}") for p in server.paths("GET"))  # collected by the resumed run
    later = [r for r in after.batches if r["event"] == "submit" and r["batch_id"] != first]
    assert {q["turn"] for r in later for q in r["requests"]} == {2}


@pytest.mark.parametrize("provider", list(PROVIDERS))
def test_killed_between_the_provider_accepting_a_batch_and_its_log_line_pays_once(
    tmp_path: Path, provider: str) -> None:
    """SIGKILL at the worst moment: the provider has created the batch, the orchestrator never learned its
    id. The log holds the submission's intent (written before it was sent), so the resumed run finds
    that batch at the provider (by its tag, or its custom ids) and collects it: the provider saw each
    request exactly once."""
    with PROVIDERS[provider][0]() as server:
        running: list[subprocess.Popen[bytes]] = []

        def kill_before_answering(batch_id: str) -> None:
            if len(server.batch_inputs) == 1:  # the first batch: accepted, and its client dies now
                running[0].send_signal(signal.SIGKILL)
                running[0].wait(timeout=10)

        server.on_batch_created = kill_before_answering
        running.append(subprocess.Popen(_eval_cmd(tmp_path, _batch_options(tmp_path), provider),
                                        env=_env(server, provider),
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        try:
            assert running[0].wait(timeout=90) == -signal.SIGKILL
        finally:
            if running[0].poll() is None:
                running[0].kill()
        [log_path] = (tmp_path / "logs").glob("*.jsonl")
        before = read_eval_log(log_path)
        [first] = server.batch_inputs
        assert [r["event"] for r in before.batches] == ["intent"]  # the batch's id never reached the log
        assert len(before.batches[0]["requests"]) == N == len(server.batch_inputs[first])

        server.on_batch_created = None
        after, lines = _resume_to_success(server, provider, log_path)
    assert Counter(_turn(line) for line in lines) == {1: N, 2: N}  # each request submitted (paid for) once
    found = [r for r in after.batches if r["event"] == "submit" and r["batch_id"] == first]
    assert [r["intent"] for r in found] == [before.batches[0]["intent"]]  # the resumed run recorded what it found
