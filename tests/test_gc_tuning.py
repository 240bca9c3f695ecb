"""The collector tuning of an orchestrator with many samples (orchestrator/util/_gc.py): survivors of a
generation-0 collection are tenured (frozen) so no later automatic collection scans them again, and
restore() puts everything back and collects the cycles that tenuring kept."""

from __future__ import annotations

import gc
import weakref

from orchestrator.util import GcTuning, tune_gc_for_many_samples
from orchestrator.util._gc import MANY_SAMPLES_THRESHOLDS


class _Node:
    def __init__(self) -> None:
        self.other: _Node | None = None


def _cycle() -> _Node:
    a, b = _Node(), _Node()
    a.other, b.other = b, a
    return a


def test_survivors_of_generation_0_are_tenured_and_restore_collects_their_cycles() -> None:
    before_thresholds, before_callbacks = gc.get_threshold(), list(gc.callbacks)
    gc.collect()
    tuning = tune_gc_for_many_samples()
    try:
        assert gc.get_threshold() == MANY_SAMPLES_THRESHOLDS
        assert tuning.previous == before_thresholds
        held = _cycle()  # a cycle its sample still holds at the collection: it survives and is tenured
        alive = weakref.ref(held)
        gc.collect(0)
        assert tuning.tenured_collections >= 1
        assert gc.get_freeze_count() > 0
        del held  # the sample lets go; the cycle keeps itself alive
        gc.collect()  # a collection of every generation no longer scans the tenured cycle
        assert alive() is not None
        # Garbage that dies young is still collected at once.
        young = weakref.ref(_cycle())
        gc.collect(0)
        assert young() is None
    finally:
        collected = tuning.restore()
    assert alive() is None and collected >= 2  # restore() collected the tenured cycle
    assert gc.get_freeze_count() == 0
    assert gc.get_threshold() == before_thresholds and gc.callbacks == before_callbacks


def test_tuning_twice_installs_once_and_restore_is_idempotent() -> None:
    before_callbacks = list(gc.callbacks)
    first = tune_gc_for_many_samples()
    try:
        second = tune_gc_for_many_samples()
        assert second is first
        assert sum(isinstance(getattr(cb, "__self__", None), GcTuning) for cb in gc.callbacks) == 1
    finally:
        first.restore()
    assert first.restore() == 0  # nothing left to undo
    assert gc.callbacks == before_callbacks
