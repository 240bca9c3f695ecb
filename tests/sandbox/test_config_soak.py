"""Resources stay flat in the number of distinct sandbox configs: a worker's ``SandboxHost``
keeps a bounded number of idle drivers, and every docker driver shares its Docker Engine's client,
threads, host socket and reaper. Soaks through the real ``SandboxHost`` (local: 2,000 configs; docker:
a few dozen, every kind of field varied) measure this process's threads, fds and RSS."""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

import pytest

from orchestrator.util._sandbox_config import LocalSandboxConfig
from orchestrator.util._sandbox_parse import sandbox_config
from tests.benchmarks.configs import _DOCKER_VARIANTS, Usage, _containers_of, distinct_configs, soak
from workers.sandbox import SandboxRequest, build_driver
from workers.sandbox._driver import SandboxDriver
from workers.sandbox._driver_cache import DriverCache
from workers.sandbox.docker import HostSandboxes
from workers.sandbox_host import SandboxHost

# --- the configs a soak uses (pure) -------------------------------------------------------------


@pytest.mark.parametrize("kind", ["local", "docker"])
def test_soak_configs_are_valid_and_each_makes_its_own_driver(kind: str) -> None:
    configs = distinct_configs(kind, 3 * len(_DOCKER_VARIANTS))
    keys = {sandbox_config(c).model_dump_json() for c in configs}  # the key SandboxHost builds drivers by
    assert len(keys) == len(configs)


def test_soak_configs_vary_every_field_that_makes_a_driver() -> None:
    varied = {field for c in distinct_configs("docker", len(_DOCKER_VARIANTS)) for field in c} - {"type"}
    pool_key = {"image", "user", "working_dir", "environment", "network_mode", "cap_drop", "security_opt",
                "pids_limit", "mem_limit", "memswap_limit", "cpus", "init", "read_only", "disk_limit"}
    assert pool_key | {"services", "pool_size", "api_threads", "fast_path", "direct_channel", "reap_interval"} <= varied


# --- the driver cache (pure logic, a recording driver) -----------------------------------------


class _RecordingDriver(SandboxDriver):
    def __init__(self, config: LocalSandboxConfig) -> None:
        self.config = config
        self.closed = False

    async def create(self, spec: SandboxRequest | None = None):  # type: ignore[no-untyped-def]
        raise NotImplementedError

    async def destroy(self, env) -> None:  # type: ignore[no-untyped-def]
        raise NotImplementedError

    async def reap(self) -> int:
        return 0

    async def aclose(self) -> None:
        self.closed = True


def _config(i: int) -> LocalSandboxConfig:
    return LocalSandboxConfig(output_cap=1000 + i)


async def test_idle_drivers_are_bounded_least_recently_used_first() -> None:
    cache = DriverCache(_RecordingDriver, max_idle=2, idle_ttl=lambda: 3600.0)
    drivers = [await cache.take(_config(i)) for i in range(4)]
    assert len(cache) == 4 and cache.idle == 0  # all in use: none is closed, whatever the bound
    for d in drivers:
        await cache.give_back(d)
    assert [d.closed for d in drivers] == [True, True, False, False]  # the two given back first went
    assert len(cache) == 2
    assert await cache.take(_config(3)) is drivers[3]  # an idle one is reused, not rebuilt
    again = await cache.take(_config(0))
    assert again is not drivers[0] and not again.closed  # a closed one is rebuilt on demand


async def test_a_driver_shared_by_two_sandboxes_stays_until_both_are_gone() -> None:
    cache = DriverCache(_RecordingDriver, max_idle=0, idle_ttl=lambda: 3600.0)
    a = await cache.take(_config(1))
    assert await cache.take(_config(1)) is a
    await cache.give_back(a)
    assert not a.closed
    await cache.give_back(a)
    assert a.closed and len(cache) == 0


async def test_idle_drivers_expire_after_the_hosts_idle_time() -> None:
    ttl = [3600.0]
    cache = DriverCache(_RecordingDriver, max_idle=8, idle_ttl=lambda: ttl[0])
    old = await cache.take(_config(1))
    await cache.give_back(old)
    assert not old.closed
    ttl[0] = 0.0  # the host's idle time is read at each sweep
    fresh = await cache.take(_config(2))
    assert old.closed and not fresh.closed


async def test_drop_closes_matching_drivers_in_use_or_not() -> None:
    cache = DriverCache(_RecordingDriver, max_idle=8, idle_ttl=lambda: 3600.0)
    a, b = await cache.take(_config(1)), await cache.take(_config(2))
    await cache.drop(lambda d: d is not a)
    assert a.closed and not b.closed and len(cache) == 1
    await cache.close_all()
    assert b.closed and len(cache) == 0


# --- soaks through the real SandboxHost --------------------------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(1200)
async def test_2000_local_sandboxes_of_distinct_configs_leave_resources_flat(tmp_path) -> None:
    host = SandboxHost(HostSandboxes(owner=f"test-soak-{os.getpid()}"), max_idle_drivers=4)
    try:
        warm = await soak(host, distinct_configs("local", 20, start=10**6), concurrency=4)
        start = Usage.now()
        result = await soak(host, distinct_configs("local", 2000), concurrency=4)
        end = Usage.now()
        assert result["errors"] == warm["errors"] == 0, result["first_error"] or warm["first_error"]
        assert result["sandboxes"] == 2000
        assert len(host.drivers) <= 4 and host.drivers.idle == len(host.drivers)
        # asyncio's default executor starts its threads lazily, up to its bound, whenever a burst first needs
        # them: growth within that bound is not a leak; a thread per config would be 2,000.
        assert end.threads - start.threads <= min(32, (os.cpu_count() or 1) + 4) + 2, (start, end)
        assert end.fds - start.fds <= 4, (start, end)
        assert end.rss_mb - start.rss_mb <= 32, (start, end)
        assert host.registry.live_ids() == []
    finally:
        await host.close_all()
    assert len(host.drivers) == 0


@pytest.mark.docker
@pytest.mark.timeout(900)
async def test_docker_sandboxes_of_distinct_configs_share_one_engine_and_leave_resources_flat(sandbox_image) -> None:
    owner = f"test-soak-{os.getpid()}-{time.monotonic_ns()}"
    host = SandboxHost(HostSandboxes(limit=16, owner=owner), max_idle_drivers=4)
    n = 2 * len(_DOCKER_VARIANTS)  # every kind of field, twice
    try:
        widest = {"type": "docker", "api_threads": 12, "environment": {"SOAK": "widest"}}  # the most any asks
        warm = await soak(host, [*distinct_configs("docker", len(_DOCKER_VARIANTS), start=10**6), widest],
                          concurrency=3)
        assert warm["errors"] == 0, warm["first_error"]
        start = Usage.now()
        result = await soak(host, distinct_configs("docker", n), concurrency=3)
        end = Usage.now()
        assert result["errors"] == 0, result["first_error"]
        assert len(host.drivers) <= 4  # the idle ones it keeps; the rest were closed
        [engine] = host.docker.engines  # one client, thread pool, socket and reaper for every config
        [listener] = engine.listeners
        assert os.path.exists(listener.path)
        assert end.fds - start.fds <= 16, (start, end)  # its connection pool too (threads + 2)
        assert end.threads - start.threads <= 8, (start, end)  # the shared pool may still grow to its bound
    finally:
        await host.close_all()
    assert len(host.docker.engines) == 0 and host.docker.used == 0
    assert not os.path.exists(listener.directory)  # the host socket went with the Engine
    assert not engine.api.connected
    assert await asyncio.to_thread(_containers_of, owner) == 0


@pytest.mark.docker
async def test_drivers_of_two_configs_share_the_engine_and_the_last_closes_it(sandbox_image) -> None:
    host = HostSandboxes(owner=f"test-engine-{os.getpid()}-{time.monotonic_ns()}")
    a = build_driver(sandbox_config({"type": "docker", "pool_size": 0, "reap_interval": 50}), host=host)
    b = build_driver(sandbox_config({"type": "docker", "pool_size": 0, "pids_limit": 300, "api_threads": 12}),
                     host=host)
    try:
        env_a, env_b = await a.create(), await b.create()
        assert a.api is b.api and a.listener is b.listener is not None
        listener = a.listener
        assert a.engine.api.threads == 12  # widened for b
        assert (await env_a.exec(["true"])).returncode == (await env_b.exec(["true"])).returncode == 0
        await a.aclose()
        assert a.api.connected and len(host.engines) == 1  # b still uses it
        assert (await env_b.exec(["echo", "hi"])).stdout == "hi\n"
    finally:
        await a.aclose()  # twice: a no-op
        await b.aclose()
    assert len(host.engines) == 0 and not b.api.connected
    assert not os.path.exists(listener.directory)


async def _cancel_the_rest() -> None:
    left = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
    for task in left:
        task.cancel()
    await asyncio.gather(*left, return_exceptions=True)


@pytest.mark.docker
def test_a_driver_used_again_on_a_new_event_loop_takes_that_loops_host_socket(sandbox_image) -> None:
    """Embedded mode runs one event loop per ``asyncio.run``: a cached driver's next sandboxes reach
    their agent over the new loop's socket (the old loop's accepts nothing; it used to cost a 10 s timeout
    per sandbox and the slower exec stream)."""
    from orchestrator._wire import SandboxSpec

    host = SandboxHost(HostSandboxes(owner=f"test-loops-{os.getpid()}-{time.monotonic_ns()}"))
    spec = SandboxSpec(eval_id="loops", sample_id="s", config={"type": "docker", "pool_size": 0})

    async def open_exec_close() -> tuple[str, str]:
        handle, _ = await host.open(spec)
        env = host.lookup(handle)
        try:
            assert (await env.exec(["echo", "hi"], timeout=30)).stdout == "hi\n"
            return env._channels[None].transport, env.driver.listener.directory  # type: ignore[attr-defined]
        finally:
            await host.close(handle)

    def on_a_new_loop(make: Any) -> Any:
        # An explicit new loop each time, not asyncio.run: an earlier test in the session may have had
        # nest_asyncio patch asyncio.run to reuse the running loop (inspect_ai applies it).
        loop = asyncio.new_event_loop()
        try:
            return loop.run_until_complete(asyncio.wait_for(make(), 120))
        finally:  # as asyncio.run ends: what is left on the loop (the Engine's reaper) is cancelled first
            loop.run_until_complete(_cancel_the_rest())
            loop.close()

    first = on_a_new_loop(open_exec_close)
    second = on_a_new_loop(open_exec_close)
    assert first[0] == second[0] == "unix"
    assert first[1] != second[1] and not os.path.exists(first[1])  # the dead loop's socket went
    on_a_new_loop(host.close_all)
    assert not os.path.exists(second[1])
