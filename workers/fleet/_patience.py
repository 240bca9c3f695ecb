"""Riding out a Redis restart: one bounded retry loop for the worker's own Redis writes."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from redis.exceptions import RedisError

__all__ = ["patiently"]

T = TypeVar("T")


async def patiently(op: Callable[[], Awaitable[T]], patience: float) -> T:
    """Run a Redis operation, retrying through a restart (backing off from 50 ms to 1 s) for at most
    ``patience`` seconds; then its last error is raised."""
    loop = asyncio.get_running_loop()
    deadline, delay = loop.time() + patience, 0.05
    while True:
        try:
            return await op()
        except (RedisError, OSError):
            if loop.time() + delay > deadline:
                raise
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)
