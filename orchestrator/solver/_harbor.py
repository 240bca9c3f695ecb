"""Solvers for Harbor tasks: the ``/logs`` layout before the agent, and the oracle (``solution/solve.sh``).

``harbor_logs()`` makes ``/logs`` (as root, 0755) and ``/logs/agent`` (writable by every user, so by the
task's user whoever it is), as Harbor mounts it into every trial, and then gives the sandbox the agent's
network policy when ``[agent] network_mode`` differs from ``[environment]``'s (``enter_phase``).
``/logs/verifier`` is made afresh for the verifier only (``orchestrator.scorer._harbor``), so nothing
the agent writes there can pass for a reward. ``harbor_oracle()`` is what runs instead of an agent
under ``--oracle``: the task's ``solution/`` is copied to ``/solution`` and
``bash /solution/solve.sh`` runs as the task's user with ``[solution] env``, within the agent timeout
(a timeout ends the solver as a ``time`` limit: the verifier still runs, as under Harbor). A task
without ``solution/solve.sh`` fails its sample, so the summary lists it.
"""

from __future__ import annotations

from orchestrator._errors import ToolfleetError
from orchestrator.dataset._harbor_network import enter_phase
from orchestrator.model._model_output import ModelOutput
from orchestrator.util._limit_errors import LimitExceededError
from orchestrator.util._sandbox import sandbox

from ._solver import Generate, Solver, solver
from ._task_state import TaskState

__all__ = ["HarborOracleError", "harbor_logs", "harbor_oracle"]

SETUP_TIMEOUT_S = 120.0
OUTPUT_TAIL = 2000

MAKE_LOGS = "mkdir -p /logs/agent && chmod 0755 /logs && chmod 0777 /logs/agent"
COPY_SOLUTION = """set -e
rm -rf /solution
mkdir -p /solution
base64 -d | tar -xzf - -C /solution --no-same-owner
chmod -R a+rX /solution
"""


class HarborOracleError(ToolfleetError, RuntimeError):
    """The oracle could not run (no solution, or it could not be copied in)."""


@solver
def harbor_logs() -> Solver:
    """Make ``/logs`` and ``/logs/agent`` in the sample's sandbox (see the module doc), then give it the
    agent's network policy when ``[agent] network_mode`` asks for another than the environment's."""

    async def solve(state: TaskState, generate: Generate) -> TaskState:
        made = await sandbox().exec(["sh", "-c", MAKE_LOGS], user="root", timeout=SETUP_TIMEOUT_S)
        if made.returncode != 0:
            raise HarborOracleError(f"Could not make /logs in the sandbox (exit {made.returncode}): "
                                    f"{(made.stderr or made.stdout)[-500:]}")
        await enter_phase(state.metadata["harbor"], "agent", before="setup")
        return state

    return solve


@solver
def harbor_oracle() -> Solver:
    """Run the task's reference solution instead of an agent (see the module doc)."""

    async def solve(state: TaskState, generate: Generate) -> TaskState:
        from orchestrator.dataset._harbor import pack_task_dir
        from orchestrator.scorer._harbor import resolve_env

        meta = state.metadata["harbor"]
        if not meta.get("has_solution"):
            raise HarborOracleError(f"Task '{state.sample_id}' has no solution/solve.sh: the oracle cannot run.")
        box = sandbox()
        copied = await box.exec(["sh", "-c", COPY_SOLUTION], input=pack_task_dir(meta["dir"], "solution"),
                                user="root", timeout=SETUP_TIMEOUT_S)
        if copied.returncode != 0:
            raise HarborOracleError(f"Could not copy solution/ to /solution (exit {copied.returncode}): "
                                    f"{(copied.stderr or copied.stdout)[-500:]}")
        timeout = float(meta["agent_timeout"])
        env = resolve_env(meta.get("solution_env") or {}, meta.get("task_env"))
        try:
            result = await box.exec(["bash", "/solution/solve.sh"], env=env, timeout=timeout)
        except TimeoutError as exc:
            state.output = ModelOutput.from_content("oracle", f"solve.sh timed out after {timeout:g} s")
            message = f"solve.sh did not finish within the agent timeout ({timeout:g} s)"
            raise LimitExceededError("time", value=timeout, limit=timeout, message=message) from exc
        tail = (result.stdout + result.stderr)[-OUTPUT_TAIL:]
        state.output = ModelOutput.from_content("oracle", f"solve.sh exited {result.returncode}\n{tail}".rstrip())
        state.messages.append(state.output.message)
        return state

    return solve
