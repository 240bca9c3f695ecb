"""The snapshot disk budget, kept per host: every process on this machine that snapshots onto one Docker
daemon (a worker, embedded evals, several at once) draws from the same budget.

Each process used to count only its own snapshots, so two evals on one host could together fill twice
the budget. Now a reservation is decided under a host-wide lock (``flock`` on a small ledger file per
daemon, in ``TOOLFLEET_STATE_DIR`` or the temp directory) against two things every process sees alike:

* the snapshots already on the daemon — each snapshot image's own bytes (its size less its base
  image's), read from the daemon itself, whoever took them;
* the snapshots being taken now, anywhere on the host: the ledger lists each in-flight reservation
  with its process; one whose process is gone (or older than ``STALE_S``) no longer counts.

A process that shares the daemon but not this machine's files (a worker in its own container, a remote
``DOCKER_HOST``) keeps its own ledger: mount one ``TOOLFLEET_STATE_DIR`` into all of them to share it.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from orchestrator.util._snapshot import SnapshotError

__all__ = ["STATE_DIR_ENV", "HostBudget", "budget_refusal", "shown_bytes"]

STATE_DIR_ENV = "TOOLFLEET_STATE_DIR"
STALE_S = 3600.0  # an in-flight reservation older than this is a leftover (a snapshot takes minutes at most)


def shown_bytes(size: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} bytes"


def budget_refusal(size: int, used: int, budget: int) -> str | None:
    """Why a snapshot of ``size`` bytes may not be taken with ``used`` of ``budget`` in use (None: it fits)."""
    if used + size <= budget:
        return None
    return (f"The snapshot ({shown_bytes(size)}) would exceed this host's snapshot disk budget: {shown_bytes(used)} "
            f"of {shown_bytes(budget)} in use (remove kept snapshots, or raise the budget: TOOLFLEET_SNAPSHOT_DISK / "
            "the worker's --snapshot-disk).")


def _alive(pid: Any) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process: alive
    return True


class HostBudget:
    """The in-flight reservations of one Docker daemon's snapshots, shared by this machine's processes.
    Blocking (file lock and a Docker call): run it off the event loop."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def for_daemon(cls, daemon_id: str) -> HostBudget:
        root = Path(os.environ.get(STATE_DIR_ENV) or tempfile.gettempdir()) / f"toolfleet-{os.getuid()}"
        root.mkdir(mode=0o700, exist_ok=True)
        name = hashlib.sha256(daemon_id.encode()).hexdigest()[:16]
        return cls(root / f"snapshots-{name}.json")

    def reserve(self, token: str, size: int, budget: int, on_daemon: Callable[[], int]) -> None:
        """Count ``size`` bytes for ``token`` if, with what is on the daemon (``on_daemon()``, read under the
        lock) and every other reservation, it fits ``budget``; else ``SnapshotError`` and nothing counted."""
        with self._ledger() as ledger:
            used = on_daemon() + sum(entry["bytes"] for key, entry in ledger.items() if key != token)
            refusal = budget_refusal(size, used, budget)
            if refusal is not None:
                raise SnapshotError(refusal)
            ledger[token] = {"pid": os.getpid(), "bytes": size, "at": time.time()}

    def settle(self, token: str, size: int, budget: int, on_daemon: Callable[[], int]) -> None:
        """The snapshot of ``token`` is now on the daemon, ``size`` bytes: its reservation goes, and
        ``SnapshotError`` if the host is over ``budget`` with it (the caller removes it)."""
        with self._ledger() as ledger:
            ledger.pop(token, None)
            used = on_daemon() + sum(entry["bytes"] for entry in ledger.values())
        refusal = budget_refusal(size, used - size, budget)
        if refusal is not None:
            raise SnapshotError(refusal)

    def release(self, token: str) -> None:
        with self._ledger() as ledger:
            ledger.pop(token, None)

    def in_flight(self) -> int:
        with self._ledger() as ledger:
            return sum(entry["bytes"] for entry in ledger.values())

    @contextlib.contextmanager
    def _ledger(self) -> Iterator[dict[str, dict[str, Any]]]:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            with os.fdopen(os.dup(fd), "r+") as f:
                try:
                    raw = json.loads(f.read() or "{}")
                except ValueError:
                    raw = {}  # a torn or foreign file: start again (only in-flight bytes are lost, briefly)
                now = time.time()
                ledger = {str(k): v for k, v in (raw.items() if isinstance(raw, dict) else ())
                          if isinstance(v, dict) and isinstance(v.get("bytes"), int) and _alive(v.get("pid"))
                          and isinstance(v.get("at"), int | float) and now - v["at"] < STALE_S}
                yield ledger
                f.seek(0)
                f.truncate()
                f.write(json.dumps(ledger))
        finally:
            os.close(fd)  # releases the lock
