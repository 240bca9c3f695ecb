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
