"""The ``docker`` driver: one hardened container per sample, on the Docker Engine API (no CLI).

- Exec goes through an in-container agent started once per (container, user) — see ``_exec``;
  images without python3 fall back to one ``docker exec`` per call (logged). The agent reaches the
  host over a socket the HOST listens on (``_direct``): the host never resolves a sandbox path.
- A per-sandbox writable-space cap (``disk_limit``): the layer's size where the storage driver
  enforces it, else capped tmpfs mounts on the writable paths (``_disk``).
- Hardening by default (``DockerSandboxConfig``): network none, cap-drop ALL, no-new-privileges,
  pids/memory(+swap)/CPU limits, init, the image's non-root USER; the Docker socket is never mounted.
  A root sandbox (where root is allowed) keeps Docker's default capabilities (``_capabilities``).
- Networks (``network_mode``, docs/egress.md): a sandbox with a way out, several containers or a
  policy that may change gets a Docker network of its own from the host's ``EgressEnforcer``
  (``HostSandboxes.egress``), released when its containers are gone; ``set_network`` changes its
  policy while it lives. A lone container in mode ``none`` has no network at all.
- Labels and a reaper (``_labels``); a stopped OOM-killed container is ``SandboxOutOfMemoryError``,
  an OOM-killed command in a running one ``CommandOutOfMemoryError`` (model-visible, the sample goes on).
- One driver per distinct config, but what talks to the Engine is shared by all of them: its client,
  thread pool, host socket and reaper (``_engine``, one per Engine of a ``HostSandboxes``).
- A pool of pre-started containers (agent already running) per (image, limits), refilled in the
  background, so ``create()`` usually takes milliseconds; every container counts against one per-host
  capacity shared by all drivers of the process, and pools are bounded together (``_pool``).
"""

from __future__ import annotations

import asyncio
from typing import Any

import structlog
from docker.errors import APIError, DockerException, ImageNotFound

from orchestrator.util._sandbox import SandboxUnavailableError
from orchestrator.util._sandbox_config import DockerSandboxConfig
from workers.egress import EgressError, EgressPolicy, SandboxNetwork

from .._driver import SandboxDriver, SandboxRequest
from .._environment import AgentSandboxEnvironment
from .._errors import SandboxImageError, missing_image_message
from .._registry import SandboxRegistry, default_registry
from ._capabilities import dropped_capabilities, fork_capabilities
from ._containers import KEEPALIVE, Containers, container_name
from ._direct import HostListener
from ._disk import DiskPlan, fork_seed_command, layer_quota_supported, plan_disk, seed_command
from ._environment import DockerSandboxEnvironment, DockerServiceEnvironment
from ._labels import container_labels
from ._pod import Pod, pod_hosts
from ._pool import ContainerPool, HostSandboxes, host_sandboxes
from ._pull import ImagePuller
from ._snapshot import snapshot_present

log = structlog.get_logger("toolfleet.sandbox")


class DockerSandboxDriver(SandboxDriver):
    def __init__(self, config: DockerSandboxConfig | None = None, eval_id: str = "",
                 host: HostSandboxes | None = None, registry: SandboxRegistry | None = None) -> None:
        self.registry = registry or default_registry()  # where its sandboxes are found by handle
        self.config = config or DockerSandboxConfig()
        self.eval_id = eval_id
        self.host = host or host_sandboxes()  # the capacity, spares, identity and registries it shares
        # The Engine's client, threads, host socket and reaper are the host's, shared by every config.
        self.engine = self.host.engines.acquire(self.config.docker_host, self.config.api_threads)
        self.api = self.engine.api
        self._closed = False
        self.containers = Containers(self.api, self.host.held)
        self.puller = ImagePuller(self.api, self.host.registries)
        # A multi-service sandbox is never pooled: its services join the default container at creation.
        pool_size = 0 if self.config.services else self.host.pool_size_for(self.config.image, self.config.pool_size)
        self.pool = ContainerPool(pool_size,
                                  self._pool_container, self._remove, self.config.max_sandboxes, self.host)
        self._envs: dict[str, DockerSandboxEnvironment] = {}
        self._started = False
        self._start_lock = asyncio.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None  # the loop its listener and reaper run on
        self._background: set[asyncio.Task[Any]] = set()
        self.exec_user = self.config.user or ""  # who commands run as; the image's USER unless configured
        self.listener: HostListener | None = None  # the Engine's direct-channel socket (None: exec stream)
        self.disk = DiskPlan("none", None)

    # --- lifecycle ------------------------------------------------------------------------------

    async def start(self) -> None:
        """Connect, check the image, reap leftovers, start the periodic reaper and fill the pool."""
        loop = asyncio.get_running_loop()
        if self._started and self._loop is not loop:
            await self._move_to(loop)
        async with self._start_lock:
            if self._started:
                return
            try:
                await self.engine.connect()
                image = await self.puller.at_start(self.config.image, self.config.pull_policy)
                image_config = image.get("Config") or {}
                self.exec_user = self.config.user or image_config.get("User") or ""
                info = await self.engine.docker_info() if self.config.disk_limit else {}
                if self.config.snapshot is not None:  # a fork: the snapshot must be here; seed all its paths
                    await snapshot_present(self.api, self.host.snapshots, self.config.snapshot.id, self.config.image)
                self.disk = await plan_disk(
                    self.api, self.config.image, self.config.disk_limit,
                    self.config.working_dir or image_config.get("WorkingDir") or None,
                    self.config.writable_paths, layer_quota_supported(info), self.config.runtime,
                    seed_all=self.config.snapshot is not None,
                )
            except ImageNotFound as exc:
                raise SandboxImageError(missing_image_message(self.config.image)) from exc
            except DockerException as exc:
                raise SandboxUnavailableError(f"Docker is not reachable: {exc}") from exc
            if self.config.direct_channel:
                self.listener = await self.engine.listener()
            await self.engine.reap_at_start()
            self.engine.keep_reaping(self.config.reap_interval)
            self._started = True
            self._loop = loop
            self.pool.refill()

    async def _move_to(self, loop: asyncio.AbstractEventLoop) -> None:
        """Started on another event loop (embedded mode runs one per ``asyncio.run``): take this loop's
        host socket and reaper from the Engine; the old loop's socket no longer accepts anything."""
        self._loop, self._start_lock = loop, asyncio.Lock()
        self.listener = None  # meanwhile: containers made now use the exec stream, not a dead socket
        if self.config.direct_channel:
            self.listener = await self.engine.listener()
        self.engine.keep_reaping(self.config.reap_interval)

    async def create(self, spec: SandboxRequest | None = None) -> DockerSandboxEnvironment:
        spec = spec or SandboxRequest()
        await self.start()
        # pull_policy 'always': pull first; a new image drops stale spares
        await self.puller.before_create(self.config.image, self.config.pull_policy, self.pool)
        env = await self.pool.acquire()
        if env is None:
            containers = self.config.containers  # a multi-service sandbox takes its slots at once
            # A fork works for a sample holding a slot here and waiting for it, so it may go beyond the cap
            # (a host full of samples waiting to fork would never free one; docs/faults.md), up to a bound.
            snapshot = self.config.snapshot
            await self.host.acquire(self.config.max_sandboxes, self.config.acquire_timeout, containers,
                                    fork=snapshot is not None, forks=snapshot.forks if snapshot is not None else 1)
            try:
                env = await self._new_container(spec.eval_id or self.eval_id, spec.sample_id)
            except BaseException:
                self.host.release(containers)
                raise
            if self.config.services:
                pod = Pod(self.config, self.containers, self.puller, self.host, self.disk, self._service_env)
                try:
                    env.services = await pod.start(  # type: ignore[assignment]  # it holds what _service_env built
                        env, spec.eval_id or self.eval_id, spec.sample_id, self.host.owner, env.network)
                except BaseException:
                    await self._remove(env)
                    self.host.release()
                    raise
                env.pod = pod
        else:
            self._tag_later(env, spec)
        env.default_env = dict(spec.env)
        env.eval_id, env.sample_id = spec.eval_id or self.eval_id, spec.sample_id
        self._envs[env.sandbox_id] = env
        self.registry.register(env.sandbox_id, env)
        return env

    async def destroy(self, env: AgentSandboxEnvironment) -> None:
        assert isinstance(env, DockerSandboxEnvironment)
        self.registry.release(env.sandbox_id)
        if self._envs.pop(env.sandbox_id, None) is None:
            return  # already destroyed
        try:
            if env.pod is not None:
                await env.pod.stop()
            await self._remove(env)
        finally:
            self.host.release()

    async def set_network(self, env: AgentSandboxEnvironment, policy: EgressPolicy) -> None:
        """Change a live sandbox's network policy (every container of it: one network, one policy).
        Only a sandbox that has a network of its own can (``phase_network_modes``, services, or a way out)."""
        assert isinstance(env, DockerSandboxEnvironment)
        if env.network is None:
            raise SandboxUnavailableError(
                f"Sandbox '{env.sandbox_id}' has no network of its own (network_mode 'none', one container), so "
                "its network policy cannot change: name the modes it may change to in phase_network_modes.")
        try:
            env.network = await self.host.egress.update(env.network, policy)
        except EgressError as exc:
            raise SandboxUnavailableError(f"Sandbox '{env.sandbox_id}': its network policy could not change "
                                          f"to '{policy.mode}' ({exc}); the previous one stays.") from exc

    async def reap(self) -> int:
        """Sweep the Engine for expired or orphaned containers (the Engine's, shared by every config)."""
        return await self.engine.reap()

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            await self.pool.aclose()
            for env in list(self._envs.values()):
                await self.destroy(env)
            for task in list(self._background):
                task.cancel()
        finally:
            self.listener = None
            await self.host.engines.release(self.engine)  # the last driver on the Engine closes it

    # --- containers -----------------------------------------------------------------------------

    async def _open_network(self, sandbox_id: str) -> SandboxNetwork | None:
        """The sandbox's own network (None: it has none, see ``DockerSandboxConfig.needs_network``)."""
        c = self.config
        if not c.needs_network:
            return None
        egress = self.host.egress
        try:
            await egress.ready()
            if not egress.enforcing and not c.enforced_modes:
                # A host that cannot keep a bridge network away from itself: the services share the
                # default container's namespace instead (``_pod``), with no way out at all.
                log.info("sandbox.services_share_loopback", reason=egress.unavailable)
                return None
            if c.docker_host:
                raise EgressError("the rules live on this host, and this sandbox's Docker Engine is another one")
            for mode in c.phase_network_modes:  # refused now rather than when its phase comes
                if mode not in egress.modes:
                    raise EgressError(f"this host cannot enforce network mode '{mode}': {egress.unavailable}")
            policy = EgressPolicy(mode=c.network_mode, allowed_hosts=tuple(c.allowed_hosts))
            return await egress.open(sandbox_id, policy)
        except EgressError as exc:
            raise SandboxUnavailableError(f"Could not give the sandbox its network (network_mode "
                                          f"'{c.network_mode}'): {exc}") from exc

    async def _release_network(self, network: SandboxNetwork | None) -> None:
        if network is None:
            return
        try:
            await self.host.egress.release(network)
        except EgressError as exc:  # its leftovers are the egress reaper's
            log.warning("sandbox.network_release_failed", network=network.name, error=str(exc))

    def _container_kwargs(self, labels: dict[str, str], network: SandboxNetwork | None) -> dict[str, Any]:
        c = self.config
        shared = bool(c.services) and network is None  # services joining this container's namespace
        host_config = self.api.api.create_host_config(
            **(network.host_config() if network is not None else {"network_mode": "none"}),
            cap_drop=dropped_capabilities(c.cap_drop, self.exec_user) or None,
            cap_add=fork_capabilities(c.cap_add, c.snapshot is not None) or None,
            security_opt=c.security_opt or None,
            pids_limit=c.pids_limit,
            mem_limit=c.mem_limit,
            memswap_limit=c.memswap_limit or c.mem_limit,  # no swap beyond the memory limit
            nano_cpus=int(c.cpus * 1e9),
            init=c.init,
            read_only=c.read_only,
            binds=self.listener.bind() if self.listener is not None else None,
            storage_opt=self.disk.storage_opt,
            tmpfs=self.disk.tmpfs or None,
            runtime=c.runtime,
            extra_hosts=pod_hosts(c.default_service, c.services) if shared else None,
        )
        return {
            "image": c.image,
            "command": KEEPALIVE,
            "entrypoint": [],
            # The keep-alive PID runs as root (with the container's capabilities: none unless the sandbox
            # runs as root) so the sandbox user cannot kill it and take the container down (`pkill sleep`);
            # commands run as `exec_user`.
            "user": "root",
            "working_dir": c.working_dir,
            "environment": c.environment or None,
            "labels": labels,
            "host_config": host_config,
            "detach": True,
            **({"hostname": c.default_service} if c.services else {}),
            # Reached by its service name from the sandbox's other services, as under compose.
            **({"networking_config": network.networking_config(c.default_service)} if network is not None else {}),
        }

    async def _new_container(self, eval_id: str, sample_id: str, pool: str = "") -> DockerSandboxEnvironment:
        labels = container_labels(eval_id, sample_id, self.config.ttl, pool, owner=self.host.owner)
        name = container_name(sample_id or "pool")
        network = await self._open_network(name)
        try:
            try:
                container_id = await self.containers.create(name, **self._container_kwargs(labels, network))
            except APIError as exc:
                if self.disk.mechanism != "storage_opt" or "storage" not in str(exc).lower():
                    raise
                # e.g. overlay2 on xfs without pquota: the layer cannot be capped; cap the writable paths.
                log.warning("sandbox.layer_quota_refused", error=str(exc))
                c = self.config
                self.disk = await plan_disk(self.api, c.image, c.disk_limit, c.working_dir, c.writable_paths, False)
                container_id = await self.containers.create(name, **self._container_kwargs(labels, network))
        except BaseException as exc:
            await self._release_network(network)
            if isinstance(exc, DockerException):
                raise SandboxUnavailableError(f"could not create a sandbox container: {exc}") from exc
            raise
        env = DockerSandboxEnvironment(self, container_id, name)
        env.network = network
        try:
            await self.api.call(self.api.api.start, container_id)
            await env._channel(None)  # start the agent now (or learn that the fallback is needed)
            await self._seed(env)
        except BaseException as exc:
            await self._remove(env)
            if isinstance(exc, DockerException):
                raise SandboxUnavailableError(f"could not start a sandbox container: {exc}") from exc
            raise
        return env

    async def _seed(self, env: DockerSandboxEnvironment) -> None:
        """Copy the image's files into the capped tmpfs that now hides them (see ``_disk``)."""
        fork = self.config.snapshot is not None
        for path, tar in self.disk.seeds.items():
            if fork:  # the snapshot's files, each with its own owner and mode (``fork_seed_command``)
                raw = await env.exec_raw(fork_seed_command(path), input=tar, user="root", timeout=60, trusted=True)
                if raw.returncode != 0:
                    raise SandboxUnavailableError(f"could not restore the snapshot's files at {path} in a fork: "
                                                  f"{raw.stderr[-300:].decode('utf-8', 'replace').strip()}")
                continue
            # A configured user that is not the image's (e.g. root, without capabilities) may not write in
            # a directory the image's user owns: the directory's owner unpacks it.
            user = self.disk.owners.get(path) if self.config.user else None
            raw = await env.exec_raw(seed_command(path), input=tar, user=user, timeout=60)
            if raw.returncode != 0:
                log.warning("sandbox.disk_seed_failed", path=path, error=raw.stderr[-500:].decode("utf-8", "replace"))

    async def _pool_container(self) -> DockerSandboxEnvironment:
        return await self._new_container(self.eval_id, "", pool=self.config.limits_key()[:60])

    async def _remove(self, env: DockerSandboxEnvironment) -> None:
        """Remove the container, then its network (a pod's services are gone by now: ``Pod.stop``)."""
        await self.containers.remove(env)
        network, env.network = env.network, None
        await self._release_network(network)

    def _service_env(self, container_id: str, name: str, service: str, user: str) -> DockerServiceEnvironment:
        return DockerServiceEnvironment(self, container_id, name, service, user)

    def _tag_later(self, env: DockerSandboxEnvironment, spec: SandboxRequest) -> None:
        """A pooled container learns its sample: labels are immutable, so the name carries it."""
        if not spec.sample_id:
            return
        name = container_name(spec.sample_id)

        async def rename() -> None:
            try:
                await self.api.call(self.api.api.rename, env.container_id, name)
            except DockerException as exc:
                log.debug("sandbox.rename_failed", container=env.container_id[:12], error=str(exc))

        task = asyncio.get_running_loop().create_task(rename())
        self._background.add(task)
        task.add_done_callback(self._background.discard)


__all__ = ["DockerSandboxDriver"]
