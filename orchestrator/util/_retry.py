"""Retries, one way for the whole code base: ``RetryPolicy`` (how many, how long, how far apart),
``backoff_delay`` (the schedule: exponential, capped, optionally jittered; pure and table-tested) and
``Backoff``, the one helper every retry loop waits with. ``retry`` is the loop itself, for the plain
case of retrying one operation on some exceptions.

Who retries what, and by which policy:

- ``Model.generate``: provider rate limits (429), server errors (5xx) and timeouts; "equal jitter"
  from 1 s doubling to 60 s, 6 retries, 600 s in all (``RetryPolicy()``, ``GenerateConfig.max_retries``).
- the dispatcher's publisher: any broker error, 50 ms doubling to 1 s, for ``publish_timeout`` seconds.
- a worker's Redis writes (``workers.fleet.patiently``): Redis errors, the same steps, for its patience.
- the dispatcher's result listener: reconnecting to Redis, the same steps, until it is closed.
- ``eval_set``: another pass over incomplete logs, ``retry_wait`` doubling to 600 s, ``retry_attempts`` times.

The fixed schedules (no jitter) are one process retrying its own connection: nothing to spread apart.
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["Backoff", "RetryPolicy", "backoff_delay", "retry"]

T = TypeVar("T")


class RetryPolicy(BaseModel):
    """How a retry loop retries: at most ``max_retries`` times, within ``max_elapsed`` seconds in all,
    waiting ``initial_delay`` then ``multiplier`` times longer each time up to ``max_delay``. The default
    is ``Model.generate``'s (rate limits, server errors, timeouts)."""

    model_config = ConfigDict(extra="forbid")

    max_retries: int | None = Field(default=6, ge=0)  # None: bounded by max_elapsed alone
    initial_delay: float = Field(default=1.0, ge=0)  # seconds before the first retry (pre-jitter)
    multiplier: float = Field(default=2.0, ge=1)
    max_delay: float = Field(default=60.0, ge=0)  # cap on one computed backoff
    max_elapsed: float = Field(default=600.0, ge=0)  # give up rather than exceed this in total (inf: never)
    jitter: float = Field(default=0.5, ge=0, le=1)  # share of each step drawn at random (0: the exact steps)


def _step(policy: RetryPolicy, retry: int) -> float:
    if policy.initial_delay == 0:
        return 0.0
    try:
        grown = policy.initial_delay * policy.multiplier**retry
    except OverflowError:  # a loop that never gives up (a reconnect) reaches 2.0**1024 in time
        grown = math.inf
    return min(policy.max_delay, grown)


def backoff_delay(policy: RetryPolicy, retry: int, retry_after: float | None = None,
                  rng: random.Random | None = None) -> float:
    """Seconds to wait before retry number ``retry`` (0-based).

    A server's Retry-After wins over the computed backoff (it knows its own rate window); it is not
    capped by ``max_delay`` but the caller still gives up if it would exceed ``max_elapsed``.
    Otherwise the step's ``1 - jitter`` share is fixed and the rest random: with the default 0.5
    ("equal jitter") thousands of samples hitting one rate limit do not retry in lock-step yet never
    retry immediately.
    """
    if retry_after is not None:
        return max(0.0, retry_after)
    step = _step(policy, retry)
    if not policy.jitter:
        return step
    fixed = step * (1 - policy.jitter)
    return fixed + (rng or random).uniform(0, step - fixed)


class Backoff:
    """One retry loop's place in its policy: how many retries so far, since when. ``delay()`` is the wait
    before the next attempt, or None when the policy's count or time bound forbids one; ``sleep(delay)``
    waits it and counts the retry; ``wait()`` is both. ``reset()`` starts the schedule over (a reconnect
    that held)."""

    def __init__(self, policy: RetryPolicy, *, rng: random.Random | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], Awaitable[object]] = asyncio.sleep) -> None:
        self.policy = policy
        self.retries = 0
        self._rng, self._clock, self._sleep = rng, clock, sleep
        self.started = clock()

    def reset(self) -> None:
        self.retries = 0
        self.started = self._clock()

    def delay(self, retry_after: float | None = None, *, count_elapsed: bool = True) -> float | None:
        """Seconds before the next attempt, or None to give up. ``count_elapsed=False``: the time spent so
        far does not count against ``max_elapsed`` (a provider batch may take hours), the wait still does."""
        policy = self.policy
        if policy.max_retries is not None and self.retries >= policy.max_retries:
            return None
        delay = backoff_delay(policy, self.retries, retry_after, self._rng)
        elapsed = self._clock() - self.started if count_elapsed else 0.0
        if elapsed + delay > policy.max_elapsed:
            return None
        return delay

    async def sleep(self, delay: float) -> None:
        self.retries += 1
        await self._sleep(delay)

    async def wait(self, retry_after: float | None = None, *, count_elapsed: bool = True) -> bool:
        """Wait before the next attempt; False (at once) when the policy forbids one."""
        delay = self.delay(retry_after, count_elapsed=count_elapsed)
        if delay is None:
            return False
        await self.sleep(delay)
        return True


async def retry(op: Callable[[], Awaitable[T]], backoff: Backoff,
                retry_on: tuple[type[BaseException], ...] = (Exception,),
                on_retry: Callable[[BaseException, float], object] | None = None) -> T:
    """``await op()``, again after each ``retry_on`` error for as long as ``backoff``'s policy allows; then
    that error is raised. ``on_retry(error, delay)`` runs before each wait."""
    while True:
        try:
            return await op()
        except retry_on as exc:
            delay = backoff.delay()
            if delay is None:
                raise
            if on_retry is not None:
                on_retry(exc, delay)
            await backoff.sleep(delay)
