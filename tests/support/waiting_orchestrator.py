"""An orchestrator in a process of its own whose placements wait on a full fleet, for a test to SIGKILL:
``python -P -m tests.support.waiting_orchestrator BROKER_URL N`` (N samples, their demand named by a 1 s TTL)."""

from __future__ import annotations

import asyncio
import sys

from orchestrator._wire import SandboxSpec
from orchestrator.dispatch.celery import CeleryDispatcher, CeleryDispatcherConfig

WAIT_S = 300.0  # bounded: the test kills this process long before


async def main(broker_url: str, samples: int) -> None:
    d = CeleryDispatcher(config=CeleryDispatcherConfig(broker_url=broker_url, placement_wait=WAIT_S, demand_ttl=1.0))
    specs = [SandboxSpec(eval_id="e-killed", sample_id=f"waits{i}", config={"type": "local"}) for i in range(samples)]
    await asyncio.wait_for(asyncio.gather(*(d.open_sandbox(s) for s in specs)), WAIT_S)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2])))
