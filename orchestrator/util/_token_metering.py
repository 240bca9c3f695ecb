"""Token-limit forms Inspect accepts: ``TokenLimit(tokens, type)``, ``"500k"``, ``"output:1m"``, formulas.

``type`` says which tokens are metered: ``"all"`` (total), ``"output"`` (output tokens, reasoning
included) or an arithmetic formula over ``input`` (the whole prompt, cache reads and writes
included) and ``output``, e.g. ``"(input * 0.1) + output"`` (floored).
"""

from __future__ import annotations

import ast
import contextlib
import copy
import math
import operator
import re
from collections.abc import Callable, Iterator, Mapping
from contextvars import ContextVar
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

_BINOPS: dict[type[ast.operator], Callable[[float, float], float]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
}
_UNARY: dict[type[ast.unaryop], Callable[[float], float]] = {ast.UAdd: operator.pos, ast.USub: operator.neg}
_COUNT = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmb]?)\s*$", re.IGNORECASE)
_UNITS = {"k": 1_000, "m": 1_000_000, "b": 1_000_000_000}


def _formula(text: str) -> Callable[[Mapping[str, float]], float]:
    """Compile an arithmetic formula over input/output (numbers, + - * /, parentheses only)."""
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as exc:
        raise ValueError(f"token limit: invalid formula {text!r}") from exc

    def evaluate(node: ast.AST, vars: Mapping[str, float]) -> float:
        if isinstance(node, ast.Expression):
            return evaluate(node.body, vars)
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
            return float(node.value)
        if isinstance(node, ast.Name) and node.id in ("input", "output"):
            return float(vars[node.id])
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            return _BINOPS[type(node.op)](evaluate(node.left, vars), evaluate(node.right, vars))
        if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
            return _UNARY[type(node.op)](evaluate(node.operand, vars))
        raise ValueError(f"token limit: unsupported element in formula {text!r}")

    evaluate(tree, {"input": 1.0, "output": 1.0})  # validate now, not mid-run
    return lambda vars: evaluate(tree, vars)


class LimitTokens:
    """The tokens of one usage scope (its own and its nested scopes') that count toward token limits.

    ``orchestrator.model`` counts usage; each of its usage scopes owns one of these and binds it here
    while current, so token limits read it without importing the model package (which sits above).
    """

    __slots__ = ("count",)

    def __init__(self) -> None:
        self.count = 0


# Outside every usage scope: the model package's process-wide usage root counts into this one.
PROCESS_LIMIT_TOKENS = LimitTokens()
_limit_tokens: ContextVar[LimitTokens] = ContextVar("toolfleet_limit_tokens", default=PROCESS_LIMIT_TOKENS)


def current_limit_tokens() -> LimitTokens:
    """The current usage scope's count (the process-wide one outside every scope)."""
    return _limit_tokens.get()


@contextlib.contextmanager
def bind_limit_tokens(tokens: LimitTokens) -> Iterator[LimitTokens]:
    token = _limit_tokens.set(tokens)
    try:
        yield tokens
    finally:
        _limit_tokens.reset(token)


class NoUsage:
    """No tokens yet: what a metered token limit adds a model call's usage to (the model package's
    ``ModelUsage`` is out of reach here); reads as a zero usage, and ``+`` gives the other usage."""

    input_tokens = output_tokens = total_tokens = 0
    input_tokens_cache_read = input_tokens_cache_write = reasoning_tokens = total_cost = None

    def __add__(self, other: Any) -> Any:
        return copy.copy(other)


class TokenMetering:
    """The metered count of a usage for one ``type``."""

    def __init__(self, type: str) -> None:
        self.type = type
        self._formula = None if type in ("all", "output") else _formula(type)

    def value(self, usage: Any) -> int:
        if self.type == "all":
            return int(usage.total_tokens)
        if self.type == "output":
            return int(usage.output_tokens)
        assert self._formula is not None
        prompt = usage.input_tokens + (usage.input_tokens_cache_read or 0) + (usage.input_tokens_cache_write or 0)
        result = self._formula({"input": prompt, "output": usage.output_tokens})
        if not math.isfinite(result):
            raise ValueError(f"token limit: formula {self.type!r} produced a non-finite value ({result})")
        return math.floor(result)


class TokenLimit(BaseModel):
    """A token limit as data: how many tokens, and which are metered."""

    model_config = ConfigDict(extra="forbid")

    tokens: int = Field(ge=0)
    type: str = "all"

    @field_validator("type")
    @classmethod
    def _valid_type(cls, value: str) -> str:
        TokenMetering(value)
        return value


def parse_token_limit(value: str) -> int | TokenLimit:
    """``[<type>:]<number>[k|m|b]``: a plain int when all tokens are metered, else a ``TokenLimit``."""
    type_prefix, count = value.rsplit(":", 1) if ":" in value else ("all", value)
    type_prefix = type_prefix.strip()
    match = _COUNT.match(count)
    if match is None:
        raise ValueError(f"token limit: expected [<type>:]<number>[k|m|b], got {value!r}")
    number, unit = match.groups()
    tokens = float(number) * (_UNITS[unit.lower()] if unit else 1)
    if not tokens.is_integer():
        raise ValueError(f"token limit: must resolve to a whole number of tokens, got {value!r}")
    if type_prefix.lower() == "all":
        return int(tokens)
    return TokenLimit(tokens=int(tokens), type="output" if type_prefix.lower() == "output" else type_prefix)
