"""Slot leases: one orchestrator's slots reserved ahead in blocks, handed out locally.

During a burst of sandbox opens the machine is busy spawning sandboxes, and a Redis round trip takes
tens of milliseconds however cheap the reservation script is. So ``Placer`` reserves the common shape
of reservation (one slot, any host; keyed by image(s), pull policy and eval) ahead of demand, in the
same script calls as the callers' own reservations, and the next reservations of that key take one of
those slots without a round trip.

What keeps it honest:

* Sized by demand: a key's pool aims at the reservations it saw in the last ``WINDOW_S`` — or, after
  reservations found it empty, at 4 to the power of those misses less one (slow start: a second
  reservation leases 4, a burst reaches the cap within a few) — capped per key and in total. A key
  asked once in the window leases nothing: a one-off key (a distinct image per sample) would only
  keep slots from the fleet until they went back. The pool is refilled in
  the background once what it holds and has asked for falls below three quarters of that, so a
  steady stream of opens keeps finding a slot, and so does the next wave of a bursty one (an eval's
  opens come in waves: a hundred samples admitted at once finish opening at about the same time,
  and their next samples ask together; the window spans the lull between two waves). A reservation that finds the pool
  empty while lease asks of its key are in flight waits for one of their answers rather than asking after them.
* Fair share: a lease ask never marks its eval as waiting, gets nothing beyond the eval's share, and
  is refused whenever another eval waits (the script's ``lease`` flag): then the key gives its pool
  back, so the slots go to the eval that waits. A pool nobody draws from sends no ask to be refused:
  while leases are held, ``Placer`` reads which evals wait once a second and the pools of the others
  give theirs back (``yield_to``).
* Bounded in time: a slot held ``IDLE_S`` without being handed out goes back. In Redis a leased slot
  is a token in its host's leased set (``_names.leased_key``), which counts as a slot in use until it
  expires: an orchestrator that dies holding leases leaks nothing for long.

This module is the state only (no I/O): ``Placer`` sends the asks and gives slots back in Redis.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ._heartbeat import HostRecord

# A leased slot not handed out within this long goes back to the fleet. It must outlast the lull
# between two waves of opens, which is about an open's latency: bench scale (100 opens in flight on
# a busy 2-core machine) measured lulls of 2.4-3.2 s and open p99 5.3 s; at 2 or 3 s the next wave
# found the pool just given back.
IDLE_S = 5.0
WINDOW_S = 5.0  # a key's pool aims at the reservations it saw this recently (and counts its misses this long)
BACKOFF_S = 0.5  # after a lease ask was refused (fair share) or found no room, no more for this long
TOTAL_KEYS = 4  # leases held in total: at most this many keys' worth (per-key cap times this)

LeaseKey = tuple[tuple[str, ...] | None, str, str]  # (images, pull policy, eval id)


def lease_key(image: str | Sequence[str] | None, pull_policy: str, eval_id: str | None) -> LeaseKey:
    images = (image,) if isinstance(image, str) else tuple(image or ())
    return (images or None, pull_policy, eval_id or "")


def refill_size(recent: int, misses: int, held: int, asked: int, cap: int, room: int) -> int:
    """Slots to ask for ahead now for one key. Pure; table-tested.

    ``recent``: its reservations in the last window (the demand); ``misses``: those that found the
    pool empty; ``held``: leases in its pool; ``asked``: lease asks in flight; ``cap``: its bound;
    ``room``: what the total bound still allows. Nothing for a key asked once (no stream yet). The
    target is the recent demand, or 4 ** (misses - 1) if more (slow start), capped; nothing is asked
    while held + asked is at least three quarters of it (the low-water mark), so refills go out in
    blocks, not one per reservation."""
    if recent < 2:
        return 0
    target = min(cap, max(recent, 4 ** min(misses - 1, 8) if misses else 0))
    if target <= 0 or held + asked >= (3 * target + 3) // 4:
        return 0
    return max(0, min(target - held - asked, room))


@dataclass(frozen=True)
class Lease:
    """A slot the script reserved for the pool: on ``host`` (as ``boot``), counted for ``eval_id``,
    held in Redis under ``token``."""

    host: str
    boot: str
    eval_id: str
    taken: float  # loop clock when the script's answer was read
    token: str = ""


@dataclass
class _Pool:
    leases: deque[Lease] = field(default_factory=deque)
    asks: deque[float] = field(default_factory=deque)  # when its recent reservations were asked
    misses: deque[float] = field(default_factory=deque)  # ... and those that found the pool empty
    waiters: deque[Any] = field(default_factory=deque)  # reservations waiting for a lease ask's answer
    in_flight: int = 0  # lease asks sent, not answered yet
    quiet_until: float = -1e9  # no lease asks before this (after a refusal)
    due: bool = False  # a reservation since the last refill check


class Leases:
    """Every key's pool of leased slots, and when to ask for more. ``per_key`` 0: leasing off."""

    def __init__(self, per_key: int, total: int | None = None, idle_s: float = IDLE_S, window_s: float = WINDOW_S,
                 backoff_s: float = BACKOFF_S) -> None:
        self.per_key = per_key
        self.total = per_key * TOTAL_KEYS if total is None else total
        self.idle_s, self.window_s, self.backoff_s = idle_s, window_s, backoff_s
        self._pools: dict[LeaseKey, _Pool] = {}
        self._next_forget = 0.0  # when ``asked`` next forgets the keys idle for a window
        self.closed = False
        self.hits = 0  # reservations served from a lease at once
        self.waited = 0  # reservations served by a lease ask's answer they waited for

    @property
    def enabled(self) -> bool:
        return self.per_key > 0 and not self.closed

    @property
    def held(self) -> int:
        return sum(len(p.leases) for p in self._pools.values())

    def _in_flight(self) -> int:
        return sum(p.in_flight for p in self._pools.values())

    @property
    def keys(self) -> int:
        """Keys tracked now (bounded: those asked for within a window, or holding leases)."""
        return len(self._pools)

    def asked(self, key: LeaseKey, now: float) -> None:
        """A reservation of ``key`` was asked (the demand the pool is sized by). Once a window, the
        keys with nothing held, in flight, waiting or asked for within it are forgotten here: one-off
        keys (a distinct image per sample) cost nothing after their window, with or without leases."""
        if now >= self._next_forget:
            self._next_forget = now + self.window_s
            self._forget_idle(now)
        pool = self._pools.setdefault(key, _Pool())
        pool.asks.append(now)
        while pool.asks and pool.asks[0] < now - self.window_s:
            pool.asks.popleft()
        pool.due = True

    def missed(self, key: LeaseKey, now: float) -> None:
        """A reservation of ``key`` found no usable lease (the slow start counts these)."""
        pool = self._pools.setdefault(key, _Pool())
        pool.misses.append(now)
        while pool.misses and pool.misses[0] < now - self.window_s:
            pool.misses.popleft()

    def wait(self, key: LeaseKey, waiter: Any) -> bool:
        """Queue ``waiter`` (a future) for the answer of a lease ask of ``key`` in flight, if one is not
        already promised to another waiter; False: none to wait for (ask Redis yourself)."""
        pool = self._pools.get(key)
        if pool is None or not self.enabled:
            return False
        pool.waiters = deque(w for w in pool.waiters if not w.done())
        if pool.in_flight <= len(pool.waiters):
            return False
        pool.waiters.append(waiter)
        return True

    def waiter(self, key: LeaseKey) -> Any | None:
        """The next reservation waiting for a lease of ``key`` (still waiting), taken off; None: none."""
        pool = self._pools.get(key)
        while pool is not None and pool.waiters:
            waiter = pool.waiters.popleft()
            if not waiter.done():
                return waiter
        return None

    def handed(self, key: LeaseKey) -> None:
        """A lease ask's answer went straight to a waiting reservation (``waiter``)."""
        pool = self._pools.get(key)
        if pool is not None:
            pool.in_flight = max(0, pool.in_flight - 1)
        self.waited += 1

    def stranded(self, key: LeaseKey) -> list[Any]:
        """Waiters left with no lease ask in flight to answer them (they must ask Redis themselves)."""
        pool = self._pools.get(key)
        if pool is None or pool.in_flight >= len(pool.waiters):
            return []
        out = [w for w in pool.waiters if not w.done()]
        keep = max(0, pool.in_flight)
        out, kept = out[keep:], out[:keep]
        pool.waiters = deque(kept)
        return out

    def take(self, key: LeaseKey, alive: Mapping[str, HostRecord]) -> tuple[Lease | None, list[Lease]]:
        """The oldest usable lease of ``key`` (None: none), by ``alive`` (the cached live hosts); and
        the leases dropped on the way, whose host is gone or draining (give them back)."""
        pool = self._pools.get(key)
        gone: list[Lease] = []
        while pool is not None and pool.leases:
            lease = pool.leases.popleft()
            if _usable(lease, alive):
                self.hits += 1
                return lease, gone
            gone.append(lease)
        return None, gone

    def wants(self, key: LeaseKey, now: float) -> bool:
        """Whether a refill of ``key`` would ask for anything now (no state changed)."""
        pool = self._pools.get(key)
        return pool is not None and self._size(pool, now) > 0

    def _size(self, pool: _Pool, now: float) -> int:
        if not self.enabled or now < pool.quiet_until:
            return 0
        recent = sum(1 for t in pool.asks if t >= now - self.window_s)
        misses = sum(1 for t in pool.misses if t >= now - self.window_s)
        room = self.total - self.held - self._in_flight()
        return refill_size(recent, misses, len(pool.leases), pool.in_flight, self.per_key, room)

    def refills(self, now: float) -> list[tuple[LeaseKey, int]]:
        """The lease asks to send now, per key asked for since the last check (counted as in flight)."""
        out = []
        for key, pool in self._pools.items():
            if not pool.due:
                continue
            pool.due = False
            n = self._size(pool, now)
            if n > 0:
                pool.in_flight += n
                out.append((key, n))
        return out

    def unsent(self, key: LeaseKey, n: int) -> None:
        """``n`` lease asks counted by ``refills`` were not sent after all (no candidate host)."""
        pool = self._pools.get(key)
        if pool is not None:
            pool.in_flight = max(0, pool.in_flight - n)

    def answered(self, key: LeaseKey, lease: Lease | None, refused: bool, now: float) -> tuple[bool, list[Lease]]:
        """One lease ask's answer: ``lease`` (None: not given), ``refused`` for the fair share.
        Returns whether the lease was kept (False: give it back: leasing closed or over its bounds),
        and the pool's leases to give back (a refused key gives back everything it held: another
        eval waits, or this one is at its share)."""
        pool = self._pools.setdefault(key, _Pool())
        pool.in_flight = max(0, pool.in_flight - 1)
        if lease is None:
            pool.quiet_until = now + self.backoff_s
            if refused:
                dropped, pool.leases = list(pool.leases), deque()
                return False, dropped
            return False, []
        if not self.enabled or len(pool.leases) >= self.per_key or self.held >= self.total:
            return False, []
        pool.leases.append(lease)
        return True, []

    def expired(self, now: float) -> list[Lease]:
        """Leases held ``idle_s`` without being handed out (taken out of the pools); keys with nothing
        held, asked or recent are forgotten."""
        out: list[Lease] = []
        for pool in self._pools.values():
            while pool.leases and pool.leases[0].taken <= now - self.idle_s:
                out.append(pool.leases.popleft())
        self._forget_idle(now)
        return out

    def _forget_idle(self, now: float) -> None:
        for key, pool in list(self._pools.items()):
            while pool.asks and pool.asks[0] < now - self.window_s:
                pool.asks.popleft()
            while pool.misses and pool.misses[0] < now - self.window_s:
                pool.misses.popleft()
            if pool.waiters:
                pool.waiters = deque(w for w in pool.waiters if not w.done())
            if not (pool.leases or pool.in_flight or pool.asks or pool.waiters) and now >= pool.quiet_until:
                del self._pools[key]

    def on_hosts(self, alive: Mapping[str, HostRecord]) -> list[Lease]:
        """A fresh list of live hosts: the leases ``take`` would drop (taken out: give them back)."""
        gone: list[Lease] = []
        for pool in self._pools.values():
            keep: deque[Lease] = deque()
            for lease in pool.leases:
                (keep if _usable(lease, alive) else gone).append(lease)
            pool.leases = keep
        return gone

    def yield_to(self, waiting: set[str], now: float) -> list[Lease]:
        """Evals in ``waiting`` wait for a slot: every pool of another eval gives its leases back (taken
        out) and asks for none for a while, as when the script refuses its lease ask."""
        out: list[Lease] = []
        for (_, _, eval_id), pool in self._pools.items():
            if pool.leases and waiting - {eval_id}:
                out += pool.leases
                pool.leases = deque()
                pool.quiet_until = now + self.backoff_s
        return out

    def holding(self, eval_id: str) -> int:
        """Leases held for ``eval_id``, and lease asks for it in flight."""
        return sum(len(p.leases) + p.in_flight for (_, _, e), p in self._pools.items() if e == eval_id)

    def per_host(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for pool in self._pools.values():
            for lease in pool.leases:
                out[lease.host] = out.get(lease.host, 0) + 1
        return out

    def drain(self) -> list[Lease]:
        """Every lease held (taken out: give them all back)."""
        out = [lease for pool in self._pools.values() for lease in pool.leases]
        for pool in self._pools.values():
            pool.leases.clear()
        return out



def _usable(lease: Lease, alive: Mapping[str, HostRecord]) -> bool:
    """Whether the cached list says the lease's host is alive and not draining. (A host that restarted
    since keeps the slot: its leased set outlives the process, unlike its counter.)"""
    record = alive.get(lease.host)
    return record is not None and not record.draining
