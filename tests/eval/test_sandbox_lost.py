"""A lost sandbox (its host went away) ends the attempt at once and the sample is retried in a new sandbox."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from orchestrator.dataset import Sample
from orchestrator.dispatch import InProcessDispatcher, current_route
from orchestrator.eval import Task, eval_async
from orchestrator.model import ChatMessageTool, ModelOutput, get_model
from orchestrator.scorer import includes
from orchestrator.solver import generate, sample_state, use_tools
from orchestrator.tool import bash, tool

pytestmark = pytest.mark.timeout(120)

lost_once: set[str] = set()
model_calls: Counter[str] = Counter()


@tool
def lose_sandbox():
    async def execute() -> str:
        """Simulate losing this sample's sandbox host (first attempt only)."""
        route = current_route()
        if route.sample_id not in lost_once:
            lost_once.add(str(route.sample_id))
            await InProcessDispatcher.default().close_sandbox(route)  # gone, as if its worker host died
        return "ok"

    return execute


def _policy(messages: list[Any], tools: list[Any]) -> ModelOutput:
    state = sample_state()
    assert state is not None
    model_calls[str(state.sample_id)] += 1
    done = sum(1 for m in messages if isinstance(m, ChatMessageTool))
    if done == 0:
        return ModelOutput.for_tool_call("scripted", "lose_sandbox", {})
    if done < 4:
        return ModelOutput.for_tool_call("scripted", "bash", {"cmd": "echo still-here"})
    return ModelOutput.from_content("scripted", f"done {state.target.text}")


@pytest.mark.slow  # opens a local sandbox (a child process)
async def test_lost_sandbox_is_a_retryable_sample_error(tmp_path: Path) -> None:
    task = Task(dataset=[Sample(input="go", target="t1", id="a"), Sample(input="go", target="t2", id="b")],
                solver=[use_tools(lose_sandbox(), bash()), generate()], scorer=includes(), sandbox="local")
    [log] = await eval_async(task, get_model("scripted", policy=_policy), log_dir=tmp_path, retry_on_error=1)
    assert log.status == "success"
    for s in log.samples:
        assert s.error is None and s.attempts == 2
        [lost] = s.error_retries
        assert lost.type == "SandboxLostError" and "not available" in lost.message
        assert s.scores["includes"].value == "C"
    # First attempt: lose, then one bash call that found the sandbox gone — and no further turns.
    assert model_calls == {"a": 2 + 5, "b": 2 + 5}


@pytest.mark.slow  # opens a local sandbox (a child process)
async def test_lost_sandbox_without_retries_errors_the_sample(tmp_path: Path) -> None:
    lost_once.clear()
    task = Task(dataset=[Sample(input="go", target="t1", id="c")],
                solver=[use_tools(lose_sandbox(), bash()), generate()], scorer=includes(), sandbox="local")
    [log] = await eval_async(task, get_model("scripted", policy=_policy), log_dir=tmp_path)
    [s] = log.samples
    assert s.error is not None and s.error.type == "SandboxLostError"
    assert log.status == "error"
