"""``toolfleet bench overhead``: in-process per-call overhead of ``execute_tools``.

100 trivial serial calls and 100 trivial parallel calls per turn, median µs per call, and the same
workload on Inspect AI's ``execute_tools`` in the same run when ``inspect-ai`` is importable (or
through ``--inspect-python`` pointing at an interpreter that has it).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import statistics
import subprocess
from pathlib import Path
from typing import Any

from ._overhead_workload import CALLS, measure_inspect, measure_toolfleet


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--reps", type=int, default=30, help="turns measured per workload and round (median)")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds of toolfleet and the baseline")
    parser.add_argument("--inspect-python", default=None,
                        help="a Python interpreter with inspect-ai installed, for the baseline")


def _baseline(args: argparse.Namespace) -> dict[str, Any] | None:
    if importlib.util.find_spec("inspect_ai") is not None:
        figures = measure_inspect(args.reps)
    elif args.inspect_python:
        script = Path(__file__).with_name("_overhead_workload.py")
        done = subprocess.run([args.inspect_python, str(script), "inspect", str(args.reps)],
                              capture_output=True, text=True, timeout=600, check=True)
        figures = json.loads(done.stdout.strip().splitlines()[-1])
    else:
        return None
    return {"workload": "overhead", "implementation": "inspect_ai", **figures}


def _interleaved(args: argparse.Namespace) -> tuple[dict[str, float], dict[str, Any] | None]:
    """Alternate rounds of ours and the baseline so that machine noise hits both alike; medians."""
    ours: list[dict[str, float]] = []
    theirs: list[dict[str, Any]] = []
    for _ in range(args.rounds):
        ours.append(measure_toolfleet(args.reps))
        baseline = _baseline(args)
        if baseline is not None:
            theirs.append(baseline)

    def median(rows: list[dict[str, Any]], key: str) -> float:
        return statistics.median(row[key] for row in rows)

    keys = ("serial_us_per_call", "parallel_us_per_call")
    ours_median = {k: median(ours, k) for k in keys}
    if not theirs:
        return ours_median, None
    return ours_median, {**theirs[0], **{k: median(theirs, k) for k in keys}}


async def run(args: argparse.Namespace) -> dict[str, Any]:
    # The workloads run their own event loops; keep them off the CLI's loop.
    ours, baseline = await asyncio.to_thread(_interleaved, args)
    result: dict[str, Any] = {"workload": "overhead", "calls_per_turn": CALLS, "rounds": args.rounds, **ours,
                              "baseline": baseline}
    if baseline:
        result["ratio_serial"] = ours["serial_us_per_call"] / baseline["serial_us_per_call"]
        result["ratio_parallel"] = ours["parallel_us_per_call"] / baseline["parallel_us_per_call"]
    return result
