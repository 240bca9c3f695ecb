"""A throwaway fleet for distributed benchmarks: redis-server on a free loopback port + worker processes.

Benchmarks start their own services so a figure never depends on what else is running; every
wait is bounded and everything started is stopped on exit.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import redis as redis_sync

from workers.fleet import names

REPO_ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class BenchFleet:
    def __init__(self, workers: int = 1, concurrency: int = 64, slots: int = 64, imports: tuple[str, ...] = (),
                 task_events: bool = False, named: bool = True) -> None:
        self.port = _free_port()
        # As shipped: Redis with a password, messages signed with the fleet secret (one per run, unless set).
        self._password = secrets.token_hex(16)
        self.url = f"redis://:{self._password}@127.0.0.1:{self.port}/0"
        if not os.environ.get("TOOLFLEET_SECRET"):
            os.environ["TOOLFLEET_SECRET"] = secrets.token_hex(32)  # this process's dispatchers read it
        self._dir = tempfile.mkdtemp(prefix="toolfleet-bench-")
        self._n, self._concurrency, self._slots, self._imports = workers, concurrency, slots, imports
        self._task_events = task_events
        self._named = named  # False: each worker takes its default identity, as a user starting workers does
        self._procs: list[subprocess.Popen[bytes]] = []
        self.hosts: list[str] = []

    async def __aenter__(self) -> "BenchFleet":
        await asyncio.to_thread(self._start)
        return self

    async def __aexit__(self, *exc: tuple[type[BaseException] | None, BaseException | None, TracebackType | None]) -> None:
        await asyncio.to_thread(self._stop)

    def _start(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed (apt-get install redis-server)")
        self._procs.append(subprocess.Popen(
            [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", self._dir, "--loglevel", "warning", "--requirepass", self._password], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        client = redis_sync.Redis.from_url(self.url, socket_timeout=2)
        self._wait(lambda: self._ping(client), 10, "redis-server")
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")])}
        for _ in range(self._n):
            host = f"bench-{uuid.uuid4().hex[:6]}"
            args = [sys.executable, "-m", "workers.cli", "--broker", self.url, *(["--hostname", host] if self._named else []),
                    "--concurrency", str(self._concurrency), "--slots", str(self._slots), "--allow-local"]
            for module in self._imports:
                args += ["--import", module]
            if self._task_events:
                args.append("--task-events")
            self._procs.append(subprocess.Popen(args, cwd=REPO_ROOT, env=env, stdout=subprocess.DEVNULL,
                                                stderr=subprocess.DEVNULL, start_new_session=True))
            if self._named:
                self.hosts.append(host)
        if not self._named:  # learn the identities the workers chose from the fleet's host set
            self._wait(lambda: client.scard(names.HOSTS_SET) >= self._n, 60, f"{self._n} workers")
            chosen = [h.decode() for h in client.smembers(names.HOSTS_SET)]
            pids = [str(proc.pid) for proc in self._procs[1:]]  # a default identity is <machine>-<pid>-<hex>
            self.hosts = sorted(chosen, key=lambda h: next((i for i, pid in enumerate(pids) if f"-{pid}-" in h), len(pids)))
        for host in self.hosts:
            self._wait(lambda h=host: bool(client.exists(f"toolfleet:host:{h}")), 60, f"worker {host}")
        time.sleep(1.0)  # the Celery consumer starts listening just after the first heartbeat

    @staticmethod
    def _ping(client: redis_sync.Redis) -> bool:
        try:
            return bool(client.ping())
        except redis_sync.RedisError:
            return False

    def _wait(self, predicate, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate():
                return
            for proc in self._procs:
                if proc.poll() is not None:
                    raise RuntimeError(f"{what}: a fleet process exited with {proc.returncode}")
            time.sleep(0.05)
        raise TimeoutError(f"timed out waiting for {what}")

    def worker_cpu_seconds(self) -> float:
        """CPU time (user + system) the worker processes have used so far (Linux /proc)."""
        ticks = 0
        for proc in self._procs[1:]:  # [0] is redis-server
            try:
                with open(f"/proc/{proc.pid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                ticks += int(fields[11]) + int(fields[12])  # utime, stime
            except (OSError, IndexError, ValueError):
                continue
        return ticks / os.sysconf("SC_CLK_TCK")

    def worker_memory_mb(self) -> list[dict[str, float]]:
        """Each worker's resident memory now and at its peak (VmRSS, VmHWM from /proc), in MB."""
        out = []
        for proc in self._procs[1:]:
            fields: dict[str, float] = {}
            try:
                with open(f"/proc/{proc.pid}/status") as f:
                    for line in f:
                        if line.startswith(("VmRSS:", "VmHWM:")):
                            key, value = line.split(":", 1)
                            fields[key] = round(int(value.split()[0]) / 1024, 1)
            except OSError:
                continue
            out.append({"rss_mb": fields.get("VmRSS", 0.0), "peak_rss_mb": fields.get("VmHWM", 0.0)})
        return out

    def redis_memory_mb(self) -> dict[str, float]:
        """Redis ``used_memory`` now and at its peak, in MB."""
        info = redis_sync.Redis.from_url(self.url, socket_timeout=5).info("memory")
        return {"used_mb": round(info["used_memory"] / 1e6, 1), "peak_mb": round(info["used_memory_peak"] / 1e6, 1)}

    def redis_counters(self) -> "RedisCounters":
        """Commands Redis has run (INFO commandstats, every command) and bytes it has read and written."""
        client = redis_sync.Redis.from_url(self.url, socket_timeout=5)
        try:
            return RedisCounters.from_info(client.info("commandstats"), client.info("stats"), client.info("cpu"))
        finally:
            client.close()

    def command_usec(self, command: str) -> float | None:
        """Redis's own mean microseconds per call of ``command`` so far (INFO commandstats)."""
        client = redis_sync.Redis.from_url(self.url, socket_timeout=5)
        try:
            stat = client.info("commandstats").get(f"cmdstat_{command}")
        finally:
            client.close()
        return round(float(stat["usec_per_call"]), 2) if isinstance(stat, dict) else None

    def _stop(self) -> None:
        for proc in reversed(self._procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in reversed(self._procs):
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        shutil.rmtree(self._dir, ignore_errors=True)


@dataclass(frozen=True)
class RedisCounters:
    commands: int
    bytes_in: int
    bytes_out: int
    cpu_s: float = 0.0  # redis-server's own CPU time (user + system)
    by_command: dict[str, int] = field(default_factory=dict)  # calls per command (Lua's inner calls included)

    @classmethod
    def from_info(cls, commandstats: dict[str, Any], stats: dict[str, Any], cpu: dict[str, Any] | None = None) -> "RedisCounters":
        by_command = {k.removeprefix("cmdstat_"): int(v.get("calls", 0)) for k, v in commandstats.items()
                      if k.startswith("cmdstat_") and isinstance(v, dict)}
        cpu_s = float((cpu or {}).get("used_cpu_user", 0.0)) + float((cpu or {}).get("used_cpu_sys", 0.0))
        return cls(sum(by_command.values()), int(stats.get("total_net_input_bytes", 0)),
                   int(stats.get("total_net_output_bytes", 0)), cpu_s, by_command)

    def minus(self, before: "RedisCounters") -> "RedisCounters":
        by_command = {k: v - before.by_command.get(k, 0) for k, v in self.by_command.items()}
        return RedisCounters(self.commands - before.commands, self.bytes_in - before.bytes_in,
                             self.bytes_out - before.bytes_out, self.cpu_s - before.cpu_s,
                             {k: v for k, v in by_command.items() if v})

    def plus(self, other: "RedisCounters") -> "RedisCounters":
        by_command = dict(self.by_command)
        for k, v in other.by_command.items():
            by_command[k] = by_command.get(k, 0) + v
        return RedisCounters(self.commands + other.commands, self.bytes_in + other.bytes_in,
                             self.bytes_out + other.bytes_out, self.cpu_s + other.cpu_s, by_command)

    def per(self, n: int, top: int = 12) -> dict[str, float]:
        """The most frequent commands, as calls per ``n`` (e.g. per tool call)."""
        ranked = sorted(self.by_command.items(), key=lambda kv: -kv[1])[:top]
        return {k: round(v / max(1, n), 2) for k, v in ranked}


class LoopLag:
    """Samples event-loop lag: how late a 10 ms sleep wakes up."""

    def __init__(self, interval: float = 0.01) -> None:
        self.interval = interval
        self.samples: list[float] = []
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        while True:
            start = time.perf_counter()
            await asyncio.sleep(self.interval)
            self.samples.append(time.perf_counter() - start - self.interval)

    async def stop(self) -> float:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        return percentile_ms(self.samples, 0.99) if self.samples else 0.0


def percentile_ms(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000, 3)
