"""Usage accounting: fresh counters per scope, live roll-up as child figures, limit exclusion."""

from __future__ import annotations

import asyncio

import pytest

from orchestrator.model import (
    ModelOutput,
    ModelUsage,
    current_usage,
    get_model,
    record_model_usage,
    usage_scope,
)

pytestmark = pytest.mark.timeout(30)


def u(inp: int, out: int) -> ModelUsage:
    return ModelUsage(input_tokens=inp, output_tokens=out, total_tokens=inp + out)


def test_outside_any_scope_usage_lands_on_the_process_root() -> None:
    root = current_usage()
    assert root.name == "process" and root.parent is None
    before = root.own.total_tokens
    record_model_usage("m", u(1, 1))
    assert root.own.total_tokens == before + 2


def test_sample_scope_is_detached_from_the_process_root() -> None:
    root = current_usage()
    with usage_scope("sample-1") as sample:
        assert sample.parent is None and current_usage() is sample
        record_model_usage("m", u(1, 2))
    assert "sample-1" not in root.children
    assert current_usage() is root and sample.closed


def test_nested_scopes_start_fresh_and_roll_up_as_child_figures() -> None:
    with usage_scope("sample") as sample:
        record_model_usage("openai/a", u(10, 5))
        with usage_scope("researcher") as child:
            assert child.parent is sample and child.total_tokens == 0  # fresh, not inherited
            record_model_usage("openai/b", u(4, 1))
            with usage_scope("searcher") as grandchild:
                record_model_usage("openai/b", u(2, 2))
            record_model_usage("openai/a", u(1, 1))

    assert grandchild.own == u(2, 2) and grandchild.children == {}
    assert child.own == u(5, 2)
    assert child.children == {"searcher": u(2, 2)}
    assert child.total == u(7, 4)
    assert sample.own == u(10, 5)
    # The grandchild's usage reaches the sample under the name of the sample's direct child.
    assert sample.children == {"researcher": u(7, 4)}
    assert sample.total == u(17, 9) and sample.total_tokens == 26
    assert sample.by_model == {"openai/a": u(11, 6), "openai/b": u(6, 3)}
    assert sample.limit_tokens == 26 and child.limit_tokens == 11 and grandchild.limit_tokens == 4


def test_roll_up_is_live_so_parent_limits_see_a_running_child() -> None:
    with usage_scope("sample") as sample, usage_scope("child"):
        record_model_usage("m", u(100, 0))
        assert sample.limit_tokens == 100 and sample.children["child"].total_tokens == 100


def test_scope_excluded_from_limits_is_reported_but_not_limited() -> None:
    with usage_scope("sample") as sample:
        record_model_usage("agent-model", u(10, 0))
        with usage_scope("reviewer", count_toward_limits=False) as reviewer:
            record_model_usage("review-model", u(50, 0))
            with usage_scope("reviewer-helper") as helper:
                record_model_usage("review-model", u(5, 0))
    # Reported everywhere...
    assert sample.total_tokens == 65 and sample.children == {"reviewer": u(55, 0)}
    # ...but only the reviewer's own scopes count it toward their limits.
    assert sample.limit_tokens == 10
    assert reviewer.limit_tokens == 55 and helper.limit_tokens == 5


async def test_concurrent_runs_keep_their_own_counters() -> None:
    async def run(name: str, tokens: int) -> None:
        with usage_scope(name) as counter:
            for _ in range(5):
                record_model_usage("m", u(tokens, 0))
                await asyncio.sleep(0)
            assert counter.own.total_tokens == 5 * tokens

    with usage_scope("sample") as sample:
        await asyncio.gather(run("a", 1), run("b", 10), run("c", 100))
    assert {k: v.total_tokens for k, v in sample.children.items()} == {"a": 5, "b": 50, "c": 500}
    assert sample.own.total_tokens == 0 and sample.limit_tokens == 555


async def test_model_generate_records_into_the_current_scope() -> None:
    usage = u(3, 4)
    outputs = [ModelOutput(choices=ModelOutput.from_content("s", "x").choices, usage=usage) for _ in range(2)]
    model = get_model("scripted", outputs=outputs)
    with usage_scope("sample") as sample:
        await model.generate("x")
        with usage_scope("nested") as nested:
            await model.generate("x")
    priced = {"total_cost": 0.0}  # the scripted model is priced at zero
    assert sample.own == usage.model_copy(update=priced) and nested.own == usage.model_copy(update=priced)
    assert sample.total == u(6, 8).model_copy(update=priced)


def test_unnamed_child_scopes_are_grouped() -> None:
    with usage_scope("sample") as sample:
        for _ in range(2):
            with usage_scope():
                record_model_usage("m", u(1, 0))
    assert sample.children == {"child": u(2, 0)}
