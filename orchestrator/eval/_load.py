"""``load_task(spec)``: a task from a task file (``path.py[@name]``) or Harbor task directories (``harbor:DIR``)."""

from __future__ import annotations

from typing import Any

from ._harbor import is_harbor_spec, load_harbor_task
from ._task import Task, load_task_file

__all__ = ["load_task"]


def load_task(spec: str, task_args: dict[str, Any] | None = None) -> Task:
    """``path.py`` (its only @task) or ``path.py@name``; ``task_args`` go to the task function.
    ``harbor:DIR``: Harbor task directories (``_harbor``)."""
    if is_harbor_spec(spec):
        return load_harbor_task(spec, task_args)
    return load_task_file(spec, task_args)
