"""Timers that keep nothing of the code that armed them alive.

asyncio gives every timer handle a copy of the caller's context (its ``contextvars``) and keeps that
copy after the timer is cancelled, until the handle leaves the loop's heap. A far-off deadline that
is cancelled — a call's 3,600 s bound, a model attempt's ceiling — leaves the heap only when the
loop sweeps its cancelled timers, once they outnumber the live ones. In the orchestrator that
context holds the sample's transcript, so at 5,000 samples the state of every sample finished since
the last sweep stayed alive for seconds and was then freed in one loop iteration: stalls of
95–377 ms (``python -m tests.benchmarks.agents 5000 10 2 10 2`` with the loop's iterations timed).

Armed here, a timer runs its callback in an empty context of its own. The callbacks used with it
(cancelling a task, expiring a record) read no context variable.
"""

from __future__ import annotations

import asyncio
import contextvars
import weakref
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, ClassVar


def arm(scope: asyncio.Timeout, delay: float | None) -> None:
    """Make an entered ``asyncio.timeout(None)`` scope expire in ``delay`` seconds (None: never), detached."""
    if delay is not None:
        contextvars.Context().run(scope.reschedule, asyncio.get_running_loop().time() + delay)


def call_later(delay: float, callback: Callable[..., Any], *args: Any) -> asyncio.TimerHandle:
    """``loop.call_later`` whose handle holds an empty context, not the caller's."""
    return asyncio.get_running_loop().call_later(delay, callback, *args, context=contextvars.Context())


class LongDeadlines:
    """One loop's deadlines of one long ``delay``, for many short scopes: one timer checks them
    every ``period`` seconds, instead of a timer armed and cancelled per scope.

    Every tool call has a deadline (an hour when its tool sets none); a timer per call cost 4–5 µs —
    a tenth of an in-process call — and left a cancelled handle in the loop's heap. With one delay,
    scopes fall due in the order they were added, so a check looks only at the oldest. A scope
    expires up to ``period`` late, through ``asyncio.Timeout.reschedule``: as ``asyncio.timeout`` would.
    """

    # Keyed weakly by loop: nothing here refers back to the loop (its time is read while it runs, and
    # the pending check is the loop's own handle), so a closed loop takes its deadlines with it.
    _by_loop: ClassVar[weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[float, LongDeadlines]]] = \
        weakref.WeakKeyDictionary()

    def __init__(self, delay: float, period: float = 1.0) -> None:
        self.delay, self.period = delay, period
        self._due: OrderedDict[asyncio.Timeout, float] = OrderedDict()
        self._check_pending = False

    @classmethod
    def of_running_loop(cls, delay: float) -> LongDeadlines:
        by_delay = cls._by_loop.setdefault(asyncio.get_running_loop(), {})
        deadlines = by_delay.get(delay)
        if deadlines is None:
            deadlines = by_delay[delay] = cls(delay)
        return deadlines

    def add(self, scope: asyncio.Timeout) -> None:
        """Expire an entered ``asyncio.timeout(None)`` scope once ``delay`` has passed; ``discard`` it on exit."""
        self._due[scope] = asyncio.get_running_loop().time() + self.delay
        if not self._check_pending:
            self._schedule_check()

    def discard(self, scope: asyncio.Timeout) -> None:
        self._due.pop(scope, None)

    def __len__(self) -> int:
        return len(self._due)

    def _schedule_check(self) -> None:
        self._check_pending = True
        call_later(self.period, self._check)

    def _check(self) -> None:
        self._check_pending = False
        now = asyncio.get_running_loop().time()
        while self._due:
            scope, when = next(iter(self._due.items()))
            if when > now:
                break
            del self._due[scope]
            scope.reschedule(now)  # cancels its task on the next iteration; the scope raises TimeoutError
        if self._due:
            self._schedule_check()
