"""Task file for the batch-mode eval tests: a react agent that runs two commands in parallel, then submits.

The model is a real provider (``openai/…`` or ``anthropic/…``) pointed at a test server whose responder
plays the agent: first turn, two parallel ``bash`` calls (``echo value-of-kNa`` / ``...b``) in the
sample's sandbox (in this process, or on a worker with ``--broker``); second turn, ``submit`` with what
they printed.
"""

from __future__ import annotations

from orchestrator.agent import react
from orchestrator.dataset import Sample
from orchestrator.eval import Task, task
from orchestrator.scorer import includes
from orchestrator.tool import bash


@task
def batch_react(n: int = 6) -> Task:
    return Task(
        dataset=[Sample(id=f"s{i}", input=f"Look up k{i}a and k{i}b, then submit both values.",
                        target=f"value-of-k{i}a value-of-k{i}b") for i in range(n)],
        solver=react(tools=[bash()]),
        scorer=includes(),
        sandbox="local",
    )
