"""The stand-ins for Docker Hub and the internet serve what they claim (``tests/support/hub.py``,
``tests/support/internet.py``), and ``examples/terminal-bench`` covers what it is for.

- pure: where Docker Hub keeps a name; ``FROM`` lines pointed at a mirror; the task set's coverage;
- with Docker (a real ``docker-registry``, real containers and networks): every published file matches the
  manifest; the installer runs in a container on the test network and installs a runner that grades; pip installs
  from the index there; a published port reaches it from another network; a build on its network downloads;
  each seeded image pulls by its mirror name and is what it stands for; a new nonce gives new image ids.
"""

from __future__ import annotations

import contextlib
import hashlib
import ipaddress
import json
import os
import tomllib
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.hub import MARKER, HubMirror, rewrite_from, task_images
from tests.support.internet import (
    ALLOWED_RANGE,
    DEB_FILE,
    INDEX_PACKAGES,
    LARGE_FILE,
    OTHER_RANGE,
    SMALL_FILE,
    LocalInternet,
)
from tests.support.registry import daemon_allows_loopback_registries, hub_repository

TASKS = Path(__file__).resolve().parents[2] / "examples" / "terminal-bench"


# -- pure ------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("name", "expected"), [
    ("ubuntu:24.04", "library/ubuntu:24.04"),
    ("ubuntu", "library/ubuntu:latest"),
    ("python:3.13-slim-bookworm", "library/python:3.13-slim-bookworm"),
    ("tbtest/prebuilt-image:20260101", "tbtest/prebuilt-image:20260101"),
    ("docker.io/team/task", "team/task:latest"),
    ("index.docker.io/library/ubuntu:24.04", "library/ubuntu:24.04"),
    ("ubuntu@sha256:" + "a" * 64, "library/ubuntu@sha256:" + "a" * 64),
    ("team/task:1@sha256:" + "b" * 64, "team/task:1@sha256:" + "b" * 64),
])
def test_hub_repository(name: str, expected: str) -> None:
    assert hub_repository(name) == expected


@pytest.mark.parametrize("name", ["ghcr.io/team/task:1", "127.0.0.1:5000/x:1", "localhost/x", "Ubuntu:24.04", ""])
def test_hub_repository_refuses_what_is_not_on_docker_hub(name: str) -> None:
    with pytest.raises(ValueError, match=r"not on Docker Hub|is not an image name"):
        hub_repository(name)


@pytest.mark.parametrize(("line", "expected"), [
    ("FROM ubuntu:24.04", "FROM M/library/ubuntu:24.04"),
    ("from docker.io/library/ubuntu:24.04 AS base", "from M/library/ubuntu:24.04 AS base"),
    ("FROM --platform=linux/amd64 python:3.13-slim-bookworm AS build",
     "FROM --platform=linux/amd64 M/library/python:3.13-slim-bookworm AS build"),
    ("FROM ubuntu:22.04", "FROM ubuntu:22.04"),  # not seeded: left alone
    ("FROM toolfleet/sandbox:latest", "FROM toolfleet/sandbox:latest"),
    ("FROM base", "FROM base"),  # a stage name
    ("RUN echo FROM ubuntu:24.04", "RUN echo FROM ubuntu:24.04"),
])
def test_rewrite_from(line: str, expected: str) -> None:
    refs = {"ubuntu:24.04": "M/library/ubuntu:24.04",
            "python:3.13-slim-bookworm": "M/library/python:3.13-slim-bookworm"}
    assert rewrite_from(f"# top\n{line}\nWORKDIR /app", refs) == f"# top\n{expected}\nWORKDIR /app"


def _tasks() -> dict[str, dict[str, Any]]:
    return {p.name: tomllib.loads((p / "task.toml").read_text()) for p in sorted(TASKS.iterdir()) if p.is_dir()}


def test_the_task_set_covers_what_it_is_for() -> None:
    tasks = _tasks()
    assert len(tasks) >= 7  # the cold-run set: 7 tasks, 4 at a time
    dockerfiles = {name: (TASKS / name / "environment" / "Dockerfile").read_text() for name in tasks}
    verifiers = {name: (TASKS / name / "tests" / "test.sh").read_text() for name in tasks}
    for name, config in tasks.items():
        for part in ("instruction.md", "solution/solve.sh", "tests/test.sh", "environment/Dockerfile"):
            assert (TASKS / name / part).is_file(), f"{name}: {part}"
        for script in ("solution/solve.sh", "tests/test.sh"):
            assert os.access(TASKS / name / script, os.X_OK), f"{name}: {script} is not executable"
        # the operator gives the internet's address at run time
        assert config["environment"]["env"]["TB_INTERNET_URL"] == "${TB_INTERNET_URL}", name

    # a prebuilt image, with a Dockerfile for --force-build; seeding finds it
    assert task_images(TASKS) == {"tbtest/prebuilt-image:20260101": TASKS / "prebuilt-image"}
    # bare FROMs of Docker Hub images, whose builds download (a build argument given by compose from task.toml)
    froms = {line.split()[1] for text in dockerfiles.values() for line in text.splitlines() if line.startswith("FROM")}
    assert froms == {"ubuntu:24.04", "python:3.13-slim-bookworm"}
    downloading = [name for name, text in dockerfiles.items() if "ARG TB_INTERNET_URL" in text]
    assert {dockerfiles[name].split()[1] for name in downloading} == froms
    for name in downloading:
        compose = (TASKS / name / "environment" / "docker-compose.yaml").read_text()
        assert "TB_INTERNET_URL: ${TB_INTERNET_URL}" in compose, name
    # Terminal-Bench's verifier shape: the runner is installed from the internet while grading
    fetching = [name for name, text in verifiers.items() if "/install.sh" in text and "tbrun --ctrf" in text]
    assert len(fetching) >= 5
    # a solution that must download
    assert "weights-50m.bin" in (TASKS / "solve-download-weights" / "solution" / "solve.sh").read_text()
    # no network; an allowlist that lets the main address in and keeps the other out
    modes = {name: config["environment"].get("network_mode", "public") for name, config in tasks.items()}
    assert modes["no-network-refused"] == "no-network"
    assert "/install.sh" not in verifiers["no-network-refused"]
    assert modes["allowlist-egress"] == "allowlist"
    [allowed] = tasks["allowlist-egress"]["environment"]["allowed_hosts"]
    assert ipaddress.ip_network(ALLOWED_RANGE).subnet_of(ipaddress.ip_network(allowed))
    assert not ipaddress.ip_network(OTHER_RANGE).overlaps(ipaddress.ip_network(allowed))
    # a root task
    assert tasks["root-install-deb"]["agent"]["user"] == "root"


# -- with Docker -----------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def docker_client(sandbox_image: str) -> Iterator[Any]:
    import docker

    client = docker.from_env(timeout=300)
    yield client
    client.close()


@pytest.fixture(scope="module")
def hub(docker_client: Any, local_registry: Any) -> Iterator[HubMirror]:
    assert daemon_allows_loopback_registries(docker_client), \
        "the Docker daemon must allow plain-http registries on 127.0.0.0/8 (its default insecure-registries)"
    mirror = HubMirror(local_registry, docker_client, nonce=uuid.uuid4().hex[:8])
    try:
        mirror.seed(tasks=TASKS)
        yield mirror
    finally:
        mirror.cleanup()


def _run(client: Any, image: str, script: str, network: str, user: str | None = None) -> tuple[int, str]:
    """Run ``script`` with bash in a new container on ``network``; (exit status, output). Bounded, removed."""
    container = client.containers.run(image, ["bash", "-c", script], detach=True, network=network, user=user,
                                      labels={"toolfleet.test": "stand-ins"})
    try:
        status = container.wait(timeout=180)["StatusCode"]
        return status, container.logs().decode(errors="replace")
    finally:
        container.remove(force=True)


def _pull(client: Any, ref: str) -> None:
    repository, tag = ref.rsplit(":", 1)
    for event in client.api.pull(repository, tag=tag, stream=True, decode=True):
        assert "error" not in event, event


def _untag(client: Any, ref: str) -> None:
    from docker.errors import DockerException

    with contextlib.suppress(DockerException):
        client.api.remove_image(ref)


@pytest.mark.docker
@pytest.mark.slow
def test_every_file_matches_the_manifest(local_internet: LocalInternet) -> None:
    internet = local_internet
    manifest = internet.manifest()
    files = manifest["files"]
    assert {SMALL_FILE, LARGE_FILE, DEB_FILE, "runner/tbrun"} <= set(files)
    assert files[SMALL_FILE]["size"] == 4 * 1024 * 1024 and files[LARGE_FILE]["size"] == 50 * 1024 * 1024
    for path, expected in files.items():
        body = internet.fetch("/" + path)
        assert (len(body), hashlib.sha256(body).hexdigest()) == (expected["size"], expected["sha256"]), path
    sums = dict(reversed(line.split()) for line in internet.fetch("/SHA256SUMS").decode().splitlines())
    assert sums == {path: expected["sha256"] for path, expected in files.items()}

    index = internet.fetch("/simple/").decode()
    for name in INDEX_PACKAGES:
        assert f'href="{name}/"' in index
        wheel = f"packages/{name}-{manifest['packages'][name]}-py3-none-any.whl"
        page = internet.fetch(f"/simple/{name}/").decode()
        assert f'href="../../{wheel}#sha256={files[wheel]["sha256"]}"' in page

    # the installer names the address it was fetched from
    assert f'BASE_URL="{internet.url}"' in internet.fetch("/install.sh").decode()
    with urllib.request.urlopen(internet.host_url + "/install.sh", timeout=30) as response:
        assert f'BASE_URL="{internet.host_url}"' in response.read().decode()

    with pytest.raises(urllib.error.HTTPError):
        internet.fetch("/no-such-file")
    assert [(r.method, r.status) for r in internet.wait_for("/no-such-file")] == [("GET", 404)]
    assert ("GET", 200) in [(r.method, r.status) for r in internet.wait_for("/" + LARGE_FILE)]


@pytest.mark.docker
@pytest.mark.slow
def test_the_installer_installs_a_runner_that_grades(local_internet: LocalInternet,
                                                     docker_client: Any, sandbox_image: str) -> None:
    internet = local_internet
    script = f"""
fetch() {{
  python3 -c 'import sys, urllib.request as u; sys.stdout.buffer.write(u.urlopen(sys.argv[1], timeout=60).read())' "$1"
}}
fetch {internet.url}/install.sh | sh || exit 10
. "$HOME/.local/bin/env"
command -v tbrun
printf 'def test_one():\\n    assert 1 + 1 == 2\\n\\ndef test_two():\\n    pass\\n' > /tmp/good.py
printf 'def test_ok():\\n    pass\\n\\ndef test_bad():\\n    assert 2 + 2 == 5, "arithmetic"\\n' > /tmp/bad.py
printf 'X = 1\\n' > /tmp/empty.py
tbrun --ctrf /tmp/good.json /tmp/good.py; echo "good=$?"
tbrun --ctrf /tmp/bad.json /tmp/bad.py; echo "bad=$?"
tbrun /tmp/empty.py; echo "empty=$?"
echo "GOOD $(cat /tmp/good.json | tr -d '\\n')"
echo "BAD $(cat /tmp/bad.json | tr -d '\\n')"
"""
    status, output = _run(docker_client, sandbox_image, script, internet.network)
    assert status == 0, output
    lines = output.splitlines()
    assert "installed tbrun 1.0.0 to /home/sandbox/.local/bin" in lines
    assert "/home/sandbox/.local/bin/tbrun" in lines
    assert {"good=0", "bad=1", "empty=2"} <= set(lines), output
    assert "FAILED /tmp/bad.py::test_bad - AssertionError: arithmetic" in lines
    good = json.loads(next(line for line in lines if line.startswith("GOOD "))[5:])["results"]
    bad = json.loads(next(line for line in lines if line.startswith("BAD "))[4:])["results"]
    assert (good["summary"]["tests"], good["summary"]["passed"], good["summary"]["failed"]) == (2, 2, 0)
    assert [t["status"] for t in bad["tests"]] == ["passed", "failed"]
    assert good["tool"] == {"name": "tbrun", "version": "1.0.0"}
    assert internet.wait_for("/runner/tbrun") and internet.wait_for("/runner/tbrun.sha256")


@pytest.mark.docker
@pytest.mark.slow
def test_a_published_port_reaches_it_from_another_network(local_internet: LocalInternet,
                                                          docker_client: Any, sandbox_image: str) -> None:
    internet = local_internet
    network = docker_client.networks.create(f"toolfleet-standins-{uuid.uuid4().hex[:8]}", driver="bridge",
                                            labels={"toolfleet.test": "stand-ins"})
    try:
        status, output = _run(docker_client, sandbox_image, "python3 -c 'import sys, urllib.request; "
                              "print(urllib.request.urlopen(sys.argv[1], timeout=30).read().decode())' "
                              f"{internet.host_url}/manifest.json", network.name)
    finally:
        network.remove()
    assert status == 0, output
    assert json.loads(output) == internet.manifest()


@pytest.mark.docker
@pytest.mark.slow
def test_seeded_images_pull_by_their_mirror_names(hub: HubMirror, docker_client: Any) -> None:
    with urllib.request.urlopen(f"http://{hub.registry.host}/v2/_catalog", timeout=30) as response:
        catalog = json.load(response)["repositories"]
    assert sorted(catalog) == ["library/python", "library/ubuntu", "tbtest/prebuilt-image"]
    expectations = {
        "ubuntu:24.04": f"cat {MARKER}; id -u; pwd",
        "python:3.13-slim-bookworm": f"cat {MARKER}; id -u; pwd; pip --version | cut -d' ' -f1",
        "tbtest/prebuilt-image:20260101": "cat /etc/tbtest-image-source; id -u; pwd; head -1 inventory.csv",
    }
    outputs = {}
    for name, script in expectations.items():
        ref = hub.mirror_ref(name)
        assert ref == f"{hub.registry.host}/{hub_repository(name)}"
        _pull(docker_client, ref)
        try:
            status, outputs[name] = _run(docker_client, ref, script, "none")
            assert status == 0, outputs[name]
        finally:
            _untag(docker_client, ref)
    assert outputs["ubuntu:24.04"].split() == ["ubuntu:24.04", "0", "/"]
    assert outputs["python:3.13-slim-bookworm"].split() == ["python:3.13-slim-bookworm", "0", "/", "pip"]
    # the task's prebuilt image, built from its Dockerfile FROM the ubuntu stand-in
    assert outputs["tbtest/prebuilt-image:20260101"].split() == ["registry", "0", "/app", "item,category,quantity"]


@pytest.mark.docker
@pytest.mark.slow
def test_pip_installs_from_the_index(hub: HubMirror, local_internet: LocalInternet,
                                     docker_client: Any) -> None:
    internet = local_internet
    ref = hub.mirror_ref("python:3.13-slim-bookworm")
    _pull(docker_client, ref)
    try:
        host = internet.url.removeprefix("http://")
        status, output = _run(docker_client, ref, f"pip install --index-url {internet.url}/simple --trusted-host {host}"
                              " tbcalc && python3 -c 'import tbcalc; print(tbcalc.banner(\"x\"), tbcalc.mean([1, 2]))'",
                              internet.network)
    finally:
        _untag(docker_client, ref)
    assert status == 0, output
    assert output.splitlines()[-1] == "HELLO, X 1.5"
    for path in ("/simple/tbcalc/", "/simple/tbhello/", "/packages/tbcalc-1.0.0-py3-none-any.whl",
                 "/packages/tbhello-1.0.0-py3-none-any.whl"):
        assert 200 in [r.status for r in internet.wait_for(path)], path


@pytest.mark.docker
@pytest.mark.slow
def test_a_build_on_its_network_downloads(hub: HubMirror, local_internet: LocalInternet,
                                          docker_client: Any, tmp_path: Path) -> None:
    """What ``--build-network`` gives a build: ``build-fetch-dataset``'s image downloads its dataset."""
    internet = local_internet
    task = TASKS / "build-fetch-dataset"
    base = hub.mirror_ref("ubuntu:24.04")
    tag = f"toolfleet/standins-build:{uuid.uuid4().hex[:8]}"
    dockerfile = task / "environment" / "Dockerfile"
    rewritten = tmp_path / "Dockerfile"  # outside the context: the SDK sends it along
    rewritten.write_text(rewrite_from(dockerfile.read_text(), {"ubuntu:24.04": base}))
    _pull(docker_client, base)
    try:
        for event in docker_client.api.build(path=str(task / "environment"), dockerfile=str(rewritten), tag=tag,
                                             rm=True, forcerm=True, pull=False, network_mode=internet.network,
                                             buildargs=internet.env(), decode=True):
            assert "error" not in event, event
        status, output = _run(docker_client, tag, "sha256sum /app/data/dataset.bin", "none")
    finally:
        _untag(docker_client, tag)
        _untag(docker_client, base)
    assert status == 0, output
    assert output.split()[0] == internet.manifest()["files"][SMALL_FILE]["sha256"]


@pytest.mark.docker
@pytest.mark.slow
def test_a_new_nonce_gives_new_image_ids(hub: HubMirror, docker_client: Any) -> None:
    """Seeding again makes images a build cache has never seen (a cold build without pruning the cache)."""
    again = HubMirror(hub.registry, docker_client, nonce=uuid.uuid4().hex[:8])
    ref = hub.mirror_ref("ubuntu:24.04")
    ids = []
    try:
        for mirror in (hub, again):
            if mirror is again:
                again.seed(names=("ubuntu:24.04",))
            _pull(docker_client, ref)
            ids.append(docker_client.api.inspect_image(ref)["Id"])
            _untag(docker_client, ref)
    finally:
        again.cleanup()
    assert ids[0] != ids[1]
