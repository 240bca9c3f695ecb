"""Sandbox fixtures shared by ``tests/sandbox`` and ``tests/tools`` (imported by their conftests).

- ``sandbox_image`` (session): the default image exists — builds it with ``sandbox_images/build.sh``
  if missing (debootstrap: minutes, once; cached by tag afterwards).
- ``sandbox_factory``: ``await make("local" | "docker", **config)`` -> a live environment, destroyed
  at teardown (drivers closed, containers removed).
- ``env``: one sandbox per driver — the conformance suites are parametrised over local + docker.
"""

from __future__ import annotations

import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from workers.sandbox import AgentSandboxEnvironment, SandboxDriver, SandboxSpec, sandbox_config

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "sandbox_images" / "build.sh"
IMAGE = "toolfleet/sandbox:latest"
BASE_IMAGE = "toolfleet/debian-base:bookworm"

Factory = Callable[..., Awaitable[AgentSandboxEnvironment]]


def _docker_ok() -> bool:
    try:
        import docker

        docker.from_env(timeout=10).ping()
        return True
    except Exception:  # noqa: BLE001 - any failure means "no daemon"
        return False


@pytest.fixture(scope="session")
def sandbox_image() -> str:
    if not _docker_ok():
        pytest.skip("no reachable Docker daemon")
    # build.sh is idempotent: a cached image returns at once; a missing one is built here.
    done = subprocess.run(["bash", str(BUILD)], capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, f"sandbox_images/build.sh failed:\n{done.stderr[-4000:]}"
    return IMAGE


@pytest.fixture
async def sandbox_factory(request: pytest.FixtureRequest) -> AsyncIterator[Factory]:
    drivers: list[SandboxDriver] = []

    async def make(kind: str = "local", spec: SandboxSpec | None = None, **config: Any) -> AgentSandboxEnvironment:
        if kind == "docker":
            request.getfixturevalue("sandbox_image")
            config.setdefault("pool_size", 0)  # tests create what they use; the pool has its own test
        driver = sandbox_config({"type": kind, **config}).driver()
        drivers.append(driver)
        return await driver.create(spec)

    make.drivers = drivers  # type: ignore[attr-defined]
    yield make
    for driver in drivers:
        await driver.aclose()


DRIVERS = [pytest.param("local", id="local"), pytest.param("docker", id="docker", marks=pytest.mark.docker)]


@pytest.fixture(params=DRIVERS)
async def env(request: pytest.FixtureRequest, sandbox_factory: Factory) -> AgentSandboxEnvironment:
    return await sandbox_factory(request.param)
