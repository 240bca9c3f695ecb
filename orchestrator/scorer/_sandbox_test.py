"""Sandbox-executed scoring: run a command in the sample's sandbox; pass on exit 0.

The command goes through the active dispatcher as a call to the registered ``_scorer_exec`` tool
(``orchestrator/tool/_tools/_sandbox_access.py``), so it reaches the sandbox in embedded mode and on a worker host
alike. Scorers that call ``sandbox().exec(...)`` themselves (Inspect style) work too: the sample runner binds
the real sandbox (embedded) or a ``DispatchedSandbox`` proxy (distributed) as the sample's ``sandbox()``.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from orchestrator.util._sandbox import ExecResult, SandboxUnavailableError

from ._sandbox_proxy import SandboxCallError, call_sandbox_tool
from ._score import CORRECT, INCORRECT, Score, Scorer, accuracy, scorer, stderr
from ._target import Target

if TYPE_CHECKING:
    from orchestrator.solver._task_state import TaskState

EXPLANATION_TAIL = 4000  # characters of test output kept in the score's explanation


ScorerExecError = SandboxCallError  # its public name in orchestrator.scorer: the scoring command could not be run


async def exec_in_sandbox(cmd: list[str], input: str | None = None, files: dict[str, str] | None = None,
                          timeout: float | None = None) -> ExecResult:
    """Run ``cmd`` in the current sample's sandbox, wherever it lives. A timeout gives returncode 124."""
    from orchestrator.tool._tools._sandbox_access import SCORER_EXEC_TOOL

    outcome = await call_sandbox_tool(SCORER_EXEC_TOOL, {"cmd": cmd, "input": input, "files": files or {},
                                                         "timeout": timeout})
    if outcome.error is not None:
        if outcome.error.type == "sandbox_unavailable":
            raise SandboxUnavailableError(outcome.error.message)
        raise SandboxCallError(f"Scoring command failed to run ({outcome.error.type}): {outcome.error.message}")
    data = json.loads(str(outcome.result))
    return ExecResult(returncode=data["returncode"], stdout=data["stdout"], stderr=data["stderr"])


async def _resolve(value: Any, state: TaskState, target: Target) -> Any:
    if callable(value):
        value = value(state, target)
        if inspect.isawaitable(value):
            value = await value
    return value


CommandSpec = str | list[str] | Callable[..., Any]


@scorer(metrics=[accuracy(), stderr()])
def sandbox_test(command: CommandSpec, files: dict[str, str] | Callable[..., Any] | None = None,
                 timeout: float = 60.0, input: str | Callable[..., Any] | None = None) -> Scorer:
    """Correct when ``command`` exits 0 in the sample's sandbox.

    ``command`` is a shell script (run with ``bash -c``), an argv list, or a function
    ``(state, target) -> str | list[str]`` (sync or async). ``files`` (a dict or such a function) are written
    into the sandbox first — e.g. the hidden tests. A command that outlives ``timeout`` fails.
    """

    async def score(state: TaskState, target: Target) -> Score:
        cmd = await _resolve(command, state, target)
        argv = ["bash", "-c", cmd] if isinstance(cmd, str) else list(cmd)
        result = await exec_in_sandbox(argv, input=await _resolve(input, state, target),
                                       files=await _resolve(files, state, target), timeout=timeout)
        output = (result.stderr + result.stdout)[-EXPLANATION_TAIL:]
        verdict = "passed" if result.returncode == 0 else f"failed (exit {result.returncode})"
        return Score(value=CORRECT if result.returncode == 0 else INCORRECT,
                     answer=state.output.completion or None,
                     explanation=f"Tests {verdict}.\n{output}".rstrip(),
                     metadata={"returncode": result.returncode})

    return score
