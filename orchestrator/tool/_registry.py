"""The global tool registry: tool factories by name, and the metadata tagged on each instance.

A worker rebuilds a tool from its ``ToolRef`` (registry name + the JSON arguments the factory was
called with); a log names tools the same way.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from orchestrator._errors import ToolfleetError

TimeoutBehavior = Literal["error_as_result", "raise"]
RunsOn = Literal["worker", "orchestrator"]

TOOL_META_ATTR = "__toolfleet_tool__"


class ToolRef(BaseModel):
    """How to rebuild a tool instance anywhere: its registry name and factory arguments."""

    name: str
    params: dict[str, Any] = Field(default_factory=dict)
    module: str | None = None  # where the factory is defined, for a clear error on workers


@dataclass
class ToolMeta:
    """Metadata tagged on a tool instance by ``@tool``."""

    name: str
    ref: ToolRef | None
    parallel: bool = False
    viewer: Callable[..., Any] | None = None
    max_output: int | None = None
    timeout: float | None = None
    timeout_behavior: TimeoutBehavior = "error_as_result"
    needs_approval: bool | Callable[..., Any] = False
    is_enabled: bool | Callable[..., Any] = True
    runs_on: RunsOn = "worker"
    input_guardrails: tuple[Callable[..., Any], ...] = ()
    output_guardrails: tuple[Callable[..., Any], ...] = ()
    # Set by set_tool_description / tool_with: override extracted descriptions.
    description: str | None = None
    param_descriptions: dict[str, str] = field(default_factory=dict)
    prompt: str | None = None  # Inspect's deprecated @tool(prompt=...), appended to the description
    version: int = 0  # bumped by every override, so cached ToolDefs know when to rebuild


_REGISTRY: dict[str, Callable[..., Any]] = {}
_RUNS_ON: dict[str, RunsOn] = {}  # registry name -> where its factory's tools run (as @tool declared it)


def register_tool_factory(name: str, factory: Callable[..., Any], runs_on: RunsOn = "worker") -> None:
    _REGISTRY[name] = factory
    _RUNS_ON[name] = runs_on


def is_registered(name: str) -> bool:
    return name in _REGISTRY


def registered_tool_names() -> list[str]:
    return sorted(_REGISTRY)


def registered_tool_modules() -> dict[str, str]:
    """Registry name -> the module defining its factory (what a worker publishes for preflight)."""
    return {name: getattr(factory, "__module__", None) or "" for name, factory in sorted(_REGISTRY.items())}


def worker_tool_factories() -> dict[int, str]:
    """``id(factory)`` -> registry name of every factory whose tools run on a worker (``runs_on="worker"``):
    how preflight recognises a tool a solver builds when it runs (``state.tools = [grade()]``)."""
    return {id(factory): name for name, factory in _REGISTRY.items() if _RUNS_ON.get(name, "worker") == "worker"}


def tool_meta(obj: Any) -> ToolMeta | None:
    return getattr(obj, TOOL_META_ATTR, None)


def tool_ref(obj: Any) -> ToolRef:
    """How a worker rebuilds ``obj``: the reference a registered ``@tool`` factory gave it."""
    meta = tool_meta(obj)
    if meta is None or meta.ref is None:
        raise TypeError(f"{obj!r} was not made by a registered @tool factory: a worker cannot rebuild it.")
    return meta.ref


class ToolNotRegisteredError(ToolfleetError, LookupError):
    """A tool was asked for by a name no factory is registered under."""


def rebuild_tool(ref: ToolRef) -> Any:
    """Rebuild a tool instance from its registry reference (never an arbitrary callable)."""
    factory = _REGISTRY.get(ref.name)
    if factory is None and ref.module:
        # The module may be importable here but not yet imported (e.g. built-ins).
        with contextlib.suppress(ImportError):
            importlib.import_module(ref.module)
        factory = _REGISTRY.get(ref.name)
    if factory is None:
        raise ToolNotRegisteredError(not_registered_message(ref.name, ref.module))
    return factory(**ref.params)


GENERATED_TASK_MODULE = "toolfleet_task_"  # prefix of the module name eval._task imports a task file under


def not_registered_message(name: str, module: str | None) -> str:
    """Why a worker lacks a tool, and the ``--import`` that fixes it, in names the user knows: a task
    file's tools are named by the file (where this process imported it), never by its generated module."""
    base = f"Tool '{name}' is not registered on this worker"
    if not module:
        return f"{base}."
    if not module.startswith(GENERATED_TASK_MODULE):
        return f"{base} (defined in module '{module}'; start the worker with --import {module})."
    file = getattr(sys.modules.get(module), "__file__", None)
    advice = ("Tools defined in a task file must be registered on the worker at its start: start the worker "
              "with --import {file} (the task file itself, or its module name with --path to its directory), "
              "or move the tool into a module the worker imports with --import.")
    if file:
        path = Path(file).resolve()
        return f"{base}: it is defined in the task file '{path}'. " + advice.format(file=path)
    return f"{base}: it is defined in the eval's task file. " + advice.format(file="path/to/the/task_file.py")
