"""``eval_set``: several tasks x several models into one log directory, retried until complete (as Inspect's).

Each (task, model) pair is one eval with its own log in ``log_dir``. A pass runs every pair: a pair whose
log of the same identity is complete is skipped, an unfinished one is resumed (only its missing or errored
samples run), a new one starts a log. Passes repeat, up to ``retry_attempts`` more times with
``retry_wait`` seconds between them (doubling, capped), until every pair's log is complete. An
interrupted eval-set therefore completes on re-run with the same arguments, and never re-runs a sample
that finished.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from orchestrator.model._model import Model
from orchestrator.util._retry import Backoff, RetryPolicy

from ._eval import eval_async
from ._harbor import is_harbor_spec, register_oracle_model
from ._log_file import EvalLog
from ._task import Task, TaskError, import_task_file

DEFAULT_RETRY_ATTEMPTS = 10
DEFAULT_RETRY_WAIT_S = 30.0
MAX_RETRY_WAIT_S = 600.0


async def eval_set_async(
    tasks: Task | str | Sequence[Task | str],
    log_dir: str | Path,
    model: str | Model | Sequence[str | Model] | None = None,
    *,
    retry_attempts: int = DEFAULT_RETRY_ATTEMPTS,
    retry_wait: float = DEFAULT_RETRY_WAIT_S,
    **eval_kwargs: Any,
) -> tuple[bool, list[EvalLog]]:
    """Run every task with every model into ``log_dir`` until all logs are complete.

    Returns ``(success, logs)``: whether every log ended ``success``, and the last log of each pair.
    ``eval_kwargs`` go to each ``eval_async`` (limits, sandbox, broker, display, ...).
    """
    if retry_attempts < 0:
        raise TaskError(f"--retry-attempts must be 0 or more, got {retry_attempts}.")
    for reserved in ("log_file", "resume", "skip_complete", "log_dir"):
        if reserved in eval_kwargs:
            raise TaskError(f"eval_set decides '{reserved}' itself.")
    task_list = [tasks] if isinstance(tasks, (Task, str)) else list(tasks)
    models = [model] if model is None or isinstance(model, (str, Model)) else list(model)
    if not task_list or not models:
        raise TaskError("eval-set needs at least one task and one model.")
    # Every task file first: a model name may refer to a scripted policy any of them registers.
    for t in task_list:
        if is_harbor_spec(t):
            register_oracle_model()
        elif isinstance(t, str):
            import_task_file(t.partition("@")[0])
    backoff = Backoff(retry_passes(retry_attempts, retry_wait))
    while True:
        logs: list[EvalLog] = []
        for task in task_list:
            for m in models:
                [log] = await eval_async(task, m, log_dir=log_dir, resume=True, skip_complete=True, **eval_kwargs)
                logs.append(log)
        if all(log.status == "success" for log in logs):
            return True, logs
        if not await backoff.wait():
            return False, logs


def retry_passes(retry_attempts: int, retry_wait: float) -> RetryPolicy:
    """The passes after the first: ``retry_wait`` seconds before the first, doubling, at most
    ``MAX_RETRY_WAIT_S`` each; counted, not bounded in time."""
    return RetryPolicy(max_retries=retry_attempts, initial_delay=max(0.0, retry_wait), multiplier=2.0,
                       max_delay=MAX_RETRY_WAIT_S, max_elapsed=float("inf"), jitter=0.0)


def eval_set(tasks: Task | str | Sequence[Task | str], log_dir: str | Path, model: Any = None,
             **kwargs: Any) -> tuple[bool, list[EvalLog]]:
    """Sync wrapper over ``eval_set_async``."""
    return asyncio.run(eval_set_async(tasks, log_dir, model, **kwargs))
