"""The stage planner (pure): split a turn's calls into stages.

A run of consecutive parallel-safe calls is one concurrent stage; every serial call is a stage of
its own and a barrier. A call to an unknown tool is serial.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")


def plan_stages(calls: Sequence[T], is_parallel: Callable[[T], bool]) -> list[list[T]]:
    stages: list[list[T]] = []
    run: list[T] = []
    for call in calls:
        if is_parallel(call):
            run.append(call)
            continue
        if run:
            stages.append(run)
            run = []
        stages.append([call])
    if run:
        stages.append(run)
    return stages
