"""Retries of model calls: the policy and schedule are the code base's one (``orchestrator.util._retry``);
what is the providers' own is reading a server's Retry-After."""

from __future__ import annotations

import email.utils
import time
from collections.abc import Mapping

from orchestrator.util._retry import RetryPolicy, backoff_delay

__all__ = ["RetryPolicy", "backoff_delay", "parse_retry_after"]


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
