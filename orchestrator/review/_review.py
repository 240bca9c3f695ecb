"""Review decisions and the reviewer protocol (seed 002)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, Protocol

from pydantic import BaseModel

from orchestrator.model._chat_message import ChatMessage, ChatMessageTool
from orchestrator.tool._tool_call import ToolCall, ToolCallView

ReviewDecision = Literal["continue", "terminate", "escalate"]


class Review(BaseModel):
    decision: ReviewDecision
    explanation: str | None = None


class Reviewer(Protocol):
    async def __call__(
        self,
        message: str,
        call: ToolCall,
        result: ChatMessageTool,
        output: Any,
        view: ToolCallView,
        history: list[ChatMessage],
    ) -> Review: ...


_REVIEWERS: dict[str, Callable[..., Reviewer]] = {}
REVIEWER_NAME_ATTR = "__toolfleet_reviewer__"


def reviewer(func: Callable[..., Reviewer] | None = None, *, name: str | None = None) -> Any:
    """Register a reviewer factory under ``name`` (default: the factory's name) for YAML policies."""

    def decorate(factory: Callable[..., Reviewer]) -> Callable[..., Reviewer]:
        reviewer_name = name or factory.__name__

        def wrapper(*args: Any, **kwargs: Any) -> Reviewer:
            instance = factory(*args, **kwargs)
            setattr(instance, REVIEWER_NAME_ATTR, reviewer_name)
            return instance

        wrapper.__name__ = factory.__name__
        wrapper.__doc__ = factory.__doc__
        _REVIEWERS[reviewer_name] = wrapper
        return wrapper

    return decorate(func) if func is not None else decorate


def reviewer_factory(name: str) -> Callable[..., Reviewer]:
    try:
        return _REVIEWERS[name]
    except KeyError:
        raise ValueError(f"Unknown reviewer '{name}' (registered: {', '.join(sorted(_REVIEWERS)) or 'none'}).") from None


def reviewer_name(instance: Any) -> str:
    return getattr(instance, REVIEWER_NAME_ATTR, None) or getattr(instance, "__name__", type(instance).__name__)
