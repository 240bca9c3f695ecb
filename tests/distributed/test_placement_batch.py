"""Reservations asked together go to Redis in one script call (workers/fleet/_reserve.py), with a real Redis.

* A burst of reservations asked in the same loop tick costs one script call, not one each, and fills
  the fleet exactly: no host over its slots, the least loaded first, every slot counted.
* The batch gives what the same reservations one at a time would: the same hosts in the same order,
  the same fair-share refusals (an eval over its share while another waits is refused inside a batch,
  as the reservations before it in that batch changed the counts).
* A caller that gives up while its reservation is in flight does not leak the slot.
* The encoding is pure: each candidate host named once, whatever the number of reservations.
"""

from __future__ import annotations

import asyncio
import random
import time

import pytest
from redis.asyncio import Redis

from workers.fleet import FairShareError, HostRecord, NoCapacityError, Placer, _reserve, names

pytestmark = [pytest.mark.celery, pytest.mark.timeout(120)]


async def _host(redis: Redis, name: str, slots: int, draining: bool = False) -> None:
    record = HostRecord(host=name, queue=names.host_queue(name), node=names.worker_nodename(name), boot=f"boot-{name}",
                        slots=slots, ts=time.time(), draining=draining)
    await redis.hset(names.heartbeat_key(name), mapping=record.to_hash())
    await redis.sadd(names.HOSTS_SET, name)


async def _used(redis: Redis, hosts: list[str]) -> dict[str, int]:
    return {h: int(await redis.get(names.slots_used_key(h)) or 0) for h in hosts}


def test_encoding_names_each_candidate_host_once() -> None:
    asks = [_reserve.Ask([("h1", 0, 4), ("h2", 0, 8)], 1, "a", 12),
            _reserve.Ask([("h2", 0, 8), ("h1", 1, 4)], 2, "", 12),
            _reserve.Ask([("h1", 0, 4)], 1, "a", 12, lease="t1")]
    call = _reserve.encode(asks, 30.0, 5.0, 8.0)
    assert call.hosts == ["h1", "h2"]
    assert call.keys == [names.slots_used_key("h1"), names.slots_used_key("h2"), names.heartbeat_key("h1"),
                         names.heartbeat_key("h2"), names.leased_key("h1"), names.leased_key("h2"),
                         names.EVAL_SLOTS, names.EVALS_ALIVE, names.EVALS_WAITING]
    # m, alive ttl, waiting ttl, r, lease ttl; per ask: weight, eval, capacity, lease token ('' = a
    # caller's), k, then k (host index, tier, slots).
    assert call.args == [2, 30.0, 5.0, 3, 8.0, 1, "a", 12, "", 2, 1, 0, 4, 2, 0, 8, 2, "", 12, "", 2, 2, 0, 8, 1, 1, 4,
                         1, "a", 12, "t1", 1, 1, 0, 4]
    answers = _reserve.decode(call, 3, [2, b"boot-h2", 0, -1, 3, 2, 0, 0, 0])
    assert answers == [_reserve.Answer(host="h2", boot="boot-h2"), _reserve.Answer(fair_share=(3, 2)),
                       _reserve.Answer()]
    with pytest.raises(ValueError, match="reservation script answered"):
        _reserve.decode(call, 2, [1, b"x", 0])  # too short: never read as some answer
    with pytest.raises(ValueError, match="reservation script named host 3"):
        _reserve.decode(call, 1, [3, b"x", 0])  # names a host the call did not


async def test_a_burst_is_one_script_call_and_fills_the_fleet_exactly(own_redis) -> None:  # type: ignore[no-untyped-def]
    redis = Redis.from_url(own_redis.url)
    try:
        sizes = {"h1": 3, "h2": 5, "h3": 4}
        for name, slots in sizes.items():
            await _host(redis, name, slots)
        await _host(redis, "h4", 50, draining=True)  # never chosen
        placer = Placer(redis)
        await placer.hosts()  # the host list cached: what follows is reservations only
        before = (await redis.info("commandstats")).get("cmdstat_evalsha", {}).get("calls", 0)
        got = await asyncio.gather(*(placer.reserve(eval_id="a") for _ in range(12)))
        after = (await redis.info("commandstats")).get("cmdstat_evalsha", {}).get("calls", 0)
        assert after - before == 1  # twelve reservations, one script call
        assert list(placer.batches)[-1][1] == 12
        assert sorted(h.host for h in got) == sorted(h for h, n in sizes.items() for _ in range(n))
        assert await _used(redis, list(sizes)) == sizes
        assert int(await redis.hget(names.EVAL_SLOTS, "a")) == 12
        # The first three went one to each idle host (least loaded first), not all to the largest.
        assert {h.host for h in got[:3]} == {"h1", "h2", "h3"}
        with pytest.raises(NoCapacityError, match="all full"):
            await placer.reserve(eval_id="a")
    finally:
        await redis.aclose()


async def _one_at_a_time_vs_batched(redis: Redis, plan: list[tuple[str, int]], batched: bool) -> list[str]:
    """Reserve ``plan`` ((eval, weight) in order) on a fresh fleet; what each got."""
    await redis.flushdb()
    for name, slots in {"h1": 4, "h2": 6}.items():
        await _host(redis, name, slots)
    await redis.zadd(names.EVALS_WAITING, {"b": time.time() + 60})  # eval b waits for a slot throughout
    placer = Placer(redis, rng=random.Random(7))

    async def one(eval_id: str, weight: int) -> str:
        try:
            return (await placer.reserve(eval_id=eval_id, weight=weight)).host
        except FairShareError:
            return "fair-share"
        except NoCapacityError:
            return "full"

    if batched:
        return list(await asyncio.gather(*(one(e, w) for e, w in plan)))
    return [await one(e, w) for e, w in plan]


async def test_a_batch_gives_what_one_at_a_time_gives(own_redis) -> None:  # type: ignore[no-untyped-def]
    redis = Redis.from_url(own_redis.url)
    try:
        # a, b and c share 10 slots, b waiting from the start: with all three active a share is 3.
        plan = [("a", 1), ("a", 1), ("c", 2), ("a", 1), ("a", 1), ("b", 1), ("c", 1), ("c", 1), ("b", 2), ("a", 1)]
        one_by_one = await _one_at_a_time_vs_batched(redis, plan, batched=False)
        together = await _one_at_a_time_vs_batched(redis, plan, batched=True)
        assert together == one_by_one
        # a's 4th slot and c's 4th are refused while b (under its share) waits; once b holds its share
        # of 3, a may take a 4th again. Each decision saw the reservations before it in the batch.
        assert [i for i, got in enumerate(together) if got == "fair-share"] == [4, 7]
        assert "full" not in together
    finally:
        await redis.aclose()


async def test_a_caller_that_gives_up_in_flight_leaks_no_slot(own_redis) -> None:  # type: ignore[no-untyped-def]
    redis = Redis.from_url(own_redis.url)
    try:
        await _host(redis, "h1", 4)
        placer = Placer(redis)
        await placer.hosts()
        task = asyncio.ensure_future(placer.reserve(eval_id="a"))
        await asyncio.sleep(0)  # asked: the script call is on its way
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        assert placer._sender is not None
        await placer._sender  # the answer arrives for nobody
        await asyncio.gather(*placer._releases)
        assert await _used(redis, ["h1"]) == {"h1": 0}
        assert int(await redis.hget(names.EVAL_SLOTS, "a") or 0) == 0
    finally:
        await redis.aclose()


async def test_a_reservation_pinned_to_a_host_that_is_gone_is_a_lost_sandbox_not_a_wait(own_redis) -> None:  # type: ignore[no-untyped-def]
    # A fork must open on the host holding its snapshot; that host gone, waiting cannot bring it back.
    from orchestrator.util import SandboxLostError, SandboxUnavailableError
    from workers.fleet import SnapshotHostLostError

    redis = Redis.from_url(own_redis.url)
    try:
        await _host(redis, "h1", 4)
        placer = Placer(redis)
        with pytest.raises(SandboxLostError, match="'h9', which holds the snapshot, is not alive") as lost:
            await placer.reserve(eval_id="a", only="h9")
        assert isinstance(lost.value, SandboxUnavailableError) and not isinstance(lost.value, NoCapacityError)
        assert SnapshotHostLostError is SandboxLostError  # the fleet's public name for it
        assert (await placer.reserve(eval_id="a", only="h1")).host == "h1"
        assert await _used(redis, ["h1"]) == {"h1": 1}
    finally:
        await redis.aclose()


async def test_a_fork_on_a_full_host_is_counted_beyond_its_slots_and_new_samples_find_it_full(own_redis) -> None:  # type: ignore[no-untyped-def]
    # Every slot held by a sample waiting to fork there: the fork must not wait for one (docs/faults.md).
    redis = Redis.from_url(own_redis.url)
    try:
        await _host(redis, "h1", 2)
        placer = Placer(redis)
        assert [(await placer.reserve(eval_id="a")).host for _ in range(2)] == ["h1", "h1"]
        with pytest.raises(NoCapacityError):
            await placer.reserve(eval_id="a")
        assert [(await placer.reserve(only="h1")).host for _ in range(2)] == ["h1", "h1"]  # both samples' forks
        assert await _used(redis, ["h1"]) == {"h1": 4}
        with pytest.raises(NoCapacityError):  # a new sample waits until the forks close: they come first
            await placer.reserve(eval_id="a")
    finally:
        await redis.aclose()
