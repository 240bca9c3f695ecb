"""Real services for distributed tests and benchmarks: a redis-server on a free loopback port and real worker processes.

Everything here is a real process that tests can SIGKILL: ``RedisServer`` (restartable on the same
port, no persistence — a restart loses everything, like a crashed cache — or with an append-only file) and
``WorkerProcess`` (``python -m workers.cli``, i.e. ``toolfleet worker``, with the repo root on PYTHONPATH so
``--import tests.support.sample_tools`` works). Every wait is bounded.

The benchmarks (``tests/benchmarks/``) start their fleets here too (``running_fleet``), so this module
imports no pytest: a checkout's benchmarks run where only toolfleet is installed. The pytest fixtures
over these classes are in ``tests/support/fleet_fixtures.py``.

Authentication is on, as shipped: ``fleet_secret`` makes one fleet secret per test session and puts
it in ``TOOLFLEET_SECRET`` (what ``CeleryDispatcher`` reads); every worker gets it in its environment.
Workers here also allow ``local`` sandboxes (``--allow-local``), which most distributed tests use;
``allow_local=False`` starts one as a production worker would.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import redis as redis_sync

REPO_ROOT = Path(__file__).resolve().parents[2]
SAMPLE_TOOLS = "tests.support.sample_tools"
SESSION_TOOL_MODULES = (SAMPLE_TOOLS, "tests.agent.agent_tools", "tests.review.review_tools")
SECRET_ENV = "TOOLFLEET_SECRET"  # noqa: S105 - the variable's name


def ensure_fleet_secret() -> str:
    """The session's fleet secret (made once, kept in ``TOOLFLEET_SECRET`` for dispatchers and workers)."""
    secret = os.environ.get(SECRET_ENV)
    if not secret:
        secret = os.environ[SECRET_ENV] = secrets.token_hex(32)
    return secret


def free_port() -> int:
    """A loopback TCP port nothing listens on now (the one helper for this: tests and benchmarks)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def child_env(**extra: str) -> dict[str, str]:
    """The environment for a Python child (worker, benchmark) that imports the same toolfleet as this
    process: the directory this process's ``orchestrator`` comes from first (an installed wheel, or
    the checkout), then the checkout (for ``tests.*``). Children run with ``-P``, so a checkout in
    their working directory does not shadow an installed toolfleet."""
    import orchestrator

    runs_from = str(Path(orchestrator.__file__).resolve().parents[1])
    path = [runs_from, str(REPO_ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(dict.fromkeys(path)), **extra}


def python(*args: str) -> list[str]:
    """``python -P ARGS`` with this interpreter (see ``child_env``)."""
    return [sys.executable, "-P", *args]


def require_redis_server() -> str:
    binary = shutil.which("redis-server")
    if binary is None:
        raise RuntimeError("redis-server is not installed: run `toolfleet setup` (README, command 2) or "
                           "`apt-get install redis-server`")
    return binary


def _wait(predicate, timeout: float, what: str, interval: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout:g} s waiting for {what}")


def stop_process(proc: subprocess.Popen | None, sig: int = signal.SIGTERM) -> None:
    """Signal a test server and wait for it (bounded): SIGKILL if it outlives 10 s."""
    if proc is not None and proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


class RedisServer:
    """``password``: Redis requires it (as a shipped fleet does); it is part of ``url``."""

    def __init__(self, port: int | None = None, password: str | None = None) -> None:
        self.port = port or free_port()
        self.password = password
        self.dir = tempfile.mkdtemp(prefix="toolfleet-redis-")
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        auth = f":{self.password}@" if self.password else ""
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    def client(self) -> redis_sync.Redis:
        return redis_sync.Redis.from_url(self.url, socket_timeout=5)

    def start(self, aof: bool = False) -> RedisServer:
        """No persistence (as shipped), or ``aof``: append-only file in ``dir``, fsync'd every second,
        loaded if one is there (a restart then keeps what reached it)."""
        binary = require_redis_server()
        self.proc = subprocess.Popen(
            [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "yes" if aof else "no", "--appendfsync", "everysec",
             "--dir", self.dir, "--protected-mode", "no", "--loglevel", "warning",
             *(["--requirepass", self.password] if self.password else [])],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        _wait(self._pings, 30.0 if aof else 10.0, f"redis-server on port {self.port}")
        return self

    def enable_aof(self, timeout: float = 60.0) -> None:
        """Turn the append-only file on in the running server (it rewrites what it holds first) and wait
        until that rewrite is done: from then on every write reaches the file within a second."""
        client = self.client()
        client.config_set("appendonly", "yes")

        def written() -> bool:
            info = client.info("persistence")
            return bool(info.get("aof_enabled")) and not info.get("aof_rewrite_in_progress") \
                and not info.get("aof_rewrite_scheduled")

        _wait(written, timeout, "redis-server's append-only file rewrite")

    def _pings(self) -> bool:
        try:
            return bool(self.client().ping())
        except redis_sync.RedisError:
            return False

    def stop(self, sig: int = signal.SIGTERM) -> None:
        stop_process(self.proc, sig)
        self.proc = None

    def restart(self, down_for: float = 0.0, aof: bool = False) -> None:
        """Kill and start again on the same port: everything in it is lost, or with ``aof`` (after
        ``enable_aof``) what reached the append-only file is loaded back."""
        self.stop(signal.SIGKILL)
        time.sleep(down_for)
        self.start(aof=aof)

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


class WorkerProcess:
    """``toolfleet worker`` as a child process (its own process group, so a kill takes its sandboxes too).

    A timing given as None is left to the worker's own default (what benchmarks measure)."""

    def __init__(self, broker_url: str, host: str | None = None, concurrency: int = 16, slots: int = 16,
                 imports: tuple[str, ...] = (SAMPLE_TOOLS,), heartbeat_interval: float | None = 0.5,
                 heartbeat_ttl: float | None = 3.0, orphan_grace: float | None = 2.0, extra_args: tuple[str, ...] = (),
                 allow_local: bool = True, secret: str | None = None, env: dict[str, str] | None = None) -> None:
        self.broker_url = broker_url
        self.env = dict(env or {})  # more environment for the process (e.g. libfaketime's LD_PRELOAD, FAKETIME)
        self.host = host or f"w-{uuid.uuid4().hex[:8]}"
        self.secret = secret if secret is not None else ensure_fleet_secret()
        timings = {"--heartbeat-interval": heartbeat_interval, "--heartbeat-ttl": heartbeat_ttl,
                   "--orphan-grace": orphan_grace}
        self.args = [
            *python("-m", "workers.cli"), "--broker", broker_url, "--hostname", self.host,
            "--concurrency", str(concurrency), "--slots", str(slots),
            *[a for flag, value in timings.items() if value is not None for a in (flag, str(value))],
            "--loglevel", os.environ.get("TOOLFLEET_TEST_WORKER_LOGLEVEL", "WARNING"),
            *[a for m in imports for a in ("--import", m)], *(["--allow-local"] if allow_local else []), *extra_args,
        ]
        self.log = tempfile.NamedTemporaryFile(prefix=f"toolfleet-{self.host}-", suffix=".log", delete=False)  # noqa: SIM115 - the worker's log for its lifetime
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 30.0) -> WorkerProcess:
        self.launch()
        return self.wait_ready(timeout)

    def launch(self) -> WorkerProcess:
        """Start the process without waiting for it (``wait_ready`` waits): several start side by side."""
        self.proc = subprocess.Popen(self.args, cwd=REPO_ROOT, env=child_env(**{SECRET_ENV: self.secret}, **self.env),
                                     stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        return self

    def wait_ready(self, timeout: float = 30.0) -> WorkerProcess:
        client = redis_sync.Redis.from_url(self.broker_url, socket_timeout=5)
        try:
            _wait(lambda: self._ready(client), timeout, f"worker {self.host} to heartbeat")
        except TimeoutError:
            self.kill()
            raise RuntimeError(f"worker {self.host} did not start:\n{self.output()}") from None
        return self

    def _ready(self, client: redis_sync.Redis) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            raise RuntimeError(f"worker {self.host} exited with {self.proc.returncode}:\n{self.output()}")
        try:
            # Heartbeating, and its Celery consumer is listening on its queue: the line Celery's worker_ready
            # prints, not the runtime's earlier "worker.ready" log line (before it, Celery has not installed its
            # SIGTERM handler yet, and a SIGTERM kills the process instead of draining it).
            ready = f"toolfleet worker {self.host} ready".encode()
            return bool(client.exists(f"toolfleet:host:{self.host}")) and ready in Path(self.log.name).read_bytes()
        except redis_sync.RedisError:
            return False

    def output(self) -> str:
        return Path(self.log.name).read_text(errors="replace")[-8000:]

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL the whole process group (worker and the sandboxes it started)."""
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def terminate(self, timeout: float = 60.0) -> int:
        """SIGTERM (graceful drain) and wait for the exit code."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise

    def stop(self, timeout: float = 60.0) -> None:
        """SIGTERM (graceful drain: the worker closes its sandboxes) unless it is gone; SIGKILL past ``timeout``."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()

    def cleanup(self) -> None:
        self.kill()
        self.log.close()


READY = re.compile(rb"toolfleet worker (\S+) ready")


class AnonymousWorker(WorkerProcess):
    """``toolfleet worker`` without ``--hostname``, as a user starts several on one machine: its identity
    is whatever it announces (``<machine>-<pid>-<hex>``)."""

    def __init__(self, broker_url: str, **kwargs) -> None:
        super().__init__(broker_url, **kwargs)
        at = self.args.index("--hostname")
        del self.args[at:at + 2]
        self.host = ""

    def _ready(self, client) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            raise RuntimeError(f"worker exited with {self.proc.returncode}:\n{self.output()}")
        found = READY.search(Path(self.log.name).read_bytes())
        if found is None:
            return False
        self.host = found.group(1).decode()
        return bool(client.exists(f"toolfleet:host:{self.host}"))


class Fleet:
    """A factory of workers against one Redis; everything started is stopped at teardown."""

    def __init__(self, redis: RedisServer) -> None:
        self.redis = redis
        self.workers: list[WorkerProcess] = []

    @property
    def url(self) -> str:
        return self.redis.url

    @property
    def hosts(self) -> list[str]:
        return [w.host for w in self.workers]

    def worker(self, **kwargs) -> WorkerProcess:
        w = WorkerProcess(self.redis.url, **kwargs)
        self.workers.append(w)
        return w.start()

    def anonymous_worker(self, **kwargs) -> WorkerProcess:
        """A worker started without ``--hostname`` (its default identity)."""
        w = AnonymousWorker(self.redis.url, **kwargs)
        self.workers.append(w)
        return w.start()

    def start_workers(self, n: int, named: bool = True, timeout: float = 60.0, **kwargs) -> list[WorkerProcess]:
        """``n`` workers started side by side (named ``w-<hex>``, or each with its default identity)."""
        kind: Callable[..., WorkerProcess] = WorkerProcess if named else AnonymousWorker
        started = [kind(self.redis.url, **kwargs) for _ in range(n)]
        self.workers.extend(started)
        for w in started:
            w.launch()
        for w in started:
            w.wait_ready(timeout)
        return started

    def worker_cpu_seconds(self) -> float:
        """CPU time (user + system) the worker processes have used so far."""
        return process_cpu_seconds([w.pid for w in self.workers if w.alive()])

    def worker_memory_mb(self) -> list[dict[str, float]]:
        """Each worker's resident memory now and at its peak, in MB (worker start order)."""
        return [process_memory_mb(w.pid) for w in self.workers if w.alive()]

    def stop(self, timeout: float = 60.0) -> None:
        """Every worker drained (SIGTERM to all, then each waited for), as an operator stops a fleet."""
        for w in self.workers:
            if w.alive():
                assert w.proc is not None
                w.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for w in self.workers:
            w.stop(max(0.1, deadline - time.monotonic()))

    def cleanup(self) -> None:
        for w in self.workers:
            w.cleanup()


def process_cpu_seconds(pids: list[int]) -> float:
    """CPU time (user + system) ``pids`` have used so far (Linux /proc; a process gone counts 0)."""
    ticks = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            ticks += int(fields[11]) + int(fields[12])  # utime, stime
        except (OSError, IndexError, ValueError):
            continue
    return ticks / os.sysconf("SC_CLK_TCK")


def process_memory_mb(pid: int) -> dict[str, float]:
    """A process's resident memory now and at its peak (VmRSS, VmHWM from /proc), in MB."""
    fields: dict[str, float] = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(("VmRSS:", "VmHWM:")):
                    key, value = line.split(":", 1)
                    fields[key] = round(int(value.split()[0]) / 1024, 1)
    except OSError:
        pass
    return {"rss_mb": fields.get("VmRSS", 0.0), "peak_rss_mb": fields.get("VmHWM", 0.0)}


@contextlib.asynccontextmanager
async def running_fleet(workers: int = 1, named: bool = True, **worker_kwargs: Any) -> AsyncIterator[Fleet]:
    """A throwaway fleet for a benchmark, as shipped: redis-server with a password, messages signed with
    the fleet secret (one per run unless ``TOOLFLEET_SECRET`` is set), ``workers`` worker processes with
    the worker's own timings and no tool modules unless given. Drained and stopped on exit."""
    ensure_fleet_secret()  # this process's dispatchers read it
    options: dict[str, Any] = {"concurrency": 64, "slots": 64, "imports": (), "heartbeat_interval": None,
                               "heartbeat_ttl": None, "orphan_grace": None, **worker_kwargs}
    redis = RedisServer(password=secrets.token_hex(16))
    fleet = Fleet(redis)
    try:
        await asyncio.to_thread(redis.start)
        await asyncio.to_thread(fleet.start_workers, workers, named, **options)
        yield fleet
    finally:
        await asyncio.to_thread(fleet.stop)
        fleet.cleanup()
        for w in fleet.workers:
            Path(w.log.name).unlink(missing_ok=True)
        redis.cleanup()
