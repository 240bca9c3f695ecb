"""A docker sandbox as the tools see it: one container reached through its exec agent, and a
multi-service sandbox's other containers (``DockerServiceEnvironment``, reached with ``docker exec``).

Everything an environment knows of its container lives in its driver (the Engine client, the config,
the disk plan, the host's snapshot store); what a snapshot of it needs is offered here as a small API
(``api``, ``image``, ``tmpfs_paths``, ``run_config()``, ``snapshots``, ``registries``,
``claim_snapshot_layer()``), so ``_snapshot`` reads nothing else of the environment or its driver.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from docker.errors import APIError, DockerException, NotFound

from orchestrator.util._sandbox import SandboxUnavailableError
from workers.egress import SandboxNetwork

from .._channel import AgentChannel, ChannelClosed, RawResult
from .._environment import AgentSandboxEnvironment
from .._errors import SandboxOutOfMemoryError
from ._api import DockerAPI
from ._exec import open_agent, universal_exec
from ._pod import Pod
from ._snapshot import HostSnapshots, take_snapshot

if TYPE_CHECKING:
    from ._driver import DockerSandboxDriver

__all__ = ["DockerSandboxEnvironment", "DockerServiceEnvironment"]


class DockerSandboxEnvironment(AgentSandboxEnvironment):
    def __init__(self, driver: DockerSandboxDriver, container_id: str, sandbox_id: str) -> None:
        super().__init__(sandbox_id, driver.config.output_cap)
        self.warm_spares = driver.config.warm_spares
        self.driver = driver
        self.container_id = container_id
        self._has_timeout: bool | None = None
        self.pod: Pod | None = None  # a multi-service sandbox's other containers
        self.network: SandboxNetwork | None = None  # its own network (driver-managed), None without one
        self.services: dict[str, DockerSandboxEnvironment] = {}  # the pod's containers by service name
        self.eval_id = self.sample_id = ""  # whose sandbox it is (labels snapshots)
        self._snapshot_layer_used = False  # a snapshot wrote under its tmpfs mounts (_snapshot)

    async def snapshot(self, keep: bool = False) -> Any:
        return await take_snapshot(self, keep)

    # --- what a snapshot of it needs (``_snapshot.SnapshotSource``) -----------------------------

    @property
    def api(self) -> DockerAPI:
        """The Engine its container runs on."""
        return self.driver.api

    @property
    def image(self) -> str:
        """The image it was created from (a snapshot counts only what it adds to it)."""
        return self.driver.config.image

    @property
    def tmpfs_paths(self) -> list[str]:
        """Its writable paths that are capped tmpfs mounts (a commit does not see their contents)."""
        disk = self.driver.disk
        return list(disk.tmpfs) if disk.mechanism == "tmpfs" else []

    def run_config(self) -> dict[str, Any]:
        """Its config as JSON, with the user its commands run as resolved (the image's, unless configured)."""
        config = self.driver.config.model_dump(mode="json")
        config.update(user=self.driver.exec_user or None)
        return config

    @property
    def snapshots(self) -> HostSnapshots:
        """This host's snapshots and the disk budget they share."""
        return self.driver.host.snapshots

    @property
    def registries(self) -> tuple[str, ...] | None:
        """The registries this host pulls from (a snapshot is pushed to the first)."""
        return self.driver.host.registries

    def claim_snapshot_layer(self) -> bool:
        """True the first time: that snapshot may write the tmpfs contents into the container's own layer
        (under the mounts, unseen by the sandbox); a later one must add them in a layer of its own."""
        first, self._snapshot_layer_used = not self._snapshot_layer_used, True
        return first

    async def _open_channel(self, user: str | None) -> AgentChannel:
        if not self.driver.config.fast_path:
            raise ChannelClosed("fast path disabled by configuration")
        return await open_agent(self.driver.api, self.container_id, user or self.default_user,
                                listener=self.driver.listener)

    async def _universal_exec(
        self, argv: list[str], input: bytes | None, cwd: str | None, env: dict[str, str] | None,
        user: str | None, timeout: float | None, cap: int,
    ) -> RawResult:
        api = self.driver.api
        try:
            if self._has_timeout is None:
                probe = await universal_exec(api, self.container_id, ["/bin/sh", "-c", "command -v timeout"],
                                             None, None, None, None, None, 4096, False)
                self._has_timeout = probe.returncode == 0
            user = user or self.default_user
            return await universal_exec(api, self.container_id, argv, input, cwd, env, user, timeout,
                                        cap, self._has_timeout)
        except (APIError, DockerException, ConnectionError, OSError) as exc:
            failure = await self._sandbox_failure(exc)
            raise (failure or SandboxUnavailableError(f"Sandbox '{self.sandbox_id}': exec failed ({exc}).")) from exc

    def named_sandboxes(self) -> dict[str, AgentSandboxEnvironment]:
        """A multi-service sandbox's containers by name (the default one too); {} for one container."""
        if not self.services:
            return {}
        return {self.driver.config.default_service: self, **self.services}

    @property
    def default_user(self) -> str:
        """Who commands run as when a call names no user ('' : the container's own user)."""
        return self.driver.exec_user

    @property
    def memory_limit(self) -> str:
        return self.driver.config.mem_limit

    async def _sandbox_failure(self, exc: BaseException) -> BaseException | None:
        """None while the container runs (a lost agent is restarted); else why the sandbox is gone."""
        limit = self.driver.config.mem_limit
        try:
            state = (await self.driver.api.call(self.driver.api.api.inspect_container, self.container_id))["State"]
        except NotFound:
            return SandboxUnavailableError(f"Sandbox '{self.sandbox_id}' is gone: its container was removed.")
        except DockerException as inspect_exc:
            return SandboxUnavailableError(f"Sandbox '{self.sandbox_id}' is unreachable: {inspect_exc}")
        if state.get("Running") and not state.get("Paused") and not state.get("Restarting"):
            return None
        if state.get("OOMKilled"):
            return SandboxOutOfMemoryError(
                f"The sandbox ran out of memory (limit {limit}) and its container was stopped (OOMKilled)."
            )
        return SandboxUnavailableError(
            f"Sandbox '{self.sandbox_id}' stopped (container exit code {state.get('ExitCode')})."
        )


class DockerServiceEnvironment(DockerSandboxEnvironment):
    """A service of a multi-service sandbox, reached with ``docker exec`` (its image needs no python3)."""

    def __init__(self, driver: DockerSandboxDriver, container_id: str, sandbox_id: str, service: str,
                 user: str) -> None:
        super().__init__(driver, container_id, sandbox_id)
        self.service = service
        self.service_user = user  # '': the service image's USER, as its command runs
        self.fast_path = False

    @property
    def default_user(self) -> str:
        return self.service_user

    @property
    def memory_limit(self) -> str:
        return self.driver.config.services[self.service].mem_limit

    async def _open_channel(self, user: str | None) -> AgentChannel:
        raise ChannelClosed("services are reached with docker exec")
