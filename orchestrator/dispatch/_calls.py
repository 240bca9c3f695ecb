"""The Celery dispatcher's pending work: every call (and sandbox open/close task) sent and not yet answered.

``PendingCalls`` owns the records, from dispatch to resolution: the outbox a loop tick's stages are
published from together, each record's deadline, the answers on this dispatcher's reply channel
(verified before they are believed), what the fleet's events say about them, cancellation on the
worker, and republishing what a broker restart lost. It knows nothing of placement or heartbeats: it
is told whether a host incarnation is lost (``is_lost``) and which calls a lost host takes with it
(``host_lost``).
"""

from __future__ import annotations

import asyncio
import functools
import json
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import structlog
from redis.exceptions import RedisError

from orchestrator._wire import CallOutcome, FatalError
from orchestrator.tool._registry import GENERATED_TASK_MODULE, not_registered_message
from orchestrator.tool._tool_call import ToolCallError
from orchestrator.util._sandbox import SandboxUnavailableError
from orchestrator.util._timers import call_later
from workers.fleet import DEFAULT_REPLAY_WINDOW, Keyring, cancel_mac, names, parse_items, verify_outcome

from ._context import current_route
from ._dispatcher import Dispatch
from ._fleet_events import FleetEvent, expired_in_queue, parse_event, rejection_line, store_failed_line
from ._publisher import Publisher, TaskMessage
from ._results import ResultListener

if TYPE_CHECKING:
    from .celery import CeleryDispatcherConfig

__all__ = ["PUBLISH_SAMPLES", "Pending", "PendingCalls"]

log = structlog.get_logger("toolfleet.dispatch")
PUBLISH_SAMPLES = 100_000  # (messages, calls) per publish kept (two ints each)
ADVISED_KEPT = 1000  # distinct unsigned fleet events logged, at most (a forged flood stays bounded)


@dataclass
class Pending:
    task_id: str
    future: asyncio.Future[Any]
    kind: Literal["call", "open", "close", "network"]
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
    message: str = ""  # the id of the stage message that carries it (a worker's rejection names that)


def _error_outcome(call_id: str, type_: str, message: str, host: str | None = None) -> CallOutcome:
    now = time.time()
    return CallOutcome(call_id=call_id, error=ToolCallError(type=type_, message=message), started=now, completed=now,
                       host=host)


def _stage_messages(records: list[Pending], reply: str) -> list[TaskMessage]:
    """One ``toolfleet.stage`` message per destination queue (a sample's stage goes to its one host),
    carrying that queue's calls (at most ``MAX_STAGE_CALLS`` a message). Its task id is its first
    call's id: what a worker's rejection event names, and what Flower shows for a one-call stage."""
    by_queue: dict[str, list[Pending]] = {}
    for rec in records:
        by_queue.setdefault(rec.queue, []).append(rec)
    messages = []
    for queue, recs in by_queue.items():
        for start in range(0, len(recs), names.MAX_STAGE_CALLS):
            chunk = recs[start:start + names.MAX_STAGE_CALLS]
            for rec in chunk:
                rec.message = chunk[0].task_id
            messages.append(TaskMessage(chunk[0].task_id, names.TASK_STAGE, [reply, [r.payload for r in chunk]], queue,
                                        _argsrepr(chunk)))
    return messages


def _argsrepr(records: list[Pending]) -> str:
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


class PendingCalls:
    """Calls and sandbox lifecycle tasks in flight from one dispatcher, until each is answered, times
    out, is cancelled or is lost with its host.

    ``start``: the dispatcher's own start (listener connected) before anything is published;
    ``is_lost(host, boot)``: whether that host incarnation is known to be gone."""

    def __init__(self, config: CeleryDispatcherConfig, keyring: Keyring, listener: ResultListener,
                 publisher: Publisher, reply: str, start: Callable[[], Awaitable[None]],
                 is_lost: Callable[[str, str | None], bool]) -> None:
        self.config = config
        self._keyring = keyring
        self._listener = listener
        self._publisher = publisher
        self._reply = reply
        self._start = start
        self._is_lost = is_lost
        self.pending: dict[str, Pending] = {}
        self.unauthenticated = 0  # replies dropped because their MAC did not verify
        self.fleet_error: str | None = None  # set when the fleet rejects this dispatcher's messages
        self._cancels: list[tuple[str, str | None]] = []
        self._outbox: list[Pending] = []  # calls dispatched and not yet handed to the publisher
        self._sender: asyncio.Task[None] | None = None
        # (messages, calls) per publish of calls: how well stages coalesce (``bench fanout``).
        self.published: deque[tuple[int, int]] = deque(maxlen=PUBLISH_SAMPLES)
        self._closed = False
        self._tasks: set[asyncio.Task[None]] = set()  # re-sends in flight (held: the loop keeps only weak refs)
        self.requeued = 0  # calls sent again because they aged out in the queue
        self._advised: set[tuple[str, str, str]] = set()  # unsigned events logged (once each, bounded)

    def stop(self) -> None:
        """The dispatcher is closing: cancellations are no longer sent on their own."""
        self._closed = True

    def _background(self, work: Awaitable[None]) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def aclose(self) -> None:
        """Cancel everything still pending or unsent, then send the cancellations asked so far."""
        for task in list(self._tasks):
            task.cancel()
        for rec in [*self.pending.values(), *self._outbox]:
            if not rec.future.done():
                rec.future.cancel()
        self._outbox.clear()
        await self._flush_cancels()

    # --- calls ---------------------------------------------------------------------------------

    def dispatch(self, stage: Sequence[Dispatch],
                 where: Callable[[str], tuple[str | None, str | None]]) -> list[asyncio.Future[CallOutcome]]:
        """``where(sandbox handle)``: the (host, boot) holding that sandbox, (None, None) if unknown."""
        loop = asyncio.get_running_loop()
        route = current_route()
        records: list[Pending] = []
        for item in stage:
            request = item.request
            host, boot = where(request.sandbox or "")
            queue = route.queue if (route.queue and route.sandbox == request.sandbox) else None
            if queue is None and host is not None:
                queue = names.host_queue(host)
            if host is None:
                host = names.host_of_queue(queue)
            records.append(Pending(
                task_id=request.call_id, future=loop.create_future(), kind="call", function=request.function,
                payload=request.model_dump(mode="json"), queue=queue or names.SHARED_QUEUE,
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
        if self.config.stage_linger and len(self.pending) >= self.config.busy_calls:
            await asyncio.sleep(self.config.stage_linger)  # busy: many stages complete within a few ms
        while self._outbox:
            records, self._outbox = self._outbox, []
            await self._send(records)

    async def _send(self, records: list[Pending]) -> None:
        sendable: list[Pending] = []
        for rec in records:
            if rec.future.done():
                continue  # cancelled before it was sent: nothing to publish, nothing to stop
            rec.future.add_done_callback(functools.partial(self._on_done, rec))
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
            await self._start()
            await self._track(sendable)
            messages = _stage_messages(sendable, self._reply)
            # Counted when handed over, not after: the answers can arrive before this coroutine resumes
            # from the publisher thread, and whoever reads the counts after them must see this publish.
            self.published.append((len(messages), len(sendable)))
            await self._publisher.stage(messages)
        except Exception as exc:  # noqa: BLE001 - the broker is unreachable: the calls fail clearly
            log.error("dispatch.publish_failed", error=str(exc), calls=len(sendable))
            for rec in sendable:
                self._resolve(rec, _error_outcome(rec.task_id, "sandbox_unavailable",
                    f"The call could not be sent to the worker fleet (broker unreachable: {exc})."))

    async def _track(self, records: list[Pending]) -> None:
        """Deadlines for every record; sandbox opens/closes also wait for their Celery result (calls are
        answered on this dispatcher's reply channel, subscribed once)."""
        for rec in records:
            self.pending[rec.task_id] = rec
            bound = (rec.timeout or self.config.max_call_seconds) + self.config.call_grace
            if rec.kind == "open":
                bound = self.config.open_timeout
            elif rec.kind in ("close", "network"):
                bound = self.config.close_timeout
            rec.deadline = call_later(bound, self._expire, rec.task_id, bound)  # holds no sample once cancelled
        lifecycle = [rec for rec in records if rec.kind != "call"]
        if lifecycle:
            raws = await self._listener.expect([rec.task_id for rec in lifecycle])
            for rec, raw in zip(lifecycle, raws, strict=True):
                rec.raw = raw
                raw.add_done_callback(functools.partial(self._on_meta, rec))

    async def lifecycle(self, kind: Literal["open", "close", "network"], name: str, arg: Any, queue: str,
                        host: str, boot: str | None) -> dict[str, Any]:
        """Send a sandbox open/close/network task to ``queue`` and wait for the worker's Celery result."""
        await self._start()  # a resumed eval may close a dead run's sandboxes before anything else
        loop = asyncio.get_running_loop()
        rec = Pending(task_id=uuid.uuid4().hex, future=loop.create_future(), kind=kind, function=f"{kind}_sandbox",
                      payload=arg, queue=queue, host=host, boot=boot)
        rec.future.add_done_callback(lambda f: self._on_done(rec, f))
        if self.fleet_error is not None:
            raise SandboxUnavailableError(self.fleet_error)
        await self._track([rec])
        try:
            await self._publisher.stage([TaskMessage(rec.task_id, name, arg, queue)])
        except Exception as exc:
            rec.future.cancel()
            raise SandboxUnavailableError(f"Could not reach the worker fleet to {kind} a sandbox: {exc}") from exc
        meta: dict[str, Any] = await rec.future
        return meta

    # --- resolution ----------------------------------------------------------------------------

    def _on_meta(self, rec: Pending, raw: asyncio.Future[dict[str, Any]]) -> None:
        if not raw.cancelled() and not rec.future.done():
            self._resolve(rec, raw.result())

    def on_reply(self, data: bytes) -> None:
        """Outcomes a worker published on this dispatcher's reply channel (untrusted until verified)."""
        for call_id, mac, text in parse_items(data):
            self._answer(call_id, mac, text)

    def _answer(self, call_id: str, mac: str, text: str) -> bool:
        rec = self.pending.get(call_id)
        if rec is None or rec.kind != "call" or rec.future.done():
            return False  # not ours, already answered (a redelivered copy's replay), or given up on
        if not verify_outcome(self._keyring, mac, call_id, text):
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

    async def recheck_outcomes(self, records: list[Pending]) -> None:
        """Resolve calls whose outcome was stored while this dispatcher was not listening."""
        values = await self._listener.stored_outcomes([r.task_id for r in records])
        for rec, value in zip(records, values, strict=True):
            for call_id, mac, text in parse_items(value) if value is not None else []:
                if call_id == rec.task_id:
                    self._answer(call_id, mac, text)

    def _resolve(self, rec: Pending, value: Any) -> None:
        if not rec.future.done():
            rec.future.set_result(value)

    def _on_done(self, rec: Pending, fut: asyncio.Future[Any]) -> None:
        self.pending.pop(rec.task_id, None)
        if rec.deadline is not None:
            rec.deadline.cancel()
        if rec.raw is not None:
            self._listener.forget(rec.task_id, rec.raw)
        if fut.cancelled() and rec.kind == "call":
            self._request_cancel(rec)

    def _expire(self, task_id: str, bound: float) -> None:
        rec = self.pending.get(task_id)
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

    def on_fleet_event(self, data: bytes) -> None:
        """A worker's event (``workers.fleet.FleetEvents``): only one about a task this dispatcher waits for counts."""
        event = parse_event(data, self._keyring)
        if event is None:
            return
        if not event.signed:
            self._advisory(event)
            return
        if event.kind == "rejected" and event.age is not None and self._requeue(event):
            return
        rec = self.pending.get(event.task_id)
        if rec is None or rec.future.done():
            return
        if event.kind == "store_failed":
            rec.condition = store_failed_line(event)
            log.warning("dispatch.result_not_stored", host=event.host, task_id=event.task_id, error=event.error)
        elif event.kind == "rejected" and self.fleet_error is None:
            self.fleet_error = rejection_line(event)
            log.info("dispatch.fleet_rejects_messages", host=event.host, reason=event.reason)  # the eval says it
            for pending in list(self.pending.values()):
                self._fail_misconfigured(pending)

    def _advisory(self, event: FleetEvent) -> None:
        """An unsigned event (a forgery, or a worker holding another secret): it stops nothing and sends
        nothing again; what it says is only the reason a wait it names reports if that runs out."""
        said = rejection_line(event) if event.kind == "rejected" else (
            store_failed_line(event) if event.kind == "store_failed" else "")
        rec = self.pending.get(event.task_id)
        if rec is not None and not rec.future.done() and said and rec.condition is None:
            rec.condition = f"an unsigned fleet event said: {said}"
        key = (event.host, event.kind, event.reason[:80])
        if key not in self._advised and len(self._advised) < ADVISED_KEPT:
            self._advised.add(key)
            log.warning("dispatch.unsigned_fleet_event", host=event.host, kind=event.kind, reason=event.reason,
                        note="not signed with this orchestrator's fleet secret: ignored (advisory)")

    def _requeue(self, event: FleetEvent) -> bool:
        """A worker refused a stage message of ours as expired: if it waited that long in the queue by
        this host's clock too, send its calls again with a fresh issue time (same ids: a copy that
        somehow ran is answered from the worker's memory, not run twice). Each call's deadline still
        bounds it. False: not ours, or a clock problem (a misconfiguration, reported as one)."""
        now = time.monotonic()
        records = [r for r in self.pending.values()
                   if r.message == event.task_id and r.kind == "call" and not r.future.done()]
        if not records or not all(expired_in_queue(event, now - r.published, DEFAULT_REPLAY_WINDOW.max_skew)
                                  for r in records):
            return False
        for rec in records:
            rec.published = now
        log.warning("dispatch.requeue_expired", host=event.host, calls=len(records), age=event.age)
        self.requeued += len(records)
        self._background(self._republish(records, "it waited in the queue past the workers' message age limit"))
        return True

    async def _republish(self, records: list[Pending], why: str) -> None:
        try:
            await self._publisher.stage(_stage_messages(records, self._reply))
        except Exception as exc:  # noqa: BLE001 - kombu/redis raise many kinds; each call gets its outcome
            for rec in records:
                self._resolve(rec, _error_outcome(rec.task_id, "sandbox_unavailable",
                    f"The call could not be sent again to the worker fleet ({why}): {exc}."))

    def _fail_misconfigured(self, rec: Pending) -> None:
        if rec.future.done():
            return
        if rec.kind == "call":
            self._resolve(rec, CallOutcome(call_id=rec.task_id, fatal=FatalError(type="FleetMisconfigured",
                                                                                  message=str(self.fleet_error))))
        else:
            rec.future.set_exception(SandboxUnavailableError(str(self.fleet_error)))

    def _lost_outcome(self, rec: Pending) -> CallOutcome:
        return _error_outcome(rec.task_id, "sandbox_unavailable",
            f"The worker host '{rec.host}' that holds this sample's sandbox was lost (its heartbeat stopped or it "
            "restarted); the sandbox and this call's result are gone.", rec.host)

    # --- what the hosts' liveness needs ---------------------------------------------------------

    def hosts(self) -> set[str]:
        """The hosts something pending waits on."""
        return {rec.host for rec in self.pending.values() if rec.host is not None}

    def boots_on(self, host: str) -> set[str]:
        """The incarnations of ``host`` something pending was sent to."""
        return {r.boot for r in self.pending.values() if r.host == host and r.boot is not None}

    def older_boots(self, host: str, boot: str) -> list[str]:
        """One entry per pending record sent to an incarnation of ``host`` other than ``boot`` (restarted)."""
        return [r.boot for r in self.pending.values() if r.host == host and r.boot is not None and r.boot != boot]

    def host_lost(self, host: str, boot: str | None) -> None:
        """What was pending on ``host`` (under ``boot``; None: any incarnation) is gone with it."""
        victims = [r for r in self.pending.values() if r.host == host and (boot is None or r.boot == boot)]
        if victims:
            log.warning("dispatch.host_lost", host=host, pending=len(victims))
        for rec in victims:
            if rec.kind == "call":
                self._resolve(rec, self._lost_outcome(rec))
            elif not rec.future.done():
                rec.future.set_exception(
                    SandboxUnavailableError(f"Worker host '{host}' was lost during {rec.function}."))

    # --- cancellation --------------------------------------------------------------------------

    def _request_cancel(self, rec: Pending) -> None:
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
                destination = [names.worker_nodename(host)] if host else None
                await self._publisher.broadcast(names.CONTROL_CANCEL,
                                                {"call_ids": ids, "mac": cancel_mac(self._keyring, ids)},
                                                destination)
        except Exception as exc:  # noqa: BLE001 - best effort: the worker's own deadline still applies
            log.warning("dispatch.cancel_failed", error=str(exc))

    # --- Redis restarts ------------------------------------------------------------------------

    async def after_reconnect(self) -> None:
        """Redis came back: give workers time to re-assert their claims, then republish lost calls."""
        self._publisher.broker_restarted()
        try:  # answers published while the listener was away are stored: resolve those at once
            await self.recheck_outcomes([r for r in self.pending.values() if r.kind == "call" and not r.future.done()])
        except (RedisError, OSError) as exc:
            log.debug("dispatch.recheck_failed", error=str(exc))
        await asyncio.sleep(self.config.lost_grace)
        pending = [r for r in self.pending.values() if r.kind == "call" and not r.future.done()]
        if not pending:
            return
        try:
            await self.recheck_outcomes(pending)
            pending = [r for r in pending if not r.future.done()]
            claims = await self._listener.redis.mget([names.call_key(r.task_id) for r in pending]) if pending else []
        except (RedisError, OSError) as exc:
            log.warning("dispatch.recheck_failed", error=str(exc))
            return
        lost = [r for r, claim in zip(pending, claims, strict=True) if claim is None]
        if lost:
            log.warning("dispatch.republish", calls=len(lost))
            await self._republish(lost, "it was lost when the broker restarted")
