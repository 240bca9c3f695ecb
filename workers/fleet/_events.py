"""What a worker tells orchestrators at once, on the ``toolfleet:fleet-events`` channel (best effort).

A misconfigured fleet used to fail silently: a worker with another secret only logged its rejections
while the eval waited for its deadline; a result Redis refused to store (``maxmemory``) was simply
lost. Each event is one small JSON object PUBLISHed on ``_names.FLEET_EVENTS_CHANNEL`` — PUBLISH works
even when Redis is out of memory — and every orchestrator's result listener is subscribed to it:

* ``{"kind": "rejected", "host", "reason", "task_id", "queue"}``: a task message was dropped before
  delivery (``unauthenticated``, ``stale: ...``, ``sent to another queue``); sent at most once a
  second per reason (the worker's reject log decides);
* ``{"kind": "store_failed", "host", "task_id", "error"}``: a finished result could not be stored;
  the worker keeps it and retries (``workers.fleet._result_store``).

Anyone who can write to Redis can PUBLISH, so each event carries a MAC under the fleet secret
(``_auth.event_mac``). An orchestrator acts on a signed event only, and only for a task id it waits for;
an unsigned one (a forgery, or a worker holding another secret, which cannot sign for this one) is
advisory: logged once, and named as the reason if the wait it concerns runs out, but it never stops an
eval (a worker with another secret is caught before that, at preflight: ``HostRecord.keys``).
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import structlog

from . import _names
from ._auth import EVENT_MAC_FIELD, Keyring, event_mac

__all__ = ["FleetEvents"]

log = structlog.get_logger("toolfleet.worker.events")


class FleetEvents:
    """PUBLISHes fleet events through its own small Redis client (never the consumer's connection)."""

    def __init__(self, url: str, host: str | None = None, keyring: Keyring | None = None) -> None:
        self._url = url
        self._keyring = keyring
        self.host = host or os.environ.get("TOOLFLEET_HOST") or "unknown"
        self._client: Any = None

    def publish(self, kind: str, **fields: Any) -> bool:
        import redis
        from redis.exceptions import RedisError

        event = {"kind": kind, "host": self.host, "at": round(time.time(), 3),
                 **{k: (str(v)[:300] if v is not None else None) for k, v in fields.items()}}
        if self._keyring is not None:
            event[EVENT_MAC_FIELD] = event_mac(self._keyring, event)
        try:
            if self._client is None:
                self._client = redis.Redis.from_url(self._url, socket_timeout=2, socket_connect_timeout=2)
            self._client.publish(_names.FLEET_EVENTS_CHANNEL, json.dumps(event))
            return True
        except (RedisError, OSError) as exc:
            log.warning("worker.fleet_event_unsent", kind=kind, error=str(exc)[:200])
            return False
