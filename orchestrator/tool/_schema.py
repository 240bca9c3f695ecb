"""Post-processing of the JSON Schema pydantic generates for a parameter (pure).

Inspect sends self-contained parameter schemas whose objects are closed at every level. pydantic
puts nested models under ``$defs`` and leaves them open; these functions inline the references
(a recursive type keeps its ``$ref``, which cannot be inlined) and close every object that lists
its properties with ``additionalProperties: false`` unless it says otherwise.
"""

from __future__ import annotations

from typing import Any

_REF_PREFIX = "#/$defs/"


def inline_refs(schema: Any, defs: dict[str, Any]) -> tuple[Any, set[str]]:
    """``schema`` with non-recursive ``$defs`` references inlined, and the def names still referenced."""
    kept: set[str] = set()

    def walk(node: Any, expanding: frozenset[str]) -> Any:
        if isinstance(node, list):
            return [walk(item, expanding) for item in node]
        if not isinstance(node, dict):
            return node
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith(_REF_PREFIX):
            name = ref[len(_REF_PREFIX):]
            if name in defs and name not in expanding:
                siblings = {k: walk(v, expanding) for k, v in node.items() if k != "$ref"}
                return {**walk(defs[name], expanding | {name}), **siblings}
            kept.add(name)
            return node
        return {k: walk(v, expanding) for k, v in node.items()}

    return walk(schema, frozenset()), kept


def close_objects(schema: Any) -> Any:
    """Every object schema that lists ``properties`` gets ``additionalProperties: false`` by default."""
    if isinstance(schema, list):
        return [close_objects(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    closed = {k: close_objects(v) if k != "properties" else {n: close_objects(p) for n, p in v.items()}
              for k, v in schema.items()}
    if isinstance(schema.get("properties"), dict) and "additionalProperties" not in schema:
        closed["additionalProperties"] = False
    return closed


def self_contained(schema: dict[str, Any], defs: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The parameter's schema inlined and closed, and the ``$defs`` it still needs (recursive types)."""
    inlined, kept = inline_refs(schema, defs)
    # A kept def may reference others: keep its closure, each inlined except for recursion.
    needed: dict[str, Any] = {}
    pending = list(kept)
    while pending:
        name = pending.pop()
        if name in needed or name not in defs:
            continue
        body, more = inline_refs(defs[name], {k: v for k, v in defs.items() if k != name})
        needed[name] = close_objects(body)
        pending.extend(more)
    return close_objects(inlined), needed
