"""Sandbox networks and root's capabilities, the pure part: what a sandbox config may name, what a worker
admits (at open and for a phase's new policy), which capabilities a container keeps, what a worker
advertises and what preflight says when no worker offers a mode. Tables; the enforcement itself is
exercised against Docker and the kernel in test_egress.py and test_egress_sandboxes.py."""

from __future__ import annotations

import argparse
from typing import Any

import pytest
from pydantic import ValidationError

from orchestrator.dispatch._preflight import network_refusal
from orchestrator.util._sandbox_config import DockerSandboxConfig
from workers._admission import AdmissionRefused, AdmissionRules, admit_network, admit_sandbox
from workers.cli import broker_hosts, build_parser, network_modes
from workers.fleet import HostRecord
from workers.sandbox.docker import host_sandboxes
from workers.sandbox.docker._capabilities import dropped_capabilities, runs_as_root

OPEN = AdmissionRules(network_modes=["none", "public", "allowlist"])


# --- the config --------------------------------------------------------------------------------------

@pytest.mark.parametrize(("fields", "needs_network", "enforced"), [
    ({}, False, []),
    ({"network_mode": "public"}, True, ["public"]),
    ({"network_mode": "allowlist", "allowed_hosts": ["pypi.org"]}, True, ["allowlist"]),
    ({"services": {"db": {"image": "toolfleet/db:1"}}}, True, []),  # may share loopback where nothing enforces
    ({"phase_network_modes": ["public"]}, True, ["none", "public"]),
    ({"network_mode": "public", "phase_network_modes": ["none", "public", "none"]}, True, ["public", "none"]),
])
def test_which_sandboxes_get_a_network_and_which_modes_their_host_must_enforce(fields, needs_network, enforced):
    config = DockerSandboxConfig(**fields)
    assert (config.needs_network, config.enforced_modes) == (needs_network, enforced)


@pytest.mark.parametrize(("fields", "says"), [
    ({"network_mode": "bridge"}, "network_mode"),  # Docker's network names are not modes
    ({"network_mode": "host"}, "network_mode"),
    ({"allowed_hosts": ["pypi.org"]}, "allowed_hosts is for network_mode 'allowlist'"),
    ({"network_mode": "allowlist", "allowed_hosts": ["https://pypi.org/simple"]}, "is not a host name"),
    ({"network_mode": "allowlist", "allowed_hosts": ["*"]}, "is not a host name"),
    ({"phase_network_modes": ["internet"]}, "phase_network_modes"),
])
def test_bad_network_fields_are_refused_by_the_config(fields, says):
    with pytest.raises(ValidationError) as caught:
        DockerSandboxConfig(**fields)
    assert says in str(caught.value)


def test_allowed_hosts_are_normalised_once():
    config = DockerSandboxConfig(network_mode="allowlist", allowed_hosts=["PyPI.org.", "10.1.2.3/8", "pypi.org"])
    assert config.allowed_hosts == ["pypi.org", "10.0.0.0/8"]


def test_services_may_have_a_way_out_now():
    config = DockerSandboxConfig(network_mode="public", services={"db": {"image": "toolfleet/db:1"}})
    assert config.network_mode == "public" and config.containers == 2


# --- what a worker admits ------------------------------------------------------------------------------

@pytest.mark.parametrize(("policy", "fields", "refused"), [
    (AdmissionRules(), {"network_mode": "public"}, "--allow-network public"),
    (AdmissionRules(), {"network_mode": "allowlist", "allowed_hosts": ["pypi.org"]}, "--allow-network allowlist"),
    (AdmissionRules(), {"phase_network_modes": ["public"]}, "--allow-network public"),
    (AdmissionRules(network_modes=["none", "allowlist"]), {"network_mode": "public"}, "--allow-network public"),
    (AdmissionRules(network_modes=["none", "allowlist"]), {"network_mode": "allowlist"}, None),
    (OPEN, {"network_mode": "public", "phase_network_modes": ["none", "allowlist"]}, None),
    (AdmissionRules(), {"phase_network_modes": ["none"]}, None),  # only asks for a network of its own
])
def test_network_modes_are_the_workers_to_allow(policy, fields, refused):
    config = {"type": "docker", **fields}
    if refused is None:
        assert admit_sandbox(policy, config)["network_mode"] == fields.get("network_mode", "none")
    else:
        with pytest.raises(AdmissionRefused) as caught:
            admit_sandbox(policy, config)
        assert refused in str(caught.value)


@pytest.mark.parametrize(("policy", "mode", "hosts", "expected"), [
    (OPEN, "public", [], ("public", [])),
    (OPEN, "none", [], ("none", [])),
    (AdmissionRules(), "none", [], ("none", [])),  # narrowing is always admitted
    (OPEN, "allowlist", ["PyPI.org", "*.Example.org"], ("allowlist", ["pypi.org", "*.example.org"])),
    (AdmissionRules(), "public", [], "--allow-network public"),
    (OPEN, "bridge", [], "is not one of none, public, allowlist"),
    (OPEN, None, [], "is not one of"),
    (OPEN, "public", ["pypi.org"], "allowed_hosts is for network_mode 'allowlist'"),
    (OPEN, "allowlist", "pypi.org", "expected a list"),
    (OPEN, "allowlist", ["pypi.org; flush ruleset"], "is not a host name"),
])
def test_a_phases_network_is_admitted_by_the_same_rules(policy, mode, hosts, expected):
    if isinstance(expected, tuple):
        assert admit_network(policy, mode, hosts) == expected
    else:
        with pytest.raises(AdmissionRefused) as caught:
            admit_network(policy, mode, hosts)
        assert expected in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize(("allow_root", "fields", "expected"), [
    (False, {}, ["ALL"]),  # root (if the image's USER is) without capabilities, as without --allow-root-user
    (True, {}, None),  # the driver decides by the user: Docker's default set for root, ALL for anyone else
    (False, {"cap_drop": ["ALL", "NET_RAW"]}, ["ALL", "NET_RAW"]),
    (True, {"cap_drop": []}, []),  # root's default set, asked for explicitly (a verifier running as root)
    (False, {"cap_drop": []}, "unless the worker allows root"),
    (False, {"cap_drop": ["NET_RAW"]}, "unless the worker allows root"),
    (True, {"cap_add": ["SYS_ADMIN"]}, "it can only be set in the worker's own configuration"),
])
def test_capabilities_a_worker_admits(allow_root, fields, expected):
    policy = AdmissionRules(allow_root=allow_root)
    if isinstance(expected, str):
        with pytest.raises(AdmissionRefused, match=expected):
            admit_sandbox(policy, {"type": "docker", **fields})
    else:
        assert admit_sandbox(policy, {"type": "docker", **fields})["cap_drop"] == expected


@pytest.mark.parametrize(("user", "root"), [
    (None, True), ("", True), ("root", True), ("0", True), ("00", True), ("+0", True), ("0:1000", True),
    ("root:root", True), ("1000", False), ("1000:0", False), ("sandbox", False), ("agent:root", False),
    ("not a user!", False),
])
def test_who_runs_as_root(user, root):
    assert runs_as_root(user) is root


@pytest.mark.parametrize(("cap_drop", "user", "dropped"), [
    (None, "", []),  # an image without USER: root, Docker's default set
    (None, "root", []),
    (None, "sandbox", ["ALL"]),
    (None, "1000:1000", ["ALL"]),
    (["ALL"], "root", ["ALL"]),  # an explicit list is obeyed (what admission writes without --allow-root-user)
    ([], "sandbox", []),
    (["NET_RAW"], "root", ["NET_RAW"]),
])
def test_dropped_capabilities(cap_drop, user, dropped):
    assert dropped_capabilities(cap_drop, user) == dropped


# --- the worker's flags --------------------------------------------------------------------------------

@pytest.mark.parametrize(("asked", "modes"), [
    (None, ["none"]),
    (["allowlist"], ["none", "allowlist"]),
    (["public"], ["none", "public", "allowlist"]),  # public brings allowlist, which is narrower
    (["allowlist", "public", "public"], ["none", "public", "allowlist"]),
])
def test_allow_network_flags(asked, modes):
    assert network_modes(asked) == modes


def test_allow_network_refuses_docker_network_names():
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--allow-network", "host"])
    args = build_parser().parse_args(["--allow-network", "public", "--egress-allow", "10.0.0.0/8",
                                      "--egress-allow", "mirror.internal"])
    assert (args.networks, args.egress_allow) == (["public"], ["10.0.0.0/8", "mirror.internal"])


@pytest.mark.parametrize(("url", "protected"), [
    ("redis://127.0.0.1:6379/0", ()),
    ("redis://:secret@localhost:6379/0", ()),
    ("unix:///run/redis.sock", ()),
    ("redis://:secret@10.1.2.3:6379/0", ("10.1.2.3",)),
    ("rediss://broker.internal:6380/0", ("broker.internal",)),
    ("redis://[fd00::5]:6379/0", ("fd00::5",)),
])
def test_the_brokers_host_is_protected(url, protected):
    assert broker_hosts(url) == protected


def test_a_bad_egress_allowance_is_one_line_at_start():
    from workers.cli import build_egress

    args = argparse.Namespace(egress_allow=["169.254.169.254"], broker="redis://127.0.0.1:6379/0")
    with pytest.raises(ValueError, match="never reachable from a sandbox"):
        build_egress(args, "w1")


# --- preflight -----------------------------------------------------------------------------------------

def _host(name: str, modes: list[str]) -> HostRecord:
    return HostRecord(host=name, queue=f"q.{name}", node=f"n@{name}", boot="b", slots=4, network_modes=modes)


@pytest.mark.parametrize(("hosts", "mode", "says"), [
    ([_host("w1", ["none", "public", "allowlist"])], "public", None),
    ([_host("w1", []), _host("w2", ["none", "allowlist"])], "allowlist", None),
    ([_host("w1", ["none"])], "public", ("is allowed by none of the 1 live worker(s): start workers with "
                                         "--allow-network public.")),
    ([_host("w1", []), _host("w2", [])], "public", ("is enforced by none of the 2 live worker(s): their hosts "
                                                    "cannot enforce network policies (nftables and CAP_NET_ADMIN")),
    ([_host("w1", [])], "none", "is enforced by none"),  # a network of its own needs the rules too
])
def test_preflight_names_the_missing_network_mode(hosts: list[Any], mode, says):
    why = network_refusal(mode, ["s1", "s2"], hosts)
    if says is None:
        assert why is None
    else:
        assert why is not None and says in why and why.startswith(f"Network mode '{mode}' (samples s1, s2)")


# --- an embedded eval's --egress-allow -----------------------------------------------------------------

async def test_egress_allow_on_an_eval_is_embedded_modes_and_checked_in_one_line():
    from orchestrator.cli import build_parser as eval_parser
    from orchestrator.cli._eval_cmd import _common_kwargs
    from orchestrator.eval._errors import EvalSetupError
    from orchestrator.eval._setup import make_dispatcher

    args = eval_parser().parse_args(["eval", "task.py", "--egress-allow", "10.0.0.0/8", "--egress-allow", "mirror.lan"])
    assert _common_kwargs(args)["egress_allow"] == ["10.0.0.0/8", "mirror.lan"]
    with pytest.raises(EvalSetupError) as caught:
        await make_dispatcher(None, ["169.254.169.254"])
    assert str(caught.value) == ("--egress-allow '169.254.169.254': link-local (cloud metadata) addresses are never "
                                 "reachable from a sandbox")
    with pytest.raises(EvalSetupError, match="--egress-allow is for embedded mode: with --broker each worker's own"):
        await make_dispatcher("redis://127.0.0.1:1/0", ["10.0.0.0/8"])  # refused before any connection
    d = await make_dispatcher(None, ["10.0.0.0/8"])
    try:
        assert d.host.docker.egress.config.allow == ("10.0.0.0/8",)  # an enforcer of the eval's own
        assert d.host.docker is not host_sandboxes()  # and a docker host of its own, closed with it
    finally:
        await d.aclose()
