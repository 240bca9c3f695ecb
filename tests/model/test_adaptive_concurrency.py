"""Adaptive concurrency: the AIMD controller by tables, the limiter on requests in flight, and a model
under a 429 storm from a real SDK against a local server."""

from __future__ import annotations

import asyncio

import pytest

from orchestrator.log import InfoEvent, Transcript, bind_transcript
from orchestrator.model import RetryPolicy, get_model
from orchestrator.model._concurrency import AimdState, ConnectionLimiter, aimd_step
from tests.support.anthropic_server import AnthropicServer, message, rate_limited
from tests.support.waits import until

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize(
    ("window", "epoch", "outcome", "sent", "expected_window", "expected_epoch"),
    [
        (10.0, 0, "overload", 0, 5.0, 1),  # halve
        (5.0, 1, "overload", 0, 5.0, 1),  # an overload from before the last decrease: same storm, ignored
        (5.0, 1, "overload", 1, 2.0, 2),  # a fresh one: halve again (floored)
        (1.0, 3, "overload", 3, 1.0, 4),  # never below the floor
        (3.0, 0, "overload", 0, 1.0, 1),
        (4.0, 0, "success", 0, 4.25, 0),  # +1/window per success: +1 per window of successes
        (9.9, 0, "success", 0, 10.0, 0),  # never above the ceiling
        (10.0, 0, "success", 0, 10.0, 0),
        (6.0, 2, "neutral", 2, 6.0, 2),  # other errors and cancellations move nothing
    ],
)
def test_aimd_step(window, epoch, outcome, sent, expected_window, expected_epoch) -> None:
    after = aimd_step(AimdState(window=window, ceiling=10, epoch=epoch), outcome, sent)
    assert (pytest.approx(after.window), after.epoch) == (expected_window, expected_epoch)


@pytest.mark.parametrize(("window", "limit"), [(4.99, 4), (5.0, 5), (0.4, 1), (12.0, 10)])
def test_limit_is_the_whole_window_within_bounds(window: float, limit: int) -> None:
    assert AimdState(window=window, ceiling=10).limit == limit


def test_a_halved_window_grows_back_by_about_one_per_window_of_successes() -> None:
    state = aimd_step(AimdState(window=8.0, ceiling=8), "overload", 0)
    limits = []
    for _ in range(4 + 5):
        state = aimd_step(state, "success", state.epoch)
        limits.append(state.limit)
    assert limits == [4, 4, 4, 4, 5, 5, 5, 5, 5]  # 4 -> 5 after five successes, 5 -> 6 after six more


async def test_limiter_bounds_in_flight_to_the_current_limit_and_serves_in_order() -> None:
    limiter = ConnectionLimiter(4)
    epochs = [await limiter.acquire() for _ in range(4)]
    assert limiter.in_flight == 4 and epochs == [0, 0, 0, 0]
    change = limiter.release(0, "overload")  # 4 -> 2: three still in flight, nobody may start
    assert change is not None and (change.limit, change.reason) == (2, "overload")
    order: list[int] = []

    async def waiter(n: int) -> None:
        await limiter.acquire()
        order.append(n)

    tasks = [asyncio.create_task(waiter(n)) for n in range(3)]
    await until(lambda: len(limiter._waiters) == 3, "the three to queue")
    assert order == [] and limiter.in_flight == 3
    assert limiter.release(0, "overload") is None  # same storm: no second halving
    limiter.release(0, "neutral")  # in flight 1 < 2: one waiter starts
    await until(lambda: order, "a waiter to start")
    assert order == [0] and limiter.in_flight == 2 and len(limiter._waiters) == 2
    tasks[2].cancel()  # a cancelled waiter never holds a slot
    limiter.release(0, "success")
    await until(lambda: len(order) == 2 and tasks[2].done(), "the next waiter to start, the cancelled one to end")
    assert order == [0, 1] and limiter.in_flight == 2 and len(limiter._waiters) == 0
    await asyncio.gather(*tasks, return_exceptions=True)
    assert limiter.report().lowest == 2 and limiter.report().overloads == 2


async def test_a_429_storm_shrinks_connections_and_success_grows_them_back() -> None:
    """Sixteen concurrent requests against a server that answers the first six with 429s."""
    with AnthropicServer() as server:
        server.enqueue(*[rate_limited("0") for _ in range(6)], *[message("ok") for _ in range(16)])
        model = get_model("anthropic/claude-test", base_url=server.base_url, api_key="k", memoize=False,
                          max_connections=4, retry=RetryPolicy(max_retries=20, initial_delay=0.01, max_delay=0.05))
        t = Transcript()
        with bind_transcript(t):
            await asyncio.gather(*(model.generate(f"q{i}") for i in range(16)))
        limiter = model.connections
        report = limiter.report()
        assert report.ceiling == 4 and report.overloads >= 1 and report.lowest < 4
        reasons = [c.reason for c in report.trace]
        assert reasons[0] == "overload" and "success" in reasons  # shrank, then grew back
        assert report.final > report.lowest
        events = [e.data for e in t.find(InfoEvent) if e.source == "model_connections"]
        assert [e["connections"] for e in events] == [c.limit for c in report.trace]
        assert all(e["max_connections"] == 4 and e["model"] == "anthropic/claude-test" for e in events)
        await model.aclose()


async def test_the_live_display_shows_the_current_limit_and_cost() -> None:
    import io

    from orchestrator.eval._display import RichDisplay
    from orchestrator.eval._progress import EvalProgress
    from orchestrator.log import ModelEvent
    from orchestrator.model import ModelUsage

    limiter = ConnectionLimiter(10)
    await limiter.acquire()
    limiter.release(0, "overload")
    progress = EvalProgress(task="t", model="anthropic/claude-test", total=1, limiter=limiter)
    progress.on_event(ModelEvent(model="m", usage=ModelUsage(total_tokens=5, total_cost=0.25)))
    assert progress.connections == "5/10" and progress.snapshot()["connections"] == "5/10"
    assert progress.snapshot()["cost"] == 0.25 and progress.cost_text == "$0.2500"
    progress.on_event(ModelEvent(model="m", usage=ModelUsage(total_tokens=5)))
    assert progress.cost_text == "$0.2500 + unknown (no price for the model)"
    out = io.StringIO()
    display = RichDisplay(progress, file=out)
    display.console.print(display.render())
    shown = out.getvalue()
    assert "connections" in shown and "5/10" in shown and "$0.2500" in shown
