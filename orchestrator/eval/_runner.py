"""Run one sample: sandbox, context, limits, solver, scorers, retries — and turn it into an ``EvalSample``.

Per attempt: open the sample's sandbox through the dispatcher (bounded by the eval's sandbox slots),
bind the route, a fresh transcript, a usage scope, the model, the approval/review policies and the
sample state; enter the sample's limits; run the solver; score; close the sandbox in ``finally``.

Errors and retries: a limit breach (message/token/time) or an operator ``terminate`` ends the sample
*normally* (it is still scored and recorded with its ``limit``). Anything else raised by the solver or a
scorer is a sample error, retried from scratch up to ``retry_on_error`` times. A lost sandbox or worker
host is an error too, even though the tool layer reports it to the model as a ``sandbox_unavailable``
tool error: the sandbox will not come back, so the runner watches the transcript for such a tool event,
stops the solver at once and retries the sample in a new sandbox.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator._errors import ControlFlowSignal, ToolfleetError
from orchestrator._wire import SandboxSpec, ToolExecutionFatal
from orchestrator.approval._policy import approval_policy_scope
from orchestrator.dataset import Sample, sandbox_files_wire
from orchestrator.dispatch import Dispatcher, SampleRoute, reset_active_dispatcher, set_active_dispatcher, set_route
from orchestrator.dispatch._context import reset_route
from orchestrator.log import ToolEvent, Transcript, bind_transcript
from orchestrator.log._events import BaseEvent, ErrorEvent, InfoEvent, SampleLimitEvent
from orchestrator.log._sandbox_events import exec_phase, record_sandbox_execs, reset_exec_phase, set_exec_phase
from orchestrator.model._generate_config import _active_config, active_generate_config
from orchestrator.model._model import Model, model_context
from orchestrator.model._usage import usage_scope
from orchestrator.review._policy import review_policy_scope
from orchestrator.scorer._sandbox_proxy import DispatchedSandbox
from orchestrator.scorer._score import Score, scorer_info
from orchestrator.scorer._target import Target
from orchestrator.solver._solver import make_generate
from orchestrator.solver._task_state import TaskState, bind_sample_state, initial_messages
from orchestrator.util._fork import bind_fork_opener, reset_fork_opener
from orchestrator.util._limit_errors import LimitExceededError, TerminateSampleError
from orchestrator.util._limits import apply_limits, message_limit, time_limit, token_limit, working_limit
from orchestrator.util._sandbox import SandboxEnvironment, SandboxLostError, bind_sandbox
from orchestrator.util._working import bind_working_clock, reset_working_clock

from ._fork import fork
from ._log_file import EvalError, EvalSample, EvalSampleLimit, LogWriter, SandboxRecord
from ._progress import EvalProgress
from ._sandboxes import SandboxConfigs
from ._task import Task

CLOSE_TIMEOUT_S = 60.0  # bound on tearing a sandbox down (a dead worker must not hang the eval)


class _SampleFailed(ControlFlowSignal):
    def __init__(self, error: EvalError, partial: EvalSample) -> None:
        super().__init__(error.message)
        self.error = error
        self.partial = partial


@dataclass
class SampleRunner:
    task: Task
    model: Model
    dispatcher: Dispatcher
    eval_id: str
    run_id: str
    sandboxes: SandboxConfigs  # the task's sandbox specs, parsed once
    approval: list[Any] | None
    review: list[Any] | None
    retry_on_error: int
    sandbox_slots: asyncio.Semaphore | None
    progress: EvalProgress
    epochs: int = 1
    # Distributed mode: sandboxes opened/closed are journaled in the log, so a resume can close the ones
    # a killed orchestrator left on worker hosts (embedded sandboxes die with the process or are reaped).
    journal: LogWriter | None = None

    async def run(self, sample: Sample, epoch: int) -> EvalSample:
        """Run the sample (with retries); never raises for a sample error — it is in the result."""
        errors: list[EvalError] = []
        attempt = 0
        while True:
            attempt += 1
            try:
                result = await self._attempt(sample, epoch)
            except _SampleFailed as failed:
                errors.append(failed.error)
                if attempt <= self.retry_on_error and failed.error.retryable:
                    self.progress.retries += 1
                    self.progress.notify("retry")
                    continue
                result = failed.partial
                result.error = failed.error
                errors.pop()
            result.error_retries = errors
            result.attempts = attempt
            return result

    async def _attempt(self, sample: Sample, epoch: int) -> EvalSample:
        assert sample.id is not None
        state = TaskState(model=str(self.model), sample_id=sample.id, epoch=epoch, input=sample.input,
                          messages=initial_messages(sample.input), target=Target(sample.target),
                          choices=sample.choices, metadata=dict(sample.metadata or {}),
                          message_limit=self.task.message_limit, token_limit=self.task.token_limit)
        transcript = Transcript()
        lost: list[str] = []
        solver_task: list[asyncio.Task[Any]] = []

        def watch(event: BaseEvent) -> None:
            self.progress.on_event(event)
            if (isinstance(event, ToolEvent) and event.error is not None
                    and event.error.type == "sandbox_unavailable" and not lost):
                lost.append(event.error.message)
                if solver_task:
                    solver_task[0].cancel("sandbox lost")

        transcript.subscribe(watch)
        started = time.time()
        result = EvalSample(id=sample.id, epoch=epoch, input=sample.input, target=sample.target,
                            metadata=dict(sample.metadata or {}), started_at=started, run_id=self.run_id)
        route: SampleRoute | None = None
        slot_held = False
        with contextlib.ExitStack() as stack:
            stack.enter_context(bind_transcript(transcript))
            stack.enter_context(model_context(self.model))
            stack.enter_context(approval_policy_scope(self.approval))
            stack.enter_context(review_policy_scope(self.review))
            stack.enter_context(bind_sample_state(state))
            usage = stack.enter_context(usage_scope("sample"))
            clock_token = bind_working_clock()  # this attempt's waits (working_limit, working_time)
            stack.callback(reset_working_clock, clock_token)
            config_token = _active_config.set(active_generate_config().merge(self.task.config))
            stack.callback(_active_config.reset, config_token)
            token = set_active_dispatcher(self.dispatcher)
            stack.callback(reset_active_dispatcher, token)
            fork_token = bind_fork_opener(fork)  # the sample's solvers and scorers fork through its dispatcher
            stack.callback(reset_fork_opener, fork_token)
            try:
                config = self.sandboxes.spec_for(sample)
                if config is not None:
                    if self.sandbox_slots is not None:
                        await self.sandbox_slots.acquire()
                        slot_held = True
                    files, setup = await asyncio.to_thread(sandbox_files_wire, sample, self._files_base_dir())
                    config_json = self.sandboxes.wire(config)
                    try:
                        route = await self.dispatcher.open_sandbox(SandboxSpec(
                            eval_id=self.eval_id, sample_id=self._sandbox_sample_id(sample.id, epoch),
                            config=config_json, files=files, setup=setup))
                    except Exception as exc:  # a failing setup's execs (its output) go on record first
                        record_sandbox_execs(getattr(exc, "sandbox_execs", None) or (),
                                             getattr(exc, "sandbox_host", None), "setup",
                                             getattr(exc, "sandbox_execs_dropped", 0))
                        raise
                    transcript.record(InfoEvent(source="sandbox", data=_sandbox_info(config_json, route)))
                    record_sandbox_execs(route.setup_execs, route.host, "setup", route.setup_execs_dropped)
                    if self.journal is not None:
                        await self.journal.sandbox("open", SandboxRecord(
                            handle=str(route.sandbox), queue=route.queue, sample_id=sample.id, epoch=epoch,
                            run_id=self.run_id))
                    route_token = set_route(route)
                    stack.callback(reset_route, route_token)
                    # Scorers and solvers may call sandbox() themselves (Inspect style).
                    stack.enter_context(bind_sandbox(*_sample_sandboxes(self.dispatcher, route, config_json)))
                self.progress.running += 1
                self.progress.notify("start")
                try:
                    task = asyncio.create_task(self._solve(state))
                    solver_task.append(task)
                    try:
                        state, limit, result.working_time = await task
                    except asyncio.CancelledError:
                        if lost and not _cancelling():
                            raise SandboxLostError(f"Sandbox lost: {lost[0]}") from None
                        raise
                    if lost:
                        raise SandboxLostError(f"Sandbox lost: {lost[0]}")
                    if limit is not None:
                        result.limit = limit
                        transcript.record(SampleLimitEvent(type=limit.type, message=limit.message or "",
                                                           limit=limit.limit))
                    result.scores = await self._score(state)
                finally:
                    self.progress.running -= 1
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # every sample error is recorded, then maybe retried
                # Inspect records an unexpected exception as its repr (``RuntimeError('kaboom')``); our own
                # errors (sandbox lost, setup failed, limits) carry sentences written for the user: kept as is.
                message = str(exc) if _worded(exc) else repr(exc)
                retryable = self.task.retryable(exc) if self.task.retryable is not None else True
                error = EvalError(type=type(exc).__name__, message=message or type(exc).__name__,
                                  traceback=traceback.format_exc(), retryable=retryable)
                transcript.record(ErrorEvent(message=error.message, traceback=error.traceback))
                raise _SampleFailed(error, self._finish(result, state, transcript, usage)) from exc
            finally:
                if route is not None:
                    await self._close(route)
                if slot_held and self.sandbox_slots is not None:
                    self.sandbox_slots.release()
            return self._finish(result, state, transcript, usage)

    def _files_base_dir(self) -> Path | None:
        """Relative local paths in ``Sample.files`` resolve against the task file's directory (as Inspect)."""
        task_file = getattr(self.task, "task_file", None)
        return Path(task_file).parent if task_file else None

    async def _solve(self, state: TaskState) -> tuple[TaskState, EvalSampleLimit | None, float]:
        """The solved state, the limit that ended it (if any) and its working time."""
        working = working_limit(getattr(self.task, "working_limit", None))
        limits = [message_limit(self.task.message_limit), token_limit(self.task.token_limit),
                  time_limit(self.task.time_limit), working]
        solver = self.task.solver
        if solver is None:
            from orchestrator.solver import generate

            solver = generate()
        try:
            with apply_limits(limits, catch_errors=True) as scope, self._attempt_scorer(state):
                state = await solver(state, make_generate(self.model))
        except TerminateSampleError as exc:
            return state, EvalSampleLimit(type="operator", message=exc.reason), round(working.usage, 3)
        except LimitExceededError as exc:
            # A limit the solver (e.g. an agent's own) did not handle still ends the sample normally.
            return state, EvalSampleLimit(type=exc.type, limit=exc.limit, message=exc.message), round(working.usage, 3)
        error = scope.limit_error
        if error is not None:
            return (state, EvalSampleLimit(type=error.type, limit=error.limit, message=error.message),
                    round(working.usage, 3))
        return state, None, round(working.usage, 3)

    def _attempt_scorer(self, state: TaskState) -> Any:
        """Let ``react(attempts=N)`` score a submission with the task's (first) scorer."""
        try:
            from orchestrator.agent import attempt_scorer
        except ImportError:
            return contextlib.nullcontext()
        if not self.task.scorer:
            return attempt_scorer(None)
        first = self.task.scorer[0]

        async def score_attempt(agent_state: Any) -> Any:
            view = copy.copy(state)
            view.messages, view.output = agent_state.messages, agent_state.output
            return await first(view, state.target)  # the Score: react hands it to incorrect_message

        return attempt_scorer(score_attempt)

    async def _score(self, state: TaskState) -> dict[str, Score]:
        token = set_exec_phase("scorer")  # sandbox execs from here on are the scorers'
        try:
            return await self._score_all(state)
        finally:
            reset_exec_phase(token)

    async def _score_all(self, state: TaskState) -> dict[str, Score]:
        scores: dict[str, Score] = {}
        for instance in self.task.scorer:
            name, _ = scorer_info(instance)
            key, n = name, 1
            while key in scores:
                n += 1
                key = f"{name}{n}"
            scores[key] = await instance(state, state.target)
        state.scores = scores
        return scores

    async def _close(self, route: SampleRoute) -> None:
        # Shielded and bounded: cancellation (Ctrl-C) must still tear the sandbox down, but a lost
        # worker must not hang the eval (its reaper removes what we could not).
        close = asyncio.ensure_future(self._close_and_record(route))
        with contextlib.suppress(Exception, asyncio.CancelledError):  # best effort
            await asyncio.wait_for(asyncio.shield(close), CLOSE_TIMEOUT_S)

    async def _close_and_record(self, route: SampleRoute) -> None:
        await self.dispatcher.close_sandbox(route)
        if self.journal is not None:
            await self.journal.sandbox("close", SandboxRecord(handle=str(route.sandbox), queue=route.queue,
                                                              run_id=self.run_id))

    def _sandbox_sample_id(self, sample_id: int | str, epoch: int) -> str:
        return str(sample_id) if self.epochs == 1 else f"{sample_id}#{epoch}"

    def _finish(self, result: EvalSample, state: TaskState, transcript: Transcript, usage: Any) -> EvalSample:
        result.messages = list(state.messages)
        result.output = state.output
        result.events = list(transcript.events)  # type: ignore[arg-type]  # the transcript's events are the log's Event union
        result.model_usage = dict(usage.by_model)
        result.completed_at = time.time()
        result.total_time = result.completed_at - (result.started_at or result.completed_at)
        return result


def _sample_sandboxes(dispatcher: Dispatcher, route: SampleRoute,
                      config: dict[str, Any]) -> tuple[SandboxEnvironment, dict[str, SandboxEnvironment] | None]:
    """The sample's sandbox and, for a multi-service one, its containers by name (``sandbox("name")``).

    The real environments when they live in this process (embedded), else proxies through the
    dispatcher. Either way each exec is a ``SandboxEvent``: here recorded as it happens; through a
    proxy, the worker's records come back with each internal call.
    """
    from orchestrator.util._sandbox_recorder import RecordingSandbox, recorded_services

    env = dispatcher.local_sandbox(route)
    if env is None:
        services = config.get("services") or {}  # the sandbox config as sent (JSON)
        if not services:
            return DispatchedSandbox(), None
        default = DispatchedSandbox()
        named: dict[str, SandboxEnvironment] = {name: DispatchedSandbox(name) for name in services}
        return default, {config["default_service"]: default, **named}

    def sink(rec: Any) -> None:
        record_sandbox_execs([rec], route.host, exec_phase())

    recorded = RecordingSandbox(env, sink)
    return recorded, recorded_services(env, recorded, sink)


def _cancelling() -> bool:
    task = asyncio.current_task()
    return bool(task and task.cancelling())


def _sandbox_info(config: dict[str, Any], route: SampleRoute) -> dict[str, Any]:
    """Where the sample's sandbox is and what it runs (the log's record of its image and host)."""
    info: dict[str, Any] = {"event": "open", "type": config.get("type"), "host": route.host, "sandbox": route.sandbox}
    if config.get("type") == "docker":
        info["image"] = config.get("image")
        if config.get("services"):
            info["services"] = {name: svc.get("image") for name, svc in config["services"].items()}
    return info


def _worded(exc: BaseException) -> bool:
    """toolfleet's own errors carry a sentence for the user; anything else is shown as Inspect shows it (repr).

    A tool's own exception re-raised as fatal is the tool's, not ours: ``ToolExecutionFatal`` and the roots
    every such dual class inherits through it do not count."""
    for cls in type(exc).__mro__:
        if cls in (ToolExecutionFatal, ToolfleetError, ControlFlowSignal):
            continue
        if cls.__module__.split(".")[0] in ("orchestrator", "workers"):
            return True
    return False
