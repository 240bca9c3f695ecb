"""Scorers that use the sample's sandbox, in embedded mode and through Celery workers alike.

``sandbox_test`` (a command; pass on exit 0) and an Inspect-style scorer calling ``sandbox()`` itself
(exec, read_file, write_file, errors as exceptions).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from orchestrator.dataset import Sample
from orchestrator.eval import Task, eval_async
from orchestrator.scorer import CORRECT, INCORRECT, Score, Target, sandbox_test, scorer
from orchestrator.solver import Generate, TaskState, solver
from orchestrator.util import sandbox

pytestmark = pytest.mark.timeout(180)


@solver
def write_answer() -> Any:
    """Stands in for an agent: puts the sample's answer in the sandbox."""

    async def solve(state: TaskState, generate: Generate) -> TaskState:
        await sandbox().write_file("answer.txt", state.input_text)
        return state

    return solve


@scorer(metrics=[])
def inspect_style() -> Any:
    async def score(state: TaskState, target: Target) -> Score:
        box = sandbox()
        text = await box.read_file("answer.txt")
        await box.write_file("bytes.bin", b"\x00\xff")
        raw = await box.read_file("bytes.bin", text=False)
        with pytest.raises(FileNotFoundError):
            await box.read_file("missing.txt")
        result = await box.exec(["bash", "-c", "cat answer.txt; echo -n err >&2"])
        ok = text == target.text and raw == b"\x00\xff" and result.stdout == text and result.stderr == "err"
        return Score(value=CORRECT if ok else INCORRECT)

    return score


def _task() -> Task:
    samples = [Sample(input="42", target="42", id="right"), Sample(input="41", target="42", id="wrong")]
    test = sandbox_test(lambda state, target: f"test \"$(cat answer.txt)\" = {target.text}",
                        files={"hidden_test.txt": "x"}, timeout=30)
    return Task(dataset=samples, solver=write_answer(), scorer=[test, inspect_style()], sandbox="local")


def _check(log: Any) -> None:
    assert log.status == "success", [s.error for s in log.samples]
    by_id = {s.id: s for s in log.samples}
    assert by_id["right"].scores["sandbox_test"].value == CORRECT
    assert by_id["wrong"].scores["sandbox_test"].value == INCORRECT
    assert "failed (exit 1)" in (by_id["wrong"].scores["sandbox_test"].explanation or "")
    assert by_id["right"].scores["inspect_style"].value == CORRECT
    assert by_id["wrong"].scores["inspect_style"].value == INCORRECT


@pytest.mark.slow  # scores in a local sandbox (a child process)
async def test_sandbox_scorers_embedded(tmp_path: Path) -> None:
    [log] = await eval_async(_task(), "scripted", log_dir=tmp_path)
    _check(log)


@pytest.mark.celery
async def test_sandbox_scorers_through_workers(tmp_path: Path, fleet) -> None:  # type: ignore[no-untyped-def]
    fleet.worker()
    [log] = await eval_async(_task(), "scripted", log_dir=tmp_path, broker=fleet.redis.url)
    _check(log)
