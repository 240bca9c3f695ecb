"""``Solver`` protocol, ``@solver`` and the basic solvers (mirrors ``inspect_ai.solver``).

A solver is ``async (state, generate) -> state``. ``generate`` is the sample's model call: it appends the
model's answer and, in ``"loop"`` mode, runs the answer's tool calls (``execute_tools``) until the model
stops calling tools, enforcing the sample's message and token limits at each turn.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Sequence
from typing import Any, Literal, Protocol, runtime_checkable

from orchestrator.model._chat_message import ChatMessageSystem
from orchestrator.model._generate_config import GenerateConfig
from orchestrator.model._model import Model
from orchestrator.util._limits import check_limits

from ._task_state import TaskState

SOLVER_NAME_ATTR = "__toolfleet_solver__"


class Generate(Protocol):
    async def __call__(self, state: TaskState, tool_calls: Literal["loop", "single", "none"] = "loop",
                       **kwargs: Any) -> TaskState: ...


@runtime_checkable
class Solver(Protocol):
    async def __call__(self, state: TaskState, generate: Generate) -> TaskState: ...


def solver(name: str | Callable[..., Solver] | None = None) -> Any:
    """Decorate a solver factory; the instance remembers its name (shown in the eval log's plan)."""

    def decorate(factory: Callable[..., Solver], solver_name: str | None = None) -> Callable[..., Solver]:
        @functools.wraps(factory)
        def wrapper(*args: Any, **kwargs: Any) -> Solver:
            instance = factory(*args, **kwargs)
            setattr(instance, SOLVER_NAME_ATTR, solver_name or factory.__name__)
            return instance

        return wrapper

    if callable(name):
        return decorate(name)
    return lambda factory: decorate(factory, name)


def solver_name(instance: Any) -> str:
    return str(getattr(instance, SOLVER_NAME_ATTR, None) or getattr(instance, "__name__", type(instance).__name__))


def make_generate(model: Model) -> Generate:
    """The ``generate`` the sample runner hands to solvers."""
    from orchestrator.execute._execute_tools import execute_tools

    async def generate(state: TaskState, tool_calls: Literal["loop", "single", "none"] = "loop",
                       **kwargs: Any) -> TaskState:
        config = GenerateConfig(**kwargs) if kwargs else None
        while True:
            # Message, token and turn limits are enforced by the model call and the message list;
            # time and working limits are checked here.
            check_limits()
            # A checkpoint: a cancellation (time limit, lost sandbox) must land even when the model
            # (scripted) and the tools (failing fast) never suspend.
            await asyncio.sleep(0)
            state.output = await model.generate(state.messages, state.tools, state.tool_choice, config)
            state.messages.append(state.output.message)
            if tool_calls == "none" or not state.output.message.tool_calls:
                return state
            result = await execute_tools(state.messages, state.tools)
            state.messages.extend(result.messages)
            if result.output is not None:
                state.output = result.output
            if tool_calls == "single":
                return state

    return generate


@solver
def generate(tool_calls: Literal["loop", "single", "none"] = "loop", **config: Any) -> Solver:
    """Call the model (and, by default, loop over its tool calls until it stops calling tools)."""

    async def solve(state: TaskState, generate: Generate) -> TaskState:
        return await generate(state, tool_calls=tool_calls, **config)

    return solve


@solver
def system_message(template: str) -> Solver:
    """Insert a system message (after any existing system messages); ``{field}``s come from metadata."""

    async def solve(state: TaskState, generate: Generate) -> TaskState:
        text = template.format(**state.metadata) if state.metadata else template
        at = sum(1 for m in state.messages if isinstance(m, ChatMessageSystem))
        state.messages.insert(at, ChatMessageSystem(content=text))
        return state

    return solve


@solver
def use_tools(*tools: Any, tool_choice: Any = None, append: bool = False) -> Solver:
    """Make tools available to ``generate`` (replacing, or appending to, the current ones)."""
    flat: list[Any] = []
    for t in tools:
        flat.extend(t if isinstance(t, (list, tuple)) else [t])

    async def solve(state: TaskState, generate: Generate) -> TaskState:
        state.tools = [*state.tools, *flat] if append else list(flat)
        if tool_choice is not None:
            state.tool_choice = tool_choice
        return state

    return solve


def resolve_solver(solver: Any) -> Any:
    """A task's solver: a list becomes a ``chain``; an agent (``@agent``) is run with ``as_solver``."""
    if isinstance(solver, (list, tuple)):
        return chain(*solver)
    from orchestrator.agent._agent import is_agent
    from orchestrator.agent._as_solver import as_solver

    return as_solver(solver) if is_agent(solver) else solver


@solver
def chain(*solvers: Solver | Sequence[Solver]) -> Solver:
    """Run solvers in order (agents among them run with ``as_solver``); stops early when a solver
    marks the state completed."""
    from orchestrator.agent._agent import is_agent
    from orchestrator.agent._as_solver import as_solver

    flat: list[Solver] = []
    for s in solvers:
        for item in s if isinstance(s, (list, tuple)) else [s]:
            flat.append(as_solver(item) if is_agent(item) else item)  # type: ignore[arg-type]  # a non-agent item is a Solver

    async def solve(state: TaskState, generate: Generate) -> TaskState:
        for s in flat:
            state = await s(state, generate)
            if state.completed:
                break
        return state

    return solve
