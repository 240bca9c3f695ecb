"""A sandbox's network policy as its config names it: the mode and the allowed hosts (pure).

Shared by both halves: the sandbox config validates ``network_mode`` and ``allowed_hosts`` with it
where a task is loaded, a worker re-reads them on arrival, and the host-side enforcer
(``workers/egress``) turns them into rules. docs/egress.md says what each mode reaches.

- ``none``: nothing outside the sandbox's own services (the default, as Inspect's);
- ``public``: the internet, with DNS; never the host, the broker, other sandboxes, link-local or
  metadata addresses, and private ranges only where the operator allows them;
- ``allowlist``: only ``allowed_hosts`` (names, ``*.example.org`` wildcards, IP addresses or
  networks), plus what the operator allows.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from typing import Literal

__all__ = ["MODES", "HostPattern", "NetworkMode", "normalise_hosts", "parse_network"]

NetworkMode = Literal["none", "public", "allowlist"]
MODES: tuple[NetworkMode, ...] = ("none", "public", "allowlist")

_LABEL = r"(?!-)[a-z0-9-]{1,63}(?<!-)"
_NAME = re.compile(rf"^{_LABEL}(\.{_LABEL})*$")


def _normalise_name(text: str) -> str:
    return text.strip().lower().rstrip(".")


@dataclass(frozen=True)
class HostPattern:
    """An ``allowed_hosts`` entry: a host name, ``*.name`` (any name below ``name``, at any depth,
    not ``name`` itself), or an IP address or network."""

    name: str = ""
    wildcard: bool = False
    network: ipaddress.IPv4Network | ipaddress.IPv6Network | None = None

    @classmethod
    def parse(cls, text: str) -> HostPattern:
        value = _normalise_name(text)
        try:
            return cls(network=ipaddress.ip_network(value, strict=False))
        except ValueError:
            pass
        wildcard = value.startswith("*.")
        name = value[2:] if wildcard else value
        if len(name) > 253 or not _NAME.match(name) or (wildcard and "." not in name):
            raise ValueError(f"{text!r} is not a host name, '*.' and a domain, or an IP address or network")
        return cls(name=name, wildcard=wildcard)

    def matches(self, name: str) -> bool:
        name = _normalise_name(name)
        if self.network is not None or not name:
            return False
        return name.endswith("." + self.name) if self.wildcard else name == self.name

    def __str__(self) -> str:
        return str(self.network) if self.network is not None else ("*." if self.wildcard else "") + self.name


def parse_network(mode: object, allowed_hosts: object) -> tuple[NetworkMode, list[str]]:
    """A network policy as a message or a caller gives it: ``(mode, normalised hosts)``, or
    ``ValueError`` naming the field that is wrong (one line)."""
    if mode not in MODES:
        raise ValueError(f"network_mode {mode!r} is not one of {', '.join(MODES)}")
    if not isinstance(allowed_hosts, (list, tuple)) or not all(isinstance(h, str) for h in allowed_hosts):
        raise ValueError("allowed_hosts: expected a list of host names, '*.' domains, addresses or networks")
    if allowed_hosts and mode != "allowlist":
        raise ValueError(f"allowed_hosts is for network_mode 'allowlist', not {mode!r}")
    try:
        return mode, normalise_hosts(list(allowed_hosts))  # one of MODES, checked above
    except ValueError as exc:
        raise ValueError(f"allowed_hosts: {exc}") from None


def normalise_hosts(hosts: list[str] | tuple[str, ...]) -> list[str]:
    """``allowed_hosts`` as the enforcer reads them: each parsed (``ValueError`` naming a bad entry),
    lower-cased, networks in their canonical form, duplicates dropped (order kept)."""
    return list(dict.fromkeys(str(HostPattern.parse(h)) for h in hosts))
