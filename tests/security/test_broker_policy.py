"""Workers decide, messages ask: sandbox configs and tool names a message cannot widen.

Against a real worker started as in production (no ``--allow-local``) and, for the clamp, real
Docker; plus the admission rules' table (pure).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from orchestrator._wire import CallRequest, SandboxSpec
from orchestrator.tool._registry import ToolRef
from orchestrator.util._sandbox import SandboxUnavailableError
from workers._admission import AdmissionRefused, AdmissionRules, admit_sandbox

from ._broker_support import (  # noqa: F401 - fixtures, requested by name
    BrokerFleet,
    dispatcher,
    legit_call_works,
    log_mark,
    wait_for_log,
)

celery = pytest.mark.celery

# This module's worker's caps, set below its defaults so that a worker that dropped one (leaving Docker's
# unlimited 0 or -1) cannot pass for one that applied it.
WORKER_CAPS = ("--max-memory", "1g", "--max-cpus", "1.5", "--max-pids", "321")


@pytest.fixture(scope="module")
def broker_fleet() -> Iterator[BrokerFleet]:
    f = BrokerFleet().start(extra_args=WORKER_CAPS)
    yield f
    f.cleanup()

REFUSED_DOCKER = {
    "docker endpoint": {"docker_host": "tcp://attacker.example:2375"},
    "added capability": {"cap_add": ["SYS_ADMIN"]},
    "kept capabilities": {"cap_drop": []},
    "root user": {"user": "root"},
    "uid 0": {"user": "0:0"},
    "root group": {"user": "1000:0"},
    "privileged": {"privileged": True},
    "devices": {"devices": ["/dev/sda:/dev/sda"]},
    "mounts": {"volumes": {"/": {"bind": "/host", "mode": "rw"}}},
    "bind mounts": {"mounts": [{"source": "/", "target": "/host", "type": "bind"}]},
    "host network": {"network_mode": "host"},
    "seccomp off": {"security_opt": ["seccomp=unconfined"]},
    "foreign image": {"image": "attacker/rootkit:latest"},
    "api threads": {"api_threads": 10_000},
    # A multi-service sandbox's services obey the sandbox's rules; their network and hardening are its own.
    "service foreign image": {"services": {"db": {"image": "attacker/rootkit:latest"}}},
    "service root user": {"services": {"db": {"image": "toolfleet/sandbox:latest", "user": "0"}}},
    "service privileged": {"services": {"db": {"image": "toolfleet/sandbox:latest", "privileged": True}}},
    "service host network": {"services": {"db": {"image": "toolfleet/sandbox:latest"}}, "network_mode": "host"},
    "service mounts": {"services": {"db": {"image": "toolfleet/sandbox:latest", "volumes": ["/:/host"]}}},
}


@pytest.mark.parametrize("fields", REFUSED_DOCKER.values(), ids=REFUSED_DOCKER.keys())
def test_admission_refuses_what_only_the_worker_may_set(fields) -> None:
    with pytest.raises(AdmissionRefused):
        admit_sandbox(AdmissionRules(), {"type": "docker", **fields})


def test_admission_refuses_local_unless_the_worker_allows_it() -> None:
    with pytest.raises(AdmissionRefused, match="not enabled"):
        admit_sandbox(AdmissionRules(), {"type": "local"})
    with pytest.raises(AdmissionRefused):  # a host directory chosen by a message
        admit_sandbox(AdmissionRules(sandbox_types=["local"]), {"type": "local", "root_dir": "/etc"})
    assert admit_sandbox(AdmissionRules(sandbox_types=["local"]), {"type": "local"})["type"] == "local"


def test_admission_clamps_limits_and_keeps_narrowing_asks() -> None:
    rules = AdmissionRules(max_memory="2g", max_cpus=1.5, max_pids=100, max_output_cap=1024)
    admitted = admit_sandbox(rules, {"type": "docker", "mem_limit": "64g", "memswap_limit": "128g", "cpus": 64,
                                      "pids_limit": 10**6, "output_cap": 10**9, "pool_size": 1000})
    assert (admitted["mem_limit"], admitted["memswap_limit"], admitted["cpus"], admitted["pids_limit"],
            admitted["output_cap"], admitted["pool_size"]) == ("2g", "2g", 1.5, 100, 1024, rules.max_pool_size)
    service = admit_sandbox(rules, {"type": "docker", "services": {"db": {
        "image": "toolfleet/db:1", "mem_limit": "64g", "cpus": 64, "pids_limit": 10**6}}})["services"]["db"]
    assert (service["mem_limit"], service["cpus"], service["pids_limit"]) == ("2g", 1.5, 100)
    narrow = admit_sandbox(rules, {"type": "docker", "mem_limit": "256m", "cpus": 0.5, "user": "nobody",
                                    "cap_drop": ["ALL"], "read_only": True, "direct_channel": False})
    assert (narrow["mem_limit"], narrow["cpus"], narrow["user"], narrow["read_only"], narrow["direct_channel"]) == \
        ("256m", 0.5, "nobody", True, False)


@celery
async def test_local_sandbox_with_setup_script_is_refused(broker_fleet, dispatcher, tmp_path) -> None:  # noqa: F811 - the imported fixture
    """The original hole: {"type": "local"} + a setup script = shell commands as the worker's user."""
    marker = tmp_path / "pwned"
    spec = SandboxSpec(eval_id="attack", sample_id="s", config={"type": "local"}, setup=f"touch {marker}")
    with pytest.raises(SandboxUnavailableError, match="not enabled"):
        await dispatcher.open_sandbox(spec)
    assert not marker.exists()
    await legit_call_works(dispatcher, broker_fleet)


@celery
@pytest.mark.parametrize("fields", [REFUSED_DOCKER[k] for k in ("docker endpoint", "privileged", "added capability",
                                                                "root user", "devices", "mounts",
                                                                "service foreign image", "service root user")],
                         ids=["docker-endpoint", "privileged", "cap-add", "root-user", "devices", "mounts",
                              "service-image", "service-root"])
async def test_dangerous_docker_config_is_refused_by_the_worker(broker_fleet, dispatcher, fields) -> None:  # noqa: F811 - the imported fixture
    spec = SandboxSpec(eval_id="attack", sample_id="s", config={"type": "docker", **fields})
    mark = log_mark(broker_fleet.worker)
    with pytest.raises(SandboxUnavailableError, match="refuses"):
        await dispatcher.open_sandbox(spec)
    wait_for_log(broker_fleet.worker, "worker.sandbox_refused", since=mark)


@celery
async def test_a_message_never_causes_an_import(broker_fleet, dispatcher) -> None:  # noqa: F811 - the imported fixture
    """The module is importable on the worker (repo root on its path); had the worker imported it, the
    tool would have registered and run ("evil ran")."""
    from orchestrator.dispatch import SampleRoute
    from tests.distributed._helpers import one

    req = CallRequest(call_id=uuid.uuid4().hex, function="evil",
                      tool=ToolRef(name="evil", module="tests.security._evil_tools"))
    outcome = await one(dispatcher, req, route=SampleRoute(queue=broker_fleet.queue))
    assert outcome.fatal is not None and outcome.fatal.type == "ToolNotRegisteredError"
    assert "--import tests.security._evil_tools" in outcome.fatal.message
    assert outcome.result is None
    # Importable from the worker's cwd (the repo root): only the worker's tool registry kept it out.
    import importlib.util

    assert importlib.util.find_spec("tests.security._evil_tools") is not None
    await legit_call_works(dispatcher, broker_fleet)


@celery
@pytest.mark.docker
async def test_docker_limits_are_clamped_to_the_worker_caps(broker_fleet, dispatcher, sandbox_image) -> None:  # noqa: F811 - the imported fixture
    import docker

    eval_id = f"clamp-{uuid.uuid4().hex[:8]}"
    spec = SandboxSpec(eval_id=eval_id, sample_id="s", config={"type": "docker", "mem_limit": "64g", "cpus": 64,
                                                                "pids_limit": 10**6, "pool_size": 0})
    client = docker.from_env()
    route = None
    try:
        route = await dispatcher.open_sandbox(spec)
        [container] = client.containers.list(filters={"label": f"toolfleet.eval_id={eval_id}"})
        host_config = container.attrs["HostConfig"]
        # What the message asked, clamped to this worker's caps (WORKER_CAPS): 1g, 1.5 CPUs, 321 pids.
        assert (host_config["Memory"], host_config["MemorySwap"]) == (1024**3, 1024**3)
        assert host_config["NanoCpus"] == 1_500_000_000
        assert host_config["PidsLimit"] == 321
        assert host_config["CapAdd"] in (None, [])
        assert not host_config["Privileged"]
    finally:
        if route is not None:
            await dispatcher.close_sandbox(route)
        for leftover in client.containers.list(all=True, filters={"label": f"toolfleet.eval_id={eval_id}"}):
            leftover.remove(force=True)
        client.close()
