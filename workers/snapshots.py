"""Internal tools for snapshots, reached through the dispatcher like the scorers'.

``_sandbox_snapshot`` (in ``orchestrator/tool/_tools/_sandbox_access.py``, the shared layer) snapshots the
sample's sandbox where it lives (this process in embedded mode, its worker host in distributed mode);
``_snapshot_remove`` removes an eval's snapshots from this host when the
eval ends (a call with no sandbox, sent to each host's queue). Never offered to the model (names start
with ``_``).
"""

from __future__ import annotations

import json

from orchestrator.tool import Tool, tool
from orchestrator.tool._tools._sandbox_access import SANDBOX_SNAPSHOT_TOOL, sandbox_snapshot  # noqa: F401 - re-exported

SNAPSHOT_REMOVE_TOOL = "_snapshot_remove"


@tool(name=SNAPSHOT_REMOVE_TOOL)
def snapshot_remove() -> Tool:
    async def execute(eval_id: str) -> str:
        """Remove an eval's snapshots (those not kept) from this host.

        Args:
            eval_id: The eval whose snapshots go.

        Returns:
            The removed snapshots' ids, as JSON.
        """
        return json.dumps(await remove_eval_snapshots(eval_id))

    return execute


async def remove_eval_snapshots(eval_id: str) -> list[str]:
    """Remove ``eval_id``'s snapshots from this host, and the drivers forks of them used."""
    import structlog
    from docker.errors import DockerException

    from .sandbox.docker import DockerAPI
    from .sandbox_host import SandboxHost

    log = structlog.get_logger("toolfleet.worker")

    dockers = {id(h.docker): h.docker for h in SandboxHost.live()}  # hosts may share one
    if not eval_id or not dockers:
        return []
    removed: list[str] = []
    for docker in dockers.values():
        store = docker.snapshots
        doomed = {s.id for s in store.held.values() if s.eval_id == eval_id and not s.keep}
        for host in SandboxHost.live():
            await host.drop_snapshot_drivers(doomed)
        api = DockerAPI(None, 2)
        try:
            # Even when no docker sandbox ran in this process: a dead predecessor under this worker's
            # name may have taken some. No Docker here: nothing to remove.
            await api.connect()
            removed += await store.remove(api, eval_id=eval_id)
        except DockerException as exc:
            log.info("worker.snapshot_remove_skipped", eval_id=eval_id, reason=str(exc)[:200])
        finally:
            api.close()
    return removed
