"""Sandbox placement: pick the least loaded live worker host with free slots, and reserve one atomically.

``image_tiers`` and ``choose_hosts`` are pure (table-tested): candidates grouped best first (hosts
that have the sample's image, then hosts that can pull it), least loaded first. ``Placer.reserve``
(one per orchestrator) takes the slots with a Lua script (``_reserve``) that picks the least loaded
live, non-draining candidate and INCRBYs its counter in the same step, so concurrent orchestrators
never overfill a host and need no lock between them; the reservations asked in the same loop tick go
in one script call. ``release`` gives slots back when the sandbox is closed (or failed to open).
With leases on (``Placer(leases=N)``), one-slot reservations are mostly served from slots the same
script calls reserved ahead (``_leases``): no Redis round trip while a burst of opens keeps coming.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import itertools
import random
import time
import uuid
from collections import deque
from collections.abc import Sequence
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import NoScriptError

from orchestrator._errors import ToolfleetError
from orchestrator.util._image_names import pulls_from
from orchestrator.util._sandbox import SandboxLostError

from . import _names, _reserve
from ._heartbeat import HostRecord
from ._leases import IDLE_S as LEASE_IDLE_S, WINDOW_S as LEASE_WINDOW_S, Lease, LeaseKey, Leases, lease_key


class NoCapacityError(ToolfleetError):
    """No live, non-draining worker host has a free sandbox slot."""


class NoLiveHostError(NoCapacityError):
    """No worker host has heartbeated recently (none started yet, or all gone)."""


class FairShareError(NoCapacityError):
    """The eval holds its fair share of the fleet while another eval waits for a slot: wait."""


class SandboxTooLargeError(NoCapacityError):
    """The sandbox has more containers than any live host has slots: waiting cannot help."""


SnapshotHostLostError = SandboxLostError  # its name in workers.fleet: the host holding a snapshot is gone

def slot_weight(config: dict[str, Any] | None) -> int:
    """Slots a sandbox takes on its host: one per container (a multi-service sandbox has several)."""
    services = (config or {}).get("services") if (config or {}).get("type") == "docker" else None
    return 1 + len(services or {})


def image_tiers(hosts: Sequence[HostRecord], image: str | Sequence[str] | None = None,
                pull_policy: str = "missing") -> list[list[HostRecord]]:
    """``hosts`` grouped best first by how they would get the sandbox's image(s): those that report
    having every one, then those that have or can pull each (``pull_policy`` is not ``never`` and the
    image names a registry among theirs). When no host can get them all, one group of every host (its
    worker then says why it cannot). Pure; order within a group kept."""
    images = [image] if isinstance(image, str) else list(image or ())
    if not images:
        return [list(hosts)]

    def has_all(h: HostRecord) -> bool:
        return all(i in h.images for i in images)

    def gets_all(h: HostRecord) -> bool:
        return all(i in h.images or (pull_policy != "never" and pulls_from(h.registries, i)) for i in images)

    if not any(gets_all(h) for h in hosts):
        return [list(hosts)]
    return [[h for h in hosts if has_all(h)], [h for h in hosts if not has_all(h) and gets_all(h)]]


def choose_hosts(hosts: Sequence[HostRecord], used: dict[str, int], rng: random.Random | None = None,
                 image: str | Sequence[str] | None = None, pull_policy: str = "missing",
                 weight: int = 1) -> list[HostRecord]:
    """Live hosts that accept sandboxes, least loaded first: the smallest share of slots in use, then
    the most free slots (ties shuffled so orchestrators spread). An idle host always comes before a
    busy one, whatever their sizes, so the first samples spread over the fleet.

    With ``image`` (or several: a multi-service sandbox's, all on one host): grouped by
    ``image_tiers`` (have them, then can pull them; a host that cannot get them all only when no host
    — full or not — can). ``weight``: the slots the sandbox takes (``slot_weight``); only hosts with
    that many free are candidates."""
    candidates = [h for h in hosts if not h.draining and h.slots - used.get(h.host, 0) >= weight]
    (rng or random).shuffle(candidates)
    ordered = sorted(candidates, key=lambda h: (used.get(h.host, 0) / h.slots, -(h.slots - used.get(h.host, 0))))
    tier = {h.host: i for i, group in enumerate(image_tiers(hosts, image, pull_policy)) for h in group}
    return sorted((h for h in ordered if h.host in tier), key=lambda h: tier[h.host])


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
    return {h: int(v or 0) for h, v in zip(hosts, values, strict=True)}


EVAL_ALIVE_TTL_S = 30.0  # an eval's holdings count while its orchestrator renewed them this recently
EVAL_WAITING_TTL_S = 5.0  # an eval counts as waiting this long after its last refused reservation
HOSTS_TTL_S = 1.0  # how stale one orchestrator's list of live hosts may be (the script checks liveness itself)
STALE_HOSTS_S = 10.0  # a list older than this is re-read before use, not in the background
SAMPLE = 32  # candidates per tier offered to the script: the least loaded of a random 32 (a full scan if none fits)
SETTLE_S = 5.0  # how long giving the leases back waits for lease asks still in flight
# A lease is handed out only by a host list read this recently (or within the list's TTL, if longer):
# the script is not asked whether its host still lives. A dead host's heartbeat lingers for its TTL
# (10 s by default) anyway, and a host that began draining refuses the open, which is placed again.
LEASE_HOSTS_S = 3.0
WAITING_CHECK_S = 1.0  # while leases are held, how often whether another eval waits is read
# A leased slot counts in Redis this long beyond twice the idle time (after which this orchestrator
# gives it back itself): what one that died holding leases keeps from the fleet, and for how long.
LEASE_GRACE_S = 2.0
# A fork's host as offered to the reservation script: a size it never fills. A fork works for a sample
# that already holds a slot on that host and waits for it; were it to wait for a free slot there, a host
# whose every slot is held by a sample waiting to fork would never free one (docs/faults.md). It is
# still counted, so new samples see the host full (and go elsewhere, or wait) while forks run there.
FORK_SLOTS = 1 << 30


class Placer:
    """One orchestrator's sandbox placement on one Redis: the live hosts' records cached for
    ``HOSTS_TTL_S`` (reading every heartbeat per sandbox would cost O(hosts) round-trip work per
    open; a stale list is used while it is re-read in the background), the slot taken by the
    reservation script (``_reserve``) over at most ``SAMPLE`` random candidates per tier (O(1) per
    open however large the fleet; "the least loaded of d random choices" balances nearly as well as
    a full scan). Reservations asked while one script call is in flight go together in the next.

    ``leases``: slots per key reserved ahead and handed out without a round trip (``_leases``; 0:
    off, the default, as a Placer holding leases must be closed with ``aclose`` to give them back);
    ``leases_total``: the bound over every key (default ``_leases.TOTAL_KEYS`` times ``leases``);
    ``lease_idle_s``: a leased slot not handed out within this long goes back; ``lease_window_s``: a
    key's pool aims at its reservations of this last stretch."""

    def __init__(self, redis: Redis, hosts_ttl: float = HOSTS_TTL_S, sample: int = SAMPLE,
                 rng: random.Random | None = None, leases: int = 0, leases_total: int | None = None,
                 lease_idle_s: float = LEASE_IDLE_S, lease_window_s: float = LEASE_WINDOW_S,
                 signing_id: str | None = None) -> None:
        self.redis = redis
        # This orchestrator's key: a host whose record lists the keys it accepts, without this one, would
        # reject everything sent to it (``HostRecord.keys``), so it is passed by.
        self._signing_id = signing_id
        self._ttl = hosts_ttl
        self._sample = sample
        self._rng = rng or random.Random()  # noqa: S311 - spreads load over hosts; no secret
        self._hosts: list[HostRecord] = []
        self._by_name: dict[str, HostRecord] = {}
        self._fetched = -1e9
        self._refresh: asyncio.Lock | None = None
        self._refresher: asyncio.Task[Any] | None = None
        self._sha = hashlib.sha1(_reserve.RESERVE_BATCH_SCRIPT.encode(), usedforsecurity=False).hexdigest()
        self._loaded = False
        # Each ask and who gets its answer: a caller's future, or the lease pool of that key.
        self._queue: list[tuple[_reserve.Ask, asyncio.Future[_reserve.Answer] | LeaseKey]] = []
        self._leases = Leases(leases, leases_total, idle_s=lease_idle_s, window_s=lease_window_s)
        self._tokens = (f"{uuid.uuid4().hex[:12]}:{n}" for n in itertools.count())  # one per lease ask
        self._handed: list[Lease] = []  # leases handed out, to be counted as reservations in Redis
        self._counting: asyncio.Future[None] | None = None  # the task counting them
        self._asking: dict[str, int] = {}  # eval id -> slots its callers' reservations in flight ask for
        self._sweeper: asyncio.Task[None] | None = None
        self._sender: asyncio.Task[None] | None = None
        self._releases: set[asyncio.Future[None]] = set()  # Redis writes running in the background
        # (seconds, reservations) of the latest script calls: Redis's share of a placement's latency.
        self.batches: deque[tuple[float, int]] = deque(maxlen=10_000)

    @property
    def leased(self) -> int:
        """Slots held now in the lease pools (reserved in Redis, not handed out yet)."""
        return self._leases.held

    @property
    def lease_hits(self) -> int:
        """Reservations served from a lease so far, at once (no round trip)."""
        return self._leases.hits

    @property
    def lease_waits(self) -> int:
        """Reservations served by the answer of a lease ask in flight they waited for."""
        return self._leases.waited

    async def hosts(self, fresh: bool = False) -> list[HostRecord]:
        loop = asyncio.get_running_loop()
        if self._refresh is None:
            self._refresh = asyncio.Lock()
        age = loop.time() - self._fetched
        # With leases, re-read at half the TTL: a lease is handed out only by a recent list (the script
        # is not asked whether its host still lives), so a burst keeps one fresh.
        due = self._ttl / 2 if self._leases.enabled else self._ttl
        if not fresh and age > due and self._hosts and self._ttl > 0 and age < STALE_HOSTS_S:
            # Stale but recent: use it now and read it again in the background (the script checks
            # each host's liveness itself); a burst of opens never waits on the re-read.
            if self._refresher is None or self._refresher.done():
                self._refresher = asyncio.ensure_future(self._read_hosts(loop.time()))
            return self._hosts
        if fresh or age > self._ttl:
            await self._read_hosts(loop.time())
        return self._hosts

    async def _read_hosts(self, asked: float) -> None:
        assert self._refresh is not None
        async with self._refresh:  # one read for everyone who found the list stale at once
            if self._fetched < asked:
                self._hosts = [h for h in await live_hosts(self.redis)
                               if self._signing_id is None or not h.keys or self._signing_id in h.keys]
                self._fetched = asyncio.get_running_loop().time()
                self._by_name = {h.host: h for h in self._hosts}
                self._give_back_leases(self._leases.on_hosts(self._by_name))

    def host_draining(self, host: str) -> None:
        """``host`` refused a sandbox as draining: the cached list says so until its next read, and the
        leases on it go back."""
        record = self._by_name.get(host)
        if record is None or record.draining:
            return
        record = record.model_copy(update={"draining": True})
        self._hosts = [record if h.host == host else h for h in self._hosts]
        self._by_name[host] = record
        self._give_back_leases(self._leases.on_hosts(self._by_name))

    def host_lost(self, host: str) -> None:
        """``host`` is known to be gone (its heartbeat stopped, or it restarted): out of the cached list
        until its next read, and the leases on it go back. A lease is otherwise handed out by a list up to
        ``LEASE_HOSTS_S`` old, which may still name a host that died since."""
        if host not in self._by_name:
            return
        self._hosts = [h for h in self._hosts if h.host != host]
        del self._by_name[host]
        self._give_back_leases(self._leases.on_hosts(self._by_name))

    def holding(self, eval_id: str) -> int:
        """Slots this placer may have counted for ``eval_id`` in the fleet's fair-share count beyond the
        sandboxes handed out: leased, asked for a lease, or asked for by a caller and not answered yet."""
        return self._leases.holding(eval_id) + self._asking.get(eval_id, 0)

    @property
    def lease_hosts(self) -> dict[str, int]:
        """Leased slots held now, per host."""
        return self._leases.per_host()

    async def aclose(self) -> None:
        """Stop a background re-read of the hosts, if one is running; stop leasing and give every
        leased slot back (those of lease asks still in flight too)."""
        self._leases.closed = True
        if self._refresher is not None and not self._refresher.done():
            self._refresher.cancel()
            await asyncio.gather(self._refresher, return_exceptions=True)
        await self.release_leases()
        if self._sweeper is not None and not self._sweeper.done():
            self._sweeper.cancel()
            await asyncio.gather(self._sweeper, return_exceptions=True)

    async def release_leases(self) -> None:
        """Give every leased slot back now (out of its host's leased set, and its eval's count), after
        the lease asks in flight are answered (bounded by ``SETTLE_S``). Leasing goes on afterwards."""
        if self._sender is not None and not self._sender.done():
            await asyncio.wait([self._sender], timeout=SETTLE_S)
        await self._release_now(self._leases.drain())
        if self._releases:
            await asyncio.gather(*list(self._releases), return_exceptions=True)

    async def reserve(self, image: str | Sequence[str] | None = None, pull_policy: str = "missing",
                      weight: int = 1, eval_id: str | None = None, only: str | None = None) -> HostRecord:
        """Reserve ``weight`` sandbox slots (one per container) on the best live host; raises
        ``NoCapacityError`` (``SandboxTooLargeError`` when no host could ever take it,
        ``FairShareError`` when ``eval_id`` holds its fair share and another eval waits), or
        ``SandboxLostError`` when ``only``, the one host allowed (it holds the snapshot), is not alive:
        waiting cannot bring it back. A reservation on ``only`` (a fork) is never refused as full: it is
        counted on the host's slots, beyond them if need be (``FORK_SLOTS``)."""
        return (await self.reserve_timed(image, pull_policy, weight, eval_id, only))[0]

    async def reserve_timed(self, image: str | Sequence[str] | None = None, pull_policy: str = "missing",
                            weight: int = 1, eval_id: str | None = None,
                            only: str | None = None) -> tuple[HostRecord, float]:
        """``reserve``, and when (loop clock) the slot was held: Redis's answer read, before the
        caller's coroutine runs again (which, in a busy loop, can be later); or, served from a lease,
        at once (no await in between)."""
        loop = asyncio.get_running_loop()
        start = loop.time()
        hosts = await self.hosts()
        if weight == 1 and only is None and self._leases.enabled:
            key = lease_key(image, pull_policy, eval_id)
            self._leases.asked(key, start)
            # Only by a recent list (or one read for this very reservation): it is all that says the
            # lease's host still lives and is not draining.
            if self._fetched >= start or loop.time() - self._fetched <= max(self._ttl, LEASE_HOSTS_S):
                held = self._from_lease(key)
                if held is not None:
                    if self._leases.wants(key, loop.time()):
                        self._wake_sender()  # refill in the background: later reservations hit too
                    return held
            self._leases.missed(key, loop.time())
            waiter: asyncio.Future[tuple[HostRecord, float] | None] = loop.create_future()
            if self._leases.wait(key, waiter):  # a lease ask in flight comes sooner than an ask sent after it
                got = await waiter
                if got is not None:
                    return got
        for fresh in (False, True):
            if fresh:
                hosts = await self.hosts(fresh=True)  # full by the cached view: a host may have joined
            if only is not None:  # a sandbox from a snapshot: on the host that holds it, or nowhere
                hosts = [h for h in hosts if h.host == only]
            tiers = image_tiers(hosts, image, pull_policy)
            if image and len(tiers) == 1 and not fresh:
                continue  # no cached host can get the image(s): one that can may have joined since
            groups, capacity = self._candidates(hosts, tiers, weight)
            beyond = only is not None
            held = await self._take([group[: self._sample] for group in groups], weight, eval_id, capacity, beyond)
            if held is None and any(len(g) > self._sample for g in groups):
                held = await self._take(groups, weight, eval_id, capacity, beyond)
            if held is not None:
                return held
        if only is not None and not hosts:
            raise SandboxLostError(f"Worker host '{only}', which holds the snapshot, is not alive.")
        alive = len(hosts)
        largest = max((h.slots for h in hosts if not h.draining), default=0)
        if alive and weight > largest:
            raise SandboxTooLargeError(f"A sandbox of {weight} containers needs {weight} free slots on one worker "
                                       "host; "
                                  f"the largest live host has {largest} (start workers with --slots {weight} or more).")
        if not alive:
            raise NoLiveHostError("No worker host is alive (none has heartbeated recently): start `toolfleet worker`.")
        raise NoCapacityError(f"No worker host can take a sandbox ({alive} live host(s), all full or draining).")

    def _candidates(self, hosts: list[HostRecord], tiers: list[list[HostRecord]],
                    weight: int) -> tuple[list[list[HostRecord]], int]:
        """Each tier's hosts that could take ``weight`` slots (shuffled), and the fleet's capacity."""
        groups = [[h for h in group if not h.draining and h.slots >= weight] for group in tiers]
        for group in groups:
            self._rng.shuffle(group)
        return groups, sum(h.slots for h in hosts if not h.draining)

    def _from_lease(self, key: LeaseKey) -> tuple[HostRecord, float] | None:
        """A leased slot of ``key`` on a host the cached list says is alive and not draining (the
        leases found unusable on the way are given back), held from now; None: none."""
        lease, gone = self._leases.take(key, self._by_name)
        self._give_back_leases(gone)
        if lease is None:
            return None
        return self._handed_out(lease), asyncio.get_running_loop().time()

    def _handed_out(self, lease: Lease) -> HostRecord:
        """``lease`` goes to a caller: in Redis it moves from the leased set to the slot counter (in
        the background, this tick's together); its host's record, with the newer of the two boots."""
        self._handed.append(lease)
        if self._counting is None or self._counting.done():
            self._counting = asyncio.ensure_future(self._count_handed())
            self._releases.add(self._counting)
            self._counting.add_done_callback(self._releases.discard)
        record = self._by_name[lease.host]
        if record.boot != lease.boot and lease.taken > self._fetched:
            record = record.model_copy(update={"boot": lease.boot})  # restarted before the list was read
        return record

    async def _count_handed(self) -> None:
        await asyncio.sleep(0)  # the leases handed out in this tick go together
        while self._handed:  # (and those handed out while a pipeline was in flight, after it)
            handed, self._handed = self._handed, []
            try:
                async with self.redis.pipeline(transaction=True) as pipe:  # never counted twice, nor not at all
                    for lease in handed:
                        pipe.incrby(_names.slots_used_key(lease.host), 1)
                        pipe.zrem(_names.leased_key(lease.host), lease.token)
                    await pipe.execute()
            except Exception:  # noqa: BLE001, S110 - best effort: the token expires; the worker's close decrements
                pass

    async def release(self, host: str, weight: int = 1, eval_id: str | None = None) -> None:
        """Give back a reservation (its sandbox closed, or failed to open): the eval's fair-share count and
        the host's slot counter. A slot handed out from a lease is moved to the counter in the background;
        its give-back waits for that move, or the counter — clamped at zero — would come out one high."""
        while self._counting is not None and not self._counting.done():
            await asyncio.shield(self._counting)
        if eval_id:
            await release_eval(self.redis, eval_id, weight)
        await release_slots(self.redis, host, weight)

    def _lease_asks(self) -> list[tuple[_reserve.Ask, LeaseKey]]:
        """The lease asks due now (keys asked for since the last batch, under their target): the
        same candidates as a caller's reservation of that key would get, flagged ``lease``."""
        out: list[tuple[_reserve.Ask, LeaseKey]] = []
        for key, n in self._leases.refills(asyncio.get_running_loop().time()):
            images, pull_policy, eval_id = key
            tiers = image_tiers(self._hosts, images, pull_policy)
            groups, capacity = self._candidates(self._hosts, tiers, 1)
            candidates = [(h.host, tier, h.slots) for tier, group in enumerate(groups) for h in group[: self._sample]]
            if not candidates or (images and len(tiers) == 1):
                self._leases.unsent(key, n)  # no cached host can get the image(s): callers ask themselves
                for stranded in self._leases.stranded(key):
                    stranded.set_result(None)
                continue
            out += [(_reserve.Ask(candidates, 1, eval_id, capacity, lease=next(self._tokens)), key) for _ in range(n)]
        return out

    def _wake_sender(self) -> None:
        if self._sender is None or self._sender.done():
            self._sender = asyncio.ensure_future(self._send())

    async def _take(self, groups: list[list[HostRecord]], weight: int, eval_id: str | None,
                    capacity: int, beyond: bool = False) -> tuple[HostRecord, float] | None:
        """``beyond``: the hosts are offered as never full (a fork: see ``FORK_SLOTS``)."""
        by_name = {h.host: h for group in groups for h in group}
        if not by_name:
            return None
        ask = _reserve.Ask([(h.host, tier, FORK_SLOTS if beyond else h.slots) for tier, group in enumerate(groups)
                            for h in group], weight, eval_id or "", capacity)
        future: asyncio.Future[_reserve.Answer] = asyncio.get_running_loop().create_future()
        self._queue.append((ask, future))
        self._wake_sender()
        if eval_id:
            self._asking[eval_id] = self._asking.get(eval_id, 0) + weight
        try:
            answer = await future
        finally:
            if eval_id:
                self._asking[eval_id] -= weight
                if not self._asking[eval_id]:
                    del self._asking[eval_id]
        if answer.fair_share is not None:
            held, fair = answer.fair_share
            raise FairShareError(f"Waiting for a fair share of the fleet: eval '{eval_id}' holds {held} of "
                                 f"its {fair} slots while another eval waits.")
        if answer.host is None:
            return None
        chosen = by_name[answer.host]
        if chosen.boot != answer.boot:
            chosen = chosen.model_copy(update={"boot": answer.boot})  # restarted since cached
        return chosen, answer.at

    async def _send(self) -> None:
        """Every reservation asked meanwhile goes out together: one script call per ``MAX_BATCH``, all
        in one pipeline — one round trip for a burst of opens (an eval starting a thousand samples).
        Redis takes them in the order asked, each seeing the ones before; the lease asks due go last
        (a caller's reservation comes before slots reserved ahead)."""
        while True:
            batch: list[tuple[_reserve.Ask, Any]] = self._queue
            self._queue = []
            batch += self._lease_asks()
            if not batch:
                return
            chunks = [batch[i: i + _reserve.MAX_BATCH] for i in range(0, len(batch), _reserve.MAX_BATCH)]
            try:
                try:
                    answers = await self._run_scripts(chunks)
                except NoScriptError:
                    answers = [NoScriptError()]
                if any(isinstance(a, NoScriptError) for a in answers):
                    self._loaded = False  # Redis restarted (or flushed its scripts) since: load it again, once
                    answers = await self._run_scripts(chunks)
            except Exception as exc:  # noqa: BLE001 - every waiter gets the Redis error, none hangs
                self._loaded = False
                answers = [exc] * len(chunks)
            for chunk, answer in zip(chunks, answers, strict=True):
                self._settle(chunk, answer)

    def _settle(self, chunk: list[tuple[_reserve.Ask, Any]], answer: Any) -> None:
        results = [answer] * len(chunk) if isinstance(answer, BaseException) else answer
        for (ask, future), result in zip(chunk, results, strict=True):
            if not isinstance(future, asyncio.Future):
                self._leased_answer(future, ask, result)
                continue
            if future.done():  # the caller gave up (cancelled) meanwhile: give back what it was given
                if isinstance(result, _reserve.Answer) and result.host is not None:
                    self._give_back(result.host, ask)
                continue
            if isinstance(result, BaseException):
                future.set_exception(result)
            else:
                future.set_result(result)

    def _leased_answer(self, key: LeaseKey, ask: _reserve.Ask, result: Any) -> None:
        """A lease ask's answer: the slot goes to a reservation of its key waiting for it, else to the
        key's pool (or back, when not kept). Waiters no lease ask in flight can answer any more are
        told to ask Redis themselves."""
        answer = result if isinstance(result, _reserve.Answer) else _reserve.Answer()
        lease = Lease(answer.host, answer.boot
                      or "", ask.eval_id, answer.at, ask.lease) if answer.host is not None else None
        waiter = self._leases.waiter(key) if lease is not None and lease.host in self._by_name else None
        if lease is not None and waiter is not None:
            self._leases.handed(key)
            waiter.set_result((self._handed_out(lease), answer.at))
        else:
            kept, dropped = self._leases.answered(key, lease, answer.fair_share is not None,
                                                  asyncio.get_running_loop().time())
            if lease is not None and not kept:
                dropped.append(lease)
            self._give_back_leases(dropped)
            if kept and (self._sweeper is None or self._sweeper.done()):
                self._sweeper = asyncio.ensure_future(self._sweep())
        for stranded in self._leases.stranded(key):
            stranded.set_result(None)

    async def _sweep(self) -> None:
        """While leases are held: give back those held ``IDLE_S`` without being handed out, and those
        of an eval while another eval waits for a slot (an idle pool sends no lease ask the script could
        refuse, so it would hold them until they expire); keep the host list fresh (after a lull, the
        next reservation still finds its lease usable)."""
        loop = asyncio.get_running_loop()
        while self._leases.held:
            await asyncio.sleep(min(self._leases.idle_s / 4, WAITING_CHECK_S))
            await self._release_now(self._leases.expired(loop.time()))
            with contextlib.suppress(Exception):  # best effort: a reservation re-reads it too
                waiting = await self.redis.zrangebyscore(_names.EVALS_WAITING, await _redis_now(self.redis), "+inf")
                evals = {w.decode() if isinstance(w, bytes) else str(w) for w in waiting}
                await self._release_now(self._leases.yield_to(evals, loop.time()))
                await self.hosts()  # re-read in the background once half its TTL old

    def _in_background(self, work: Any) -> None:
        """Run ``work`` (a coroutine writing to Redis) without waiting for it; ``release_leases`` and
        ``aclose`` wait for whatever is still running."""
        task = asyncio.ensure_future(work)
        self._releases.add(task)
        task.add_done_callback(self._releases.discard)

    def _give_back_leases(self, leases: list[Lease]) -> None:
        if leases:
            self._in_background(self._release_now(leases))

    async def _release_now(self, leases: list[Lease]) -> None:
        """Leased slots back: each token out of its host's leased set, and the eval's count."""
        if not leases:
            return
        with contextlib.suppress(Exception):  # best effort: the tokens expire by themselves
            await release_leased(self.redis, [(lease.host, lease.token, lease.eval_id) for lease in leases])

    def _give_back(self, host: str, ask: _reserve.Ask) -> None:
        async def give_back() -> None:
            try:
                if ask.eval_id:
                    await release_eval(self.redis, ask.eval_id, ask.weight)
                await release_slots(self.redis, host, ask.weight)
            except Exception:  # noqa: BLE001, S110 - best effort: the host resets its counter at restart
                pass

        self._in_background(give_back())

    async def _run_scripts(self, chunks: list[list[tuple[_reserve.Ask, Any]]]) -> list[Any]:
        if not self._loaded:
            await self.redis.script_load(_reserve.RESERVE_BATCH_SCRIPT)
            self._loaded = True
        lease_ttl = 2 * self._leases.idle_s + LEASE_GRACE_S
        calls = [_reserve.encode([ask for ask, _ in chunk], EVAL_ALIVE_TTL_S, EVAL_WAITING_TTL_S, lease_ttl)
                 for chunk in chunks]
        sent = time.perf_counter()
        async with self.redis.pipeline(transaction=False) as pipe:
            for call in calls:
                pipe.evalsha(self._sha, len(call.keys), *call.keys, *call.args)
            replies = await pipe.execute(raise_on_error=False)
        self.batches.append((time.perf_counter() - sent, sum(len(c) for c in chunks)))
        out: list[Any] = []
        for call, chunk, reply in zip(calls, chunks, replies, strict=True):
            if isinstance(reply, BaseException):
                out.append(reply)
                continue
            try:
                out.append(_reserve.decode(call, len(chunk), reply, at=asyncio.get_running_loop().time()))
            except ValueError as exc:
                out.append(exc)
        return out


async def _redis_now(redis: Redis) -> float:
    seconds, micros = await redis.time()
    return seconds + micros / 1e6


async def reserve(redis: Redis, image: str | Sequence[str] | None = None, pull_policy: str = "missing",
                  weight: int = 1, only: str | None = None) -> HostRecord:
    """One reservation with a fresh view of the fleet (``Placer.reserve``; an orchestrator keeps a Placer)."""
    return await Placer(redis, hosts_ttl=0.0).reserve(image, pull_policy, weight, only=only)


# An eval's fair-share count never goes below zero, and its entry goes at zero: after a Redis restart
# the count starts again from nothing while the eval's sandboxes are still open, and their closes must
# not leave it negative (more than its share) or behind for good.
_RELEASE_EVAL = """
local left = redis.call('HINCRBY', KEYS[1], ARGV[1], -tonumber(ARGV[2]))
if left <= 0 then redis.call('HDEL', KEYS[1], ARGV[1]) end
return left
"""


async def release_eval(redis: Redis, eval_id: str, weight: int = 1) -> None:
    """The orchestrator gives an eval's fair-share count back when it closes (or failed to open) a sandbox."""
    await redis.eval(_RELEASE_EVAL, 1, _names.EVAL_SLOTS, eval_id, weight)


async def set_eval_counts(redis: Redis, counts: dict[str, int]) -> None:
    """Each eval's fair-share count as its one orchestrator knows it (0: the entry goes). Written with the
    orchestrator's lease: a count that a killed orchestrator of the same eval (resumed by ``eval-retry``)
    left, or that a Redis restart lost, is right again within a renewal."""
    if not counts:
        return
    async with redis.pipeline(transaction=False) as pipe:
        for eval_id, n in counts.items():
            if n > 0:
                pipe.hset(_names.EVAL_SLOTS, eval_id, n)
            else:
                pipe.hdel(_names.EVAL_SLOTS, eval_id)
        await pipe.execute()


async def keep_evals_alive(redis: Redis, eval_ids: Sequence[str], ttl: float = EVAL_ALIVE_TTL_S) -> None:
    """Renewed with the orchestrator's lease: an eval whose orchestrator stops renewing stops counting."""
    if eval_ids:
        now = await redis.time()
        expiry = now[0] + now[1] / 1e6 + ttl
        await redis.zadd(_names.EVALS_ALIVE, dict.fromkeys(eval_ids, expiry))


async def stop_waiting(redis: Redis, eval_id: str) -> None:
    """No sample of the eval waits for a slot any more (else its entry expires by itself)."""
    await redis.zrem(_names.EVALS_WAITING, eval_id)


async def release_leased(redis: Redis, leases: Sequence[tuple[str, str, str]]) -> None:
    """Leased slots given back, (host, token, eval id) each ('' = no eval), in one round trip: each
    token out of its host's leased set, and one slot of each eval's fair-share count."""
    per_eval: dict[str, int] = {}
    for _, _, eval_id in leases:
        if eval_id:
            per_eval[eval_id] = per_eval.get(eval_id, 0) + 1
    async with redis.pipeline(transaction=False) as pipe:
        for host, token, _ in leases:
            pipe.zrem(_names.leased_key(host), token)
        for eval_id, n in per_eval.items():
            pipe.eval(_RELEASE_EVAL, 1, _names.EVAL_SLOTS, eval_id, n)
        await pipe.execute()


async def release_slots(redis: Redis, host: str, weight: int = 1) -> None:
    key = _names.slots_used_key(host)
    if await redis.decrby(key, weight) < 0:
        await redis.set(key, 0)  # the counter was reset under us (host restart): never go negative
