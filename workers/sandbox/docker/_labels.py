"""Container labels and the reaper that removes expired or orphaned sandboxes.

Every container carries ``toolfleet.*`` labels: eval id, sample id, owner (the worker's identity,
unique per worker process; the machine name in embedded mode), the machine, the owning process's pid
and start time, expiry. The reaper runs at driver start and periodically:

- expired (``toolfleet.expiry`` in the past): removed whoever owns it;
- orphaned: made on this machine by a process that is gone (pid dead or reused) — whichever worker
  it belonged to, since none can hold it any more;
- exited (e.g. OOM-killed) containers owned by this very process that no live driver holds.

Helper containers (``helper_labels``: never started, removed at once by the code that made them) carry
the same owner labels and an expiry, so one left by a killed process is reaped like a sandbox.

A live worker's containers are never touched by another worker's reaper (several workers share a
machine and its Docker daemon).
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterable
from typing import Any

import psutil

PREFIX = "toolfleet."
MANAGED = PREFIX + "managed"
EVAL_ID = PREFIX + "eval_id"
SAMPLE_ID = PREFIX + "sample_id"
OWNER = PREFIX + "owner"
OWNER_PID = PREFIX + "owner_pid"
OWNER_STARTED = PREFIX + "owner_started"
EXPIRY = PREFIX + "expiry"
POOL = PREFIX + "pool"
MACHINE = PREFIX + "machine"

HOST = socket.gethostname()


def _process_started(pid: int) -> int | None:
    try:
        return int(psutil.Process(pid).create_time())
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None


def owner_labels(owner: str = HOST) -> dict[str, str]:
    """``owner``: the worker identity (``HostSandboxes.owner``; the machine's name in embedded mode)."""
    pid = os.getpid()
    return {OWNER: owner, MACHINE: HOST, OWNER_PID: str(pid), OWNER_STARTED: str(_process_started(pid) or 0)}


def container_labels(eval_id: str, sample_id: str, ttl: float, pool: str = "", owner: str = HOST) -> dict[str, str]:
    return {
        MANAGED: "1",
        EVAL_ID: eval_id,
        SAMPLE_ID: sample_id,
        EXPIRY: str(int(time.time() + ttl)),
        POOL: pool,
        **owner_labels(owner),
    }


HELPER = PREFIX + "helper"  # a short-lived, never-started container of the worker's own (what it is for)
HELPER_TTL_S = 600.0


def helper_labels(purpose: str) -> dict[str, str]:
    """Labels of a helper container (reading an image's files, adding a snapshot's layer): removed by the
    code that made it, and by the reaper if that process died first (orphaned) or it outlived its expiry."""
    return {MANAGED: "1", HELPER: purpose, EXPIRY: str(int(time.time() + HELPER_TTL_S)), **owner_labels()}


def reap_reason(info: dict[str, Any], live: Iterable[str], now: float | None = None,
                owner: str = HOST) -> str | None:
    """Why a container (an Engine ``containers/json`` entry) should go, or None to keep it. Pure."""
    now = time.time() if now is None else now
    labels = info.get("Labels") or {}
    if info.get("Id") in set(live):
        return None
    try:
        if float(labels.get(EXPIRY, "inf")) < now:
            return "expired"
    except ValueError:
        return "expired"  # a mangled label cannot protect a container forever
    if labels.get(MACHINE, labels.get(OWNER)) != HOST:
        return None  # another machine's container: only its expiry concerns us
    pid = int(labels.get(OWNER_PID) or 0)
    started = _process_started(pid) if pid else None
    if started is None or str(started) != labels.get(OWNER_STARTED):
        return "orphaned"
    # "created": being started by this process right now (listed before the driver recorded its
    # id); removing it then made the start fail with a 409 under load.
    if pid == os.getpid() and labels.get(OWNER) == owner and info.get("State") not in ("running", "created"):
        return "exited"
    return None
