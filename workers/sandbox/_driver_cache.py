"""A host's drivers by sandbox config: shared while in use, bounded and closed when idle.

A worker sees one driver per distinct sandbox config (an image, limits, an environment...), and a
SWE-bench-sized run brings thousands of them. A driver in use (it owns an open sandbox) is kept; one
whose last sandbox closed becomes idle, and idle drivers are closed (their spares removed):

- beyond ``max_idle``, least recently used first: ``MAX_IDLE_DRIVERS`` (16) by default — enough for the
  configs one eval interleaves (a task's sandbox, a few per-sample images) to keep their warm spares
  and image facts, few enough that what idle drivers hold (spares count against the host's spares
  budget anyway; a driver's start copy of its image's working directory is at most 16 MiB) stays small;
- once idle longer than ``idle_ttl`` (a host's spares' idle time: after that its pool is empty anyway),
  checked whenever a driver is taken or given back.

So the drivers a host holds are at most its open sandboxes' configs plus ``max_idle``; the Docker
Engine's client, threads and socket are shared by all of them (``docker._engine``), not per config.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

import structlog

from orchestrator.util._sandbox_config import DockerSandboxConfig, LocalSandboxConfig

from ._driver import SandboxDriver

__all__ = ["MAX_IDLE_DRIVERS", "DriverCache"]

log = structlog.get_logger("toolfleet.sandbox")

MAX_IDLE_DRIVERS = 16

Config = LocalSandboxConfig | DockerSandboxConfig


@dataclass
class _Entry:
    driver: SandboxDriver
    users: int = 0  # open sandboxes (and callers between take and give back)
    idle_since: float = field(default_factory=time.monotonic)


class DriverCache:
    """Drivers by config key; ``take`` one (built on first use), ``give_back`` it when its sandbox is gone."""

    def __init__(self, build: Callable[[Config], SandboxDriver], max_idle: int = MAX_IDLE_DRIVERS,
                 idle_ttl: Callable[[], float] = lambda: 300.0) -> None:
        self._build = build
        self.max_idle = max(0, max_idle)
        self._idle_ttl = idle_ttl  # read at each sweep: a worker may configure its host after building it
        self._entries: OrderedDict[str, _Entry] = OrderedDict()  # least recently used first
        self._keys: dict[int, str] = {}  # id(driver) -> its key

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def idle(self) -> int:
        return sum(1 for e in self._entries.values() if e.users == 0)

    def drivers(self) -> list[SandboxDriver]:
        return [e.driver for e in self._entries.values()]

    async def take(self, config: Config) -> SandboxDriver:
        """The driver for ``config``, counted as in use until ``give_back``."""
        key = config.model_dump_json()
        entry = self._entries.get(key)
        if entry is None:
            entry = self._entries[key] = _Entry(self._build(config))
            self._keys[id(entry.driver)] = key
        self._entries.move_to_end(key)
        entry.users += 1
        await self._sweep()
        return entry.driver

    async def give_back(self, driver: SandboxDriver) -> None:
        key = self._keys.get(id(driver))
        entry = self._entries.get(key) if key is not None else None
        if entry is not None and entry.driver is driver:
            entry.users = max(0, entry.users - 1)
            if entry.users == 0:
                entry.idle_since = time.monotonic()
                self._entries.move_to_end(key)  # type: ignore[arg-type]  # the key the entry was stored under
        await self._sweep()

    async def drop(self, keep: Callable[[SandboxDriver], bool]) -> None:
        """Close every driver ``keep`` refuses, in use or not (e.g. forks of a snapshot being removed)."""
        for key, entry in list(self._entries.items()):
            if not keep(entry.driver):
                self._forget(key)
                await entry.driver.aclose()

    async def close_all(self) -> None:
        while self._entries:
            key = next(iter(self._entries))
            entry = self._forget(key)
            await entry.driver.aclose()

    async def _sweep(self) -> None:
        """Close idle drivers past their time, then the least recently used beyond ``max_idle``."""
        idle = [(k, e) for k, e in self._entries.items() if e.users == 0]  # least recently used first
        expired = time.monotonic() - self._idle_ttl()
        doomed = [(k, e) for k, e in idle if e.idle_since <= expired]
        kept = [(k, e) for k, e in idle if e.idle_since > expired]
        doomed += kept[:max(0, len(kept) - self.max_idle)]
        for key, entry in doomed:
            if self._entries.get(key) is entry and entry.users == 0:
                self._forget(key)
                try:
                    await entry.driver.aclose()
                except Exception as exc:  # noqa: BLE001 - one driver failing to close must not stop the host
                    log.warning("sandbox.driver_close_failed", error=str(exc))

    def _forget(self, key: str) -> _Entry:
        entry = self._entries.pop(key)
        self._keys.pop(id(entry.driver), None)
        return entry
