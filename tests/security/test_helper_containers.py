"""Every container toolfleet creates carries its labels and is reaped, its short-lived helpers included.

Before: the never-started helper containers a worker makes to read an image's files (a fork's seeds) and
to add a snapshot's second layer had no labels, so one left by a killed process stayed for ever, unseen by
the reaper. Now they carry the owner labels and an expiry (``_labels.helper_labels``). Real Docker.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import Any

import docker
import pytest

from orchestrator.dataset import Sample
from orchestrator.eval import Task, eval_async
from orchestrator.solver import solver
from orchestrator.util import fork, sandbox
from workers.sandbox.docker._labels import HELPER, OWNER_PID, helper_labels

pytestmark = [pytest.mark.docker, pytest.mark.timeout(300)]


@solver
def two_snapshots_and_a_fork(results: dict[str, Any]):  # type: ignore[no-untyped-def]
    async def solve(state, generate):  # type: ignore[no-untyped-def]
        box = sandbox()
        assert (await box.exec(["sh", "-c", "echo a > /tmp/a"])).success
        await box.snapshot()  # the first goes into the container's own layer
        assert (await box.exec(["sh", "-c", "echo b > /tmp/b"])).success
        snap = await box.snapshot()  # a later one adds its layer from a helper container
        async with fork(snap) as [copy]:  # the fork's seeds are read from its image by helper containers
            results["b"] = (await copy.exec(["cat", "/tmp/b"])).stdout
        return state

    return solve


async def test_helper_containers_carry_the_owner_labels_and_are_removed(tmp_path: Path, sandbox_image: str) -> None:
    client = docker.from_env()
    since = int(time.time()) - 1
    results: dict[str, Any] = {}
    task = Task(dataset=[Sample(id="s", input="go")], solver=two_snapshots_and_a_fork(results),
                sandbox={"type": "docker", "pool_size": 0})
    [log] = await eval_async(task, "scripted", log_dir=tmp_path)
    assert log.status == "success" and results["b"] == "b\n", [s.error for s in log.samples if s.error]
    mine = f"{OWNER_PID}={os.getpid()}"
    events = client.events(since=since, until=int(time.time()) + 1, decode=True,
                           filters={"type": "container", "event": "create", "label": [HELPER, mine]})
    purposes = Counter(event["Actor"]["Attributes"][HELPER] for event in events)
    assert purposes["snapshot-layer"] == 1 and purposes["image-contents"] >= 1, purposes
    assert client.api.containers(all=True, filters={"label": [HELPER, mine]}) == []  # each removed by its maker


async def test_a_helper_left_by_a_killed_process_is_reaped(sandbox_image: str) -> None:
    from workers.sandbox.docker._pool import HostSandboxes

    client = docker.from_env()
    dead = subprocess.Popen(["true"])
    dead.wait()
    left = client.api.create_container(sandbox_image, ["true"], labels={**helper_labels("image-contents"),
                                                                        OWNER_PID: str(dead.pid)})["Id"]
    try:
        assert await HostSandboxes().engines.acquire(None, 2).reap() >= 1
        assert left not in {c["Id"] for c in client.api.containers(all=True)}
    finally:
        with contextlib.suppress(docker.errors.NotFound):
            client.api.remove_container(left, force=True)
