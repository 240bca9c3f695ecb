"""The shape approval and review policies share: an ordered chain of (decider, tool globs).

Walk the chain for a call; the first matching decider whose decision is not ``escalate`` decides.
What "no match" and "all escalated" mean is the caller's business (reject for approval, continue
for review).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol, TypeVar

from orchestrator._glob import match_any
from orchestrator.tool._tool_call import ToolCall

D = TypeVar("D")


class _Entry(Protocol):
    tools: str | list[str]


E = TypeVar("E", bound=_Entry)


async def first_decision(
    chain: Sequence[E],
    call: ToolCall,
    ask: Callable[[E], Awaitable[D]],
    is_escalation: Callable[[D], bool],
) -> tuple[D | None, bool]:
    """Return (deciding result or None, whether any entry matched)."""
    matched = False
    for entry in chain:
        if not match_any(entry.tools, call.function, call.arguments):
            continue
        matched = True
        result = await ask(entry)
        if not is_escalation(result):
            return result, True
    return None, matched


def entries_from_config(
    config: Any, key: str, kind: str, factory: Callable[[str], Callable[..., Any]], make: Callable[[Any, Any], Any]
) -> list[Any]:
    """Build a chain from ``{key: [{"name": ..., "tools": ..., **params}]}`` (YAML policies)."""
    entries = config.get(key) if isinstance(config, dict) else config
    if not isinstance(entries, list):
        raise ValueError(f"A {kind} policy needs a list under '{key}'.")
    chain = []
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict) or "name" not in entry:
            raise ValueError(f"{kind.capitalize()} entry {i + 1} needs a 'name'.")
        params = {k: v for k, v in entry.items() if k not in ("name", "tools")}
        chain.append(make(factory(entry["name"])(**params), entry.get("tools", "*")))
    return chain
