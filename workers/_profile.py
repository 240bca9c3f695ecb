"""Opt-in CPU profile of a worker process: ``TOOLFLEET_PROFILE=<path>`` (for benchmarks, never in production).

Every thread started after ``create_worker_app`` (Celery's pool threads, the worker's asyncio loop,
kombu's) and the thread that built the app get their own ``cProfile`` profiler; at exit the merged
statistics are written to ``<path>`` (``python -m pstats <path>``, or snakeviz). Costs ~2x CPU while on.
"""

from __future__ import annotations

import atexit
import cProfile
import os
import sys
import threading
from typing import Any

__all__ = ["PROFILE_ENV", "ThreadProfiles"]

PROFILE_ENV = "TOOLFLEET_PROFILE"


class ThreadProfiles:
    def __init__(self, path: str) -> None:
        self.path = path
        self._profiles: list[cProfile.Profile] = []
        self._lock = threading.Lock()

    @classmethod
    def from_env(cls) -> ThreadProfiles | None:
        path = os.environ.get(PROFILE_ENV)
        if not path:
            return None
        profiles = cls(path)
        profiles.start()
        return profiles

    def start(self) -> None:
        self._enable()
        threading.setprofile(self._first_event)  # each new thread enables its own profiler
        atexit.register(self.dump)

    def _first_event(self, *_: Any) -> None:
        sys.setprofile(None)
        self._enable()

    def _enable(self) -> None:
        profile = cProfile.Profile()
        with self._lock:
            self._profiles.append(profile)
        profile.enable()

    def dump(self) -> None:
        import pstats

        with self._lock:
            profiles = list(self._profiles)
        stats = pstats.Stats(profiles[0])
        for profile in profiles[1:]:
            try:
                stats.add(profile)
            except (TypeError, ValueError):
                continue  # a thread that never ran anything profiled
        stats.dump_stats(self.path)
