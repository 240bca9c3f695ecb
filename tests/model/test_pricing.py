"""The price table by tables: name matching, what each token kind costs, batch discount, price files,
and how unknown prices are reported."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.model import ModelUsage
from orchestrator.model._pricing import ModelPrice, PriceFileError, PriceTable, format_cost, read_price_file

TABLE = PriceTable({
    "anthropic/claude-sonnet-4": {"input": 3, "output": 15, "cache_read": 0.3, "cache_write": 3.75},
    "anthropic/claude-sonnet-4-5": {"input": 3.5, "output": 16},
    "openai/gpt-4o": {"input": 2.5, "output": 10, "cache_read": 1.25},
    "scripted/*": {"input": 0, "output": 0},
})
M = 1_000_000


@pytest.mark.parametrize(("model", "input_price"), [
    ("anthropic/claude-sonnet-4", 3),
    ("anthropic/claude-sonnet-4-20250514", 3),  # a dated name takes its family's price
    ("anthropic/claude-sonnet-4-5-20250929", 3.5),  # the longest matching family wins
    ("openai/gpt-4o-2024-08-06", 2.5),
    ("openai/gpt-4o.1", None),  # not "gpt-4o-...": no price
    ("anthropic/claude-unknown", None),
    ("scripted/anything", 0),  # provider-wide price
])
def test_price_lookup(model: str, input_price: float | None) -> None:
    price = TABLE.price(model)
    assert (price.input if price else None) == input_price


@pytest.mark.parametrize(("model", "usage", "batch", "dollars"), [
    ("anthropic/claude-sonnet-4", ModelUsage(input_tokens=M, output_tokens=M), False, 18.0),
    ("anthropic/claude-sonnet-4", ModelUsage(input_tokens=M, output_tokens=M), True, 9.0),
    # Anthropic: input_tokens is the uncached part; cache reads and writes are priced on their own.
    ("anthropic/claude-sonnet-4", ModelUsage(input_tokens=0, input_tokens_cache_read=M, input_tokens_cache_write=M),
     False, 0.3 + 3.75),
    # No cache prices given: they cost what input costs.
    ("anthropic/claude-sonnet-4-5", ModelUsage(input_tokens_cache_read=M), False, 3.5),
    # OpenAI: prompt tokens include the cached ones, which move to the cache-read price.
    ("openai/gpt-4o", ModelUsage(input_tokens=M, input_tokens_cache_read=M // 2), False, 1.25 + 0.625),
    ("scripted/x", ModelUsage(input_tokens=M, output_tokens=M), False, 0.0),
    ("anthropic/claude-unknown", ModelUsage(input_tokens=M), False, None),
])
def test_cost(model: str, usage: ModelUsage, batch: bool, dollars: float | None) -> None:
    cost = TABLE.cost(model, usage, batch)
    assert cost == (pytest.approx(dollars) if dollars is not None else None)


@pytest.mark.parametrize(("usage", "text"), [
    ({"a/x": ModelUsage(total_tokens=5, total_cost=0.01234)}, "$0.0123"),
    ({"a/x": ModelUsage(total_tokens=5, total_cost=0.01), "b/y": ModelUsage(total_tokens=5, total_cost=0.02)},
     "$0.0300"),
    ({"a/x": ModelUsage(total_tokens=5)}, "unknown (no price for a/x; see --model-prices)"),
    ({"a/x": ModelUsage(total_tokens=5, total_cost=0.5), "b/y": ModelUsage(total_tokens=5)},
     "$0.5000 + unknown (no price for b/y; see --model-prices)"),
    ({"a/x": ModelUsage(total_tokens=0)}, "$0.0000"),  # no tokens spent: nothing unknown about it
])
def test_format_cost(usage: dict[str, ModelUsage], text: str) -> None:
    assert format_cost(usage) == text


def test_usage_sums_keep_cost() -> None:
    total = ModelUsage(total_cost=0.25) + ModelUsage(total_cost=0.5) + ModelUsage()
    assert total.total_cost == 0.75 and (ModelUsage() + ModelUsage()).total_cost is None


def test_price_file_overrides_and_adds(tmp_path: Path) -> None:
    path = tmp_path / "prices.yaml"
    path.write_text("anthropic/claude-sonnet-4:\n  input: 1\n  output: 2\nanthropic/my-proxy-model:\n"
                    "  input: 0.5\n  output: 1\n  batch_discount: 0\n")
    table = TABLE.merged(read_price_file(path))
    assert table.price("anthropic/claude-sonnet-4-20250514") == ModelPrice(input=1, output=2)
    assert table.cost("anthropic/my-proxy-model", ModelUsage(input_tokens=M), batch=True) == 0.5
    assert table.price("openai/gpt-4o").input == 2.5


@pytest.mark.parametrize(("name", "content", "needle"), [
    ("p.json", "{not json", "is not valid JSON"),
    ("p.yaml", "- a\n- b\n", "must map 'provider/model' to prices"),
    ("p.yaml", "a/b:\n  input: 1\n", "'a/b' output: Field required"),
    ("p.yaml", "a/b:\n  input: -1\n  output: 1\n", "'a/b' input: Input should be greater than or equal to 0"),
    ("p.yaml", "a/b:\n  input: 1\n  output: 1\n  colour: red\n", "'a/b' colour: Extra inputs are not permitted"),
])
def test_bad_price_files_are_one_line(tmp_path: Path, name: str, content: str, needle: str) -> None:
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(PriceFileError) as info:
        read_price_file(path)
    assert needle in str(info.value) and "\n" not in str(info.value)


def test_missing_price_file_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(PriceFileError, match="Cannot read the price file"):
        read_price_file(tmp_path / "nope.yaml")
