"""Scores and scorers (mirrors ``inspect_ai.scorer``)."""

from ._builtin import includes, match
from ._harbor import harbor_verifier, parse_rewards
from ._sandbox_test import ScorerExecError, exec_in_sandbox, sandbox_test
from ._score import (
    CORRECT,
    INCORRECT,
    NOANSWER,
    PARTIAL,
    Metric,
    Score,
    Scorer,
    accuracy,
    mean,
    scorer,
    stderr,
    value_to_float,
)
from ._target import Target

__all__ = [
    "CORRECT",
    "INCORRECT",
    "NOANSWER",
    "PARTIAL",
    "Metric",
    "Score",
    "Scorer",
    "ScorerExecError",
    "Target",
    "accuracy",
    "exec_in_sandbox",
    "harbor_verifier",
    "includes",
    "match",
    "mean",
    "parse_rewards",
    "sandbox_test",
    "scorer",
    "stderr",
    "value_to_float",
]
