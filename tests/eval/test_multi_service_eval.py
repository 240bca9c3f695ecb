"""A multi-service sandbox through a whole eval, embedded and on a worker: Inspect's compose form
(``("docker", "compose.yaml")``), tools and scorers reaching each container with ``sandbox("name")``,
each service in its own namespace on the sandbox's own network reached by its name (as compose does),
nothing leaving that network, and every container gone after.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import docker
import pytest

from orchestrator.eval import eval_async

TASK_FILE = Path(__file__).resolve().parent / "tasks" / "pod.py"
MODEL = "scripted/pod_tour"

pytestmark = [pytest.mark.docker, pytest.mark.timeout(300)]


def _check(log: Any) -> None:
    assert log.status == "success", [s.error for s in log.samples]
    [sample] = log.samples
    assert sample.scores["reads_services"].value == "C", sample.scores["reads_services"].explanation
    [opened] = [e.data for e in sample.events if e.event == "info" and e.source == "sandbox"]
    assert opened["image"] == "toolfleet/sandbox:latest" and opened["host"]
    assert opened["services"] == {"web": "toolfleet/sandbox:latest", "sidecar": "toolfleet/sandbox:latest"}
    results = [str(e.result) for e in sample.events if e.event == "tool"]
    assert results[0].strip() == "hello-from-web"  # default -> web:8080 by name
    assert results[1] == "0:hello-from-web\nweb\nweb"  # the web container: its env; its service name, as compose
    assert results[2] == "0:sidecar\nsandbox"  # a sidecar without healthcheck runs as its image's USER
    assert results[3] == "0:in-default"  # sandbox("default") is the container the tools use
    interfaces, blocked = results[4].strip().splitlines()[-2:]
    # Loopback and the pod's own network; nothing leaves it (network_mode 'none': the enforcer rejects).
    assert interfaces == "2" and blocked.startswith("blocked:"), results[4]
    assert "no route" in blocked.lower() or "unreachable" in blocked.lower(), results[4]
    # Service execs are on record like any other (the tool's own span).
    where = {(e.cmd or e.file or ""): e.service for e in sample.events if e.event == "sandbox"}
    web = next(c for c in where if "cat /tmp/hello.txt" in c)
    sidecar = next(c for c in where if "echo $ROLE; id -un" in c)
    assert (where[web], where[sidecar], where["/tmp/hello.txt"]) == ("web", "sidecar", "web")  # the scorer's read
    assert where[next(c for c in where if "http://web:8080/hello." in c)] is None  # the default container's
    leftover = docker.from_env().containers.list(all=True, filters={"label": f"toolfleet.eval_id={log.eval.eval_id}"})
    assert leftover == [], [c.name for c in leftover]


@pytest.mark.parametrize("per_sample", [False, True])
async def test_compose_sandbox_embedded(tmp_path: Path, sandbox_image: str, per_sample: bool) -> None:
    [log] = await eval_async(str(TASK_FILE), MODEL, log_dir=tmp_path, task_args={"per_sample": per_sample})
    _check(log)


@pytest.mark.celery
async def test_compose_sandbox_on_a_worker(tmp_path: Path, sandbox_image: str, fleet) -> None:  # type: ignore[no-untyped-def]
    worker = fleet.worker(imports=("tests.eval.tasks.pod",))
    [log] = await eval_async(str(TASK_FILE), MODEL, log_dir=tmp_path, broker=fleet.redis.url)
    _check(log)
    hosts = {e.host for e in log.samples[0].events if e.event == "tool"}
    assert hosts == {worker.host}
    [opened] = [e.data for e in log.samples[0].events if e.event == "info" and e.source == "sandbox"]
    assert opened["host"] == worker.host


async def test_a_compose_file_that_does_not_map_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "compose.yaml"
    bad.write_text("services:\n  default:\n    image: toolfleet/sandbox:latest\n    ports: ['8080:80']\n")
    from orchestrator.eval import EvalSetupError

    with pytest.raises(EvalSetupError) as caught:
        await eval_async(str(TASK_FILE), MODEL, log_dir=tmp_path, task_args={"compose": str(bad)})
    message = str(caught.value)
    assert "compose.yaml: service 'default': 'ports' is not supported" in message and "\n" not in message


@pytest.mark.celery
async def test_a_pod_larger_than_any_worker_is_refused_up_front(tmp_path: Path, fleet) -> None:  # type: ignore[no-untyped-def]
    """Three containers take three slots: a fleet of 2-slot workers is told so by preflight, and without
    preflight the sample fails at once instead of waiting for capacity that cannot come."""
    from orchestrator.eval._preflight import PreflightError

    fleet.worker(imports=("tests.eval.tasks.pod",), slots=2)
    with pytest.raises(PreflightError) as caught:
        await eval_async(str(TASK_FILE), MODEL, log_dir=tmp_path, broker=fleet.redis.url)
    assert str(caught.value) == ("The sandbox of sample pod has 3 containers and takes 3 slots on one worker, but no "
                                 "live worker has that many (largest --slots: 2).")
    [log] = await eval_async(str(TASK_FILE), MODEL, log_dir=tmp_path, broker=fleet.redis.url, fail_on_error=False,
                             preflight=False)
    [sample] = log.samples
    assert sample.error is not None
    expected = "A sandbox of 3 containers needs 3 free slots on one worker host; the largest live host has 2"
    assert expected in sample.error.message
