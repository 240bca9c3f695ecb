"""eval-set: tasks x models into one log dir, retried until complete; an interrupted set completes on re-run
without re-running finished samples. Embedded mode, scripted models, real task files."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from orchestrator.dataset import Sample
from orchestrator.eval import Task, eval_set_async, read_eval_log
from orchestrator.model import get_model
from orchestrator.scorer import includes
from orchestrator.solver import Generate, TaskState, solver

from .task_files import BASIC, FLAKY

pytestmark = pytest.mark.timeout(180)


async def test_an_interrupted_eval_set_completes_on_rerun(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    marker = tmp_path / "runs.txt"
    monkeypatch.setenv("TOOLFLEET_TEST_MARKER", str(marker))
    tasks = [f"{FLAKY}@flaky", f"{BASIC}@basic"]
    monkeypatch.setenv("TOOLFLEET_TEST_BREAK", "1")
    ok, first = await eval_set_async(tasks, tmp_path / "logs", ["scripted/answer", "scripted/echo"],
                                     retry_attempts=0, retry_wait=0, task_args=None)
    assert not ok and len(first) == 4
    assert [log.status for log in first] == ["error", "error", "success", "success"]
    basic_runs = Counter(marker.read_text().split())
    monkeypatch.delenv("TOOLFLEET_TEST_BREAK")

    ok, second = await eval_set_async(tasks, tmp_path / "logs", ["scripted/answer", "scripted/echo"],
                                      retry_attempts=0, retry_wait=0)
    assert ok and all(log.status == "success" for log in second)
    assert [log.location for log in second] == [log.location for log in first]  # resumed or kept, never new
    assert len(list((tmp_path / "logs").glob("*.jsonl"))) == 4
    assert Counter(marker.read_text().split()) == basic_runs  # the complete basic logs did not run again
    flaky = read_eval_log(second[0].location or "")
    assert len(flaky.runs) == 2 and len(flaky.samples) == 4


async def test_eval_set_retries_until_complete(tmp_path: Path) -> None:
    attempts: Counter[str] = Counter()

    @solver
    def fails_first_time() -> Any:
        async def solve(state: TaskState, generate: Generate) -> TaskState:
            attempts[str(state.sample_id)] += 1
            if state.sample_id == 1 and attempts["1"] == 1:
                raise RuntimeError("transient")
            return await generate(state)

        return solve

    task = Task(dataset=[Sample(input=f"q{i}", target="x", id=i) for i in range(3)], solver=fails_first_time(),
                scorer=includes(), name="transient")
    ok, [log] = await eval_set_async(task, tmp_path, get_model("scripted", outputs=["x"] * 10), retry_attempts=2,
                                     retry_wait=0)
    assert ok and log.status == "success"
    assert attempts == Counter({"0": 1, "1": 2, "2": 1})
    assert len(log.runs) == 2


@pytest.mark.slow  # runs the CLI in a child process
def test_eval_set_cli(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "orchestrator.cli", "eval-set", f"{FLAKY}@flaky", f"{BASIC}@plain", "--model",
           "scripted/answer", "--log-dir", str(tmp_path), "--retry-wait", "0", "--display", "none"]
    first = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert first.returncode == 0, first.stderr
    assert "eval-set: complete (2/2 logs complete)" in first.stdout
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0 and again.stderr.count("is complete: not run again") == 2
    assert len(list(tmp_path.glob("*.jsonl"))) == 2
