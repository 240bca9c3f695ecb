"""Aggregate finished samples into the log footer's results (metrics per scorer) and stats (usage, timing)."""

from __future__ import annotations

import time
from typing import Any

from orchestrator.model._model_output import ModelUsage
from orchestrator.scorer._score import Score, scorer_info

from ._log_file import EvalMetricValue, EvalResults, EvalSample, EvalScore, EvalStats
from ._reducers import DEFAULT_REDUCER, reducer
from ._task import Task


def eval_results(task: Task, samples: dict[tuple[str, int], EvalSample], total: int, epochs: int = 1,
                 reducers: list[str] | None = None) -> EvalResults:
    """Metrics per scorer. With several epochs each sample's scores are first reduced to one per reducer
    (default ``mean``), so metrics count samples, not sample-epochs. No scored sample: no metric values."""
    scored = [s for s in samples.values() if s.error is None]
    scores: list[EvalScore] = []
    seen: dict[str, int] = {}
    names = (reducers or [DEFAULT_REDUCER]) if epochs > 1 else [None]
    for instance in task.scorer:
        name, metrics = scorer_info(instance)
        seen[name] = seen.get(name, 0) + 1
        key = name if seen[name] == 1 else f"{name}{seen[name]}"
        for series, samples_scores in _series(key, scored).items():
            for reducer_name in names:
                values = [score for _, score in samples_scores]
                if reducer_name is not None:
                    by_sample: dict[str, list[Score]] = {}
                    for s, score in sorted(samples_scores, key=lambda pair: pair[0].epoch):
                        by_sample.setdefault(str(s.id), []).append(score)
                    reduce = reducer(reducer_name)
                    values = [reduce(group) for group in by_sample.values()]
                label = series if reducer_name is None or len(names) == 1 else f"{series}_{reducer_name}"
                scores.append(EvalScore(name=label, scorer=key, reducer=reducer_name, scored_samples=len(values),
                                        metrics={m.__name__: EvalMetricValue(name=m.__name__, value=m(values))
                                                 for m in metrics} if values else {}))
    return EvalResults(total_samples=total, completed_samples=len(scored),
                       error_samples=sum(s.error is not None for s in samples.values()), scores=scores)


def _series(key: str, scored: list[EvalSample]) -> dict[str, list[tuple[EvalSample, Score]]]:
    """A scorer's scores as the series its metrics run over: itself, or, when its values are dicts (a Harbor
    verifier's rewards), one series per dict key, named after the key, over every scored sample: a sample
    without that key counts 0, as Harbor's mean counts it."""
    pairs = [(s, s.scores[key]) for s in scored if key in s.scores]
    if not pairs or not all(isinstance(score.value, dict) for _, score in pairs):
        return {key: pairs}
    names = list(dict.fromkeys(k for _, score in pairs for k in score.value))  # type: ignore[union-attr]
    return {name: [(s, Score(value=score.value.get(name, 0.0), answer=score.answer))  # type: ignore[union-attr]
                   for s, score in pairs] for name in names}


def eval_stats(samples: dict[tuple[str, int], EvalSample], started_at: float, model: Any = None) -> EvalStats:
    """Usage (with cost) summed over samples; with the eval's ``model``, its adaptive connection report."""
    usage: dict[str, ModelUsage] = {}
    for s in samples.values():
        for name, u in s.model_usage.items():
            usage[name] = usage.get(name, ModelUsage()) + u
    limiter = getattr(model, "connections", None)
    connections = {str(model): limiter.report()} if limiter is not None else {}
    return EvalStats(started_at=started_at, completed_at=time.time(), model_usage=usage, connections=connections)
