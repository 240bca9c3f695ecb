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


def test_rich_panel_shows_the_notice_and_model_retries() -> None:
    import io

    from rich.console import Console

    from orchestrator.eval._display import RichDisplay

    progress = EvalProgress(task="t", model="m", log="L", total=2, notice="resuming L (1 samples already done)")
    progress.on_event(ModelEvent(model="m", retries=4, error="429 Too Many Requests"))
    out = io.StringIO()
    Console(file=out, width=200, color_system=None).print(RichDisplay(progress, file=io.StringIO()).render())
    text = out.getvalue()
    assert "resuming L (1 samples already done)" in text
    assert "model API retries 4" in text and "rate limited 1" in text
