"""Adaptive concurrency per model: AIMD on the number of requests in flight.

The limit starts at its ceiling (``--max-connections``, or the provider's default), halves when the
provider says it is over capacity (429 rate limit, 529 overloaded) and grows back by one for every
``limit`` requests that succeed (about +1 per round trip of the whole window), never above the
ceiling nor below one. Only the first overload of a burst counts: a request that was sent before the
last decrease carries the old "epoch", and its 429 is the same storm already answered, so thousands of
samples hitting one rate limit halve the window once, not a thousand times.

``aimd_step`` is the controller, a pure function tested by tables; ``ConnectionLimiter`` applies it to
requests in flight and keeps a bounded trace of the limit's changes for the display and the log.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Outcome = Literal["success", "overload", "neutral"]
DECREASE_FACTOR = 0.5
TRACE_LENGTH = 200  # the last changes kept for the log (bounded: an eval may run for days)


class AimdState(BaseModel):
    """The controller's state: a fractional window, its bounds, and the decrease epoch."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    window: float
    ceiling: int = Field(ge=1)
    floor: int = Field(default=1, ge=1)
    epoch: int = 0  # bumped by each decrease

    @property
    def limit(self) -> int:
        return max(self.floor, min(self.ceiling, math.floor(self.window + 1e-9)))


def aimd_step(state: AimdState, outcome: Outcome, sent_epoch: int) -> AimdState:
    """The state after a request sent in ``sent_epoch`` ended with ``outcome``."""
    if outcome == "success":
        window = min(float(state.ceiling), state.window + 1.0 / max(state.window, 1.0))
        return state.model_copy(update={"window": window})
    if outcome == "overload" and sent_epoch >= state.epoch:
        window = max(float(state.floor), math.floor(state.window * DECREASE_FACTOR))
        return state.model_copy(update={"window": window, "epoch": state.epoch + 1})
    return state  # neutral (other errors, cancellation), or an overload from before the last decrease


class LimitChange(BaseModel):
    at: float  # seconds since the limiter was created
    limit: int
    reason: Literal["overload", "success"]


class ConnectionReport(BaseModel):
    """What the log keeps per model: the ceiling, where the limit went, and its changes."""

    ceiling: int
    final: int
    lowest: int
    overloads: int = 0
    trace: list[LimitChange] = Field(default_factory=list)


class ConnectionLimiter:
    """Requests in flight for one model, bounded by the AIMD limit: ``epoch = await acquire()``, then
    ``release(epoch, outcome)``. Waiters are served in arrival order. Not bound to an event loop (a
    memoized model may serve successive loops): each wait is a future of the loop that waits."""

    def __init__(self, ceiling: int) -> None:
        if ceiling < 1:
            raise ValueError(f"the connection ceiling must be at least 1, got {ceiling}")
        self.state = AimdState(window=float(ceiling), ceiling=ceiling)
        self.in_flight = 0
        self.lowest = ceiling
        self.overloads = 0
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._started: float | None = None  # the first request: trace times count from there
        self._trace: deque[LimitChange] = deque(maxlen=TRACE_LENGTH)

    @property
    def limit(self) -> int:
        return self.state.limit

    @property
    def ceiling(self) -> int:
        return self.state.ceiling

    async def acquire(self) -> int:
        """Wait for a free slot; returns the epoch the request is sent in."""
        if self._started is None:
            self._started = time.monotonic()
        if not self._waiters and self.in_flight < self.limit:
            self.in_flight += 1
            return self.state.epoch
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter  # _wake counts the slot as taken before resolving it
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.in_flight -= 1  # handed a slot, then cancelled: give it back
                self._wake()
            else:
                self._waiters.remove(waiter)
            raise
        return self.state.epoch

    def release(self, sent_epoch: int, outcome: Outcome) -> LimitChange | None:
        """Free the slot and feed the controller; returns the change of limit, if any."""
        self.in_flight -= 1
        before = self.state.limit
        self.state = aimd_step(self.state, outcome, sent_epoch)
        self.overloads += outcome == "overload"
        change = None
        if self.state.limit != before:
            self.lowest = min(self.lowest, self.state.limit)
            change = LimitChange(at=round(time.monotonic() - (self._started or time.monotonic()), 3),
                                 limit=self.state.limit,
                                 reason="overload" if self.state.limit < before else "success")
            self._trace.append(change)
        self._wake()
        return change

    def _wake(self) -> None:
        while self._waiters and self.in_flight < self.limit:
            waiter = self._waiters.popleft()
            if not waiter.done():
                self.in_flight += 1
                waiter.set_result(None)

    def report(self) -> ConnectionReport:
        return ConnectionReport(ceiling=self.ceiling, final=self.limit, lowest=self.lowest,
                                overloads=self.overloads, trace=list(self._trace))
