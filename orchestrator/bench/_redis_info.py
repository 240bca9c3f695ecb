"""What the fleet's Redis ran, moved and holds, from its own ``INFO`` (commandstats, stats, cpu, memory).

Read over the broker URL, so it works against an operator's Redis as well as a benchmark's own; a Redis
that refuses ``INFO`` (an ACL, a managed service renaming it) gives None instead of figures.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

INFO_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class RedisCounters:
    commands: int
    bytes_in: int
    bytes_out: int
    cpu_s: float = 0.0  # redis-server's own CPU time (user + system)
    by_command: dict[str, int] = field(default_factory=dict)  # calls per command (Lua's inner calls included)

    @classmethod
    def from_info(cls, commandstats: dict[str, Any], stats: dict[str, Any],
                  cpu: dict[str, Any] | None = None) -> RedisCounters:
        by_command = {k.removeprefix("cmdstat_"): int(v.get("calls", 0)) for k, v in commandstats.items()
                      if k.startswith("cmdstat_") and isinstance(v, dict)}
        cpu_s = float((cpu or {}).get("used_cpu_user", 0.0)) + float((cpu or {}).get("used_cpu_sys", 0.0))
        return cls(sum(by_command.values()), int(stats.get("total_net_input_bytes", 0)),
                   int(stats.get("total_net_output_bytes", 0)), cpu_s, by_command)

    def minus(self, before: RedisCounters) -> RedisCounters:
        by_command = {k: v - before.by_command.get(k, 0) for k, v in self.by_command.items()}
        return RedisCounters(self.commands - before.commands, self.bytes_in - before.bytes_in,
                             self.bytes_out - before.bytes_out, self.cpu_s - before.cpu_s,
                             {k: v for k, v in by_command.items() if v})

    def plus(self, other: RedisCounters) -> RedisCounters:
        by_command = dict(self.by_command)
        for k, v in other.by_command.items():
            by_command[k] = by_command.get(k, 0) + v
        return RedisCounters(self.commands + other.commands, self.bytes_in + other.bytes_in,
                             self.bytes_out + other.bytes_out, self.cpu_s + other.cpu_s, by_command)

    def per(self, n: int, top: int = 12) -> dict[str, float]:
        """The most frequent commands, as calls per ``n`` (e.g. per tool call)."""
        ranked = sorted(self.by_command.items(), key=lambda kv: -kv[1])[:top]
        return {k: round(v / max(1, n), 2) for k, v in ranked}


async def _info(url: str, *sections: str) -> list[dict[str, Any]] | None:
    import redis.asyncio as aredis
    from redis.exceptions import ResponseError

    client = aredis.Redis.from_url(url, socket_timeout=INFO_TIMEOUT_S)
    try:
        return [await client.info(section) for section in sections]
    except ResponseError:  # INFO refused: no figures rather than a failed measurement
        return None
    finally:
        await client.aclose()


async def redis_counters(url: str) -> RedisCounters | None:
    """Commands Redis has run (INFO commandstats, every command), bytes read and written, its CPU time."""
    info = await _info(url, "commandstats", "stats", "cpu")
    return RedisCounters.from_info(*info) if info else None


async def redis_memory_mb(url: str) -> dict[str, float] | None:
    """Redis ``used_memory`` now and at its peak, in MB."""
    info = await _info(url, "memory")
    if not info:
        return None
    return {"used_mb": round(info[0]["used_memory"] / 1e6, 1), "peak_mb": round(info[0]["used_memory_peak"] / 1e6, 1)}


async def command_usec(url: str, command: str) -> float | None:
    """Redis's own mean microseconds per call of ``command`` so far (INFO commandstats)."""
    info = await _info(url, "commandstats")
    stat = info[0].get(f"cmdstat_{command}") if info else None
    return round(float(stat["usec_per_call"]), 2) if isinstance(stat, dict) else None
