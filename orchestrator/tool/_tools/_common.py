"""Helpers shared by the sandbox tools: output formatting, timeout wording, per-sandbox tool state."""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any, TypeVar

from orchestrator.tool._registry import TOOL_META_ATTR, ToolMeta
from orchestrator.tool._tool_info import parse_function
from orchestrator.util._sandbox import ExecResult, SandboxEnvironment

T = TypeVar("T", bound=Callable[..., Any])

_fallback_state: weakref.WeakKeyDictionary[SandboxEnvironment, dict[str, Any]] = weakref.WeakKeyDictionary()


def tool_state(env: SandboxEnvironment, key: str) -> dict[str, Any]:
    """Scratch space for a tool in one sandbox (undo history, sessions). Lives as long as the sandbox."""
    from orchestrator.util._sandbox_recorder import unwrap

    env = unwrap(env)  # the executor's per-call recorder is not the sandbox
    state = getattr(env, "state", None)
    if not isinstance(state, dict):
        state = _fallback_state.setdefault(env, {})
    scratch: dict[str, Any] = state.setdefault(key, {})
    return scratch


def with_timeout_note(execute: T, timeout: float | None) -> T:
    """Tool descriptions state their timeout where one is set.

    Docstrings are parsed once per code object (all instances share it), so the per-instance
    description travels as a description override that ``@tool`` keeps for the instance.
    """
    if timeout is None:
        return execute
    shown = int(timeout) if float(timeout).is_integer() else timeout
    description = (parse_function(execute).description or "").rstrip()
    note = f"{description} Commands time out after {shown} seconds."
    setattr(execute, TOOL_META_ATTR, ToolMeta(name=execute.__name__, ref=None, description=note))
    return execute


def format_output(result: ExecResult) -> str:
    """stderr then stdout (a non-zero exit is not an error); truncation is reported, never silent."""
    output = f"{result.stderr}\n{result.stdout}" if result.stderr else result.stdout
    if result.truncated:
        output += "\n[output truncated: a stream exceeded the sandbox's per-command output cap]"
    return output
