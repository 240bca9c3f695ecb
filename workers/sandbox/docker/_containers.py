"""The containers one process's docker drivers hold: names, creation, removal, and the held set.

Small on purpose: the driver (default containers), the ``Pod`` (a sandbox's services) and the pool
all create and remove containers through one ``Containers``; its ``held`` set is the host's, so the
reaper never touches a container any driver of this process holds.
"""

from __future__ import annotations

import re
import uuid
from typing import Any, Protocol

import structlog
from docker.errors import DockerException, NotFound

from ._api import DockerAPI

__all__ = ["KEEPALIVE", "Container", "Containers", "container_name"]

log = structlog.get_logger("toolfleet.sandbox")

# The default container's command: alive until removed; tools exec into it.
KEEPALIVE = ["/bin/sh", "-c", "exec sleep infinity 2>/dev/null || while :; do sleep 3600; done"]


class Container(Protocol):
    """What a container's environment offers here: its id, and closing what talks to it."""

    container_id: str

    async def aclose(self) -> None: ...


def container_name(sample_id: str) -> str:
    """``toolfleet-<sample>-<8 hex>``: readable in ``docker ps``, unique per container."""
    safe = re.sub(r"[^a-zA-Z0-9_.-]", "-", sample_id)[:40].strip("-.") or "sample"
    return f"toolfleet-{safe}-{uuid.uuid4().hex[:8]}"


class Containers:
    """Create and remove containers through ``api``, recording each in ``held`` while it lives."""

    def __init__(self, api: DockerAPI, held: set[str]) -> None:
        self.api = api
        self.held = held

    async def create(self, name: str, **kwargs: Any) -> str:
        """The new container's id (held from now on); Docker's errors propagate for the caller to word."""
        created = await self.api.call(self.api.api.create_container, name=name, **kwargs)
        container_id = str(created["Id"])
        self.held.add(container_id)
        return container_id

    async def remove(self, env: Container) -> None:
        """Close what talks to the container, then remove it; an already removed one is not an error."""
        await env.aclose()
        try:
            await self.api.call(self.api.api.remove_container, env.container_id, force=True)
        except NotFound:
            pass
        except DockerException as exc:
            log.warning("sandbox.remove_failed", container=env.container_id[:12], error=str(exc))
        self.held.discard(env.container_id)
