"""Results Redis would not store (``maxmemory`` reached): delivered now, kept and stored later (bounded).

Redis at ``maxmemory`` with ``noeviction`` (as shipped) refuses every command that may grow memory —
the result's SET among them — but still runs PUBLISH. Celery retries a store only on connection
errors, so a result finished in that window used to be dropped for good. Instead, ``UnstoredResults``:

1. PUBLISHes the (signed) result on its channel at once: an orchestrator waiting for it resolves the
   call exactly as if it had been stored;
2. tells orchestrators why (``store_failed`` fleet event), so a wait that still runs out names the
   broker's condition instead of timing out silently;
3. keeps the result and retries storing it from one background thread (0.5 s, doubling to 5 s)
   until Redis takes it, for at most ``max_age`` seconds and ``max_bytes`` in all (oldest dropped
   first, each drop logged) — a worker never grows without bound behind a full broker.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import structlog

__all__ = ["UnstoredResults", "is_out_of_memory"]

log = structlog.get_logger("toolfleet.worker.results")


def is_out_of_memory(exc: BaseException) -> bool:
    """Redis's answer when ``maxmemory`` is reached under ``noeviction``: ``OOM command not allowed ...``
    (redis-py raises it as ``OutOfMemoryError`` without the ``OOM`` prefix)."""
    from redis.exceptions import OutOfMemoryError

    text = str(exc).lstrip()
    return isinstance(exc, OutOfMemoryError) or text.upper().startswith("OOM") or "> 'maxmemory'" in text


class UnstoredResults:
    def __init__(self, store: Callable[[str, str, int], Any], publish: Callable[[str, str], Any],
                 announce: Callable[[str, str], Any], max_age: float = 600.0,
                 max_bytes: int = 64 * 1024 * 1024) -> None:
        self._store, self._publish, self._announce = store, publish, announce
        self.max_age, self.max_bytes = max_age, max_bytes
        self._held: OrderedDict[str, tuple[str, int, float]] = OrderedDict()  # key -> (value, expires, since)
        self._bytes = 0
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def __len__(self) -> int:
        with self._lock:
            return len(self._held)

    def keep(self, key: str, value: str, expires: int, task_id: str, error: str) -> None:
        try:
            self._publish(key, value)  # allowed at maxmemory: a waiting orchestrator has its result now
        except Exception as exc:  # noqa: BLE001 - best effort; the stored copy is what stays
            log.warning("worker.result_publish_failed", task_id=task_id, error=str(exc)[:200])
        self._announce(task_id, error)
        with self._lock:
            old = self._held.pop(key, None)
            self._bytes -= len(old[0]) if old else 0
            self._held[key] = (value, expires, time.monotonic())
            self._bytes += len(value)
            self._evict(time.monotonic())
            if self._thread is None:
                self._thread = threading.Thread(target=self._retry_loop, name="toolfleet-result-retry", daemon=True)
                self._thread.start()
        log.warning("worker.result_not_stored", task_id=task_id, error=error[:200], held=len(self._held))
        self._wake.set()

    def _evict(self, now: float) -> None:
        while self._held and (self._bytes > self.max_bytes or now - next(iter(self._held.values()))[2] > self.max_age):
            key, (value, _, _) = self._held.popitem(last=False)
            self._bytes -= len(value)
            log.error("worker.result_dropped", key=key, reason="the broker stayed full past the worker's bound")

    def _retry_loop(self) -> None:
        delay = 0.5
        while True:
            self._wake.wait(delay)
            self._wake.clear()
            with self._lock:
                self._evict(time.monotonic())
                pending = list(self._held.items())
                if not pending:
                    self._thread = None  # under the lock: keep() starts a new one for the next result
                    return
            stored_any = False
            for key, (value, expires, _) in pending:
                try:
                    self._store(key, value, expires)
                except Exception:  # noqa: BLE001 - still full (or down): keep it, try again later
                    break
                stored_any = True
                with self._lock:
                    if self._held.get(key, (None,))[0] == value:
                        del self._held[key]
                        self._bytes -= len(value)
                log.info("worker.result_stored_late", key=key)
            delay = 0.5 if stored_any else min(delay * 2, 5.0)
