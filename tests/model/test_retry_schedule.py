"""The retry schedule and Retry-After parsing, as tables (pure functions)."""

from __future__ import annotations

import email.utils
import random

import pytest

from orchestrator.model import RetryPolicy
from orchestrator.model._providers._retry import backoff_delay, parse_retry_after

POLICY = RetryPolicy(initial_delay=1.0, multiplier=2.0, max_delay=10.0)


@pytest.mark.parametrize(("retry", "low", "high"), [(0, 0.5, 1.0), (1, 1.0, 2.0), (2, 2.0, 4.0), (3, 4.0, 8.0),
                                                    (4, 5.0, 10.0), (20, 5.0, 10.0)])
def test_exponential_backoff_with_equal_jitter_is_capped(retry: int, low: float, high: float) -> None:
    rng = random.Random(retry)
    delays = [backoff_delay(POLICY, retry, rng=rng) for _ in range(200)]
    assert all(low <= d <= high for d in delays)
    assert len(set(delays)) > 1  # jittered, not lock-step


@pytest.mark.parametrize(("retry_after", "expected"), [(0.0, 0.0), (3.5, 3.5), (120.0, 120.0), (-1.0, 0.0)])
def test_retry_after_wins_over_computed_backoff(retry_after: float, expected: float) -> None:
    assert backoff_delay(POLICY, 5, retry_after) == expected


NOW = 1_800_000_000.0


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        (None, None),
        ({}, None),
        ({"retry-after": "7"}, 7.0),
        ({"retry-after": "1.5"}, 1.5),
        ({"retry-after-ms": "250"}, 0.25),
        ({"retry-after-ms": "250", "retry-after": "9"}, 0.25),
        ({"retry-after": email.utils.formatdate(NOW + 30, usegmt=True)}, 30.0),
        ({"retry-after": email.utils.formatdate(NOW - 30, usegmt=True)}, 0.0),
        ({"retry-after": "soon"}, None),
    ],
)
def test_parse_retry_after(headers, expected) -> None:
    assert parse_retry_after(headers, now=NOW) == expected


def test_policy_rejects_unknown_fields() -> None:
    with pytest.raises(ValueError, match="max_retry"):
        RetryPolicy(max_retry=3)
