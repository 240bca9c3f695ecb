"""Stage outcomes on the wire: how a worker answers a ``toolfleet.stage`` message, and how the answer reads.

A dispatcher SUBSCRIBEs one reply channel of its own (``_names.reply_channel``) when it starts and
names it in every stage message it sends. The worker answers each call as soon as it completes:

* the item ``[call_id, mac, outcome_json]`` — ``outcome_json`` is the ``CallOutcome`` as JSON text and
  ``mac`` = ``_auth.outcome_mac(call_id, outcome_json)``, so the orchestrator verifies the exact bytes
  before parsing them (anyone able to write Redis could otherwise answer for a worker);
* PUBLISHed on the reply channel, in a JSON list with the other items completed in the same loop
  iteration for that channel, and stored under ``_names.outcome_key(call_id)`` (``SET NX EX``:
  the first answer stays) for ``OUTCOME_TTL`` seconds — for the orchestrator's re-check after a
  reconnect and for a redelivered copy of the call (``_call_memory``);
* everything completed in one loop iteration goes out in one pipeline (PUBLISH first: Redis at
  ``maxmemory`` still publishes, refusing only the SETs — those are then kept and stored later by
  ``_result_store.UnstoredResults``, and a ``store_failed`` fleet event names the calls).

Nothing is polled, nothing is subscribed or deleted per call: the keys expire.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import structlog
from redis.asyncio import Redis
from redis.exceptions import RedisError

from . import _auth, _names
from ._events import FleetEvents
from ._patience import patiently
from ._result_store import UnstoredResults, is_out_of_memory

__all__ = ["OUTCOME_TTL", "ReplySender", "parse_items", "read_stored"]

log = structlog.get_logger("toolfleet.worker.replies")

OUTCOME_TTL = 1800  # seconds a stage outcome stays readable (well past a reconnect's re-check)
MAX_ITEMS = 10_000  # items one reply message may carry (untrusted input on the orchestrator side)


def parse_items(data: Any) -> list[tuple[str, str, str]]:
    """``(call_id, mac, outcome_json)`` items from a reply message (untrusted: malformed items dropped)."""
    try:
        raw = json.loads(data)
    except (TypeError, ValueError):
        return []
    if not isinstance(raw, list):
        return []
    items = raw if raw and isinstance(raw[0], list) else [raw]  # a stored value is one item
    return [(i[0], i[1], i[2]) for i in items[:MAX_ITEMS]
            if isinstance(i, list) and len(i) == 3 and all(isinstance(part, str) for part in i)]


def read_stored(keyring: _auth.Keyring | None, call_id: str, value: Any) -> str | None:
    """The outcome JSON stored for ``call_id`` if it is a genuine (signed) answer for that call."""
    for item_id, mac, outcome in parse_items(value):
        if item_id == call_id and (keyring is None or _auth.verify_outcome(keyring, mac, call_id, outcome)):
            return outcome
    return None


STREAMING_S = 0.01  # a flush this recent means outcomes are streaming in
REPLY_LINGER_S = 0.002  # how long a streaming outcome waits for others to share its pipeline


class ReplySender:
    """Sends outcomes from the worker's loop: everything completed in one loop iteration in one pipeline."""

    def __init__(self, redis: Redis, keyring: _auth.Keyring | None, broker_url: str, patience: float = 30.0,
                 streaming_s: float = STREAMING_S, linger_s: float = REPLY_LINGER_S) -> None:
        self._redis = redis
        self._streaming_s, self._linger_s = streaming_s, linger_s
        self._keyring = keyring
        self._url = broker_url
        self._kept: UnstoredResults | None = None  # outcomes Redis refused to store (maxmemory); built on first need
        self._patience = patience
        self._pending: list[tuple[str, str, str]] = []  # (channel, call_id, item json)
        self._flushing = False
        self._flushed_at = -1e9  # loop time of the latest flush
        self.sent = 0
        self.flushes = 0

    def send(self, channel: str, call_id: str, outcome_json: str) -> None:
        mac = _auth.outcome_mac(self._keyring, call_id, outcome_json) if self._keyring is not None else ""
        self._pending.append((channel, call_id, json.dumps([call_id, mac, outcome_json])))
        if not self._flushing:
            self._flushing = True
            loop = asyncio.get_running_loop()
            if loop.time() - self._flushed_at < self._streaming_s:
                # Outcomes are streaming (the last flush was moments ago): wait a little so the next
                # ones share this pipeline; an occasional outcome goes at once.
                loop.call_later(self._linger_s, lambda: asyncio.ensure_future(self._flush()))
            else:
                loop.call_soon(lambda: asyncio.ensure_future(self._flush()))

    async def _flush(self) -> None:
        self._flushing = False
        batch, self._pending = self._pending, []
        if not batch:
            return
        self._flushed_at = asyncio.get_running_loop().time()
        self.flushes += 1
        by_channel: dict[str, list[str]] = {}
        for channel, _, item in batch:
            by_channel.setdefault(channel, []).append(item)

        async def send_all() -> list[Any]:
            # One pipeline, no transaction (nothing here needs atomicity). PUBLISH first: at maxmemory
            # Redis still publishes and refuses only the SETs, whose errors come back per command.
            async with self._redis.pipeline(transaction=False) as pipe:
                for channel, items in by_channel.items():
                    pipe.publish(channel, f"[{','.join(items)}]")
                for _, call_id, item in batch:
                    pipe.set(_names.outcome_key(call_id), item, nx=True, ex=OUTCOME_TTL)
                return await pipe.execute(raise_on_error=False)

        try:  # Redis restarting: retried, bounded (a copy published twice is ignored)
            results = await patiently(send_all, self._patience)
        except (RedisError, OSError) as exc:
            log.error("worker.outcome_send_failed", calls=len(batch), error=str(exc)[:200])
            return
        self.sent += len(batch)
        stored = results[len(by_channel):]
        refused = [(entry, res) for entry, res in zip(batch, stored, strict=True) if isinstance(res, Exception)]
        for (_, call_id, item), err in refused:
            if is_out_of_memory(err):  # published already; kept and stored once Redis takes writes
                self._unstored().keep(_names.outcome_key(call_id), item, OUTCOME_TTL, call_id, str(err))
            else:
                log.error("worker.outcome_not_stored", call_id=call_id[:64], error=str(err)[:200])
        if any(isinstance(res, Exception) for res in results[:len(by_channel)]):
            log.error("worker.outcome_publish_failed",
                      error=str(next(r for r in results if isinstance(r, Exception)))[:200])

    def _unstored(self) -> UnstoredResults:
        if self._kept is None:
            import redis

            client = redis.Redis.from_url(self._url, socket_timeout=5, socket_connect_timeout=5)  # its retry thread's
            events = FleetEvents(self._url, keyring=self._keyring)
            self._kept = UnstoredResults(
                store=lambda key, value, ttl: client.set(key, value, nx=True, ex=ttl),
                publish=lambda key, value: None,  # already published (the SET's pipeline)
                announce=lambda call_id, error: events.publish("store_failed", task_id=call_id, error=error))
        return self._kept
