"""Celery dispatcher: the same seam as the in-process one, with Redis and a worker fleet in between.

* A stage is published as one signed ``toolfleet.stage`` Celery task per destination queue, carrying
  that queue's calls (a sample's stage goes to the one host holding its sandbox, so usually one task);
  a stage spanning several queues is a Celery ``group`` of those tasks (SPEC §8's "one Celery group",
  with one member per host instead of per call). They stay real Celery tasks — ``celery inspect``
  and Flower see them — and the task id is the first call's id. Publishing runs in one dedicated
  thread (``_publisher``: kombu's producer blocks), so the event loop never waits on the broker.
* Outcomes come back on this dispatcher's own reply channel, subscribed once by the
  ``ResultListener`` (``workers._replies``): a worker publishes each call's signed outcome as soon as it
  completes; it is verified, then resolves the call's future. Nothing is polled, and nothing is
  subscribed, unsubscribed or deleted per call (stored copies expire). The declared-order splice stays
  in the orchestrator. Sandbox opens/closes still use Celery's result store (pubsub on its channels).
* Sandbox affinity: ``open_sandbox`` reserves a slot on a live host (``workers.placement``; a burst of
  opens is mostly served from slots reserved ahead, ``placement_leases``) and sends the open task to
  that host's queue; every call of the sample goes to the same queue.
* Failure bounds, enforced here whatever the worker does: a per-call deadline (the tool's timeout,
  or ``max_call_seconds``, plus ``call_grace``) → ``timeout``; a host whose heartbeat expired (or that
  restarted: new boot id) → its pending calls resolve to ``sandbox_unavailable`` within
  ``heartbeat TTL + lost_grace + watch_interval`` (≈16 s by default); after a Redis restart, stored
  outcomes are re-read, and calls whose task message was lost (no outcome, no claim) are republished
  (as stage messages) — safe, because the worker never runs a call id twice.
* Cancelling a call's future sends the ``toolfleet_cancel`` control command to the host running it,
  which cancels the call there (the sandbox kills its process group).
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import structlog
from pydantic import BaseModel, ConfigDict, Field, SecretStr
from redis.exceptions import RedisError

from orchestrator._wire import CallOutcome, FatalError, SandboxExec, SandboxSpec
from orchestrator.log import InfoEvent, transcript
from orchestrator.tool._registry import GENERATED_TASK_MODULE, not_registered_message
from orchestrator.tool._tool_call import ToolCallError
from orchestrator.util._sandbox import SandboxUnavailableError
from orchestrator.util._timers import call_later
from workers import _auth, _names, placement
from workers._replies import parse_items
from workers.app import AppConfig, create_app

from ._context import current_route
from ._dispatcher import Dispatch, Dispatcher, SampleRoute, attach_setup_execs
from ._fleet_events import parse_event, rejection_line, store_failed_line
from ._preflight import SandboxNeeds, check_fleet
from ._publisher import Publisher, TaskMessage
from ._results import ResultListener

log = structlog.get_logger("toolfleet.dispatch")
SANDBOX_WAIT_SOURCE = "sandbox_wait"  # info events: a sample waits for a sandbox slot / stopped waiting
MAX_SETUP_EXECS = 100  # what a worker's open answer may carry (the worker keeps the same bound)
PLACEMENT_SAMPLES = 100_000  # placement latencies kept (a float each)
DRAINING_RETRIES = 3  # an open refused by a host that began draining since it was chosen: placed again this often


class CeleryDispatcherConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["celery"] = "celery"
    broker_url: str = Field(default_factory=lambda: AppConfig().broker_url)
    max_payload_bytes: int = Field(8 * 1024 * 1024, gt=0, description="cap on a call's JSON request")
    call_grace: float = Field(30.0, ge=0, description="seconds beyond a call's own timeout before the orchestrator gives up")
    max_call_seconds: float = Field(3600.0, gt=0, description="deadline of a call that has no timeout of its own")
    lost_grace: float = Field(5.0, ge=0, description="seconds a host's heartbeat may be missing (e.g. Redis restart) before it is lost")
    watch_interval: float = Field(1.0, gt=0, description="how often pending calls' hosts are checked")
    open_timeout: float = Field(300.0, gt=0, description="bound on creating a sandbox on a worker")
    placement_wait: float = Field(3600.0, ge=0, description="how long open_sandbox waits for a free slot while the "
                                  "fleet is busy (full, or this eval holds its fair share and another eval waits)")
    no_host_wait: float = Field(60.0, ge=0, description="how long open_sandbox waits while no worker host is alive "
                                "(autoscaling from zero); at most placement_wait")
    placement_leases: int = Field(128, ge=0, description="sandbox slots per kind of sandbox (image, pull policy, "
                                  "eval) this orchestrator may reserve ahead and hand out without a Redis round trip "
                                  "(sized by recent demand, given back after 5 s unused); 0: every placement asks Redis")
    send_sent_events: bool = Field(False, description="Celery task-sent events (Flower's SENT state; workers' own task "
                                   "events already show every task): each costs ~12% more publisher CPU per call")
    lease_ttl: float = Field(3.0, gt=0, description="seconds this orchestrator's sandbox lease outlives its last renewal")
    close_timeout: float = Field(60.0, gt=0)
    stage_linger: float = Field(0.002, ge=0, le=0.05, description="while this many calls are in flight already "
                                "(busy_calls), a stage waits up to this many seconds for others to share its "
                                "message; 0: never (an idle orchestrator never waits)")
    busy_calls: int = Field(64, ge=0, description="calls in flight from which stages linger to share messages")
    publish_timeout: float = Field(30.0, gt=0, description="how long publishing retries through a broker outage")
    secret: SecretStr | None = Field(None, description="the fleet secret (comma-separated for rotation); None: "
                                     "TOOLFLEET_SECRET or TOOLFLEET_SECRET_FILE")


@dataclass
class _Pending:
    task_id: str
    future: asyncio.Future[Any]
    kind: Literal["call", "open", "close"]
    function: str
    payload: Any
    queue: str
    host: str | None
    boot: str | None
    timeout: float | None = None
    deadline: asyncio.TimerHandle | None = None
    raw: asyncio.Future[dict[str, Any]] | None = None  # the listener's future for the result meta
    condition: str | None = None  # what the fleet reported about it (e.g. its result could not be stored)
    published: float = field(default_factory=time.monotonic)


def _error_outcome(call_id: str, type_: str, message: str, host: str | None = None) -> CallOutcome:
    now = time.time()
    return CallOutcome(call_id=call_id, error=ToolCallError(type=type_, message=message), started=now, completed=now, host=host)  # type: ignore[arg-type]


def _stage_messages(records: list[_Pending], reply: str) -> list[TaskMessage]:
    """One ``toolfleet.stage`` message per destination queue (a sample's stage goes to its one host),
    carrying that queue's calls (at most ``MAX_STAGE_CALLS`` a message). Its task id is its first
    call's id: what a worker's rejection event names, and what Flower shows for a one-call stage."""
    by_queue: dict[str, list[_Pending]] = {}
    for rec in records:
        by_queue.setdefault(rec.queue, []).append(rec)
    messages = []
    for queue, recs in by_queue.items():
        for start in range(0, len(recs), _names.MAX_STAGE_CALLS):
            chunk = recs[start:start + _names.MAX_STAGE_CALLS]
            messages.append(TaskMessage(chunk[0].task_id, _names.TASK_STAGE, [reply, [r.payload for r in chunk]], queue,
                                        _argsrepr(chunk)))
    return messages


def _argsrepr(records: list[_Pending]) -> str:
    """What Flower and ``celery inspect`` show as the task's args: which calls of which samples. Given
    explicitly, because Celery's default (``saferepr`` of the whole payload) is a large share of the
    publisher's CPU per call."""
    return json.dumps([{"function": rec.function, "call_id": rec.task_id,
                        "sample_id": rec.payload.get("sample_id") if isinstance(rec.payload, dict) else None,
                        "sandbox": rec.payload.get("sandbox") if isinstance(rec.payload, dict) else None}
                       for rec in records])


def _shown(seconds: float) -> str:
    return str(int(seconds)) if float(seconds).is_integer() else f"{seconds:g}"


def _named_task_file(outcome: CallOutcome, payload: Any) -> CallOutcome:
    """A worker lacking a task file's tool knows only the file's generated module name; this process
    imported the file, so the error names the file the user knows (and the --import that fixes it)."""
    fatal = outcome.fatal
    tool = payload.get("tool") if isinstance(payload, dict) else None
    if fatal is None or fatal.type != "ToolNotRegisteredError" or not isinstance(tool, dict):
        return outcome
    module = tool.get("module")
    if isinstance(module, str) and module.startswith(GENERATED_TASK_MODULE):
        fatal.message = not_registered_message(str(tool.get("name")), module)
    return outcome


def _setup_execs(answer: Any) -> tuple[list[SandboxExec], int]:
    """The files/setup execs a worker's open answer carries (malformed ones are dropped, not fatal)."""
    if not isinstance(answer, dict) or not isinstance(answer.get("sandbox_execs"), list):
        return [], 0
    execs: list[SandboxExec] = []
    for item in answer["sandbox_execs"][:MAX_SETUP_EXECS]:
        try:
            execs.append(SandboxExec.model_validate(item))
        except ValueError:
            continue
    dropped = answer.get("sandbox_execs_dropped")
    return execs, dropped if isinstance(dropped, int) and dropped >= 0 else 0


class CeleryDispatcher(Dispatcher):
    name = "celery"

    def __init__(self, broker_url: str | None = None, config: CeleryDispatcherConfig | None = None) -> None:
        self.config = config or CeleryDispatcherConfig(**({"broker_url": broker_url} if broker_url else {}))
        # Workers accept only task messages signed with the fleet secret: without it nothing could run.
        self._keyring = _auth.load_keyring(self.config.secret.get_secret_value() if self.config.secret else None)
        self.app = create_app(AppConfig(broker_url=self.config.broker_url, max_payload_bytes=self.config.max_payload_bytes),
                              keyring=self._keyring)
        self.app.conf.task_send_sent_event = self.config.send_sent_events
        self.client_id = uuid.uuid4().hex  # owner of the sandboxes this dispatcher opens (lease); names its reply channel
        self._reply = _names.reply_channel(self.client_id)
        self._listener = ResultListener(self.config.broker_url, on_reconnect=self._after_reconnect, keyring=self._keyring,
                                        on_event=self._on_fleet_event, reply_channel=self._reply, on_reply=self._on_reply)
        self.unauthenticated = 0  # replies dropped because their MAC did not verify
        self._publisher = Publisher(self.app, self.config.publish_timeout)
        self._pending: dict[str, _Pending] = {}
        self._sandboxes: dict[str, tuple[str, str]] = {}  # sandbox handle -> (host, boot at open)
        self._lost: dict[str, set[str]] = {}  # host -> boot ids (process incarnations) known to be lost
        self._missing_since: dict[str, float] = {}
        self._cancels: list[tuple[str, str | None]] = []
        self._outbox: list[_Pending] = []  # calls dispatched and not yet handed to the publisher
        self._sender: asyncio.Task[None] | None = None
        # (messages, calls) per publish of calls: how well stages coalesce (``bench fanout``).
        self.published: deque[tuple[int, int]] = deque(maxlen=PLACEMENT_SAMPLES)
        self._start_lock: asyncio.Lock | None = None
        self._watchdog: asyncio.Task[None] | None = None
        self._closed = False
        # Seconds each of the latest sandbox placements took (asking for a slot until holding one —
        # Redis's answer read —, waiting for capacity included), and until the opening coroutine ran
        # again (the loop's lag added): what `toolfleet bench scale` reports.
        self.placement_seconds: deque[float] = deque(maxlen=PLACEMENT_SAMPLES)
        self.placement_resumed_seconds: deque[float] = deque(maxlen=PLACEMENT_SAMPLES)
        self._lease_set = -1e9  # monotonic time of the last lease SET
        self._lease_setting: asyncio.Future[None] | None = None  # the SET in flight, awaited by every open meanwhile
        self._sandbox_evals: dict[str, tuple[str, int]] = {}  # sandbox handle -> (eval id, slots) for fair share
        self._waiters: dict[str, int] = {}  # eval id -> this dispatcher's placements waiting for a slot
        # Live hosts cached briefly; slots taken by one script, and reserved ahead (leases) for a burst.
        self.placer = placement.Placer(self._listener.redis, leases=self.config.placement_leases)

    # --- lifecycle -----------------------------------------------------------------------------

    async def start(self) -> None:
        if self._watchdog is not None:
            return
        if self._start_lock is None:
            self._start_lock = asyncio.Lock()
        async with self._start_lock:
            if self._watchdog is None:
                await self._listener.start()
                try:  # the fleet's hosts read once now, so the first burst of placements need not wait for it
                    await self.placer.hosts()
                except (RedisError, OSError) as exc:
                    log.debug("dispatch.hosts_read_failed", error=str(exc))  # placement reads it again
                self._watchdog = asyncio.ensure_future(self._watch())

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._watchdog is not None:
            self._watchdog.cancel()
            await asyncio.gather(self._watchdog, return_exceptions=True)
        for rec in [*self._pending.values(), *self._outbox]:
            if not rec.future.done():
                rec.future.cancel()
        self._outbox.clear()
        await self._flush_cancels()
        await self.placer.aclose()
        await self._listener.aclose()
        await self._publisher.aclose()

    # --- calls ---------------------------------------------------------------------------------

    def dispatch(self, stage: Sequence[Dispatch]) -> list["asyncio.Future[CallOutcome]"]:
        loop = asyncio.get_running_loop()
        route = current_route()
        records: list[_Pending] = []
        for item in stage:
            request = item.request
            host, boot = self._sandboxes.get(request.sandbox or "", (None, None))
            queue = route.queue if (route.queue and route.sandbox == request.sandbox) else None
            if queue is None and host is not None:
                queue = _names.host_queue(host)
            if host is None:
                host = _names.host_of_queue(queue)
            records.append(_Pending(
                task_id=request.call_id, future=loop.create_future(), kind="call", function=request.function,
                payload=request.model_dump(mode="json"), queue=queue or _names.SHARED_QUEUE,
                host=host, boot=boot, timeout=request.timeout,
            ))
        # Every stage dispatched this loop tick (any sample) — and while a publish is in flight —
        # goes out together: one message per destination queue carries them all, so the per-message
        # costs (publish, the worker's consume, ack and hand-off) are paid per batch, not per stage.
        self._outbox.extend(records)
        if self._sender is None or self._sender.done():
            self._sender = asyncio.ensure_future(self._drain_outbox())
        return [rec.future for rec in records]

    async def _drain_outbox(self) -> None:
        if self.config.stage_linger and len(self._pending) >= self.config.busy_calls:
            await asyncio.sleep(self.config.stage_linger)  # busy: many stages complete within a few ms
        while self._outbox:
            records, self._outbox = self._outbox, []
            await self._send(records)

    async def _send(self, records: list[_Pending]) -> None:
        sendable: list[_Pending] = []
        for rec in records:
            if rec.future.done():
                continue  # cancelled before it was sent: nothing to publish, nothing to stop
            rec.future.add_done_callback(lambda f, rec=rec: self._on_done(rec, f))
            if self.fleet_error is not None:
                self._fail_misconfigured(rec)
                continue
            size = len(json.dumps(rec.payload, separators=(",", ":")))
            if size > self.config.max_payload_bytes:
                rec.future.set_result(_error_outcome(rec.task_id, "limit",
                    f"The tool call's arguments exceeded the payload limit of {self.config.max_payload_bytes} bytes."))
            elif rec.host is not None and self._is_lost(rec.host, rec.boot):
                rec.future.set_result(self._lost_outcome(rec))
            else:
                sendable.append(rec)
        if not sendable:
            return
        try:
            await self.start()
            await self._track(sendable)
            messages = _stage_messages(sendable, self._reply)
            await self._publisher.stage(messages)
            self.published.append((len(messages), len(sendable)))
        except Exception as exc:  # noqa: BLE001 - the broker is unreachable: the calls fail clearly
            log.error("dispatch.publish_failed", error=str(exc), calls=len(sendable))
            for rec in sendable:
                self._resolve(rec, _error_outcome(rec.task_id, "sandbox_unavailable",
                    f"The call could not be sent to the worker fleet (broker unreachable: {exc})."))

    async def _track(self, records: list[_Pending]) -> None:
        """Deadlines for every record; sandbox opens/closes also wait for their Celery result (calls are
        answered on this dispatcher's reply channel, subscribed once)."""
        for rec in records:
            self._pending[rec.task_id] = rec
            bound = (rec.timeout or self.config.max_call_seconds) + self.config.call_grace
            if rec.kind == "open":
                bound = self.config.open_timeout
            elif rec.kind == "close":
                bound = self.config.close_timeout
            rec.deadline = call_later(bound, self._expire, rec.task_id, bound)  # holds no sample once cancelled
        lifecycle = [rec for rec in records if rec.kind != "call"]
        if lifecycle:
            raws = await self._listener.expect([rec.task_id for rec in lifecycle])
            for rec, raw in zip(lifecycle, raws):
                rec.raw = raw
                raw.add_done_callback(lambda r, rec=rec: self._on_meta(rec, r))

    # --- resolution ----------------------------------------------------------------------------

    def _on_meta(self, rec: _Pending, raw: asyncio.Future[dict[str, Any]]) -> None:
        if not raw.cancelled() and not rec.future.done():
            self._resolve(rec, raw.result())

    def _on_reply(self, data: bytes) -> None:
        """Outcomes a worker published on this dispatcher's reply channel (untrusted until verified)."""
        for call_id, mac, text in parse_items(data):
            self._answer(call_id, mac, text)

    def _answer(self, call_id: str, mac: str, text: str) -> bool:
        rec = self._pending.get(call_id)
        if rec is None or rec.kind != "call" or rec.future.done():
            return False  # not ours, already answered (a redelivered copy's replay), or given up on
        if not _auth.verify_outcome(self._keyring, mac, call_id, text):
            self.unauthenticated += 1
            log.warning("dispatch.result_unauthenticated", task_id=call_id[:64], seen=self.unauthenticated)
            return False  # keep waiting: the worker's own (signed) answer may still come
        try:
            outcome = CallOutcome.model_validate_json(text)
        except ValueError as exc:
            outcome = CallOutcome(call_id=call_id, fatal=FatalError(
                type="InvalidCallOutcome", message=f"The worker answered with a malformed outcome: {exc}"))
        self._resolve(rec, _named_task_file(outcome, rec.payload))
        return True

    async def _recheck_outcomes(self, records: list[_Pending]) -> None:
        """Resolve calls whose outcome was stored while this dispatcher was not listening."""
        values = await self._listener.stored_outcomes([r.task_id for r in records])
        for rec, value in zip(records, values):
            for call_id, mac, text in parse_items(value) if value is not None else []:
                if call_id == rec.task_id:
                    self._answer(call_id, mac, text)

    def _resolve(self, rec: _Pending, value: Any) -> None:
        if not rec.future.done():
            rec.future.set_result(value)

    def _on_done(self, rec: _Pending, fut: asyncio.Future[Any]) -> None:
        self._pending.pop(rec.task_id, None)
        if rec.deadline is not None:
            rec.deadline.cancel()
        if rec.raw is not None:
            self._listener.forget(rec.task_id, rec.raw)
        if fut.cancelled() and rec.kind == "call":
            self._request_cancel(rec)

    def _expire(self, task_id: str, bound: float) -> None:
        rec = self._pending.get(task_id)
        if rec is None or rec.future.done():
            return
        # What the fleet said about this task meanwhile (e.g. Redis refused to store its result), if anything.
        why = f": {rec.condition}" if rec.condition else " (no answer from the worker fleet)"
        if rec.kind == "call":
            self._request_cancel(rec)
            self._resolve(rec, _error_outcome(rec.task_id, "timeout",
                f"Tool '{rec.function}' timed out after {_shown(bound)} seconds{why}.", rec.host))
        else:
            rec.future.set_exception(TimeoutError(f"{rec.function} got no answer within {_shown(bound)} s{why}."))

    def _on_fleet_event(self, data: bytes) -> None:
        """A worker's event (``_fleet_events``): only one about a task this dispatcher waits for counts."""
        event = parse_event(data)
        rec = self._pending.get(event.task_id) if event is not None else None
        if event is None or rec is None or rec.future.done():
            return
        if event.kind == "store_failed":
            rec.condition = store_failed_line(event)
            log.warning("dispatch.result_not_stored", host=event.host, task_id=event.task_id, error=event.error)
        elif event.kind == "rejected" and self.fleet_error is None:
            self.fleet_error = rejection_line(event)
            log.info("dispatch.fleet_rejects_messages", host=event.host, reason=event.reason)  # the eval says it
            for pending in list(self._pending.values()):
                self._fail_misconfigured(pending)

    def _fail_misconfigured(self, rec: _Pending) -> None:
        if rec.future.done():
            return
        if rec.kind == "call":
            self._resolve(rec, CallOutcome(call_id=rec.task_id, fatal=FatalError(type="FleetMisconfigured",
                                                                                  message=str(self.fleet_error))))
        else:
            rec.future.set_exception(SandboxUnavailableError(str(self.fleet_error)))

    def _lost_outcome(self, rec: _Pending) -> CallOutcome:
        return _error_outcome(rec.task_id, "sandbox_unavailable",
            f"The worker host '{rec.host}' that holds this sample's sandbox was lost (its heartbeat stopped or it "
            "restarted); the sandbox and this call's result are gone.", rec.host)

    # --- cancellation --------------------------------------------------------------------------

    def _request_cancel(self, rec: _Pending) -> None:
        self._cancels.append((rec.task_id, rec.host))
        if len(self._cancels) == 1 and not self._closed:
            asyncio.get_running_loop().call_soon(lambda: asyncio.ensure_future(self._flush_cancels()))

    async def _flush_cancels(self) -> None:
        cancels, self._cancels = self._cancels, []
        if not cancels:
            return
        by_host: dict[str | None, list[str]] = {}
        for task_id, host in cancels:
            by_host.setdefault(host, []).append(task_id)
        try:
            for host, ids in by_host.items():
                destination = [_names.worker_nodename(host)] if host else None
                await self._publisher.broadcast(_names.CONTROL_CANCEL, {"call_ids": ids, "mac": _auth.cancel_mac(self._keyring, ids)},
                                                destination)
        except Exception as exc:  # noqa: BLE001 - best effort: the worker's own deadline still applies
            log.warning("dispatch.cancel_failed", error=str(exc))

    # --- sandboxes -----------------------------------------------------------------------------

    async def open_sandbox(self, spec: SandboxSpec) -> SampleRoute:
        await self.start()
        redis = self._listener.redis
        weight = placement.slot_weight(spec.config)  # one slot per container of the sandbox
        only = ((spec.config or {}).get("snapshot") or {}).get("host")  # a fork goes where its snapshot is
        for attempt in range(DRAINING_RETRIES + 1):
            try:
                host = await self._place(redis, _images(spec.config), (spec.config or {}).get("pull_policy", "missing"),
                                         weight, spec.eval_id, spec.sample_id, only)
            except (RedisError, OSError) as exc:
                raise SandboxUnavailableError(f"Sandbox placement failed: the broker is unreachable ({exc}).") from exc
            try:
                await self._hold_lease()
                meta = await self._lifecycle_task("open", _names.TASK_OPEN_SANDBOX,
                                                  [spec.model_dump(mode="json"), self.client_id], host.queue, host.host, host.boot)
            except BaseException:
                await self._release(host.host, weight, spec.eval_id)
                raise
            answer = meta.get("result") if meta.get("status") == "SUCCESS" else None
            if only is None and attempt < DRAINING_RETRIES and _refused_draining(answer):
                # The host began draining after placement last saw it (a cached host list, a leased
                # slot): give the slot back, let placement know, and place the sandbox again.
                await self._release(host.host, weight, spec.eval_id)
                self.placer.host_draining(host.host)
                continue
            break
        execs, dropped = _setup_execs(answer)
        if not isinstance(answer, dict) or "handle" not in answer:
            await self._release(host.host, weight, spec.eval_id)
            reason = answer.get("error", {}).get("message") if isinstance(answer, dict) else meta.get("result")
            error = SandboxUnavailableError(f"Could not create a sandbox on worker host '{host.host}': {reason}")
            attach_setup_execs(error, execs, dropped, host.host)
            raise error
        handle = str(answer["handle"])
        self._sandboxes[handle] = (host.host, host.boot)
        if spec.eval_id:
            self._sandbox_evals[handle] = (spec.eval_id, weight)
        log.debug("dispatch.sandbox_opened", host=host.host, sandbox=handle, sample=spec.sample_id)
        return SampleRoute(sample_id=spec.sample_id, sandbox=handle, queue=host.queue, host=host.host,
                           setup_execs=tuple(execs), setup_execs_dropped=dropped)

    async def _place(self, redis: Any, image: list[str] | None = None, pull_policy: str = "missing",
                     weight: int = 1, eval_id: str | None = None, sample_id: str | None = None, only: str | None = None) -> Any:
        """Reserve a slot; while the fleet is busy (full, or this eval holds its fair share while another
        eval waits), wait — bounded by ``placement_wait``, or ``no_host_wait`` while no host is alive —
        and say so: in Redis (the ``toolfleet.sandbox.demand`` list the autoscaler watches), in the
        sample's transcript (``sandbox_wait`` info events, counted by the live display) and in the log.
        ``only``: the one host that may take it (a fork, on the host holding its snapshot)."""
        loop = asyncio.get_running_loop()
        asked = loop.time()
        token: str | None = None
        try:
            while True:
                try:
                    host, held = await self.placer.reserve_timed(image, pull_policy, weight, eval_id, only)  # have the image, else can pull it
                    self.placement_seconds.append(held - asked)
                    self.placement_resumed_seconds.append(loop.time() - asked)
                    if token is not None:
                        self._waited(eval_id, sample_id, loop.time() - asked, placed=True)
                    return host
                except placement.NoCapacityError as exc:
                    bound = self.config.placement_wait
                    if isinstance(exc, placement.NoLiveHostError):
                        bound = min(bound, self.config.no_host_wait)
                    if loop.time() - asked >= bound or isinstance(exc, placement.SandboxTooLargeError):
                        if token is not None:
                            self._waited(eval_id, sample_id, loop.time() - asked, placed=False)
                        raise SandboxUnavailableError(str(exc)) from exc
                    if token is None:
                        token = uuid.uuid4().hex
                        self._waiting(eval_id, sample_id, str(exc))
                        async with redis.pipeline(transaction=False) as pipe:
                            pipe.rpush(_names.SANDBOX_DEMAND, token)
                            pipe.expire(_names.SANDBOX_DEMAND, 600)  # a crashed orchestrator's demand fades
                            await pipe.execute()
                    await asyncio.sleep(min(1.0, max(0.0, asked + bound - loop.time())))
        finally:
            if token is not None:
                try:
                    await redis.lrem(_names.SANDBOX_DEMAND, 0, token)
                    if eval_id and not self._waiters.get(eval_id):
                        await placement.stop_waiting(redis, eval_id)
                except (RedisError, OSError):
                    pass

    async def remove_snapshots(self, eval_id: str) -> list[str]:
        """Every live host removes the eval's snapshots it holds (tools on a worker may have taken some)."""
        await self.start()
        hosts = await placement.live_hosts(self._listener.redis)
        from ._snapshots import remove_snapshots_on  # deferred: it loads the worker-side snapshot tools

        return await remove_snapshots_on(self, eval_id, [h.queue for h in hosts])

    def _waiting(self, eval_id: str | None, sample_id: str | None, reason: str) -> None:
        self._waiters[eval_id or ""] = self._waiters.get(eval_id or "", 0) + 1
        log.info("dispatch.sandbox_waiting", eval=eval_id, sample=sample_id, reason=reason)
        transcript().record(InfoEvent(source=SANDBOX_WAIT_SOURCE, data={"waiting": True, "reason": reason}))

    def _waited(self, eval_id: str | None, sample_id: str | None, seconds: float, placed: bool) -> None:
        key = eval_id or ""
        self._waiters[key] = self._waiters.get(key, 1) - 1
        if self._waiters[key] <= 0:
            del self._waiters[key]
        log.info("dispatch.sandbox_waited", eval=eval_id, sample=sample_id, waited_s=round(seconds, 1), placed=placed)
        transcript().record(InfoEvent(source=SANDBOX_WAIT_SOURCE, data={
            "waiting": False, "waited_s": round(seconds, 3), "placed": placed}))

    async def _hold_lease(self) -> None:
        """The lease must be alive before a worker sees the open; one SET covers every open of the next
        third of its TTL, and the opens asking while it is in flight wait for that one (a burst of
        opens would otherwise send one each)."""
        now = time.monotonic()
        if now - self._lease_set < self.config.lease_ttl / 3:
            return
        if self._lease_setting is None or self._lease_setting.done():
            self._lease_setting = asyncio.ensure_future(self._set_lease(now))
        await asyncio.shield(self._lease_setting)  # one caller cancelled must not cancel the others' SET

    async def _set_lease(self, now: float) -> None:
        await self._listener.redis.set(_names.lease_key(self.client_id), 1, ex=max(1, int(self.config.lease_ttl)))
        self._lease_set = now

    async def preflight(self, needs: SandboxNeeds) -> None:
        await check_fleet(self.config.broker_url, needs.images, needs.kinds, needs.pullable, needs.pods, needs.tools,
                          root=needs.root)

    async def close_sandbox(self, route: SampleRoute) -> None:
        if route.sandbox is None:
            return
        host, boot = self._sandboxes.pop(route.sandbox, (_names.host_of_queue(route.queue), None))
        held = self._sandbox_evals.pop(route.sandbox, None)
        if held is not None:  # the eval's fair-share count, whatever becomes of the sandbox itself
            try:
                await placement.release_eval(self._listener.redis, *held)
            except (RedisError, OSError) as exc:
                log.debug("dispatch.eval_release_failed", error=str(exc))
        if host is None or self._is_lost(host, boot) or self._closed:
            return  # nothing left to close: the host (and the sandbox) is gone
        try:
            await self._lifecycle_task("close", _names.TASK_CLOSE_SANDBOX, [route.sandbox], _names.host_queue(host), host, boot)
        except (SandboxUnavailableError, TimeoutError, asyncio.CancelledError) as exc:
            if isinstance(exc, asyncio.CancelledError):
                raise
            log.warning("dispatch.close_failed", sandbox=route.sandbox, host=host, error=str(exc))

    async def _lifecycle_task(self, kind: Literal["open", "close"], name: str, arg: Any, queue: str,
                              host: str, boot: str | None) -> dict[str, Any]:
        await self.start()  # a resumed eval may close a dead run's sandboxes before anything else
        loop = asyncio.get_running_loop()
        rec = _Pending(task_id=uuid.uuid4().hex, future=loop.create_future(), kind=kind, function=f"{kind}_sandbox",
                       payload=arg, queue=queue, host=host, boot=boot)
        rec.future.add_done_callback(lambda f: self._on_done(rec, f))
        if self.fleet_error is not None:
            raise SandboxUnavailableError(self.fleet_error)
        await self._track([rec])
        try:
            await self._publisher.stage([TaskMessage(rec.task_id, name, arg, queue)])
        except Exception as exc:  # noqa: BLE001
            rec.future.cancel()
            raise SandboxUnavailableError(f"Could not reach the worker fleet to {kind} a sandbox: {exc}") from exc
        return await rec.future

    async def _release(self, host: str, weight: int = 1, eval_id: str | None = None) -> None:
        try:
            if eval_id:
                await placement.release_eval(self._listener.redis, eval_id, weight)
            await placement.release(self._listener.redis, host, weight)
        except (RedisError, OSError):
            pass  # the host resets its counter at restart

    # --- host liveness and Redis restarts ------------------------------------------------------

    def _is_lost(self, host: str, boot: str | None) -> bool:
        """Whether what ``host`` held under ``boot`` is known to be gone (a host that comes back, or
        restarts under the same name, serves new sandboxes: only the lost incarnations are gone)."""
        return boot is not None and boot in self._lost.get(host, ())

    async def _watch(self) -> None:
        while True:
            await self._renew_lease()
            await asyncio.sleep(self.config.watch_interval)
            hosts = {rec.host for rec in self._pending.values() if rec.host is not None}
            if not hosts:
                continue
            try:
                await self._check_hosts(sorted(hosts))
            except (RedisError, OSError) as exc:
                log.debug("dispatch.watch_skipped", error=str(exc))  # Redis down: judge nobody meanwhile

    async def _renew_lease(self) -> None:
        """Workers close the sandboxes of an orchestrator whose lease lapsed (it crashed)."""
        if not self._sandboxes:
            return
        try:
            await self._listener.redis.set(_names.lease_key(self.client_id), 1, ex=max(1, int(self.config.lease_ttl)))
            self._lease_set = time.monotonic()
            await placement.keep_evals_alive(self._listener.redis, sorted({e for e, _ in self._sandbox_evals.values()}))
        except (RedisError, OSError) as exc:
            log.debug("dispatch.lease_failed", error=str(exc))

    async def _check_hosts(self, hosts: list[str]) -> None:
        redis = self._listener.redis
        async with redis.pipeline(transaction=False) as pipe:
            for host in hosts:
                pipe.hget(_names.heartbeat_key(host), "boot")
            boots = await pipe.execute()
        now = time.monotonic()
        for host, raw in zip(hosts, boots):
            boot = raw.decode() if isinstance(raw, bytes) else raw
            if boot is None:
                since = self._missing_since.setdefault(host, now)
                if now - since >= self.config.lost_grace:
                    self._host_lost(host, None)
                continue
            self._missing_since.pop(host, None)
            for rec in [r for r in self._pending.values() if r.host == host and r.boot is not None and r.boot != boot]:
                self._host_lost(host, rec.boot)  # the host restarted: what the old process held is gone

    def _host_lost(self, host: str, boot: str | None) -> None:
        """``boot=None``: the host's heartbeat is gone, so every incarnation we know of is lost."""
        known = {b for h, b in self._sandboxes.values() if h == host} | {
            r.boot for r in self._pending.values() if r.host == host and r.boot is not None}
        self._lost.setdefault(host, set()).update(known if boot is None else {boot})
        victims = [r for r in self._pending.values() if r.host == host and (boot is None or r.boot == boot)]
        if victims:
            log.warning("dispatch.host_lost", host=host, pending=len(victims))
        for rec in victims:
            if rec.kind == "call":
                self._resolve(rec, self._lost_outcome(rec))
            elif not rec.future.done():
                rec.future.set_exception(SandboxUnavailableError(f"Worker host '{host}' was lost during {rec.function}."))

    async def _after_reconnect(self) -> None:
        """Redis came back: give workers time to re-assert their claims, then republish lost calls."""
        self._publisher.broker_restarted()
        try:  # answers published while the listener was away are stored: resolve those at once
            await self._recheck_outcomes([r for r in self._pending.values() if r.kind == "call" and not r.future.done()])
        except (RedisError, OSError) as exc:
            log.debug("dispatch.recheck_failed", error=str(exc))
        await asyncio.sleep(self.config.lost_grace)
        pending = [r for r in self._pending.values() if r.kind == "call" and not r.future.done()]
        if not pending:
            return
        try:
            await self._recheck_outcomes(pending)
            pending = [r for r in pending if not r.future.done()]
            claims = await self._listener.redis.mget([_names.call_key(r.task_id) for r in pending]) if pending else []
        except (RedisError, OSError) as exc:
            log.warning("dispatch.recheck_failed", error=str(exc))
            return
        lost = [r for r, claim in zip(pending, claims) if claim is None]
        if lost:
            log.warning("dispatch.republish", calls=len(lost))
            try:
                await self._publisher.stage(_stage_messages(lost, self._reply))
            except Exception as exc:  # noqa: BLE001
                for rec in lost:
                    self._resolve(rec, _error_outcome(rec.task_id, "sandbox_unavailable",
                        f"The call was lost when the broker restarted and could not be sent again ({exc})."))


def _refused_draining(answer: Any) -> bool:
    """Whether a worker's open answer is its refusal as a draining host (``workers.tasks.run_open``)."""
    return isinstance(answer, dict) and isinstance(answer.get("error"), dict) and answer["error"].get("type") == "draining"


def _images(config: dict[str, Any] | None) -> list[str] | None:
    """The images a sandbox needs on its host (a multi-service sandbox's services' too)."""
    if not config or not config.get("image"):
        return None
    return list(dict.fromkeys([config["image"], *(s.get("image") for s in (config.get("services") or {}).values())]))
