"""Replay protection for signed task messages: when a message was issued, where it was sent, and
whether it was already consumed (pure checks + one Redis key per sandbox open).

Someone who can read the broker can capture a signed message and push it again. The MAC
(``_auth.message_mac``) therefore also covers the message's issue time and destination queue
(headers ``toolfleet_iat``, ``toolfleet_dest``), and a worker refuses, before Celery sees it:

* a message issued more than ``max_age`` seconds ago (default 900; ``toolfleet worker --message-max-age``).
  Saturation is not an error: the worker reports the refusal with the message's age, and an
  orchestrator whose own clock agrees that the call waited that long in the queue sends it again with a
  fresh issue time (same call id, so the claim below still runs it once);
* a message issued more than ``max_skew`` seconds in the future (default 60): the bound on clock
  skew between orchestrator and worker hosts (run NTP; a larger skew is refused and reported);
* a message whose destination is not the queue it was popped from.

Within the window a consumed message is remembered for ``ttl`` = ``max_age + max_skew`` seconds:

* a call by its claim ``toolfleet:call:<id>`` (``_call_memory``), kept at least that long: a replayed
  call is answered from memory, never run twice;
* a sandbox open by ``SET toolfleet:consumed:<id> NX EX ttl`` (one round trip, opens only): the
  second copy is refused, so a replayed ``open_sandbox`` opens nothing;
* a close is idempotent (closing a closed handle is a no-op), so it needs no memory.

Calls — the hot path — pay no extra round trip: the checks above are arithmetic on headers.
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from . import _names

__all__ = ["DEFAULT_REPLAY_WINDOW", "EXPIRED", "ReplayWindow", "first_consumption", "freshness_refusal", "message_age"]


class ReplayWindow(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    max_age: float = Field(900.0, gt=0, le=7 * 24 * 3600,
                           description="seconds a signed message stays valid after issue")
    max_skew: float = Field(60.0, ge=0, le=3600, description="seconds a message may seem to come from the future")

    def __json__(self) -> dict[str, float]:
        """How ``celery inspect stats`` shows it (kombu's JSON encoder asks for this; a worker's broker
        transport options carry the window it enforces)."""
        return {"max_age": self.max_age, "max_skew": self.max_skew}

    @property
    def ttl(self) -> int:
        """How long a consumed id must be remembered: as long as a copy could still be accepted."""
        return math.ceil(self.max_age + self.max_skew)


DEFAULT_REPLAY_WINDOW = ReplayWindow()
EXPIRED = "expired"  # how a refusal for age starts (``freshness_refusal``): the one a queue can cause


def message_age(issued: Any, now: float) -> float | None:
    """Seconds since the issue time in a message's header text (None: no usable issue time)."""
    try:
        at = float(issued)
    except (TypeError, ValueError):
        return None
    return now - at if math.isfinite(at) else None


def freshness_refusal(issued: Any, now: float, window: ReplayWindow) -> str | None:
    """Why a message issued at ``issued`` (header text, seconds since the epoch) is refused at ``now``."""
    age = message_age(issued, now)
    if age is None:
        return "no issue time"
    if -age > window.max_skew:
        return f"issued {-age:.0f} s in the future (clock skew over {window.max_skew:g} s)"
    if age > window.max_age:
        return f"{EXPIRED} (issued {age:.0f} s ago, limit {window.max_age:g} s; or clock skew)"
    return None


async def first_consumption(redis: Any, task_id: str, window: ReplayWindow) -> bool:
    """Whether this is the first time any worker consumes ``task_id`` (SET NX EX: one round trip)."""
    return bool(await redis.set(_names.consumed_key(task_id), "1", nx=True, ex=window.ttl))
