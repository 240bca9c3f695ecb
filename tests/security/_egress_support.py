"""What the egress tests stand up on this machine: a "test internet" (a container on Docker networks of
the test's own, serving HTTP and UDP echo), a DNS upstream with the test's records, listeners on the
host's addresses (a worker stand-in, UDP, a real redis-server, a TCP door to the Docker API), and a
runner for ``_egress_probe.py`` in a sandbox container. Everything created carries the label
``toolfleet.test=egress-<run>`` and is removed by its ``close``/context manager."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import random
import select
import socket
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import dns.message
import dns.rcode
import dns.rdatatype
import dns.rrset
import docker
from docker.errors import APIError, NotFound

from tests.support.fleet import free_port
from tests.support.prerequisites import IMAGE, require_redis_server

T = TypeVar("T")
RUN = uuid.uuid4().hex[:8]
LABEL = {"toolfleet.test": f"egress-{RUN}"}
PROBE = (Path(__file__).parent / "_egress_probe.py").read_text()
HTTP_PORT, UDP_PORT = 8080, 8081

# The test internet: HTTP on 8080 (a token at /, N bytes at /bytes/N) and a UDP echo on 8081.
SERVER = """
import http.server, socket, sys, threading
TOKEN = sys.argv[1].encode()
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        n = int(self.path.split("/")[2]) if self.path.startswith("/bytes/") else None
        body = TOKEN + b"\\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body) if n is None else n))
        self.end_headers()
        if n is None:
            self.wfile.write(body)
            return
        chunk = bytes(range(256)) * 1024
        while n > 0:
            self.wfile.write(chunk[:min(n, len(chunk))])
            n -= len(chunk)
    def log_message(self, *args):
        pass
def echo():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("0.0.0.0", 8081))
    while True:
        data, addr = s.recvfrom(2048)
        s.sendto(b"echo:" + data, addr)
threading.Thread(target=echo, daemon=True).start()
http.server.ThreadingHTTPServer(("0.0.0.0", 8080), Handler).serve_forever()
"""


def wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"{what} not ready within {timeout:.0f} s")


class Calls:
    """The Docker client as the enforcer takes it: blocking calls on threads."""

    def __init__(self) -> None:
        self.api = docker.APIClient(timeout=120)

    async def connect(self) -> None:
        """Connected when made."""

    async def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        return await asyncio.to_thread(fn, *args, **kwargs)


def host_addresses() -> dict[str, list[str]]:
    """The host's own addresses by family (``inet``, ``inet6``) with the interface of each link-local."""
    out = json.loads(subprocess.run(["ip", "-j", "addr"], check=True, capture_output=True, text=True).stdout)
    found: dict[str, list[str]] = {"inet": [], "inet6": []}
    for link in out:
        for addr in link.get("addr_info", []):
            found[addr["family"]].append(addr["local"])
    return found


def primary_addresses() -> tuple[str, str | None]:
    """The host's address toward its default routes (eth0 here: 192.0.2.2 and fd00::2)."""
    def src(*argv: str) -> str | None:
        done = subprocess.run(["ip", "-j", *argv], check=False, capture_output=True, text=True)
        return json.loads(done.stdout)[0].get("prefsrc") if done.returncode == 0 and done.stdout.strip() else None
    v4 = src("route", "get", "1.1.1.1")
    assert v4, "the host has no IPv4 default route"
    return v4, src("-6", "route", "get", "2606:4700::1")


def link_local(ifname: str) -> str | None:
    """The interface's IPv6 link-local address once it is usable (not tentative), else None."""
    out = json.loads(subprocess.run(["ip", "-j", "-6", "addr", "show", "dev", ifname], check=False,
                                    capture_output=True, text=True).stdout or "[]")
    return next((a["local"] for link in out for a in link.get("addr_info", [])
                 if a["local"].startswith("fe80") and not a.get("tentative")), None)


@dataclass
class Internet:
    """The test internet's container: reachable at a public-looking address (11.0.0.0/8, US DoD space
    not routed on this machine, stands for the internet) and at a private one (allowed only by the
    operator)."""

    client: docker.DockerClient
    public_ip: str = ""
    private_ip: str = ""
    private_subnet: str = ""
    public_bridge: str = ""
    networks: list[Any] = field(default_factory=list)
    containers: list[Any] = field(default_factory=list)

    def network(self, name: str, subnet: str | None = None) -> Any:
        ipam = None
        if subnet:
            ipam = docker.types.IPAMConfig(pool_configs=[docker.types.IPAMPool(subnet=subnet)])
        created = self.client.networks.create(f"tf-egress-test-{name}-{RUN}", driver="bridge", ipam=ipam,
                                              labels=LABEL)
        self.networks.append(created)
        return created

    def serve(self, name: str, token: str, networks: list[Any], ip: str | None = None, **kwargs: Any) -> Any:
        """A server container (token at /) on ``networks``, started (``kwargs``: Docker's, e.g. ports)."""
        first, *rest = networks
        container = self.client.containers.create(IMAGE, ["python3", "-c", SERVER, token], user="root",
                                                  name=f"tf-egress-test-{name}-{RUN}", labels=LABEL,
                                                  network=first.name, detach=True, **kwargs)
        self.containers.append(container)
        if ip:
            first.disconnect(container)
            first.connect(container, ipv4_address=ip)
        for net in rest:
            net.connect(container)
        container.start()
        container.reload()
        return container

    @staticmethod
    def ip(container: Any, network: Any) -> str:
        return container.attrs["NetworkSettings"]["Networks"][network.name]["IPAddress"]

    def start(self) -> Internet:
        for _ in range(20):
            try:
                public = self.network("pub", f"11.{random.randrange(1, 255)}.{random.randrange(0, 255)}.0/28")
                break
            except APIError:
                continue
        private = self.network("priv")
        server = self.serve("inet", "toolfleet-test-internet", [public, private])
        self.public_ip, self.private_ip = self.ip(server, public), self.ip(server, private)
        private.reload()
        self.private_subnet = private.attrs["IPAM"]["Config"][0]["Subnet"]
        public.reload()
        self.public_bridge = "br-" + public.id[:12]
        wait_for(lambda: _http_ok(self.private_ip), 30, "the test internet")
        return self

    def close(self) -> None:
        for container in self.containers:
            with contextlib.suppress(NotFound):
                container.remove(force=True)
        for net in self.networks:
            with contextlib.suppress(NotFound):
                net.remove()


def _http_ok(ip: str) -> bool:
    try:
        with socket.create_connection((ip, HTTP_PORT), timeout=1) as s:
            s.sendall(b"GET / HTTP/1.0\r\n\r\n")
            return b"200" in s.recv(100)
    except OSError:
        return False


class Upstream:
    """A DNS server for the test's names on 127.0.0.1 (UDP), in a thread: ``records`` maps a name (or
    ``*.domain``) to an IPv4 address; anything else is NXDOMAIN."""

    def __init__(self, records: dict[str, str]) -> None:
        self.records = records
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.queries: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def lookup(self, name: str) -> str | None:
        if name in self.records:
            return self.records[name]
        return next((ip for pattern, ip in self.records.items()
                     if pattern.startswith("*.") and name.endswith(pattern[1:])), None)

    def _serve(self) -> None:
        while not self._stop.is_set():
            if not select.select([self.sock], [], [], 0.2)[0]:
                continue
            wire, addr = self.sock.recvfrom(4096)
            query = dns.message.from_wire(wire)
            question = query.question[0]
            name = question.name.to_text(omit_final_dot=True).lower()
            self.queries.append(name)
            reply = dns.message.make_response(query)
            ip = self.lookup(name)
            if ip is None:
                reply.set_rcode(dns.rcode.NXDOMAIN)
            elif question.rdtype == dns.rdatatype.A:
                reply.answer.append(dns.rrset.from_text(question.name, 60, "IN", "A", ip))
            self.sock.sendto(reply.to_wire(), addr)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.sock.close()


class HostListeners:
    """On every host address: a TCP listener standing in for the worker and a UDP one, each recording
    who reached it; a real redis-server; all on free ports, both families."""

    def __init__(self) -> None:
        self.tcp_port, self.udp_port, self.redis_port = free_port(), free_port(), free_port()
        self.tcp_peers: list[str] = []
        self.udp_seen: list[tuple[str, str]] = []  # (payload, source address)
        self._socks: list[socket.socket] = []
        for family, any_addr in ((socket.AF_INET, "0.0.0.0"), (socket.AF_INET6, "::")):
            for kind, port in ((socket.SOCK_STREAM, self.tcp_port), (socket.SOCK_DGRAM, self.udp_port)):
                s = socket.socket(family, kind)
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6:
                    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                s.bind((any_addr, port))
                if kind == socket.SOCK_STREAM:
                    s.listen(64)
                self._socks.append(s)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()
        self.redis_dir = tempfile.mkdtemp(prefix="toolfleet-egress-redis-")
        self.redis = subprocess.Popen(
            [require_redis_server(), "--port", str(self.redis_port), "--bind", "0.0.0.0 ::", "--protected-mode",
             "no", "--save", "", "--appendonly", "no", "--dir", self.redis_dir, "--loglevel", "warning"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def _serve(self) -> None:
        while not self._stop.is_set():
            for s in select.select(self._socks, [], [], 0.2)[0]:
                if s.type == socket.SOCK_STREAM:
                    conn, peer = s.accept()
                    self.tcp_peers.append(peer[0])
                    conn.close()
                else:
                    data, peer = s.recvfrom(2048)
                    self.udp_seen.append((data.decode(errors="replace"), peer[0]))

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        for s in self._socks:
            s.close()
        self.redis.terminate()
        self.redis.wait(10)
        subprocess.run(["rm", "-rf", self.redis_dir], check=False)


class DockerApiDoor:
    """The Docker API on a TCP port of one host address (as a daemon started with ``-H tcp://`` would
    offer it), forwarded to the unix socket. Threads; closed with ``close``."""

    def __init__(self, address: str) -> None:
        self.server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.server.bind((address, 0))
        self.server.listen(16)
        self.address, self.port = address, self.server.getsockname()[1]
        self._stop = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            if not select.select([self.server], [], [], 0.2)[0]:
                continue
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            upstream.connect("/var/run/docker.sock")
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=_pump, args=(a, b), daemon=True).start()

    def version(self) -> dict[str, Any]:
        with socket.create_connection((self.address, self.port), timeout=5) as s:
            s.sendall(b"GET /version HTTP/1.0\r\nHost: docker\r\n\r\n")
            data = b""
            while chunk := s.recv(65536):
                data += chunk
        return json.loads(data.split(b"\r\n\r\n", 1)[1])

    def close(self) -> None:
        self._stop.set()
        self.server.close()


def _pump(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)


def run_probes(api: docker.APIClient, host_config: dict[str, Any], networking: dict[str, Any] | None,
               probes: list[list[Any]], timeout: float = 2.0) -> list[Any]:
    """Run the probes in a fresh container (root, Docker's default capabilities) on a network; the
    results in order. Blocking: call it through a thread while the DNS filter serves on the loop."""
    container = api.create_container(
        IMAGE, ["python3", "-c", PROBE, json.dumps(probes)], user="root", labels=LABEL,
        environment={"PROBE_TIMEOUT": str(timeout)}, host_config=api.create_host_config(**host_config),
        networking_config=networking)
    try:
        api.start(container)
        status = api.wait(container, timeout=300)
        out = api.logs(container, stdout=True, stderr=False).decode()
        err = api.logs(container, stdout=False, stderr=True).decode()
        assert status["StatusCode"] == 0, f"the probe failed: {err[-2000:]}"
        return json.loads(out.strip().splitlines()[-1])
    finally:
        api.remove_container(container, force=True)


@contextlib.contextmanager
def sample_server(api: docker.APIClient, host_config: dict[str, Any], networking: dict[str, Any] | None,
                  token: str) -> Iterator[str]:
    """A server (token at :8080/) in a sandbox network: yields its address."""
    container = api.create_container(IMAGE, ["python3", "-c", SERVER, token], user="root", labels=LABEL,
                                     host_config=api.create_host_config(**host_config), networking_config=networking)
    try:
        api.start(container)
        ip = next(iter(api.inspect_container(container)["NetworkSettings"]["Networks"].values()))["IPAddress"]
        wait_for(lambda: _http_ok(ip), 30, f"the server {token}")  # the host itself may reach a sandbox
        yield ip
    finally:
        api.remove_container(container, force=True)


def remove_leftovers(client: docker.DockerClient, owner: str) -> None:
    """Whatever a test of this run left: containers and networks labelled for it, and the enforcer's
    networks of ``owner``."""
    for container in client.containers.list(all=True, filters={"label": f"toolfleet.test=egress-{RUN}"}):
        with contextlib.suppress(NotFound):
            container.remove(force=True)
    for label in (f"toolfleet.test=egress-{RUN}", f"toolfleet.owner={owner}"):
        for net in client.networks.list(filters={"label": label}):
            with contextlib.suppress(NotFound, APIError):
                net.remove()


def is_sandbox_source(address: str, subnet: str) -> bool:
    try:
        return ipaddress.ip_address(address) in ipaddress.ip_network(subnet) or address.startswith("fe80::7466")
    except ValueError:
        return False

