"""Distributed faults involving real Docker sandboxes: a sandbox container killed under a sample."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from orchestrator._wire import SandboxSpec
from orchestrator.dispatch import CeleryDispatcher, CeleryDispatcherConfig

from ._helpers import BOUND, bash_request, one

pytestmark = [pytest.mark.celery, pytest.mark.docker, pytest.mark.timeout(300)]

IMAGE = "toolfleet/sandbox:latest"


@pytest.fixture
def docker_client(sandbox_image):  # the fixture provides (or fails loudly on) the image
    import docker

    client = docker.from_env(timeout=30)
    yield client
    client.close()


async def test_a_killed_sandbox_container_is_sandbox_unavailable_and_others_keep_running(fleet, docker_client) -> None:
    fleet.worker(slots=4)
    d = CeleryDispatcher(config=CeleryDispatcherConfig(broker_url=fleet.redis.url, lost_grace=2.0, watch_interval=0.25))
    config = {"type": "docker", "image": IMAGE, "pool_size": 0}
    eval_id = f"e-docker-fault-{uuid.uuid4().hex[:8]}"  # this run's containers only, whatever an earlier one left
    routes = []
    try:
        victim = await d.open_sandbox(SandboxSpec(eval_id=eval_id, sample_id="victim", config=config))
        routes.append(victim)
        other = await d.open_sandbox(SandboxSpec(eval_id=eval_id, sample_id="other", config=config))
        routes.append(other)
        assert (await one(d, bash_request("echo alive", victim.sandbox), victim)).result.strip() == "alive"
        [container] = await asyncio.to_thread(
            docker_client.containers.list, filters={
                "label": [f"toolfleet.eval_id={eval_id}", "toolfleet.sample_id=victim"]})
        await asyncio.to_thread(container.kill)
        lost = await one(d, bash_request("echo again", victim.sandbox), victim, bound=BOUND)
        assert lost.error is not None and lost.error.type == "sandbox_unavailable", lost
        assert (await one(d, bash_request("echo fine", other.sandbox), other)).result.strip() == "fine"
        while routes:
            await d.close_sandbox(routes.pop())
        assert await asyncio.to_thread(_containers, docker_client, eval_id) == []  # both removed, the killed one too
    finally:
        for route in routes:
            await d.close_sandbox(route)
        await d.aclose()
        for leftover in await asyncio.to_thread(_containers, docker_client, eval_id):
            await asyncio.to_thread(leftover.remove, force=True)


def _containers(client, eval_id: str) -> list:  # type: ignore[no-untyped-def]
    return client.containers.list(all=True, filters={"label": f"toolfleet.eval_id={eval_id}"})
