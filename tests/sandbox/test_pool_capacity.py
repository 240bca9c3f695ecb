"""Host capacity and bounded warm pools with real Docker: every container held (sample or spare)
counts against one per-host limit; spares are bounded over all pools (LRU), expire when idle, and
are only kept for the images the host pools unless a config asks."""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import AsyncIterator

import pytest

from tests.support.waits import until
from workers.sandbox import DEFAULT_IMAGE, SandboxCapacityError, SandboxRequest, build_driver, sandbox_config
from workers.sandbox.docker import HostSandboxes, host_sandboxes, labels

OWNER, OWNER_PID = labels.OWNER, labels.OWNER_PID

pytestmark = [pytest.mark.docker, pytest.mark.timeout(300)]


def _containers(host: HostSandboxes | None = None) -> set[str]:
    """Containers of this test process (of ``host`` only, by its identity, if given), as Docker lists them."""
    filters = ["--filter", f"label={OWNER_PID}={os.getpid()}"]
    if host is not None:
        filters += ["--filter", f"label={OWNER}={host.owner}"]
    out = subprocess.run(["docker", "ps", "-aq", "--no-trunc", *filters],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    return set(out.split())


async def _until(predicate, what: str, timeout: float = 60.0) -> None:  # type: ignore[no-untyped-def]
    await until(predicate, what, timeout)


@pytest.fixture
async def host(sandbox_image: str) -> AsyncIterator[HostSandboxes]:
    """A host of this test's own: its count of containers starts at 0 whatever ran before, and its
    containers carry its own identity (as a worker's host, built in ``workers/cli.py``, does; a test's
    ``configure`` must pass it on, or it falls back to the machine's name)."""
    h = HostSandboxes(owner=f"test-pool-{uuid.uuid4().hex[:8]}")
    drivers: list = []
    h.drivers = drivers  # type: ignore[attr-defined]
    try:
        yield h
    finally:
        for d in drivers:
            await d.aclose()
        for leftover in _containers(h):  # only if a driver failed to remove its own
            # teardown, nothing else runs
            subprocess.run(["docker", "rm", "-f", leftover], capture_output=True, timeout=60, check=False)


@pytest.fixture
async def process_host(sandbox_image: str) -> AsyncIterator[HostSandboxes]:
    """The process-wide host embedded mode uses, with its settings restored after the test."""
    h = host_sandboxes()
    saved = (h.limit, h.max_spares, h.idle_ttl, h.pooled_images)
    yield h
    h.configure(*saved)


def _driver(host: HostSandboxes, **config):  # type: ignore[no-untyped-def]
    d = build_driver(sandbox_config({"type": "docker", **config}), host=host)
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


async def test_forks_go_beyond_the_cap_up_to_its_headroom_and_no_further() -> None:
    """A fork's sample holds a slot and waits for it (docs/faults.md): forks fill the host past its cap, to
    ``FORK_HEADROOM`` times it; past that they wait (bounded), and new samples see the host full meanwhile."""
    from workers.sandbox.docker._pool import FORK_HEADROOM

    h = HostSandboxes(limit=2)
    await h.acquire(2, 0.5, 2)  # two samples hold both slots
    await h.acquire(2, 0.5, 2, fork=True)  # each forks once: counted beyond the cap, not waited for
    assert h.used == 4 == 2 * FORK_HEADROOM
    with pytest.raises(SandboxCapacityError, match="4 sandboxes in use"):
        await h.acquire(2, 0.2, 1, fork=True)  # a message asking for more forks only waits (then fails)
    with pytest.raises(SandboxCapacityError):
        await h.acquire(2, 0.2, 1)  # a new sample: the host is full
    h.release(2)
    await h.acquire(2, 0.5, 1, fork=True)
    assert h.used == 3


async def test_spares_budget_is_shared_least_recently_used_pool_first(host: HostSandboxes) -> None:
    host.configure(limit=8, max_spares=2, idle_ttl=600, owner=host.owner)
    a = _driver(host, pool_size=2, pids_limit=500)
    b = _driver(host, pool_size=2, pids_limit=501)  # another config (another image, in life)
    await a.start()
    await a.pool.wait_full(120)
    await b.start()  # b is the most recently used pool now: a's spares make room for b's
    await b.pool.wait_full(120)
    assert (len(a.pool), len(b.pool)) == (0, 2)
    assert host.spares == 2 and len(_containers(host)) == host.used == 2

    env = await a.create(SandboxRequest(sample_id="s-a"))  # a is used again: b's spares are now the older
    await _until(lambda: len(a.pool) == 2 and a.pool.held == 2, "a refilled")
    assert len(b.pool) == 0
    assert host.used == 3 and len(_containers(host)) == 3  # one sample + two spares
    await a.destroy(env)
    assert host.used == 2


async def test_idle_spares_expire(host: HostSandboxes) -> None:
    host.configure(limit=8, max_spares=2, idle_ttl=1.0, owner=host.owner)
    d = _driver(host, pool_size=2)
    await d.start()
    await _until(lambda: len(d.pool) >= 1, "a spare ready")
    await _until(lambda: host.used == 0 and len(d.pool) == 0, "spares expired", timeout=120)
    assert _containers(host) == set()
    # Not replaced until the pool is used again: nothing is left that would make one (no refill
    # running, the expiry watch over), and still no spare.
    await _until(lambda: d.pool._task is not None and d.pool._task.done() and d.pool._expiry is not None
                 and d.pool._expiry.done(), "the pool's refill and expiry to be over")
    assert len(d.pool) == 0 and d.pool.held == 0 and host.used == 0


async def test_every_container_counts_against_the_host_limit(host: HostSandboxes) -> None:
    host.configure(limit=2, max_spares=2, idle_ttl=600, owner=host.owner)
    pooled = _driver(host, pool_size=2, acquire_timeout=1)
    other = _driver(host, pool_size=0, pids_limit=502, acquire_timeout=1)  # another image, not pooled
    await pooled.start()
    await pooled.pool.wait_full(120)
    assert host.used == 2 and len(_containers(host)) == 2

    # A sample of another config finds the host full of spares: one spare makes way (no waiting).
    first = await other.create(SandboxRequest(sample_id="s-1"))
    assert host.used == 2 and len(pooled.pool) == 1 and len(_containers(host)) == 2
    second = await pooled.create(SandboxRequest(sample_id="s-2"))  # takes the last spare, and asks for a refill
    await _until(lambda: pooled.pool._task is not None and pooled.pool._task.done(), "the refill to give up")
    assert host.used == 2 and pooled.pool.held == 0 and len(_containers(host)) == 2  # there was no room for one
    with pytest.raises(SandboxCapacityError):  # two samples hold the host: a third waits, then fails
        await other.create(SandboxRequest(sample_id="s-3"))
    await other.destroy(first)
    await pooled.destroy(second)
    assert host.used == 0 or host.used == pooled.pool.held


async def test_an_embedded_eval_leaves_no_idle_container(tmp_path, process_host: HostSandboxes,
                                                         sandbox_image: str) -> None:  # type: ignore[no-untyped-def]
    from orchestrator.dataset import Sample
    from orchestrator.eval import Task, eval_async
    from orchestrator.scorer import includes

    host = process_host
    host.configure(max_spares=2, pooled_images=[sandbox_image])  # the eval's image is pooled: spares are made
    task = Task(dataset=[Sample(input="hi", target="hi", id=i) for i in range(3)], scorer=includes(),
                sandbox={"type": "docker", "image": sandbox_image})
    [log] = await eval_async(task, "scripted", log_dir=tmp_path)
    assert log.status == "success", [s.error for s in log.samples]
    assert _containers() == set() and host.spares == 0
