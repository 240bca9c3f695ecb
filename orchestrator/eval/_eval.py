"""``eval`` / ``eval_async`` / ``eval_retry``: run tasks' samples concurrently and write the durable log.

Back-pressure: ``max_samples`` worker coroutines pull samples from a queue (so memory does not grow with
the dataset), and ``max_sandboxes`` slots bound the sandboxes alive at once. Per-host sandbox caps are the
executing side's (the docker driver's ``max_sandboxes``, a worker's ``--slots``).

Resume: a sample whose last log line has no error is finished and never re-run. ``eval_retry(log)`` (or
``eval`` with the same ``log_dir`` and an unfinished log of the same *identity* — see ``_identity``)
re-opens the log, appends a ``run`` line, and runs only the samples still missing or errored; the run says
so on every display, and says why when an unfinished log of the same task was not resumed. Sandboxes left by a killed
run carry the eval id and the dead process's pid in their labels; the docker driver's reaper removes
them when the next run starts its driver (workers reap at start and periodically).
"""

from __future__ import annotations

import asyncio
import sys
import time
import traceback
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, cast

import structlog

from orchestrator._errors import ControlFlowSignal
from orchestrator.dataset import Sample
from orchestrator.dispatch import Dispatcher, SampleRoute
from orchestrator.model._batch import BatchScope, ResumeTable, batch_scope
from orchestrator.model._generate_config import GenerateConfig
from orchestrator.model._model import Model, model_context

from ._harbor import is_harbor_spec, register_oracle_model
from ._identity import recordable_args
from ._load import load_task
from ._log_file import (
    LOG_SUFFIX,
    EvalError,
    EvalLog,
    EvalSample,
    LogFormatError,
    LogWriter,
    SandboxRecord,
    read_eval_log,
    sample_key,
)
from ._plan import (
    _build_spec,
    _find_resumable,
    _generate_config,
    _identity,
    _Options,
    _sample_id_list,
    _sample_ids,
    _select,
)
from ._policies import configured_model, resolve_model
from ._preflight import describe_sandbox_error, preflight as run_preflight, probe_model
from ._progress import EvalProgress
from ._reducers import check_reducers
from ._results import eval_results, eval_stats
from ._retry_events import reporting_retries
from ._runner import SampleRunner
from ._sandboxes import SandboxConfigs
from ._setup import check_docker, make_dispatcher, resolve_policies
from ._task import Task, TaskError, import_task_file

_logger = structlog.get_logger("toolfleet.eval")

DEFAULT_MAX_SAMPLES = 32
DEFAULT_LOG_DIR = "logs"
LEFTOVER_CLOSE_TIMEOUT_S = 60.0

DisplayKind = Literal["auto", "rich", "log", "none"]
LogFormat = Literal["jsonl", "eval", "json"]


_active_logs: list[Path] = []  # logs of evals running in this process (the CLI's Ctrl-C message names them)


def active_log_paths() -> list[Path]:
    return list(_active_logs)


def eval(tasks: Task | str | Sequence[Task | str], model: str | Model | None = None, **kwargs: Any) -> list[EvalLog]:
    """Run ``tasks`` and return their logs (a thin sync wrapper over ``eval_async``)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(eval_async(tasks, model, **kwargs))
    raise RuntimeError("eval() cannot run inside an event loop: await eval_async(...) instead.")


def _quiet_unless_configured() -> None:
    """Called as a library (no CLI, no worker), toolfleet's own log lines stay quiet: warnings and
    errors on stderr (``TOOLFLEET_LOG_LEVEL`` to change), never debug lines on stdout. An application
    that configured structlog keeps its own configuration."""
    import logging
    import os

    import structlog

    if structlog.is_configured():
        return
    level = logging.getLevelName((os.environ.get("TOOLFLEET_LOG_LEVEL") or "warning").upper())
    numeric = level if isinstance(level, int) else logging.WARNING
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(numeric),
                        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr))


async def eval_async(
    tasks: Task | str | Sequence[Task | str],
    model: str | Model | None = None,
    *,
    limit: int | None = None,
    max_samples: int | None = None,
    max_sandboxes: int | None = None,
    retry_on_error: int | bool = 0,
    epochs: int | None = None,
    log_dir: str | Path = DEFAULT_LOG_DIR,
    sandbox: str | dict[str, Any] | Any | None = None,
    broker: str | None = None,
    approval: str | list[Any] | None = None,
    review: str | list[Any] | None = None,
    message_limit: int | None = None,
    token_limit: int | None = None,
    time_limit: float | None = None,
    working_limit: float | None = None,
    task_args: dict[str, Any] | None = None,
    model_args: dict[str, Any] | None = None,
    display: DisplayKind | Any = "none",
    resume: bool = True,
    log_file: str | Path | None = None,
    dispatcher: Dispatcher | None = None,
    sample_id: str | int | Sequence[str | int] | None = None,
    fail_on_error: bool | float | None = None,
    max_connections: int | None = None,
    max_subprocesses: int | None = None,
    epochs_reducer: str | Sequence[str] | None = None,
    config: GenerateConfig | dict[str, Any] | None = None,
    log_format: LogFormat = "jsonl",
    skip_complete: bool = False,
    preflight: bool = True,
    model_prices: str | Path | None = None,
    egress_allow: Sequence[str] | None = None,
) -> list[EvalLog]:
    """Run every task; see the module docstring for concurrency and resume semantics.

    ``retry_on_error``: how many times an errored sample is retried from scratch (True = 1).
    ``display``: "rich" (live progress), "log" (structlog lines), "none", "auto" (rich on a TTY) or a
    display object. ``log_file`` resumes that log (what ``eval_retry`` uses). ``dispatcher`` overrides
    the one ``broker`` would select. ``sample_id``: run only these samples. ``fail_on_error``: stop the
    eval once errors reach a count (>= 1) or a fraction (< 1) of the samples, or at the first (True);
    default: never stop, record the errors. ``max_connections``: model requests in flight at once.
    ``max_subprocesses``: tool calls executing at once. ``epochs_reducer``: how epochs' scores reduce
    (see ``_reducers``). ``config``: generation settings (temperature, max_tokens, ...) over the task's.
    ``log_format``: "jsonl" (always written, for streaming and resume) plus, with "eval" or "json", an
    Inspect-format copy written next to it when the eval ends. ``skip_complete``: a finished log of the
    same identity in ``log_dir`` is returned instead of running again (what ``eval_set`` relies on).
    ``preflight``: before the first sample, check sandbox specs, images, live workers and the model
    endpoint once (see ``_preflight``); False skips it. ``model_prices``: a price file over the built-in
    table (see ``orchestrator.model._pricing``; default ``$TOOLFLEET_MODEL_PRICES``). ``egress_allow``:
    embedded mode's ``--egress-allow`` (networks or hosts sandboxes with a network may reach besides the
    internet; docs/egress.md).
    """
    _quiet_unless_configured()
    task_list = [tasks] if isinstance(tasks, (Task, str)) else list(tasks)
    if log_file is not None and len(task_list) != 1:
        raise TaskError("log_file resumes one eval: give exactly one task.")
    # Model names can refer to scripted policies a task file registers, so task files import first;
    # the tasks are then built with the model active (agents may resolve "the active model" when built).
    for t in task_list:
        if is_harbor_spec(t):
            register_oracle_model()
        elif isinstance(t, str):
            import_task_file(t.partition("@")[0])
    reducers = check_reducers(epochs_reducer)
    for flag, value in (("--max-subprocesses", max_subprocesses), ("--max-samples", max_samples),
                        ("--max-sandboxes", max_sandboxes), ("--epochs", epochs)):
        if value is not None and value < 1:
            raise TaskError(f"{flag} must be at least 1, got {value}.")
    generate_config = _generate_config(config)
    if log_format not in ("jsonl", "eval", "json"):
        raise TaskError(f"Unknown log format '{log_format}' (use eval, json or jsonl).")
    prices_file = str(model_prices) if model_prices is not None else None
    resolved_model = reporting_retries(configured_model(resolve_model(model, **(model_args or {})), max_connections,
                                                        prices_file))
    with model_context(resolved_model):
        resolved = [load_task(t, task_args) if isinstance(t, str) else t for t in task_list]
    if preflight:
        await probe_model(resolved_model)
    own_dispatcher = dispatcher is None
    if dispatcher is None:
        dispatcher = await make_dispatcher(broker, egress_allow)
    logs: list[EvalLog] = []
    try:
        for task in resolved:
            options = _Options(limit, max_samples, max_sandboxes, int(retry_on_error), epochs, Path(log_dir), sandbox,
                               broker, approval, review, message_limit, token_limit, time_limit, resume,
                               Path(log_file) if log_file else None, _sample_id_list(sample_id), fail_on_error,
                               max_connections, max_subprocesses, reducers, generate_config,
                               recordable_args(model_args or {}), log_format, skip_complete, prices_file,
                               working_limit=working_limit)
            logs.append(await _eval_task(task, resolved_model, dispatcher, options, display, preflight))
    finally:
        if own_dispatcher:
            await dispatcher.aclose()
            await _drain_spares(dispatcher)
    return logs


async def _drain_spares(dispatcher: Dispatcher) -> None:
    """Embedded mode: warm spares would outlive the eval (idle until this process exits): remove them."""
    try:
        await asyncio.wait_for(dispatcher.drain_spares(), 60.0)
    except Exception as exc:  # noqa: BLE001 - best effort: the reaper removes what a dead process left
        _logger.warning("eval.drain_spares_failed", error=str(exc))


async def eval_retry_async(log: str | Path, **overrides: Any) -> EvalLog:
    """Resume (or retry the errored samples of) the eval recorded in ``log``."""
    header = read_eval_log(log, header_only=True)
    spec = header.eval
    if not spec.task_file:
        raise LogFormatError(f"'{log}' was written for a task object, not a task file: it cannot be re-run by name.")
    config = spec.config
    options: dict[str, Any] = dict(
        limit=config.limit, max_samples=config.max_samples, max_sandboxes=config.max_sandboxes,
        retry_on_error=config.retry_on_error, epochs=config.epochs, sandbox=config.sandbox, broker=config.broker,
        approval=config.approval, review=config.review, message_limit=config.message_limit,
        token_limit=config.token_limit, time_limit=config.time_limit, working_limit=config.working_limit,
        task_args=spec.task_args,
        log_dir=Path(log).parent, sample_id=config.sample_ids, epochs_reducer=config.epochs_reducer,
        fail_on_error=config.fail_on_error, max_connections=config.max_connections,
        max_subprocesses=config.max_subprocesses, config=spec.generate_config or None,
        log_format=config.log_format, model_prices=config.model_prices,
        # Redacted or non-JSON args cannot come back from the log: the provider's defaults/env apply.
        model_args={k: v for k, v in spec.model_args.items() if not (isinstance(v, str) and v.startswith("<"))},
    )
    options.update({k: v for k, v in overrides.items() if v is not None})
    import os

    from ._retry_broker import broker_for_retry

    options["broker"] = broker_for_retry(config.broker, overrides.get("broker"), os.environ)
    model = options.pop("model", None) or spec.model
    [result] = await eval_async(f"{spec.task_file}@{spec.task}", model, log_file=log, **options)
    return result


def eval_retry(log: str | Path, **overrides: Any) -> EvalLog:
    return asyncio.run(eval_retry_async(log, **overrides))


# -- one task --------------------------------------------------------------------------------------


def _task_dir(task: Task) -> Path | None:
    """Where a task's relative paths (compose files, Sample.files) resolve: its file's directory."""
    return Path(task.task_file).parent if task.task_file else None


async def _eval_task(task: Task, model: Model, dispatcher: Dispatcher, o: _Options, display: Any,
                     preflight: bool = True) -> EvalLog:
    # Eval-level settings override the task's.
    for name in ("message_limit", "token_limit", "time_limit", "working_limit"):
        if getattr(o, name) is not None:
            setattr(task, name, getattr(o, name))
    if o.generate_config is not None:
        task.config = task.config.merge(o.generate_config)
    sandbox_spec = o.sandbox if o.sandbox is not None else task.sandbox
    try:
        sandboxes = SandboxConfigs(sandbox_spec, _task_dir(task))  # each distinct spec parsed once, here
        sandbox = sandboxes.wire(sandbox_spec) if sandbox_spec is not None else None
    except ValueError as exc:
        raise TaskError(f"Task: {describe_sandbox_error(sandbox_spec, exc)}") from None
    if sandbox is not None and sandbox["type"] == "docker" and dispatcher.sandboxes_here:
        await check_docker()
    approval, review = resolve_policies(o.approval if o.approval is not None else task.approval,
                                         o.review if o.review is not None else task.review)

    samples = _select(_sample_ids(list(task.dataset)), o.sample_ids)
    if o.limit is not None:
        samples = samples[: o.limit]
    if task.prepare is not None:  # e.g. a Harbor task builds the images of the samples this run uses
        await asyncio.to_thread(task.prepare, samples)
    if preflight:
        await run_preflight(sandbox_spec, samples, dispatcher=dispatcher, configs=sandboxes, solver=task.solver,
                            runs_as_root=task.runs_as_root)
    epochs = o.epochs or task.epochs
    identity = _identity(task, model, o, sandbox)
    notice: str | None = None
    path = o.log_file
    if path is None and o.resume:
        path, notice = _find_resumable(o.log_dir, identity, complete_too=o.skip_complete)
    finished: dict[tuple[str, int], EvalSample] = {}
    recorded_batches: list[dict[str, Any]] = []
    if path is not None:
        existing = read_eval_log(path)
        if o.skip_complete and existing.status == "success":
            print(f"toolfleet: {path} is complete: not run again", file=sys.stderr, flush=True)
            return existing
        spec = existing.eval
        notice = f"resuming {path} ({sum(1 for s in existing.samples if s.error is None)} samples already done)"
        finished = {s.key: s for s in existing.samples if s.error is None}
        recorded_batches = existing.batches
        _active_logs.append(path)  # named by a Ctrl-C from here on
        writer = await LogWriter.resume(path)
        await _close_leftovers(existing.open_sandboxes, dispatcher, writer)
    else:
        spec = _build_spec(task, model, samples, o, sandbox, identity)
        stamp = time.strftime("%Y-%m-%dT%H-%M-%S", time.gmtime(spec.created))
        path = o.log_dir / f"{stamp}_{_slug(spec.task)}_{spec.eval_id}{LOG_SUFFIX}"
        _active_logs.append(path)  # before the file exists: a Ctrl-C once it does names it
        writer = await LogWriter.create(path, spec)
        notice = f"{notice}; starting a new log {path}" if notice else None
    run_id = uuid.uuid4().hex[:12]
    await writer.run(run_id, resumed=bool(finished) or o.log_file is not None)

    todo = [(s, e) for e in range(1, epochs + 1) for s in samples if sample_key(s.id, e) not in finished]  # type: ignore[arg-type]  # ids are set by now
    progress = EvalProgress(task=spec.task, model=str(model), log=str(path), total=len(samples) * epochs,
                            done=len(finished), resumed=len(finished), notice=notice, limiter=model.connections)
    if o.max_subprocesses is not None:
        from ._bounded_dispatch import BoundedDispatcher

        run_dispatcher: Dispatcher = BoundedDispatcher(dispatcher, o.max_subprocesses)
    else:
        run_dispatcher = dispatcher
    runner = SampleRunner(
        task=task, model=model, dispatcher=run_dispatcher, eval_id=spec.eval_id, run_id=run_id, sandboxes=sandboxes,
        approval=approval, review=review, retry_on_error=o.retry_on_error,
        sandbox_slots=asyncio.Semaphore(o.max_sandboxes) if o.max_sandboxes else None, progress=progress,
        epochs=epochs, journal=None if dispatcher.sandboxes_here else writer)
    results: dict[tuple[str, int], EvalSample] = dict(finished)
    started_at = time.time()

    from ._display import open_display
    from ._snapshots import may_use_docker, snapshots_removed

    status: str = "success"
    error: EvalError | None = None
    batches = _batch_scope(writer, recorded_batches, set(finished), progress)
    async with open_display(display, progress), snapshots_removed(dispatcher, spec.eval_id,
                                                                  may_use_docker(sandbox, samples)):
        queue: asyncio.Queue[tuple[Sample, int]] = asyncio.Queue()
        for item in todo:
            queue.put_nowait(item)

        async def worker() -> None:
            while True:
                try:
                    sample, epoch = queue.get_nowait()
                except asyncio.QueueEmpty:
                    return
                try:
                    result = await runner.run(sample, epoch)
                except Exception as exc:  # noqa: BLE001 - one sample's failure is never the eval's end
                    result = _failed_sample(sample, epoch, run_id, "SampleError", exc)
                # On disk first, then counted: a sample shown as done survives a crash.
                result = await _record_sample(writer, result)
                results[result.key] = result
                progress.done += 1
                progress.errors += result.error is not None
                progress.notify("sample")
                # a misconfigured fleet fails every sample: stop, say why
                if getattr(dispatcher, "fleet_error", None) is not None:
                    from ._errors import FleetMisconfiguredError

                    raise FleetMisconfiguredError(str(dispatcher.fleet_error))
                if result.error is not None and _should_fail(progress.errors, progress.total, o.fail_on_error):
                    raise _ErrorThresholdReached(
                        f"{progress.errors} sample(s) failed: the --fail-on-error threshold "
                        f"({o.fail_on_error}) is reached; the remaining samples were not run.")

        concurrency = max(1, min(o.max_samples or DEFAULT_MAX_SAMPLES, len(todo) or 1))
        with batch_scope(batches):  # the samples' batched requests are journaled in this log
            workers = [asyncio.create_task(worker()) for _ in range(concurrency)]
        try:
            await asyncio.gather(*workers)
        except BaseException as exc:
            for w in workers:
                w.cancel()
            await asyncio.gather(*workers, return_exceptions=True)
            status = "cancelled" if isinstance(exc, (asyncio.CancelledError, KeyboardInterrupt)) else "error"
            error = EvalError(type=type(exc).__name__, message=str(exc) or type(exc).__name__)
            await asyncio.shield(writer.footer(status, eval_results(task, results, progress.total, epochs,  # type: ignore[arg-type]  # results holds finished samples only
                                                                    o.epochs_reducer),
                                               eval_stats(results, started_at, model), error))
            if not isinstance(exc, _ErrorThresholdReached):
                raise
    if error is None:  # (else: stopped by fail_on_error, its footer is written)
        if any(s.error is not None for s in results.values()):
            status = "error"
            error = EvalError(type="SampleErrors", message=f"{sum(s.error is not None for s in results.values())} "
                              "sample(s) failed; re-run them with `toolfleet eval-retry LOG`.")
        await writer.footer(status, eval_results(task, results, progress.total, epochs, o.epochs_reducer),  # type: ignore[arg-type]  # results holds finished samples only
                            eval_stats(results, started_at, model), error)
    _active_logs.remove(path)
    if o.log_format != "jsonl":
        from ._inspect_export import ExportFormat, export_inspect_log

        await asyncio.to_thread(export_inspect_log, path, cast(ExportFormat, o.log_format))  # checked by the CLI
    return read_eval_log(path)


def _batch_scope(writer: LogWriter, recorded: list[dict[str, Any]], finished: set[tuple[str, int]],
                 progress: EvalProgress) -> BatchScope:
    """Batch mode's link to this eval: batches journaled in the log, those of a killed run collected."""
    def changed(pending: int, done: int) -> None:
        progress.batches_pending, progress.batches_done = pending, done
        progress.notify("batch")

    return BatchScope(journal=writer.batch, resume=ResumeTable.from_records(recorded, finished), on_change=changed)


class _ErrorThresholdReached(ControlFlowSignal):
    """``fail_on_error``'s threshold is reached: stop the eval (its footer records why)."""


def _should_fail(errors: int, total: int, fail_on_error: bool | float | None) -> bool:
    if fail_on_error is None or fail_on_error is False:
        return False
    if fail_on_error is True:
        return errors > 0
    if fail_on_error < 1:
        return errors >= fail_on_error * total
    return errors >= fail_on_error


def _failed_sample(sample: Sample | None, epoch: int, run_id: str, kind: str, exc: BaseException,
                   base: EvalSample | None = None) -> EvalSample:
    error = EvalError(type=kind, message=f"{type(exc).__name__}: {exc}"[:2000],
                      traceback="".join(traceback.format_exception(exc))[-8000:])
    if base is not None:
        return EvalSample(id=base.id, epoch=base.epoch, input=base.input, target=base.target,
                          started_at=base.started_at, completed_at=base.completed_at, total_time=base.total_time,
                          attempts=base.attempts, run_id=base.run_id, error=error)
    assert sample is not None and sample.id is not None
    return EvalSample(id=sample.id, epoch=epoch, input=sample.input, target=sample.target, run_id=run_id, error=error)


async def _record_sample(writer: LogWriter, result: EvalSample) -> EvalSample:
    """Write the sample; if it cannot be written, write (and return) a stub carrying that failure as its error."""
    try:
        await writer.sample(result)
        return result
    except Exception as exc:  # noqa: BLE001 - a failure to log one sample is that sample's error
        stub = _failed_sample(None, result.epoch, result.run_id or "", "LogWriteError", exc, base=result)
        try:
            await writer.sample(stub)
        except Exception:  # noqa: BLE001 - the log itself is unwritable: keep the result in memory
            _logger.warning("log_write_failed", log=str(writer.path), sample_id=str(result.id), error=str(exc))
        return stub


async def _close_leftovers(records: list[SandboxRecord], dispatcher: Dispatcher, writer: LogWriter) -> None:
    """Close sandboxes a killed run left open on worker hosts (bounded; a gone host needs nothing)."""

    async def close(rec: SandboxRecord) -> None:
        try:
            await asyncio.wait_for(dispatcher.close_sandbox(
                SampleRoute(sample_id=None if rec.sample_id is None else str(rec.sample_id), sandbox=rec.handle,
                            queue=rec.queue)), LEFTOVER_CLOSE_TIMEOUT_S)
        except Exception:  # noqa: BLE001 - best effort: the worker's reaper/expiry is the backstop
            return
        await writer.sandbox("close", rec)

    await asyncio.gather(*(close(rec) for rec in records))


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "-" for c in name)[:40]
