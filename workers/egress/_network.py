"""Per-sandbox Docker networks: one bridge network per sandbox, which all its services join (they
reach each other by name through Docker's embedded DNS, as compose does), and whose traffic leaving
it the host filters (``_nft.py``).

Each network is named ``toolfleet-egress-<key>``, has the bridge ``tfe-<key>`` and a subnet drawn
at random from the configured pool (Docker's default pools hold about 30 networks, fewer than one
host's sandboxes); Docker refuses an overlapping subnet, and another is drawn. Labels record the
mode, the key, the caller's sandbox id and the owning process (machine, pid and its start time), so
a reaper can tell a crashed worker's leftovers from a live worker's networks.
"""

from __future__ import annotations

import ipaddress
import os
import random
import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import docker
import psutil
from docker.errors import APIError, DockerException, NotFound
from docker.types import IPAMConfig, IPAMPool

from ._errors import EgressError
from ._nft import bridge_name, valid_key
from ._policy import EgressMode

__all__ = ["DockerCalls", "NetworkPlan", "SandboxNetworks", "network_labels", "plan_subnet", "reap_reason"]

T = TypeVar("T")

MANAGED = "toolfleet.managed"
EGRESS = "toolfleet.egress"          # the mode; its presence marks a sandbox network
KEY = "toolfleet.egress_key"
SANDBOX = "toolfleet.sandbox"
OWNER = "toolfleet.owner"
MACHINE = "toolfleet.machine"
OWNER_PID = "toolfleet.owner_pid"
OWNER_STARTED = "toolfleet.owner_started"
HOST = socket.gethostname()
_SUBNET_TRIES = 32


class DockerCalls(Protocol):
    """The Docker client as the sandbox driver holds it: the low-level API (after ``connect``) and a
    way to run its blocking calls off the event loop (``workers.sandbox``'s ``DockerAPI`` is one)."""

    @property
    def api(self) -> docker.APIClient: ...

    async def connect(self) -> None: ...

    async def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T: ...


def _started(pid: int) -> int | None:
    try:
        return int(psutil.Process(pid).create_time())
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None


def network_labels(key: str, mode: EgressMode, sandbox_id: str, owner: str) -> dict[str, str]:
    pid = os.getpid()
    return {MANAGED: "1", EGRESS: mode, KEY: valid_key(key), SANDBOX: sandbox_id[:200], OWNER: owner,
            MACHINE: HOST, OWNER_PID: str(pid), OWNER_STARTED: str(_started(pid) or 0)}


def reap_reason(labels: dict[str, str], held: set[str], owner: str) -> str | None:
    """Why a sandbox network (by its labels) should go, or None to keep it: its process on this
    machine is gone, or it is this very process's and no sandbox holds it (a release that could not
    remove it). Another live worker's networks, and other machines', are left alone."""
    key = labels.get(KEY, "")
    if key in held or labels.get(MACHINE) != HOST:
        return None
    pid = int(labels.get(OWNER_PID) or 0)
    started = _started(pid) if pid else None
    if started is None or str(started) != labels.get(OWNER_STARTED):
        return "orphaned"
    if pid == os.getpid() and labels.get(OWNER) == owner:
        return "released"
    return None


def plan_subnet(pool: ipaddress.IPv4Network, prefix: int, pick: Callable[[int], int]) -> ipaddress.IPv4Network:
    """The ``pick(n)``-th of the ``n`` subnets of ``pool`` with ``prefix`` (pure)."""
    count = 1 << (prefix - pool.prefixlen)
    index = pick(count) % count
    return ipaddress.IPv4Network((int(pool.network_address) + index * (1 << (32 - prefix)), prefix))


@dataclass(frozen=True)
class NetworkPlan:
    key: str
    name: str
    bridge: str
    subnet: ipaddress.IPv4Network
    gateway: ipaddress.IPv4Address


class SandboxNetworks:
    """Create, list and remove the sandbox networks of one enforcer."""

    def __init__(self, docker_calls: DockerCalls, pool: ipaddress.IPv4Network, prefix: int,
                 mtu: int | None = None, owner: str = HOST) -> None:
        if not pool.prefixlen <= prefix <= 29:
            raise ValueError(f"sandbox subnets of /{prefix} do not fit the pool {pool} (at most /29)")
        self.docker = docker_calls
        self.pool = pool
        self.prefix = prefix
        self.mtu = mtu
        self.owner = owner
        self._random = random.SystemRandom()

    async def create(self, key: str, mode: EgressMode, sandbox_id: str) -> NetworkPlan:
        name, bridge = f"toolfleet-egress-{valid_key(key)}", bridge_name(key)
        options = {"com.docker.network.bridge.name": bridge,
                   "com.docker.network.bridge.enable_icc": "true",  # the sandbox's services reach each other
                   "com.docker.network.bridge.enable_ip_masquerade": "true"}
        if self.mtu:
            options["com.docker.network.driver.mtu"] = str(int(self.mtu))
        labels = network_labels(key, mode, sandbox_id, self.owner)
        last = ""
        for _ in range(_SUBNET_TRIES):
            subnet = plan_subnet(self.pool, self.prefix, self._random.randrange)
            gateway = subnet.network_address + 1
            ipam = IPAMConfig(pool_configs=[IPAMPool(subnet=str(subnet), gateway=str(gateway))])
            try:
                # Never `internal`, even for `none`: the rules decide (an internal network would not keep the
                # host out anyway), and a later policy (``update``) may open a way out, which an internal
                # network, without Docker's masquerading, could not carry.
                await self.docker.call(self.docker.api.create_network, name, driver="bridge", options=options,
                                       ipam=ipam, internal=False, labels=labels, enable_ipv6=False,
                                       check_duplicate=True)
                return NetworkPlan(key=key, name=name, bridge=bridge, subnet=subnet, gateway=gateway)
            except APIError as exc:
                last = str(exc.explanation or exc)
                if "overlap" not in last.lower():
                    raise EgressError(f"cannot create the sandbox network: {last}") from exc
            except DockerException as exc:
                raise EgressError(f"cannot create the sandbox network: {exc}") from exc
        raise EgressError(f"no free /{self.prefix} subnet in {self.pool} after {_SUBNET_TRIES} tries ({last})")

    async def remove(self, name: str) -> None:
        """Remove a network (gone already is fine); Docker refuses while containers are attached."""
        try:
            await self.docker.call(self.docker.api.remove_network, name)
        except NotFound:
            pass
        except DockerException as exc:
            raise EgressError(f"cannot remove the sandbox network {name}: {exc}") from exc

    async def listed(self) -> list[dict[str, Any]]:
        """Every sandbox network on the daemon (all workers'), as ``networks/json`` entries."""
        try:
            return await self.docker.call(self.docker.api.networks, filters={"label": [EGRESS]})
        except DockerException as exc:
            raise EgressError(f"cannot list the sandbox networks: {exc}") from exc

