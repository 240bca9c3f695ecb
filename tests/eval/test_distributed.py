"""Distributed mode: a worker host lost mid-sample → sandbox_unavailable → the sample is retried elsewhere."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from orchestrator.eval import eval_async

from .task_files import BASIC

pytestmark = [pytest.mark.celery, pytest.mark.timeout(300)]


async def test_lost_worker_host_retries_samples_on_another_host(tmp_path: Path, fleet) -> None:  # type: ignore[no-untyped-def]
    doomed = fleet.worker(concurrency=8, slots=8)
    survivor = fleet.worker(concurrency=8, slots=8)

    async def kill_soon() -> None:
        await asyncio.sleep(1.0)  # samples are inside their 2 s bash call by now
        doomed.kill()

    killer = asyncio.create_task(kill_soon())
    [log] = await eval_async(f"{BASIC}@sandboxed", "scripted/bash_then_answer", task_args={"n": 6},
                             broker=fleet.redis.url, log_dir=tmp_path, retry_on_error=2, max_samples=6)
    await killer
    assert not doomed.alive() and survivor.alive()
    assert log.status == "success", [s.error for s in log.samples]
    assert all(s.scores["includes"].value == "C" for s in log.samples)
    retried = [s for s in log.samples if s.error_retries]
    assert retried, "some samples had their sandbox on the killed host"
    for s in retried:
        assert s.error_retries[0].type in ("SandboxLostError", "SandboxUnavailableError")
        hosts = {e.host for e in s.events if e.event == "tool" and e.function == "bash"}
        assert hosts == {survivor.host}  # the final attempt ran on the surviving host


def test_resume_after_sigkill_closes_the_dead_runs_sandboxes_on_workers(tmp_path: Path, fleet) -> None:  # type: ignore[no-untyped-def]
    import os
    import subprocess
    import sys
    from collections import Counter

    from orchestrator.eval import read_eval_log

    from .test_resume import _kill_after_samples

    boxes = tmp_path / "boxes"
    boxes.mkdir()
    # Where local sandboxes live is the worker's choice (a message naming a host directory is refused).
    fleet.worker(concurrency=8, slots=8, extra_args=("--local-root", str(boxes)))
    marker = tmp_path / "runs.txt"
    log_dir = tmp_path / "logs"
    env = {**os.environ, "TOOLFLEET_TEST_MARKER": str(marker)}
    cmd = [sys.executable, "-m", "orchestrator.cli", "eval", f"{BASIC}@sandboxed", "--model",
           "scripted/bash_then_answer",
           "-T", "n=8", "-T", "sandbox=local", "--broker", fleet.redis.url,
           "--max-samples", "3", "--log-dir", str(log_dir), "--display", "none"]
    # Kill while every slot holds a journaled sandbox (so no open is in flight: a sandbox whose open had
    # not returned when the orchestrator died is the worker's orphan reaping's to remove, not the resume's).
    path = _kill_after_samples(cmd, log_dir, env, at_least=2, open_sandboxes=3)

    before = read_eval_log(path)
    finished = {str(s.id) for s in before.samples}
    assert before.open_sandboxes, "the killed run had sandboxes open on the worker"
    assert any(boxes.iterdir()), "their directories are still on the worker host"

    done = subprocess.run([sys.executable, "-m", "orchestrator.cli", "eval-retry", str(path), "--display", "none"],
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    after = read_eval_log(path)
    assert after.status == "success" and len(after.samples) == 8
    assert after.open_sandboxes == []
    assert list(boxes.iterdir()) == []  # nothing leaked on the worker host
    runs = Counter(marker.read_text().split())
    assert all(runs[s] == 1 for s in finished)
