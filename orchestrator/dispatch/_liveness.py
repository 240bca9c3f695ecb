"""Which worker-host incarnations the Celery dispatcher knows to be gone.

A host is judged by its heartbeat (``workers.fleet.names.heartbeat_key``): missing for longer than
``lost_grace`` (a Redis restart may hide it a few seconds), every incarnation of it is lost; present
under a new boot id, the host restarted and what the old process held is gone. A host that comes back,
or restarts under the same name, serves new sandboxes: only the lost incarnations stay lost.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import Any

from workers.fleet import names

__all__ = ["HostLiveness"]


class HostLiveness:
    """The lost incarnations (boot ids) per host, and since when each watched host's heartbeat is missing."""

    def __init__(self, lost_grace: float) -> None:
        self._lost_grace = lost_grace
        self._lost: dict[str, set[str]] = {}  # host -> boot ids (process incarnations) known to be lost
        self._missing_since: dict[str, float] = {}

    def is_lost(self, host: str, boot: str | None) -> bool:
        """Whether what ``host`` held under ``boot`` is known to be gone."""
        return boot is not None and boot in self._lost.get(host, ())

    def mark_lost(self, host: str, boots: Iterable[str]) -> None:
        self._lost.setdefault(host, set()).update(boots)

    async def read(self, redis: Any, hosts: Sequence[str]) -> dict[str, str | None]:
        """Each of ``hosts`` whose state is known, in order: its current boot id, or None when its
        heartbeat has been missing longer than the grace (a host missing for less is left out)."""
        async with redis.pipeline(transaction=False) as pipe:
            for host in hosts:
                pipe.hget(names.heartbeat_key(host), "boot")
            boots = await pipe.execute()
        now = time.monotonic()
        known: dict[str, str | None] = {}
        for host, raw in zip(hosts, boots, strict=True):
            boot = raw.decode() if isinstance(raw, bytes) else raw
            if boot is None:
                since = self._missing_since.setdefault(host, now)
                if now - since >= self._lost_grace:
                    known[host] = None
                continue
            self._missing_since.pop(host, None)
            known[host] = boot
        return known
