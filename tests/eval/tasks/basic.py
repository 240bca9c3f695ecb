"""Task file for the eval/CLI tests: tasks plus named scripted policies (``--model scripted/<name>``).

``TOOLFLEET_TEST_MARKER``: if set, every solver run appends ``<sample id>`` to that file, so tests can
count how many times each sample ran (resume must not re-run finished samples).
``TOOLFLEET_TEST_DELAY``: seconds each model turn sleeps (gives a test time to kill the process).
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from orchestrator.dataset import Sample
from orchestrator.eval import Task, scripted_policy, task
from orchestrator.model import ChatMessageTool, ModelOutput, ModelUsage
from orchestrator.scorer import includes
from orchestrator.solver import Generate, TaskState, generate, sample_state, solver, use_tools
from orchestrator.tool import tool


@tool(runs_on="orchestrator", parallel=True)
def lookup():
    async def execute(key: str) -> str:
        """Look a key up.

        Args:
            key: The key.
        """
        return f"value-of-{key}"

    return execute


def _mark() -> None:
    marker = os.environ.get("TOOLFLEET_TEST_MARKER")
    state = sample_state()
    if marker and state is not None:
        with open(marker, "a") as f:
            f.write(f"{state.sample_id}\n")


@solver
def marked() -> Any:
    async def solve(state: TaskState, generate: Generate) -> TaskState:
        _mark()
        return await generate(state)

    return solve


@scripted_policy("echo")
async def echo(messages: list[Any], tools: list[Any]) -> ModelOutput:
    """Answer with the target after one lookup call; reports 10 tokens per turn."""
    delay = float(os.environ.get("TOOLFLEET_TEST_DELAY", "0"))
    if delay:
        await asyncio.sleep(delay)
    state = sample_state()
    assert state is not None
    if not any(isinstance(m, ChatMessageTool) for m in messages) and tools:
        output = ModelOutput.for_tool_call("scripted", "lookup", {"key": str(state.sample_id)})
    else:
        output = ModelOutput.from_content("scripted", f"The answer is {state.target.text}.")
    output.usage = ModelUsage(input_tokens=7, output_tokens=3, total_tokens=10)
    return output


@scripted_policy("loop")
def loop(messages: list[Any], tools: list[Any]) -> ModelOutput:
    """Never stops calling tools (for limits)."""
    output = ModelOutput.for_tool_call("scripted", "lookup", {"key": str(len(messages))})
    output.usage = ModelUsage(input_tokens=70, output_tokens=30, total_tokens=100)
    return output


@task
def basic(n: int = 6, message_limit: int | None = None, token_limit: int | None = None) -> Task:
    return Task(
        dataset=[Sample(input=f"What is {i}?", target=f"answer-{i}", id=f"s{i}") for i in range(n)],
        solver=[use_tools(lookup()), marked()],
        scorer=includes(),
        message_limit=message_limit,
        token_limit=token_limit,
    )


@task
def plain() -> Task:
    return Task(dataset=[Sample(input="hi", target="answer")], solver=generate(), scorer=includes())


@scripted_policy("bash_then_answer")
def bash_then_answer(messages: list[Any], tools: list[Any]) -> ModelOutput:
    """One slow bash call in the sandbox (where a worker may be lost), then the answer."""
    state = sample_state()
    assert state is not None
    if not any(isinstance(m, ChatMessageTool) for m in messages):
        return ModelOutput.for_tool_call("scripted", "bash", {"cmd": "sleep 2; echo slept"})
    return ModelOutput.from_content("scripted", f"The answer is {state.target.text}.")


@task
def sandboxed(n: int = 4, sandbox: str | dict[str, Any] = "local") -> Task:
    from orchestrator.tool import bash

    return Task(
        dataset=[Sample(input=f"What is {i}?", target=f"answer-{i}", id=f"s{i}") for i in range(n)],
        solver=[use_tools(bash()), marked()],
        scorer=includes(),
        sandbox=sandbox,
    )
