"""The slot reservation script and its batch encoding: many reservations in ONE Redis script call.

An orchestrator starting a thousand samples asks for a thousand slots within a few loop ticks; one
``EVALSHA`` per reservation would cost each its own ~140 packed arguments and its own script run.
Here every reservation asked meanwhile goes in one call: the candidate hosts they share are named
once (their slot counters and heartbeats read once), and the script takes the reservations one after
another in the order asked, each seeing the slots and fair-share counts the ones before it took, so
the outcome is the same as that many separate calls in that order.

``encode`` and ``decode`` are pure (table-tested); ``RESERVE_BATCH_SCRIPT`` runs in Redis.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from . import _names

MAX_BATCH = 256  # reservations per script call: bounds how long one call keeps Redis busy

# KEYS: the m hosts' slot counters, their m heartbeat hashes, their m leased sets, then EVAL_SLOTS,
# EVALS_ALIVE, EVALS_WAITING.
# ARGV: m, alive ttl, waiting ttl, r, lease ttl, then per reservation: weight, eval id ('' = no fair
# share), the fleet's capacity, lease token ('' = a caller's reservation; else a slot reserved ahead
# for the orchestrator's lease pool), k, then k (host index 1..m, tier, slots) triples, best tier first.
# A host's slots in use: its counter plus its leased set's unexpired tokens. A caller's slot is added
# to the counter; a leased slot to the leased set under its token, until lease ttl from now (the
# orchestrator moves it to the counter when it hands it out, or removes it when it gives it back; if
# it died, the token expires).
# Fair share first: with E evals active (holding slots with a live orchestrator, or waiting), an eval
# holding more than capacity / E may take no more while another eval under its share waits. A lease
# ask is stricter, since nobody is waiting for it: refused whenever another eval waits, and given
# nothing (as if no host had room) when it would take the eval beyond its share; it never marks the
# eval as waiting (a refused or unfilled lease ask leaves the fair-share state as it found it).
# Then, within the best tier that has room: the smallest share in use, then the most free, then the
# earlier (the list comes shuffled). A host whose heartbeat expired or that is draining is skipped,
# whatever the orchestrator's cached view said.
# Returns 3 values per reservation: {host index, boot, 0}; {0, 0, 0} when no candidate has room;
# {-1, held, fair} when refused for the fair share (both mark a caller's eval as waiting; for a
# lease ask, -1 means another eval waits: the orchestrator gives that eval's leases back).
RESERVE_BATCH_SCRIPT = """
local m = tonumber(ARGV[1])
local alive_ttl, waiting_ttl = tonumber(ARGV[2]), tonumber(ARGV[3])
local r, lease_ttl = tonumber(ARGV[4]), tonumber(ARGV[5])
local slots_key, alive_key, waiting_key = KEYS[3 * m + 1], KEYS[3 * m + 2], KEYS[3 * m + 3]
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local used, boot = {}, {}
local function host_used(h)
  if used[h] == nil then
    local u = tonumber(redis.call('GET', KEYS[h]) or '0') or 0
    if u < 0 then u = 0 end
    redis.call('ZREMRANGEBYSCORE', KEYS[2 * m + h], '-inf', now)
    used[h] = u + redis.call('ZCARD', KEYS[2 * m + h])
  end
  return used[h]
end
local function host_boot(h)
  if boot[h] == nil then
    local beat = redis.call('HMGET', KEYS[m + h], 'boot', 'draining')
    local draining = beat[2] == '1' or beat[2] == 'True' or beat[2] == 'true'
    boot[h] = (beat[1] and not draining) and beat[1] or false
  end
  return boot[h]
end
-- Fair-share state, read once and then kept as the reservations below change it.
local shared, held, active, count, waiters, waiting = false, {}, {}, 0, {}, {}
local function load_shares(batch_evals)
  redis.call('ZREMRANGEBYSCORE', alive_key, '-inf', now)
  redis.call('ZREMRANGEBYSCORE', waiting_key, '-inf', now)
  local flat = redis.call('HGETALL', slots_key)
  for j = 1, #flat, 2 do
    local e, c = flat[j], tonumber(flat[j + 1]) or 0
    if c > 0 and redis.call('ZSCORE', alive_key, e) then
      held[e] = c
      active[e] = true
      count = count + 1
    elseif not batch_evals[e] then
      redis.call('HDEL', slots_key, e)  -- nothing held, or its orchestrator is gone
    end
  end
  for _, w in ipairs(redis.call('ZRANGE', waiting_key, 0, -1)) do
    waiters[#waiters + 1] = w
    waiting[w] = true
    if not active[w] then active[w] = true; count = count + 1 end
  end
end
local function mark_waiting(e)
  redis.call('ZADD', waiting_key, now + waiting_ttl, e)
  if not waiting[e] then waiters[#waiters + 1] = e; waiting[e] = true end
  if not active[e] then active[e] = true; count = count + 1 end
end
-- First pass: which evals this batch names (their own empty entries are kept, as one call each would).
local batch_evals, pos = {}, 6
for q = 1, r do
  local e = ARGV[pos + 1]
  if e ~= '' then batch_evals[e] = true end
  pos = pos + 5 + 3 * tonumber(ARGV[pos + 4])
end
local out = {}
pos = 6
for q = 1, r do
  local weight, eval, capacity = tonumber(ARGV[pos]), ARGV[pos + 1], tonumber(ARGV[pos + 2])
  local token, k = ARGV[pos + 3], tonumber(ARGV[pos + 4])
  local lease = token ~= ''
  local first = pos + 5
  pos = first + 3 * k
  local refused = false
  if eval ~= '' or lease then
    if not shared then load_shares(batch_evals); shared = true end
    local n = count
    if eval ~= '' and not active[eval] then n = n + 1 end
    local fair = math.max(1, math.floor(capacity / n))
    local mine = eval ~= '' and (held[eval] or 0) or 0
    if lease then
      local other = false
      for _, w in ipairs(waiters) do
        if w ~= eval then other = true; break end
      end
      if other then
        out[#out + 1] = -1; out[#out + 1] = mine; out[#out + 1] = fair
        refused = true
      elseif eval ~= '' and mine + weight > fair then
        out[#out + 1] = 0; out[#out + 1] = 0; out[#out + 1] = 0
        refused = true
      end
    elseif mine + weight > fair then
      for _, w in ipairs(waiters) do
        if w ~= eval and (held[w] or 0) < fair then
          mark_waiting(eval)
          out[#out + 1] = -1; out[#out + 1] = mine; out[#out + 1] = fair
          refused = true
          break
        end
      end
    end
  end
  if not refused then
    local best, best_tier, best_share, best_free = 0, 0, 0, 0
    for c = 0, k - 1 do
      local h = tonumber(ARGV[first + 3 * c])
      local tier, cap = tonumber(ARGV[first + 3 * c + 1]), tonumber(ARGV[first + 3 * c + 2])
      if best == 0 or tier <= best_tier then
        local u = host_used(h)
        local free = cap - u
        if free >= weight and host_boot(h) then
          local share = u / cap
          if best == 0 or tier < best_tier or share < best_share or (share == best_share and free > best_free) then
            best, best_tier, best_share, best_free = h, tier, share, free
          end
        end
      end
    end
    if best == 0 then
      if eval ~= '' and not lease then mark_waiting(eval) end
      out[#out + 1] = 0; out[#out + 1] = 0; out[#out + 1] = 0
    else
      if lease then
        redis.call('ZADD', KEYS[2 * m + best], now + lease_ttl, token)
        redis.call('EXPIRE', KEYS[2 * m + best], math.ceil(lease_ttl) + 1)  -- the set goes with its last token
      else
        redis.call('INCRBY', KEYS[best], weight)
      end
      used[best] = used[best] + weight
      if eval ~= '' then
        redis.call('HINCRBY', slots_key, eval, weight)
        redis.call('ZADD', alive_key, now + alive_ttl, eval)
        held[eval] = (held[eval] or 0) + weight
        if not active[eval] then active[eval] = true; count = count + 1 end
      end
      out[#out + 1] = best; out[#out + 1] = host_boot(best); out[#out + 1] = 0
    end
  end
end
return out
"""


@dataclass(frozen=True)
class Ask:
    """One reservation: ``weight`` slots on one of ``candidates`` ((host, tier, slots), best tier
    first), for ``eval_id`` ('' = no fair share) in a fleet of ``capacity`` slots. ``lease``: a token
    ('' = for a caller): reserved ahead for the orchestrator's pool (``_leases``) under that token,
    with the script's stricter fair-share rule."""

    candidates: Sequence[tuple[str, int, int]]
    weight: int = 1
    eval_id: str = ""
    capacity: int = 0
    lease: str = ""


@dataclass(frozen=True)
class Answer:
    """What the script said about one reservation: ``host`` (and its ``boot``) when taken; else
    ``fair_share`` = (held, fair) when refused over the eval's fair share; else no room."""

    host: str | None = None
    boot: str | None = None
    fair_share: tuple[int, int] | None = None
    at: float = 0.0  # when the orchestrator read it (its loop's clock): the slot is held from then


@dataclass(frozen=True)
class Call:
    """One script call: the hosts it names (in KEYS order), its KEYS and ARGV."""

    hosts: list[str]
    keys: list[str]
    args: list[Any]


def encode(asks: Sequence[Ask], alive_ttl: float, waiting_ttl: float, lease_ttl: float = 0.0) -> Call:
    """The script call taking ``asks`` in order (each candidate host named once); leased slots
    count for ``lease_ttl`` seconds unless handed out or given back."""
    index: dict[str, int] = {}
    for ask in asks:
        for host, _, _ in ask.candidates:
            index.setdefault(host, len(index) + 1)
    hosts = list(index)
    keys = [_names.slots_used_key(h) for h in hosts] + [_names.heartbeat_key(h) for h in hosts]
    keys += [_names.leased_key(h) for h in hosts]
    keys += [_names.EVAL_SLOTS, _names.EVALS_ALIVE, _names.EVALS_WAITING]
    args: list[Any] = [len(hosts), alive_ttl, waiting_ttl, len(asks), lease_ttl]
    for ask in asks:
        args += [ask.weight, ask.eval_id, ask.capacity, ask.lease, len(ask.candidates)]
        for host, tier, slots in ask.candidates:
            args += [index[host], tier, slots]
    return Call(hosts, keys, args)


def decode(call: Call, asks: int, reply: Any, at: float = 0.0) -> list[Answer]:
    """The script's flat reply as one ``Answer`` per ask; a malformed reply raises ValueError."""
    if not isinstance(reply, list) or len(reply) != 3 * asks:
        raise ValueError(f"reservation script answered {reply!r:.200} for {asks} reservation(s)")
    hosts, m = call.hosts, len(call.hosts)
    out = []
    for q in range(asks):
        code, first, second = reply[3 * q: 3 * q + 3]
        code = int(code)
        if code < 0:
            out.append(Answer(fair_share=(int(first), int(second)), at=at))
        elif code == 0:
            out.append(Answer(at=at))
        elif code <= m:
            out.append(Answer(host=hosts[code - 1], boot=first.decode() if isinstance(first, bytes) else str(first),
                              at=at))
        else:
            raise ValueError(f"reservation script named host {code} of {m}")
    return out
