"""The worker's log of rejected broker items (junk, unsigned or foreign messages, unauthenticated cancels)."""

from __future__ import annotations

import threading
import time

import structlog

__all__ = ["RejectLog", "rejects"]

log_rejects = structlog.get_logger("toolfleet.worker.rejected")


class RejectLog:
    """One log line per rejected broker item, at most one a second per reason (a flood of junk must
    not become a flood of logs); the count of those not logged rides on the next line."""

    def __init__(self, interval: float = 1.0) -> None:
        self._interval = interval
        self._last: dict[str, float] = {}
        self._suppressed: dict[str, int] = {}
        self._lock = threading.Lock()
        self.total = 0

    def reject(self, reason: str, queue: str | None, detail: str = "") -> bool:
        """Count a rejection; True when it was logged (not suppressed)."""
        now = time.monotonic()
        with self._lock:
            self.total += 1
            if now - self._last.get(reason, -1e9) < self._interval:
                self._suppressed[reason] = self._suppressed.get(reason, 0) + 1
                return False
            self._last[reason] = now
            suppressed = self._suppressed.pop(reason, 0)
        log_rejects.warning("worker.message_rejected", reason=reason, queue=queue, detail=detail[:200],
                            suppressed_since_last=suppressed)
        return True


# One per process: the transport (consumer thread) and the control commands report here.
rejects = RejectLog()
