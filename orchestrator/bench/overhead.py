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
import subprocess
from pathlib import Path
from typing import Any

from ._overhead_workload import CALLS, measure_inspect, measure_toolfleet


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--reps", type=int, default=30, help="turns measured per workload (median reported)")
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


async def run(args: argparse.Namespace) -> dict[str, Any]:
    # The workloads run their own event loops; keep them off the CLI's loop.
    ours = await asyncio.to_thread(measure_toolfleet, args.reps)
    baseline = await asyncio.to_thread(_baseline, args)
    result: dict[str, Any] = {"workload": "overhead", "calls_per_turn": CALLS, **ours, "baseline": baseline}
    if baseline:
        result["ratio_serial"] = ours["serial_us_per_call"] / baseline["serial_us_per_call"]
        result["ratio_parallel"] = ours["parallel_us_per_call"] / baseline["parallel_us_per_call"]
    return result
