"""Transcript events: what happened in a sample, in order, each tagged with its span."""

from __future__ import annotations

import time
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, Field, field_validator

from orchestrator._ids import new_id
from orchestrator.tool._tool_call import ToolCall, ToolCallError
from orchestrator.tool._tool_info import ToolInfo


class BaseEvent(BaseModel):
    uuid: str = Field(default_factory=new_id)
    timestamp: float = Field(default_factory=time.time)
    span_id: str | None = None


class ToolEvent(BaseEvent):
    event: Literal["tool"] = "tool"
    id: str
    function: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    result: Any = None
    error: ToolCallError | None = None
    truncated: tuple[int, int] | None = None  # (original_bytes, limit)
    started: float | None = None
    completed: float | None = None
    working_time: float | None = None
    host: str | None = None
    agent: str | None = None  # set when the call was a handoff/agent tool
    failed: bool = False  # fatal to the sample
    # Inspect's fields: ``pending`` is True only while a call runs (events here are recorded
    # complete, so it reads None); ``message_id`` is the id of the ChatMessageTool it produced.
    pending: bool | None = None
    message_id: str | None = None


class ApprovalEvent(BaseEvent):
    event: Literal["approval"] = "approval"
    call: ToolCall
    approver: str | None = None
    decision: Literal["approve", "modify", "reject", "terminate", "escalate"]
    modified: ToolCall | None = None
    explanation: str | None = None


class ReviewEvent(BaseEvent):
    event: Literal["review"] = "review"
    call: ToolCall
    reviewer: str | None = None
    decision: Literal["continue", "terminate", "escalate"]
    explanation: str | None = None


def _tool_info(value: Any) -> Any:
    # A bare name (older logs, or callers that only know names) becomes a spec with no description.
    return ToolInfo(name=value, description="") if isinstance(value, str) else value


class ModelEvent(BaseEvent):
    event: Literal["model"] = "model"
    model: str
    input_messages: int = 0
    tools: list[ToolInfo] = Field(default_factory=list)  # what the model was offered (full specs, as Inspect)
    tool_choice: Any = None
    output: Any = None
    usage: Any = None
    error: str | None = None
    time: float | None = None
    retries: int = 0

    @field_validator("tools", mode="before")
    @classmethod
    def _tools_from_names(cls, value: Any) -> Any:
        return [_tool_info(v) for v in value] if isinstance(value, list) else value


class SpanBeginEvent(BaseEvent):
    event: Literal["span_begin"] = "span_begin"
    id: str
    parent_id: str | None = None
    type: str | None = None  # agent | tool | handoff | model | ...
    name: str


class SpanEndEvent(BaseEvent):
    event: Literal["span_end"] = "span_end"
    id: str


class InfoEvent(BaseEvent):
    event: Literal["info"] = "info"
    source: str | None = None
    data: Any = None


class ErrorEvent(BaseEvent):
    event: Literal["error"] = "error"
    message: str
    traceback: str | None = None


class SampleLimitEvent(BaseEvent):
    event: Literal["sample_limit"] = "sample_limit"
    type: str
    message: str
    limit: float | int | None = None


Event = Annotated[
    Union[
        ToolEvent, ApprovalEvent, ReviewEvent, ModelEvent, SpanBeginEvent, SpanEndEvent,
        InfoEvent, ErrorEvent, SampleLimitEvent,
    ],
    Field(discriminator="event"),
]


class EvalEvents(BaseModel):
    """A sample's events as Inspect's deprecated ``EvalSample.transcript`` returns them."""

    events: list[Event] = Field(default_factory=list)
    content: dict[str, str] = Field(default_factory=dict)
