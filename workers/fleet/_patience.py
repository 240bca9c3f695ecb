"""Riding out a Redis restart: one bounded retry loop for the worker's own Redis writes."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import TypeVar

from redis.exceptions import RedisError

from orchestrator.util._retry import Backoff, RetryPolicy, retry

__all__ = ["patiently"]

T = TypeVar("T")

# 50 ms doubling to 1 s, for as long as the caller's patience.
REDIS_RESTART = RetryPolicy(max_retries=None, initial_delay=0.05, multiplier=2.0, max_delay=1.0, jitter=0.0)


@functools.lru_cache(maxsize=16)
def _within(patience: float) -> RetryPolicy:
    return REDIS_RESTART.model_copy(update={"max_elapsed": patience})  # 10 us: once per patience, not per write


async def patiently(op: Callable[[], Awaitable[T]], patience: float) -> T:
    """Run a Redis operation, retrying through a restart (backing off from 50 ms to 1 s) for at most
    ``patience`` seconds; then its last error is raised."""
    return await retry(op, Backoff(_within(patience)), (RedisError, OSError))
