"""Helpers shared by the sandbox tools: output formatting, timeout wording, per-sandbox tool state."""

from __future__ import annotations

import weakref
from typing import Any

from orchestrator.util._sandbox import ExecResult, SandboxEnvironment

_fallback_state: weakref.WeakKeyDictionary[SandboxEnvironment, dict[str, Any]] = weakref.WeakKeyDictionary()


def tool_state(env: SandboxEnvironment, key: str) -> dict[str, Any]:
    """Scratch space for a tool in one sandbox (undo history, sessions). Lives as long as the sandbox."""
    state = getattr(env, "state", None)
    if not isinstance(state, dict):
        state = _fallback_state.setdefault(env, {})
    return state.setdefault(key, {})


def with_timeout_note(doc: str, timeout: float | None) -> str:
    """Tool descriptions state their timeout where one is set (the first docstring paragraph)."""
    if timeout is None:
        return doc
    shown = int(timeout) if float(timeout).is_integer() else timeout
    first, _, rest = doc.partition("\n\n")
    return f"{first.rstrip()} Commands time out after {shown} seconds.\n\n{rest}"


def format_output(result: ExecResult) -> str:
    """stderr then stdout (a non-zero exit is not an error); truncation is reported, never silent."""
    output = f"{result.stderr}\n{result.stdout}" if result.stderr else result.stdout
    if result.truncated:
        output += "\n[output truncated: a stream exceeded the sandbox's per-command output cap]"
    return output
