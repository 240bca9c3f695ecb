"""Transcripts and events."""

from typing import TYPE_CHECKING, Any

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

if TYPE_CHECKING:  # what __getattr__ below resolves, for type checkers
    from orchestrator.eval._inspect_export import export_inspect_log, write_inspect_log

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


def __getattr__(name: str) -> Any:
    # The Inspect-format export reads eval log files, so it lives in ``orchestrator.eval`` (above this
    # package); its public path here stays, resolved on first use, so loading log never loads eval.
    if name in ("export_inspect_log", "write_inspect_log"):
        from orchestrator.eval._inspect_export import export_inspect_log, write_inspect_log

        return {"export_inspect_log": export_inspect_log, "write_inspect_log": write_inspect_log}[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
