"""The model's request to call a tool, and the error envelope that goes back to it."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, model_validator

from ._depth import depth_error_message, exceeds_max_depth

ToolCallErrorType = Literal[
    "parsing",
    "timeout",
    "unicode_decode",
    "permission",
    "file_not_found",
    "is_a_directory",
    "limit",
    "approval",
    "sandbox_unavailable",
    "cancelled",
    "unknown",
]


class ToolCallContent(BaseModel):
    """A rendering of a call for humans (approval prompts, transcripts)."""

    title: str | None = None
    format: Literal["text", "markdown"] = "markdown"
    content: str


class ToolCall(BaseModel):
    id: str
    function: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    parse_error: str | None = None
    type: Literal["function"] = "function"
    view: ToolCallContent | None = None

    @model_validator(mode="before")
    @classmethod
    def _bound_argument_depth(cls, data: Any) -> Any:
        # Whatever built the call (a provider that parses its own JSON, a test double), arguments
        # nested too deep never live in a ToolCall: they could not be validated, copied or logged
        # without exhausting the stack. The call carries Inspect's parsing error instead.
        if isinstance(data, dict):
            arguments = data.get("arguments")
            if isinstance(arguments, dict) and any(isinstance(v, (dict, list, tuple)) for v in arguments.values()) \
                    and exceeds_max_depth(arguments):
                data = {**data, "arguments": {}, "parse_error": data.get("parse_error") or depth_error_message()}
        return data


class ToolCallError(BaseModel):
    """What the model sees when a call failed: a closed set of kinds plus a message."""

    type: ToolCallErrorType
    message: str


class ToolFunction(BaseModel):
    """Force the model to call one named tool."""

    name: str


ToolChoice = Literal["auto", "any", "none"] | ToolFunction


class ToolCallView(BaseModel):
    """How a call is shown to a human approver/reviewer: optional context plus the call itself."""

    context: ToolCallContent | None = None
    call: ToolCallContent | None = None


def render_call(call: ToolCall) -> str:
    """``fn(arg='value', n=3)``: the rendering approval/review globs match against."""
    args = ", ".join(f"{k}={v!r}" for k, v in call.arguments.items())
    return f"{call.function}({args})"
