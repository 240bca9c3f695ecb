"""Live eval counters (what the progress display shows) fed by transcript events and finished samples."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from orchestrator.log._events import BaseEvent, InfoEvent, ModelEvent, ToolEvent

SANDBOX_WAIT_SOURCE = "sandbox_wait"  # as the Celery dispatcher records it
RATE_WINDOW_S = 10.0  # tool calls/s is measured over this sliding window


@dataclass
class EvalProgress:
    task: str = ""
    model: str = ""
    log: str = ""
    total: int = 0
    done: int = 0  # finished samples whose log line is on disk (including resumed ones)
    resumed: int = 0  # of ``done``, how many a previous run finished
    running: int = 0
    waiting: int = 0  # samples waiting for a sandbox slot on a busy fleet (``sandbox_wait`` info events)
    errors: int = 0  # samples that failed for good
    retries: int = 0
    model_retries: int = 0  # model API requests retried (429s, 5xx, timeouts), from model events
    rate_limits: int = 0  # of those, the ones the provider refused for rate (429)
    notice: str | None = None  # e.g. "resuming LOG (...)": every display shows it
    tool_calls: int = 0
    tokens: int = 0
    batches_pending: int = 0  # batch mode: provider batches holding this eval's requests, in flight
    batches_done: int = 0  # ... and ended
    cost: float = 0.0  # USD of the priced model calls
    unpriced: bool = False  # some call had no price: the cost shown is a lower bound
    limiter: Any = None  # the model's ConnectionLimiter (adaptive concurrency), if it has one
    started: float = field(default_factory=time.monotonic)
    _recent_calls: deque[float] = field(default_factory=deque)
    _live_retries: dict[str | None, int] = field(default_factory=dict)  # model span -> retries seen live
    listeners: list[Callable[[str, EvalProgress], None]] = field(default_factory=list)

    def on_event(self, event: BaseEvent) -> None:
        if isinstance(event, ToolEvent):
            self.tool_calls += 1
            now = time.monotonic()
            self._recent_calls.append(now)
            while self._recent_calls and now - self._recent_calls[0] > RATE_WINDOW_S:
                self._recent_calls.popleft()
        elif isinstance(event, InfoEvent) and event.source == SANDBOX_WAIT_SOURCE and isinstance(event.data, dict):
            self.waiting = max(0, self.waiting + (1 if event.data.get("waiting") else -1))
        elif isinstance(event, InfoEvent) and event.source == "model_retry":
            # Live, before the back-off: counted now, and not again from the call's ModelEvent.
            self.model_retries += 1
            self.rate_limits += bool(isinstance(event.data, dict) and event.data.get("rate_limited"))
            self._live_retries[event.span_id] = self._live_retries.get(event.span_id, 0) + 1
        elif isinstance(event, ModelEvent):
            if event.usage is not None:
                self.tokens += getattr(event.usage, "total_tokens", 0) or 0
                cost = getattr(event.usage, "total_cost", None)
                self.cost += cost or 0.0
                self.unpriced = self.unpriced or cost is None
            seen = self._live_retries.pop(event.span_id, 0)
            self.model_retries += max(0, (event.retries or 0) - seen)
            if not seen and event.error and ("429" in event.error or "rate limit" in event.error.lower()):
                self.rate_limits += 1

    @property
    def tool_calls_per_s(self) -> float:
        now = time.monotonic()
        while self._recent_calls and now - self._recent_calls[0] > RATE_WINDOW_S:
            self._recent_calls.popleft()
        window = min(RATE_WINDOW_S, max(now - self.started, 1e-6))
        return len(self._recent_calls) / window

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started

    @property
    def eta_s(self) -> float | None:
        finished_here = self.done - self.resumed
        remaining = self.total - self.done
        if finished_here <= 0 or remaining <= 0:
            return None if remaining > 0 else 0.0
        return self.elapsed / finished_here * remaining

    @property
    def connections(self) -> str | None:
        """``limit/ceiling`` of the adaptive connection limit (None: the model is unbounded)."""
        if self.limiter is None:
            return None
        return f"{self.limiter.limit}/{self.limiter.ceiling}"

    @property
    def cost_text(self) -> str:
        return f"${self.cost:.4f}" + (" + unknown (no price for the model)" if self.unpriced else "")

    def notify(self, what: str) -> None:
        for listener in self.listeners:
            listener(what, self)

    def snapshot(self) -> dict[str, float | int | str | None]:
        eta = self.eta_s
        return {"task": self.task, "notice": self.notice, "model": self.model, "done": self.done, "total": self.total,
                "running": self.running, "waiting_for_slot": self.waiting, "errors": self.errors,
                "retries": self.retries,
                "model_retries": self.model_retries, "rate_limits": self.rate_limits,
                "tool_calls": self.tool_calls, "tool_calls_per_s": round(self.tool_calls_per_s, 2),
                "tokens": self.tokens, "cost": round(self.cost, 6), "connections": self.connections,
                "batches_pending": self.batches_pending, "batches_done": self.batches_done,
                "elapsed_s": round(self.elapsed, 1),
                "eta_s": None if eta is None else round(eta, 1)}
