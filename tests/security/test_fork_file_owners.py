"""A fork keeps each file's owner and mode: a root-only file does not become the sandbox user's.

Before: a fork's tmpfs-backed paths were unpacked by the sandbox's user (the sandbox has no
capabilities), so every restored file became that user's own, and a root-only (0600) file written by a
root command was readable in every fork. Now the worker unpacks them as root with CAP_CHOWN and
CAP_FOWNER, which only a fork's root holds (``workers/sandbox/docker/_capabilities.py``). Real Docker.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from orchestrator.dataset import Sample
from orchestrator.eval import Task, eval_async
from orchestrator.solver import solver
from orchestrator.util import fork, sandbox

pytestmark = [pytest.mark.docker, pytest.mark.timeout(300)]

AS_ROOT = ("mkdir -m 700 /tmp/rootdir && echo hidden > /tmp/rootdir/f && echo secret > /tmp/rootonly "
           "&& chmod 600 /tmp/rootonly && echo shared > /tmp/readonly && chmod 644 /tmp/readonly")
AS_USER = "echo mine > /home/sandbox/mine && chmod 640 /home/sandbox/mine && mkdir -m 750 /tmp/userdir"
PROBE = ("cat /tmp/rootonly 2>&1; ls /tmp/rootdir 2>&1; { echo x >> /tmp/readonly; } 2>&1; "
         "stat -c '%U %a %n' /tmp/rootonly /tmp/rootdir /tmp/readonly /home/sandbox/mine /tmp/userdir")


@solver
def root_files_then_fork(results: dict[str, Any]):  # type: ignore[no-untyped-def]
    async def solve(state, generate):  # type: ignore[no-untyped-def]
        box = sandbox()
        made = await box.exec(["sh", "-c", AS_ROOT], user="root")
        assert made.success, made.stderr
        assert (await box.exec(["sh", "-c", AS_USER])).success
        results["original"] = (await box.exec(["sh", "-c", PROBE])).stdout
        async with fork(await box.snapshot()) as [copy]:
            results["fork"] = (await copy.exec(["sh", "-c", PROBE])).stdout
        return state

    return solve


async def test_root_only_files_stay_root_only_in_a_fork(tmp_path: Path, sandbox_image: str) -> None:
    results: dict[str, Any] = {}
    task = Task(dataset=[Sample(id="s", input="go")], solver=root_files_then_fork(results),
                sandbox={"type": "docker", "pool_size": 0})
    [log] = await eval_async(task, "scripted", log_dir=tmp_path)
    assert log.status == "success", [s.error for s in log.samples if s.error]
    lines = results["fork"].splitlines()
    assert "Permission denied" in lines[0] and "Permission denied" in lines[1] and "Permission denied" in lines[2]
    assert lines[3:] == ["root 600 /tmp/rootonly", "root 700 /tmp/rootdir",
                         "root 644 /tmp/readonly", "sandbox 640 /home/sandbox/mine", "sandbox 750 /tmp/userdir"], lines
    assert results["fork"] == results["original"]  # the fork is what the sandbox was, owners and modes included
