"""The chaos soak's pure parts, by table: scripts, line counts, the fault schedule, the leak allow-list, the audit."""

from __future__ import annotations

from collections import Counter
from types import SimpleNamespace

import pytest

from tests.chaos._audit import audit_samples, leaked_keys
from tests.chaos._faults import KINDS, schedule
from tests.chaos._script import (
    DENY,
    MODIFY,
    expected_lines,
    line_faults,
    modified,
    script,
)


def test_a_script_is_the_same_for_the_same_sample_and_seed_and_varied() -> None:
    assert script("c00001", 3) == script("c00001", 3)
    assert script("c00001", 3) != script("c00001", 4)
    scripts = [script(f"c{i:05d}", 1) for i in range(200)]
    calls = [c for s in scripts for turn in s for c in turn]
    assert {c.function for c in calls} == {"bash", "python", "note"}
    assert any(c.arguments.get("cmd", "").endswith(DENY) for c in calls)
    assert any(c.arguments.get("cmd", "").endswith(MODIFY) for c in calls)
    assert any(len(turn) > 1 for s in scripts for turn in s)  # parallel stages, and barriers between them
    assert all(2 <= len(s) <= 4 for s in scripts)
    assert len({c.id for c in calls}) == len(calls)  # every call id is unique


def test_what_a_script_must_leave_in_its_sandbox() -> None:
    turns = script("c00007", 1)
    lines = expected_lines(turns)
    denied = [c for turn in turns for c in turn if c.line is None]
    assert len(lines) == sum(len(t) for t in turns) - len(denied)
    assert all(c.line.endswith("m") for turn in turns for c in turn if c.arguments.get("cmd", "").endswith(MODIFY))


@pytest.mark.parametrize(("cmd", "expected"), [
    ("printf '%s\\n' c1.2.3 >> chaos.log && echo bash-c1.2.3 # modify",
     "printf '%s\\n' c1.2.3m >> chaos.log && echo bash-c1.2.3m"),
    ("sleep 0.2; printf '%s\\n' c1.1.1 >> chaos.log && echo bash-c1.1.1 # modify",
     "sleep 0.2; printf '%s\\n' c1.1.1m >> chaos.log && echo bash-c1.1.1m"),
])
def test_the_approvers_modification(cmd: str, expected: str) -> None:
    assert modified(cmd) == expected


@pytest.mark.parametrize(("expected", "found", "faults"), [
    (["a", "b"], ["b", "a"], {"missing": 0, "duplicated": 0, "foreign": 0}),  # order does not matter
    (["a", "b"], ["a"], {"missing": 1, "duplicated": 0, "foreign": 0}),
    (["a", "b"], ["a", "b", "a", "a"], {"missing": 0, "duplicated": 2, "foreign": 0}),  # a call ran three times
    (["a"], ["a", "z"], {"missing": 0, "duplicated": 0, "foreign": 1}),  # another sample's call ran here
    ([], [], {"missing": 0, "duplicated": 0, "foreign": 0}),
])
def test_line_faults(expected: list[str], found: list[str], faults: dict[str, int]) -> None:
    assert line_faults(expected, found) == faults


def test_the_schedule_fires_every_fault_the_times_asked_in_order_of_progress() -> None:
    plan = schedule(list(KINDS), 3, seed=5)
    assert Counter(p.kind for p in plan) == dict.fromkeys(KINDS, 3)
    assert [p.at for p in plan] == sorted(p.at for p in plan)
    assert all(0.05 <= p.at <= 0.7 and 0 <= p.delay <= 2 for p in plan)
    assert schedule(list(KINDS), 3, seed=5) == plan and schedule(list(KINDS), 3, seed=6) != plan


NOW = 1_000.0


@pytest.mark.parametrize(("keys", "leaks"), [
    # long-lived keys, as they should be after an eval: nothing leaked
    ({"toolfleet:hosts": {"type": "set", "ttl": -1}, "toolfleet:host:w1": {"type": "hash", "ttl": 3},
      "toolfleet:host:w1:used": {"type": "string", "ttl": -1, "value": "0"},
      "toolfleet:call:x": {"type": "string", "ttl": 900}, "_kombu.binding.toolfleet.calls": {"type": "set", "ttl": -1},
      "toolfleet:demand-owner:ab12": {"type": "string", "ttl": 20},
      "unacked": {"type": "hash", "ttl": -1, "size": 2},
      "toolfleet:evals:slots": {"type": "hash", "ttl": -1, "value": {"other": "3"}},
      "toolfleet:evals:alive": {"type": "zset", "ttl": -1, "value": {"e1": NOW - 5}}}, []),
    # a key nobody documents, a memory kept forever, a counter left high, an eval still counted
    ({"toolfleet:mystery": {"type": "string", "ttl": -1}, "toolfleet:consumed:x": {"type": "string", "ttl": -1},
      "toolfleet:host:w1:used": {"type": "string", "ttl": -1, "value": "1"},
      "toolfleet:evals:slots": {"type": "hash", "ttl": -1, "value": {"e1": "2", "other": "3"}},
      "toolfleet:evals:waiting": {"type": "zset", "ttl": -1, "value": {"e1": NOW + 5}},
      "toolfleet.host.w1": {"type": "list", "ttl": -1, "size": 1},
      "toolfleet.sandbox.demand": {"type": "list", "ttl": 400, "size": 3}},
     ["toolfleet.host.w1: not a long-lived key (list)", "toolfleet.sandbox.demand: not a long-lived key (list)",
      "toolfleet:consumed:x: kept with no TTL",
      "toolfleet:evals:slots: eval e1 still holds 2", "toolfleet:evals:waiting: eval e1 still counted until 1005",
      "toolfleet:host:w1:used: 1 slots counted with no sandbox open",
      "toolfleet:mystery: not a long-lived key (string)"]),
])
def test_leaked_keys(keys: dict, leaks: list[str]) -> None:  # type: ignore[type-arg]
    assert leaked_keys(keys, {"e1"}, NOW) == leaks


def _sample(sid: str, messages: list[tuple[str, str, str]] | None = None, error: str | None = None,
            meta: dict | None = None) -> SimpleNamespace:  # type: ignore[type-arg]
    tool = [SimpleNamespace(role="tool", tool_call_id=c, function=f, text=t, error=None) for c, f, t in messages or []]
    score = SimpleNamespace(metadata={"missing": 0, "duplicated": 0, "foreign": 0, **(meta or {})})
    return SimpleNamespace(id=sid, messages=tool, error=SimpleNamespace(message=error) if error else None,
                           scores={"side_effects": score})


def test_the_audit_accounts_for_every_sample() -> None:
    ref = {s: _sample(s, [("c1", "bash", "bash-1")]) for s in ("a", "b", "c", "d", "e", "f")}
    run = {"a": _sample("a", [("c1", "bash", "bash-1")], meta={"snapshot": "same"}),
           "b": _sample("b", [("c1", "bash", "other")]),  # a transcript unlike the embedded run's
           "c": _sample("c", error="Worker host 'w1' was lost\ntraceback"),  # failed, with its reason
           "d": _sample("d", [("c1", "bash", "bash-1")], meta={"duplicated": 2, "foreign": 1}),
           "e": _sample("e", [("c1", "bash", "bash-1")], meta={"missing": 1})}
    audit = audit_samples(list(ref), run, ref)  # f: no record at all
    assert audit.completed == 4 and audit.calls == 4 and audit.duplicated == 3
    assert audit.failed == {"c": "Worker host 'w1' was lost"}
    assert sorted(audit.lost) == ["b", "e", "f"] and audit.snapshots == {"same": 1}
