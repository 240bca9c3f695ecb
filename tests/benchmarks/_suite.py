"""``toolfleet bench all [--quick] [--json]``: every workload, one after another, each in its own process.

A benchmark nobody runs rots (a baseline the workers started to drop, an answer check the agent
outgrew); this runs them all so CI notices. Each workload runs as ``toolfleet bench NAME --json``
in a subprocess (a fleet it leaks, an env var it sets or a crash stays there) with a time bound,
and fails when it exits non-zero, prints no JSON object, times out, or reports errors itself
(``errors`` > 0, ``ok`` false). ``--quick`` gives each workload the small size in ``QUICK`` (the
whole suite in about three minutes on a quiet 2-core machine); without it, the workloads' defaults.

``QUICK`` must name every workload (a test checks), so a new workload cannot be left out.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any

from tests.support.fleet import REPO_ROOT, child_env, python

DEFAULT_TIMEOUT_S = 600.0

# Each workload's arguments at a small size: enough to run every code path the figures come from.
QUICK: dict[str, list[str]] = {
    "agents": ["--samples", "300", "--turns", "3", "--latency", "0.2", "--ramp", "0.5"],
    "configs": ["--sandboxes", "42", "--warmup", "14", "--concurrency", "4"],
    "dispatch": ["--sandbox", "local", "--calls", "60", "--baseline-calls", "5"],
    "exec": ["--calls", "30", "--concurrency", "8"],
    "fanout": ["--sandbox", "docker", "--samples", "8", "--stages", "3", "--baseline-stages", "1"],
    "flood": ["--sandbox", "local", "--calls", "4", "--mb", "5", "--sandboxes", "2", "--in-flight", "4"],
    "humaneval": ["--modes", "embedded:local,celery:local", "--limit", "4", "--max-samples", "4"],
    "overhead": ["--reps", "5", "--rounds", "1"],
    "review": ["--calls", "20", "--reps", "5"],
    "scale": ["--workers", "2", "--sandboxes", "100", "--calls", "2"],
    "snapshot": ["--forks", "2", "--mib", "1"],
    "swe": ["--samples", "2", "--images", "1", "--workers", "1", "--slots", "2"],
}


@dataclass
class Outcome:
    workload: str
    wall_s: float
    failure: str | None  # None: it ran and reported no error
    result: dict[str, Any] | None


def verdict(returncode: int | None, stdout: str, stderr: str,
            timeout: float) -> tuple[str | None, dict[str, Any] | None]:
    """Why a workload's run failed (None: it passed) and its result object. Pure; table-tested.

    ``returncode`` None means the run was stopped at its time bound."""
    if returncode is None:
        return f"timed out after {timeout:g} s", None
    lines = [line for line in stdout.strip().splitlines() if line.strip()]
    result: dict[str, Any] | None = None
    if lines:
        try:
            parsed = json.loads(lines[-1])
        except ValueError:
            parsed = None
        result = parsed if isinstance(parsed, dict) else None
    if returncode != 0:
        last = next((line for line in reversed(stderr.strip().splitlines()) if line.strip()), "no output")
        return f"exited {returncode}: {' '.join(last.split())[:300]}", result
    if result is None:
        return "printed no JSON object", None
    problems = _reported_problems(result)
    return (problems or None), result


def _reported_problems(result: dict[str, Any]) -> str:
    """What a result object says went wrong: ``errors`` > 0 or ``ok`` false, at top level or in a run."""
    found: list[str] = []
    for where, obj in [("", result),
                       *[(f"run {i}: ", r) for i, r in enumerate(result.get("runs") or []) if isinstance(r, dict)]]:
        errors = obj.get("errors")
        if isinstance(errors, (int, float)) and not isinstance(errors, bool) and errors > 0:
            first = obj.get("first_error")
            found.append(f"{where}{errors:g} error(s)"
                         + (f" (first: {' '.join(str(first).split())[:200]})" if first else ""))
        if obj.get("ok") is False:
            found.append(f"{where}ok is false")
    return "; ".join(found)


def run_one(name: str, argv: list[str], timeout: float) -> Outcome:
    # The toolfleet this process runs (an installed wheel, or the checkout), with the checkout's benchmarks.
    cmd = python("-m", "orchestrator.cli", "bench", name, "--json", *argv)
    start = time.perf_counter()
    # Its own session, so a timeout ends the workload's fleet (redis-server, workers) with it.
    proc = subprocess.Popen(cmd, cwd=REPO_ROOT, env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
        code: int | None = proc.returncode
    except subprocess.TimeoutExpired:
        _stop_group(proc)
        out, err = proc.communicate()
        code = None
    failure, result = verdict(code, out or "", err or "", timeout)
    return Outcome(name, round(time.perf_counter() - start, 1), failure, result)


def _stop_group(proc: subprocess.Popen[str]) -> None:
    import signal

    for sig, wait in ((signal.SIGTERM, 30), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quick", action="store_true", help="each workload at a small size (a few minutes in all)")
    parser.add_argument("--only", default=None, help="comma-separated workloads (default: all)")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, help="seconds each workload may take")


def plan(names: list[str], quick: bool, only: str | None) -> list[tuple[str, list[str]]]:
    """(workload, arguments) to run, in order; raises ValueError naming an unknown ``--only`` entry."""
    chosen = names
    if only:
        chosen = [n.strip() for n in only.split(",") if n.strip()]
        unknown = [n for n in chosen if n not in names]
        if unknown:
            raise ValueError(f"unknown workload(s) {', '.join(unknown)} (available: {', '.join(names)})")
    return [(n, list(QUICK.get(n, [])) if quick else []) for n in chosen]


def run_all(args: argparse.Namespace, names: list[str]) -> tuple[dict[str, Any], list[Outcome]]:
    outcomes = []
    for name, argv in plan(names, args.quick, args.only):
        print(f"bench all: {name} ...", file=sys.stderr, flush=True)
        outcome = run_one(name, argv, args.timeout)
        print(f"bench all: {name} {'FAILED' if outcome.failure else 'ok'} in {outcome.wall_s:g} s",
              file=sys.stderr, flush=True)
        outcomes.append(outcome)
    summary = {
        "workload": "all",
        "quick": args.quick,
        "wall_s": round(sum(o.wall_s for o in outcomes), 1),
        "failed": [o.workload for o in outcomes if o.failure],
        "runs": [{"workload": o.workload, "ok": o.failure is None, "wall_s": o.wall_s,
                  **({"failure": o.failure} if o.failure else {}), "result": o.result} for o in outcomes],
    }
    return summary, outcomes
