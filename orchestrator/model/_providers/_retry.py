"""Retry policy for model calls: bounded count, bounded total time, exponential backoff + jitter.

Pure functions so the schedule can be tested by tables; the loop that uses them is in ``Model``.
"""

from __future__ import annotations

import email.utils
import random
import time
from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, Field


class RetryPolicy(BaseModel):
    """How ``Model.generate`` retries rate limits (429), server errors (5xx) and timeouts."""

    model_config = ConfigDict(extra="forbid")

    max_retries: int = Field(default=6, ge=0)  # ``GenerateConfig.max_retries`` overrides this
    initial_delay: float = Field(default=1.0, ge=0)  # seconds before the first retry (pre-jitter)
    multiplier: float = Field(default=2.0, ge=1)
    max_delay: float = Field(default=60.0, ge=0)  # cap on one computed backoff
    max_elapsed: float = Field(default=600.0, ge=0)  # give up rather than exceed this in total


def backoff_delay(policy: RetryPolicy, retry: int, retry_after: float | None = None,
                  rng: random.Random | None = None) -> float:
    """Seconds to wait before retry number ``retry`` (0-based).

    A server's Retry-After wins over the computed backoff (it knows its own rate window); it is not
    capped by ``max_delay`` but the caller still gives up if it would exceed ``max_elapsed``.
    Otherwise "equal jitter": half the exponential step fixed, half random, so thousands of samples
    hitting one rate limit do not retry in lock-step yet never retry immediately.
    """
    if retry_after is not None:
        return max(0.0, retry_after)
    step = min(policy.max_delay, policy.initial_delay * policy.multiplier**retry)
    return step / 2 + (rng or random).uniform(0, step / 2)


def parse_retry_after(headers: Mapping[str, str] | None, now: float | None = None) -> float | None:
    """Seconds from ``retry-after-ms`` / ``retry-after`` (delta seconds or an HTTP date), if present."""
    if not headers:
        return None
    raw_ms = headers.get("retry-after-ms")
    if raw_ms is not None:
        try:
            return max(0.0, float(raw_ms) / 1000)
        except ValueError:
            pass
    raw = headers.get("retry-after")
    if raw is None:
        return None
    try:
        return max(0.0, float(raw))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(raw).timestamp()
    except (TypeError, ValueError, IndexError):
        return None
    return max(0.0, when - (time.time() if now is None else now))
