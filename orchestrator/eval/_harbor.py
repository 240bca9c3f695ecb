"""``harbor:PATH`` as a task: Harbor task directories, a react agent (or the oracle), the Harbor verifier.

``toolfleet eval harbor:PATH`` (and ``eval_async("harbor:PATH")``) loads ``PATH`` with
``orchestrator.dataset.load_harbor`` into a ``Task`` (its images are built on this host when the run
starts, for the samples the run selects: ``Task.prepare``) whose solver
makes Harbor's ``/logs`` directories and then runs a react agent with ``bash``, ``python`` and
``text_editor`` under each task's agent timeout, or, with ``oracle=True`` (``--oracle``), the task's
``solution/solve.sh``; the scorer is ``harbor_verifier()``. Task arguments (``-T``, or the CLI flags of
the same names): ``oracle``; ``build`` (false: use images already present; nothing is built);
``task_env`` (``--task-env NAME``: the variables of this host the tasks' ``${VAR}`` may read); the
timeout multipliers ``timeout_multiplier``, ``agent_timeout_multiplier``, ``verifier_timeout_multiplier``,
``build_timeout_multiplier`` (Harbor's flags). The sandboxes' set-up, the sweep of the agent's
processes and the verifier's directories run as root: a fleet must allow it (``--allow-root-user``),
which preflight checks (``Task.runs_as_root``). ``harbor_retryable`` says which failures
``--retry-on-error`` retries, as Harbor's defaults do.
"""

from __future__ import annotations

import hashlib
import sys
import time
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from orchestrator.dataset import HarborTaskError, MemoryDataset, Sample, SampleFilesError, load_harbor
from orchestrator.dataset._harbor import build_images, report_line
from orchestrator.dataset._harbor_config import MAX_MULTIPLIER, TimeoutMultipliers
from orchestrator.dataset._harbor_images import ImageBuild
from orchestrator.scorer._harbor import harbor_verifier
from orchestrator.solver._harbor import harbor_logs, harbor_oracle
from orchestrator.solver._solver import Generate, Solver, solver
from orchestrator.solver._task_state import TaskState

from ._task import Task, TaskError

__all__ = ["HARBOR_PREFIX", "harbor_task", "is_harbor_spec", "load_harbor_task", "oracle_failures"]

HARBOR_PREFIX = "harbor:"
TASK_NAME = "harbor"
AGENT_PROMPT = ("You are working in a Linux container to complete the task the user describes. Use the tools "
                "to run commands, write code and edit files; check your work; then call submit().")


ORACLE_MODEL = "scripted/harbor_oracle"


def is_harbor_spec(spec: Any) -> bool:
    return isinstance(spec, str) and spec.startswith(HARBOR_PREFIX)


def register_oracle_model() -> None:
    """``scripted/harbor_oracle``: the model an oracle run names (it is never called). Registered where a
    task file's policies would be, so a log of an oracle run resumes with ``eval-retry``."""
    from ._policies import scripted_policy

    def never(messages: Any, tools: Any) -> Any:
        raise RuntimeError("The Harbor oracle runs solution/solve.sh; it calls no model.")

    scripted_policy(ORACLE_MODEL.partition("/")[2])(never)


@solver
def harbor_agent(message_limit: int | None = None) -> Solver:
    """A react agent with bash, python and text_editor, within the task's agent timeout."""
    from orchestrator.agent import as_solver, react
    from orchestrator.tool import bash, python, text_editor
    from orchestrator.util._limits import time_limit

    agent = as_solver(react(prompt=AGENT_PROMPT, tools=[bash(timeout=300), python(timeout=300), text_editor()]))

    async def solve(state: TaskState, generate: Generate) -> TaskState:
        with time_limit(float(state.metadata["harbor"]["agent_timeout"])):
            solved: TaskState = await agent(state, generate)
            return solved

    return solve


def harbor_task(path: str | Path, oracle: bool = False, build: bool = True, task_env: list[str] | None = None,
                timeout_multiplier: float | None = None, agent_timeout_multiplier: float | None = None,
                verifier_timeout_multiplier: float | None = None,
                build_timeout_multiplier: float | None = None) -> Task:
    """The Harbor tasks under ``path`` as one toolfleet ``Task`` (see the module doc). The images are built
    when a run starts, for the samples it selects (``--sample-id``, ``--limit``), before its preflight.
    ``task_env``: the names (or patterns) of this host's variables the tasks' ``${VAR}`` may read; the
    multipliers scale Harbor's timeouts as its flags of the same names do."""
    try:
        multipliers = TimeoutMultipliers(
            timeout=1.0 if timeout_multiplier is None else timeout_multiplier, agent=agent_timeout_multiplier,
            verifier=verifier_timeout_multiplier, build=build_timeout_multiplier)
    except ValidationError as exc:
        first = exc.errors()[0]
        name = {"timeout": "timeout", "agent": "agent-timeout", "verifier": "verifier-timeout",
                "build": "build-timeout"}.get(str(first["loc"][0]), str(first["loc"][0]))
        raise TaskError(f"--{name}-multiplier: must be a finite number above 0 and at most {MAX_MULTIPLIER:g}, "
                        f"got {first.get('input')!r}.") from None
    loaded = load_harbor(path, build=False, task_env=task_env or (), multipliers=multipliers)
    for line in loaded.note_lines():
        _say(line)
    root = Path(path).resolve()
    dataset = MemoryDataset(loaded.samples, name=root.name, location=str(root))
    task = Task(dataset=dataset, solver=[harbor_logs(), harbor_oracle() if oracle else harbor_agent()],
                scorer=harbor_verifier(), sandbox="docker", name=TASK_NAME,
                metadata={"harbor_path": str(root), "oracle": oracle})
    # Harbor's set-up, the agent's process sweep and the verifier's directories run as root in the sandbox.
    task.runs_as_root = True
    task.retryable = harbor_retryable
    by_task: dict[str, list[ImageBuild]] = {}
    for item in loaded.builds:
        by_task.setdefault(item.task, []).append(item)

    def prepare(samples: list[Sample]) -> None:
        started = time.monotonic()
        wanted = [item for s in samples for item in by_task.get(str(s.id), [])] if build else []
        try:
            report = build_images(wanted)
        except HarborTaskError as exc:
            raise TaskError(str(exc)) from None
        _say(report_line(len(samples), len(loaded.samples), str(path), report,
                         loaded.seconds + time.monotonic() - started))

    task.prepare = prepare
    return task


def _say(line: str) -> None:
    from orchestrator.util._terminal import terminal_safe

    # Task names, unknown keys and paths come from the task directories: escaped before the terminal sees them.
    print(f"toolfleet: {terminal_safe(line, keep_newlines=False)}", file=sys.stderr, flush=True)


def harbor_retryable(exc: BaseException) -> bool:
    """Whether a Harbor sample that failed with ``exc`` is retried (with ``--retry-on-error``), as Harbor's
    ``RetryConfig`` decides: every failure but a model that refused for good (authentication, unknown model,
    unsupported parameters, usage limit: a ``ModelError`` the provider did not call retryable). Harbor's other
    exclusions are not failures here: an agent timeout is a time limit and a missing, empty or unreadable
    reward file, or a verifier timeout, scores 0; none is retried, in Harbor or here."""
    from orchestrator.model._model import ModelError

    cause: BaseException | None = exc
    for _ in range(8):  # the model's refusal may arrive wrapped (an agent, a solver)
        if cause is None:
            break
        if isinstance(cause, ModelError):
            return bool(cause.retryable)
        cause = cause.__cause__ or cause.__context__
    return True


_FLOAT_PARAMS = ("timeout_multiplier", "agent_timeout_multiplier", "verifier_timeout_multiplier",
                 "build_timeout_multiplier")
_PARAMS: dict[str, Any] = {"oracle": bool, "build": bool, "task_env": list, **dict.fromkeys(_FLOAT_PARAMS, float)}


def load_harbor_task(spec: str, task_args: dict[str, Any] | None = None) -> Task:
    """``harbor:PATH`` (``harbor:PATH@harbor`` as a log records it) with ``-T`` args; errors are one line."""
    path = spec[len(HARBOR_PREFIX):]
    if path.endswith("@" + TASK_NAME):
        path = path[: -len(TASK_NAME) - 1]
    if not path:
        raise TaskError("harbor: needs a path: harbor:DIR (a Harbor task directory or a directory of them).")
    args = dict(task_args or {})
    for key, value in args.items():
        if key not in _PARAMS:
            raise TaskError(f"Harbor tasks have no parameter '{key}' (parameters: {', '.join(_PARAMS)}).")
        kind = _PARAMS[key]
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            args[key] = value = float(value)
        if kind is list and isinstance(value, str):
            args[key] = value = [value]
        if not isinstance(value, kind) or (kind is list and not all(isinstance(v, str) for v in value)):
            expected = {bool: "true or false", float: "a number", list: "variable names"}[kind]
            raise TaskError(f"-T {key}={value!r}: Harbor tasks expect {expected}.")
    try:
        task = harbor_task(path, **args)
    except (HarborTaskError, SampleFilesError) as exc:
        raise TaskError(str(exc)) from None
    root = Path(path).resolve()
    task.registry_name = TASK_NAME
    task.task_args = args
    task.task_file = f"{HARBOR_PREFIX}{root}"
    task.source_hash = _tree_hash([Path(str(s.metadata["harbor"]["dir"])) for s in task.dataset if s.metadata])
    return task


def _tree_hash(task_dirs: list[Path]) -> str:
    """A hash of every task's files (what a re-run must match to resume a log)."""
    from orchestrator.dataset._harbor_images import context_hash

    digest = hashlib.sha256()
    for task_dir in sorted(task_dirs):
        digest.update(f"{task_dir.name}={context_hash(task_dir, '')}\0".encode())
    return "sha256:" + digest.hexdigest()


def oracle_failures(log: Any) -> list[str]:
    """Tasks whose oracle failed, each with why: an error, or a ``reward`` (else the lowest) below 1."""
    failed: list[str] = []
    for sample in log.samples:
        if sample.error is not None:
            failed.append(f"{sample.id} (error: {sample.error.message.splitlines()[0][:200]})")
            continue
        score = (sample.scores or {}).get(TASK_NAME)
        value = score.value if score is not None else None
        if not isinstance(value, dict) or not value:
            failed.append(f"{sample.id} (no reward)")
            continue
        reward = value["reward"] if "reward" in value else min(value.values())
        if reward != 1:
            why = (score.metadata or {}).get("verifier_error") if score is not None else None
            failed.append(f"{sample.id} (reward {reward:g}{'; ' + why if why else ''})")
    return failed
