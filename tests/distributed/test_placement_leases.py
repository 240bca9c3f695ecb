"""Slot leases (workers/fleet/_leases.py, ``Placer(leases=N)``): slots reserved ahead, handed out without a
Redis round trip, with a real Redis (and, for the dispatcher's knob, real workers).

* After a burst, the next reservations are served from leases (no script call); the slot counters
  always equal the reservations handed out, and the hosts' leased sets the leases held; a stream of
  reservations keeps finding leases while the pool refills in the background.
* Fair share stays honest: a lease ask never marks its eval as waiting, is refused while another
  eval waits, and a caller's reservation is refused for the fair share exactly as without leases.
* Leases are given back: when idle, at ``aclose`` / ``release_leases``, when their host drains or
  is gone; a restarted host keeps them (its leased set outlives the process); those of an
  orchestrator that died expire by themselves.
* Leasing off (0) is the placement of before: a script call per reservation tick, nothing held.
"""

from __future__ import annotations

import asyncio
import random
import time

import pytest
from redis.asyncio import Redis

from workers.fleet import FairShareError, HostRecord, NoCapacityError, Placer, keep_evals_alive, names

from ._helpers import local_spec

pytestmark = [pytest.mark.celery, pytest.mark.timeout(120)]

POLL_S = 30.0  # bound on waiting for a background give-back to show in Redis


@pytest.fixture
async def redis(own_redis):  # type: ignore[no-untyped-def]
    """A client of a private Redis (the tests write hosts and counters of their own)."""
    client = Redis.from_url(own_redis.url)
    yield client
    await client.aclose()


async def _host(redis: Redis, name: str, slots: int, draining: bool = False, boot: str | None = None,
                registries: list[str] | None = None) -> None:
    record = HostRecord(host=name, queue=names.host_queue(name), node=names.worker_nodename(name),
                        boot=boot or f"boot-{name}", slots=slots, ts=time.time(), draining=draining,
                        registries=registries or [])
    await redis.hset(names.heartbeat_key(name), mapping=record.to_hash())
    await redis.sadd(names.HOSTS_SET, name)


async def _used(redis: Redis, hosts: list[str]) -> dict[str, int]:
    return {h: int(await redis.get(names.slots_used_key(h)) or 0) for h in hosts}


async def _leased(redis: Redis, hosts: list[str]) -> dict[str, int]:
    """Unexpired tokens in each host's leased set (what the script counts)."""
    now = await redis.time()
    return {h: await redis.zcount(names.leased_key(h), now[0] + now[1] / 1e6, "+inf") for h in hosts}


async def _eval_slots(redis: Redis, eval_id: str) -> int:
    return int(await redis.hget(names.EVAL_SLOTS, eval_id) or 0)


async def _settled(placer: Placer) -> None:
    """Every script call in flight answered and every give-back done (bounded)."""
    for _ in range(1000):
        sender = placer._sender
        if (sender is None or sender.done()) and not placer._releases:
            return
        if sender is not None and not sender.done():
            await asyncio.wait_for(asyncio.shield(sender), POLL_S)
        await asyncio.wait_for(asyncio.gather(*list(placer._releases), return_exceptions=True), POLL_S)
    raise AssertionError("the placer never settled")


def _leasing(redis: Redis, **kw) -> Placer:  # type: ignore[no-untyped-def]
    """A leasing Placer whose timing cannot change what a test sees, however loaded the machine: its
    host list, its demand window and its leases last the whole test (by default 1 s, 3 s and 3 s)."""
    kw.setdefault("hosts_ttl", 600.0)
    kw.setdefault("lease_window_s", 600.0)
    kw.setdefault("lease_idle_s", 600.0)
    kw.setdefault("rng", random.Random(3))
    return Placer(redis, leases=kw.pop("leases", 64), **kw)


async def test_after_a_burst_the_next_reservations_are_served_from_leases(redis) -> None:  # type: ignore[no-untyped-def]
    hosts = ["h1", "h2", "h3"]
    for name in hosts:
        await _host(redis, name, 100)
    placer = _leasing(redis)
    await placer.hosts()
    await asyncio.gather(*(placer.reserve(eval_id="a") for _ in range(20)))
    await _settled(placer)
    # One script call: the 20 callers' reservations, then the lease asks after them (20 found the
    # pool empty: slow start reaches the cap of 64 at once).
    assert [n for _, n in placer.batches] == [20 + 64]
    assert placer.leased == 64 and placer.lease_hits == 0
    used, leased = await _used(redis, hosts), await _leased(redis, hosts)
    assert sum(used.values()) == 20 and sum(leased.values()) == 64 and await _eval_slots(redis, "a") == 84
    in_use = [used[h] + leased[h] for h in hosts]
    assert max(in_use) - min(in_use) <= 1  # leases spread like reservations

    later = [await placer.reserve(eval_id="a") for _ in range(5)]
    await _settled(placer)
    assert len(placer.batches) == 1  # no round trip: still above the low-water mark (3/4 of 64)
    assert placer.lease_hits == 5 and placer.leased == 59
    assert {h.host for h in later} <= set(hosts) and all(h.boot == f"boot-{h.host}" for h in later)
    assert sum((await _used(redis, hosts)).values()) == 25  # the hits moved to the counters
    assert sum((await _leased(redis, hosts)).values()) == 59

    # A stream, one at a time with the loop free between them: the pool refills in the background
    # (whole blocks, each below the low-water mark) and every reservation finds a lease.
    calls = len(placer.batches)
    for _ in range(60):
        await placer.reserve(eval_id="a")
        await _settled(placer)
    assert placer.lease_hits == 65
    assert 1 <= len(placer.batches) - calls < 60  # refills in blocks, not one per reservation
    assert all(n > 1 for _, n in list(placer.batches)[calls:])
    assert sum((await _used(redis, hosts)).values()) == 85
    assert sum((await _leased(redis, hosts)).values()) == placer.leased
    assert await _eval_slots(redis, "a") == 85 + placer.leased

    await placer.release_leases()
    assert placer.leased == 0 and sum((await _leased(redis, hosts)).values()) == 0
    assert sum((await _used(redis, hosts)).values()) == 85 and await _eval_slots(redis, "a") == 85
    await placer.aclose()


async def test_a_reservation_finding_the_pool_empty_waits_for_the_lease_asks_in_flight(redis) -> None:  # type: ignore[no-untyped-def]
    await _host(redis, "h1", 3)
    placer = _leasing(redis)
    await placer.hosts()
    first = [asyncio.ensure_future(placer.reserve(eval_id="a")) for _ in range(2)]
    await asyncio.sleep(0)  # both asked (misses): the sender is scheduled
    await asyncio.sleep(0)  # the sender sent their reservations and four lease asks (slow start)
    later = [asyncio.ensure_future(placer.reserve(eval_id="a")) for _ in range(4)]
    got = await asyncio.gather(*first, *later, return_exceptions=True)
    await _settled(placer)
    # The four later ones waited for the four lease asks' answers: one fitted (later[0] took it),
    # the others found no room, so each waiter left without one asked Redis itself: full.
    assert [g.host if isinstance(g, HostRecord) else type(g).__name__ for g in got] == [
        "h1", "h1", "h1", "NoCapacityError", "NoCapacityError", "NoCapacityError"]
    assert placer.lease_waits == 1 and placer.lease_hits == 0
    assert await _used(redis, ["h1"]) == {"h1": 3} and placer.leased == 0
    assert await _leased(redis, ["h1"]) == {"h1": 0}
    assert await redis.zscore(names.EVALS_WAITING, "a") is not None  # the callers' asks found it full


async def test_a_lease_ask_never_marks_its_eval_waiting(redis) -> None:  # type: ignore[no-untyped-def]
    await _host(redis, "h1", 3)
    placer = _leasing(redis)
    await placer.hosts()
    await asyncio.gather(*(placer.reserve(eval_id="a") for _ in range(2)))  # two callers' slots, then
    await _settled(placer)  # four lease asks: one fits
    assert [n for _, n in placer.batches] == [6]
    assert placer.leased == 1 and await _used(redis, ["h1"]) == {"h1": 2} and await _leased(redis, ["h1"]) == {"h1": 1}
    assert await redis.zscore(names.EVALS_WAITING, "a") is None  # the other found no room: no wait
    await placer.reserve(eval_id="a")  # from the lease
    await _settled(placer)
    assert placer.lease_hits == 1 and placer.leased == 0
    assert await redis.zscore(names.EVALS_WAITING, "a") is None
    with pytest.raises(NoCapacityError, match="all full"):
        await placer.reserve(eval_id="a")
    assert await redis.zscore(names.EVALS_WAITING, "a") is not None  # a caller's reservation waits
    assert await _used(redis, ["h1"]) == {"h1": 3} and await _eval_slots(redis, "a") == 3
    assert await _leased(redis, ["h1"]) == {"h1": 0}
    await placer.aclose()


async def test_no_lease_while_another_eval_waits_and_none_beyond_the_fair_share(redis) -> None:  # type: ignore[no-untyped-def]
    await _host(redis, "h1", 10)
    await redis.zadd(names.EVALS_WAITING, {"b": time.time() + 60})  # eval b waits for a slot
    placer = _leasing(redis)
    await placer.reserve(eval_id="a")  # a is under its share (5): its caller gets the slot
    await _settled(placer)
    assert placer.leased == 0  # ... but no slot is reserved ahead while b waits
    assert await _used(redis, ["h1"]) == {"h1": 1} and await _eval_slots(redis, "a") == 1
    assert await redis.zscore(names.EVALS_WAITING, "a") is None
    await placer.aclose()

    # Nobody waits, but c is active too: a's leases stop at its share (20 / 2 = 10), with room left.
    await redis.flushdb()
    await _host(redis, "h1", 20)
    await redis.set(names.slots_used_key("h1"), 6)
    await redis.hset(names.EVAL_SLOTS, "c", 6)
    await keep_evals_alive(redis, ["c"])
    placer = _leasing(redis)
    await placer.hosts()  # cached: the three go in one script call
    await asyncio.gather(*(placer.reserve(eval_id="a") for _ in range(3)))  # 3 callers, then 8 lease asks
    await _settled(placer)
    assert placer.leased == 7 and await _eval_slots(redis, "a") == 10
    assert await _used(redis, ["h1"]) == {"h1": 9} and await _leased(redis, ["h1"]) == {"h1": 7}  # 4 free:
    # the share, not room, stopped it
    assert await redis.zscore(names.EVALS_WAITING, "a") is None
    await placer.aclose()


async def _plan(redis: Redis, plan: list[tuple[str, int]], leases: int) -> tuple[list[str], int]:
    """``plan`` ((eval, weight) in order) one at a time on a fresh fleet where eval b waits throughout:
    what each got, and the leases held at the end."""
    await redis.flushdb()
    for name, slots in {"h1": 4, "h2": 6}.items():
        await _host(redis, name, slots)
    await redis.zadd(names.EVALS_WAITING, {"b": time.time() + 60})
    placer = Placer(redis, rng=random.Random(7), leases=leases)
    out = []
    for eval_id, weight in plan:
        try:
            out.append((await placer.reserve(eval_id=eval_id, weight=weight)).host)
        except FairShareError as exc:
            out.append(f"fair-share: {exc}")
        except NoCapacityError:
            out.append("full")
        await _settled(placer)
    held = placer.leased
    await placer.aclose()
    return out, held


async def test_a_callers_fair_share_refusal_is_the_same_with_leases(redis) -> None:  # type: ignore[no-untyped-def]
    plan = [("a", 1), ("a", 1), ("c", 2), ("a", 1), ("a", 1), ("b", 1), ("c", 1), ("c", 1), ("b", 2), ("a", 1)]
    without, _ = await _plan(redis, plan, leases=0)
    with_leases, held = await _plan(redis, plan, leases=64)
    assert with_leases == without and held == 0  # b waits throughout: nothing is ever leased
    assert [i for i, got in enumerate(with_leases) if got.startswith("fair-share")] == [4, 7]
    assert "eval 'a' holds 3 of its 3 slots" in with_leases[4]


async def test_idle_leases_go_back_and_aclose_gives_back_every_lease(redis) -> None:  # type: ignore[no-untyped-def]
    await _host(redis, "h1", 200)
    placer = _leasing(redis, lease_idle_s=0.3)
    await placer.hosts()  # cached: the reservations below go in one script call
    await asyncio.gather(*(placer.reserve(eval_id="a") for _ in range(4)))
    await _settled(placer)
    assert [n for _, n in placer.batches] == [4 + 64]  # 4 misses: the cap leased (some may be back already)
    deadline = time.monotonic() + POLL_S  # given back by the sweeper: poll, bounded
    while (placer.leased or await _leased(redis, ["h1"]) != {"h1": 0}) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert placer.leased == 0 and await _leased(redis, ["h1"]) == {"h1": 0}
    assert await _used(redis, ["h1"]) == {"h1": 4} and await _eval_slots(redis, "a") == 4

    other = _leasing(redis)  # kept until aclose gives them back
    await other.hosts()
    await asyncio.gather(*(other.reserve(eval_id="a") for _ in range(6)))
    await _settled(other)
    assert other.leased == 64
    assert await _used(redis, ["h1"]) == {"h1": 4 + 6} and await _leased(redis, ["h1"]) == {"h1": 64}
    await other.aclose()
    assert other.leased == 0 and await _leased(redis, ["h1"]) == {"h1": 0}
    assert await _used(redis, ["h1"]) == {"h1": 10} and await _eval_slots(redis, "a") == 10
    await placer.aclose()


async def test_keys_asked_once_lease_nothing_and_are_forgotten(redis) -> None:  # type: ignore[no-untyped-def]
    """A distinct image per sample (pulled from a registry the hosts pull from): each key is asked once,
    so no slot is reserved ahead of a sample that will never come, and the keys are forgotten a window
    later. The same image asked twice is a stream again: it leases."""
    for name in ("h1", "h2"):
        await _host(redis, name, 100, registries=["127.0.0.1:5000"])
    placer = _leasing(redis, lease_window_s=0.5)
    await placer.hosts()
    for i in range(30):
        await placer.reserve(image=f"127.0.0.1:5000/task-{i}:1", eval_id="a")
        await _settled(placer)
    assert [n for _, n in placer.batches] == [1] * 30  # no lease ask ever went out
    assert placer.leased == 0 and await _leased(redis, ["h1", "h2"]) == {"h1": 0, "h2": 0}
    assert sum((await _used(redis, ["h1", "h2"])).values()) == 30 and await _eval_slots(redis, "a") == 30
    await asyncio.sleep(1.1)  # two windows
    await placer.reserve(image="127.0.0.1:5000/task-again:1", eval_id="a")
    assert placer._leases.keys == 1  # the 30 one-off keys are forgotten
    await placer.reserve(image="127.0.0.1:5000/task-again:1", eval_id="a")
    await _settled(placer)
    assert placer.leased > 0  # asked twice: slow start
    await placer.aclose()
    assert await _leased(redis, ["h1", "h2"]) == {"h1": 0, "h2": 0}


async def test_a_caller_that_gives_up_in_flight_leaks_no_slot_with_leases(redis) -> None:  # type: ignore[no-untyped-def]
    await _host(redis, "h1", 4)
    placer = _leasing(redis)
    await placer.hosts()
    tasks = [asyncio.ensure_future(placer.reserve(eval_id="a")) for _ in range(2)]
    await asyncio.sleep(0)  # asked (lease asks will follow them): the script call is on its way
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await _settled(placer)
    assert placer.leased == 2 and await _leased(redis, ["h1"]) == {"h1": 2}  # only the leases are held
    assert await _used(redis, ["h1"]) == {"h1": 0}
    await placer.aclose()
    assert await _leased(redis, ["h1"]) == {"h1": 0} and await _eval_slots(redis, "a") == 0


async def test_leases_on_a_draining_or_gone_host_are_given_back_and_a_restarted_host_keeps_them(redis) -> None:  # type: ignore[no-untyped-def]
    hosts = ["h1", "h2", "h3"]
    for name in hosts:
        await _host(redis, name, 20)
    placer = _leasing(redis, leases=6)
    await placer.hosts()
    got = await asyncio.gather(*(placer.reserve(eval_id="a") for _ in range(6)))
    await _settled(placer)
    mine = {h: sum(1 for g in got if g.host == h) for h in hosts}
    leased = await _leased(redis, hosts)
    assert await _used(redis, hosts) == mine
    assert {h: mine[h] + leased[h] for h in hosts} == {"h1": 4, "h2": 4, "h3": 4}  # 6 + 6 leases, spread
    assert all(leased.values())

    await _host(redis, "h2", 20, draining=True)
    await redis.delete(names.heartbeat_key("h3"))  # h3's heartbeat expired: gone
    await redis.srem(names.HOSTS_SET, "h3")
    await placer.hosts(fresh=True)  # the list says so: those leases go back, slot and eval count
    await _settled(placer)
    assert placer.leased == leased["h1"]
    assert await _leased(redis, hosts) == {"h1": leased["h1"], "h2": 0, "h3": 0}
    assert await _used(redis, hosts) == mine
    assert await _eval_slots(redis, "a") == 6 + leased["h1"]
    served = [await placer.reserve(eval_id="a") for _ in range(leased["h1"])]
    assert {h.host for h in served} == {"h1"} and placer.lease_hits == leased["h1"]
    await _settled(placer)
    assert (await _used(redis, ["h1"]))["h1"] == mine["h1"] + leased["h1"]  # handed out: now counted there

    # h1 restarts (new boot; its counter reset, then another orchestrator takes 3 slots there): its
    # leased set outlives the process, so the leases on it stay good, and go out with the new boot.
    held = placer.leased
    assert held > 0  # the refill the hits started (on h1, the only host left)
    await _host(redis, "h1", 20, boot="boot-h1-again")
    await redis.set(names.slots_used_key("h1"), 3)
    await placer.hosts(fresh=True)
    await _settled(placer)
    assert placer.leased == held and await _leased(redis, ["h1"]) == {"h1": held}
    again = await placer.reserve(eval_id="a")
    assert again.host == "h1" and again.boot == "boot-h1-again"
    await _settled(placer)
    assert await _used(redis, ["h1"]) == {"h1": 4} and await _leased(redis, ["h1"]) == {"h1": held - 1}
    await placer.aclose()
    assert await _leased(redis, hosts) == {"h1": 0, "h2": 0, "h3": 0}


async def test_the_leases_of_an_orchestrator_that_died_expire(redis) -> None:  # type: ignore[no-untyped-def]
    await _host(redis, "h1", 10)
    placer = _leasing(redis, leases=4, lease_idle_s=0.5)  # its leased slots count in Redis for 2 * 0.5 + 2 s
    await placer.hosts()
    await asyncio.gather(*(placer.reserve(eval_id="a") for _ in range(2)))
    await _settled(placer)
    assert placer.leased == 4 and await _leased(redis, ["h1"]) == {"h1": 4}
    for task in (placer._sweeper, placer._refresher):  # it dies: nothing of it runs any more
        if task is not None:
            task.cancel()
    other = Placer(redis, hosts_ttl=0.0)
    with pytest.raises(NoCapacityError, match="all full"):
        await asyncio.gather(*(other.reserve(eval_id="b") for _ in range(5)))  # 2 + 4 leased + 5 > 10
    await other.release_leases()
    deadline = time.monotonic() + POLL_S
    while await _leased(redis, ["h1"]) != {"h1": 0} and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    assert await _leased(redis, ["h1"]) == {"h1": 0}  # expired by themselves
    while await redis.exists(names.leased_key("h1")) and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    assert not await redis.exists(names.leased_key("h1"))  # and the set itself with them: nothing left behind
    room = [await other.reserve(eval_id="b") for _ in range(10 - 2 - 4)]  # b's first 4 hold their slots
    assert len(room) == 4 and await _used(redis, ["h1"]) == {"h1": 10}


async def test_leasing_off_is_one_script_call_per_tick_and_holds_nothing(redis) -> None:  # type: ignore[no-untyped-def]
    await _host(redis, "h1", 40)
    placer = Placer(redis, hosts_ttl=600.0, leases=0)
    await placer.hosts()
    await asyncio.gather(*(placer.reserve(eval_id="a") for _ in range(12)))
    for _ in range(5):
        await placer.reserve(eval_id="a")
    assert [n for _, n in placer.batches] == [12, 1, 1, 1, 1, 1]
    assert placer.leased == 0 and placer.lease_hits == 0
    assert await _used(redis, ["h1"]) == {"h1": 17} and await _eval_slots(redis, "a") == 17
    await placer.aclose()


@pytest.mark.parametrize("leases", [0, 64])
async def test_the_dispatchers_knob(fleet, leases: int) -> None:  # type: ignore[no-untyped-def]
    from orchestrator.dispatch import CeleryDispatcher, CeleryDispatcherConfig

    worker = fleet.worker(slots=8)
    d = CeleryDispatcher(config=CeleryDispatcherConfig(broker_url=fleet.redis.url, placement_leases=leases))
    d.placer._leases.idle_s = 600.0  # none given back while the counters are compared, however slow the opens
    client = fleet.redis.client()
    try:
        routes = await asyncio.gather(*(d.open_sandbox(local_spec(f"s{i}")) for i in range(3)))
        await _settled(d.placer)
        assert int(client.get(names.slots_used_key(worker.host))) == 3
        assert client.zcard(names.leased_key(worker.host)) == d.placer.leased
        assert (d.placer.leased + d.placer.lease_hits > 0) == (leases > 0)
        for route in routes:
            await d.close_sandbox(route)
    finally:
        await d.aclose()
    assert int(client.get(names.slots_used_key(worker.host)) or 0) == 0
    assert client.zcard(names.leased_key(worker.host)) == 0  # aclose gave the leases back


async def test_an_open_refused_by_a_host_that_began_draining_is_placed_again(fleet, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A leased slot (or a cached host list) can name a host that began draining since: the worker
    refuses the open, and the dispatcher gives the slot back and places the sandbox elsewhere."""
    import signal

    from orchestrator.dispatch import CeleryDispatcher, CeleryDispatcherConfig

    from ._helpers import BOUND, dispatch, request, starts

    leaving = fleet.worker(slots=4)
    d = CeleryDispatcher(config=CeleryDispatcherConfig(broker_url=fleet.redis.url, placement_wait=0.0))
    d.placer._ttl = 600.0  # the cached list never re-read: it will still say `leaving` takes sandboxes
    d.placer._leases.idle_s = 600.0  # and the leases kept however slowly the workers start
    client = fleet.redis.client()
    try:
        # Two opens (a key asked once leases nothing): the other two slots leased.
        route, _ = await asyncio.gather(d.open_sandbox(local_spec("first")), d.open_sandbox(local_spec("first-b")))
        await _settled(d.placer)
        assert d.placer.leased == 2
        staying = await asyncio.to_thread(fleet.worker, slots=4)  # off the loop: the lease is renewed meanwhile
        log = str(tmp_path / "log")
        [fut] = dispatch(d, [request("record", {"path": log, "label": "busy", "delay": 2.0}, sandbox=route.sandbox)],
                         route)
        for _ in range(1500):  # bounded (30 s): a running call keeps the draining worker alive
            if starts(log, "busy"):
                break
            await asyncio.sleep(0.02)
        leaving.proc.send_signal(signal.SIGTERM)
        for _ in range(1500):
            if client.hget(names.heartbeat_key(leaving.host), "draining") == b"1":
                break
            await asyncio.sleep(0.01)
        placed = await d.open_sandbox(local_spec("second"))  # the lease on `leaving`: refused, placed again
        assert names.host_of_queue(placed.queue) == staying.host
        assert d.placer.lease_hits == 1
        await _settled(d.placer)
        # `leaving` holds the first two sandboxes only (its lease given back); `staying` the second and
        # any slots leased since (the refill of the second placement, depending on timing).
        assert int(client.get(names.slots_used_key(leaving.host))) == 2
        assert client.zcard(names.leased_key(leaving.host)) == 0
        assert int(client.get(names.slots_used_key(staying.host))) == 1
        assert client.zcard(names.leased_key(staying.host)) == d.placer.leased
        assert (await asyncio.wait_for(fut, BOUND)).result == "busy"
        await d.close_sandbox(placed)
    finally:
        await d.aclose()


async def test_an_idle_pool_goes_back_as_soon_as_another_eval_waits(redis) -> None:  # type: ignore[no-untyped-def]
    """Eval a's pool holds every free slot and nobody draws from it (so no lease ask is ever refused);
    eval b then waits for a slot. a's pool goes back within about a second, long before its idle time
    (600 s here), and b gets its slot."""
    await _host(redis, "h1", 6)
    a = _leasing(redis, leases=64)
    await a.hosts()
    await asyncio.gather(*(a.reserve(eval_id="a") for _ in range(2)))
    await _settled(a)
    assert a.leased == 4 and sum((await _used(redis, ["h1"])).values()) == 2  # the fleet is full: 2 used, 4 leased
    b = Placer(redis, hosts_ttl=0.0)
    with pytest.raises(NoCapacityError, match="all full"):
        await b.reserve(eval_id="b")  # b waits
    for _ in range(int(POLL_S / 0.05)):  # bounded: far below a's idle time
        if a.leased == 0 and sum((await _leased(redis, ["h1"])).values()) == 0:
            break
        await asyncio.sleep(0.05)
    assert a.leased == 0 and sum((await _leased(redis, ["h1"])).values()) == 0
    assert (await b.reserve(eval_id="b")).host == "h1"
    assert await _eval_slots(redis, "a") == 2
    await a.aclose()


async def test_a_slot_from_a_lease_given_back_before_it_was_counted_leaves_the_counter_right(redis) -> None:  # type: ignore[no-untyped-def]
    """A reservation served from a lease is moved to the host's counter in the background; an open that
    fails at once gives it back before that move. The counter must end at what is really held (0),
    not one high: a decrement clamped at zero followed by the move's increment."""
    await _host(redis, "h1", 8)
    placer = _leasing(redis, leases=4)
    await placer.hosts()
    first = await asyncio.gather(*(placer.reserve(eval_id="a") for _ in range(2)))
    await _settled(placer)
    for held in first:  # those two sandboxes closed: nothing is held, the pool still has its leases
        await placer.release(held.host, 1, "a")
    assert placer.leased > 0 and await _used(redis, ["h1"]) == {"h1": 0}
    hits = placer.lease_hits
    held = await placer.reserve(eval_id="a")
    assert placer.lease_hits == hits + 1  # from the pool, not counted in Redis yet
    await placer.release(held.host, 1, "a")  # its open failed at once
    await _settled(placer)
    assert await _used(redis, ["h1"]) == {"h1": 0}
    await placer.aclose()
    assert await _eval_slots(redis, "a") == 0 and await _leased(redis, ["h1"]) == {"h1": 0}


@pytest.mark.slow
async def test_an_open_sent_on_a_lease_to_a_host_that_just_died_is_placed_again(fleet) -> None:  # type: ignore[no-untyped-def]
    """Leases are handed out by a host list up to a few seconds old, so a lease may name a host that has
    just died. Its open is then placed again on a live host (the sample gets its sandbox) instead of
    failing as lost."""
    from orchestrator.dispatch import CeleryDispatcher, CeleryDispatcherConfig

    workers = await asyncio.to_thread(fleet.start_workers, 2, slots=6)
    d = CeleryDispatcher(config=CeleryDispatcherConfig(broker_url=fleet.url, lost_grace=1.0, watch_interval=0.25))
    routes = []
    try:
        routes += await asyncio.gather(*(d.open_sandbox(local_spec(f"s{i}")) for i in range(4)))
        for _ in range(int(POLL_S / 0.05)):  # the burst's lease asks answered: the pool holds slots on both
            if len(d.placer.lease_hosts) == 2:
                break
            await asyncio.sleep(0.05)
        victim = next(w for w in workers if d.placer.lease_hosts.get(w.host))
        survivor = next(w for w in workers if w is not victim)
        victim.kill()
        await d.placer.hosts(fresh=True)  # its heartbeat lingers: the fresh list still names it alive
        assert victim.host in {h.host for h in await d.placer.hosts()}
        more = await asyncio.wait_for(asyncio.gather(*(d.open_sandbox(local_spec(f"t{i}")) for i in range(4))), 60)
        routes += more
        assert {names.host_of_queue(r.queue) for r in more} == {survivor.host}
    finally:
        for route in routes:
            if names.host_of_queue(route.queue) == survivor.host:
                await d.close_sandbox(route)
        await d.aclose()
