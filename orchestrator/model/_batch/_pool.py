"""``BatchPool``: generate requests from many concurrent turns pooled into a provider's batch API.

A turn calls ``generate``; its request waits in the queue. One background task per pool (started on
demand, ending when there is nothing left to do) sends the queue as a batch once ``size`` requests wait
or the oldest has waited ``send_delay`` seconds (at most ``max_size`` per batch, ``max_batches`` in
flight), checks every batch in flight each ``tick``, and when one ends fetches its results and hands
each to the turn waiting for it. Every wait is bounded: each provider call by ``CALL_TIMEOUT_S``, the
loop's sleep by ``tick``, a batch by ``MAX_BATCH_WAIT_S`` (providers end theirs within 24 hours; one
still running after that is cancelled), and status checks by ``max_check_failures`` in a row.

A batch that fails or expires resolves its turns with a ``BatchError`` carrying the provider's words
(retried by ``Model`` as any model error); a submission the provider refuses resolves them with the
provider's own exception. A turn that is cancelled (a time limit) leaves the queue; a batch none of
whose turns still wait is cancelled at the provider.

Resume: see ``_resume``. A request recorded by an earlier run attaches to its recorded batch instead of
being queued; that batch's results, once fetched, stay here for other resumed turns that need them. A
request whose submission was recorded (``intent``) but not its batch waits while the provider is asked
which batch that submission made (``BatchBackend.find``, each ``tick``), then attaches to it — or is
queued anew when the provider never accepted it.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import structlog

from orchestrator.tool._tool_call import ToolChoice
from orchestrator.tool._tool_info import ToolInfo

from .._chat_message import ChatMessage
from .._generate_config import GenerateConfig
from .._model_output import ModelOutput
from ._backend import PENDING, BatchBackend, BatchCheck, BatchError, BatchOutcome
from ._resume import RecordedRequest, SampleRef, conversation_turn, request_key
from ._scope import BatchScope, active_batch_scope, current_sample
from ._settings import BatchSettings

_logger = structlog.get_logger("toolfleet.batch")

CALL_TIMEOUT_S = 600.0  # one provider call (upload + create, a status check, a results download)
MAX_BATCH_WAIT_S = 25 * 3600.0  # providers' 24 h completion window, plus an hour of slack
MIN_SLEEP_S = 0.01  # the loop never spins


@dataclass(eq=False)
class _Waiter:
    custom_id: str
    body: dict[str, Any]
    tools: list[ToolInfo]
    future: asyncio.Future[ModelOutput]
    scope: BatchScope | None
    sample: SampleRef | None
    key: str
    since: float = field(default_factory=time.monotonic)


@dataclass(eq=False)
class _Batch:
    id: str
    resumed: bool = False  # submitted by an earlier run; attached to by this one
    waiters: dict[str, _Waiter] = field(default_factory=dict)
    scopes: list[BatchScope] = field(default_factory=list)
    submitted: float = field(default_factory=time.monotonic)
    next_check: float = 0.0
    failures: int = 0

    def add_scope(self, scope: BatchScope | None) -> None:
        if scope is not None and all(s is not scope for s in self.scopes):
            self.scopes.append(scope)


@dataclass(eq=False)
class _Intent:
    """A submission an earlier run recorded (``tag``, sent at ``since``, wall clock) without its batch id."""

    tag: str
    since: float
    waiters: dict[str, _Waiter] = field(default_factory=dict)
    next_check: float = 0.0
    failures: int = 0


class BatchPool:
    def __init__(self, backend: BatchBackend, settings: BatchSettings, model: str) -> None:
        self.backend = backend
        self.settings = settings
        self.model = model  # provider/name: what the log records, what resume matches on
        self.submitted = 0  # batches this pool sent (the resumed ones are not counted)
        self._queue: list[_Waiter] = []
        self._batches: dict[str, _Batch] = {}
        self._collected: dict[str, tuple[BatchCheck, dict[str, BatchOutcome]]] = {}  # resumed batches' results
        self._intents: dict[str, _Intent] = {}  # recorded submissions whose batch is being looked up
        self._found: dict[str, str | None] = {}  # ... and what the provider said (None: it has no such batch)
        self._ids = itertools.count(1)
        self._tags = itertools.count(1)
        self._prefix = uuid.uuid4().hex[:10]
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def generate(self, input: list[ChatMessage], tools: list[ToolInfo], tool_choice: ToolChoice | None,
                       config: GenerateConfig) -> ModelOutput:
        body = self.backend.request(input, tools, tool_choice, config)
        scope, sample = active_batch_scope(), current_sample()
        key = request_key(body)
        waiter = _Waiter("", body, tools, asyncio.get_running_loop().create_future(), scope, sample, key)
        recorded = scope.resume.take(self.model, sample, key) if scope is not None and sample is not None else None
        if recorded is not None:
            self._attach(recorded, waiter)
        else:
            waiter.custom_id = f"tf-{self._prefix}-{next(self._ids)}"
            self._queue.append(waiter)
        self._kick()
        try:
            return await waiter.future
        finally:
            if waiter.future.cancelled() and waiter in self._queue:
                self._queue.remove(waiter)

    @property
    def in_flight(self) -> int:
        return len(self._batches)

    def _kick(self) -> None:
        self._wake.set()
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name=f"batch-pool {self.model}")

    def _attach(self, recorded: RecordedRequest, waiter: _Waiter) -> None:
        waiter.custom_id = recorded.custom_id
        if not recorded.batch_id and recorded.intent:
            if recorded.intent in self._found:  # looked up already for another resumed turn
                found = self._found[recorded.intent]
                if found is None:
                    self._requeue(waiter)
                else:
                    self._attach(RecordedRequest(found, waiter.custom_id, recorded.submitted_at), waiter)
                return
            intent = self._intents.setdefault(recorded.intent, _Intent(recorded.intent, recorded.submitted_at or 0.0))
            intent.waiters[waiter.custom_id] = waiter
            return
        collected = self._collected.get(recorded.batch_id)
        if collected is not None:  # fetched already for another resumed turn
            self._resolve(waiter, recorded.batch_id, *collected)
            return
        if waiter.scope is not None:
            waiter.scope.waiting_on(recorded.batch_id)
        batch = self._batches.get(recorded.batch_id)
        if batch is None:
            batch = self._batches[recorded.batch_id] = _Batch(recorded.batch_id, resumed=True)
            if recorded.submitted_at is not None:  # its age counts from when the killed run submitted it
                batch.submitted = time.monotonic() - max(0.0, time.time() - recorded.submitted_at)
        batch.waiters[waiter.custom_id] = waiter
        batch.add_scope(waiter.scope)

    # -- the loop ----------------------------------------------------------------------------------

    async def _run(self) -> None:
        try:
            while self._queue or self._batches or self._intents:
                self._wake.clear()
                await self._find_due()
                await self._send_ready()
                await self._check_due()
                now = time.monotonic()
                wake_at = [b.next_check for b in self._batches.values()]
                wake_at += [i.next_check for i in self._intents.values()]
                if self._queue and len(self._batches) < self.settings.max_batches:
                    wake_at.append(self._queue[0].since + self.settings.send_delay)
                delay = min([self.settings.tick, *(t - now for t in wake_at)])
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), max(delay, MIN_SLEEP_S))
        except Exception as exc:  # noqa: BLE001 - a bug here must not leave turns waiting forever
            _logger.error("batch.pool_failed", model=self.model, error=f"{type(exc).__name__}: {exc}")
            for waiter in [*self._queue, *(w for b in self._batches.values() for w in b.waiters.values()),
                           *(w for i in self._intents.values() for w in i.waiters.values())]:
                _settle(waiter.future, BatchError(f"batch pool failed: {type(exc).__name__}: {exc}"))
            self._queue.clear()
            self._batches.clear()
            self._intents.clear()

    def _requeue(self, waiter: _Waiter) -> None:
        """A recorded request whose batch the provider never made: sent now, under a new custom id."""
        if not waiter.future.done():
            waiter.custom_id = f"tf-{self._prefix}-{next(self._ids)}"
            waiter.since = time.monotonic()
            self._queue.append(waiter)

    async def _find_due(self) -> None:
        """Ask the provider which batch each recorded submission made: attach its requests to it, or queue
        them anew when there is none (the provider never accepted it)."""
        now = time.monotonic()
        for intent in [i for i in self._intents.values() if i.next_check <= now]:
            intent.next_check = now + self.settings.tick
            if all(w.future.done() for w in intent.waiters.values()):
                del self._intents[intent.tag]
                continue
            try:
                found = await asyncio.wait_for(self.backend.find(intent.tag, list(intent.waiters), intent.since),
                                               CALL_TIMEOUT_S)
            except Exception as exc:  # noqa: BLE001 - asked again next tick, up to a bound
                intent.failures += 1
                _logger.warning("batch.find_failed", model=self.model, intent=intent.tag, failures=intent.failures,
                                error=f"{type(exc).__name__}: {exc}"[:300])
                if intent.failures >= self.settings.max_check_failures:
                    del self._intents[intent.tag]
                    for w in intent.waiters.values():
                        _settle(w.future, BatchError(f"could not find the batch of submission {intent.tag}: {exc}"))
                continue
            if found == PENDING and time.time() - intent.since < MAX_BATCH_WAIT_S:
                continue
            del self._intents[intent.tag]
            if found is None or found == PENDING:
                self._found[intent.tag] = None
                _logger.info("batch.not_submitted", model=self.model, intent=intent.tag, requests=len(intent.waiters))
                for w in intent.waiters.values():  # never accepted: send them now
                    self._requeue(w)
                continue
            self._found[intent.tag] = found
            _logger.info("batch.found", model=self.model, intent=intent.tag, batch_id=found)
            for w in intent.waiters.values():
                self._attach(RecordedRequest(found, w.custom_id, intent.since), w)
            for scope in {id(w.scope): w.scope for w in intent.waiters.values() if w.scope is not None}.values():
                await scope.submitted(self.model, found,
                                      _described(w for w in intent.waiters.values() if w.scope is scope),
                                      intent=intent.tag)

    async def _send_ready(self) -> None:
        s = self.settings
        while self._queue and len(self._batches) < s.max_batches:
            if len(self._queue) < s.size and time.monotonic() - self._queue[0].since < s.send_delay:
                return
            chunk, self._queue[:] = self._queue[: s.max_size], self._queue[s.max_size:]
            await self._submit(chunk)

    async def _submit(self, chunk: list[_Waiter]) -> None:
        tag = f"tf-{self._prefix}-s{next(self._tags)}"
        scopes = {id(w.scope): w.scope for w in chunk if w.scope is not None}
        for scope in scopes.values():  # on disk before the provider sees it: a resume finds what it paid for
            await scope.intended(self.model, tag, _described(w for w in chunk if w.scope is scope))
        try:
            batch_id = await asyncio.wait_for(self.backend.submit([(w.custom_id, w.body) for w in chunk], tag),
                                              CALL_TIMEOUT_S)
        except Exception as exc:  # noqa: BLE001 - the provider's refusal is each turn's error (maybe retried)
            for w in chunk:
                _settle(w.future, exc)
            return
        self.submitted += 1
        batch = self._batches[batch_id] = _Batch(batch_id, next_check=time.monotonic() + self.settings.tick)
        for w in chunk:
            batch.waiters[w.custom_id] = w
            batch.add_scope(w.scope)
        _logger.info("batch.submitted", model=self.model, batch_id=batch_id, requests=len(chunk))
        for scope in batch.scopes:
            await scope.submitted(self.model, batch_id, _described(w for w in chunk if w.scope is scope), intent=tag)

    async def _check_due(self) -> None:
        now = time.monotonic()
        for batch in [b for b in self._batches.values() if b.next_check <= now]:
            await self._check(batch)

    async def _check(self, batch: _Batch) -> None:
        s = self.settings
        batch.next_check = time.monotonic() + s.tick
        if not batch.resumed and batch.waiters and all(w.future.done() for w in batch.waiters.values()):
            # Nobody waits any more (their samples were cancelled): stop paying for it.
            await self._cancel(batch)
            await self._end(batch, BatchCheck(state="cancelled", error="no request in it was still awaited"), {})
            return
        try:
            check = await asyncio.wait_for(self.backend.check(batch.id), CALL_TIMEOUT_S)
            outcomes = await asyncio.wait_for(self.backend.results(batch.id, check), CALL_TIMEOUT_S) \
                if check.ended else {}
        except Exception as exc:  # noqa: BLE001 - a failed look is retried next tick, up to a bound
            batch.failures += 1
            _logger.warning("batch.check_failed", model=self.model, batch_id=batch.id, failures=batch.failures,
                            error=f"{type(exc).__name__}: {exc}"[:300])
            if _refused(exc):  # e.g. a recorded batch the provider no longer knows (404): asking again won't help
                await self._end(batch, BatchCheck(state="failed", error=f"{type(exc).__name__}: {exc}"[:1000]), {})
            elif batch.failures >= s.max_check_failures:
                await self._end(batch, BatchCheck(state="failed", error=f"{batch.failures} status checks in a row "
                                                  f"failed, the last with {type(exc).__name__}: {exc}"), {})
            return
        batch.failures = 0
        if check.ended:
            await self._end(batch, check, outcomes)
        elif time.monotonic() - batch.submitted > MAX_BATCH_WAIT_S:
            await self._cancel(batch)
            await self._end(batch, BatchCheck(state="expired", error=f"not ended after {MAX_BATCH_WAIT_S / 3600:g} "
                                              "hours (cancelled)"), {})

    async def _cancel(self, batch: _Batch) -> None:
        try:
            await asyncio.wait_for(self.backend.cancel(batch.id), CALL_TIMEOUT_S)
        except Exception as exc:  # noqa: BLE001 - best effort: the provider ends it within its window anyway
            _logger.warning("batch.cancel_failed", model=self.model, batch_id=batch.id, error=str(exc)[:300])

    async def _end(self, batch: _Batch, check: BatchCheck, outcomes: dict[str, BatchOutcome]) -> None:
        del self._batches[batch.id]
        if batch.resumed:
            self._collected[batch.id] = (check, outcomes)
        for waiter in batch.waiters.values():
            self._resolve(waiter, batch.id, check, outcomes)
        _logger.info("batch.ended", model=self.model, batch_id=batch.id, state=check.state, results=len(outcomes))
        for scope in batch.scopes:
            await scope.ended(self.model, batch.id, check.state, check.error)

    def _resolve(self, waiter: _Waiter, batch_id: str, check: BatchCheck, outcomes: dict[str, BatchOutcome]) -> None:
        if waiter.future.done():
            return
        outcome = outcomes.get(waiter.custom_id)
        if isinstance(outcome, BatchError):
            _settle(waiter.future, outcome)
        elif outcome is None:
            why = f"batch {batch_id} {check.state}" + (f": {check.error}" if check.error else "")
            if check.state == "completed":
                why = f"batch {batch_id} completed without a result for request {waiter.custom_id}"
            _settle(waiter.future, BatchError(why))
        else:
            try:
                output = self.backend.parse(outcome, waiter.tools)
            except Exception as exc:  # noqa: BLE001 - untrusted provider output: that request's error
                _settle(waiter.future, BatchError(f"malformed result for request {waiter.custom_id} in batch "
                                                  f"{batch_id}: {type(exc).__name__}: {str(exc)[:300]}"))
                return
            # Which batch answered (in the log's model event); also what prices the call at the batch discount.
            output.metadata = {**(output.metadata or {}), "batch": batch_id}
            waiter.future.set_result(output)

    async def aclose(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        await self.backend.aclose()


def _described(waiters: Any) -> list[dict[str, Any]]:
    """The requests as the log records them (``_resume``)."""
    return [{"custom_id": w.custom_id, "sample_id": w.sample[0] if w.sample else None,
             "epoch": w.sample[1] if w.sample else None, "turn": conversation_turn(w.body), "key": w.key}
            for w in waiters]


def _refused(exc: BaseException) -> bool:
    """A provider's 4xx other than timeout/conflict/rate limit: the same call would fail again."""
    status = getattr(exc, "status_code", None)
    return isinstance(status, int) and 400 <= status < 500 and status not in (408, 409, 429)


def _settle(future: asyncio.Future[Any], exc: BaseException) -> None:
    if not future.done():
        future.set_exception(exc)
