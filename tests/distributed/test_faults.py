"""Failure semantics with real processes: no hang, nothing lost, nothing run twice.

Each test gets its own redis-server and its own `toolfleet worker` processes (heartbeat every 0.5 s,
lost after 3 s), so it can SIGKILL, SIGSTOP, SIGTERM or restart them. Bounds are asserted with
``asyncio.wait_for(..., BOUND)``: a hang fails the test instead of hanging it.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
import types

import pytest
from redis.asyncio import Redis

from orchestrator.dispatch import CeleryDispatcher, CeleryDispatcherConfig
from orchestrator.util import SandboxUnavailableError
from tests.support.fleet import child_env, python
from tests.support.waits import until
from workers.fleet import names, prune_demand

from ._helpers import BOUND, bash_request, dispatch, local_spec, one, request, starts

pytestmark = [pytest.mark.celery, pytest.mark.timeout(180)]


@pytest.fixture
async def make_dispatcher(own_redis):
    made: list[CeleryDispatcher] = []

    def make(**overrides) -> CeleryDispatcher:  # type: ignore[no-untyped-def]
        config = CeleryDispatcherConfig(broker_url=own_redis.url, lost_grace=2.0, watch_interval=0.25, **overrides)
        made.append(CeleryDispatcher(config=config))
        return made[-1]

    yield make
    for d in made:
        await d.aclose()


async def _until_started(path: str, label: str, count: int = 1) -> None:
    for _ in range(1500):  # bounded (30 s)
        if starts(path, label) >= count:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"{label} never started")


async def test_placement_fills_hosts_by_free_slots_and_calls_follow_the_sandbox(fleet, make_dispatcher) -> None:
    a, b = fleet.worker(slots=2), fleet.worker(slots=2)
    d = make_dispatcher(placement_wait=0.0)
    routes = [await d.open_sandbox(local_spec(f"s{i}")) for i in range(4)]
    hosts = [names.host_of_queue(r.queue) for r in routes]
    assert sorted(hosts) == sorted([a.host, a.host, b.host, b.host])
    with pytest.raises(SandboxUnavailableError, match="all full or draining"):
        await d.open_sandbox(local_spec("s-extra"))
    for route, host in zip(routes, hosts, strict=True):
        outcome = await one(d, bash_request("echo $TOOLFLEET_HOST", route.sandbox), route)
        assert outcome.host == host and outcome.result.strip() == host
    # A full fleet: the placement waits (and says so in the demand list) until a slot frees up.
    waiting = asyncio.ensure_future(make_dispatcher(placement_wait=60.0).open_sandbox(local_spec("s-waits")))
    client = fleet.redis.client()
    for _ in range(500):
        if client.llen(names.SANDBOX_DEMAND) == 1:
            break
        await asyncio.sleep(0.02)
    assert client.llen(names.SANDBOX_DEMAND) == 1 and not waiting.done()
    await d.close_sandbox(routes[0])
    late = await asyncio.wait_for(waiting, BOUND)
    assert names.host_of_queue(late.queue) == hosts[0] and client.llen(names.SANDBOX_DEMAND) == 0
    routes[0] = late
    for route in routes:
        await d.close_sandbox(route)
    assert [int(client.get(names.slots_used_key(h)) or 0) for h in (a.host, b.host)] == [0, 0]
    await d.close_sandbox(routes[0])  # idempotent


async def test_a_killed_orchestrators_demand_is_pruned_by_the_workers_and_a_live_ones_stays(
    fleet, make_dispatcher) -> None:
    """A SIGKILLed orchestrator cannot take back the demand of its waiting samples: once its owner key
    lapses a worker drops those tokens (an autoscaler would otherwise count them for up to 600 s);
    the token of an orchestrator still waiting stays, and goes when it is placed."""
    fleet.worker(slots=1)
    holder = make_dispatcher(placement_wait=0.0)
    held = await holder.open_sandbox(local_spec("holds-the-only-slot"))
    live = make_dispatcher(placement_wait=120.0, demand_ttl=1.0)
    waiting = asyncio.ensure_future(live.open_sandbox(local_spec("waits-alive")))
    client = fleet.redis.client()
    await until(lambda: client.llen(names.SANDBOX_DEMAND) == 1, "the live waiter's demand")
    killed = subprocess.Popen(python("-m", "tests.support.waiting_orchestrator", fleet.url, "3"), env=child_env(),
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        await until(lambda: client.llen(names.SANDBOX_DEMAND) == 4 or killed.poll() is not None,
                    "the other orchestrator's demand")
        assert killed.poll() is None, killed.stderr.read().decode() if killed.stderr else ""
        owners = sorted(t.decode().split("/")[0] for t in client.lrange(names.SANDBOX_DEMAND, 0, -1))
        assert owners.count(live.client_id) == 1 and len(set(owners)) == 2
    finally:
        killed.kill()
        killed.wait(30)
    # owner key TTL (1 s) + a worker's prune interval (10 s) + a beat
    await until(lambda: client.llen(names.SANDBOX_DEMAND) == 1, "the killed orchestrator's demand pruned", 30.0)
    assert [t.decode().split("/")[0] for t in client.lrange(names.SANDBOX_DEMAND, 0, -1)] == [live.client_id]
    assert not waiting.done()
    await holder.close_sandbox(held)
    route = await asyncio.wait_for(waiting, BOUND)
    assert client.llen(names.SANDBOX_DEMAND) == 0
    await live.close_sandbox(route)


async def test_prune_demand_keeps_live_and_unnamed_tokens_and_the_lists_ttl(own_redis) -> None:
    redis = Redis.from_url(own_redis.url)
    try:
        await redis.set(names.demand_owner_key("aa"), 1, ex=60)
        tokens = ["aa/1", "bb/1", "aa/2", "legacy-token", *(f"cc/{i}" for i in range(2500)), "bb/2"]
        await redis.rpush(names.SANDBOX_DEMAND, *tokens)
        await redis.expire(names.SANDBOX_DEMAND, 600)
        assert await prune_demand(redis) == 2502
        assert [t.decode() for t in await redis.lrange(names.SANDBOX_DEMAND, 0, -1)] == ["aa/1", "aa/2", "legacy-token"]
        assert 590 <= await redis.ttl(names.SANDBOX_DEMAND) <= 600
        assert await prune_demand(redis) == 0
        await redis.delete(names.demand_owner_key("aa"))
        assert await prune_demand(redis) == 2
        assert [t.decode() for t in await redis.lrange(names.SANDBOX_DEMAND, 0, -1)] == ["legacy-token"]
    finally:
        await redis.aclose()


async def test_sigkill_during_a_long_call_resolves_sandbox_unavailable_and_never_reruns(
    fleet, make_dispatcher, tmp_path) -> None:
    first = fleet.worker(slots=1)
    d = make_dispatcher()
    route = await d.open_sandbox(local_spec("victim"))
    assert names.host_of_queue(route.queue) == first.host
    # Started after placement (the retry has somewhere to go), off the loop: the dispatcher keeps renewing
    # its lease meanwhile (a loaded machine takes longer to start a worker than the lease outlives a pause).
    second = await asyncio.to_thread(fleet.worker, slots=1)
    log = str(tmp_path / "log")
    [fut] = dispatch(d, [request("record", {"path": log, "label": "long", "delay": 60.0}, sandbox=route.sandbox)],
                     route)
    await _until_started(log, "long")
    first.kill()
    outcome = await asyncio.wait_for(fut, BOUND)
    assert outcome.error is not None and outcome.error.type == "sandbox_unavailable"
    assert first.host in outcome.error.message and "lost" in outcome.error.message
    # The sample is retried from scratch: a new sandbox lands on the surviving host and works.
    retry = await d.open_sandbox(local_spec("victim"))
    assert names.host_of_queue(retry.queue) == second.host
    assert (await one(d, bash_request("echo again", retry.sandbox), retry)).result.strip() == "again"
    # Later calls to the lost sandbox fail at once instead of waiting on a dead queue.
    late = await one(d, request("noop", sandbox=route.sandbox), route)
    assert late.error is not None and late.error.type == "sandbox_unavailable"
    assert starts(log, "long") == 1  # the killed call was not run again anywhere


async def test_sigkill_during_a_parallel_stage_while_other_samples_keep_running(
    fleet, make_dispatcher, tmp_path) -> None:
    doomed, healthy = fleet.worker(slots=1), fleet.worker(slots=1)
    d = make_dispatcher()
    routes = {names.host_of_queue(r.queue): r for r in [await d.open_sandbox(local_spec(f"s{i}")) for i in range(2)]}
    victim, other = routes[doomed.host], routes[healthy.host]
    log = str(tmp_path / "log")
    stage = [
        request("record", {"path": log, "label": f"p{i}", "delay": 60.0}, sandbox=victim.sandbox) for i in range(4)]
    futures = dispatch(d, stage, victim)
    for i in range(4):
        await _until_started(log, f"p{i}")
    doomed.kill()
    lost = asyncio.ensure_future(asyncio.wait_for(asyncio.gather(*futures), BOUND))
    served = 0
    while not lost.done():  # the other sample's calls keep completing meanwhile
        outcome = await one(d, bash_request("echo ok", other.sandbox), other)
        assert outcome.result.strip() == "ok"
        served += 1
    outcomes = await lost
    assert [o.error.type if o.error else None for o in outcomes] == ["sandbox_unavailable"] * 4
    assert served >= 1
    assert [starts(log, f"p{i}") for i in range(4)] == [1, 1, 1, 1]


async def test_redis_restart_mid_run_loses_no_call(fleet, make_dispatcher, tmp_path) -> None:
    worker = fleet.worker()
    d = make_dispatcher()
    route = await d.open_sandbox(local_spec("r"))
    log = str(tmp_path / "log")
    in_flight = dispatch(d, [request("record", {"path": log, "label": "shared", "delay": 2.0})]) + dispatch(
        d, [request("record", {"path": log, "label": "routed", "delay": 2.0}, sandbox=route.sandbox)], route)
    await _until_started(log, "shared")
    await _until_started(log, "routed")
    queued = dispatch(d, [request("add", {"x": 2, "y": 3}) for _ in range(3)])  # maybe never reached the worker
    await asyncio.to_thread(fleet.redis.restart, 1.0)  # everything in Redis is gone
    during = dispatch(d, [request("add", {"x": 1, "y": 1})])
    everything = [*in_flight, *queued, *during]
    await asyncio.wait(everything, timeout=60)
    assert all(f.done() for f in everything), [f.done() for f in everything]
    outcomes = [f.result() for f in everything]
    assert [o.result for o in outcomes] == ["shared", "routed", 5, 5, 5, 2], [o.error for o in outcomes]
    assert starts(log, "shared") == 1 and starts(log, "routed") == 1
    # The fleet is whole again: the host re-announced itself and its sandbox still serves the sample.
    assert (await one(d, bash_request("echo back", route.sandbox), route)).result.strip() == "back"
    assert worker.alive() and d._listener.reconnects >= 1


async def test_the_orchestrator_enforces_the_deadline_when_no_worker_answers(fleet, make_dispatcher) -> None:
    worker = fleet.worker()
    d = make_dispatcher(call_grace=1.0)
    os.killpg(worker.pid, signal.SIGSTOP)  # frozen: takes the message, never answers
    try:
        outcome = await one(d, request("slow_with_timeout", {"seconds": 0.1}, timeout=0.3), bound=BOUND)
    finally:
        os.killpg(worker.pid, signal.SIGCONT)
    assert outcome.error is not None and outcome.error.type == "timeout"
    assert "slow_with_timeout" in outcome.error.message and "no answer" in outcome.error.message


async def test_sigterm_drains_running_calls_and_takes_no_new_sandboxes(fleet, make_dispatcher, tmp_path) -> None:
    leaving = fleet.worker(slots=4)
    d = make_dispatcher()
    route = await d.open_sandbox(local_spec("drain"))
    staying = await asyncio.to_thread(fleet.worker,
                                      slots=4)  # off the loop: the dispatcher's lease is renewed meanwhile
    log = str(tmp_path / "log")
    [fut] = dispatch(d, [request("record", {"path": log, "label": "finishing", "delay": 2.0}, sandbox=route.sandbox)],
                     route)
    await _until_started(log, "finishing")
    leaving.proc.send_signal(signal.SIGTERM)
    client = fleet.redis.client()
    for _ in range(1500):  # the drain flag goes out at once, before running calls finish (bounded: 15 s)
        if client.hget(names.heartbeat_key(leaving.host), "draining") == b"1":
            break
        await asyncio.sleep(0.01)
    assert client.hget(names.heartbeat_key(leaving.host), "draining") == b"1"
    placed = await d.open_sandbox(local_spec("new"))
    assert names.host_of_queue(placed.queue) == staying.host
    outcome = await asyncio.wait_for(fut, BOUND)
    assert outcome.result == "finishing" and outcome.error is None
    assert await asyncio.to_thread(leaving.proc.wait, 60) == 0
    assert not client.exists(names.heartbeat_key(leaving.host))  # gone from placement at once


async def test_sandboxes_of_a_vanished_orchestrator_are_closed_by_their_host(fleet, make_dispatcher, tmp_path) -> None:
    boxes = tmp_path / "boxes"
    boxes.mkdir()
    # the worker's choice: a message cannot name host dirs
    worker = fleet.worker(extra_args=("--local-root", str(boxes)))
    d = make_dispatcher(lease_ttl=1.0)
    route = await d.open_sandbox(local_spec("orphan"))
    assert len(list(boxes.iterdir())) == 1
    await d.aclose()  # stands in for a crashed orchestrator: its lease is no longer renewed
    client = fleet.redis.client()
    for _ in range(1500):  # bounded (30 s): lease TTL + the worker's orphan grace
        if not list(boxes.iterdir()) and int(client.get(names.slots_used_key(worker.host)) or 0) == 0:
            break
        await asyncio.sleep(0.02)
    assert list(boxes.iterdir()) == []
    assert int(client.get(names.slots_used_key(worker.host)) or 0) == 0
    assert route.sandbox is not None


async def test_sandboxes_opened_while_redis_restarts_wait_for_it(fleet, make_dispatcher) -> None:
    """Samples that start while Redis restarts (a second down, everything in it lost) get their
    sandboxes once it is back and the worker has announced itself again, instead of failing at once
    with "the broker is unreachable" (and burning their retries within the outage)."""
    fleet.worker(slots=4)
    d = make_dispatcher()
    first = await d.open_sandbox(local_spec("before"))  # the dispatcher is up and placing
    down = asyncio.ensure_future(asyncio.to_thread(fleet.redis.restart, 1.0))
    try:
        client = fleet.redis.client()
        for _ in range(500):  # bounded (10 s): until the server is really down
            try:
                client.ping()
            except Exception:  # noqa: BLE001 - down: what the opens below must ride out
                break
            await asyncio.sleep(0.02)
        routes = await asyncio.wait_for(asyncio.gather(*(d.open_sandbox(local_spec(f"during{i}")) for i in range(3))),
                                        90)
    finally:
        await down
    for route in routes:
        assert (await one(d, bash_request("echo up", route.sandbox), route)).result.strip() == "up"
        await d.close_sandbox(route)
    await d.close_sandbox(first)


async def test_a_call_that_ages_out_in_the_queue_is_sent_again_and_runs_once(fleet, make_dispatcher, tmp_path) -> None:
    """Saturation is not an error: one pool thread, a 2 s message age limit, and a call queued behind a 5 s
    one. The worker refuses the queued message as expired and says how old it was; this host's clock
    agrees it waited that long, so the dispatcher sends it again and the eval goes on (before: the
    rejection stopped the whole eval as a clock problem)."""
    fleet.worker(concurrency=1, extra_args=("--message-max-age", "2"))
    d = make_dispatcher()
    log = str(tmp_path / "log")
    [long] = dispatch(d, [request("record", {"path": log, "label": "long", "delay": 5.0})])
    await _until_started(log, "long")
    queued = dispatch(d, [request("record", {"path": log, "label": f"q{i}"}) for i in range(3)])  # one message
    outcomes = await asyncio.wait_for(asyncio.gather(long, *queued), BOUND)
    assert [o.result for o in outcomes] == ["long", "q0", "q1", "q2"], [o.error or o.fatal for o in outcomes]
    assert d._calls.requeued == 3 and d.fleet_error is None
    assert [starts(log, label) for label in ("long", "q0", "q1", "q2")] == [1, 1, 1, 1]


async def test_a_call_that_arrives_expired_is_a_clock_problem_not_a_queue(fleet, make_dispatcher,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The other side of the rule above: this host's clock is 20 minutes behind the worker's, so a call is
    'expired' the moment it lands. It waited no time here, so it is not sent again: the eval stops on
    one line naming the clocks (sending it again would be refused again, forever)."""
    import workers.app

    fleet.worker()
    d = make_dispatcher()
    monkeypatch.setattr(workers.app, "time", types.SimpleNamespace(time=lambda: time.time() - 1200,
                                                                   monotonic=time.monotonic))
    outcome = await one(d, request("add", {"x": 1, "y": 2}))
    assert outcome.fatal is not None and outcome.fatal.type == "FleetMisconfigured", outcome
    assert "expired (issued 1200 s ago" in outcome.fatal.message and "NTP" in outcome.fatal.message
    assert d._calls.requeued == 0
