"""``toolfleet bench <workload> [--json]`` and ``toolfleet bench all [--quick] [--json]``.

Two kinds of workload, one contract (``add_arguments(parser)``, ``async run(args) -> dict``, the result):
- a toolfleet checkout's ``tests/benchmarks/`` (found by ``_checkout.py``): the benchmark suite, whose
  workloads start their own Redis and workers (or measure ``--broker``'s fleet where that makes sense);
  ``toolfleet bench all`` runs every one (``tests/benchmarks/_suite.py``) and exits non-zero, with one
  line per broken workload, when any fails;
- this install's fleet measurements (``orchestrator/bench/``: ``dispatch``, ``fanout``), which start
  nothing and take ``--broker``: what an operator runs against their own fleet, anywhere.
In a checkout its workload of a name wins (it runs the same measurement, on its own fleet by default).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import pkgutil
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from . import _checkout
from ._common import OneLineParser, fail

PACKAGE = "tests.benchmarks"


def checkout() -> Path | None:
    import orchestrator

    return _checkout.find_checkout(Path.cwd().resolve(), Path(orchestrator.__file__).resolve().parent)


def _benchmarks(root: Path) -> ModuleType:
    """The checkout's benchmark package; raises ImportError when another ``tests`` package shadows it."""
    _checkout.importable(root)
    package = importlib.import_module(PACKAGE)
    where = [Path(p).resolve() for p in package.__path__]
    if (root / _checkout.BENCHMARKS).resolve() not in where:
        raise ImportError(f"{PACKAGE} resolves to {', '.join(map(str, where))}, not {root / _checkout.BENCHMARKS}")
    return package


def workloads(root: Path | None = None) -> list[str]:
    """The checkout's workload names (none outside a checkout)."""
    root = root or checkout()
    if root is None:
        return []
    return sorted(m.name for m in pkgutil.iter_modules(_benchmarks(root).__path__) if not m.name.startswith("_"))


def add_command(commands: Any) -> None:
    p = commands.add_parser("bench", help="run a benchmark workload", add_help=False,
                            description="Run a benchmark workload: toolfleet bench WORKLOAD [--json] [options].")
    p.add_argument("argv", nargs=argparse.REMAINDER)
    p.set_defaults(handler=run_bench)


def run_bench(args: argparse.Namespace) -> int:
    from orchestrator.bench import FLEET_MEASUREMENTS

    argv = list(args.argv)
    root = checkout()
    try:
        names = workloads(root)
    except ImportError as exc:
        return fail(f"bench: cannot import the checkout's benchmarks at {root}: {exc}")
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: toolfleet bench WORKLOAD [--json] [options]\n       toolfleet bench all [--quick] [--json]"
              "\n\nworkloads: "
              + (f"{', '.join(names)} (checkout: {root})" if names else f"none here: {_checkout.WHERE}")
              + f"\non a running fleet (--broker URL): {', '.join(FLEET_MEASUREMENTS)}")
        return 0 if argv else 1
    name, rest = argv[0], argv[1:]
    if name in names:
        return _run_workload(importlib.import_module(f"{PACKAGE}.{name}"), f"toolfleet bench {name}", rest)
    if name in FLEET_MEASUREMENTS:
        return _run_workload(importlib.import_module(FLEET_MEASUREMENTS[name]), f"toolfleet bench {name}", rest)
    if root is None:
        return fail(f"bench {name}: no toolfleet checkout in {Path.cwd()} or above, and {_checkout.WHERE}; "
                    f"this install measures a running fleet: toolfleet bench {'|'.join(FLEET_MEASUREMENTS)} --broker "
                    "URL.")
    if name == "all":
        return _run_all(rest, names)
    return fail(f"Unknown bench workload '{name}' (available: {', '.join(names) or 'none'}).")


def _parser(prog: str, doc: str | None) -> argparse.ArgumentParser:
    return OneLineParser(prog=prog, description=(doc or "").strip(),
                         formatter_class=argparse.RawDescriptionHelpFormatter)


def _run_workload(module: ModuleType, prog: str, rest: list[str]) -> int:
    parser = _parser(prog, module.__doc__)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    module.add_arguments(parser)
    bench_args = parser.parse_args(rest)
    result = asyncio.run(module.run(bench_args))
    if bench_args.json:
        sys.stdout.write(json.dumps(result) + "\n")
    else:
        _pretty(result)
    return 0


def _run_all(rest: list[str], names: list[str]) -> int:
    _suite = importlib.import_module(f"{PACKAGE}._suite")
    parser = _parser("toolfleet bench all", _suite.__doc__)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    _suite.add_arguments(parser)
    args = parser.parse_args(rest)
    try:
        summary, outcomes = _suite.run_all(args, names)
    except ValueError as exc:
        return fail(f"bench all: {exc}")
    if args.json:
        sys.stdout.write(json.dumps(summary) + "\n")
    else:
        _pretty({"runs": [{k: v for k, v in r.items() if k != "result"} for r in summary["runs"]],
                 "wall_s": summary["wall_s"], "failed": summary["failed"]})
    sys.stdout.flush()
    for outcome in outcomes:
        if outcome.failure:
            fail(f"bench {outcome.workload} failed: {outcome.failure}")
    return 1 if summary["failed"] else 0


def _pretty(result: dict[str, Any]) -> None:
    runs = result.get("runs")
    if isinstance(runs, list) and runs and isinstance(runs[0], dict):
        keys = list(dict.fromkeys(k for r in runs for k in r))
        print("  ".join(f"{k:>12}" for k in keys))
        for r in runs:
            print("  ".join(f"{_cell(r.get(k)):>12}" for k in keys))
        others = {k: v for k, v in result.items() if k != "runs"}
        if others:
            print(json.dumps(others, indent=2))
    else:
        print(json.dumps(result, indent=2))


def _cell(value: Any) -> str:
    return f"{value:.3f}" if isinstance(value, float) else str(value)
