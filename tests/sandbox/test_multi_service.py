"""Multi-service sandboxes with real Docker: the services join the default container's network
namespace (loopback only, names resolve to 127.0.0.1), start and become healthy together, count
against the host's capacity one container each, and are removed together; a service that cannot
start or never becomes healthy fails the sandbox in one sentence and leaves nothing behind."""

from __future__ import annotations

import os
import subprocess
from collections.abc import AsyncIterator
from typing import Any

import pytest

from orchestrator.util import SandboxUnavailableError
from workers.sandbox import build_driver, SandboxImageError, SandboxRequest, sandbox_config
from workers.sandbox.docker import host_sandboxes

pytestmark = [pytest.mark.docker, pytest.mark.timeout(300)]

IMAGE = "toolfleet/sandbox:latest"
WEB = {"image": IMAGE, "command": ["sh", "-c", "echo up > /tmp/hello.txt; cd /tmp; exec python3 -m http.server 8080 --bind 127.0.0.1"],
       "healthcheck": {"test": ["python3", "-c", "import urllib.request as u; u.urlopen('http://127.0.0.1:8080/hello.txt')"],
                       "interval": 0.2, "retries": 50}}


def _containers() -> list[dict[str, str]]:
    """This test process's containers: name and the service label."""
    out = subprocess.run(["docker", "ps", "-a", "--filter", f"label=toolfleet.owner_pid={os.getpid()}",
                          "--format", '{{.Names}} {{.Label "toolfleet.service"}}'],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    return [dict(zip(("name", "service"), (line.split(" ") + [""])[:2])) for line in out.splitlines()]


@pytest.fixture
async def drivers(sandbox_image: str) -> AsyncIterator[list[Any]]:
    made: list[Any] = []
    yield made
    for d in made:
        await d.aclose()


def _driver(drivers: list[Any], **config: Any) -> Any:
    d = build_driver(sandbox_config({"type": "docker", **config}))
    drivers.append(d)
    return d


async def test_services_share_a_loopback_only_namespace(drivers: list[Any]) -> None:
    d = _driver(drivers, services={"web": WEB, "idle": {"image": IMAGE, "command": ["sleep", "infinity"]}})
    before = host_sandboxes().used
    env = await d.create(SandboxRequest(eval_id="ms", sample_id="pod-1"))
    try:
        assert host_sandboxes().used == before + 3  # one slot per container
        assert sorted(c["service"] for c in _containers()) == ["", "idle", "web"]
        fetched = await env.exec(["python3", "-c", "import urllib.request as u; print(u.urlopen('http://web:8080/hello.txt').read().decode())"])
        assert fetched.stdout.strip() == "up", fetched
        hosts = await env.exec(["getent", "hosts", "web", "idle", "default"])
        assert [line.split()[0] for line in hosts.stdout.splitlines()] == ["127.0.0.1"] * 3
        links = await env.exec(["sh", "-c", "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '"])
        assert links.stdout.split() == ["lo"]
        out = await env.exec(["python3", "-c", "import socket\ns = socket.socket(); s.settimeout(3)\ntry:\n"
                              "    s.connect(('10.255.255.1', 80)); print('connected')\nexcept OSError as e:\n    print(e)"])
        assert "unreachable" in out.stdout.lower(), out
        # Each service is its own container (its own processes and files), reached with docker exec.
        named = env.named_sandboxes()
        assert set(named) == {"default", "web", "idle"} and named["default"] is env
        await named["idle"].write_file("/tmp/only-here", "idle-file")
        assert await named["idle"].read_file("/tmp/only-here") == "idle-file"
        with pytest.raises(FileNotFoundError):
            await env.read_file("/tmp/only-here")
        ps = await named["web"].exec(["sh", "-c", "cat /proc/1/cmdline | tr '\\0' ' '"])
        assert "http.server" in ps.stdout
    finally:
        await d.destroy(env)
    assert host_sandboxes().used == before
    assert _containers() == []


async def test_an_unhealthy_service_fails_the_sandbox_and_leaves_nothing(drivers: list[Any]) -> None:
    d = _driver(drivers, services={"db": {"image": IMAGE, "command": ["sleep", "infinity"],
                                          "healthcheck": {"test": "echo not-ready-yet; exit 1", "interval": 0.2,
                                                          "timeout": 1, "retries": 3}}})
    before = host_sandboxes().used
    with pytest.raises(SandboxUnavailableError) as caught:
        await d.create(SandboxRequest(eval_id="ms", sample_id="pod-2"))
    message = str(caught.value)
    assert message.startswith("Service 'db' did not become healthy within") and "not-ready-yet" in message
    assert host_sandboxes().used == before and _containers() == []


async def test_a_service_that_exits_fails_the_sandbox_with_its_output(drivers: list[Any]) -> None:
    d = _driver(drivers, services={"job": {"image": IMAGE, "command": ["sh", "-c", "echo cannot-bind >&2; exit 3"]}})
    with pytest.raises(SandboxUnavailableError) as caught:
        await d.create(SandboxRequest(eval_id="ms", sample_id="pod-3"))
    assert "Service 'job' exited with code 3" in str(caught.value) and "cannot-bind" in str(caught.value)
    assert _containers() == []


async def test_a_missing_service_image_names_the_service(drivers: list[Any]) -> None:
    d = _driver(drivers, services={"api": {"image": "toolfleet/no-such-image:never"}}, pull_policy="never")
    with pytest.raises((SandboxImageError, SandboxUnavailableError)) as caught:
        await d.create(SandboxRequest(eval_id="ms", sample_id="pod-4"))
    assert "Service 'api'" in str(caught.value) and "toolfleet/no-such-image:never" in str(caught.value)
    assert _containers() == []


async def test_a_pod_is_never_pooled_and_takes_its_slots_as_a_whole(drivers: list[Any]) -> None:
    """Three containers need three slots at once: with a cap of 2 the sandbox is refused before any
    container is made; with a cap of 3 and one slot taken, it waits (bounded) instead of half-starting."""
    from workers.sandbox import SandboxCapacityError

    d = _driver(drivers, max_sandboxes=2, acquire_timeout=1.0,
                services={"a": {"image": IMAGE, "command": ["sleep", "infinity"]},
                          "b": {"image": IMAGE, "command": ["sleep", "infinity"]}})
    assert d.pool.size == 0
    before = host_sandboxes().used
    with pytest.raises(SandboxCapacityError, match="A sandbox of 3 containers needs 3 slots; this host has 2"):
        await d.create(SandboxRequest(eval_id="ms", sample_id="pod-5"))
    assert host_sandboxes().used == before and _containers() == []
    roomy = _driver(drivers, max_sandboxes=before + 3, acquire_timeout=1.0, services=d.config.services)
    host_sandboxes().used += 1  # someone else's container
    try:
        with pytest.raises(SandboxCapacityError, match="sandboxes in use after waiting 1s"):
            await roomy.create(SandboxRequest(eval_id="ms", sample_id="pod-6"))
        assert _containers() == []  # nothing half-started while it waited
    finally:
        host_sandboxes().release()
    assert host_sandboxes().used == before


async def test_a_service_gets_the_sandbox_disk_cap(drivers: list[Any]) -> None:
    """Writing past disk_limit in a service's scratch space is ENOSPC there, not a full host disk."""
    d = _driver(drivers, disk_limit="8m", services={"idle": {"image": IMAGE, "command": ["sleep", "infinity"]}})
    env = await d.create(SandboxRequest(eval_id="ms", sample_id="pod-6"))
    try:
        idle = env.named_sandboxes()["idle"]
        wrote = await idle.exec(["sh", "-c", "dd if=/dev/zero of=/tmp/fill bs=1M count=32 2>&1; echo rc=$?"])
        assert "No space left on device" in wrote.stdout and "rc=1" in wrote.stdout, wrote
    finally:
        await d.destroy(env)
