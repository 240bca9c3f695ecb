"""Removing an eval's snapshots where they live: a snapshot-removal call to each host's queue at once."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Sequence

from orchestrator._wire import CallRequest
from orchestrator.tool._registry import tool_ref

from ._context import set_route
from ._dispatcher import Dispatch, Dispatcher, SampleRoute

__all__ = ["remove_snapshots_on"]


async def remove_snapshots_on(dispatcher: Dispatcher, eval_id: str, queues: Sequence[str | None]) -> list[str]:
    """Send the snapshot-removal call to each queue (None: this process) at once; collect what went."""
    from workers.snapshots import SNAPSHOT_REMOVE_TOOL, snapshot_remove

    async def remove_on(queue: str | None) -> list[str]:
        instance = snapshot_remove()
        request = CallRequest(call_id=uuid.uuid4().hex, function=SNAPSHOT_REMOVE_TOOL,
                              tool=tool_ref(instance), arguments={"eval_id": eval_id})
        set_route(SampleRoute(queue=queue))  # this task's own context: the call goes to that host's queue
        outcome = await dispatcher.run_one(Dispatch(request, instance))
        if outcome.error is None and outcome.fatal is None and outcome.result:
            return list(json.loads(str(outcome.result)))
        return []

    removed = await asyncio.gather(*(asyncio.ensure_future(remove_on(q)) for q in queues))
    return [snapshot for ids in removed for snapshot in ids]
