"""Multi-service sandboxes with real Docker: as compose runs them, each service has its own network
namespace on a network of the sandbox's own and reaches the others by name (a service listening on
127.0.0.1 only is reachable from itself, not from the default container); they start and become
healthy together, count against the host's capacity one container each, and are removed together
with their network and its rules; a service that cannot start or never becomes healthy fails the
sandbox in one sentence and leaves nothing behind. On a host that cannot enforce a network policy the
services of a 'none' sandbox share the default container's loopback-only namespace instead."""

from __future__ import annotations

import ipaddress
import os
import subprocess
from collections.abc import AsyncIterator
from typing import Any

import pytest

from orchestrator.util import SandboxUnavailableError
from workers.sandbox import SandboxImageError, SandboxRequest, build_driver, sandbox_config
from workers.sandbox.docker import host_sandboxes

pytestmark = [pytest.mark.docker, pytest.mark.timeout(300)]

IMAGE = "toolfleet/sandbox:latest"
WEB = {"image": IMAGE,
       "command": ["sh", "-c", "echo up > /tmp/hello.txt; cd /tmp; exec python3 -m http.server 8080 --bind 127.0.0.1"],
       "healthcheck": {"test": ["python3", "-c", "import urllib.request as u; u.urlopen('http://127.0.0.1:8080/hello.txt')"],
                       "interval": 0.2, "retries": 50}}


def _containers() -> list[dict[str, str]]:
    """This test process's containers: name and the service label."""
    out = subprocess.run(["docker", "ps", "-a", "--filter", f"label=toolfleet.owner_pid={os.getpid()}",
                          "--format", '{{.Names}} {{.Label "toolfleet.service"}}'],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    return [dict(zip(("name", "service"), ([*line.split(" "), ""])[:2], strict=True)) for line in out.splitlines()]


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


PRIVATE = {"image": IMAGE, "command": ["sh", "-c", ("cd /tmp; echo mine > mine.txt; "
                                                     "exec python3 -m http.server 8081 --bind 127.0.0.1")],
           "healthcheck": {"test": ["python3", "-c", "import urllib.request as u; u.urlopen('http://127.0.0.1:8081/mine.txt')"],
                           "interval": 0.2, "retries": 50}}
OPEN_WEB = {**WEB, "command": ["sh", "-c", "echo up > /tmp/hello.txt; cd /tmp; exec python3 -m http.server 8080"]}
FETCH = ("import sys, urllib.request as u\ntry:\n    print(u.urlopen(sys.argv[1], timeout=3).read().decode().strip())\n"
         "except OSError as e:\n    print('error', getattr(e, 'reason', e))")


def _egress_state(network: str) -> tuple[bool, bool]:
    """Whether the Docker network and its nft chain exist."""
    nets = subprocess.run(["docker", "network", "ls", "-q", "--filter", f"name=^{network}$"], capture_output=True,
                          text=True, timeout=60, check=True).stdout.strip()
    chain = subprocess.run(["nft", "list", "chain", "inet", "toolfleet_egress", "sb_" + network.rsplit("-", 1)[1]],
                           capture_output=True, text=True, timeout=60, check=False).returncode == 0
    return bool(nets), chain


async def test_services_have_their_own_namespaces_and_reach_each_other_by_name(drivers: list[Any]) -> None:
    d = _driver(drivers, services={"web": OPEN_WEB, "private": PRIVATE,
                                   "idle": {"image": IMAGE, "command": ["sleep", "infinity"]}})
    before = host_sandboxes().used
    env = await d.create(SandboxRequest(eval_id="ms", sample_id="pod-1"))
    assert env.network is not None
    network = env.network.name
    try:
        assert host_sandboxes().used == before + 4  # one slot per container
        assert sorted(c["service"] for c in _containers()) == ["", "idle", "private", "web"]
        fetched = await env.exec(["python3", "-c", FETCH, "http://web:8080/hello.txt"])
        assert fetched.stdout.strip() == "up", fetched
        # "private" listens on its own loopback: from here it is refused, as under compose; from itself it answers.
        refused = await env.exec(["python3", "-c", FETCH, "http://private:8081/mine.txt"])
        assert refused.stdout.startswith("error") and "refused" in refused.stdout.lower(), refused
        named = env.named_sandboxes()
        mine = await named["private"].exec(["python3", "-c", FETCH, "http://127.0.0.1:8081/mine.txt"])
        assert mine.stdout.strip() == "mine"
        hosts = await env.exec(["getent", "hosts", "web", "idle", "default"])
        addresses = [line.split()[0] for line in hosts.stdout.splitlines()]
        assert len(addresses) == 3 and len(set(addresses)) == 3 and "127.0.0.1" not in addresses, hosts
        assert all(ipaddress.ip_address(a) in ipaddress.ip_network(env.network.subnet) for a in addresses)
        # Mode none: nothing beyond the sandbox's own network (the host's rules refuse it at once).
        out = await env.exec(["python3", "-c", FETCH, "http://10.255.255.1:80/"])
        assert "no route to host" in out.stdout.lower(), out
        # Each service is its own container (its own processes and files), reached with docker exec.
        assert set(named) == {"default", "web", "private", "idle"} and named["default"] is env
        await named["idle"].write_file("/tmp/only-here", "idle-file")
        assert await named["idle"].read_file("/tmp/only-here") == "idle-file"
        with pytest.raises(FileNotFoundError):
            await env.read_file("/tmp/only-here")
        ps = await named["web"].exec(["sh", "-c", "cat /proc/1/cmdline | tr '\\0' ' '"])
        assert "http.server" in ps.stdout
        assert _egress_state(network) == (True, True)
    finally:
        await d.destroy(env)
    assert host_sandboxes().used == before
    assert _containers() == []
    assert _egress_state(network) == (False, False)  # the network and its rules went with the containers


async def test_where_no_policy_can_be_enforced_services_share_one_loopback_namespace(sandbox_image: str) -> None:
    from workers.egress import EgressConfig, EgressEnforcer
    from workers.egress._nft import Nft
    from workers.sandbox.docker import DockerAPI, HostSandboxes

    enforcer = EgressEnforcer(EgressConfig(), DockerAPI(None, 2))
    enforcer.nft = Nft(binary="/nonexistent/nft")  # a host without nftables (or without CAP_NET_ADMIN)
    host = HostSandboxes(egress=enforcer)
    d = build_driver(sandbox_config({"type": "docker", "services": {"web": WEB}}), host=host)
    try:
        env = await d.create(SandboxRequest(eval_id="ms", sample_id="pod-lo"))
        try:
            assert env.network is None
            fetched = await env.exec(["python3", "-c", FETCH, "http://web:8080/hello.txt"])
            assert fetched.stdout.strip() == "up", fetched  # WEB listens on 127.0.0.1: one namespace
            hosts = await env.exec(["getent", "hosts", "web", "default"])
            assert [line.split()[0] for line in hosts.stdout.splitlines()] == ["127.0.0.1"] * 2
            links = await env.exec(["sh", "-c", "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '"])
            assert links.stdout.split() == ["lo"]
        finally:
            await d.destroy(env)
        public = build_driver(sandbox_config({"type": "docker", "network_mode": "public", "pool_size": 0}), host=host)
        try:
            with pytest.raises(SandboxUnavailableError, match="cannot enforce network mode 'public'"):
                await public.create(SandboxRequest(eval_id="ms", sample_id="pub"))
        finally:
            await public.aclose()
    finally:
        await d.aclose()
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
