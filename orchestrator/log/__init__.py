"""Transcripts and events."""

from ._events import (
    ApprovalEvent,
    BaseEvent,
    ErrorEvent,
    Event,
    InfoEvent,
    ModelEvent,
    ReviewEvent,
    SampleLimitEvent,
    SandboxEvent,
    SpanBeginEvent,
    SpanEndEvent,
    ToolEvent,
)
from ._transcript import Transcript, bind_transcript, current_span_id, span, transcript

__all__ = [
    "ApprovalEvent",
    "BaseEvent",
    "ErrorEvent",
    "Event",
    "InfoEvent",
    "ModelEvent",
    "ReviewEvent",
    "SampleLimitEvent",
    "SandboxEvent",
    "SpanBeginEvent",
    "SpanEndEvent",
    "ToolEvent",
    "Transcript",
    "bind_transcript",
    "current_span_id",
    "span",
    "transcript",
]

