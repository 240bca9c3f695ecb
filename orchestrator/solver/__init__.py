"""Solvers and the per-sample ``TaskState`` (mirrors ``inspect_ai.solver``)."""

from ._solver import Generate, Solver, chain, generate, resolve_solver, solver, system_message, use_tools
from ._task_state import TaskState, sample_state

__all__ = ["Generate", "Solver", "TaskState", "chain", "generate", "resolve_solver", "sample_state", "solver", "system_message", "use_tools"]
