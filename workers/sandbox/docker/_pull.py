"""A sandbox's image on this Docker host, by its pull policy (``DockerSandboxConfig.pull_policy``).

- Only an image whose name starts with a registry host is ever pulled (``127.0.0.1:5000/team/img:1``: the
  first path component has a '.' or ':' or is ``localhost``). A bare name (``toolfleet/sandbox:latest``,
  ``img:1``) is built or loaded on the host and never pulled: no implicit default registry.
- A worker pulls only from the registries it was started with (``--registry HOST[:PORT]``, set here by
  ``HostSandboxes.registries``, handed to each driver's ``ImagePuller``); an image naming another registry is treated as
  ``never`` there. Embedded mode (no worker: the user's own machine) pulls from whatever registry the image names.
- ``never``: a missing image is an error. ``missing``: pulled when absent (at the driver's start).
  ``always``: pulled before each sandbox is created (the driver's start counts for its first sandbox;
  sandboxes created while a pull is in flight share it). When a pull brings a new image id, the driver's
  warm spares (of the old image) are removed before a sandbox is handed out, so the pool never serves a
  stale image; new containers are created by tag, so they get the new one. The image's USER and WORKDIR
  are read once, at the driver's start.
- Pulls go through the Engine API (the SDK's low-level ``pull``, streamed), with the daemon's credentials
  for the registry (``docker login``), and are waited for at most ``PULL_TIMEOUT_S``. A failure is one
  ``SandboxImageError`` sentence: registry unreachable, image not found, pull not allowed, or too slow.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import structlog
from docker.errors import DockerException, ImageNotFound

from orchestrator._errors import ToolfleetError
from orchestrator.util._image_names import image_registry, pulls_from

from .._errors import SandboxImageError, missing_image_message

if TYPE_CHECKING:
    from ._api import DockerAPI
    from ._pool import ContainerPool

log = structlog.get_logger("toolfleet.sandbox")

PULL_TIMEOUT_S = 600.0

def pull_refusal(image: str, registries: Sequence[str] | None) -> str | None:
    """Why a process pulling from ``registries`` may not pull ``image`` (None: it may)."""
    registry = image_registry(image)
    if registry is None:
        return missing_image_message(image)
    if not pulls_from(None if registries is None else list(registries), image):
        return (f"Sandbox image '{image}' is not on this Docker host and its registry '{registry}' is not one this "
                f"worker pulls from (start the worker with --registry {registry}, or put the image there).")
    return None


def pull_failure(image: str, detail: str) -> str:
    """One sentence for a failed pull, from the Engine's error text."""
    registry = image_registry(image) or "?"
    low = detail.lower()
    reason = " ".join(detail.split())[:200]
    if any(s in low for s in ("connection refused", "no such host", "i/o timeout", "dial tcp", "network is unreachable",
                              "connection reset", "http response to https client", "tls:", "eof")):
        return f"Registry '{registry}' is unreachable, so sandbox image '{image}' cannot be pulled ({reason})."
    if "repository does not exist" in low:  # Docker's words for an unknown repository *or* one needing a login
        return (f"Sandbox image '{image}' was not found in registry '{registry}' (check its name and tag; if the "
                f"registry needs a login: `docker login {registry}` on this host).")
    if any(s in low for s in ("unauthorized", "denied", "authentication required", "forbidden", "401", "403")):
        return (f"Registry '{registry}' does not allow pulling sandbox image '{image}' (not logged in or no access: "
                f"`docker login {registry}` on this host).")
    if any(s in low for s in ("manifest unknown", "not found", "does not exist", "name unknown", "404")):
        return f"Sandbox image '{image}' was not found in registry '{registry}' (check its name and tag)."
    return f"Pulling sandbox image '{image}' from registry '{registry}' failed: {reason}."


async def pull(api: DockerAPI, image: str, timeout: float = PULL_TIMEOUT_S) -> None:
    """Pull ``image`` through the Engine (bounded by ``timeout``); ``SandboxImageError`` on failure."""

    def run(client: Any) -> None:
        for event in client.pull(image, stream=True, decode=True):
            if isinstance(event, dict) and event.get("error"):
                raise _PullFailed(str((event.get("errorDetail") or {}).get("message") or event["error"]))

    log.info("sandbox.image_pull", image=image)
    try:
        await asyncio.wait_for(api.call(run, api.api), timeout)
    except TimeoutError:
        raise SandboxImageError(f"Pulling sandbox image '{image}' from registry '{image_registry(image)}' took "
                                f"longer than {timeout:g} s (the Docker daemon may still finish it).") from None
    except _PullFailed as exc:
        raise SandboxImageError(pull_failure(image, str(exc))) from exc
    except DockerException as exc:
        detail = getattr(exc, "explanation", None) or str(exc)
        raise SandboxImageError(pull_failure(image, str(detail))) from exc


class _PullFailed(ToolfleetError):
    """An error reported inside the pull's progress stream."""


class ImagePuller:
    """One driver's images on its Docker host, by the config's pull policy; ``registries`` are the ones
    this process pulls from (None: any, as embedded mode). It remembers the image id the driver's
    warm spares run, so a pull that brings a new one drops them first."""

    def __init__(self, api: DockerAPI, registries: Sequence[str] | None) -> None:
        self.api = api
        self.registries = None if registries is None else tuple(registries)
        self.image_id: str | None = None
        self.fresh = False  # pulled by at_start() and not yet used by a sandbox
        self._inflight: asyncio.Task[None] | None = None
        self._loop: Any = None

    def pullable(self, image: str, policy: str) -> bool:
        return policy != "never" and pull_refusal(image, self.registries) is None

    async def _inspect(self, image: str) -> dict[str, Any]:
        return await self.api.call(self.api.api.inspect_image, image)

    async def at_start(self, image: str, policy: str) -> dict[str, Any]:
        """The image's inspect record once it is present per the pull policy (``DockerSandboxDriver.start``)."""
        if policy == "always" and self.pullable(image, policy):
            await pull(self.api, image)
            self.fresh = True
            info = await self._inspect(image)
        else:
            info = await self.present(image, policy)
        self.image_id = info.get("Id")
        return info

    async def present(self, image: str, policy: str) -> dict[str, Any]:
        """The image's inspect record, pulled first if it is missing and the policy and registries allow."""
        try:
            return await self._inspect(image)
        except ImageNotFound as exc:
            refusal = pull_refusal(image, self.registries)  # a bare name, or not a registry this worker pulls from
            if refusal is not None:
                raise SandboxImageError(refusal) from exc
            if policy == "never":
                raise SandboxImageError(f"Sandbox image '{image}' is not on this Docker host and its pull_policy is "
                                        f"'never': pull or build it there, or use pull_policy 'missing'.") from exc
            await pull(self.api, image)
            return await self._inspect(image)

    async def service_image(self, image: str, policy: str) -> None:
        """A multi-service sandbox's service image, present by the sandbox's pull policy (``always``: pulled
        before each sandbox, as the default container's is)."""
        if policy == "always" and pull_refusal(image, self.registries) is None:
            await pull(self.api, image)
            return
        await self.present(image, policy)

    async def before_create(self, image: str, policy: str, pool: ContainerPool) -> None:
        """``always``: pull before this sandbox (the start's pull counts once); a new image id drops the
        pool's warm spares of the old one before it hands any out (``DockerSandboxDriver.create``)."""
        if policy != "always" or not self.pullable(image, policy):
            return
        if self.fresh:
            self.fresh = False
            return
        loop = asyncio.get_running_loop()
        if self._inflight is None or self._inflight.done() or self._loop is not loop:
            self._loop = loop
            self._inflight = loop.create_task(self._refresh(image, pool))
        await asyncio.shield(self._inflight)

    async def _refresh(self, image: str, pool: ContainerPool) -> None:
        await pull(self.api, image)
        try:
            info = await self._inspect(image)
        except DockerException as exc:
            raise SandboxImageError(f"Sandbox image '{image}' vanished right after its pull: {exc}") from exc
        if info.get("Id") != self.image_id:
            dropped = await pool.drain()
            log.info("sandbox.image_updated", image=image, image_id=str(info.get("Id"))[:19], spares_dropped=dropped)
            self.image_id = info.get("Id")


__all__ = ["PULL_TIMEOUT_S", "ImagePuller", "pull", "pull_failure", "pull_refusal"]
