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


class _Throttled(Exception):
    def __init__(self, status_code: int) -> None:
        super().__init__(f"Error code: {status_code}")
        self.status_code = status_code


async def test_model_retries_are_counted_live_and_kept_as_events(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Every request is refused twice (a 429, then a 500) before it succeeds: the display has counted
    both retries *while the call is still retrying*, each is an event, and nothing is counted twice."""
    from orchestrator.dataset import Sample
    from orchestrator.eval import Task, eval_async
    from orchestrator.model import ModelOutput
    from orchestrator.model._model import Model, ModelAPI
    from orchestrator.model._providers._retry import RetryPolicy
    from orchestrator.scorer import includes

    seen: dict[str, EvalProgress] = {}
    live_counts: list[tuple[int, int]] = []

    class Capture:
        def __init__(self, progress: EvalProgress) -> None:
            seen["progress"] = progress

        def __enter__(self) -> Capture:
            return self

        def __exit__(self, *exc: object) -> None:
            pass

    class ThrottledAPI(ModelAPI):
        def __init__(self) -> None:
            super().__init__("throttled")
            self.provider = "test"
            self.attempts = 0

        async def generate(self, input, tools, tool_choice, config):  # type: ignore[no-untyped-def]
            self.attempts += 1
            if self.attempts % 3 == 1:
                raise _Throttled(429)
            if self.attempts % 3 == 2:
                raise _Throttled(500)
            p = seen["progress"]
            live_counts.append((p.model_retries, p.rate_limits))  # before this call's ModelEvent exists
            return ModelOutput.from_content("throttled", "x")

        def should_retry(self, ex: BaseException) -> bool:
            return isinstance(ex, _Throttled)

    model = Model(ThrottledAPI(), retry=RetryPolicy(initial_delay=0, max_delay=0))
    task = Task(dataset=[Sample(input=f"q{i}", target="x", id=i) for i in range(3)], scorer=includes())
    [log] = await eval_async(task, model, log_dir=tmp_path, max_samples=1, display=Capture)
    assert log.status == "success"
    assert live_counts == [(2, 1), (4, 2), (6, 3)]
    progress = seen["progress"]
    assert (progress.model_retries, progress.rate_limits) == (6, 3)  # not again from the ModelEvents
    for s in log.samples:
        retries = [e for e in s.events if e.event == "info" and e.source == "model_retry"]
        assert [e.data["status"] for e in retries] == [429, 500]
        [model_event] = [e for e in s.events if e.event == "model"]
        assert model_event.retries == 2 and all(e.span_id == model_event.span_id for e in retries)


def test_samples_waiting_for_a_sandbox_slot_are_counted_and_shown() -> None:
    import io

    from rich.console import Console

    from orchestrator.eval._display import RichDisplay
    from orchestrator.log import InfoEvent

    progress = EvalProgress(task="t", model="m", log="L", total=3)
    for waiting in (True, True, False):
        progress.on_event(InfoEvent(source="sandbox_wait", data={"waiting": waiting}))
    assert progress.waiting == 1 and progress.snapshot()["waiting_for_slot"] == 1
    out = io.StringIO()
    Console(file=out, width=200, color_system=None).print(RichDisplay(progress, file=io.StringIO()).render())
    assert "1 sample(s) waiting for a sandbox slot" in out.getvalue()
    for _ in range(2):  # a stray end never makes the count negative
        progress.on_event(InfoEvent(source="sandbox_wait", data={"waiting": False}))
    assert progress.waiting == 0
