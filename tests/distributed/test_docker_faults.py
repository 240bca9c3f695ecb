"""Distributed faults involving real Docker sandboxes: a sandbox container killed under a sample."""

from __future__ import annotations

import asyncio

import pytest

from orchestrator._wire import SandboxSpec
from orchestrator.dispatch import CeleryDispatcher, CeleryDispatcherConfig

from ._helpers import BOUND, bash_request, one

pytestmark = [pytest.mark.celery, pytest.mark.docker, pytest.mark.timeout(300)]

IMAGE = "toolfleet/sandbox:latest"


@pytest.fixture
def docker_client(sandbox_image):  # noqa: ANN001 - the fixture provides (or fails loudly on) the image
    import docker

    client = docker.from_env(timeout=30)
    yield client
    client.close()


async def test_a_killed_sandbox_container_is_sandbox_unavailable_and_others_keep_running(fleet, docker_client) -> None:
    fleet.worker(slots=4)
    d = CeleryDispatcher(config=CeleryDispatcherConfig(broker_url=fleet.redis.url, lost_grace=2.0, watch_interval=0.25))
    config = {"type": "docker", "image": IMAGE, "pool_size": 0}
    try:
        victim = await d.open_sandbox(SandboxSpec(eval_id="e-docker-fault", sample_id="victim", config=config))
        other = await d.open_sandbox(SandboxSpec(eval_id="e-docker-fault", sample_id="other", config=config))
        assert (await one(d, bash_request("echo alive", victim.sandbox), victim)).result.strip() == "alive"
        [container] = await asyncio.to_thread(
            docker_client.containers.list, filters={"label": ["toolfleet.eval_id=e-docker-fault", "toolfleet.sample_id=victim"]})
        await asyncio.to_thread(container.kill)
        lost = await one(d, bash_request("echo again", victim.sandbox), victim, bound=BOUND)
        assert lost.error is not None and lost.error.type == "sandbox_unavailable", lost
        assert (await one(d, bash_request("echo fine", other.sandbox), other)).result.strip() == "fine"
        await d.close_sandbox(victim)
        await d.close_sandbox(other)
    finally:
        await d.aclose()
