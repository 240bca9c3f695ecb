"""Task file for the provider end-to-end tests: a react agent with bash in a sandbox (whatever the model)."""

from __future__ import annotations

from typing import Any

from orchestrator.agent import react
from orchestrator.dataset import Sample
from orchestrator.eval import Task, task
from orchestrator.scorer import includes


@task
def react_bash(n: int = 4, sandbox: str | dict[str, Any] = "local") -> Task:
    from orchestrator.tool import bash

    return Task(
        dataset=[Sample(input=f"What is {i}?", target=f"answer-{i}", id=f"s{i}") for i in range(n)],
        solver=react(tools=[bash()]),
        scorer=includes(),
        sandbox=sandbox,
    )
