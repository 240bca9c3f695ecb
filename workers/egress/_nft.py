"""The host's rules for sandbox networks: one nftables table, plus one iptables rule in Docker's
``DOCKER-USER`` chain.

Rendering is pure (the scripts are built from validated values only: a key of 10 hex digits,
``ipaddress`` networks, integers), and ``Nft`` feeds a script to ``nft -f -`` as one transaction, so
a sandbox's rules appear or vanish whole. No shell is involved.

The table ``inet toolfleet_egress`` is shared by every worker on the host (its base chains are the
same for all of them); each sandbox adds one chain, at most two sets and two elements, and its
release removes them. Everything is keyed by the sandbox network's bridge, ``tfe-<key>``: rules
match the interface a packet came in on, never its source address, which a sandbox with raw
sockets can forge.

- ``sandbox_input`` (hook input): a packet from a sandbox bridge to any of the host's own addresses
  (every interface's, the bridge's gateway included, IPv4 and IPv6) is rejected, except DNS to the
  gateway of a bridge whose sandbox has a DNS filter there, and replies to connections the host
  started.
- ``sandbox_forward`` (hook forward): connections to ports the host publishes (DNAT) are rejected;
  the rest jumps to the sandbox's own chain through the ``sandboxes`` verdict map, and a bridge
  without an entry (a leftover of a crashed worker) is rejected. Nothing from outside starts a
  connection into a sandbox.
- ``sb_<key>``: its own network, then the other sandboxes (by bridge name), the never-reachable
  ranges, the operator's allowances, the denied ranges, and the mode's tail.

Both base chains run at ``filter - 10``, beside Docker's own; a reject here is final whatever
Docker's chains say. An accept is not: Docker isolates its bridge networks from each other in its
own chains, which would also drop a connection to an operator-allowed container on another Docker
network. So every connection a sandbox's chain accepts gets a conntrack mark, and one rule in
``DOCKER-USER`` (which Docker evaluates before its isolation) accepts marked connections. Without
our table nothing is marked, and Docker's behaviour is unchanged.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import re
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field

from ._errors import EgressError
from ._policy import DENIED, NEVER, EgressMode, HostPattern, IPNetwork, collapse

__all__ = ["BRIDGE_PREFIX", "GENERATIONS", "TABLE", "DockerUserHook", "Nft", "SandboxRules", "bridge_name",
           "render_allow", "render_base", "render_release", "render_sandbox", "render_update", "valid_key"]

TABLE = "toolfleet_egress"
BRIDGE_PREFIX = "tfe-"
_KEY = re.compile(r"^[0-9a-f]{10}$")
_REJECT = "reject with icmpx admin-prohibited"
_T = f"inet {TABLE}"
NFT_TIMEOUT_S = 15.0


def valid_key(key: str) -> str:
    if not _KEY.match(key):
        raise ValueError(f"not a sandbox network key: {key!r}")
    return key


def bridge_name(key: str) -> str:
    """``tfe-<key>``: 14 characters, within Linux's 15 for an interface name."""
    return BRIDGE_PREFIX + valid_key(key)


def _mark(mark: int) -> str:
    if not 0 < mark < 1 << 32:
        raise ValueError(f"conntrack mark out of range: {mark}")
    return f"0x{mark:08x}"


def render_base() -> str:
    """The shared skeleton: created if absent, its base chains' rules replaced atomically (every
    worker renders the same), the sandboxes' chains, sets and elements left as they are."""
    bridges = f'iifname "{BRIDGE_PREFIX}*"'
    return "\n".join([
        f"add table {_T}",
        f"add map {_T} sandboxes {{ type ifname : verdict; }}",
        f"add set {_T} dns_bridges {{ type ifname; }}",
        f"add chain {_T} sandbox_input {{ type filter hook input priority filter - 10; policy accept; }}",
        f"add chain {_T} sandbox_forward {{ type filter hook forward priority filter - 10; policy accept; }}",
        f"flush chain {_T} sandbox_input",
        f"flush chain {_T} sandbox_forward",
        # Replies to what the host itself started (a health check from the host): never a new flow.
        f"add rule {_T} sandbox_input {bridges} ct state established,related accept",
        # Only IPv4: the filter listens on the gateway's IPv4 address, and `fib daddr . iif` is that
        # bridge's own address (not another interface's that some host resolver might listen on).
        (f"add rule {_T} sandbox_input {bridges} iifname @dns_bridges meta nfproto ipv4 "
         "fib daddr . iif type local meta l4proto { tcp, udp } th dport 53 accept"),
        f"add rule {_T} sandbox_input {bridges} counter {_REJECT}",
        f"add rule {_T} sandbox_forward {bridges} ct status dnat counter {_REJECT}",
        f"add rule {_T} sandbox_forward {bridges} iifname vmap @sandboxes",
        f"add rule {_T} sandbox_forward {bridges} counter {_REJECT}",
        f'add rule {_T} sandbox_forward oifname "{BRIDGE_PREFIX}*" ct state new counter {_REJECT}',
    ]) + "\n"


@dataclass(frozen=True)
class SandboxRules:
    """Everything one sandbox's chain says; ``protected`` and ``operator`` come from the worker's
    configuration, ``hosts`` from the sandbox's policy (its IP entries; names go through DNS).
    ``generation`` counts the policy's changes: connections carry the one that accepted them, and
    only those of the current generation skip the policy (see ``render_update``)."""

    key: str
    mode: EgressMode
    mark: int
    operator: tuple[IPNetwork, ...] = ()
    protected: tuple[IPNetwork, ...] = ()
    hosts: tuple[HostPattern, ...] = field(default=())
    dns: bool = True
    set_size: int = 4096
    generation: int = 1

    @property
    def chain(self) -> str:
        return f"sb_{valid_key(self.key)}"


GENERATIONS = 0xFF  # the low byte of the conntrack mark; the configured mark keeps out of it


def _addr_rules(prefix: str, nets: Sequence[IPNetwork], verdict: str) -> list[str]:
    v4, v6 = collapse(nets)
    out = []
    for family, group in (("ip", v4), ("ip6", v6)):
        if group:
            out.append(f"{prefix} {family} daddr {{ {', '.join(map(str, group))} }} {verdict}")
    return out


def _chain_rules(rules: SandboxRules) -> list[str]:
    """The rules of a sandbox's chain (its sets must exist for ``allowlist``)."""
    if not 0 < rules.generation <= GENERATIONS:
        raise ValueError(f"policy generation out of range: {rules.generation}")
    chain, bridge = rules.chain, bridge_name(rules.key)
    marked = _mark(rules.mark | rules.generation)
    # Mark what this generation accepts (the other bits of the mark kept): DOCKER-USER accepts the mark,
    # and the first rule lets the rest of such a connection through without judging each packet again.
    accept = f"ct mark set ct mark and {_mark(0xFFFFFFFF ^ GENERATIONS)} or {marked} accept"
    add = f"add rule {_T} {chain}"
    lines = [
        f"{add} ct state established,related ct mark and {_mark(rules.mark | GENERATIONS)} == {marked} accept",
        f'{add} oifname "{bridge}" accept',  # the sandbox's own services (bridged, with br_netfilter)
        f'{add} oifname "{BRIDGE_PREFIX}*" {_REJECT}',  # another sandbox
    ]
    if rules.mode == "none":
        lines.append(f"{add} {_REJECT}")
    else:
        lines += _addr_rules(add, [n for n, _ in NEVER] + list(rules.protected), _REJECT)
        lines += _addr_rules(add, rules.operator, accept)
        lines += _addr_rules(add, [n for n, _ in DENIED], _REJECT)
        if rules.mode == "public":
            lines.append(f"{add} {accept}")
        else:
            lines += _addr_rules(add, [h.network for h in rules.hosts if h.network is not None], accept)
            lines += [f"{add} ip daddr @{chain}_v4 {accept}", f"{add} ip6 daddr @{chain}_v6 {accept}",
                      f"{add} {_REJECT}"]
    return lines


def _sets(rules: SandboxRules) -> list[str]:
    return [f"add set {_T} {rules.chain}_v{v} {{ type ipv{v}_addr; flags timeout; size {int(rules.set_size)}; }}"
            for v in (4, 6)]


def _dns_element(rules: SandboxRules) -> list[str]:
    """The bridge in ``dns_bridges`` (its gateway's DNS filter is reachable) only while the mode has DNS;
    added before a delete so that the delete cannot fail on an absent element."""
    element = f'element {_T} dns_bridges {{ "{bridge_name(rules.key)}" }}'
    return [f"add {element}"] + ([] if rules.dns and rules.mode != "none" else [f"delete {element}"])


def render_sandbox(rules: SandboxRules) -> str:
    """One sandbox's chain, sets and elements, created in one transaction."""
    lines = [f"add chain {_T} {rules.chain}"]
    if rules.mode == "allowlist":
        lines += _sets(rules)
    lines += _chain_rules(rules)
    lines.append(f'add element {_T} sandboxes {{ "{bridge_name(rules.key)}" : jump {rules.chain} }}')
    if rules.dns and rules.mode != "none":
        lines += _dns_element(rules)
    return "\n".join(lines) + "\n"


def render_update(rules: SandboxRules) -> str:
    """A live sandbox's new policy, in one transaction: its chain rewritten under the next generation
    (connections accepted before are judged again, packet by packet, by the new rules: one the new
    policy refuses stops at its next packet), an allowlist's sets emptied (what its old names resolved
    to is not allowed any more), and DNS on or off with the mode."""
    lines = [f"add chain {_T} {rules.chain}", f"flush chain {_T} {rules.chain}"]
    if rules.mode == "allowlist":
        lines += _sets(rules) + [f"flush set {_T} {rules.chain}_v{v}" for v in (4, 6)]
    lines += _chain_rules(rules)
    lines.append(f'add element {_T} sandboxes {{ "{bridge_name(rules.key)}" : jump {rules.chain} }}')
    lines += _dns_element(rules)
    return "\n".join(lines) + "\n"


def render_release(key: str) -> str:
    """Remove whatever of a sandbox's rules exist. Each object is first added (a no-op when present)
    so the deletes cannot fail on a missing one: a release, a retry and a reaper may race."""
    chain, bridge = f"sb_{valid_key(key)}", bridge_name(key)
    sets = [f"{chain}_v4", f"{chain}_v6"]
    return "\n".join([
        f"add chain {_T} {chain}",
        *(f"add set {_T} {s} {{ type ipv{s[-1]}_addr; flags timeout; }}" for s in sets),
        f'add element {_T} sandboxes {{ "{bridge}" : jump {chain} }}',
        f'add element {_T} dns_bridges {{ "{bridge}" }}',
        f'delete element {_T} sandboxes {{ "{bridge}" }}',
        f'delete element {_T} dns_bridges {{ "{bridge}" }}',
        f"flush chain {_T} {chain}",
        f"delete chain {_T} {chain}",
        *(f"delete set {_T} {s}" for s in sets),
    ]) + "\n"


def render_allow(key: str, answers: Sequence[tuple[str, int]]) -> str:
    """Add resolved addresses (with their lifetime in seconds) to an allowlist sandbox's sets; adding
    one already there renews its timeout."""
    chain = f"sb_{valid_key(key)}"
    by_family: dict[int, list[str]] = {4: [], 6: []}
    for text, ttl in answers:
        addr = ipaddress.ip_address(text)
        by_family[addr.version].append(f"{addr} timeout {max(1, int(ttl))}s")
    return "".join(
        f"add element {_T} {chain}_v{v} {{ {', '.join(items)} }}\n" for v, items in by_family.items() if items)


async def _run(argv: Sequence[str], stdin: bytes | None = None, timeout: float = NFT_TIMEOUT_S) -> tuple[int, str, str]:
    try:
        proc = await asyncio.create_subprocess_exec(*argv, stdin=asyncio.subprocess.PIPE,
                                                    stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    except OSError as exc:
        raise EgressError(f"{argv[0]}: {exc.strerror or exc}") from exc
    try:
        out, err = await asyncio.wait_for(proc.communicate(stdin), timeout)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise EgressError(f"{argv[0]} did not finish within {timeout:.0f} s") from None
    assert proc.returncode is not None
    return proc.returncode, out.decode(errors="replace"), err.decode(errors="replace")


def _first_error(stderr: str) -> str:
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip() and not ln.startswith("#")]
    return next((ln for ln in lines if ln.startswith("Error")), lines[0] if lines else "failed")


class Nft:
    """Runs rendered scripts through ``nft`` (one transaction each) and lists the table."""

    def __init__(self, binary: str = "nft") -> None:
        self.binary = binary

    async def apply(self, script: str) -> None:
        code, _, err = await _run([self.binary, "-f", "-"], script.encode())
        if code != 0:
            raise EgressError(f"nft: {_first_error(err)}")

    async def usable(self) -> str | None:
        """None when nft runs and may change the ruleset here, else why not."""
        if shutil.which(self.binary) is None:
            return f"{self.binary} is not installed"
        code, _, err = await _run([self.binary, "list", "tables"])
        if code == 0:
            return None
        return (f"nft cannot read the ruleset ({_first_error(err)}); the worker needs CAP_NET_ADMIN in the host's "
                "network namespace")

    async def sandbox_keys(self) -> set[str]:
        """Keys of the sandboxes that have a chain in the table (none when the table is absent)."""
        code, out, _ = await _run([self.binary, "-j", "list", "table", "inet", TABLE])
        if code != 0:
            return set()
        keys = set()
        for item in json.loads(out).get("nftables", []):
            name = item.get("chain", {}).get("name", "")
            if name.startswith("sb_") and _KEY.match(name[3:]):
                keys.add(name[3:])
        return keys


class DockerUserHook:
    """The one rule in Docker's ``DOCKER-USER`` chain (see the module doc), in whichever iptables
    backend Docker uses here. Installed once and left in place: it is static, shared by the workers on
    the host, and accepts nothing while no sandbox chain marks connections."""

    CANDIDATES = ("iptables-nft", "iptables-legacy", "iptables")

    def __init__(self, mark: int) -> None:
        self.rule = ["-m", "connmark", "--mark", f"{_mark(mark)}/{_mark(mark)}", "-m", "comment", "--comment",
                     "toolfleet-egress", "-j", "ACCEPT"]
        self.binary: str | None = None

    async def ensure(self) -> str | None:
        """Install the rule in each family's ``DOCKER-USER`` that exists; returns the iptables
        binary used (None: Docker keeps no DOCKER-USER chain here, so it isolates nothing either)."""
        for binary in self.CANDIDATES:
            if shutil.which(binary) is None:
                continue
            code, _, _ = await _run([binary, "-w", "5", "-S", "DOCKER-USER"])
            if code == 0:
                self.binary = binary
                break
        if self.binary is None:
            return None
        families = [self.binary, self.binary.replace("iptables", "ip6tables")]
        for binary in families:
            if shutil.which(binary) is None or (await _run([binary, "-w", "5", "-S", "DOCKER-USER"]))[0] != 0:
                continue  # no IPv6 chain: Docker runs without ip6tables, and our networks are IPv4 only
            if (await _run([binary, "-w", "5", "-C", "DOCKER-USER", *self.rule]))[0] != 0:
                code, _, err = await _run([binary, "-w", "5", "-I", "DOCKER-USER", "1", *self.rule])
                if code != 0:
                    raise EgressError(f"{binary}: {_first_error(err)}")
        return self.binary
