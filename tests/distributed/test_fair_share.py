"""Fair sharing of one fleet between evals (workers/fleet/_placement.py), with a real Redis and real workers.

* The rule, step by step, through the real reservation script: an eval over its fair share waits while
  another eval under its share waits; nobody waits on a fleet with room; an eval whose orchestrator
  stopped renewing stops counting.
* Two evals on one fleet whose combined demand exceeds it: both finish with every sample scored, and
  the samples that waited for a slot say so in their transcript (``sandbox_wait`` events).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from redis.asyncio import Redis

from orchestrator.eval import eval_async
from tests.eval.task_files import BASIC
from workers.fleet import (
    FairShareError,
    HostRecord,
    NoCapacityError,
    Placer,
    names,
    release_eval,
    release_slots,
    stop_waiting,
)

pytestmark = [pytest.mark.celery, pytest.mark.timeout(240)]


async def _host(redis: Redis, name: str, slots: int) -> None:
    record = HostRecord(host=name, queue=names.host_queue(name), node=names.worker_nodename(name), boot=f"boot-{name}",
                        slots=slots, ts=time.time())
    await redis.hset(names.heartbeat_key(name), mapping=record.to_hash())
    await redis.sadd(names.HOSTS_SET, name)


async def _give_back(redis: Redis, host: str, eval_id: str) -> None:
    await release_eval(redis, eval_id)
    await release_slots(redis, host)


async def test_an_eval_over_its_fair_share_waits_while_another_eval_waits(own_redis) -> None:  # type: ignore[no-untyped-def]
    redis = Redis.from_url(own_redis.url)
    try:
        await _host(redis, "h1", slots=4)
        placer = Placer(redis, hosts_ttl=0.0)
        for _ in range(4):  # alone on the fleet, eval a may take all of it
            assert (await placer.reserve(eval_id="a")).host == "h1"
        with pytest.raises(NoCapacityError, match="all full"):
            await placer.reserve(eval_id="b")  # b now waits
        assert await redis.zscore(names.EVALS_WAITING, "b") is not None
        await _give_back(redis, "h1", "a")  # one of a's samples finished
        with pytest.raises(FairShareError, match="eval 'a' holds 3 of its 2 slots"):
            await placer.reserve(eval_id="a")  # a is over its half while b waits: the slot is b's
        assert (await placer.reserve(eval_id="b")).host == "h1"
        await stop_waiting(redis, "b")  # b has no sample waiting any more
        await _give_back(redis, "h1", "a")
        assert (await placer.reserve(eval_id="a")).host == "h1"  # nobody waits: a may use the room
        assert {k.decode(): int(v) for k, v in (await redis.hgetall(names.EVAL_SLOTS)).items()} == {"a": 3, "b": 1}
        # a's orchestrator stops renewing (it died): its holdings stop counting for the fair share.
        await redis.zadd(names.EVALS_ALIVE, {"a": 1.0})
        await _host(redis, "h2", slots=4)
        await placer.reserve(eval_id="c")  # c is then one of two active evals (b, c), whatever a held
        assert "a" not in {k.decode() for k in await redis.hkeys(names.EVAL_SLOTS)}
    finally:
        await redis.aclose()


async def test_an_evals_count_restarted_by_a_redis_restart_never_goes_negative(own_redis) -> None:  # type: ignore[no-untyped-def]
    """Redis restarts while an eval holds three sandboxes (its count starts again from nothing); as those
    close, the count stays at zero and its entry goes, instead of reading -3 (three slots beyond the
    eval's fair share) and staying behind after the eval."""
    redis = Redis.from_url(own_redis.url)
    try:
        await _host(redis, "h1", slots=4)
        placer = Placer(redis, hosts_ttl=0.0)
        for _ in range(3):
            await placer.reserve(eval_id="a")
        assert int(await redis.hget(names.EVAL_SLOTS, "a")) == 3
        await asyncio.to_thread(own_redis.restart)
        await _host(redis, "h1", slots=4)
        assert (await placer.reserve(eval_id="a")).host == "h1"  # a sample opened after the restart counts
        for _ in range(4):  # all four close
            await release_eval(redis, "a")
        assert await redis.hget(names.EVAL_SLOTS, "a") is None
    finally:
        await redis.aclose()


async def test_placement_survives_redis_forgetting_its_script(own_redis) -> None:  # type: ignore[no-untyped-def]
    redis = Redis.from_url(own_redis.url)
    try:
        await _host(redis, "h1", slots=4)
        placer = Placer(redis, hosts_ttl=0.0)
        await placer.reserve(eval_id="a")
        await redis.script_flush()  # as a restarted Redis has: the cached script is gone
        assert (await placer.reserve(eval_id="a")).host == "h1"
        assert int(await redis.get(names.slots_used_key("h1"))) == 2
    finally:
        await redis.aclose()


async def test_with_no_live_worker_a_sample_waits_only_no_host_wait(own_redis) -> None:  # type: ignore[no-untyped-def]
    from orchestrator._wire import SandboxSpec
    from orchestrator.dispatch import CeleryDispatcher, CeleryDispatcherConfig
    from orchestrator.util import SandboxUnavailableError

    # A busy fleet is waited for up to an hour; a fleet with no worker at all only no_host_wait.
    d = CeleryDispatcher(config=CeleryDispatcherConfig(broker_url=own_redis.url, placement_wait=3600, no_host_wait=0.5))
    try:
        with pytest.raises(SandboxUnavailableError, match="No worker host is alive"):
            await asyncio.wait_for(d.open_sandbox(SandboxSpec(eval_id="e", sample_id="s", config={"type": "local"})),
                                   30)
    finally:
        await d.aclose()


async def test_two_evals_whose_demand_exceeds_the_fleet_both_finish(tmp_path: Path, fleet) -> None:  # type: ignore[no-untyped-def]
    fleet.worker(concurrency=8, slots=3)

    async def one_eval(name: str, delay: float):  # type: ignore[no-untyped-def]
        await asyncio.sleep(delay)
        [log] = await eval_async(f"{BASIC}@sandboxed", "scripted/bash_then_answer", task_args={"n": 5},
                                 broker=fleet.redis.url, log_dir=tmp_path / name, max_samples=5, display="none")
        return log

    # 10 samples at once (each holds its sandbox for a 2 s call) on a fleet of 3 slots.
    first, second = await asyncio.wait_for(asyncio.gather(one_eval("first", 0.0), one_eval("second", 0.5)), 200)
    waits = []
    for log in (first, second):
        assert log.status == "success", [s.error for s in log.samples]
        assert len(log.samples) == 5 and all(s.scores["includes"].value == "C" for s in log.samples)
        waits += [e.data for s in log.samples for e in s.events if e.event == "info" and e.source == "sandbox_wait"]
    assert any(w["waiting"] for w in waits), "some sample waited for a slot"
    ended = [w for w in waits if not w["waiting"]]
    assert ended and all(w["placed"] for w in ended)  # every wait ended with a slot, none with a failure


async def test_a_killed_orchestrators_count_is_put_right_by_the_one_that_resumes_its_eval(fleet) -> None:  # type: ignore[no-untyped-def]
    """An orchestrator dies holding three sandboxes of an eval (its count is never given back);
    ``eval-retry`` resumes the eval in a new one. Within a renewal the eval's count is what the new one
    holds, and it goes when that one is done, instead of staying three high for the eval's life (less
    than its fair share while other evals wait) and behind it."""
    from orchestrator._wire import SandboxSpec
    from orchestrator.dispatch import CeleryDispatcher, CeleryDispatcherConfig
    from tests.support.waits import until

    fleet.worker(slots=8)
    eval_id = "e-resumed"
    config = CeleryDispatcherConfig(broker_url=fleet.url, watch_interval=0.25)
    dead = CeleryDispatcher(config=config)
    for i in range(3):
        await dead.open_sandbox(SandboxSpec(eval_id=eval_id, sample_id=f"s{i}", config={"type": "local"}))
    await dead.aclose()  # as if SIGKILLed: its sandboxes were never closed, their count never given back
    client = fleet.redis.client()
    assert int(client.hget(names.EVAL_SLOTS, eval_id)) == 3
    live = CeleryDispatcher(config=config)
    try:
        route = await live.open_sandbox(SandboxSpec(eval_id=eval_id, sample_id="s9", config={"type": "local"}))
        await until(lambda: client.hget(names.EVAL_SLOTS, eval_id) == b"1", "the resumed eval's count to be its own")
        await live.close_sandbox(route)
    finally:
        await live.aclose()
    assert client.hget(names.EVAL_SLOTS, eval_id) is None
