"""Outputs bounded for the fleet, not only for the model: the worker caps outcomes before keeping them,
its call memory is bounded by bytes, and Redis holds results only until the orchestrator reads them.
"""

from __future__ import annotations

import argparse
import asyncio

import pytest

from orchestrator._wire import CallOutcome
from orchestrator.tool._content import ContentImage, ContentText
from orchestrator.tool._tool_call import ToolCallError
from workers._call_memory import CallMemory
from workers._outcome_cap import MESSAGE_CAP, cap_outcome, cut_middle

MiB = 1024 * 1024


def test_cut_middle_keeps_head_and_tail_and_says_what_it_left_out() -> None:
    text = "H" * 3 * MiB + "T" * 3 * MiB
    cut = cut_middle(text, MiB)
    assert len(cut.encode()) <= MiB
    assert cut.startswith("H" * 1000) and cut.endswith("T" * 1000)
    assert "omitted by the toolfleet worker" in cut
    assert cut_middle("small", MiB) == "small"
    multibyte = "é" * MiB  # 2 MiB of UTF-8
    assert len(cut_middle(multibyte, MiB).encode()) <= MiB


def test_cap_outcome_bounds_every_part() -> None:
    outcome = CallOutcome(call_id="c", result=[ContentText(text="x" * 5 * MiB), ContentImage(image="i" * 5 * MiB),
                                               "tail"],
                          error=ToolCallError(type="limit", message="m" * 5 * MiB))
    capped = cap_outcome(outcome, MiB)
    assert len(capped.model_dump_json()) < MiB + 2 * MESSAGE_CAP
    assert isinstance(capped.result, list) and "omitted" in capped.result[1].text  # the image is gone, named
    small = CallOutcome(call_id="c", result="ok")
    assert cap_outcome(small, MiB) is small


async def test_call_memory_is_bounded_by_bytes() -> None:
    memory = CallMemory(None, "h/b", max_bytes=8 * MiB)
    for i in range(50):
        await memory.run_once(f"c{i}", lambda i=i: _outcome(f"c{i}", MiB), claim_ttl=10)
    assert memory.bytes <= 8 * MiB
    assert memory.recall("c49") is not None and memory.recall("c0") is None


async def _outcome(call_id: str, size: int) -> CallOutcome:
    return CallOutcome(call_id=call_id, result="x" * size)


@pytest.mark.celery
async def test_one_huge_output_is_capped_at_the_worker(tmp_path) -> None:
    """A call returning 10 MB through a real worker: what comes back (and what Redis held) is <= the cap."""
    from orchestrator.dispatch import CeleryDispatcher, SampleRoute
    from tests.distributed._helpers import one, request
    from tests.support.fleet import RedisServer, WorkerProcess
    from workers.fleet import names

    redis = RedisServer().start()
    worker = WorkerProcess(redis.url, allow_local=False, extra_args=("--max-outcome-bytes", str(MiB))).start()
    dispatcher = CeleryDispatcher(redis.url)
    try:
        req = request("text_of_size", {"n": 10_000_000})
        outcome = await one(dispatcher, req, route=SampleRoute(queue=names.host_queue(worker.host)), bound=120)
        assert outcome.error is None, outcome.error
        assert isinstance(outcome.result, str) and len(outcome.result.encode()) <= MiB
        assert "omitted by the toolfleet worker" in outcome.result
        client = redis.client()
        for _ in range(100):  # the orchestrator deletes what it read (asynchronously, batched)
            if client.get(names.result_key(req.call_id)) is None:
                break
            await asyncio.sleep(0.05)
        assert client.get(names.result_key(req.call_id)) is None
        assert worker.alive()
    finally:
        await dispatcher.aclose()
        worker.cleanup()
        redis.cleanup()


@pytest.mark.celery
@pytest.mark.slow
@pytest.mark.parametrize("sandbox", ["local", pytest.param("docker", marks=pytest.mark.docker)])
async def test_flood_of_100mb_outputs_keeps_worker_and_redis_bounded(sandbox, request) -> None:
    """The issue's figure: 50 calls each printing 100 MB through the broker (``toolfleet bench flood``)."""
    from tests.benchmarks import flood

    if sandbox == "docker":
        request.getfixturevalue("sandbox_image")
    parser = argparse.ArgumentParser()
    flood.add_arguments(parser)
    result = await flood.run(parser.parse_args(["--calls", "50", "--mb", "100", "--sandbox", sandbox]))
    assert result["errors"] == 0, result
    assert result["worker_peak_rss_mb"] < flood.WORKER_RSS_BOUND_MB, result
    assert result["redis_peak_mb"] < flood.REDIS_BOUND_MB, result
    assert result["model_sees_bytes"] < 64 * 1024, result
