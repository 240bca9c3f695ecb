"""Sandbox → network: each attack from a sandbox with a network fails, against real components (the
Docker daemon, the kernel's nftables, a redis-server, listeners on the host's addresses), while the
legitimate request beside it succeeds. The probes run in sandbox containers as root with Docker's
default capabilities (raw sockets included); see ``_egress_probe.py`` and ``_egress_support.py``."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import textwrap

import pytest

from tests.security._egress_fixtures import OWNER, pings, reachable_from_host
from tests.security._egress_support import (
    HTTP_PORT,
    RUN,
    UDP_PORT,
    Calls,
    DockerApiDoor,
    Internet,
    host_addresses,
    is_sandbox_source,
    link_local,
    primary_addresses,
    run_probes,
    sample_server,
    wait_for,
)
from workers.egress import EgressConfig, EgressEnforcer, EgressError, EgressPolicy
from workers.egress._nft import TABLE, Nft, SandboxRules, render_sandbox

pytestmark = [pytest.mark.docker, pytest.mark.slow]

BODY = "body: toolfleet-test-internet"
MODES = {"none", "public", "allowlist"}


@pytest.fixture
async def make_enforcer(internet, upstream):
    """Enforcers for this test: the operator allows the test internet's private network unless told
    otherwise; the DNS filter asks the test's upstream. All are closed (sandboxes released) after."""
    made: list[EgressEnforcer] = []

    async def make(**config) -> EgressEnforcer:
        config.setdefault("allow", (internet.private_subnet,))
        config.setdefault("upstreams", (f"127.0.0.1:{upstream.port}",))
        enforcer = EgressEnforcer(EgressConfig(**config), Calls(), owner=OWNER)
        made.append(enforcer)
        assert await enforcer.start() == MODES, enforcer.unavailable
        return enforcer

    try:
        yield make
    finally:
        for enforcer in made:
            await enforcer.aclose()


def probe(network, probes, service="probe", timeout=2.0):
    """Run probes from a container of ``network``'s sandbox (off the loop: the DNS filter serves on it)."""
    return asyncio.to_thread(run_probes, Calls().api, network.host_config(), network.networking_config(service),
                             probes, timeout)


def failed(result) -> bool:
    return isinstance(result, str) and result.startswith("error")


def host_v4() -> list[str]:
    return [a for a in host_addresses()["inet"] if not a.startswith("127.")]


async def test_a_public_sandbox_reaches_the_internet_and_nothing_it_must_not(make_enforcer, internet, metadata,
                                                                              listeners, published):
    enforcer = await make_enforcer()
    api = Calls().api
    main = await enforcer.open("sample-a", EgressPolicy(mode="public"))
    other = await enforcer.open("sample-b", EgressPolicy(mode="public"))
    door = DockerApiDoor(main.gateway)
    host4, host6 = primary_addresses()
    tcp, udp = listeners.tcp_port, listeners.udp_port
    try:
        with (sample_server(api, other.host_config(), other.networking_config("web"), "other-sample") as other_ip,
              sample_server(api, main.host_config(), main.networking_config("svc"), "sibling-service")):
            wait_for(lambda: link_local(main.bridge) is not None, 10, "the bridge's link-local address")
            bridge6 = link_local(main.bridge)
            allowed = [
                ["http", f"http://{internet.public_ip}:{HTTP_PORT}/"],  # the internet
                ["http", f"http://internet.test:{HTTP_PORT}/"],  # by name, through the DNS filter
                ["http", f"http://{internet.private_ip}:{HTTP_PORT}/"],  # private, allowed by the operator
                ["http", f"http://mirror.test:{HTTP_PORT}/"],
                ["udp", internet.public_ip, UDP_PORT, "udp-control"],
                ["icmp", internet.public_ip],
                ["raw4", internet.public_ip, UDP_PORT, "raw4-control"],  # a hand-made packet does leave
                ["http", f"http://svc:{HTTP_PORT}/"],  # a service of its own sandbox, by name
            ]
            denied = [
                ["http", f"http://{other_ip}:{HTTP_PORT}/"],  # another sample's sandbox
                ["http", f"http://{metadata}:{HTTP_PORT}/"],
                ["http", f"http://metadata.test:{HTTP_PORT}/"],  # names resolving to denied addresses
                ["http", f"http://host.test:{tcp}/"],
                ["http", f"http://{door.address}:{door.port}/version"],  # the Docker API
                ["http", f"http://{host4}:{published}/"], ["http", f"http://{main.gateway}:{published}/"],
                ["icmp", main.gateway], ["icmp", host4],
                *[["tcp", a, port] for a in host_v4() for port in (tcp, listeners.redis_port)],
                *[["udp", a, udp, f"udp-{RUN}"] for a in (host4, main.gateway)],
                ["raw4", host4, udp, f"raw4-{RUN}"], ["raw4", "127.0.0.1", udp, f"raw4-lo-{RUN}"],
                *([["raw6", host6, udp, f"raw6-{RUN}"]] if host6 else []),
                ["raw6", bridge6, udp, f"raw6-ll-{RUN}"],
                ["tcp", "::1", tcp], *([["tcp", host6, tcp]] if host6 else []),
            ]
            results = await probe(main, allowed + denied)
    finally:
        door.close()
    got = dict(zip((tuple(map(str, p)) for p in allowed + denied), results, strict=True))
    ok, bad = results[:len(allowed)], results[len(allowed):]
    assert ok[:4] == [BODY] * 4, got
    assert ok[4:] == ["reply: echo:udp-control", "reply", "reply: echo:raw4-control", "body: sibling-service"], got
    for (kind, *_), result in zip(denied, bad, strict=True):
        if kind in ("http", "tcp", "udp"):
            assert failed(result), got
        elif kind == "icmp":
            assert result != "reply", got
    # What the targets saw: nothing from the sandbox, though the same listeners answer the host.
    assert not [p for p in listeners.tcp_peers if is_sandbox_source(p, main.subnet)]
    assert not [s for s in listeners.udp_seen if RUN in s[0]], listeners.udp_seen
    socket.create_connection((host4, tcp), timeout=2).close()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.sendto(b"host-control", (host4, udp))
    wait_for(lambda: ("host-control", host4) in listeners.udp_seen and host4 in listeners.tcp_peers, 5,
             "the host's own datagram and connection")
    assert pings(host4, listeners.redis_port) and pings(main.gateway, listeners.redis_port)
    door = DockerApiDoor(main.gateway)
    try:
        assert "ApiVersion" in door.version()  # the door was open: only the sandbox was kept out
    finally:
        door.close()


async def test_the_operator_cannot_open_metadata_the_host_the_broker_or_other_sandboxes(
        make_enforcer, client, internet, metadata, listeners):
    broker_net = internet.network("broker")
    broker = internet.serve("broker", "broker-stand-in", [broker_net])
    broker_ip = Internet.ip(broker, broker_net)
    # The operator allows every range an operator may; the worker protects its broker's address.
    enforcer = await make_enforcer(allow=("0.0.0.0/0", "::/0"), protect=(broker_ip,))
    api = Calls().api
    main = await enforcer.open("sample-a", EgressPolicy(mode="public"))
    other = await enforcer.open("sample-b", EgressPolicy(mode="public"))
    with sample_server(api, other.host_config(), other.networking_config("web"), "other-sample") as other_ip:
        results = await probe(main, [
            ["http", f"http://{internet.private_ip}:{HTTP_PORT}/"],  # allowed: another Docker network
            ["http", f"http://{broker_ip}:{HTTP_PORT}/"],
            ["http", f"http://{metadata}:{HTTP_PORT}/"],
            ["http", f"http://{other_ip}:{HTTP_PORT}/"],
            *[["tcp", a, listeners.redis_port] for a in host_v4()],
        ])
    assert results[0] == BODY  # so Docker's isolation of its networks is not what stops the others
    assert all(failed(r) for r in results[1:]), results
    assert reachable_from_host(broker_ip) and reachable_from_host(metadata)


async def test_an_allowlist_sandbox_reaches_only_allowed_names_through_its_dns(make_enforcer, internet, metadata):
    enforcer = await make_enforcer()
    net = await enforcer.open("sample-a", EgressPolicy(
        mode="allowlist", allowed_hosts=("internet.test", "*.wild.test", "metadata.test")))
    url = f"http://{internet.public_ip}:{HTTP_PORT}/"
    results = await probe(net, [
        ["http", url],  # 0: the address before any allowed name resolved to it
        ["resolve", "notlisted.test"],  # 1
        ["resolve", "wild.test"],  # 2: the wildcard's apex is not below it
        ["http", f"http://internet.test:{HTTP_PORT}/"],  # 3
        ["http", url],  # 4: now in the sandbox's set
        ["http", f"http://a.b.wild.test:{HTTP_PORT}/"],  # 5
        ["http", f"http://metadata.test:{HTTP_PORT}/"],  # 6: allowed name, never-reachable address
        ["http", f"http://{internet.private_ip}:{HTTP_PORT}/"],  # 7: what the operator allows
        ["http", f"http://{metadata}:{HTTP_PORT}/"],  # 8
    ])
    assert failed(results[0]) and failed(results[1]) and failed(results[2]), results
    assert results[3:6] == [BODY] * 3, results
    assert failed(results[6]) and failed(results[8]), results
    assert results[7] == BODY
    listed = (await asyncio.to_thread(subprocess.run, ["nft", "list", "set", "inet", TABLE, f"sb_{net.key}_v4"],
                                      check=True, capture_output=True, text=True)).stdout
    assert f"{internet.public_ip} timeout 1m" in listed and "169.254" not in listed


async def test_a_none_sandbox_reaches_its_own_services_by_name_and_nothing_else(make_enforcer, internet):
    enforcer = await make_enforcer()
    api = Calls().api
    net = await enforcer.open("sample-a", EgressPolicy(mode="none"))
    with sample_server(api, net.host_config(), net.networking_config("web"), "own-service"):
        results = await probe(net, [
            ["http", f"http://web:{HTTP_PORT}/"],
            ["http", f"http://{internet.public_ip}:{HTTP_PORT}/"],
            ["http", f"http://{internet.private_ip}:{HTTP_PORT}/"],
            ["resolve", "internet.test"],
            ["tcp", net.gateway, 53],
            ["icmp", net.gateway],
        ])
    assert results[0] == "body: own-service"
    assert all(failed(r) for r in results[1:5]) and results[5] != "reply", results


async def test_release_removes_everything_and_the_reaper_takes_a_crashed_workers_leftovers(make_enforcer, client,
                                                                                             upstream, tmp_path):
    enforcer = await make_enforcer()
    opened = [await enforcer.open(f"sample-{m}", EgressPolicy(mode=m, allowed_hosts=("internet.test",)
                                                                if m == "allowlist" else ()))
              for m in ("none", "public", "allowlist")]
    assert {n.key for n in opened} <= await enforcer.nft.sandbox_keys() and len(enforcer.dns) == 2
    for network in opened:
        await enforcer.release(network)
    assert not {n.key for n in opened} & await enforcer.nft.sandbox_keys()
    assert len(enforcer) == 0 and len(enforcer.dns) == 0
    assert not client.networks.list(filters={"label": f"toolfleet.owner={OWNER}"})
    ruleset = (await asyncio.to_thread(subprocess.run, ["nft", "list", "table", "inet", TABLE], check=True,
                                       capture_output=True, text=True)).stdout
    assert not any(n.bridge in ruleset for n in opened)

    # A worker killed with its sandbox open: its network and rules stay until a reaper comes.
    key_file = tmp_path / "key"
    crashed = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import asyncio, pathlib
        from tests.security._egress_support import Calls
        from workers.egress import EgressConfig, EgressEnforcer, EgressPolicy
        async def main():
            enforcer = EgressEnforcer(EgressConfig(upstreams=("127.0.0.1:{upstream.port}",)), Calls(),
                                      owner="{OWNER}-crashed")
            await enforcer.start()
            net = await enforcer.open("crash", EgressPolicy(mode="public"))
            pathlib.Path("{key_file}").write_text(net.key)
            await asyncio.sleep(300)
        asyncio.run(main())
    """)], stdout=subprocess.DEVNULL, cwd=os.getcwd(), env={**os.environ, "PYTHONPATH": os.getcwd()})
    try:
        await asyncio.to_thread(wait_for, lambda: key_file.exists() and len(key_file.read_text()) == 10, 60,
                                "the crashing worker's sandbox")
    finally:
        crashed.send_signal(signal.SIGKILL)
        crashed.wait(10)
    key = key_file.read_text()
    assert key in await enforcer.nft.sandbox_keys()
    # And rules whose network never came (a crash between the two).
    orphan_rules = "abcdef0123"
    await enforcer.nft.apply(render_sandbox(SandboxRules(key=orphan_rules, mode="public", mark=enforcer.config.mark)))
    reaped = await enforcer.reap()
    assert {key, orphan_rules} <= set(reaped)
    assert not {key, orphan_rules} & await enforcer.nft.sandbox_keys()
    assert not client.networks.list(filters={"label": f"toolfleet.egress_key={key}"})


async def test_a_host_that_cannot_change_its_rules_offers_only_none(internet, upstream):
    enforcer = EgressEnforcer(EgressConfig(upstreams=(f"127.0.0.1:{upstream.port}",)), Calls(), owner=OWNER)
    enforcer.nft = Nft(binary="/nonexistent/nft")
    assert await enforcer.start() == {"none"}
    assert enforcer.unavailable == "/nonexistent/nft is not installed"
    with pytest.raises(EgressError) as caught:
        await enforcer.open("sample-a", EgressPolicy(mode="public"))
    assert str(caught.value) == ("this host cannot enforce network mode 'public': "
                                 "/nonexistent/nft is not installed")
    await enforcer.aclose()


@contextlib.contextmanager
def _forwarded_between(binary: str, bridge_a: str, bridge_b: str):
    """Let Docker forward between two of its bridge networks (it isolates them by default), for the
    unrestricted side of the download comparison."""
    rules = [["-i", bridge_a, "-o", bridge_b, "-j", "ACCEPT"], ["-i", bridge_b, "-o", bridge_a, "-j", "ACCEPT"]]
    for rule in rules:
        subprocess.run([binary, "-w", "5", "-I", "DOCKER-USER", *rule], check=True)
    try:
        yield
    finally:
        for rule in rules:
            subprocess.run([binary, "-w", "5", "-D", "DOCKER-USER", *rule], check=False)


async def test_download_through_the_policy_and_unrestricted(make_enforcer, internet, capsys):
    """The figures (printed; no timing is asserted): 50 MiB from the test internet through a public
    sandbox's policy, and the same download from a container on a plain Docker network, alternating."""
    size = 50 * 1024 * 1024
    enforcer = await make_enforcer()
    net = await enforcer.open("sample-a", EgressPolicy(mode="public"))
    plain = internet.network("plain")
    plain.reload()
    url = f"http://{internet.public_ip}:{HTTP_PORT}/bytes/{size}"
    figures: dict[str, list[float]] = {"policy": [], "unrestricted": []}
    assert enforcer.hook.binary is not None
    with _forwarded_between(enforcer.hook.binary, f"br-{plain.id[:12]}", internet.public_bridge):
        for _ in range(3):
            [through] = await probe(net, [["download", url]], timeout=30)
            [direct] = await asyncio.to_thread(run_probes, Calls().api, {"network_mode": plain.name}, None,
                                               [["download", url]], 30)
            for name, result in (("policy", through), ("unrestricted", direct)):
                assert isinstance(result, dict) and result["bytes"] == size, result
                figures[name].append(size / result["seconds"] / 1024 / 1024)
    with capsys.disabled():
        print("\n[egress] 50 MiB download, MiB/s: " + "; ".join(
            f"{name} {', '.join(f'{v:.0f}' for v in values)}" for name, values in figures.items()))
