"""What a process's docker drivers hold, counted together: host capacity and bounded warm pools.

One ``HostSandboxes`` per process (a worker, or an embedded eval) is shared by every docker driver
(one driver per distinct sandbox config, e.g. one per image):

- **capacity**: every container held — a running sample's, a warm spare, one being created —
  counts against one limit: a worker's ``--slots`` (``HostSandboxes.limit``), else each driver's
  ``max_sandboxes`` (a per-host cap, not per image). A sample that finds the host full evicts an
  idle spare rather than wait.
- **Docker Engines** (``engines``, ``_engine``): one client, thread pool, host socket and reaper
  per Engine, shared by every driver and closed with the last of them.
- **egress** (``workers.egress.EgressEnforcer``): the sandbox networks and the host's rules on them;
  a worker builds its own (``--egress-allow``, its broker protected) and hands it in; without one, a
  default enforcer is made on first use (embedded mode, tests).
- **warm pools** (``ContainerPool``, one per driver): spares are pre-started only for configs that
  ask (``pool_size`` > 0) or, when ``pool_size`` is unset, for the images the host pools (the
  default sandbox image unless configured); all pools together keep at most ``max_spares``, the
  least recently used pool giving its spares up first (LRU over images); a spare idle longer than
  ``idle_ttl`` is removed and not replaced until its pool is used again.
"""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

import structlog

from orchestrator.util._sandbox_config import DEFAULT_IMAGE

from .._errors import SandboxCapacityError
from ._engine import DockerEngines
from ._labels import HOST
from ._snapshot import HostSnapshots

if TYPE_CHECKING:
    from workers.egress import EgressEnforcer

log = structlog.get_logger("toolfleet.sandbox")

DEFAULT_SPARES = 2
# Forks may fill a host to this many times its cap. A fork works for a sample that holds a slot here and
# waits for it, so waiting for a free slot could deadlock a host whose every slot forks; but the open only
# asks (whoever sends it), so the worker still bounds what it runs: forks past twice the cap wait.
FORK_HEADROOM = 2


def fork_refusal(forks: int, cap: int) -> str | None:
    """Why ``fork(snapshot, forks)`` can never be opened on a host of ``cap`` slots, or None. The forking
    sample holds one slot there while it waits for all its forks, and forks fill a host to
    ``FORK_HEADROOM`` times its cap at most: past that it would wait out its whole timeout in silence."""
    room = cap * FORK_HEADROOM
    if forks + 1 <= room:
        return None
    slots = -(-(forks + 1) // FORK_HEADROOM)
    return (f"fork(snapshot, {forks}) cannot fit on its snapshot's host: it needs {forks} sandboxes beside the "
            f"forking sample's own, and forks fill a host of {cap} slot{'s' if cap != 1 else ''} to {room} at most; "
            f"fork at most {room - 1} at a time, or give that host {slots} slots (a worker's --slots, the "
            "embedded driver's max_sandboxes).")


class HostSandboxes:
    """The process-wide count of containers held and the registry of warm pools."""

    def __init__(self, limit: int | None = None, max_spares: int = DEFAULT_SPARES, idle_ttl: float = 300.0,
                 pooled_images: tuple[str, ...] | list[str] = (), owner: str = HOST,
                 registries: Sequence[str] | None = None, egress: EgressEnforcer | None = None) -> None:
        self._egress = egress
        self.used = 0
        self.pools: list[ContainerPool] = []
        # Containers held by any driver of this host: the reaper never touches them.
        self.held: set[str] = set()
        self.snapshots = HostSnapshots()  # the snapshots on this host's Docker and their disk budget
        self.engines = DockerEngines(self)  # the Engines its drivers talk to, one client each
        self.configure(limit, max_spares, idle_ttl, pooled_images, owner, registries)

    def configure(self, limit: int | None = None, max_spares: int = DEFAULT_SPARES, idle_ttl: float = 300.0,
                  pooled_images: tuple[str, ...] | list[str] = (), owner: str = HOST,
                  registries: Sequence[str] | None = None) -> None:
        """``limit``: a worker's ``--slots`` (None: each driver's own max_sandboxes); ``owner``: the
        identity its containers are labelled with; ``registries``: the ones it pulls from (None: any,
        as embedded mode)."""
        self.limit, self.max_spares, self.idle_ttl = limit, max(0, max_spares), idle_ttl
        self.pooled_images = tuple(pooled_images)  # () means the default sandbox image
        self.owner = owner
        self.registries: tuple[str, ...] | None = None if registries is None else tuple(registries)

    @property
    def egress(self) -> EgressEnforcer:
        """The host's egress enforcer (the default one, made now, if none was handed in)."""
        if self._egress is None:
            from workers.egress import EgressConfig, EgressEnforcer

            from ._api import DockerAPI

            self._egress = EgressEnforcer(EgressConfig(), DockerAPI(None, 4), owner=self.owner)
        return self._egress

    @property
    def has_egress(self) -> bool:
        """Whether an enforcer exists (one was handed in, or a sandbox needed the default)."""
        return self._egress is not None

    def pool_size_for(self, image: str, asked: int | None) -> int:
        """Spares a driver for ``image`` keeps: what its config asked, else the host's choice."""
        if asked is None:
            patterns = self.pooled_images or (DEFAULT_IMAGE,)
            asked = DEFAULT_SPARES if any(fnmatch.fnmatchcase(image, p) for p in patterns) else 0
        return min(asked, self.max_spares)

    def cap(self, driver_cap: int) -> int:
        return driver_cap if self.limit is None else min(self.limit, driver_cap)

    @property
    def spares(self) -> int:
        return sum(p.held for p in self.pools)

    def try_acquire(self, driver_cap: int, n: int = 1, fork: bool = False) -> bool:
        if self.used + n > self.cap(driver_cap) * (FORK_HEADROOM if fork else 1):
            return False
        self.used += n
        return True

    def release(self, n: int = 1) -> None:
        self.used = max(0, self.used - n)

    async def acquire(self, driver_cap: int, timeout: float, n: int = 1, fork: bool = False, forks: int = 1) -> None:
        """``n`` slots for a sample's containers (all of a multi-service sandbox's at once, so two of them
        never hold half each): free, or freed by evicting idle spares; bounded wait. A ``fork`` may fill the
        host to ``FORK_HEADROOM`` times its cap (see there); one of ``forks`` opened together that could
        never all fit beside the forking sample's own sandbox is refused at once (``fork_refusal``)."""
        if n > self.cap(driver_cap):
            raise SandboxCapacityError(f"A sandbox of {n} containers needs {n} slots; this host has "
                                       f"{self.cap(driver_cap)}.")
        refusal = fork_refusal(forks, self.cap(driver_cap)) if fork else None
        if refusal is not None:
            raise SandboxCapacityError(refusal)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not self.try_acquire(driver_cap, n, fork):
            if await self.evict_one(newer_than=None):
                continue
            if loop.time() >= deadline:
                raise SandboxCapacityError(
                    f"No sandbox capacity on this host: {self.used} sandboxes in use "
                    f"after waiting {timeout:g}s."
                )
            await asyncio.sleep(0.05)

    async def evict_one(self, newer_than: ContainerPool | None) -> bool:
        """Remove one idle spare from the least recently used pool (older than ``newer_than``'s use)."""
        loop = asyncio.get_running_loop()
        candidates = [p for p in self.pools if len(p) and p.loop is loop and p is not newer_than
                      and (newer_than is None or p.last_used < newer_than.last_used)]
        if not candidates:
            return False
        return await min(candidates, key=lambda p: p.last_used).evict_oldest("lru")

    async def reserve_spare(self, pool: ContainerPool, driver_cap: int) -> bool:
        """Room for one more spare in ``pool``: within the spares budget and capacity, evicting
        spares of less recently used pools if need be."""
        while self.spares >= self.max_spares:
            if not await self.evict_one(newer_than=pool):
                return False
        while not self.try_acquire(driver_cap):
            if not await self.evict_one(newer_than=pool):
                return False
        return True


    async def drain_spares(self) -> int:
        """Remove every idle spare of this loop's pools (an embedded eval's end: nothing idle stays
        behind the process); pools refill when used again."""
        loop = asyncio.get_running_loop()
        removed = 0
        for pool in [p for p in self.pools if p.loop is loop]:
            removed += await pool.drain()
        return removed


# The host of drivers built without one (embedded mode, benchmarks, tests); a worker builds its own
# (``SandboxHost``) and hands it to every driver it builds.
_HOST = HostSandboxes()


def host_sandboxes() -> HostSandboxes:
    return _HOST


class ContainerPool:
    """Pre-started sandboxes (agent running) for one driver's config."""

    def __init__(
        self,
        size: int,
        make: Callable[[], Awaitable[Any]],
        discard: Callable[[Any], Awaitable[None]],
        driver_cap: int,
        host: HostSandboxes | None = None,
    ) -> None:
        self.size = size
        self._make = make
        self._discard = discard
        self._cap = driver_cap
        self.host = host or _HOST
        self._ready: deque[Any] = deque()  # oldest first
        self._since: deque[float] = deque()  # when each became idle (parallel to _ready)
        self._making = 0
        self._task: asyncio.Task[None] | None = None
        self._expiry: asyncio.Task[None] | None = None
        self._closed = False
        self._draining = False
        self.last_used = time.monotonic()
        self.loop: asyncio.AbstractEventLoop | None = None
        if size > 0:
            self.host.pools.append(self)

    def __len__(self) -> int:
        return len(self._ready)

    @property
    def held(self) -> int:
        """Spares ready or being made (what counts against the host's spares budget)."""
        return len(self._ready) + self._making

    async def acquire(self) -> Any | None:
        """A warm sandbox (its capacity slot moves to the caller), or None if the pool is empty."""
        self.last_used = time.monotonic()
        while self._ready:
            env = self._pop()
            if all(not ch.closed for ch in env._channels.values()):
                self.refill()
                return env
            await self._discard(env)  # died while pooled
            self.host.release()
        self.refill()
        return None

    def refill(self) -> None:
        if self._closed or self.size <= 0 or (self._task is not None and not self._task.done()):
            return
        self.loop = asyncio.get_running_loop()
        self._task = self.loop.create_task(self._fill())

    async def wait_full(self, timeout: float) -> None:
        """Wait (bounded) until the pool holds ``size`` sandboxes (benchmarks, tests)."""
        async with asyncio.timeout(timeout):
            while len(self._ready) < self.size:
                self.refill()
                await asyncio.sleep(0.05)

    async def _fill(self) -> None:
        while not self._closed and not self._draining and len(self._ready) + self._making < self.size:
            if not await self.host.reserve_spare(self, self._cap):
                return
            self._making += 1
            try:
                env = await self._make()
            except asyncio.CancelledError:
                self.host.release()
                raise
            except Exception as exc:  # noqa: BLE001 - a failed refill must not kill the driver
                self.host.release()
                log.warning("sandbox.pool_refill_failed", error=str(exc))
                return
            finally:
                self._making -= 1
            if self._closed:
                await self._discard(env)
                self.host.release()
                return
            self._ready.append(env)
            self._since.append(time.monotonic())
            self._watch_expiry()

    def _watch_expiry(self) -> None:
        if self._expiry is None or self._expiry.done():
            self._expiry = asyncio.get_running_loop().create_task(self._expire())

    async def _expire(self) -> None:
        """Remove spares idle longer than the host's ``idle_ttl`` (oldest first)."""
        while self._ready and not self._closed:
            wait = self._since[0] + self.host.idle_ttl - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
                continue
            await self.evict_oldest("idle")

    def _pop(self) -> Any:
        self._since.popleft()
        return self._ready.popleft()

    async def evict_oldest(self, reason: str) -> bool:
        if not self._ready:
            return False
        env = self._pop()
        try:
            await self._discard(env)
        finally:
            self.host.release()
        log.info("sandbox.pool_evicted", reason=reason, sandbox=getattr(env, "sandbox_id", "?"))
        return True

    async def drain(self) -> int:
        """Let a refill in progress finish (a container being created is not cut off midway), then
        remove the idle spares; the pool refills when used again."""
        self._draining = True
        try:
            if self._task is not None and not self._task.done():
                await asyncio.wait_for(asyncio.shield(self._task), 120)
            removed = 0
            while self._ready:
                removed += await self.evict_oldest("drained")
            return removed
        finally:
            self._draining = False

    async def aclose(self) -> None:
        self._closed = True
        if self in self.host.pools:
            self.host.pools.remove(self)
        for task in (self._task, self._expiry):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, TimeoutError, Exception):  # closing anyway
                    await asyncio.wait_for(task, 30)
        while self._ready:
            await self.evict_oldest("closed")
