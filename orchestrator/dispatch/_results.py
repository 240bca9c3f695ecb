"""One asyncio listener per dispatcher for call outcomes and Celery results on Redis.

Stage calls (``toolfleet.stage``, the hot path) are answered on the dispatcher's own reply channel,
subscribed once when the listener connects (``workers.fleet``): every message goes to
``on_reply``; nothing is subscribed, unsubscribed or deleted per call (the stored copies expire).
The rest of this docstring is about sandbox opens/closes (and plain ``toolfleet.call`` tasks).

Celery's Redis result backend stores each task's result at ``celery-task-meta-<id>`` *and*
PUBLISHes it on a channel of the same name. The listener holds one dedicated connection in
subscribed mode: ``expect(id)`` registers a future and SUBSCRIBEs to that task's channel before the
task is published, each message resolves its future, and resolved channels are UNSUBSCRIBEd in
batches. Nothing polls: ``GroupResult.get()`` sleeps 0.5 s between polls and is thread-local.

After a reconnect (Redis restarted, connection dropped) the listener re-subscribes every pending
channel and re-reads the stored results with one MGET, so a result published while it was away is
not lost. A PING every ``health_interval`` seconds detects a silently dead connection.

Only results a worker signed with the fleet secret resolve a call (anyone who can write to Redis
could otherwise answer for a worker); others are ignored and logged. A result read is deleted from
Redis (one UNLINK every ``DELETE_BATCH_S``): it is needed only until the orchestrator has it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

import structlog
from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.connection import Connection, parse_url
from redis.exceptions import RedisError

from orchestrator.util._retry import Backoff, RetryPolicy
from workers.fleet import Keyring, names, verify_result

log = structlog.get_logger("toolfleet.dispatch")

READY_STATES = frozenset({"SUCCESS", "FAILURE", "REVOKED"})
MAX_CONNECTIONS = 64  # the dispatcher's connections for ordinary commands (the subscription has its own)
POOL_WAIT_S = 60.0  # bound on waiting for one of them
DELETE_BATCH_S = 0.2  # results read are deleted from Redis this often (one UNLINK for all of them)
# Reconnecting: 50 ms doubling to 1 s, from the start again once a connection held; never given up (the
# listener is cancelled when its dispatcher closes, and the calls waiting on it have their own deadlines).
RECONNECT = RetryPolicy(max_retries=None, max_elapsed=float("inf"), initial_delay=0.05, multiplier=2.0, max_delay=1.0,
                        jitter=0.0)


class ResultListener:
    def __init__(self, url: str, health_interval: float = 5.0,
                 on_reconnect: Callable[[], Awaitable[None]] | None = None,
                 keyring: Keyring | None = None, on_event: Callable[[bytes], None] | None = None,
                 reply_channel: str | None = None, on_reply: Callable[[bytes], None] | None = None) -> None:
        self._conn_kwargs: dict[str, Any] = dict(parse_url(url))
        # rediss:// gives SSLConnection (TLS to the broker); keep it for the subscribed connection too.
        self._conn_class: type[Connection] = self._conn_kwargs.pop("connection_class", None) or Connection
        # Ordinary commands (re-checks, placement, fair-share counts). A blocking pool: a thousand samples
        # closing at once wait their turn for a connection instead of failing "Too many connections"
        # (which would leave their eval's fair-share counts held).
        self.redis = Redis.from_pool(BlockingConnectionPool.from_url(url, max_connections=MAX_CONNECTIONS,
                                                                     timeout=POOL_WAIT_S, socket_connect_timeout=5))
        self._futures: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._conn: Connection | None = None
        self._connected = asyncio.Event()
        self._unsubscribe: list[str] = []
        self._consumed: list[str] = []  # result keys read: deleted in batches
        self._delete_scheduled = False
        self._keyring = keyring
        self.unauthenticated = 0
        self._flush_scheduled = False
        self._task: asyncio.Task[None] | None = None
        self._health: asyncio.Task[None] | None = None
        self._reconnect_task: asyncio.Task[None] | None = None
        self._last_seen = time.monotonic()
        self._health_interval = health_interval
        self._on_reconnect = on_reconnect
        self._on_event = on_event  # fleet events (``workers.fleet.FleetEvents``): rejected messages, unstored results
        self._reply_channel = reply_channel  # stage outcomes for this dispatcher (``workers.fleet.ReplySender``)
        self._on_reply = on_reply
        self._closed = False
        self.reconnects = 0

    # --- lifecycle -----------------------------------------------------------------------------

    async def start(self, timeout: float = 30.0) -> None:
        """Connect and subscribe; bounded (a loaded machine can take seconds to answer the first connect)."""
        if self._task is None:
            self._task = asyncio.ensure_future(self._run())
            self._health = asyncio.ensure_future(self._ping_loop())
        await asyncio.wait_for(self._connected.wait(), timeout)

    async def aclose(self) -> None:
        self._closed = True
        for task in (self._task, self._health):
            if task is not None:
                task.cancel()
        await asyncio.gather(*(t for t in (self._task, self._health) if t is not None), return_exceptions=True)
        if self._conn is not None:
            await self._conn.disconnect(nowait=True)
        await self.redis.aclose()
        for fut in self._futures.values():
            if not fut.done():
                fut.cancel()
        self._futures.clear()

    @property
    def connected(self) -> bool:
        return self._connected.is_set()

    def pending_ids(self) -> list[str]:
        return list(self._futures)

    # --- registering interest ------------------------------------------------------------------

    async def expect(self, task_ids: list[str]) -> list[asyncio.Future[dict[str, Any]]]:
        """Futures for these tasks' Celery result metas; call (and await) before publishing them."""
        loop = asyncio.get_running_loop()
        futures = []
        for task_id in task_ids:
            fut: asyncio.Future[dict[str, Any]] = loop.create_future()
            self._futures[task_id] = fut
            futures.append(fut)
        conn = self._conn
        if conn is not None:
            with contextlib.suppress(RedisError, OSError):  # the reader reconnects and re-subscribes everything pending
                await conn.send_command("SUBSCRIBE", *(names.result_key(t) for t in task_ids), check_health=False)
        return futures

    def forget(self, task_id: str, future: asyncio.Future[dict[str, Any]] | None = None) -> None:
        """Stop listening for a task (resolved elsewhere, cancelled or expired).

        With ``future``, only if that is still the one registered (the id may be expected again).
        """
        if future is not None and self._futures.get(task_id) is not future:
            return
        if self._futures.pop(task_id, None) is not None:
            self._unsubscribe.append(names.result_key(task_id))
            self._schedule_flush()

    # --- the reader ----------------------------------------------------------------------------

    async def _run(self) -> None:
        backoff = Backoff(RECONNECT)
        first = True
        while not self._closed:
            conn = self._conn_class(**self._conn_kwargs, socket_connect_timeout=5, socket_timeout=None,
                              health_check_interval=0, protocol=2)  # RESP2: pubsub frames are plain replies
            try:
                await conn.connect()
                # The fleet-events channel first: it also puts the connection in subscribed mode at once,
                # so PINGs and replies have one shape.
                replies = [self._reply_channel] if self._reply_channel else []
                channels = [names.FLEET_EVENTS_CHANNEL, *replies, *(names.result_key(t) for t in self._futures)]
                await conn.send_command("SUBSCRIBE", *channels, check_health=False)
                self._conn = conn
                self._last_seen = time.monotonic()
                self._connected.set()
                backoff.reset()
                if not first:
                    self.reconnects += 1
                    log.warning("dispatch.listener_reconnected", pending=len(self._futures))
                    await self.recheck(list(self._futures))
                    if self._on_reconnect is not None:  # held: the loop keeps only a weak reference to a task
                        self._reconnect_task = asyncio.ensure_future(self._on_reconnect())
                first = False
                while True:
                    response = await conn.read_response()
                    self._last_seen = time.monotonic()
                    self._handle(response)
            except asyncio.CancelledError:
                raise
            except (RedisError, OSError, TimeoutError) as exc:
                if self._conn is not None:
                    log.warning("dispatch.listener_disconnected", error=str(exc))
                self._conn = None
                self._connected.clear()
                await conn.disconnect(nowait=True)
                await backoff.wait()

    def _handle(self, response: Any) -> None:
        if not isinstance(response, list) or not response:
            return
        kind = response[0]
        if kind != b"message" or len(response) < 3:
            return  # subscribe/unsubscribe confirmations, pongs
        channel = response[1].decode() if isinstance(response[1], bytes) else response[1]
        if channel == self._reply_channel:
            if self._on_reply is not None:
                self._on_reply(response[2])
            return
        if channel == names.FLEET_EVENTS_CHANNEL:
            if self._on_event is not None:
                self._on_event(response[2])
            return
        self._resolve(channel[len(names.RESULT_PREFIX):], response[2])

    def _resolve(self, task_id: str, data: bytes | str) -> bool:
        try:
            meta = json.loads(data)
        except ValueError:
            return False
        if not isinstance(meta, dict) or meta.get("status") not in READY_STATES:
            return False
        if self._keyring is not None and not verify_result(self._keyring, meta, task_id):
            self.unauthenticated += 1
            log.warning("dispatch.result_unauthenticated", task_id=task_id[:64], seen=self.unauthenticated)
            return False  # keep waiting: the worker's own (signed) result may still come
        fut = self._futures.pop(task_id, None)
        self._unsubscribe.append(names.result_key(task_id))
        self._consumed.append(names.result_key(task_id))
        self._schedule_flush()
        if fut is not None and not fut.done():
            fut.set_result(meta)
        return True

    async def recheck(self, task_ids: list[str]) -> int:
        """Resolve pending tasks whose result is already stored (missed while disconnected)."""
        if not task_ids:
            return 0
        values = await self.redis.mget([names.result_key(t) for t in task_ids])
        return sum(1 for task_id, value in zip(task_ids, values, strict=True) if value is not None
                   and self._resolve(task_id, value))

    async def stored_outcomes(self, call_ids: list[str]) -> list[Any]:
        """The stage outcomes stored for these calls (``workers.fleet.read_stored``; None where there is none yet)."""
        return list(await self.redis.mget([names.outcome_key(c) for c in call_ids])) if call_ids else []

    def _schedule_flush(self) -> None:
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(lambda: asyncio.ensure_future(self._flush()))

    async def _flush(self) -> None:
        self._flush_scheduled = False
        channels, self._unsubscribe = self._unsubscribe, []
        if self._consumed and not self._delete_scheduled:
            # Batched: one UNLINK per DELETE_BATCH_S for every result read meanwhile.
            self._delete_scheduled = True
            asyncio.get_running_loop().call_later(DELETE_BATCH_S, lambda: asyncio.ensure_future(self._delete()))
        # A task expected again since (a republished call) keeps its channel.
        channels = [c for c in channels if c[len(names.RESULT_PREFIX):] not in self._futures]
        conn = self._conn
        if channels and conn is not None:
            with contextlib.suppress(RedisError, OSError):  # a reconnect subscribes only what is still pending
                await conn.send_command("UNSUBSCRIBE", *channels, check_health=False)

    async def _delete(self) -> None:
        self._delete_scheduled = False
        keys, self._consumed = self._consumed, []
        if not keys or self._closed:
            return
        with contextlib.suppress(RedisError, OSError):  # result_expires removes them anyway
            await self.redis.unlink(*keys)

    async def _ping_loop(self) -> None:
        while True:
            await asyncio.sleep(self._health_interval)
            conn = self._conn
            if conn is None:
                continue
            if time.monotonic() - self._last_seen > 3 * self._health_interval:
                log.warning("dispatch.listener_silent", seconds=round(time.monotonic() - self._last_seen, 1))
                await conn.disconnect(nowait=True)  # the reader fails and reconnects
                continue
            with contextlib.suppress(RedisError, OSError):
                await conn.send_command("PING", check_health=False)
