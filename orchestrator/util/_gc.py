"""Garbage-collector settings for an orchestrator holding thousands of live samples.

Each running sample keeps its messages and transcript alive, so the heap grows to millions of
long-lived objects (~600 tracked containers per 10-turn react sample; 5,000 samples: ~3M).
A collection's pause is proportional to the objects it scans — about 1 µs each on a loaded 2-core
machine (``TOOLFLEET_LOOP_WATCHDOG`` times them) — and it stops the event loop for all samples at once.

* CPython's defaults keep triggering full (generation 2) collections over the whole growing heap:
  seconds each, and twice the CPU per turn.
* Large young generations are no better: with (100_000, 50, …) every collection of generation 1
  scanned up to 50 × 100,000 survivors — the multi-second stalls of ``bench agents`` at 5,000 samples.

So generation 0 stays small (a pause scans ~5,000 objects: a few ms), and an object that survives
one generation-0 collection is *tenured*: moved to the permanent generation (``gc.freeze()``)
straight away, where no automatic collection scans it again. Reference counting still frees it
when its sample lets go; only a reference cycle among tenured objects waits for ``restore()``.

Why not let survivors pass through generation 1 as CPython does: at 5,000 samples (``toolfleet
bench agents --samples 5000``) its collections were 76 pauses of median 82 ms, max 238 ms — the
loop-lag p99 (21 ms) and most of the max — and over the whole run they found 200 unreachable
objects. Tenuring after generation 0 took the lag p99 to 6–7 ms, and after the run a full
collection found 26 objects left in cycles (5,000 samples). A full collection of generation 2
was already practically never triggered here (its threshold is 100,000 generation-1
collections), so what reached generation 2 was never scanned either: tenuring skips one
intermediate scan, not a safety net.
"""

from __future__ import annotations

import gc
from typing import Any

MANY_SAMPLES_THRESHOLDS = (5_000, 10, 100_000)


class GcTuning:
    """The collector tuned for many samples; ``restore()`` undoes it (thresholds, tenuring)."""

    def __init__(self) -> None:
        self.previous = gc.get_threshold()
        self.tenured_collections = 0
        self._active = False

    def install(self) -> GcTuning:
        if not self._active:
            gc.set_threshold(*MANY_SAMPLES_THRESHOLDS)
            gc.callbacks.append(self._tenure)
            self._active = True
        return self

    def restore(self) -> int:
        """Puts the previous thresholds back and collects what tenuring kept; returns that count."""
        if not self._active:
            return 0
        self._active = False
        if self._tenure in gc.callbacks:
            gc.callbacks.remove(self._tenure)
        gc.set_threshold(*self.previous)
        gc.unfreeze()
        return gc.collect()

    def _tenure(self, phase: str, info: dict[str, Any]) -> None:
        # Runs after the collection has finished, so the survivors are all that is left to move.
        if phase == "stop" and info.get("generation") == 0:
            gc.freeze()
            self.tenured_collections += 1


def tune_gc_for_many_samples() -> GcTuning:
    """Tune the collector for many concurrent samples in this process; the handle can restore it.

    Calling it again while a tuning is active returns that one, so nothing is installed twice.
    """
    for callback in gc.callbacks:
        owner = getattr(callback, "__self__", None)
        if isinstance(owner, GcTuning):
            return owner
    return GcTuning().install()
