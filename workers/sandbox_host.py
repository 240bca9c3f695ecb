"""The executing side's sandboxes, as one object: a ``SandboxHost`` opens, closes, looks up, executes
in, drains and closes all of a process's sandboxes.

It holds one driver per distinct sandbox config while sandboxes of that config are open (so a docker
pool is shared by every sample using the config), keeps a few idle ones (``DriverCache``: bounded, least
recently used first, closed after the host's idle time), and knows which driver owns each open sandbox;
sandboxes are found by handle in the process-local registry. The Docker Engine's client, threads, host
socket and reaper are one per Engine (``HostSandboxes.engines``), whatever the number of configs.

The in-process dispatcher (embedded mode) and a worker's runtime each own one; ``toolfleet worker``
builds its host's docker settings (slots, spares, identity, registries) and hands them over.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, cast

import structlog

from orchestrator._errors import SetupError
from orchestrator._wire import CallOutcome, CallRequest, SandboxSpec
from orchestrator.util._sandbox import SandboxEnvironment, SandboxUnavailableError
from orchestrator.util._sandbox_config import DockerSandboxConfig, LocalSandboxConfig
from orchestrator.util._sandbox_parse import sandbox_config
from orchestrator.util._sandbox_recorder import ExecList, RecordingSandbox

from . import executor
from .sandbox._build import build_driver
from .sandbox._driver import SandboxDriver, SandboxRequest
from .sandbox._driver_cache import MAX_IDLE_DRIVERS, DriverCache
from .sandbox._environment import AgentSandboxEnvironment
from .sandbox._registry import SandboxRegistry, default_registry
from .sandbox.docker import HostSandboxes, host_sandboxes

if TYPE_CHECKING:
    from .egress import EgressPolicy

__all__ = ["SETUP_TIMEOUT_S", "SandboxHost", "SandboxSetupError"]

log = structlog.get_logger("toolfleet.sandbox")

SETUP_TIMEOUT_S = 600.0


SandboxSetupError = SetupError  # its public name here: a sample's files or setup script could not be put in place


class SandboxHost:
    """A process's sandboxes: its drivers (one per distinct config in use, a few idle ones: ``drivers``),
    who owns each open sandbox, and the docker host settings every docker driver it builds shares
    (``docker``)."""

    _process: ClassVar[SandboxHost | None] = None
    _live: ClassVar[weakref.WeakSet[SandboxHost]] = weakref.WeakSet()  # this process's hosts (snapshot removal)

    def __init__(self, docker: HostSandboxes | None = None, registry: SandboxRegistry | None = None,
                 max_idle_drivers: int = MAX_IDLE_DRIVERS) -> None:
        self.docker = docker or host_sandboxes()
        self.registry = registry or default_registry()  # its sandboxes by handle
        self.drivers = DriverCache(self._build, max_idle_drivers, idle_ttl=lambda: self.docker.idle_ttl)
        self._owners: dict[str, SandboxDriver] = {}
        SandboxHost._live.add(self)

    @classmethod
    def process(cls) -> SandboxHost:
        """The host embedded mode shares across dispatchers of this process (as its drivers and pools are)."""
        if cls._process is None:
            cls._process = cls()
        return cls._process

    def _build(self, config: LocalSandboxConfig | DockerSandboxConfig) -> SandboxDriver:
        kwargs: dict[str, Any] = {"host": self.docker} if config.type == "docker" else {}
        return build_driver(config, registry=self.registry, **kwargs)

    async def open(self, spec: SandboxSpec, on_created: Callable[[SandboxEnvironment], None] | None = None
                   ) -> tuple[str, ExecList]:
        """Create the sample's sandbox, write its files, run its setup; its handle and those steps as
        recorded execs. On failure the execs so far ride on the raised exception as ``sandbox_execs``
        (a failing setup's output is what the transcript most needs). ``on_created(env)`` runs before
        anything else does (a worker installs its exec-user gates there)."""
        driver = await self.drivers.take(sandbox_config(spec.config))
        try:
            env = await driver.create(SandboxRequest(eval_id=spec.eval_id or "", sample_id=spec.sample_id or ""))
        except BaseException:
            await self.drivers.give_back(driver)
            raise
        handle: str = env.sandbox_id
        self._owners[handle] = driver
        if on_created is not None:
            on_created(env)
        execs = ExecList()
        box = RecordingSandbox(env, execs)
        try:
            for path, contents in spec.files.items():
                await box.write_file(path, contents)
            if spec.setup:
                result = await box.exec(["sh", "-c", spec.setup], timeout=SETUP_TIMEOUT_S)
                if not result.success:
                    raise SetupError(
                        f"Setup for sample {spec.sample_id!r} exited with {result.returncode}: "
                        f"{(result.stderr or result.stdout).strip()[-500:]}"
                    )
        except BaseException as exc:
            with contextlib.suppress(Exception):
                exc.sandbox_execs = execs  # type: ignore[attr-defined]  # carried on any exception
            await self.close(handle)
            raise
        log.debug("sandbox.opened", handle=handle, sample=spec.sample_id, driver=spec.config.get("type"))
        return handle, execs

    async def close(self, handle: str) -> None:
        """Destroy a sandbox by handle; a sandbox that is already gone is not an error."""
        driver = self._owners.pop(handle, None)
        try:
            env = self.registry.get(handle)
        except SandboxUnavailableError:
            return
        if driver is None:  # opened by a driver we do not track: just forget it
            self.registry.release(handle)
            return
        try:
            await driver.destroy(cast(AgentSandboxEnvironment, env))  # its driver made it: an agent sandbox
        finally:
            await self.drivers.give_back(driver)  # its last sandbox gone: the driver may be closed

    async def set_network(self, handle: str, policy: EgressPolicy) -> None:
        """Change the network policy of the sandbox ``handle`` (``SandboxUnavailableError`` if it is gone,
        or its backend or host cannot; the previous policy then stays)."""
        env = self.registry.get(handle)
        driver = self._owners.get(handle)
        if driver is None:
            raise SandboxUnavailableError(f"Sandbox '{handle}' is not one this host opened.")
        await driver.set_network(cast(AgentSandboxEnvironment, env), policy)  # its driver made it: an agent sandbox

    def lookup(self, handle: str) -> SandboxEnvironment:
        """The live sandbox for a handle in this process (``SandboxUnavailableError`` if gone)."""
        return self.registry.get(handle)

    def is_open(self, handle: str) -> bool:
        return handle in self.registry.live_ids()

    async def execute(self, request: CallRequest, tool: Callable[..., Any] | None = None) -> CallOutcome:
        """Run a call in the sandbox its request names by handle (an outcome, never an exception, when it is gone)."""
        return await executor.execute_request(request, tool=tool, lookup=self.lookup)

    async def drain(self) -> int:
        """Remove every idle warm spare of this loop's pools (an embedded eval's end); they refill when used."""
        return await self.docker.drain_spares()

    async def reap(self) -> int:
        """Remove containers a dead incarnation of this host left behind (worker start)."""
        try:
            driver = await self.drivers.take(DockerSandboxConfig())
        except Exception as exc:  # noqa: BLE001 - no Docker here: nothing of ours can be leaked there either
            log.info("sandbox.reap_skipped", reason=str(exc))
            return 0
        try:
            return await driver.reap()
        except Exception as exc:  # noqa: BLE001 - reaping is best effort; the next sweep tries again
            log.info("sandbox.reap_skipped", reason=str(exc))
            return 0
        finally:
            await self.drivers.give_back(driver)

    async def close_all(self) -> None:
        """Destroy every sandbox this host owns and release the drivers (shutdown)."""
        for handle in list(self._owners):
            try:
                await self.close(handle)
            except Exception as exc:  # noqa: BLE001 - keep closing the rest
                log.warning("sandbox.close_failed", handle=handle, error=str(exc))
        await self.drivers.close_all()

    @classmethod
    def live(cls) -> list[SandboxHost]:
        """Every host of this process (a snapshot's removal closes the drivers any of them opened forks with)."""
        return list(cls._live)

    async def drop_snapshot_drivers(self, snapshot_ids: set[str]) -> None:
        """Close the drivers that opened forks of these snapshots (they are being removed)."""
        def unaffected(driver: SandboxDriver) -> bool:
            snap = getattr(getattr(driver, "config", None), "snapshot", None)
            return snap is None or snap.id not in snapshot_ids

        await self.drivers.drop(unaffected)
