"""``fork(snapshot, n)``: open ``n`` sandboxes from a snapshot, placed on the host that holds it.

Each fork is an independent sandbox (its own container, started from the snapshot's image, with the
snapshot's files on the same paths, tmpfs-backed ones included), opened through the active dispatcher
like a sample's: in this process in embedded mode, on the snapshot's worker host in distributed mode.
They are closed when the block ends. Typical uses: branch N rollouts from one prepared state
(``async with fork(snap, 4) as boxes: ...``), or try something and fall back to the checkpoint.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from orchestrator._wire import SandboxSpec
from orchestrator.dispatch import Dispatcher, SampleRoute, active_dispatcher, current_route
from orchestrator.scorer._sandbox_proxy import DispatchedSandbox
from orchestrator.util._sandbox import SandboxEnvironment
from orchestrator.util._snapshot import Snapshot

CLOSE_TIMEOUT_S = 60.0
MAX_FORKS = 256


@contextlib.asynccontextmanager
async def fork(snapshot: Snapshot, n: int = 1) -> AsyncIterator[list[SandboxEnvironment]]:
    """``n`` sandboxes opened from ``snapshot`` (closed when the block ends)."""
    if not isinstance(snapshot, Snapshot):
        raise TypeError(f"fork() takes a Snapshot (from `await sandbox().snapshot()`), not {type(snapshot).__name__}.")
    if not 1 <= n <= MAX_FORKS:
        raise ValueError(f"fork() opens 1 to {MAX_FORKS} sandboxes, not {n}.")
    dispatcher = active_dispatcher()
    base = current_route().sample_id or snapshot.sample_id or "fork"
    config = snapshot.sandbox_config(forks=n)
    specs = [SandboxSpec(eval_id=snapshot.eval_id or None, sample_id=f"{base}~fork{i + 1}", config=config)
             for i in range(n)]
    results = await asyncio.gather(*(dispatcher.open_sandbox(spec) for spec in specs), return_exceptions=True)
    routes = [r for r in results if isinstance(r, SampleRoute)]
    try:
        failed = next((r for r in results if isinstance(r, BaseException)), None)
        if failed is not None:
            raise failed
        yield [_sandbox_for(dispatcher, route) for route in routes]
    finally:
        closing = asyncio.ensure_future(asyncio.gather(*(dispatcher.close_sandbox(r) for r in routes),
                                                       return_exceptions=True))
        with contextlib.suppress(Exception, asyncio.CancelledError):  # bounded, best effort: reapers remain
            await asyncio.wait_for(asyncio.shield(closing), CLOSE_TIMEOUT_S)


def _sandbox_for(dispatcher: Dispatcher, route: SampleRoute) -> SandboxEnvironment:
    """The fork itself when it lives in this process (embedded), else a proxy through the dispatcher."""
    return dispatcher.local_sandbox(route) or DispatchedSandbox(route=route)
