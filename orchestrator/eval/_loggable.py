"""Make any value safe to write to the eval log: model output is untrusted and may not be valid JSON text.

Two things model output can carry that JSON/UTF-8 writers refuse:

- **lone surrogates** (``"\\ud83d"``, what a half-sent emoji decodes to): not encodable as UTF-8, so the
  writer raises ``UnicodeEncodeError``. They are replaced by U+FFFD; a valid surrogate *pair* held as two
  code points is joined into the character it stands for.
- **deep nesting** (tool arguments nested hundreds of levels): pydantic's serialiser stops at ~255 levels
  ("Circular reference detected") and ``json`` at the recursion limit. Containers deeper than
  ``MAX_LOG_DEPTH`` are replaced by a short marker string.

``loggable`` walks pydantic models, dicts, lists and tuples and returns a sanitised copy (the original is
untouched); ``encode_line`` turns a record into one UTF-8 JSON line, sanitising only when the fast path fails.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel

MAX_LOG_DEPTH = 100  # containers (models, dicts, lists) nested deeper than this are cut
TOO_DEEP = "[toolfleet: value nested deeper than {depth} levels, cut from the log]"


def safe_text(text: str) -> str:
    """``text`` with lone surrogates replaced by U+FFFD (valid pairs joined); unchanged when already valid."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def loggable(value: Any, depth: int = 0) -> Any:
    """A copy of ``value`` that serialises to valid UTF-8 JSON (see the module docstring)."""
    if isinstance(value, str):
        return safe_text(value)
    if isinstance(value, (BaseModel, dict, list, tuple, set, frozenset)) and depth >= MAX_LOG_DEPTH:
        return TOO_DEEP.format(depth=MAX_LOG_DEPTH)
    if isinstance(value, BaseModel):
        updates = {k: loggable(v, depth + 1) for k, v in value.__dict__.items()}
        return value.model_copy(update=updates)
    if isinstance(value, dict):
        return {(safe_text(k) if isinstance(k, str) else k): loggable(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        items = [loggable(v, depth + 1) for v in value]
        return tuple(items) if isinstance(value, tuple) else items
    return value


def dump_model(model: BaseModel) -> Any:
    """``model.model_dump(mode="json")``, sanitising first if the plain dump fails (deep nesting)."""
    try:
        return model.model_dump(mode="json")
    except (ValueError, RecursionError):
        return loggable(model).model_dump(mode="json")


def encode_line(record: dict[str, Any]) -> bytes:
    """One JSON line (UTF-8, newline-terminated) for ``record``; never raises for odd strings or depth."""
    try:
        return (json.dumps(record, ensure_ascii=False, default=str) + "\n").encode("utf-8")
    except (UnicodeEncodeError, ValueError, RecursionError):
        # "replace" covers what sanitising cannot reach (a surrogate inside an object's ``str``).
        return (json.dumps(loggable(record), ensure_ascii=False, default=str) + "\n").encode("utf-8", "replace")
