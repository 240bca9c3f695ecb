"""Approval decisions and the approver protocol."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, Protocol

from pydantic import BaseModel

from orchestrator.model._chat_message import ChatMessage
from orchestrator.tool._tool_call import ToolCall, ToolCallView

ApprovalDecision = Literal["approve", "modify", "reject", "terminate", "escalate"]


class Approval(BaseModel):
    decision: ApprovalDecision
    modified: ToolCall | None = None
    explanation: str | None = None
    # Remember an approve/reject for this function for the rest of this run (never for nested runs).
    always: bool = False


class Approver(Protocol):
    async def __call__(self, message: str, call: ToolCall, view: ToolCallView, history: list[ChatMessage]) -> Approval: ...


_APPROVERS: dict[str, Callable[..., Approver]] = {}
APPROVER_NAME_ATTR = "__toolfleet_approver__"


def approver(func: Callable[..., Approver] | None = None, *, name: str | None = None) -> Any:
    """Register an approver factory under ``name`` (default: the factory's name) for YAML policies."""

    def decorate(factory: Callable[..., Approver]) -> Callable[..., Approver]:
        approver_name = name or factory.__name__

        def wrapper(*args: Any, **kwargs: Any) -> Approver:
            instance = factory(*args, **kwargs)
            setattr(instance, APPROVER_NAME_ATTR, approver_name)
            return instance

        wrapper.__name__ = factory.__name__
        wrapper.__doc__ = factory.__doc__
        _APPROVERS[approver_name] = wrapper
        return wrapper

    return decorate(func) if func is not None else decorate


def approver_factory(name: str) -> Callable[..., Approver]:
    try:
        return _APPROVERS[name]
    except KeyError:
        raise ValueError(f"Unknown approver '{name}' (registered: {', '.join(sorted(_APPROVERS)) or 'none'}).") from None


def approver_name(instance: Any) -> str:
    return getattr(instance, APPROVER_NAME_ATTR, None) or getattr(instance, "__name__", type(instance).__name__)
