"""The review benchmark workload runs and reports its figures (no timing assertions: figures only)."""

from __future__ import annotations

import argparse

from tests.benchmarks import review as bench


async def test_bench_review_reports_per_call_figures() -> None:
    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    figures = await bench.run(parser.parse_args(["--calls", "4", "--reps", "2"]))
    assert figures["workload"] == "review" and figures["calls_per_turn"] == 4
    for mode in ("serial", "parallel"):
        for label in ("none", "continue", "chain3"):
            assert figures[f"{mode}_{label}_us_per_call"] > 0
        assert f"{mode}_review_cost_us_per_call" in figures
