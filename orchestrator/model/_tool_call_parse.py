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
from collections.abc import Iterable, Sequence
from typing import Any

import yaml
from pydantic import BaseModel

from orchestrator.tool._tool_call import ToolCall
from orchestrator.tool._tool_info import ToolInfo

from ._truncate import middle_truncate

MAX_ARGUMENT_DEPTH = 100
_SHOWN_ARGUMENTS_BYTES = 16 * 1024  # the raw arguments are echoed to the model; keep that bounded


def exceeds_max_depth(value: object, max_depth: int = MAX_ARGUMENT_DEPTH) -> bool:
    """Whether ``value`` nests containers more than ``max_depth`` levels deep.

    Iterative, so measuring cannot exhaust the stack. A container is expanded again only when
    reached at a greater depth than before: YAML aliases make shared sub-trees (a tiny document can
    alias its way to billions of paths), and cycles must terminate.
    """
    deepest_seen: dict[int, int] = {}
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children: Iterable[object]
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, (list, tuple, set, frozenset)):
            children = item
        elif isinstance(item, BaseModel):
            children = [*item.__dict__.values(), *(item.__pydantic_extra__ or {}).values()]
        else:
            continue
        if depth > max_depth:
            return True
        if deepest_seen.get(id(item), 0) >= depth:
            continue
        deepest_seen[id(item)] = depth
        stack.extend((child, depth + 1) for child in children)
    return False


def depth_error_detail() -> str:
    return f"arguments exceed the maximum supported nesting depth of {MAX_ARGUMENT_DEPTH}"


def depth_error_message() -> str:
    """The error for a call whose (already parsed) arguments are nested too deep (Inspect's words)."""
    return f"Error parsing tool call arguments: {depth_error_detail()}"


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
