"""The pytest fixtures over ``tests/support/fleet.py`` (kept apart so the benchmarks import that without pytest)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.fleet import SESSION_TOOL_MODULES, Fleet, RedisServer, WorkerProcess, ensure_fleet_secret
from tests.support.prerequisites import require_redis_server


@pytest.fixture(scope="session")
def fleet_secret() -> str:
    return ensure_fleet_secret()


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    ensure_fleet_secret()  # (not a fixture argument: tests/conftest.py re-exports only the fixtures it names)
    require_redis_server()  # missing: one line naming the fix, no traceback
    server = RedisServer().start()
    yield server
    server.cleanup()


@pytest.fixture(scope="session")
def session_worker(redis_server: RedisServer) -> Iterator[WorkerProcess]:
    """One long-lived worker for the tool-execution suite over the Celery dispatcher."""
    # A worker looks tools up only in what it imported at start (never what a message names): the
    # session worker imports every test module whose tools the suites send over Celery.
    worker = WorkerProcess(redis_server.url, concurrency=32, imports=SESSION_TOOL_MODULES).start()
    yield worker
    worker.cleanup()


@pytest.fixture
def own_redis() -> Iterator[RedisServer]:
    """A private Redis for tests that restart or break it."""
    ensure_fleet_secret()
    require_redis_server()
    server = RedisServer().start()
    yield server
    server.cleanup()


@pytest.fixture
def fleet(own_redis: RedisServer) -> Iterator[Fleet]:
    f = Fleet(own_redis)
    yield f
    f.cleanup()
