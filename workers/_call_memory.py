"""Recent call outcomes keyed by call id: a redelivered task never runs a call twice.

Two layers, checked in order:

1. this process: calls running now (a duplicate awaits the same asyncio task) and recent outcomes
   (an LRU bounded by count and age) — answers a duplicate with the stored outcome, ``replayed=True``;
2. Redis: ``SET toolfleet:call:<id> <host>/<boot> NX`` claims a call before it runs (the claims asked
   for in one loop iteration — a stage's calls — in one pipeline, one round trip). A duplicate that
   loses the claim either finds the stored answer (a stage call's ``toolfleet:outcome:<id>``, or a
   single call's Celery result: replayed), or learns the call is
   running on another live process (the task is ignored: the first execution stores the result), or
   learns the claiming process is gone — then the call is *not* run again (it may have had effects)
   and the answer is a ``sandbox_unavailable`` error saying so.

Redis may be restarting while a call arrives: the claim retries (bounded by ``redis_patience``)
rather than failing the call, and a claim whose reply was lost is recognised as this process's own.

All methods run on the worker's asyncio loop (single-threaded), so the local maps need no locks.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import TypeVar

from redis.asyncio import Redis
from redis.exceptions import RedisError

from orchestrator._errors import ControlFlowSignal
from orchestrator._wire import CallOutcome
from orchestrator.tool._tool_call import ToolCallError

from .fleet import Keyring, names, patiently, read_stored, verify_result

T = TypeVar("T")


CLAIMS_MARKER_TTL = 24 * 3600  # a marker that expires merely costs one needless re-assertion


class CallRunningElsewhere(ControlFlowSignal):
    """Another live worker process holds the claim on this call id; its execution will answer."""


class CallMemory:
    def __init__(self, redis: Redis | None, owner: str, max_entries: int = 10_000, max_age: float = 3600.0,
                 redis_patience: float = 30.0, max_bytes: int = 64 * 1024 * 1024,
                 keyring: Keyring | None = None) -> None:
        self._redis = redis
        self._redis_patience = redis_patience
        self._owner = owner  # "<host>/<boot id>": identifies this process across restarts
        self._running: dict[str, asyncio.Task[CallOutcome]] = {}
        self._done: OrderedDict[str, tuple[float, CallOutcome]] = OrderedDict()
        self._cancelled: OrderedDict[str, float] = OrderedDict()
        self._max_entries = max_entries
        self._max_age = max_age
        # Bounded by size too: outcomes are capped at the worker (512 KiB by default), and the sum kept
        # here stays under max_bytes (oldest evicted first; a later duplicate then asks Redis).
        self._max_bytes = max_bytes
        self._sizes: dict[str, int] = {}
        self.bytes = 0
        self._keyring = keyring
        self._claims: list[tuple[str, int, asyncio.Future[bool]]] = []  # claims asked for this loop iteration

    # --- local state ---------------------------------------------------------------------------

    def running_ids(self) -> list[str]:
        return list(self._running)

    def recall(self, call_id: str) -> CallOutcome | None:
        entry = self._done.get(call_id)
        if entry is None or time.monotonic() - entry[0] > self._max_age:
            return None
        return entry[1].model_copy(update={"replayed": True})

    def remember(self, outcome: CallOutcome) -> None:
        size = _approx_size(outcome)
        if size > self._max_bytes:
            return  # larger than the whole budget: Redis holds the answer for redeliveries
        self._forget(outcome.call_id)
        self._done[outcome.call_id] = (time.monotonic(), outcome)
        self._sizes[outcome.call_id] = size
        self.bytes += size
        while len(self._done) > self._max_entries or self.bytes > self._max_bytes:
            self._forget(next(iter(self._done)))

    def _forget(self, call_id: str) -> None:
        if self._done.pop(call_id, None) is not None:
            self.bytes -= self._sizes.pop(call_id, 0)

    def cancel(self, call_id: str) -> bool:
        """Cancel a running call (its sandbox process group is killed by the driver); remember the id
        so a copy of the task that arrives later is not started."""
        self._cancelled[call_id] = time.monotonic()
        while len(self._cancelled) > self._max_entries:
            self._cancelled.popitem(last=False)
        task = self._running.get(call_id)
        if task is not None and not task.done():
            task.cancel()
            return True
        return False

    def was_cancelled(self, call_id: str) -> bool:
        return call_id in self._cancelled

    # --- the one entry point -------------------------------------------------------------------

    async def run_once(
        self, call_id: str, execute: Callable[[], Awaitable[CallOutcome]], claim_ttl: float
    ) -> CallOutcome:
        """Run ``execute`` unless this call id already ran (or is running) somewhere."""
        remembered = self.recall(call_id)
        if remembered is not None:
            return remembered
        running = self._running.get(call_id)
        if running is not None:
            outcome = await asyncio.shield(running)
            return outcome.model_copy(update={"replayed": True})
        # Registered before the claim's round trip, so a copy arriving meanwhile joins this run.
        task = asyncio.ensure_future(self._claim_and_run(call_id, execute, claim_ttl))
        self._running[call_id] = task
        try:
            outcome = await asyncio.shield(task)
        except asyncio.CancelledError:
            task.cancel()
            raise
        finally:
            if task.done():
                self._running.pop(call_id, None)
        self.remember(outcome)
        return outcome

    async def _claim_and_run(
        self, call_id: str, execute: Callable[[], Awaitable[CallOutcome]], claim_ttl: float
    ) -> CallOutcome:
        if self._redis is not None and not await self._claim(call_id, claim_ttl):
            return await self._answer_duplicate(call_id)
        if call_id in self._cancelled:
            raise asyncio.CancelledError  # the cancel arrived while the claim was in flight
        return await execute()

    async def reassert_claims(self, ttl: float) -> None:
        """Re-write the claims of running calls when Redis lost them (it restarted): called every
        heartbeat, it costs one command while Redis still holds this process's marker key (set with the
        claims), instead of one SET per running call."""
        if self._redis is None or not self._running:
            return
        if not await self._redis.set(names.claims_marker_key(self._owner), 1, nx=True, ex=CLAIMS_MARKER_TTL):
            return  # the marker survived: so did the claims
        async with self._redis.pipeline(transaction=False) as pipe:
            for call_id in self._running:
                pipe.set(names.call_key(call_id), self._owner, ex=max(1, int(ttl)))
            await pipe.execute()

    async def _patiently(self, op: Callable[[], Awaitable[T]]) -> T:
        """Run a Redis operation, retrying through a restart (bounded by ``redis_patience``)."""
        return await patiently(op, self._redis_patience)

    async def _claim(self, call_id: str, ttl: float) -> bool:
        """Claimed (or already held by this process). Every claim asked for in one loop iteration — a
        stage's calls — goes to Redis in one pipeline: one round trip per stage, not per call."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[bool] = loop.create_future()
        self._claims.append((call_id, max(1, int(ttl)), fut))
        if len(self._claims) == 1:
            loop.call_soon(lambda: asyncio.ensure_future(self._claim_batch()))
        return await fut

    async def _claim_batch(self) -> None:
        batch, self._claims = self._claims, []
        try:
            held = await self._patiently(lambda: self._claim_all([(call_id, ttl) for call_id, ttl, _ in batch]))
        except (RedisError, OSError) as exc:
            for _, _, fut in batch:
                if not fut.done():
                    fut.set_exception(exc)
            return
        for (_, _, fut), claimed in zip(batch, held, strict=True):
            if not fut.done():
                fut.set_result(claimed)

    async def _claim_all(self, claims: list[tuple[str, int]]) -> list[bool]:
        """SET NX per call id in one pipeline; a key not set is still ours when this process holds it
        already (an earlier attempt that lost only its reply, or reassert_claims after a Redis restart):
        one more round trip, only then."""
        redis = self._redis
        assert redis is not None
        keys = [names.call_key(call_id) for call_id, _ in claims]
        async with redis.pipeline(transaction=False) as pipe:
            for key, (_, ttl) in zip(keys, claims, strict=True):
                pipe.set(key, self._owner, nx=True, ex=ttl)
            held = [bool(ok) for ok in await pipe.execute()]
        taken = [i for i, ok in enumerate(held) if not ok]
        if taken:
            owners = await redis.mget([keys[i] for i in taken])
            for i, owner in zip(taken, owners, strict=True):
                held[i] = (owner.decode() if isinstance(owner, bytes) else owner) == self._owner
        return held

    async def _answer_duplicate(self, call_id: str) -> CallOutcome:
        assert self._redis is not None
        redis = self._redis
        answer, stored, owner = await self._patiently(
            lambda: redis.mget(names.outcome_key(call_id), names.result_key(call_id), names.call_key(call_id)))
        outcome = read_stored(self._keyring, call_id, answer) if answer is not None else None
        if outcome is not None:  # a stage call's answer (workers.fleet._replies)
            return CallOutcome.model_validate_json(outcome).model_copy(update={"replayed": True})
        if stored is not None:  # a single call's Celery result (toolfleet.call)
            try:
                meta = json.loads(stored)
            except ValueError:
                meta = None
            if (isinstance(meta, dict) and meta.get("status") == "SUCCESS" and isinstance(meta.get("result"), dict)
                    and (self._keyring is None or verify_result(self._keyring, meta, call_id))):
                return CallOutcome.model_validate(meta["result"]).model_copy(update={"replayed": True})
        owner = owner.decode() if isinstance(owner, bytes) else owner
        if owner is not None and owner != self._owner and await self._owner_alive(owner):
            raise CallRunningElsewhere(f"call {call_id} is running on {owner}")
        now = time.time()
        return CallOutcome(
            call_id=call_id,
            error=ToolCallError(
                type="sandbox_unavailable",
                message=(
                    f"The worker process that started this call ({owner or 'unknown'}) was lost before it "
                    "reported a result; the call was not run again because it may already have had effects."
                ),
            ),
            started=now,
            completed=now,
            replayed=True,
        )

    async def _owner_alive(self, owner: str) -> bool:
        """The owner is ``host/boot``: alive when that host heartbeats with the same boot id."""
        assert self._redis is not None
        host, _, boot = owner.partition("/")
        current = await self._redis.hget(names.heartbeat_key(host), "boot")
        current = current.decode() if isinstance(current, bytes) else current
        return current is not None and current == boot


def _approx_size(outcome: CallOutcome) -> int:
    """Bytes an outcome holds, roughly (its strings; exact enough for a budget)."""
    size = 512
    result = outcome.result
    items = result if isinstance(result, list) else [result]
    for item in items:
        if isinstance(item, str):
            size += len(item)
        elif item is not None:
            size += len(getattr(item, "text", "") or "") + len(getattr(item, "image", "") or "")
    for part in (outcome.error, outcome.fatal):
        if part is not None:
            size += len(part.message) + len(getattr(part, "traceback", None) or "")
    return size
