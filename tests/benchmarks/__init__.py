"""Benchmark workloads for ``toolfleet bench <workload>`` (run from a toolfleet checkout).

Contract: each workload is a module ``tests/benchmarks/<workload>.py`` exposing
``add_arguments(parser: argparse.ArgumentParser) -> None`` and ``async run(args) -> dict`` (a JSON object).
"""
