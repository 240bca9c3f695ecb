"""A task for the snapshot tests run as their own process (``toolfleet eval``): one sample writes ``mib``
MiB of random bytes to /tmp, snapshots its sandbox (kept or not) and writes what happened to ``out`` as
JSON: ``{"id", "image", "size"}`` or ``{"error"}``."""

from __future__ import annotations

import json
from pathlib import Path

from orchestrator.dataset import Sample
from orchestrator.eval import Task, task
from orchestrator.solver import solver
from orchestrator.util import SnapshotError, sandbox


@solver
def write_and_snapshot(out: str, mib: int, keep: bool):
    async def solve(state, generate):
        wrote = await sandbox().exec(["sh", "-c", f"head -c {mib * 1024 * 1024} /dev/urandom > /tmp/blob"])
        assert wrote.success, wrote.stderr
        try:
            snap = await sandbox().snapshot(keep=keep)
        except SnapshotError as exc:
            Path(out).write_text(json.dumps({"error": str(exc)}))
        else:
            Path(out).write_text(json.dumps({"id": snap.id, "image": snap.image, "size": snap.size}))
        return state

    return solve


@task
def snapshot_blob(out: str, mib: int = 8, keep: bool = False) -> Task:
    return Task(dataset=[Sample(id="blob", input="go")], solver=write_and_snapshot(out, mib, keep),
                sandbox={"type": "docker", "pool_size": 0})
