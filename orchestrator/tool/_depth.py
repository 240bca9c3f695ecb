"""How deep tool-call arguments may nest (pure; shared by the parser, ``ToolCall`` and the executor).

Deeper values are a parsing error the model sees, never a ``RecursionError`` in a decoder,
validator, serializer or log writer: a model output must not crash the eval.
"""

from __future__ import annotations

from collections.abc import Iterable

from pydantic import BaseModel

MAX_ARGUMENT_DEPTH = 100
_SCALARS = (str, int, float, bool, type(None))


def exceeds_max_depth(value: object, max_depth: int = MAX_ARGUMENT_DEPTH) -> bool:
    """Whether ``value`` nests containers more than ``max_depth`` levels deep.

    Iterative, so measuring cannot exhaust the stack. A container is expanded again only when
    reached at a greater depth than before: YAML aliases make shared sub-trees (a tiny document can
    alias its way to billions of paths), and cycles must terminate.
    """
    if max_depth >= 1 and isinstance(value, dict) and all(type(v) in _SCALARS for v in value.values()):
        return False  # the common case (flat arguments), on every call's path: no walk needed
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
