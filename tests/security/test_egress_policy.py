"""Sandbox → network, the pure part: which addresses and names a policy reaches, the operator's
allowances, and the nft scripts the rules are made of (tables; the real enforcement is exercised
against Docker and the kernel in test_egress.py)."""

from __future__ import annotations

import ipaddress
import random

import dns.message
import dns.rcode
import pytest
from pydantic import ValidationError

from workers import egress
from workers.egress import (
    EgressConfig,
    EgressPolicy,
    HostPattern,
    classify,
    parse_allowance,
)
from workers.egress._dns import DnsFilter, SandboxDns, parse_resolv_conf
from workers.egress._network import plan_subnet
from workers.egress._nft import (
    SandboxRules,
    bridge_name,
    render_allow,
    render_base,
    render_release,
    render_sandbox,
    render_update,
)

net = ipaddress.ip_network
DENIED_THOUGH_GLOBAL = {"multicast", "IPv4-mapped", "NAT64 (embeds IPv4)", "6to4 (embeds IPv4)"}


@pytest.mark.parametrize(("address", "expected"), [
    ("8.8.8.8", ("public", "internet")),
    ("151.101.1.69", ("public", "internet")),
    ("2606:4700:4700::1111", ("public", "internet")),
    ("169.254.169.254", ("never", "link-local (cloud metadata)")),
    ("169.254.0.1", ("never", "link-local (cloud metadata)")),
    ("fd00:ec2::254", ("never", "cloud metadata")),
    ("fe80::1", ("never", "link-local")),
    ("10.1.2.3", ("denied", "private")),
    ("172.16.0.1", ("denied", "private")),
    ("172.31.255.255", ("denied", "private")),
    ("172.32.0.1", ("public", "internet")),
    ("192.168.1.1", ("denied", "private")),
    ("100.64.0.1", ("denied", "shared address space (CGNAT)")),
    ("100.128.0.1", ("public", "internet")),
    ("127.0.0.1", ("denied", "loopback")),
    ("127.255.0.9", ("denied", "loopback")),
    ("0.0.0.0", ("denied", "this network")),
    ("0.1.2.3", ("denied", "this network")),
    ("224.0.0.1", ("denied", "multicast")),
    ("239.255.255.250", ("denied", "multicast")),
    ("255.255.255.255", ("denied", "reserved and broadcast")),
    ("192.0.2.2", ("denied", "documentation")),  # this machine's own eth0 (also rejected as a host address)
    ("198.51.100.7", ("denied", "documentation")),
    ("203.0.113.7", ("denied", "documentation")),
    ("198.18.0.1", ("denied", "benchmarking")),
    ("192.0.0.170", ("denied", "IETF protocol assignments")),
    ("::", ("denied", "unspecified")),
    ("::1", ("denied", "loopback")),
    ("fd00::2", ("denied", "unique local (ULA)")),  # this machine's own IPv6 address
    ("fc00::1", ("denied", "unique local (ULA)")),
    ("ff02::1", ("denied", "multicast")),
    ("::ffff:10.0.0.1", ("denied", "IPv4-mapped")),
    ("::ffff:8.8.8.8", ("denied", "IPv4-mapped")),
    ("64:ff9b::a00:1", ("denied", "NAT64 (embeds IPv4)")),
    ("2002:a00:1::", ("denied", "6to4 (embeds IPv4)")),
    ("2001:0:4136:e378::1", ("denied", "IETF protocol assignments (Teredo)")),
    ("2001:db8::1", ("denied", "documentation")),
])
def test_address_classes(address, expected):
    assert classify(address) == expected
    # Cross-check with the standard library's reading of the IANA registries: what we call the internet
    # is global there, and what we deny is not, except multicast and the IPv6 forms that carry an IPv4
    # address (the IPv4 address inside could be a private one).
    if expected[0] == "public":
        assert ipaddress.ip_address(address).is_global
    elif expected[1] not in DENIED_THOUGH_GLOBAL:
        assert not ipaddress.ip_address(address).is_global, address


@pytest.mark.parametrize(("address", "operator", "protected", "expected"), [
    ("10.1.2.3", ["10.0.0.0/8"], [], "operator"),
    ("10.1.2.3", ["10.1.2.3/32"], [], "operator"),
    ("10.1.2.4", ["10.1.2.3/32"], [], "denied"),
    ("172.20.0.5", ["0.0.0.0/0"], [], "operator"),
    ("169.254.169.254", ["0.0.0.0/0"], [], "never"),  # allowing everything still leaves metadata out
    ("fd00:ec2::254", ["fc00::/7"], [], "never"),
    ("fd00::5", ["fc00::/7"], [], "operator"),
    ("172.20.0.2", ["172.16.0.0/12"], ["172.20.0.2/32"], "never"),  # the broker, inside an allowed range
    ("8.8.8.8", [], ["8.8.8.8/32"], "never"),
    ("8.8.4.4", [], ["8.8.8.8/32"], "public"),
])
def test_operator_allowances_and_protected_addresses(address, operator, protected, expected):
    assert classify(address, [net(n) for n in operator], [net(n) for n in protected])[0] == expected


@pytest.mark.parametrize(("values", "networks", "names"), [
    (["10.0.0.0/8"], ["10.0.0.0/8"], []),
    (["10.1.2.3"], ["10.1.2.3/32"], []),
    (["10.1.2.3/8"], ["10.0.0.0/8"], []),
    (["fd00::/8", "::1"], ["fd00::/8", "::1/128"], []),
    (["0.0.0.0/0"], ["0.0.0.0/0"], []),
    (["Mirror.Internal.", "mirror.internal"], [], ["mirror.internal"]),
    (["pypi.example", "172.18.0.0/16"], ["172.18.0.0/16"], ["pypi.example"]),
])
def test_parse_allowance(values, networks, names):
    allowance = parse_allowance(values)
    assert [str(n) for n in allowance.networks] == networks
    assert list(allowance.names) == names


@pytest.mark.parametrize(("value", "message"), [
    ("169.254.169.254", "link-local (cloud metadata) addresses are never reachable"),
    ("169.254.0.0/16", "link-local (cloud metadata) addresses are never reachable"),
    ("fe80::/64", "link-local addresses are never reachable"),
    ("fd00:ec2::254", "cloud metadata addresses are never reachable"),
    ("*.example.org", "expected a CIDR, an IP address or a host name"),
    ("", "expected a CIDR, an IP address or a host name"),
    ("not a host", "is not a host name"),
    ("10.0.0.0/33", "is not a host name"),
])
def test_parse_allowance_refuses(value, message):
    with pytest.raises(ValueError, match=r"^--egress-allow|is not a host name") as caught:
        parse_allowance([value])
    assert message in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize(("pattern", "name", "matches"), [
    ("example.org", "example.org", True),
    ("example.org", "EXAMPLE.org.", True),
    ("example.org", "www.example.org", False),
    ("*.example.org", "www.example.org", True),
    ("*.example.org", "a.b.example.org", True),
    ("*.example.org", "example.org", False),  # the apex is its own entry
    ("*.example.org", "badexample.org", False),
    ("*.example.org", "example.org.evil.test", False),
    ("*.example.org", "", False),
    ("1.2.3.4", "1.2.3.4", False),  # an address entry is judged by address, never as a name
])
def test_host_patterns(pattern, name, matches):
    assert HostPattern.parse(pattern).matches(name) is matches


@pytest.mark.parametrize("text", ["*", "*.org", "a*.example.org", "*.*.example.org", "exa mple.org", "-a.org",
                                  "a..org", "a_b.org", "x" * 64 + ".org"])
def test_host_patterns_refuse(text):
    with pytest.raises(ValueError, match="is not a host name"):
        HostPattern.parse(text)


def test_policy_answers_names_by_mode():
    assert EgressPolicy(mode="public").allows_name("anything.example")
    assert not EgressPolicy(mode="none").allows_name("example.org")
    allow = EgressPolicy(mode="allowlist", allowed_hosts=("PyPI.org", "*.files.example"))
    assert allow.allowed_hosts == ("pypi.org", "*.files.example")
    assert [allow.allows_name(n) for n in ("pypi.org", "x.files.example", "files.example", "evil.org")] == [
        True, True, False, False]
    assert not EgressPolicy(mode="allowlist").allows_name("pypi.org")  # empty: nothing, as Harbor's
    with pytest.raises(ValidationError):
        EgressPolicy(mode="bridge")
    with pytest.raises(ValidationError):
        EgressPolicy(mode="allowlist", allowed_hosts=("*",))


def test_config_refuses_bad_values_in_one_line():
    with pytest.raises(ValidationError, match="never reachable"):
        EgressConfig(allow=("169.254.169.254",))
    with pytest.raises(ValidationError, match="expected ADDR"):
        EgressConfig(upstreams=("dns.example:53",))
    with pytest.raises(ValidationError):
        EgressConfig(subnet_prefix=30)
    assert EgressConfig(upstreams=("127.0.0.1:5353", "[::1]:53", "10.0.0.2")).upstreams


KEY = "0123456789"


def _rules(**kw):
    return SandboxRules(**{"key": KEY, "mode": "public", "mark": 0x10000000, **kw})


def test_public_rules_judge_never_then_operator_then_denied():
    script = render_sandbox(_rules(operator=(net("172.18.0.0/16"),), protected=(net("172.18.0.9/32"),)))
    lines = script.splitlines()
    order = [next(i for i, ln in enumerate(lines) if marker in ln) for marker in (
        "ct state established", 'oifname "tfe-0123456789" accept', 'oifname "tfe-*" reject',
        "169.254.0.0/16", "172.18.0.0/16 } ct mark", "10.0.0.0/8")]
    assert order == sorted(order)
    assert lines[-3] == ("add rule inet toolfleet_egress sb_0123456789 ct mark set ct mark and 0xffffff00 or "
                         "0x10000001 accept")  # the mark, and the policy's generation (1: the first) in its low byte
    assert "172.18.0.9/32" in lines[order[3]]  # the protected broker is rejected with the never ranges
    assert lines[-2] == 'add element inet toolfleet_egress sandboxes { "tfe-0123456789" : jump sb_0123456789 }'
    assert lines[-1] == 'add element inet toolfleet_egress dns_bridges { "tfe-0123456789" }'
    assert "@sb_" not in script  # public mode keeps no address sets


def test_none_rules_reject_everything_leaving_and_have_no_dns():
    script = render_sandbox(_rules(mode="none"))
    assert script.splitlines()[-2].endswith("sb_0123456789 reject with icmpx admin-prohibited")
    assert "dns_bridges" not in script and "accept" in script.splitlines()[2]  # only its own network


def test_allowlist_rules_accept_only_the_sets_and_listed_addresses():
    script = render_sandbox(_rules(mode="allowlist", hosts=(HostPattern.parse("93.184.216.0/24"),
                                                            HostPattern.parse("pypi.org"))))
    assert "add set inet toolfleet_egress sb_0123456789_v4 { type ipv4_addr; flags timeout; size 4096; }" in script
    tail = script.splitlines()[-6:-2]
    assert tail[0].endswith("ip daddr { 93.184.216.0/24 } ct mark set ct mark and 0xffffff00 or 0x10000001 accept")
    assert "ip daddr @sb_0123456789_v4" in tail[1] and "ip6 daddr @sb_0123456789_v6" in tail[2]
    assert tail[3].endswith("reject with icmpx admin-prohibited")
    assert script.index("10.0.0.0/8") < script.index("93.184.216.0/24")  # a listed address is still judged


def test_an_update_rewrites_the_chain_under_the_next_generation():
    """A connection accepted under generation 1 skips the rules only while the mark's low byte is 1: after
    an update to generation 2 each of its packets is judged again (a none policy stops it)."""
    first = render_sandbox(_rules(mode="public"))
    assert "ct state established,related ct mark and 0x100000ff == 0x10000001 accept" in first.splitlines()[1]
    update = render_update(_rules(mode="none", generation=2)).splitlines()
    assert update[:2] == ["add chain inet toolfleet_egress sb_0123456789",
                          "flush chain inet toolfleet_egress sb_0123456789"]
    assert update[2].endswith("ct state established,related ct mark and 0x100000ff == 0x10000002 accept")
    assert update[-4].endswith("sb_0123456789 reject with icmpx admin-prohibited")
    # DNS off: the element is added (a no-op when present) so that its delete cannot fail.
    assert update[-2:] == ['add element inet toolfleet_egress dns_bridges { "tfe-0123456789" }',
                           'delete element inet toolfleet_egress dns_bridges { "tfe-0123456789" }']
    to_allowlist = render_update(_rules(mode="allowlist", generation=3, hosts=(HostPattern.parse("pypi.org"),)))
    # The sets are emptied: what the old policy's names resolved to is not allowed any more.
    assert "flush set inet toolfleet_egress sb_0123456789_v4" in to_allowlist
    assert to_allowlist.splitlines()[-1] == 'add element inet toolfleet_egress dns_bridges { "tfe-0123456789" }'


@pytest.mark.parametrize("generation", [0, 256, -1])
def test_generations_stay_in_the_marks_low_byte(generation):
    with pytest.raises(ValueError, match=f"policy generation out of range: {generation}"):
        render_update(_rules(generation=generation))


def test_the_configured_mark_leaves_the_generation_byte_free():
    with pytest.raises(ValueError, match="low byte"):
        EgressConfig(mark=0x10000001)
    assert EgressConfig(mark=0x20000000).mark == 0x20000000


def test_release_and_allow_scripts():
    release = render_release(KEY).splitlines()
    assert [ln.split()[0] for ln in release] == ["add"] * 5 + ["delete", "delete", "flush", "delete", "delete",
                                                               "delete"]
    assert render_allow(KEY, [("1.2.3.4", 0), ("2606:4700::1", 300)]) == (
        "add element inet toolfleet_egress sb_0123456789_v4 { 1.2.3.4 timeout 1s }\n"
        "add element inet toolfleet_egress sb_0123456789_v6 { 2606:4700::1 timeout 300s }\n")
    with pytest.raises(ValueError, match="does not appear to be an IPv4 or IPv6 address"):
        render_allow(KEY, [("1.2.3.4; flush ruleset", 1)])


@pytest.mark.parametrize("key", ["", "0123", "../../etc", "0123456789a", "ABCDEF0123", '012345678"'])
def test_keys_are_validated_before_they_reach_a_script(key):
    with pytest.raises(ValueError, match="not a sandbox network key"):
        render_release(key)
    with pytest.raises(ValueError, match="not a sandbox network key"):
        render_sandbox(_rules(key=key))


def test_base_rules_and_bridge_names():
    assert len(bridge_name(KEY)) <= 15
    base = render_base()
    assert "flush chain inet toolfleet_egress sandbox_forward" in base
    assert base.index("ct status dnat") < base.index("vmap @sandboxes")  # published ports before the sandbox's chain


@pytest.mark.parametrize(("pool", "prefix", "index", "subnet"), [
    ("10.213.0.0/16", 27, 0, "10.213.0.0/27"),
    ("10.213.0.0/16", 27, 1, "10.213.0.32/27"),
    ("10.213.0.0/16", 27, 2047, "10.213.255.224/27"),
    ("10.213.0.0/16", 27, 2048, "10.213.0.0/27"),
    ("10.213.0.0/16", 16, 5, "10.213.0.0/16"),
])
def test_plan_subnet(pool, prefix, index, subnet):
    assert str(plan_subnet(net(pool), prefix, lambda n: index)) == subnet


def test_parse_resolv_conf():
    text = "# comment\nnameserver 10.255.255.53\nsearch x\nnameserver fe80::1%eth0\noptions ndots:0\n"
    assert parse_resolv_conf(text) == [("10.255.255.53", 53), ("fe80::1", 53)]


async def _never_called(key, answers):
    raise AssertionError("no answer to track")


async def test_dns_filter_answers_names_outside_the_policy_with_nxdomain_without_asking_upstream():
    # The upstream is a closed port: a query that reached it would come back SERVFAIL, not NXDOMAIN.
    dns_filter = DnsFilter([("127.0.0.1", 9)], _never_called)
    sandbox = SandboxDns(key=KEY, address="127.0.0.1", allows_name=EgressPolicy(
        mode="allowlist", allowed_hosts=("*.example.org",)).allows_name, track=True)
    for name in ("example.org", "evil.test", "example.org.evil.test"):
        query = dns.message.make_query(name, "A")
        reply = dns.message.from_wire(await dns_filter.answer(sandbox, query.to_wire(), udp=True))
        assert reply.rcode() == dns.rcode.NXDOMAIN and reply.id == query.id and not reply.answer
    assert await dns_filter.answer(sandbox, random.Random(1).randbytes(40), udp=True) is None  # not DNS: dropped
    multi = dns.message.make_query("a.example.org", "A")
    multi.question.append(multi.question[0])
    assert dns.message.from_wire(await dns_filter.answer(sandbox, multi.to_wire(), udp=True)).rcode() == (
        dns.rcode.REFUSED)


def test_exported_names():
    for name in egress.__all__:
        assert getattr(egress, name) is not None
    assert set(egress.MODES) == {"none", "public", "allowlist"}
