"""Aggregate finished samples into the log footer's results (metrics per scorer) and stats (usage, timing)."""

from __future__ import annotations

import time

from orchestrator.model._model_output import ModelUsage
from orchestrator.scorer._score import scorer_info

from ._log import EvalMetricValue, EvalResults, EvalSample, EvalScore, EvalStats
from ._task import Task


def eval_results(task: Task, samples: dict[tuple[str, int], EvalSample], total: int) -> EvalResults:
    scored = [s for s in samples.values() if s.error is None]
    scores: list[EvalScore] = []
    seen: dict[str, int] = {}
    for instance in task.scorer:
        name, metrics = scorer_info(instance)
        seen[name] = seen.get(name, 0) + 1
        key = name if seen[name] == 1 else f"{name}{seen[name]}"
        values = [s.scores[key] for s in scored if key in s.scores]
        scores.append(EvalScore(name=key, scored_samples=len(values), metrics={
            m.__name__: EvalMetricValue(name=m.__name__, value=m(values)) for m in metrics}))
    return EvalResults(total_samples=total, completed_samples=len(scored),
                       error_samples=sum(s.error is not None for s in samples.values()), scores=scores)


def eval_stats(samples: dict[tuple[str, int], EvalSample], started_at: float) -> EvalStats:
    usage: dict[str, ModelUsage] = {}
    for s in samples.values():
        for name, u in s.model_usage.items():
            usage[name] = usage.get(name, ModelUsage()) + u
    return EvalStats(started_at=started_at, completed_at=time.time(), model_usage=usage)
