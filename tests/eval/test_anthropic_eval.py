"""``--model anthropic/...`` end to end: a react eval whose model answers with two parallel tool_use blocks,
against a local Messages-API server driven by the real SDK, with a 429 and a 529 on the way; embedded,
through real Celery workers, and from the CLI (where -M mistakes are one line and the summary shows cost)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from orchestrator.eval import eval_async
from orchestrator.log import InfoEvent
from tests.cli.test_cli import _assert_one_line_error, run
from tests.support.anthropic_server import AnthropicServer, Reply, message, overloaded, rate_limited, tool_use

from .task_files import REACT_TOOLS

# slow: every test runs the CLI or a local sandbox in a child process
pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

MODEL = "anthropic/claude-test"
USAGE = {"input_tokens": 100, "output_tokens": 20}
PRICES = "anthropic/claude-test:\n  input: 3\n  output: 15\n"
CALL_COST = (100 * 3 + 20 * 15) / 1_000_000  # each reply's usage at the prices above


def react_responder(body: dict[str, Any]) -> Reply:
    """First turn: two bash calls in one message (the first one slower, so they finish out of order).
    Next turn: submit the first result, if both results came back in declared order; else say what came."""
    turns = body["messages"]
    match = re.search(r"What is (\d+)\?", json.dumps(turns[0]))
    assert match is not None, turns[0]
    i = match.group(1)
    results = [b for b in turns[-1]["content"] if b.get("type") == "tool_result"]
    if not results:
        return message("I will run both.", tool_use("bash", {"cmd": f"sleep 0.3; echo answer-{i}"}, id=f"toolu_{i}_a"),
                       tool_use("bash", {"cmd": f"echo second-{i}"}, id=f"toolu_{i}_b"), usage=USAGE)
    ids = [r["tool_use_id"] for r in results]
    texts = [" ".join(part["text"] for part in r["content"]).strip() for r in results]
    ordered = ids == [f"toolu_{i}_a", f"toolu_{i}_b"] and texts == [f"answer-{i}", f"second-{i}"]
    answer = texts[0] if ordered else f"out of order: {ids} {texts}"
    return message(tool_use("submit", {"answer": answer}, id=f"toolu_{i}_s"), usage=USAGE)


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Any:
    with AnthropicServer(responder=react_responder) as s:
        s.enqueue(rate_limited("0"), overloaded("0"))  # the first two requests are refused, then retried
        monkeypatch.setenv("ANTHROPIC_BASE_URL", s.base_url)
        monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
        yield s


def _assert_passed(log: Any, server: AnthropicServer, n: int) -> None:
    assert log.status == "success", [s.error for s in log.samples]
    assert sorted(s.scores["includes"].value for s in log.samples) == ["C"] * n
    retried = [e.data["status"] for s in log.samples for e in s.events
               if isinstance(e, InfoEvent) and e.source == "model_retry"]
    assert sorted(retried) == [429, 529]
    assert len(server.requests) == 2 * n + 2  # two turns per sample, plus the two refused requests
    for sample in log.samples:
        assert [m.role for m in sample.messages].count("tool") == 2
        usage = sample.model_usage[MODEL]
        assert usage.total_tokens == 2 * 120 and usage.total_cost == pytest.approx(2 * CALL_COST)
    assert log.stats.model_usage[MODEL].total_cost == pytest.approx(2 * n * CALL_COST)
    report = log.stats.connections[MODEL]
    assert report.ceiling == 10 and report.overloads >= 1 and report.trace[0].reason == "overload"


async def test_react_with_parallel_tool_use_embedded(tmp_path: Path, server: AnthropicServer) -> None:
    prices = tmp_path / "prices.yaml"
    prices.write_text(PRICES)
    [log] = await eval_async(f"{REACT_TOOLS}@react_bash", MODEL, log_dir=tmp_path, model_prices=prices)
    _assert_passed(log, server, 4)
    assert log.eval.config.model_prices == str(prices)


@pytest.mark.celery
async def test_react_with_parallel_tool_use_through_workers(tmp_path: Path, server: AnthropicServer, fleet) -> None:  # type: ignore[no-untyped-def]
    worker = fleet.worker(concurrency=8, slots=8)
    prices = tmp_path / "prices.yaml"
    prices.write_text(PRICES)
    [log] = await eval_async(f"{REACT_TOOLS}@react_bash", MODEL, log_dir=tmp_path, broker=fleet.redis.url,
                             model_prices=prices)
    _assert_passed(log, server, 4)
    hosts = [e.host for s in log.samples for e in s.events if e.event == "tool" and e.function == "bash"]
    assert hosts == [worker.host] * 8  # every bash call ran on the worker


def test_cli_summary_and_log_show_cost(tmp_path: Path, server: AnthropicServer) -> None:
    prices = tmp_path / "prices.yaml"
    prices.write_text(PRICES)
    result = run("eval", f"{REACT_TOOLS}@react_bash", "-T", "n=2", "--model", MODEL, "--log-dir", str(tmp_path),
                 "--display", "none", "--model-prices", str(prices), "-M", "max_retries=4", "-M", "timeout=30")
    assert result.returncode == 0, result.stderr
    cost = f"${4 * CALL_COST:.4f}"
    assert f"cost: {cost} (480 tokens)" in result.stdout
    # Halved once if both refused requests were sent before the first refusal came back, twice otherwise.
    assert re.search(r"connections: anthropic/claude-test up to 10, lowest [25], now \d+ \(2 overloaded responses\)",
                     result.stdout), result.stdout
    shown = run("log", "show", str(next(tmp_path.glob("*.jsonl"))))
    assert f"cost: {cost}" in shown.stdout and f"${2 * CALL_COST:.4f})" in shown.stdout


def test_cli_unknown_price_says_so(tmp_path: Path, server: AnthropicServer) -> None:
    result = run("eval", f"{REACT_TOOLS}@react_bash", "-T", "n=1", "--model", MODEL, "--log-dir", str(tmp_path),
                 "--display", "none")
    assert result.returncode == 0, result.stderr
    assert "cost: unknown (no price for anthropic/claude-test; see --model-prices)" in result.stdout


@pytest.mark.parametrize(("model", "flags", "needle"), [
    (MODEL, ["-M", "bogus=1"], "Model provider 'anthropic' has no argument 'bogus' (accepted -M keys: "),
    ("openai/gpt-test", ["-M", "bogus=1"], "Model provider 'openai' has no argument 'bogus' (accepted -M keys: "),
    (MODEL, ["-M", "max_retries=lots"], "max_retries takes a whole number"),
    (MODEL, ["--model-prices", "/nonexistent/prices.yaml"], "Cannot read the price file"),
    (MODEL, ["-M", "default_headers=5"], "invalid client argument default_headers=5: it takes a mapping"),
    ("openai/gpt-test", ["-M", "http_client=x"], "invalid client argument: Invalid `http_client` argument"),
])
def test_model_mistakes_are_one_line_before_the_eval_starts(tmp_path: Path, server: AnthropicServer, model: str,
                                                            flags: list[str], needle: str) -> None:
    result = run("eval", f"{REACT_TOOLS}@react_bash", "--model", model, "--log-dir", str(tmp_path),
                 "--display", "none", *flags, env={"OPENAI_BASE_URL": server.base_url})
    _assert_one_line_error(result, needle)
    assert not list(tmp_path.glob("*.jsonl")) and server.requests == []  # nothing started, nothing sent
