"""The ``Tool`` protocol and the ``@tool`` decorator."""

from __future__ import annotations

import functools
import inspect
import re
import warnings
from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeAlias, overload

from ._content import ContentImage, ContentText
from ._registry import (
    TOOL_META_ATTR,
    RunsOn,
    TimeoutBehavior,
    ToolMeta,
    ToolRef,
    register_tool_factory,
    tool_meta,
)

ToolResult: TypeAlias = str | int | float | bool | ContentText | ContentImage | list[str | ContentText | ContentImage]


class Tool(Protocol):
    async def __call__(self, *args: Any, **kwargs: Any) -> ToolResult: ...


def _json_safe(value: Any) -> bool:
    return value is None or isinstance(value, (str, int, float, bool)) or (
        isinstance(value, (list, tuple)) and all(_json_safe(v) for v in value)
    ) or (isinstance(value, dict) and all(isinstance(k, str) and _json_safe(v) for k, v in value.items()))


@overload
def tool(func: Callable[..., Tool], /) -> Callable[..., Tool]: ...
@overload
def tool(
    *,
    name: str | None = ...,
    viewer: Callable[..., Any] | None = ...,
    parallel: bool = ...,
    max_output: int | None = ...,
    timeout: float | None = ...,
    timeout_behavior: TimeoutBehavior = ...,
    needs_approval: bool | Callable[..., Any] = ...,
    is_enabled: bool | Callable[..., Any] = ...,
    runs_on: RunsOn = ...,
    input_guardrails: Sequence[Callable[..., Any]] = ...,
    output_guardrails: Sequence[Callable[..., Any]] = ...,
    prompt: str | None = ...,
) -> Callable[[Callable[..., Tool]], Callable[..., Tool]]: ...


def tool(
    func: Callable[..., Tool] | None = None,
    *,
    name: str | None = None,
    viewer: Callable[..., Any] | None = None,
    parallel: bool = False,
    max_output: int | None = None,
    timeout: float | None = None,
    timeout_behavior: TimeoutBehavior = "error_as_result",
    needs_approval: bool | Callable[..., Any] = False,
    is_enabled: bool | Callable[..., Any] = True,
    runs_on: RunsOn = "worker",
    input_guardrails: Sequence[Callable[..., Any]] = (),
    output_guardrails: Sequence[Callable[..., Any]] = (),
    prompt: str | None = None,
) -> Any:
    """Register a tool factory. The factory returns an async ``execute`` the model can call.

    ``parallel`` defaults to False: only tools audited as safe to run concurrently opt in.
    ``prompt`` is accepted for Inspect code (deprecated there too): it is appended to the description.
    """
    if prompt:
        warnings.warn("@tool(prompt=...) is deprecated: put the text in the tool function's docstring",
                      DeprecationWarning, stacklevel=2)
        prompt = re.sub(r"\s+", " ", prompt)

    def decorate(factory: Callable[..., Tool]) -> Callable[..., Tool]:
        tool_name = name or factory.__name__
        signature = inspect.signature(factory)

        @functools.wraps(factory)
        def wrapper(*args: Any, **kwargs: Any) -> Tool:
            instance = factory(*args, **kwargs)
            bound = signature.bind(*args, **kwargs)
            params = dict(bound.arguments)
            ref = ToolRef(name=tool_name, params=params, module=factory.__module__) if _json_safe(params) else None
            meta = ToolMeta(
                name=tool_name,
                ref=ref,
                parallel=parallel,
                viewer=viewer,
                max_output=max_output,
                timeout=timeout,
                timeout_behavior=timeout_behavior,
                needs_approval=needs_approval,
                is_enabled=is_enabled,
                runs_on=runs_on,
                input_guardrails=tuple(input_guardrails),
                output_guardrails=tuple(output_guardrails),
                prompt=prompt,
            )
            existing = tool_meta(instance)
            if existing is not None:  # a factory returning another registered tool keeps its overrides
                meta.description = existing.description
                meta.param_descriptions = dict(existing.param_descriptions)
            setattr(instance, TOOL_META_ATTR, meta)
            return instance

        register_tool_factory(tool_name, wrapper, runs_on=runs_on)
        return wrapper

    if func is not None:
        return decorate(func)
    return decorate


def set_tool_description(tool: Tool, description: str | None = None, parameters: dict[str, str] | None = None) -> Tool:
    """Override a tool's description and/or parameter descriptions (below explicit ToolDef args)."""
    meta = tool_meta(tool)
    if meta is None:
        raise ValueError("set_tool_description() expects a tool created by a @tool factory.")
    if description is not None:
        meta.description = description
    if parameters:
        meta.param_descriptions.update(parameters)
    meta.version += 1
    return tool


def tool_with(tool: Tool, name: str | None = None, description: str | None = None,
              parameters: dict[str, str] | None = None) -> Tool:
    """A copy of ``tool`` with another name and/or descriptions (same implementation)."""
    meta = tool_meta(tool)
    if meta is None:
        raise ValueError("tool_with() expects a tool created by a @tool factory.")

    @functools.wraps(tool)
    async def wrapped(*args: Any, **kwargs: Any) -> ToolResult:
        return await tool(*args, **kwargs)

    new_meta = ToolMeta(**{**meta.__dict__, "param_descriptions": dict(meta.param_descriptions)})
    if name is not None:
        new_meta.name = name
    if description is not None:
        new_meta.description = description
    if parameters:
        new_meta.param_descriptions.update(parameters)
    setattr(wrapped, TOOL_META_ATTR, new_meta)
    return wrapped
