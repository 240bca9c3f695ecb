"""The worker process's one persistent asyncio loop, and what lives on it.

Celery pool threads are synchronous; the executor, the sandbox drivers and their channels are async
and must outlive a single call (a sample's sandbox serves all its calls; ``bash_session`` keeps a
PTY). So each worker process runs one loop in a daemon thread; a task body submits its coroutine
with ``run_coroutine_threadsafe`` and waits with a bound. Never ``asyncio.run`` per task.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import socket
import threading
import uuid
from collections.abc import Coroutine
from typing import Any, TypeVar

import structlog
from pydantic import BaseModel, ConfigDict, Field
from redis.asyncio import Redis
from redis.exceptions import RedisError

from ._admission import AdmissionRules
from ._call_memory import CallMemory
from .fleet import (
    DEFAULT_REPLAY_WINDOW,
    DEMAND_PRUNE_S,
    Heartbeat,
    HostRecord,
    Keyring,
    MissingSecretError,
    ReplayWindow,
    ReplySender,
    load_keyring,
    names,
    prune_demand,
    release_slots,
)
from .sandbox_host import SandboxHost

log = structlog.get_logger("toolfleet.worker")
T = TypeVar("T")

HOST_ENV = "TOOLFLEET_HOST"


class WorkerConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    broker_url: str
    host: str = Field(default_factory=lambda: os.environ.get(HOST_ENV) or socket.gethostname())
    slots: int = Field(16, ge=0, description="sandboxes this host accepts")
    heartbeat_interval: float = Field(2.0, gt=0)
    heartbeat_ttl: float = Field(10.0, gt=0, description="seconds without a heartbeat before the host counts as lost")
    max_call_seconds: float = Field(3600.0, gt=0, description="bound on a call that has no timeout of its own")
    call_grace: float = Field(30.0, ge=0, description="extra wait beyond a call's own timeout")
    open_timeout: float = Field(300.0, gt=0, description="bound on creating a sandbox")
    orphan_grace: float = Field(30.0, gt=0,
                                description="seconds an owner's lease may be missing before its sandboxes are closed")
    admission: AdmissionRules = Field(default_factory=AdmissionRules, description="what this worker agrees to run")
    call_memory_bytes: int = Field(64 * 1024 * 1024, gt=0, description="bound on the outcomes kept for redeliveries")
    replay: ReplayWindow = Field(default_factory=lambda: DEFAULT_REPLAY_WINDOW,
                                 description="the signed-message window: how long a consumed message is remembered")


class WorkerRuntime:
    def __init__(self, config: WorkerConfig, keyring: Keyring | None = None,
                 sandboxes: SandboxHost | None = None) -> None:
        self.config = config
        self.sandboxes = sandboxes or SandboxHost()  # what this worker opened, on its Docker host
        self.admission = config.admission
        self.keyring = keyring
        self.boot = uuid.uuid4().hex[:12]
        self.owner = f"{config.host}/{self.boot}"
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run_loop, name="toolfleet-loop", daemon=True)
        self.redis: Redis | None = None
        self.memory: CallMemory | None = None
        self.replies: ReplySender | None = None  # stage outcomes back to their dispatchers (``fleet._replies``)
        self.heartbeat: Heartbeat | None = None
        self.draining = False
        self.owners: dict[str, str] = {}  # sandbox handle -> the orchestrator lease that owns it
        self._owner_missing: dict[str, float] = {}  # owner -> when its lease was first seen missing
        self._demand_pruned = float("-inf")  # loop time this worker last pruned the fleet's demand list

    # --- lifecycle -----------------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()
        self.submit(self._astart(), timeout=300.0)

    def _run_loop(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    async def _astart(self) -> None:
        self.redis = Redis.from_url(self.config.broker_url, socket_connect_timeout=5, health_check_interval=10)
        self.memory = CallMemory(self.redis, self.owner, max_bytes=self.config.call_memory_bytes, keyring=self.keyring)
        self.replies = ReplySender(self.redis, self.keyring, self.config.broker_url)
        record = HostRecord(
            host=self.config.host,
            queue=names.host_queue(self.config.host),
            node=names.worker_nodename(self.config.host),
            boot=self.boot,
            slots=self.config.slots,
            # What this worker runs and pulls, in its very first beat (placement and preflight read them).
            image_patterns=list(self.config.admission.images), sandbox_types=list(self.config.admission.sandbox_types),
            registries=list(self.config.admission.registries), network_modes=await self._network_modes(),
            allow_root=self.config.admission.allow_root,
            keys=self.keyring.ids if self.keyring is not None else [],
        )
        self.heartbeat = Heartbeat(self.redis, record, self.config.heartbeat_interval, self.config.heartbeat_ttl)
        self.heartbeat.on_beat(self._on_beat)
        await self._reap()
        await self._first_beat()
        self.heartbeat.start()
        log.info("worker.ready", host=self.config.host, boot=self.boot, slots=self.config.slots)

    async def _network_modes(self) -> list[str]:
        """The network modes this worker gives sandboxes networks of their own for: those its policy
        allows, [] when its host cannot enforce a policy (then only lone 'none' sandboxes run here).
        The egress enforcer is started here, on the loop its DNS filter serves on (docs/egress.md)."""
        egress = self.sandboxes.docker.egress
        await egress.start()
        if not egress.enforcing:
            log.warning("worker.network_policies_unenforceable", host=self.config.host,
                        allowed=self.config.admission.network_modes, reason=egress.unavailable)
            return []
        return [m for m in self.config.admission.network_modes if m in egress.modes]

    async def _first_beat(self, timeout: float = 120.0) -> None:
        """Announce the host; in a fresh deployment Redis may still be starting, so retry (bounded)."""
        assert self.heartbeat is not None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            try:
                await self.heartbeat.reset_slots()
                await self.heartbeat.beat()
                return
            except (RedisError, OSError) as exc:
                if loop.time() > deadline:
                    raise
                log.warning("worker.broker_not_ready", error=str(exc))
                await asyncio.sleep(1.0)

    async def _on_beat(self) -> None:
        assert self.memory is not None and self.heartbeat is not None
        self.heartbeat.record.running = len(self.memory.running_ids())
        await self.memory.reassert_claims(self.config.max_call_seconds)
        await self._close_orphans()
        await self._prune_demand()

    async def _prune_demand(self) -> None:
        """Drop the demand of orchestrators that died waiting for a slot (an autoscaler would count it)."""
        now = asyncio.get_running_loop().time()
        if self.redis is None or now - self._demand_pruned < DEMAND_PRUNE_S:
            return
        self._demand_pruned = now
        gone = await prune_demand(self.redis)
        if gone:
            log.info("worker.demand_pruned", host=self.config.host, tokens=gone)

    async def _close_orphans(self) -> None:
        """Close sandboxes whose orchestrator is gone (its lease lapsed): a crashed or killed eval
        must not leak sandboxes here, including ones it was still opening when it died."""
        owners = sorted(set(self.owners.values()))
        if not owners or self.redis is None:
            return
        leases = await self.redis.mget([names.lease_key(o) for o in owners])
        now = asyncio.get_running_loop().time()
        gone: set[str] = set()
        for owner, lease in zip(owners, leases, strict=True):
            if lease is not None:
                self._owner_missing.pop(owner, None)
            elif now - self._owner_missing.setdefault(owner, now) >= self.config.orphan_grace:
                gone.add(owner)
        if not gone:
            return
        for handle in [h for h, o in self.owners.items() if o in gone]:
            log.warning("worker.sandbox_orphaned", host=self.config.host, sandbox=handle, owner=self.owners.get(handle))
            await self.close_sandbox(handle)
        for owner in gone:
            self._owner_missing.pop(owner, None)

    async def _reap(self) -> None:
        """Remove sandboxes a previous incarnation of this host left behind (at every start)."""
        try:
            removed = await asyncio.wait_for(self.sandboxes.reap(), 120.0)
            log.info("worker.reaped", host=self.config.host, removed=removed)
        except Exception as exc:  # noqa: BLE001 - a failed reap must not keep the worker down
            log.warning("worker.reap_failed", host=self.config.host, error=str(exc))

    def set_draining(self) -> None:
        """Stop taking placements (published with the next beat, and right now)."""
        self.draining = True
        if self.heartbeat is not None:
            self.heartbeat.record.draining = True
            try:
                self.submit(self.heartbeat.beat(), timeout=5.0)
            except Exception as exc:  # noqa: BLE001 - best effort: the flag also goes out with the next beat
                log.warning("worker.drain_beat_failed", error=str(exc))

    def stop(self) -> None:
        """Close sandboxes and stop heartbeating (the host disappears from placement at once)."""
        try:
            self.submit(self._astop(), timeout=120.0)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)

    async def _astop(self) -> None:
        if self.heartbeat is not None:
            await self.heartbeat.stop(remove=True)
        try:
            await asyncio.wait_for(self.sandboxes.close_all(), 100.0)
        except Exception as exc:  # noqa: BLE001 - shutdown goes on: the reaper removes what is left
            log.warning("worker.close_sandboxes_failed", error=str(exc))
        if self.sandboxes.docker.has_egress:  # what is still open goes now (the next start reaps the rest)
            try:
                await asyncio.wait_for(self.sandboxes.docker.egress.aclose(), 30.0)
            except Exception as exc:  # noqa: BLE001
                log.warning("worker.close_networks_failed", error=str(exc))
        if self.redis is not None:
            await self.redis.aclose()

    async def close_sandbox(self, handle: str) -> dict[str, Any]:
        """Close a sandbox this worker opened and give its containers' slots back (idempotent)."""
        host = self.config.host
        if not self.sandboxes.is_open(handle):
            return {"closed": handle, "host": host, "existed": False}  # idempotent: no slot to give back twice
        weight = 1 + len(getattr(self.sandboxes.lookup(handle), "services", None) or {})  # its containers' slots
        try:
            await self.sandboxes.close(handle)
        except Exception as exc:  # noqa: BLE001 - reported to the caller as an error reply
            log.warning("worker.close_sandbox_failed", host=host, handle=handle, error=str(exc))
            return {"error": {"type": type(exc).__name__, "message": str(exc)}, "host": host}
        finally:
            self.owners.pop(handle, None)
            if self.heartbeat is not None:
                self.heartbeat.record.sandboxes = max(0, self.heartbeat.record.sandboxes - weight)
            if self.redis is not None:
                await release_slots(self.redis, host, weight)
        return {"closed": handle, "host": host}

    # --- running coroutines from pool threads -------------------------------------------------

    def submit(self, coro: Coroutine[Any, Any, T], timeout: float) -> T:
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TimeoutError(f"worker loop did not finish within {timeout:g} s") from None

    def cancel_calls(self, call_ids: list[str]) -> None:
        def _cancel() -> None:
            if self.memory is not None:
                for call_id in call_ids:
                    self.memory.cancel(call_id)

        self.loop.call_soon_threadsafe(_cancel)


class Runtimes:
    """The worker runtime a Celery app's tasks run on: started once, before the first task (by
    ``toolfleet worker``, with the sandbox host it built), or lazily from the app's broker under a
    plain ``celery worker``; stopped at exit. Each worker app owns one."""

    def __init__(self, broker_url: str) -> None:
        self.broker_url = broker_url
        self.current: WorkerRuntime | None = None
        self._lock = threading.Lock()

    def start(self, config: WorkerConfig, keyring: Keyring | None = None,
              sandboxes: SandboxHost | None = None) -> WorkerRuntime:
        with self._lock:
            if self.current is None:
                if keyring is None:
                    try:
                        keyring = load_keyring()
                    except MissingSecretError:
                        keyring = None  # such a worker verifies nothing as authentic: it rejects every task
                runtime = WorkerRuntime(config, keyring, sandboxes)
                runtime.start()
                self.current = runtime
            return self.current

    def get(self) -> WorkerRuntime:
        """The runtime, started now from the app's broker if nothing started it."""
        return self.current or self.start(WorkerConfig(broker_url=self.broker_url))

    def stop(self) -> None:
        with self._lock:
            if self.current is not None:
                self.current.stop()
                self.current = None
