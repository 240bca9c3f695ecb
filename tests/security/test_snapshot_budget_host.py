"""The snapshot disk budget is per host: two evals on one machine cannot together exceed it.

Before: each process counted only its own snapshots, so a second eval on the same Docker host started
from zero and the two filled twice the budget. Now a reservation is checked, under a host-wide lock,
against every snapshot on the daemon and every one being taken on the machine
(``workers/sandbox/docker/_snapshot_budget.py``). Real Docker, two ``toolfleet eval`` processes.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import docker
import pytest

from tests.support.fleet import REPO_ROOT, child_env

pytestmark = [pytest.mark.docker, pytest.mark.timeout(600)]

TASK = str(REPO_ROOT / "tests" / "snapshot" / "tasks" / "snapshot_blob.py") + "@snapshot_blob"
MIB = 1024 * 1024


def _eval(tmp_path: Path, name: str, keep: bool, budget: int | None = None) -> dict[str, object]:
    out = tmp_path / f"{name}.json"
    env = child_env(**({"TOOLFLEET_SNAPSHOT_DISK": str(budget)} if budget is not None else {}))
    done = subprocess.run([sys.executable, "-m", "orchestrator.cli", "eval", TASK, "--model", "scripted",
                           "-T", f"out={out}", "-T", "mib=8", "-T", f"keep={keep}", "--log-dir", str(tmp_path / name),
                           "--display", "none"], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, object] = json.loads(out.read_text())
    return result


def test_two_evals_on_one_host_share_its_snapshot_budget(tmp_path: Path, sandbox_image: str) -> None:
    first = _eval(tmp_path, "first", keep=True)  # a kept snapshot of ~8 MiB stays on the daemon
    assert "error" not in first, first
    images = docker.from_env().images
    try:
        size = int(str(first["size"]))
        assert size >= 8 * MIB
        # Room for the second eval's own ~8 MiB snapshot, but not beside the first's.
        budget = size + 4 * MIB
        second = _eval(tmp_path, "second", keep=False, budget=budget)
        assert "would exceed this host's snapshot disk budget" in str(second.get("error")), second
        images.remove(str(first["image"]), force=True)
        third = _eval(tmp_path, "third", keep=False, budget=budget)  # the same, once the first's is gone
        assert "error" not in third, third
    finally:
        if images.list(name=str(first["image"])):
            images.remove(str(first["image"]), force=True)
