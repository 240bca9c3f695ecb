"""Sandbox → network through the product: sandboxes opened as an eval opens them (``network_mode`` in the
sandbox config), embedded (``InProcessDispatcher``) and on a real ``toolfleet worker`` process through
Celery (``CeleryDispatcher``), each attack from the sandbox fails while the legitimate request beside it
succeeds; a phase's new policy (``set_sandbox_network``) takes effect at once, also on a connection
opened before it; what a worker does not allow is refused at preflight and at the worker; networks and
rules are released with their sandbox, and a crashed worker's are reaped.

The probes (``_egress_probe.py``) run inside the sandbox as root with Docker's default capabilities
(raw sockets included: a root sandbox where root is allowed). The worker's broker is a redis-server on
one of this host's addresses, which the worker protects; the DNS filter asks the test's upstream
(``--egress-dns``), which resolves ``metadata.test`` and ``host.test`` to denied addresses."""

from __future__ import annotations

import asyncio
import json
import shlex
import subprocess
import uuid
from collections.abc import AsyncIterator
from typing import Any

import docker
import pytest

from orchestrator._wire import SandboxSpec
from orchestrator.dispatch import InProcessDispatcher, SampleRoute
from orchestrator.dispatch._preflight import PreflightError, SandboxNeeds
from orchestrator.util._sandbox import SandboxUnavailableError
from tests.security._egress_fixtures import OWNER
from tests.security._egress_support import (
    HTTP_PORT,
    PROBE,
    RUN,
    SERVER,
    UDP_PORT,
    DockerApiDoor,
    host_addresses,
    is_sandbox_source,
    link_local,
    primary_addresses,
    wait_for,
)
from tests.support.fleet import WorkerProcess, ensure_fleet_secret
from tests.support.prerequisites import IMAGE
from workers.egress import EgressConfig, EgressEnforcer
from workers.egress._nft import TABLE

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(600)]

BODY = "body: toolfleet-test-internet"
ROOT_PUBLIC = {"type": "docker", "image": IMAGE, "user": "root", "network_mode": "public", "pool_size": 0}


def failed(result: Any) -> bool:
    return isinstance(result, str) and result.startswith("error")


class Side:
    """Where the sandboxes live: ``run(route, cmd)`` runs a shell command in one, as its user."""

    name = ""
    dispatcher: Any

    async def open(self, config: dict[str, Any], sample: str = "s") -> SampleRoute:
        spec = SandboxSpec(eval_id=f"egress-{RUN}", sample_id=f"{sample}-{uuid.uuid4().hex[:6]}", config=config)
        return await self.dispatcher.open_sandbox(spec)

    async def run(self, route: SampleRoute, cmd: str, timeout: float = 120) -> str:
        raise NotImplementedError

    async def probes(self, route: SampleRoute, probes: list[list[Any]], timeout: float = 2.0) -> list[Any]:
        out = await self.run(route, f"PROBE_TIMEOUT={timeout} python3 -c {shlex.quote(PROBE)} "
                                    f"{shlex.quote(json.dumps(probes))}")
        return json.loads(out.strip().splitlines()[-1])


class Embedded(Side):
    name = "embedded"

    def __init__(self, internet: Any, upstream: Any) -> None:
        from workers.sandbox.docker import DockerAPI, HostSandboxes
        from workers.sandbox_host import SandboxHost

        # What `toolfleet eval --egress-allow <the test internet's private network>` builds, with the test's
        # DNS upstream (the host's resolv.conf otherwise).
        config = EgressConfig(allow=(internet.private_subnet,), upstreams=(f"127.0.0.1:{upstream.port}",))
        enforcer = EgressEnforcer(config, DockerAPI(None, 4), owner=OWNER)
        self.dispatcher = InProcessDispatcher(SandboxHost(HostSandboxes(egress=enforcer, owner=OWNER)), owns_host=True)

    async def run(self, route: SampleRoute, cmd: str, timeout: float = 120) -> str:
        env = self.dispatcher.local_sandbox(route)
        result = await env.exec(["sh", "-c", cmd], timeout=timeout)
        return str(result.stdout)


class OnWorker(Side):
    name = "worker"

    def __init__(self, worker: WorkerProcess) -> None:
        from orchestrator.dispatch import CeleryDispatcher

        self.worker = worker
        self.dispatcher = CeleryDispatcher(worker.broker_url)

    async def run(self, route: SampleRoute, cmd: str, timeout: float = 120) -> str:
        from tests.distributed._helpers import bash_request, one

        assert route.sandbox is not None
        outcome = await one(self.dispatcher, bash_request(cmd, route.sandbox), route, bound=timeout)
        assert outcome.error is None and outcome.fatal is None, outcome
        return str(outcome.result)


def worker_for(broker_url: str, internet: Any, upstream: Any, *flags: str) -> WorkerProcess:
    return WorkerProcess(broker_url, imports=(), allow_local=False, extra_args=(
        "--egress-allow", internet.private_subnet, "--egress-dns", f"127.0.0.1:{upstream.port}", *flags))


@pytest.fixture(scope="module")
def broker(listeners) -> str:
    """The worker's broker: the redis-server listening on this host's primary address (not loopback), so
    the worker protects it; a sandbox must not reach it (nor any of the host's addresses)."""
    host4, _ = primary_addresses()
    return f"redis://{host4}:{listeners.redis_port}/0"


@pytest.fixture(scope="module")
def open_worker(broker, internet, upstream):
    """A worker that allows public and allowlist sandboxes and root (so raw sockets are the sandbox's)."""
    ensure_fleet_secret()
    worker = worker_for(broker, internet, upstream, "--allow-network", "public", "--allow-root-user")
    try:
        yield worker.start(timeout=60)
    finally:
        worker.stop()
        worker.cleanup()


@pytest.fixture(params=["embedded", "worker"])
async def side(request, internet, upstream) -> AsyncIterator[Side]:
    made: Side = (Embedded(internet, upstream) if request.param == "embedded"
                  else OnWorker(request.getfixturevalue("open_worker")))
    try:
        yield made
    finally:
        await made.dispatcher.aclose()


def sandbox_network(gateway: str) -> dict[str, str]:
    """The sandbox network whose gateway this is (name, subnet, bridge), as Docker lists it."""
    client = docker.from_env(timeout=60)
    try:
        for net in client.api.networks(filters={"label": ["toolfleet.egress"]}):
            for pool in net.get("IPAM", {}).get("Config") or []:
                if pool.get("Gateway") == gateway:
                    return {"name": net["Name"], "subnet": pool["Subnet"],
                            "bridge": net["Options"]["com.docker.network.bridge.name"]}
    finally:
        client.close()
    raise AssertionError(f"no sandbox network has the gateway {gateway}")


async def start_server(side: Side, route: SampleRoute, token: str) -> str:
    """A server in the sandbox (token at :8080/), in the background; its address."""
    await side.run(route, f"nohup python3 -c {shlex.quote(SERVER)} {token} >/dev/null 2>&1 &")
    address = (await side.run(route, "hostname -i")).split()[0]
    for _ in range(100):  # bounded: until the server answers inside its own sandbox
        if (await side.probes(route, [["http", f"http://127.0.0.1:{HTTP_PORT}/"]]))[0] == f"body: {token}":
            return address
        await asyncio.sleep(0.1)
    raise AssertionError(f"the server {token} did not start")


async def test_a_public_sandbox_reaches_the_internet_and_nothing_it_must_not(side, internet, metadata, listeners,
                                                                              published):
    svc = {"image": IMAGE, "command": ["python3", "-c", SERVER, "sibling-service"]}
    main = await side.open({**ROOT_PUBLIC, "services": {"svc": svc}}, "attacker")
    other = await side.open(ROOT_PUBLIC, "victim")
    try:
        other_ip = await start_server(side, other, "other-sample")
        [gateway] = await side.probes(main, [["gateway"]])
        net = sandbox_network(gateway)
        host4, host6 = primary_addresses()
        tcp, udp = listeners.tcp_port, listeners.udp_port
        door = DockerApiDoor(gateway)
        try:
            await asyncio.to_thread(wait_for, lambda: link_local(net["bridge"]) is not None, 10,
                                    "the link-local address")
            bridge6 = link_local(net["bridge"])
            allowed = [
                ["http", f"http://{internet.public_ip}:{HTTP_PORT}/"],  # the internet
                ["http", f"http://internet.test:{HTTP_PORT}/"],  # by name, through the DNS filter
                ["http", f"http://{internet.private_ip}:{HTTP_PORT}/"],  # private, allowed by the operator
                ["udp", internet.public_ip, UDP_PORT, "udp-control"],
                ["icmp", internet.public_ip],  # raw sockets are the sandbox's (root, Docker's capabilities)
                ["raw4", internet.public_ip, UDP_PORT, "raw4-control"],  # a hand-made frame does leave
                ["http", f"http://svc:{HTTP_PORT}/"],  # a service of its own sandbox, by name
            ]
            denied = [
                ["http", f"http://{other_ip}:{HTTP_PORT}/"],  # another sample's sandbox
                ["http", f"http://{metadata}:{HTTP_PORT}/"],  # the metadata stand-in
                ["http", f"http://metadata.test:{HTTP_PORT}/"],  # names that resolve to denied addresses
                ["http", f"http://host.test:{tcp}/"],
                ["http", f"http://{door.address}:{door.port}/version"],  # the Docker API
                ["http", f"http://{host4}:{published}/"],  # a port the host publishes
                # the worker's host, its broker (a redis-server on the host's address) and a worker stand-in
                *[["tcp", a, port] for a in host_addresses()["inet"] if not a.startswith("127.")
                  for port in (tcp, listeners.redis_port)],
                ["tcp", "::1", tcp], *([["tcp", host6, tcp]] if host6 else []),
                *[["udp", a, udp, f"udp-{RUN}"] for a in (host4, gateway)],
                ["raw4", host4, udp, f"raw4-{RUN}"], ["raw4", "127.0.0.1", udp, f"raw4-lo-{RUN}"],
                *([["raw6", host6, udp, f"raw6-{RUN}"]] if host6 else []),
                ["raw6", bridge6, udp, f"raw6-ll-{RUN}"],
                ["icmp", gateway], ["icmp", host4],
            ]
            results = await side.probes(main, allowed + denied)
        finally:
            door.close()
    finally:
        await side.dispatcher.close_sandbox(main)
        await side.dispatcher.close_sandbox(other)
    got = dict(zip((" ".join(map(str, p)) for p in allowed + denied), results, strict=True))
    ok, bad = results[:len(allowed)], results[len(allowed):]
    assert ok == [BODY] * 3 + ["reply: echo:udp-control", "reply", "reply: echo:raw4-control",
                               "body: sibling-service"], got
    for (kind, *_), result in zip(denied, bad, strict=True):
        if kind in ("http", "tcp", "udp"):
            assert failed(result), got
        elif kind == "icmp":
            assert result != "reply", got
    # What the targets saw: nothing from the sandbox (the raw frames and datagrams above included).
    assert not [p for p in listeners.tcp_peers if is_sandbox_source(p, net["subnet"])], listeners.tcp_peers
    assert not [s for s in listeners.udp_seen if RUN in s[0]], listeners.udp_seen
    # Released with the sandbox: its network and its chain.
    ruleset = (await asyncio.create_subprocess_exec("nft", "list", "table", "inet", TABLE,
                                                    stdout=asyncio.subprocess.PIPE)).stdout
    assert ruleset is not None
    listed = (await ruleset.read()).decode()
    assert net["bridge"] not in listed
    assert not docker.from_env(timeout=60).networks.list(names=[net["name"]])


HELD = """
import os, socket, sys, time
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5)
open("/tmp/held.connected", "w").close()
deadline = time.time() + 60
while not os.path.exists("/tmp/held.go") and time.time() < deadline:
    time.sleep(0.05)
s.settimeout(3)
try:
    s.sendall(b"GET / HTTP/1.0\\r\\n\\r\\n")
    data = s.recv(200)
    result = "body" if data.startswith(b"HTTP/1.0 200") else "other: %r" % data[:60]
except OSError as e:
    result = "error: %s" % e
with open("/tmp/held.result", "w") as f:
    f.write(result)
"""


async def held_connection(side: Side, route: SampleRoute, address: str, change: Any = None) -> str:
    """Open a connection, then (after ``change``, if any) use it; what the sandbox got."""
    await side.run(route, "rm -f /tmp/held.*; nohup python3 -c " + shlex.quote(HELD) +
                   f" {address} {HTTP_PORT} >/tmp/held.log 2>&1 &")
    for _ in range(200):
        if "yes" in await side.run(route, "test -e /tmp/held.connected && echo yes || true"):
            break
        await asyncio.sleep(0.05)
    else:
        raise AssertionError(await side.run(route, "cat /tmp/held.log"))
    if change is not None:
        await change
    await side.run(route, "touch /tmp/held.go")
    for _ in range(200):
        out = await side.run(route, "cat /tmp/held.result 2>/dev/null || true")
        if out.strip():
            return out.strip()
        await asyncio.sleep(0.05)
    raise AssertionError("the held connection never finished")


async def test_a_phases_policy_takes_effect_at_once_even_on_connections_opened_before(side, internet):
    route = await side.open({"type": "docker", "image": IMAGE, "network_mode": "public", "pool_size": 0,
                             "phase_network_modes": ["none", "allowlist"]}, "phases")
    d = side.dispatcher
    public_url, by_name = f"http://{internet.public_ip}:{HTTP_PORT}/", f"http://internet.test:{HTTP_PORT}/"
    try:
        assert await held_connection(side, route, internet.public_ip) == "body"  # the control
        cut = await held_connection(side, route, internet.public_ip, d.set_sandbox_network(route, "none"))
        assert cut.startswith("error"), cut  # opened under public, its next packet judged by none
        results = await side.probes(route, [["http", public_url], ["resolve", "internet.test"],
                                            ["http", f"http://{internet.private_ip}:{HTTP_PORT}/"]])
        assert all(failed(r) for r in results), results
        await d.set_sandbox_network(route, "allowlist", ["Internet.test"])
        results = await side.probes(route, [["resolve", "notlisted.test"], ["http", by_name], ["http", public_url],
                                            ["http", f"http://{internet.private_ip}:{HTTP_PORT}/"]])
        assert failed(results[0]) and results[1:] == [BODY] * 3, results  # the operator's network stays open
        await d.set_sandbox_network(route, "public")
        assert await side.probes(route, [["http", f"http://notlisted.test:{HTTP_PORT}/"]]) == [BODY]
        with pytest.raises(SandboxUnavailableError, match="allowed_hosts is for network_mode 'allowlist'"):
            await d.set_sandbox_network(route, "public", ["internet.test"])
        assert await side.probes(route, [["http", public_url]]) == [BODY]  # the refused change changed nothing
    finally:
        await d.close_sandbox(route)
    lone = await side.open({"type": "docker", "image": IMAGE, "pool_size": 0}, "lone")
    try:
        with pytest.raises(SandboxUnavailableError, match="no network of its own"):
            await d.set_sandbox_network(lone, "public")
    finally:
        await d.close_sandbox(lone)


@pytest.mark.celery
async def test_a_worker_that_does_not_allow_a_mode_refuses_it_at_preflight_and_at_the_worker(own_redis, internet,
                                                                                             upstream):
    from orchestrator.dispatch import CeleryDispatcher

    broker = own_redis.url  # a fleet of this one worker (the module's open worker is on another broker)
    worker = worker_for(broker, internet, upstream).start(timeout=60)  # no --allow-network
    d = CeleryDispatcher(broker)
    try:
        needs = SandboxNeeds()
        needs.kinds, needs.networks = {"docker"}, {"public": ["task-a"]}
        with pytest.raises(PreflightError) as caught:
            await d.preflight(needs)
        assert str(caught.value) == ("Network mode 'public' (sample task-a) is allowed by none of the 1 live "
                                     "worker(s): start workers with --allow-network public.")
        for config in ({"type": "docker", "image": IMAGE, "network_mode": "public"},
                       {"type": "docker", "image": IMAGE, "phase_network_modes": ["public"]}):
            with pytest.raises(SandboxUnavailableError, match="start the worker with --allow-network public"):
                await d.open_sandbox(SandboxSpec(eval_id="e", sample_id="refused", config=config))
        route = await d.open_sandbox(SandboxSpec(eval_id="e", sample_id="none", config={
            "type": "docker", "image": IMAGE, "phase_network_modes": ["none"], "pool_size": 0}))
        try:
            with pytest.raises(SandboxUnavailableError, match="--allow-network public"):
                await d.set_sandbox_network(route, "public")
        finally:
            await d.close_sandbox(route)
    finally:
        await d.aclose()
        worker.stop()
        worker.cleanup()


@pytest.mark.celery
async def test_a_crashed_workers_networks_and_rules_are_reaped_by_the_next_worker(own_redis, internet, upstream):
    from orchestrator.dispatch import CeleryDispatcher

    broker = own_redis.url
    crashed = worker_for(broker, internet, upstream, "--allow-network", "public").start(timeout=60)
    d = CeleryDispatcher(broker)
    try:
        route = await d.open_sandbox(SandboxSpec(eval_id="e", sample_id="crash", config={
            "type": "docker", "image": IMAGE, "network_mode": "public", "pool_size": 0}))
        [gateway] = await _on(d, crashed).probes(route, [["gateway"]])
        net = sandbox_network(gateway)
        crashed.kill()  # SIGKILL: no drain, its container, network and rules stay
        assert sandbox_network(gateway)["name"] == net["name"]
        key = net["name"].rsplit("-", 1)[1]
    finally:
        await d.aclose()
        crashed.cleanup()
    successor = worker_for(broker, internet, upstream).start(timeout=60)
    try:
        client = docker.from_env(timeout=60)

        def reaped() -> bool:
            chains = subprocess.run(["nft", "list", "chain", "inet", TABLE, f"sb_{key}"], capture_output=True,
                                    check=False).returncode
            return not client.networks.list(names=[net["name"]]) and chains != 0

        await asyncio.to_thread(wait_for, reaped, 120, "the crashed worker's network and rules reaped")
    finally:
        successor.stop()
        successor.cleanup()


def _on(dispatcher: Any, worker: WorkerProcess) -> OnWorker:
    """The worker side over a dispatcher the test already holds."""
    side = OnWorker.__new__(OnWorker)
    side.worker, side.dispatcher = worker, dispatcher
    return side
