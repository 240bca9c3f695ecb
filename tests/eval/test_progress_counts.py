"""The live counters count model API retries and rate limits from the model events a sample records."""

from __future__ import annotations

from orchestrator.eval import EvalProgress
from orchestrator.log import ModelEvent


def test_model_retries_and_rate_limits_are_counted() -> None:
    progress = EvalProgress()
    progress.on_event(ModelEvent(model="m", retries=3))
    progress.on_event(ModelEvent(model="m", retries=2, error="RateLimitError: Error code: 429"))
    progress.on_event(ModelEvent(model="m"))
    assert (progress.model_retries, progress.rate_limits) == (5, 1)
    snap = progress.snapshot()
    assert snap["model_retries"] == 5 and snap["rate_limits"] == 1
