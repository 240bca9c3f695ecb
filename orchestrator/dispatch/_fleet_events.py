"""Reading the fleet's events (``workers.fleet.FleetEvents``) on the orchestrator side (pure; table-tested).

A worker that rejects a task message (wrong secret, clock skew) or cannot store a result (Redis at
``maxmemory``) PUBLISHes an event; the result listener hands each one here. An event matters only
for a task id this dispatcher waits for, and only when signed with the fleet secret: then a rejection
becomes the one line the eval stops with (unless the message only aged out in a long queue: its calls
are sent again), and a store failure the reason a wait reports if it runs out. An unsigned event (anyone
may PUBLISH) is advisory: at most the reason a wait names if it runs out.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from workers.fleet import Keyring, verify_event

__all__ = ["FleetEvent", "expired_in_queue", "parse_event", "rejection_line", "store_failed_line"]


@dataclass(frozen=True)
class FleetEvent:
    kind: str
    host: str
    task_id: str
    reason: str = ""  # rejected: why
    error: str = ""  # store_failed: Redis's answer
    age: float | None = None  # rejected as expired: the message's age by the worker's clock
    signed: bool = False  # its MAC verified under this orchestrator's fleet secret (else it is advisory)


def parse_event(data: Any, keyring: Keyring | None = None) -> FleetEvent | None:
    """A fleet event from its JSON, or None for anything else (untrusted: anyone may PUBLISH); signed
    when its MAC verifies under ``keyring``."""
    try:
        raw = json.loads(data)
    except (TypeError, ValueError):
        return None
    if not isinstance(raw, dict) or not all(isinstance(raw.get(k), str) for k in ("kind", "host", "task_id")):
        return None
    text = {k: str(raw.get(k) or "")[:300] for k in ("reason", "error")}
    try:
        age: float | None = float(raw["age"]) if isinstance(raw.get("age"), str | int | float) else None
    except ValueError:
        age = None
    if age is not None and not math.isfinite(age):
        age = None
    return FleetEvent(kind=raw["kind"], host=raw["host"][:200], task_id=raw["task_id"], age=age,
                      signed=keyring is not None and verify_event(keyring, raw), **text)


def expired_in_queue(event: FleetEvent, waited: float, max_skew: float) -> bool:
    """Whether a rejection says the message aged out in the queue (send it again), not that the clocks
    differ (a misconfiguration): the worker measured its age, this host measured ``waited`` since it
    published it; with clocks within ``max_skew`` of each other the two agree to that much."""
    return (event.kind == "rejected" and event.reason.startswith("stale: expired") and event.age is not None
            and waited >= event.age - max_skew)


def rejection_line(event: FleetEvent) -> str:
    """The one line an eval stops with when a worker rejects this orchestrator's messages."""
    reason = event.reason
    if reason == "unauthenticated":
        cause = ("its fleet secret differs from this orchestrator's: set the same TOOLFLEET_SECRET (or "
                 "TOOLFLEET_SECRET_FILE) on both")
    elif reason.startswith("stale:"):
        cause = (f"{reason[len('stale:'):].strip()}: the clocks of this host and the worker host differ, or the "
                 "message waited too long in the queue: sync clocks (NTP)")
    elif reason == "no fleet secret on this worker":
        cause = "the worker has no fleet secret: start it with TOOLFLEET_SECRET set"
    else:
        cause = reason or "no reason given"
    return f"Worker host '{event.host}' rejects this orchestrator's messages ({reason}): {cause}."


def store_failed_line(event: FleetEvent) -> str:
    return (f"worker host '{event.host}' finished it but the broker would not store the result "
            f"({event.error}); the worker keeps it and retries")
