"""A sample's working clock: wall-clock time minus the time it spent waiting (``working_limit``'s measure).

Waits are what a sample does not control: queueing for a model connection slot (``max_connections``),
rate-limit backoff and the failed attempts that preceded a retry, or a block marked with
``suspend_working_limit()``. They are recorded as intervals and merged (never added), so overlapping
waits of concurrent tasks of one sample count once and working time always lies between zero and the
elapsed time. Unlike Inspect, a wait is not cut short by work another task of the sample does meanwhile
(Inspect charges that work): concurrent work during a wait is not charged here.

One clock per sample attempt (the sample runner binds it); a ``working_limit`` entered where none is
bound (e.g. ``run(agent, limits=[working_limit(5)])``) binds its own for its block.
"""

from __future__ import annotations

import bisect
import contextlib
import time
from collections.abc import Iterator
from contextvars import ContextVar, Token


class WorkingClock:
    """Closed waits as merged, sorted intervals, plus the waits still open."""

    def __init__(self) -> None:
        self._starts: list[float] = []
        self._ends: list[float] = []
        self._open: list[float] = []  # start times of the waits still open (a multiset)

    def add_wait(self, start: float, end: float) -> None:
        """The sample waited over ``[start, end]`` (merged with what is known)."""
        if end <= start:
            return
        i = bisect.bisect_left(self._ends, start)  # first interval that ends at or after ``start``
        j = bisect.bisect_right(self._starts, end)  # past the last one that starts at or before ``end``
        if i < j:
            start, end = min(start, self._starts[i]), max(end, self._ends[j - 1])
        self._starts[i:j] = [start]
        self._ends[i:j] = [end]

    def open_wait(self) -> float:
        started = time.monotonic()
        self._open.append(started)
        return started

    def close_wait(self, started: float) -> None:
        self._open.remove(started)
        self.add_wait(started, time.monotonic())

    def waiting(self, start: float, end: float) -> float:
        """Seconds of ``[start, end]`` the sample spent waiting (open waits run to ``end``)."""
        total = 0.0
        for s, e in zip(self._starts, self._ends, strict=True):
            if e <= start:
                continue
            if s >= end:
                break
            total += min(e, end) - max(s, start)
        if self._open:
            # Open waits run from the oldest one's start; only the part beyond the closed ones counts.
            lo = max(min(self._open), start)
            if lo < end:
                covered = 0.0
                for s, e in zip(self._starts, self._ends, strict=True):
                    if e > lo and s < end:
                        covered += min(e, end) - max(s, lo)
                total += (end - lo) - covered
        return total

    @contextlib.contextmanager
    def wait(self) -> Iterator[None]:
        started = self.open_wait()
        try:
            yield
        finally:
            self.close_wait(started)


_clock: ContextVar[WorkingClock | None] = ContextVar("toolfleet_working_clock", default=None)


def working_clock() -> WorkingClock | None:
    return _clock.get()


def bind_working_clock(clock: WorkingClock | None = None) -> Token[WorkingClock | None]:
    """Give the current context (a sample attempt) a fresh clock; ``reset_working_clock`` when done."""
    return _clock.set(clock or WorkingClock())


def reset_working_clock(token: Token[WorkingClock | None]) -> None:
    _clock.reset(token)


@contextlib.contextmanager
def sample_waiting() -> Iterator[None]:
    """The block is waiting, not working (no-op where no clock is bound)."""
    clock = _clock.get()
    if clock is None:
        yield
        return
    with clock.wait():
        yield


def report_waiting(seconds: float) -> None:
    """The last ``seconds`` were spent waiting (reported after the fact, e.g. a failed attempt)."""
    clock = _clock.get()
    if clock is not None and seconds > 0:
        now = time.monotonic()
        clock.add_wait(now - seconds, now)


def report_wait_since(start: float) -> None:
    """``[start, now]`` (``time.monotonic`` times) was spent waiting."""
    clock = _clock.get()
    if clock is not None:
        clock.add_wait(start, time.monotonic())
