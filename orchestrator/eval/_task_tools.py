"""Which tools an eval's samples will send to workers: what preflight asks the live workers to have.

A task's solver is built before any sample runs: ``react(tools=[...])``, ``use_tools(...)``, ``chain``,
agents handed off to or called ``as_tool`` all keep their tools in closures, lists and ``ToolDef``s.
This walks that object graph (bounded) from the solver and collects every tool that runs on a worker
(``runs_on="worker"`` with a registry reference; ``submit``, handoffs, ``as_tool`` agents and
``runs_on="orchestrator"`` tools run here and are exempt). A solver that builds its tools when it
runs (``state.tools = [grade()]``) names their factories in its code: a global name that is a
registered worker tool's factory counts too.

What it cannot see (a tool built from a name computed at run time, behind an attribute, or in a model
object) it leaves out: preflight then says nothing about it and the first call fails with the worker's
own clear error. It never reports a tool the solver cannot reach.
"""

from __future__ import annotations

import functools
import sys
import types
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from orchestrator.execute._prepare import HANDOFF_ATTR
from orchestrator.tool._registry import GENERATED_TASK_MODULE, ToolMeta, tool_meta, worker_tool_factories
from orchestrator.tool._tool_def import ToolDef

__all__ = ["MAX_OBJECTS", "import_hint", "worker_tools"]

MAX_OBJECTS = 20_000  # objects visited at most per task (a large solver graph is cut, never slow)

# Objects never worth entering: they hold no tools a solver declared, and some are large graphs.
_LEAVES = (str, bytes, bytearray, int, float, complex, bool, type(None), type, types.ModuleType, Path)


def import_hint(module: str | None) -> str:
    """What ``toolfleet worker --import`` takes to register a tool defined in ``module``: the module, or
    the task file's path for a tool defined in a task file (imported here under a generated name)."""
    if not module:
        return ""
    if module.startswith(GENERATED_TASK_MODULE):
        file = getattr(sys.modules.get(module), "__file__", None)
        return str(Path(file).resolve()) if file else ""
    return module


class _Walk:
    """One bounded traversal collecting worker tools (registry name -> defining module)."""

    def __init__(self) -> None:
        self.found: dict[str, str | None] = {}
        self.factories = worker_tool_factories()
        self._seen: set[int] = set()
        self._budget = MAX_OBJECTS

    def run(self, roots: Iterable[Any]) -> dict[str, str | None]:
        stack = list(roots)
        while stack and self._budget > 0:
            obj = stack.pop()
            if isinstance(obj, _LEAVES) or id(obj) in self._seen:
                continue
            self._seen.add(id(obj))
            self._budget -= 1
            stack.extend(self._children(obj))
        return self.found

    def _tool(self, meta: ToolMeta, fn: Any) -> None:
        if meta.runs_on == "worker" and meta.ref is not None and not hasattr(fn, HANDOFF_ATTR):
            self.found.setdefault(meta.ref.name, meta.ref.module)

    def _children(self, obj: Any) -> list[Any]:
        if isinstance(obj, ToolDef):
            self._tool(obj.meta, obj.tool)
            self._seen.add(id(obj.tool))  # classified as this ToolDef says (it may override runs_on)
            return self._function_parts(obj.tool)
        meta = tool_meta(obj)
        if isinstance(meta, ToolMeta):
            self._tool(meta, obj)
        if isinstance(obj, dict):
            return list(obj.values())
        if isinstance(obj, (list, tuple, set, frozenset)):
            return list(obj)
        if isinstance(obj, functools.partial):
            return [obj.func, *obj.args, *obj.keywords.values()]
        if isinstance(obj, types.MethodType):
            return [obj.__func__, obj.__self__]
        if isinstance(obj, types.FunctionType):
            return self._function_parts(obj)
        if callable(obj) and _user_object(obj):
            return list(getattr(obj, "__dict__", {}).values())  # a solver written as a class
        return []

    def _function_parts(self, fn: Any) -> list[Any]:
        if not isinstance(fn, types.FunctionType):
            return [fn] if callable(fn) else []
        parts: list[Any] = [c.cell_contents for c in fn.__closure__ or () if _filled(c)]
        parts.extend(fn.__defaults__ or ())
        parts.extend((fn.__kwdefaults__ or {}).values())
        parts.extend(vars(fn).values())  # __wrapped__, a handoff's handler (which holds its agent)
        self._globals_named(fn.__code__, fn.__globals__)
        return parts

    def _globals_named(self, code: types.CodeType, scope: dict[str, Any]) -> None:
        """Registered worker-tool factories the code names as globals (also in its nested functions)."""
        codes = [code]
        while codes:
            current = codes.pop()
            for name in current.co_names:
                found = self.factories.get(id(scope.get(name)))
                if found is not None:
                    self.found.setdefault(found, getattr(scope[name], "__module__", None))
            codes.extend(c for c in current.co_consts if isinstance(c, types.CodeType))


def _filled(cell: types.CellType) -> bool:
    try:
        cell.cell_contents  # noqa: B018 - an empty cell raises
    except ValueError:
        return False
    return True


def _user_object(obj: Any) -> bool:
    """An instance of a class outside toolfleet and the standard library (a user's callable solver)."""
    module = type(obj).__module__ or ""
    root = module.partition(".")[0]
    return not (root in ("orchestrator", "workers", "builtins") or root in sys.stdlib_module_names)


def worker_tools(*roots: Any) -> dict[str, str | None]:
    """Registry name -> defining module of every worker-run tool reachable from ``roots`` (a task's solver)."""
    return _Walk().run(roots)
