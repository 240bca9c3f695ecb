"""Garbage-collector settings for an orchestrator holding thousands of live samples.

Each running sample keeps its messages and transcript alive, so the heap grows to millions of
long-lived objects (~700 tracked containers per finished 10-turn react sample; 5,000 samples: ~4M).
A collection's pause is proportional to the objects it scans — about 1 µs each on a loaded 2-core
machine (``TOOLFLEET_LOOP_WATCHDOG`` times them) — and it stops the event loop for all samples at once.

* CPython's defaults keep triggering full (generation 2) collections over the whole growing heap:
  seconds each, and twice the CPU per turn.
* Large young generations are no better: with (100_000, 50, …) every collection of generation 1
  scanned up to 50 × 100,000 survivors — the multi-second stalls of ``bench agents`` at 5,000 samples.

So the young generations stay small — a generation-0 pause scans ~5,000 objects (a few ms: the
frequent one, so it decides the loop-lag p99), a generation-1 pause at most ~100,000 (rare: it
decides the max) — and a full collection is practically never triggered (after 100,000
generation-1 collections, as rare as before): reference counting frees almost everything promptly,
and an agent step makes no reference cycles that live long enough to reach the old generation.
Measured at 1,500 samples (load average ~80): generation-0 pauses median 11.7 ms with (5,000, 20)
against 49.9 ms with (10,000, 10), the same GC CPU in all; at 5,000 samples the base's
(100,000, 50) made one generation-1 collection of 3.5 s CPU (14.7 s wall on that machine).

Generation 1 is collected every 10 generation-0 collections, not 20: CPython counts *net*
allocations (every old object freed — a finished sample's state — takes one off the count), so while
samples finish as others run the young generations hold more than the thresholds say. At 5,000
samples a generation-1 collection found 150,000–240,000 objects with (5,000, 20) and typically
85,000–130,000 with (5,000, 10) — the longest pauses, halved; the total GC CPU is the same.
"""

from __future__ import annotations

import gc

MANY_SAMPLES_THRESHOLDS = (5_000, 10, 100_000)


def tune_gc_for_many_samples() -> tuple[int, int, int]:
    """Apply thresholds suited to many concurrent samples; returns the previous ones."""
    previous = gc.get_threshold()
    gc.set_threshold(*MANY_SAMPLES_THRESHOLDS)
    return previous
