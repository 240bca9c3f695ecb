"""``--max-subprocesses``: at most N tool calls executing at once across the eval, whatever the backend.

A thin wrapper over the eval's dispatcher: each call of a stage waits for a slot, then goes to the
wrapped dispatcher as a one-call stage (the calls of a stage still run concurrently, up to the bound).
Cancelling the returned future cancels the wait or the call. Sandboxes (and the other seam methods) pass straight
through.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from orchestrator._wire import CallOutcome, SandboxSpec
from orchestrator.dispatch import Dispatcher, SampleRoute
from orchestrator.dispatch._dispatcher import Dispatch
from orchestrator.dispatch._preflight import SandboxNeeds
from orchestrator.util._sandbox import SandboxEnvironment


class BoundedDispatcher(Dispatcher):
    def __init__(self, inner: Dispatcher, max_calls: int) -> None:
        self.inner = inner
        self.name = inner.name
        self._slots = asyncio.Semaphore(max_calls)
        self.peak = 0  # most calls seen executing at once (for tests and diagnostics)
        self._running = 0

    def dispatch(self, stage: Sequence[Dispatch]) -> list[asyncio.Future[CallOutcome]]:
        return [asyncio.ensure_future(self._bounded(item)) for item in stage]

    async def _bounded(self, item: Dispatch) -> CallOutcome:
        async with self._slots:
            self._running += 1
            self.peak = max(self.peak, self._running)
            try:
                return await self.inner.run_one(item)
            finally:
                self._running -= 1

    async def open_sandbox(self, spec: SandboxSpec) -> SampleRoute:
        return await self.inner.open_sandbox(spec)

    async def close_sandbox(self, route: SampleRoute) -> None:
        await self.inner.close_sandbox(route)

    async def set_sandbox_network(self, route: SampleRoute, network_mode: str,
                                  allowed_hosts: Sequence[str] = ()) -> None:
        await self.inner.set_sandbox_network(route, network_mode, allowed_hosts)

    @property
    def sandboxes_here(self) -> bool:  # type: ignore[override]  # the wrapped dispatcher's, read through
        return self.inner.sandboxes_here

    async def preflight(self, needs: SandboxNeeds) -> None:
        await self.inner.preflight(needs)

    def local_sandbox(self, route: SampleRoute) -> SandboxEnvironment | None:
        return self.inner.local_sandbox(route)

    async def drain_spares(self) -> int:
        return await self.inner.drain_spares()

    async def aclose(self) -> None:
        await self.inner.aclose()
