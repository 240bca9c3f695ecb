"""Latency figures: percentiles, and how late this process's event loop runs while a measurement does."""

from __future__ import annotations

import asyncio
import time


class LoopLag:
    """Samples event-loop lag: how late a 10 ms sleep wakes up."""

    def __init__(self, interval: float = 0.01) -> None:
        self.interval = interval
        self.samples: list[float] = []
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        while True:
            start = time.perf_counter()
            await asyncio.sleep(self.interval)
            self.samples.append(time.perf_counter() - start - self.interval)

    async def stop(self) -> float:
        """Stop sampling; the 99th percentile of the lag, in ms."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        return percentile_ms(self.samples, 0.99) if self.samples else 0.0


def percentile_ms(values: list[float], q: float) -> float:
    """The ``q`` quantile of ``values`` (seconds; nearest rank, no interpolation), in ms to 3 places."""
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000, 3)
