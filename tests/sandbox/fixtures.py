"""Sandbox fixtures shared by ``tests/sandbox`` and ``tests/tools`` (imported by their conftests).

- ``sandbox_image`` (session, ``tests/support/prerequisites.py``): the default image exists (``toolfleet setup``).
- ``sandbox_factory``: ``await make("local" | "docker", **config)`` -> a live environment, destroyed
  at teardown (drivers closed, containers removed).
- ``env``: one sandbox per driver — the conformance suites are parametrised over local + docker.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from tests.support.prerequisites import BASE_IMAGE, IMAGE, sandbox_image  # noqa: F401  (re-exported fixture)
from workers.sandbox import AgentSandboxEnvironment, SandboxDriver, SandboxRequest, build_driver, sandbox_config

Factory = Callable[..., Awaitable[AgentSandboxEnvironment]]


@pytest.fixture
async def sandbox_factory(request: pytest.FixtureRequest) -> AsyncIterator[Factory]:
    drivers: list[SandboxDriver] = []

    async def make(kind: str = "local", spec: SandboxRequest | None = None, **config: Any) -> AgentSandboxEnvironment:
        if kind == "docker":
            request.getfixturevalue("sandbox_image")
            config.setdefault("pool_size", 0)  # tests create what they use; the pool has its own test
        driver = build_driver(sandbox_config({"type": kind, **config}))
        drivers.append(driver)
        return await driver.create(spec)

    make.drivers = drivers  # type: ignore[attr-defined]
    yield make
    for driver in drivers:
        await driver.aclose()


# The local driver's exec agent is a child process (slow); the docker driver's runs in a container (docker).
DRIVERS = [pytest.param("local", id="local", marks=pytest.mark.slow),
           pytest.param("docker", id="docker", marks=pytest.mark.docker)]


@pytest.fixture(params=DRIVERS)
async def env(request: pytest.FixtureRequest, sandbox_factory: Factory) -> AgentSandboxEnvironment:
    return await sandbox_factory(request.param)
