"""An eval's snapshots go when it ends (unless taken with ``keep=True``): on every host that may hold one."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import structlog

from orchestrator.dispatch import Dispatcher

_logger = structlog.get_logger("toolfleet.eval")
REMOVE_TIMEOUT_S = 120.0


@contextlib.asynccontextmanager
async def snapshots_removed(dispatcher: Dispatcher, eval_id: str, docker: bool) -> AsyncIterator[None]:
    """Around an eval's samples: afterwards (however they ended) remove the eval's snapshots.

    ``docker``: whether any sandbox of the eval may be a docker one (only those take snapshots)."""
    try:
        yield
    finally:
        if docker:
            removal = asyncio.ensure_future(dispatcher.remove_snapshots(eval_id))
            try:
                removed = await asyncio.wait_for(asyncio.shield(removal), REMOVE_TIMEOUT_S)
                if removed:
                    _logger.info("eval.snapshots_removed", eval_id=eval_id, snapshots=len(removed))
            except (Exception, asyncio.CancelledError) as exc:  # noqa: BLE001 - the hosts' TTL sweep remains
                _logger.warning("eval.snapshots_remove_failed", eval_id=eval_id, error=str(exc) or type(exc).__name__)


def may_use_docker(sandbox: dict[str, Any] | None, samples: list[Any]) -> bool:
    return (sandbox is not None and sandbox.get("type") == "docker") or any(s.sandbox is not None for s in samples)
