"""Tasks, evals and eval logs (mirrors Inspect's top-level ``Task``/``task``/``eval`` and ``inspect_ai.log``)."""

from ._errors import BrokerUnreachableError, DockerUnreachableError, EvalSetupError, PolicyFileError
from ._eval import eval, eval_async, eval_retry, eval_retry_async
from ._eval_set import eval_set, eval_set_async
from ._harbor import harbor_task, oracle_failures
from ._inspect_export import export_inspect_log, write_inspect_log
from ._load import load_task
from ._log_file import (
    LOG_FORMAT,
    LOG_VERSION,
    EvalConfig,
    EvalError,
    EvalLog,
    EvalResults,
    EvalSample,
    EvalSampleLimit,
    EvalScore,
    EvalSpec,
    EvalStats,
    LogFormatError,
    read_eval_log,
)
from ._policies import UnknownModelError, scripted_policies, scripted_policy
from ._progress import EvalProgress
from ._task import Task, TaskError, task

__all__ = [
    "LOG_FORMAT",
    "LOG_VERSION",
    "BrokerUnreachableError",
    "DockerUnreachableError",
    "EvalConfig",
    "EvalError",
    "EvalLog",
    "EvalProgress",
    "EvalResults",
    "EvalSample",
    "EvalSampleLimit",
    "EvalScore",
    "EvalSetupError",
    "EvalSpec",
    "EvalStats",
    "LogFormatError",
    "PolicyFileError",
    "Task",
    "TaskError",
    "UnknownModelError",
    "eval",
    "eval_async",
    "eval_retry",
    "eval_retry_async",
    "eval_set",
    "eval_set_async",
    "export_inspect_log",
    "harbor_task",
    "load_task",
    "oracle_failures",
    "read_eval_log",
    "scripted_policies",
    "scripted_policy",
    "task",
    "write_inspect_log",
]
