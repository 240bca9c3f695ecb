"""The sandbox lifecycle seam: one ``SandboxDriver`` per backend, built from a sandbox config.

The configs (``orchestrator.util._sandbox_config``) are plain models of the shared layer; a driver
is built from one by ``build_driver`` (``_build.py``), which imports the backend lazily (the docker
SDK only when a docker sandbox is asked for). Drivers live in sibling modules named after the
backend: ``local.py`` and ``docker.py``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

from orchestrator.util._sandbox_config import (  # re-exported: the configs drivers are built from
    DEFAULT_IMAGE as DEFAULT_IMAGE,
    DEFAULT_OUTPUT_CAP as DEFAULT_OUTPUT_CAP,
    DockerSandboxConfig as DockerSandboxConfig,
    HealthCheck as HealthCheck,
    LocalSandboxConfig as LocalSandboxConfig,
    SandboxConfig as SandboxConfig,
    ServiceConfig as ServiceConfig,
)
from orchestrator.util._sandbox_parse import sandbox_config as sandbox_config  # re-exported

if TYPE_CHECKING:
    from workers.egress import EgressPolicy

    from ._environment import AgentSandboxEnvironment


class SandboxRequest(BaseModel):
    """What one sample asks of a driver's create() (its limits come from the driver's config). The wire's
    ``orchestrator._wire.SandboxSpec`` is the whole message a dispatcher sends; this is the part a driver sees."""

    model_config = ConfigDict(extra="forbid")

    eval_id: str = ""
    sample_id: str = ""
    env: dict[str, str] = Field(default_factory=dict)


class SandboxDriver(ABC):
    """Creates and destroys sandboxes for samples; owns whatever it created."""

    @abstractmethod
    async def create(self, spec: SandboxRequest | None = None) -> AgentSandboxEnvironment:
        """A ready sandbox for one sample (registered in the process-local registry)."""

    @abstractmethod
    async def destroy(self, env: AgentSandboxEnvironment) -> None:
        """Tear the sandbox down (idempotent) and release it from the registry."""

    @abstractmethod
    async def reap(self) -> int:
        """Remove expired or orphaned sandboxes; returns how many were removed."""

    async def set_network(self, env: AgentSandboxEnvironment, policy: EgressPolicy) -> None:
        """Change a live sandbox's network policy (docs/egress.md). A backend without one refuses."""
        from orchestrator.util._sandbox import SandboxUnavailableError

        raise SandboxUnavailableError(f"Sandbox '{env.sandbox_id}' ({type(self).__name__}) has no network policy "
                                      "to change: only docker sandboxes have one.")

    async def aclose(self) -> None:  # noqa: B027 - optional hook: does nothing unless overridden
        """Release everything the driver holds (pools, background tasks, clients)."""

    async def __aenter__(self) -> SandboxDriver:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
