"""Benchmark workloads for ``toolfleet bench <workload>``.

Contract: each workload is a module ``orchestrator/bench/<workload>.py`` exposing
``add_arguments(parser: argparse.ArgumentParser) -> None`` and ``async run(args) -> dict`` (a JSON object).
"""
