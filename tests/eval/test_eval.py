"""eval(): concurrency, retries, limits, scores and the log's contents (embedded mode, real components)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from orchestrator.dataset import Sample
from orchestrator.eval import Task, eval_async, eval_retry_async, read_eval_log
from orchestrator.model import ModelOutput, ModelUsage, get_model
from orchestrator.scorer import CORRECT, includes, match
from orchestrator.solver import Generate, TaskState, generate, solver

from .task_files import BASIC

pytestmark = pytest.mark.timeout(120)


def _answer_target(messages: list[Any], tools: list[Any]) -> ModelOutput:
    from orchestrator.solver import sample_state

    state = sample_state()
    out = ModelOutput.from_content("scripted", f"It is {state.target.text}")
    out.usage = ModelUsage(input_tokens=5, output_tokens=5, total_tokens=10)
    return out


def _samples(n: int) -> list[Sample]:
    return [Sample(input=f"q{i}", target=f"t{i}", id=i) for i in range(n)]


async def test_scores_usage_and_results(tmp_path: Path) -> None:
    task = Task(dataset=_samples(5), solver=generate(), scorer=[includes(), match()])
    [log] = await eval_async(task, get_model("scripted", policy=_answer_target), log_dir=tmp_path)
    assert log.status == "success"
    assert len(log.samples) == 5
    assert all(s.scores["includes"].value == CORRECT for s in log.samples)
    assert log.results is not None and log.results.completed_samples == 5
    assert {s.name for s in log.results.scores} == {"includes", "match"}
    assert log.results.scores[0].metrics["accuracy"].value == 1.0
    assert all(s.model_usage["scripted/scripted"].total_tokens == 10 for s in log.samples)
    assert log.stats.model_usage["scripted/scripted"].total_tokens == 50


async def test_max_samples_bounds_concurrency(tmp_path: Path) -> None:
    running = 0
    peak = 0

    @solver
    def track() -> Any:
        async def solve(state: TaskState, generate: Generate) -> TaskState:
            nonlocal running, peak
            running += 1
            peak = max(peak, running)
            await asyncio.sleep(0.02)
            running -= 1
            return state

        return solve

    task = Task(dataset=_samples(12), solver=track(), scorer=includes())
    [log] = await eval_async(task, "scripted", log_dir=tmp_path, max_samples=3)
    assert len(log.samples) == 12
    assert peak == 3


async def test_retry_on_error_reruns_the_sample(tmp_path: Path) -> None:
    attempts: dict[Any, int] = {}

    @solver
    def flaky() -> Any:
        async def solve(state: TaskState, generate: Generate) -> TaskState:
            attempts[state.sample_id] = attempts.get(state.sample_id, 0) + 1
            if attempts[state.sample_id] == 1:
                raise RuntimeError(f"transient failure of {state.sample_id}")
            return await generate(state)

        return solve

    task = Task(dataset=_samples(3), solver=flaky(), scorer=includes())
    [log] = await eval_async(task, get_model("scripted", policy=_answer_target), log_dir=tmp_path, retry_on_error=2)
    assert log.status == "success"
    assert attempts == {0: 2, 1: 2, 2: 2}
    for s in log.samples:
        assert s.error is None
        assert s.attempts == 2
        assert [e.message for e in s.error_retries] == [repr(RuntimeError(f"transient failure of {s.id}"))]
        assert s.scores["includes"].value == CORRECT


async def test_error_without_retry_is_recorded_then_eval_retry_reruns_only_errors(tmp_path: Path) -> None:
    calls: list[Any] = []
    broken = {"on": True}

    @solver
    def sometimes() -> Any:
        async def solve(state: TaskState, generate: Generate) -> TaskState:
            calls.append(state.sample_id)
            if broken["on"] and state.sample_id == 1:
                raise ValueError("boom")
            return await generate(state)

        return solve

    task = Task(dataset=_samples(3), solver=sometimes(), scorer=includes())
    model = get_model("scripted", policy=_answer_target)
    [log] = await eval_async(task, model, log_dir=tmp_path)
    assert log.status == "error"
    errored = [s for s in log.samples if s.error is not None]
    # As Inspect records it: an unexpected exception's repr (toolfleet's own errors keep their sentence).
    assert [(s.id, s.error.type, s.error.message) for s in errored] == [(1, "ValueError", "ValueError('boom')")]
    assert "Traceback" in (errored[0].error.traceback or "")
    assert any(e.event == "error" for e in errored[0].events)

    broken["on"] = False
    calls.clear()
    [again] = await eval_async(task, model, log_file=log.location)
    assert calls == [1]  # only the errored sample ran again
    assert again.status == "success"
    assert len(again.samples) == 3 and all(s.error is None for s in again.samples)
    assert len(again.runs) == 2 and again.runs[1].resumed


@pytest.mark.parametrize(
    ("task_args", "kind", "limit"),
    [({"message_limit": 6}, "message", 6), ({"token_limit": 250}, "token", 250)],
)
async def test_limits_end_the_sample_normally(tmp_path: Path, task_args: dict[str, int], kind: str, limit: int) -> None:
    [log] = await eval_async(f"{BASIC}@basic", "scripted/loop", task_args={"n": 2, **task_args}, log_dir=tmp_path)
    assert log.status == "success"  # a limit is not an error
    for s in log.samples:
        assert s.error is None
        assert s.limit is not None and s.limit.type == kind and s.limit.limit == limit
        assert "includes" in s.scores  # limited samples are still scored
        assert any(e.event == "sample_limit" for e in s.events)
    if kind == "message":
        assert all(len(s.messages) <= limit + 1 for s in log.samples)


async def test_time_limit(tmp_path: Path) -> None:
    @solver
    def stuck() -> Any:
        async def solve(state: TaskState, generate: Generate) -> TaskState:
            await asyncio.sleep(60)
            return state

        return solve

    task = Task(dataset=_samples(2), solver=stuck(), scorer=includes(), time_limit=0.2)
    [log] = await eval_async(task, "scripted", log_dir=tmp_path)
    assert [s.limit.type for s in log.samples] == ["time", "time"]  # type: ignore[union-attr]
    assert all(s.error is None for s in log.samples)


async def test_log_round_trip_holds_messages_events_and_timings(tmp_path: Path) -> None:
    [log] = await eval_async(f"{BASIC}@basic", "scripted/echo", task_args={"n": 3}, log_dir=tmp_path)
    assert log.status == "success"
    path = Path(log.location or "")
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [line["type"] for line in lines] == ["header", "run", "sample", "sample", "sample", "footer"]
    assert lines[0]["format"] == "toolfleet-eval-log" and lines[0]["version"] == 1

    sample = next(s for s in log.samples if s.id == "s1")
    roles = [m.role for m in sample.messages]
    assert roles == ["user", "assistant", "tool", "assistant"]
    assert sample.messages[2].text == "value-of-s1"
    kinds = [e.event for e in sample.events]
    for kind in ("span_begin", "model", "tool", "span_end"):
        assert kind in kinds
    tool_event = next(e for e in sample.events if e.event == "tool")
    assert tool_event.function == "lookup" and tool_event.result == "value-of-s1"
    assert sample.started_at and sample.completed_at and sample.total_time is not None
    assert sample.model_usage["scripted/echo"].total_tokens == 20
    assert log.eval.model == "scripted/echo" and log.eval.task_args == {"n": 3}
    assert log.eval.dataset.sample_ids == ["s0", "s1", "s2"]

    # Everything read back re-serialises to the same JSON (nothing lost in the round trip).
    again = read_eval_log(path)
    assert again.model_dump(mode="json") == log.model_dump(mode="json")


async def test_torn_last_line_is_ignored_and_cut_before_resume(tmp_path: Path) -> None:
    [log] = await eval_async(f"{BASIC}@basic", "scripted/echo", task_args={"n": 3}, log_dir=tmp_path)
    path = Path(log.location or "")
    lines = path.read_text().splitlines(keepends=True)
    # Simulate a kill mid-write: drop the footer and the last sample, leave half a sample line.
    path.write_text("".join(lines[:3]) + lines[3][:40])
    partial = read_eval_log(path)
    assert partial.status == "started" and len(partial.samples) == 1
    resumed = await eval_retry_async(path, display="none")
    assert resumed.status == "success" and len(resumed.samples) == 3
    for line in path.read_text().splitlines():
        json.loads(line)  # every line is whole again


async def test_epochs_run_each_sample_n_times(tmp_path: Path) -> None:
    seen: list[tuple[Any, int]] = []

    @solver
    def record() -> Any:
        async def solve(state: TaskState, generate: Generate) -> TaskState:
            seen.append((state.sample_id, state.epoch))
            return await generate(state)

        return solve

    task = Task(dataset=_samples(2), solver=record(), scorer=includes(), epochs=3)
    [log] = await eval_async(task, get_model("scripted", policy=_answer_target), log_dir=tmp_path)
    assert sorted(seen) == [(i, e) for i in range(2) for e in (1, 2, 3)]
    assert sorted((s.id, s.epoch) for s in log.samples) == sorted(seen)
    assert log.eval.config.epochs == 3 and log.results is not None and log.results.total_samples == 6


async def test_task_generate_config_is_active_in_the_sample(tmp_path: Path) -> None:
    from orchestrator.model import GenerateConfig
    from orchestrator.model._generate_config import active_generate_config

    temperatures: list[float | None] = []

    def policy(messages: list[Any], tools: list[Any]) -> ModelOutput:
        temperatures.append(active_generate_config().temperature)
        return ModelOutput.from_content("scripted", "x")

    task = Task(dataset=_samples(1), solver=generate(), scorer=includes(), config=GenerateConfig(temperature=0.25))
    await eval_async(task, get_model("scripted", policy=policy), log_dir=tmp_path)
    assert temperatures == [0.25]


async def test_duplicate_sample_ids_are_a_user_error(tmp_path: Path) -> None:
    from orchestrator.eval import TaskError

    task = Task(dataset=[Sample(input="a", id="x"), Sample(input="b", id="x")], scorer=includes())
    with pytest.raises(TaskError, match="Duplicate sample id 'x'"):
        await eval_async(task, "scripted", log_dir=tmp_path)


@pytest.mark.slow  # runs an eval in a child Python
@pytest.mark.parametrize(("level", "debug_lines"), [(None, False), ("debug", True)])
def test_as_a_library_toolfleet_logs_nothing_below_warning(tmp_path: Path, level: str | None,
                                                           debug_lines: bool) -> None:
    """eval_async from a user's script: no debug lines on stdout or stderr unless TOOLFLEET_LOG_LEVEL asks."""
    import os
    import subprocess
    import sys

    from tests.eval.task_files import BASIC

    script = ("import asyncio\nfrom orchestrator.eval import eval_async\n"
              f"[log] = asyncio.run(eval_async({str(BASIC) + '@basic'!r}, 'scripted/echo', log_dir={str(tmp_path)!r}, "
              "display='none', sandbox='local'))\nprint('status', log.status)\n")
    env = {k: v for k, v in os.environ.items() if k != "TOOLFLEET_LOG_LEVEL"}
    if level:
        env["TOOLFLEET_LOG_LEVEL"] = level
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env,
                          cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "status success"  # nothing else on the user's stdout
    assert ("[debug" in done.stderr) is debug_lines, done.stderr[-2000:]
