"""Model prices and the cost of usage.

A ``PriceTable`` maps ``provider/model`` to a ``ModelPrice`` in US dollars per million tokens: input,
output, cache reads and cache writes, and the discount the provider's batch API gives. A model name
takes the price of the longest key that equals it or that it extends with ``-...`` (so a dated
``claude-sonnet-4-5-20250929`` takes ``claude-sonnet-4-5``'s price); ``provider/*`` prices a whole
provider (the scripted model costs nothing). A model with no price has ``total_cost`` None, and every
report says the cost is unknown rather than showing a made-up zero.

The built-in prices are list prices at the time of writing; prices change, so a file (JSON or YAML,
the same shape as ``BUILTIN_PRICES``) given with ``--model-prices FILE`` or ``$TOOLFLEET_MODEL_PRICES``
overrides or adds entries.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from orchestrator._errors import ToolfleetError

from ._model_output import ModelUsage

PRICES_ENV = "TOOLFLEET_MODEL_PRICES"
PER_TOKENS = 1_000_000  # prices are per million tokens
_INPUT_INCLUDES_CACHE_READ = {"openai"}  # providers whose input_tokens count the cached prompt tokens too


class ModelPrice(BaseModel):
    """USD per million tokens; cache prices default to the input price when a provider has none."""

    model_config = ConfigDict(extra="forbid")

    input: float = Field(ge=0)
    output: float = Field(ge=0)
    cache_read: float | None = Field(default=None, ge=0)
    cache_write: float | None = Field(default=None, ge=0)
    batch_discount: float = Field(default=0.5, ge=0, le=1)  # fraction taken off for batch requests

    def cost(self, usage: ModelUsage, batch: bool = False, input_includes_cache_read: bool = False) -> float:
        """``input_tokens`` is uncached input (Anthropic's accounting) unless ``input_includes_cache_read``
        (OpenAI's prompt tokens include the cached ones, which are then billed at the cache-read price)."""
        cache_read = usage.input_tokens_cache_read or 0
        cache_write = usage.input_tokens_cache_write or 0
        uncached = max(0, usage.input_tokens - cache_read) if input_includes_cache_read else usage.input_tokens
        dollars = (uncached * self.input + usage.output_tokens * self.output
                   + cache_read * (self.input if self.cache_read is None else self.cache_read)
                   + cache_write * (self.input if self.cache_write is None else self.cache_write)) / PER_TOKENS
        return dollars * (1 - self.batch_discount) if batch else dollars


def _p(input: float, output: float, cache_read: float | None = None,
       cache_write: float | None = None) -> dict[str, Any]:
    return {"input": input, "output": output, "cache_read": cache_read, "cache_write": cache_write}


BUILTIN_PRICES: dict[str, dict[str, Any]] = {
    "scripted/*": _p(0, 0),
    "mockllm/*": _p(0, 0),
    # Anthropic: cache writes (5-minute) at 1.25x input, cache reads at 0.1x; batch half price.
    "anthropic/claude-opus-4-5": _p(5, 25, 0.5, 6.25),
    "anthropic/claude-opus-4-1": _p(15, 75, 1.5, 18.75),
    "anthropic/claude-opus-4": _p(15, 75, 1.5, 18.75),
    "anthropic/claude-sonnet-4-5": _p(3, 15, 0.3, 3.75),
    "anthropic/claude-sonnet-4": _p(3, 15, 0.3, 3.75),
    "anthropic/claude-3-7-sonnet": _p(3, 15, 0.3, 3.75),
    "anthropic/claude-3-5-sonnet": _p(3, 15, 0.3, 3.75),
    "anthropic/claude-haiku-4-5": _p(1, 5, 0.1, 1.25),
    "anthropic/claude-3-5-haiku": _p(0.8, 4, 0.08, 1),
    "anthropic/claude-3-haiku": _p(0.25, 1.25, 0.03, 0.3),
    # OpenAI: cached input at its listed price, no cache-write charge; batch half price.
    "openai/gpt-5": _p(1.25, 10, 0.125, 0),
    "openai/gpt-5-mini": _p(0.25, 2, 0.025, 0),
    "openai/gpt-5-nano": _p(0.05, 0.4, 0.005, 0),
    "openai/gpt-4.1": _p(2, 8, 0.5, 0),
    "openai/gpt-4.1-mini": _p(0.4, 1.6, 0.1, 0),
    "openai/gpt-4.1-nano": _p(0.1, 0.4, 0.025, 0),
    "openai/gpt-4o": _p(2.5, 10, 1.25, 0),
    "openai/gpt-4o-mini": _p(0.15, 0.6, 0.075, 0),
    "openai/o3": _p(2, 8, 0.5, 0),
    "openai/o4-mini": _p(1.1, 4.4, 0.275, 0),
}


class PriceFileError(ToolfleetError, ValueError):
    """A price file that cannot be read (shown to the user as one line)."""


class PriceTable:
    """Prices by ``provider/model`` (see the module docstring for how names match)."""

    def __init__(self, prices: Mapping[str, ModelPrice | Mapping[str, Any]] | None = None) -> None:
        self.prices: dict[str, ModelPrice] = {
            key: value if isinstance(value, ModelPrice) else ModelPrice.model_validate(value)
            for key, value in (BUILTIN_PRICES if prices is None else prices).items()
        }

    def merged(self, overrides: Mapping[str, ModelPrice]) -> PriceTable:
        return PriceTable({**self.prices, **overrides})

    def price(self, model: str) -> ModelPrice | None:
        if model in self.prices:
            return self.prices[model]
        family = max((k for k in self.prices if model.startswith(k + "-")), key=len, default=None)
        if family is not None:
            return self.prices[family]
        return self.prices.get(f"{model.partition('/')[0]}/*")

    def cost(self, model: str, usage: ModelUsage, batch: bool = False) -> float | None:
        price = self.price(model)
        if price is None:
            return None
        return price.cost(usage, batch, model.partition("/")[0] in _INPUT_INCLUDES_CACHE_READ)


def read_price_file(path: str | Path) -> dict[str, ModelPrice]:
    """Entries of a JSON or YAML price file; any problem is one ``PriceFileError`` line."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise PriceFileError(f"Cannot read the price file '{path}': {exc.strerror or exc}.") from None
    try:
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise PriceFileError(f"The price file '{path}' is not valid {'JSON' if path.suffix == '.json' else 'YAML'}: "
                             f"{' '.join(str(exc).split())[:200]}.") from None
    if not isinstance(data, dict):
        raise PriceFileError(f"The price file '{path}' must map 'provider/model' to prices.")
    prices: dict[str, ModelPrice] = {}
    for key, value in data.items():
        try:
            prices[str(key)] = ModelPrice.model_validate(value)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "entry"
            raise PriceFileError(f"The price file '{path}': '{key}' {where}: {first['msg']} (fields: input, output, "
                                 "cache_read, cache_write, batch_discount; USD per million tokens).") from None
    return prices


@functools.cache
def _table_for(path: str | None) -> PriceTable:
    table = PriceTable()
    return table.merged(read_price_file(path)) if path else table


def price_table(path: str | Path | None = None) -> PriceTable:
    """The built-in prices, overridden by ``path`` (or ``$TOOLFLEET_MODEL_PRICES``). Read once per path."""
    chosen = str(path) if path else os.environ.get(PRICES_ENV) or None
    return _table_for(chosen)


def format_cost(model_usage: Mapping[str, ModelUsage]) -> str:
    """``$0.0123``, or what is unknown: ``unknown (no price for openai/x)``, ``$0.01 + unknown (...)``."""
    unpriced = sorted(m for m, u in model_usage.items() if u.total_cost is None and u.total_tokens)
    known = [u.total_cost for u in model_usage.values() if u.total_cost is not None]
    if not unpriced:
        return f"${sum(known):.4f}"
    missing = f"unknown (no price for {', '.join(unpriced)}; see --model-prices)"
    return f"${sum(known):.4f} + {missing}" if known else missing
