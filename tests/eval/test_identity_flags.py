"""Resume that is safe (same identity resumes and says so; a different one starts a new log and says
which) and the eval options the CLI exposes: sample ids, fail-on-error, max connections/subprocesses,
generation settings, epoch reducers. Embedded mode, scripted model, real task files."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import Any

import pytest

from orchestrator.dataset import Sample
from orchestrator.eval import Task, eval_async, eval_retry_async
from orchestrator.eval._reducers import ReducerError, reducer
from orchestrator.eval._task import TaskError
from orchestrator.model import ModelOutput, get_model
from orchestrator.scorer import Score, includes
from orchestrator.solver import generate, use_tools

from .task_files import FLAKY

pytestmark = pytest.mark.timeout(120)


async def _broken_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **kwargs: Any) -> Path:
    monkeypatch.setenv("TOOLFLEET_TEST_BREAK", "1")
    [log] = await eval_async(f"{FLAKY}@flaky", "scripted/answer", log_dir=tmp_path, **kwargs)
    monkeypatch.delenv("TOOLFLEET_TEST_BREAK")
    assert log.status == "error"
    return Path(log.location or "")


@pytest.mark.parametrize("display", ["none", "log"])
async def test_same_identity_resumes_and_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str], display: str) -> None:
    first = await _broken_run(tmp_path, monkeypatch, model_args={"default_output": "x"}, config={"temperature": 0.5})
    capsys.readouterr()
    [log] = await eval_async(f"{FLAKY}@flaky", "scripted/answer", log_dir=tmp_path, display=display,
                             model_args={"default_output": "x"}, config={"temperature": 0.5})
    assert Path(log.location or "") == first and log.status == "success"
    err = capsys.readouterr().err
    assert f"resuming {first} (3 samples already done)" in err
    if display == "log":  # in the structured eval_start line
        assert '"event": "eval_start"' in err and '"notice": "resuming' in err
    assert len(log.runs) == 2 and log.runs[1].resumed
    assert log.eval.model_args == {"default_output": "x"}
    assert log.eval.identity is not None and log.eval.identity.task_file_hash.startswith("sha256:")
    assert log.eval.generate_config == {"temperature": 0.5}
    # The setting reached the solver in the resumed run.
    assert all(e.data == {"temperature": 0.5} for s in log.samples for e in s.events if e.event == "info")
    assert sum(1 for s in log.samples for e in s.events if e.event == "info") == 4


@pytest.mark.parametrize(("change", "field"), [
    ({"model_args": {"default_output": "other"}}, "model_args"),
    ({"config": {"temperature": 0.9}}, "generate_config"),
    ({"epochs": 2}, "epochs"),
])
async def test_a_different_identity_starts_a_new_log_and_says_which(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        change: dict[str, Any], field: str) -> None:
    first = await _broken_run(tmp_path, monkeypatch)
    capsys.readouterr()
    [log] = await eval_async(f"{FLAKY}@flaky", "scripted/answer", log_dir=tmp_path, **change)
    assert Path(log.location or "") != first
    err = capsys.readouterr().err
    assert f"not resuming {first} ({field} differ" in err and f"starting a new log {log.location}" in err
    if "model_args" in change:
        assert log.eval.model_args == change["model_args"]


async def test_an_edited_task_file_starts_a_new_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    copy = tmp_path / "flaky_copy.py"
    shutil.copy(FLAKY, copy)
    monkeypatch.setenv("TOOLFLEET_TEST_BREAK", "1")
    [first] = await eval_async(f"{copy}@flaky", "scripted/answer", log_dir=tmp_path / "logs")
    monkeypatch.delenv("TOOLFLEET_TEST_BREAK")
    copy.write_text(copy.read_text() + "\n# a fix to the scorer\n")
    [second] = await eval_async(f"{copy}@flaky", "scripted/answer", log_dir=tmp_path / "logs")
    assert second.location != first.location
    assert second.eval.task_file_hash != first.eval.task_file_hash


async def test_eval_retry_keeps_working(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = await _broken_run(tmp_path, monkeypatch, model_args={"default_output": "x"}, sample_id="s0,s1")
    log = await eval_retry_async(first)
    assert Path(log.location or "") == first and log.status == "success"
    assert sorted(str(s.id) for s in log.samples) == ["s0", "s1"]
    assert log.eval.model_args == {"default_output": "x"}


async def test_sample_id_selects_and_unknown_ids_are_one_line(tmp_path: Path) -> None:
    [log] = await eval_async(f"{FLAKY}@flaky", "scripted/answer", log_dir=tmp_path, sample_id=["s2", "s0"])
    assert sorted(str(s.id) for s in log.samples) == ["s0", "s2"]
    with pytest.raises(TaskError, match="No sample with id 'nope'"):
        await eval_async(f"{FLAKY}@flaky", "scripted/answer", log_dir=tmp_path, sample_id="nope")


@pytest.mark.parametrize(("fail_on_error", "ran"), [(True, 1), (2, 2), (0.5, 3), (None, 6)])
async def test_fail_on_error_stops_the_eval(tmp_path: Path, fail_on_error: Any, ran: int) -> None:
    def boom(messages: list[Any], tools: list[Any]) -> ModelOutput:
        raise RuntimeError("model down")

    task = Task(dataset=[Sample(input=f"q{i}", target="t", id=i) for i in range(6)], scorer=includes())
    [log] = await eval_async(task, get_model("scripted", policy=boom), log_dir=tmp_path, max_samples=1,
                             fail_on_error=fail_on_error)
    assert log.status == "error" and len(log.samples) == ran
    if fail_on_error is not None:
        assert log.error is not None and "--fail-on-error threshold" in log.error.message


@pytest.mark.slow  # runs its samples in local sandboxes (child processes)
async def test_max_connections_and_max_subprocesses_bound_concurrency(tmp_path: Path) -> None:
    """Model requests in flight <= --max-connections; sandbox tool calls executing <= --max-subprocesses
    (measured by the commands themselves: each appends start/end lines to one file)."""
    from orchestrator.tool import ToolCall, bash

    trace = tmp_path / "trace.txt"
    model_now = model_peak = 0

    async def policy(messages: list[Any], tools: list[Any]) -> ModelOutput:
        nonlocal model_now, model_peak
        model_now += 1
        model_peak = max(model_peak, model_now)
        await asyncio.sleep(0.02)
        model_now -= 1
        if len(messages) == 1:
            cmd = f"echo + >> {trace}; sleep 0.2; echo - >> {trace}"
            return ModelOutput.for_tool_calls("scripted", [ToolCall(id=f"c{i}", function="bash", arguments={"cmd": cmd})
                                                           for i in range(3)])
        return ModelOutput.from_content("scripted", "t")

    task = Task(dataset=[Sample(input=f"q{i}", target="t", id=i) for i in range(4)],
                solver=[use_tools(bash()), generate()],
                scorer=includes(), sandbox="local")
    [log] = await eval_async(task, get_model("scripted", policy=policy), log_dir=tmp_path, max_samples=4,
                             max_connections=2, max_subprocesses=3)
    assert log.status == "success"
    now = peak = 0
    for line in trace.read_text().split():
        now += 1 if line == "+" else -1
        peak = max(peak, now)
    assert trace.read_text().count("+") == 12
    assert model_peak <= 2 and peak <= 3
    assert log.eval.config.max_connections == 2 and log.eval.config.max_subprocesses == 3


def _scores(*values: Any) -> list[Score]:
    return [Score(value=v) for v in values]


@pytest.mark.parametrize(("name", "values", "expected"), [
    ("mean", ("C", "I", "C", "C"), 0.75),
    ("max", ("I", "C"), 1.0),
    ("median", (0.1, 0.5, 0.9), 0.5),
    ("mode", ("C", "I", "I"), "I"),
    ("at_least_2", ("C", "I", "C"), 1.0),
    ("at_least_3", ("C", "I", "C"), 0.0),
    ("pass_at_1", ("C", "I", "I", "I"), 0.25),
    ("pass_at_2", ("C", "I", "I", "I"), 0.5),
])
def test_reducers(name: str, values: tuple[Any, ...], expected: Any) -> None:
    assert reducer(name)(_scores(*values)).value == pytest.approx(expected) if isinstance(expected, float) \
        else reducer(name)(_scores(*values)).value == expected


def test_unknown_reducer_is_one_line() -> None:
    with pytest.raises(ReducerError, match="Unknown epochs reducer 'best'"):
        reducer("best")


async def test_epochs_are_reduced_per_sample(tmp_path: Path) -> None:
    """2 epochs x 2 samples: metrics count 2 samples; sample 0 right in epoch 1 only."""
    from orchestrator.solver import sample_state

    def policy(messages: list[Any], tools: list[Any]) -> ModelOutput:
        state = sample_state()
        assert state is not None
        right = state.sample_id == 1 or state.epoch == 1
        return ModelOutput.from_content("scripted", "t" if right else "x")

    task = Task(dataset=[Sample(input=f"q{i}", target="t", id=i) for i in range(2)], scorer=includes())
    [log] = await eval_async(task, get_model("scripted", policy=policy), log_dir=tmp_path, epochs=2,
                             epochs_reducer=["mean", "at_least_2", "pass_at_1"])
    assert log.results is not None
    by_name = {s.name: s for s in log.results.scores}
    assert {s.scored_samples for s in by_name.values()} == {2}
    assert by_name["includes_mean"].metrics["accuracy"].value == pytest.approx(0.75)
    assert by_name["includes_at_least_2"].metrics["accuracy"].value == pytest.approx(0.5)
    assert by_name["includes_pass_at_1"].metrics["accuracy"].value == pytest.approx(0.75)
