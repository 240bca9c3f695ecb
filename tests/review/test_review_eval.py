"""Review rules about eval- and task-level review: ``Task(review=)``, ``eval(review=)``, ``--review``.

Real evals (embedded mode, scripted model) over the task file ``review_task.py``; the CLI is driven on a
real pseudo-terminal for ``--review human``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pexpect
import pytest

from orchestrator.eval import eval_async, load_task
from orchestrator.log import ReviewEvent, ToolEvent
from orchestrator.review import Review, ReviewPolicy
from tests.review import review_tools as rt

pytestmark = pytest.mark.timeout(120)

TASK_FILE = str(Path(__file__).with_name("review_task.py"))
ROOT = str(Path(__file__).resolve().parents[2])


def task(name: str = "fetching", **args: Any) -> Any:
    return load_task(f"{TASK_FILE}@{name}", args)


def review_file(tmp_path: Path, text: str) -> str:
    path = tmp_path / "review.yaml"
    path.write_text(text)
    return str(path)


def decisions(sample: Any) -> list[tuple[str | None, str]]:
    return [(e.reviewer, e.decision) for e in sample.events if isinstance(e, ReviewEvent)]


async def evaluate(t: Any, tmp_path: Path, dispatcher: Any, **kwargs: Any) -> Any:
    [log] = await eval_async(t, "scripted/fetch_then_answer", log_dir=tmp_path / "logs", dispatcher=dispatcher,
                             **kwargs)
    return log


async def test_s33a_a_task_declares_reviewers_as_review_policy_objects(tmp_path, dispatcher) -> None:
    """"A task can declare its own reviewers with the review argument. It accepts a policy file or a list of
    ReviewPolicy objects." (list) — and terminate ends the sample as an operator limit."""
    log = await evaluate(task("guarded"), tmp_path, dispatcher)
    [sample] = log.samples
    assert sample.limit is not None and sample.limit.type == "operator"
    assert sample.limit.message == "The agent reached the network."
    assert decisions(sample) == [("no_network", "terminate")]
    assert sample.error is None
    # The reviewed call's result is on record.
    [event] = [e for e in sample.events if isinstance(e, ToolEvent)]
    assert "HTTP/1.1 200" in event.result


async def test_s33b_a_task_accepts_a_policy_file(tmp_path, dispatcher) -> None:
    """"It accepts a policy file or a list of ReviewPolicy objects." (file)"""
    path = review_file(tmp_path, "reviewers:\n  - name: no_network\n    tools: curl\n")
    log = await evaluate(task(review=path), tmp_path, dispatcher)
    assert log.samples[0].limit.type == "operator"
    assert decisions(log.samples[0]) == [("no_network", "terminate")]


async def test_s34a_eval_review_overrides_the_tasks_reviewers(tmp_path, dispatcher) -> None:
    """"review passed to eval(), or --review, overrides the task's own reviewers." (Python list)"""
    log = await evaluate(task("guarded", n=2), tmp_path, dispatcher,
                         review=[ReviewPolicy(rt.scripted_review("continue", explanation="eval level"), tools="*")])
    assert log.status == "success"
    for sample in log.samples:
        assert sample.limit is None and sample.scores["includes"].value == "C"
        assert decisions(sample) == [("scripted_review", "continue")]


async def test_s34b_eval_review_file_overrides_the_tasks_reviewers(tmp_path, dispatcher) -> None:
    """"review passed to eval(), or --review, overrides the task's own reviewers." (YAML file, as --review passes)"""
    path = review_file(tmp_path, "reviewers:\n  - name: scripted_review\n    tools: \"*\"\n    decision: escalate\n")
    log = await evaluate(task("guarded"), tmp_path, dispatcher, review=path)
    [sample] = log.samples
    assert sample.limit is None
    assert decisions(sample) == [("scripted_review", "escalate"), (None, "continue")]
    assert log.eval.config.review == path  # the log names the policy in force


async def test_s24_eval_a_reviewer_exception_ends_the_sample_with_an_error(tmp_path, dispatcher) -> None:
    """"An exception raised by a reviewer ends the sample with an error" — as the eval log records it."""

    async def broken(message, call, result, output, view, history) -> Review:
        raise RuntimeError("reviewer broke")

    log = await evaluate(task(), tmp_path, dispatcher, review=[ReviewPolicy(broken)])
    [sample] = log.samples
    assert sample.error is not None and "reviewer broke" in sample.error.message
    assert sample.limit is None


async def test_s20a_eval_review_human_without_a_terminal_is_a_clear_error(tmp_path, dispatcher, monkeypatch) -> None:
    """"eval(review="human") reviews every call's result" with a person; with no terminal the sample fails at
    once with a clear error instead of waiting forever."""
    monkeypatch.setattr(sys, "stdin", open(os.devnull))  # noqa: SIM115 - stdin for the test's duration
    log = await evaluate(task(), tmp_path, dispatcher, review="human")
    [sample] = log.samples
    assert sample.error is not None
    assert "not an interactive terminal" in sample.error.message and "--review" in sample.error.message


@pytest.mark.slow  # runs the CLI in a child process
def test_s20b_cli_review_human_asks_on_the_terminal(tmp_path) -> None:
    """"Review the result of every tool call with the CLI option --review human": `toolfleet eval ... --review
    human` on a real terminal, with the live progress display on, prompts for each result."""
    env = {**os.environ, "PYTHONPATH": ROOT}
    child = pexpect.spawn("toolfleet", ["eval", f"{TASK_FILE}@guarded", "--model", "scripted/fetch_then_answer",
                                        "--review", "human", "--log-dir", str(tmp_path), "--display", "rich"],
                          cwd=ROOT, env=env, encoding="utf-8", timeout=60, dimensions=(50, 200))
    child.expect("Tool result needs review")
    child.expect(r"Decision \(\[a\]pprove / \[t\]erminate\): ")
    assert "Sample: p0" in child.before  # which of the concurrent samples is asking
    assert "Call: curl(url='http://example.com/p0')" in child.before
    assert "HTTP/1.1 200 OK" in child.before  # the result
    child.sendline("a")
    child.expect("Explanation")
    child.sendline("fine by me")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0, child.before
    log_files = list(tmp_path.glob("*.jsonl")) or list(tmp_path.rglob("*"))
    assert log_files


@pytest.mark.slow  # runs the CLI in a child process
def test_s29_cli_review_file(tmp_path) -> None:
    """"Policies can be written in YAML and passed with --review": `toolfleet eval task.py --review review.yaml`."""
    path = review_file(tmp_path, "reviewers:\n  - name: no_network\n    tools: [\"curl\"]\n")
    env = {**os.environ, "PYTHONPATH": ROOT}
    proc = subprocess.run(["toolfleet", "eval", f"{TASK_FILE}@fetching", "--model", "scripted/fetch_then_answer",
                           "--review", path, "--log-dir", str(tmp_path / "logs"), "--display", "none"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=90, stdin=subprocess.DEVNULL)
    from orchestrator.eval import read_eval_log

    [log_path] = list((tmp_path / "logs").glob("*"))
    log = read_eval_log(log_path)
    [sample] = log.samples
    assert sample.limit is not None and sample.limit.type == "operator", proc.stdout + proc.stderr
    assert decisions(sample) == [("no_network", "terminate")]


async def test_s26_eval_cancelling_a_call_under_review_is_an_operator_limit(tmp_path, dispatcher) -> None:
    """"Cancelling a tool call before its review has finished stops the sample with an operator limit" — as the
    eval log records it, with the result and the info event kept and no review decision."""
    import asyncio

    from orchestrator.log import InfoEvent
    from orchestrator.review import cancel_review, pending_reviews
    from tests.review.test_review_rules import blocking_review

    run = asyncio.ensure_future(evaluate(task(), tmp_path, dispatcher, review=[ReviewPolicy(blocking_review())]))
    async with asyncio.timeout(30):
        while not pending_reviews():
            await asyncio.sleep(0.01)
    assert [p.sample_id for p in pending_reviews()] == ["p0"]
    assert cancel_review("curl-p0", sample_id="p0", reason="operator says stop")
    log = await asyncio.wait_for(run, 60)
    [sample] = log.samples
    assert sample.limit is not None and sample.limit.type == "operator"
    assert "operator says stop" in sample.limit.message
    assert sample.error is None
    assert decisions(sample) == []
    [tool_event] = [e for e in sample.events if isinstance(e, ToolEvent)]
    assert "HTTP/1.1 200" in tool_event.result
    assert any(isinstance(e, InfoEvent) and e.source == "review"
               and e.data["cancelled_by"] == "operator" for e in sample.events)
