"""Transcripts, events and (later) eval logs."""

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
from ._inspect_export import export_inspect_log, write_inspect_log
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
    "export_inspect_log",
    "current_span_id",
    "span",
    "transcript",
    "write_inspect_log",
]
