"""Which tools a task's solver sends to workers (what preflight checks the fleet for): a table over the shapes
a solver takes. Pure: no services."""

from __future__ import annotations

import functools

import pytest

from orchestrator.agent import as_tool, handoff, react
from orchestrator.eval import Task
from orchestrator.eval._task_tools import MAX_OBJECTS, import_hint, worker_tools
from orchestrator.solver import TaskState, generate, solver, use_tools
from orchestrator.tool import ToolDef, bash
from tests.support import sample_tools as st, task_code_tools as user
from tests.support.task_code_tools import grade

USER = user.__name__
SAMPLE = st.__name__


@solver
def builds_its_tools_when_it_runs():
    async def solve(state: TaskState, generate):  # type: ignore[no-untyped-def]
        state.tools = [grade()]  # a registered worker tool's factory, named as a global
        return state

    return solve


class ClassSolver:
    """A solver written as a class: its tools in an attribute."""

    def __init__(self) -> None:
        self.tools = [user.lint()]

    async def __call__(self, state, generate):  # type: ignore[no-untyped-def]
        return state


def _solver(solver):  # type: ignore[no-untyped-def]
    return Task(solver=solver).solver


@pytest.mark.parametrize(("solver", "expected"), [
    ([use_tools(user.grade()), generate()], {"grade": USER}),
    (react(tools=[user.grade(), user.take_note()]), {"grade": USER}),  # submit, take_note run here
    ([use_tools(ToolDef(user.grade(), runs_on="orchestrator"), st.add())], {"add": SAMPLE}),  # ToolDef overrides
    (react(tools=[handoff(react(name="helper", description="helps", tools=[user.lint()]))]), {"lint": USER}),
    (react(tools=[as_tool(react(name="asker", description="asks", tools=[st.add()]))]), {"add": SAMPLE}),
    ([builds_its_tools_when_it_runs(), generate()], {"grade": USER}),
    (ClassSolver(), {"lint": USER}),
    (functools.partial(ClassSolver.__call__, ClassSolver()), {"lint": USER}),
    ([use_tools(bash())], {"bash": "orchestrator.tool._tools._execute"}),
    (generate(), {}),
])
def test_worker_tools_of_a_solver(solver, expected) -> None:  # type: ignore[no-untyped-def]
    assert worker_tools(_solver(solver)) == expected


def test_a_cyclic_or_huge_solver_graph_is_cut_not_slow() -> None:
    ring: list = []
    ring.append(ring)
    assert worker_tools(ring) == {}
    # More objects than the walk visits (MAX_OBJECTS), the tool among the last reached: left out, quickly.
    wide = [use_tools(user.grade()), *[[object() for _ in range(10)] for _ in range(MAX_OBJECTS // 10)]]
    assert worker_tools(wide) == {}
    assert worker_tools(wide[:1]) == {"grade": USER}


def test_import_hint_names_a_task_file_by_its_path() -> None:
    assert import_hint("mypkg.tools") == "mypkg.tools"
    assert import_hint(None) == ""
    assert import_hint("toolfleet_task_0123") == ""  # a generated name no longer imported: no hint
