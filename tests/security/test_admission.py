"""Edge values that slipped past the worker's admission rules (SECURITY.md, "Broker → worker").

Before: a sandbox ``user`` of ``"00"``, ``"+0"`` or ``"1000:00"`` ran as uid/gid 0, ``bash(user="root")``
ran as root (exec users were never checked), ``mem_limit "0"``, ``cpus 1e-12`` and ``pids_limit -1`` gave an
unlimited container, and ``reap_interval 1e-6`` kept the worker and dockerd busy. Now: users are parsed
to uid/gid and refused when either is 0, every numeric field has a positive lower bound (refused below)
and an upper bound (clamped above), and a command's user is admitted by the same rule and pinned to
numbers inside the sandbox. Tables (pure) plus a real worker with real Docker.
"""

from __future__ import annotations

import uuid

import pytest

from orchestrator._wire import CallRequest, SandboxSpec
from orchestrator.tool._tool_def import tool_def
from orchestrator.util._sandbox import SandboxUnavailableError
from workers._admission import AdmissionRefused, AdmissionRules, admit_sandbox
from workers._bounds import LIMITS, parse_user, user_refusal
from workers._exec_user import ExecUserGate

from ._broker_support import broker_fleet, dispatcher, legit_call_works  # noqa: F401 - fixtures, requested by name

ROOT_SPELLINGS = ["root", "0", "00", "+0", "-0", "000:1000", "1000:00", "1000:+0", "1000:root", "root:1000",
                  " 0 ", "0:0"]
UNREADABLE = ["", ":", "1000:", "a b", "$(id)", "1000:1000:1000", "4294967295", "-1", "é"]
ADMITTED_USERS = {"sandbox": ("sandbox", None), "1000": (1000, None), "1000:1000": (1000, 1000),
                  "nobody:nogroup": ("nobody", "nogroup"), "65534": (65534, None), "rooted": ("rooted", None)}


@pytest.mark.parametrize("spec", ROOT_SPELLINGS)
def test_every_spelling_of_root_is_refused(spec) -> None:
    assert user_refusal(spec) is not None
    assert user_refusal(spec, allow_root=True) is None  # the worker's own choice (--allow-root-user)
    with pytest.raises(AdmissionRefused, match="field 'user'"):
        admit_sandbox(AdmissionRules(), {"type": "docker", "user": spec})
    with pytest.raises(AdmissionRefused, match=r"services\.db\.user"):
        admit_sandbox(AdmissionRules(), {"type": "docker", "services": {"db": {"image": "toolfleet/db", "user": spec}}})


@pytest.mark.parametrize("spec", UNREADABLE)
def test_unreadable_users_are_refused(spec) -> None:
    assert user_refusal(spec, allow_root=True) is not None


@pytest.mark.parametrize(("spec", "parsed"), ADMITTED_USERS.items())
def test_other_users_parse_and_pass(spec, parsed) -> None:
    got = parse_user(spec)
    assert (got.user, got.group) == parsed
    assert user_refusal(spec) is None


def test_a_bare_uid_of_a_service_gets_its_own_group_not_root() -> None:
    """Docker runs a uid missing from the image's /etc/passwd with gid 0: the worker names the group."""
    admitted = admit_sandbox(AdmissionRules(),
                             {"type": "docker", "services": {"db": {"image": "toolfleet/db", "user": "4321"}}})
    assert admitted["services"]["db"]["user"] == "4321:4321"


# (field, asked value) -> refused (None) or the admitted value, with AdmissionRules(max_memory="2g", max_cpus=2, ...).
EDGES = {
    ("mem_limit", "0"): None, ("mem_limit", "0g"): None, ("mem_limit", "1k"): None, ("mem_limit", "-1"): None,
    ("mem_limit", "6m"): "6m", ("mem_limit", "64g"): "2g",
    ("memswap_limit", "-1"): None, ("memswap_limit", "0"): None, ("memswap_limit", "64g"): "2g",
    ("cpus", 0): None, ("cpus", 1e-12): None, ("cpus", -1): None, ("cpus", float("nan")): None,
    ("cpus", float("inf")): None, ("cpus", 0.01): 0.01, ("cpus", 64): 2.0,
    ("pids_limit", 0): None, ("pids_limit", -1): None, ("pids_limit", 31): None, ("pids_limit", 32): 32,
    ("pids_limit", 10**9): 100,
    ("output_cap", 0): None, ("output_cap", 10**12): 4096, ("ttl", 1e-9): None, ("ttl", 1e12): 3600.0,
    ("reap_interval", 1e-6): None, ("reap_interval", 0.5): None, ("reap_interval", 1e9): 3600.0,
    ("reap_interval", 30): 30.0, ("acquire_timeout", 1e-9): None, ("acquire_timeout", 1e9): 3600.0,
    ("max_sandboxes", 10**9): 256, ("pool_size", 10**6): 8, ("pool_size", 0): 0, ("warm_spares", 0): 0,
}
RULES = AdmissionRules(max_memory="2g", max_cpus=2, max_pids=100, max_output_cap=4096, max_ttl=3600)


@pytest.mark.parametrize(("field", "value"), EDGES.keys(), ids=[f"{f}={v!r}" for f, v in EDGES])
def test_every_numeric_field_has_both_bounds(field, value) -> None:
    expected = EDGES[(field, value)]
    config = {"type": "docker", field: value}
    if expected is None:
        with pytest.raises(AdmissionRefused, match=field):
            admit_sandbox(RULES, config)
    else:
        assert admit_sandbox(RULES, config)[field] == expected


@pytest.mark.parametrize(("field", "value"), [("mem_limit", "0"), ("cpus", 1e-12), ("pids_limit", -1), ("cpus", 0)])
def test_service_limits_have_the_same_bounds(field, value) -> None:
    with pytest.raises(AdmissionRefused, match=f"services.db.{field}"):
        admit_sandbox(RULES, {"type": "docker", "services": {"db": {"image": "toolfleet/db", field: value}}})


def test_every_numeric_config_field_is_on_the_bounds_table() -> None:
    """A numeric sandbox field a message may set and nobody bounded would be the next reap_interval."""
    from workers.sandbox._driver import DockerSandboxConfig, LocalSandboxConfig

    free_of_bounds = {"api_threads"}  # refused outright unless default (worker-only)
    for model in (DockerSandboxConfig, LocalSandboxConfig):
        for name, info in model.model_fields.items():
            annotation = str(info.annotation)
            if ("int" in annotation or "float" in annotation) and name not in free_of_bounds:
                assert name in LIMITS, name


class _FakeLookupEnv:
    """A container whose /etc/passwd names uid 0 twice (a hostile or careless image); records each lookup."""

    def __init__(self, passwd: dict[str, str]) -> None:
        self.passwd = passwd
        self.lookups: list[tuple[list[str], str | None]] = []

    async def exec_raw(self, cmd, user=None, timeout=None):  # type: ignore[no-untyped-def]
        from workers.sandbox._channel import RawResult

        self.lookups.append((cmd, user))
        line = self.passwd.get(cmd[2], "")
        return RawResult(returncode=0 if line else 2, stdout=line.encode(), stderr=b"", truncated=False,
                         timed_out=False, oom=False)


async def test_a_name_resolving_to_uid_0_is_refused_and_others_are_pinned_to_numbers() -> None:
    env = _FakeLookupEnv({"toor": "toor:x:0:0::/root:/bin/sh",
                          "sandbox": "sandbox:x:1000:1000::/home/sandbox:/bin/bash",
                          "wheelie": "wheelie:x:1001:0::/:/bin/sh", "1234": ""})
    gate = ExecUserGate()
    for name in ("toor", "wheelie"):
        with pytest.raises(PermissionError, match="refuses to run commands as user"):
            await gate(env, name)
    assert await gate(env, "sandbox") == "1000:1000"
    assert await gate(env, "1234") == "1234:1234"  # not listed: never Docker's fallback gid 0
    assert all(user == "65534:65534" for _, user in env.lookups)  # the lookup never runs as the user checked
    assert await gate(env, None) is None  # the image's own USER
    assert await ExecUserGate(default_user="sandbox")(env, None) == "1000:1000"  # a message-chosen default


# --- against a real worker --------------------------------------------------------------------------------

ATTACKS = {
    "user 00": {"user": "00"}, "user +0": {"user": "+0"}, "group 00": {"user": "1000:00"},
    "mem_limit 0": {"mem_limit": "0"}, "cpus 1e-12": {"cpus": 1e-12}, "cpus 0": {"cpus": 0},
    "pids_limit 0": {"pids_limit": 0}, "pids_limit -1": {"pids_limit": -1},
           "reap_interval 1e-6": {"reap_interval": 1e-6},
    "service mem_limit 0": {"services": {"db": {"image": "toolfleet/sandbox:latest", "mem_limit": "0"}}},
    "service pids -1": {"services": {"db": {"image": "toolfleet/sandbox:latest", "pids_limit": -1}}},
}


@pytest.mark.celery
@pytest.mark.parametrize("fields", ATTACKS.values(), ids=ATTACKS.keys())
async def test_edge_values_are_refused_by_a_real_worker(broker_fleet, dispatcher, fields) -> None:  # noqa: F811 - the imported fixture
    spec = SandboxSpec(eval_id="edge", sample_id="s", config={"type": "docker", **fields})
    with pytest.raises(SandboxUnavailableError, match=r"This worker refuses (the )?sandbox"):
        await dispatcher.open_sandbox(spec)
    await legit_call_works(dispatcher, broker_fleet)


def _bash(user: str | None, cmd: str, sandbox: str) -> CallRequest:
    from orchestrator.tool import bash

    return CallRequest(call_id=uuid.uuid4().hex, function="bash", tool=tool_def(bash(user=user)).ref,
                       arguments={"cmd": cmd}, sandbox=sandbox)


@pytest.mark.celery
@pytest.mark.docker
async def test_exec_time_root_is_refused_and_names_run_as_numbers(broker_fleet, dispatcher, sandbox_image) -> None:  # noqa: F811 - the imported fixture
    """``bash(user="root")`` (a tool parameter any message can carry) used to run as root."""
    from tests.distributed._helpers import one

    route = await dispatcher.open_sandbox(SandboxSpec(eval_id="exec-user", sample_id="s",
                                                      config={"type": "docker", "pool_size": 0}))
    try:
        for user in ("root", "0", "+0", "1000:0"):
            outcome = await one(dispatcher, _bash(user, "id -u > /tmp/ran; id -u", route.sandbox), route=route)
            assert outcome.error is not None and "refuses to run commands as user" in outcome.error.message, outcome
        seen = await one(dispatcher, _bash(None, "cat /tmp/ran 2>&1; id -u; id -g", route.sandbox), route=route)
        assert "No such file" in str(seen.result) and "1000\n1000" in str(seen.result)  # nothing ran as root
        daemon = await one(dispatcher, _bash("daemon", "id -u; id -g", route.sandbox), route=route)
        assert daemon.error is None and str(daemon.result).split() == ["1", "1"], daemon
    finally:
        await dispatcher.close_sandbox(route)


@pytest.fixture
def uid0_alias_image(sandbox_image: str):  # type: ignore[no-untyped-def]
    """The sandbox image plus two passwd entries a hostile (or careless) image could carry: ``toor``
    (uid 0) and ``wheelie`` (uid 1001, gid 0). Built for this test, removed after it."""
    import io

    import docker

    client = docker.from_env(timeout=120)
    tag = f"toolfleet/test-uid0-alias-{uuid.uuid4().hex[:8]}:latest"
    dockerfile = (f"FROM {sandbox_image}\nUSER root\n"
                  "RUN echo 'toor:x:0:0::/root:/bin/sh' >> /etc/passwd"
                  " && echo 'wheelie:x:1001:0::/:/bin/sh' >> /etc/passwd\n"
                  "USER sandbox\n")
    client.images.build(fileobj=io.BytesIO(dockerfile.encode()), tag=tag, rm=True, forcerm=True, pull=False)
    try:
        yield tag
    finally:
        client.images.remove(tag, force=True)
        client.close()


@pytest.mark.celery
@pytest.mark.docker
async def test_a_name_resolving_to_uid_0_in_a_real_image_is_refused(broker_fleet, dispatcher, uid0_alias_image) -> None:  # noqa: F811 - the imported fixture
    """The same gate as above, against a real container whose /etc/passwd names uid 0 ``toor``: its
    name passes the spelling check, and only the lookup inside the container finds it is root."""
    import docker

    from tests.distributed._helpers import one

    eval_id = f"uid0-alias-{uuid.uuid4().hex[:8]}"
    route = None
    try:
        route = await dispatcher.open_sandbox(SandboxSpec(eval_id=eval_id, sample_id="s", config={
            "type": "docker", "image": uid0_alias_image, "pool_size": 0}))
        for user, pinned in (("toor", "0:0"), ("wheelie", "1001:0")):
            outcome = await one(dispatcher, _bash(user, "id -u > /tmp/ran; id -u", route.sandbox), route=route)
            assert outcome.error is not None and outcome.error.message.startswith(
                f"This worker refuses to run commands as user {user!r} ({pinned} in the sandbox): "
                "a message cannot ask for the root user or group (uid or gid 0)"), outcome
        seen = await one(dispatcher, _bash(None, "cat /tmp/ran 2>&1; id -u", route.sandbox), route=route)
        assert "No such file" in str(seen.result) and str(seen.result).endswith("1000\n"), seen  # nothing ran
        ok = await one(dispatcher, _bash("sandbox", "id -u; id -g", route.sandbox), route=route)
        assert ok.error is None and str(ok.result).split() == ["1000", "1000"], ok  # the gate itself works here
    finally:
        if route is not None:
            await dispatcher.close_sandbox(route)
        client = docker.from_env()
        for leftover in client.containers.list(all=True, filters={"label": f"toolfleet.eval_id={eval_id}"}):
            leftover.remove(force=True)
        client.close()


CALL_TIMEOUTS = {0: None, -5: None, float("nan"): None, float("inf"): None, "10": None, True: None, 1e-3: 1e-3,
                 30: 30.0, 1e12: 3600.0}


@pytest.mark.parametrize("value", CALL_TIMEOUTS.keys(), ids=[repr(v) for v in CALL_TIMEOUTS])
def test_a_calls_timeout_is_bounded_by_the_worker(value) -> None:
    from workers._bounds import call_timeout

    assert call_timeout(value, 3600.0) == CALL_TIMEOUTS[value]


def test_a_calls_result_cap_can_only_narrow() -> None:
    from workers._bounds import result_bytes

    assert [result_bytes(v) for v in (0, -1, 10, 4096, 10**12, "big")] == [1024, 1024, 1024, 4096,
                                                                           16 * 1024**2, 16 * 1024**2]
