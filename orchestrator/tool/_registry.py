"""The global tool registry: tool factories by name, and the metadata tagged on each instance.

A worker rebuilds a tool from its ``ToolRef`` (registry name + the JSON arguments the factory was
called with); a log names tools the same way.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, Field

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


def register_tool_factory(name: str, factory: Callable[..., Any]) -> None:
    _REGISTRY[name] = factory


def registered_tool_names() -> list[str]:
    return sorted(_REGISTRY)


def tool_meta(obj: Any) -> ToolMeta | None:
    return getattr(obj, TOOL_META_ATTR, None)


class ToolNotRegisteredError(LookupError):
    """A tool was asked for by a name no factory is registered under."""


def rebuild_tool(ref: ToolRef) -> Any:
    """Rebuild a tool instance from its registry reference (never an arbitrary callable)."""
    factory = _REGISTRY.get(ref.name)
    if factory is None and ref.module:
        # The module may be importable here but not yet imported (e.g. built-ins).
        try:
            importlib.import_module(ref.module)
        except ImportError:
            pass
        factory = _REGISTRY.get(ref.name)
    if factory is None:
        where = f" (defined in module '{ref.module}'; start the worker with --import {ref.module})" if ref.module else ""
        raise ToolNotRegisteredError(f"Tool '{ref.name}' is not registered on this worker{where}.")
    return factory(**ref.params)
