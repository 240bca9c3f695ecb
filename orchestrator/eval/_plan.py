"""Eval planning, pure apart from reading logs: options, sample selection, the eval's identity and spec,
and which unfinished log (if any) a run resumes."""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator import __version__
from orchestrator.dataset import Sample
from orchestrator.model._generate_config import GenerateConfig
from orchestrator.model._model import Model
from orchestrator.scorer._score import scorer_info
from orchestrator.solver._solver import solver_name

from ._identity import EvalIdentity, file_hash, identity_differences, recordable_args
from ._log_file import LOG_SUFFIX, EvalConfig, EvalDataset, EvalSpec, LogFormatError, read_eval_log
from ._setup import redact
from ._task import Task, TaskError


@dataclass
class _Options:
    limit: int | None
    max_samples: int | None
    max_sandboxes: int | None
    retry_on_error: int
    epochs: int | None
    log_dir: Path
    sandbox: Any
    broker: str | None
    approval: Any
    review: Any
    message_limit: int | None
    token_limit: int | None
    time_limit: float | None
    resume: bool
    log_file: Path | None
    sample_ids: list[str] | None = None
    fail_on_error: bool | float | None = None
    max_connections: int | None = None
    max_subprocesses: int | None = None
    epochs_reducer: list[str] | None = None
    generate_config: GenerateConfig | None = None
    model_args: dict[str, Any] | None = None
    log_format: str = "jsonl"
    skip_complete: bool = False
    model_prices: str | None = None
    working_limit: float | None = None


def _sample_id_list(value: str | int | Sequence[str | int] | None) -> list[str] | None:
    if value is None:
        return None
    items = [value] if isinstance(value, (str, int)) else list(value)
    out: list[str] = []
    for item in items:
        out.extend(part.strip() for part in str(item).split(",") if part.strip())
    return out or None


def _select(samples: list[Sample], ids: list[str] | None) -> list[Sample]:
    if ids is None:
        return samples
    known = {str(s.id) for s in samples}
    missing = [i for i in ids if i not in known]
    if missing:
        raise TaskError(f"No sample with id {', '.join(repr(m) for m in missing)} in the dataset "
                        f"(it has {len(samples)} samples, e.g. {', '.join(sorted(known)[:5])}).")
    wanted = set(ids)
    return [s for s in samples if str(s.id) in wanted]


def _generate_config(config: GenerateConfig | dict[str, Any] | None) -> GenerateConfig | None:
    if config is None or isinstance(config, GenerateConfig):
        return config
    try:
        return GenerateConfig(**config)
    except ValueError as exc:
        raise TaskError(f"Invalid generation settings {config}: {_first_error(exc)}") from exc


def _first_error(exc: Exception) -> str:
    errors = getattr(exc, "errors", None)
    if callable(errors):
        try:
            first = errors()[0]
            where = ".".join(str(p) for p in first.get("loc", ()))
            return f"{where}: {first.get('msg')}" if where else str(first.get("msg"))
        except (IndexError, TypeError):
            pass
    return str(exc).splitlines()[0]


def _sample_ids(samples: list[Sample]) -> list[Sample]:
    seen: set[str] = set()
    out = []
    for i, sample in enumerate(samples):
        if sample.id is None:
            sample = sample.model_copy(update={"id": i + 1})
        if str(sample.id) in seen:
            raise TaskError(f"Duplicate sample id '{sample.id}' in the dataset.")
        seen.add(str(sample.id))
        out.append(sample)
    return out


def _identity(task: Task, model: Model, o: _Options, sandbox: dict[str, Any] | None) -> EvalIdentity:
    return EvalIdentity(
        task=task.registry_name or task.name, task_file=task.task_file,
        task_file_hash=task.source_hash or file_hash(task.task_file),
        task_args=recordable_args(task.task_args), model=str(model), model_args=o.model_args or {},
        # Batch mode changes how requests travel, not what they say: a run with or without it resumes the other.
        generate_config=task.config.model_dump(exclude_none=True, exclude={"batch"}), sandbox=sandbox,
        solver=solver_name(task.solver) if task.solver is not None else "generate",
        scorers=[scorer_info(s)[0] for s in task.scorer], limit=o.limit, sample_ids=o.sample_ids,
        epochs=o.epochs or task.epochs, epochs_reducer=o.epochs_reducer)


def _build_spec(task: Task, model: Model, samples: list[Sample], o: _Options, sandbox: dict[str, Any] | None,
                identity: EvalIdentity) -> EvalSpec:
    def policy_name(value: Any) -> str | None:
        return None if value is None else value if isinstance(value, str) else "<python>"

    return EvalSpec(
        eval_id=uuid.uuid4().hex[:22], created=time.time(), task=task.registry_name or task.name,
        task_file=task.task_file, task_args=task.task_args, model=str(model),
        dataset=EvalDataset(name=task.dataset.name, location=task.dataset.location, samples=len(samples),
                            sample_ids=[s.id for s in samples if s.id is not None]),
        solver=solver_name(task.solver) if task.solver is not None else "generate",
        scorers=[scorer_info(s)[0] for s in task.scorer],
        model_args=o.model_args or {}, generate_config=task.config.model_dump(exclude_none=True),
        task_file_hash=identity.task_file_hash, identity=identity,
        config=EvalConfig(limit=o.limit, sample_ids=o.sample_ids, epochs_reducer=o.epochs_reducer,
                          fail_on_error=o.fail_on_error, max_connections=o.max_connections,
                          max_subprocesses=o.max_subprocesses, log_format=o.log_format, model_prices=o.model_prices,
                          epochs=o.epochs or task.epochs, max_samples=o.max_samples,
                          max_sandboxes=o.max_sandboxes, retry_on_error=o.retry_on_error, sandbox=sandbox,
                          broker=redact(o.broker), approval=policy_name(o.approval), review=policy_name(o.review),
                          message_limit=task.message_limit, token_limit=task.token_limit, time_limit=task.time_limit,
                          working_limit=task.working_limit),
        toolfleet_version=__version__,
    )


def _find_resumable(log_dir: Path, identity: EvalIdentity,
                    complete_too: bool = False) -> tuple[Path | None, str | None]:
    """The newest unfinished log in ``log_dir`` with this identity (or finished, with ``complete_too``: eval-set
    skips those); else why the newest unfinished log of the same task (if any) was not resumed (a notice)."""
    if not log_dir.is_dir():
        return None, None
    passed_over: str | None = None
    for path in sorted(log_dir.glob(f"*{LOG_SUFFIX}"), reverse=True):
        try:
            spec = read_eval_log(path, header_only=True).eval
            if spec.task != identity.task or spec.task_file != identity.task_file:
                continue
            differences = identity_differences(spec.identity, identity)
            if read_eval_log(path).status == "success":
                if complete_too and not differences:
                    return path, None
                continue
            if not differences:
                return path, None
            if passed_over is None:
                passed_over = f"not resuming {path} ({', '.join(differences)} differ)"
        except (LogFormatError, ValueError, OSError):
            continue
    return None, passed_over
