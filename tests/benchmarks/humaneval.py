"""HumanEval end to end (examples/humaneval.py) with a scripted policy, per mode: wall time and samples/s.

Modes (``--modes``): ``embedded:local``, ``embedded:docker``, ``celery:docker`` (also ``celery:local``).
Celery modes use ``--broker`` if given; otherwise the bench starts its own redis-server and ``--workers``
worker processes on this machine, and stops them afterwards. A mode that cannot run here (no Docker
daemon, no redis-server) is reported under ``skipped`` with the reason, not as a failure.

JSON: ``{"workload", "policy", "limit", "runs": [{"mode", "sandbox", "correct", "total", "wall_s",
"samples_per_s", "errors"}], "skipped": [{"mode", "sandbox", "reason"}]}``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

DEFAULT_TASK_FILE = Path(__file__).resolve().parents[2] / "examples" / "humaneval.py"
DEFAULT_MODES = "embedded:local,embedded:docker,celery:docker"
START_TIMEOUT_S = 60.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--modes", default=DEFAULT_MODES, help=f"comma-separated mode:sandbox pairs (default {DEFAULT_MODES})")
    parser.add_argument("--policy", default="oracle", help="scripted policy: oracle or wrong")
    parser.add_argument("--limit", type=int, default=None, help="first N problems (default: all 164)")
    parser.add_argument("--max-samples", type=int, default=32)
    parser.add_argument("--broker", default=None, help="use this Redis for celery modes instead of starting one")
    parser.add_argument("--workers", type=int, default=1, help="worker processes to start for celery modes")
    parser.add_argument("--worker-concurrency", type=int, default=32)
    parser.add_argument("--task-file", default=str(DEFAULT_TASK_FILE))


async def run(args: argparse.Namespace) -> dict[str, Any]:
    runs: list[dict[str, Any]] = []
    skipped: list[dict[str, Any]] = []
    for item in [m.strip() for m in args.modes.split(",") if m.strip()]:
        mode, _, sandbox = item.partition(":")
        sandbox = sandbox or "local"
        try:
            if mode == "embedded":
                runs.append(await _run_mode(args, mode, sandbox, broker=None))
            elif mode == "celery":
                async with _fleet(args) as broker:
                    runs.append(await _run_mode(args, mode, sandbox, broker=broker))
            else:
                skipped.append({"mode": mode, "sandbox": sandbox, "reason": f"unknown mode '{mode}'"})
        except _Skip as exc:
            skipped.append({"mode": mode, "sandbox": sandbox, "reason": str(exc)})
    return {"workload": "humaneval", "policy": args.policy, "limit": args.limit, "runs": runs, "skipped": skipped}


class _Skip(Exception):
    pass


async def _run_mode(args: argparse.Namespace, mode: str, sandbox: str, broker: str | None) -> dict[str, Any]:
    from orchestrator.eval import DockerUnreachableError, eval_async

    with tempfile.TemporaryDirectory(prefix="toolfleet-bench-") as log_dir:
        start = time.perf_counter()
        try:
            [log] = await eval_async(args.task_file, f"scripted/{args.policy}", limit=args.limit, sandbox=sandbox,
                                     broker=broker, max_samples=args.max_samples, log_dir=log_dir, resume=False,
                                     display="none")
        except DockerUnreachableError as exc:
            raise _Skip(str(exc)) from exc
        wall = time.perf_counter() - start
    correct = sum(1 for s in log.samples if s.error is None and any(v.value == "C" for v in s.scores.values()))
    total = len(log.samples)
    return {"mode": mode, "sandbox": sandbox, "correct": correct, "total": total, "wall_s": round(wall, 3),
            "samples_per_s": round(total / wall, 3) if wall > 0 else None,
            "errors": sum(1 for s in log.samples if s.error is not None),
            **({"first_error": next(f"{s.id}: {s.error.message}" for s in log.samples if s.error is not None)}
               if any(s.error is not None for s in log.samples) else {})}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def _wait(predicate: Any, what: str, timeout: float = START_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await asyncio.to_thread(predicate):
            return
        await asyncio.sleep(0.1)
    raise _Skip(f"timed out waiting for {what}")


@contextlib.asynccontextmanager
async def _fleet(args: argparse.Namespace) -> AsyncIterator[str]:
    """A broker and workers for the celery modes: the given broker, or our own redis + worker processes."""
    import redis

    procs: list[subprocess.Popen[bytes]] = []
    tmp = tempfile.mkdtemp(prefix="toolfleet-bench-fleet-")
    try:
        broker = args.broker
        if broker is None:
            binary = shutil.which("redis-server")
            if binary is None:
                raise _Skip("redis-server is not installed (give --broker to use a running Redis)")
            port = _free_port()
            procs.append(subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                                           "--appendonly", "no", "--dir", tmp], stdout=subprocess.DEVNULL,
                                          stderr=subprocess.DEVNULL))
            broker = f"redis://127.0.0.1:{port}/0"
            client = redis.Redis.from_url(broker, socket_timeout=2)

            def pings() -> bool:
                try:
                    return bool(client.ping())
                except redis.RedisError:
                    return False

            await _wait(pings, "redis-server")
            if not os.environ.get("TOOLFLEET_SECRET"):  # workers run only messages signed with the fleet secret
                import secrets

                os.environ["TOOLFLEET_SECRET"] = secrets.token_hex(32)
            for i in range(args.workers):
                host = f"bench-{os.getpid()}-{i}"
                log = open(Path(tmp) / f"{host}.log", "wb")
                procs.append(subprocess.Popen(
                    [sys.executable, "-m", "orchestrator.cli", "worker", "--broker", broker, "--hostname", host,
                     "--concurrency", str(args.worker_concurrency), "--slots", str(args.max_samples), "--allow-local"],
                    stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
                await _wait(lambda h=host: bool(client.exists(f"toolfleet:host:{h}")), f"worker {host}")
        yield broker
    finally:
        for proc in reversed(procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in reversed(procs):
            try:
                await asyncio.to_thread(proc.wait, 60)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL) if proc.pid else None
                proc.kill()
        shutil.rmtree(tmp, ignore_errors=True)
