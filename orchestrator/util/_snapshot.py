"""A sandbox snapshot as data: what ``await sandbox().snapshot()`` returns and ``fork`` opens sandboxes from.

The image lives on the Docker host that held the sandbox (``workers.sandbox.docker._snapshot``); this record
is what travels: where it is (``host``/``queue``, for placement), how big, and the sandbox config a fork
starts with. It is also a sandbox spec: ``Sample(sandbox=snapshot)`` starts the sample from it (a checkpoint).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from orchestrator._errors import ToolfleetError


class SnapshotError(ToolfleetError, RuntimeError):
    """A snapshot could not be taken or used; the sentence says why."""


class Snapshot(BaseModel):
    """A sandbox's filesystem, captured as an image on the host that held it."""

    id: str
    image: str = Field(description="the image on its host (toolfleet/snapshot:<id>)")
    registry_image: str | None = Field(None, description="where it was pushed (the worker's --registry), if anywhere")
    eval_id: str = ""
    sample_id: str = ""
    keep: bool = Field(False, description="outlives its eval (otherwise removed when the eval ends)")
    size: int = Field(0, description="bytes counted against its host's snapshot disk budget")
    seconds: float = Field(0.0, description="how long taking it took")
    created: float = 0.0
    host: str | None = Field(None, description="the worker host holding it (None: this process's Docker host)")
    queue: str | None = Field(None, description="that host's queue")
    config: dict[str, Any] = Field(default_factory=dict, description="the sandbox config forks start with")

    def sandbox_config(self, forks: int = 1) -> dict[str, Any]:
        """The sandbox spec of a sandbox opened from this snapshot (placed on its host), one of ``forks``
        opened together."""
        config = dict(self.config)
        config["snapshot"] = {"id": self.id, "host": self.host, "forks": forks}
        return config

