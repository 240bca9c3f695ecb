"""``Task``, ``@task`` and loading tasks from a Python file (``path.py[@name]``)."""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import inspect
import sys
import typing
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from orchestrator.dataset import Dataset, MemoryDataset, Sample, SampleFilesError, resolve_dataset_files
from orchestrator.model._generate_config import GenerateConfig
from orchestrator.tool._registry import GENERATED_TASK_MODULE

from ._errors import SetupError

TASK_ATTR = "__toolfleet_task__"


class TaskError(SetupError):
    """A task file or task reference is wrong (a user mistake, shown as one line)."""


class Task:
    """What to evaluate: a dataset, a solver, scorers, a sandbox, policies and per-sample limits."""

    def __init__(
        self,
        dataset: Dataset | Sequence[Sample] | None = None,
        solver: Any = None,
        scorer: Any = None,
        sandbox: str | dict[str, Any] | BaseModel | tuple[str, Any] | None = None,
        approval: str | list[Any] | None = None,
        review: str | list[Any] | None = None,
        message_limit: int | None = None,
        token_limit: int | None = None,
        time_limit: float | None = None,
        working_limit: float | None = None,
        epochs: int = 1,
        config: GenerateConfig | None = None,
        name: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> None:
        if dataset is None:  # as Inspect: one sample whose input is "prompt"
            dataset = [Sample(input="prompt")]
        self.dataset = dataset if isinstance(dataset, Dataset) else MemoryDataset(list(dataset))
        self.solver = _chain(solver)
        self.scorer: list[Any] = ([] if scorer is None else list(scorer) if isinstance(scorer, (list, tuple))
                                  else [scorer])
        self.sandbox = sandbox
        self.approval = approval
        self.review = review
        self.message_limit = message_limit
        self.token_limit = token_limit
        self.time_limit = time_limit
        # Working time: wall clock minus waits (model connection slots, rate-limit backoff and retries).
        self.working_limit = working_limit
        self.epochs = epochs
        self.config = config or GenerateConfig()
        self._name = name
        self.metadata = metadata or {}
        # Set by @task: how to rebuild this task (for eval-retry).
        self.registry_name: str | None = None
        self.task_args: dict[str, Any] = {}
        self.task_file: str | None = None
        # What a re-run must match to resume this task's log when its source is not one file (harbor:DIR).
        self.source_hash: str | None = None
        # Called once per run, in a thread, with the samples the run will use, before preflight (a Harbor task
        # builds their images here); raises an SetupError (one line) when they cannot be prepared.
        self.prepare: Callable[[list[Sample]], None] | None = None
        # The task's own solvers or scorers run commands as root in its sandboxes (a Harbor task's set-up and
        # verifier): preflight refuses a fleet whose workers do not allow it (--allow-root-user).
        self.runs_as_root = False
        # Which sample failures --retry-on-error retries (None: every one); a Harbor task follows Harbor's rule.
        self.retryable: Callable[[BaseException], bool] | None = None

    @property
    def name(self) -> str:
        return self._name or self.registry_name or "task"

    def __repr__(self) -> str:
        return f"Task(name={self.name!r}, samples={len(self.dataset)})"


def _chain(solver: Any) -> Any:
    # A list becomes a chain; an agent runs with as_solver (as Inspect's Task does).
    from orchestrator.solver import resolve_solver

    return resolve_solver(solver)


def task(func: Callable[..., Task] | None = None, *, name: str | None = None) -> Any:
    """Mark a function returning a ``Task`` so the CLI can find it (and ``-T k=v`` args reach it)."""

    def decorate(factory: Callable[..., Task]) -> Callable[..., Task]:
        task_name = name or factory.__name__

        @functools.wraps(factory)
        def wrapper(*args: Any, **kwargs: Any) -> Task:
            instance = factory(*args, **kwargs)
            if not isinstance(instance, Task):
                raise TaskError(f"@task function '{task_name}' must return a Task, not {type(instance).__name__}")
            bound = inspect.signature(factory).bind(*args, **kwargs)
            instance.registry_name = task_name
            instance.task_args = dict(bound.arguments)
            return instance

        setattr(wrapper, TASK_ATTR, task_name)
        return wrapper

    if func is not None:
        return decorate(func)
    return decorate


def import_task_file(path: str | Path) -> Any:
    """Import a task file as a module (once per path; its @task, @tool and scripted policies register)."""
    file = Path(path).resolve()
    if not file.is_file():
        raise TaskError(f"Task file '{path}' does not exist.")
    module_name = GENERATED_TASK_MODULE + hashlib.sha1(str(file).encode(), usedforsecurity=False).hexdigest()[:12]
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, file)
    if spec is None or spec.loader is None:
        raise TaskError(f"Task file '{path}' is not a Python file.")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    # Let the task file import its siblings (helpers next to it).
    sys.path.insert(0, str(file.parent))
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[module_name]
        where = ""
        if isinstance(exc, SyntaxError) and exc.lineno:
            where = f" (line {exc.lineno})"
        message = f"Task file '{path}' failed to import{where}: {type(exc).__name__}: {exc}"
        raise TaskError(message.splitlines()[0]) from exc
    finally:
        sys.path.remove(str(file.parent))
    return module


def task_functions(module: Any) -> dict[str, Callable[..., Task]]:
    return {getattr(obj, TASK_ATTR): obj for obj in vars(module).values() if callable(obj) and hasattr(obj, TASK_ATTR)}


def load_task_file(spec: str, task_args: dict[str, Any] | None = None) -> Task:
    """``path.py`` (its only @task) or ``path.py@name``; ``task_args`` go to the task function."""
    path, _, name = spec.partition("@")
    module = import_task_file(path)
    found = task_functions(module)
    if not found:
        raise TaskError(f"Task file '{path}' defines no @task function.")
    if name:
        if name not in found:
            raise TaskError(f"Task file '{path}' has no task '{name}' (it has: {', '.join(sorted(found))}).")
        factory = found[name]
    elif len(found) == 1:
        factory = next(iter(found.values()))
    else:
        raise TaskError(
            f"Task file '{path}' has several tasks ({', '.join(sorted(found))}); pick one with {path}@NAME.")
    params = inspect.signature(factory).parameters
    args = dict(task_args or {})
    unknown = [k for k in args if k not in params and not any(p.kind is p.VAR_KEYWORD for p in params.values())]
    if unknown:
        raise TaskError(f"Task '{getattr(factory, TASK_ATTR)}' has no parameter {', '.join(repr(k) for k in unknown)} "
                        f"(parameters: {', '.join(params) or 'none'}).")
    _check_arg_types(factory, args)
    try:
        instance = factory(**args)
    except SetupError:
        raise
    except Exception as exc:  # a task that cannot be built from these args: one line, not a traceback
        raise TaskError(f"Task '{getattr(factory, TASK_ATTR)}' failed to build"
                        f"{' with ' + ', '.join(f'{k}={v!r}' for k, v in args.items()) if args else ''}: "
                        f"{type(exc).__name__}: {exc}".splitlines()[0]) from exc
    instance.task_file = str(Path(path).resolve())
    try:  # Sample.files: paths checked (and made absolute) now, against the task file's directory
        resolve_dataset_files(instance.dataset, Path(instance.task_file).parent)
    except SampleFilesError as exc:
        raise TaskError(str(exc)) from exc
    return instance


def _check_arg_types(factory: Callable[..., Task], args: dict[str, Any]) -> None:
    """``-T`` values checked against the task function's annotations (one line per mistake)."""
    from pydantic import TypeAdapter, ValidationError

    try:
        hints = typing.get_type_hints(factory)
    except Exception:  # noqa: BLE001 - unresolvable annotations: the task function checks for itself
        return
    for key, value in args.items():
        hint = hints.get(key)
        if hint is None or hint is Any:
            continue
        try:
            args[key] = TypeAdapter(hint).validate_python(value)
        except ValidationError as exc:
            msg = exc.errors()[0]["msg"] if exc.errors() else str(exc)
            raise TaskError(f"-T {key}={value!r}: task '{getattr(factory, TASK_ATTR)}' expects "
                            f"{getattr(hint, '__name__', None) or hint} ({msg}).") from None
        except Exception:  # noqa: BLE001, S112 - a type pydantic cannot check: leave it to the task
            continue
