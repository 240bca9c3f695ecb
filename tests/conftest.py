"""Shared fixtures. Heavy service fixtures live in ``tests/support``."""

from __future__ import annotations

import signal
from collections.abc import AsyncIterator

import hypothesis  # noqa: F401  (imported here, at a shallow stack: its pytest plugin otherwise imports it

# lazily in the terminal summary, where CPython 3.11.7's AST depth check fails on a deep stack)
import pytest

from orchestrator.dispatch import InProcessDispatcher, reset_active_dispatcher, set_active_dispatcher
from orchestrator.log import Transcript, bind_transcript
from tests.support.fleet_fixtures import fleet, own_redis, redis_server, session_worker  # noqa: F401  (fixtures)
from tests.support.prerequisites import _docker_marked_tests_have_the_image, sandbox_image  # noqa: F401  (fixtures)

# Fails a test that starts a process without a marker taking it out of the fast loop (see the module).
pytest_plugins = ("tests.support.spawn_guard",)


def pytest_configure(config: pytest.Config) -> None:
    # Tests play a user pressing Ctrl-C at a terminal. Started as a background job (`cmd &` without job
    # control, nohup), this process inherits SIGINT ignored, and so would every child it starts (an
    # ignored signal stays ignored across exec): the CLI then, correctly, never sees the interrupt.
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


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


@pytest.fixture
async def bound(dispatcher) -> AsyncIterator[Transcript]:
    """The active dispatcher and a fresh transcript, as a sample runner would bind them."""
    transcript = Transcript()
    token = set_active_dispatcher(dispatcher)
    try:
        with bind_transcript(transcript):
            yield transcript
    finally:
        reset_active_dispatcher(token)
