"""Multi-service sandboxes: the sample's other containers, as compose runs them.

Each service has its own network namespace on the sandbox's own Docker network (made by the host's
egress enforcer with the default container, ``_driver``), and reaches the others by service name
through Docker's embedded DNS, as under compose: a service listening on 127.0.0.1 is reachable only
from itself. What leaves that network is judged by the sandbox's one policy (``network_mode``,
docs/egress.md).

On a host that cannot enforce a policy (no nftables or no CAP_NET_ADMIN: the enforcer offers only
``none``), a ``none`` sandbox's services fall back to joining the default container's namespace
(``network_mode: container:<default>``): loopback only, every service name in ``/etc/hosts`` as
127.0.0.1, no route out; so there a service on 127.0.0.1 is reachable by the others.

Services start together, each counted against the host's capacity (all of a sandbox's slots are taken
at once, with the default container's), then each waits to be healthy:
its ``healthcheck`` (Docker's own, polled through ``inspect``) or, without one, still running half
a second after start. All are
removed together (services first, the default container last: it owns the namespace). A service
that fails to start or become healthy fails the sandbox with one sentence naming it and quoting its
last check or log lines.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import structlog
from docker.errors import APIError, DockerException, ImageNotFound, NotFound

from orchestrator.util._sandbox import SandboxUnavailableError
from orchestrator.util._sandbox_config import DockerSandboxConfig, HealthCheck, ServiceConfig
from workers.egress import SandboxNetwork

from .._errors import SandboxImageError, missing_image_message
from ._capabilities import dropped_capabilities
from ._containers import Container, Containers, container_name
from ._disk import DEFAULT_WRITABLE, DiskPlan
from ._labels import container_labels
from ._pool import HostSandboxes
from ._pull import ImagePuller

# Builds the environment of a started service container: (container id, name, service, user).
ServiceEnvFactory = Callable[[str, str, str, str], Container]

log = structlog.get_logger("toolfleet.sandbox")

SERVICE_LABEL = "toolfleet.service"
_POLL_S = 0.2
SETTLE_S = 0.5  # a service without a healthcheck must keep running this long after start
_NANOS = 1_000_000_000


def pod_hosts(default_service: str, services: dict[str, ServiceConfig]) -> dict[str, str]:
    """``/etc/hosts`` entries of a pod sharing one namespace (the fallback): every service name is it."""
    return dict.fromkeys((default_service, *services), "127.0.0.1")


def healthcheck_dict(check: HealthCheck) -> dict[str, Any]:
    """Docker's healthcheck form (durations in nanoseconds; a string test runs under the shell)."""
    test = ["CMD-SHELL", check.test] if isinstance(check.test, str) else ["CMD", *check.test]
    return {"test": test, "interval": int(check.interval * _NANOS), "timeout": int(check.timeout * _NANOS),
            "retries": check.retries, "start_period": int(check.start_period * _NANOS)}


class Pod:
    """A multi-service sandbox's other containers: created beside ``main`` on the sandbox's network
    (or in ``main``'s namespace without one), health-checked together, each holding one host slot
    (taken with the default container's, all at once: ``config.containers``), removed together before
    the default container and its network."""

    def __init__(self, config: DockerSandboxConfig, containers: Containers, puller: ImagePuller,
                 host: HostSandboxes, disk: DiskPlan, make_env: ServiceEnvFactory) -> None:
        self.config = config
        self.containers = containers
        self.puller = puller
        self.host = host
        self.disk = disk
        self.make_env = make_env
        self.services: dict[str, Container] = {}

    async def start(self, main: Container, eval_id: str, sample_id: str, owner: str,
                    network: SandboxNetwork | None = None) -> dict[str, Container]:
        """Create, start and health-check every service beside ``main`` (on ``network``, else in
        ``main``'s namespace). Their host slots were taken with the default container's; on failure
        each is given back."""
        try:
            for name, service in self.config.services.items():
                self.services[name] = await self._create(main, name, service, eval_id, sample_id, owner, network)
            await asyncio.gather(*(self._wait_healthy(name, env, self.config.services[name])
                                   for name, env in self.services.items()))
        except BaseException:
            self.host.release(len(self.config.services) - len(self.services))  # the ones never created
            await self.stop()
            raise
        return self.services

    async def stop(self) -> None:
        """Remove the services (each gives its slot back); a removed one is not an error."""
        for env in list(self.services.values()):
            try:
                await self.containers.remove(env)
            finally:
                self.host.release()
        self.services.clear()

    async def _create(self, main: Container, name: str, service: ServiceConfig, eval_id: str,
                      sample_id: str, owner: str, network: SandboxNetwork | None) -> Container:
        c = self.config
        api = self.containers.api
        name_of_container = container_name(f"{sample_id or 'sample'}-{name}")
        try:
            await self.puller.service_image(service.image, c.pull_policy)
        except SandboxImageError as exc:
            raise SandboxImageError(f"Service '{name}': {exc}") from None
        user = service.user if service.user is not None else await self._image_user(name, service.image)
        joined = {"network_mode": f"container:{main.container_id}"}
        host_config = api.api.create_host_config(
            **(network.host_config() if network is not None else joined),
            cap_drop=dropped_capabilities(c.cap_drop, user) or None, cap_add=c.cap_add or None,
            security_opt=c.security_opt or None,
            pids_limit=service.pids_limit, mem_limit=service.mem_limit, memswap_limit=service.mem_limit,
            nano_cpus=int(service.cpus * 1e9), init=c.init, read_only=c.read_only, runtime=c.runtime,
            # The sandbox's writable-space cap: the layer's size where the storage driver enforces it, else
            # capped tmpfs on the usual scratch paths (a service running as root can still write its layer).
            storage_opt=self.disk.storage_opt,
            tmpfs={path: opts for path, opts in self.disk.tmpfs.items() if path in DEFAULT_WRITABLE} or None,
        )
        labels = {**container_labels(eval_id, sample_id, c.ttl, owner=owner), SERVICE_LABEL: name}
        kwargs: dict[str, Any] = {
            "image": service.image, "command": service.command, "user": service.user or None,
            "working_dir": service.working_dir, "environment": service.environment or None, "labels": labels,
            "host_config": host_config, "detach": True,
            "healthcheck": healthcheck_dict(service.healthcheck) if service.healthcheck else None,
        }
        if service.entrypoint is not None:
            kwargs["entrypoint"] = service.entrypoint
        if network is not None:  # its own namespace, reached by its name (compose's service name)
            kwargs.update(hostname=name, networking_config=network.networking_config(name))
        try:
            container_id = await self.containers.create(name_of_container, **kwargs)
        except ImageNotFound as exc:
            raise SandboxImageError(f"Service '{name}': " + missing_image_message(service.image)) from exc
        except APIError as exc:
            if exc.status_code == 404 and "image" in str(exc).lower():
                raise SandboxImageError(f"Service '{name}': " + missing_image_message(service.image)) from exc
            raise SandboxUnavailableError(f"Service '{name}' could not be created: {exc.explanation or exc}") from exc
        except DockerException as exc:
            raise SandboxUnavailableError(f"Service '{name}' could not be created: {exc}") from exc
        env = self.make_env(container_id, name_of_container, name, service.user or "")
        try:
            await api.call(api.api.start, container_id)
        except DockerException as exc:
            await self.containers.remove(env)
            raise SandboxUnavailableError(f"Service '{name}' could not start: {exc}") from exc
        return env

    async def _image_user(self, name: str, image: str) -> str:
        """The service image's ``USER`` ('' for root): who its command runs as."""
        api = self.containers.api
        try:
            info = await api.call(api.api.inspect_image, image)
        except ImageNotFound as exc:
            raise SandboxImageError(f"Service '{name}': " + missing_image_message(image)) from exc
        except DockerException as exc:
            raise SandboxUnavailableError(f"Service '{name}': its image could not be inspected: {exc}") from exc
        return str((info.get("Config") or {}).get("User") or "")

    async def _wait_healthy(self, name: str, env: Container, service: ServiceConfig) -> None:
        """Until the service is healthy (or running, without a healthcheck); bounded by its check's budget."""
        api = self.containers.api
        check = service.healthcheck
        deadline = time.monotonic() + (check.budget() if check else 30.0)
        running_since: float | None = None
        while True:
            try:
                state = (await api.call(api.api.inspect_container, env.container_id))["State"]
            except NotFound as exc:
                raise SandboxUnavailableError(f"Service '{name}' was removed while starting.") from exc
            if not state.get("Running"):
                logs = await self._log_tail(env.container_id)
                raise SandboxUnavailableError(
                    f"Service '{name}' exited with code {state.get('ExitCode')} while starting"
                                              + (f": {logs}" if logs else "."))
            health = state.get("Health") or {}
            status = health.get("Status")
            if check is None:
                # Without a healthcheck, up means still running a moment after start: a service that
                # dies at once (a bad command, a port in use) fails the sandbox instead of the first call.
                now = time.monotonic()
                running_since = running_since or now
                if now - running_since < SETTLE_S:
                    await asyncio.sleep(_POLL_S)
                    continue
            if check is None or status == "healthy":
                log.debug("sandbox.service_up", service=name, container=env.container_id[:12])
                return
            if status == "unhealthy" or time.monotonic() > deadline:
                last = (health.get("Log") or [{}])[-1]
                detail = (last.get("Output") or "").strip()[-300:]
                raise SandboxUnavailableError(
                    f"Service '{name}' did not become healthy within {check.budget():.0f} s"
                    + (f"; last check exited {last.get('ExitCode')}: {detail}" if last else "."))
            await asyncio.sleep(_POLL_S)

    async def _log_tail(self, container_id: str) -> str:
        api = self.containers.api
        try:
            raw: Any = await api.call(api.api.logs, container_id, tail=5)  # stream=False: the log as bytes
        except DockerException:
            return ""
        return str(raw.decode("utf-8", "replace")).strip()[-300:]


__all__ = ["Pod", "SERVICE_LABEL", "healthcheck_dict", "pod_hosts"]
