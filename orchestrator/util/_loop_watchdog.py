"""A diagnostic for event-loop stalls: what the loop thread was running when it was late.

A heartbeat callback on the loop stamps the time every ``interval``; a daemon thread checks the
stamp and, while it is older than ``threshold``, samples the loop thread's stack
(``sys._current_frames``). Samples are counted per stack (innermost frames first), so the report
names the code that kept the loop busy, not the code that happened to run next. Garbage-collector
pauses are timed too (``gc.callbacks``): a full collection over a large heap blocks the loop
without any Python frame of ours being to blame.

Off unless asked for: ``TOOLFLEET_LOOP_WATCHDOG=<ms>`` (``watchdog_from_env``) — e.g. ``50`` — and
the report goes to stderr when the watchdog stops. Its own cost: one timer callback per interval
and a thread that wakes every interval; stacks are only read during a stall.
"""

from __future__ import annotations

import asyncio
import gc
import os
import sys
import threading
import time
import traceback
from collections import Counter
from typing import Any, TextIO

ENV_VAR = "TOOLFLEET_LOOP_WATCHDOG"
STACK_DEPTH = 12  # innermost frames kept per sample
TOP_STACKS = 8  # stacks shown in the report


class LoopWatchdog:
    """Samples the loop thread's stack while the loop is more than ``threshold`` seconds late."""

    def __init__(self, threshold: float = 0.05, interval: float = 0.005) -> None:
        self.threshold = threshold
        self.interval = interval
        self.stacks: Counter[tuple[str, ...]] = Counter()
        self.stalls: list[float] = []  # how long each stall lasted (seconds beyond the threshold counted whole)
        self.gc_pauses: dict[int, list[tuple[float, float, int]]] = {0: [], 1: [], 2: []}  # (wall s, CPU s, collected)
        self._beat = time.perf_counter()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None
        self._handle: asyncio.TimerHandle | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._gc_start = (0.0, 0.0)

    def start(self) -> None:
        """Call on the loop to watch."""
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self._beat = time.perf_counter()
        self._handle = self._loop.call_later(self.interval, self._tick)
        gc.callbacks.append(self._on_gc)
        self._thread = threading.Thread(target=self._watch, name="toolfleet-loop-watchdog", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._handle is not None:
            self._handle.cancel()
        if self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)
        if self._thread is not None:
            self._thread.join(timeout=1.0)

    def _tick(self) -> None:
        self._beat = time.perf_counter()
        if self._loop is not None and not self._stop.is_set():
            self._handle = self._loop.call_later(self.interval, self._tick)

    def _on_gc(self, phase: str, info: dict[str, Any]) -> None:
        if threading.get_ident() != self._loop_thread:
            return
        if phase == "start":
            self._gc_start = (time.perf_counter(), time.thread_time())
        else:
            wall, cpu = time.perf_counter() - self._gc_start[0], time.thread_time() - self._gc_start[1]
            pauses = self.gc_pauses.setdefault(int(info.get("generation", 0)), [])
            pauses.append((wall, cpu, int(info.get("collected", 0))))

    def _watch(self) -> None:
        stalled_since: float | None = None
        while not self._stop.wait(self.interval):
            late = time.perf_counter() - self._beat - self.interval
            if late < self.threshold:
                if stalled_since is not None:
                    self.stalls.append(time.perf_counter() - stalled_since)
                    stalled_since = None
                continue
            if stalled_since is None:
                stalled_since = self._beat
            frame = sys._current_frames().get(self._loop_thread or 0)
            if frame is not None:
                summary = traceback.extract_stack(frame)[-STACK_DEPTH:]
                frames = tuple(f"{os.path.basename(f.filename)}:{f.lineno} {f.name}" for f in reversed(summary))
                self.stacks[frames] += 1

    def report(self, out: TextIO | None = None) -> None:
        out = out or sys.stderr
        stalls = sorted(self.stalls)
        print(f"loop watchdog: {len(stalls)} stall(s) over {self.threshold * 1000:.0f} ms, longest "
              f"{(stalls[-1] if stalls else 0) * 1000:.0f} ms, total {sum(stalls) * 1000:.0f} ms", file=out)
        for gen, pauses in sorted(self.gc_pauses.items()):
            if pauses:  # CPU time too: on a loaded machine the wall time includes waiting for a core
                walls, cpus = [p[0] for p in pauses], [p[1] for p in pauses]
                worst = sorted(pauses, reverse=True)[:3]
                print(f"  gc gen{gen}: {len(pauses)} collections, median {sorted(walls)[len(walls) // 2] * 1000:.1f} "
                      "ms, "
                      f"max {max(walls) * 1000:.1f} ms (CPU {max(cpus) * 1000:.1f} ms), total {sum(walls) * 1000:.0f} "
                      "ms "
                      f"(CPU {sum(cpus) * 1000:.0f} ms); worst (ms, collected): "
                      + ", ".join(f"({w * 1000:.0f}, {n})" for w, _, n in worst), file=out)
        total = sum(self.stacks.values())
        for stack, count in self.stacks.most_common(TOP_STACKS):
            print(f"  {count}/{total} samples ({count * self.interval * 1000:.0f} ms):", file=out)
            for line in stack:
                print(f"      {line}", file=out)


def watchdog_from_env() -> LoopWatchdog | None:
    """A started watchdog when ``TOOLFLEET_LOOP_WATCHDOG`` gives a threshold in ms; else None."""
    raw = os.environ.get(ENV_VAR, "").strip()
    if not raw:
        return None
    try:
        threshold_ms = float(raw)
    except ValueError:
        print(f"{ENV_VAR}={raw!r} is not a number of milliseconds; the loop watchdog is off.", file=sys.stderr)
        return None
    watchdog = LoopWatchdog(threshold=max(0.001, threshold_ms / 1000))
    watchdog.start()
    return watchdog
