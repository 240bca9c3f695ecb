"""Real services for distributed tests: a redis-server on a free loopback port and real worker processes.

Everything here is a real process that tests can SIGKILL: ``RedisServer`` (restartable on the same
port, no persistence — a restart loses everything, like a crashed cache) and ``WorkerProcess``
(``python -m workers.cli``, i.e. ``toolfleet worker``, with the repo root on PYTHONPATH so
``--import tests.support.sample_tools`` works). Every wait is bounded.

Authentication is on, as shipped: ``fleet_secret`` makes one fleet secret per test session and puts
it in ``TOOLFLEET_SECRET`` (what ``CeleryDispatcher`` reads); every worker gets it in its environment.
Workers here also allow ``local`` sandboxes (``--allow-local``), which most distributed tests use;
``allow_local=False`` starts one as a production worker would.
"""

from __future__ import annotations

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
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis as redis_sync

from tests.support.prerequisites import require_redis_server

REPO_ROOT = Path(__file__).resolve().parents[2]
SAMPLE_TOOLS = "tests.support.sample_tools"
SESSION_TOOL_MODULES = (SAMPLE_TOOLS, "tests.agent.agent_tools", "tests.review.review_tools")
SECRET_ENV = "TOOLFLEET_SECRET"


def ensure_fleet_secret() -> str:
    """The session's fleet secret (made once, kept in ``TOOLFLEET_SECRET`` for dispatchers and workers)."""
    secret = os.environ.get(SECRET_ENV)
    if not secret:
        secret = os.environ[SECRET_ENV] = secrets.token_hex(32)
    return secret


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait(predicate, timeout: float, what: str, interval: float = 0.05) -> None:  # type: ignore[no-untyped-def]
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
    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self.dir = tempfile.mkdtemp(prefix="toolfleet-redis-")
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def client(self) -> redis_sync.Redis:
        return redis_sync.Redis.from_url(self.url, socket_timeout=5)

    def start(self) -> "RedisServer":
        binary = require_redis_server()
        self.proc = subprocess.Popen(
            [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", self.dir, "--protected-mode", "no", "--loglevel", "warning"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        _wait(self._pings, 10.0, f"redis-server on port {self.port}")
        return self

    def _pings(self) -> bool:
        try:
            return bool(self.client().ping())
        except redis_sync.RedisError:
            return False

    def stop(self, sig: int = signal.SIGTERM) -> None:
        stop_process(self.proc, sig)
        self.proc = None

    def restart(self, down_for: float = 0.0) -> None:
        """Kill and start again on the same port (everything in it is lost)."""
        self.stop(signal.SIGKILL)
        time.sleep(down_for)
        self.start()

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


class WorkerProcess:
    """``toolfleet worker`` as a child process (its own process group, so a kill takes its sandboxes too)."""

    def __init__(self, broker_url: str, host: str | None = None, concurrency: int = 16, slots: int = 16,
                 imports: tuple[str, ...] = (SAMPLE_TOOLS,), heartbeat_interval: float = 0.5,
                 heartbeat_ttl: float = 3.0, orphan_grace: float = 2.0, extra_args: tuple[str, ...] = (),
                 allow_local: bool = True, secret: str | None = None) -> None:
        self.broker_url = broker_url
        self.host = host or f"w-{uuid.uuid4().hex[:8]}"
        self.secret = secret if secret is not None else ensure_fleet_secret()
        self.args = [
            sys.executable, "-m", "workers.cli", "--broker", broker_url, "--hostname", self.host,
            "--concurrency", str(concurrency), "--slots", str(slots),
            "--heartbeat-interval", str(heartbeat_interval), "--heartbeat-ttl", str(heartbeat_ttl),
            "--orphan-grace", str(orphan_grace),
            "--loglevel", os.environ.get("TOOLFLEET_TEST_WORKER_LOGLEVEL", "WARNING"),
            *[a for m in imports for a in ("--import", m)], *(["--allow-local"] if allow_local else []), *extra_args,
        ]
        self.log = tempfile.NamedTemporaryFile(prefix=f"toolfleet-{self.host}-", suffix=".log", delete=False)
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 30.0) -> "WorkerProcess":
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]),
               SECRET_ENV: self.secret}
        self.proc = subprocess.Popen(self.args, cwd=REPO_ROOT, env=env, stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
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
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
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

    def cleanup(self) -> None:
        self.kill()
        self.log.close()


READY = re.compile(rb"toolfleet worker (\S+) ready")


class AnonymousWorker(WorkerProcess):
    """``toolfleet worker`` without ``--hostname``, as a user starts several on one machine: its identity
    is whatever it announces (``<machine>-<pid>-<hex>``)."""

    def __init__(self, broker_url: str, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(broker_url, **kwargs)
        at = self.args.index("--hostname")
        del self.args[at:at + 2]
        self.host = ""

    def _ready(self, client) -> bool:  # type: ignore[no-untyped-def]
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

    def worker(self, **kwargs) -> WorkerProcess:  # type: ignore[no-untyped-def]
        w = WorkerProcess(self.redis.url, **kwargs)
        self.workers.append(w)
        return w.start()

    def anonymous_worker(self, **kwargs) -> WorkerProcess:  # type: ignore[no-untyped-def]
        """A worker started without ``--hostname`` (its default identity)."""
        w = AnonymousWorker(self.redis.url, **kwargs)
        self.workers.append(w)
        return w.start()

    def cleanup(self) -> None:
        for w in self.workers:
            w.cleanup()


# --- fixtures -----------------------------------------------------------------------------------

@pytest.fixture(scope="session")
def fleet_secret() -> str:
    return ensure_fleet_secret()


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    ensure_fleet_secret()  # (not a fixture argument: tests/conftest.py re-exports only the fixtures it names)
    server = RedisServer().start()
    yield server
    server.cleanup()


@pytest.fixture(scope="session")
def session_worker(redis_server: RedisServer) -> Iterator[WorkerProcess]:
    """One long-lived worker for the tool-execution suite over the Celery dispatcher."""
    # A worker looks tools up only in what it imported at start (never what a message names): the
    # session worker imports every test module whose tools the suites send over Celery.
    worker = WorkerProcess(redis_server.url, concurrency=32, imports=SESSION_TOOL_MODULES).start()
    yield worker
    worker.cleanup()


@pytest.fixture
def own_redis() -> Iterator[RedisServer]:
    """A private Redis for tests that restart or break it."""
    ensure_fleet_secret()
    server = RedisServer().start()
    yield server
    server.cleanup()


@pytest.fixture
def fleet(own_redis: RedisServer) -> Iterator[Fleet]:
    f = Fleet(own_redis)
    yield f
    f.cleanup()
