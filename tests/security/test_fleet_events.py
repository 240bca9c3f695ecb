"""Fleet events are signed; an unsigned one is advisory and never stops an eval.

Before: one forged ``rejected`` event PUBLISHed on ``toolfleet:fleet-events`` (no secret needed: anyone
who can write to Redis may PUBLISH) stopped any eval at once. Now workers sign their events with the
fleet secret; an orchestrator acts only on a signed one, and a worker holding another secret (whose
events it cannot verify) is found at preflight, from the key ids its heartbeat lists, and passed by
at placement. Real redis-server, real worker processes.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path

import pytest

from orchestrator.dispatch import CeleryDispatcher, CeleryDispatcherConfig
from tests.distributed._helpers import dispatch, local_spec, request, starts
from tests.support.waits import until
from workers.fleet import names

pytestmark = [pytest.mark.celery, pytest.mark.timeout(180)]


@pytest.fixture
async def dispatcher(own_redis):
    d = CeleryDispatcher(config=CeleryDispatcherConfig(broker_url=own_redis.url))
    yield d
    await d.aclose()


def _forged(kind: str, task_id: str, **fields: str) -> str:
    return json.dumps({"kind": kind, "host": "w-forged", "at": 0, "task_id": task_id, **fields})


async def test_forged_fleet_events_stop_nothing_and_send_nothing_again(fleet, dispatcher, tmp_path: Path) -> None:
    fleet.worker()
    log, gate = str(tmp_path / "log"), tmp_path / "gate"
    [fut] = dispatch(dispatcher, [request("gated", {"path": log, "label": "g", "gate": str(gate)})])
    await until(lambda: starts(log, "g") == 1, "the gated call started")
    [call_id] = list(dispatcher._calls.pending)
    redis = fleet.redis.client()
    forged = [_forged("rejected", call_id, reason="unauthenticated"),
              _forged("rejected", call_id, reason="stale: expired (issued 999 s ago, limit 900 s; or clock skew)",
                      age="0"),  # would be sent again if believed
              _forged("store_failed", call_id, error="OOM"),
              json.dumps({**json.loads(_forged("rejected", call_id, reason="unauthenticated")), "mac": "00000000:00"})]
    for event in forged:
        assert redis.publish(names.FLEET_EVENTS_CHANNEL, event) >= 1  # the dispatcher's listener heard it
    # Read once the call's record carries what they said (or it is gone: they stopped it, as they used to).
    await until(lambda: getattr(dispatcher._calls.pending.get(call_id), "condition", "gone") is not None,
                "the forged events were read")
    assert dispatcher.fleet_error is None and not fut.done() and dispatcher._calls.requeued == 0
    gate.write_text("open")
    outcome = await asyncio.wait_for(fut, 30)
    assert outcome.result == "g" and outcome.fatal is None, outcome
    assert starts(log, "g") == 1


async def test_a_worker_with_another_secret_is_passed_by_at_placement(fleet, dispatcher) -> None:
    ours = fleet.worker(slots=8)
    fleet.worker(slots=8, secret="another-teams-secret-" + uuid.uuid4().hex)
    routes = [await dispatcher.open_sandbox(local_spec(f"s{i}")) for i in range(6)]
    try:
        assert {names.host_of_queue(r.queue) for r in routes} == {ours.host}
    finally:
        for route in routes:
            await dispatcher.close_sandbox(route)
