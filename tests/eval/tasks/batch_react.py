"""Task file for the batch-mode eval tests: a react agent that looks two keys up in parallel, then submits.

The model is a real provider (``openai/…`` or ``anthropic/…``) pointed at a test server whose responder
plays the agent: first turn, two parallel ``lookup`` calls; second turn, ``submit`` with what they returned.
"""

from __future__ import annotations

from orchestrator.agent import react
from orchestrator.dataset import Sample
from orchestrator.eval import Task, task
from orchestrator.scorer import includes
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


@task
def batch_react(n: int = 6) -> Task:
    return Task(
        dataset=[Sample(id=f"s{i}", input=f"Look up k{i}a and k{i}b, then submit both values.",
                        target=f"value-of-k{i}a value-of-k{i}b") for i in range(n)],
        solver=react(tools=[lookup()]),
        scorer=includes(),
    )
