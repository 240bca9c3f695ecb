"""The egress enforcer: a worker's one object for sandbox networks. It probes what the host can
enforce, and for each sandbox creates its network, its rules and its DNS filter, hands back what
container creation needs, and removes all of it on release. Its reaper removes what a crashed worker
left (networks by their labels, rules whose network is gone).

Why the host and not the sandbox: a sandbox may run as root with Docker's default capabilities
(NET_RAW included), so it can ignore proxy variables, craft packets and change its own routes'
use; only rules in the host's network namespace, keyed by the bridge a packet arrives on, hold.
A name that resolves to a denied address is denied because the rules judge addresses, not names.
"""

from __future__ import annotations

import asyncio
import dataclasses
import ipaddress
import secrets
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog
from docker.errors import DockerException
from pydantic import BaseModel, ConfigDict, Field, field_validator

from ._dns import DnsFilter, DnsLimits, SandboxDns, parse_resolv_conf
from ._errors import EgressError
from ._network import HOST, KEY, DockerCalls, SandboxNetworks, reap_reason
from ._nft import (
    GENERATIONS,
    DockerUserHook,
    Nft,
    SandboxRules,
    render_allow,
    render_base,
    render_release,
    render_sandbox,
    render_update,
    valid_key,
)
from ._policy import (
    MODES,
    EgressMode,
    EgressPolicy,
    IPNetwork,
    classify,
    parse_allowance,
)

__all__ = ["EgressConfig", "EgressEnforcer", "SandboxNetwork"]

log = structlog.get_logger("toolfleet.egress")


def _host_port(text: str) -> tuple[str, int]:
    """``ADDR``, ``ADDR:PORT`` or ``[ADDR6]:PORT``."""
    if text.startswith("["):
        addr, _, port = text[1:].partition("]:")
    elif text.count(":") == 1:
        addr, _, port = text.partition(":")
    else:
        addr, port = text, ""
    ipaddress.ip_address(addr)
    return addr, int(port or 53)


class EgressConfig(BaseModel):
    """The worker's (or an embedded eval's) egress settings."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    allow: tuple[str, ...] = ()          # --egress-allow CIDR|HOST
    protect: tuple[str, ...] = ()        # never reachable besides the built-in ranges: the broker's host
    subnet_pool: ipaddress.IPv4Network = ipaddress.IPv4Network("10.213.0.0/16")
    subnet_prefix: int = Field(27, ge=16, le=29)  # /27: 29 containers per sandbox, 2,048 sandboxes
    mtu: int | None = Field(None, ge=576, le=65535)
    upstreams: tuple[str, ...] = ()      # resolvers for the DNS filter; default: the host's resolv.conf
    mark: int = Field(0x10000000, gt=0, lt=1 << 32)  # its low byte is the policy's generation (``_nft``)
    set_size: int = Field(4096, ge=16, le=1 << 16)

    @field_validator("mark")
    @classmethod
    def _mark_leaves_the_generation_byte(cls, mark: int) -> int:
        if mark & GENERATIONS:
            raise ValueError(f"the conntrack mark 0x{mark:08x} must leave its low byte free (the policy generation)")
        return mark

    @field_validator("allow")
    @classmethod
    def _allow_parses(cls, values: tuple[str, ...]) -> tuple[str, ...]:
        parse_allowance(values)
        return values

    @field_validator("upstreams")
    @classmethod
    def _upstreams_parse(cls, values: tuple[str, ...]) -> tuple[str, ...]:
        for value in values:
            try:
                _host_port(value)
            except ValueError:
                raise ValueError(f"DNS upstream {value!r}: expected ADDR, ADDR:PORT or [ADDR6]:PORT") from None
        return values


@dataclass(frozen=True)
class SandboxNetwork:
    """One sandbox's network, as container creation needs it."""

    key: str
    sandbox_id: str
    mode: EgressMode
    name: str
    bridge: str
    subnet: str
    gateway: str

    @property
    def dns(self) -> list[str]:
        """The DNS filter (Docker's embedded resolver forwards to it). Given in every mode: in ``none``
        nothing listens there and the rules refuse it, and a later policy may open it (``update``)."""
        return [self.gateway]

    def host_config(self) -> dict[str, Any]:
        """Keyword arguments for ``APIClient.create_host_config``."""
        return {"network_mode": self.name, "dns": self.dns}

    def networking_config(self, *aliases: str) -> dict[str, Any]:
        """``create_container(networking_config=...)``: the service reachable by ``aliases`` (its name)."""
        return {"EndpointsConfig": {self.name: {"Aliases": list(aliases)}}}


async def _resolve(loop: asyncio.AbstractEventLoop, name: str) -> list[IPNetwork]:
    try:
        infos = await loop.getaddrinfo(name, None, proto=socket.IPPROTO_TCP)
    except OSError as exc:
        raise EgressError(f"cannot resolve {name!r}: {exc.strerror or exc}") from exc
    return [ipaddress.ip_network(str(info[4][0]).split("%")[0]) for info in infos]


def _host_resolvers() -> list[tuple[str, int]]:
    """The host's resolvers ([] without a readable resolv.conf: the DNS filter then refuses to start,
    and the enforcer offers only ``none``, saying why)."""
    try:
        return parse_resolv_conf(Path("/etc/resolv.conf").read_text(errors="replace"))
    except OSError:
        return []


class EgressEnforcer:
    """Sandbox networks under a policy on one host. ``start`` (or ``ready``) first; ``modes`` says
    what it enforces. One per process (a worker, an embedded eval), built by its owner and handed down."""

    def __init__(self, config: EgressConfig, docker_calls: DockerCalls, owner: str = HOST,
                 dns_limits: DnsLimits | None = None) -> None:
        self.config = config
        self.owner = owner
        self.docker = docker_calls
        self.nft = Nft()
        self.hook = DockerUserHook(config.mark)
        self.networks = SandboxNetworks(docker_calls, config.subnet_pool, config.subnet_prefix, config.mtu, owner)
        self.dns_limits = dns_limits
        self.modes: frozenset[EgressMode] = frozenset({"none"})
        self.unavailable: str | None = "not started"
        self.operator: tuple[IPNetwork, ...] = ()
        self.protected: tuple[IPNetwork, ...] = ()
        self.operator_names: frozenset[str] = frozenset()
        self.dns: DnsFilter | None = None
        self._open: dict[str, SandboxNetwork] = {}
        self._policies: dict[str, tuple[EgressPolicy, int]] = {}  # key -> (its policy, its generation)
        self._held: set[str] = set()  # open, or being opened (the reaper must not take it)
        self._loop: asyncio.AbstractEventLoop | None = None  # where its DNS filter serves
        self._starting: tuple[asyncio.AbstractEventLoop, asyncio.Lock] | None = None

    def __len__(self) -> int:
        return len(self._open)

    @property
    def enforcing(self) -> bool:
        """Whether the host's rules are in place (``modes`` holds more than ``none``)."""
        return self.dns is not None and self.unavailable is None

    async def ready(self) -> frozenset[EgressMode]:
        """``start`` once per event loop (embedded mode runs one ``asyncio.run`` after another): the
        DNS filter's sockets belong to the loop that made them. Sandboxes of a previous loop are
        forgotten (their listeners died with it) and left to the reaper."""
        loop = asyncio.get_running_loop()
        if self._loop is loop:
            return self.modes
        if self._starting is None or self._starting[0] is not loop:
            self._starting = (loop, asyncio.Lock())
        async with self._starting[1]:
            if self._loop is not loop:
                if self._loop is not None:
                    log.warning("egress.loop_changed", forgotten=len(self._open))
                    self._open.clear()
                    self._policies.clear()
                    self._held.clear()
                    self.dns = None
                await self.start()
                self._loop = loop
        return self.modes

    async def start(self) -> frozenset[EgressMode]:
        """Probe and prepare the host: the modes this worker can enforce ({"none"} alone when the
        host's rules cannot be changed, with the reason in ``unavailable``). A setting that cannot be
        honoured (an allowed or protected name that does not resolve) raises ``EgressError``."""
        loop = asyncio.get_running_loop()
        allowance = parse_allowance(self.config.allow)
        operator, protected = list(allowance.networks), []
        for name in allowance.names:
            operator += await _resolve(loop, name)
        for value in self.config.protect:
            try:
                protected.append(ipaddress.ip_network(value, strict=False))
            except ValueError:
                protected += await _resolve(loop, value)
        self.operator, self.protected = tuple(operator), tuple(protected)
        self.operator_names = frozenset(allowance.names)
        # resolv.conf is read off the event loop, which serves every sandbox's DNS
        upstreams = [_host_port(u) for u in self.config.upstreams] or await asyncio.to_thread(_host_resolvers)
        reason = await self.nft.usable()
        if reason is None:
            try:
                await self.docker.connect()
                await self.nft.apply(render_base())
                await self.hook.ensure()
                self.dns = DnsFilter(upstreams, self._allow_answers, self.dns_limits)
            except EgressError as exc:
                reason = str(exc)
            except DockerException as exc:
                reason = f"Docker is not reachable: {exc}"
        self.unavailable = reason
        self.modes = frozenset({"none"}) if reason else frozenset(MODES)
        self._loop = loop
        if reason:
            log.warning("egress.unavailable", reason=reason)
        else:
            await self.reap()
        return self.modes

    async def _allow_answers(self, key: str, answers: list[tuple[str, int]]) -> None:
        await self.nft.apply(render_allow(key, answers))

    def _sandbox_dns(self, key: str, gateway: str, policy: EgressPolicy) -> SandboxDns:
        names = self.operator_names

        def allows_name(name: str) -> bool:
            return policy.allows_name(name) or name.lower().rstrip(".") in names

        def admits(address: str) -> bool:
            return classify(address, self.operator, self.protected)[0] == "public"

        return SandboxDns(key=key, address=gateway, allows_name=allows_name, track=policy.mode == "allowlist",
                          admits=admits)

    def _rules(self, key: str, policy: EgressPolicy, generation: int) -> SandboxRules:
        return SandboxRules(key=key, mode=policy.mode, mark=self.config.mark, operator=self.operator,
                            protected=self.protected, hosts=policy.patterns(), set_size=self.config.set_size,
                            generation=generation)

    def _can_enforce(self, mode: EgressMode) -> None:
        if self.dns is None or mode not in self.modes or self.unavailable is not None:
            raise EgressError(f"this host cannot enforce network mode '{mode}': {self.unavailable}")

    async def open(self, sandbox_id: str, policy: EgressPolicy) -> SandboxNetwork:
        """Create the sandbox's network, rules and DNS filter; ``release`` removes them. Even a
        ``none`` sandbox's network needs the rules (a bridge network reaches the host), so every
        network needs a host that enforces."""
        await self.ready()
        self._can_enforce(policy.mode)
        assert self.dns is not None
        key = secrets.token_hex(5)
        self._held.add(key)
        try:
            plan = await self.networks.create(key, policy.mode, sandbox_id)
            try:
                await self.nft.apply(render_sandbox(self._rules(key, policy, 1)))
                if policy.mode != "none":
                    await self.dns.serve(self._sandbox_dns(key, str(plan.gateway), policy))
            except BaseException:
                await self._teardown(key, plan.name)
                raise
        except BaseException:
            self._held.discard(key)
            raise
        network = SandboxNetwork(key=key, sandbox_id=sandbox_id, mode=policy.mode, name=plan.name,
                                 bridge=plan.bridge, subnet=str(plan.subnet), gateway=str(plan.gateway))
        self._open[key] = network
        self._policies[key] = (policy, 1)
        log.info("egress.open", key=key, sandbox=sandbox_id, mode=policy.mode, subnet=network.subnet)
        return network

    async def update(self, network: SandboxNetwork, policy: EgressPolicy) -> SandboxNetwork:
        """Change a live sandbox's policy (a phase with its own network mode): its rules in one
        transaction, under the next generation, so a connection the old policy accepted is judged by
        the new one from its next packet on; its DNS filter on, off or with the new names. Returns the
        network as it now is. On failure the old policy's rules stay whole (one transaction), and the
        error says so."""
        await self.ready()
        current = self._policies.get(network.key)
        if current is None or network.key not in self._open:
            raise EgressError(f"the sandbox network {network.name} is not open here")
        self._can_enforce(policy.mode)
        assert self.dns is not None
        old, generation = current
        generation = generation % GENERATIONS + 1
        await self.dns.stop(network.key)  # no answer from the old policy once the new rules are in
        try:
            await self.nft.apply(render_update(self._rules(network.key, policy, generation)))
        except EgressError:
            if old.mode != "none":
                await self.dns.serve(self._sandbox_dns(network.key, network.gateway, old))
            raise
        if policy.mode != "none":
            await self.dns.serve(self._sandbox_dns(network.key, network.gateway, policy))
        updated = dataclasses.replace(network, mode=policy.mode)
        self._open[network.key] = updated
        self._policies[network.key] = (policy, generation)
        log.info("egress.update", key=network.key, sandbox=network.sandbox_id, mode=policy.mode,
                 was=old.mode, generation=generation)
        return updated

    async def _teardown(self, key: str, name: str) -> list[EgressError]:
        errors = []
        if self.dns is not None:
            await self.dns.stop(key)
        for step in (self.nft.apply(render_release(key)), self.networks.remove(name)):
            try:
                await step
            except EgressError as exc:
                errors.append(exc)
        return errors

    async def release(self, network: SandboxNetwork) -> None:
        """Remove the sandbox's DNS filter, rules and network (its containers must be gone). Rules go
        before the network: a bridge without rules rejects everything."""
        errors = await self._teardown(network.key, network.name)
        self._open.pop(network.key, None)
        self._policies.pop(network.key, None)
        self._held.discard(network.key)  # a network left behind is the reaper's from now on
        if errors:
            raise errors[0]

    async def reap(self) -> list[str]:
        """Remove crashed workers' sandbox networks and rules (and this process's released leftovers);
        returns their keys. Rules are listed before networks: a live worker creates the network first,
        so rules seen without a network are a leftover, never a sandbox being opened. Nothing to do on
        a host that does not enforce (it made no networks)."""
        if not self.enforcing:
            return []
        with_rules = await self.nft.sandbox_keys()
        reaped, seen = [], set()
        for info in await self.networks.listed():
            labels = info.get("Labels") or {}
            try:
                key = valid_key(labels.get(KEY, ""))
            except ValueError:
                continue
            seen.add(key)
            reason = reap_reason(labels, self._held, self.owner)
            if reason is not None:
                errors = await self._teardown(key, info.get("Name", ""))
                log.info("egress.reaped", key=key, reason=reason, errors=[str(e) for e in errors])
                reaped.append(key)
        for key in sorted(with_rules - seen - self._held):
            try:
                await self.nft.apply(render_release(key))
                reaped.append(key)
            except EgressError as exc:
                log.warning("egress.reap_failed", key=key, error=str(exc))
        return reaped

    async def aclose(self) -> None:
        """Release every sandbox still open (a worker shutting down)."""
        for network in list(self._open.values()):
            try:
                await self.release(network)
            except EgressError as exc:
                log.warning("egress.release_failed", key=network.key, error=str(exc))
        if self.dns is not None:
            await self.dns.aclose()
