"""The one retry helper (``orchestrator/util/_retry.py``), as tables: the schedule each retry loop of the
code base waits by, the policy's count and time bounds, and ``retry`` (what it retries, what it raises).
A fake clock and sleep stand in for time: the schedule is asserted, never waited for."""

from __future__ import annotations

import asyncio
import math
import random
from collections.abc import Iterator

import pytest

from orchestrator.dispatch._publisher import OUTAGE_RETRY
from orchestrator.dispatch._results import RECONNECT
from orchestrator.eval._eval_set import MAX_RETRY_WAIT_S, retry_passes
from orchestrator.util._retry import Backoff, RetryPolicy, backoff_delay, retry
from workers.fleet._patience import REDIS_RESTART


class FakeTime:
    """A clock that only the fake sleep moves; the sleeps are recorded."""

    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def clock(self) -> float:
        return self.now

    async def sleep(self, delay: float) -> None:
        self.slept.append(delay)
        self.now += delay

    def backoff(self, policy: RetryPolicy) -> Backoff:
        return Backoff(policy, clock=self.clock, sleep=self.sleep)


async def _schedule(policy: RetryPolicy, n: int) -> list[float]:
    time = FakeTime()
    backoff = time.backoff(policy)
    for _ in range(n):
        assert await backoff.wait()
    return time.slept


STEPS = [0.05, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 1.0]  # what the hand-written loops waited (50 ms doubling to 1 s)


@pytest.mark.parametrize(
    ("policy", "delays"),
    [
        (OUTAGE_RETRY.model_copy(update={"max_elapsed": math.inf}), STEPS),  # the dispatcher's publisher
        (REDIS_RESTART.model_copy(update={"max_elapsed": math.inf}), STEPS),  # a worker's Redis writes
        (RECONNECT, STEPS),  # the result listener's reconnects
        (retry_passes(8, 30.0), [30.0, 60.0, 120.0, 240.0, 480.0, MAX_RETRY_WAIT_S, MAX_RETRY_WAIT_S, 600.0]),
        (retry_passes(3, 0.0), [0.0, 0.0, 0.0]),
        (retry_passes(2, -5.0), [0.0, 0.0]),  # a negative wait waits nothing, as asyncio.sleep did
        (RetryPolicy(max_retries=None, max_elapsed=math.inf, initial_delay=1.0, multiplier=1.0, jitter=0.0), [1.0] * 4),
    ],
    ids=["publisher", "patiently", "listener", "eval_set", "eval_set_zero", "eval_set_negative", "constant"],
)
async def test_each_loop_keeps_its_schedule(policy: RetryPolicy, delays: list[float]) -> None:
    assert await _schedule(policy, len(delays)) == pytest.approx(delays)


@pytest.mark.parametrize(
    ("policy", "number", "expected"),
    [
        (RetryPolicy(initial_delay=0.05, max_delay=1.0, jitter=0.0), 5000, 1.0),  # 2.0**5000 overflows: capped
        (RetryPolicy(initial_delay=0.0, max_delay=1.0, jitter=0.0), 5000, 0.0),
        (RetryPolicy(initial_delay=2.0, multiplier=3.0, max_delay=100.0, jitter=0.0), 2, 18.0),
    ],
)
def test_exact_schedule_table(policy: RetryPolicy, number: int, expected: float) -> None:
    assert backoff_delay(policy, number) == expected


@pytest.mark.parametrize(("jitter", "low", "high"), [(0.5, 4.0, 8.0), (0.25, 6.0, 8.0), (1.0, 0.0, 8.0)])
def test_jitter_is_the_random_share_of_the_step(jitter: float, low: float, high: float) -> None:
    policy = RetryPolicy(initial_delay=1.0, multiplier=2.0, max_delay=100.0, jitter=jitter)
    rng = random.Random(7)
    delays = [backoff_delay(policy, 3, rng=rng) for _ in range(300)]
    assert all(low <= d <= high for d in delays)
    assert min(delays) < low + (high - low) / 4 and max(delays) > high - (high - low) / 4  # spread over the range


def test_default_jitter_draws_as_equal_jitter_did() -> None:
    policy = RetryPolicy(initial_delay=1.0, multiplier=2.0, max_delay=10.0)
    ours, before = random.Random(3), random.Random(3)
    for number in range(6):
        step = min(10.0, 2.0**number)
        assert backoff_delay(policy, number, rng=ours) == step / 2 + before.uniform(0, step / 2)


async def test_the_count_bound_gives_up_at_once() -> None:
    time = FakeTime()
    backoff = time.backoff(RetryPolicy(max_retries=2, initial_delay=1.0, jitter=0.0))
    assert [await backoff.wait() for _ in range(3)] == [True, True, False]
    assert time.slept == [1.0, 2.0] and backoff.retries == 2


async def test_the_time_bound_counts_the_wait_it_would_add() -> None:
    time = FakeTime()
    backoff = time.backoff(RetryPolicy(max_retries=None, max_elapsed=10.0, initial_delay=1.0, jitter=0.0))
    assert await backoff.wait() and await backoff.wait() and await backoff.wait()  # 1 + 2 + 4 = 7 s so far
    assert backoff.delay() is None  # 7 + 8 > 10
    time.now += 100.0
    assert backoff.delay(count_elapsed=False) == 8.0  # the time so far not counted (a provider batch)
    assert backoff.delay(retry_after=30.0, count_elapsed=False) is None  # the wait itself still is


async def test_retry_after_wins_but_not_past_the_bound() -> None:
    time = FakeTime()
    backoff = time.backoff(RetryPolicy(max_elapsed=60.0, initial_delay=1.0, jitter=0.0))
    assert backoff.delay(retry_after=45.0) == 45.0
    assert backoff.delay(retry_after=61.0) is None


async def test_reset_starts_the_schedule_over() -> None:
    time = FakeTime()
    backoff = time.backoff(RetryPolicy(max_retries=3, max_elapsed=5.0, initial_delay=1.0, jitter=0.0))
    assert await backoff.wait() and await backoff.wait()
    time.now += 60.0
    backoff.reset()
    assert backoff.retries == 0 and backoff.delay() == 1.0


async def test_retry_returns_after_transient_errors_and_says_so_before_each_wait() -> None:
    time = FakeTime()
    results: Iterator[Exception | str] = iter([ConnectionError("down"), ConnectionError("still down"), "ok"])
    seen: list[tuple[str, float]] = []

    async def op() -> str:
        item = next(results)
        if isinstance(item, Exception):
            raise item
        return item

    backoff = time.backoff(REDIS_RESTART.model_copy(update={"max_elapsed": 30.0}))
    got = await retry(op, backoff, (ConnectionError,), on_retry=lambda exc, delay: seen.append((str(exc), delay)))
    assert got == "ok" and time.slept == [0.05, 0.1]
    assert seen == [("down", 0.05), ("still down", 0.1)]


async def test_retry_raises_the_last_error_when_the_bound_would_pass() -> None:
    time = FakeTime()
    calls = 0

    async def op() -> None:
        nonlocal calls
        calls += 1
        raise ConnectionError(f"down {calls}")

    with pytest.raises(ConnectionError, match="down 5"):
        await retry(op, time.backoff(REDIS_RESTART.model_copy(update={"max_elapsed": 1.0})), (ConnectionError,))
    assert time.slept == [0.05, 0.1, 0.2, 0.4]  # 0.75 s; 0.75 + 0.8 would pass 1 s


async def test_retry_lets_other_errors_and_cancellation_through_at_once() -> None:
    time = FakeTime()

    async def wrong() -> None:
        raise ValueError("not transient")

    with pytest.raises(ValueError, match="not transient"):
        await retry(wrong, time.backoff(REDIS_RESTART), (ConnectionError, OSError))

    async def cancelled() -> None:
        raise asyncio.CancelledError

    with pytest.raises(asyncio.CancelledError):
        await retry(cancelled, time.backoff(REDIS_RESTART))  # retry_on defaults to Exception: not this
    assert time.slept == []
