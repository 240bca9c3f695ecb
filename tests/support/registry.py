"""A real image registry for the pull tests: Debian's ``docker-registry`` (the Distribution server) on a
free loopback port, storing in a temp dir, started and stopped by the fixture (every wait bounded).

The Docker daemon trusts registries on 127.0.0.0/8 over plain http by default, so pushing and pulling
``127.0.0.1:<port>/...`` needs no daemon configuration (``daemon_allows_loopback_registries`` checks it).
``hub_repository`` says where Docker Hub keeps a name, which is where a mirror of it keeps it too:
``tests/support/hub.py`` seeds a ``LocalRegistry`` that way, to stand in for Docker Hub.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.fleet import _wait, free_port, stop_process
from tests.support.prerequisites import require_docker_registry

_HUB_HOSTS = {"docker.io", "index.docker.io", "registry-1.docker.io"}


def hub_repository(name: str) -> str:
    """Where Docker Hub keeps an image name, as ``docker pull`` resolves it: ``ubuntu:24.04`` ->
    ``library/ubuntu:24.04``, ``team/task:1`` -> ``team/task:1``, ``docker.io/team/task`` -> ``team/task:latest``
    (a digest is kept: ``…@sha256:…``). A name on another registry (``ghcr.io/x/y``, ``127.0.0.1:5000/x``)
    raises ``ValueError``."""
    first, _, rest = name.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        if first not in _HUB_HOSTS:
            raise ValueError(f"{name!r} is on {first}, not on Docker Hub")
        name = rest
    if not name or name != name.lower() or " " in name:
        raise ValueError(f"{name!r} is not an image name")
    path, at, digest = name.partition("@")
    last = path.rsplit("/", 1)[-1]
    if not at and ":" not in last:
        path += ":latest"
    if "/" not in path:
        path = "library/" + path
    return path + (at + digest if at else "")


def daemon_allows_loopback_registries(client) -> bool:
    """Whether the Docker daemon pulls from and pushes to ``127.0.0.1:PORT`` over plain http (its default
    insecure-registry range, 127.0.0.0/8, unless the daemon's configuration removed it)."""
    import ipaddress

    cidrs = client.info().get("RegistryConfig", {}).get("InsecureRegistryCIDRs") or []
    return any(ipaddress.ip_address("127.0.0.1") in ipaddress.ip_network(cidr) for cidr in cidrs)


CONFIG = """\
version: 0.1
log:
  level: warn
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: {root}
  delete:
    enabled: true
http:
  addr: 127.0.0.1:{port}
"""


class LocalRegistry:
    def __init__(self) -> None:
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="toolfleet-registry-"))
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def host(self) -> str:
        """What an image names it by (and a worker's --registry): ``127.0.0.1:PORT``."""
        return f"127.0.0.1:{self.port}"

    def start(self) -> LocalRegistry:
        binary = require_docker_registry()
        config = self.dir / "config.yml"
        config.write_text(CONFIG.format(root=self.dir / "data", port=self.port))
        self.log = open(self.dir / "registry.log", "wb")  # noqa: SIM115 - the registry's log for its lifetime
        self.proc = subprocess.Popen([binary, "serve", str(config)], stdout=self.log, stderr=subprocess.STDOUT)
        try:
            _wait(self._answers, 15.0, f"docker-registry on {self.host}", interval=0.1)
        except TimeoutError:
            self.stop()
            raise RuntimeError(f"docker-registry did not start:\n{self.output()}") from None
        return self

    def _answers(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            raise RuntimeError(f"docker-registry exited with {self.proc.returncode}:\n{self.output()}")
        try:
            with urllib.request.urlopen(f"http://{self.host}/v2/", timeout=2) as response:
                return response.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def output(self) -> str:
        return (self.dir / "registry.log").read_text(errors="replace")[-4000:]

    def stop(self) -> None:
        stop_process(self.proc)
        self.proc = None

    def cleanup(self) -> None:
        self.stop()
        if hasattr(self, "log"):
            self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="module")
def local_registry() -> Iterator[LocalRegistry]:
    registry = LocalRegistry().start()
    yield registry
    registry.cleanup()
