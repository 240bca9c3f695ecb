"""Transcript events: what happened in a sample, in order, each tagged with its span."""

from __future__ import annotations

import time
from typing import Annotated, Any, Literal

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


def _message_json(message: Any) -> Any:
    return message.model_dump(mode="json", exclude_none=True) if isinstance(message, BaseModel) else message


class ModelEvent(BaseEvent):
    """One model call. ``input`` is what was sent, as JSON messages: when an earlier model event of the
    sample sent the same leading messages, only the rest is kept here and ``input_ref`` names that event
    (its full input's first ``input_ref_count`` messages come first) — an agent loop's log then grows
    by each turn's new messages, not by the whole conversation. ``full_model_inputs`` rebuilds them.
    """

    event: Literal["model"] = "model"
    model: str
    input_messages: int = 0
    input: list[Any] | None = None
    input_ref: str | None = None
    input_ref_count: int = 0
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

    @field_validator("input", mode="before")
    @classmethod
    def _input_snapshot(cls, value: Any) -> Any:
        # A snapshot as sent: callers go on editing their message objects after the call.
        return [_message_json(m) for m in value] if isinstance(value, (list, tuple)) else value


def full_model_inputs(events: list[Any]) -> dict[str, list[Any]]:
    """Each model event's whole input (by uuid), ``input_ref`` chains resolved; events as models or dicts."""
    full: dict[str, list[Any]] = {}
    for e in events:
        get = e.get if isinstance(e, dict) else lambda k, e=e: getattr(e, k, None)
        if get("event") != "model" or get("input") is None:
            continue
        ref, count = get("input_ref"), get("input_ref_count") or 0
        head = full.get(ref, [])[:count] if ref else []
        full[str(get("uuid"))] = head + list(get("input") or [])
    return full


class SandboxEvent(BaseEvent):
    """One exec (or file read/write) in the sample's sandbox: a tool's, the sample's setup, a scorer's.

    ``timestamp`` is when it started (on the host that ran it); texts are cut to a few KiB.
    """

    event: Literal["sandbox"] = "sandbox"
    action: Literal["exec", "read_file", "write_file"] = "exec"
    cmd: str | None = None
    file: str | None = None
    input: str | None = None
    result: int | None = None  # exit status
    output: str | None = None
    truncated: bool = False
    error: str | None = None
    duration: float | None = None
    host: str | None = None
    phase: Literal["tool", "setup", "scorer", "solver"] | None = None
    call_id: str | None = None  # the tool call it belongs to (phase "tool")
    service: str | None = None  # the container of a multi-service sandbox it ran in (None: the default one)


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
    ToolEvent | ApprovalEvent | ReviewEvent | ModelEvent | SpanBeginEvent | SpanEndEvent | InfoEvent | ErrorEvent
    | SampleLimitEvent | SandboxEvent,
    Field(discriminator="event"),
]


class EvalEvents(BaseModel):
    """A sample's events as Inspect's deprecated ``EvalSample.transcript`` returns them."""

    events: list[Event] = Field(default_factory=list)
    content: dict[str, str] = Field(default_factory=dict)
