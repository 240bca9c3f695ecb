"""A pool of pre-started sandboxes (agent running) and the per-host capacity they count against."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

import structlog

from ._errors import SandboxCapacityError

log = structlog.get_logger("toolfleet.sandbox")


class Capacity:
    """Counts containers a driver owns (in use + pooled) against the per-host cap."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self._cond = asyncio.Condition()

    def try_acquire(self) -> bool:
        if self.used >= self.limit:
            return False
        self.used += 1
        return True

    async def acquire(self, timeout: float) -> None:
        try:
            async with asyncio.timeout(timeout):
                async with self._cond:
                    await self._cond.wait_for(lambda: self.used < self.limit)
                    self.used += 1
        except TimeoutError as exc:
            raise SandboxCapacityError(
                f"No sandbox capacity on this host: {self.limit} sandboxes in use after waiting {timeout:g}s."
            ) from exc

    def release(self) -> None:
        self.used = max(0, self.used - 1)
        loop_cond = self._cond

        async def notify() -> None:
            async with loop_cond:
                loop_cond.notify()

        try:
            asyncio.get_running_loop().create_task(notify())
        except RuntimeError:
            pass  # no loop (shutdown): nobody can be waiting


class ContainerPool:
    def __init__(
        self,
        size: int,
        make: Callable[[], Awaitable[Any]],
        discard: Callable[[Any], Awaitable[None]],
        capacity: Capacity,
    ) -> None:
        self.size = size
        self._make = make
        self._discard = discard
        self._capacity = capacity
        self._ready: deque[Any] = deque()
        self._task: asyncio.Task[None] | None = None
        self._closed = False

    def __len__(self) -> int:
        return len(self._ready)

    async def acquire(self) -> Any | None:
        """A warm sandbox (its capacity slot moves to the caller), or None if the pool is empty."""
        while self._ready:
            env = self._ready.popleft()
            if all(not ch.closed for ch in env._channels.values()):
                self.refill()
                return env
            await self._discard(env)  # died while pooled
            self._capacity.release()
        self.refill()
        return None

    def refill(self) -> None:
        if self._closed or self.size <= 0 or (self._task is not None and not self._task.done()):
            return
        self._task = asyncio.get_running_loop().create_task(self._fill())

    async def wait_full(self, timeout: float) -> None:
        """Wait (bounded) until the pool holds ``size`` sandboxes (benchmarks, tests)."""
        async with asyncio.timeout(timeout):
            while len(self._ready) < self.size:
                self.refill()
                await asyncio.sleep(0.05)

    async def _fill(self) -> None:
        while not self._closed and len(self._ready) < self.size and self._capacity.try_acquire():
            try:
                env = await self._make()
            except asyncio.CancelledError:
                self._capacity.release()
                raise
            except Exception as exc:  # noqa: BLE001 - a failed refill must not kill the driver
                self._capacity.release()
                log.warning("sandbox.pool_refill_failed", error=str(exc))
                return
            if self._closed:
                await self._discard(env)
                self._capacity.release()
                return
            self._ready.append(env)

    async def aclose(self) -> None:
        self._closed = True
        if self._task is not None:
            self._task.cancel()
            try:
                await asyncio.wait_for(self._task, 30)
            except (asyncio.CancelledError, TimeoutError, Exception):  # noqa: BLE001 - closing anyway
                pass
        while self._ready:
            await self._discard(self._ready.popleft())
            self._capacity.release()
