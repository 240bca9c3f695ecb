"""``python -m tests.chaos``: the chaos soak (``tests/chaos/_soak.py``), from a toolfleet checkout.

    python -m tests.chaos --bounded                    # what CI runs: 400 samples, each fault once
    python -m tests.chaos --samples 1000 --repeats 3   # the full form: every fault three times, and a baseline

Prints a table (samples, calls, faults by kind with their recovery times, lost / duplicated / leaked, wall
time against the same soak without faults) and exits 1 unless lost, duplicated and leaked are all 0 and
every fault was injected and recovered from. Needs Docker, redis-server and faketime (``toolfleet setup``).
"""

from __future__ import annotations

import argparse
import signal
import sys

from ._faults import KINDS
from ._report import run
from ._soak import Options


def _interrupted(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # SIGTERM as Ctrl-C: the soak's cleanup (workers, Redis, containers) still runs


def main(argv: list[str] | None = None) -> int:
    signal.signal(signal.SIGTERM, _interrupted)
    p = argparse.ArgumentParser(prog="python -m tests.chaos", description=__doc__.split("\n\n")[0])
    p.add_argument("--bounded", action="store_true", help="CI's form: 400 samples, each fault once, no baseline")
    p.add_argument("--samples", type=int, default=1000)
    p.add_argument("--workers", type=int, default=3)
    p.add_argument("--slots", type=int, default=6, help="sandbox slots per worker")
    p.add_argument("--seed", type=int, default=1, help="draws the samples' scripts and the faults (printed)")
    p.add_argument("--repeats", type=int, default=3, help="times each fault is injected")
    p.add_argument("--faults", default=",".join(KINDS), help=f"comma-separated subset of: {', '.join(KINDS)}")
    p.add_argument("--batch-kills", type=int, default=None, help="batch-mode evals killed between the provider "
                   "accepting a batch and the log line (default: --repeats; 0: skip the batch phase)")
    p.add_argument("--snapshot-every", type=int, default=25, help="every Nth sample snapshots and forks (0: none)")
    p.add_argument("--no-baseline", dest="baseline", action="store_false", help="skip the soak without faults")
    p.add_argument("--keep", action="store_true", help="keep the work directory (logs, orchestrator output)")
    args = p.parse_args(argv)
    kinds = tuple(k for k in args.faults.split(",") if k)
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        p.error(f"unknown fault {unknown[0]!r} (choose from: {', '.join(KINDS)})")
    if args.bounded:
        # 400 samples: on a quiet 2-core machine they take about three times what the eight faults' recoveries
        # take together (~70 s), so every fault lands while samples run (150 let the eval end first). Three
        # snapshot probes, as before.
        options = Options(samples=400, workers=3, slots=4, seed=args.seed, kinds=kinds, repeats=1, baseline=False,
                          snapshot_every=150, last=0.4,
                          batch_kills=1 if args.batch_kills is None else args.batch_kills, keep=args.keep)
    else:
        options = Options(samples=args.samples, workers=args.workers, slots=args.slots, seed=args.seed, kinds=kinds,
                          repeats=args.repeats, baseline=args.baseline, snapshot_every=args.snapshot_every,
                          batch_kills=args.repeats if args.batch_kills is None else args.batch_kills, keep=args.keep)
    return 0 if run(options) else 1


if __name__ == "__main__":
    sys.exit(main())
