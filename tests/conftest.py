"""Shared fixtures. Heavy service fixtures live in ``tests/support``."""

from __future__ import annotations

import pytest

from orchestrator.dispatch import InProcessDispatcher


@pytest.fixture(params=["inprocess"])
async def dispatcher(request):
    """Every dispatcher implementation: the tool-execution suite runs against each."""
    if request.param == "inprocess":
        d = InProcessDispatcher()
    else:  # pragma: no cover - extended by the distributed fixtures
        raise AssertionError(request.param)
    yield d
    await d.aclose()
