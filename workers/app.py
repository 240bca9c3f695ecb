"""The Celery app: Redis broker and result store, JSON only, late acks, task events on request.

``app`` is a worker-side instance (configured from ``TOOLFLEET_BROKER``, so ``celery -A workers.app
inspect active`` works against the fleet; ``toolfleet worker`` builds its own with ``create_worker_app``);
``create_app(url)`` builds another for a publisher (the orchestrator's ``CeleryDispatcher``). Both register the same
task names from ``workers.fleet.names``.

Pool decision: **threads**. A tool call is I/O-bound (it waits on a sandbox channel), and every call of
a worker process must share one persistent asyncio loop, because sandboxes, their exec channels and
``bash_session`` PTYs live across calls. Each pool thread submits its task (a stage's calls for this
host, or one call) to that loop and waits; a stage's calls run concurrently there. prefork would give each child its own
sandboxes (calls for one sandbox could land in a process that does not hold it); solo would serialise.
"""

from __future__ import annotations

import functools
import os
import time
from contextlib import contextmanager
from functools import cached_property
from typing import Any

import structlog
from celery import Celery, states
from celery.backends.base import BackendStoreError
from celery.backends.redis import RedisBackend
from celery.worker.consumer import Consumer
from kombu.transport import redis as kombu_redis
from kombu.transport.virtual import Empty, QoS as virtual_QoS
from kombu.utils.encoding import bytes_to_str
from kombu.utils.json import dumps as kombu_dumps
from pydantic import BaseModel, ConfigDict, Field
from redis.exceptions import ResponseError

from ._rejects import RejectLog, rejects  # noqa: F401 - RejectLog re-exported
from .fleet import (
    DEFAULT_REPLAY_WINDOW,
    DEST_HEADER,
    EXPIRED,
    ISSUED_HEADER,
    MAC_HEADER,
    RESULT_MAC_FIELD,
    FleetEvents,
    Keyring,
    MissingSecretError,
    ReplayWindow,
    UnstoredResults,
    freshness_refusal,
    is_out_of_memory,
    load_keyring,
    message_age,
    message_mac,
    names,
    result_mac,
    verify_message,
)

DEFAULT_BROKER = "redis://127.0.0.1:6379/0"
BROKER_ENV = "TOOLFLEET_BROKER"
KEYRING_OPTION = "toolfleet_keyring"  # broker transport option: the fleet Keyring (signs what this app publishes)
VERIFY_OPTION = "toolfleet_verify"  # broker transport option: check every task message consumed (workers)
REPLAY_OPTION = "toolfleet_replay"  # broker transport option: the ReplayWindow a worker enforces (default below)

log = structlog.get_logger("toolfleet.worker")

def _message_verdict(message: Any, queue: str | None, keyring: Keyring | None, now: float | None = None,
                     window: ReplayWindow = DEFAULT_REPLAY_WINDOW) -> str | None:
    """Why a decoded broker envelope must be dropped (None: deliver it). Pure but for the clock; table-tested."""
    if not isinstance(message, dict):
        return "not an envelope"
    properties, headers = message.get("properties"), message.get("headers")
    if not isinstance(properties, dict) or not isinstance(properties.get("delivery_tag"), str):
        return "malformed envelope"
    if not isinstance(message.get("body", ""), str) or not isinstance(properties.get("delivery_info", {}), dict):
        return "malformed envelope"
    if not names.is_task_queue(queue):
        return None  # Celery's own control/event traffic: shape checked, not signed (see SECURITY.md)
    if not isinstance(headers, dict) or message.get("content-type") != "application/json":
        return "not a JSON task message"
    if headers.get("task") not in names.TASK_NAMES:
        return "task name not accepted"
    if keyring is None:
        return "no fleet secret on this worker"
    issued, dest = headers.get(ISSUED_HEADER), headers.get(DEST_HEADER)
    if not verify_message(keyring, headers.get(MAC_HEADER), headers.get("task"), headers.get("id"),
                          message.get("body", ""), issued, dest):
        return "unauthenticated"
    if dest != queue:
        return "sent to another queue"  # a captured message pushed onto another host's queue
    stale = freshness_refusal(issued, time.time() if now is None else now, window)
    return None if stale is None else f"stale: {stale}"


class FleetRedisBackend(RedisBackend):
    """Celery's Redis result backend, minus the publisher-side result consumer, one round trip a store.

    * On publish (and for every member of a group) Celery subscribes a per-thread pubsub connection
      to the task's result channel — a round trip — and unsubscribes when the ``AsyncResult`` is
      collected — another. It only drains that connection inside ``AsyncResult.get()``, which
      toolfleet never calls (one asyncio listener per dispatcher reads the same channels).
    * Storing a result, Celery first GETs the stored one so that a late duplicate never overwrites a
      SUCCESS, then SETs and PUBLISHes: two round trips. One Lua script does the same atomically.
    """

    _STORE_UNLESS_SUCCESS = """
local current = redis.call('GET', KEYS[1])
if current then
    local ok, meta = pcall(cjson.decode, current)
    if ok and type(meta) == 'table' and meta['status'] == 'SUCCESS' then return 0 end
end
if tonumber(ARGV[2]) > 0 then
    redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2])
else
    redis.call('SET', KEYS[1], ARGV[1])
end
redis.call('PUBLISH', KEYS[1], ARGV[1])
return 1
"""

    def on_task_call(self, producer: Any, task_id: Any) -> Any:
        return None

    def add_pending_result(self, result: Any, weak: Any = False, start_drainer: Any = True) -> Any:
        return result

    def remove_pending_result(self, result: Any) -> Any:
        return result

    def _store_result(self, task_id: Any, result: Any, state: Any, traceback: Any = None, request: Any = None,
                      **kwargs: Any) -> Any:
        meta = self._get_result_meta(result=result, state=state, traceback=traceback, request=request)
        meta["task_id"] = bytes_to_str(task_id)
        keyring = (self.app.conf.broker_transport_options or {}).get(KEYRING_OPTION)
        if keyring is not None:  # the orchestrator trusts only results a secret-holder wrote
            meta[RESULT_MAC_FIELD] = result_mac(keyring, meta["task_id"], state, meta.get("result"))
        value = self.encode(meta)
        if isinstance(value, str) and len(value) > self._MAX_STR_VALUE_SIZE:
            raise BackendStoreError("value too large for Redis backend", state=state, task_id=task_id)
        expires = self.failure_expires if state == states.FAILURE else self.expires
        key = self.get_key_for_task(task_id)
        try:
            self.ensure(self._store_unless_success, (key, value, int(expires or 0)))
        except ResponseError as exc:
            if not is_out_of_memory(exc):
                raise
            self._unstored.keep(bytes_to_str(key), value, int(expires or 0), meta["task_id"], str(exc))
        return result

    @cached_property
    def _unstored(self) -> UnstoredResults:
        """Results Redis refused at maxmemory: published now, stored when it takes them (``fleet._result_store``)."""
        events = FleetEvents(self.app.conf.broker_url,
                             keyring=(self.app.conf.broker_transport_options or {}).get(KEYRING_OPTION))
        return UnstoredResults(store=lambda k, v, e: self._store_unless_success(k, v, e),
                               publish=lambda k, v: self.client.publish(k, v),
                               announce=lambda task_id, error: events.publish(
                                   "store_failed", task_id=task_id, error=error))

    @cached_property
    def _store_script(self) -> Any:
        return self.client.register_script(self._STORE_UNLESS_SUCCESS)  # hashed once per backend

    def _store_unless_success(self, key: Any, value: Any, expires: Any) -> Any:
        self._store_script(keys=[key], args=[value, expires])


class FleetQoS(kombu_redis.QoS):
    """kombu's Redis ack emulation, with fewer round trips and commands per message.

    * No MULTI/EXEC around a message's reserve (ZADD + HSET) and ack (ZREM + HDEL): atomicity buys
      nothing there — the commands run in order on one connection, and the only other reader of those
      entries (``restore_visible``) takes only entries older than the visibility timeout (an hour),
      never one being written or acked now. Restores keep their own transaction.
    * Under the worker's event loop, acks are batched: an ack is recorded at once (kombu's own
      bookkeeping) and its Redis entries are removed with the next reserve's pipeline, or at the next
      loop tick — one ZREM and one HDEL for all of them, and no round trip of its own on the consumer
      thread. An ack not yet flushed when the worker dies leaves its entry: the message is redelivered
      after the visibility timeout and answered from the call memory, never run twice.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._acks: list[str] = []

    @contextmanager
    def pipe_or_acquire(self, pipe: Any = None, client: Any = None) -> Any:
        if pipe:
            yield pipe
        else:
            with self.channel.conn_or_acquire(client) as client:
                yield client.pipeline(transaction=False)

    def append(self, message: Any, delivery_tag: Any) -> Any:
        delivery = message.delivery_info
        with self.pipe_or_acquire() as pipe:
            self._add_acks(pipe)
            pipe.zadd(self.unacked_index_key, {delivery_tag: time.time()})
            pipe.hset(self.unacked_key, delivery_tag,
                      kombu_dumps([message._raw, delivery["exchange"], delivery["routing_key"]]))
            pipe.execute()
            virtual_QoS.append(self, message, delivery_tag)

    def ack(self, delivery_tag: Any) -> Any:
        if not getattr(self.channel.connection, "batch_acks", False):
            return super().ack(delivery_tag)  # no event loop to flush them: ack now
        self._acks.append(delivery_tag)
        virtual_QoS.ack(self, delivery_tag)

    def flush_acks(self) -> None:
        if not self._acks:
            return
        with self.pipe_or_acquire() as pipe:
            self._add_acks(pipe)
            pipe.execute()

    def _add_acks(self, pipe: Any) -> None:
        tags, self._acks = self._acks, []
        if tags:
            pipe.zrem(self.unacked_index_key, *tags)
            pipe.hdel(self.unacked_key, *tags)


class FleetRedisChannel(kombu_redis.Channel):
    """kombu's Redis channel, reusing one client per connection pool, signing what it publishes and
    surviving whatever it pops.

    * Publishing a task message (``_put``), it adds the HMAC of (task name, task id, body) as a
      header when the app holds the fleet keyring.
    * A queue item that is not JSON makes kombu raise out of the consumer loop, which Celery treats
      as unrecoverable (one ``LPUSH`` of junk used to stop a worker): the item is dropped and logged.

    kombu builds a new ``redis.Redis`` for every queue operation (publish, ack, binding lookup);
    with redis-py 8 each construction costs ~0.5 ms of CPU (it rebuilds the response-callback
    table), paid on the worker's consumer thread and the orchestrator's publisher several times a
    call. A ``redis.Redis`` is safe to share (each command checks a connection out of the pool),
    so keep one per pool and rebuild it only when kombu replaces the pool (reconnect).
    """

    QoS = FleetQoS
    _cached_client: tuple[object, object] | None = None

    def close(self) -> Any:
        qos = self._qos
        if isinstance(qos, FleetQoS) and not self._closing:
            try:
                qos.flush_acks()  # batched acks go out before the channel does
            except Exception as exc:  # noqa: BLE001 - as above: redelivered later, answered from memory
                log.warning("worker.ack_flush_failed", error=str(exc)[:200])
        return super().close()

    def _put(self, queue: Any, message: Any, **kwargs: Any) -> Any:
        keyring = self.connection.client.transport_options.get(KEYRING_OPTION)
        headers = message.get("headers")
        if keyring is not None and isinstance(headers, dict) and "task" in headers:
            issued = headers[ISSUED_HEADER] = f"{time.time():.3f}"
            headers[DEST_HEADER] = queue
            headers[MAC_HEADER] = message_mac(keyring, headers.get("task"), headers.get("id"),
                                              message.get("body", ""), issued, queue)
        return super()._put(queue, message, **kwargs)

    def _brpop_read(self, **options: Any) -> Any:
        try:
            return super()._brpop_read(**options)
        except (ValueError, TypeError) as exc:  # JSONDecodeError, UnicodeDecodeError: the item is already popped
            rejects.reject("not JSON", None, f"{type(exc).__name__}: {exc}")
            raise Empty from None

    def _create_client(self, asynchronous: Any = False) -> Any:
        if asynchronous:
            return super()._create_client(asynchronous=True)
        pool = self.pool
        cached = self._cached_client
        if cached is None or cached[0] is not pool:
            cached = self._cached_client = (pool, super()._create_client(asynchronous=False))
        return cached[1]


class FleetRedisTransport(kombu_redis.Transport):
    """Delivers to Celery only what passes ``_message_verdict`` (on workers: authenticated toolfleet
    tasks); everything else is dropped — never acked, never requeued — and logged. Under an event loop
    (the worker's consumer) its channels batch their acks, flushed at every loop tick (``FleetQoS``)."""

    Channel = FleetRedisChannel
    batch_acks = False

    def register_with_event_loop(self, connection: Any, loop: Any) -> Any:
        super().register_with_event_loop(connection, loop)
        self.batch_acks = True
        loop.on_tick.add(self._flush_acks)

    def _flush_acks(self) -> None:
        for channel in list(self.channels):
            qos = getattr(channel, "_qos", None)
            if qos is None or not getattr(qos, "_acks", None):
                continue
            try:
                qos.flush_acks()
            except Exception as exc:  # noqa: BLE001 - the entries stay: redelivered after the visibility timeout
                log.warning("worker.ack_flush_failed", error=str(exc)[:200])

    def _deliver(self, message: Any, queue: Any) -> Any:
        client: Any = self.client  # kombu's Channel always has its connection here
        options = client.transport_options
        if options.get(VERIFY_OPTION):
            reason = _message_verdict(message, queue, options.get(KEYRING_OPTION),
                                      window=options.get(REPLAY_OPTION) or DEFAULT_REPLAY_WINDOW)
            if reason is not None:
                headers = message.get("headers") if isinstance(message, dict) else None
                headers = headers if isinstance(headers, dict) else {}
                task_id = headers.get("id")
                logged = rejects.reject(reason, queue, f"task={str(headers.get('task'))[:80]!r}")
                # A message that aged out in the queue is reported every time, with its age: its
                # orchestrator sends it again (a saturated fleet is not a misconfiguration).
                expired = reason.startswith(f"stale: {EXPIRED}")
                if task_id is not None and (logged or expired):
                    age = message_age(headers.get(ISSUED_HEADER), time.time()) if expired else None
                    self._fleet_events().publish("rejected", reason=reason, task_id=task_id, queue=queue,
                                                 **({"age": f"{age:.3f}"} if age is not None else {}))
                return
        return super()._deliver(message, queue)

    def _fleet_events(self) -> FleetEvents:
        # Tell the orchestrator at once (a wrong secret or clock used to be a silent hang).
        events = getattr(self, "_events", None)
        if events is None:
            client: Any = self.client  # kombu's Channel always has its connection here
            rest = client.as_uri(include_password=True).split("://", 1)[1]  # scheme: this transport's class
            events = self._events = FleetEvents(f"{'rediss' if client.ssl else 'redis'}://{rest}",
                                                keyring=client.transport_options.get(KEYRING_OPTION))
        return events


class FleetConsumer(Consumer):
    """Celery's consumer, surviving a broker restart while late-ack calls are running.

    On connection loss Celery 5.7 closes the broken connection, and closing a Redis channel tries
    to restore its unacked messages through a transport it has just collected — an AttributeError
    that Celery treats as unrecoverable, so the worker dies exactly when Redis restarts mid-call.
    Restoring through a dead connection cannot work anyway (after a restart the unacked set is
    gone; otherwise the visibility timeout restores it), so skip it for that close only.
    """

    def on_connection_error_after_connected(self, exc: Any) -> Any:
        transport = getattr(self.connection, "transport", None)
        for channel in list(getattr(transport, "channels", None) or []):
            channel.do_restore = False
        return super().on_connection_error_after_connected(exc)


class AppConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    """What differs between deployments; everything else is fixed by the design."""

    broker_url: str = Field(default_factory=lambda: os.environ.get(BROKER_ENV, DEFAULT_BROKER))
    result_expires: int = Field(300, gt=0, description="seconds a stored result is kept if nobody consumes it "
                                "(the orchestrator deletes each one as it reads it)")
    max_payload_bytes: int = Field(8 * 1024 * 1024, gt=0, description="cap on a task message's JSON body")
    prefetch_multiplier: int = Field(1, ge=1, description="messages reserved per pool thread")
    visibility_timeout: int = Field(3600, gt=0, description="seconds before an unacked task is redelivered")
    replay: ReplayWindow = Field(default_factory=lambda: DEFAULT_REPLAY_WINDOW,
                                 description="how old (or how far ahead) a signed message a worker accepts may be")


def create_app(config: AppConfig | str | None = None, main: str = "toolfleet", keyring: Keyring | None = None,
               verify: bool = False) -> Celery:
    """``keyring`` signs the task messages (and results) this app writes; ``verify`` (workers) drops
    every consumed task message that is not an authenticated toolfleet task."""
    if config is None:
        config = AppConfig()
    elif isinstance(config, str):
        config = AppConfig(broker_url=config)
    backend_url = f"{FleetRedisBackend.__module__}:{FleetRedisBackend.__name__}+{config.broker_url}"
    app = Celery(main, broker=config.broker_url, backend=backend_url, set_as_current=False)
    app.conf.update(
        task_serializer="json",
        result_serializer="json",
        event_serializer="json",
        accept_content=["json"],
        result_accept_content=["json"],
        task_acks_late=True,  # a call's message is acked only when it finished: a lost host's calls are not lost
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=config.prefetch_multiplier,
        # Off by default, as in Celery: Flower turns them on with the `enable_events` control command
        # (or `toolfleet worker -E`). They are ~15% of a worker's CPU per call.
        worker_send_task_events=False,
        task_send_sent_event=True,
        task_track_started=False,  # a STARTED write per call would double result-store traffic
        result_expires=config.result_expires,
        result_extended=False,
        result_backend_always_retry=True,  # survive a Redis restart while storing an outcome
        result_backend_max_retries=30,
        broker_connection_retry_on_startup=True,
        broker_connection_max_retries=None,
        broker_transport_options={"visibility_timeout": config.visibility_timeout, KEYRING_OPTION: keyring,
                                  VERIFY_OPTION: verify, REPLAY_OPTION: config.replay},
        task_publish_retry=True,
        task_publish_retry_policy={"max_retries": 20, "interval_start": 0.1, "interval_step": 0.5, "interval_max": 2.0},
        task_default_queue=names.SHARED_QUEUE,
        worker_hijack_root_logger=False,
        worker_consumer=f"{FleetConsumer.__module__}:{FleetConsumer.__name__}",
        broker_transport=f"{FleetRedisTransport.__module__}:{FleetRedisTransport.__name__}",
        worker_cancel_long_running_tasks_on_connection_loss=False,
        broker_channel_error_retry=True,
    )
    app.conf.toolfleet_max_payload_bytes = config.max_payload_bytes
    return app


def create_worker_app(config: AppConfig | str | None = None, keyring: Keyring | None = None,
                      runtimes: Any = None) -> Celery:
    """An app with the task bodies registered (what a worker process runs), verifying every task
    message against ``keyring`` (default: the fleet secret from the environment, if set — a worker
    without one rejects every task; ``toolfleet worker`` refuses to start without one). Its tasks run
    on ``runtimes`` (a ``workers._loop.Runtimes``; default: one started lazily from the app's broker)."""
    from ._loop import Runtimes
    from ._profile import ThreadProfiles
    from .tasks import register_tasks

    ThreadProfiles.from_env()  # TOOLFLEET_PROFILE=<path>: a CPU profile of this worker, written at exit

    if keyring is None:
        try:
            keyring = load_keyring()
        except MissingSecretError:
            keyring = None  # e.g. `celery -A workers.app inspect`: control commands need no secret
    worker_app = create_app(config, keyring=keyring, verify=True)
    register_tasks(worker_app, runtimes or Runtimes(worker_app.conf.broker_url))
    _drop_builtin_tasks(worker_app)
    return worker_app


def _drop_builtin_tasks(app: Celery) -> None:
    """Celery registers its own tasks (``celery.accumulate``, ``celery.chord_unlock``, ...) in every
    app; a worker runs only toolfleet's (the transport refuses other names first; this is the second
    lock)."""
    for name in [n for n in app.tasks if n not in names.TASK_NAMES]:
        app.tasks.unregister(name)


@functools.cache
def _module_app() -> Celery:
    return create_worker_app()


def __getattr__(name: str) -> Celery:
    # ``app`` is built on first use, from TOOLFLEET_BROKER as it is then, and only in processes that
    # want it: ``celery -A workers.app inspect active`` finds it. ``toolfleet worker`` builds its own.
    if name == "app":
        return _module_app()
    raise AttributeError(f"module 'workers.app' has no attribute {name!r}")
