"""The executing side's call memory (one run per call id) against a real, restartable Redis."""

from __future__ import annotations

import asyncio
import socket
import threading

import pytest
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError

from orchestrator._wire import CallOutcome
from tests.support.waits import until
from workers._call_memory import CallMemory, CallRunningElsewhere
from workers.fleet import names

pytestmark = pytest.mark.celery

OWNER = "host-a/boot-1"


class Counting:
    """An ``execute`` that counts its runs and takes ``delay`` seconds."""

    def __init__(self, call_id: str, delay: float = 0.0) -> None:
        self.call_id, self.delay, self.runs = call_id, delay, 0

    async def __call__(self) -> CallOutcome:
        self.runs += 1
        await asyncio.sleep(self.delay)
        return CallOutcome(call_id=self.call_id, result=f"ran {self.runs}")


@pytest.fixture
async def redis(own_redis):
    client = Redis.from_url(own_redis.url, socket_connect_timeout=1)
    yield client
    await client.aclose()


class DeadPort:
    """Redis's port while Redis is down, as a restarting server's is: each connection is dropped at
    once. Counts them, so a test can tell how many times a client has tried (and retried)."""

    def __init__(self, port: int) -> None:
        self._server = socket.create_server(("127.0.0.1", port))  # SO_REUSEADDR: Redis had the port
        self._server.settimeout(0.05)
        self.connections = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._server.accept()
            except TimeoutError:
                continue
            conn.close()
            self.connections += 1

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._server.close()


async def test_a_call_that_arrives_while_redis_restarts_runs_once_it_is_back(own_redis, redis) -> None:
    memory = CallMemory(redis, OWNER, redis_patience=20.0)
    execute = Counting("c1")
    await asyncio.to_thread(own_redis.stop)
    dead = DeadPort(own_redis.port)
    try:
        running = asyncio.ensure_future(memory.run_once("c1", execute, claim_ttl=60))
        await until(lambda: dead.connections >= 2 or running.done(), "the claim to be tried, and tried again")
        assert not running.done() and execute.runs == 0  # waiting for the claim, not failing, not running
    finally:
        dead.close()
    await asyncio.to_thread(own_redis.start)
    outcome = await asyncio.wait_for(running, 20)
    assert (outcome.result, outcome.error, execute.runs) == ("ran 1", None, 1)
    assert (await redis.get(names.call_key("c1"))).decode() == OWNER


async def test_redis_down_longer_than_the_patience_raises_instead_of_running(own_redis, redis) -> None:
    memory = CallMemory(redis, OWNER, redis_patience=0.5)
    execute = Counting("c2")
    await asyncio.to_thread(own_redis.stop)
    with pytest.raises(RedisConnectionError):
        await asyncio.wait_for(memory.run_once("c2", execute, claim_ttl=60), 10)
    assert execute.runs == 0


async def test_a_copy_arriving_during_the_claim_joins_the_first_run(redis) -> None:
    memory = CallMemory(redis, OWNER)
    execute = Counting("c3", delay=0.2)
    first, second = await asyncio.gather(memory.run_once("c3", execute, 60), memory.run_once("c3", execute, 60))
    assert execute.runs == 1
    assert (first.result, first.replayed, second.result, second.replayed) == ("ran 1", False, "ran 1", True)


async def test_a_claim_this_process_already_holds_does_not_block_the_call(redis) -> None:
    """After a Redis restart the worker re-asserts its claims; a call still claiming must not then
    mistake its own claim for another execution."""
    await redis.set(names.call_key("c4"), OWNER)
    execute = Counting("c4")
    outcome = await CallMemory(redis, OWNER).run_once("c4", execute, 60)
    assert (outcome.result, execute.runs) == ("ran 1", 1)


async def test_a_claim_held_by_a_live_process_elsewhere_defers_to_it(redis) -> None:
    await redis.set(names.call_key("c5"), "host-b/boot-9")
    await redis.hset(names.heartbeat_key("host-b"), "boot", "boot-9")
    execute = Counting("c5")
    with pytest.raises(CallRunningElsewhere):
        await CallMemory(redis, OWNER).run_once("c5", execute, 60)
    assert execute.runs == 0


async def test_a_claim_held_by_a_lost_process_is_answered_without_running_again(redis) -> None:
    await redis.set(names.call_key("c6"), "host-b/boot-1")
    await redis.hset(names.heartbeat_key("host-b"), "boot", "boot-2")  # host-b restarted since
    execute = Counting("c6")
    outcome = await CallMemory(redis, OWNER).run_once("c6", execute, 60)
    assert execute.runs == 0
    assert outcome.error is not None and outcome.error.type == "sandbox_unavailable"
    assert "host-b/boot-1" in outcome.error.message and "not run again" in outcome.error.message


async def test_a_parallel_stage_claims_each_call_once(redis) -> None:
    """Concurrent calls each claim and run exactly once; a copy of one of them arriving meanwhile
    joins its run instead of claiming again."""
    memory = CallMemory(redis, OWNER)
    executes = {f"p{i}": Counting(f"p{i}", delay=0.05) for i in range(8)}
    outcomes = await asyncio.gather(*(memory.run_once(cid, ex, 60) for cid, ex in executes.items()),
                                     memory.run_once("p0", executes["p0"], 60))
    assert [o.result for o in outcomes] == ["ran 1"] * 9
    assert [ex.runs for ex in executes.values()] == [1] * 8
    assert [o.replayed for o in outcomes] == [False] * 8 + [True]
    held = await redis.mget([names.call_key(cid) for cid in executes])
    assert [h.decode() for h in held] == [OWNER] * 8


async def test_a_stages_claims_cost_one_set_each_and_run_each_call_once(redis) -> None:
    """Claims asked for in one loop iteration (a stage's calls) go out together: one SET NX per call,
    one MGET for those already taken; each call runs once, and one claimed by another live process is
    not run here."""
    memory = CallMemory(redis, OWNER)
    await redis.set(names.call_key("s-taken"), "host-b/boot-2")
    await redis.hset(names.heartbeat_key("host-b"), "boot", "boot-2")  # alive: the call runs over there

    async def calls(command: str) -> int:
        return int((await redis.info("commandstats")).get(f"cmdstat_{command}", {}).get("calls", 0))

    before = {c: await calls(c) for c in ("set", "mget", "get")}
    executes = {cid: Counting(cid) for cid in ["s1", "s2", "s3", "s4", "s-taken"]}
    results = await asyncio.gather(*(memory.run_once(cid, ex, claim_ttl=60) for cid, ex in executes.items()),
                                   return_exceptions=True)
    after = {c: await calls(c) for c in ("set", "mget", "get")}
    assert after["set"] - before["set"] == 5 and after["get"] == before["get"]
    assert after["mget"] - before["mget"] == 2  # the taken claim's owner, then its stored answer (none: running)
    assert [r.result for r in results[:4]] == ["ran 1"] * 4  # type: ignore[union-attr]
    assert isinstance(results[4], CallRunningElsewhere) and executes["s-taken"].runs == 0
    held = await redis.mget([names.call_key(cid) for cid in ["s1", "s2", "s3", "s4"]])
    assert [h.decode() for h in held] == [OWNER] * 4


async def test_claims_are_reasserted_only_when_redis_lost_them(redis) -> None:
    """Every heartbeat asks; while this process's marker is in Redis that is one command, and once Redis
    lost its data (a restart: marker and claims gone) the running calls' claims are written again."""
    memory = CallMemory(redis, OWNER)
    execute = Counting("r1", delay=2.0)
    running = asyncio.ensure_future(memory.run_once("r1", execute, claim_ttl=60))
    for _ in range(100):  # bounded: until it runs
        if execute.runs:
            break
        await asyncio.sleep(0.02)
    await memory.reassert_claims(60)  # first beat: the marker goes in with the claims
    await redis.delete(names.call_key("r1"))
    await memory.reassert_claims(60)
    assert await redis.get(names.call_key("r1")) is None  # marker present: nothing rewritten
    await redis.flushdb()  # what a restarted Redis without persistence holds
    await memory.reassert_claims(60)
    assert (await redis.get(names.call_key("r1"))).decode() == OWNER
    assert (await running).result == "ran 1"
