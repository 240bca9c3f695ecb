"""Task file for tests/eval/test_sandbox_events.py: one tour of every sandbox tool, with files, setup
and sandbox scorers, so a transcript must show each exec (``--model scripted/sandbox_events_tour``).

Importable as a module too (``--import tests.eval.tasks.sandbox_events``), so a worker can hold its
``exec_n`` tool.
"""

from __future__ import annotations

from typing import Any

from orchestrator.dataset import Sample
from orchestrator.eval import Task, scripted_policy, task
from orchestrator.model import ChatMessageTool, ModelOutput
from orchestrator.scorer import CORRECT, INCORRECT, Score, Target, sandbox_test, scorer
from orchestrator.solver import TaskState, generate, use_tools
from orchestrator.tool import bash, bash_session, python, text_editor, tool
from orchestrator.util import sandbox

SETUP_OK = "echo setup-ran > setup.txt; echo setup-out"
SETUP_FAILS = "echo setup-broken >&2; exit 7"


@tool
def exec_n():
    async def execute(n: int) -> str:
        """Run `echo i` for i in 0..n-1 in the sandbox, one exec each.

        Args:
            n: How many commands.
        """
        box = sandbox()
        for i in range(n):
            await box.exec(["echo", f"exec-{i}"])
        return f"ran {n}"

    return execute


def _tour_step(messages: list[Any]) -> tuple[str, dict[str, Any]] | None:
    """The next call of the tour (None: answer). The sandbox's directory comes from the first output."""
    results = [m for m in messages if isinstance(m, ChatMessageTool)]
    cwd = results[0].text.strip().splitlines()[-1] if results else ""
    steps: list[tuple[str, dict[str, Any]]] = [
        ("bash", {"cmd": "cat data/input.txt; cat setup.txt; pwd; exit 3"}),
        ("python", {"code": "print('py-' + str(6 * 7))"}),
        ("text_editor", {"command": "create", "path": f"{cwd}/notes.txt", "file_text": "note-body\n"}),
        ("text_editor", {"command": "view", "path": f"{cwd}/notes.txt"}),
        ("bash_session", {"action": "type_submit", "input": "echo session-$((2 + 3))"}),
        ("exec_n", {"n": 3}),
    ]
    return steps[len(results)] if len(results) < len(steps) else None


@scripted_policy("sandbox_events_tour")
def tour(messages: list[Any], tools: list[Any]) -> ModelOutput:
    step = _tour_step(messages)
    if step is None:
        return ModelOutput.from_content("scripted", "done")
    return ModelOutput.for_tool_call("scripted", step[0], step[1])


@scorer(metrics=[])
def reads_setup() -> Any:
    """An Inspect-style scorer calling ``sandbox()`` itself."""

    async def score(state: TaskState, target: Target) -> Score:
        result = await sandbox().exec(["cat", "setup.txt"])
        return Score(value=CORRECT if result.stdout.strip() == "setup-ran" else INCORRECT)

    return score


@task
def sandbox_events(n: int = 2, setup_fails: bool = False, sandbox_type: str = "local") -> Task:
    samples = [Sample(input=f"tour {i}", target="done", id=f"t{i}", files={"data/input.txt": f"hello-file-{i}"},
                      setup=SETUP_FAILS if setup_fails else SETUP_OK) for i in range(n)]
    return Task(
        dataset=samples,
        solver=[use_tools(bash(), python(), text_editor(), bash_session(), exec_n()), generate()],
        scorer=[sandbox_test("grep -q note-body notes.txt", timeout=30), reads_setup()],
        sandbox=sandbox_type,
    )
