"""Tool-output truncation (pure)."""

from __future__ import annotations

from typing import NamedTuple

from ._generate_config import DEFAULT_MAX_TOOL_OUTPUT

ENVELOPE = (
    "\nThe output of your call to {tool} was too long to be displayed.\n"
    "Here is a truncated version:\n<START_TOOL_OUTPUT>\n{truncated}\n<END_TOOL_OUTPUT>\n"
)


class Truncated(NamedTuple):
    text: str  # the envelope the model sees
    original_bytes: int
    limit: int


def effective_limit(tool_max_output: int | None, call_max_output: int | None, config_max_tool_output: int | None) -> int:
    """Per-tool ``max_output`` > ``execute_tools(max_output=)`` > config ``max_tool_output`` > 16 KiB. 0 disables."""
    for value in (tool_max_output, call_max_output, config_max_tool_output):
        if value is not None:
            return value
    return DEFAULT_MAX_TOOL_OUTPUT


def truncate_output(text: str, tool: str, limit: int) -> Truncated | None:
    """Keep the first and last halves of ``limit`` bytes (whole UTF-8 characters only), or None if it fits."""
    if limit <= 0:
        return None
    data = text.encode("utf-8")
    if len(data) <= limit:
        return None
    head_len = limit // 2
    tail_len = limit - head_len
    head = data[:head_len].decode("utf-8", errors="ignore")
    tail = data[len(data) - tail_len :].decode("utf-8", errors="ignore")
    return Truncated(ENVELOPE.format(tool=tool, truncated=f"{head}\n...\n{tail}"), len(data), limit)
