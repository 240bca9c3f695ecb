"""What a sandbox may reach: network modes, address classes, operator allowances and host patterns
(pure; table-tested in ``tests/security/test_egress_policy.py``).

An address a sandbox asks for falls in one of three classes, decided in this order:

1. **never**: link-local (which holds the cloud metadata services) and the metadata address
   ``fd00:ec2::254``, plus what the worker protects besides (its broker's addresses). No operator
   setting reaches these. The host's own addresses and the other sandboxes are never reachable either;
   the rules enforce that by interface (see ``_nft.py``), whatever the address.
2. **allowed by the operator** (``--egress-allow CIDR|HOST``): reachable in ``public`` and
   ``allowlist`` modes, even inside a denied range.
3. **denied**: loopback, private (RFC 1918, ULA, CGNAT) and every other range that is not the public
   internet (this network, documentation, benchmarking, multicast, reserved, IPv4 embedded in IPv6).

Everything else is the internet: reachable in ``public`` mode, and in ``allowlist`` mode once an
allowed name has resolved to it.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, field_validator

from orchestrator.util._network_policy import (
    MODES,
    HostPattern,
    NetworkMode,
    normalise_hosts,
)

__all__ = ["DENIED", "MODES", "NEVER", "AddressClass", "EgressMode", "EgressPolicy", "HostPattern",
           "IPNetwork", "OperatorAllowance", "classify", "collapse", "parse_allowance"]

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
EgressMode = NetworkMode  # the modes and host patterns are shared with the sandbox config
AddressClass = Literal["never", "operator", "denied", "public"]


def _nets(*pairs: tuple[str, str]) -> tuple[tuple[IPNetwork, str], ...]:
    return tuple((ipaddress.ip_network(cidr), why) for cidr, why in pairs)


NEVER = _nets(("169.254.0.0/16", "link-local (cloud metadata)"), ("fe80::/10", "link-local"),
              ("fd00:ec2::254/128", "cloud metadata"))

DENIED = _nets(
    ("0.0.0.0/8", "this network"),
    ("10.0.0.0/8", "private"),
    ("100.64.0.0/10", "shared address space (CGNAT)"),
    ("127.0.0.0/8", "loopback"),
    ("172.16.0.0/12", "private"),
    ("192.0.0.0/24", "IETF protocol assignments"),
    ("192.0.2.0/24", "documentation"),
    ("192.88.99.0/24", "6to4 relay"),
    ("192.168.0.0/16", "private"),
    ("198.18.0.0/15", "benchmarking"),
    ("198.51.100.0/24", "documentation"),
    ("203.0.113.0/24", "documentation"),
    ("224.0.0.0/4", "multicast"),
    ("240.0.0.0/4", "reserved and broadcast"),
    ("::/128", "unspecified"),
    ("::1/128", "loopback"),
    ("::ffff:0:0/96", "IPv4-mapped"),
    ("64:ff9b::/96", "NAT64 (embeds IPv4)"),
    ("64:ff9b:1::/48", "local NAT64"),
    ("100::/64", "discard"),
    ("2001::/23", "IETF protocol assignments (Teredo)"),
    ("2001:db8::/32", "documentation"),
    ("2002::/16", "6to4 (embeds IPv4)"),
    ("fc00::/7", "unique local (ULA)"),
    ("ff00::/8", "multicast"),
)


def collapse(networks: Iterable[IPNetwork]) -> tuple[list[ipaddress.IPv4Network], list[ipaddress.IPv6Network]]:
    """IPv4 and IPv6 networks, each family merged into the fewest non-overlapping networks (nft's
    interval sets refuse overlapping elements)."""
    nets = list(networks)
    v4 = list(ipaddress.collapse_addresses(n for n in nets if isinstance(n, ipaddress.IPv4Network)))
    v6 = list(ipaddress.collapse_addresses(n for n in nets if isinstance(n, ipaddress.IPv6Network)))
    return v4, v6


def _within(net: IPNetwork, ranges: Iterable[tuple[IPNetwork, str]]) -> str | None:
    for outer, why in ranges:
        if net.version == outer.version and net.subnet_of(outer):  # type: ignore[arg-type]  # same IP version: checked first
            return why
    return None


def classify(address: str | IPAddress, operator: Iterable[IPNetwork] = (),
             protected: Iterable[IPNetwork] = ()) -> tuple[AddressClass, str]:
    """The class of ``address`` and why: ``operator`` are the networks the operator allows,
    ``protected`` the worker's own never-reachable networks (its broker)."""
    host = ipaddress.ip_network(ipaddress.ip_address(address))
    if (why := _within(host, NEVER)) is not None:
        return "never", why
    if any(host.version == n.version and host.subnet_of(n) for n in protected):  # type: ignore[arg-type]  # same IP version: checked first
        return "never", "protected by the worker"
    if any(host.version == n.version and host.subnet_of(n) for n in operator):  # type: ignore[arg-type]  # same IP version: checked first
        return "operator", "allowed by the operator"
    if (why := _within(host, DENIED)) is not None:
        return "denied", why
    return "public", "internet"


class EgressPolicy(BaseModel):
    """One sandbox's network: ``none`` (no route out), ``public`` (the internet, with DNS) or
    ``allowlist`` (only ``allowed_hosts``). Operator allowances apply on top (see the module doc)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    mode: EgressMode = "none"
    allowed_hosts: tuple[str, ...] = ()

    @field_validator("allowed_hosts")
    @classmethod
    def _patterns_parse(cls, hosts: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(normalise_hosts(hosts))

    def patterns(self) -> tuple[HostPattern, ...]:
        return tuple(HostPattern.parse(h) for h in self.allowed_hosts)

    def allows_name(self, name: str) -> bool:
        """Whether the sandbox's DNS may answer ``name`` (``public``: any; ``none``: none)."""
        if self.mode == "public":
            return True
        return self.mode == "allowlist" and any(p.matches(name) for p in self.patterns())


@dataclass(frozen=True)
class OperatorAllowance:
    """``--egress-allow`` values: networks, and host names (resolved when the enforcer starts; in
    ``allowlist`` mode the sandbox's DNS also answers them)."""

    networks: tuple[IPNetwork, ...] = ()
    names: tuple[str, ...] = ()


def parse_allowance(values: Iterable[str]) -> OperatorAllowance:
    """Parse ``--egress-allow CIDR|HOST`` values; ``ValueError`` (one line, naming the value) for one
    that is neither, or that lies wholly in a never-reachable range."""
    networks: list[IPNetwork] = []
    names: list[str] = []
    for value in values:
        pattern = HostPattern.parse(value) if value.strip() else None
        if pattern is None or pattern.wildcard:
            raise ValueError(f"--egress-allow {value!r}: expected a CIDR, an IP address or a host name")
        if pattern.network is None:
            names.append(pattern.name)
            continue
        if (why := _within(pattern.network, NEVER)) is not None:
            raise ValueError(f"--egress-allow {value!r}: {why} addresses are never reachable from a sandbox")
        networks.append(pattern.network)
    return OperatorAllowance(networks=tuple(networks), names=tuple(dict.fromkeys(names)))
