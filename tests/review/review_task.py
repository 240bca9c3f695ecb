"""Task file for the review eval/CLI tests (``toolfleet eval tests/review/review_task.py@<task>``).

Policy ``fetch_then_answer``: call ``curl`` once, then answer with the target.
"""

from __future__ import annotations

from typing import Any

from orchestrator.dataset import Sample
from orchestrator.eval import Task, scripted_policy, task
from orchestrator.model import ChatMessageTool, ModelOutput
from orchestrator.review import ReviewPolicy
from orchestrator.scorer import includes
from orchestrator.solver import generate, sample_state, use_tools
from tests.review import review_tools as rt


@scripted_policy("fetch_then_answer")
def fetch_then_answer(messages: list[Any], tools: list[Any]) -> ModelOutput:
    state = sample_state()
    assert state is not None, "a scripted policy runs inside a sample"
    if not any(isinstance(m, ChatMessageTool) for m in messages):
        return ModelOutput.for_tool_call("scripted", "curl", {"url": f"http://example.com/{state.sample_id}"},
                                         tool_call_id=f"curl-{state.sample_id}")
    return ModelOutput.from_content("scripted", f"The answer is {state.target.text}.")


def dataset(n: int) -> list[Sample]:
    return [Sample(input=f"Fetch page {i}", target=f"page-{i}", id=f"p{i}") for i in range(n)]


@task
def fetching(n: int = 1, review: Any = None) -> Task:
    return Task(dataset=dataset(n), solver=[use_tools(rt.curl()), generate()], scorer=includes(), review=review)


@task
def guarded(n: int = 1) -> Task:
    """A task whose own reviewers forbid network access (``--review`` overrides them)."""
    return Task(dataset=dataset(n), solver=[use_tools(rt.curl()), generate()], scorer=includes(),
                review=[ReviewPolicy(rt.no_network(), tools="*")])
