"""Task file for the resume-identity and CLI-flag tests.

``TOOLFLEET_TEST_BREAK=1``: sample ``s1`` raises (the log is left unfinished, so a re-run may resume it).
"""

from __future__ import annotations

import os
from typing import Any

from orchestrator.dataset import Sample
from orchestrator.eval import Task, scripted_policy, task
from orchestrator.log import transcript
from orchestrator.model import ModelOutput
from orchestrator.model._generate_config import active_generate_config
from orchestrator.scorer import includes
from orchestrator.solver import Generate, TaskState, sample_state, solver


@solver
def maybe_break() -> Any:
    async def solve(state: TaskState, generate: Generate) -> TaskState:
        if os.environ.get("TOOLFLEET_TEST_BREAK") == "1" and state.sample_id == "s1":
            raise RuntimeError("broken on purpose")
        transcript().info({"temperature": active_generate_config().temperature}, source="flaky")
        return await generate(state)

    return solve


@scripted_policy("answer")
def answer(messages: list[Any], tools: list[Any]) -> ModelOutput:
    state = sample_state()
    assert state is not None
    return ModelOutput.from_content("scripted", f"The answer is {state.target.text}.")


@task
def flaky(n: int = 4) -> Task:
    return Task(dataset=[Sample(input=f"q{i}", target=f"t{i}", id=f"s{i}") for i in range(n)],
                solver=maybe_break(), scorer=includes())
