"""Who is asking: the eval a batched request belongs to (its log, its resume table, its display counters).

The eval binds one ``BatchScope`` before its samples start; requests made in that context carry it into
the pool, which tells the scope when a batch holding any of its requests is submitted or ends. Outside
an eval (a script calling ``generate`` with ``batch=True``) there is no scope: requests are pooled all
the same, nothing is journaled.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Awaitable, Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import structlog

from orchestrator.util._running_sample import running_sample

from ._resume import ResumeTable, SampleRef

_logger = structlog.get_logger("toolfleet.batch")

Journal = Callable[[dict[str, Any]], Awaitable[None]]  # writes one ``batch`` record to the eval log


@dataclass
class BatchScope:
    journal: Journal | None = None
    resume: ResumeTable = field(default_factory=ResumeTable)
    on_change: Callable[[int, int], None] | None = None  # (pending, done) batches, for the display
    _pending: set[str] = field(default_factory=set)
    _done: set[str] = field(default_factory=set)

    @property
    def pending(self) -> int:
        return len(self._pending)

    @property
    def done(self) -> int:
        return len(self._done)

    async def intended(self, model: str, intent: str, requests: list[dict[str, Any]]) -> None:
        """A batch of these requests is about to be sent: on disk before the provider sees it."""
        await self._record({"event": "intent", "model": model, "intent": intent, "at": time.time(),
                            "requests": requests})

    async def submitted(self, model: str, batch_id: str, requests: list[dict[str, Any]],
                        intent: str | None = None) -> None:
        await self._record({"event": "submit", "model": model, "batch_id": batch_id, "at": time.time(),
                            "requests": requests, **({"intent": intent} if intent else {})})
        self.waiting_on(batch_id)

    def waiting_on(self, batch_id: str) -> None:
        """A batch this eval has requests in (submitted now, or recorded by an earlier run) is in flight."""
        if batch_id not in self._pending and batch_id not in self._done:
            self._pending.add(batch_id)
            self._changed()

    async def ended(self, model: str, batch_id: str, state: str, error: str | None) -> None:
        self._pending.discard(batch_id)
        if batch_id in self._done:
            return
        self._done.add(batch_id)
        self._changed()
        await self._record({"event": "end", "model": model, "batch_id": batch_id, "state": state, "error": error,
                            "at": time.time()})

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change(self.pending, self.done)

    async def _record(self, record: dict[str, Any]) -> None:
        if self.journal is None:
            return
        try:
            await self.journal(record)
        except Exception as exc:  # noqa: BLE001 - an unwritable log line costs a resume its shortcut, not the eval
            _logger.warning("batch.journal_failed", batch_id=record.get("batch_id"), error=str(exc))


_scope: ContextVar[BatchScope | None] = ContextVar("toolfleet_batch_scope", default=None)


def active_batch_scope() -> BatchScope | None:
    return _scope.get()


@contextlib.contextmanager
def batch_scope(scope: BatchScope) -> Iterator[BatchScope]:
    """Requests made in this context (and tasks started from it) belong to ``scope``."""
    token = _scope.set(scope)
    try:
        yield scope
    finally:
        _scope.reset(token)


def current_sample() -> SampleRef | None:
    """The running sample's (id, epoch), if a sample is running."""
    state = running_sample()
    if state is None or state.sample_id is None:
        return None
    return (str(state.sample_id), int(state.epoch or 1))
