"""Snapshot and fork with real Docker, embedded and through a real worker.

What they state: a snapshot taken mid-sample holds the sandbox's files — on its tmpfs-backed paths
(/tmp, /var/tmp, the working directory) and in its container layer — and ``fork(snapshot, 4)`` opens 4
independent sandboxes from it, on the host holding it; the sample's own sandbox moves on unaffected.
When the eval ends its snapshots (and the forks' containers) are gone, unless kept: a kept snapshot
restarts a later sample from that checkpoint (``Sample(sandbox=snapshot)``). A host's snapshot disk
budget refuses a snapshot that does not fit, in one sentence.
"""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path
from typing import Any

import docker
import pytest

from orchestrator.dataset import Sample
from orchestrator.eval import Task, eval_async
from orchestrator.solver import solver
from orchestrator.util import Snapshot, SnapshotError, fork, sandbox

pytestmark = [pytest.mark.docker, pytest.mark.timeout(600)]

CONFIG = {"type": "docker", "pool_size": 0}  # disk_limit defaults to 1g: tmpfs-backed paths on this daemon
PREPARE = ("mkdir -p /tmp/repo && echo prepared > /tmp/repo/state.txt && echo home > ~/notes.txt "
           "&& echo cache > /var/tmp/cache.txt && chmod 600 ~/notes.txt")
READ = "cat /tmp/repo/state.txt ~/notes.txt /var/tmp/cache.txt /opt/layer.txt; cat /tmp/rootonly || echo denied"
OWNERS = "stat -c '%U %a %n' /tmp/rootonly ~/notes.txt /tmp/repo /tmp /home/sandbox"


def _mounts_are_tmpfs() -> bool:
    info = docker.from_env().info()
    return info.get("Driver") not in ("btrfs", "zfs", "devicemapper")  # else the layer is capped instead


@solver
def branch_rollouts(results: dict[str, Any], n: int = 4):  # type: ignore[no-untyped-def]
    """Prepare a state, snapshot it mid-sample, branch n rollouts from it, let the original move on."""

    async def solve(state, generate):  # type: ignore[no-untyped-def]
        box = sandbox()
        prepared = await box.exec(["sh", "-c", PREPARE])
        assert prepared.success, prepared.stderr
        # /opt is not a tmpfs path (the container layer); /tmp/rootonly is one its user cannot read.
        layer = await box.exec(["sh", "-c", ("echo layer > /opt/layer.txt && echo secret > /tmp/rootonly "
                                 "&& chmod 600 /tmp/rootonly")], user="root")
        assert layer.success, layer.stderr
        mounts = await box.exec(["sh", "-c",
                                 "grep -E ' (/tmp|/var/tmp|/home/sandbox) ' /proc/mounts | cut -d' ' -f2,3"])
        snap = await box.snapshot()
        await box.exec(["sh", "-c", "echo moved-on > /tmp/repo/state.txt"])  # the original goes on
        async with fork(snap, n) as forks:
            seen = await asyncio.gather(*(f.exec(["sh", "-c", READ]) for f in forks))
            owners = await asyncio.gather(*(f.exec(["sh", "-c", OWNERS]) for f in forks))
            as_root = await forks[0].exec(["cat", "/tmp/rootonly"], user="root")
            await asyncio.gather(*(f.exec(["sh", "-c", f"echo branch{i} > /tmp/repo/state.txt && touch /tmp/mine{i}"])
                                   for i, f in enumerate(forks)))
            after = await asyncio.gather(*(f.exec(["sh", "-c", "cat /tmp/repo/state.txt; ls /tmp"]) for f in forks))
            hosts = [getattr(getattr(f, "route", None), "host", None) for f in forks]  # proxies: where they are
        original = await box.exec(["sh", "-c", "cat /tmp/repo/state.txt; ls /tmp"])
        results[str(state.sample_id)] = {"snapshot": snap, "mounts": mounts.stdout, "seen": [r.stdout for r in seen],
                                         "owners": [r.stdout for r in owners], "as_root": as_root.stdout,
                                         "original_owners": (await box.exec(["sh", "-c", OWNERS])).stdout,
                                         "after": [r.stdout for r in after], "original": original.stdout,
                                         "fork_hosts": hosts}
        return state

    return solve


def _snapshot_images(eval_id: str) -> list[Any]:
    return docker.from_env().images.list(filters={"label": f"toolfleet.snapshot.eval_id={eval_id}"})


def _containers(eval_id: str) -> list[Any]:
    return docker.from_env().containers.list(all=True, filters={"label": f"toolfleet.eval_id={eval_id}"})


@pytest.mark.parametrize("mode", ["embedded", pytest.param("worker", marks=pytest.mark.celery)])
async def test_a_mid_sample_snapshot_forks_into_four_independent_copies_and_is_gone_after_the_eval(
        mode: str, tmp_path: Path, sandbox_image: str, request: pytest.FixtureRequest) -> None:
    broker = None
    hosts: list[str | None] = [None]  # embedded: this process's Docker host
    if mode == "worker":
        fleet = request.getfixturevalue("fleet")
        # Two hosts: least-loaded placement would put forks on the idle one, were they not placed by snapshot.
        # The solver writes a root-only file as root: a worker runs commands as root only when allowed.
        hosts = [fleet.worker(slots=8, extra_args=("--allow-root-user",)).host,
                 fleet.worker(slots=8, extra_args=("--allow-root-user",)).host]
        broker = fleet.redis.url
    results: dict[str, Any] = {}
    task = Task(dataset=[Sample(id="prep", input="go")], solver=branch_rollouts(results), sandbox=CONFIG)
    [log] = await eval_async(task, "scripted", log_dir=tmp_path, broker=broker)
    assert log.status == "success", [s.error for s in log.samples]
    got = results["prep"]
    snap: Snapshot = got["snapshot"]
    if _mounts_are_tmpfs():
        assert {line.split()[0] for line in got["mounts"].splitlines()} == {"/tmp", "/var/tmp", "/home/sandbox"}
        assert all(line.split()[1] == "tmpfs" for line in got["mounts"].splitlines())
    assert snap.image == f"toolfleet/snapshot:{snap.id}" and snap.eval_id == log.eval.eval_id and snap.size > 0
    assert snap.host in hosts  # where the sample's sandbox (and so the snapshot) is
    assert got["fork_hosts"] == [snap.host] * 4  # every fork placed there
    # Every fork has the snapshot's files, tmpfs-backed paths and the container layer alike ...
    # (the root-only file is there, still root's and 0600: the sandbox's user cannot read it, root can) ...
    assert got["seen"] == ["prepared\nhome\ncache\nlayer\ndenied\n"] * 4
    assert got["owners"] == [got["original_owners"]] * 4, got["owners"]
    assert got["original_owners"].splitlines()[:2] == ["root 600 /tmp/rootonly", "sandbox 600 /home/sandbox/notes.txt"]
    assert got["as_root"] == "secret\n"
    # ... and is independent: its own writes only, none of its siblings' nor the original's later ones.
    for i, listing in enumerate(got["after"]):
        state, *files = listing.split()
        assert state == f"branch{i}"
        assert sorted(f for f in files if f.startswith("mine")) == [f"mine{i}"] and "rootonly" in files
    assert got["original"].split()[0] == "moved-on" and "mine0" not in got["original"]
    # The eval is over: its snapshot and every container (the sample's and the forks') are gone.
    assert _snapshot_images(log.eval.eval_id) == []
    assert _containers(log.eval.eval_id) == []


@solver
def checkpoint(results: dict[str, Any]):  # type: ignore[no-untyped-def]
    async def solve(state, generate):  # type: ignore[no-untyped-def]
        box = sandbox()
        assert (await box.exec(["sh", "-c", "echo step1 > /tmp/progress.txt && echo kept > ~/notes.txt"])).success
        results["kept"] = await box.snapshot(keep=True)
        results["dropped"] = await box.snapshot()  # a second snapshot of the same sandbox, not kept
        return state

    return solve


@solver
def resume(results: dict[str, Any]):  # type: ignore[no-untyped-def]
    async def solve(state, generate):  # type: ignore[no-untyped-def]
        done = await sandbox().exec(["sh", "-c", "cat /tmp/progress.txt ~/notes.txt; echo step2 >> /tmp/progress.txt"])
        results["resumed"] = done.stdout
        return state

    return solve


@pytest.mark.parametrize("mode", ["embedded", pytest.param("worker", marks=pytest.mark.celery)])
async def test_a_kept_snapshot_restarts_a_later_sample_from_its_checkpoint(
        mode: str, tmp_path: Path, sandbox_image: str, request: pytest.FixtureRequest) -> None:
    broker = None
    hosts: list[str] = []
    if mode == "worker":  # two hosts: the restarted sample must go to the one holding the snapshot
        fleet = request.getfixturevalue("fleet")
        hosts = [fleet.worker(slots=4).host, fleet.worker(slots=4).host]
        broker = fleet.redis.url
    results: dict[str, Any] = {}
    first = Task(dataset=[Sample(id="run1", input="go")], solver=checkpoint(results), sandbox=CONFIG, name="first")
    [log1] = await eval_async(first, "scripted", log_dir=tmp_path, broker=broker)
    assert log1.status == "success", [s.error for s in log1.samples]
    kept: Snapshot = results["kept"]
    try:
        remaining = [i.tags for i in _snapshot_images(log1.eval.eval_id)]
        assert remaining == [[kept.image]]  # the kept one outlived its eval; the other went with it
        second = Task(dataset=[Sample(id="run2", input="go", sandbox=kept)], solver=resume(results), name="second")
        [log2] = await eval_async(second, "scripted", log_dir=tmp_path, broker=broker)
        assert log2.status == "success", [s.error for s in log2.samples]
        assert results["resumed"] == "step1\nkept\n"
        opened = [e for e in log2.samples[0].events if e.event == "info" and getattr(e, "source", "") == "sandbox"]
        if mode == "embedded":  # this process's Docker host holds the snapshot (no worker), on this machine
            assert kept.host is None and [e.data["host"] for e in opened] == [socket.gethostname()]
        else:  # on the worker holding the snapshot, of the two
            assert kept.host in hosts and [e.data["host"] for e in opened] == [kept.host]
        assert [i.tags for i in _snapshot_images(log1.eval.eval_id)] == [[kept.image]]  # still kept
    finally:
        if mode == "embedded":  # this process holds it: remove it through its host's store
            from workers.sandbox.docker import DockerAPI, host_sandboxes

            api = DockerAPI(None, 2)
            await api.connect()
            assert await host_sandboxes().snapshots.remove(api, ids=[kept.id]) == [kept.id]
            api.close()
        else:  # a kept snapshot is the user's to remove: by label, as README says
            for image in _snapshot_images(log1.eval.eval_id):
                docker.from_env().images.remove(image.id, force=True)
    assert _snapshot_images(log1.eval.eval_id) == []


@solver
def over_budget(results: dict[str, Any]):  # type: ignore[no-untyped-def]
    async def solve(state, generate):  # type: ignore[no-untyped-def]
        assert (await sandbox().exec(["sh", "-c", "head -c 200000 /dev/urandom > /tmp/blob"])).success
        try:
            await sandbox().snapshot()
        except SnapshotError as exc:
            results["error"] = str(exc)
        return state

    return solve


async def test_the_hosts_snapshot_disk_budget_refuses_a_snapshot_that_does_not_fit(tmp_path: Path,
                                                                                     sandbox_image: str) -> None:
    from workers.sandbox.docker import host_sandboxes

    store = host_sandboxes().snapshots  # embedded mode's docker host (SandboxHost.process())
    budget, store.budget = store.budget, 100_000
    try:
        results: dict[str, Any] = {}
        task = Task(dataset=[Sample(id="big", input="go")], solver=over_budget(results), sandbox=CONFIG)
        [log] = await eval_async(task, "scripted", log_dir=tmp_path)
    finally:
        store.budget = budget
    assert log.status == "success"
    assert results["error"].startswith("The snapshot (")
    assert "would exceed this host's snapshot disk budget" in results["error"]
    assert _snapshot_images(log.eval.eval_id) == []


async def test_a_local_sandbox_cannot_be_snapshotted_in_one_sentence(tmp_path: Path) -> None:
    results: dict[str, Any] = {}

    @solver
    def try_it():  # type: ignore[no-untyped-def]
        async def solve(state, generate):  # type: ignore[no-untyped-def]
            try:
                await sandbox().snapshot()
            except SnapshotError as exc:
                results["error"] = str(exc)
            return state

        return solve

    [log] = await eval_async(Task(dataset=[Sample(input="go")], solver=try_it(), sandbox="local"), "scripted",
                             log_dir=tmp_path)
    assert log.status == "success"
    assert results["error"] == "This sandbox (LocalSandboxEnvironment) cannot be snapshotted: use a docker sandbox."


@solver
def snapshot_only(results: dict[str, Any]):  # type: ignore[no-untyped-def]
    async def solve(state, generate):  # type: ignore[no-untyped-def]
        assert (await sandbox().exec(["sh", "-c", "echo pushed > /tmp/p.txt"])).success
        results["snapshot"] = await sandbox().snapshot()
        return state

    return solve


@pytest.mark.celery
async def test_a_worker_with_a_registry_pushes_its_snapshots_there(tmp_path: Path, sandbox_image: str,
                                                                   request: pytest.FixtureRequest) -> None:
    import json
    import urllib.request

    from tests.support.registry import LocalRegistry

    registry = LocalRegistry().start()
    try:
        fleet = request.getfixturevalue("fleet")
        fleet.worker(slots=4, extra_args=("--registry", registry.host))
        results: dict[str, Any] = {}
        task = Task(dataset=[Sample(id="p", input="go")], solver=snapshot_only(results), sandbox=CONFIG)
        [log] = await eval_async(task, "scripted", log_dir=tmp_path, broker=fleet.redis.url)
        assert log.status == "success", [s.error for s in log.samples]
        snap: Snapshot = results["snapshot"]
        assert snap.registry_image == f"{registry.host}/toolfleet/snapshot:{snap.id}"
        with urllib.request.urlopen(f"http://{registry.host}/v2/toolfleet/snapshot/tags/list", timeout=10) as r:
            assert snap.id in json.load(r)["tags"]
        assert _snapshot_images(log.eval.eval_id) == []  # the host's copy went with the eval
    finally:
        registry.cleanup()
