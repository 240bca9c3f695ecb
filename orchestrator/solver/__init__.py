"""Solvers and the per-sample ``TaskState`` (mirrors ``inspect_ai.solver``)."""

from ._harbor import harbor_logs, harbor_oracle
from ._solver import Generate, Solver, chain, generate, resolve_solver, solver, system_message, use_tools
from ._task_state import TaskState, sample_state

__all__ = ["Generate", "Solver", "TaskState", "chain", "generate", "harbor_logs", "harbor_oracle", "resolve_solver",
           "sample_state", "solver", "system_message", "use_tools"]


def __getattr__(name: str) -> object:
    # Inspect still resolves its deprecated name for LimitExceededError here; so do we (unlisted).
    if name == "SampleLimitExceededError":
        from orchestrator.util import LimitExceededError

        return LimitExceededError
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
