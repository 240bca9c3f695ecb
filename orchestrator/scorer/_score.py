"""``Score``, the ``Scorer`` protocol, ``@scorer`` and metrics (mirrors ``inspect_ai.scorer``)."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import BaseModel

from ._target import Target

if TYPE_CHECKING:
    from orchestrator.solver._task_state import TaskState

CORRECT = "C"
INCORRECT = "I"
PARTIAL = "P"
NOANSWER = "N"

Value = str | int | float | bool | list[Any] | dict[str, Any]


class Score(BaseModel):
    value: Value
    answer: str | None = None
    explanation: str | None = None
    metadata: dict[str, Any] | None = None


class Scorer(Protocol):
    async def __call__(self, state: TaskState, target: Target) -> Score: ...


Metric = Callable[[list[Score]], float]

SCORER_ATTR = "__toolfleet_scorer__"


def value_to_float(value: Value) -> float:
    """C/I/P/N, booleans, numbers and yes/no strings as numbers (what accuracy averages)."""
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        v = value.strip().upper()
        table = {CORRECT: 1.0, INCORRECT: 0.0, PARTIAL: 0.5, NOANSWER: 0.0, "YES": 1.0, "NO": 0.0,
                 "TRUE": 1.0, "FALSE": 0.0}
        if v in table:
            return table[v]
        try:
            return float(v)
        except ValueError:
            return 0.0
    return 0.0


def accuracy() -> Metric:
    def metric(scores: list[Score]) -> float:
        return sum(value_to_float(s.value) for s in scores) / len(scores) if scores else 0.0

    metric.__name__ = "accuracy"
    return metric


def mean() -> Metric:
    m = accuracy()

    def metric(scores: list[Score]) -> float:
        return m(scores)

    metric.__name__ = "mean"
    return metric


def stderr() -> Metric:
    def metric(scores: list[Score]) -> float:
        n = len(scores)
        if n < 2:
            return 0.0
        values = [value_to_float(s.value) for s in scores]
        mu = sum(values) / n
        return math.sqrt(sum((v - mu) ** 2 for v in values) / (n - 1)) / math.sqrt(n)

    metric.__name__ = "stderr"
    return metric


def scorer(metrics: Sequence[Metric] | None = None,
           name: str | None = None) -> Callable[[Callable[..., Scorer]], Callable[..., Scorer]]:
    """Decorate a scorer factory; the instance carries its name and metrics (used for the log's results)."""

    def decorate(factory: Callable[..., Scorer]) -> Callable[..., Scorer]:
        @functools.wraps(factory)
        def wrapper(*args: Any, **kwargs: Any) -> Scorer:
            instance = factory(*args, **kwargs)
            setattr(instance, SCORER_ATTR, (name or factory.__name__, list(metrics or [accuracy(), stderr()])))
            return instance

        return wrapper

    return decorate


def scorer_info(instance: Any) -> tuple[str, list[Metric]]:
    info: tuple[str, list[Metric]] | None = getattr(instance, SCORER_ATTR, None)
    if info is not None:
        return info
    return getattr(instance, "__name__", type(instance).__name__), [accuracy(), stderr()]
