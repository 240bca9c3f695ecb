"""The shape approval and review policies share: an ordered chain of (decider, tool globs).

Walk the chain for a call; the first matching decider whose decision is not ``escalate`` decides.
What "no match" and "all escalated" mean is the caller's business (reject for approval, continue
for review).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

import yaml

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


def load_policy_file(path: str | Path, kind: str, build: Callable[[Any], list[Any]]) -> list[Any]:
    """Read a YAML policy file; every problem is one clear ``ValueError`` line naming the file."""
    path = Path(path)
    label = f"{kind.capitalize()} policy file '{path}'"
    if not path.exists():
        raise ValueError(f"{label} does not exist.")
    try:
        config = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ValueError(f"{label} is not valid YAML: {exc}".splitlines()[0]) from exc
    try:
        return build(config or {})
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{label}: {exc}") from exc


F = TypeVar("F")


class NamedFactories(Generic[F]):
    """A registry of decider factories (approvers, reviewers) by name, for YAML policies.

    ``@registry.register`` / ``@registry.register(name=...)`` registers a factory; each instance it
    builds is tagged with the name so events can say who decided.
    """

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._factories: dict[str, Callable[..., F]] = {}
        self._attr = f"__toolfleet_{kind}__"

    def register(self, func: Callable[..., F] | None = None, *, name: str | None = None) -> Any:
        def decorate(factory: Callable[..., F]) -> Callable[..., F]:
            registered = name or factory.__name__

            def wrapper(*args: Any, **kwargs: Any) -> F:
                instance = factory(*args, **kwargs)
                setattr(instance, self._attr, registered)
                return instance

            wrapper.__name__ = factory.__name__
            wrapper.__doc__ = factory.__doc__
            self._factories[registered] = wrapper
            return wrapper

        return decorate(func) if func is not None else decorate

    def factory(self, name: str) -> Callable[..., F]:
        try:
            return self._factories[name]
        except KeyError:
            known = ", ".join(sorted(self._factories)) or "none"
            raise ValueError(f"Unknown {self.kind} '{name}' (registered: {known}).") from None

    def name_of(self, instance: Any) -> str:
        return str(getattr(instance, self._attr, None) or getattr(instance, "__name__", type(instance).__name__))
