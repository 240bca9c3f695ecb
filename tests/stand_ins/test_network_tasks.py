"""The ``no-network-refused`` and ``allowlist-egress`` tasks tell a refused download from a reached one.

Harbor 0.25's docker environment cannot enforce either mode on a machine without Docker Hub (its egress sidecar
image and kernel probe are pulled from there), so it refuses both tasks; these tests run each task's solution and
verifier in a plain container instead, once with the network the task asks for and once with more (a control),
and expect reward 1 and then 0:

- no network (``network_mode=none``) against the test internet's network;
- only the test internet's main network, where Docker's isolation between bridge networks keeps its second
  address out (an allowlist's effect), against both networks.
"""

from __future__ import annotations

import contextlib
import io
import shutil
import tarfile
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.hub import HubMirror, rewrite_from
from tests.support.internet import LocalInternet

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(600)]

TASKS = Path(__file__).resolve().parents[2] / "examples" / "terminal-bench"


@pytest.fixture(scope="module")
def client(sandbox_image: str) -> Iterator[Any]:
    import docker

    client = docker.from_env(timeout=300)
    yield client
    client.close()


@pytest.fixture(scope="module")
def bases(client: Any, local_registry: Any) -> Iterator[dict[str, str]]:
    """The stand-in base images, pulled from a seeded mirror (Hub name -> local reference)."""
    hub = HubMirror(local_registry, client, nonce=uuid.uuid4().hex[:8])
    seeded = hub.seed()
    for ref in seeded.values():
        repository, tag = ref.rsplit(":", 1)
        for event in client.api.pull(repository, tag=tag, stream=True, decode=True):
            assert "error" not in event, event
    try:
        yield seeded
    finally:
        for ref in seeded.values():
            client.api.remove_image(ref)


def _tar(directory: Path, prefix: str) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.add(directory, arcname=prefix)
    return buf.getvalue()


def _reward(client: Any, bases: dict[str, str], task: str, env: dict[str, str], network: str,
            also: str | None = None) -> tuple[str, str]:
    """Build ``task``'s image, run its solution then its verifier as Harbor would (root, /solution, /tests,
    /logs/verifier) in a container on ``network`` (and ``also``); (reward.txt, what they printed)."""
    environment = TASKS / task / "environment"
    tag = f"toolfleet/standins-task:{uuid.uuid4().hex[:8]}"
    dockerfile = Path(tempfile.mkdtemp(prefix="toolfleet-standins-")) / "Dockerfile"  # the SDK sends it along
    dockerfile.write_text(rewrite_from((environment / "Dockerfile").read_text(), bases))
    container = None
    try:
        for event in client.api.build(path=str(environment), dockerfile=str(dockerfile), tag=tag, rm=True,
                                      forcerm=True, pull=False, network_mode="none", decode=True):
            assert "error" not in event, event
        container = client.containers.run(tag, ["sleep", "infinity"], detach=True, network=network,
                                          environment=env, labels={"toolfleet.test": "stand-ins"})
        if also is not None:
            client.networks.get(also).connect(container)
        container.put_archive("/", _tar(TASKS / task / "solution", "solution"))
        container.put_archive("/", _tar(TASKS / task / "tests", "tests"))
        out = []
        for command in ("mkdir -p /logs/verifier /logs/agent", "bash /solution/solve.sh", "bash /tests/test.sh"):
            result = container.exec_run(["bash", "-c", f"timeout 120 {command}"], user="root")
            out.append(f"$ {command} -> {result.exit_code}\n{result.output.decode(errors='replace')}")
        reward = container.exec_run(["cat", "/logs/verifier/reward.txt"]).output.decode().strip()
        return reward, "\n".join(out)
    finally:
        shutil.rmtree(dockerfile.parent, ignore_errors=True)
        if container is not None:
            container.remove(force=True)
        from docker.errors import DockerException

        with contextlib.suppress(DockerException):
            client.api.remove_image(tag)


def test_no_network_scores_only_a_refused_download(client: Any, bases: dict[str, str],
                                                   local_internet: LocalInternet) -> None:
    reward, out = _reward(client, bases, "no-network-refused", local_internet.env(), "none")
    assert reward == "1", out
    assert "download failed" in out
    reward, out = _reward(client, bases, "no-network-refused", local_internet.env(), local_internet.network)
    assert reward == "0", out
    assert "/app/status.txt should say offline, it says 'online'" in out


def test_no_network_without_an_address_tests_nothing(client: Any, bases: dict[str, str]) -> None:
    reward, out = _reward(client, bases, "no-network-refused", {"TB_INTERNET_URL": ""}, "none")
    assert reward == "0", out
    assert "TB_INTERNET_URL is not an http URL ('')" in out


def test_allowlist_scores_only_a_blocked_other_host(client: Any, bases: dict[str, str],
                                                    local_internet: LocalInternet) -> None:
    internet = local_internet
    reward, out = _reward(client, bases, "allowlist-egress", internet.env(), internet.network)
    assert reward == "1", out
    assert "4 passed, 0 failed" in out
    reward, out = _reward(client, bases, "allowlist-egress", internet.env(), internet.network,
                          also=internet.other_network)
    assert reward == "0", out
    assert "FAILED /tests/test_outputs.py::test_other_host_found_blocked" in out
    assert "FAILED /tests/test_outputs.py::test_other_host_blocked_for_the_verifier_too" in out
