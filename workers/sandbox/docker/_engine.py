"""One Docker Engine as a process's docker drivers share it: one client, one thread pool, one host socket
and one reaper, however many sandbox configs (drivers) use it.

Every distinct sandbox config gets its own driver (its image, limits, pool of spares). What talks to
the Engine does not depend on the config, so it lives here, once per Engine URL (``docker_host``) of a
``HostSandboxes`` (when each config had its own, 30 configs left 58 threads and 420 fds behind, a client, a thread
pool, a listening socket and a reaper per config):

- ``api``: one ``DockerAPI`` (an SDK client and its bounded thread pool). Its threads are the most any
  config asked for (``api_threads``), so a config asking more widens the shared pool.
- per event loop (asyncio objects belong to one; embedded mode may run several ``asyncio.run`` in
  turn): the direct channel's ``HostListener``, the periodic reaper (at the shortest ``reap_interval``
  a config asked), and whether this loop has reaped yet (a driver's start reaps once per loop, not
  once per config). A closed loop's part is closed when the next loop's is made.

Drivers ``acquire`` an Engine when built and ``release`` it when closed; the last release closes it
(threads, client sockets, listeners, reapers), so nothing outlives the drivers that use it.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import structlog
from docker.errors import DockerException, NotFound

from ._api import DockerAPI
from ._direct import HostListener, engine_is_local
from ._labels import MANAGED, reap_reason

if TYPE_CHECKING:
    from ._pool import HostSandboxes

__all__ = ["DockerEngine", "DockerEngines"]

log = structlog.get_logger("toolfleet.sandbox")


@dataclass
class _LoopPart:
    """What an Engine holds for one event loop."""

    listener: HostListener | None = None
    listener_tried: bool = False  # a failed start is not retried per driver (the fallback is the exec stream)
    reaper: asyncio.Task[None] | None = None
    reap_interval: float = math.inf
    reaped: bool = False
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class DockerEngine:
    """The shared connection to one Docker Engine (see the module docstring)."""

    def __init__(self, url: str | None, threads: int, host: HostSandboxes) -> None:
        self.url = url
        self.host = host  # whose containers are held (never reaped) and who owns them
        self.api = DockerAPI(url, threads)
        self.users = 0  # drivers holding it
        self.info: dict[str, Any] | None = None  # ``docker info``, read once
        self._loops: dict[asyncio.AbstractEventLoop, _LoopPart] = {}

    def _part(self) -> _LoopPart:
        loop = asyncio.get_running_loop()
        part = self._loops.get(loop)
        if part is None:
            for old in [lp for lp in self._loops if lp.is_closed()]:
                self._close_dead_part(self._loops.pop(old))
            part = self._loops[loop] = _LoopPart()
        return part

    @property
    def listeners(self) -> list[HostListener]:
        """Its host sockets (one per event loop that started a driver)."""
        return [part.listener for part in self._loops.values() if part.listener is not None]

    async def connect(self) -> None:
        await self.api.connect()

    async def docker_info(self) -> dict[str, Any]:
        if self.info is None:
            self.info = await self.api.call(self.api.api.info)
        return self.info

    async def listener(self) -> HostListener | None:
        """This loop's host socket for the direct channel (None: the Engine is remote or it cannot listen)."""
        if not engine_is_local(self.url):
            return None
        part = self._part()
        async with part.lock:
            if not part.listener_tried:
                part.listener_tried = True
                listener = HostListener()
                try:
                    await listener.start()
                    part.listener = listener
                except OSError as exc:
                    log.info("sandbox.direct_channel_unavailable", error=str(exc))
                    await listener.aclose()
        return part.listener

    async def reap(self) -> int:
        """Remove this Engine's managed containers that are expired or orphaned and that no driver of
        the host holds; how many were removed."""
        try:
            await self.connect()
            listed = await self.api.call(self.api.api.containers, all=True, filters={"label": f"{MANAGED}=1"})
        except DockerException as exc:
            log.warning("sandbox.reap_failed", error=str(exc))
            return 0
        removed = 0
        for info in listed:
            reason = reap_reason(info, self.host.held, owner=self.host.owner)
            if reason is None:
                continue
            try:
                await self.api.call(self.api.api.remove_container, info["Id"], force=True)
                removed += 1
                log.info("sandbox.reaped", container=info["Id"][:12], reason=reason)
            except NotFound:
                pass
            except DockerException as exc:
                log.warning("sandbox.reap_failed", container=info["Id"][:12], error=str(exc))
        await self._reap_networks()
        return removed

    async def _reap_networks(self) -> None:
        """Sandbox networks and rules a dead worker left (after its containers: Docker keeps a network
        while containers are attached). Only where this process enforces egress on the local Engine."""
        if not engine_is_local(self.url) or not self.host.has_egress or not self.host.egress.enforcing:
            return
        from workers.egress import EgressError

        try:
            await self.host.egress.reap()
        except EgressError as exc:
            log.warning("sandbox.network_reap_failed", error=str(exc))

    async def reap_at_start(self) -> None:
        """Reap once per loop (the first driver to start there), not once per config."""
        part = self._part()
        if part.reaped:
            return
        part.reaped = True
        await self.reap()

    def keep_reaping(self, interval: float) -> None:
        """Reap every ``interval`` s on this loop; a shorter interval than the running one restarts the
        reaper (it keeps the shortest any config asked until the Engine closes)."""
        part = self._part()
        if part.reaper is not None and not part.reaper.done() and interval >= part.reap_interval:
            return
        if part.reaper is not None:
            part.reaper.cancel()
        part.reap_interval = interval
        part.reaper = asyncio.get_running_loop().create_task(self._reap_every(interval))

    async def _reap_every(self, interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            try:
                await self.reap()
            except Exception as exc:  # noqa: BLE001 - a failed sweep must not end the reaper
                log.warning("sandbox.reap_failed", error=str(exc))

    async def aclose(self) -> None:
        """Stop every loop's reaper and listener, then the client and its threads."""
        current = asyncio.get_running_loop()
        for loop, part in list(self._loops.items()):
            if loop is current:
                if part.reaper is not None:
                    part.reaper.cancel()
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await part.reaper
                if part.listener is not None:
                    await part.listener.aclose()
            else:
                self._close_dead_part(part)
        self._loops.clear()
        self.api.close()

    @staticmethod
    def _close_dead_part(part: _LoopPart) -> None:
        """A part of another (usually closed) loop: its tasks cannot be awaited here; close what we can."""
        if part.reaper is not None and not part.reaper.get_loop().is_closed():
            part.reaper.get_loop().call_soon_threadsafe(part.reaper.cancel)
        if part.listener is not None:
            part.listener.close_now()


class DockerEngines:
    """A ``HostSandboxes``'s Engines by URL, each counted by the drivers holding it."""

    def __init__(self, host: HostSandboxes) -> None:
        self.host = host
        self._by_url: dict[str | None, DockerEngine] = {}
        self.acquired = 0  # drivers that ever took an Engine here; 0: no docker sandbox was made on this host

    def __len__(self) -> int:
        return len(self._by_url)

    def __iter__(self) -> Iterator[DockerEngine]:
        return iter(list(self._by_url.values()))

    def acquire(self, url: str | None, threads: int) -> DockerEngine:
        engine = self._by_url.get(url)
        if engine is None:
            engine = self._by_url[url] = DockerEngine(url, threads, self.host)
        engine.api.widen(threads)
        engine.users += 1
        self.acquired += 1
        return engine

    async def release(self, engine: DockerEngine) -> None:
        """A driver is done with ``engine``; the last one closes it."""
        engine.users -= 1
        if engine.users > 0:
            return
        if self._by_url.get(engine.url) is engine:
            del self._by_url[engine.url]
        await engine.aclose()
