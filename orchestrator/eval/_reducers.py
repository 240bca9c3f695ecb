"""Epoch reducers: one score per sample from its epochs' scores (as Inspect's ``--epochs-reducer``).

``mean`` (the default), ``max``, ``median``, ``mode`` (the most common value, kept as is), ``at_least_K``
(1 if at least K epochs scored correct, else 0) and ``pass_at_K`` (the unbiased pass@k estimate
``1 - C(n-c, k) / C(n, k)`` over n epochs with c correct). Metrics are then computed over the reduced
scores, so 2 epochs x 2 samples count as N=2, not 4.
"""

from __future__ import annotations

import math
import re
import statistics
from collections import Counter
from collections.abc import Callable, Sequence

from orchestrator.scorer._score import Score, value_to_float

from ._errors import SetupError

Reducer = Callable[[list[Score]], Score]
DEFAULT_REDUCER = "mean"
REDUCER_NAMES = "mean, max, median, mode, at_least_K, pass_at_K"


class ReducerError(SetupError):
    """An unknown ``--epochs-reducer`` name (a user mistake, one line)."""


def _numeric(name: str, fn: Callable[[list[float]], float]) -> Reducer:
    def reduce(scores: list[Score]) -> Score:
        values = [value_to_float(s.value) for s in scores]
        return Score(value=fn(values), answer=scores[-1].answer, explanation=f"{name} of {len(values)} epochs")

    return reduce


def _mode(scores: list[Score]) -> Score:
    counts = Counter(repr(s.value) for s in scores)
    best = max(counts.values())
    winner = next(s for s in scores if counts[repr(s.value)] == best)
    return Score(value=winner.value, answer=winner.answer, explanation=f"mode of {len(scores)} epochs")


def _pass_at(k: int) -> Callable[[list[float]], float]:
    def estimate(values: list[float]) -> float:
        n, c = len(values), sum(1 for v in values if v >= 1.0)
        if n < k:
            return 1.0 if c else 0.0
        if n - c < k:
            return 1.0
        return 1.0 - math.comb(n - c, k) / math.comb(n, k)

    return estimate


def reducer(name: str) -> Reducer:
    """The reducer called ``name``; ``ReducerError`` (one line) when there is none."""
    simple: dict[str, Callable[[list[float]], float]] = {
        "mean": lambda v: sum(v) / len(v), "max": max, "median": statistics.median}
    if name in simple:
        return _numeric(name, simple[name])
    if name == "mode":
        return _mode
    match = re.fullmatch(r"(at_least|pass_at)_(\d+)", name)
    if match and int(match.group(2)) >= 1:
        k = int(match.group(2))
        if match.group(1) == "at_least":
            return _numeric(name, lambda v: 1.0 if sum(1 for x in v if x >= 1.0) >= k else 0.0)
        return _numeric(name, _pass_at(k))
    raise ReducerError(f"Unknown epochs reducer '{name}' (use one of: {REDUCER_NAMES}).")


def check_reducers(names: Sequence[str] | str | None) -> list[str] | None:
    if names is None:
        return None
    listed = [names] if isinstance(names, str) else list(names)
    for name in listed:
        reducer(name)
    return listed
