"""Match a call against a policy's tool patterns (pure; shared by approval and review).

A pattern is a glob over the function name (``bash``, ``python*``, ``*``), optionally with
argument globs rendered like a call: ``bash(command='rm*')`` matches a ``bash`` call whose
``command`` argument matches ``rm*``. Arguments a pattern does not name are ignored.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from fnmatch import fnmatchcase
from functools import lru_cache
from typing import Any

_ARG = re.compile(r"""\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"|[^,]*)\s*(?:,|$)""")


@lru_cache(maxsize=1024)
def _parse(pattern: str) -> tuple[str, tuple[tuple[str, str], ...] | None]:
    pattern = pattern.strip()
    if "(" not in pattern or not pattern.endswith(")"):
        return pattern, None
    name, _, rest = pattern.partition("(")
    body = rest[:-1]
    args: list[tuple[str, str]] = []
    pos = 0
    while pos < len(body):
        if not body[pos:].strip():
            break
        m = _ARG.match(body, pos)
        if m is None or m.end() == pos:
            raise ValueError(f"Invalid tool pattern '{pattern}': expected name(arg='glob', ...)")
        value = m.group(2).strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1].encode().decode("unicode_escape") if "\\" in value else value[1:-1]
        args.append((m.group(1), value))
        pos = m.end()
    return name.strip(), tuple(args)


def _render(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def match_call(pattern: str, function: str, arguments: dict[str, Any]) -> bool:
    name_glob, arg_globs = _parse(pattern)
    if not fnmatchcase(function, name_glob):
        return False
    if arg_globs is None:
        return True
    return all(key in arguments and fnmatchcase(_render(arguments[key]), glob) for key, glob in arg_globs)


def match_any(patterns: str | Sequence[str], function: str, arguments: dict[str, Any]) -> bool:
    if isinstance(patterns, str):
        patterns = [patterns]
    return any(match_call(p, function, arguments) for p in patterns)


def validate_pattern(pattern: str) -> None:
    _parse(pattern)
