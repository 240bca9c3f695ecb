"""Forks on a full host: every slot held by a sample waiting to fork there must not deadlock.

Each sample snapshots its sandbox and forks it once; with far more samples than slots, every slot of a
host is soon held by a sample waiting for its fork there (docs/faults.md). A fork is its sample's work:
it is counted on the host beyond its cap (up to twice it), so the eval finishes with every sample scored.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.dataset import Sample
from orchestrator.eval import Task, eval_async
from orchestrator.scorer import Score, Target, scorer
from orchestrator.solver import TaskState, solver
from orchestrator.util import fork, sandbox

# Bounded: on a host that deadlocks, the eval would wait for placement (an hour) or capacity (minutes).
pytestmark = [pytest.mark.docker, pytest.mark.timeout(900)]

SAMPLES = 40  # ten times the fleet's 2 x 2 slots
CONFIG = {"type": "docker", "pool_size": 0}


@solver
def snapshot_and_fork():  # type: ignore[no-untyped-def]
    async def solve(state: TaskState, generate):  # type: ignore[no-untyped-def]
        box = sandbox()
        wrote = await box.exec(["sh", "-c", f"echo {state.sample_id} > /tmp/mine.txt"])
        assert wrote.success, wrote.stderr
        snap = await box.snapshot()
        async with fork(snap) as [copy]:
            read = await copy.exec(["cat", "/tmp/mine.txt"])
        state.metadata["forked"] = read.stdout.strip()
        return state

    return solve


@scorer(metrics=[])
def saw_its_own_file():  # type: ignore[no-untyped-def]
    async def score(state: TaskState, target: Target) -> Score:
        return Score(value="C" if state.metadata.get("forked") == str(state.sample_id) else "I")

    return score


def _task(config: dict[str, object]) -> Task:
    return Task(dataset=[Sample(id=f"s{i}", input="go") for i in range(SAMPLES)], solver=snapshot_and_fork(),
                scorer=saw_its_own_file(), sandbox=config)


def _assert_every_sample_scored(log) -> None:  # type: ignore[no-untyped-def]
    assert log.status == "success", [s.error for s in log.samples if s.error]
    assert len(log.samples) == SAMPLES
    assert [s.scores["saw_its_own_file"].value for s in log.samples] == ["C"] * SAMPLES


@pytest.mark.celery
async def test_an_eval_ten_times_the_fleet_with_every_sample_forking_finishes_every_sample_scored(
        tmp_path: Path, sandbox_image: str, fleet) -> None:  # type: ignore[no-untyped-def]
    fleet.worker(slots=2)
    fleet.worker(slots=2)
    [log] = await eval_async(_task(CONFIG), "scripted", log_dir=tmp_path, broker=fleet.redis.url)
    _assert_every_sample_scored(log)


async def test_an_embedded_eval_whose_host_cap_is_full_of_forking_samples_finishes_every_sample_scored(
        tmp_path: Path, sandbox_image: str) -> None:
    # The same on this process's Docker host: its cap (2 containers) held by the samples waiting to fork.
    task = _task({**CONFIG, "max_sandboxes": 2, "acquire_timeout": 600})
    [log] = await eval_async(task, "scripted", log_dir=tmp_path, max_sandboxes=2)
    _assert_every_sample_scored(log)
