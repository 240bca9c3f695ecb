"""A full Redis must not lose a finished result.

Before: with ``maxmemory`` reached while a call finished, the result was dropped and never recovered
after the limit was lifted. Now: the worker PUBLISHes it at once (allowed at maxmemory: a waiting
orchestrator resolves the call), announces ``store_failed`` on the fleet-events channel (so a wait that
still runs out names the broker's condition), keeps it and stores it once Redis takes writes again.
Against a real redis-server with ``maxmemory`` and a real worker.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from orchestrator.dispatch import SampleRoute
from tests.distributed._helpers import dispatch, request
from tests.support.fleet import RedisServer, WorkerProcess, _wait, ensure_fleet_secret
from workers.fleet import UnstoredResults, is_out_of_memory, load_keyring, names, read_stored, verify_event

pytestmark = [pytest.mark.celery, pytest.mark.timeout(180)]


async def _until(predicate, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    """``_wait`` that lets the event loop run (the dispatcher publishes and listens on it)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        if loop.time() > deadline:
            raise TimeoutError(f"timed out after {timeout:g} s waiting for {what}")
        await asyncio.sleep(0.05)


async def test_a_result_finished_while_redis_is_full_is_delivered_and_kept(tmp_path) -> None:
    from orchestrator.dispatch import CeleryDispatcher

    ensure_fleet_secret()
    redis = RedisServer().start()
    # A long heartbeat TTL: heartbeats are writes too, and this test is about results, not liveness.
    worker = WorkerProcess(redis.url, heartbeat_ttl=60.0, allow_local=False).start()
    dispatcher = CeleryDispatcher(redis.url)
    client = redis.client()
    events = client.pubsub()
    events.subscribe(names.FLEET_EVENTS_CHANNEL)
    try:
        client.config_set("maxmemory-policy", "noeviction")
        req = request("sleeper", {"seconds": 2.0})
        [fut] = dispatch(dispatcher, [req], SampleRoute(queue=names.host_queue(worker.host)))
        await _until(lambda: client.exists(names.call_key(req.call_id)), 30, "the call to start (its claim)")
        client.config_set("maxmemory", 1)  # full: every write is refused with OOM from now on
        with pytest.raises(Exception, match="maxmemory"):
            client.set("probe", "x")
        outcome = await asyncio.wait_for(fut, 60)
        assert outcome.error is None and outcome.result == "done", outcome  # delivered by PUBLISH
        assert client.get(names.outcome_key(req.call_id)) is None  # not stored: Redis is full

        def store_failed() -> bool:
            message = events.get_message(timeout=0.2)
            data = json.loads(message["data"]) if message and message["type"] == "message" else {}
            return (data.get("kind") == "store_failed" and data.get("task_id") == req.call_id
                    and "maxmemory" in data["error"] and verify_event(load_keyring(), data))  # signed

        await _until(store_failed, 30, "the worker to announce the unstored result")
        client.config_set("maxmemory", 0)  # the limit lifted: the worker's copy is stored
        await _until(lambda: client.get(names.outcome_key(req.call_id)) is not None, 60,
                     "the kept outcome to be stored")
        stored = read_stored(load_keyring(), req.call_id, client.get(names.outcome_key(req.call_id)))
        assert stored is not None and json.loads(stored)["result"] == "done"  # signed by the worker
        assert worker.alive()
    finally:
        client.config_set("maxmemory", 0)
        events.close()
        await dispatcher.aclose()
        worker.cleanup()
        redis.cleanup()


def test_unstored_results_are_bounded() -> None:
    """Kept until stored, but never more than max_bytes (oldest dropped first) or max_age."""
    stored: list[str] = []
    full = {"on": True}

    def store(key: str, value: str, expires: int) -> None:
        if full["on"]:
            raise RuntimeError("OOM command not allowed when used memory > 'maxmemory'.")
        stored.append(key)

    held = UnstoredResults(store, publish=lambda k, v: None, announce=lambda t, e: None, max_bytes=250)
    for i in range(5):
        held.keep(f"k{i}", "x" * 100, 60, f"t{i}", "OOM")
    assert len(held) == 2  # 500 bytes asked, 250 allowed: the newest two kept
    full["on"] = False
    _wait(lambda: len(held) == 0, 10, "the kept results to be stored")
    assert stored == ["k3", "k4"]
    assert is_out_of_memory(RuntimeError("OOM command not allowed")) and not is_out_of_memory(RuntimeError("WRONGTYPE"))
