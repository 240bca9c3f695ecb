"""An eval's snapshots go when it ends even if the worker process that took them died meanwhile.

A worker SIGKILLed mid-eval leaves its snapshot images behind; its successor under the same name (or
any worker on that Docker host) is asked to remove the eval's snapshots at the eval's end, and must
find them in the Engine rather than only among those its own process took or loaded. Here a snapshot
image of that kind (as ``docker commit`` made it, with the snapshot labels) appears after the host's
store was loaded, and the host's removal takes it; another eval's snapshot stays.
"""

from __future__ import annotations

import time
import uuid

import docker
import pytest

from workers.sandbox.docker._snapshot import (
    LABEL,
    LABEL_CREATED,
    LABEL_EVAL,
    LABEL_KEEP,
    SNAPSHOT_REPO,
)
from workers.sandbox_host import SandboxHost
from workers.snapshots import remove_eval_snapshots

pytestmark = [pytest.mark.docker, pytest.mark.timeout(300)]


def _dead_process_snapshot(client: docker.DockerClient, eval_id: str) -> str:
    """A snapshot image as a worker process makes one (its labels), taken by a process that is gone."""
    container = client.api.create_container("toolfleet/debian-base:bookworm", command=["true"])
    snapshot_id = f"s{uuid.uuid4().hex[:16]}"
    labels = {LABEL: "1", LABEL_EVAL: eval_id, LABEL_KEEP: "0", LABEL_CREATED: f"{time.time():.3f}"}
    try:
        client.api.commit(container["Id"], repository=SNAPSHOT_REPO, tag=snapshot_id,
                          changes=[f'LABEL {k}="{v}"' for k, v in labels.items()])
    finally:
        client.api.remove_container(container["Id"], force=True)
    return snapshot_id


def _exists(client: docker.DockerClient, snapshot_id: str) -> bool:
    return bool(client.images.list(name=f"{SNAPSHOT_REPO}:{snapshot_id}"))


async def test_an_evals_snapshots_taken_by_a_dead_worker_process_are_removed_at_its_end(sandbox_image) -> None:
    client = docker.from_env(timeout=60)
    eval_id, other = f"e-gone-{uuid.uuid4().hex[:8]}", f"e-other-{uuid.uuid4().hex[:8]}"
    made: list[str] = []
    host = SandboxHost()  # this worker process's sandboxes: it never ran a docker sandbox
    try:
        assert await remove_eval_snapshots(eval_id) == []  # the store is loaded now, with nothing of the eval
        made += [_dead_process_snapshot(client, eval_id), _dead_process_snapshot(client, eval_id),
                 _dead_process_snapshot(client, other)]
        removed = await remove_eval_snapshots(eval_id)
        assert sorted(removed) == sorted(made[:2])
        assert [_exists(client, s) for s in made] == [False, False, True]
    finally:
        for snapshot_id in made:
            if _exists(client, snapshot_id):
                client.images.remove(f"{SNAPSHOT_REPO}:{snapshot_id}", force=True)
        await host.close_all()
        client.close()
