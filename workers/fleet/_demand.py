"""Sandbox demand: the placements waiting for a slot, as one Redis list an autoscaler reads the length of.

Each waiting placement holds one token in ``names.SANDBOX_DEMAND`` (``<client id>/<nonce>``), removed
when it is placed or gives up. An orchestrator killed while its samples waited cannot remove theirs, so
its tokens name it: while any of its placements waits it keeps ``names.demand_owner_key(client id)``
fresh (for its ``demand_ttl``, 30 s by default), and workers, the fleet's janitors, drop the tokens whose owner key
has lapsed (``prune_demand``, from their heartbeat). The list keeps KEDA's ``LLEN`` contract; a dead
orchestrator's demand goes within a TTL and a prune interval, not with the list's own 600 s expiry.
"""

from __future__ import annotations

import uuid
from typing import Any

from . import _names

__all__ = ["DEMAND_PRUNE_S", "add_demand", "keep_demand_owner", "prune_demand",
           "remove_demand"]

DEMAND_PRUNE_S = 10.0  # how often a worker prunes the list (from its heartbeat)
DEMAND_LIST_TTL_S = 600  # the list's own expiry, renewed by each new waiter: the bound if no worker runs

# Atomically keep the tokens whose owner is alive (or unnamed: an older orchestrator's) and rewrite the
# list only when some went (LREM per token would be quadratic in a long list of dead tokens).
# KEYS[1]: the list; ARGV[1]: the owner-key prefix. Returns how many tokens went.
_PRUNE = """
local items = redis.call('LRANGE', KEYS[1], 0, -1)
local alive, keep = {}, {}
for _, token in ipairs(items) do
  local owner = string.match(token, '^([0-9a-f]+)/')
  if owner ~= nil and alive[owner] == nil then
    alive[owner] = redis.call('EXISTS', ARGV[1] .. owner) == 1
  end
  if owner == nil or alive[owner] then keep[#keep + 1] = token end
end
local gone = #items - #keep
if gone > 0 then
  local ttl = redis.call('TTL', KEYS[1])
  redis.call('DEL', KEYS[1])
  for i = 1, #keep, 1000 do
    redis.call('RPUSH', KEYS[1], unpack(keep, i, math.min(i + 999, #keep)))
  end
  if #keep > 0 and ttl > 0 then redis.call('EXPIRE', KEYS[1], ttl) end
end
return gone
"""


def _ttl(seconds: float) -> int:
    return max(1, round(seconds))


async def add_demand(redis: Any, client_id: str, ttl: float) -> str:
    """Count one waiting placement of orchestrator ``client_id``, whose tokens stay ``ttl`` seconds after
    its last refresh; returns the token (for ``remove_demand``)."""
    token = f"{client_id}/{uuid.uuid4().hex}"
    async with redis.pipeline(transaction=False) as pipe:
        pipe.set(_names.demand_owner_key(client_id), 1, ex=_ttl(ttl))
        pipe.rpush(_names.SANDBOX_DEMAND, token)
        pipe.expire(_names.SANDBOX_DEMAND, DEMAND_LIST_TTL_S)
        await pipe.execute()
    return token


async def keep_demand_owner(redis: Any, client_id: str, ttl: float) -> None:
    """The orchestrator is alive and still waiting: its tokens stay."""
    await redis.set(_names.demand_owner_key(client_id), 1, ex=_ttl(ttl))


async def remove_demand(redis: Any, token: str) -> None:
    await redis.lrem(_names.SANDBOX_DEMAND, 0, token)


async def prune_demand(redis: Any) -> int:
    """Drop the tokens of orchestrators whose owner key lapsed (they died waiting); returns how many."""
    return int(await redis.eval(_PRUNE, 1, _names.SANDBOX_DEMAND, _names.demand_owner_key("")))
