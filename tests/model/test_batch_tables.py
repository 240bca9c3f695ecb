"""Batch mode's pure logic, by tables: options and defaults, resume matching, OpenAI result files."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from orchestrator.cli._eval_cmd import _batch_flag
from orchestrator.model import BatchConfig, BatchError
from orchestrator.model._batch import RecordedRequest, ResumeTable, batch_settings, conversation_turn, request_key
from orchestrator.model._providers._openai_batch import batch_input_file, parse_batch_file


@pytest.mark.parametrize(("value", "provider_max", "expected"), [
    (None, 50_000, None),
    (False, 50_000, None),
    (True, 50_000, (100, 50_000, 15.0, 15.0, 100, 1000)),
    (1000, 50_000, (1000, 50_000, 15.0, 15.0, 100, 1000)),
    (1000, 500, (500, 500, 15.0, 15.0, 100, 1000)),  # the provider's cap wins
    (BatchConfig(size=10, max_size=20, send_delay=0, tick=1, max_batches=2, max_consecutive_check_failures=3),
     50_000, (10, 20, 0.0, 1.0, 2, 3)),
    (BatchConfig(size=50, max_size=20), 50_000, (20, 20, 15.0, 15.0, 100, 1000)),
])
def test_batch_settings(value, provider_max, expected) -> None:
    settings = batch_settings(value, provider_max)
    got = None if settings is None else (settings.size, settings.max_size, settings.send_delay, settings.tick,
                                         settings.max_batches, settings.max_check_failures)
    assert got == expected


def _submit(batch_id: str, *requests: tuple[str, str, int, str], model: str = "openai/m") -> dict:
    return {"event": "submit", "model": model, "batch_id": batch_id, "at": 1000.0,
            "requests": [{"custom_id": c, "sample_id": s, "epoch": e, "turn": 1, "key": k} for c, s, e, k in requests]}


@pytest.mark.parametrize(("records", "skip", "takes", "expected"), [
    # a recorded request is found by model, sample, epoch and key; once
    ([_submit("b1", ("c1", "s1", 1, "k1"))], set(), [("openai/m", ("s1", 1), "k1")] * 2,
     [RecordedRequest("b1", "c1", 1000.0), None]),
    # another model, epoch or key: not the same request
    ([_submit("b1", ("c1", "s1", 1, "k1"))], set(),
     [("openai/x", ("s1", 1), "k1"), ("openai/m", ("s1", 2), "k1"), ("openai/m", ("s1", 1), "k2")], [None] * 3),
    # the same request twice (a retry after an error): replayed in submission order
    ([_submit("b1", ("c1", "s1", 1, "k1")), _submit("b2", ("c9", "s1", 1, "k1"))], set(),
     [("openai/m", ("s1", 1), "k1")] * 2, [RecordedRequest("b1", "c1", 1000.0), RecordedRequest("b2", "c9", 1000.0)]),
    # a batch that ended failed/expired/cancelled is left out
    ([_submit("b1", ("c1", "s1", 1, "k1")), {"event": "end", "batch_id": "b1", "state": "expired"},
      _submit("b2", ("c2", "s1", 1, "k1")), {"event": "end", "batch_id": "b2", "state": "completed"}], set(),
     [("openai/m", ("s1", 1), "k1")] * 2, [RecordedRequest("b2", "c2", 1000.0), None]),
    # finished samples' requests are not needed
    ([_submit("b1", ("c1", "s1", 1, "k1"), ("c2", "s2", 1, "k2"))], {("s1", 1)},
     [("openai/m", ("s1", 1), "k1"), ("openai/m", ("s2", 1), "k2")], [None, RecordedRequest("b1", "c2", 1000.0)]),
    # damaged records are skipped, not fatal
    ([{"event": "submit", "batch_id": "b1", "model": "openai/m", "requests": [{"custom_id": "c1"}, "junk"]}], set(),
     [("openai/m", ("s1", 1), "k1")], [None]),
    # a submission recorded before it was sent, whose batch id never reached the log: found by its tag
    ([{**_submit("", ("c1", "s1", 1, "k1")), "event": "intent", "intent": "t1"}], set(),
     [("openai/m", ("s1", 1), "k1")], [RecordedRequest("", "c1", 1000.0, "t1")]),
    # ... and one whose submit line followed names its batch (the intent adds nothing)
    ([{**_submit("", ("c1", "s1", 1, "k1")), "event": "intent", "intent": "t1"},
      {**_submit("b1", ("c1", "s1", 1, "k1")), "intent": "t1"}], set(),
     [("openai/m", ("s1", 1), "k1")] * 2, [RecordedRequest("b1", "c1", 1000.0, "t1"), None]),
    # ... and one whose submit line (written by a resumed run that found the batch) names only some of its
    # requests: the others are in that batch too, not to be sent again after a second kill
    ([{**_submit("", ("c1", "s1", 1, "k1"), ("c2", "s2", 1, "k2")), "event": "intent", "intent": "t1", "at": 999.0},
      {**_submit("b1", ("c2", "s2", 1, "k2")), "intent": "t1"}], set(),
     [("openai/m", ("s1", 1), "k1"), ("openai/m", ("s2", 1), "k2"), ("openai/m", ("s2", 1), "k2")],
     [RecordedRequest("b1", "c1", 999.0, "t1"), RecordedRequest("b1", "c2", 1000.0, "t1"), None]),
    # ... unless that batch ended failed: its requests would only fail again
    ([{**_submit("", ("c1", "s1", 1, "k1"), ("c2", "s2", 1, "k2")), "event": "intent", "intent": "t1"},
      {**_submit("b1", ("c2", "s2", 1, "k2")), "intent": "t1"}, {"event": "end", "batch_id": "b1", "state": "failed"}],
     set(), [("openai/m", ("s1", 1), "k1")], [None]),
    # an intent without its tag cannot be looked up: its request is sent again
    ([{**_submit("", ("c1", "s1", 1, "k1")), "event": "intent"}], set(), [("openai/m", ("s1", 1), "k1")], [None]),
])
def test_resume_table(records, skip, takes, expected) -> None:
    table = ResumeTable.from_records(records, skip)
    assert [table.take(*t) for t in takes] == expected


def test_request_key_is_stable_and_order_independent() -> None:
    a = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "temperature": 0}
    b = {"temperature": 0, "messages": [{"content": "hi", "role": "user"}], "model": "m"}
    assert request_key(a) == request_key(b) == request_key(json.loads(json.dumps(a)))
    assert request_key(a) != request_key({**a, "temperature": 1})


@pytest.mark.parametrize(("messages", "turn"), [
    ([{"role": "user", "content": "q"}], 1),
    ([{"role": "system"}, {"role": "user"}, {"role": "assistant"}, {"role": "tool"}], 2),
    ([{"role": "user"}, {"role": "assistant"}, {"role": "user"}, {"role": "assistant"}, {"role": "user"}], 3),
])
def test_conversation_turn(messages, turn) -> None:
    assert conversation_turn({"messages": messages}) == turn


def test_batch_input_file_lines() -> None:
    lines = batch_input_file([("c1", {"model": "m"}), ("c2", {"model": "n"})]).decode().splitlines()
    assert [json.loads(line) for line in lines] == [
        {"custom_id": "c1", "method": "POST", "url": "/v1/chat/completions", "body": {"model": "m"}},
        {"custom_id": "c2", "method": "POST", "url": "/v1/chat/completions", "body": {"model": "n"}}]


def test_parse_batch_file() -> None:
    text = "\n".join([
        json.dumps({"custom_id": "ok", "response": {"status_code": 200, "body": {"id": "x"}}, "error": None}),
        json.dumps({"custom_id": "limited", "response": {"status_code": 429, "body": {"error": {"message": "slow"}}}}),
        json.dumps({"custom_id": "bad", "response": {"status_code": 400, "body": {"error": {"message": "nope"}}}}),
        json.dumps({"custom_id": "expired", "response": None,
                    "error": {"code": "batch_expired", "message": "window passed"}}),
        json.dumps({"custom_id": "odd", "response": "not an object"}),
        "{torn", json.dumps({"no_custom_id": 1}), json.dumps({"custom_id": 7}), "",
    ])
    outcomes = parse_batch_file(text)
    assert outcomes["ok"] == {"id": "x"}
    summary = {k: (str(v), v.retryable) for k, v in outcomes.items() if isinstance(v, BatchError)}
    assert summary == {
        "limited": ("status 429: slow", True),
        "bad": ("status 400: nope", False),
        "expired": ("batch_expired: window passed", True),
        "odd": ("result line without a response", True),
    }


@pytest.mark.parametrize(("value", "expected"), [
    ("true", True), ("false", False), ("250", 250),
])
def test_batch_flag(value, expected) -> None:
    assert _batch_flag(value) == expected


def test_batch_flag_file(tmp_path: Path) -> None:
    good = tmp_path / "batch.yml"
    good.write_text("size: 20\nsend_delay: 5\n")
    assert _batch_flag(str(good)) == {"size": 20, "send_delay": 5.0}
    as_json = tmp_path / "batch.json"
    as_json.write_text('{"tick": 2}')
    assert _batch_flag(str(as_json)) == {"tick": 2.0}


@pytest.mark.parametrize(("content", "name", "says"), [
    (None, "0", "a batch size is at least 1"),
    (None, "nonsense", "give a batch size or a .yml/.yaml/.json file"),
    (None, "missing.yml", "cannot read"),
    ("sizes: 3", "typo.yml", "sizes: Extra inputs are not permitted"),
    ("size: [1", "broken.yml", "is not valid YAML/JSON"),
])
def test_batch_flag_mistakes_are_one_line(tmp_path: Path, content, name, says) -> None:
    if content is not None:
        (tmp_path / name).write_text(content)
    value = str(tmp_path / name) if name.endswith(".yml") else name
    with pytest.raises(argparse.ArgumentTypeError) as info:
        _batch_flag(value)
    assert says in str(info.value) and "\n" not in str(info.value)
