"""Shared fixtures. Heavy service fixtures live in ``tests/support``."""

from __future__ import annotations

import pytest

from orchestrator.dispatch import InProcessDispatcher
from tests.support.fleet import own_redis, fleet, redis_server, session_worker  # noqa: F401  (fixtures)


@pytest.fixture(params=["inprocess", pytest.param("celery", marks=pytest.mark.celery)])
async def dispatcher(request):
    """Every dispatcher implementation: the tool-execution suite runs against each."""
    if request.param == "inprocess":
        d = InProcessDispatcher()
    else:  # real redis-server and a real `toolfleet worker` process (session-scoped, tests/support/fleet.py)
        from orchestrator.dispatch import CeleryDispatcher

        worker = request.getfixturevalue("session_worker")
        d = CeleryDispatcher(worker.broker_url)
    yield d
    await d.aclose()
