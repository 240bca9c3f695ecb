"""A Harbor task's network policy, phase by phase, as Harbor 0.25 reads it (pure; table-tested).

``[environment] network_mode`` is the baseline: ``public`` (the default), ``no-network`` or ``allowlist``
with ``allowed_hosts``. The legacy ``allow_internet`` (true: public, false: no-network) counts only when
the section sets neither ``network_mode`` nor ``allowed_hosts``. ``[agent]`` and ``[verifier]`` may set
their own ``network_mode`` (and ``allowed_hosts``): an explicit override for that phase; a phase without
one inherits the baseline. ``allowed_hosts`` entries are host names, ``*.suffix`` wildcards, IP addresses
or networks (CIDR), lower-cased; never URLs, ports or paths; and only with ``allowlist``.

``NetworkPlan`` holds the three policies in toolfleet's terms (``no-network`` is a sandbox's ``none``):
the sandbox opens with the baseline (its set-up runs under it), the agent runs under ``agent`` and the
verifier under ``verifier``; ``changes()`` lists the policy updates a run makes between phases.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from typing import Any, Literal

from orchestrator._errors import ToolfleetError

__all__ = ["HarborNetworkMode", "NetworkPlan", "NetworkPolicy", "enter_phase", "network_plan",
           "normalize_allowed_hosts"]

HarborNetworkMode = Literal["public", "no-network", "allowlist"]
HARBOR_MODES: tuple[str, ...] = ("public", "no-network", "allowlist")
SANDBOX_MODE = {"public": "public", "no-network": "none", "allowlist": "allowlist"}  # Harbor's -> the sandbox's
MAX_ALLOWED_HOSTS = 256  # a task's list; the worker's enforcer bounds what it resolves on its own

_LABEL = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$")
_NOT_A_HOST = "must be a host name, a '*.suffix' wildcard, an IP address or an IP network, not a URL, port or path"


class NetworkConfigError(ToolfleetError, ValueError):
    """A task's network settings are not what Harbor accepts (the message names the key)."""


@dataclass(frozen=True)
class NetworkPolicy:
    """One phase's policy, in Harbor's words."""

    mode: str = "public"
    allowed_hosts: tuple[str, ...] = ()

    def sandbox_fields(self) -> dict[str, Any]:
        """The sandbox spec's ``network_mode`` / ``allowed_hosts`` for this policy."""
        fields: dict[str, Any] = {"network_mode": SANDBOX_MODE[self.mode]}
        if self.mode == "allowlist":
            fields["allowed_hosts"] = list(self.allowed_hosts)
        return fields

    def describe(self) -> str:
        return f"allowlist {', '.join(self.allowed_hosts)}" if self.mode == "allowlist" else self.mode


@dataclass(frozen=True)
class NetworkPlan:
    """The policies of a trial's phases (see the module doc)."""

    setup: NetworkPolicy
    agent: NetworkPolicy
    verifier: NetworkPolicy

    def changes(self) -> list[tuple[str, NetworkPolicy]]:
        """``(phase, policy)`` for each phase that starts under a policy other than the one before it."""
        out: list[tuple[str, NetworkPolicy]] = []
        current = self.setup
        for phase, policy in (("agent", self.agent), ("verifier", self.verifier)):
            if policy != current:
                out.append((phase, policy))
                current = policy
        return out

    def modes(self) -> set[str]:
        """The sandbox modes this plan uses (what the fleet must enforce)."""
        return {SANDBOX_MODE[p.mode] for p in (self.setup, self.agent, self.verifier)}


def normalize_allowed_hosts(hosts: list[str], where: str) -> tuple[str, ...]:
    """Harbor's validation of ``allowed_hosts``: each entry lower-cased, without a trailing dot, networks in
    their compressed form; anything else is one ``NetworkConfigError`` naming ``where``."""
    if len(hosts) > MAX_ALLOWED_HOSTS:
        raise NetworkConfigError(f"{where}: at most {MAX_ALLOWED_HOSTS} entries")
    out: list[str] = []
    for raw in hosts:
        if not isinstance(raw, str):
            raise NetworkConfigError(f"{where}: entries must be strings")
        host = raw.strip().lower().rstrip(".")
        if not host:
            raise NetworkConfigError(f"{where}: entries must not be empty")
        out.append(_one_host(host, where))
    return tuple(dict.fromkeys(out))


def _one_host(host: str, where: str) -> str:
    shown = repr(host[:80])
    if "/" in host:
        try:
            return ipaddress.ip_network(host, strict=True).compressed
        except ValueError:
            raise NetworkConfigError(f"{where}: {shown} {_NOT_A_HOST}") from None
    if ":" in host:  # an IPv6 literal (a port or a URL scheme is not)
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            raise NetworkConfigError(f"{where}: {shown} {_NOT_A_HOST}") from None
        if address.version != 6 or "%" in host:
            raise NetworkConfigError(f"{where}: {shown} {_NOT_A_HOST}")
        return address.compressed
    name = host
    if host.startswith("*."):
        name = host[2:]
        if not name:
            raise NetworkConfigError(f"{where}: a wildcard needs a host name after '*.'")
        try:
            ipaddress.ip_address(name)
        except ValueError:
            pass
        else:
            raise NetworkConfigError(f"{where}: {shown}: a wildcard names hosts, not an IP address")
    elif "*" in host:
        raise NetworkConfigError(f"{where}: {shown}: a wildcard is '*.' before a host name")
    if not all(_LABEL.match(label) for label in name.split(".")):
        raise NetworkConfigError(f"{where}: {shown} {_NOT_A_HOST}")
    return host


def _mode(value: Any, where: str) -> str | None:
    if value is None:
        return None
    if value not in HARBOR_MODES:
        raise NetworkConfigError(f"{where}.network_mode: {str(value)[:40]!r} is not one of {', '.join(HARBOR_MODES)}")
    return str(value)


def _policy(mode: str, hosts: list[str] | None, where: str) -> NetworkPolicy:
    if hosts is not None and mode != "allowlist":
        raise NetworkConfigError(f"{where}.allowed_hosts: only valid with network_mode = 'allowlist'")
    return NetworkPolicy(mode, normalize_allowed_hosts(hosts or [], f"{where}.allowed_hosts"))


def network_plan(environment: dict[str, Any], agent: dict[str, Any], verifier: dict[str, Any],
                 explicit: set[str]) -> NetworkPlan:
    """The plan of a task's ``[environment]``, ``[agent]`` and ``[verifier]`` network keys (each section as a
    dict of the keys it set; ``explicit``: the ``[environment]`` keys the file set)."""
    base_mode = _mode(environment.get("network_mode"), "environment")
    base_hosts = environment.get("allowed_hosts")
    legacy = environment.get("allow_internet")
    if legacy is not None and "network_mode" not in explicit and base_hosts is None:
        base_mode = "public" if legacy else "no-network"  # Harbor's reading of the deprecated key
    setup = _policy(base_mode or "public", base_hosts, "environment")
    phases: list[NetworkPolicy] = []
    for where, section in (("agent", agent), ("verifier", verifier)):
        mode = _mode(section.get("network_mode"), where)
        hosts = section.get("allowed_hosts")
        if mode is None:
            if hosts is not None:
                raise NetworkConfigError(f"{where}.allowed_hosts: only valid with network_mode = 'allowlist'")
            phases.append(setup)
        else:
            phases.append(_policy(mode, hosts, where))
    return NetworkPlan(setup, phases[0], phases[1])


async def enter_phase(meta: dict[str, Any], phase: str, before: str) -> None:
    """Give the sample's sandbox ``phase``'s network policy (``[agent]`` / ``[verifier] network_mode``) if it
    differs from ``before``'s, through the dispatcher seam (the sandbox's host enforces it; a refusal is a
    ``SandboxUnavailableError``, one sentence)."""
    from orchestrator.dispatch import active_dispatcher, current_route

    policies = meta.get("network") or {}
    policy = policies.get(phase)
    if policy is None or policy == policies.get(before):
        return
    await active_dispatcher().set_sandbox_network(current_route(), policy["network_mode"],
                                                  policy.get("allowed_hosts") or ())
