"""What an operator measures on a running fleet: ``toolfleet bench dispatch|fanout --broker URL``.

These start nothing: they open sandboxes on the fleet behind ``--broker`` (or ``$TOOLFLEET_BROKER``),
signed with the fleet secret as ``toolfleet eval`` is, and report its figures. The benchmark suite
itself (workloads that start their own Redis and workers, baselines, ``bench all``) lives in a toolfleet
checkout's ``tests/benchmarks/``; its ``dispatch`` and ``fanout`` run these same measurements.

``FLEET_MEASUREMENTS`` maps a ``toolfleet bench`` name to its module (``add_arguments(parser)`` and
``async run(args) -> dict``, as a checkout's workloads).
"""

from __future__ import annotations

from ._redis_info import RedisCounters, command_usec, redis_counters, redis_memory_mb
from ._timing import LoopLag, percentile_ms

FLEET_MEASUREMENTS = {"dispatch": "orchestrator.bench._round_trip", "fanout": "orchestrator.bench._stages"}

__all__ = ["FLEET_MEASUREMENTS", "LoopLag", "RedisCounters", "command_usec", "percentile_ms", "redis_counters",
           "redis_memory_mb"]
