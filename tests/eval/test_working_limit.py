"""``working_limit`` with Inspect's semantics, at the task, eval and ``limits`` API levels.

Inspect's statements, each a test here:
- working time is wall-clock time minus waiting: retried model attempts and their backoff, queueing for
  a model connection slot (``max_connections``), and blocks under ``suspend_working_limit()`` are not
  charged; waits of concurrent tasks are merged, so working time never goes below zero;
- a sample that passes its working limit ends with a limit (type ``working``, Inspect's message), is
  still scored, and its transcript has the ``SampleLimitEvent``; work stuck in a tool is interrupted,
  not just noticed at the next checkpoint;
- the limit does not bound wall-clock time spent waiting: ``time_limit`` does;
- the log records each sample's ``working_time`` and the eval's ``working_limit``.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from orchestrator.dataset import Sample
from orchestrator.eval import Task, eval_async
from orchestrator.model import ModelOutput
from orchestrator.model._model import Model, ModelAPI
from orchestrator.model._providers._retry import RetryPolicy
from orchestrator.scorer import includes
from orchestrator.solver import generate, solver
from orchestrator.util import sample_limits, suspend_working_limit, working_limit
from orchestrator.util._working import WorkingClock

pytestmark = pytest.mark.timeout(120)


class SlowAPI(ModelAPI):
    """A provider whose request takes ``seconds``; the first ``failures`` requests fail transiently."""

    memoize = False

    def __init__(self, seconds: float, failures: int = 0, connections: int | None = None) -> None:
        super().__init__("slow")
        self.provider = "slow"
        self.seconds, self.failures, self.connections = seconds, failures, connections

    async def generate(self, input: Any, tools: Any, tool_choice: Any, config: Any) -> ModelOutput:
        await asyncio.sleep(self.seconds)
        if self.failures:
            self.failures -= 1
            raise ConnectionError("overloaded")
        return ModelOutput.from_content("slow", "the answer")

    def should_retry(self, ex: BaseException) -> bool:
        return isinstance(ex, ConnectionError)

    def connection_limit(self) -> int | None:
        return self.connections


def _samples(n: int) -> list[Sample]:
    return [Sample(id=f"s{i}", input="q", target="answer") for i in range(n)]


async def test_retried_attempts_and_their_backoff_are_not_working_time(tmp_path: Path) -> None:
    # Two failed 0.4 s attempts with backoffs (0.25-0.5 s), then a 0.4 s answer: over 1.5 s of wall clock, of which
    # only the answering attempt works. A 1.5 s working limit holds.
    model = Model(SlowAPI(0.4, failures=2), retry=RetryPolicy(initial_delay=0.5, multiplier=1.0))
    task = Task(dataset=_samples(1), solver=generate(), scorer=includes(), working_limit=1.5)
    [log] = await eval_async(task, model, log_dir=tmp_path)
    [sample] = log.samples
    assert sample.limit is None and sample.scores["includes"].value == "C"
    assert sample.total_time > 1.5  # it did run past the limit in wall-clock time ...
    assert sample.working_time < 1.5  # ... but not in working time
    assert log.eval.config.working_limit == 1.5


async def test_waiting_for_a_model_connection_slot_is_not_working_time(tmp_path: Path) -> None:
    # One connection, four samples each needing 0.5 s of it: the last waits ~1.5 s for the slot.
    model = Model(SlowAPI(0.5, connections=1))
    task = Task(dataset=_samples(4), solver=generate(), scorer=includes(), working_limit=1.2)
    [log] = await eval_async(task, model, log_dir=tmp_path, max_samples=4)
    assert all(s.limit is None for s in log.samples), [s.limit for s in log.samples]
    last = max(log.samples, key=lambda s: s.total_time)
    assert last.total_time > 1.2 and last.working_time < 1.2
    assert all(s.working_time <= s.total_time for s in log.samples)


@solver
def busy(seconds: float):  # type: ignore[no-untyped-def]
    async def solve(state, generate):  # type: ignore[no-untyped-def]
        await asyncio.sleep(seconds)  # work the sample does (a tool, the agent's own code)
        return await generate(state)

    return solve


async def test_passing_the_working_limit_ends_the_sample_with_a_limit_and_it_is_still_scored(tmp_path: Path) -> None:
    started = time.monotonic()
    task = Task(dataset=_samples(1), solver=[busy(60), generate()], scorer=includes(), working_limit=0.5)
    [log] = await eval_async(task, Model(SlowAPI(0.0)), log_dir=tmp_path)
    assert time.monotonic() - started < 60  # interrupted mid-work, not noticed after the 60 s of it
    [sample] = log.samples
    assert sample.error is None
    assert sample.limit is not None and sample.limit.type == "working" and sample.limit.limit == 0.5
    assert sample.limit.message == "Working time limit exceeded. limit: 0.5 seconds"
    assert "includes" in sample.scores  # scored like any sample that hit a limit
    events = [e for e in sample.events if e.event == "sample_limit"]
    assert [(e.type, e.limit) for e in events] == [("working", 0.5)]


@solver
def waits_then_works(wait: float, work: float, seen: dict[str, Any]):  # type: ignore[no-untyped-def]
    async def solve(state, generate):  # type: ignore[no-untyped-def]
        seen["limit"] = sample_limits().working.limit
        with suspend_working_limit():  # e.g. waiting on a person: not charged
            await asyncio.sleep(wait)
        await asyncio.sleep(work)
        return await generate(state)

    return solve


async def test_suspended_time_is_not_charged_but_a_time_limit_still_bounds_the_wall_clock(tmp_path: Path) -> None:
    seen: dict[str, Any] = {}
    task = Task(dataset=_samples(1), solver=waits_then_works(1.5, 0.2, seen), scorer=includes(), working_limit=1.0)
    [log] = await eval_async(task, Model(SlowAPI(0.0)), log_dir=tmp_path)
    [sample] = log.samples
    assert seen["limit"] == 1.0  # the sample's working limit, as sample_limits() reports it
    assert sample.limit is None and sample.scores["includes"].value == "C"
    # Waiting is not bounded by the working limit; a time limit bounds it (Inspect's advice: set both).
    task = Task(dataset=_samples(1), solver=waits_then_works(30, 0.0, seen), scorer=includes(),
                working_limit=1.0, time_limit=1.0)
    [log] = await eval_async(task, Model(SlowAPI(0.0)), log_dir=tmp_path)
    [sample] = log.samples
    assert sample.limit is not None and sample.limit.type == "time"


async def test_the_eval_level_working_limit_overrides_the_tasks(tmp_path: Path) -> None:
    task = Task(dataset=_samples(1), solver=[busy(60), generate()], scorer=includes(), working_limit=100)
    [log] = await eval_async(task, Model(SlowAPI(0.0)), log_dir=tmp_path, working_limit=0.3)
    [sample] = log.samples
    assert sample.limit is not None and sample.limit.type == "working" and sample.limit.limit == 0.3
    assert log.eval.config.working_limit == 0.3


async def test_a_working_limit_in_the_limits_api_stacks_and_reports_its_usage() -> None:
    outer, inner = working_limit(10), working_limit(0.2)
    with outer:
        with suspend_working_limit():
            await asyncio.sleep(0.3)
        with pytest.raises(Exception) as info, inner:  # noqa: PT011 - the class and fields are asserted below
            await asyncio.sleep(30)  # interrupted by the inner limit's timer
        assert type(info.value).__name__ == "LimitExceededError" and info.value.type == "working"
        assert info.value.source is inner
    assert outer.usage < 0.3 + inner.usage  # the suspended 0.3 s is not in the outer's usage
    assert inner.usage >= 0.2


@pytest.mark.parametrize(("waits", "window", "expected"), [
    ([], (0, 10), 0.0),
    ([(1, 2)], (0, 10), 1.0),
    ([(1, 3), (2, 4)], (0, 10), 3.0),  # overlapping waits (concurrent tasks) merge, never add
    ([(1, 2), (3, 4), (1.5, 3.5)], (0, 10), 3.0),  # a wait bridging two merges all three
    ([(1, 5)], (2, 3), 1.0),  # only the part inside the window
    ([(1, 2), (4, 6)], (1.5, 5), 1.5),
    ([(2, 1)], (0, 10), 0.0),  # an empty interval is nothing
])
def test_waits_merge_into_the_clock(waits: list[tuple[float, float]], window: tuple[float, float],
                                    expected: float) -> None:
    clock = WorkingClock()
    for start, end in waits:
        clock.add_wait(start, end)
    assert clock.waiting(*window) == pytest.approx(expected)
