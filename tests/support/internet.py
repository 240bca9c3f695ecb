"""The internet on a machine without one: a web server in a container on Docker networks made for it.

``LocalInternet`` builds (once, cached by content) an image from ``internet_site/`` — the sandbox image with a
generated site (an installer for the ``tbrun`` test runner, files of 4 and 50 MiB, a PEP 503 package index of
two wheels, a Debian package; see ``internet_site/make_site.py``) — creates two Docker networks and starts one
container on both, then removes them all in ``stop``. Every wait is bounded.

- Its main address (``url``) is in ``198.18.0.0/16`` (a random /24 of it), the range the Terminal-Bench-format
  tasks' allowlist task names in ``allowed_hosts``; its second address (``other_url``), in ``198.19.0.0/16``,
  stands for a host nobody allows. Both ranges are special-purpose (RFC 2544: benchmarking), so they collide
  with nothing real; Python's ``ipaddress`` counts them private. With ``ranges=False`` Docker picks the
  networks (172.x, private) and there is no second address.
- Docker isolates bridge networks from each other: a container reaches these addresses from the internet's own
  networks (``network``: give builds ``--network``/``--build-network`` it) or from a network it is
  ``connect``-ed to, or through a firewall that lets it pass (the egress policy under test).
- ``publish=True`` also publishes the port on the docker0 bridge address (``host_url``,
  ``http://172.17.0.1:PORT``), which containers on any network reach through the host: how Harbor's compose
  projects, each on a network of its own, reach it.

Requests are logged by the server as JSON lines (``requests()``), so a test can tell what a sandbox fetched.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import ipaddress
import json
import random
import socket
import struct
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

import pytest

from tests.support.fleet import _wait
from tests.support.prerequisites import IMAGE

SITE_DIR = Path(__file__).with_name("internet_site")
IMAGE_REPOSITORY = "toolfleet/test-internet"
LABEL = "toolfleet.test"  # value "internet" on the image, the networks and the container
PORT = 8000
ALLOWED_RANGE = "198.18.0.0/16"  # the allowlist task's allowed_hosts entry; `url` is in it
OTHER_RANGE = "198.19.0.0/16"  # `other_url` is in it: allowed by nobody
SMALL_FILE = "files/dataset-4m.bin"
LARGE_FILE = "files/weights-50m.bin"
INDEX_PACKAGES = ("tbhello", "tbcalc")  # tbcalc requires tbhello
DEB_FILE = "debs/tbtool_1.0.0_all.deb"


@dataclass(frozen=True)
class Request:
    """One request the server answered."""

    method: str
    path: str
    status: int
    client: str


def site_image(client: Any) -> str:
    """The test internet's image, ``toolfleet/test-internet:<hash of internet_site/ and the base image>``; built
    (without network) only when that tag is absent."""
    digest = hashlib.sha256(client.images.get(IMAGE).id.encode())
    for path in sorted(SITE_DIR.iterdir()):
        if path.is_file():
            digest.update(f"\0{path.name}\0".encode() + path.read_bytes())
    tag = f"{IMAGE_REPOSITORY}:{digest.hexdigest()[:12]}"
    from docker.errors import ImageNotFound

    try:
        client.images.get(tag)
        return tag
    except ImageNotFound:
        pass
    for event in client.api.build(path=str(SITE_DIR), tag=tag, rm=True, forcerm=True, pull=False,
                                  network_mode="none", labels={LABEL: "internet"}, decode=True):
        if "error" in event:
            raise RuntimeError(f"building {tag} failed: {event['error']}")
    return tag


def bridge_gateway(client: Any) -> str:
    """The host's address on Docker's default bridge (docker0), which every container can route to."""
    bridge = client.networks.get("bridge").attrs
    for pool in bridge.get("IPAM", {}).get("Config") or []:
        if pool.get("Gateway"):
            return str(pool["Gateway"])
    name = bridge.get("Options", {}).get("com.docker.network.bridge.name", "docker0")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:  # SIOCGIFADDR: the interface's IPv4 address
        packed = fcntl.ioctl(sock.fileno(), 0x8915, struct.pack("256s", name.encode()[:15]))
    return socket.inet_ntoa(packed[20:24])


class LocalInternet:
    """The test internet: ``start()`` it (or use it as a context manager), read its addresses, ``stop()`` it."""

    def __init__(self, client: Any = None, *, ranges: bool = True, publish: bool = False) -> None:
        import docker

        self.client = client or docker.from_env(timeout=120)
        self.ranges = ranges
        self.publish = publish
        self.name = f"toolfleet-internet-{uuid.uuid4().hex[:8]}"
        self.network = self.name
        self.other_network: str | None = f"{self.name}-other" if ranges else None
        self.address = ""
        self.other_address: str | None = None
        self.host_port: int | None = None
        self.gateway: str | None = None
        self._container: Any = None
        self._networks: list[Any] = []

    # -- addresses ----------------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """``http://<address>:8000``: its address on ``network`` (in 198.18.0.0/16 unless ``ranges=False``)."""
        return f"http://{self.address}:{PORT}"

    @property
    def other_url(self) -> str:
        """``http://<address>:8000`` on ``other_network`` (198.19.0.0/16): the host an allowlist leaves out."""
        if self.other_address is None:
            raise RuntimeError("this test internet has no second address (ranges=False)")
        return f"http://{self.other_address}:{PORT}"

    @property
    def host_url(self) -> str:
        """``http://<docker0 address>:<published port>`` (``publish=True``): reachable from any container."""
        if self.host_port is None:
            raise RuntimeError("this test internet publishes no port (publish=False)")
        return f"http://{self.gateway}:{self.host_port}"

    def env(self) -> dict[str, str]:
        """What the tasks read (their task.toml's ``${TB_INTERNET_URL}``, ``${TB_OTHER_URL}``)."""
        env = {"TB_INTERNET_URL": self.url}
        if self.other_address is not None:
            env["TB_OTHER_URL"] = self.other_url
        return env

    def host_env(self) -> dict[str, str]:
        """As ``env``, with the main URL through the published port (for harnesses such as Harbor whose containers
        sit on networks of their own). ``TB_OTHER_URL`` stays the second address: no such container reaches it."""
        return {**self.env(), "TB_INTERNET_URL": self.host_url}

    # -- lifecycle ----------------------------------------------------------------------------------------

    def start(self) -> Self:
        try:
            image = site_image(self.client)
            self._networks.append(self._create_network(self.network, ALLOWED_RANGE if self.ranges else None))
            ports: dict[str, Any] | None = None
            if self.publish:
                self.gateway = bridge_gateway(self.client)
                ports = {f"{PORT}/tcp": (self.gateway, None)}
            self._container = self.client.containers.run(
                image, name=self.name, detach=True, network=self.network, ports=ports, labels={LABEL: "internet"},
                mem_limit="256m")
            if self.other_network is not None:
                other = self._create_network(self.other_network, OTHER_RANGE)
                self._networks.append(other)
                other.connect(self._container)
            self._container.reload()
            networks = self._container.attrs["NetworkSettings"]["Networks"]
            self.address = networks[self.network]["IPAddress"]
            if self.other_network is not None:
                self.other_address = networks[self.other_network]["IPAddress"]
            if self.publish:
                self.host_port = int(self._container.attrs["NetworkSettings"]["Ports"][f"{PORT}/tcp"][0]["HostPort"])
            _wait(self._answers, 30.0, f"the test internet at {self.url}", interval=0.1)
        except BaseException:
            self.stop()
            raise
        return self

    def _create_network(self, name: str, within: str | None) -> Any:
        from docker.errors import APIError
        from docker.types import IPAMConfig, IPAMPool

        if within is None:
            return self.client.networks.create(name, driver="bridge", labels={LABEL: "internet"})
        subnets = list(ipaddress.ip_network(within).subnets(new_prefix=24))
        for subnet in random.sample(subnets, 8):  # another test's internet may hold a /24: try others
            try:
                return self.client.networks.create(
                    name, driver="bridge", labels={LABEL: "internet"},
                    ipam=IPAMConfig(pool_configs=[IPAMPool(subnet=str(subnet))]))
            except APIError as exc:
                if "overlap" not in str(exc).lower():
                    raise
        raise RuntimeError(f"no free /24 in {within} for {name} (8 tries)")

    def _answers(self) -> bool:
        if self._container is not None:
            self._container.reload()
            if self._container.status in ("exited", "dead"):
                raise RuntimeError(f"the test internet exited:\n{self.logs()}")
        try:
            return bool(self.fetch("/manifest.json", timeout=2))
        except (urllib.error.URLError, OSError):
            return False

    def stop(self) -> None:
        """Remove the container and the networks (whatever of them exists); safe to call twice."""
        from docker.errors import DockerException

        if self._container is not None:
            with contextlib.suppress(DockerException):
                self._container.remove(force=True)
            self._container = None
        for network in reversed(self._networks):
            with contextlib.suppress(DockerException):
                network.remove()
        self._networks = []

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- what it serves, and what it was asked ---------------------------------------------------------------

    def fetch(self, path: str, timeout: float = 30) -> bytes:
        """GET ``path`` from the host (the host routes to the internet's own networks)."""
        with urllib.request.urlopen(self.url + path, timeout=timeout) as response:
            return bytes(response.read())

    def manifest(self) -> dict[str, Any]:
        """``manifest.json``: every file's size and sha256, the runner's version, the packages and the .deb."""
        return dict(json.loads(self.fetch("/manifest.json")))

    def connect(self, network: str) -> str:
        """Join another Docker network too; returns the address there (the same server, port 8000)."""
        self.client.networks.get(network).connect(self._container)
        self._container.reload()
        return str(self._container.attrs["NetworkSettings"]["Networks"][network]["IPAddress"])

    def disconnect(self, network: str) -> None:
        self.client.networks.get(network).disconnect(self._container)

    def logs(self) -> str:
        if self._container is None:
            return ""
        return bytes(self._container.logs(stdout=True, stderr=True, tail=200)).decode(errors="replace")

    def requests(self) -> list[Request]:
        """Every request answered so far, oldest first (as logged: ``wait_for`` a request just answered)."""
        found = []
        for line in bytes(self._container.logs(stdout=True, stderr=False)).decode(errors="replace").splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if isinstance(entry, dict) and "method" in entry:
                found.append(Request(entry["method"], entry["path"], entry["status"], entry["client"]))
        return found

    def wait_for(self, path: str, timeout: float = 10.0) -> list[Request]:
        """The requests for ``path``, once there is one (its log line can trail the response by a moment)."""
        _wait(lambda: any(r.path == path for r in self.requests()), timeout, f"a request for {path}", interval=0.1)
        return [r for r in self.requests() if r.path == path]


@pytest.fixture(scope="module")
def local_internet(sandbox_image: str) -> Iterator[LocalInternet]:
    """A started test internet (both addresses, a published port), removed after the module."""
    with LocalInternet(publish=True) as internet:
        yield internet
