"""A fork that can never fit fails at once, in one line naming the slots it needs.

The forking sample holds a slot on its snapshot's host while it waits for every fork, and forks fill a
host to twice its cap at most (``FORK_HEADROOM``). ``fork(snapshot, n)`` with ``n + 1`` above that used
to wait out the open's whole timeout (an hour on a worker) in silence; now the host refuses it at once.
A fork that fits (one beside the sample's own, on one slot) still opens.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from orchestrator.dataset import Sample
from orchestrator.eval import Task, eval_async
from orchestrator.scorer import Score, Target, scorer
from orchestrator.solver import TaskState, solver
from orchestrator.util import fork, sandbox
from workers.sandbox.docker._pool import fork_refusal

pytestmark = [pytest.mark.docker, pytest.mark.timeout(300)]

# Bounded well below the open's own timeout: the refusal must come at once, not when a wait runs out.
CONFIG = {"type": "docker", "pool_size": 0, "max_sandboxes": 1, "acquire_timeout": 240}
REFUSED = ("fork(snapshot, 2) cannot fit on its snapshot's host: it needs 2 sandboxes beside the forking sample's "
           "own, and forks fill a host of 1 slot to 2 at most; fork at most 1 at a time, or give that host 2 slots "
           "(a worker's --slots, the embedded driver's max_sandboxes).")


@solver
def fork_n():  # type: ignore[no-untyped-def]
    async def solve(state: TaskState, generate):  # type: ignore[no-untyped-def]
        box = sandbox()
        assert (await box.exec(["sh", "-c", "echo mine > /tmp/f"])).success
        snap = await box.snapshot()
        async with fork(snap, int(state.metadata["n"])) as copies:
            state.metadata["read"] = [(await c.exec(["cat", "/tmp/f"])).stdout.strip() for c in copies]
        return state

    return solve


@scorer(metrics=[])
def read_back():  # type: ignore[no-untyped-def]
    async def score(state: TaskState, target: Target) -> Score:
        return Score(value="C" if state.metadata.get("read") == ["mine"] * int(state.metadata["n"]) else "I")

    return score


def _task(n: int) -> Task:
    return Task(dataset=[Sample(id="s", input="go", metadata={"n": n})], solver=fork_n(), scorer=read_back(),
                sandbox=CONFIG)


async def _run(n: int, tmp_path: Path, **options) -> tuple[object, float]:  # type: ignore[no-untyped-def]
    started = time.monotonic()
    [log] = await eval_async(_task(n), "scripted", log_dir=tmp_path / str(n), **options)
    return log, time.monotonic() - started


def _assert_refused_at_once(log, elapsed: float) -> None:  # type: ignore[no-untyped-def]
    [sample] = log.samples
    assert sample.error is not None and REFUSED in sample.error.message, sample.error
    assert "\n" not in REFUSED and elapsed < CONFIG["acquire_timeout"], elapsed  # not the wait running out


@pytest.mark.celery
async def test_a_fork_that_cannot_fit_on_its_worker_fails_at_once_naming_the_slots(
        tmp_path: Path, sandbox_image: str, fleet) -> None:  # type: ignore[no-untyped-def]
    fleet.worker(slots=1)
    _assert_refused_at_once(*await _run(2, tmp_path, broker=fleet.redis.url))
    log, _ = await _run(1, tmp_path, broker=fleet.redis.url)
    assert log.samples[0].scores["read_back"].value == "C", log.samples[0].error


async def test_a_fork_that_cannot_fit_on_the_embedded_host_fails_at_once_naming_the_slots(
        tmp_path: Path, sandbox_image: str) -> None:
    _assert_refused_at_once(*await _run(2, tmp_path, max_sandboxes=1))
    log, _ = await _run(1, tmp_path, max_sandboxes=1)
    assert log.samples[0].scores["read_back"].value == "C", log.samples[0].error


@pytest.mark.parametrize(("forks", "cap", "refused"), [(1, 1, False), (2, 1, True), (3, 2, False), (4, 2, True),
                                                       (255, 128, False), (256, 128, True)])
def test_fork_refusal(forks: int, cap: int, refused: bool) -> None:
    assert (fork_refusal(forks, cap) is not None) is refused
