"""Bounded waits on a state: what tests use instead of a fixed sleep before an assertion."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from typing import Any

__all__ = ["until"]


async def until(predicate: Callable[[], Any], what: str, timeout: float = 30.0, interval: float = 0.05) -> Any:
    """Poll ``predicate`` (plain or async) until it returns something truthy, and return that; after
    ``timeout`` seconds raise ``TimeoutError`` naming ``what`` was awaited."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        value = predicate()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if loop.time() >= deadline:
            raise TimeoutError(f"timed out after {timeout:g} s waiting for {what}")
        await asyncio.sleep(interval)
