"""Sandbox placement: pick the least loaded live worker host with free slots, and reserve one atomically.

``choose_hosts`` is pure (table-tested): candidates ordered best first (hosts that have the sample's
image, then hosts that can pull it). ``reserve`` INCRs the host's
placement counter and gives the slot back if that overshot the host's capacity, so concurrent
orchestrators never overfill a host; ``release`` gives a slot back when the sandbox is closed (or
failed to open).
"""

from __future__ import annotations

import asyncio
import random
import weakref
from collections.abc import Sequence

from redis.asyncio import Redis

from . import _names
from ._admission import pulls_from
from .heartbeat import HostRecord


class NoCapacityError(Exception):
    """No live, non-draining worker host has a free sandbox slot."""


class SandboxTooLargeError(NoCapacityError):
    """The sandbox has more containers than any live host has slots: waiting cannot help."""


def slot_weight(config: dict | None) -> int:
    """Slots a sandbox takes on its host: one per container (a multi-service sandbox has several)."""
    services = (config or {}).get("services") if (config or {}).get("type") == "docker" else None
    return 1 + len(services or {})


def choose_hosts(hosts: Sequence[HostRecord], used: dict[str, int], rng: random.Random | None = None,
                 image: str | Sequence[str] | None = None, pull_policy: str = "missing",
                 weight: int = 1) -> list[HostRecord]:
    """Live hosts that accept sandboxes, least loaded first: the smallest share of slots in use, then
    the most free slots (ties shuffled so orchestrators spread). An idle host always comes before a
    busy one, whatever their sizes, so the first samples spread over the fleet.

    With ``image`` (or several: a multi-service sandbox's, all on one host): the hosts that report
    having every one first; then the hosts that have or can pull each (``pull_policy`` is not ``never``
    and the image names a registry among theirs); a host that cannot get them all only when no host
    (full or not) can — then any host, and its worker says why it cannot. ``weight``: the slots the
    sandbox takes (``slot_weight``); only hosts with that many free are candidates."""
    rng = rng or random
    candidates = [h for h in hosts if not h.draining and h.slots - used.get(h.host, 0) >= weight]
    rng.shuffle(candidates)
    ordered = sorted(candidates, key=lambda h: (used.get(h.host, 0) / h.slots, -(h.slots - used.get(h.host, 0))))
    images = [image] if isinstance(image, str) else list(image or ())
    if not images:
        return ordered

    def has_all(h: HostRecord) -> bool:
        return all(i in h.images for i in images)

    def gets_all(h: HostRecord) -> bool:
        return all(i in h.images or (pull_policy != "never" and pulls_from(h.registries, i)) for i in images)

    if not any(gets_all(h) for h in hosts):
        return ordered
    return [h for h in ordered if has_all(h)] + [h for h in ordered if not has_all(h) and gets_all(h)]


async def live_hosts(redis: Redis) -> list[HostRecord]:
    """Every host whose heartbeat has not expired."""
    names = sorted(n.decode() if isinstance(n, bytes) else n for n in await redis.smembers(_names.HOSTS_SET))
    if not names:
        return []
    async with redis.pipeline(transaction=False) as pipe:
        for name in names:
            pipe.hgetall(_names.heartbeat_key(name))
        records = await pipe.execute()
    return [HostRecord.from_hash(r) for r in records if r]


async def used_slots(redis: Redis, hosts: Sequence[str]) -> dict[str, int]:
    if not hosts:
        return {}
    values = await redis.mget([_names.slots_used_key(h) for h in hosts])
    return {h: int(v or 0) for h, v in zip(hosts, values)}


_locks: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock]" = weakref.WeakKeyDictionary()


async def reserve(redis: Redis, image: str | Sequence[str] | None = None, pull_policy: str = "missing",
                  weight: int = 1) -> HostRecord:
    """Reserve ``weight`` sandbox slots (one per container) on the best live host; raises ``NoCapacityError``.

    One orchestrator's reservations run one at a time: concurrent ones would all read the same
    counters and pick the same "least loaded" host (the first samples of an eval all landing on one
    worker while another sits idle)."""
    loop = asyncio.get_running_loop()
    lock = _locks.get(loop)
    if lock is None:
        lock = _locks[loop] = asyncio.Lock()
    async with lock:
        return await _reserve(redis, image, pull_policy, weight)


async def _reserve(redis: Redis, image: str | Sequence[str] | None, pull_policy: str = "missing",
                   weight: int = 1) -> HostRecord:
    hosts = await live_hosts(redis)
    used = await used_slots(redis, [h.host for h in hosts])
    for host in choose_hosts(hosts, used, image=image, pull_policy=pull_policy, weight=weight):
        count = await redis.incrby(_names.slots_used_key(host.host), weight)
        if count <= host.slots:
            return host
        await redis.decrby(_names.slots_used_key(host.host), weight)  # lost a race for the last slots: next host
    alive = len(hosts)
    largest = max((h.slots for h in hosts if not h.draining), default=0)
    if alive and weight > largest:
        raise SandboxTooLargeError(f"A sandbox of {weight} containers needs {weight} free slots on one worker host; "
                              f"the largest live host has {largest} (start workers with --slots {weight} or more).")
    raise NoCapacityError(
        f"No worker host can take a sandbox ({alive} live host(s), all full or draining)."
        if alive else "No worker host is alive (none has heartbeated recently): start `toolfleet worker`."
    )


async def release(redis: Redis, host: str, weight: int = 1) -> None:
    key = _names.slots_used_key(host)
    if await redis.decrby(key, weight) < 0:
        await redis.set(key, 0)  # the counter was reset under us (host restart): never go negative
