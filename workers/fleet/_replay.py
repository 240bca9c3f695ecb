"""Replay protection for signed task messages: when a message was issued, where it was sent, and
whether it was already consumed (pure checks + one Redis key per sandbox open).

Someone who can read the broker can capture a signed message and push it again. The MAC
(``_auth.message_mac``) therefore also covers the message's issue time and destination queue
(headers ``toolfleet_iat``, ``toolfleet_dest``), and a worker refuses, before Celery sees it:

* a message issued more than ``max_age`` seconds ago (default 900: a queued call may wait for a busy
  fleet that long; the orchestrator gave up on it by then unless its timeout is longer);
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

__all__ = ["DEFAULT_REPLAY_WINDOW", "ReplayWindow", "first_consumption", "freshness_refusal"]


class ReplayWindow(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    max_age: float = Field(900.0, gt=0, le=7 * 24 * 3600,
                           description="seconds a signed message stays valid after issue")
    max_skew: float = Field(60.0, ge=0, le=3600, description="seconds a message may seem to come from the future")

    @property
    def ttl(self) -> int:
        """How long a consumed id must be remembered: as long as a copy could still be accepted."""
        return math.ceil(self.max_age + self.max_skew)


DEFAULT_REPLAY_WINDOW = ReplayWindow()


def freshness_refusal(issued: Any, now: float, window: ReplayWindow) -> str | None:
    """Why a message issued at ``issued`` (header text, seconds since the epoch) is refused at ``now``."""
    try:
        at = float(issued)
    except (TypeError, ValueError):
        return "no issue time"
    if not math.isfinite(at):
        return "no issue time"
    if at - now > window.max_skew:
        return f"issued {at - now:.0f} s in the future (clock skew over {window.max_skew:g} s)"
    if now - at > window.max_age:
        return f"expired (issued {now - at:.0f} s ago, limit {window.max_age:g} s; or clock skew)"
    return None


async def first_consumption(redis: Any, task_id: str, window: ReplayWindow) -> bool:
    """Whether this is the first time any worker consumes ``task_id`` (SET NX EX: one round trip)."""
    return bool(await redis.set(_names.consumed_key(task_id), "1", nx=True, ex=window.ttl))
