"""Turning a provider's raw tool-call arguments into a ``ToolCall`` (pure).

Recovery follows Inspect's parser so a port sees the same calls: a JSON object (optionally trailed
by stray double quotes, which some models emit after an empty body) is the arguments; anything else
is read as YAML and bound to the tool's first parameter (so ``ls -la`` for a one-parameter tool
works). What cannot be read becomes ``parse_error``, which the executor reports to the model.

Nesting is bounded here, at parse time: a hostile or runaway value nested deeper than
``MAX_ARGUMENT_DEPTH`` is a parsing error, never a ``RecursionError`` in the decoder, the
validator or the log writer (a model output must never crash the eval).
"""

from __future__ import annotations

import json
import string
from collections.abc import Sequence
from typing import Any

import yaml

from orchestrator.tool._depth import MAX_ARGUMENT_DEPTH, depth_error_detail, depth_error_message, exceeds_max_depth
from orchestrator.tool._tool_call import ToolCall
from orchestrator.tool._tool_info import ToolInfo

from ._truncate import middle_truncate

__all__ = ["MAX_ARGUMENT_DEPTH", "depth_error_message", "exceeds_max_depth", "parse_error_message", "parse_tool_call"]

_SHOWN_ARGUMENTS_BYTES = 16 * 1024  # the raw arguments are echoed to the model; keep that bounded


def parse_error_message(arguments: str | None, detail: object) -> str:
    raw = arguments or ""
    cut = middle_truncate(raw, _SHOWN_ARGUMENTS_BYTES)
    shown = f"{cut[0]}\n\n(arguments middle-truncated from {cut[1]} bytes)" if cut else raw
    return f"Error parsing the following tool call arguments:\n\n{shown}\n\nError details: {detail}"


def _object_before_stray_quotes(arguments: str) -> dict[str, Any] | None:
    """``{}""``: a complete object followed only by double quotes/whitespace; else None."""
    try:
        value, end = json.JSONDecoder().raw_decode(arguments)
    except (json.JSONDecodeError, RecursionError):
        return None
    if not isinstance(value, dict) or set(arguments[end:]) - {'"'} - set(string.whitespace):
        return None
    return value


def parse_tool_call(
    id: str, function: str, arguments: str | None, tools: Sequence[ToolInfo] | None = None
) -> ToolCall:
    """A ``ToolCall`` from raw argument text; unreadable arguments become ``parse_error``."""
    text = (arguments or "").strip()
    parsed: dict[str, Any] = {}
    error: str | None = None
    if not text:
        # Deliberately not Inspect's: it binds None to the first parameter, so a tool whose
        # parameters are all optional fails validation when a server sends "" for "no arguments".
        pass
    elif text.startswith("{"):
        value: Any = None
        try:
            value = json.loads(text)
        except RecursionError:  # deeper than the decoder's own stack allows
            error = parse_error_message(arguments, depth_error_detail())
        except json.JSONDecodeError as ex:
            value = _object_before_stray_quotes(text)
            if value is None:
                error = parse_error_message(arguments, ex)
        if error is None:
            if exceeds_max_depth(value):
                error = parse_error_message(arguments, depth_error_detail())
            else:
                parsed = value
    elif function and tools:
        # Not an object: YAML reads bare words, numbers and booleans; bind to the first parameter.
        info = next((t for t in tools if t.name == function and t.parameters.properties), None)
        if info is not None:
            first = next(iter(info.parameters.properties))
            try:
                value = yaml.safe_load(text)
            except yaml.YAMLError:
                value = text  # not YAML either: the text itself is the argument
            except RecursionError:
                error = parse_error_message(arguments, depth_error_detail())
            if error is None:
                if exceeds_max_depth(value):
                    error = parse_error_message(arguments, depth_error_detail())
                else:
                    parsed = {first: value}
    return ToolCall(id=id, function=function, arguments=parsed, parse_error=error)
