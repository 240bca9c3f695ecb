"""The faults the soak injects, each a real event on real processes, and when the fleet counts as recovered.

``schedule`` (pure) draws when each fault fires: a random point of the eval's progress (a share of its
samples finished), seeded, in order, so every fault lands while samples run. ``Faults.inject`` does one:

* ``worker-kill``: SIGKILL a worker's process group, start it again under the same name (a new boot);
* ``worker-stop``: SIGSTOP a worker past its heartbeat TTL and the orchestrator's grace, then SIGCONT;
* ``redis-restart``: SIGKILL Redis and start it empty (no persistence, as shipped);
* ``redis-restart-aof``: turn Redis's append-only file on, SIGKILL it a moment later, start it from the file;
* ``container-kill``: ``docker kill`` a running sandbox container of the eval;
* ``snapshot-disk-full``: a second eval fills one worker's snapshot disk (``fill_snapshots``) and holds it
  full for a while; the soak's snapshot probes on that worker are refused meanwhile, with that reason;
* ``orchestrator-kill``: SIGKILL the ``toolfleet eval`` process, then ``toolfleet eval-retry`` its log;
* ``clock-skew``: restart a worker with its clock 40 s ahead or behind (libfaketime preloaded: the bound
  is 60 s), and after a while without the skew again.

The fleet has recovered from a fault once every worker heartbeats again, Redis answers, and the eval has
finished another sample since (``Soak.recovered``).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

KINDS = ("worker-kill", "worker-stop", "redis-restart", "redis-restart-aof", "container-kill",
         "snapshot-disk-full", "orchestrator-kill", "clock-skew")
LIBFAKETIME = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"
SKEW_S = 40  # inside the fleet's 60 s bound on clock skew (a message from further ahead is refused)


@dataclass(frozen=True)
class Planned:
    kind: str
    at: float  # fire once this share of the eval's samples has finished
    delay: float  # and this many seconds more (a random moment, not a sample's end)


def schedule(kinds: list[str], repeats: int, seed: int, first: float = 0.05, last: float = 0.7) -> list[Planned]:
    """Every kind ``repeats`` times, at random points of the eval's progress, in order. Pure."""
    rng = random.Random(f"chaos-schedule:{seed}")
    plan = [kind for kind in kinds for _ in range(repeats)]
    rng.shuffle(plan)
    points = sorted(rng.uniform(first, last) for _ in plan)
    return [Planned(kind, at, round(rng.uniform(0.0, 2.0), 2)) for kind, at in zip(plan, points, strict=True)]
