"""``toolfleet bench all``: which runs count as broken (a table), that every workload has a quick size, and
that a broken workload makes the command fail with one line naming it (a real subprocess; no bench runs to
completion here — the suite itself runs in ``.ci/run``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from orchestrator.cli._bench_cmd import workloads
from tests.benchmarks import _suite

pytestmark = pytest.mark.timeout(120)

OK = json.dumps({"workload": "x", "calls_per_s": 10.0})


@pytest.mark.parametrize(("returncode", "stdout", "stderr", "failure"), [
    (0, OK + "\n", "", None),
    (0, "noise\n" + OK + "\n", "", None),  # the last line is the result
    (None, "", "", "timed out after 5 s"),
    (1, "", "Traceback...\nRuntimeError: bench call failed: boom\n", "exited 1: RuntimeError: bench call failed: boom"),
    (2, "", "", "exited 2: no output"),
    (0, "", "", "printed no JSON object"),
    (0, "[1, 2]\n", "", "printed no JSON object"),
    (0, "not json\n", "", "printed no JSON object"),
    (0, json.dumps({"errors": 0, "ok": True}), "", None),
    (0, json.dumps({"errors": 3, "first_error": "No worker\nhost"}), "", "3 error(s) (first: No worker host)"),
    (0, json.dumps({"ok": False}), "", "ok is false"),
    (0, json.dumps({"errors": True}), "", None),  # a bool is not a count
    (0, json.dumps({"runs": [{"errors": 0}, {"errors": 2}]}), "", "run 1: 2 error(s)"),
])
def test_verdict(returncode: int | None, stdout: str, stderr: str, failure: str | None) -> None:
    assert _suite.verdict(returncode, stdout, stderr, timeout=5)[0] == failure


def test_every_workload_has_a_quick_size() -> None:
    assert set(_suite.QUICK) == set(workloads())


@pytest.mark.parametrize(("quick", "only", "expected"), [
    (False, None, [("a", []), ("b", [])]),
    (True, "b", [("b", ["--q"])]),
    (True, " b , a ", [("b", ["--q"]), ("a", [])]),
])
def test_plan(quick: bool, only: str | None, expected: list[tuple[str, list[str]]],
              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_suite, "QUICK", {"b": ["--q"]})
    assert _suite.plan(["a", "b"], quick, only) == expected


def _bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "orchestrator.cli", "bench", "all", *args], capture_output=True,
                          text=True, timeout=90, env=dict(os.environ))


@pytest.mark.slow  # runs the CLI in a child process
def test_a_broken_workload_fails_the_suite_with_one_line_naming_it() -> None:
    # A bound no workload can meet: the run is stopped and reported, not waited for.
    result = _bench("--quick", "--only", "review,overhead", "--timeout", "0.01", "--json")
    assert result.returncode == 1
    errors = [line for line in result.stderr.splitlines() if line.startswith("toolfleet: error: ")]
    assert errors == ["toolfleet: error: bench review failed: timed out after 0.01 s",
                      "toolfleet: error: bench overhead failed: timed out after 0.01 s"]
    assert "Traceback" not in result.stderr
    summary = json.loads(result.stdout)
    assert summary["failed"] == ["review", "overhead"]
    assert [r["ok"] for r in summary["runs"]] == [False, False]


@pytest.mark.slow  # runs the CLI in a child process
def test_unknown_workload_is_one_line() -> None:
    result = _bench("--only", "nosuch")
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        f"toolfleet: error: bench all: unknown workload(s) nosuch (available: {', '.join(workloads())})"]


@pytest.mark.slow  # runs the CLI in a child process
def test_a_passing_workload_passes() -> None:
    result = _bench("--quick", "--only", "review", "--json")
    assert result.returncode == 0, result.stderr
    [run] = json.loads(result.stdout)["runs"]
    assert run["ok"] and run["result"]["workload"] == "review"
