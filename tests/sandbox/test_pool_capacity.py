"""Host capacity and bounded warm pools with real Docker: every container held (sample or spare)
counts against one per-host limit; spares are bounded over all pools (LRU), expire when idle, and
are only kept for the images the host pools unless a config asks."""

from __future__ import annotations

import asyncio
import os
import subprocess
from collections.abc import AsyncIterator

import pytest

from workers.sandbox import build_driver, DEFAULT_IMAGE, SandboxCapacityError, SandboxRequest, sandbox_config
from workers.sandbox.docker import HostSandboxes, host_sandboxes

pytestmark = [pytest.mark.docker, pytest.mark.timeout(300)]


def _containers() -> set[str]:
    """Containers of this test process, as Docker lists them."""
    out = subprocess.run(["docker", "ps", "-aq", "--no-trunc", "--filter", f"label=toolfleet.owner_pid={os.getpid()}"],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    return set(out.split())


async def _until(predicate, what: str, timeout: float = 60.0) -> None:  # type: ignore[no-untyped-def]
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.05)


@pytest.fixture
async def host(sandbox_image: str) -> AsyncIterator[HostSandboxes]:
    h = host_sandboxes()
    saved = (h.limit, h.max_spares, h.idle_ttl, h.pooled_images)
    drivers: list = []
    h.drivers = drivers  # type: ignore[attr-defined]
    yield h
    for d in drivers:
        await d.aclose()
    h.configure(*saved)


def _driver(host: HostSandboxes, **config):  # type: ignore[no-untyped-def]
    d = build_driver(sandbox_config({"type": "docker", **config}))
    host.drivers.append(d)  # type: ignore[attr-defined]
    return d


@pytest.mark.parametrize(("image", "asked", "expected"), [
    (DEFAULT_IMAGE, None, 2),  # the default image is pooled
    ("toolfleet/swe-mini-calc:latest", None, 0),  # a per-sample image is not, unless asked
    ("toolfleet/swe-mini-calc:latest", 1, 1),
    (DEFAULT_IMAGE, 0, 0),
    (DEFAULT_IMAGE, 5, 2),  # never beyond the host's spares budget
])
def test_pool_size_for(image: str, asked: int | None, expected: int) -> None:
    h = HostSandboxes()
    assert h.pool_size_for(image, asked) == expected


def test_configured_pool_images() -> None:
    h = HostSandboxes()
    h.configure(max_spares=4, pooled_images=["toolfleet/swe-*"])
    assert h.pool_size_for("toolfleet/swe-mini-calc:latest", None) == 2
    assert h.pool_size_for(DEFAULT_IMAGE, None) == 0


async def test_spares_budget_is_shared_least_recently_used_pool_first(host: HostSandboxes) -> None:
    host.configure(limit=8, max_spares=2, idle_ttl=600)
    a = _driver(host, pool_size=2, pids_limit=500)
    b = _driver(host, pool_size=2, pids_limit=501)  # another config (another image, in life)
    await a.start()
    await a.pool.wait_full(120)
    await b.start()  # b is the most recently used pool now: a's spares make room for b's
    await b.pool.wait_full(120)
    assert (len(a.pool), len(b.pool)) == (0, 2)
    assert host.spares == 2 and len(_containers()) == host.used == 2

    env = await a.create(SandboxRequest(sample_id="s-a"))  # a is used again: b's spares are now the older
    await _until(lambda: len(a.pool) == 2 and a.pool.held == 2, "a refilled")
    assert len(b.pool) == 0
    assert host.used == 3 and len(_containers()) == 3  # one sample + two spares
    await a.destroy(env)
    assert host.used == 2


async def test_idle_spares_expire(host: HostSandboxes) -> None:
    host.configure(limit=8, max_spares=2, idle_ttl=1.0)
    d = _driver(host, pool_size=2)
    await d.start()
    await _until(lambda: len(d.pool) >= 1, "a spare ready")
    await _until(lambda: host.used == 0 and len(d.pool) == 0, "spares expired", timeout=120)
    assert _containers() == set()
    await asyncio.sleep(0.5)
    assert len(d.pool) == 0 and host.used == 0  # not replaced until the pool is used again


async def test_every_container_counts_against_the_host_limit(host: HostSandboxes) -> None:
    host.configure(limit=2, max_spares=2, idle_ttl=600)
    pooled = _driver(host, pool_size=2, acquire_timeout=1)
    other = _driver(host, pool_size=0, pids_limit=502, acquire_timeout=1)  # another image, not pooled
    await pooled.start()
    await pooled.pool.wait_full(120)
    assert host.used == 2 and len(_containers()) == 2

    # A sample of another config finds the host full of spares: one spare makes way (no waiting).
    first = await other.create(SandboxRequest(sample_id="s-1"))
    assert host.used == 2 and len(pooled.pool) == 1 and len(_containers()) == 2
    second = await pooled.create(SandboxRequest(sample_id="s-2"))  # takes the last spare
    await asyncio.sleep(0.3)  # a refill would start now: there is no room for one
    assert host.used == 2 and pooled.pool.held == 0 and len(_containers()) == 2
    with pytest.raises(SandboxCapacityError):  # two samples hold the host: a third waits, then fails
        await other.create(SandboxRequest(sample_id="s-3"))
    await other.destroy(first)
    await pooled.destroy(second)
    assert host.used == 0 or host.used == pooled.pool.held


async def test_an_embedded_eval_leaves_no_idle_container(tmp_path, host: HostSandboxes, sandbox_image: str) -> None:  # type: ignore[no-untyped-def]
    from orchestrator.dataset import Sample
    from orchestrator.eval import Task, eval_async
    from orchestrator.scorer import includes

    host.configure(max_spares=2, pooled_images=[sandbox_image])  # the eval's image is pooled: spares are made
    task = Task(dataset=[Sample(input="hi", target="hi", id=i) for i in range(3)], scorer=includes(),
                sandbox={"type": "docker", "image": sandbox_image})
    [log] = await eval_async(task, "scripted", log_dir=tmp_path)
    assert log.status == "success", [s.error for s in log.samples]
    assert _containers() == set() and host.spares == 0
